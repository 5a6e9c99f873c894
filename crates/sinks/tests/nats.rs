//! The NATS JetStream sink against a server named by `AQ_SINK_NATS_URL`
//! (`nats://host:port`, JetStream on; skipped with a note when unset):
//! messages read back by a consumer in order with their ids, resends
//! deduplicated, and a crash and replay through the real agent.

mod common;

use std::net::TcpListener;

use aqueduct_publish::{parse_line, ChangeOp, SchemaChange, WireMessage};
use aqueduct_sinks::nats::{NatsClient, NatsUrl, NATS_TIMEOUT};
use aqueduct_sinks::NatsSink;
use aqueduct_subscribe::{ErrorClass, Item, Record, SchemaPos, Sink};
use common::{change, schema, txn};
use serde_json::json;

fn server() -> Option<String> {
    common::env_url("AQ_SINK_NATS_URL", "NATS sink")
}

/// Every message of `stream` in order, as (Nats-Msg-Id, line), read by an
/// ephemeral pull consumer; the stream is deleted after.
fn read_back(url: &str, stream: &str) -> Vec<(String, WireMessage)> {
    let mut c = NatsClient::connect(&NatsUrl::parse(url).unwrap(), NATS_TIMEOUT).unwrap();
    let config = json!({"stream_name": stream,
        "config": {"ack_policy": "none", "deliver_policy": "all"}});
    let made = c
        .request_json(
            &format!("$JS.API.CONSUMER.CREATE.{stream}"),
            config.to_string().as_bytes(),
        )
        .unwrap();
    let consumer = made["name"].as_str().expect("a consumer").to_string();
    let mut out = Vec::new();
    // Bounded: more than any test publishes.
    for _ in 0..1000 {
        let m = c
            .request(
                &format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
                None,
                br#"{"batch": 1, "no_wait": true}"#,
            )
            .unwrap();
        if m.status.is_some() {
            // 404: no more messages.
            break;
        }
        let headers = m.headers.expect("headers");
        let id = headers
            .lines()
            .find_map(|l| l.strip_prefix("Nats-Msg-Id: "))
            .expect("a message id")
            .to_string();
        let line = parse_line(std::str::from_utf8(&m.payload).unwrap()).unwrap();
        out.push((id, line));
    }
    let gone = c
        .request_json(&format!("$JS.API.STREAM.DELETE.{stream}"), b"")
        .unwrap();
    assert_eq!(gone["success"], true, "{gone}");
    out
}

fn ids(got: &[(String, WireMessage)]) -> Vec<&str> {
    got.iter().map(|(id, _)| id.as_str()).collect()
}

#[test]
fn publishes_in_order_and_deduplicates() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let name = common::unique_name("dedup");
    let mut s = NatsSink::connect(&url, &name, dir.path()).unwrap();
    assert!(s.subject().ends_with(&name));
    let t = |lsn| {
        txn(
            lsn,
            vec![change(
                "posts",
                ChangeOp::Insert,
                json!(lsn),
                Some(json!({"id": lsn})),
                lsn,
            )],
        )
    };
    let drop = schema(7, "posts", SchemaChange::DropAttribute { name: "x".into() });
    s.apply(&[t(3), t(5), Item::Skip { lsn: 6 }], &Record::default())
        .unwrap();
    s.apply(
        std::slice::from_ref(&drop),
        &Record {
            schema: Some(SchemaPos { lsn: 7, seq: 0 }),
            ..Record::default()
        },
    )
    .unwrap();
    // A resend (a retried batch): JetStream drops the duplicate.
    s.apply(&[t(5), t(8)], &Record::default()).unwrap();
    let got = read_back(&url, s.stream());
    assert_eq!(ids(&got), ["test:3", "test:5", "schema:7:0", "test:8"]);
    let Item::Txn(m) = t(3) else { unreachable!() };
    assert_eq!(got[0].1, WireMessage::Txn((*m).clone()));
    assert!(matches!(&got[2].1, WireMessage::Schema(s) if s.lsn == 7));
}

/// The real agent publishes, stores its position, "crashes"; a new sink on
/// the same state directory resumes from the position and publishes
/// nothing below it again.
#[test]
fn crash_and_replay_through_the_agent() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let name = common::unique_name("replay");
    let lines: Vec<WireMessage> = [3, 5, 6].map(common::agent::insert_line).to_vec();
    let mut s = NatsSink::connect(&url, &name, dir.path()).unwrap();
    let run = common::agent::run(&mut s, &lines, 8);
    assert_eq!(run.acked, Some(8));
    let stream = s.stream().to_string();
    drop(s);
    let mut s = NatsSink::connect(&url, &name, dir.path()).unwrap();
    assert_eq!(s.resume().unwrap().watermark, 9);
    let mut more = lines.clone();
    more.extend([9, 11].map(common::agent::insert_line));
    let run = common::agent::run(&mut s, &more, 12);
    assert_eq!((run.from_lsn, run.acked), (Some(9), Some(12)));
    let got = read_back(&url, &stream);
    assert_eq!(
        ids(&got),
        ["test:3", "test:5", "test:6", "test:9", "test:11"]
    );
    let lsns: Vec<u64> = got.iter().filter_map(|(_, l)| l.lsn()).collect();
    assert_eq!(lsns, [3, 5, 6, 9, 11]);
}

/// No server: a transient error (this case needs no server).
#[test]
fn unreachable_server_is_transient() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let e = NatsSink::connect(&url, "s", dir.path()).err().unwrap();
    assert_eq!(e.class, ErrorClass::Transient, "{e}");
}
