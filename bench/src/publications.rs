//! Publications end to end (Synapse's Fig. 13, EuroSys '15 §6): a writer
//! commits single-row transactions to a publisher while subscribers keep a
//! copy in PostgreSQL, measured against PostgreSQL's own logical
//! replication and against publishing through RabbitMQ, in one run.
//!
//! Every server is a throwaway child process in a scratch directory on
//! free ports of 127.0.0.1, stopped by its process id at the end: the
//! Aqueduct server (publisher), a PostgreSQL 15 as the sink, a second
//! PostgreSQL 15 with `wal_level=logical` as the baselines' publisher, and
//! RabbitMQ (with an `epmd` of its own on a free port). Each run gets a
//! fresh table `posts_<k> (id bigint PRIMARY KEY, author int, body text,
//! n int)` on the publisher and fresh sink databases.
//!
//! Phases:
//! - **throughput**: `--changes` single-row transactions (about half
//!   inserts, half updates of the writer's own earlier rows), `--clients`
//!   connections as fast as the publisher takes them; end to end is from
//!   the first write to the sink holding the last change (its row count
//!   and `sum(n)` equal the source's, polled every `POLL_END`); then the
//!   sink is compared with the source row by row.
//! - **latency**: the same writes at a fixed `--latency-rate`; the writer
//!   notes each change's commit time, a poller on the sink sees when the
//!   row arrives (`SELECT id, n ... WHERE id = ANY(...)` over the pending
//!   changes, in a loop), publish-to-apply is the difference.
//! - **callback**: `--callback-changes` inserts by `--callback-clients`
//!   users while the sink table has a `BEFORE INSERT OR UPDATE` trigger
//!   sleeping `--callback-ms`, so apply is bound by parallelism.
//! - **overhead**: the writer for `--overhead-seconds`, closed loop, with
//!   0, 1 and 2 subscribers attached, `--rounds` rounds in alternating order.
//!
//! Durability is off on every side (Aqueduct `--fsync never`, PostgreSQL
//! `synchronous_commit=off`, with the baseline publisher's WAL writer
//! flushing every 1 ms since logical replication sends only flushed WAL,
//! a transient RabbitMQ queue), so that the pipelines' CPU costs are what
//! is compared.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use postgres::Client;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{self, Latency};
use crate::peer::{self, PeerProcess, Registry};
use crate::pg::{self, PgServer};

/// Agents (`aqueduct subscribe`), RabbitMQ and its epmd started by this
/// process.
static RUNNING: Registry = Registry::new(Vec::new());

/// Kills every agent and broker this process started (second Ctrl-C).
pub fn emergency_stop() {
    peer::kill_all(&RUNNING);
}

