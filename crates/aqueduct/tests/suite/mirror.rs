//! Embedded mirrors (`aqueduct-mirror`) against the real server: a mirror
//! equals the server after random writes (DDL included), a restarted mirror
//! resumes from its saved position or bootstraps again, and across a kill -9
//! of the server both a plain change-stream consumer and a mirror resume
//! from their last LSN with nothing missing and nothing twice.
//!
//! No timed sleeps: every wait is for a condition, under a deadline.

use crate::common::free_port;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LockResult, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aqueduct_mirror::http;
use aqueduct_mirror::{
    value_from_json, DirFollower, Follower, FollowerConfig, Key, Lsn, Mirror, MirrorChange,
    Position, Row, TableInfo, Tables,
};
use serde_json::Value as Json;

const DEADLINE: Duration = Duration::from_secs(60);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// A value some threads change and others wait on: every change through
/// [`Watched::update`] wakes the waiters, who check their condition again.
#[derive(Default)]
struct Watched<T> {
    value: Mutex<T>,
    changed: Condvar,
}

impl<T> Watched<T> {
    fn new(value: T) -> Arc<Watched<T>> {
        Arc::new(Watched {
            value: Mutex::new(value),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        self.value.lock()
    }

    fn update<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let r = f(&mut self.value.lock().unwrap());
        self.changed.notify_all();
        r
    }

    /// Waits until `done` holds, failing with `what()` after [`DEADLINE`].
    fn wait_until(&self, mut done: impl FnMut(&T) -> bool, what: impl Fn(&T) -> String) {
        let deadline = Instant::now() + DEADLINE;
        let mut v = self.value.lock().unwrap();
        while !done(&v) {
            let now = Instant::now();
            assert!(now < deadline, "{}", what(&v));
            v = self.changed.wait_timeout(v, deadline - now).unwrap().0;
        }
    }
}

// ------------------------------------------------------------------ server

/// `aqueduct serve` on a data directory and fixed loopback ports.
struct Server {
    child: Option<Child>,
    data: PathBuf,
    http_port: u16,
    pg_port: u16,
    log: PathBuf,
    /// More arguments of `aqueduct serve`.
    args: Vec<String>,
}

impl Server {
    fn start(data: &Path) -> Server {
        Server::start_with(data, &[])
    }

    fn start_with(data: &Path, args: &[&str]) -> Server {
        let mut s = Server {
            child: None,
            data: data.to_path_buf(),
            http_port: free_port(),
            pg_port: free_port(),
            log: data.with_extension("log"),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    /// Starts the binary on the same directory and ports, and waits for
    /// /health.
    fn spawn(&mut self) {
        assert!(self.child.is_none());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_aqueduct"));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AQUEDUCT_") {
                command.env_remove(name);
            }
        }
        let child = command
            .args(["serve", "--data-dir"])
            .arg(&self.data)
            .args([
                "--pg-addr",
                &format!("127.0.0.1:{}", self.pg_port),
                "--http-addr",
                &self.addr(),
                "--fsync",
                "always",
            ])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "aqueduct exited during start-up ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if let Ok(mut r) = http::request(
                &self.addr(),
                "GET",
                "/health",
                None,
                None,
                Duration::from_secs(1),
            ) {
                if r.status == 200 && r.body.read_to_end(4096).is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "aqueduct did not become healthy");
            std::thread::yield_now();
        }
    }

    /// SIGKILL to the child started here, and reap it.
    fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            // Its exit is awaited on a channel, with a deadline.
            let pid = child.id().to_string();
            let (exited, exit) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = child.wait();
                let _ = exited.send(());
            });
            if exit.recv_timeout(DEADLINE).is_err() {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                let _ = exit.recv_timeout(DEADLINE);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sql(addr: &str, text: &str) -> Result<Json, aqueduct_mirror::Error> {
    http::sql(addr, None, text, &[], HTTP_TIMEOUT)
}

/// Runs a statement that must succeed; returns its LSN.
fn exec(addr: &str, text: &str) -> Lsn {
    let r = sql(addr, text).unwrap_or_else(|e| panic!("{text}: {e}"));
    r["lsn"].as_u64().unwrap_or(0)
}

/// `SELECT * FROM table` as rows by primary key (`pk`: column positions).
fn server_rows(addr: &str, table: &str, pk: &[usize]) -> BTreeMap<Key, Row> {
    let r = sql(addr, &format!("SELECT * FROM {table}")).unwrap();
    let types: Vec<_> = r["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| aqueduct_mirror::parse_type(c["type"].as_str().unwrap()).unwrap())
        .collect();
    r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let row: Row = row
                .as_array()
                .unwrap()
                .iter()
                .zip(&types)
                .map(|(v, ty)| value_from_json(v, ty).unwrap())
                .collect();
            (pk.iter().map(|&i| row[i].clone()).collect(), row)
        })
        .collect()
}

