//! SQL sessions end to end on a real log: statements, errors with SQLSTATE,
//! transactions, restart recovery, and serializability under concurrency.

use crate::common;

use aqueduct_sql::{Outcome, Session, TxnStatus};
use aqueduct_values::Value;
use common::{engine, ok, rows, run};

fn tag(s: &mut Session, sql: &str) -> String {
    match ok(s, sql) {
        Outcome::Command { tag } | Outcome::Rows { tag, .. } | Outcome::CopyOut { tag, .. } => tag,
        Outcome::Empty | Outcome::CopyIn { .. } => String::new(),
    }
}

fn code(s: &mut Session, sql: &str) -> &'static str {
    match run(s, sql) {
        Err(e) => e.code,
        Ok(o) => panic!("{sql}: expected an error, got {o:?}"),
    }
}

#[test]
fn crud_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE items (id bigint PRIMARY KEY, name varchar(10) NOT NULL, price numeric, \
         qty integer DEFAULT 1, ok boolean, at timestamptz, d date, u uuid, j jsonb, b bytea, f double precision)",
    );
    assert_eq!(
        tag(
            &mut s,
            "INSERT INTO items (id, name, price, ok, at, d, u, j, b, f) VALUES \
             (1, 'apple', 1.25, true, '2024-01-02 03:04:05+00', '2024-01-02', \
              'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\":1}', '\\x0102', 1.5), \
             (2, 'pear', 2, false, NULL, NULL, NULL, NULL, NULL, NULL)"
        ),
        "INSERT 0 2"
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, name, price, qty, ok, at, d, u, j, b, f FROM items WHERE id = 1"
        ),
        vec![vec![
            "1",
            "apple",
            "1.25",
            "1",
            "t",
            "2024-01-02 03:04:05+00",
            "2024-01-02",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            // jsonb prints in its canonical form, as PostgreSQL does.
            "{\"a\": 1}",
            "\\x0102",
            "1.5"
        ]]
    );
    assert_eq!(
        tag(
            &mut s,
            "UPDATE items SET qty = qty + 4 WHERE name = 'apple'"
        ),
        "UPDATE 1"
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT name FROM items WHERE qty > 2 OR price > 1.5 ORDER BY name DESC"
        ),
        vec![vec!["pear"], vec!["apple"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT count(*), sum(qty), max(name) FROM items"),
        vec![vec!["2", "6", "pear"]]
    );
    assert_eq!(
        rows(&mut s, "DELETE FROM items WHERE id = 2 RETURNING name"),
        vec![vec!["pear"]]
    );
    assert_eq!(rows(&mut s, "SELECT count(*) FROM items"), vec![vec!["1"]]);
    // Errors name the problem and leave the session usable.
    assert_eq!(code(&mut s, "SELEC 1"), "42601");
    assert_eq!(code(&mut s, "SELECT * FROM nope"), "42P01");
    assert_eq!(code(&mut s, "SELECT nope FROM items"), "42703");
    assert_eq!(
        code(&mut s, "INSERT INTO items (id, name) VALUES (1, 'dup')"),
        "23505"
    );
    assert_eq!(code(&mut s, "INSERT INTO items (id) VALUES (3)"), "23502");
    assert_eq!(
        code(
            &mut s,
            "INSERT INTO items (id, name) VALUES (3, 'much too long')"
        ),
        "22001"
    );
    assert_eq!(
        code(
            &mut s,
            "INSERT INTO items (id, name, qty) VALUES (3, 'x', 'many')"
        ),
        "22P02"
    );
    assert_eq!(
        code(
            &mut s,
            "INSERT INTO items (id, name, j) VALUES (3, 'x', '{bad')"
        ),
        "22P02"
    );
    assert_eq!(code(&mut s, "SELECT 1/0"), "22012");
    assert_eq!(rows(&mut s, "SELECT 1 + 1"), vec![vec!["2"]]);
}

