//! Appending and applying are separate steps: a batch appended by someone
//! else (as a follower appends a replicated stream) is applied with the same
//! code as a local commit and as recovery; a suffix appended but never
//! applied can be discarded; consumers see every applied batch in order.

use std::sync::{Arc, Mutex};

use aqueduct_log::{Log, Lsn, Options, SyncPolicy};
use aqueduct_tables::{
    encode_batch, AppliedBatch, Catalog, ColumnDef, CommitConsumer, Database, SchemaChange,
    TableSchema, Txn, Write,
};
use aqueduct_values::{DataType, Value};

fn open(dir: &std::path::Path) -> Database {
    let opts = Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    let (log, _) = Log::open(dir, opts).unwrap();
    Database::open(log, &mut |_| {}).unwrap().0
}

fn table() -> SchemaChange {
    let col = |name: &str| ColumnDef::new(name, DataType::Int8);
    SchemaChange::CreateTable(TableSchema {
        id: 1,
        name: "t".into(),
        columns: vec![col("k"), col("v")],
        primary_key: vec![0],
        indexes: Vec::new(),
        checks: vec![],
        foreign_keys: vec![],
        ephemeral: false,
        shard_key: None,
    })
}

fn put(k: i64, v: i64) -> Write {
    Write::Put {
        table: 1,
        key: vec![Value::Int(k)],
        row: std::sync::Arc::new(vec![Value::Int(k), Value::Int(v)]),
    }
}

/// A batch as a consumer saw it: its LSN range and each change's LSN and
/// previous version.
type SeenBatch = (Lsn, Lsn, Vec<(Lsn, Option<Lsn>)>);

#[derive(Default)]
struct Seen(Mutex<Vec<SeenBatch>>);

impl CommitConsumer for Seen {
    fn committed(&self, b: &AppliedBatch, _: &Catalog) {
        let changes = b.changes.iter().map(|c| (c.lsn, c.prev_lsn)).collect();
        self.0.lock().unwrap().push((b.first, b.last, changes));
    }
}

#[test]
fn batches_appended_elsewhere_apply_like_local_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let seen = Arc::new(Seen::default());
    db.add_consumer(seen.clone());
    let mut txn = Txn::default();
    txn.schema(table());
    txn.put(1, vec![Value::Int(1)], vec![Value::Int(1), Value::Int(10)]);
    let local = db.commit(&txn).unwrap().unwrap();
    assert_eq!(local, 2);

    // A batch encoded and appended outside the commit path, then applied.
    let writes = vec![put(1, 11), put(2, 20), put(1, 12)];
    let first = db.log().next_lsn();
    let (records, batch) = encode_batch(&db.read(), writes, None, first, 1_700_000_000_000_000);
    db.log().append(&records).unwrap();
    db.apply_appended(batch);
    assert_eq!(db.applied_lsn(), first + 2);
    let row = db
        .read()
        .table("t")
        .unwrap()
        .get(&vec![Value::Int(1)])
        .unwrap()
        .clone();
    assert_eq!(*row.row, vec![Value::Int(1), Value::Int(12)]);
    // Previous versions: key 1 was last written at LSN 2, then at `first`.
    assert_eq!(
        seen.0.lock().unwrap()[1],
        (
            first,
            first + 2,
            vec![
                (first, Some(2)),
                (first + 1, None),
                (first + 2, Some(first))
            ]
        )
    );

    // A suffix appended but never applied is discarded; applied history
    // cannot be.
    let (records, _) = encode_batch(&db.read(), vec![put(3, 30)], None, db.log().next_lsn(), 0);
    db.log().append(&records).unwrap();
    assert!(db.discard_after(db.applied_lsn() - 1).is_err());
    db.discard_after(db.applied_lsn()).unwrap();
    assert_eq!(db.log().next_lsn(), db.applied_lsn() + 1);
    let before = db.read().table("t").unwrap().len();
    drop(db);

    // Recovery applies the same batches with the same code.
    let db = open(dir.path());
    let t = db.read();
    let t = t.table("t").unwrap();
    assert_eq!(t.len(), before);
    assert_eq!(
        *t.get(&vec![Value::Int(1)]).unwrap().row,
        vec![Value::Int(1), Value::Int(12)]
    );
    assert!(t.get(&vec![Value::Int(3)]).is_none(), "the discarded row");
}