/// How often the end of a throughput run is polled for on the sink.
const POLL_END: Duration = Duration::from_millis(10);
/// Pause between two polls of the latency poller.
const POLL_LATENCY: Duration = Duration::from_millis(1);
/// How long a subscriber may take to bootstrap, or a PostgreSQL
/// subscription to copy its (empty) table.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How long RabbitMQ may take to accept connections.
const RABBIT_START_DEADLINE: Duration = Duration::from_secs(90);
/// How long after the last write the sink may take, beyond the callback's
/// own time, before the run is given up as not caught up.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(120);
/// Bytes of each row's body.
const BODY_BYTES: usize = 64;
/// Where Debian puts the real RabbitMQ start script (`/usr/sbin`'s is a
/// wrapper that switches to the system user and its directories).
const RABBIT_SCRIPT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct PublicationsArgs {
    /// Single-row transactions per throughput run.
    #[arg(long, default_value_t = 40_000)]
    pub changes: u64,
    /// Writer connections (each its own `aqueduct.acting_user`).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Modes of the Aqueduct runs.
    #[arg(long, value_delimiter = ',', default_value = "weak,causal,global")]
    pub modes: Vec<String>,
    /// Agent workers (global mode runs with 1 only).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub workers: Vec<usize>,
    /// Workers of the latency runs.
    #[arg(long, default_value_t = 4)]
    pub latency_workers: usize,
    /// Offered changes/s of the latency runs.
    #[arg(long, default_value_t = 1000.0)]
    pub latency_rate: f64,
    /// Seconds each latency run writes.
    #[arg(long, default_value_t = 5.0)]
    pub latency_seconds: f64,
    /// Inserts per callback run.
    #[arg(long, default_value_t = 160)]
    pub callback_changes: u64,
    /// Writer connections (users) of the callback runs.
    #[arg(long, default_value_t = 16)]
    pub callback_clients: usize,
    /// The sink trigger's sleep, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub callback_ms: u64,
    /// Seconds each publisher-overhead run writes.
    #[arg(long, default_value_t = 5.0)]
    pub overhead_seconds: f64,
    /// Rounds of the overhead runs (0, 1, 2 subscribers, then 2, 1, 0, ...).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Small sizes, throughput only, every sink checked equal to its
    /// source: under a minute.
    #[arg(long)]
    pub smoke: bool,
    /// Skip the PostgreSQL logical replication baseline.
    #[arg(long)]
    pub no_pg: bool,
    /// Skip the RabbitMQ baseline.
    #[arg(long)]
    pub no_rabbitmq: bool,
    /// Skip phases (`throughput`, `latency`, `callback`, `overhead`).
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// PostgreSQL 15's binaries.
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin: PathBuf,
    /// The Aqueduct binary (default: `aqueduct` next to this one).
    #[arg(long)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Where the scratch directories go (default: the system's temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the results as CSV files `publications-*.csv` here.
    #[arg(long)]
    pub csv_dir: Option<PathBuf>,
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

// ---------------------------------------------------------------- results

#[derive(Serialize, Clone, Debug, Default)]
pub struct Cpu {
    /// CPU seconds over the run (write start to caught up).
    pub publisher_s: f64,
    pub agent_s: f64,
    pub sink_s: f64,
    pub broker_s: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct ThroughputRow {
    pub system: String,
    pub mode: String,
    pub workers: usize,
    pub changes: u64,
    pub writer_seconds: f64,
    pub writer_changes_per_sec: f64,
    pub end_to_end_seconds: f64,
    pub end_to_end_changes_per_sec: f64,
    pub caught_up: bool,
    pub sink_equals_source: bool,
    pub cpu: Cpu,
}

#[derive(Serialize, Clone, Debug)]
pub struct LatencyRow {
    pub system: String,
    pub mode: String,
    pub workers: usize,
    pub offered_per_sec: f64,
    pub achieved_per_sec: f64,
    pub changes: u64,
    /// Changes whose arrival was seen (the rest timed out).
    pub seen: u64,
    pub latency: Latency,
}

#[derive(Serialize, Clone, Debug)]
pub struct CallbackRow {
    pub system: String,
    pub mode: String,
    pub workers: usize,
    pub changes: u64,
    pub seconds: f64,
    pub changes_per_sec: f64,
    pub caught_up: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct OverheadRow {
    pub system: String,
    pub subscribers: usize,
    pub round: usize,
    pub changes: u64,
    pub writes_per_sec: f64,
    /// Seconds after the writer stopped until every subscriber had all.
    pub drain_seconds: f64,
    /// The publisher's CPU per write, from the writer's start until every
    /// subscriber had all (Aqueduct only: the baseline PostgreSQL's
    /// backends have exited by then): the server's own cost of a write
    /// and of sending it to the subscribers, apart from the CPU the
    /// subscribers take from the writer on a shared machine.
    pub publisher_cpu_us_per_write: Option<f64>,
}

#[derive(Serialize, Clone, Debug, Default)]
pub struct Results {
    pub aqueduct: String,
    pub postgres: String,
    pub rabbitmq: Option<String>,
    /// Why a baseline did not run.
    pub skipped: Vec<String>,
    pub throughput: Vec<ThroughputRow>,
    pub latency: Vec<LatencyRow>,
    pub callback: Vec<CallbackRow>,
    pub overhead: Vec<OverheadRow>,
}

// ---------------------------------------------------------------- systems

#[derive(Clone, Copy, Debug, PartialEq)]
enum System {
    Aqueduct { mode: &'static str, workers: usize },
    PgLogical,
    Rabbit { consumers: usize },
}

impl System {
    fn name(&self) -> &'static str {
        match self {
            System::Aqueduct { .. } => "aqueduct",
            System::PgLogical => "postgres-logical",
            System::Rabbit { .. } => "rabbitmq",
        }
    }
    fn mode(&self) -> &'static str {
        match self {
            System::Aqueduct { mode, .. } => mode,
            System::PgLogical => "ordered",
            System::Rabbit { .. } => "queue",
        }
    }
    fn workers(&self) -> usize {
        match self {
            System::Aqueduct { workers, .. } => *workers,
            System::PgLogical => 1,
            System::Rabbit { consumers } => *consumers,
        }
    }
    fn label(&self) -> String {
        format!("{} {} x{}", self.name(), self.mode(), self.workers())
    }
}

fn mode_name(m: &str) -> anyhow::Result<&'static str> {
    Ok(match m {
        "weak" => "weak",
        "causal" => "causal",
        "global" => "global",
        other => bail!("--modes: unknown mode {other} (weak, causal, global)"),
    })
}

/// RabbitMQ as a child process, with its own epmd, and a client
/// connection the writers and consumers open channels on.
struct Rabbit {
    // Field order: the connection goes before its runtime, the broker
    // stops before its epmd, and the scratch directory goes last.
    conn: lapin::Connection,
    rt: tokio::runtime::Runtime,
    broker: PeerProcess,
    _epmd: PeerProcess,
    version: String,
    _dir: tempfile::TempDir,
}

impl Rabbit {
    /// Why RabbitMQ cannot run here, if it cannot.
    fn unavailable() -> Option<String> {
        if !std::path::Path::new(RABBIT_SCRIPT).is_file() {
            return Some(format!(
                "{RABBIT_SCRIPT} not found (install RabbitMQ: apt-get install rabbitmq-server)"
            ));
        }
        if peer::find_program("epmd").is_none() {
            return Some("epmd not found (it comes with erlang-base)".into());
        }
        None
    }

    fn start(parent: &Option<PathBuf>) -> anyhow::Result<Rabbit> {
        let dir = common::scratch_dir(parent, "bench-rabbitmq-")?;
        let ports = pg::free_ports(3)?;
        let (epmd_port, amqp_port, dist_port) = (ports[0], ports[1], ports[2]);
        let epmd_bin = peer::find_program("epmd").context("epmd")?;
        let mut epmd_cmd = Command::new(&epmd_bin);
        epmd_cmd.args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"]);
        let mut epmd = PeerProcess::spawn(
            "epmd",
            epmd_cmd,
            &dir.path().join("epmd.log"),
            &RUNNING,
            Duration::from_secs(5),
        )?;
        epmd.term_is_normal();
        let d = dir.path();
        std::fs::write(d.join("enabled_plugins"), "[].\n")?;
        let node = format!("bench{amqp_port}@localhost");
        let mut cmd = Command::new(RABBIT_SCRIPT);
        cmd.current_dir(d)
            .env("HOME", d)
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env("RABBITMQ_NODE_PORT", amqp_port.to_string())
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_NODENAME", &node)
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_PID_FILE", d.join("rabbitmq.pid"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"));
        let mut broker = PeerProcess::spawn(
            "RabbitMQ",
            cmd,
            &d.join("server.log"),
            &RUNNING,
            Duration::from_secs(30),
        )?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], amqp_port));
        broker.wait_ready(RABBIT_START_DEADLINE, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
            Ok(())
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let uri = format!("amqp://guest:guest@127.0.0.1:{amqp_port}/%2f");
        let conn = rt
            .block_on(lapin::Connection::connect(
                &uri,
                lapin::ConnectionProperties::default(),
            ))
            .context("connecting to RabbitMQ")?;
        let text = std::fs::read_to_string(d.join("server.log")).unwrap_or_default();
        let version = text
            .lines()
            .find_map(|l| {
                let rest = &l[l.find("RabbitMQ ")? + "RabbitMQ ".len()..];
                let v = rest.split_whitespace().next()?;
                v.starts_with(|c: char| c.is_ascii_digit())
                    .then(|| v.to_string())
            })
            .map(|v| format!("RabbitMQ {v}"))
            .unwrap_or_else(|| "RabbitMQ".into());
        Ok(Rabbit {
            conn,
            rt,
            broker,
            _epmd: epmd,
            version,
            _dir: dir,
        })
    }

    fn channel(&self) -> anyhow::Result<lapin::Channel> {
        self.rt
            .block_on(self.conn.create_channel())
            .context("opening a RabbitMQ channel")
    }

    /// A transient queue (durability is off on every side).
    fn declare(&self, queue: &str) -> anyhow::Result<()> {
        let ch = self.channel()?;
        self.rt.block_on(ch.queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions::default(),
            lapin::types::FieldTable::default(),
        ))?;
        let _ = self.rt.block_on(ch.close(200, "done".into()));
        Ok(())
    }
}