#[test]
fn on_conflict_returning_and_tables_without_keys() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE counters (k text PRIMARY KEY, n bigint NOT NULL)",
    );
    for _ in 0..3 {
        ok(
            &mut s,
            "INSERT INTO counters VALUES ('a', 1) ON CONFLICT (k) DO UPDATE SET n = counters.n + excluded.n",
        );
    }
    assert_eq!(
        rows(&mut s, "SELECT n FROM counters WHERE k = 'a'"),
        vec![vec!["3"]]
    );
    assert_eq!(
        tag(
            &mut s,
            "INSERT INTO counters VALUES ('a', 9) ON CONFLICT DO NOTHING"
        ),
        "INSERT 0 0"
    );
    assert_eq!(
        rows(
            &mut s,
            "INSERT INTO counters VALUES ('b', 2) RETURNING k, n * 10"
        ),
        vec![vec!["b", "20"]]
    );
    // Noria's Vote table: no key, duplicates allowed, per-row deletes work.
    ok(
        &mut s,
        "CREATE TABLE vote (article_id bigint, \"user\" bigint)",
    );
    ok(&mut s, "INSERT INTO vote VALUES (1, 7), (1, 7), (2, 7)");
    assert_eq!(
        rows(
            &mut s,
            "SELECT article_id, count(*) FROM vote GROUP BY article_id ORDER BY 1"
        ),
        vec![vec!["1", "2"], vec!["2", "1"]]
    );
    assert_eq!(
        tag(&mut s, "DELETE FROM vote WHERE article_id = 2"),
        "DELETE 1"
    );
    ok(&mut s, "CREATE INDEX vote_article ON vote (article_id)");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM vote WHERE article_id = 1"),
        vec![vec!["2"]]
    );
    assert_eq!(
        rows(&mut s, "SHOW TABLES"),
        vec![vec!["counters"], vec!["vote"]]
    );
}

#[test]
fn state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine(dir.path());
        let mut s = e.session();
        ok(&mut s, "CREATE TABLE t (id integer PRIMARY KEY, v text)");
        ok(&mut s, "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')");
        ok(&mut s, "UPDATE t SET v = 'B' WHERE id = 2");
        ok(&mut s, "DELETE FROM t WHERE id = 3");
        ok(&mut s, "CREATE TABLE gone (x integer)");
        ok(&mut s, "INSERT INTO gone VALUES (1)");
        ok(&mut s, "DROP TABLE gone");
        ok(&mut s, "CREATE TABLE gone (y text)");
        assert!(s.last_lsn() > 0);
    }
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        rows(&mut s, "SELECT id, v FROM t ORDER BY id"),
        vec![vec!["1", "a"], vec!["2", "B"]]
    );
    assert_eq!(rows(&mut s, "SELECT count(*) FROM gone"), vec![vec!["0"]]);
}

#[test]
fn transactions_are_atomic_and_report_status() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    let mut other = e.session();
    ok(&mut s, "CREATE TABLE t (id integer PRIMARY KEY, v integer)");
    ok(&mut s, "BEGIN");
    assert_eq!(s.status(), TxnStatus::InBlock);
    ok(&mut s, "INSERT INTO t VALUES (1, 10)");
    assert_eq!(
        rows(&mut s, "SELECT v FROM t WHERE id = 1"),
        vec![vec!["10"]]
    );
    assert!(
        rows(&mut other, "SELECT v FROM t").is_empty(),
        "uncommitted rows are invisible"
    );
    assert_eq!(code(&mut s, "SELECT * FROM nope"), "42P01");
    assert_eq!(s.status(), TxnStatus::Failed);
    assert_eq!(code(&mut s, "SELECT 1"), "25P02");
    assert_eq!(tag(&mut s, "COMMIT"), "ROLLBACK");
    assert_eq!(s.status(), TxnStatus::Idle);
    assert!(rows(&mut other, "SELECT v FROM t").is_empty());
    ok(
        &mut s,
        "BEGIN; INSERT INTO t VALUES (1, 1); INSERT INTO t VALUES (2, 2); COMMIT",
    );
    assert_eq!(rows(&mut other, "SELECT count(*) FROM t"), vec![vec!["2"]]);
    // An abandoned transaction leaves nothing.
    ok(&mut s, "BEGIN");
    ok(&mut s, "DELETE FROM t");
    s.abandon();
    assert_eq!(rows(&mut other, "SELECT count(*) FROM t"), vec![vec!["2"]]);
}

