//! `bench log append`: durable appends of small records by many concurrent
//! writers, aqueduct's log against a naive fdatasync-per-record file and
//! PostgreSQL, measured in interleaved rounds.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use aqueduct_log::{Log, NewRecord, Options, SyncPolicy};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use parking_lot::Mutex;
use serde::Serialize;

use crate::common::{
    self, check_stop, ms, new_hist, print_table, run_writers, thousands, Latency, WriterOutcome,
    WriterSpec,
};
use crate::pg::{PgServer, Pool};

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Backend {
    /// aqueduct-log, SyncPolicy::Always (group commit).
    #[value(name = "aqueduct-always")]
    #[serde(rename = "aqueduct-always")]
    AqueductAlways,
    /// aqueduct-log, SyncPolicy::Never (not durable: the OS's page cache).
    #[value(name = "aqueduct-never")]
    #[serde(rename = "aqueduct-never")]
    AqueductNever,
    /// A plain file: write under a mutex, then fdatasync, per record, W writers.
    #[value(name = "file-fsync")]
    #[serde(rename = "file-fsync")]
    FileFsync,
    /// The same with a single writer.
    #[value(name = "file-fsync-1")]
    #[serde(rename = "file-fsync-1")]
    FileFsync1,
    /// PostgreSQL, synchronous_commit=on, one autocommit INSERT per record.
    #[value(name = "postgres")]
    #[serde(rename = "postgres")]
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::AqueductAlways => "aqueduct-always",
            Backend::AqueductNever => "aqueduct-never",
            Backend::FileFsync => "file-fsync",
            Backend::FileFsync1 => "file-fsync-1",
            Backend::Postgres => "postgres",
        }
    }
}

#[derive(Args, Debug, Serialize)]
pub struct AppendArgs {
    /// Concurrent writer threads (file-fsync-1 always uses one).
    #[arg(long, default_value_t = 256)]
    pub writers: usize,
    /// Measured seconds per backend per round.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Instead of --seconds: this many appends per backend per round, all measured.
    #[arg(long)]
    pub records: Option<u64>,
    /// Rounds; each round runs every backend once, in a rotated order.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Unmeasured seconds at the start of each run.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Backends to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "aqueduct-always,aqueduct-never,file-fsync,file-fsync-1,postgres"
    )]
    pub backends: Vec<Backend>,
    /// Bytes per value (179: Sirius' average object).
    #[arg(long, default_value_t = 179)]
    pub value_bytes: usize,
    /// Keys are obj/<n> with n uniform in [0, keyspace).
    #[arg(long, default_value_t = 1_000_000)]
    pub keyspace: u64,
    /// Segment size of the aqueduct log, MiB.
    #[arg(long, default_value_t = 64)]
    pub segment_mib: u64,
    /// PostgreSQL connections shared by the writers (capped at --writers).
    #[arg(long, default_value_t = 64)]
    pub pg_connections: usize,
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

#[derive(Serialize, Debug)]
pub struct RoundResult {
    pub round: usize,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub latency: Latency,
}

#[derive(Serialize, Debug)]
pub struct Ratios {
    /// records/s of this backend divided by aqueduct-always's.
    pub records_per_s: f64,
    pub p50: f64,
    pub p99: f64,
}

#[derive(Serialize, Debug)]
pub struct BackendResult {
    pub backend: Backend,
    pub writers: usize,
    /// PostgreSQL connections (the writers share them).
    pub connections: Option<usize>,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub min_round_records_per_s: f64,
    pub max_round_records_per_s: f64,
    /// Time from the append call to its return (durable, for the durable backends).
    pub latency: Latency,
    pub vs_aqueduct_always: Option<Ratios>,
    pub rounds: Vec<RoundResult>,
}

#[derive(Serialize, Debug)]
pub struct PgInfo {
    pub version: String,
    pub settings: Vec<(String, String)>,
    pub table: String,
}

#[derive(Serialize, Debug)]
pub struct AppendResults {
    /// One writer's append + fdatasync of 256 bytes on the disk under test,
    /// before and after the runs (the disk's own sync latency).
    pub fdatasync_probe_before: Latency,
    pub fdatasync_probe_after: Latency,
    pub backends: Vec<BackendResult>,
    pub postgres: Option<PgInfo>,
    pub skipped: Vec<(Backend, String)>,
}

const PG_TABLE: &str = "CREATE TABLE kv (k text NOT NULL, v bytea NOT NULL)";
const PG_INSERT: &str = "INSERT INTO kv (k, v) VALUES ($1, $2)";

struct Pg {
    server: PgServer,
    pool: Pool,
    info: PgInfo,
}