/// One configured pipeline: a fresh source table, its publication, and
/// its subscribers, each into a sink database of its own.
struct Pipe {
    system: System,
    table: String,
    publication: String,
    sink_dbs: Vec<String>,
    agents: Vec<PeerProcess>,
    /// (sink database, subscription) of PostgreSQL subscriptions.
    pg_subs: Vec<(String, String)>,
    queue: Option<String>,
    consumers_stop: Arc<AtomicBool>,
    consumers: Vec<std::thread::JoinHandle<anyhow::Result<()>>>,
}

/// What one writer run did.
struct Written {
    changes: u64,
    inserts: u64,
    updates: u64,
    first: Instant,
    last: Instant,
}

impl Written {
    fn seconds(&self) -> f64 {
        (self.last - self.first).as_secs_f64().max(1e-9)
    }
}

enum Limit {
    Count(u64),
    Time(Duration),
}

/// A row of `posts_<k>` as read from either side.
type PostRow = (i64, Option<i32>, Option<String>, Option<i32>);

/// Changes committed and not yet seen on the sink: by row id, each
/// expected `n` with its commit time.
type Pending = Mutex<HashMap<i64, Vec<(i32, Instant)>>>;

struct Env<'a> {
    args: &'a PublicationsArgs,
    agent_bin: PathBuf,
    aq: AqueductServer,
    sink: PgServer,
    pgpub: Option<PgServer>,
    rabbit: Option<Rabbit>,
    run_no: std::cell::Cell<usize>,
    logs: tempfile::TempDir,
    pb: indicatif::ProgressBar,
}

pub fn run(args: &PublicationsArgs) -> anyhow::Result<Results> {
    let args_smoke;
    let args = if args.smoke {
        let mut a = args.clone();
        a.changes = a.changes.min(2_000);
        a.workers = vec![4];
        a.skip = vec!["latency".into(), "callback".into(), "overhead".into()];
        args_smoke = a;
        &args_smoke
    } else {
        args
    };
    let modes: Vec<&'static str> = args
        .modes
        .iter()
        .map(|m| mode_name(m))
        .collect::<anyhow::Result<_>>()?;
    let agent_bin = AqueductServer::binary(&args.aqueduct_bin)?;
    if let Some(why) = PgServer::unavailable(&args.pg_bin) {
        bail!("the sink is PostgreSQL: {why}");
    }
    let mut results = Results::default();
    let pb = indicatif::ProgressBar::new_spinner();
    pb.enable_steady_tick(Duration::from_millis(200));
    let say = |m: String| common::say(&pb, m);
    say("starting the Aqueduct server and the sink PostgreSQL".into());
    let aq = AqueductServer::start(&agent_bin, &args.dir, "never", 64)?;
    let sink = PgServer::start_with(&args.pg_bin, &args.dir, 100, "-c synchronous_commit=off")?;
    results.aqueduct = version_of(&agent_bin);
    results.postgres = sink.version.clone();
    let pgpub = if args.no_pg {
        results
            .skipped
            .push("postgres-logical: --no-pg".to_string());
        None
    } else {
        Some(PgServer::start_with(
            &args.pg_bin,
            &args.dir,
            100,
            // With commits not waiting for the WAL flush, a walsender sends
            // only what the WAL writer flushed: every 1 ms here, not 200.
            "-c synchronous_commit=off -c wal_writer_delay=1ms -c wal_level=logical \
             -c max_wal_senders=20 -c max_replication_slots=20",
        )?)
    };
    let rabbit = if args.no_rabbitmq {
        results.skipped.push("rabbitmq: --no-rabbitmq".into());
        None
    } else if pgpub.is_none() {
        results.skipped.push(
            "rabbitmq: its writer writes to the baseline PostgreSQL, skipped by --no-pg".into(),
        );
        None
    } else if let Some(why) = Rabbit::unavailable() {
        say(format!("RabbitMQ skipped: {why}"));
        results.skipped.push(format!("rabbitmq: {why}"));
        None
    } else {
        say("starting RabbitMQ".into());
        match Rabbit::start(&args.dir) {
            Ok(r) => {
                results.rabbitmq = Some(r.version.clone());
                Some(r)
            }
            Err(e) => {
                say(format!("RabbitMQ skipped: it did not start: {e:#}"));
                results
                    .skipped
                    .push(format!("rabbitmq: it did not start: {e:#}"));
                None
            }
        }
    };
    let env = Env {
        args,
        agent_bin,
        aq,
        sink,
        pgpub,
        rabbit,
        run_no: std::cell::Cell::new(0),
        logs: common::scratch_dir(&args.dir, "bench-agents-")?,
        pb: pb.clone(),
    };
    let phase = |name: &str| !args.skip.iter().any(|s| s == name);

    // The systems of the throughput runs.
    let mut systems = Vec::new();
    for &mode in &modes {
        for &w in &args.workers {
            if mode == "global" && w != 1 && args.workers.contains(&1) {
                continue;
            }
            let w = if mode == "global" { 1 } else { w };
            systems.push(System::Aqueduct { mode, workers: w });
        }
    }
    let mut baselines = Vec::new();
    if env.pgpub.is_some() {
        baselines.push(System::PgLogical);
    }
    if env.rabbit.is_some() {
        baselines.push(System::Rabbit { consumers: 1 });
    }

    if phase("throughput") {
        for s in systems.iter().chain(&baselines) {
            common::check_stop()?;
            say(format!("throughput: {}", s.label()));
            let row = env.throughput(*s)?;
            say(format!(
                "  {} changes: writer {:.0}/s, end to end {:.0}/s in {:.2} s{}{}",
                row.changes,
                row.writer_changes_per_sec,
                row.end_to_end_changes_per_sec,
                row.end_to_end_seconds,
                if row.caught_up { "" } else { ", NOT caught up" },
                if row.sink_equals_source {
                    ", sink = source"
                } else {
                    ", SINK DIFFERS FROM SOURCE"
                }
            ));
            results.throughput.push(row);
        }
    }
    if phase("latency") {
        let mut lat_systems: Vec<System> = modes
            .iter()
            .map(|&mode| System::Aqueduct {
                mode,
                workers: if mode == "global" {
                    1
                } else {
                    args.latency_workers
                },
            })
            .collect();
        lat_systems.extend(&baselines);
        for s in lat_systems {
            common::check_stop()?;
            say(format!(
                "latency at {:.0} changes/s: {}",
                args.latency_rate,
                s.label()
            ));
            let row = env.latency(s)?;
            say(format!(
                "  p50 {} ms, p99 {} ms ({} of {} seen)",
                common::ms(row.latency.p50_ms),
                common::ms(row.latency.p99_ms),
                row.seen,
                row.changes
            ));
            results.latency.push(row);
        }
    }
    if phase("callback") {
        let mut cb_systems = systems.clone();
        if env.pgpub.is_some() {
            cb_systems.push(System::PgLogical);
        }
        if env.rabbit.is_some() {
            for &w in &args.workers {
                cb_systems.push(System::Rabbit { consumers: w });
            }
        }
        for s in cb_systems {
            common::check_stop()?;
            say(format!("{} ms callback: {}", args.callback_ms, s.label()));
            let row = env.callback(s)?;
            say(format!(
                "  {:.1} changes/s ({} in {:.2} s)",
                row.changes_per_sec, row.changes, row.seconds
            ));
            results.callback.push(row);
        }
    }
    if phase("overhead") {
        let mut ov_systems = vec![System::Aqueduct {
            mode: "weak",
            workers: 4,
        }];
        if env.pgpub.is_some() {
            ov_systems.push(System::PgLogical);
        }
        for s in ov_systems {
            for round in 0..args.rounds.max(1) {
                let order: Vec<usize> = if round % 2 == 0 {
                    vec![0, 1, 2]
                } else {
                    vec![2, 1, 0]
                };
                for subs in order {
                    common::check_stop()?;
                    let row = env.overhead(s, subs, round)?;
                    say(format!(
                        "overhead: {} with {subs} subscribers, round {round}: {:.0} writes/s (drained {:.2} s after)",
                        s.name(),
                        row.writes_per_sec,
                        row.drain_seconds
                    ));
                    results.overhead.push(row);
                }
            }
        }
    }
    pb.finish_and_clear();
    print_results(&results);
    if let Some(dir) = &args.csv_dir {
        write_csv(dir, &results)?;
    }
    if args.smoke {
        let bad: Vec<String> = results
            .throughput
            .iter()
            .filter(|r| !(r.caught_up && r.sink_equals_source))
            .map(|r| format!("{} {} x{}", r.system, r.mode, r.workers))
            .collect();
        if !bad.is_empty() {
            bail!(
                "smoke: the sink did not end equal to the source for {}",
                bad.join(", ")
            );
        }
        println!(
            "smoke: {} pipelines, every sink equal to its source",
            results.throughput.len()
        );
    }
    drop(env);
    Ok(results)
}

