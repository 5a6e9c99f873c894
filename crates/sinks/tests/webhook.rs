//! The webhook sink against a receiver on a loopback port in the test:
//! requests, keys, per-change callbacks, error classes, and redelivery
//! after a failure through the real agent.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use aqueduct_publish::{parse_line, ChangeOp, SchemaChange, WireMessage};
use aqueduct_sinks::WebhookSink;
use aqueduct_subscribe::{ErrorClass, Item, Record, SchemaPos, Sink};
use common::{change, schema, txn};
use serde_json::{json, Value};

/// A request as the receiver got it.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    target: String,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Request {
    fn key(&self) -> &str {
        &self.headers["idempotency-key"]
    }

    fn line(&self) -> WireMessage {
        parse_line(&self.body).expect("a wire line")
    }
}

#[derive(Default)]
struct Log {
    requests: Vec<Request>,
    /// Statuses to answer, in order; 200 when empty.
    answers: VecDeque<u16>,
}

/// An HTTP receiver on a loopback port, recording each request.
struct Receiver {
    addr: String,
    log: Arc<Mutex<Log>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let log = Arc::new(Mutex::new(Log::default()));
        let shared = log.clone();
        // Detached: it ends with the test process.
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                serve(conn, &shared);
            }
        });
        Receiver { addr, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers the next requests with these statuses.
    fn answer(&self, statuses: &[u16]) {
        self.log.lock().unwrap().answers.extend(statuses);
    }

    fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().requests.clone()
    }
}

