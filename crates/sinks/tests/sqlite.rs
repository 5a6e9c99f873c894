//! The SQLite sink through the shared cases, each in a database file of
//! its own.

mod common;

use aqueduct_sinks::{Rows, SqliteSink};
use common::Store;

impl Store for SqliteSink {
    fn rows_of(&self, object: &str) -> Rows {
        self.rows(object).expect("rows")
    }
}

#[test]
fn sqlite_cases() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    common::all(&mut |case| {
        let path = root.join(format!("{case}.db"));
        Box::new(move || Box::new(SqliteSink::open(&path, "sub").expect("open")) as Box<dyn Store>)
    });
}

#[test]
fn two_subscriptions_share_a_file() {
    use aqueduct_subscribe::Sink;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.db");
    let mut a = SqliteSink::open(&path, "a").unwrap();
    let mut b = SqliteSink::open(&path, "b").unwrap();
    a.ensure_objects(&common::posts()).unwrap();
    b.ensure_objects(&common::posts()).unwrap();
    common::apply(&mut a, vec![common::txn(4, vec![])]).unwrap();
    common::apply(&mut b, vec![common::txn(9, vec![])]).unwrap();
    assert_eq!(a.resume().unwrap().applied_above, vec![4]);
    assert_eq!(b.resume().unwrap().applied_above, vec![9]);
    let id = aqueduct_sinks::Identity {
        server_id: Some("srv".into()),
        publication: Some("social".into()),
        mode: Some("causal".into()),
    };
    a.set_identity(&id).unwrap();
    assert_eq!(a.identity().unwrap(), id);
    assert_eq!(b.identity().unwrap(), Default::default());
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
