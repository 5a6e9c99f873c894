//! The MariaDB sink through the shared cases and the simulator. Runs only
//! when `AQ_SINK_MARIADB_URL` names a server (`mariadb://user@host:port/db`;
//! `scripts/sink-tests` starts a throwaway one); each case uses a database
//! of its own, dropped and created first, so the user needs to be allowed
//! to create databases.

#[macro_use]
mod common;
#[path = "common/sim.rs"]
mod sim;

use aqueduct_publish::Mode;
use aqueduct_sinks::{MariaDbSink, SinkSpec};
use aqueduct_subscribe::{ErrorClass, Sink};
use common::opener;
use mysql::prelude::Queryable;

sql_store!(MariaDbSink);

fn url() -> Option<String> {
    common::env_url("AQ_SINK_MARIADB_URL", "MariaDB sink")
}

/// Opens the subscription `name` in the database of `db` (a URL), again
/// on each call.
fn open(db: String, name: &'static str) -> common::Opener {
    opener(move || MariaDbSink::connect(&db, name).expect("connect"))
}

/// `url` with its database replaced by `db`.
fn with_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{db}{query}", &base[..host_end])
}

/// A connection of the tests' own.
fn admin(url: &str) -> mysql::Conn {
    let url = url.replacen("mariadb://", "mysql://", 1);
    mysql::Conn::new(mysql::Opts::from_url(&url).expect("url")).expect("connect")
}

/// A new, empty database `name`; its URL.
fn fresh(url: &str, name: &str) -> String {
    let mut c = admin(url);
    c.query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
        .unwrap();
    c.query_drop(format!("CREATE DATABASE `{name}`")).unwrap();
    with_db(url, name)
}

#[test]
fn mariadb_cases() {
    let Some(url) = url() else { return };
    common::all(&mut |case| open(fresh(&url, &format!("sinktest_{case}")), "sub"));
}

#[test]
fn two_subscriptions_share_a_database() {
    let Some(url) = url() else { return };
    let db = fresh(&url, "sinktest_shared");
    common::two_subscriptions_share(|name| MariaDbSink::connect(&db, name).unwrap());
}

/// A schema change whose DDL committed before a crash, and whose position
/// did not: applied again, it does nothing more.
#[test]
fn schema_change_repeated_after_crash() {
    use aqueduct_subscribe::{Record, SchemaPos};
    use serde_json::json;
    let Some(url) = url() else { return };
    let db = fresh(&url, "sinktest_ddl_repeat");
    let mut s = MariaDbSink::connect(&db, "sub").unwrap();
    s.ensure_objects(&common::posts()).unwrap();
    let row = common::change(
        "posts",
        aqueduct_publish::ChangeOp::Insert,
        json!(1),
        Some(json!({"id": 1, "body": "a"})),
        2,
    );
    common::apply(&mut s, vec![common::txn(2, vec![row])]).unwrap();
    // What the crash left: the DDL of three changes, nothing else.
    let mut c = admin(&db);
    c.query_drop(
        "ALTER TABLE posts ADD COLUMN likes BIGINT; \
         ALTER TABLE posts RENAME COLUMN body TO text",
    )
    .unwrap();
    let changes = [
        aqueduct_publish::SchemaChange::AddAttribute {
            name: "likes".into(),
            ty: "bigint".into(),
            existing: json!(0),
        },
        aqueduct_publish::SchemaChange::RenameAttribute {
            from: "body".into(),
            to: "text".into(),
        },
        aqueduct_publish::SchemaChange::DropAttribute {
            name: "likes".into(),
        },
    ];
    for (i, change) in changes.into_iter().enumerate() {
        let lsn = 4 + i as u64;
        let item = common::schema(lsn, "posts", change);
        let record = Record {
            applied: vec![],
            watermark: None,
            schema: Some(SchemaPos { lsn, seq: 0 }),
        };
        s.apply(std::slice::from_ref(&item), &record).unwrap();
        if i == 1 {
            // The crash again, after the drop's DDL.
            c.query_drop("ALTER TABLE posts DROP COLUMN likes").unwrap();
        }
    }
    let rows = s.rows("posts").unwrap();
    assert_eq!(rows["[1]"].1, common::attrs(json!({"id": 1, "text": "a"})));
    assert_eq!(
        s.resume().unwrap().schema,
        Some(SchemaPos { lsn: 6, seq: 0 })
    );
}

#[test]
fn errors_classified() {
    let Some(url) = url() else { return };
    // A refused connection is transient.
    let err = MariaDbSink::connect("mariadb://nobody@127.0.0.1:1/x", "x")
        .err()
        .expect("no server there");
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    // A database that does not exist is not worth retrying.
    let err = MariaDbSink::connect(&with_db(&url, "sinktest_missing_db"), "x")
        .err()
        .expect("no such database");
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    // A lock held elsewhere past the wait timeout is transient.
    let db = fresh(&url, "sinktest_errors");
    let mut c = admin(&db);
    c.query_drop("SET GLOBAL innodb_lock_wait_timeout = 1")
        .unwrap();
    let sink = MariaDbSink::connect(&db, "s");
    c.query_drop("SET GLOBAL innodb_lock_wait_timeout = DEFAULT")
        .unwrap();
    let mut sink = sink.unwrap();
    sink.ensure_objects(&common::posts()).unwrap();
    let row = |version| {
        common::change(
            "posts",
            aqueduct_publish::ChangeOp::Insert,
            serde_json::json!(1),
            Some(serde_json::json!({"id": 1, "body": "b"})),
            version,
        )
    };
    common::apply(&mut sink, vec![common::txn(2, vec![row(2)])]).unwrap();
    c.query_drop("START TRANSACTION").unwrap();
    c.query_drop("SELECT * FROM posts WHERE id = 1 FOR UPDATE")
        .unwrap();
    let err = common::apply(&mut sink, vec![common::txn(3, vec![row(3)])]).unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    c.query_drop("ROLLBACK").unwrap();
    common::apply(&mut sink, vec![common::txn(3, vec![row(3)])]).unwrap();
    assert_eq!(sink.resume().unwrap().applied_above, vec![2, 3]);
    // Both spellings of the spec open the sink.
    for scheme in ["mariadb", "mysql"] {
        let name = format!("sinktest_spec_{scheme}");
        let db = fresh(&url, &name);
        let db = db.replacen("mariadb://", &format!("{scheme}://"), 1);
        let db = db.replacen("mysql://", &format!("{scheme}://"), 1);
        let spec: SinkSpec = db.parse().unwrap();
        let sink = spec.open(&name, None).unwrap();
        assert_eq!(sink.resume().unwrap(), Default::default());
    }
}

#[test]
fn simulator_on_mariadb() {
    let Some(url) = url() else { return };
    for (mode, seed) in [(Mode::Global, 0), (Mode::Causal, 100), (Mode::Weak, 300)] {
        sim::simulate(mode, seed..seed + 1, |_| {}, &mut |seed| {
            open(fresh(&url, &format!("sinktest_sim_{seed}")), "sim")
        });
    }
}

#[test]
fn mariadb_parallel_batches() {
    let Some(url) = url() else { return };
    let db = fresh(&url, "sinktest_parallel");
    common::parallel_batches(move || MariaDbSink::connect(&db, "sub").expect("connect"));
}