fn serve(conn: TcpStream, log: &Mutex<Log>) {
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').unwrap();
        headers.insert(n.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .map_or(0, |v| v.parse().unwrap());
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let status = {
        let mut log = log.lock().unwrap();
        log.requests.push(Request {
            method,
            target,
            headers,
            body: String::from_utf8(body).unwrap(),
        });
        log.answers.pop_front().unwrap_or(200)
    };
    let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno");
    reader.get_mut().write_all(answer.as_bytes()).unwrap();
}

fn post(lsn: u64, op: ChangeOp) -> aqueduct_publish::Change {
    let attrs = (op != ChangeOp::Delete).then(|| json!({"id": lsn, "body": "b"}));
    change("posts", op, json!(lsn), attrs, lsn)
}

#[test]
fn one_post_per_item_with_its_key() {
    let r = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let mut s = WebhookSink::new(&r.url("/hook"), dir.path()).unwrap();
    let t = txn(5, vec![post(5, ChangeOp::Insert)]);
    let drop = schema(7, "posts", SchemaChange::DropAttribute { name: "x".into() });
    s.apply(&[t.clone(), Item::Skip { lsn: 6 }], &Record::default())
        .unwrap();
    s.apply(
        std::slice::from_ref(&drop),
        &Record {
            schema: Some(SchemaPos { lsn: 7, seq: 0 }),
            ..Record::default()
        },
    )
    .unwrap();
    let got = r.requests();
    assert_eq!(got.len(), 2);
    for q in &got {
        assert_eq!((q.method.as_str(), q.target.as_str()), ("POST", "/hook"));
        assert_eq!(q.headers["content-type"], "application/json");
    }
    assert_eq!(got[0].key(), "test:5");
    assert_eq!(got[1].key(), "schema:7:0");
    let Item::Txn(m) = &t else { unreachable!() };
    assert_eq!(got[0].line(), WireMessage::Txn((**m).clone()));
    assert!(matches!(got[1].line(), WireMessage::Schema(s) if s.lsn == 7));
    // The schema change's position is kept across a restart.
    let s = WebhookSink::new(&r.url("/hook"), dir.path()).unwrap();
    assert_eq!(
        s.resume().unwrap().schema,
        Some(SchemaPos { lsn: 7, seq: 0 })
    );
}

#[test]
fn per_change_callbacks_in_order() {
    let r = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let mut s = WebhookSink::new(&r.url("/cb/?per_change=1"), dir.path()).unwrap();
    let mut user = change(
        "users",
        ChangeOp::Update,
        json!("a b"),
        Some(json!({"id": "a b"})),
        9,
    );
    user.prev_version = Some(4);
    let t = txn(
        9,
        vec![post(9, ChangeOp::Insert), user, post(9, ChangeOp::Delete)],
    );
    let add = schema(
        10,
        "posts",
        SchemaChange::DropAttribute {
            name: "body".into(),
        },
    );
    s.apply(&[t, add], &Record::default()).unwrap();
    let got = r.requests();
    let seen: Vec<(&str, &str)> = got.iter().map(|q| (q.target.as_str(), q.key())).collect();
    assert_eq!(
        seen,
        [
            ("/cb/posts/created", "test:9:0"),
            ("/cb/users/updated", "test:9:1"),
            ("/cb/posts/destroyed", "test:9:2"),
            ("/cb/posts/schema", "schema:10:0"),
        ]
    );
    let body: Value = serde_json::from_str(&got[1].body).unwrap();
    assert_eq!(
        body,
        json!({"object": "users", "op": "update", "key": ["a b"], "attrs": {"id": "a b"},
               "version": 9, "prev_version": 4, "txid": "test:9", "lsn": 9,
               "commit_time": "2025-01-01T00:00:00.000000Z", "index": 1, "bootstrap": false})
    );
    assert!(matches!(got[3].line(), WireMessage::Schema(_)));
}

#[test]
fn error_classes() {
    let r = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let mut s = WebhookSink::new(&r.url("/"), dir.path()).unwrap();
    let t = [txn(3, vec![post(3, ChangeOp::Insert)])];
    for (status, class) in [
        (500, Some(ErrorClass::Transient)),
        (503, Some(ErrorClass::Transient)),
        (408, Some(ErrorClass::Transient)),
        (429, Some(ErrorClass::Transient)),
        (400, Some(ErrorClass::Permanent)),
        (404, Some(ErrorClass::Permanent)),
        (201, None),
    ] {
        r.answer(&[status]);
        let got = s.apply(&t, &Record::default()).err().map(|e| e.class);
        assert_eq!(got, class, "HTTP {status}");
    }
    assert_eq!(r.requests().len(), 7);
    // Nobody listening: transient.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let mut s = WebhookSink::new(&url, dir.path())
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let e = s.apply(&t, &Record::default()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Transient, "{e}");
}

/// The real agent: the first POST answers 503, the agent retries it (so it
/// arrives twice, with the same key), the rest arrives once; a
/// restart on the same state directory asks for the stream from the stored
/// position and sends nothing below it.
#[test]
fn redelivery_through_the_agent() {
    let r = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<WireMessage> = [3, 5, 6, 9].map(common::agent::insert_line).to_vec();
    r.answer(&[503]);
    let mut s = WebhookSink::new(&r.url("/h"), dir.path()).unwrap();
    let run = common::agent::run(&mut s, &lines, 12);
    assert_eq!(run.acked, Some(12));
    assert!(run.failures >= 1);
    let keys: Vec<String> = r.requests().iter().map(|q| q.key().to_string()).collect();
    // Weak mode: the others go on while the failed one waits for its retry.
    assert_eq!(keys[..4], ["test:3", "test:5", "test:6", "test:9"]);
    assert_eq!(keys[4..], ["test:3"], "the failed POST is sent again");
    let before = r.requests().len();
    drop(s);
    // Crash and replay: the position says 13.
    let mut s = WebhookSink::new(&r.url("/h"), dir.path()).unwrap();
    assert_eq!(s.resume().unwrap().watermark, 13);
    let mut more = lines.clone();
    more.push(common::agent::insert_line(14));
    let run = common::agent::run(&mut s, &more, 15);
    assert_eq!(run.from_lsn, Some(13));
    let after: Vec<String> = r.requests()[before..]
        .iter()
        .map(|q| q.key().to_string())
        .collect();
    assert_eq!(after, ["test:14"]);
}
