//! Aqueduct's benchmarks against real peers.
//!
//! `bench vote [options] [--json FILE]` (Noria's vote benchmark against
//! PostgreSQL, MariaDB, Redis and memcached),
//! `bench log append|replay|compaction [options] [--json FILE]`,
//! `bench sql point [options] [--json FILE]`,
//! `bench view read [options] [--json FILE]`,
//! `bench view partial [options] [--json FILE]`,
//! `bench view partial-wire [options] [--json FILE]`,
//! `bench news [options] [--json FILE]`,
//! `bench releases [options] [--json FILE]`,
//! `bench feed [options] [--json FILE]` and
//! `bench publications [options] [--json FILE] [--csv-dir DIR]`: see `docs/benchmarks.md` for
//! what each measures and the results.

mod aqueduct_server;
mod chains;
mod common;
mod cpu;
mod feed_bench;
mod kv;
mod load;
mod log_append;
mod log_compaction;
mod log_replay;
mod mariadb;
mod news;
mod news_oracle;
mod peer;
mod pg;
mod publications;
mod releases;
mod replication;
mod sql_load;
mod sql_point;
mod view_partial;
mod view_partial_wire;
mod view_read;
mod vote;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde::Serialize;

#[derive(Parser, Debug)]
#[command(name = "bench", about = "Aqueduct's benchmarks against real peers")]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand, Debug)]
enum Top {
    /// Benchmarks of the durable log (crate aqueduct-log).
    Log {
        #[command(subcommand)]
        which: LogBench,
    },
    /// The Aqueduct server against PostgreSQL over the wire protocol.
    Sql {
        #[command(subcommand)]
        which: SqlBench,
    },
    /// Transaction chains (Lynx' Table 1 and a microblog mix): piecewise
    /// against the distributed-transaction fallback and PostgreSQL
    /// SERIALIZABLE, with or without simulated datacenters.
    Chains(chains::ChainsArgs),
    /// Noria's vote benchmark: Aqueduct against PostgreSQL, MariaDB and
    /// look-aside caches, open or closed loop.
    Vote(vote::VoteArgs),
    /// Maintained views, in process (the embedded engine) and over the wire.
    View {
        #[command(subcommand)]
        which: ViewBench,
    },
    /// A news aggregator (Lobsters-like pages, natural queries) over the
    /// wire: page views/s with p95 under 100 ms, Aqueduct against PostgreSQL.
    News(news::NewsArgs),
    /// Scheduled releases in process: the cost to writes, the staleness of
    /// release reads, and keyed view reads in release mode.
    Releases(releases::ReleasesArgs),
    /// The change feed: changes/s to a consumer in process (from memory and
    /// from the log) and over HTTP, and writes with 0, 1 and 8 consumers,
    /// against PostgreSQL 15's logical decoding.
    Feed(feed_bench::FeedArgs),
    /// Publications end to end (Synapse's Fig. 13): `aqueduct subscribe`
    /// into PostgreSQL per mode and worker count, against PostgreSQL's
    /// logical replication and publishing through RabbitMQ.
    Publications(publications::PublicationsArgs),
    /// Followers: a new follower copying a log of N entries by catch-up,
    /// then a compacted one; a restart with the N-entry log to its first
    /// read.
    Replication(replication::ReplicationArgs),
}

#[derive(Subcommand, Debug)]
enum ViewBench {
    /// Keyed reads of Noria's vote view through `ViewRegistry::lookup`,
    /// uniform and Zipf ids, 1 and 2 reader threads.
    Read(view_read::ReadArgs),
    /// Noria's vote benchmark with partial state: zipf reads and writes
    /// under memory limits, and a new view over a large table.
    Partial(view_partial::PartialArgs),
    /// The same mix under memory limits over the wire: the real server
    /// restarted with each `--memory-limit`, clients on the PostgreSQL protocol.
    PartialWire(view_partial_wire::PartialWireArgs),
}

#[derive(Subcommand, Debug)]
enum SqlBench {
    /// Prepared point reads and single-row autocommit inserts, N connections
    /// in a closed loop, Aqueduct (`aqueduct serve`) against PostgreSQL.
    Point(sql_point::PointArgs),
    /// Bulk loading (COPY, multi-row INSERT), memory per row and restart
    /// to the first read, Aqueduct against PostgreSQL.
    Load(sql_load::LoadArgs),
}