fn version_of(bin: &std::path::Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Env<'_> {
    fn next_run(&self) -> usize {
        let k = self.run_no.get() + 1;
        self.run_no.set(k);
        k
    }

    fn source(&self, system: System) -> anyhow::Result<Client> {
        match system {
            System::Aqueduct { .. } => self.aq.connect(),
            _ => self
                .pgpub
                .as_ref()
                .context("no baseline PostgreSQL")?
                .connect(),
        }
    }

    fn sink_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.sink.port)
    }

    /// Sets up a fresh pipeline with `subscribers` sinks (each with the
    /// sleeping trigger when `callback`).
    fn pipe(&self, system: System, subscribers: usize, callback: bool) -> anyhow::Result<Pipe> {
        let k = self.next_run();
        let table = format!("posts_{k}");
        let publication = format!("pub_{k}");
        let ddl =
            format!("CREATE TABLE {table} (id bigint PRIMARY KEY, author int, body text, n int)");
        let mut src = self.source(system)?;
        src.batch_execute(&ddl)?;
        match system {
            System::Aqueduct { mode, .. } => src.batch_execute(&format!(
                "CREATE PUBLICATION {publication} FOR TABLE {table} WITH (mode = '{mode}')"
            ))?,
            System::PgLogical => src.batch_execute(&format!(
                "CREATE PUBLICATION {publication} FOR TABLE {table}"
            ))?,
            System::Rabbit { .. } => {}
        }
        let mut pipe = Pipe {
            system,
            table: table.clone(),
            publication: publication.clone(),
            sink_dbs: Vec::new(),
            agents: Vec::new(),
            pg_subs: Vec::new(),
            queue: None,
            consumers_stop: Arc::new(AtomicBool::new(false)),
            consumers: Vec::new(),
        };
        let mut admin = self.sink.connect()?;
        for i in 0..subscribers {
            let db = format!("sink_{k}_{i}");
            admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
            pipe.sink_dbs.push(db.clone());
            let mut sc = self.sink.connect_to(&db)?;
            match system {
                System::Aqueduct { mode, workers } => {
                    let name = format!("sub_{k}_{i}");
                    let mut cmd = Command::new(&self.agent_bin);
                    cmd.args([
                        "subscribe",
                        "--from",
                        &format!("127.0.0.1:{}", self.aq.http_port()),
                        "--publication",
                        &publication,
                        "--name",
                        &name,
                        "--mode",
                        mode,
                        "--into",
                        &self.sink_url(&db),
                        "--workers",
                        &workers.to_string(),
                    ]);
                    let log = self.logs.path().join(format!("{name}.log"));
                    let mut agent = PeerProcess::spawn(
                        "aqueduct subscribe",
                        cmd,
                        &log,
                        &RUNNING,
                        Duration::from_secs(10),
                    )?;
                    agent.term_is_normal();
                    // Bootstrapped: the table is made and the position stored.
                    agent.wait_ready(READY_DEADLINE, || {
                        let r = sc.query_one(
                            "SELECT to_regclass('aqueduct.subscription') IS NOT NULL \
                             AND to_regclass($1) IS NOT NULL",
                            &[&format!("public.{table}")],
                        )?;
                        if !r.get::<_, bool>(0) {
                            bail!("not bootstrapped yet");
                        }
                        let r = sc.query_opt(
                            "SELECT watermark FROM aqueduct.subscription WHERE name = $1",
                            &[&name],
                        )?;
                        match r {
                            Some(r) if r.get::<_, Option<i64>>(0).unwrap_or(0) > 0 => Ok(()),
                            _ => bail!("no position yet"),
                        }
                    })?;
                    pipe.agents.push(agent);
                }
                System::PgLogical => {
                    sc.batch_execute(&ddl)?;
                    let sub = format!("sub_{k}_{i}");
                    let port = self.pgpub.as_ref().context("no baseline PostgreSQL")?.port;
                    sc.batch_execute(&format!(
                        "CREATE SUBSCRIPTION {sub} CONNECTION 'host=127.0.0.1 port={port} \
                         user=postgres dbname=postgres' PUBLICATION {publication}"
                    ))?;
                    pipe.pg_subs.push((db.clone(), sub.clone()));
                    let until = Instant::now() + READY_DEADLINE;
                    loop {
                        common::check_stop()?;
                        let r = sc.query_one(
                            "SELECT count(*) FILTER (WHERE srsubstate = 'r'), count(*) \
                             FROM pg_subscription_rel",
                            &[],
                        )?;
                        let (ready, all): (i64, i64) = (r.get(0), r.get(1));
                        if all > 0 && ready == all {
                            break;
                        }
                        if Instant::now() >= until {
                            bail!("the PostgreSQL subscription {sub} did not sync its table");
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                System::Rabbit { consumers } => {
                    sc.batch_execute(&ddl)?;
                    let rabbit = self.rabbit.as_ref().context("no RabbitMQ")?;
                    let queue = format!("q_{k}_{i}");
                    rabbit.declare(&queue)?;
                    for _ in 0..consumers {
                        let ch = rabbit.channel()?;
                        let handle = rabbit.rt.handle().clone();
                        let client = self.sink.connect_to(&db)?;
                        let stop = pipe.consumers_stop.clone();
                        let (q, t) = (queue.clone(), table.clone());
                        pipe.consumers.push(
                            std::thread::Builder::new()
                                .name("rabbit-consumer".into())
                                .spawn(move || consume(handle, ch, client, &q, &t, &stop))?,
                        );
                    }
                    pipe.queue = Some(queue);
                }
            }
            if callback {
                sc.batch_execute(&format!(
                    "CREATE FUNCTION bench_callback() RETURNS trigger LANGUAGE plpgsql AS \
                     $$ BEGIN PERFORM pg_sleep({}); RETURN NEW; END $$; \
                     CREATE TRIGGER bench_callback BEFORE INSERT OR UPDATE ON {table} \
                     FOR EACH ROW EXECUTE FUNCTION bench_callback(); \
                     ALTER TABLE {table} ENABLE ALWAYS TRIGGER bench_callback;",
                    self.args.callback_ms as f64 / 1000.0
                ))?;
            }
        }
        Ok(pipe)
    }

    /// Stops the pipeline's subscribers and drops what holds the
    /// publisher's log.
    fn teardown(&self, mut pipe: Pipe) -> anyhow::Result<()> {
        pipe.consumers_stop.store(true, Ordering::SeqCst);
        for h in pipe.consumers.drain(..) {
            match h.join() {
                Ok(r) => r?,
                Err(_) => bail!("a RabbitMQ consumer panicked"),
            }
        }
        pipe.agents.clear();
        for (db, sub) in &pipe.pg_subs {
            let mut c = self.sink.connect_to(db)?;
            c.batch_execute(&format!("DROP SUBSCRIPTION {sub}"))?;
        }
        if !matches!(pipe.system, System::Rabbit { .. }) {
            let mut src = self.source(pipe.system)?;
            src.batch_execute(&format!("DROP PUBLICATION {}", pipe.publication))?;
        }
        Ok(())
    }

    /// `clients` writer threads: inserts of new rows and (unless
    /// `inserts_only`) updates of the thread's own rows, about half each,
    /// every change its own transaction; at `rate` changes/s in all when
    /// given. Each commit is noted in `pending`.
    fn write(
        &self,
        pipe: &Pipe,
        clients: usize,
        limit: Limit,
        rate: Option<f64>,
        inserts_only: bool,
        pending: Option<&Pending>,
    ) -> anyhow::Result<Written> {
        let clients = clients.max(1);
        let table = &pipe.table;
        // Connections first, so the clock starts with everyone ready.
        let mut conns = Vec::with_capacity(clients);
        for t in 0..clients {
            let mut c = self.source(pipe.system)?;
            if let System::Aqueduct { .. } = pipe.system {
                c.batch_execute(&format!("SET aqueduct.acting_user = 'user{t}'"))?;
            }
            let ins = c.prepare(&format!(
                "INSERT INTO {table} (id, author, body, n) VALUES ($1, $2, $3, 0)"
            ))?;
            let upd = c.prepare(&format!(
                "UPDATE {table} SET n = $2, body = $3 WHERE id = $1"
            ))?;
            let channel = match (&pipe.queue, &self.rabbit) {
                (Some(_), Some(r)) => Some(r.channel()?),
                _ => None,
            };
            conns.push((c, ins, upd, channel));
        }
        let start = Instant::now() + Duration::from_millis(20);
        let end = match limit {
            Limit::Time(d) => Some(start + d),
            Limit::Count(_) => None,
        };
        let rabbit = self.rabbit.as_ref();
        let queue = pipe.queue.as_deref();
        let outcomes: Vec<anyhow::Result<(u64, u64, Instant, Instant)>> = std::thread::scope(|s| {
            let handles: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(t, (mut c, ins, upd, channel))| {
                    let quota = match limit {
                        Limit::Count(n) => {
                            n / clients as u64 + u64::from((t as u64) < n % clients as u64)
                        }
                        Limit::Time(_) => u64::MAX,
                    };
                    s.spawn(move || -> anyhow::Result<(u64, u64, Instant, Instant)> {
                        let mut rng = SmallRng::seed_from_u64(0x5eed ^ t as u64);
                        let interval =
                            rate.map(|r| Duration::from_secs_f64(clients as f64 / r.max(1e-3)));
                        let offset = interval.map(|i| i.mul_f64(t as f64 / clients as f64));
                        let mut own: Vec<i32> = Vec::new();
                        let (mut inserts, mut updates) = (0u64, 0u64);
                        let mut first: Option<Instant> = None;
                        let mut last = start;
                        let mut i = 0u64;
                        while i < quota {
                            if common::stopped() {
                                bail!("interrupted");
                            }
                            if let (Some(iv), Some(off)) = (interval, offset) {
                                let due = start + off + iv.mul_f64(i as f64);
                                let now = Instant::now();
                                if due > now {
                                    std::thread::sleep(due - now);
                                }
                            } else if i == 0 {
                                let now = Instant::now();
                                if start > now {
                                    std::thread::sleep(start - now);
                                }
                            }
                            if end.is_some_and(|e| Instant::now() >= e) {
                                break;
                            }
                            let body: String = (0..BODY_BYTES)
                                .map(|_| rng.gen_range(b'a'..=b'z') as char)
                                .collect();
                            let update = !inserts_only && !own.is_empty() && rng.gen_bool(0.5);
                            let t0 = Instant::now();
                            let (id, n) = if update {
                                let j = rng.gen_range(0..own.len());
                                own[j] += 1;
                                let id = (j * clients + t) as i64 + 1;
                                c.execute(&upd, &[&id, &own[j], &body])?;
                                updates += 1;
                                (id, own[j])
                            } else {
                                let id = (own.len() * clients + t) as i64 + 1;
                                own.push(0);
                                c.execute(&ins, &[&id, &(t as i32), &body])?;
                                inserts += 1;
                                (id, 0)
                            };
                            let committed = Instant::now();
                            first.get_or_insert(t0);
                            if let (Some(ch), Some(r), Some(q)) = (&channel, rabbit, queue) {
                                let payload = serde_json::to_vec(&serde_json::json!({
                                    "id": id, "author": t as i32, "body": body, "n": n,
                                }))?;
                                r.rt.block_on(async {
                                    ch.basic_publish(
                                        "".into(),
                                        q.into(),
                                        lapin::options::BasicPublishOptions::default(),
                                        &payload,
                                        lapin::BasicProperties::default(),
                                    )
                                    .await?
                                    .await
                                })
                                .context("publishing to RabbitMQ")?;
                            }
                            if let Some(p) = pending {
                                p.lock()
                                    .expect("pending")
                                    .entry(id)
                                    .or_default()
                                    .push((n, committed));
                            }
                            last = Instant::now();
                            i += 1;
                        }
                        Ok((inserts, updates, first.unwrap_or(start), last))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a writer panicked")))
                })
                .collect()
        });
        let mut w = Written {
            changes: 0,
            inserts: 0,
            updates: 0,
            first: start + Duration::from_secs(3600),
            last: start,
        };
        for o in outcomes {
            let (ins, upd, first, last) = o?;
            w.inserts += ins;
            w.updates += upd;
            w.first = w.first.min(first);
            w.last = w.last.max(last);
        }
        w.changes = w.inserts + w.updates;
        Ok(w)
    }

    /// Waits until sink database `db` holds `rows` rows whose `n` add up
    /// to `sum`; the time it was seen, or `None` past `deadline`.
    fn wait_sink(
        &self,
        pipe: &Pipe,
        db: &str,
        rows: u64,
        sum: u64,
        deadline: Duration,
    ) -> anyhow::Result<Option<Instant>> {
        let mut c = self.sink.connect_to(db)?;
        let q = c.prepare(&format!(
            "SELECT count(*), coalesce(sum(n), 0)::bigint FROM {}",
            pipe.table
        ))?;
        let until = Instant::now() + deadline;
        loop {
            common::check_stop()?;
            let r = c.query_one(&q, &[])?;
            let (n, s): (i64, i64) = (r.get(0), r.get(1));
            if n as u64 == rows && s as u64 == sum {
                return Ok(Some(Instant::now()));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            std::thread::sleep(POLL_END);
        }
    }

    /// Whether the sink's rows are the source's, row by row.
    fn sink_equals_source(&self, pipe: &Pipe, db: &str) -> anyhow::Result<bool> {
        let q = format!("SELECT id, author, body, n FROM {} ORDER BY id", pipe.table);
        let read = |c: &mut Client| -> anyhow::Result<Vec<PostRow>> {
            Ok(c.query(&q, &[])?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect())
        };
        let a = read(&mut self.source(pipe.system)?)?;
        let b = read(&mut self.sink.connect_to(db)?)?;
        Ok(a == b)
    }

    fn cpu(&self, pipe: &Pipe) -> Cpu {
        let publisher = match pipe.system {
            System::Aqueduct { .. } => crate::cpu::tree_seconds(self.aq.pid()),
            _ => self
                .pgpub
                .as_ref()
                .and_then(|p| p.postmaster_pid())
                .map_or(0.0, crate::cpu::tree_seconds),
        };
        Cpu {
            publisher_s: publisher,
            agent_s: pipe
                .agents
                .iter()
                .map(|a| crate::cpu::tree_seconds(a.pid()))
                .sum(),
            sink_s: self
                .sink
                .postmaster_pid()
                .map_or(0.0, crate::cpu::tree_seconds),
            broker_s: self
                .rabbit
                .as_ref()
                .map_or(0.0, |r| crate::cpu::tree_seconds(r.broker.pid())),
        }
    }

    fn throughput(&self, system: System) -> anyhow::Result<ThroughputRow> {
        let pipe = self.pipe(system, 1, false)?;
        let c0 = self.cpu(&pipe);
        let w = self.write(
            &pipe,
            self.args.clients,
            Limit::Count(self.args.changes),
            None,
            false,
            None,
        )?;
        let seen = self.wait_sink(
            &pipe,
            &pipe.sink_dbs[0],
            w.inserts,
            w.updates,
            CATCH_UP_DEADLINE,
        )?;
        let c1 = self.cpu(&pipe);
        let equal = self.sink_equals_source(&pipe, &pipe.sink_dbs[0])?;
        if seen.is_none() {
            self.report_agents(&pipe);
        }
        let e2e = seen.map_or(f64::NAN, |t| (t - w.first).as_secs_f64());
        self.teardown(pipe)?;
        Ok(ThroughputRow {
            system: system.name().into(),
            mode: system.mode().into(),
            workers: system.workers(),
            changes: w.changes,
            writer_seconds: w.seconds(),
            writer_changes_per_sec: w.changes as f64 / w.seconds(),
            end_to_end_seconds: e2e,
            end_to_end_changes_per_sec: w.changes as f64 / e2e,
            caught_up: seen.is_some(),
            sink_equals_source: equal,
            cpu: Cpu {
                publisher_s: c1.publisher_s - c0.publisher_s,
                agent_s: c1.agent_s - c0.agent_s,
                sink_s: c1.sink_s - c0.sink_s,
                broker_s: c1.broker_s - c0.broker_s,
            },
        })
    }

    fn report_agents(&self, pipe: &Pipe) {
        for (i, _) in pipe.agents.iter().enumerate() {
            let log = self.logs.path().join(format!(
                "sub_{}_{i}.log",
                pipe.table.trim_start_matches("posts_")
            ));
            common::say(
                &self.pb,
                format!("the agent's log:\n{}", peer::log_tail(&log)),
            );
        }
    }

    fn latency(&self, system: System) -> anyhow::Result<LatencyRow> {
        let pipe = self.pipe(system, 1, false)?;
        let pending: Pending = Mutex::new(HashMap::new());
        let writing = AtomicBool::new(true);
        let count = (self.args.latency_rate * self.args.latency_seconds).round() as u64;
        let mut poll = self.sink.connect_to(&pipe.sink_dbs[0])?;
        let q = poll.prepare(&format!(
            "SELECT id, n FROM {} WHERE id = ANY($1)",
            pipe.table
        ))?;
        let (w, hist) = std::thread::scope(|s| {
            let poller = s.spawn(|| -> anyhow::Result<Histogram<u64>> {
                let mut hist = common::new_hist();
                let mut drained_at: Option<Instant> = None;
                loop {
                    if common::stopped() {
                        bail!("interrupted");
                    }
                    let ids: Vec<i64> = pending
                        .lock()
                        .expect("pending")
                        .keys()
                        .take(10_000)
                        .copied()
                        .collect();
                    if ids.is_empty() {
                        if !writing.load(Ordering::SeqCst) {
                            return Ok(hist);
                        }
                        std::thread::sleep(POLL_LATENCY);
                        continue;
                    }
                    let rows = poll.query(&q, &[&ids])?;
                    let now = Instant::now();
                    {
                        let mut p = pending.lock().expect("pending");
                        for r in rows {
                            let (id, n): (i64, Option<i32>) = (r.get(0), r.get(1));
                            let n = n.unwrap_or(-1);
                            if let Some(v) = p.get_mut(&id) {
                                v.retain(|(want, at)| {
                                    if *want <= n {
                                        hist.saturating_record((now - *at).as_nanos() as u64);
                                        false
                                    } else {
                                        true
                                    }
                                });
                                if v.is_empty() {
                                    p.remove(&id);
                                }
                            }
                        }
                    }
                    if !writing.load(Ordering::SeqCst) {
                        let d = *drained_at.get_or_insert(now);
                        if now - d > CATCH_UP_DEADLINE {
                            return Ok(hist);
                        }
                    }
                    std::thread::sleep(POLL_LATENCY);
                }
            });
            let w = self.write(
                &pipe,
                self.args.clients,
                Limit::Count(count),
                Some(self.args.latency_rate),
                false,
                Some(&pending),
            );
            writing.store(false, Ordering::SeqCst);
            let hist = poller
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the poller panicked")));
            (w, hist)
        });
        let (w, hist) = (w?, hist?);
        self.teardown(pipe)?;
        Ok(LatencyRow {
            system: system.name().into(),
            mode: system.mode().into(),
            workers: system.workers(),
            offered_per_sec: self.args.latency_rate,
            achieved_per_sec: w.changes as f64 / w.seconds(),
            changes: w.changes,
            seen: hist.len(),
            latency: Latency::of(&hist),
        })
    }

    fn callback(&self, system: System) -> anyhow::Result<CallbackRow> {
        let pipe = self.pipe(system, 1, true)?;
        let w = self.write(
            &pipe,
            self.args.callback_clients,
            Limit::Count(self.args.callback_changes),
            None,
            true,
            None,
        )?;
        let budget = Duration::from_millis(self.args.callback_ms * w.changes) + CATCH_UP_DEADLINE;
        let seen = self.wait_sink(&pipe, &pipe.sink_dbs[0], w.inserts, 0, budget)?;
        let secs = seen.map_or(f64::NAN, |t| (t - w.first).as_secs_f64());
        self.teardown(pipe)?;
        Ok(CallbackRow {
            system: system.name().into(),
            mode: system.mode().into(),
            workers: system.workers(),
            changes: w.changes,
            seconds: secs,
            changes_per_sec: w.changes as f64 / secs,
            caught_up: seen.is_some(),
        })
    }

    fn overhead(&self, system: System, subs: usize, round: usize) -> anyhow::Result<OverheadRow> {
        let pipe = self.pipe(system, subs, false)?;
        let cpu_before = self.cpu(&pipe).publisher_s;
        let w = self.write(
            &pipe,
            self.args.clients,
            Limit::Time(Duration::from_secs_f64(self.args.overhead_seconds)),
            None,
            false,
            None,
        )?;
        let mut drained = w.last;
        for db in &pipe.sink_dbs {
            match self.wait_sink(&pipe, db, w.inserts, w.updates, CATCH_UP_DEADLINE)? {
                Some(t) => drained = drained.max(t),
                None => bail!("a subscriber of {} did not catch up", pipe.table),
            }
        }
        let publisher_cpu_us_per_write = matches!(system, System::Aqueduct { .. })
            .then(|| (self.cpu(&pipe).publisher_s - cpu_before) * 1e6 / w.changes.max(1) as f64);
        self.teardown(pipe)?;
        Ok(OverheadRow {
            system: system.name().into(),
            subscribers: subs,
            round,
            changes: w.changes,
            writes_per_sec: w.changes as f64 / w.seconds(),
            drain_seconds: (drained - w.last).as_secs_f64(),
            publisher_cpu_us_per_write,
        })
    }
}

/// A RabbitMQ consumer: each message is one upsert into the sink (guarded
/// by `n`, so a late older change cannot undo a newer one), acknowledged
/// after it, until `stop`.
fn consume(
    rt: tokio::runtime::Handle,
    ch: lapin::Channel,
    mut sink: Client,
    queue: &str,
    table: &str,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    use futures_lite::StreamExt;
    let upsert = sink.prepare(&format!(
        "INSERT INTO {table} AS t (id, author, body, n) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO UPDATE SET author = excluded.author, body = excluded.body, \
         n = excluded.n WHERE t.n < excluded.n"
    ))?;
    rt.block_on(ch.basic_qos(256, lapin::options::BasicQosOptions::default()))?;
    let mut consumer = rt.block_on(ch.basic_consume(
        queue.into(),
        "".into(),
        lapin::options::BasicConsumeOptions::default(),
        lapin::types::FieldTable::default(),
    ))?;
    while !stop.load(Ordering::SeqCst) {
        let next = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), consumer.next()).await
        });
        let delivery = match next {
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some(d)) => d?,
        };
        let v: serde_json::Value = serde_json::from_slice(&delivery.data)?;
        let id = v["id"].as_i64().context("id")?;
        let author = v["author"].as_i64().context("author")? as i32;
        let body = v["body"].as_str().context("body")?;
        let n = v["n"].as_i64().context("n")? as i32;
        sink.execute(&upsert, &[&id, &author, &body, &n])?;
        rt.block_on(delivery.ack(lapin::options::BasicAckOptions::default()))?;
    }
    let _ = rt.block_on(ch.close(200, "done".into()));
    Ok(())
}

