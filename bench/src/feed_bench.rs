//! `bench feed`: how fast the change feed delivers, and what following it
//! costs writers, against PostgreSQL 15's logical decoding.
//!
//! 1. In process: changes/s handed to one consumer calling
//!    `Subscription::recv` in a loop, (a) following live while writers load
//!    the table, (b) draining a feed memory that holds every message, and
//!    (c) catching up through the log from the first of `--changes`
//!    one-row transactions, with a feed memory too small to hold them.
//! 2. Over HTTP: `GET /v1/changes?from_lsn=1` (NDJSON) from the real server
//!    (`aqueduct serve`, a child process on 127.0.0.1), read and parsed by a
//!    client in this process, from the server's memory and, after a
//!    restart, from its log.
//! 3. Writes: writer threads run autocommit one-row inserts and updates
//!    through in-process sessions with 0, 1 and 8 consumers following.
//! 4. PostgreSQL 15 (a throwaway cluster, `wal_level=logical`): the same
//!    writes over the wire with 0, 1 and 8 logical slots consumed by
//!    `pg_recvlogical` (plugin `test_decoding`), and the decoding rate of one
//!    slot 1,000,000 transactions behind.
//!
//! Durability is off on both sides (Aqueduct: `SyncPolicy::Never` in
//! process, `--fsync never` for the server; PostgreSQL:
//! `synchronous_commit=off`), so the numbers are the CPU cost of the feed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use aqueduct_feed::{Change, FeedOptions};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_mirror::{Follower, FollowerConfig, Tables as MirrorTables};
use aqueduct_sql::Engine;
use aqueduct_values::Value;
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{self, print_table, thousands};
use crate::pg::PgServer;
use crate::view_read::{exec, insert_all};

