//! `aqueduct cluster status --node HOST:PORT ...`: where each server is in
//! replication (`docs/replication.md`), from its `GET /v1/replication`:
//! its role, committed and applied LSNs, and for a follower the servers it
//! follows, its lag and its state.

use std::time::Duration;

use anyhow::Result;
use aqueduct_mirror::http;
use clap::{Args, Subcommand};
use serde_json::Value as Json;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Each node's role, committed and applied LSNs, what it follows and
    /// its lag.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A node's HTTP address (host:port); repeat for each node
    #[arg(long = "node", required = true)]
    nodes: Vec<String>,
    /// A bearer token for the nodes' HTTP API
    #[arg(long, env = "AQUEDUCT_TOKEN")]
    token: Option<String>,
    /// Print the answers as JSON lines instead of a table
    #[arg(long)]
    json: bool,
}

/// How long one node may take to answer.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn run(cmd: ClusterCommand) -> Result<()> {
    match cmd {
        ClusterCommand::Status(args) => status(&args),
    }
}

fn ask(node: &str, token: Option<&str>) -> Result<Json, String> {
    let mut r = http::request(node, "GET", "/v1/replication", token, None, NODE_TIMEOUT)
        .map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(http::error_of(r.status, &mut r.body).to_string());
    }
    let body = r.body.read_to_end(1 << 20).map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))
}

fn status(args: &StatusArgs) -> Result<()> {
    let answers: Vec<(&String, Result<Json, String>)> = args
        .nodes
        .iter()
        .map(|n| (n, ask(n, args.token.as_deref())))
        .collect();
    if args.json {
        for (node, a) in &answers {
            let line = match a {
                Ok(j) => serde_json::json!({ "node": node, "status": j }),
                Err(e) => serde_json::json!({ "node": node, "error": e }),
            };
            println!("{line}");
        }
    } else {
        println!(
            "{:<22} {:<9} {:>12} {:>12} {:>10}  {:<10} follows",
            "node", "role", "committed", "applied", "lag", "state"
        );
        for (node, a) in &answers {
            match a {
                Ok(j) => {
                    let num = |k: &str| j[k].as_u64().map_or("-".to_string(), |v| v.to_string());
                    let follows = j["follows"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|m| m.as_str())
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_default();
                    println!(
                        "{:<22} {:<9} {:>12} {:>12} {:>10}  {:<10} {}",
                        node,
                        j["role"].as_str().unwrap_or("?"),
                        num("committed_lsn"),
                        num("applied_lsn"),
                        num("lag_records"),
                        j["state"].as_str().unwrap_or("serving"),
                        follows
                    );
                    if let Some(why) = j["stuck"].as_str() {
                        println!("{:<22} stuck: {why}", "");
                    }
                }
                Err(e) => println!("{node:<22} unreachable: {e}"),
            }
        }
    }
    if answers.iter().any(|(_, a)| a.is_err()) {
        anyhow::bail!("some nodes did not answer");
    }
    Ok(())
}
