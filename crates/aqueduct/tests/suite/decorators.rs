//! Decorators across servers (`docs/publications.md` §8), end to end: server
//! A publishes `users`; a decorator learns the `txid` of a user's insert
//! from A's JSON lines and writes its own row for that user on server B
//! with `aqueduct.origin` (by the HTTP header and by `SET LOCAL`); B
//! publishes it. Two agents, one per publication, share one SQLite sink:
//! B's, started first, must not apply a decoration before A's agent has
//! applied the user it decorates; past `--causal-timeout` it applies it
//! anyway and reports it.
//!
//! No timed sleeps: every wait is for a condition, under a deadline.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aqueduct_sinks::SqliteSink;
use serde_json::Value as Json;

use common::{aqueduct, free_port, serve, Running, Server, STEP_TIMEOUT};

fn client(pg: u16) -> postgres::Client {
    postgres::Config::new()
        .host("127.0.0.1")
        .port(pg)
        .user("test")
        .dbname("aqueduct")
        .connect_timeout(STEP_TIMEOUT)
        .connect(postgres::NoTls)
        .unwrap()
}

fn agent_args(server: &Server, publication: &str, name: &str, into: &str) -> Vec<String> {
    [
        "subscribe",
        "--from",
        &format!("127.0.0.1:{}", server.http),
        "--publication",
        publication,
        "--name",
        name,
        "--mode",
        "causal",
        "--into",
        into,
        "--workers",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs an agent until it has applied what was committed when it started.
fn catch_up(args: Vec<String>) {
    common::subscribe_until_caught_up(&args);
}

/// A following agent, its stderr in a file (read when the test asks).
fn start_agent(args: Vec<String>, log: &Path) -> Running {
    let mut c: Command = aqueduct();
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    Running(c.spawn().unwrap())
}

/// POST /v1/sql with extra headers; the answer's status line and body.
fn post_sql(server: &Server, sql: &str, headers: &[(&str, &str)]) -> String {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let mut s = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    s.set_read_timeout(Some(STEP_TIMEOUT)).unwrap();
    let mut req = format!(
        "POST /v1/sql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The metrics page of an agent's `--metrics-addr`: the value of
/// `line_start`, if it answers yet.
fn agent_metric(port: u16, line_start: &str) -> Option<u64> {
    let r = aqueduct_mirror::http::request(
        &format!("127.0.0.1:{port}"),
        "GET",
        "/metrics",
        None,
        None,
        STEP_TIMEOUT,
    )
    .ok()?;
    let mut body = r.body;
    let text = String::from_utf8(body.read_to_end(16 << 20).ok()?).ok()?;
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits, under `limit`, until `cond` holds.
fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::yield_now();
    }
}

/// The keys of an object's rows in the sink (none while it has no table).
fn sink_keys(path: &Path, object: &str) -> Vec<String> {
    let sink = SqliteSink::open(path, "check").unwrap();
    sink.rows(object)
        .map(|rows| rows.into_keys().collect())
        .unwrap_or_default()
}

/// A JSON lines subscriber of B's publication, to look at its stream.
fn peek_args(b: &Server, root: &Path) -> Vec<String> {
    let mut args = agent_args(
        b,
        "deco",
        "peek",
        &format!("jsonl:{}", root.join("b.jsonl").display()),
    );
    args.extend([
        "--state-dir".into(),
        root.join("peek-state").display().to_string(),
    ]);
    args
}

struct Setup {
    _dir: tempfile::TempDir,
    a: Server,
    b: Server,
    sink: PathBuf,
    /// The txids of the inserts of users 1 and 2 on A.
    txids: Vec<String>,
    root: PathBuf,
}

/// Servers A and B, two users on A, and the decorations of both on B, each
/// with its user's insert as origin: user 1's by the HTTP header, user 2's
/// by `SET LOCAL` in a transaction block.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let a = serve(&root.join("a"), &["--fsync", "never"]);
    let b = serve(&root.join("b"), &["--fsync", "never"]);
    let mut ca = client(a.pg);
    ca.batch_execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text);
         CREATE PUBLICATION social FOR TABLE users WITH (mode = 'causal')",
    )
    .unwrap();
    let mut cb = client(b.pg);
    cb.batch_execute(
        "CREATE TABLE user_interests (user_id int PRIMARY KEY, interests text);
         CREATE PUBLICATION deco FOR TABLE user_interests WITH (mode = 'causal')",
    )
    .unwrap();
    // The decorator reads A's JSON lines: bootstrapped (empty) first, so
    // the inserts come as transactions with their txids.
    let lines = root.join("a.jsonl");
    let reader = |root: &Path| {
        let mut args = agent_args(
            &a,
            "social",
            "decorator",
            &format!("jsonl:{}", lines.display()),
        );
        args.extend([
            "--state-dir".into(),
            root.join("dec-state").display().to_string(),
        ]);
        args
    };
    catch_up(reader(&root));
    for (id, name) in [(1, "ada"), (2, "bob")] {
        ca.execute("INSERT INTO users VALUES ($1, $2)", &[&id, &name])
            .unwrap();
    }
    catch_up(reader(&root));
    let mut txids = Vec::new();
    for line in std::fs::read_to_string(&lines).unwrap().lines() {
        let j: Json = serde_json::from_str(line).unwrap();
        if j["type"] == "txn" && j["changes"][0]["object"] == "users" {
            txids.push(j["txid"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(txids.len(), 2, "the decorator saw both inserts");
    // B's subscribers bootstrap before the decorations are written: rows
    // of a bootstrap snapshot carry no origins (§8), only transactions do.
    let sink = root.join("sink.db");
    catch_up(agent_args(
        &b,
        "deco",
        "deco",
        &format!("sqlite:{}", sink.display()),
    ));
    catch_up(peek_args(&b, &root));
    // Malformed origins are refused, naming the form.
    let e = cb
        .batch_execute("SET aqueduct.origin = 'not a txid'")
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "22023");
    assert!(e
        .as_db_error()
        .unwrap()
        .hint()
        .unwrap()
        .contains("<server_id>:<lsn>"));
    let answer = post_sql(&b, "SELECT 1", &[("Aqueduct-Origin", "x:y")]);
    assert!(answer.contains("22023"), "{answer}");
    // User 1's decoration by the header, user 2's by SET LOCAL.
    let answer = post_sql(
        &b,
        "INSERT INTO user_interests VALUES (1, 'chess')",
        &[("Aqueduct-Origin", &txids[0])],
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    cb.batch_execute(&format!(
        "BEGIN; SET LOCAL aqueduct.origin = '{}';
         INSERT INTO user_interests VALUES (2, 'go'); COMMIT",
        txids[1]
    ))
    .unwrap();
    // SET LOCAL ended with the block: a later write has no origin.
    let shown: String = cb.query_one("SHOW aqueduct.origin", &[]).unwrap().get(0);
    assert_eq!(shown, "");
    Setup {
        _dir: dir,
        a,
        b,
        sink,
        txids,
        root,
    }
}

#[test]
fn a_decoration_waits_for_the_object_it_decorates() {
    let s = setup();
    // B's stream carries the origins.
    let b_lines = s.root.join("b.jsonl");
    catch_up(peek_args(&s.b, &s.root));
    let mut origins = Vec::new();
    for line in std::fs::read_to_string(&b_lines).unwrap().lines() {
        let j: Json = serde_json::from_str(line).unwrap();
        if j["type"] == "txn" {
            let o = &j["origin"][0];
            assert!(o.is_object(), "no origin in {line}");
            origins.push(format!("{}:{}", o["server_id"].as_str().unwrap(), o["lsn"]));
        }
    }
    // Two workers may hand the lines on in either order.
    origins.sort();
    let mut txids = s.txids.clone();
    txids.sort();
    assert_eq!(origins, txids, "each decoration carries its user's txid");

    // B's agent first: it receives both decorations and holds them.
    let into = format!("sqlite:{}", s.sink.display());
    let metrics = free_port();
    let mut args = agent_args(&s.b, "deco", "deco", &into);
    args.extend(["--metrics-addr".into(), format!("127.0.0.1:{metrics}")]);
    let b_agent = start_agent(args, &s.root.join("b-agent.log"));
    // Until it holds both, or (wrongly) applied one.
    wait_until(STEP_TIMEOUT, "B's agent holds both decorations", || {
        agent_metric(metrics, "aqueduct_subscribe_origins_waiting_txns") == Some(2)
            || !sink_keys(&s.sink, "user_interests").is_empty()
    });
    assert_eq!(
        sink_keys(&s.sink, "user_interests"),
        Vec::<String>::new(),
        "a decoration was applied before the user it decorates"
    );
    // A's agent into the same sink: the users arrive, then the decorations.
    catch_up(agent_args(&s.a, "social", "social", &into));
    assert_eq!(sink_keys(&s.sink, "users"), vec!["[1]", "[2]"]);
    wait_until(STEP_TIMEOUT, "B's agent applies the decorations", || {
        sink_keys(&s.sink, "user_interests").len() == 2
    });
    assert_eq!(
        agent_metric(metrics, "aqueduct_subscribe_origin_fallbacks_total"),
        Some(0)
    );
    drop(b_agent);
}

#[test]
fn past_the_causal_timeout_a_decoration_is_applied_and_reported() {
    let s = setup();
    let into = format!("sqlite:{}", s.sink.display());
    let metrics = free_port();
    let mut args = agent_args(&s.b, "deco", "deco", &into);
    args.extend([
        "--metrics-addr".into(),
        format!("127.0.0.1:{metrics}"),
        // The shortest timeout the agent accepts.
        "--causal-timeout".into(),
        "60s".into(),
    ]);
    let log = s.root.join("b-agent.log");
    let b_agent = start_agent(args, &log);
    let started = Instant::now();
    wait_until(STEP_TIMEOUT, "B's agent holds both decorations", || {
        agent_metric(metrics, "aqueduct_subscribe_origins_waiting_txns") == Some(2)
    });
    assert!(sink_keys(&s.sink, "user_interests").is_empty());
    // A's agent never runs: after the timeout they are applied anyway.
    wait_until(
        STEP_TIMEOUT * 2,
        "the fallback applies the decorations",
        || sink_keys(&s.sink, "user_interests").len() == 2,
    );
    assert!(started.elapsed() >= Duration::from_secs(59));
    wait_until(STEP_TIMEOUT, "the fallbacks are counted", || {
        agent_metric(metrics, "aqueduct_subscribe_origin_fallbacks_total") == Some(2)
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("waited past the causal timeout for its origins"),
        "{text}"
    );
    assert!(sink_keys(&s.sink, "users").is_empty());
    drop(b_agent);
}