#[derive(Args, Debug, Serialize)]
pub struct FeedArgs {
    /// One-row transactions a consumer catches up on (in process and in
    /// PostgreSQL).
    #[arg(long, default_value_t = 1_000_000)]
    pub changes: u64,
    /// One-row transactions streamed over HTTP.
    #[arg(long, default_value_t = 200_000)]
    pub http_changes: u64,
    /// Feed memory for the catch-up through the log, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub feed_memory: usize,
    /// Feed memory for the drain from memory, bytes (large enough to hold
    /// every message).
    #[arg(long, default_value_t = 2 << 30)]
    pub feed_memory_big: usize,
    /// Writer threads (in process) and connections (PostgreSQL).
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// Consumer counts for the write runs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1,8")]
    pub consumers: Vec<usize>,
    /// Rows loaded before the write runs (updates pick among them).
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Measured seconds per write run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Warm-up seconds before each measured window.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Rounds of the write runs (the order of consumer counts alternates).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Small sizes: a smoke run of a few seconds.
    #[arg(long)]
    pub quick: bool,
    /// Skip the HTTP runs.
    #[arg(long)]
    pub no_http: bool,
    /// Skip PostgreSQL.
    #[arg(long)]
    pub no_pg: bool,
    /// PostgreSQL 15 binaries.
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin: PathBuf,
    /// The Aqueduct server binary [default: `aqueduct` next to this one].
    #[arg(long)]
    #[serde(skip)]
    pub aqueduct_bin: Option<PathBuf>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Parent of the scratch directories [default: the system's temp dir].
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Write the results here as JSON.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

impl FeedArgs {
    fn shrink(&mut self) {
        if self.quick {
            self.changes = self.changes.min(20_000);
            self.http_changes = self.http_changes.min(10_000);
            self.rows = self.rows.min(5_000);
            self.seconds = self.seconds.min(1.0);
            self.warmup = self.warmup.min(0.2);
            self.rounds = 1;
        }
    }
}

/// One delivery measurement: a consumer reading `changes` row changes.
#[derive(Serialize, Debug, Clone)]
pub struct Delivery {
    pub system: String,
    /// `live`, `memory`, `log`, `http-memory`, `http-log`, `decode`.
    pub path: String,
    pub messages: u64,
    pub changes: u64,
    pub seconds: f64,
    pub changes_per_s: f64,
    /// Whether the subscription read the log at some point (in process).
    pub read_log: Option<bool>,
    /// Largest lag seen, in messages (live only).
    pub max_lag: Option<u64>,
    /// Bytes received (HTTP and pg_recvlogical).
    pub bytes: Option<u64>,
}

/// One write run.
#[derive(Serialize, Debug, Clone)]
pub struct WriteRun {
    pub system: String,
    pub consumers: usize,
    pub round: usize,
    pub writes_per_s: f64,
    /// Row changes per second each consumer received during the window (mean).
    pub consumer_changes_per_s: f64,
    /// The consumers' largest lag behind the writes when the writers stopped.
    pub max_lag_at_end: u64,
    /// Time for every consumer to receive every write after the writers stopped.
    pub drain_s: f64,
}

#[derive(Serialize, Debug)]
pub struct WriteSummary {
    pub system: String,
    pub consumers: usize,
    /// Mean over rounds.
    pub writes_per_s: f64,
    pub min_writes_per_s: f64,
    pub max_writes_per_s: f64,
    /// Against 0 consumers of the same system.
    pub ratio: f64,
    pub loss_percent: f64,
}

#[derive(Serialize, Debug)]
pub struct FeedResults {
    pub load_writes_per_s: Vec<(String, f64)>,
    pub deliveries: Vec<Delivery>,
    pub writes: Vec<WriteRun>,
    pub summary: Vec<WriteSummary>,
    pub pg_version: Option<String>,
    pub pg_skipped: Option<String>,
    pub http_skipped: Option<String>,
}

fn scratch_engine(
    parent: &Option<PathBuf>,
    prefix: &str,
    feed: FeedOptions,
) -> anyhow::Result<(tempfile::TempDir, Arc<Engine>)> {
    let scratch = common::scratch_dir(parent, prefix)?;
    let (log, _) = Log::open(
        scratch.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .context("opening the scratch log")?;
    let engine = Engine::open_with_feed(log, &mut |_| {}, Default::default(), feed)
        .map_err(|e| anyhow!("opening the engine: {e}"))?;
    Ok((scratch, engine))
}

const CREATE_ITEM: &str = "CREATE TABLE item (id bigint PRIMARY KEY, v bigint, note text)";
const INSERT_ITEM: &str = "INSERT INTO item VALUES ($1, $2, $3)";
const UPDATE_ITEM: &str = "UPDATE item SET v = v + 1 WHERE id = $1";

fn rows_of(m: &aqueduct_feed::ChangeMessage) -> u64 {
    m.changes
        .iter()
        .filter(|c| matches!(c, Change::Row { .. }))
        .count() as u64
}

/// Inserts ids `from..from + n`, one per autocommit transaction, from
/// `writers` threads; returns the seconds taken.
fn load_inserts(engine: &Arc<Engine>, from: u64, n: u64, writers: usize) -> anyhow::Result<f64> {
    let next = AtomicU64::new(from);
    let end = from + n;
    let t = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..writers)
            .map(|_| {
                let (engine, next) = (engine.clone(), &next);
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut s = engine.session();
                    let p = s
                        .prepare(INSERT_ITEM, &[None, None, None])
                        .map_err(|e| anyhow!("{e}"))?;
                    loop {
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        if id >= end || common::stopped() {
                            return Ok(());
                        }
                        let params = [
                            Value::Int(id as i64),
                            Value::Int(0),
                            Value::Text(format!("note {id}")),
                        ];
                        s.execute_prepared(&p, &params)
                            .map_err(|e| anyhow!("insert {id}: {e}"))?;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow!("a writer panicked"))??;
        }
        Ok(())
    })?;
    common::check_stop()?;
    Ok(t.elapsed().as_secs_f64())
}

/// Reads from `from` until a message at or past `last`, counting row changes.
fn drain(engine: &Arc<Engine>, from: u64, last: u64) -> anyhow::Result<(u64, u64, f64, bool)> {
    let mut sub = engine
        .feed()
        .subscribe(from, None)
        .map_err(|e| anyhow!("subscribe: {e}"))?;
    let (mut messages, mut changes, mut read_log) = (0u64, 0u64, false);
    let t = Instant::now();
    loop {
        let m = sub
            .recv(Duration::from_secs(5))
            .map_err(|e| anyhow!("recv: {e}"))?
            .ok_or_else(|| anyhow!("no message for 5 s at LSN {}", sub.next_lsn()))?;
        read_log |= sub.reading_log();
        messages += 1;
        changes += rows_of(&m);
        if m.lsn >= last {
            break;
        }
    }
    Ok((messages, changes, t.elapsed().as_secs_f64(), read_log))
}

/// Item 1: live, from memory, from the log.
fn in_process(
    args: &FeedArgs,
    loads: &mut Vec<(String, f64)>,
    out: &mut Vec<Delivery>,
) -> anyhow::Result<()> {
    // (a) + (b): a feed memory holding every message.
    {
        let (_dir, engine) = scratch_engine(
            &args.dir,
            "bench-feed-mem-",
            FeedOptions {
                memory_bytes: args.feed_memory_big,
                ..Default::default()
            },
        )?;
        let mut s = engine.session();
        exec(&mut s, CREATE_ITEM)?;
        let from = engine.feed().head() + 1;
        eprintln!(
            "in process: loading {} one-row transactions with a live subscriber",
            thousands(args.changes)
        );
        let done = AtomicBool::new(false);
        let (secs, live) = std::thread::scope(|scope| -> anyhow::Result<_> {
            let (engine2, done2) = (engine.clone(), &done);
            let follower = scope.spawn(move || -> anyhow::Result<Delivery> {
                let mut sub = engine2
                    .feed()
                    .subscribe(from, None)
                    .map_err(|e| anyhow!("{e}"))?;
                let (mut messages, mut changes, mut max_lag, mut read_log) = (0u64, 0, 0u64, false);
                let t = Instant::now();
                let mut last_at = t;
                loop {
                    match sub
                        .recv(Duration::from_millis(20))
                        .map_err(|e| anyhow!("{e}"))?
                    {
                        Some(m) => {
                            messages += 1;
                            changes += rows_of(&m);
                            read_log |= sub.reading_log();
                            last_at = Instant::now();
                            if messages.is_multiple_of(1024) {
                                max_lag = max_lag.max(engine2.feed().head().saturating_sub(m.lsn));
                            }
                        }
                        None if done2.load(Ordering::SeqCst) => break,
                        None => {}
                    }
                    if common::stopped() {
                        break;
                    }
                }
                let seconds = last_at.duration_since(t).as_secs_f64();
                Ok(Delivery {
                    system: "aqueduct".into(),
                    path: "live".into(),
                    messages,
                    changes,
                    seconds,
                    changes_per_s: changes as f64 / seconds.max(1e-9),
                    read_log: Some(read_log),
                    max_lag: Some(max_lag),
                    bytes: None,
                })
            });
            let secs = load_inserts(&engine, 1, args.changes, args.writers);
            done.store(true, Ordering::SeqCst);
            let live = follower
                .join()
                .map_err(|_| anyhow!("the follower panicked"))??;
            Ok((secs?, live))
        })?;
        if live.changes != args.changes {
            bail!(
                "the live subscriber got {} changes of {}",
                live.changes,
                args.changes
            );
        }
        loads.push(("aqueduct in process".into(), args.changes as f64 / secs));
        out.push(live);
        let last = engine.feed().head();
        let (messages, changes, seconds, read_log) = drain(&engine, from, last)?;
        if changes != args.changes || read_log {
            bail!("drain from memory: {changes} changes, read the log: {read_log}");
        }
        out.push(Delivery {
            system: "aqueduct".into(),
            path: "memory".into(),
            messages,
            changes,
            seconds,
            changes_per_s: changes as f64 / seconds,
            read_log: Some(read_log),
            max_lag: None,
            bytes: None,
        });
    }
    // (c): a small feed memory, so a subscriber from the start reads the log.
    {
        let (_dir, engine) = scratch_engine(
            &args.dir,
            "bench-feed-log-",
            FeedOptions {
                memory_bytes: args.feed_memory,
                ..Default::default()
            },
        )?;
        let mut s = engine.session();
        exec(&mut s, CREATE_ITEM)?;
        let from = engine.feed().head() + 1;
        eprintln!(
            "in process: loading {} one-row transactions, feed memory {} bytes",
            thousands(args.changes),
            thousands(args.feed_memory as u64)
        );
        load_inserts(&engine, 1, args.changes, args.writers)?;
        let last = engine.feed().head();
        let (messages, changes, seconds, read_log) = drain(&engine, from, last)?;
        if changes != args.changes || !read_log {
            bail!("catch-up through the log: {changes} changes, read the log: {read_log}");
        }
        out.push(Delivery {
            system: "aqueduct".into(),
            path: "log".into(),
            messages,
            changes,
            seconds,
            changes_per_s: changes as f64 / seconds,
            read_log: Some(read_log),
            max_lag: None,
            bytes: None,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------- HTTP

/// Reads `GET /v1/changes?from_lsn=1` until `want` row changes arrived;
/// every line is parsed as JSON, as a client would.
fn http_follow(port: u16, want: u64) -> anyhow::Result<(u64, u64, u64, f64)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t = Instant::now();
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).context("connecting")?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET /v1/changes?from_lsn=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = BufReader::with_capacity(1 << 16, stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    if !line.starts_with("HTTP/1.1 200") {
        bail!("GET /v1/changes: {}", line.trim());
    }
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        let l = line.to_ascii_lowercase();
        if l.starts_with("transfer-encoding:") && l.contains("chunked") {
            chunked = true;
        }
    }
    let (mut messages, mut changes, mut bytes) = (0u64, 0u64, 0u64);
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let on_data = |data: &[u8],
                   pending: &mut Vec<u8>,
                   messages: &mut u64,
                   changes: &mut u64|
     -> anyhow::Result<()> {
        pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(i) = pending[start..].iter().position(|&b| b == b'\n') {
            let l = &pending[start..start + i];
            start += i + 1;
            if l.is_empty() {
                continue; // keep-alive
            }
            let v: serde_json::Value = serde_json::from_slice(l).context("a line of the stream")?;
            if let Some(e) = v.get("error") {
                bail!("the stream ended with {e}");
            }
            *messages += 1;
            *changes += v["changes"].as_array().map_or(0, |c| {
                c.iter().filter(|c| c["op"] != "schema").count() as u64
            });
        }
        pending.drain(..start);
        Ok(())
    };
    while changes < want {
        common::check_stop()?;
        if chunked {
            line.clear();
            r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("chunk size {line:?}"))?;
            if size == 0 {
                bail!("the stream ended after {changes} changes");
            }
            let mut chunk = vec![0u8; size];
            r.read_exact(&mut chunk)?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
            bytes += size as u64;
            on_data(&chunk, &mut pending, &mut messages, &mut changes)?;
        } else {
            let n = r.read(&mut buf)?;
            if n == 0 {
                bail!("the stream ended after {changes} changes");
            }
            bytes += n as u64;
            on_data(&buf[..n], &mut pending, &mut messages, &mut changes)?;
        }
    }
    Ok((messages, changes, bytes, t.elapsed().as_secs_f64()))
}

fn http_runs(args: &FeedArgs, out: &mut Vec<Delivery>) -> anyhow::Result<()> {
    let bin = AqueductServer::binary(&args.aqueduct_bin)?;
    let big = [
        "--feed-memory".to_string(),
        args.feed_memory_big.to_string(),
    ];
    let mut server = AqueductServer::start_with(&bin, &args.dir, "never", 64, &big)?;
    {
        let mut c = server.connect()?;
        c.batch_execute(CREATE_ITEM)?;
    }
    // A mirror bootstraps now, while the table is empty, and saves where
    // it is; it catches up from there after the load.
    // It follows as a durable consumer, so the server's compaction keeps
    // the log from its position while it is away.
    let mirror_config = |http_port: u16| {
        let mut cfg = FollowerConfig::new(format!("127.0.0.1:{http_port}"));
        cfg.consumer = Some("bench-mirror".into());
        cfg
    };
    let saved = {
        let mut mirror = Follower::new(mirror_config(server.http_port()), MirrorTables::default());
        let deadline = Instant::now() + Duration::from_secs(30);
        while mirror.position().is_none() || mirror.status().streams_opened == 0 {
            let _ = mirror.poll_once(Duration::from_millis(200));
            if Instant::now() > deadline {
                bail!("the mirror did not bootstrap: {:?}", mirror.status());
            }
        }
        mirror.position().expect("bootstrapped")
    };
    eprintln!(
        "server: loading {} one-row transactions over the PostgreSQL protocol",
        thousands(args.http_changes)
    );
    let next = AtomicU64::new(1);
    let n = args.http_changes;
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..args.writers)
            .map(|_| {
                let (server, next) = (&server, &next);
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut c = server.connect()?;
                    let st = c.prepare(INSERT_ITEM)?;
                    loop {
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        if id > n || common::stopped() {
                            return Ok(());
                        }
                        c.execute(&st, &[&(id as i64), &0i64, &format!("note {id}")])?;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow!("a writer panicked"))??;
        }
        Ok(())
    })?;
    common::check_stop()?;
    for path in ["http-memory", "http-log"] {
        if path == "http-log" {
            // After a restart the feed's memory starts at the recovered
            // LSN: a stream from LSN 1 reads the log.
            let small = ["--feed-memory".to_string(), args.feed_memory.to_string()];
            server.restart(&small)?;
        }
        let (messages, changes, bytes, seconds) = http_follow(server.http_port(), n)
            .with_context(|| format!("{path}; server log:\n{}", server.log_tail()))?;
        out.push(Delivery {
            system: "aqueduct".into(),
            path: path.into(),
            messages,
            changes,
            seconds,
            changes_per_s: changes as f64 / seconds,
            read_log: None,
            max_lag: None,
            bytes: Some(bytes),
        });
    }
    // The server now serves from the log (small feed memory after the
    // restart): the mirror resumes `n` changes behind and applies them all.
    eprintln!(
        "mirror: catching up {} changes over HTTP from its saved position",
        thousands(n)
    );
    let mut mirror = Follower::resume(
        mirror_config(server.http_port()),
        MirrorTables::default(),
        saved,
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut applied = 0u64;
    while mirror
        .mirror()
        .tables
        .get("item")
        .map_or(0, |t| t.len() as u64)
        < n
    {
        applied += mirror.poll_once(Duration::from_millis(200)).unwrap_or(0) as u64;
        common::check_stop()?;
        if Instant::now() > deadline {
            bail!("the mirror did not catch up: {:?}", mirror.status());
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if !mirror.mirror().anomalies.is_empty() || mirror.status().bootstraps > 0 {
        bail!(
            "the mirror's catch-up was not clean: {:?}, {:?}",
            mirror.mirror().anomalies.first(),
            mirror.status()
        );
    }
    out.push(Delivery {
        system: "aqueduct".into(),
        path: "mirror-http".into(),
        messages: applied,
        changes: n,
        seconds,
        changes_per_s: n as f64 / seconds,
        read_log: None,
        max_lag: None,
        bytes: None,
    });
    Ok(())
}

// ---------------------------------------------------------------- writes

/// A consumer's count of row changes received, shared with the harness,
/// which can wait for it to reach a number.
#[derive(Default)]
struct Progress {
    n: AtomicU64,
    lock: parking_lot::Mutex<()>,
    moved: parking_lot::Condvar,
}

impl Progress {
    fn add(&self, k: u64) -> u64 {
        let now = self.n.fetch_add(k, Ordering::Relaxed) + k;
        let _guard = self.lock.lock();
        self.moved.notify_all();
        now
    }

    fn load(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }

    /// Waits until the count reaches `target`; false at `deadline`. Wakes
    /// at least every 200 ms to see a stop request (Ctrl-C).
    fn wait_for(&self, target: u64, deadline: Instant) -> anyhow::Result<bool> {
        let mut guard = self.lock.lock();
        while self.load() < target {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            common::check_stop()?;
            let slice = deadline.min(Instant::now() + Duration::from_millis(200));
            self.moved.wait_until(&mut guard, slice);
        }
        Ok(true)
    }
}

type Counter = Arc<Progress>;

/// Runs writers for warm-up + window, consumers following; returns the run.
/// `start_writer(i, stop, writes)` runs writer `i` until `stop`;
/// `consumers` are counters fed by already-running consumers.
fn window<W>(
    args: &FeedArgs,
    system: &str,
    round: usize,
    counters: &[Counter],
    write: W,
) -> anyhow::Result<WriteRun>
where
    W: Fn(usize, &AtomicBool, &AtomicU64) -> anyhow::Result<()> + Sync,
{
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let (w0, w1, c0, c1, end_writes, t_stop) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let handles: Vec<_> = (0..args.writers)
            .map(|i| {
                let (stop, writes, write) = (&stop, &writes, &write);
                scope.spawn(move || write(i, stop, writes))
            })
            .collect();
        let sum = || counters.iter().map(|c| c.load()).sum::<u64>();
        common::nap(Duration::from_secs_f64(args.warmup));
        let (w0, c0) = (writes.load(Ordering::Relaxed), sum());
        common::nap(Duration::from_secs_f64(args.seconds));
        let (w1, c1) = (writes.load(Ordering::Relaxed), sum());
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| anyhow!("a writer panicked"))??;
        }
        Ok((
            w0,
            w1,
            c0,
            c1,
            writes.load(Ordering::Relaxed),
            Instant::now(),
        ))
    })?;
    common::check_stop()?;
    let max_lag_at_end = counters
        .iter()
        .map(|c| end_writes.saturating_sub(c.load()))
        .max()
        .unwrap_or(0);
    let deadline = t_stop + Duration::from_secs(120);
    for c in counters {
        if !c.wait_for(end_writes, deadline)? {
            bail!("{system}: consumers did not receive every write within 120 s");
        }
    }
    let drain_s = t_stop.elapsed().as_secs_f64();
    let per_consumer = if counters.is_empty() {
        0.0
    } else {
        (c1 - c0) as f64 / counters.len() as f64 / args.seconds
    };
    Ok(WriteRun {
        system: system.into(),
        consumers: counters.len(),
        round,
        writes_per_s: (w1 - w0) as f64 / args.seconds,
        consumer_changes_per_s: per_consumer,
        max_lag_at_end,
        drain_s,
    })
}