// ------------------------------------------------------------------ mirror

/// A mirror the test can read while the follower's thread feeds it.
#[derive(Default)]
struct State {
    tables: Tables,
    /// LSN of every `committed` call, in order.
    committed: Vec<Lsn>,
    resets: u64,
}

#[derive(Clone, Default)]
struct Shared(Arc<Watched<State>>);

impl Mirror for Shared {
    fn reset(&mut self) {
        let mut s = self.0.lock().unwrap();
        s.tables.reset();
        s.resets += 1;
    }
    fn load(&mut self, table: &TableInfo, key: &Key, row: &Row) {
        self.0.lock().unwrap().tables.load(table, key, row);
    }
    fn apply(&mut self, lsn: Lsn, change: &MirrorChange) {
        self.0.lock().unwrap().tables.apply(lsn, change);
    }
    fn committed(&mut self, lsn: Lsn) {
        self.0.update(|s| s.committed.push(lsn));
    }
}

impl Shared {
    fn lsn(&self) -> Lsn {
        self.0
            .lock()
            .unwrap()
            .committed
            .last()
            .copied()
            .unwrap_or(0)
    }

    fn wait_for(&self, lsn: Lsn) {
        let reached = |s: &State| s.committed.last().copied().unwrap_or(0);
        self.0.wait_until(
            |s| reached(s) >= lsn,
            |s| format!("the mirror reached LSN {} only, not {lsn}", reached(s)),
        );
    }

    /// Asserts the mirror holds exactly what `SELECT *` answers.
    fn assert_equals_server(&self, addr: &str, tables: &[(&str, &[usize])]) {
        let s = self.0.lock().unwrap();
        assert!(
            s.tables.anomalies.is_empty(),
            "changes that did not fit: {:?}",
            s.tables.anomalies
        );
        for (name, pk) in tables {
            let server = server_rows(addr, name, pk);
            let empty = BTreeMap::new();
            let mine = s.tables.tables.get(*name).unwrap_or(&empty);
            assert_eq!(mine.len(), server.len(), "rows of {name}");
            assert!(!server.is_empty(), "table {name} is empty: a weak check");
            assert!(mine == &server, "table {name} differs from the server");
        }
    }
}

/// A follower on its own thread, stopped (and its follower returned) by
/// `stop`.
struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Follower<Shared>>,
}

fn run(mut f: Follower<Shared>) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        f.run_until(&s);
        f
    });
    Running { stop, thread }
}

impl Running {
    fn stop(self) -> Follower<Shared> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn config(addr: &str) -> FollowerConfig {
    let mut c = FollowerConfig::new(addr);
    c.min_backoff = Duration::from_millis(10);
    c.max_backoff = Duration::from_millis(200);
    c
}

// ------------------------------------------------------------------ writes

/// A small deterministic random generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE a (id bigint PRIMARY KEY, name text, score double precision, flag boolean)",
    "CREATE TABLE b (k1 bigint, k2 text, amount numeric(12,2), at timestamptz, PRIMARY KEY (k1, k2))",
    "CREATE TABLE d (id bigint PRIMARY KEY, v text)",
];

const CHECKED: &[(&str, &[usize])] = &[("a", &[0]), ("b", &[0, 1]), ("c", &[0])];