fn print_results(r: &Results) {
    if !r.throughput.is_empty() {
        println!("\nEnd-to-end throughput (changes/s into the sink PostgreSQL)");
        let base = r
            .throughput
            .iter()
            .find(|t| t.system == "postgres-logical")
            .map(|t| t.end_to_end_changes_per_sec);
        common::print_table(
            &[
                "system",
                "mode",
                "workers",
                "changes",
                "writer/s",
                "end to end/s",
                "vs PG",
                "sink = source",
            ],
            &r.throughput
                .iter()
                .map(|t| {
                    vec![
                        t.system.clone(),
                        t.mode.clone(),
                        t.workers.to_string(),
                        common::thousands(t.changes),
                        format!("{:.0}", t.writer_changes_per_sec),
                        format!("{:.0}", t.end_to_end_changes_per_sec),
                        base.map_or("-".into(), |b| {
                            format!("{:.2}x", t.end_to_end_changes_per_sec / b)
                        }),
                        if t.sink_equals_source { "yes" } else { "NO" }.into(),
                    ]
                })
                .collect::<Vec<_>>(),
        );
    }
    if !r.latency.is_empty() {
        println!("\nPublish-to-apply latency (ms)");
        common::print_table(
            &[
                "system",
                "mode",
                "workers",
                "offered/s",
                "seen",
                "p50",
                "p99",
                "max",
            ],
            &r.latency
                .iter()
                .map(|l| {
                    vec![
                        l.system.clone(),
                        l.mode.clone(),
                        l.workers.to_string(),
                        format!("{:.0}", l.offered_per_sec),
                        format!("{}/{}", l.seen, l.changes),
                        common::ms(l.latency.p50_ms),
                        common::ms(l.latency.p99_ms),
                        common::ms(l.latency.max_ms),
                    ]
                })
                .collect::<Vec<_>>(),
        );
    }
    if !r.callback.is_empty() {
        println!("\nWith a sink-side callback (changes/s)");
        common::print_table(
            &[
                "system",
                "mode",
                "workers",
                "changes",
                "seconds",
                "changes/s",
            ],
            &r.callback
                .iter()
                .map(|c| {
                    vec![
                        c.system.clone(),
                        c.mode.clone(),
                        c.workers.to_string(),
                        c.changes.to_string(),
                        format!("{:.2}", c.seconds),
                        format!("{:.1}", c.changes_per_sec),
                    ]
                })
                .collect::<Vec<_>>(),
        );
    }
    if !r.overhead.is_empty() {
        println!("\nPublisher writes/s with subscribers attached");
        common::print_table(
            &[
                "system",
                "subscribers",
                "round",
                "writes/s",
                "drain s",
                "publisher CPU µs/write",
            ],
            &r.overhead
                .iter()
                .map(|o| {
                    vec![
                        o.system.clone(),
                        o.subscribers.to_string(),
                        o.round.to_string(),
                        format!("{:.0}", o.writes_per_sec),
                        format!("{:.2}", o.drain_seconds),
                        o.publisher_cpu_us_per_write
                            .map_or("-".into(), |c| format!("{c:.0}")),
                    ]
                })
                .collect::<Vec<_>>(),
        );
    }
    for s in &r.skipped {
        println!("skipped: {s}");
    }
}

