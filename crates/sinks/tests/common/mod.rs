//! Cases every storing sink must pass, written once over [`Store`] and
//! run by each sink's test file: [`all`] for the SQL sinks, [`all_schemaless`]
//! for sinks that store what each change carries without a schema
//! (Redis), which cannot refuse a value of the wrong type or an attribute
//! outside the shape, and apply schema changes to each row at its next
//! write (their own test file has that case).

#![allow(dead_code, unused_macros)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_publish::{
    AttributeType, Change, ChangeOp, Lsn, ObjectSchema, SchemaChange, SchemaMessage, TxnMessage,
};
use aqueduct_sinks::{Identity, Rows};
use aqueduct_subscribe::{ErrorClass, Item, Record, Resume, SchemaPos, Sink, SinkError};
use serde_json::{json, Map, Value};

pub mod agent;

/// A storing sink whose rows the cases can read back.
pub trait Store: Sink {
    fn rows_of(&self, object: &str) -> Rows;
    fn objects_of(&self) -> Vec<String>;
}

/// A SQL sink, which also keeps the subscription's identity.
pub trait SqlStore: Store {
    fn identity_of(&self) -> Identity;
    fn set_identity_of(&mut self, id: &Identity);
}

/// Implements [`Store`] for sinks with `rows` and `objects` methods.
macro_rules! store {
    ($($sink:ty),*) => {$(
        impl $crate::common::Store for $sink {
            fn rows_of(&self, object: &str) -> aqueduct_sinks::Rows {
                self.rows(object).expect("rows")
            }

            fn objects_of(&self) -> Vec<String> {
                self.objects().expect("objects").into_keys().collect()
            }
        }
    )*};
}

/// Implements [`Store`] and [`SqlStore`] for SQL sinks.
macro_rules! sql_store {
    ($($sink:ty),*) => {$(
        store!($sink);

        impl $crate::common::SqlStore for $sink {
            fn identity_of(&self) -> aqueduct_sinks::Identity {
                self.identity().expect("identity")
            }

            fn set_identity_of(&mut self, id: &aqueduct_sinks::Identity) {
                self.set_identity(id).expect("set identity")
            }
        }
    )*};
}

/// The value of the environment variable `var` naming a server, or `None`
/// after a note that the tests of `what` are skipped.
pub fn env_url(var: &str, what: &str) -> Option<String> {
    let url = std::env::var(var).ok();
    if url.is_none() {
        println!("{var} is not set: {what} tests skipped");
    }
    url
}

/// A name no earlier run used, starting with `tag`.
pub fn unique_name(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}_{}_{nanos}", std::process::id())
}

/// Opens a case's sink with `open`, again on each call.
pub fn opener<S: Store + 'static>(mut open: impl FnMut() -> S + 'static) -> Opener {
    Box::new(move || Box::new(open()) as Box<dyn Store>)
}

/// Opens the sink under test: a fresh one on the first call, the same
/// database again on each later call (a restart after a crash).
pub type Open<'a> = &'a mut dyn FnMut() -> Box<dyn Store>;

pub fn shape(attrs: &[(&str, &str)], key: &[&str]) -> ObjectSchema {
    ObjectSchema {
        attributes: attrs
            .iter()
            .map(|(n, t)| AttributeType {
                name: n.to_string(),
                ty: t.to_string(),
            })
            .collect(),
        key: key.iter().map(|k| k.to_string()).collect(),
    }
}

pub fn posts() -> BTreeMap<String, ObjectSchema> {
    BTreeMap::from([(
        "posts".to_string(),
        shape(&[("id", "bigint"), ("body", "text")], &["id"]),
    )])
}