/// One random write statement over tables a, b (and c when it exists).
fn random_statement(rng: &mut Rng, with_c: bool) -> String {
    let id = rng.below(40);
    let k2 = ["x", "y", "z"][rng.below(3) as usize];
    match rng.below(if with_c { 9 } else { 7 }) {
        0 | 1 => format!(
            "INSERT INTO a VALUES ({id}, 'n{}', {}.25, {}) ON CONFLICT (id) DO UPDATE SET name = excluded.name, score = excluded.score",
            rng.below(1000),
            rng.below(100),
            rng.below(2) == 0
        ),
        2 => format!("UPDATE a SET score = score + 1.5, flag = NOT flag WHERE id = {id}"),
        3 => format!("DELETE FROM a WHERE id = {id}"),
        4 => format!(
            "INSERT INTO b VALUES ({id}, '{k2}', {}.{:02}, '2024-0{}-1{} 12:34:56.789+00') ON CONFLICT (k1, k2) DO UPDATE SET amount = excluded.amount",
            rng.below(10_000),
            rng.below(100),
            1 + rng.below(9),
            rng.below(10)
        ),
        5 => format!("DELETE FROM b WHERE k1 = {id}"),
        6 => format!("UPDATE b SET amount = amount * 2 WHERE k1 < {id}"),
        7 => format!(
            "INSERT INTO c VALUES ({id}, 'c{}') ON CONFLICT (id) DO UPDATE SET note = excluded.note",
            rng.below(100)
        ),
        _ => format!("DELETE FROM c WHERE id = {id}"),
    }
}

/// Runs `n` random writes, some as multi-statement transactions; returns
/// the last LSN written.
fn random_writes(addr: &str, rng: &mut Rng, n: usize, with_c: bool) -> Lsn {
    let mut last = 0;
    let mut failed = Vec::new();
    for _ in 0..n {
        let text = if rng.below(4) == 0 {
            let body: Vec<String> = (0..1 + rng.below(4))
                .map(|_| random_statement(rng, with_c))
                .collect();
            format!("BEGIN; {}; COMMIT", body.join("; "))
        } else {
            random_statement(rng, with_c)
        };
        match sql(addr, &text) {
            Ok(r) => last = last.max(r["lsn"].as_u64().unwrap_or(0)),
            Err(e) => failed.push(format!("{text}: {e}")),
        }
    }
    // Some fail (numeric overflow of a doubled amount, a key taken twice
    // in one transaction), most must not.
    assert!(
        failed.len() * 5 < n,
        "{} of {n} writes failed: {failed:?}",
        failed.len()
    );
    last
}

fn setup(addr: &str) -> Lsn {
    let mut last = 0;
    for s in SCHEMA {
        last = exec(addr, s);
    }
    last
}

/// The server's LSN now: a write's.
fn mark(addr: &str) -> Lsn {
    static MARKS: AtomicU64 = AtomicU64::new(0);
    let n = MARKS.fetch_add(1, Ordering::Relaxed);
    exec(
        addr,
        &format!("INSERT INTO a VALUES (1000, 'mark{n}', 0, true) ON CONFLICT (id) DO UPDATE SET name = excluded.name"),
    )
}

// ------------------------------------------------------------------ tests

#[test]
fn mirror_equals_the_server_after_random_writes_and_ddl() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let addr = server.addr();
    setup(&addr);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    random_writes(&addr, &mut rng, 60, false);

    let mirror = Shared::default();
    let running = run(Follower::new(config(&addr), mirror.clone()));
    random_writes(&addr, &mut rng, 150, false);
    // A table created while following arrives as a schema change.
    exec(&addr, "CREATE TABLE c (id bigint PRIMARY KEY, note text)");
    random_writes(&addr, &mut rng, 150, true);
    mirror.wait_for(mark(&addr));
    mirror.assert_equals_server(&addr, CHECKED);

    // Dropping a table is a change like any other, whether it was created
    // while following or brought by the snapshot (whose header names
    // each table's id).
    exec(&addr, "DROP TABLE c");
    exec(&addr, "CREATE TABLE c (id bigint PRIMARY KEY, note text)");
    random_writes(&addr, &mut rng, 50, true);
    mirror.wait_for(mark(&addr));
    mirror.assert_equals_server(&addr, CHECKED);
    assert_eq!(mirror.0.lock().unwrap().resets, 1);
    exec(&addr, "DROP TABLE d");
    random_writes(&addr, &mut rng, 100, true);
    mirror.wait_for(mark(&addr));
    mirror.assert_equals_server(&addr, CHECKED);
    let f = running.stop();
    let s = mirror.0.lock().unwrap();
    assert_eq!(f.status().bootstraps, 1, "{:?}", f.status());
    assert_eq!(s.resets, 1);
    assert!(!s.tables.tables.contains_key("d"));
    assert!(
        s.committed.windows(2).all(|w| w[0] < w[1]),
        "LSNs applied out of order"
    );
}

