//! `bench sql point`: the Aqueduct server against PostgreSQL over the wire,
//! with the same client for both, in alternating rounds:
//!
//! - point reads: a prepared `SELECT id, name, score FROM items WHERE id = $1`
//!   with random ids over preloaded rows;
//! - single-row inserts: a prepared `INSERT INTO events (id, payload) VALUES
//!   ($1, $2)` with unique ids, autocommit, durable on both sides.
//!
//! Each run is a closed loop: N client threads, each with its own connection
//! and prepared statement, issue the next statement as soon as the previous
//! one returns. The client threads run on the same machine as the server.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use postgres::{Client, Statement};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{self, check_stop, ms, new_hist, print_table, thousands, Latency};
use crate::cpu::{self, CpuUse};
use crate::pg::PgServer;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The Aqueduct server (`aqueduct serve`), started as a child process.
    Aqueduct,
    /// PostgreSQL 15, started by initdb/pg_ctl in a scratch directory.
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Aqueduct => "aqueduct",
            Backend::Postgres => "postgres",
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// SELECT id, name, score FROM items WHERE id = $1 (random id).
    #[value(name = "reads")]
    #[serde(rename = "point-reads")]
    Reads,
    /// INSERT INTO events (id, payload) VALUES ($1, $2) (unique id), autocommit.
    #[value(name = "inserts")]
    #[serde(rename = "inserts")]
    Inserts,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Reads => "point-reads",
            Workload::Inserts => "inserts",
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Workload::Reads => SELECT_ITEM,
            Workload::Inserts => INSERT_EVENT,
        }
    }
}

#[derive(Args, Debug, Serialize)]
pub struct PointArgs {
    /// Servers to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "aqueduct,postgres")]
    pub backends: Vec<Backend>,
    /// Workloads, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "reads,inserts")]
    pub workloads: Vec<Workload>,
    /// Client connections, one thread each, closed loop (same for both servers).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Measured seconds per backend per workload per round.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Unmeasured seconds at the start of each run.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Rounds; each round runs every workload on every backend, the backends'
    /// order alternating from round to round.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Rows preloaded into `items` (ids 1..=rows).
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Bytes of the text payload of each inserted event.
    #[arg(long, default_value_t = 100)]
    pub payload_bytes: usize,
    /// Aqueduct's --fsync (PostgreSQL always runs with fsync=on,
    /// synchronous_commit=on).
    #[arg(long, default_value = "always")]
    pub fsync: String,
    /// The Aqueduct server binary [default: `aqueduct` next to this binary].
    #[arg(long)]
    #[serde(skip)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Directory holding PostgreSQL 15's initdb, pg_ctl and postgres.
    #[arg(
        long,
        env = "AQUEDUCT_BENCH_PG_BIN",
        default_value = "/usr/lib/postgresql/15/bin"
    )]
    #[serde(skip)]
    pub pg_bin: PathBuf,
    /// Where scratch directories go (the disk under test); default: the temp dir.
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write a JSON summary here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

const CREATE_ITEMS: &str = "CREATE TABLE items (id bigint PRIMARY KEY, name text, score integer)";
const CREATE_EVENTS: &str = "CREATE TABLE events (id bigint PRIMARY KEY, payload text)";
const SELECT_ITEM: &str = "SELECT id, name, score FROM items WHERE id = $1";
const INSERT_EVENT: &str = "INSERT INTO events (id, payload) VALUES ($1, $2)";
/// Rows per preload statement (multi-row INSERT ... VALUES).
const PRELOAD_BATCH: u64 = 1000;
/// Distinct error messages kept per run.
const ERROR_SAMPLES: usize = 5;

#[derive(Serialize, Debug)]
pub struct RoundResult {
    pub round: usize,
    pub ops: u64,
    /// Successful statements over the whole run, warm-up included.
    pub ops_all: u64,
    pub wal_syncs: Option<u64>,
    pub errors: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub latency: Latency,
    pub cpu: CpuUse,
    pub load_average_before: [f64; 3],
    pub load_average_after: [f64; 3],
}