#[test]
fn lost_updates_and_write_skew_are_prevented() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE c (id integer PRIMARY KEY, n bigint)");
    ok(&mut s, "INSERT INTO c VALUES (1, 0)");
    // Explicit read-modify-write transactions from many threads; losers retry.
    let threads = 8;
    let per = 25;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let e = e.clone();
            scope.spawn(move || {
                let mut s = e.session();
                for _ in 0..per {
                    loop {
                        ok(&mut s, "BEGIN");
                        let n: i64 = rows(&mut s, "SELECT n FROM c WHERE id = 1")[0][0]
                            .parse()
                            .unwrap();
                        ok(&mut s, &format!("UPDATE c SET n = {} WHERE id = 1", n + 1));
                        match run(&mut s, "COMMIT") {
                            Ok(_) => break,
                            Err(err) => assert_eq!(err.code, "40001", "{err}"),
                        }
                    }
                }
            });
        }
    });
    assert_eq!(
        rows(&mut s, "SELECT n FROM c WHERE id = 1"),
        vec![vec![(threads * per).to_string()]]
    );
    // Autocommit increments never conflict and never lose an update.
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let e = e.clone();
            scope.spawn(move || {
                let mut s = e.session();
                for _ in 0..per {
                    ok(&mut s, "UPDATE c SET n = n + 1 WHERE id = 1");
                }
            });
        }
    });
    assert_eq!(
        rows(&mut s, "SELECT n FROM c WHERE id = 1"),
        vec![vec![(2 * threads * per).to_string()]]
    );

    // Write skew: two doctors on call; each goes off call if the other is on.
    ok(
        &mut s,
        "CREATE TABLE doctors (name text PRIMARY KEY, on_call boolean)",
    );
    ok(
        &mut s,
        "INSERT INTO doctors VALUES ('alice', true), ('bob', true)",
    );
    let mut a = e.session();
    let mut b = e.session();
    ok(&mut a, "BEGIN");
    ok(&mut b, "BEGIN");
    assert_eq!(
        rows(&mut a, "SELECT count(*) FROM doctors WHERE on_call"),
        vec![vec!["2"]]
    );
    assert_eq!(
        rows(&mut b, "SELECT count(*) FROM doctors WHERE on_call"),
        vec![vec!["2"]]
    );
    ok(
        &mut a,
        "UPDATE doctors SET on_call = false WHERE name = 'alice'",
    );
    ok(
        &mut b,
        "UPDATE doctors SET on_call = false WHERE name = 'bob'",
    );
    ok(&mut a, "COMMIT");
    assert_eq!(run(&mut b, "COMMIT").unwrap_err().code, "40001");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM doctors WHERE on_call"),
        vec![vec!["1"]]
    );
}

