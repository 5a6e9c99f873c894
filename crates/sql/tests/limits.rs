//! Statements nested to the depth limit run, deeper ones are refused with
//! SQLSTATE 54001, and neither overflows the stack. Every statement runs on
//! a thread with a tiny stack, so the session must give it the statement
//! stack the limits promise (`aqueduct_sql::limits`): a walk that needs more
//! than that aborts the test process.

mod common;

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
