//! A prepared read of the tables keeps the plan it was bound to when it
//! was prepared, and binds again when that plan would no longer be what
//! binding gives: after a schema change, or when the plan holds the
//! statement's time or a setting read as it was bound.

use crate::common;

use std::sync::atomic::Ordering;

use aqueduct_values::Value;
use common::{create_t, engine, ok, prepared_rows, session_with_hand_clock, HOUR};

#[test]
fn a_kept_plan_is_bound_again_after_the_schema_changes() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    create_t(&mut s);
    let p = s.prepare("SELECT b FROM t WHERE id = $1", &[]).unwrap();
    let read = |s: &mut aqueduct_sql::Session, id| prepared_rows(s, &p, &[Value::Int(id)]);
    assert_eq!(read(&mut s, 2), vec![vec!["20"]]);
    assert_eq!(read(&mut s, 1), vec![vec!["10"]]);
    // `b` moves from the third column to the second: a plan bound before
    // would read past the row or the wrong column.
    ok(&mut s, "ALTER TABLE t DROP COLUMN a");
    assert_eq!(read(&mut s, 2), vec![vec!["20"]]);
    // Another session's change counts as much as this one's.
    let mut other = e.session();
    ok(&mut other, "DROP TABLE t");
    ok(
        &mut other,
        "CREATE TABLE t (id bigint PRIMARY KEY, z text, y text, b bigint)",
    );
    ok(&mut other, "INSERT INTO t VALUES (2, 'z', 'y', 99)");
    assert_eq!(read(&mut s, 2), vec![vec!["99"]]);
    assert_eq!(read(&mut s, 1), Vec::<Vec<String>>::new());
    // Inside a transaction block the read sees the block's own writes.
    ok(&mut s, "BEGIN");
    ok(&mut s, "INSERT INTO t VALUES (1, 'z', 'y', 5)");
    assert_eq!(read(&mut s, 1), vec![vec!["5"]]);
    ok(&mut s, "ROLLBACK");
    assert_eq!(read(&mut s, 1), Vec::<Vec<String>>::new());
}

#[test]
fn a_plan_holding_the_time_or_a_setting_is_bound_at_each_execution() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, clock) = session_with_hand_clock(dir.path());
    ok(&mut s, "CREATE TABLE t (id bigint PRIMARY KEY, b bigint)");
    ok(&mut s, "INSERT INTO t VALUES (1, 10)");
    let at = s
        .prepare("SELECT statement_timestamp(), b FROM t WHERE id = $1", &[])
        .unwrap();
    assert_eq!(
        prepared_rows(&mut s, &at, &[Value::Int(1)]),
        vec![vec!["2024-01-01 00:00:00+00", "10"]]
    );
    clock.0.fetch_add(HOUR, Ordering::SeqCst);
    assert_eq!(
        prepared_rows(&mut s, &at, &[Value::Int(1)]),
        vec![vec!["2024-01-01 01:00:00+00", "10"]]
    );
    let setting = s
        .prepare(
            "SELECT current_setting('application_name'), b FROM t WHERE id = $1",
            &[],
        )
        .unwrap();
    ok(&mut s, "SET application_name = 'first'");
    assert_eq!(
        prepared_rows(&mut s, &setting, &[Value::Int(1)]),
        vec![vec!["first", "10"]]
    );
    ok(&mut s, "SET application_name = 'second'");
    assert_eq!(
        prepared_rows(&mut s, &setting, &[Value::Int(1)]),
        vec![vec!["second", "10"]]
    );
}

#[test]
fn kept_writes_follow_the_schema_and_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, clock) = session_with_hand_clock(dir.path());
    ok(
        &mut s,
        "CREATE TABLE t (id bigint PRIMARY KEY, a text, b bigint)",
    );
    let insert = s
        .prepare("INSERT INTO t (id, a, b) VALUES ($1, $2, $3)", &[])
        .unwrap();
    let update = s.prepare("UPDATE t SET b = $1 WHERE id = $2", &[]).unwrap();
    let delete = s.prepare("DELETE FROM t WHERE id = $1", &[]).unwrap();
    let exec = |s: &mut aqueduct_sql::Session, p: &aqueduct_sql::Prepared, v: Vec<Value>| {
        s.execute_prepared(p, &v).map(|_| ())
    };
    exec(
        &mut s,
        &insert,
        vec![Value::Int(1), Value::Text("one".into()), Value::Int(10)],
    )
    .unwrap();
    exec(
        &mut s,
        &insert,
        vec![Value::Int(2), Value::Text("two".into()), Value::Int(20)],
    )
    .unwrap();
    // A kept plan still reports what the statement does wrong.
    let dup = exec(
        &mut s,
        &insert,
        vec![Value::Int(2), Value::Text("x".into()), Value::Int(0)],
    )
    .unwrap_err();
    assert_eq!(dup.code, "23505", "{dup}");
    exec(&mut s, &update, vec![Value::Int(11), Value::Int(1)]).unwrap();
    // A new column with a default: an insert bound before would write a
    // row one value short.
    ok(&mut s, "ALTER TABLE t ADD COLUMN c bigint DEFAULT 7");
    exec(
        &mut s,
        &insert,
        vec![Value::Int(3), Value::Text("three".into()), Value::Int(30)],
    )
    .unwrap();
    // `b` moves from the third column to the second.
    ok(&mut s, "ALTER TABLE t DROP COLUMN a");
    exec(&mut s, &update, vec![Value::Int(21), Value::Int(2)]).unwrap();
    exec(&mut s, &delete, vec![Value::Int(3)]).unwrap();
    assert_eq!(
        common::rows(&mut s, "SELECT id, b, c FROM t ORDER BY id"),
        vec![vec!["1", "11", "7"], vec!["2", "21", "7"]]
    );
    // The column the insert names is gone: it is refused as when prepared.
    let gone = exec(
        &mut s,
        &insert,
        vec![Value::Int(4), Value::Text("four".into()), Value::Int(40)],
    )
    .unwrap_err();
    assert_eq!(gone.code, "42703", "{gone}");

    ok(
        &mut s,
        "CREATE TABLE ev (id bigint PRIMARY KEY, at timestamptz)",
    );
    let at = s
        .prepare("INSERT INTO ev VALUES ($1, statement_timestamp())", &[])
        .unwrap();
    exec(&mut s, &at, vec![Value::Int(1)]).unwrap();
    clock.0.fetch_add(HOUR, Ordering::SeqCst);
    exec(&mut s, &at, vec![Value::Int(2)]).unwrap();
    assert_eq!(
        common::rows(&mut s, "SELECT id, at FROM ev ORDER BY id"),
        vec![
            vec!["1", "2024-01-01 00:00:00+00"],
            vec!["2", "2024-01-01 01:00:00+00"]
        ]
    );
}
