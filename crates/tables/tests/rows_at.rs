//! `Database::rows_at` reads clones of the tables while commits go on;
//! every result must equal the rows of an in-memory model of the tables at
//! the LSN the read returns.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use aqueduct_log::{Log, Lsn, Options, SyncPolicy};
use aqueduct_tables::{
    ColumnDef, Database, IndexDef, Key, Row, RowsAsk, SchemaChange, TableId, TableSchema, Txn,
};
use aqueduct_values::{DataType, Value};

const VALUES: i64 = 3;
const ROWS_PER_TABLE: usize = 120;
/// Writes go on until this many reads overlapped commits (or `MAX_WRITES`).
const READS: usize = 100;
const MAX_WRITES: usize = 500_000;

fn column(name: &str) -> ColumnDef {
    ColumnDef::new(name, DataType::Int8)
}

fn schema(id: TableId, name: &str, primary_key: Vec<usize>, index: bool) -> TableSchema {
    TableSchema {
        id,
        name: name.into(),
        columns: vec![column("a"), column("b")],
        primary_key,
        indexes: if index {
            vec![IndexDef::on_columns(format!("{name}_a"), vec![0], false)]
        } else {
            Vec::new()
        },
        ..TableSchema::default()
    }
}

/// A tiny deterministic generator (the test needs no statistical quality).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

type Model = BTreeMap<(TableId, Key), Row>;
type History = Vec<(Lsn, TableId, Key, Option<Row>)>;

fn commit(db: &Database, history: &Mutex<History>, table: TableId, key: Key, row: Option<Row>) {
    let mut txn = Txn::default();
    match &row {
        Some(r) => txn.put(table, key.clone(), r.clone()),
        None => txn.delete(table, key.clone()),
    }
    let lsn = db.commit(&txn).expect("commit").expect("a write");
    history.lock().unwrap().push((lsn, table, key, row));
}

#[test]
fn reads_equal_the_model_at_their_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    let (log, _) = Log::open(dir.path(), opts).unwrap();
    let (db, _) = Database::open(log, &mut |_| {}).unwrap();
    let db = Arc::new(db);
    // By index (hidden row ids), by scan (no index), by primary key.
    let tables = [
        schema(1, "indexed", Vec::new(), true),
        schema(2, "scanned", Vec::new(), false),
        schema(3, "keyed", vec![0], false),
    ];
    let mut txn = Txn::default();
    for t in &tables {
        txn.schema(SchemaChange::CreateTable(t.clone()));
    }
    db.commit(&txn).unwrap();

    let history: Arc<Mutex<History>> = Arc::default();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut live: Vec<(TableId, Key)> = Vec::new();
    let new_row = |rng: &mut Rng, t: TableId, key: &Key| -> Row {
        if t == 3 {
            // The primary key is column a.
            vec![key[0].clone(), Value::Int(rng.below(100) as i64)]
        } else {
            vec![
                Value::Int(rng.below(VALUES as u64) as i64),
                Value::Int(rng.below(100) as i64),
            ]
        }
    };
    let new_key = |rng: &mut Rng, t: TableId| -> Key {
        if t == 3 {
            vec![Value::Int(rng.below(VALUES as u64) as i64)]
        } else {
            vec![Value::Int(db.allocate_rowid())]
        }
    };
    for t in [1, 2] {
        for _ in 0..ROWS_PER_TABLE {
            let key = new_key(&mut rng, t);
            let row = new_row(&mut rng, t, &key);
            commit(&db, &history, t, key.clone(), Some(row));
            live.push((t, key));
        }
    }

    // Each table by its column a, every row and counted.
    let asks: Vec<RowsAsk> = (0..VALUES)
        .flat_map(|v| {
            [1, 2, 3].into_iter().flat_map(move |table| {
                [false, true].map(|counted| (table, vec![0], vec![Value::Int(v)], counted))
            })
        })
        .collect();

    let writing = Arc::new(AtomicBool::new(true));
    let overlapped = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (db, writing, overlapped, asks) = (
            db.clone(),
            writing.clone(),
            overlapped.clone(),
            asks.clone(),
        );
        thread::spawn(move || {
            let mut reads = Vec::new();
            while writing.load(Ordering::Relaxed) {
                let before = db.applied_lsn();
                let read = db.rows_at(&asks);
                // Commits ran while it read.
                if read.1 > before {
                    overlapped.fetch_add(1, Ordering::Relaxed);
                }
                reads.push(read);
            }
            reads
        })
    };
    let mut writes = 0;
    while overlapped.load(Ordering::Relaxed) < READS && writes < MAX_WRITES {
        writes += 1;
        let t = 1 + rng.below(3);
        match rng.below(3) {
            // Insert (or, keyed, overwrite).
            0 => {
                let key = new_key(&mut rng, t);
                let row = new_row(&mut rng, t, &key);
                commit(&db, &history, t, key.clone(), Some(row));
                live.push((t, key));
            }
            // Update in place: a row may move to another value of a.
            1 if !live.is_empty() => {
                let (t, key) = live[rng.below(live.len() as u64) as usize].clone();
                let row = new_row(&mut rng, t, &key);
                commit(&db, &history, t, key, Some(row));
            }
            _ if !live.is_empty() => {
                let (t, key) = live.swap_remove(rng.below(live.len() as u64) as usize);
                commit(&db, &history, t, key, None);
            }
            _ => {}
        }
    }
    writing.store(false, Ordering::Relaxed);
    let reads = reader.join().unwrap();

    // Replay the history up to each read's LSN and compare.
    let history = history.lock().unwrap();
    let mut by_lsn: Vec<(Lsn, usize)> = reads
        .iter()
        .enumerate()
        .map(|(i, (_, lsn))| (*lsn, i))
        .collect();
    by_lsn.sort();
    let mut model = Model::new();
    let mut next = 0;
    for (lsn, i) in by_lsn {
        while next < history.len() && history[next].0 <= lsn {
            let (_, t, key, row) = &history[next];
            match row {
                Some(r) => model.insert((*t, key.clone()), r.clone()),
                None => model.remove(&(*t, key.clone())),
            };
            next += 1;
        }
        for (ask, got) in asks.iter().zip(&reads[i].0) {
            let (table, _, values, counted) = ask;
            let want: Vec<(&Row, i64)> = model
                .iter()
                .filter(|((t, _), r)| t == table && r[0] == values[0])
                .map(|(_, r)| (r, 1))
                .collect();
            // Counted: the first row stands for all of them.
            let want = match want.first() {
                Some(&(first, _)) if *counted => vec![(first, want.len() as i64)],
                _ => want,
            };
            let got: Vec<(&Row, i64)> = got.iter().map(|(r, w)| (&**r, *w)).collect();
            assert_eq!(got, want, "read {i} of {ask:?} at LSN {lsn}");
        }
    }
    let overlapped = overlapped.load(Ordering::Relaxed);
    assert!(
        overlapped >= READS,
        "only {overlapped} reads overlapped commits in {writes} writes"
    );
}
