//! The change feed over HTTP: a snapshot at one LSN, then `/v1/changes`
//! from the next LSN, applied to the snapshot, equals the tables; resuming
//! with the last LSN seen misses nothing and repeats nothing; durable
//! consumers, SSE and errors.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use aqueduct_http::HttpConfig;
use serde_json::Value as Json;

/// A streaming GET: the status and a reader of the de-chunked body.
struct Stream {
    status: u16,
    reader: BufReader<TcpStream>,
    pending: Vec<u8>,
    /// A response with a length rather than chunks: all of it is pending.
    whole: bool,
}

impl Stream {
    fn open(addr: SocketAddr, path: &str, headers: &str) -> Stream {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n{headers}\r\n").unwrap();
        let mut reader = BufReader::new(s);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        let status = status[9..12].parse().unwrap();
        let mut length = None;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse::<usize>().ok();
                }
            }
        }
        let mut pending = Vec::new();
        if let Some(n) = length {
            pending.resize(n, 0);
            reader.read_exact(&mut pending).unwrap();
            pending.push(b'\n');
        }
        Stream {
            status,
            reader,
            pending,
            whole: length.is_some(),
        }
    }

    /// The next body line (chunk framing removed), or `None` at the end.
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                return Some(String::from_utf8(line).unwrap().trim_end().to_string());
            }
            if self.whole {
                return None;
            }
            let mut size = String::new();
            if self.reader.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                return None;
            }
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk).ok()?;
            self.pending.extend_from_slice(&chunk[..size]);
        }
    }

    /// The next JSON message, skipping keep-alive lines.
    fn message(&mut self) -> Option<Json> {
        loop {
            let line = self.line()?;
            if !line.is_empty() {
                return Some(serde_json::from_str(&line).unwrap());
            }
        }
    }

    fn body(mut self) -> String {
        let mut out = String::new();
        while let Some(l) = self.line() {
            out.push_str(&l);
        }
        out
    }
}

fn sql(addr: SocketAddr, statement: &str) -> Json {
    let body = serde_json::json!({ "sql": statement }).to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/sql HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (_, body) = out.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn post_ack(addr: SocketAddr, consumer: &str, lsn: u64) -> Json {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/changes/ack?consumer={consumer}&lsn={lsn} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (_, body) = out.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"))
}

type Rows = BTreeMap<String, Json>;

fn apply(rows: &mut Rows, msg: &Json) {
    for c in msg["changes"].as_array().unwrap() {
        if c["op"] == "schema" {
            continue;
        }
        let key = c["key"].to_string();
        match c["op"].as_str().unwrap() {
            "delete" => {
                rows.remove(&key);
            }
            _ => {
                rows.insert(key, c["new"].clone());
            }
        }
    }
}

fn table_now(addr: SocketAddr) -> Rows {
    let out = sql(addr, "SELECT k, v FROM t");
    out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                serde_json::json!([r[0]]).to_string(),
                serde_json::json!({ "k": r[0], "v": r[1] }),
            )
        })
        .collect()
}