/// A read of an absent key conflicts only with a write of that key:
/// transactions inserting different keys into one table all commit, two
/// inserting the same key do not, and a transaction that saw a key absent
/// fails if it was inserted before its commit.
#[test]
fn inserts_of_different_keys_do_not_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE posts (id bigint PRIMARY KEY, title text)",
    );
    let mut a = e.session();
    let mut b = e.session();
    ok(&mut a, "BEGIN");
    ok(&mut b, "BEGIN");
    ok(&mut a, "INSERT INTO posts VALUES (1, 'a')");
    ok(&mut b, "INSERT INTO posts VALUES (2, 'b')");
    ok(&mut a, "COMMIT");
    ok(&mut b, "COMMIT");
    // The same key: the second commit is refused.
    ok(&mut a, "BEGIN");
    ok(&mut b, "BEGIN");
    ok(&mut a, "INSERT INTO posts VALUES (3, 'a')");
    ok(&mut b, "INSERT INTO posts VALUES (3, 'b')");
    ok(&mut a, "COMMIT");
    assert_eq!(run(&mut b, "COMMIT").unwrap_err().code, "40001");
    // Saw key 4 absent, then another session inserted it.
    ok(&mut a, "BEGIN");
    assert!(rows(&mut a, "SELECT title FROM posts WHERE id = 4").is_empty());
    ok(&mut a, "INSERT INTO posts VALUES (5, 'no 4 yet')");
    ok(&mut s, "INSERT INTO posts VALUES (4, 'four')");
    assert_eq!(run(&mut a, "COMMIT").unwrap_err().code, "40001");
    // Absent when read and absent at commit, with a key inserted and
    // deleted meanwhile: the read still holds at the commit.
    ok(&mut a, "BEGIN");
    assert!(rows(&mut a, "SELECT title FROM posts WHERE id = 6").is_empty());
    ok(&mut a, "INSERT INTO posts VALUES (7, 'no 6')");
    ok(&mut s, "INSERT INTO posts VALUES (6, 'six')");
    ok(&mut s, "DELETE FROM posts WHERE id = 6");
    ok(&mut a, "COMMIT");
    assert_eq!(
        rows(&mut s, "SELECT id, title FROM posts ORDER BY id"),
        vec![
            vec!["1", "a"],
            vec!["2", "b"],
            vec!["3", "a"],
            vec!["4", "four"],
            vec!["7", "no 6"],
        ]
    );
}

#[test]
fn prepared_statements_infer_parameter_types() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE t (id bigint PRIMARY KEY, name text, at date)",
    );
    let ins = s.prepare("INSERT INTO t VALUES ($1, $2, $3)", &[]).unwrap();
    assert_eq!(ins.params.len(), 3);
    assert_eq!(ins.params[0], aqueduct_values::DataType::Int8);
    assert_eq!(ins.params[2], aqueduct_values::DataType::Date);
    s.execute_prepared(
        &ins,
        &[Value::Int(1), Value::Text("x".into()), Value::Date(3)],
    )
    .unwrap();
    let sel = s
        .prepare("SELECT name, at FROM t WHERE $1 = id", &[])
        .unwrap();
    assert_eq!(sel.params, vec![aqueduct_values::DataType::Int8]);
    assert_eq!(sel.columns.len(), 2);
    match s.execute_prepared(&sel, &[Value::Int(1)]).unwrap() {
        Outcome::Rows { rows, .. } => {
            assert_eq!(rows, vec![vec![Value::Text("x".into()), Value::Date(3)]])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rows(&mut s, "SHOW aqueduct.last_lsn")[0][0],
        s.last_lsn().to_string()
    );
    assert_eq!(
        rows(&mut s, "SELECT table_name, column_name FROM information_schema.columns WHERE table_name = 't' ORDER BY ordinal_position"),
        vec![vec!["t", "id"], vec!["t", "name"], vec!["t", "at"]]
    );
}