fn write_csv(dir: &std::path::Path, r: &Results) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut out = String::from(
        "system,mode,workers,changes,writer_changes_per_sec,end_to_end_seconds,\
         end_to_end_changes_per_sec,caught_up,sink_equals_source,publisher_cpu_s,agent_cpu_s,\
         sink_cpu_s,broker_cpu_s\n",
    );
    for t in &r.throughput {
        out += &format!(
            "{},{},{},{},{:.1},{:.3},{:.1},{},{},{:.2},{:.2},{:.2},{:.2}\n",
            t.system,
            t.mode,
            t.workers,
            t.changes,
            t.writer_changes_per_sec,
            t.end_to_end_seconds,
            t.end_to_end_changes_per_sec,
            t.caught_up,
            t.sink_equals_source,
            t.cpu.publisher_s,
            t.cpu.agent_s,
            t.cpu.sink_s,
            t.cpu.broker_s
        );
    }
    std::fs::write(dir.join("publications-throughput.csv"), out)?;
    let mut out = String::from(
        "system,mode,workers,offered_per_sec,achieved_per_sec,changes,seen,p50_ms,p90_ms,p99_ms,max_ms\n",
    );
    for l in &r.latency {
        out += &format!(
            "{},{},{},{:.0},{:.1},{},{},{:.3},{:.3},{:.3},{:.3}\n",
            l.system,
            l.mode,
            l.workers,
            l.offered_per_sec,
            l.achieved_per_sec,
            l.changes,
            l.seen,
            l.latency.p50_ms,
            l.latency.p90_ms,
            l.latency.p99_ms,
            l.latency.max_ms
        );
    }
    std::fs::write(dir.join("publications-latency.csv"), out)?;
    let mut out = String::from("system,mode,workers,changes,seconds,changes_per_sec,caught_up\n");
    for c in &r.callback {
        out += &format!(
            "{},{},{},{},{:.3},{:.2},{}\n",
            c.system, c.mode, c.workers, c.changes, c.seconds, c.changes_per_sec, c.caught_up
        );
    }
    std::fs::write(dir.join("publications-callback.csv"), out)?;
    let mut out = String::from(
        "system,subscribers,round,changes,writes_per_sec,drain_seconds,publisher_cpu_us_per_write\n",
    );
    for o in &r.overhead {
        out += &format!(
            "{},{},{},{},{:.1},{:.3},{}\n",
            o.system,
            o.subscribers,
            o.round,
            o.changes,
            o.writes_per_sec,
            o.drain_seconds,
            o.publisher_cpu_us_per_write
                .map_or(String::new(), |c| format!("{c:.1}"))
        );
    }
    std::fs::write(dir.join("publications-overhead.csv"), out)?;
    eprintln!("wrote {}/publications-*.csv", dir.display());
    Ok(())
}
