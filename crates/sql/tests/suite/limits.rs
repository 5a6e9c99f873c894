//! Statements nested to the depth limit run, deeper ones are refused with
//! SQLSTATE 54001, and neither overflows the stack. Every statement runs on
//! a thread with a tiny stack, so the session must give it the statement
//! stack the limits promise (`aqueduct_sql::limits`): a walk that needs more
//! than that aborts the test process.

use crate::common;

use aqueduct_sql::limits::MAX_STATEMENT_DEPTH;
use aqueduct_sql::{Outcome, Session, SqlError};

/// Levels a statement spends around its expression (statement, query,
/// select, select item).
const AROUND: usize = 5;

fn session(dir: &std::path::Path) -> Session {
    let e = common::engine(dir);
    let mut s = e.session();
    common::ok(&mut s, "CREATE TABLE t (x int PRIMARY KEY, y text)");
    common::ok(&mut s, "INSERT INTO t VALUES (1, 'a')");
    s
}

/// Runs `sql` on a thread with a 128 KiB stack.
fn on_small_stack(s: Session, sql: String) -> (Session, Result<Outcome, SqlError>) {
    std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut s = s;
            let r = s.execute(&sql).pop().unwrap();
            (s, r)
        })
        .unwrap()
        .join()
        .unwrap()
}

/// `make(n)` runs at `n` = the limit less the levels around it and is
/// refused one level past the limit and far past it.
fn at_and_beyond(mut make: impl FnMut(usize) -> String) {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path());
    let (s, r) = on_small_stack(s, make(MAX_STATEMENT_DEPTH - AROUND));
    if let Err(e) = r {
        panic!("at the limit: {e}");
    }
    let (s, r) = on_small_stack(s, make(MAX_STATEMENT_DEPTH + 1));
    let e = r.expect_err("one past the limit");
    assert_eq!(e.code, "54001", "{e}");
    assert!(e.message.contains("statement too complex"), "{e}");
    assert!(e.hint.is_some());
    let (mut s, r) = on_small_stack(s, make(100_000));
    assert_eq!(r.expect_err("far past the limit").code, "54001");
    // The session goes on.
    assert_eq!(common::rows(&mut s, "SELECT x FROM t"), vec![vec!["1"]]);
}

fn chain(n: usize, term: &str, op: &str) -> String {
    vec![term; n].join(op)
}

#[test]
fn addition_chains() {
    at_and_beyond(|n| format!("SELECT {}", chain(n, "1", "+")));
}

#[test]
fn subtraction_chains() {
    at_and_beyond(|n| format!("SELECT {} FROM t", chain(n, "x", "-")));
}

#[test]
fn concatenation_chains() {
    at_and_beyond(|n| format!("SELECT {}", chain(n, "'a'", "||")));
}

#[test]
fn cast_chains() {
    at_and_beyond(|n| format!("SELECT 1{}", "::text::int".repeat(n / 2)));
}

#[test]
fn and_chains_in_where() {
    at_and_beyond(|n| format!("SELECT x FROM t WHERE {}", chain(n, "x = 1", " AND ")));
}

#[test]
fn or_chains_in_where() {
    at_and_beyond(|n| format!("SELECT x FROM t WHERE {}", chain(n, "x = 1", " OR ")));
}

#[test]
fn nested_parentheses() {
    at_and_beyond(|n| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)));
}

#[test]
fn nested_subqueries() {
    // Each subquery in FROM is three levels (table factor, query, select).
    at_and_beyond(|n| {
        let k = (n - 2) / 3;
        format!(
            "SELECT x FROM {}t{}",
            "(SELECT x FROM ".repeat(k),
            ") s".repeat(k)
        )
    });
}

#[test]
fn union_all_chains() {
    at_and_beyond(|n| chain(n, "SELECT x FROM t", " UNION ALL "));
}

#[test]
fn union_chains_in_views() {
    let mut i = 0;
    at_and_beyond(|n| {
        i += 1;
        format!(
            "CREATE VIEW u{i} AS {}",
            chain(n, "SELECT x FROM t", " UNION ALL ")
        )
    });
}

#[test]
fn expression_chains_in_views() {
    let mut i = 0;
    at_and_beyond(|n| {
        i += 1;
        format!(
            "CREATE VIEW v{i} AS SELECT x, {} AS s FROM t",
            chain(n, "x", "+")
        )
    });
}

#[test]
fn chains_in_joins_answered_by_dataflow() {
    at_and_beyond(|n| {
        format!(
            "SELECT a.x FROM t a JOIN t b ON a.x = b.x WHERE {}",
            chain(n, "a.x = 1", " OR ")
        )
    });
}

