//! `aqueduct subscribe`: follow a publication of a server into another
//! store (`docs/publications.md`, section 5), and the operator's commands
//! on a subscription: its status and its dead letters.
//!
//! - `shell.rs`: following (bootstrap, then the stream), the agent's shell;
//! - `ops.rs`: `status` and `dead-letters`, run on the sink's stored state;
//! - `metrics.rs`: the running agent's metrics page.

mod metrics;
mod ops;
mod shell;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SubscribeArgs {
    #[command(subcommand)]
    command: Option<SubscribeCommand>,
    #[command(flatten)]
    follow: Option<FollowArgs>,
}

#[derive(Debug, Subcommand)]
enum SubscribeCommand {
    /// A subscription's position, dead letters and lag.
    Status(ops::SinkArgs),
    /// List, retry or skip the transactions a sink refused (run with the
    /// agent stopped).
    #[command(subcommand)]
    DeadLetters(ops::DeadLetterCommand),
}

#[derive(Debug, Args)]
pub struct FollowArgs {
    /// The server's HTTP address, `http://host:port` or `host:port`.
    #[arg(long)]
    pub(crate) from: String,
    /// The publication to follow.
    #[arg(long)]
    pub(crate) publication: String,
    /// The subscriber's name: the server keeps the log for it, and its
    /// position is stored in the sink under it.
    #[arg(long)]
    pub(crate) name: String,
    /// `global`, `causal` or `weak`; at most the publication's mode.
    #[arg(long, default_value = "causal")]
    pub(crate) mode: String,
    /// Where to apply: `sqlite:FILE`, `postgres://...`, `mariadb://...`,
    /// `redis://...`, `webhook:http://...`, `nats://...`, `amqp://...`,
    /// `jsonl:FILE` or `stdout`.
    #[arg(long)]
    pub(crate) into: String,
    /// Worker threads applying in parallel (global mode uses one).
    #[arg(long, default_value_t = aqueduct_subscribe::limits::WORKERS_DEFAULT)]
    pub(crate) workers: usize,
    /// Give up waiting for a missing dependency after this long and apply
    /// in weak order for its objects (`60s`, `5min`); default: wait.
    #[arg(long)]
    pub(crate) causal_timeout: Option<String>,
    /// Where sinks that keep their position in files keep it: the message
    /// sinks (`stdout`, `jsonl:`, webhooks, NATS, RabbitMQ).
    #[arg(long)]
    pub(crate) state_dir: Option<std::path::PathBuf>,
    /// Bearer token for the server's HTTP API.
    #[arg(long, env = "AQUEDUCT_TOKEN")]
    pub(crate) token: Option<String>,
    /// Stop once the subscriber has applied everything committed up to
    /// now (for scripts and tests) instead of following forever.
    #[arg(long)]
    pub(crate) until_caught_up: bool,
    /// Start from this LSN instead of the stored position (replay: for
    /// message sinks, or a storing sink whose rows are newer anyway).
    #[arg(long, conflicts_with = "from_time")]
    pub(crate) from_lsn: Option<u64>,
    /// Start from the first transaction committed at or after this time
    /// (`2026-11-26 10:00:00+00`), within the server's retained log.
    #[arg(long)]
    pub(crate) from_time: Option<String>,
    /// Serve the agent's metrics (Prometheus text) on this address.
    #[arg(long)]
    pub(crate) metrics_addr: Option<String>,
    /// Clear the sink's copy of the publication and bootstrap it again
    /// before following: after the server's data was wiped or replaced
    /// (the agent refuses to follow a server whose id is not the one its
    /// copy came from, and says so).
    #[arg(long, conflicts_with_all = ["from_lsn", "from_time"])]
    pub(crate) rebootstrap: bool,
    /// Bootstrap this object (published name) again before following:
    /// its rows in the sink are deleted and it is loaded alone from a new
    /// snapshot at S', while the rest of the copy stays; the stream then
    /// skips its changes up to S'. Repeatable.
    #[arg(long, conflicts_with_all = ["from_lsn", "from_time", "rebootstrap"])]
    pub(crate) rebootstrap_table: Vec<String>,
    /// With --rebootstrap-table: delete only the rows matching this
    /// condition (SQL of the sink's database, over the sink table's
    /// columns) before the object is loaded again; rows outside it are
    /// refreshed by the load's guarded upserts.
    #[arg(long, requires = "rebootstrap_table")]
    pub(crate) rebootstrap_where: Option<String>,
    /// Rows per bootstrap chunk to ask the server for (it keeps them
    /// within its limits); each chunk is one sink transaction.
    #[arg(long)]
    pub(crate) bootstrap_chunk_rows: Option<u64>,
}

pub fn run(args: SubscribeArgs) -> Result<()> {
    match (args.command, args.follow) {
        (Some(SubscribeCommand::Status(a)), _) => ops::status(&a),
        (Some(SubscribeCommand::DeadLetters(c)), _) => ops::dead_letters(c),
        (None, Some(f)) => shell::run(&f),
        (None, None) => anyhow::bail!(
            "aqueduct subscribe needs --from, --publication, --name and --into (or a command: status, dead-letters)"
        ),
    }
}