#[test]
fn a_restarted_mirror_resumes_from_its_saved_position_or_bootstraps_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let addr = server.addr();
    setup(&addr);
    exec(&addr, "CREATE TABLE c (id bigint PRIMARY KEY, note text)");
    let mut rng = Rng(42);
    random_writes(&addr, &mut rng, 80, true);

    let first = Shared::default();
    let running = run(Follower::new(config(&addr), first.clone()));
    random_writes(&addr, &mut rng, 80, true);
    first.wait_for(mark(&addr));
    let f = running.stop();
    // What the application saves: its data and the position, together.
    let saved_position = f.position().unwrap().to_json();
    let saved_tables = first.0.lock().unwrap().tables.clone();
    assert_eq!(f.position().unwrap().lsn, first.lsn());
    drop(f);

    // Written while no mirror runs.
    random_writes(&addr, &mut rng, 80, true);

    // A new process restores both and resumes: no snapshot.
    let restored = Shared::default();
    restored.0.lock().unwrap().tables = saved_tables;
    let position = Position::from_json(&saved_position).unwrap();
    let resumed = run(Follower::resume(config(&addr), restored.clone(), position));
    // And one that saved nothing bootstraps.
    let fresh = Shared::default();
    let bootstrapped = run(Follower::new(config(&addr), fresh.clone()));
    random_writes(&addr, &mut rng, 80, true);
    let end = mark(&addr);
    restored.wait_for(end);
    fresh.wait_for(end);
    restored.assert_equals_server(&addr, CHECKED);
    fresh.assert_equals_server(&addr, CHECKED);
    let r = resumed.stop();
    let b = bootstrapped.stop();
    assert_eq!(r.status().bootstraps, 0);
    assert_eq!(restored.0.lock().unwrap().resets, 0);
    assert_eq!(b.status().bootstraps, 1);
}

/// A consumer of `/v1/changes` that records every message, reconnecting
/// from the last LSN + 1 whenever the stream breaks.
struct Recorder {
    messages: Arc<Watched<Vec<Json>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    reconnects: Arc<AtomicU64>,
}

impl Recorder {
    fn start(addr: &str) -> Recorder {
        let messages = Watched::new(Vec::new());
        let stop = Arc::new(AtomicBool::new(false));
        let reconnects = Arc::new(AtomicU64::new(0));
        let (m, s, n, addr) = (
            messages.clone(),
            stop.clone(),
            reconnects.clone(),
            addr.to_string(),
        );
        let thread = std::thread::spawn(move || {
            let mut next = 1;
            while !s.load(Ordering::Relaxed) {
                let path = format!("/v1/changes?from_lsn={next}");
                let Ok(mut r) = http::request(&addr, "GET", &path, None, None, HTTP_TIMEOUT) else {
                    // The server is down: try again until it is back.
                    std::thread::yield_now();
                    continue;
                };
                if r.status != 200 {
                    // Starting up or shutting down: try again until it serves.
                    std::thread::yield_now();
                    continue;
                }
                n.fetch_add(1, Ordering::Relaxed);
                r.body
                    .set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                while !s.load(Ordering::Relaxed) {
                    match r.body.next_line() {
                        Ok(Some(line)) if line.is_empty() => {}
                        Ok(Some(line)) => {
                            let msg: Json = serde_json::from_slice(&line).unwrap();
                            assert!(msg.get("error").is_none(), "{msg}");
                            next = msg["lsn"].as_u64().unwrap() + 1;
                            m.update(|v| v.push(msg));
                        }
                        Ok(None) => break,
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                }
            }
        });
        Recorder {
            messages,
            stop,
            thread: Some(thread),
            reconnects,
        }
    }

    fn wait_for(&self, lsn: Lsn) {
        let reached = |v: &Vec<Json>| v.last().map_or(0, |m| m["lsn"].as_u64().unwrap());
        self.messages.wait_until(
            |v| reached(v) >= lsn,
            |v| format!("the consumer reached {} only", reached(v)),
        );
    }

    fn finish(mut self) -> Vec<Json> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.messages.lock().unwrap())
    }
}

