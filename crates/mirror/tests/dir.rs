//! The directory source: a mirror of a data directory equals the tables
//! written to it, follows what is written later, resumes from a saved
//! position, and bootstraps again when compaction removed what it needs.

use std::collections::BTreeMap;
use std::path::Path;

use aqueduct_log::{Log, Options};
use aqueduct_mirror::{
    DirFollower, Key, Lsn, Mirror, MirrorChange, Position, Row, TableInfo, Tables,
};
use aqueduct_tables::{ColumnDef, Database, SchemaChange, TableSchema, Txn};
use aqueduct_values::{DataType, Value};
use rand::{rngs::StdRng, Rng, SeedableRng};

type Model = BTreeMap<String, BTreeMap<Key, Row>>;

/// A mirror that counts resets and remembers the LSNs it was told of.
#[derive(Default)]
struct Counting {
    tables: Tables,
    resets: usize,
    committed: Vec<Lsn>,
}

impl Mirror for Counting {
    fn reset(&mut self) {
        self.resets += 1;
        self.tables.reset();
    }
    fn load(&mut self, t: &TableInfo, k: &Key, r: &Row) {
        self.tables.load(t, k, r)
    }
    fn apply(&mut self, lsn: Lsn, c: &MirrorChange) {
        self.tables.apply(lsn, c)
    }
    fn committed(&mut self, lsn: Lsn) {
        self.committed.push(lsn);
    }
}

fn open(dir: &Path, segment_bytes: u64) -> Database {
    let opts = Options {
        segment_bytes,
        ..Options::default()
    };
    let (log, _) = Log::open(dir, opts).unwrap();
    Database::open(log, &mut |_| {}).unwrap().0
}

fn create(db: &Database, name: &str) -> u64 {
    let id = db.read().next_table_id();
    let col = |n: &str, ty| ColumnDef {
        name: n.into(),
        ty,
        not_null: false,
        default: None,
        default_expr: None,
        identity: None,
    };
    let mut txn = Txn::default();
    txn.schema(SchemaChange::CreateTable(TableSchema {
        id,
        name: name.into(),
        columns: vec![col("id", DataType::Int8), col("v", DataType::Text)],
        primary_key: vec![0],
        indexes: vec![],
        checks: vec![],
        foreign_keys: vec![],
        ephemeral: false,
        shard_key: None,
    }));
    db.commit(&txn).unwrap();
    id
}

/// Random transactions over `tables`, mirrored in `model`.
fn write(db: &Database, tables: &[(u64, &str)], model: &mut Model, rng: &mut StdRng, n: usize) {
    for _ in 0..n {
        write_one(db, tables, model, rng);
    }
}

/// One random transaction; returns its LSN.
fn write_one(db: &Database, tables: &[(u64, &str)], model: &mut Model, rng: &mut StdRng) -> Lsn {
    let mut txn = Txn::default();
    for _ in 0..rng.gen_range(1..4) {
        let (id, name) = tables[rng.gen_range(0..tables.len())];
        let key = vec![Value::Int(rng.gen_range(0..30))];
        let rows = model.entry(name.to_string()).or_default();
        if rng.gen_bool(0.3) {
            txn.delete(id, key.clone());
            rows.remove(&key);
        } else {
            let row = vec![
                key[0].clone(),
                Value::Text(format!("v{}", rng.gen::<u16>())),
            ];
            txn.put(id, key.clone(), row.clone());
            rows.insert(key, row);
        }
    }
    db.commit(&txn).unwrap().expect("an LSN")
}

fn assert_equal(m: &Counting, model: &Model) {
    assert!(m.tables.anomalies.is_empty(), "{:?}", m.tables.anomalies);
    for (name, rows) in model {
        let empty = BTreeMap::new();
        let mine = m.tables.tables.get(name).unwrap_or(&empty);
        assert!(mine == rows, "table {name} differs");
    }
}

#[test]
fn a_directory_mirror_loads_follows_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let mut model = Model::new();
    let db = open(dir.path(), 1 << 20);
    let t = create(&db, "t");
    let u = create(&db, "u");
    write(&db, &[(t, "t"), (u, "u")], &mut model, &mut rng, 200);

    // Read while the database holds the directory (and its lock).
    let mut f = DirFollower::new(dir.path(), Counting::default());
    assert_eq!(f.poll_once().unwrap(), 1);
    drop(db);
    assert_equal(f.mirror(), &model);
    assert_eq!(f.mirror().resets, 1);
    let saved = f.position().unwrap();
    let saved_tables = f.mirror().tables.clone();
    assert_eq!(Position::from_json(&saved.to_json()).unwrap(), saved);

    // Written later: each transaction handed over as changes.
    let db = open(dir.path(), 1 << 20);
    let w = create(&db, "w");
    write(
        &db,
        &[(t, "t"), (u, "u"), (w, "w")],
        &mut model,
        &mut rng,
        100,
    );
    drop(db);
    assert_eq!(f.poll_once().unwrap(), 101);
    assert_equal(f.mirror(), &model);
    assert_eq!(f.mirror().resets, 1);
    assert!(f.mirror().committed.windows(2).all(|p| p[0] < p[1]));
    assert_eq!(f.poll_once().unwrap(), 0);

    // A new process restores the saved data and position: it gets only
    // what came after, no snapshot.
    let restored = Counting {
        tables: saved_tables,
        ..Counting::default()
    };
    let mut r = DirFollower::resume(dir.path(), restored, saved.clone());
    assert_eq!(r.poll_once().unwrap(), 101);
    assert_equal(r.mirror(), &model);
    assert_eq!(r.mirror().resets, 0);
    assert_eq!(r.position().unwrap().lsn, f.position().unwrap().lsn);
}

