//! Followers (`aqueduct serve --follow`, `docs/replication.md`): how fast
//! a new follower copies a log of N entries from a server by catch-up
//! (Sirius §5.1), how fast it copies a compacted one (its bootstrap), and
//! how long a node with the N-entry log takes from start to its first
//! answered read. Real release binaries on loopback, one machine.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;

/// Segments small enough that the source's log fills many, so that
/// compaction has sealed segments to work on.
const SEGMENT_BYTES: &str = "8388608";

#[derive(Args, Debug, Serialize)]
pub struct ReplicationArgs {
    /// Log entries (one row each) the follower copies.
    #[arg(long, default_value_t = 1_000_000)]
    pub entries: u64,
    /// Rows per loading transaction.
    #[arg(long, default_value_t = 1000)]
    pub rows_per_txn: u64,
    /// Bytes of each row's payload (etcd's and ZooKeeper's runs use 179).
    #[arg(long, default_value_t = 179)]
    pub value_bytes: usize,
    /// The servers' fsync policy.
    #[arg(long, default_value = "always")]
    pub fsync: String,
    /// Where the scratch data directories go (default: the system's temp).
    #[arg(long)]
    pub data_parent: Option<PathBuf>,
    /// The `aqueduct` binary (default: next to this one).
    #[arg(long)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Stop after the restart (no second follower of the compacted log).
    #[arg(long)]
    pub no_compacted: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
pub struct CatchUpRun {
    /// What was copied: the log as written, or after compaction.
    pub log: &'static str,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
}

#[derive(Serialize, Debug)]
pub struct ReplicationResults {
    pub source_last_lsn: u64,
    pub load_seconds: f64,
    pub catch_up: Vec<CatchUpRun>,
    /// From the follower's start (the N-entry log on its disk) to its
    /// first answered read.
    pub restart_to_first_read_s: f64,
    /// The orderly stop before that start, from SIGTERM to the exit.
    pub stop_s: f64,
}

/// Waits until the follower `f` has applied `lsn`; the seconds it took.
fn until_applied(f: &AqueductServer, lsn: u64, pb: &ProgressBar) -> anyhow::Result<f64> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    loop {
        crate::common::check_stop()?;
        let applied = f.metric("aqueduct_follower_applied_lsn").unwrap_or(0);
        pb.set_position(applied);
        if applied >= lsn {
            return Ok(started.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            bail!(
                "the follower applied LSN {applied} of {lsn} in 600 s; its log:\n{}",
                f.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(args: &ReplicationArgs) -> anyhow::Result<ReplicationResults> {
    let binary = AqueductServer::binary(&args.aqueduct_bin)?;
    let mut source = AqueductServer::start_with(
        &binary,
        &args.data_parent,
        &args.fsync,
        16,
        // Compaction runs when asked to below, not while loading.
        &[
            "--compaction-interval-secs".into(),
            "86400".into(),
            "--segment-bytes".into(),
            SEGMENT_BYTES.into(),
        ],
    )?;
    let mut client = source.connect()?;
    client.batch_execute("CREATE TABLE entry (id bigint PRIMARY KEY, v text NOT NULL)")?;
    let value = "v".repeat(args.value_bytes);
    let started = Instant::now();
    let pb = ProgressBar::new(args.entries).with_message("loading the source");
    let mut id = 0u64;
    while id < args.entries {
        crate::common::check_stop()?;
        let n = args.rows_per_txn.min(args.entries - id);
        let values: Vec<String> = (id..id + n).map(|i| format!("({i}, '{value}')")).collect();
        client.batch_execute(&format!("INSERT INTO entry VALUES {}", values.join(",")))?;
        id += n;
        pb.set_position(id);
    }
    pb.finish_and_clear();
    let load_seconds = started.elapsed().as_secs_f64();
    let last: i64 = client
        .query_one("SHOW aqueduct.last_lsn", &[])
        .ok()
        .and_then(|r| r.get::<_, String>(0).parse().ok())
        .unwrap_or(0);
    let source_last_lsn = if last > 0 {
        last as u64
    } else {
        source.metric("aqueduct_log_lsn")?
    };
    eprintln!(
        "loaded {} entries (last LSN {source_last_lsn}) in {load_seconds:.1} s",
        args.entries
    );
    let follow = |port: u16| -> anyhow::Result<AqueductServer> {
        let flags = ["--follow".to_string(), format!("127.0.0.1:{port}")];
        AqueductServer::start_with(&binary, &args.data_parent, &args.fsync, 16, &flags)
    };
    let mut catch_up = Vec::new();
    let pb = ProgressBar::new(source_last_lsn).with_message("a follower catching up");
    let mut follower = follow(source.http_port())?;
    let seconds = until_applied(&follower, source_last_lsn, &pb)?;
    pb.finish_and_clear();
    catch_up.push(CatchUpRun {
        log: "as written",
        records: source_last_lsn,
        seconds,
        records_per_s: source_last_lsn as f64 / seconds,
    });
    eprintln!("caught up on {source_last_lsn} records in {seconds:.2} s");

    // Restart: an orderly stop, then (timed apart) the start: replay of
    // the follower's own log, then a read.
    let stopping = Instant::now();
    follower.stop();
    let stop_s = stopping.elapsed().as_secs_f64();
    eprintln!("the follower stopped in {stop_s:.2} s");
    let started = Instant::now();
    follower.restart(&[
        "--follow".to_string(),
        format!("127.0.0.1:{}", source.http_port()),
    ])?;
    let mut c = follower.connect()?;
    let rows = c.query("SELECT v FROM entry WHERE id = 0", &[])?;
    let restart_to_first_read_s = started.elapsed().as_secs_f64();
    if rows.len() != 1 {
        bail!("the restarted follower answered {} rows, not 1", rows.len());
    }
    eprintln!("restarted and answered a read in {restart_to_first_read_s:.2} s");
    drop(follower);
    if args.no_compacted {
        return Ok(ReplicationResults {
            source_last_lsn,
            load_seconds,
            catch_up,
            restart_to_first_read_s,
            stop_s,
        });
    }

    // Updates on every row, then compaction: a new follower copies what is
    // left (every row's newest version) with gaps.
    let pb = ProgressBar::new(args.entries).with_message("updating the source");
    let mut id = 0u64;
    while id < args.entries {
        crate::common::check_stop()?;
        let n = args.rows_per_txn.min(args.entries - id);
        let values: Vec<String> = (id..id + n).map(|i| format!("({i}, '{value}u')")).collect();
        client.batch_execute(&format!(
            "INSERT INTO entry VALUES {} ON CONFLICT (id) DO UPDATE SET v = excluded.v",
            values.join(",")
        ))?;
        id += n;
        pb.set_position(id);
    }
    pb.finish_and_clear();
    drop(client);
    source
        .restart(&[
            "--compaction-interval-secs".into(),
            "1".into(),
            "--segment-bytes".into(),
            SEGMENT_BYTES.into(),
        ])
        .context("restarting the source to compact")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while source
        .metric("aqueduct_log_compaction_passes_total")
        .unwrap_or(0)
        == 0
    {
        crate::common::check_stop()?;
        if Instant::now() > deadline {
            bail!("the source did not compact in 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let last = source.metric("aqueduct_log_lsn")?;
    let pb = ProgressBar::new(last).with_message("a new follower bootstrapping");
    let follower = follow(source.http_port())?;
    let seconds = until_applied(&follower, last, &pb)?;
    pb.finish_and_clear();
    let copied = follower.metric("aqueduct_follower_records_total")?;
    catch_up.push(CatchUpRun {
        log: "compacted",
        records: copied,
        seconds,
        records_per_s: copied as f64 / seconds,
    });
    eprintln!("bootstrapped {copied} records of a compacted log (to LSN {last}) in {seconds:.2} s");
    Ok(ReplicationResults {
        source_last_lsn,
        load_seconds,
        catch_up,
        restart_to_first_read_s,
        stop_s,
    })
}