/// A restart builds the indexes once, after the rows are replayed: for
/// every indexed value, the reopened tables give the rows a model of the
/// final rows gives, and the same as the tables that applied each commit
/// as it came (puts, updates that move a row between values, deletes, and
/// an index created halfway, all seeded).
#[test]
fn indexes_built_after_a_replay_equal_those_kept_commit_by_commit() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut txn = Txn::default();
    txn.schema(table());
    db.commit(&txn).unwrap();
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    // A small linear congruential generator: the same history every run.
    let mut seed: u64 = 7;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    for round in 0..400 {
        if round == 200 {
            let mut txn = Txn::default();
            txn.schema(SchemaChange::CreateIndex {
                table: 1,
                index: aqueduct_tables::IndexDef::on_columns("t_v", vec![1], false),
            });
            db.commit(&txn).unwrap();
        }
        let mut txn = Txn::default();
        for _ in 0..1 + next(20) {
            let k = next(300) as i64;
            if next(4) == 0 {
                if model.remove(&k).is_some() {
                    txn.delete(1, vec![Value::Int(k)]);
                }
            } else {
                // Few values, so buckets of one, a few and many rows.
                let v = next(40) as i64 * next(3) as i64;
                model.insert(k, v);
                txn.put(1, vec![Value::Int(k)], vec![Value::Int(k), Value::Int(v)]);
            }
        }
        db.commit(&txn).unwrap();
    }
    let lookups = |db: &Database| -> BTreeMap<i64, Vec<i64>> {
        let catalog = db.read();
        let t = catalog.table_by_id(1).unwrap();
        (0..80)
            .map(|v| {
                let keys = t
                    .index_rows(0, &[Value::Int(v)])
                    .map(|(k, row)| {
                        assert_eq!(row[1], Value::Int(v), "an index row of another value");
                        match k[0] {
                            Value::Int(k) => k,
                            _ => unreachable!(),
                        }
                    })
                    .collect();
                (v, keys)
            })
            .filter(|(_, keys): &(i64, Vec<i64>)| !keys.is_empty())
            .collect()
    };
    let mut expected: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (&k, &v) in &model {
        expected.entry(v).or_default().push(k);
    }
    let live = lookups(&db);
    assert_eq!(live, expected, "the live index disagrees with the model");
    let live_bytes = db.read().table_by_id(1).unwrap().bytes;
    drop(db);
    let reopened = open(dir.path());
    assert_eq!(
        lookups(&reopened),
        expected,
        "the index built after the replay disagrees with the model"
    );
    assert_eq!(
        reopened.read().table_by_id(1).unwrap().bytes,
        live_bytes,
        "the replayed table counts other bytes"
    );
    // The reopened index is maintained from here on.
    let mut txn = Txn::default();
    txn.put(
        1,
        vec![Value::Int(1000)],
        vec![Value::Int(1000), Value::Int(79)],
    );
    reopened.commit(&txn).unwrap();
    assert_eq!(lookups(&reopened).get(&79), Some(&vec![1000]));
}

/// What a transaction counts of its log as it writes is what its commit
/// appends, so the bound on a transaction's size is checked before the
/// commit finds it.
#[test]
fn a_transaction_counts_the_log_its_rows_take() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut create = Txn::default();
    create.schema(table());
    db.commit(&create).unwrap();
    let mut txn = Txn::default();
    for k in 0..50 {
        txn.put(1, vec![Value::Int(k)], vec![Value::Int(k), Value::Null]);
    }
    txn.delete(1, vec![Value::Int(7)]);
    let wide = Value::Text("x".repeat(300));
    txn.put(1, vec![Value::Int(-1)], vec![Value::Int(-1), wide]);
    let savepoint = txn.savepoint();
    let before = txn.log_bytes();
    txn.put(1, vec![Value::Int(99)], vec![Value::Int(99), Value::Int(1)]);
    assert!(txn.log_bytes() > before);
    txn.rollback_to(&savepoint);
    assert_eq!(txn.log_bytes(), before);
    let (records, _) = encode_batch(
        &db.read(),
        txn.writes().to_vec(),
        None,
        db.log().next_lsn(),
        0,
    );
    let appended: usize = records.iter().map(|r| r.encoded_len()).sum();
    assert_eq!(txn.log_bytes(), appended);
    assert!(txn.check_size().is_ok());
}