/// Every message the server's log holds from LSN 1 up to `end`, read anew.
fn log_messages(addr: &str, end: Lsn) -> Vec<Json> {
    let mut r = http::request(
        addr,
        "GET",
        "/v1/changes?from_lsn=1",
        None,
        None,
        HTTP_TIMEOUT,
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let mut out = Vec::new();
    while out
        .last()
        .is_none_or(|m: &Json| m["lsn"].as_u64().unwrap() < end)
    {
        let line = r.body.next_line().unwrap().expect("the stream goes on");
        if !line.is_empty() {
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

#[test]
fn consumer_and_mirror_resume_across_a_kill_9_with_nothing_missing_or_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"));
    let addr = server.addr();
    setup(&addr);
    exec(&addr, "CREATE TABLE c (id bigint PRIMARY KEY, note text)");
    let mut rng = Rng(7);
    random_writes(&addr, &mut rng, 40, true);

    let recorder = Recorder::start(&addr);
    let mirror = Shared::default();
    let running = run(Follower::new(config(&addr), mirror.clone()));
    mirror.wait_for(mark(&addr));

    // A writer that goes on through the kill and the restart, noting what
    // was acknowledged (a write that fails is not retried: it may or may
    // not have committed, and either is fine).
    let acked = Watched::new(Vec::<Lsn>::new());
    let stop_writer = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop, addr) = (acked.clone(), stop_writer.clone(), addr.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(11);
            while !stop.load(Ordering::Relaxed) {
                let text = random_statement(&mut rng, true);
                if let Ok(r) = sql(&addr, &text) {
                    if let Some(l) = r["lsn"].as_u64().filter(|&l| l > 0) {
                        acked.update(|a| a.push(l));
                    }
                }
            }
        })
    };
    let acked_count = |n: usize| {
        let start = acked.lock().unwrap().len();
        acked.wait_until(|a| a.len() >= start + n, |_| "the writer is stuck".into());
    };
    acked_count(30);
    server.kill9();
    server.spawn();
    acked_count(30);
    stop_writer.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    random_writes(&addr, &mut rng, 40, true);
    let end = mark(&addr);
    recorder.wait_for(end);
    mirror.wait_for(end);

    mirror.assert_equals_server(&addr, CHECKED);
    let f = running.stop();
    assert_eq!(f.status().bootstraps, 1, "{:?}", f.status());
    assert!(f.status().streams_opened >= 2, "{:?}", f.status());
    let reconnects = recorder.reconnects.load(Ordering::Relaxed);
    let got = recorder.finish();
    assert!(reconnects >= 2, "the consumer never reconnected");

    // The consumer: LSNs strictly increase, each transaction after the last.
    for w in got.windows(2) {
        let (prev, next) = (w[0]["lsn"].as_u64().unwrap(), &w[1]);
        assert!(
            next["first_lsn"].as_u64().unwrap() > prev,
            "message {next} repeats or overlaps LSN {prev}"
        );
    }
    // Exactly the server's log, message for message: nothing missing.
    let log = log_messages(&addr, end);
    let got: Vec<Json> = got
        .into_iter()
        .filter(|m| m["lsn"].as_u64().unwrap() <= end)
        .collect();
    assert_eq!(got.len(), log.len(), "messages seen vs the log's");
    for (g, l) in got.iter().zip(&log) {
        assert_eq!(g, l);
    }
    // Every acknowledged write is in a message.
    for l in acked.lock().unwrap().iter() {
        assert!(
            got.iter().any(|m| m["first_lsn"].as_u64().unwrap() <= *l
                && *l <= m["lsn"].as_u64().unwrap()),
            "acknowledged LSN {l} is in no message"
        );
    }
    // The mirror: after its snapshot, exactly the log's transactions.
    let s = mirror.0.lock().unwrap();
    let snapshot = s.committed[0];
    let expected: Vec<Lsn> = log
        .iter()
        .map(|m| m["lsn"].as_u64().unwrap())
        .filter(|&l| l > snapshot)
        .collect();
    let applied: Vec<Lsn> = s.committed[1..]
        .iter()
        .copied()
        .filter(|&l| l <= end)
        .collect();
    assert_eq!(applied, expected, "transactions the mirror applied");
    drop(s);
    server.stop();
}

// ------------------------------------------------- compaction and the directory

/// The smallest segments the server takes, and a compaction pass every
/// second.
const COMPACTING: &[&str] = &[
    "--segment-bytes",
    "65536",
    "--compaction-interval-secs",
    "1",
];

/// A counter or gauge of the server's `/metrics`.
fn metric(addr: &str, name: &str) -> u64 {
    let mut r = http::request(addr, "GET", "/metrics", None, None, HTTP_TIMEOUT).unwrap();
    assert_eq!(r.status, 200);
    let body = String::from_utf8(r.body.read_to_end(1 << 22).unwrap()).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} in /metrics")) as u64
}