#[derive(Subcommand, Debug)]
enum LogBench {
    /// Durable appends: aqueduct (always, never) against a plain file with
    /// fdatasync per record and PostgreSQL with synchronous_commit=on.
    Append(log_append::AppendArgs),
    /// Open + full replay of a large log.
    Replay(log_replay::ReplayArgs),
    /// Append latency with and without continuous background compaction.
    Compaction(log_compaction::CompactionArgs),
}

/// The envelope of every JSON result file.
#[derive(Serialize)]
struct Report<O: Serialize, R: Serialize> {
    benchmark: &'static str,
    /// Seconds since the Unix epoch when the run started.
    started_unix: u64,
    bench_version: &'static str,
    machine: common::Machine,
    options: O,
    results: R,
}

fn write_json<O: Serialize, R: Serialize>(
    path: &Option<PathBuf>,
    benchmark: &'static str,
    started_unix: u64,
    options: O,
    results: R,
) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let report = Report {
        benchmark,
        started_unix,
        bench_version: env!("CARGO_PKG_VERSION"),
        machine: common::machine(),
        options,
        results,
    };
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
    }
    let text = serde_json::to_string_pretty(&report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    common::install_ctrlc()?;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let result = match cli.command {
        Top::Log { which } => run(which, started),
        Top::Sql { which } => run_sql(which, started),
        Top::View { which } => run_view(which, started),
        Top::Chains(args) => chains::run(&args)
            .and_then(|results| write_json(&args.json, "chains", started, &args, &results)),
        Top::Vote(args) => vote::run(&args)
            .and_then(|results| write_json(&args.json, "vote", started, &args, &results)),
        Top::News(args) => news::run(&args).and_then(|results| {
            write_json(&args.json, "news", started, &args, &results)?;
            results.verdict()
        }),
        Top::Releases(args) => releases::run(&args)
            .and_then(|results| write_json(&args.json, "releases", started, &args, &results)),
        Top::Feed(mut args) => feed_bench::run(&mut args).and_then(|results| {
            write_json(&args.json, "feed throughput", started, &args, &results)
        }),
        Top::Publications(args) => publications::run(&args)
            .and_then(|results| write_json(&args.json, "publications", started, &args, &results)),
        Top::Replication(args) => replication::run(&args)
            .and_then(|results| write_json(&args.json, "replication", started, &args, &results)),
    };
    if result.is_err() && common::stopped() {
        // Guards (servers, scratch directories) were dropped on the way out.
        eprintln!("interrupted: stopped early, no results written");
        std::process::exit(130);
    }
    result
}

fn run(which: LogBench, started: u64) -> anyhow::Result<()> {
    match which {
        LogBench::Append(args) => {
            let results = log_append::run(&args)?;
            write_json(&args.json, "log append", started, &args, &results)
        }
        LogBench::Replay(args) => {
            let results = log_replay::run(&args)?;
            write_json(&args.json, "log replay", started, &args, &results)
        }
        LogBench::Compaction(args) => {
            let results = log_compaction::run(&args)?;
            write_json(&args.json, "log compaction", started, &args, &results)
        }
    }
}

fn run_sql(which: SqlBench, started: u64) -> anyhow::Result<()> {
    match which {
        SqlBench::Point(args) => {
            let results = sql_point::run(&args)?;
            write_json(&args.json, "sql point", started, &args, &results)
        }
        SqlBench::Load(args) => {
            let results = sql_load::run(&args)?;
            write_json(&args.json, "sql load", started, &args, &results)
        }
    }
}

fn run_view(which: ViewBench, started: u64) -> anyhow::Result<()> {
    match which {
        ViewBench::Read(args) => {
            let results = view_read::run(&args)?;
            write_json(&args.json, "view read", started, &args, &results)
        }
        ViewBench::Partial(args) => {
            let results = view_partial::run(&args)?;
            write_json(&args.json, "view partial", started, &args, &results)
        }
        ViewBench::PartialWire(args) => {
            let results = view_partial_wire::run(&args)?;
            write_json(&args.json, "view partial-wire", started, &args, &results)
        }
    }
}