#[test]
fn catalog_views_answer() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE t (id integer PRIMARY KEY)");
    assert_eq!(
        rows(&mut s, "SELECT table_name FROM information_schema.tables"),
        vec![vec!["t"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT * FROM information_schema.tables").len(),
        1
    );
    assert_eq!(
        rows(&mut s, "SELECT tablename FROM pg_catalog.pg_tables"),
        vec![vec!["t"]]
    );
    let p = s.prepare("SHOW ALL", &[]).unwrap();
    assert_eq!(p.columns.len(), 2);
    let p = s
        .prepare("SELECT 0.1::real, 1e300::float8, 1e-7::float8", &[])
        .unwrap();
    assert_eq!(p.columns[0].ty, aqueduct_values::DataType::Float4);
    assert_eq!(
        rows(
            &mut s,
            "SELECT 1e300::float8, 1e-7::float8, 1.5::float8, 100000000000000000000::float8"
        ),
        vec![vec!["1e+300", "1e-07", "1.5", "1e+20"]]
    );
}

#[test]
fn aggregates_give_postgres_values() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE t (g int, i int, n numeric, f float8)");
    ok(
        &mut s,
        "INSERT INTO t VALUES (1, 1, 1.50, 0.1), (1, 2, 2.5, 0.1), (1, NULL, NULL, 0.1), \
         (2, 7, 0.0001, 1e20), (2, 7, 0.0002, NULL), (3, NULL, NULL, NULL)",
    );
    // Every expected value as PostgreSQL 15 prints it.
    let text = |r: &[&str]| r.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rows(
            &mut s,
            "SELECT g, count(*), count(i), count(DISTINCT i), sum(i), avg(i), sum(n), avg(n), \
             min(n), max(i), sum(f), avg(f), sum(DISTINCT i) FROM t GROUP BY g ORDER BY g"
        ),
        vec![
            text(&[
                "1",
                "3",
                "2",
                "2",
                "3",
                "1.5000000000000000",
                "4.00",
                "2.0000000000000000",
                "1.50",
                "2",
                "0.30000000000000004",
                "0.10000000000000002",
                "3"
            ]),
            text(&[
                "2",
                "2",
                "2",
                "1",
                "14",
                "7.0000000000000000",
                "0.0003",
                "0.00015000000000000000",
                "0.0001",
                "7",
                "1e+20",
                "1e+20",
                "7"
            ]),
            text(&[
                "3", "1", "0", "0", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL",
                "NULL"
            ]),
        ]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*), sum(i), avg(i), min(i) FROM t WHERE false"
        ),
        vec![text(&["0", "NULL", "NULL", "NULL"])]
    );
    ok(&mut s, "CREATE TABLE big (v bigint)");
    ok(
        &mut s,
        "INSERT INTO big VALUES (9223372036854775807), (9223372036854775807), (-5)",
    );
    assert_eq!(
        rows(&mut s, "SELECT sum(v), avg(v) FROM big"),
        vec![text(&["18446744073709551609", "6148914691236517203"])]
    );
    assert_eq!(
        code(&mut s, "SELECT sum(v * 1e289::float8) FROM big"),
        "22003"
    );
}

/// `key IN (...)` reads each key by primary-key lookup, and answers what a
/// scan answers: duplicates and NULLs in the list, absent keys, a composite
/// key with its other columns pinned, the transaction's own writes, and
/// UPDATE and DELETE through the same access.
#[test]
fn in_lists_on_the_primary_key_are_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    for t in ["k", "scan"] {
        let key = if t == "k" { " PRIMARY KEY" } else { "" };
        ok(
            &mut s,
            &format!("CREATE TABLE {t} (id bigint{key}, v text)"),
        );
        ok(
            &mut s,
            &format!("INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (5, 'e')"),
        );
    }
    ok(
        &mut s,
        "CREATE TABLE pair (a bigint, b bigint, v text, PRIMARY KEY (a, b))",
    );
    ok(
        &mut s,
        "INSERT INTO pair VALUES (1, 1, 'x'), (1, 2, 'y'), (2, 1, 'z')",
    );
    let explain = rows(&mut s, "EXPLAIN SELECT v FROM k WHERE id IN (1, 2)");
    assert!(
        explain.iter().any(|r| r[0].contains("primary-key lookups")),
        "{explain:?}"
    );
    let explain = rows(
        &mut s,
        "EXPLAIN SELECT v FROM pair WHERE a = 1 AND b IN (1, 2)",
    );
    assert!(
        explain.iter().any(|r| r[0].contains("primary-key lookups")),
        "{explain:?}"
    );
    let same = |s: &mut Session, filter: &str| {
        let q = |t: &str| format!("SELECT id, v FROM {t} WHERE {filter} ORDER BY id");
        assert_eq!(rows(s, &q("k")), rows(s, &q("scan")), "{filter}");
    };
    for filter in [
        "id IN (1, 3)",
        "id IN (3, 1, 3, 1)",
        "id IN (4, 9)",
        "id IN (2, NULL)",
        "id IN (1, 2, 3) AND v <> 'b'",
        "id IN (5) OR id = 1",
    ] {
        same(&mut s, filter);
    }
    assert_eq!(
        rows(
            &mut s,
            "SELECT v FROM pair WHERE a = 1 AND b IN (2, 1, 7) ORDER BY v"
        ),
        vec![vec!["x"], vec!["y"]]
    );
    // Inside a transaction: its own insert and delete count.
    ok(&mut s, "BEGIN");
    for t in ["k", "scan"] {
        ok(&mut s, &format!("INSERT INTO {t} VALUES (4, 'd')"));
        ok(&mut s, &format!("DELETE FROM {t} WHERE id = 1"));
    }
    same(&mut s, "id IN (1, 4, 5)");
    ok(&mut s, "COMMIT");
    for t in ["k", "scan"] {
        ok(
            &mut s,
            &format!("UPDATE {t} SET v = v || '!' WHERE id IN (2, 4, 9)"),
        );
        ok(&mut s, &format!("DELETE FROM {t} WHERE id IN (3, 3)"));
    }
    same(&mut s, "id > 0");
    let p = s
        .prepare("SELECT v FROM k WHERE id IN ($1, $2)", &[])
        .unwrap();
    assert!(p.quick);
    let got = common::prepared_rows(
        &mut s,
        &p,
        &[
            aqueduct_values::Value::Int(2),
            aqueduct_values::Value::Int(5),
        ],
    );
    assert_eq!(got.len(), 2);
}

