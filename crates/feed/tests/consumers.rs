//! Durable consumers hold the log; past a cap they are dropped and told
//! so; a subscriber that stops reading holds no memory for its lag.

use std::sync::Arc;
use std::time::Duration;

use aqueduct_feed::{Feed, FeedError, FeedOptions};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_tables::{ColumnDef, Database, SchemaChange, TableSchema, Txn};
use aqueduct_values::{DataType, Value};

fn open(dir: &std::path::Path, segment_bytes: u64) -> Database {
    let opts = Options {
        sync: SyncPolicy::Never,
        segment_bytes,
        ..Options::default()
    };
    let (log, _) = Log::open(dir, opts).expect("open log");
    Database::open(log, &mut |_| {}).expect("open tables").0
}

fn create_table(db: &Database) {
    let col = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
        default_expr: None,
        identity: None,
    };
    let mut txn = Txn::default();
    txn.schema(SchemaChange::CreateTable(TableSchema {
        id: 1,
        name: "t".into(),
        columns: vec![col("k", DataType::Int8), col("v", DataType::Text)],
        primary_key: vec![0],
        indexes: Vec::new(),
        checks: vec![],
        foreign_keys: vec![],
        ephemeral: false,
        shard_key: None,
    }));
    db.commit(&txn).unwrap();
}

/// Rewrites keys 0..keys over and over: the tables stay the same size.
fn update(db: &Database, n: usize, keys: i64, payload: &str) {
    for i in 0..n {
        let k = i as i64 % keys;
        let mut txn = Txn::default();
        txn.put(
            1,
            vec![Value::Int(k)],
            vec![Value::Int(k), Value::Text(format!("{payload}{i}"))],
        );
        db.commit(&txn).unwrap();
    }
}

#[test]
fn a_consumer_with_caps_of_its_own_is_dropped_past_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 8 << 10);
    create_table(&db);
    // No cap for the feed; one consumer has its own (as a publication's
    // subscribers do), the other none.
    let feed = Feed::attach(&db, FeedOptions::default()).unwrap();
    feed.set_caps_of(std::sync::Arc::new(|name: &str| {
        (name == "capped").then_some(aqueduct_feed::ConsumerCaps {
            max_bytes: Some(64 << 10),
            max_age: None,
        })
    }));
    feed.register("capped", None).unwrap();
    feed.register("free", None).unwrap();
    update(&db, 3000, 20, "a longer payload to fill the log ");
    feed.enforce_caps_now();
    let dropped = |n: &str| {
        feed.consumers()
            .into_iter()
            .find(|c| c.name == n)
            .unwrap()
            .dropped
            .is_some()
    };
    assert!(dropped("capped"));
    assert!(!dropped("free"));
}

#[test]
fn a_consumer_behind_keeps_the_log_until_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 8 << 10);
    create_table(&db);
    let options = FeedOptions {
        memory_bytes: 4 << 10,
        consumer_max_bytes: Some(1 << 20),
        ..FeedOptions::default()
    };
    let feed = Feed::attach(&db, options).unwrap();
    let held = feed.register("behind", None).unwrap();
    update(&db, 3000, 20, "x");
    db.log().seal_active().unwrap();
    db.log().compact().unwrap();
    // Compaction kept everything the consumer needs.
    assert!(db.log().exact_from() <= held.next_lsn);
    let mut sub = feed.subscribe_as("behind", None).unwrap();
    let mut n = 0;
    while let Some(m) = sub.recv(Duration::ZERO).unwrap() {
        assert!(m.first_lsn >= held.next_lsn);
        n += 1;
    }
    assert_eq!(n, 3000, "every commit after registering");
    drop(sub);
    assert_eq!(feed.consumers()[0].lag, 3000);

    // Past the cap in bytes of log held, it is dropped and told so.
    update(&db, 6000, 20, "a longer payload to fill the log ");
    feed.enforce_caps_now();
    let err = match feed.subscribe_as("behind", None) {
        Err(e) => e,
        Ok(_) => panic!("a dropped consumer subscribed"),
    };
    assert!(matches!(err, FeedError::ConsumerDropped { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("bootstrap again"), "{text}");
    assert!(text.contains("the cap is 1048576 bytes"), "{text}");
    assert!(feed.consumers()[0].dropped.is_some());
    // Its hold is gone, so compaction now passes its old position.
    db.log().seal_active().unwrap();
    db.log().compact().unwrap();
    assert!(db.log().exact_from() > held.next_lsn);
    // The registry survives a restart: the consumer is still dropped.
    drop(feed);
    drop(db);
    let db = open(dir.path(), 8 << 10);
    let feed = Feed::attach(&db, FeedOptions::default()).unwrap();
    assert!(matches!(
        feed.subscribe_as("behind", None),
        Err(FeedError::ConsumerDropped { .. })
    ));
    // Registering anew starts it over.
    feed.unregister("behind").unwrap();
    feed.register("behind", None).unwrap();
    assert!(feed.subscribe_as("behind", None).is_ok());
}

#[test]
fn a_named_consumer_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 8 << 10);
    create_table(&db);
    let feed = Feed::attach(&db, FeedOptions::default()).unwrap();
    feed.register("c", None).unwrap();
    update(&db, 100, 10, "v");
    let mut sub = feed.subscribe_as("c", None).unwrap();
    let mut last = 0;
    for _ in 0..40 {
        last = sub.recv(Duration::ZERO).unwrap().unwrap().lsn;
    }
    sub.ack(last).unwrap();
    drop(sub);
    drop(feed);
    drop(db);
    let db = open(dir.path(), 8 << 10);
    // The feed puts the consumer's hold back before anything compacts (the
    // server attaches it before starting compaction).
    let feed = Feed::attach(&db, FeedOptions::default()).unwrap();
    db.log().seal_active().unwrap();
    db.log().compact().unwrap();
    let mut sub = feed.subscribe_as("c", None).unwrap();
    let first = sub.recv(Duration::ZERO).unwrap().unwrap();
    assert_eq!(first.first_lsn, last + 1, "resumes right after its ack");
    let mut n = 1;
    while sub.recv(Duration::ZERO).unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 60);
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A subscriber that stops reading costs no memory for its lag: the feed
/// keeps a bounded window and the subscriber later reads the rest from
/// the log. (Memory is measured, not time: writers never wait on the feed,
/// whose publish step is a push into the bounded window.)
#[test]
fn a_stalled_subscriber_holds_no_memory() {
    const WINDOW: usize = 2 << 20;
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 4 << 20);
    create_table(&db);
    let options = FeedOptions {
        memory_bytes: WINDOW,
        ..FeedOptions::default()
    };
    let feed = Feed::attach(&db, options).unwrap();
    let mut stalled = feed.subscribe(0, None).unwrap();
    let payload = "p".repeat(400);
    update(&db, 20_000, 500, &payload);
    let before = rss_bytes();
    // About 100 MB of messages go by while the subscriber reads nothing.
    update(&db, 200_000, 500, &payload);
    let grown = rss_bytes().saturating_sub(before);
    assert!(feed.memory_bytes() <= WINDOW, "{}", feed.memory_bytes());
    assert!(
        grown < 48 << 20,
        "memory grew by {} MiB while a subscriber stalled",
        grown >> 20
    );
    // It then reads everything, from the log, in order.
    let mut n = 0u64;
    let mut last = 0;
    while let Some(m) = stalled.recv(Duration::ZERO).unwrap() {
        assert!(m.first_lsn > last);
        last = m.lsn;
        n += 1;
    }
    assert_eq!(n, 220_001, "the table's creation and every update");
    let _ = Arc::clone(&feed);
}