fn start_postgres(args: &AppendArgs) -> anyhow::Result<Pg> {
    let conns = args.pg_connections.min(args.writers).max(1);
    let server = PgServer::start(&args.pg_bin, &args.dir, conns)?;
    let mut c = server.connect()?;
    c.batch_execute(PG_TABLE).context("creating the table")?;
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
    let pool = Pool::new(&server, conns, PG_INSERT)?;
    let info = PgInfo {
        version: server.version.clone(),
        settings,
        table: PG_TABLE.to_string(),
    };
    Ok(Pg { server, pool, info })
}

fn run_one(
    args: &AppendArgs,
    backend: Backend,
    round: usize,
    pg: Option<&Pg>,
    pb: &ProgressBar,
) -> anyhow::Result<WriterOutcome> {
    let spec = WriterSpec {
        label: format!("round {}/{} {}", round + 1, args.rounds, backend.name()),
        writers: if backend == Backend::FileFsync1 {
            1
        } else {
            args.writers
        },
        warmup: Duration::from_secs_f64(args.warmup),
        seconds: Duration::from_secs_f64(args.seconds),
        records: args.records,
        keyspace: args.keyspace,
        value_bytes: args.value_bytes,
        seed: args.seed.wrapping_add(round as u64),
    };
    // Timed runs are bounded; a --records run lasts as long as it takes.
    let _watchdog = args.records.is_none().then(|| {
        common::Watchdog::new(
            Duration::from_secs_f64(args.warmup + args.seconds) + Duration::from_secs(120),
            spec.label.clone(),
        )
    });
    // Whatever the previous run left dirty in the page cache is written back
    // now, not during this run.
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    match backend {
        Backend::AqueductAlways | Backend::AqueductNever => {
            let dir = common::scratch_dir(&args.dir, "bench-log-")?;
            let sync = if backend == Backend::AqueductAlways {
                SyncPolicy::Always
            } else {
                SyncPolicy::Never
            };
            let (log, _) = Log::open(
                dir.path(),
                Options {
                    sync,
                    segment_bytes: args.segment_mib << 20,
                    ..Options::default()
                },
            )?;
            let out = run_writers(&spec, pb, |k, v| {
                log.append(&[NewRecord::put(k, v)])?;
                Ok(())
            })?;
            drop(log);
            Ok(out)
        }
        Backend::FileFsync | Backend::FileFsync1 => {
            let dir = common::scratch_dir(&args.dir, "bench-file-")?;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join("data"))?;
            let lock = Mutex::new(());
            run_writers(&spec, pb, |k, v| {
                let mut buf = Vec::with_capacity(8 + k.len() + v.len());
                buf.extend_from_slice(&(k.len() as u32).to_le_bytes());
                buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
                buf.extend_from_slice(&k);
                buf.extend_from_slice(&v);
                {
                    let _g = lock.lock();
                    (&file).write_all(&buf)?;
                }
                file.sync_data()?;
                Ok(())
            })
        }
        Backend::Postgres => {
            let pg = pg.context("PostgreSQL is not running")?;
            // Every round starts from an empty table and a fresh checkpoint.
            let mut c = pg.server.connect()?;
            c.batch_execute("TRUNCATE kv; CHECKPOINT")?;
            drop(c);
            run_writers(&spec, pb, |k, v| {
                let key = String::from_utf8(k)?;
                pg.pool.with(|c, st| c.execute(st, &[&key, &v]))?;
                Ok(())
            })
        }
    }
}

