//! The `aqueduct` binary: the server and its operator tools.
//!
//! Each top-level command lives in its own module exposing a clap
//! `Subcommand` (or `Args`) type and a `run` function; adding one is a variant
//! in [`Command`] and an arm in [`main`].

mod cluster;
mod serve;
mod subscribe;
mod wal;

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// The server allocates and frees small values (rows, keys, index entries)
/// at a high rate from many threads: mimalloc's per-thread pages do that
/// faster than the system allocator's arenas and with less overhead per
/// allocation (`docs/benchmarks.md`, "Bulk loading, restart and memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "aqueduct",
    version,
    about = "Aqueduct: a data backend built on one durable log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the server (PostgreSQL wire protocol and HTTP).
    Serve(Box<serve::ServeArgs>),
    /// Inspect, export, filter and repair a log directory (offline: the
    /// directory must not be in use by a server).
    #[command(subcommand)]
    Wal(wal::WalCommand),
    /// Follow a publication of a server into another store (a subscriber
    /// agent: bootstrap, then the stream, exactly once where the sink can).
    Subscribe(Box<subscribe::SubscribeArgs>),
    /// Where servers are in replication: roles, LSNs, lag.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
}

fn main() -> ExitCode {
    let serving = std::env::args().nth(1).as_deref() == Some("serve");
    init_tracing(if serving { "info" } else { "warn" });
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // Exit status 2 means "damage found" (`wal verify`); a mistyped
        // command is an ordinary failure, 1. Help and version exit with 0.
        if e.use_stderr() {
            let _ = e.print();
            std::process::exit(1);
        }
        e.exit()
    });
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Wal(cmd) => wal::run(cmd),
        Command::Subscribe(args) => subscribe::run(*args),
        Command::Cluster(cmd) => cluster::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit_with(&e),
    }
}

/// Log messages (the log's own warnings, such as a torn tail found at open) go
/// to stderr, so they never mix with a command's output. `RUST_LOG` overrides
/// the level.
fn init_tracing(default_level: &str) {
    // The Raft library's own progress notes are for debugging it; its
    // warnings and errors are kept.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_level},openraft=warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_target(false)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .init();
}

/// Prints `error: <message>` and picks the exit status.
fn exit_with(e: &anyhow::Error) -> ExitCode {
    // A reader that went away (`aqueduct wal export DIR | head`) is not a failure.
    if e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    }) {
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {}", error_message(e));
    if e.downcast_ref::<wal::Damaged>().is_some() {
        ExitCode::from(wal::EXIT_DAMAGED)
    } else {
        ExitCode::FAILURE
    }
}

/// Joins the error's chain, skipping causes already quoted by the message
/// before them (the log's errors embed their source in their own text).
fn error_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg
}