/// Equalities on the first columns of a composite primary key read a range
/// of the key, and answer what a scan answers (inside a transaction with
/// its own writes too, and for UPDATE and DELETE).
#[test]
fn primary_key_prefixes_are_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    for t in ["k", "scan"] {
        let key = if t == "k" {
            ", PRIMARY KEY (a, b, c)"
        } else {
            ""
        };
        ok(
            &mut s,
            &format!("CREATE TABLE {t} (a bigint, b bigint, c bigint, v text{key})"),
        );
        ok(
            &mut s,
            &format!(
                "INSERT INTO {t} VALUES (1, 1, 1, 'p'), (1, 1, 2, 'q'), (1, 2, 1, 'r'), \
                 (2, 1, 1, 's'), (0, 9, 9, 't'), (3, 0, 0, 'u')"
            ),
        );
    }
    let explain = rows(&mut s, "EXPLAIN SELECT v FROM k WHERE a = 1");
    assert!(
        explain
            .iter()
            .any(|r| r[0].contains("range of the primary key")),
        "{explain:?}"
    );
    let same = |s: &mut Session, filter: &str| {
        let q = |t: &str| format!("SELECT a, b, c, v FROM {t} WHERE {filter} ORDER BY a, b, c");
        assert_eq!(rows(s, &q("k")), rows(s, &q("scan")), "{filter}");
    };
    let filters = [
        "a = 1",
        "a = 1 AND b = 1",
        "b = 1 AND a = 1 AND v <> 'p'",
        "a = 2",
        "a = 7",
        "a = NULL",
        "a = 1 AND c = 1",
    ];
    for f in filters {
        same(&mut s, f);
    }
    ok(&mut s, "BEGIN");
    for t in ["k", "scan"] {
        ok(&mut s, &format!("INSERT INTO {t} VALUES (1, 3, 0, 'w')"));
        ok(
            &mut s,
            &format!("DELETE FROM {t} WHERE a = 1 AND b = 1 AND c = 2"),
        );
    }
    for f in filters {
        same(&mut s, f);
    }
    ok(&mut s, "COMMIT");
    for t in ["k", "scan"] {
        ok(
            &mut s,
            &format!("UPDATE {t} SET v = v || '!' WHERE a = 1 AND b = 2"),
        );
        ok(&mut s, &format!("DELETE FROM {t} WHERE a = 2"));
    }
    same(&mut s, "a >= 0");
}
