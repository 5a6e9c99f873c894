//! How statements are routed: one typed decision per statement, made from
//! the parsed and bound statement (never from error codes or by searching
//! its text), the same one `EXPLAIN` prints.

use crate::common;

use aqueduct_sql::{Outcome, Session};
use aqueduct_values::Value;
use common::{engine, ok, rows, run};

fn setup(s: &mut Session) {
    ok(
        s,
        "CREATE TABLE t (id integer PRIMARY KEY, name text, n integer)",
    );
    ok(s, "CREATE INDEX ON t (n)");
    ok(s, "CREATE TABLE u (id integer PRIMARY KEY, t_id integer)");
    ok(
        s,
        "CREATE VIEW per_t AS SELECT t.id, count(u.id) AS uses FROM t LEFT JOIN u ON t.id = u.t_id GROUP BY t.id",
    );
}

/// The route `EXPLAIN` names (its last line) and its first line.
fn explain(s: &mut Session, sql: &str) -> (String, String) {
    let lines = rows(s, &format!("EXPLAIN {sql}"));
    let first = lines[0][0].clone();
    let last = lines.last().unwrap()[0].clone();
    (
        last.strip_prefix("route: ")
            .unwrap_or_else(|| panic!("{sql}: no route in {lines:?}"))
            .to_string(),
        first,
    )
}

/// A string literal that mentions a catalog relation is a string: writing
/// it and reading it back work, by both protocols, while the catalog
/// relations themselves are still recognised by name.
#[test]
fn string_literals_naming_catalog_relations_are_just_strings() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    ok(&mut s, "INSERT INTO t VALUES (1, 'pg_tables', 1)");
    ok(
        &mut s,
        "INSERT INTO t VALUES (2, 'information_schema.tables', 2)",
    );
    ok(
        &mut s,
        "INSERT INTO t VALUES (3, 'SELECT * FROM pg_catalog.pg_class', 3)",
    );
    ok(
        &mut s,
        "INSERT INTO t (id, name) VALUES (4, 'FROM pg_type WHERE typname = $1')",
    );
    ok(&mut s, "UPDATE t SET name = 'pg_tables' WHERE id = 4");
    assert_eq!(
        rows(
            &mut s,
            "SELECT id FROM t WHERE name = 'pg_tables' ORDER BY id"
        ),
        vec![vec!["1"], vec!["4"]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT name FROM t WHERE name LIKE 'information_schema%'"
        ),
        vec![vec!["information_schema.tables"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT name FROM t WHERE id = 3"),
        vec![vec!["SELECT * FROM pg_catalog.pg_class"]]
    );
    // Through a join (the dataflow) and a view, too.
    ok(&mut s, "INSERT INTO u VALUES (10, 1)");
    assert_eq!(
        rows(
            &mut s,
            "SELECT u.id FROM t JOIN u ON t.id = u.t_id WHERE t.name = 'pg_tables'"
        ),
        vec![vec!["10"]]
    );
    ok(
        &mut s,
        "DELETE FROM t WHERE name = 'information_schema.columns'",
    );
    // Prepared, with the literal next to a parameter.
    let p = s
        .prepare(
            "INSERT INTO t VALUES ($1, 'information_schema.columns', $1)",
            &[],
        )
        .unwrap();
    s.execute_prepared(&p, &[Value::Int(5)]).unwrap();
    let p = s
        .prepare(
            "SELECT id FROM t WHERE name = 'information_schema.columns'",
            &[],
        )
        .unwrap();
    match s.execute_prepared(&p, &[]).unwrap() {
        Outcome::Rows { rows, .. } => assert_eq!(rows, vec![vec![Value::Int(5)]]),
        other => panic!("{other:?}"),
    }
    // The catalog relations are still the catalog, and read-only.
    assert_eq!(
        rows(
            &mut s,
            "SELECT table_name FROM information_schema.tables WHERE table_name = 'pg_tables'"
        ),
        Vec::<Vec<String>>::new()
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*) FROM pg_tables WHERE tablename = 't'"
        ),
        vec![vec!["1"]]
    );
    let refused = run(&mut s, "INSERT INTO pg_tables VALUES ('a', 'b', 'c')").unwrap_err();
    assert_eq!(refused.code, "42809", "{refused}");
    assert!(refused.message.contains("read-only"), "{refused}");
}

