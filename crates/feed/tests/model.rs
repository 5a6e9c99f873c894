//! Model-based test of the change feed: random workloads with aborted
//! transactions, DDL and compaction. Checks that
//! - the feed from LSN 0, applied to an empty model, gives the tables as the
//!   log replays them (a fresh `Database::open`);
//! - a subscriber starting at any LSN the log holds exactly sees exactly the
//!   suffix of what a subscriber that followed live saw, whether it reads
//!   from memory or from the log;
//! - a named consumer that is behind keeps compaction from passing it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_feed::{Change, ChangeMessage, Feed, FeedError, FeedOptions, Subscription};
use aqueduct_log::{Log, Lsn, Options, SyncPolicy};
use aqueduct_tables::{
    ColumnDef, Database, Key, Row, SchemaChange, TableError, TableId, TableSchema, Txn,
};
use aqueduct_values::{DataType, Value};

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn schema(id: TableId) -> TableSchema {
    let col = |name: &str| ColumnDef::new(name, DataType::Int8);
    TableSchema {
        id,
        name: format!("t{id}"),
        columns: vec![col("k"), col("v")],
        primary_key: vec![0],
        indexes: Vec::new(),
        ..TableSchema::default()
    }
}

type State = BTreeMap<(TableId, Key), Row>;

fn apply(state: &mut State, msg: &ChangeMessage) {
    for c in &msg.changes {
        match c {
            Change::Row {
                table, key, new, ..
            } => match new {
                Some(row) => {
                    state.insert((table.id, key.clone()), (**row).clone());
                }
                None => {
                    state.remove(&(table.id, key.clone()));
                }
            },
            Change::Schema {
                change: SchemaChange::DropTable { id },
                ..
            } => state.retain(|(t, _), _| t != id),
            Change::Schema { .. } => {}
        }
    }
}

fn tables_of(db: &Database) -> State {
    let catalog = db.read();
    let mut s = State::new();
    for t in catalog.tables.values() {
        for (k, v) in t.scan() {
            s.insert((t.schema.id, k.clone()), (*v.row).clone());
        }
    }
    s
}

fn drain(sub: &mut Subscription) -> Vec<Arc<ChangeMessage>> {
    let mut out = Vec::new();
    while let Some(m) = sub.recv(Duration::ZERO).expect("recv") {
        out.push(m);
    }
    out
}

fn open(dir: &std::path::Path) -> Database {
    let opts = Options {
        sync: SyncPolicy::Never,
        segment_bytes: 16 << 10,
        ..Options::default()
    };
    let (log, _) = Log::open(dir, opts).expect("open log");
    Database::open(log, &mut |_| {}).expect("open tables").0
}

fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let options = FeedOptions {
        // Small, so subscribers often read the log.
        memory_bytes: 8 << 10,
        ..FeedOptions::default()
    };
    let feed = Feed::attach(&db, options).unwrap();
    let mut live = feed.subscribe(0, None).unwrap();
    feed.register("slow", None).unwrap();
    let mut slow_acked: Lsn = 0;
    let mut rng = Rng(seed | 1);
    let mut tables: Vec<TableId> = Vec::new();
    let mut next_id: TableId = 1;
    let mut seen: Vec<Arc<ChangeMessage>> = Vec::new();
    let mut aborted = 0;
    let mut compactions = 0;
    for step in 0..steps {
        let dice = rng.below(100);
        if step == steps / 3 {
            // From here on batches carry their txn_deps record.
            let mut txn = Txn::default();
            txn.schema(SchemaChange::CreatePublication(
                aqueduct_tables::PublicationDef {
                    id: 1_000_000,
                    name: "p".into(),
                    mode: aqueduct_tables::Mode::Causal,
                    dep_slots: 1024,
                    publish: Default::default(),
                    max_lag_bytes: None,
                    max_lag_age_s: None,
                    all_tables: true,
                    objects: Vec::new(),
                },
            ));
            db.commit(&txn).unwrap();
        } else if tables.is_empty() || dice < 4 {
            let mut txn = Txn::default();
            txn.schema(SchemaChange::CreateTable(schema(next_id)));
            db.commit(&txn).unwrap();
            tables.push(next_id);
            next_id += 1;
        } else if dice < 6 && tables.len() > 1 {
            let t = tables.remove(rng.below(tables.len() as u64) as usize);
            let mut txn = Txn::default();
            txn.schema(SchemaChange::DropTable { id: t });
            db.commit(&txn).unwrap();
        } else if dice < 10 {
            // A transaction that read a row someone else then wrote: 40001.
            let t = tables[rng.below(tables.len() as u64) as usize];
            let key = vec![Value::Int(rng.below(30) as i64)];
            let mut txn = Txn::default();
            txn.note_row_read(&db.read(), t, &key);
            txn.put(t, key.clone(), vec![key[0].clone(), Value::Int(-1)]);
            let mut other = Txn::default();
            other.put(
                t,
                key.clone(),
                vec![key[0].clone(), Value::Int(step as i64)],
            );
            db.commit(&other).unwrap();
            assert!(matches!(
                db.commit(&txn),
                Err(TableError::SerializationFailure)
            ));
            aborted += 1;
        } else if dice < 12 {
            db.log().seal_active().unwrap();
            db.log().compact().unwrap();
            compactions += 1;
        } else {
            let mut txn = Txn::default();
            txn.origin = aqueduct_tables::TxnOrigin {
                session: rng.below(5),
                user: format!("u{}", rng.below(3)),
                origins: Vec::new(),
            };
            let t = tables[rng.below(tables.len() as u64) as usize];
            txn.note_row_read(&db.read(), t, &vec![Value::Int(rng.below(30) as i64)]);
            // Now and then a transaction too large for the feed's memory,
            // which subscribers then read from the log.
            let (writes, keys) = if rng.below(40) == 0 {
                (200, 300)
            } else {
                (rng.below(4) + 1, 30)
            };
            for _ in 0..writes {
                let t = tables[rng.below(tables.len() as u64) as usize];
                let key = vec![Value::Int(rng.below(keys) as i64)];
                if rng.below(4) == 0 {
                    txn.delete(t, key);
                } else {
                    let row = vec![key[0].clone(), Value::Int(rng.below(1000) as i64)];
                    txn.put(t, key, row);
                }
            }
            db.commit(&txn).unwrap();
        }
        if rng.below(3) == 0 {
            seen.extend(drain(&mut live));
        }
        if step % 300 == 299 {
            // The slow consumer acknowledges what was committed long ago.
            slow_acked = seen
                .get(seen.len().saturating_sub(40))
                .map_or(slow_acked, |m| m.lsn);
            feed.ack("slow", slow_acked).unwrap();
        }
    }
    seen.extend(drain(&mut live));
    assert!(aborted > 0 && compactions > 0);
    let with_deps = seen.iter().filter(|m| m.deps.is_some()).count();
    assert!(with_deps > 0, "no batch carried its txn_deps record");

    // The live subscriber saw every commit, in order, each once.
    for w in seen.windows(2) {
        assert!(w[0].lsn < w[1].first_lsn, "out of order or repeated");
    }
    assert_eq!(seen.last().unwrap().lsn, db.applied_lsn());

    // Applied to an empty model, what it saw is the tables.
    let mut state = State::new();
    for m in &seen {
        apply(&mut state, m);
    }
    let tables_now = tables_of(&db);
    assert_eq!(state, tables_now, "the live feed differs from the tables");

    // The feed from LSN 0 (the log as compaction left it) replays to the
    // same tables, as does a fresh open of the log.
    let mut from_zero = feed.subscribe(0, None).unwrap();
    let mut state0 = State::new();
    for m in drain(&mut from_zero) {
        apply(&mut state0, &m);
    }
    assert_eq!(
        state0, tables_now,
        "the feed from LSN 0 differs from the tables"
    );

    // Any start the log holds exactly: exactly the live suffix.
    let exact = db.log().exact_from();
    let head = db.applied_lsn();
    for i in 0..25 {
        let from = exact + rng.below(head - exact + 2);
        let mut sub = feed.subscribe(from, None).unwrap();
        let got = drain(&mut sub);
        let want: Vec<_> = seen.iter().filter(|m| m.first_lsn >= from).collect();
        assert_eq!(got.len(), want.len(), "start {from} (try {i})");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(**g, **w, "start {from}: message at LSN {} differs", w.lsn);
        }
    }
    // Below the exact point (and not the very beginning): refused.
    if exact > 2 {
        match feed.subscribe(exact - 1, None) {
            Err(FeedError::Gone { .. }) => {}
            Err(e) => panic!("expected Gone, got {e}"),
            Ok(_) => panic!("expected Gone, got a subscription"),
        }
    }

    // The slow consumer kept compaction from passing it, and reads exactly
    // the suffix from its position.
    assert!(exact <= slow_acked + 1, "compaction passed a held position");
    let mut slow = feed.subscribe_as("slow", None).unwrap();
    let got = drain(&mut slow);
    let want: Vec<_> = seen.iter().filter(|m| m.first_lsn > slow_acked).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(**g, **w);
    }

    drop((live, from_zero, slow));
    drop(feed);
    drop(db);
    let reopened = open(dir.path());
    assert_eq!(tables_of(&reopened), tables_now, "replay differs");
}

#[test]
fn feed_equals_the_log_and_every_suffix() {
    for seed in [1, 7, 42] {
        run(seed, 1500);
    }
}