pub fn run(args: &AppendArgs) -> anyhow::Result<AppendResults> {
    anyhow::ensure!(
        args.writers > 0 && args.rounds > 0,
        "--writers and --rounds must be > 0"
    );
    let mut backends: Vec<Backend> = Vec::new();
    for b in &args.backends {
        if !backends.contains(b) {
            backends.push(*b);
        }
    }
    let mut skipped = Vec::new();
    let mut pg = None;
    if backends.contains(&Backend::Postgres) {
        match PgServer::unavailable(&args.pg_bin) {
            Some(why) => {
                eprintln!("skipping postgres: {why}");
                skipped.push((Backend::Postgres, why));
                backends.retain(|b| *b != Backend::Postgres);
            }
            None => {
                eprintln!("starting PostgreSQL (initdb in a scratch directory, 127.0.0.1 only)...");
                pg = Some(start_postgres(args)?);
            }
        }
    }
    anyhow::ensure!(!backends.is_empty(), "no backend to measure");

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
    let fdatasync_probe_before = probe("before")?;
    let pb = common::progress(
        (args.rounds * backends.len()) as u64,
        "{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} runs  {msg}",
    );
    let mut outcomes: Vec<Vec<(usize, WriterOutcome)>> =
        backends.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        // Rotate the order each round, so no backend always runs first.
        let n = backends.len();
        for i in 0..n {
            check_stop()?;
            let bi = (i + round) % n;
            let out = run_one(args, backends[bi], round, pg.as_ref(), &pb)?;
            common::say(
                &pb,
                format!(
                    "round {}/{} {:16} {:>12} rec/s  p50 {} ms  p99 {} ms",
                    round + 1,
                    args.rounds,
                    backends[bi].name(),
                    thousands(out.rate() as u64),
                    ms(Latency::of(&out.hist).p50_ms),
                    ms(Latency::of(&out.hist).p99_ms),
                ),
            );
            outcomes[bi].push((round, out));
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let fdatasync_probe_after = probe("after")?;

    let mut results: Vec<BackendResult> = Vec::new();
    for (bi, outs) in outcomes.iter().enumerate() {
        let backend = backends[bi];
        let mut hist: Histogram<u64> = new_hist();
        let (mut records, mut seconds) = (0u64, 0f64);
        let mut rounds = Vec::new();
        for (round, o) in outs {
            hist.add(&o.hist).expect("same bounds");
            records += o.records;
            seconds += o.seconds;
            rounds.push(RoundResult {
                round: *round,
                records: o.records,
                seconds: o.seconds,
                records_per_s: o.rate(),
                latency: Latency::of(&o.hist),
            });
        }
        let rates = rounds.iter().map(|r| r.records_per_s);
        results.push(BackendResult {
            backend,
            writers: if backend == Backend::FileFsync1 {
                1
            } else {
                args.writers
            },
            connections: (backend == Backend::Postgres)
                .then(|| args.pg_connections.min(args.writers).max(1)),
            records,
            seconds,
            records_per_s: if seconds > 0.0 {
                records as f64 / seconds
            } else {
                0.0
            },
            min_round_records_per_s: rates.clone().fold(f64::INFINITY, f64::min),
            max_round_records_per_s: rates.fold(0.0, f64::max),
            latency: Latency::of(&hist),
            vs_aqueduct_always: None,
            rounds,
        });
    }
    let base = results
        .iter()
        .find(|r| r.backend == Backend::AqueductAlways)
        .map(|r| (r.records_per_s, r.latency.p50_ms, r.latency.p99_ms));
    if let Some((rate, p50, p99)) = base {
        for r in &mut results {
            r.vs_aqueduct_always = Some(Ratios {
                records_per_s: r.records_per_s / rate,
                p50: r.latency.p50_ms / p50,
                p99: r.latency.p99_ms / p99,
            });
        }
    }

    println!();
    println!(
        "log append: {}-byte values, keyspace {}, {} round(s) x {} s (+{} s warm-up) per backend",
        args.value_bytes,
        thousands(args.keyspace),
        args.rounds,
        args.seconds,
        args.warmup
    );
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let ratio = |f: fn(&Ratios) -> f64| {
                r.vs_aqueduct_always
                    .as_ref()
                    .map(|x| format!("{:.2}x", f(x)))
                    .unwrap_or_else(|| "-".into())
            };
            vec![
                r.backend.name().to_string(),
                match r.connections {
                    Some(c) => format!("{} ({c} conns)", r.writers),
                    None => r.writers.to_string(),
                },
                thousands(r.records_per_s as u64),
                format!(
                    "{}-{}",
                    thousands(r.min_round_records_per_s as u64),
                    thousands(r.max_round_records_per_s as u64)
                ),
                ms(r.latency.p50_ms),
                ms(r.latency.p99_ms),
                ms(r.latency.max_ms),
                ratio(|x| x.records_per_s),
                ratio(|x| x.p50),
                ratio(|x| x.p99),
            ]
        })
        .collect();
    print_table(
        &[
            "backend",
            "writers",
            "records/s",
            "rounds min-max",
            "p50 ms",
            "p99 ms",
            "max ms",
            "rec/s vs always",
            "p50 vs always",
            "p99 vs always",
        ],
        &rows,
    );
    if let Some(pg) = &pg {
        println!("postgres: {}; {:?}", pg.info.version, pg.info.settings);
    }
    for (b, why) in &skipped {
        println!("skipped {}: {why}", b.name());
    }
    println!("note: numbers from a shared machine are noisy; compare backends within one run.");
    let postgres = pg.map(|p| p.info);
    Ok(AppendResults {
        fdatasync_probe_before,
        fdatasync_probe_after,
        backends: results,
        postgres,
        skipped,
    })
}
