//! The JSON-lines sink: its lines, its state directory, and a run through
//! the real agent.

mod common;

use std::collections::VecDeque;
use std::fs;

use aqueduct_publish::{
    parse_line, ChangeOp, EpochMessage, Mode, ProgressMessage, SchemaChange, WireMessage,
};
use aqueduct_sinks::JsonLinesSink;
use aqueduct_subscribe::{
    Agent, AgentConfig, Effect, Input, Item, PositionMode, Record, SchemaPos, Sink, SinkError,
};
use common::{change, schema, txn};
use serde_json::json;

fn lines(out: &[u8]) -> Vec<WireMessage> {
    std::str::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| parse_line(l).expect("a wire line"))
        .collect()
}

#[test]
fn one_wire_line_per_item() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = JsonLinesSink::new(Vec::new(), dir.path()).unwrap();
    let t = txn(
        5,
        vec![change(
            "posts",
            ChangeOp::Insert,
            json!(1),
            Some(json!({"id": 1})),
            5,
        )],
    );
    let add = schema(7, "posts", SchemaChange::DropAttribute { name: "x".into() });
    s.apply(&[t.clone(), Item::Skip { lsn: 6 }], &Record::default())
        .unwrap();
    s.apply(
        std::slice::from_ref(&add),
        &Record {
            schema: Some(SchemaPos { lsn: 7, seq: 0 }),
            ..Record::default()
        },
    )
    .unwrap();
    let got = lines(&s.into_inner());
    let want: Vec<WireMessage> = [t, add]
        .iter()
        .map(|i| match i {
            Item::Txn(m) => WireMessage::Txn((**m).clone()),
            Item::Schema(m, _) => WireMessage::Schema((**m).clone()),
            Item::Skip { .. } => unreachable!(),
        })
        .collect();
    assert_eq!(got, want);
    // The schema change's position is kept across a restart.
    let s = JsonLinesSink::new(Vec::new(), dir.path()).unwrap();
    assert_eq!(
        s.resume().unwrap().schema,
        Some(SchemaPos { lsn: 7, seq: 0 })
    );
}

#[test]
fn position_and_dead_letters_in_the_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = JsonLinesSink::new(Vec::new(), dir.path()).unwrap();
    assert_eq!(s.resume().unwrap(), Default::default());
    s.store_position(10, &[12, 15], None).unwrap();
    s.store_dead_letter(11, &SinkError::permanent("bad"), 8)
        .unwrap();
    s.store_dead_letter(13, &SinkError::permanent("bad"), 8)
        .unwrap();
    s.store_dead_letter(11, &SinkError::permanent("bad"), 9)
        .unwrap();
    s.clear_dead_letter(13).unwrap();
    // A crash mid-append tears the last line; it never counted.
    let dl = dir.path().join(aqueduct_sinks::jsonl::DEAD_LETTERS_FILE);
    let mut text = fs::read_to_string(&dl).unwrap();
    text.push_str("{\"lsn\":14,\"att");
    fs::write(&dl, text).unwrap();
    let s = JsonLinesSink::new(Vec::new(), dir.path()).unwrap();
    let r = s.resume().unwrap();
    assert_eq!(r.watermark, 10);
    assert_eq!(r.applied_above, vec![12, 15]);
    assert_eq!(r.dead_letters, vec![(11, 9)]);
    // Only the position file is left: the temporary one was renamed.
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["dead_letters.jsonl", "position.json"]);
}

