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
        row: vec![Value::Int(k), Value::Int(v)],
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
    let (records, batch) = encode_batch(&db.read(), &writes, None, first, 1_700_000_000_000_000);
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
    let (records, _) = encode_batch(&db.read(), &[put(3, 30)], None, db.log().next_lsn(), 0);
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