#[test]
fn a_position_compaction_removed_is_bootstrapped_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(2);
    let mut model = Model::new();
    // Small segments, so there are sealed ones to compact.
    let db = open(dir.path(), 4096);
    let t = create(&db, "t");
    write(&db, &[(t, "t")], &mut model, &mut rng, 50);
    drop(db);
    let mut f = DirFollower::new(dir.path(), Counting::default());
    f.poll_once().unwrap();
    let saved = f.position().unwrap();
    let saved_tables = f.mirror().tables.clone();

    let db = open(dir.path(), 4096);
    write(&db, &[(t, "t")], &mut model, &mut rng, 400);
    db.log().seal_active().unwrap();
    db.log().compact().unwrap();
    assert!(
        db.log().exact_from() > saved.lsn + 1,
        "compaction did not pass the saved position"
    );
    drop(db);

    let restored = Counting {
        tables: saved_tables,
        ..Counting::default()
    };
    let mut r = DirFollower::resume(dir.path(), restored, saved);
    assert_eq!(r.poll_once().unwrap(), 1, "one bootstrap");
    assert_eq!(r.mirror().resets, 1);
    assert_equal(r.mirror(), &model);
}

#[test]
fn a_follower_compaction_passed_while_it_followed_bootstraps_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = Model::new();
    let db = open(dir.path(), 4096);
    let t = create(&db, "t");
    write(&db, &[(t, "t")], &mut model, &mut rng, 50);
    let mut f = DirFollower::new(dir.path(), Counting::default());
    assert_eq!(f.poll_once().unwrap(), 1);
    assert_equal(f.mirror(), &model);

    // The follower lags; the database (still open) compacts past it.
    let at = f.position().unwrap().lsn;
    write(&db, &[(t, "t")], &mut model, &mut rng, 400);
    db.log().seal_active().unwrap();
    db.log().compact().unwrap();
    assert!(
        db.log().exact_from() > at + 1,
        "compaction did not pass the follower"
    );
    assert_eq!(f.poll_once().unwrap(), 1, "one bootstrap, no changes");
    assert_eq!(f.mirror().resets, 2);
    assert_equal(f.mirror(), &model);

    // And it follows on from there.
    write(&db, &[(t, "t")], &mut model, &mut rng, 20);
    assert_eq!(f.poll_once().unwrap(), 20);
    assert_equal(f.mirror(), &model);
}

#[test]
fn mirrors_follow_and_bootstrap_from_a_database_that_writes_and_compacts_meanwhile() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(open(dir.path(), 4096));
    let t = create(&db, "t");
    let u = create(&db, "u");
    let done = Arc::new(AtomicBool::new(false));
    // The tables as of each transaction's LSN.
    let models = Arc::new(std::sync::Mutex::new(BTreeMap::<Lsn, Model>::new()));
    let writer = {
        let (db, done, models) = (db.clone(), done.clone(), models.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(4);
            let mut model = Model::new();
            for _ in 0..60 {
                for _ in 0..25 {
                    let lsn = write_one(&db, &[(t, "t"), (u, "u")], &mut model, &mut rng);
                    models.lock().unwrap().insert(lsn, model.clone());
                }
                db.log().seal_active().unwrap();
            }
            done.store(true, Ordering::Relaxed);
            model
        })
    };
    let compactor = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            let mut passes = 0;
            while !done.load(Ordering::Relaxed) {
                db.log().compact().unwrap();
                passes += 1;
            }
            passes
        })
    };
    // One follower from the start; a new one bootstrapping at each round.
    let mut first = DirFollower::new(dir.path(), Counting::default());
    let mut late = Vec::new();
    let mut checked = 0;
    while !done.load(Ordering::Relaxed) {
        // A poll may give up after replays that compaction kept
        // overlapping; the next one starts again.
        let _ = first.poll_once();
        let mut f = DirFollower::new(dir.path(), Counting::default());
        if f.poll_once().is_ok() {
            // Bootstrapped exactly as of its position.
            let at = f.position().unwrap().lsn;
            if let Some(m) = models.lock().unwrap().get(&at) {
                assert_equal(f.mirror(), m);
                checked += 1;
            }
            late.push(f);
        }
    }
    let model = writer.join().unwrap();
    let passes = compactor.join().unwrap();
    assert!(passes > 1, "compaction ran {passes} times");
    assert!(db.log().exact_from() > 1, "nothing was compacted");
    assert!(
        checked > 1,
        "{checked} bootstraps checked during the writes"
    );
    first.poll_once().unwrap();
    assert_equal(first.mirror(), &model);
    for f in &mut late {
        f.poll_once().unwrap();
        assert_equal(f.mirror(), &model);
    }
}
