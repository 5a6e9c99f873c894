//! The RabbitMQ sink against a broker named by `AQ_SINK_RABBITMQ_URL`
//! (`amqp://user:pass@host:port/vhost`; skipped with a note when unset):
//! messages read back from a bound queue in order with their ids and
//! routing keys, a transaction split per object, and a crash and replay
//! through the real agent.

mod common;

use std::net::TcpListener;

use aqueduct_publish::{parse_line, ChangeOp, SchemaChange, WireMessage};
use aqueduct_sinks::RabbitMqSink;
use aqueduct_subscribe::{ErrorClass, Item, Record, SchemaPos, Sink};
use common::{change, schema, txn};
use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};
use serde_json::json;

fn broker() -> Option<String> {
    common::env_url("AQ_SINK_RABBITMQ_URL", "RabbitMQ sink")
}

/// A message as the consumer got it.
#[derive(Debug)]
struct Got {
    routing_key: String,
    message_id: String,
    persistent: bool,
    line: WireMessage,
}

/// A queue bound to `exchange` for `{prefix}.#`, read by the test.
struct Consumer {
    runtime: tokio::runtime::Runtime,
    _connection: Connection,
    channel: lapin::Channel,
    queue: String,
}

impl Consumer {
    /// Declares the exchange the way the sink does (so the queue can be
    /// bound before the sink's first message) and binds a fresh queue.
    fn bind(url: &str, exchange: &str, prefix: &str) -> Consumer {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sink = aqueduct_sinks::rabbitmq::RabbitMqUrl::parse(url).unwrap();
        let uri: AMQPUri = sink.uri;
        let queue = common::unique_name("q");
        let (connection, channel) = runtime.block_on(async {
            let conn = Connection::connect_uri(uri, ConnectionProperties::default())
                .await
                .unwrap();
            let ch = conn.create_channel().await.unwrap();
            ch.exchange_declare(
                exchange.into(),
                lapin::ExchangeKind::Topic,
                lapin::options::ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
            let options = QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            };
            ch.queue_declare(queue.as_str().into(), options, FieldTable::default())
                .await
                .unwrap();
            ch.queue_bind(
                queue.as_str().into(),
                exchange.into(),
                format!("{prefix}.#").as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
            (conn, ch)
        });
        Consumer {
            runtime,
            _connection: connection,
            channel,
            queue,
        }
    }

    /// Everything in the queue now, in order (the sink waited for the
    /// confirms, so what it published is there).
    fn drain(&self) -> Vec<Got> {
        self.runtime.block_on(async {
            let mut out = Vec::new();
            // Bounded: more than any test publishes.
            for _ in 0..1000 {
                let options = BasicGetOptions { no_ack: true };
                let Some(m) = self
                    .channel
                    .basic_get(self.queue.as_str().into(), options)
                    .await
                    .unwrap()
                else {
                    break;
                };
                let d = m.delivery;
                out.push(Got {
                    routing_key: d.routing_key.to_string(),
                    message_id: d.properties.message_id().as_ref().unwrap().to_string(),
                    persistent: *d.properties.delivery_mode() == Some(2),
                    line: parse_line(std::str::from_utf8(&d.data).unwrap()).unwrap(),
                });
            }
            out
        })
    }
}

fn with_exchange(url: &str, exchange: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}exchange={exchange}")
}

