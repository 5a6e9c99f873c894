//! The SQLite sink through the shared cases, each in a database file of
//! its own.

#[macro_use]
mod common;

use aqueduct_sinks::SqliteSink;

sql_store!(SqliteSink);

#[test]
fn sqlite_cases() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    common::all(&mut |case| {
        let path = root.join(format!("{case}.db"));
        common::opener(move || SqliteSink::open(&path, "sub").expect("open"))
    });
}

#[test]
fn two_subscriptions_share_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.db");
    common::two_subscriptions_share(|name| SqliteSink::open(&path, name).unwrap());
}

#[test]
fn busy_is_transient() {
    use aqueduct_subscribe::{ErrorClass, Sink};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let mut s = SqliteSink::open(&path, "s").unwrap();
    s.ensure_objects(&common::posts()).unwrap();
    s.set_busy_timeout(std::time::Duration::ZERO).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = common::apply(&mut s, vec![common::txn(3, vec![])]).unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    other.execute_batch("ROLLBACK").unwrap();
    common::apply(&mut s, vec![common::txn(3, vec![])]).unwrap();
    assert_eq!(s.resume().unwrap().applied_above, vec![3]);
}
