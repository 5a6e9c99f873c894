//! The Redis sink through the shared cases and the simulator. Runs only
//! when `AQ_SINK_REDIS_URL` names a server (`redis://host:port[/db]`;
//! `scripts/sink-tests` starts a throwaway one); each case uses a
//! subscription name of its own, whose keys are deleted first.
//!
//! Redis stores what each change carries, with no schema: the shared
//! cases run without the two that need one ([`common::all_schemaless`]:
//! no refusal of a value of the wrong type; schema changes reach each row
//! at its next write), and [`schema_changes_on_next_write`] checks the
//! latter as built. For the same reason the simulator runs without its
//! `ADD COLUMN`s: rows written before one lack the new attribute (its
//! `existing` value is not back-filled), where the source has it.

#[macro_use]
mod common;
#[path = "common/sim.rs"]
mod sim;

use aqueduct_publish::{ChangeOp, Mode, SchemaChange};
use aqueduct_sinks::{RedisSink, SinkSpec};
use aqueduct_subscribe::{ErrorClass, SchemaPos, Sink};
use common::{apply, attrs, change, opener, schema, txn};
use serde_json::json;

store!(RedisSink);

fn url() -> Option<String> {
    common::env_url("AQ_SINK_REDIS_URL", "Redis sink")
}

/// Opens the subscription `name`, again on each call.
fn open(url: &str, name: &str) -> common::Opener {
    let (url, name) = (url.to_string(), name.to_string());
    opener(move || RedisSink::connect(&url, &name).expect("connect"))
}

/// Deletes what an earlier run left under the subscription `name`.
fn fresh(url: &str, name: &str) {
    let client = redis::Client::open(url).expect("url");
    let mut c = client.get_connection().expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("aq:{name}:*"))
        .query(&mut c)
        .unwrap();
    if !keys.is_empty() {
        redis::cmd("DEL").arg(keys).query::<i64>(&mut c).unwrap();
    }
}

#[test]
fn redis_cases() {
    let Some(url) = url() else { return };
    common::all_schemaless(&mut |case| {
        let name = format!("sinktest_{case}");
        fresh(&url, &name);
        open(&url, &name)
    });
}

/// Schema changes as Redis takes them: the shape at once, each row at its
/// next write.
#[test]
fn schema_changes_on_next_write() {
    let Some(url) = url() else { return };
    let name = "sinktest_schema";
    fresh(&url, name);
    let mut s = RedisSink::connect(&url, name).unwrap();
    s.ensure_objects(&common::posts()).unwrap();
    let put = |id: i64, a: serde_json::Value, v: u64| {
        change("posts", ChangeOp::Update, json!(id), Some(a), v)
    };
    apply(
        &mut s,
        vec![
            txn(2, vec![put(1, json!({"id": 1, "body": "a"}), 2)]),
            txn(3, vec![put(2, json!({"id": 2, "body": "b"}), 3)]),
        ],
    )
    .unwrap();
    let add = SchemaChange::AddAttribute {
        name: "likes".into(),
        ty: "bigint".into(),
        existing: json!(0),
    };
    apply(&mut s, vec![schema(4, "posts", add)]).unwrap();
    assert_eq!(
        s.resume().unwrap().schema,
        Some(SchemaPos { lsn: 4, seq: 0 })
    );
    // Not back-filled: row 1 has no `likes` until it is written again.
    assert_eq!(
        s.rows("posts").unwrap()["[1]"].1,
        attrs(json!({"id": 1, "body": "a"}))
    );
    let rename = SchemaChange::RenameAttribute {
        from: "body".into(),
        to: "text".into(),
    };
    apply(&mut s, vec![schema(5, "posts", rename)]).unwrap();
    let drop_likes = SchemaChange::DropAttribute {
        name: "likes".into(),
    };
    apply(&mut s, vec![schema(6, "posts", drop_likes)]).unwrap();
    let shape = &s.objects().unwrap()["posts"];
    let names: Vec<&str> = shape.attributes.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["id", "text"]);
    // Row 2's next write, of the new shape, replaces its hash whole.
    apply(
        &mut s,
        vec![txn(7, vec![put(2, json!({"id": 2, "text": "b2"}), 7)])],
    )
    .unwrap();
    let rows = s.rows("posts").unwrap();
    assert_eq!(rows["[1]"].1, attrs(json!({"id": 1, "body": "a"})));
    assert_eq!(rows["[2]"], (7, attrs(json!({"id": 2, "text": "b2"}))));
    // Objects come and go, rows and tombstones with them.
    let add_obj = SchemaChange::AddObject {
        object: "likes".into(),
        schema: common::shape(&[("id", "bigint"), ("post", "bigint")], &["id"]),
    };
    apply(&mut s, vec![schema(8, "likes", add_obj)]).unwrap();
    let like = change(
        "likes",
        ChangeOp::Insert,
        json!(1),
        Some(json!({"id": 1, "post": 2})),
        9,
    );
    let unlike = change("likes", ChangeOp::Delete, json!(2), None, 9);
    apply(&mut s, vec![txn(9, vec![like, unlike])]).unwrap();
    assert_eq!(s.rows("likes").unwrap().len(), 1);
    let drop_obj = SchemaChange::DropObject {
        object: "likes".into(),
    };
    apply(&mut s, vec![schema(10, "likes", drop_obj)]).unwrap();
    assert!(!s.objects().unwrap().contains_key("likes"));
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut c = client.get_connection().unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("aq:{name}:*likes*"))
        .query(&mut c)
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    // A change of an object the sink lacks is refused, nothing written.
    let stray = change("nope", ChangeOp::Insert, json!(1), Some(json!({})), 11);
    let err = apply(&mut s, vec![txn(11, vec![stray])]).unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(!s.resume().unwrap().applied_above.contains(&11));
}

#[test]
fn errors_classified() {
    let Some(url) = url() else { return };
    // A refused connection is transient.
    let err = RedisSink::connect("redis://127.0.0.1:1", "x")
        .err()
        .expect("no server there");
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    // A spec opens the sink.
    let name = "sinktest_spec";
    fresh(&url, name);
    let spec: SinkSpec = url.parse().unwrap();
    let sink = spec.open(name, None).unwrap();
    assert_eq!(sink.resume().unwrap(), Default::default());
}

#[test]
fn simulator_on_redis() {
    let Some(url) = url() else { return };
    for (mode, seed) in [(Mode::Global, 0), (Mode::Causal, 100), (Mode::Weak, 300)] {
        // Rows are not back-filled by ADD COLUMN (see the file's comment).
        let no_ddl = |sc: &mut sim::harness::Scenario| sc.ddl = false;
        sim::simulate(mode, seed..seed + 1, no_ddl, &mut |seed| {
            let name = format!("sinktest_sim_{seed}");
            fresh(&url, &name);
            open(&url, &name)
        });
    }
}