#[derive(Serialize, Debug)]
pub struct RunSummary {
    pub workload: Workload,
    pub backend: Backend,
    pub connections: usize,
    pub ops: u64,
    /// Statements that failed (or returned a wrong result) in the measured windows.
    pub errors: u64,
    pub error_samples: Vec<String>,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub min_round_ops_per_s: f64,
    pub max_round_ops_per_s: f64,
    /// From sending the statement to having its whole result, per statement.
    pub latency: Latency,
    /// Mean over the rounds.
    pub cpu: CpuUse,
    /// Server CPU time per statement, microseconds.
    pub server_cpu_us_per_op: f64,
    /// Client (this process) CPU time per statement, microseconds.
    pub client_cpu_us_per_op: f64,
    /// Inserts: write-ahead log syncs (fdatasync) over the whole runs, warm-up
    /// included (Aqueduct: aqueduct_log_syncs_total; PostgreSQL:
    /// pg_stat_wal.wal_sync), and successful statements per sync.
    pub wal_syncs: Option<u64>,
    pub ops_per_wal_sync: Option<f64>,
    pub rounds: Vec<RoundResult>,
}

#[derive(Serialize, Debug)]
pub struct Comparison {
    pub workload: Workload,
    /// aqueduct / postgres.
    pub ops_per_s_ratio: f64,
    pub p50_ratio: f64,
    pub p99_ratio: f64,
    pub target: &'static str,
    /// Whether aqueduct's ops/s is at least PostgreSQL's.
    pub target_met: bool,
}

#[derive(Serialize, Debug)]
pub struct AqueductInfo {
    pub fsync: String,
    pub max_connections: usize,
    /// Identifies the server binary that ran (its size and modification time).
    pub binary_bytes: u64,
    pub binary_modified_unix: u64,
    pub server_version: String,
}

#[derive(Serialize, Debug)]
pub struct PgInfo {
    pub version: String,
    pub settings: Vec<(String, String)>,
}

#[derive(Serialize, Debug)]
pub struct PointResults {
    pub schema: Vec<&'static str>,
    pub statements: Vec<&'static str>,
    pub load_average_start: [f64; 3],
    pub load_average_end: [f64; 3],
    /// One writer's append + fdatasync of 256 bytes on the scratch disk.
    pub fdatasync_probe_before: Latency,
    pub fdatasync_probe_after: Latency,
    pub preload_seconds: Vec<(Backend, f64)>,
    pub aqueduct: Option<AqueductInfo>,
    pub postgres: Option<PgInfo>,
    pub results: Vec<RunSummary>,
    pub aqueduct_vs_postgres: Vec<Comparison>,
    pub skipped: Vec<(Backend, String)>,
}

/// A running server of either kind.
enum Server {
    Aqueduct(AqueductServer),
    Postgres(PgServer),
}

impl Server {
    fn connect(&self) -> anyhow::Result<Client> {
        match self {
            Server::Aqueduct(s) => s.connect(),
            Server::Postgres(s) => s.connect(),
        }
    }

    /// The root process whose CPU time (with its children's) is the server's.
    fn pid(&self) -> Option<u32> {
        match self {
            Server::Aqueduct(s) => Some(s.pid()),
            Server::Postgres(s) => s.postmaster_pid(),
        }
    }

    /// How many times the server has synced its write-ahead log so far:
    /// Aqueduct's `aqueduct_log_syncs_total`, PostgreSQL's
    /// `pg_stat_wal.wal_sync` (flushed by each backend when it goes idle or
    /// exits, so read it after the clients have disconnected).
    fn wal_syncs(&self) -> anyhow::Result<u64> {
        match self {
            Server::Aqueduct(s) => s.metric("aqueduct_log_syncs_total"),
            Server::Postgres(s) => {
                let n: i64 = s
                    .connect()?
                    .query_one("SELECT wal_sync FROM pg_stat_wal", &[])?
                    .get(0);
                Ok(n as u64)
            }
        }
    }

    /// Adds the server's own log to an error, when it has one.
    fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        match self {
            Server::Aqueduct(s) => {
                e.context(format!("Aqueduct server log (tail):\n{}", s.log_tail()))
            }
            Server::Postgres(_) => e,
        }
    }
}