pub fn attrs(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

pub fn change(object: &str, op: ChangeOp, key: Value, a: Option<Value>, version: Lsn) -> Change {
    Change {
        object: object.into(),
        op,
        key: vec![key],
        attrs: a.map(attrs),
        version,
        prev_version: None,
    }
}

pub fn txn(lsn: Lsn, changes: Vec<Change>) -> Item {
    Item::Txn(Arc::new(TxnMessage {
        lsn,
        first_lsn: lsn,
        txid: format!("test:{lsn}"),
        commit_time: "2025-01-01T00:00:00.000000Z".into(),
        epoch: 0,
        frame: 0,
        last: true,
        deps: None,
        bootstrap: false,
        changes,
        origin: None,
    }))
}

pub fn schema(lsn: Lsn, object: &str, change: SchemaChange) -> Item {
    Item::Schema(
        Arc::new(SchemaMessage {
            lsn,
            epoch: 0,
            object: object.into(),
            change,
        }),
        SchemaPos { lsn, seq: 0 },
    )
}

/// Applies items recording each as applied, as an in-apply agent does.
pub fn apply(sink: &mut dyn Store, items: Vec<Item>) -> Result<(), SinkError> {
    let record = Record {
        applied: items
            .iter()
            .filter(|i| !matches!(i, Item::Schema(..)))
            .map(Item::lsn)
            .collect(),
        watermark: None,
        schema: items.iter().rev().find_map(|i| match i {
            Item::Schema(_, pos) => Some(*pos),
            _ => None,
        }),
    };
    sink.apply(&items, &record)
}

fn upsert(id: i64, body: &str, version: Lsn) -> Change {
    change(
        "posts",
        ChangeOp::Update,
        json!(id),
        Some(json!({"id": id, "body": body})),
        version,
    )
}

fn body(rows: &Rows, id: i64) -> Option<(Lsn, Value)> {
    rows.get(&format!("[{id}]"))
        .map(|(v, a)| (*v, a.get("body").cloned().unwrap_or(Value::Null)))
}

pub fn guarded_upsert(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(&mut *s, vec![txn(10, vec![upsert(1, "new", 10)])]).unwrap();
    // An older write of the same row, applied later (weak order).
    apply(&mut *s, vec![txn(7, vec![upsert(1, "old", 7)])]).unwrap();
    assert_eq!(body(&s.rows_of("posts"), 1), Some((10, json!("new"))));
    // The same version again changes nothing either; a newer one wins.
    apply(&mut *s, vec![txn(12, vec![upsert(1, "newer", 12)])]).unwrap();
    assert_eq!(body(&s.rows_of("posts"), 1), Some((12, json!("newer"))));
}

pub fn tombstone_blocks_late_insert(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(&mut *s, vec![txn(5, vec![upsert(1, "a", 5)])]).unwrap();
    let del = change("posts", ChangeOp::Delete, json!(1), None, 9);
    apply(&mut *s, vec![txn(9, vec![del])]).unwrap();
    assert!(s.rows_of("posts").is_empty());
    // An insert older than the delete arrives late: kept out.
    let late = change(
        "posts",
        ChangeOp::Insert,
        json!(1),
        Some(json!({"id": 1, "body": "late"})),
        7,
    );
    apply(&mut *s, vec![txn(7, vec![late])]).unwrap();
    assert!(s.rows_of("posts").is_empty());
    // A delete older than the row leaves it, and no tombstone keeps a newer
    // insert out.
    apply(&mut *s, vec![txn(11, vec![upsert(2, "b", 11)])]).unwrap();
    let old_del = change("posts", ChangeOp::Delete, json!(2), None, 8);
    apply(&mut *s, vec![txn(8, vec![old_del])]).unwrap();
    assert_eq!(body(&s.rows_of("posts"), 2), Some((11, json!("b"))));
    // A newer insert brings row 1 back.
    apply(&mut *s, vec![txn(13, vec![upsert(1, "again", 13)])]).unwrap();
    assert_eq!(body(&s.rows_of("posts"), 1), Some((13, json!("again"))));
    // The watermark passing the tombstone deletes it; the row stays.
    s.store_position(14, &[], None).unwrap();
    assert_eq!(s.resume().unwrap().watermark, 14);
    assert_eq!(s.rows_of("posts").len(), 2);
}

/// Several transactions of one batch writing rows of one object (in
/// PostgreSQL, one statement): each key ends at its newest version, a
/// tombstone newer than a write keeps it out, and a row newer than a
/// write keeps it.
pub fn many_writes_in_one_batch(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(&mut *s, vec![txn(20, vec![upsert(4, "newer", 20)])]).unwrap();
    let del = change("posts", ChangeOp::Delete, json!(5), None, 21);
    apply(&mut *s, vec![txn(21, vec![del])]).unwrap();
    apply(
        &mut *s,
        vec![
            txn(12, vec![upsert(3, "c12", 12), upsert(1, "a12", 12)]),
            txn(10, vec![upsert(1, "a10", 10), upsert(2, "b10", 10)]),
            // Older than what the sink holds for 4, and than 5's delete.
            txn(15, vec![upsert(4, "stale", 15), upsert(5, "gone", 15)]),
            txn(16, vec![upsert(2, "b16", 16), upsert(6, "f16", 16)]),
        ],
    )
    .unwrap();
    let rows = s.rows_of("posts");
    assert_eq!(body(&rows, 1), Some((12, json!("a12"))));
    assert_eq!(body(&rows, 2), Some((16, json!("b16"))));
    assert_eq!(body(&rows, 3), Some((12, json!("c12"))));
    assert_eq!(body(&rows, 4), Some((20, json!("newer"))));
    assert_eq!(body(&rows, 5), None);
    assert_eq!(body(&rows, 6), Some((16, json!("f16"))));
    assert_eq!(rows.len(), 5);
}

pub fn exactly_once_across_crash(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(
        &mut *s,
        vec![
            txn(3, vec![upsert(1, "a", 3)]),
            txn(5, vec![upsert(2, "b", 5)]),
        ],
    )
    .unwrap();
    s.apply(
        &[Item::Skip { lsn: 6 }],
        &Record {
            applied: vec![6],
            watermark: Some(3),
            schema: None,
        },
    )
    .unwrap();
    drop(s);
    // The process died after the commit and before it told anyone.
    let mut s = open();
    let r = s.resume().unwrap();
    assert_eq!(
        r,
        Resume {
            watermark: 3,
            applied_above: vec![3, 5, 6],
            schema: None,
            dead_letters: vec![],
        }
    );
    // Applying one again is refused whole: its row and its `applied` row
    // roll back together.
    let err = apply(
        &mut *s,
        vec![txn(7, vec![upsert(3, "c", 7)]), txn(5, vec![])],
    )
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert_eq!(s.rows_of("posts").len(), 2);
    assert_eq!(s.resume().unwrap().applied_above, vec![3, 5, 6]);
    // The watermark moves past them: `applied` below it is deleted.
    s.apply(
        &[],
        &Record {
            applied: vec![],
            watermark: Some(6),
            schema: None,
        },
    )
    .unwrap();
    assert_eq!(s.resume().unwrap().applied_above, vec![6]);
    // Dead letters are kept and forgotten with the position.
    s.store_dead_letter(8, &SinkError::permanent("bad"), 8)
        .unwrap();
    s.store_dead_letter(8, &SinkError::permanent("bad"), 9)
        .unwrap();
    assert_eq!(open().resume().unwrap().dead_letters, vec![(8, 9)]);
    s.clear_dead_letter(8).unwrap();
    assert!(open().resume().unwrap().dead_letters.is_empty());
}

pub fn schema_changes(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(&mut *s, vec![txn(2, vec![upsert(1, "a", 2)])]).unwrap();
    let add = SchemaChange::AddAttribute {
        name: "likes".into(),
        ty: "bigint".into(),
        existing: json!(0),
    };
    apply(&mut *s, vec![schema(4, "posts", add)]).unwrap();
    let r = s.resume().unwrap();
    assert_eq!(r.schema, Some(SchemaPos { lsn: 4, seq: 0 }));
    assert_eq!(
        s.rows_of("posts")["[1]"].1,
        attrs(json!({"id": 1, "body": "a", "likes": 0}))
    );
    let with_likes = change(
        "posts",
        ChangeOp::Insert,
        json!(2),
        Some(json!({"id": 2, "body": "b", "likes": 5})),
        6,
    );
    apply(&mut *s, vec![txn(6, vec![with_likes])]).unwrap();
    let rename = SchemaChange::RenameAttribute {
        from: "body".into(),
        to: "text".into(),
    };
    apply(&mut *s, vec![schema(8, "posts", rename)]).unwrap();
    let drop_likes = SchemaChange::DropAttribute {
        name: "likes".into(),
    };
    apply(&mut *s, vec![schema(9, "posts", drop_likes)]).unwrap();
    let rows = s.rows_of("posts");
    assert_eq!(rows["[1]"].1, attrs(json!({"id": 1, "text": "a"})));
    assert_eq!(rows["[2]"].1, attrs(json!({"id": 2, "text": "b"})));
    // A change of the old shape is refused, not half-applied.
    let stale = change(
        "posts",
        ChangeOp::Update,
        json!(2),
        Some(json!({"id": 2, "body": "x"})),
        10,
    );
    assert!(apply(&mut *s, vec![txn(10, vec![stale])]).is_err());
    // Objects come and go.
    let add_obj = SchemaChange::AddObject {
        object: "likes".into(),
        schema: shape(&[("id", "bigint"), ("post", "bigint")], &["id"]),
    };
    apply(&mut *s, vec![schema(11, "likes", add_obj)]).unwrap();
    let like = change(
        "likes",
        ChangeOp::Insert,
        json!(1),
        Some(json!({"id": 1, "post": 2})),
        12,
    );
    apply(&mut *s, vec![txn(12, vec![like])]).unwrap();
    assert_eq!(s.rows_of("likes").len(), 1);
    let drop_obj = SchemaChange::DropObject {
        object: "likes".into(),
    };
    apply(&mut *s, vec![schema(13, "likes", drop_obj)]).unwrap();
    let r = open().resume().unwrap();
    assert_eq!(r.schema, Some(SchemaPos { lsn: 13, seq: 0 }));
    // The epoch of a later stream names the objects as they are now:
    // nothing to do.
    let now = BTreeMap::from([(
        "posts".to_string(),
        shape(&[("id", "bigint"), ("text", "text")], &["id"]),
    )]);
    s.ensure_objects(&now).unwrap();
    assert_eq!(s.rows_of("posts").len(), 2);
}

pub fn ensure_objects_idempotent(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(&mut *s, vec![txn(2, vec![upsert(1, "a", 2)])]).unwrap();
    s.ensure_objects(&posts()).unwrap();
    let mut more = posts();
    more.insert(
        "users".into(),
        shape(&[("id", "text"), ("name", "text")], &["id"]),
    );
    s.ensure_objects(&more).unwrap();
    drop(s);
    let mut s = open();
    s.ensure_objects(&more).unwrap();
    assert_eq!(s.rows_of("posts").len(), 1);
    assert!(s.rows_of("users").is_empty());
    let bad = BTreeMap::from([("nokey".to_string(), shape(&[("a", "text")], &[]))]);
    assert!(s.ensure_objects(&bad).is_err());
}

/// Every type of the wire's value list, NULLs included, and a value of the
/// wrong type refused.
pub fn types_round_trip(open: Open) {
    let mut s = types_kept(open);
    // A value the type cannot take is a permanent error.
    let bad = change(
        "things",
        ChangeOp::Update,
        json!(1),
        Some(json!({"id": 1, "big": "lots"})),
        6,
    );
    let err = apply(&mut *s, vec![txn(6, vec![bad])]).unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
}

/// Every type of the wire's value list, NULLs included, read back as
/// written; the sink, for more.
pub fn types_kept(open: Open) -> Box<dyn Store> {
    let mut s = open();
    let cols = [
        ("id", "integer"),
        ("big", "bigint"),
        ("price", "numeric(10,2)"),
        ("flag", "boolean"),
        ("at", "timestamp with time zone"),
        ("doc", "jsonb"),
        ("tags", "text[]"),
        ("name", "character varying(255)"),
        ("ratio", "double precision"),
        ("day", "date"),
        ("uid", "uuid"),
        ("raw", "bytea"),
        ("note", "text"),
    ];
    let objects = BTreeMap::from([("things".to_string(), shape(&cols, &["id"]))]);
    s.ensure_objects(&objects).unwrap();
    let full = json!({
        "id": 1,
        "big": 9_000_000_000_i64,
        "price": "12.50",
        "flag": true,
        "at": "2025-01-02 03:04:05.123456+00",
        "doc": {"a": [1, "x'y"], "b": null, "c": {"d": 1.5}},
        "tags": ["a", "b\"c", "d\\e", "it's"],
        "name": "O'Brien",
        "ratio": 0.25,
        "day": "2025-01-02",
        "uid": "123e4567-e89b-12d3-a456-426614174000",
        "raw": "\\x00ff10",
        "note": "two\nlines",
    });
    let nulls = json!({"id": 2, "flag": false, "price": "0.10", "tags": []});
    apply(
        &mut *s,
        vec![txn(
            5,
            vec![
                change("things", ChangeOp::Insert, json!(1), Some(full.clone()), 5),
                change(
                    "things",
                    ChangeOp::Insert,
                    json!(2),
                    Some(json!({"id": 2, "flag": false, "price": "0.10", "tags": [],
                        "big": null, "doc": null, "note": null})),
                    5,
                ),
            ],
        )],
    )
    .unwrap();
    let rows = s.rows_of("things");
    assert_eq!(rows["[1]"], (5, attrs(full)));
    assert_eq!(rows["[2]"], (5, attrs(nulls)));
    s
}

/// A reset before a new bootstrap forgets the rows, the tombstones and
/// the position: a row the new snapshot lacks does not survive.
pub fn reset_forgets_everything(open: Open) {
    let mut s = open();
    s.ensure_objects(&posts()).unwrap();
    apply(
        &mut *s,
        vec![txn(10, vec![upsert(1, "a", 10), upsert(2, "b", 10)])],
    )
    .unwrap();
    apply(
        &mut *s,
        vec![txn(
            11,
            vec![change("posts", ChangeOp::Delete, json!(2), None, 11)],
        )],
    )
    .unwrap();
    s.store_position(12, &[], None).unwrap();
    s.reset().unwrap();
    let r = s.resume().unwrap();
    assert_eq!(r.watermark, 0);
    assert!(r.applied_above.is_empty());
    assert!(s.rows_of("posts").is_empty());
    // The old tombstone no longer keeps the row out.
    apply(&mut *s, vec![txn(5, vec![upsert(2, "again", 5)])]).unwrap();
    assert_eq!(body(&s.rows_of("posts"), 2), Some((5, json!("again"))));
}

/// Opens one case's sink, again on each call.
pub type Opener = Box<dyn FnMut() -> Box<dyn Store>>;

/// Two subscriptions in one database, opened by `open(name)`, keep their
/// positions and identities apart.
pub fn two_subscriptions_share<S: SqlStore>(mut open: impl FnMut(&str) -> S) {
    let mut a = open("a");
    let mut b = open("b");
    a.ensure_objects(&posts()).unwrap();
    b.ensure_objects(&posts()).unwrap();
    apply(&mut a, vec![txn(4, vec![])]).unwrap();
    apply(&mut b, vec![txn(9, vec![])]).unwrap();
    assert_eq!(a.resume().unwrap().applied_above, vec![4]);
    assert_eq!(b.resume().unwrap().applied_above, vec![9]);
    let id = Identity {
        server_id: Some("srv".into()),
        publication: Some("social".into()),
        mode: Some("causal".into()),
    };
    a.set_identity_of(&id);
    assert_eq!(a.identity_of(), id);
    assert_eq!(b.identity_of(), Default::default());
}

/// Every case, each on a sink of its own from `open(case name)`.
pub fn all(open: &mut dyn FnMut(&str) -> Opener) {
    type Case = fn(Open);
    let cases: [(&str, Case); 8] = [
        ("reset", reset_forgets_everything),
        ("guarded_upsert", guarded_upsert),
        ("many_writes", many_writes_in_one_batch),
        ("tombstone", tombstone_blocks_late_insert),
        ("exactly_once", exactly_once_across_crash),
        ("schema", schema_changes),
        ("ensure_objects", ensure_objects_idempotent),
        ("types", types_round_trip),
    ];
    for (name, case) in cases {
        let mut opener = open(name);
        case(&mut *opener);
    }
}

/// The cases of [`all`] for a sink without a schema: all but the schema
/// changes and the refusal of a value of the wrong type.
pub fn all_schemaless(open: &mut dyn FnMut(&str) -> Opener) {
    type Case = fn(Open);
    let cases: [(&str, Case); 7] = [
        ("reset", reset_forgets_everything),
        ("guarded_upsert", guarded_upsert),
        ("many_writes", many_writes_in_one_batch),
        ("tombstone", tombstone_blocks_late_insert),
        ("exactly_once", exactly_once_across_crash),
        ("ensure_objects", ensure_objects_idempotent),
        ("types", |open| drop(types_kept(open))),
    ];
    for (name, case) in cases {
        let mut opener = open(name);
        case(&mut *opener);
    }
}

/// The rows [`parallel_batches`] writes: worker `w`'s batch `b`, its
/// transaction `t` at LSN `lsn`, changes keys in an order of the worker's
/// own (rotated, and reversed for odd workers), so that concurrent
/// batches write the same rows in different orders.
fn parallel_txn(w: u64, b: u64, t: u64) -> (Lsn, Vec<i64>) {
    const KEYS: i64 = 24;
    let lsn = ((b * PARALLEL_WORKERS + w) * 10) + t + 1;
    let mut keys: Vec<i64> = (0..KEYS).collect();
    keys.rotate_left(((w * 7 + b * 5 + t) % KEYS as u64) as usize);
    if w % 2 == 1 {
        keys.reverse();
    }
    keys.truncate(10);
    (lsn, keys)
}

const PARALLEL_WORKERS: u64 = 4;
const PARALLEL_BATCHES: u64 = 30;

/// Workers applying batches at once, each on a connection of its own, the
/// batches writing overlapping rows in different orders (as weak mode
/// lets them): every batch commits on its first try (no deadlock between
/// batches), and every row ends at its latest version.
pub fn parallel_batches<S: Store + Send + 'static>(open: impl Fn() -> S + Send + Sync + 'static) {
    let mut first = open();
    first.ensure_objects(&posts()).unwrap();
    let open = Arc::new(open);
    let workers: Vec<_> = (0..PARALLEL_WORKERS)
        .map(|w| {
            let open = open.clone();
            std::thread::spawn(move || {
                let mut s = open();
                for b in 0..PARALLEL_BATCHES {
                    let items = (0..3)
                        .map(|t| {
                            let (lsn, keys) = parallel_txn(w, b, t);
                            let body = format!("w{w} b{b} t{t}");
                            txn(lsn, keys.iter().map(|&k| upsert(k, &body, lsn)).collect())
                        })
                        .collect();
                    if let Err(e) = apply(&mut s, items) {
                        panic!("worker {w}, batch {b}: {e}");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker failed");
    }
    // The oracle: each key's last write, from the same generator.
    let mut want: BTreeMap<i64, (Lsn, String)> = BTreeMap::new();
    for w in 0..PARALLEL_WORKERS {
        for b in 0..PARALLEL_BATCHES {
            for t in 0..3 {
                let (lsn, keys) = parallel_txn(w, b, t);
                for k in keys {
                    let e = want.entry(k).or_insert((0, String::new()));
                    if lsn > e.0 {
                        *e = (lsn, format!("w{w} b{b} t{t}"));
                    }
                }
            }
        }
    }
    let rows = first.rows_of("posts");
    assert_eq!(rows.len(), want.len());
    for (k, (lsn, text)) in want {
        assert_eq!(body(&rows, k), Some((lsn, json!(text))), "row {k}");
    }
}