/// One write in two is an insert of a new id, the other an update of a
/// random loaded row.
struct Mix {
    rows: u64,
    next_id: AtomicU64,
    seed: u64,
}

impl Mix {
    fn rng(&self, i: usize, round: usize, consumers: usize) -> StdRng {
        StdRng::seed_from_u64(self.seed + (i * 1000 + round * 100 + consumers) as u64)
    }
}

fn aqueduct_writes(
    args: &FeedArgs,
    mix: &Mix,
    runs: &mut Vec<WriteRun>,
    order: &[(usize, usize)],
) -> anyhow::Result<()> {
    let (_dir, engine) = scratch_engine(&args.dir, "bench-feed-writes-", FeedOptions::default())?;
    let mut s = engine.session();
    exec(&mut s, CREATE_ITEM)?;
    insert_all(
        &mut s,
        "item",
        (1..=mix.rows).map(|i| format!("({i}, 0, 'note {i}')")),
        10_000,
    )?;
    for &(round, k) in order {
        eprintln!("aqueduct: writes with {k} consumers (round {})", round + 1);
        let stop_consumers = Arc::new(AtomicBool::new(false));
        let counters: Vec<Counter> = (0..k).map(|_| Counter::default()).collect();
        let from = engine.feed().head() + 1;
        let consumers: Vec<_> = counters
            .iter()
            .map(|c| {
                let (c, stop, engine) = (c.clone(), stop_consumers.clone(), engine.clone());
                let mut sub = engine
                    .feed()
                    .subscribe(from, None)
                    .map_err(|e| anyhow!("{e}"))?;
                Ok(std::thread::spawn(move || -> anyhow::Result<()> {
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(m) = sub
                            .recv(Duration::from_millis(20))
                            .map_err(|e| anyhow!("{e}"))?
                        {
                            c.add(rows_of(&m));
                        }
                    }
                    Ok(())
                }))
            })
            .collect::<anyhow::Result<_>>()?;
        let run = window(args, "aqueduct", round, &counters, |i, stop, writes| {
            let mut s = engine.session();
            let ins = s
                .prepare(INSERT_ITEM, &[None, None, None])
                .map_err(|e| anyhow!("{e}"))?;
            let upd = s
                .prepare(UPDATE_ITEM, &[None])
                .map_err(|e| anyhow!("{e}"))?;
            let mut rng = mix.rng(i, round, k);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if n.is_multiple_of(2) {
                    let id = mix.next_id.fetch_add(1, Ordering::Relaxed) as i64;
                    s.execute_prepared(
                        &ins,
                        &[
                            Value::Int(id),
                            Value::Int(0),
                            Value::Text(format!("note {id}")),
                        ],
                    )
                    .map_err(|e| anyhow!("{e}"))?;
                } else {
                    let id = rng.gen_range(1..=mix.rows) as i64;
                    s.execute_prepared(&upd, &[Value::Int(id)])
                        .map_err(|e| anyhow!("{e}"))?;
                }
                n += 1;
                writes.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        stop_consumers.store(true, Ordering::Relaxed);
        for c in consumers {
            c.join().map_err(|_| anyhow!("a consumer panicked"))??;
        }
        runs.push(run?);
    }
    Ok(())
}

// ---------------------------------------------------------------- PostgreSQL

/// `pg_recvlogical` processes this benchmark started.
static RECVLOGICAL: crate::peer::Registry = std::sync::Mutex::new(Vec::new());

/// Kills every `pg_recvlogical` this process started (second Ctrl-C).
pub fn emergency_stop() {
    crate::peer::kill_all(&RECVLOGICAL);
}

/// A `pg_recvlogical` on one slot, its output (test_decoding's lines) read
/// and counted by a thread of ours.
struct Recv {
    child: Child,
    reader: Option<std::thread::JoinHandle<std::io::Result<u64>>>,
    changes: Counter,
    /// When the reader counted `target` changes (if given).
    reached: Arc<parking_lot::Mutex<Option<Instant>>>,
}

impl Recv {
    fn start(bin: &Path, pg: &PgServer, slot: &str, target: u64) -> anyhow::Result<Recv> {
        let mut cmd = Command::new(bin.join("pg_recvlogical"));
        cmd.args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
            .arg("-p")
            .arg(pg.port.to_string())
            .args(["-S", slot, "--start", "-f", "-", "-F", "0"])
            .args(["-o", "include-xids=0", "-o", "skip-empty-xacts=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().context("starting pg_recvlogical")?;
        RECVLOGICAL
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(child.id());
        let stdout = child.stdout.take().expect("piped");
        let changes = Counter::default();
        let reached = Arc::new(parking_lot::Mutex::new(None));
        let (c, r) = (changes.clone(), reached.clone());
        let reader = std::thread::spawn(move || -> std::io::Result<u64> {
            let mut rd = BufReader::with_capacity(1 << 16, stdout);
            let mut line = Vec::new();
            let mut bytes = 0u64;
            loop {
                line.clear();
                let n = rd.read_until(b'\n', &mut line)?;
                if n == 0 {
                    return Ok(bytes);
                }
                bytes += n as u64;
                if line.starts_with(b"table ") {
                    if c.load() + 1 == target {
                        *r.lock() = Some(Instant::now());
                    }
                    c.add(1);
                }
            }
        });
        Ok(Recv {
            child,
            reader: Some(reader),
            changes,
            reached,
        })
    }

    /// Stops it (SIGTERM, then SIGKILL) and returns the bytes it wrote.
    fn stop(mut self) -> u64 {
        let pid = self.child.id();
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        // A watchdog kills it if it has not exited in 10 s.
        let (exited, watch) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                watch.recv_timeout(Duration::from_secs(10))
            {
                // SAFETY: kill(2) on our own child, not reaped before the
                // wait below returns.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        let _ = self.child.wait();
        drop(exited);
        let _ = watchdog.join();
        RECVLOGICAL
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&p| p != pid);
        self.reader
            .take()
            .and_then(|r| r.join().ok())
            .and_then(|r| r.ok())
            .unwrap_or(0)
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        if self.reader.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn drop_slot(c: &mut postgres::Client, slot: &str) -> anyhow::Result<()> {
    // The slot stays active until its walsender has seen pg_recvlogical
    // go: wait for the server to report it inactive, then drop it.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let active: bool = c
            .query_one(
                "SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )?
            .get(0);
        if !active {
            break;
        }
        if Instant::now() > until {
            bail!("slot {slot} still active after 20 s");
        }
    }
    c.execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .with_context(|| format!("dropping slot {slot}"))?;
    Ok(())
}

fn pg_runs(
    args: &FeedArgs,
    mix: &Mix,
    runs: &mut Vec<WriteRun>,
    order: &[(usize, usize)],
    deliveries: &mut Vec<Delivery>,
    loads: &mut Vec<(String, f64)>,
) -> anyhow::Result<String> {
    let pg = PgServer::start_with(
        &args.pg_bin,
        &args.dir,
        args.writers + 16,
        "-c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20 \
         -c synchronous_commit=off",
    )?;
    let version = pg.version.clone();
    let mut admin = pg.connect()?;
    admin.batch_execute(&format!(
        "{CREATE_ITEM}; INSERT INTO item SELECT i, 0, 'note ' || i FROM generate_series(1, {}) i",
        mix.rows
    ))?;
    admin.batch_execute("VACUUM ANALYZE item")?;
    admin.batch_execute("CHECKPOINT")?;
    for &(round, k) in order {
        eprintln!(
            "postgres: writes with {k} slots consumed (round {})",
            round + 1
        );
        let slots: Vec<String> = (0..k).map(|i| format!("bench_feed_{i}")).collect();
        for s in &slots {
            admin.execute(
                "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
                &[s],
            )?;
        }
        let recvs: Vec<Recv> = slots
            .iter()
            .map(|s| Recv::start(&args.pg_bin, &pg, s, u64::MAX))
            .collect::<anyhow::Result<_>>()?;
        let counters: Vec<Counter> = recvs.iter().map(|r| r.changes.clone()).collect();
        let run = window(args, "postgres", round, &counters, |i, stop, writes| {
            let mut c = pg.connect()?;
            let ins = c.prepare(INSERT_ITEM)?;
            let upd = c.prepare(UPDATE_ITEM)?;
            let mut rng = mix.rng(i, round, k);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if n.is_multiple_of(2) {
                    let id = mix.next_id.fetch_add(1, Ordering::Relaxed) as i64;
                    c.execute(&ins, &[&id, &0i64, &format!("note {id}")])?;
                } else {
                    let id = rng.gen_range(1..=mix.rows) as i64;
                    c.execute(&upd, &[&id])?;
                }
                n += 1;
                writes.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        for r in recvs {
            r.stop();
        }
        for s in &slots {
            drop_slot(&mut admin, s)?;
        }
        runs.push(run?);
        admin.batch_execute("CHECKPOINT")?;
    }
    // Decoding rate of one slot `changes` transactions behind.
    let n = args.changes;
    eprintln!(
        "postgres: {} one-row transactions, then one slot decodes them",
        thousands(n)
    );
    admin.batch_execute("CREATE TABLE item2 (id bigint PRIMARY KEY, v bigint, note text)")?;
    admin.execute(
        "SELECT pg_create_logical_replication_slot('bench_feed_catchup', 'test_decoding')",
        &[],
    )?;
    let t = Instant::now();
    admin.batch_execute(&format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP \
           INSERT INTO item2 VALUES (i, 0, 'note ' || i); COMMIT; \
         END LOOP; END $$"
    ))?;
    loads.push((
        "postgres, one DO block committing each row".into(),
        n as f64 / t.elapsed().as_secs_f64(),
    ));
    // No --endpos: pg_recvlogical stops at the first keepalive whose
    // server position passes it, before receiving the changes behind it.
    let t = Instant::now();
    let recv = Recv::start(&args.pg_bin, &pg, "bench_feed_catchup", n)?;
    if !recv.changes.wait_for(n, t + Duration::from_secs(600))? {
        bail!(
            "pg_recvlogical decoded {} of {n} changes in 600 s",
            recv.changes.load()
        );
    }
    // The reader notes the time before it counts the last change.
    let reached = recv
        .reached
        .lock()
        .expect("noted when the count was reached");
    let seconds = reached.duration_since(t).as_secs_f64();
    let changes = recv.changes.load();
    let bytes = recv.stop();
    drop_slot(&mut admin, "bench_feed_catchup")?;
    deliveries.push(Delivery {
        system: "postgres".into(),
        path: "decode".into(),
        messages: n,
        changes,
        seconds,
        changes_per_s: n as f64 / seconds,
        read_log: None,
        max_lag: None,
        bytes: Some(bytes),
    });
    Ok(version)
}

// ---------------------------------------------------------------- run

fn summarize(runs: &[WriteRun]) -> Vec<WriteSummary> {
    let mut out: Vec<WriteSummary> = Vec::new();
    let mut keys: Vec<(String, usize)> = runs
        .iter()
        .map(|r| (r.system.clone(), r.consumers))
        .collect();
    keys.dedup();
    keys.sort();
    keys.dedup();
    for (system, k) in keys {
        let rates: Vec<f64> = runs
            .iter()
            .filter(|r| r.system == system && r.consumers == k)
            .map(|r| r.writes_per_s)
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        out.push(WriteSummary {
            system,
            consumers: k,
            writes_per_s: mean,
            min_writes_per_s: rates.iter().copied().fold(f64::INFINITY, f64::min),
            max_writes_per_s: rates.iter().copied().fold(0.0, f64::max),
            ratio: 0.0,
            loss_percent: 0.0,
        });
    }
    let bases: Vec<(String, f64)> = out
        .iter()
        .filter(|s| s.consumers == 0)
        .map(|s| (s.system.clone(), s.writes_per_s))
        .collect();
    for s in &mut out {
        if let Some((_, b)) = bases.iter().find(|(sys, _)| *sys == s.system) {
            s.ratio = s.writes_per_s / b;
            s.loss_percent = (1.0 - s.ratio) * 100.0;
        }
    }
    out
}

pub fn run(args: &mut FeedArgs) -> anyhow::Result<FeedResults> {
    args.shrink();
    if args.changes == 0 || args.writers == 0 || args.rows == 0 || args.rounds == 0 {
        bail!("--changes, --writers, --rows and --rounds must be at least 1");
    }
    let mut loads = Vec::new();
    let mut deliveries = Vec::new();
    in_process(args, &mut loads, &mut deliveries)?;
    let http_skipped = if args.no_http {
        Some("--no-http".to_string())
    } else {
        http_runs(args, &mut deliveries)?;
        None
    };
    // Rounds alternate the order of consumer counts: 0,1,8 then 8,1,0.
    let mut order = Vec::new();
    for round in 0..args.rounds {
        let mut ks = args.consumers.clone();
        if round % 2 == 1 {
            ks.reverse();
        }
        order.extend(ks.into_iter().map(|k| (round, k)));
    }
    let mix = Mix {
        rows: args.rows,
        next_id: AtomicU64::new(args.rows + 1),
        seed: args.seed,
    };
    let mut runs = Vec::new();
    aqueduct_writes(args, &mix, &mut runs, &order)?;
    let (pg_version, pg_skipped) = if args.no_pg {
        (None, Some("--no-pg".to_string()))
    } else if let Some(why) = PgServer::unavailable(&args.pg_bin) {
        eprintln!("skipping PostgreSQL: {why}");
        (None, Some(why))
    } else if !args.pg_bin.join("pg_recvlogical").is_file() {
        let why = format!("{} not found", args.pg_bin.join("pg_recvlogical").display());
        eprintln!("skipping PostgreSQL: {why}");
        (None, Some(why))
    } else {
        let mix = Mix {
            next_id: AtomicU64::new(args.rows + 1),
            ..mix
        };
        let v = pg_runs(args, &mix, &mut runs, &order, &mut deliveries, &mut loads)?;
        (Some(v), None)
    };
    let summary = summarize(&runs);

    println!("\nchanges delivered to one consumer (one row per transaction):");
    print_table(
        &["system", "path", "changes", "seconds", "changes/s", "notes"],
        &deliveries
            .iter()
            .map(|d| {
                let mut notes = Vec::new();
                if let Some(l) = d.max_lag {
                    notes.push(format!("max lag {l} messages"));
                }
                if let Some(b) = d.bytes {
                    notes.push(format!("{:.1} MB", b as f64 / 1e6));
                }
                vec![
                    d.system.clone(),
                    d.path.clone(),
                    thousands(d.changes),
                    format!("{:.2}", d.seconds),
                    thousands(d.changes_per_s as u64),
                    notes.join(", "),
                ]
            })
            .collect::<Vec<_>>(),
    );
    println!(
        "\nwrites ({} writers) with consumers following:",
        args.writers
    );
    print_table(
        &[
            "system",
            "round",
            "consumers",
            "writes/s",
            "per consumer changes/s",
            "lag at end",
            "drain s",
        ],
        &runs
            .iter()
            .map(|r| {
                vec![
                    r.system.clone(),
                    (r.round + 1).to_string(),
                    r.consumers.to_string(),
                    thousands(r.writes_per_s as u64),
                    thousands(r.consumer_changes_per_s as u64),
                    thousands(r.max_lag_at_end),
                    format!("{:.2}", r.drain_s),
                ]
            })
            .collect::<Vec<_>>(),
    );
    println!();
    print_table(
        &[
            "system",
            "consumers",
            "writes/s (mean)",
            "min–max",
            "vs 0",
            "loss",
        ],
        &summary
            .iter()
            .map(|s| {
                vec![
                    s.system.clone(),
                    s.consumers.to_string(),
                    thousands(s.writes_per_s as u64),
                    format!(
                        "{}–{}",
                        thousands(s.min_writes_per_s as u64),
                        thousands(s.max_writes_per_s as u64)
                    ),
                    format!("{:.3}x", s.ratio),
                    format!("{:.1}%", s.loss_percent),
                ]
            })
            .collect::<Vec<_>>(),
    );
    Ok(FeedResults {
        load_writes_per_s: loads,
        deliveries,
        writes: runs,
        summary,
        pg_version,
        pg_skipped,
        http_skipped,
    })
}