#[test]
fn publishes_per_object_under_confirms() {
    let Some(url) = broker() else { return };
    let exchange = common::unique_name("ex");
    let url = with_exchange(&url, &exchange);
    let dir = tempfile::tempdir().unwrap();
    let name = common::unique_name("sub");
    let consumer = Consumer::bind(&url, &exchange, &name);
    let mut s = RabbitMqSink::connect(&url, &name, dir.path()).unwrap();
    assert_eq!(s.routing_prefix(), name);
    let post = |lsn| {
        change(
            "posts",
            ChangeOp::Insert,
            json!(lsn),
            Some(json!({"id": lsn})),
            lsn,
        )
    };
    let user = change("users", ChangeOp::Delete, json!(1), None, 5);
    let drop = schema(7, "posts", SchemaChange::DropAttribute { name: "x".into() });
    s.apply(
        &[
            txn(3, vec![post(3)]),
            txn(5, vec![post(5), user, post(50)]),
            Item::Skip { lsn: 6 },
        ],
        &Record::default(),
    )
    .unwrap();
    s.apply(
        std::slice::from_ref(&drop),
        &Record {
            schema: Some(SchemaPos { lsn: 7, seq: 0 }),
            ..Record::default()
        },
    )
    .unwrap();
    let got = consumer.drain();
    let seen: Vec<(String, &str)> = got
        .iter()
        .map(|g| (g.routing_key.replace(&name, "p"), g.message_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("p.posts".to_string(), "test:3"),
            ("p.posts".to_string(), "test:5"),
            ("p.users".to_string(), "test:5"),
            ("p.posts".to_string(), "schema:7:0"),
        ]
    );
    assert!(got.iter().all(|g| g.persistent));
    let WireMessage::Txn(t) = &got[1].line else {
        panic!("{:?}", got[1])
    };
    let keys: Vec<_> = t.changes.iter().map(|c| c.key[0].clone()).collect();
    assert_eq!(keys, [json!(5), json!(50)]);
    let WireMessage::Txn(t) = &got[2].line else {
        panic!()
    };
    assert_eq!(t.changes.len(), 1);
    assert_eq!(t.changes[0].object, "users");
    assert!(matches!(&got[3].line, WireMessage::Schema(s) if s.lsn == 7));
}

/// The real agent publishes, stores its position, "crashes"; a new sink on
/// the same state directory resumes from the position and publishes
/// nothing below it again.
#[test]
fn crash_and_replay_through_the_agent() {
    let Some(url) = broker() else { return };
    let exchange = common::unique_name("ex");
    let url = format!("{}&routing_prefix=shop", with_exchange(&url, &exchange));
    let dir = tempfile::tempdir().unwrap();
    let consumer = Consumer::bind(&url, &exchange, "shop");
    let lines: Vec<WireMessage> = [3, 5, 6].map(common::agent::insert_line).to_vec();
    let mut s = RabbitMqSink::connect(&url, "sub", dir.path()).unwrap();
    let run = common::agent::run(&mut s, &lines, 8);
    assert_eq!(run.acked, Some(8));
    drop(s);
    let mut s = RabbitMqSink::connect(&url, "sub", dir.path()).unwrap();
    assert_eq!(s.resume().unwrap().watermark, 9);
    let mut more = lines.clone();
    more.extend([9, 11].map(common::agent::insert_line));
    let run = common::agent::run(&mut s, &more, 12);
    assert_eq!((run.from_lsn, run.acked), (Some(9), Some(12)));
    let got = consumer.drain();
    let ids: Vec<&str> = got.iter().map(|g| g.message_id.as_str()).collect();
    assert_eq!(ids, ["test:3", "test:5", "test:6", "test:9", "test:11"]);
    assert!(got.iter().all(|g| g.routing_key == "shop.posts"));
    let lsns: Vec<u64> = got.iter().filter_map(|g| g.line.lsn()).collect();
    assert_eq!(lsns, [3, 5, 6, 9, 11]);
}

/// An exchange of another type: permanent (needs a broker).
#[test]
fn exchange_of_another_type_is_permanent() {
    let Some(url) = broker() else { return };
    let exchange = common::unique_name("ex");
    let url = with_exchange(&url, &exchange);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let uri = aqueduct_sinks::rabbitmq::RabbitMqUrl::parse(&url)
        .unwrap()
        .uri;
    runtime.block_on(async {
        let conn = Connection::connect_uri(uri, ConnectionProperties::default())
            .await
            .unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.exchange_declare(
            exchange.as_str().into(),
            lapin::ExchangeKind::Fanout,
            Default::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let e = RabbitMqSink::connect(&url, "s", dir.path()).err().unwrap();
    assert_eq!(e.class, ErrorClass::Permanent, "{e}");
}

/// No broker: a transient error (this case needs no broker).
#[test]
fn unreachable_broker_is_transient() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("amqp://guest:guest@{}/%2f", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let e = RabbitMqSink::connect(&url, "s", dir.path()).err().unwrap();
    assert_eq!(e.class, ErrorClass::Transient, "{e}");
}