#[test]
fn a_view_at_the_limit_is_maintained_and_rebuilt_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path());
    let n = MAX_STATEMENT_DEPTH - AROUND;
    let sql = format!(
        "CREATE VIEW deep AS SELECT x, {} AS s FROM t",
        chain(n, "x", "+")
    );
    let (s, r) = on_small_stack(s, sql);
    r.unwrap();
    // The dataflow worker evaluates the chain for every write.
    let (s, r) = on_small_stack(s, "INSERT INTO t VALUES (2, 'b')".into());
    r.unwrap();
    let (mut s, _) = on_small_stack(s, "SELECT 1".into());
    assert_eq!(
        common::rows(&mut s, "SELECT s FROM deep WHERE x = 2"),
        vec![vec![(2 * n).to_string()]]
    );
    drop(s);
    // Rebuilt from its text at start-up, from a thread with a small stack.
    let path = dir.path().to_path_buf();
    let rows = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let e = common::engine(&path);
            let mut s = e.session();
            common::rows(&mut s, "SELECT s FROM deep WHERE x = 1")
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(rows, vec![vec![n.to_string()]]);
}

#[test]
fn prepared_statements_are_checked_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path());
    std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut s = s;
            let ok = format!(
                "SELECT {} + $1",
                chain(MAX_STATEMENT_DEPTH - AROUND - 1, "1", "+")
            );
            let p = s.prepare(&ok, &[None]).unwrap();
            let sum = MAX_STATEMENT_DEPTH - AROUND;
            assert_eq!(
                common::prepared_rows(&mut s, &p, &[aqueduct_values::Value::Int(1)]),
                vec![vec![sum.to_string()]]
            );
            let deep = format!("SELECT {}", chain(MAX_STATEMENT_DEPTH + 1, "1", "+"));
            assert_eq!(s.prepare(&deep, &[]).unwrap_err().code, "54001");
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A comma-separated `FROM` of `n` copies of `t` joined on `x`, with the
/// conditions as a balanced tree of `AND`s (so nothing is nested deep).
fn joins(n: usize) -> String {
    fn balanced(c: &[String]) -> String {
        if c.len() == 1 {
            return c[0].clone();
        }
        let m = c.len() / 2;
        format!("({} AND {})", balanced(&c[..m]), balanced(&c[m..]))
    }
    let from: Vec<String> = (0..n).map(|i| format!("t a{i}")).collect();
    let on: Vec<String> = (1..n).map(|i| format!("a{}.x = a{i}.x", i - 1)).collect();
    format!(
        "SELECT count(*) FROM {} WHERE {}",
        from.join(", "),
        balanced(&on)
    )
}

#[test]
fn a_from_clause_joins_at_most_max_joined_relations() {
    use aqueduct_sql::limits::MAX_JOINED_RELATIONS;
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    // 20,000 joins compiled for about a day (time and memory growing
    // faster than the joins); 2,000 took 80 seconds in a debug build.
    for n in [MAX_JOINED_RELATIONS + 1, 2_000, 20_000] {
        let started = std::time::Instant::now();
        let e = common::run(&mut s, &joins(n)).expect_err("refused");
        assert_eq!(e.code, "54001", "{e}");
        assert!(e.message.contains("joins"), "{e}");
        assert!(e.hint.is_some());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{n} joins took {:?} to refuse",
            started.elapsed()
        );
    }
    // By JOIN, in brackets, and in a view too.
    let nested = format!(
        "SELECT 1 FROM ({}) WHERE a0.x = 1",
        (0..MAX_JOINED_RELATIONS + 1)
            .map(|i| format!("t a{i}"))
            .collect::<Vec<_>>()
            .join(" CROSS JOIN ")
    );
    assert_eq!(common::run(&mut s, &nested).unwrap_err().code, "54001");
    let view = format!("CREATE VIEW v AS {}", joins(MAX_JOINED_RELATIONS + 1));
    assert_eq!(common::run(&mut s, &view).unwrap_err().code, "54001");
    // At the limit it runs.
    assert_eq!(
        common::rows(&mut s, &joins(MAX_JOINED_RELATIONS)),
        vec![vec!["1"]]
    );
    // Relations of UNION arms and subqueries count in their own FROM.
    let arms = chain(MAX_JOINED_RELATIONS + 10, "SELECT x FROM t", " UNION ALL ");
    assert_eq!(
        common::rows(&mut s, &format!("SELECT count(*) FROM ({arms}) u")),
        vec![vec![(MAX_JOINED_RELATIONS + 10).to_string()]]
    );
}

/// Many statements in one query string take time linear in their number:
/// ten times the statements may take at most 40 times as long (linear is
/// 10; work over the whole text per statement made it 100, and 20,000
/// statements took about 15 seconds).
#[test]
fn many_statements_in_one_query_take_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    let mut time = |n: usize| {
        let sql = "SELECT 1;".repeat(n);
        let started = std::time::Instant::now();
        let results = s.execute(&sql);
        let took = started.elapsed();
        assert_eq!(results.len(), n);
        assert!(results.iter().all(|r| r.is_ok()));
        took
    };
    time(200);
    // The quicker of two runs, so that a pause elsewhere does not count.
    let small = time(2_000).min(time(2_000));
    let large = time(20_000);
    assert!(
        large < small * 40,
        "2,000 statements took {small:?}, 20,000 took {large:?}"
    );
}