/// Waits until two more compaction passes have ended: the second began
/// after everything written so far.
fn wait_for_compaction(addr: &str) {
    let name = "aqueduct_log_compaction_passes_total";
    let passes = metric(addr, name);
    let deadline = Instant::now() + DEADLINE;
    // Each check is a request to the server: the loop needs no pause.
    while metric(addr, name) < passes + 2 {
        assert!(Instant::now() < deadline, "no compaction pass ran");
    }
}

/// The lowest LSN from which the log in `data` holds every record, from
/// its `meta` file.
fn exact_point(data: &Path) -> Lsn {
    let meta = match std::fs::read(data.join("meta")) {
        Ok(b) => aqueduct_log::Meta::decode(&b).unwrap(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 1,
        Err(e) => panic!("reading the log metadata: {e}"),
    };
    meta.compacted_until.max(meta.purged_lsn + 1)
}

/// Updates of the same few keys, of about 1 KB each: records compaction
/// drops, and a segment sealed every 60 or so.
fn churn(addr: &str, n: usize) {
    let pad = "p".repeat(1000);
    for i in 0..n {
        exec(
            addr,
            &format!(
                "INSERT INTO a VALUES ({}, 'churn{i}{pad}', {i}, true) ON CONFLICT (id) DO UPDATE SET name = excluded.name, score = excluded.score",
                i % 5
            ),
        );
    }
}

/// A directory follower on its own thread, stopped (and returned) by `stop`.
struct RunningDir {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<DirFollower<Shared>>,
}

fn run_dir(mut f: DirFollower<Shared>) -> RunningDir {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        f.run_until(&s, Duration::from_millis(5));
        f
    });
    RunningDir { stop, thread }
}

impl RunningDir {
    fn stop(self) -> DirFollower<Shared> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

#[test]
fn a_directory_mirror_follows_a_running_compacting_server_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(&data, COMPACTING);
    let addr = server.addr();
    setup(&addr);
    exec(&addr, "CREATE TABLE c (id bigint PRIMARY KEY, note text)");
    let mut rng = Rng(7);
    random_writes(&addr, &mut rng, 80, true);
    churn(&addr, 100);
    wait_for_compaction(&addr);
    assert!(exact_point(&data) > 1, "the server did not compact its log");

    // Bootstrapped from the running server's directory, then following it
    // while it writes and compacts.
    let mirror = Shared::default();
    let running = run_dir(DirFollower::new(&data, mirror.clone()));
    random_writes(&addr, &mut rng, 100, true);
    churn(&addr, 100);
    mirror.wait_for(mark(&addr));
    mirror.assert_equals_server(&addr, CHECKED);
    wait_for_compaction(&addr);
    random_writes(&addr, &mut rng, 100, true);
    mirror.wait_for(mark(&addr));
    mirror.assert_equals_server(&addr, CHECKED);
    let f = running.stop();
    assert!(
        mirror
            .0
            .lock()
            .unwrap()
            .committed
            .windows(2)
            .all(|w| w[0] < w[1]),
        "LSNs applied out of order"
    );

    // A restart from the saved data and position, nothing written
    // meanwhile: it resumes, without a snapshot.
    let saved = f.position().unwrap();
    assert_eq!(saved.lsn, mirror.lsn());
    let restored = Shared::default();
    restored.0.lock().unwrap().tables = mirror.0.lock().unwrap().tables.clone();
    let mut r = DirFollower::resume(&data, restored.clone(), saved.clone());
    assert_eq!(r.poll_once().unwrap(), 0);
    assert_eq!(r.position().unwrap().lsn, saved.lsn);
    let running = run_dir(r);
    random_writes(&addr, &mut rng, 100, true);
    churn(&addr, 50);
    restored.wait_for(mark(&addr));
    restored.assert_equals_server(&addr, CHECKED);
    let r = running.stop();
    assert_eq!(restored.0.lock().unwrap().resets, 0, "bootstrapped again");