/// For each kind of statement, the route `EXPLAIN` names.
#[test]
fn explain_names_the_route_each_statement_takes() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    let cases: &[(&str, &str, &str)] = &[
        ("SELECT name FROM t WHERE id = 1", "keyed table read", "evaluated directly over the base tables, by primary-key lookup"),
        ("SELECT name FROM t WHERE n = 1", "keyed table read", "evaluated directly over the base tables, by secondary-index lookup"),
        ("SELECT name FROM t WHERE name = 'pg_tables'", "table scan", "evaluated directly over the base tables, by a scan"),
        ("SELECT 1 + 1", "constant row", "evaluated directly"),
        ("SELECT * FROM per_t WHERE id = 1", "view lookup", "read from maintained view per_t"),
        (
            "SELECT t.name FROM t JOIN u ON t.id = u.t_id WHERE u.id = 3",
            "automatic view",
            "will be answered from an automatic view keyed on $1",
        ),
        (
            "SELECT t.name FROM t JOIN u ON t.id = u.t_id",
            "one-shot dataflow",
            "evaluated once through a temporary dataflow, not maintained: no `column = value` condition",
        ),
        ("SELECT id FROM t UNION SELECT id FROM u", "one-shot dataflow", "evaluated once"),
        ("SELECT table_name FROM information_schema.tables", "catalog relations", "evaluated over the catalog relations"),
        ("SELECT tablename FROM pg_catalog.pg_tables", "catalog relations", "evaluated over the catalog relations"),
        (
            "SELECT oid, typname FROM pg_catalog.pg_type WHERE typname = $1",
            "catalog relations",
            "evaluated over the catalog relations",
        ),
        ("INSERT INTO t VALUES (9, 'pg_tables', 9)", "write", "run directly"),
        ("INSERT INTO t VALUES (9, 'information_schema.tables', 9)", "write", "run directly"),
        ("UPDATE t SET n = 2 WHERE id = 1", "write", "run directly"),
        ("DELETE FROM u WHERE id = 1", "write", "run directly"),
        ("INSERT INTO pg_tables VALUES ('a', 'b', 'c')", "catalog relations", "refused: the catalog relations are read-only"),
        ("INSERT INTO per_t VALUES (1, 2)", "view lookup", "refused: a view cannot be written"),
        ("CREATE TABLE w (id integer PRIMARY KEY)", "DDL", "run directly"),
        ("BEGIN", "transaction control", "run directly"),
        ("SET aqueduct.auto_views = off", "session command", "run directly"),
        ("CREATE ROLE alice", "roles", "run directly"),
        ("COPY t (id, name) FROM STDIN (FORMAT csv)", "copy from stdin", "run directly"),
        ("COPY t TO STDOUT", "copy to stdout", "run directly"),
        ("COPY (SELECT t.name FROM t JOIN u ON t.id = u.t_id) TO STDOUT", "copy to stdout", "run directly"),
    ];
    for (sql, route, first) in cases {
        let (got, line) = explain(&mut s, sql);
        assert_eq!(&got, route, "{sql}");
        assert!(line.starts_with(first), "{sql}: {line}");
    }
    // The session's state takes part: inside a transaction block, and
    // with automatic views off, a join is evaluated once.
    let join = "SELECT t.name FROM t JOIN u ON t.id = u.t_id WHERE u.id = 3";
    ok(&mut s, "BEGIN");
    let (route, line) = explain(&mut s, join);
    assert_eq!(route, "one-shot dataflow");
    assert!(line.contains("inside a transaction block"), "{line}");
    ok(&mut s, "ROLLBACK");
    ok(&mut s, "SET aqueduct.auto_views = off");
    let (route, line) = explain(&mut s, join);
    assert_eq!(route, "one-shot dataflow");
    assert!(line.contains("automatic views are off"), "{line}");
    ok(&mut s, "SET aqueduct.auto_views = on");
    // Once the automatic view is made, EXPLAIN reads from it.
    rows(&mut s, join);
    let (route, line) = explain(&mut s, join);
    assert_eq!(route, "automatic view");
    assert!(line.starts_with("read from automatic view"), "{line}");
}