fn item_row(id: u64) -> String {
    // Names of 12-13 characters and a score in 0..1000, fixed by the id.
    format!(
        "({id}, 'item-{id:08}', {})",
        id.wrapping_mul(2_654_435_761) % 1000
    )
}

/// Creates the tables and loads `items` with multi-row INSERTs.
fn preload(server: &Server, rows: u64, pb: &ProgressBar, label: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut c = server.connect()?;
    for ddl in [CREATE_ITEMS, CREATE_EVENTS] {
        c.batch_execute(ddl)
            .map_err(|e| server.explain(anyhow!("{ddl}: {e}")))?;
    }
    let mut next = 1;
    while next <= rows {
        check_stop()?;
        let last = (next + PRELOAD_BATCH - 1).min(rows);
        let values: Vec<String> = (next..=last).map(item_row).collect();
        let sql = format!(
            "INSERT INTO items (id, name, score) VALUES {}",
            values.join(", ")
        );
        c.batch_execute(&sql).map_err(|e| {
            server.explain(anyhow!(
                "preloading items {next}..={last} into {label}: {e} (SQL: {}...)",
                &sql[..sql.len().min(120)]
            ))
        })?;
        pb.set_message(format!("{label}: preloaded {} rows", thousands(last)));
        next = last + 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Server::Postgres(_) = server {
        // Statistics and visibility map as a running database would have them,
        // and the load's dirty pages written out before measuring.
        c.batch_execute("VACUUM ANALYZE items")?;
        c.batch_execute("CHECKPOINT")?;
    }
    let n: i64 = c
        .query_one("SELECT count(*) FROM items", &[])
        .map_err(|e| server.explain(anyhow!("counting items in {label}: {e}")))?
        .get(0);
    anyhow::ensure!(
        n as u64 == rows,
        "{label}: items holds {n} rows after preloading {rows}"
    );
    Ok(elapsed)
}

/// What one timed run measured.
struct RunOutcome {
    ops: u64,
    ops_all: u64,
    /// Write-ahead log syncs during the whole run (inserts only).
    syncs: Option<u64>,
    errors: u64,
    error_samples: Vec<String>,
    seconds: f64,
    hist: Histogram<u64>,
    cpu: CpuUse,
    load_before: [f64; 3],
    load_after: [f64; 3],
}

struct ThreadOutcome {
    ops: u64,
    /// Successful statements, warm-up and stragglers after the window included.
    ops_all: u64,
    errors: u64,
    hist: Histogram<u64>,
}

fn note_error(samples: &Mutex<Vec<String>>, msg: String) {
    let mut s = samples.lock().unwrap_or_else(|p| p.into_inner());
    if s.len() < ERROR_SAMPLES && !s.contains(&msg) {
        s.push(msg);
    }
}

/// One closed-loop run: `connections` threads, each with its own connection
/// and prepared statement, calling `op` back to back. Statements that finish
/// inside the measured window are counted and timed.
fn run_clients<F>(
    server: &Server,
    workload: Workload,
    args: &PointArgs,
    label: &str,
    seed: u64,
    pb: &ProgressBar,
    op: F,
) -> anyhow::Result<RunOutcome>
where
    F: Fn(&mut Client, &Statement, &mut StdRng) -> anyhow::Result<()> + Sync,
{
    let sql = workload.sql();
    let n = args.connections;
    // Every thread connects and prepares, then all start together.
    let connected = Barrier::new(n + 1);
    let go = Barrier::new(n + 1);
    let finished = Barrier::new(n + 1);
    let setup_failed = AtomicBool::new(false);
    let start_at: Mutex<Option<Instant>> = Mutex::new(None);
    let done = AtomicU64::new(0);
    let samples = Mutex::new(Vec::new());
    let warmup = Duration::from_secs_f64(args.warmup);
    let measured = Duration::from_secs_f64(args.seconds);
    let op = &op;
    std::thread::scope(|s| -> anyhow::Result<RunOutcome> {
        let mut handles = Vec::with_capacity(n);
        for t in 0..n {
            let (connected, go, finished, setup_failed, start_at, done, samples) = (
                &connected,
                &go,
                &finished,
                &setup_failed,
                &start_at,
                &done,
                &samples,
            );
            let h = std::thread::Builder::new()
                .name(format!("client-{t}"))
                .stack_size(256 * 1024)
                .spawn_scoped(s, move || -> anyhow::Result<ThreadOutcome> {
                    let setup = server.connect().and_then(|mut c| {
                        let st = c
                            .prepare(sql)
                            .map_err(|e| anyhow!("preparing {sql}: {e}"))?;
                        Ok((c, st))
                    });
                    if setup.is_err() {
                        setup_failed.store(true, Ordering::SeqCst);
                    }
                    connected.wait();
                    go.wait();
                    // The connection outlives the measured window until every
                    // thread is done, so the server's per-connection processes
                    // are still there when its CPU time is read at the end.
                    let mut keep: Option<(Client, Statement)> = None;
                    let result = (|| -> anyhow::Result<ThreadOutcome> {
                        let (client, st) = keep.insert(setup?);
                        let mut out = ThreadOutcome {
                            ops: 0,
                            ops_all: 0,
                            errors: 0,
                            hist: new_hist(),
                        };
                        if setup_failed.load(Ordering::SeqCst) {
                            // Another client could not start: the run is void.
                            return Ok(out);
                        }
                        let start = start_at
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .expect("set before go");
                        let (from, end) = (start + warmup, start + warmup + measured);
                        let mut rng =
                            StdRng::seed_from_u64(seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9));
                        loop {
                            if common::stopped() || Instant::now() >= end {
                                break;
                            }
                            let t0 = Instant::now();
                            let r = op(client, st, &mut rng);
                            let t1 = Instant::now();
                            let counted = t1 >= from && t1 <= end;
                            match r {
                                Ok(()) => {
                                    out.ops_all += 1;
                                    if counted {
                                        out.hist.saturating_record((t1 - t0).as_nanos() as u64);
                                        out.ops += 1;
                                        done.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                Err(e) => {
                                    if counted {
                                        out.errors += 1;
                                    }
                                    note_error(samples, format!("{e:#}"));
                                    if client.is_closed() {
                                        // Reconnect once; a server that is gone ends this thread.
                                        let again = server.connect().and_then(|mut c| {
                                            let st = c.prepare(sql)?;
                                            Ok((c, st))
                                        });
                                        match again {
                                            Ok((c, s)) => (*client, *st) = (c, s),
                                            Err(e) => {
                                                note_error(samples, format!("reconnecting: {e:#}"));
                                                break;
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        Ok(out)
                    })();
                    finished.wait();
                    drop(keep);
                    result
                })
                .context("spawning a client thread")?;
            handles.push(h);
        }
        connected.wait();
        let failed = setup_failed.load(Ordering::SeqCst);
        let start = Instant::now();
        *start_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(start);
        go.wait();
        let (from, end) = (start + warmup, start + warmup + measured);
        let pid = server.pid();
        let mut first: Option<(cpu::Sample, [f64; 3])> = None;
        let mut shown = Instant::now();
        // The client threads stop at `end`, then wait for the others at
        // `finished` with their connections open; meanwhile the CPU counters
        // are read at `from` and at `end`.
        loop {
            let now = Instant::now();
            if failed || common::stopped() || now >= end {
                break;
            }
            if first.is_none() && now >= from {
                first = Some((cpu::sample(pid), cpu::loadavg()));
            }
            if shown.elapsed() >= Duration::from_millis(250) {
                shown = now;
                let msg = if now < from {
                    format!("{label}: warming up")
                } else {
                    let secs = (now - from).as_secs_f64().max(1e-9);
                    let d = done.load(Ordering::Relaxed);
                    format!(
                        "{label}: {} ops, {:.0} ops/s",
                        thousands(d),
                        d as f64 / secs
                    )
                };
                pb.set_message(msg);
            }
            let next = if first.is_none() { from } else { end };
            std::thread::sleep(
                next.saturating_duration_since(now)
                    .min(Duration::from_millis(10)),
            );
        }
        let last = (cpu::sample(pid), cpu::loadavg());
        finished.wait();
        let mut hist = new_hist();
        let (mut ops, mut ops_all, mut errors) = (0, 0, 0);
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(o)) => {
                    hist.add(&o.hist).expect("histograms of the same bounds");
                    ops += o.ops;
                    ops_all += o.ops_all;
                    errors += o.errors;
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow!("a client thread panicked"));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(server.explain(e.context(format!("{label}: a client could not start"))));
        }
        check_stop()?;
        let (a, load_before) = first.context("the run ended before its measured window")?;
        let (b, load_after) = last;
        Ok(RunOutcome {
            ops,
            ops_all,
            syncs: None,
            errors,
            error_samples: samples.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            seconds: measured.as_secs_f64(),
            hist,
            cpu: CpuUse::between(&a, &b),
            load_before,
            load_after,
        })
    })
}

fn run_one(
    server: &Server,
    backend: Backend,
    workload: Workload,
    args: &PointArgs,
    round: usize,
    next_event: &AtomicU64,
    pb: &ProgressBar,
) -> anyhow::Result<RunOutcome> {
    let label = format!(
        "round {}/{} {} {}",
        round + 1,
        args.rounds,
        workload.name(),
        backend.name()
    );
    let _watchdog = common::Watchdog::new(
        Duration::from_secs_f64(args.warmup + args.seconds) + Duration::from_secs(120),
        label.clone(),
    );
    if workload == Workload::Inserts {
        if let Server::Postgres(_) = server {
            // Each PostgreSQL insert run starts right after a checkpoint (so
            // its full-page writes are part of every run alike).
            server.connect()?.batch_execute("CHECKPOINT")?;
        }
        // What the previous run left dirty is written back now, not during this run.
        // SAFETY: sync(2) has no preconditions.
        unsafe { libc::sync() };
    }
    let seed = args
        .seed
        .wrapping_mul(1_000_003)
        .wrapping_add(round as u64 * 2 + workload as u64);
    match workload {
        Workload::Reads => {
            let rows = args.rows.max(1);
            run_clients(server, workload, args, &label, seed, pb, |c, st, rng| {
                let id = rng.gen_range(1..=rows) as i64;
                let got = c.query(st, &[&id])?;
                if got.len() != 1 {
                    return Err(anyhow!("id {id}: {} rows, expected 1", got.len()));
                }
                let (rid, name, _score): (i64, String, i32) =
                    (got[0].try_get(0)?, got[0].try_get(1)?, got[0].try_get(2)?);
                if rid != id || name.len() < 5 {
                    return Err(anyhow!("id {id}: wrong row ({rid}, {name:?})"));
                }
                Ok(())
            })
        }
        Workload::Inserts => {
            let pad = "x".repeat(args.payload_bytes);
            let before = server.wal_syncs()?;
            let mut out = run_clients(server, workload, args, &label, seed, pb, |c, st, _| {
                let id = next_event.fetch_add(1, Ordering::Relaxed) as i64;
                let mut payload = format!("event-{id}-");
                payload.push_str(&pad[..args.payload_bytes.saturating_sub(payload.len())]);
                let n = c.execute(st, &[&id, &payload])?;
                if n != 1 {
                    return Err(anyhow!("insert of id {id} reported {n} rows"));
                }
                Ok(())
            })?;
            // PostgreSQL's backends report their WAL counters as they exit.
            std::thread::sleep(Duration::from_millis(300));
            out.syncs = Some(server.wal_syncs()?.saturating_sub(before));
            Ok(out)
        }
    }
}

fn summarize(
    workload: Workload,
    backend: Backend,
    connections: usize,
    outs: &[(usize, RunOutcome)],
) -> RunSummary {
    let mut hist = new_hist();
    let (mut ops, mut errors, mut seconds) = (0u64, 0u64, 0f64);
    let mut rounds = Vec::new();
    let mut samples: Vec<String> = Vec::new();
    for (round, o) in outs {
        hist.add(&o.hist).expect("same bounds");
        ops += o.ops;
        errors += o.errors;
        seconds += o.seconds;
        for s in &o.error_samples {
            if samples.len() < ERROR_SAMPLES && !samples.contains(s) {
                samples.push(s.clone());
            }
        }
        rounds.push(RoundResult {
            round: *round,
            ops: o.ops,
            ops_all: o.ops_all,
            wal_syncs: o.syncs,
            errors: o.errors,
            seconds: o.seconds,
            ops_per_s: o.ops as f64 / o.seconds.max(1e-9),
            latency: Latency::of(&o.hist),
            cpu: o.cpu.clone(),
            load_average_before: o.load_before,
            load_average_after: o.load_after,
        });
    }
    let cpus: Vec<CpuUse> = outs.iter().map(|(_, o)| o.cpu.clone()).collect();
    let cpu = CpuUse::mean(&cpus);
    let ops_per_s = ops as f64 / seconds.max(1e-9);
    let per_op = |cores: f64| {
        if ops_per_s > 0.0 {
            cores / ops_per_s * 1e6
        } else {
            0.0
        }
    };
    let rates = rounds.iter().map(|r| r.ops_per_s);
    let wal_syncs: Option<u64> = outs.iter().map(|(_, o)| o.syncs).sum();
    let ops_all: u64 = outs.iter().map(|(_, o)| o.ops_all).sum();
    RunSummary {
        workload,
        backend,
        connections,
        ops,
        errors,
        error_samples: samples,
        seconds,
        ops_per_s,
        min_round_ops_per_s: rates.clone().fold(f64::INFINITY, f64::min),
        max_round_ops_per_s: rates.fold(0.0, f64::max),
        latency: Latency::of(&hist),
        server_cpu_us_per_op: per_op(cpu.server_cores),
        client_cpu_us_per_op: per_op(cpu.bench_cores),
        wal_syncs,
        ops_per_wal_sync: wal_syncs
            .filter(|n| *n > 0)
            .map(|n| ops_all as f64 / n as f64),
        cpu,
        rounds,
    }
}

fn load(l: [f64; 3]) -> String {
    format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
}

pub fn run(args: &PointArgs) -> anyhow::Result<PointResults> {
    anyhow::ensure!(
        args.connections > 0 && args.rounds > 0 && args.seconds > 0.0,
        "--connections, --rounds and --seconds must be > 0"
    );
    let load_average_start = cpu::loadavg();
    eprintln!(
        "load average at start: {} ({} cores)",
        load(load_average_start),
        common::machine().cores
    );
    let mut backends: Vec<Backend> = Vec::new();
    for b in &args.backends {
        if !backends.contains(b) {
            backends.push(*b);
        }
    }
    let mut workloads: Vec<Workload> = Vec::new();
    for w in &args.workloads {
        if !workloads.contains(w) {
            workloads.push(*w);
        }
    }
    anyhow::ensure!(!workloads.is_empty(), "no workload to run");
    let mut skipped = Vec::new();
    // Both servers run for the whole benchmark; the one not being measured is idle.
    let mut servers: Vec<(Backend, Server)> = Vec::new();
    let mut aqueduct_info = None;
    let mut pg_info = None;
    if backends.contains(&Backend::Aqueduct) {
        let bin = AqueductServer::binary(&args.aqueduct_bin)?;
        let meta = std::fs::metadata(&bin).with_context(|| format!("{}", bin.display()))?;
        eprintln!(
            "starting the Aqueduct server ({} serve --fsync {} --max-connections {}, 127.0.0.1 only)...",
            bin.file_name().unwrap_or_default().to_string_lossy(),
            args.fsync,
            args.connections + 12
        );
        // As for PostgreSQL: room for the clients and a few more.
        let s = AqueductServer::start(&bin, &args.dir, &args.fsync, args.connections + 12)?;
        let version = s
            .connect()
            .and_then(|mut c| Ok(c.query_one("SHOW server_version", &[])?.get::<_, String>(0)))
            .unwrap_or_else(|e| format!("unknown ({e:#})"));
        aqueduct_info = Some(AqueductInfo {
            fsync: args.fsync.clone(),
            max_connections: args.connections + 12,
            binary_bytes: meta.len(),
            binary_modified_unix: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0),
            server_version: version,
        });
        servers.push((Backend::Aqueduct, Server::Aqueduct(s)));
    }
    if backends.contains(&Backend::Postgres) {
        match PgServer::unavailable(&args.pg_bin) {
            Some(why) => {
                eprintln!("skipping postgres: {why}");
                skipped.push((Backend::Postgres, why));
            }
            None => {
                eprintln!("starting PostgreSQL (initdb in a scratch directory, 127.0.0.1 only)...");
                let s = PgServer::start(&args.pg_bin, &args.dir, args.connections + 2)?;
                let mut c = s.connect()?;
                let mut settings = Vec::new();
                for name in [
                    "synchronous_commit",
                    "fsync",
                    "wal_sync_method",
                    "full_page_writes",
                    "commit_delay",
                    "shared_buffers",
                    "max_connections",
                ] {
                    let row = c.query_one(&format!("SHOW {name}"), &[])?;
                    settings.push((name.to_string(), row.get::<_, String>(0)));
                }
                pg_info = Some(PgInfo {
                    version: s.version.clone(),
                    settings,
                });
                servers.push((Backend::Postgres, Server::Postgres(s)));
            }
        }
    }
    anyhow::ensure!(!servers.is_empty(), "no backend to measure");

    let probe = |when: &str| -> anyhow::Result<Latency> {
        let d = common::scratch_dir(&args.dir, "bench-probe-")?;
        let l = common::fdatasync_probe(d.path(), 500)?;
        eprintln!(
            "fdatasync probe ({when}): p50 {} ms, p99 {} ms",
            ms(l.p50_ms),
            ms(l.p99_ms)
        );
        Ok(l)
    };

    let pb = common::progress(
        (args.rounds * servers.len() * workloads.len()) as u64,
        "{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} runs  {msg}",
    );
    let mut preload_seconds = Vec::new();
    for (b, s) in &servers {
        let secs = preload(s, args.rows, &pb, b.name())?;
        common::say(
            &pb,
            format!(
                "{}: preloaded {} rows in {:.1} s",
                b.name(),
                thousands(args.rows),
                secs
            ),
        );
        preload_seconds.push((*b, secs));
    }
    let fdatasync_probe_before = probe("before")?;

    // Event ids continue across rounds: every insert is a new key.
    let next_event: Vec<AtomicU64> = servers.iter().map(|_| AtomicU64::new(1)).collect();
    let mut outcomes: Vec<Vec<Vec<(usize, RunOutcome)>>> = workloads
        .iter()
        .map(|_| servers.iter().map(|_| Vec::new()).collect())
        .collect();
    for round in 0..args.rounds {
        for (wi, &workload) in workloads.iter().enumerate() {
            let n = servers.len();
            for i in 0..n {
                check_stop()?;
                // Alternate which backend goes first, round by round.
                let si = (i + round) % n;
                let (backend, server) = (&servers[si].0, &servers[si].1);
                let out = run_one(
                    server,
                    *backend,
                    workload,
                    args,
                    round,
                    &next_event[si],
                    &pb,
                )?;
                let l = Latency::of(&out.hist);
                common::say(
                    &pb,
                    format!(
                        "round {}/{} {:12} {:9} {:>9} ops/s  p50 {} ms  p99 {} ms  errors {}  cpu: server {:.2} client {:.2} other {:.2} (irq {:.2}) of {:.1} cores  load {}",
                        round + 1,
                        args.rounds,
                        workload.name(),
                        backend.name(),
                        thousands((out.ops as f64 / out.seconds) as u64),
                        ms(l.p50_ms),
                        ms(l.p99_ms),
                        out.errors,
                        out.cpu.server_cores,
                        out.cpu.bench_cores,
                        out.cpu.other_cores,
                        out.cpu.irq_cores,
                        out.cpu.cores,
                        load(out.load_after),
                    ),
                );
                if let Some(n) = out.syncs {
                    common::say(
                        &pb,
                        format!(
                            "    {} log syncs for {} inserts ({:.1} per sync)",
                            thousands(n),
                            thousands(out.ops_all),
                            out.ops_all as f64 / n.max(1) as f64
                        ),
                    );
                }
                for e in &out.error_samples {
                    common::say(&pb, format!("    error: {e}"));
                }
                outcomes[wi][si].push((round, out));
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let fdatasync_probe_after = probe("after")?;
    let load_average_end = cpu::loadavg();

    let mut results = Vec::new();
    for (wi, &workload) in workloads.iter().enumerate() {
        for (si, (backend, _)) in servers.iter().enumerate() {
            results.push(summarize(
                workload,
                *backend,
                args.connections,
                &outcomes[wi][si],
            ));
        }
    }
    let mut comparisons = Vec::new();
    for &workload in &workloads {
        let find = |b: Backend| {
            results
                .iter()
                .find(|r| r.workload == workload && r.backend == b)
        };
        if let (Some(a), Some(p)) = (find(Backend::Aqueduct), find(Backend::Postgres)) {
            let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
            comparisons.push(Comparison {
                workload,
                ops_per_s_ratio: ratio(a.ops_per_s, p.ops_per_s),
                p50_ratio: ratio(a.latency.p50_ms, p.latency.p50_ms),
                p99_ratio: ratio(a.latency.p99_ms, p.latency.p99_ms),
                target: match workload {
                    Workload::Reads => "point reads at least as fast as PostgreSQL",
                    Workload::Inserts => {
                        "inserts under --fsync always at least as fast as PostgreSQL with synchronous_commit=on"
                    }
                },
                target_met: a.ops_per_s >= p.ops_per_s && a.errors == 0,
            });
        }
    }

    println!();
    println!(
        "sql point: {} connections (closed loop, client threads on the same {} cores), {} rows, {} round(s) x {} s (+{} s warm-up) per backend per workload",
        args.connections,
        common::machine().cores,
        thousands(args.rows),
        args.rounds,
        args.seconds,
        args.warmup
    );
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.workload.name().to_string(),
                r.backend.name().to_string(),
                thousands(r.ops_per_s as u64),
                format!(
                    "{}-{}",
                    thousands(r.min_round_ops_per_s as u64),
                    thousands(r.max_round_ops_per_s as u64)
                ),
                ms(r.latency.p50_ms),
                ms(r.latency.p99_ms),
                ms(r.latency.max_ms),
                r.errors.to_string(),
                format!("{:.2}/{:.2}", r.cpu.machine_busy_cores, r.cpu.cores),
                format!("{:.2}", r.cpu.server_cores),
                format!("{:.2}", r.cpu.bench_cores),
                format!("{:.2}", r.cpu.irq_cores),
                format!("{:.2}", r.cpu.other_cores),
                format!("{:.0}", r.server_cpu_us_per_op),
                format!("{:.0}", r.client_cpu_us_per_op),
                r.ops_per_wal_sync
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print_table(
        &[
            "workload",
            "backend",
            "ops/s",
            "rounds min-max",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "busy/all cores",
            "server cores",
            "client cores",
            "irq (overlaps)",
            "other cores",
            "server us/op",
            "client us/op",
            "ops/sync",
        ],
        &rows,
    );
    if !comparisons.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = comparisons
            .iter()
            .map(|c| {
                vec![
                    c.workload.name().to_string(),
                    format!("{:.2}x", c.ops_per_s_ratio),
                    format!("{:.2}x", c.p50_ratio),
                    format!("{:.2}x", c.p99_ratio),
                    if c.target_met { "yes" } else { "NO" }.to_string(),
                ]
            })
            .collect();
        print_table(
            &[
                "aqueduct/postgres",
                "ops/s",
                "p50",
                "p99",
                "target (ops/s >= postgres) met",
            ],
            &rows,
        );
    }
    if let Some(a) = &aqueduct_info {
        println!(
            "aqueduct: --fsync {}; server_version {}",
            a.fsync, a.server_version
        );
    }
    if let Some(p) = &pg_info {
        println!("postgres: {}; {:?}", p.version, p.settings);
    }
    for (b, why) in &skipped {
        println!("skipped {}: {why}", b.name());
    }
    println!(
        "load average: {} at start, {} at end",
        load(load_average_start),
        load(load_average_end)
    );
    println!("note: numbers from a shared machine are noisy; compare backends within one run.");
    drop(servers);
    Ok(PointResults {
        schema: vec![CREATE_ITEMS, CREATE_EVENTS],
        statements: vec![SELECT_ITEM, INSERT_EVENT],
        load_average_start,
        load_average_end,
        fdatasync_probe_before,
        fdatasync_probe_after,
        preload_seconds,
        aqueduct: aqueduct_info,
        postgres: pg_info,
        results,
        aqueduct_vs_postgres: comparisons,
        skipped,
    })
}