    // A restart after compaction went past the saved position: reset and
    // bootstrapped again.
    let saved = r.position().unwrap();
    let saved_tables = restored.0.lock().unwrap().tables.clone();
    drop(r);
    random_writes(&addr, &mut rng, 80, true);
    churn(&addr, 100);
    let deadline = Instant::now() + DEADLINE;
    while exact_point(&data) <= saved.lsn + 1 {
        assert!(
            Instant::now() < deadline,
            "compaction did not pass the position"
        );
        std::thread::yield_now();
    }
    // The pass that moved the exact point stores it before it rewrites
    // segments; a replay while it rewrites starts over, so let it end.
    let name = "aqueduct_log_compaction_passes_total";
    let passes = metric(&addr, name);
    while metric(&addr, name) <= passes {
        assert!(Instant::now() < deadline, "the compaction pass did not end");
    }
    let again = Shared::default();
    again.0.lock().unwrap().tables = saved_tables;
    let mut g = DirFollower::resume(&data, again.clone(), saved);
    assert_eq!(g.poll_once().unwrap(), 1, "one bootstrap");
    assert_eq!(again.0.lock().unwrap().resets, 1);
    let running = run_dir(g);
    random_writes(&addr, &mut rng, 50, true);
    again.wait_for(mark(&addr));
    again.assert_equals_server(&addr, CHECKED);
    running.stop();
}

#[test]
fn a_follower_whose_position_was_compacted_away_gets_55000_and_bootstraps_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A small change-feed buffer: a position it no longer holds is served
    // from the log, and refused below the log's exact point.
    let args = [COMPACTING, &["--feed-memory", "16384"]].concat();
    let server = Server::start_with(&data, &args);
    let addr = server.addr();
    setup(&addr);
    exec(&addr, "CREATE TABLE c (id bigint PRIMARY KEY, note text)");
    let mut rng = Rng(11);
    random_writes(&addr, &mut rng, 60, true);

    let first = Shared::default();
    let running = run(Follower::new(config(&addr), first.clone()));
    random_writes(&addr, &mut rng, 60, true);
    first.wait_for(mark(&addr));
    let f = running.stop();
    let saved = f.position().unwrap();
    let saved_tables = first.0.lock().unwrap().tables.clone();
    drop(f);

    // While no mirror runs: many updates of the same keys, and compaction
    // passes that began after them.
    churn(&addr, 300);
    random_writes(&addr, &mut rng, 40, true);
    wait_for_compaction(&addr);
    assert!(
        exact_point(&data) > saved.lsn + 1,
        "compaction did not pass the saved position"
    );

    let restored = Shared::default();
    restored.0.lock().unwrap().tables = saved_tables;
    let mut r = Follower::resume(config(&addr), restored.clone(), saved);
    let e = r
        .poll_once(Duration::from_secs(1))
        .expect_err("a stream from a compacted position");
    assert!(e.is_gone(), "not SQLSTATE 55000: {e}");
    let running = run(r);
    random_writes(&addr, &mut rng, 40, true);
    restored.wait_for(mark(&addr));
    restored.assert_equals_server(&addr, CHECKED);
    let r = running.stop();
    assert_eq!(r.status().bootstraps, 1, "{:?}", r.status());
    assert_eq!(restored.0.lock().unwrap().resets, 1);
}

/// A mirror given several members holding the same log (a server and its
/// follower, `docs/replication.md`) fails over from one to the next when
/// the one it follows is killed, from the same LSN: it misses nothing and
/// sees nothing twice (its `Tables` notes any change that does not fit),
/// and ends equal to the server.
#[test]
fn a_mirror_fails_over_between_members_without_a_gap_or_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let source = Server::start(&dir.path().join("source"));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    setup(&source.addr());
    random_writes(&source.addr(), &mut rng, 60, false);
    let mut follower =
        Server::start_with(&dir.path().join("follower"), &["--follow", &source.addr()]);
    let mut cfg = config(&follower.addr());
    cfg.other_members = vec![source.addr()];
    let mirror = Shared::default();
    let running = run(Follower::new(cfg, mirror.clone()));
    random_writes(&source.addr(), &mut rng, 75, false);
    mirror.wait_for(mark(&source.addr()));
    // The member it follows goes: it goes on from the source.
    follower.kill9();
    random_writes(&source.addr(), &mut rng, 75, false);
    mirror.wait_for(mark(&source.addr()));
    // The follower is back (the source takes the writes throughout).
    follower.spawn();
    random_writes(&source.addr(), &mut rng, 60, false);
    mirror.wait_for(mark(&source.addr()));
    let f = running.stop();
    assert!(
        f.status().streams_opened >= 2,
        "the mirror opened {} streams: it did not fail over",
        f.status().streams_opened
    );
    mirror.assert_equals_server(&source.addr(), &CHECKED[..2]);
}