fn run_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_changes_equal_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let addr = common::listen(engine, HttpConfig::default()).await;
    run_blocking(move || {
        sql(addr, "CREATE TABLE t (k int PRIMARY KEY, v text)");
        for k in 0..5 {
            sql(addr, &format!("INSERT INTO t VALUES ({k}, 'v{k}')"));
        }
        // A snapshot at one LSN.
        let mut snap = Stream::open(addr, "/v1/snapshot?table=t", "");
        assert_eq!(snap.status, 200);
        let header = snap.message().unwrap();
        let at = header["lsn"].as_u64().unwrap();
        assert_eq!(header["tables"][0]["name"], "t");
        let mut rows = Rows::new();
        while let Some(r) = snap.message() {
            rows.insert(r["key"].to_string(), r["row"].clone());
        }
        assert_eq!(rows, table_now(addr));

        // Writes, then the feed from the snapshot's next LSN.
        sql(addr, "INSERT INTO t VALUES (10, 'ten')");
        sql(addr, "UPDATE t SET v = 'one' WHERE k = 1");
        sql(addr, "DELETE FROM t WHERE k = 2");
        sql(
            addr,
            "BEGIN; INSERT INTO t VALUES (11, 'a'); UPDATE t SET v = 'b' WHERE k = 11; COMMIT",
        );
        let mut feed = Stream::open(
            addr,
            &format!("/v1/changes?from_lsn={}&table=t", at + 1),
            "",
        );
        assert_eq!(feed.status, 200);
        let mut last = at;
        let mut ops = Vec::new();
        for _ in 0..4 {
            let m = feed.message().unwrap();
            assert!(m["first_lsn"].as_u64().unwrap() > last, "{m}");
            last = m["lsn"].as_u64().unwrap();
            for c in m["changes"].as_array().unwrap() {
                ops.push(c["op"].as_str().unwrap().to_string());
            }
            apply(&mut rows, &m);
        }
        assert_eq!(ops, ["insert", "update", "delete", "insert", "update"]);
        assert_eq!(rows, table_now(addr), "snapshot + changes = the table");
        drop(feed);

        // Resuming with the last LSN seen: the next commit only.
        sql(addr, "INSERT INTO t VALUES (12, 'c')");
        let mut feed = Stream::open(addr, &format!("/v1/changes?from_lsn={}", last + 1), "");
        let m = feed.message().unwrap();
        assert!(m["first_lsn"].as_u64().unwrap() > last);
        assert_eq!(m["changes"][0]["key"], serde_json::json!([12]));
        assert_eq!(m["changes"][0]["new"]["v"], "c");

        // Server-Sent Events resume from Last-Event-ID.
        let mut sse = Stream::open(
            addr,
            "/v1/changes?format=sse",
            &format!("Last-Event-ID: {last}\r\n"),
        );
        assert_eq!(sse.status, 200);
        let id = sse.line().unwrap();
        assert!(id.starts_with("id: "), "{id}");
        assert_eq!(sse.line().unwrap(), "event: change");
        let data = sse.line().unwrap();
        assert!(data.starts_with("data: {"), "{data}");
        assert!(data.contains("\"c\""), "{data}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_consumers_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let addr = common::listen(engine.clone(), HttpConfig::default()).await;
    run_blocking(move || {
        sql(addr, "CREATE TABLE t (k int PRIMARY KEY, v text)");
        // Registered on first use, from the next commit.
        let mut c = Stream::open(addr, "/v1/changes?consumer=audit", "");
        assert_eq!(c.status, 200);
        sql(addr, "INSERT INTO t VALUES (1, 'x')");
        sql(addr, "INSERT INTO t VALUES (2, 'y')");
        let first = c.message().unwrap();
        drop(c);
        // It shows up with its position and lag.
        let info = engine.feed().consumers();
        assert_eq!(info[0].name, "audit");
        // Resuming after the first message acknowledges it.
        let resume = first["lsn"].as_u64().unwrap() + 1;
        let mut c = Stream::open(
            addr,
            &format!("/v1/changes?consumer=audit&from_lsn={resume}"),
            "",
        );
        let second = c.message().unwrap();
        assert_eq!(second["changes"][0]["key"], serde_json::json!([2]));
        assert_eq!(engine.feed().consumers()[0].next_lsn, resume);
        // A long-lived stream acknowledges without reconnecting.
        let at = sql(addr, "INSERT INTO t VALUES (3, 'z')");
        let head = engine.feed().head();
        let acked = post_ack(addr, "audit", head);
        assert_eq!(acked["next_lsn"], head + 1, "{acked} {at}");
        assert_eq!(engine.feed().consumers()[0].next_lsn, head + 1);
        assert_eq!(post_ack(addr, "nobody", 1)["error"]["code"], "42704");
        assert_eq!(post_ack(addr, "audit", head + 9)["error"]["code"], "22023");
        let resume = head + 1;
        // SHOW CONSUMERS lists it with its position.
        let shown = sql(addr, "SHOW CONSUMERS");
        assert_eq!(shown["rows"][0][0], "audit", "{shown}");
        assert_eq!(shown["rows"][0][1], resume, "{shown}");
        assert_eq!(shown["rows"][0][5], "active", "{shown}");
        // And /metrics.
        let mut m = Stream::open(addr, "/metrics", "");
        let mut text = String::new();
        while let Some(l) = m.line() {
            text.push_str(&l);
            text.push('\n');
        }
        assert!(
            text.contains(&format!(
                "aqueduct_feed_consumer_next_lsn{{consumer=\"audit\"}} {resume}"
            )),
            "{text}"
        );

        // Errors say what is wrong, with PostgreSQL's codes.
        let e = Stream::open(addr, "/v1/changes?table=nope", "");
        assert_eq!(e.status, 400);
        let body = e.body();
        assert!(body.contains("42P01"), "{body}");
        let e = Stream::open(addr, "/v1/changes?format=xml", "");
        assert_eq!(e.status, 400);
        let e = Stream::open(addr, "/v1/snapshot?table=nope", "");
        assert!(e.body().contains("relation \\\"nope\\\" does not exist"));
    });
}