/// The real agent, weak mode, positions stored apart: lines out, then the
/// position; a restart resumes from it.
#[test]
fn through_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.jsonl");
    let state = dir.path().join("state");
    let mut sink = JsonLinesSink::file(&out_path, &state).unwrap();
    let config = AgentConfig::new(Mode::Weak, PositionMode::Separate);
    let mut agent = Agent::new(config, sink.resume().unwrap()).unwrap();
    let mut now = 0;
    let mut inputs = VecDeque::from([Input::Start { now_ms: now }]);
    let mut stream = VecDeque::new();
    let mut acked = None;
    while let Some(input) = inputs.pop_front() {
        for e in agent.step(input) {
            match e {
                Effect::Connect { from_lsn, epoch } => {
                    stream.push_back(WireMessage::Epoch(EpochMessage {
                        epoch,
                        from_lsn,
                        server_id: "srv".into(),
                        dep_slots: 1024,
                        objects: common::posts(),
                        bootstrap_until: None,
                    }));
                    for lsn in [3, 5] {
                        let c = change(
                            "posts",
                            ChangeOp::Insert,
                            json!(lsn),
                            Some(json!({"id": lsn})),
                            lsn,
                        );
                        let Item::Txn(t) = txn(lsn, vec![c]) else {
                            unreachable!()
                        };
                        stream.push_back(WireMessage::Txn((*t).clone()));
                    }
                    stream.push_back(WireMessage::Progress(ProgressMessage { lsn: 8 }));
                }
                Effect::Apply {
                    batch,
                    items,
                    record,
                    ..
                } => {
                    sink.apply(&items, &record).unwrap();
                    inputs.push_back(Input::Applied { now_ms: now, batch });
                }
                Effect::StorePosition {
                    watermark,
                    applied_above,
                    schema,
                } => {
                    sink.store_position(watermark, &applied_above, schema)
                        .unwrap();
                    inputs.push_back(Input::PositionStored {
                        now_ms: now,
                        watermark,
                    });
                }
                Effect::Ack { lsn } => acked = Some(lsn),
                Effect::Fail { reason } => panic!("{reason}"),
                _ => {}
            }
        }
        if inputs.is_empty() {
            if let Some(line) = stream.pop_front() {
                if let WireMessage::Epoch(e) = &line {
                    sink.ensure_objects(&e.objects).unwrap();
                }
                let bytes = line.to_line().len();
                inputs.push_back(Input::Received {
                    now_ms: now,
                    line,
                    bytes,
                });
            } else if acked.is_none() {
                // Time passes: the position store falls due.
                now += 2_000;
                inputs.push_back(Input::Tick { now_ms: now });
            }
        }
    }
    assert_eq!(acked, Some(8));
    let got = lines(&fs::read(&out_path).unwrap());
    let lsns: Vec<u64> = got.iter().filter_map(WireMessage::lsn).collect();
    assert_eq!(lsns, [3, 5]);
    drop(sink);
    let sink = JsonLinesSink::file(&out_path, &state).unwrap();
    assert_eq!(sink.resume().unwrap().watermark, 9);
}

/// A transaction sent while the subscriber catches up after a bootstrap
/// reaches the receiver with its `bootstrap` flag; the sink's origin
/// survives positions stored after it.
#[test]
fn the_bootstrap_flag_reaches_the_receiver_and_the_origin_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = JsonLinesSink::new(Vec::new(), dir.path()).unwrap();
    let Item::Txn(t) = txn(
        5,
        vec![change(
            "posts",
            ChangeOp::Insert,
            json!(1),
            Some(json!({"id": 1})),
            5,
        )],
    ) else {
        unreachable!()
    };
    let mut flagged = (*t).clone();
    flagged.bootstrap = true;
    s.apply(
        &[Item::Txn(std::sync::Arc::new(flagged))],
        &Record::default(),
    )
    .unwrap();
    let origin = aqueduct_subscribe::Origin {
        server_id: Some("abc".into()),
        boot_lsn: Some(4),
        sync_lsn: Some(9),
    };
    s.set_origin(&origin).unwrap();
    s.store_position(6, &[], None).unwrap();
    assert_eq!(s.origin().unwrap(), origin);
    assert!(origin.bootstrapping(6) && !origin.bootstrapping(10));
    let out = String::from_utf8(s.into_inner()).unwrap();
    let line: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(line["bootstrap"], json!(true), "{out}");
}
