//! The operator's commands on a subscription, run on what the sink stores:
//! `aqueduct subscribe status` and `aqueduct subscribe dead-letters`.
//! Dead letters are changed with the agent stopped: a running agent keeps
//! its own list and would not see the change until it restarts.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use aqueduct_mirror::http;
use aqueduct_sinks::SinkSpec;
use aqueduct_subscribe::{Item, PositionMode, Record, Sink};
use clap::{Args, Subcommand};

/// Which subscription, in which sink.
#[derive(Debug, Args)]
pub struct SinkArgs {
    /// The subscriber's name.
    #[arg(long)]
    name: String,
    /// The sink, as given to `aqueduct subscribe --into`.
    #[arg(long)]
    into: String,
    /// The state directory of a sink that keeps its position in files.
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    /// The server's HTTP address, to show how far behind the subscriber is.
    #[arg(long)]
    from: Option<String>,
    /// Bearer token for the server's HTTP API.
    #[arg(long, env = "AQUEDUCT_TOKEN")]
    token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DeadLetterCommand {
    /// The transactions the sink refused, with their attempts.
    List(SinkArgs),
    /// Try one again: the agent applies it when it next runs.
    Retry {
        /// The transaction's LSN.
        lsn: u64,
        #[command(flatten)]
        sink: SinkArgs,
    },
    /// Count one as applied without its rows.
    Skip {
        /// The transaction's LSN.
        lsn: u64,
        #[command(flatten)]
        sink: SinkArgs,
    },
}

fn open(a: &SinkArgs) -> Result<Box<dyn Sink + Send>> {
    let spec: SinkSpec = a.into.parse().map_err(|e| anyhow!("--into: {e}"))?;
    spec.open(&a.name, a.state_dir.as_deref())
        .map_err(|e| anyhow!("opening the sink {spec}: {e}"))
}

/// The server's last committed LSN.
fn head(from: &str, token: Option<&str>) -> Result<u64> {
    let addr = from.trim_start_matches("http://").trim_end_matches('/');
    let r = http::request(addr, "GET", "/health", token, None, Duration::from_secs(10))?;
    let mut body = r.body;
    let bytes = body.read_to_end(1 << 20)?;
    let j: serde_json::Value = serde_json::from_slice(&bytes)?;
    j.get("lsn")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| anyhow!("the server's health page has no lsn"))
}

pub fn status(a: &SinkArgs) -> Result<()> {
    let sink = open(a)?;
    let r = sink
        .resume()
        .map_err(|e| anyhow!("reading the sink's position: {e}"))?;
    println!("subscription {} in {}", a.name, a.into);
    if r.watermark == 0 {
        println!("state: not bootstrapped yet");
        return Ok(());
    }
    println!("applied: everything below LSN {}", r.watermark);
    let origin = sink
        .origin()
        .map_err(|e| anyhow!("reading the sink's origin: {e}"))?;
    if let Some(id) = &origin.server_id {
        println!("server id: {id}");
    }
    if let Some(s) = origin.boot_lsn {
        let sync = match origin.sync_lsn {
            _ if !origin.bootstrapping(r.watermark) => "in sync".to_string(),
            Some(h) => format!("bootstrapping: catching up to LSN {h}"),
            None => "bootstrapping: the stream has not started yet".to_string(),
        };
        println!("bootstrapped at LSN {s}: {sync}");
    }
    if !r.applied_above.is_empty() {
        println!(
            "applied above it: {} transactions (up to LSN {})",
            r.applied_above.len(),
            r.applied_above.iter().max().copied().unwrap_or(0)
        );
    }
    if let Some(s) = r.schema {
        println!("last schema change applied: LSN {}", s.lsn);
    }
    if let Some(from) = &a.from {
        let head = head(from, a.token.as_deref())?;
        let lag = head.saturating_sub(r.watermark.saturating_sub(1));
        println!(
            "server at LSN {head}: {}",
            if lag == 0 {
                "in sync".to_string()
            } else {
                format!("{lag} LSNs behind")
            }
        );
    }
    if r.dead_letters.is_empty() {
        println!("dead letters: none");
    } else {
        println!("dead letters: {}", r.dead_letters.len());
        for (lsn, attempts) in &r.dead_letters {
            println!("  LSN {lsn}: {attempts} attempts");
        }
        println!(
            "(aqueduct subscribe dead-letters retry|skip LSN --name {} --into ...)",
            a.name
        );
    }
    Ok(())
}

pub fn dead_letters(c: DeadLetterCommand) -> Result<()> {
    match c {
        DeadLetterCommand::List(a) => {
            let r = open(&a)?
                .resume()
                .map_err(|e| anyhow!("reading the sink: {e}"))?;
            for (lsn, attempts) in &r.dead_letters {
                println!("{lsn}\t{attempts}");
            }
            Ok(())
        }
        DeadLetterCommand::Retry { lsn, sink } => {
            let mut s = open(&sink)?;
            known(s.as_ref(), lsn)?;
            s.clear_dead_letter(lsn)
                .map_err(|e| anyhow!("clearing the dead letter: {e}"))?;
            println!("LSN {lsn} will be applied again when the agent next runs");
            Ok(())
        }
        DeadLetterCommand::Skip { lsn, sink } => {
            let mut s = open(&sink)?;
            known(s.as_ref(), lsn)?;
            match s.position_mode() {
                PositionMode::InApply => s.apply(
                    &[Item::Skip { lsn }],
                    &Record {
                        applied: vec![lsn],
                        ..Record::default()
                    },
                ),
                PositionMode::Separate => {
                    let r = s.resume().map_err(|e| anyhow!("{e}"))?;
                    let mut above = r.applied_above.clone();
                    above.push(lsn);
                    s.store_position(r.watermark, &above, r.schema)
                }
            }
            .map_err(|e| anyhow!("recording LSN {lsn} as applied: {e}"))?;
            s.clear_dead_letter(lsn)
                .map_err(|e| anyhow!("clearing the dead letter: {e}"))?;
            println!("LSN {lsn} is counted as applied, without its rows");
            Ok(())
        }
    }
}

/// Refuses an LSN that is not a dead letter of the subscription.
fn known(s: &dyn Sink, lsn: u64) -> Result<()> {
    let r = s.resume().map_err(|e| anyhow!("reading the sink: {e}"))?;
    if !r.dead_letters.iter().any(|(l, _)| *l == lsn) {
        bail!("LSN {lsn} is not a dead letter of this subscription");
    }
    Ok(())
}
