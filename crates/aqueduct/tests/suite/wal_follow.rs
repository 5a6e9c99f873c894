//! `aqueduct wal tail --follow` on the data directory of a running server:
//! it takes no lock, and lists every write's record once, in LSN order,
//! while segments roll and background compaction rewrites sealed segments.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

use crate::common;

use common::{aqueduct, Running, STEP_TIMEOUT};

/// Starts `aqueduct serve` with small segments and compaction every second;
/// returns it and its HTTP port once it listens.
fn serve(data: &std::path::Path) -> (Running, u16) {
    let server = common::serve(
        data,
        &[
            "--fsync",
            "interval",
            "--segment-bytes",
            "65536",
            "--compaction-interval-secs",
            "1",
        ],
    );
    (server.process, server.http)
}

/// One HTTP request; returns the status line and the body.
fn http(port: u16, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(STEP_TIMEOUT)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// Runs one statement over POST /v1/sql; returns the LSN of its commit.
fn sql(port: u16, statement: &str) -> u64 {
    let body = serde_json::json!({ "sql": statement }).to_string();
    let (status, reply) = http(
        port,
        &format!(
            "POST /v1/sql HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(status.contains(" 200 "), "{statement}: {status} {reply}");
    let start = reply.find('{').expect("a JSON body");
    let end = reply.rfind('}').expect("a JSON body");
    let v: serde_json::Value = serde_json::from_str(&reply[start..=end]).unwrap();
    v["lsn"].as_u64().expect("the commit's LSN")
}

/// A counter from the server's /metrics.
fn metric(port: u16, name: &str) -> u64 {
    let (_, body) = http(
        port,
        "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} in /metrics")) as u64
}

/// The follower's lines as they come.
struct Tail {
    lines: Receiver<String>,
    got: Vec<String>,
}

impl Tail {
    /// Waits until a line for LSN `lsn` has been printed.
    fn await_lsn(&mut self, lsn: u64) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while !self.got.iter().any(|l| line_lsn(l) == lsn) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.got.push(line),
                Err(e) => panic!(
                    "the follower never printed LSN {lsn} ({e}); last line: {:?}",
                    self.got.last()
                ),
            }
        }
    }
}

fn line_lsn(line: &str) -> u64 {
    line.split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a record line starts with its LSN: {line:?}"))
}

#[test]
fn tail_follows_a_running_server_across_rolls_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_server, port) = serve(&data);
    let created = sql(port, "CREATE TABLE t (id int PRIMARY KEY, v text)");

    // The server holds the directory's lock; the follower needs none. It
    // starts after the table's creation, whenever it comes up.
    let mut child = aqueduct()
        .args(["wal", "tail", "--follow", "--from-lsn"])
        .arg((created + 1).to_string())
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let follower = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut tail = Tail {
        lines: rx,
        got: Vec::new(),
    };

    // Rows of about 600 bytes: a 64 KiB segment rolls every hundred or so.
    let pad = "p".repeat(600);
    let mut writes: Vec<(u64, String)> = Vec::new();
    for i in 0..300 {
        let mark = format!("row-{i}-");
        let lsn = sql(port, &format!("INSERT INTO t VALUES ({i}, '{mark}{pad}')"));
        writes.push((lsn, mark));
    }
    tail.await_lsn(writes.last().unwrap().0);
    // Updates supersede rows the follower has printed, so compaction
    // rewrites sealed segments behind it while it follows the new ones.
    let passes = metric(port, "aqueduct_log_compaction_passes_total");
    for i in 0..150 {
        let mark = format!("upd-{i}-");
        let lsn = sql(
            port,
            &format!("UPDATE t SET v = '{mark}{pad}' WHERE id = {i}"),
        );
        writes.push((lsn, mark));
        let j = 300 + i;
        let mark = format!("row-{j}-");
        let lsn = sql(port, &format!("INSERT INTO t VALUES ({j}, '{mark}{pad}')"));
        writes.push((lsn, mark));
    }
    let deadline = Instant::now() + STEP_TIMEOUT;
    while metric(port, "aqueduct_log_compaction_passes_total") < passes + 2 {
        assert!(Instant::now() < deadline, "no compaction pass ran");
        std::thread::yield_now();
    }
    assert!(metric(port, "aqueduct_log_segments_sealed_total") >= 5);
    tail.await_lsn(writes.last().unwrap().0);
    drop(follower);

    // In LSN order, each LSN once, and every write's record among them.
    let lsns: Vec<u64> = tail.got.iter().map(|l| line_lsn(l)).collect();
    assert!(
        lsns.windows(2).all(|w| w[0] < w[1]),
        "LSNs out of order or repeated"
    );
    let by_lsn: HashMap<u64, &String> = tail.got.iter().map(|l| (line_lsn(l), l)).collect();
    for (lsn, mark) in &writes {
        let line = by_lsn
            .get(lsn)
            .unwrap_or_else(|| panic!("the follower missed LSN {lsn} ({mark})"));
        // Decoded as a table change: the table, insert or update, the key
        // and the row by column.
        let op = if mark.starts_with("upd-") {
            "update"
        } else {
            "insert"
        };
        assert!(line.contains(&format!(" put table=t {op} key=(")), "{line}");
        assert!(line.contains(" v=\"") && line.contains(" id=\""), "{line}");
        assert!(
            line.contains(mark.as_str()),
            "LSN {lsn} is not {mark}: {line}"
        );
    }
}
