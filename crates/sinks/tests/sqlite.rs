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

/// The origin is kept apart from the position and survives a reset; one
/// object's rows are cleared whole or by a condition.
#[test]
fn origin_and_clearing_one_object() {
    use aqueduct_publish::{AttributeType, ChangeOp, ObjectSchema};
    use aqueduct_subscribe::{Origin, Record, Sink};
    let dir = tempfile::tempdir().unwrap();
    let mut s = SqliteSink::open(dir.path().join("s.db"), "s").unwrap();
    assert_eq!(s.origin().unwrap(), Origin::default());
    let origin = Origin {
        server_id: Some("feed".into()),
        boot_lsn: Some(10),
        sync_lsn: None,
    };
    s.set_origin(&origin).unwrap();
    let shape = ObjectSchema {
        attributes: vec![AttributeType {
            name: "id".into(),
            ty: "integer".into(),
        }],
        key: vec!["id".into()],
    };
    s.ensure_objects(&[("posts".to_string(), shape)].into_iter().collect())
        .unwrap();
    let rows: Vec<_> = (1..=4)
        .map(|i| {
            common::change(
                "posts",
                ChangeOp::Insert,
                serde_json::json!(i),
                Some(serde_json::json!({ "id": i })),
                i as u64,
            )
        })
        .collect();
    s.apply(&[common::txn(4, rows)], &Record::default())
        .unwrap();
    s.clear_object("posts", Some("id > 2")).unwrap();
    assert_eq!(s.rows("posts").unwrap().len(), 2);
    s.clear_object("posts", None).unwrap();
    assert!(s.rows("posts").unwrap().is_empty());
    assert!(s.clear_object("nothing", None).is_err());
    s.reset().unwrap();
    assert_eq!(s.origin().unwrap(), origin);
}
