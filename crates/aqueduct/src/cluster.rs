//! `aqueduct cluster status --node HOST:PORT ...`: where each server is in
//! replication (`docs/replication.md`), from its `GET /v1/replication`:
//! its role, term (in a Raft group), committed and applied LSNs, and for a
//! follower the servers it follows, its lag and its state.
//!
//! `aqueduct cluster add|remove|transfer-leader --node HOST:PORT ...`:
//! membership changes of a Raft group, sent to its leader (found through
//! `--node`, any member) or, for a transfer, to the member taking over.

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
    /// Adds a member to a Raft group: it copies the log as a learner, then
    /// votes (start it first with --node-id ID --cluster ID=ADDR --join).
    Add(AddArgs),
    /// Removes a member from a Raft group.
    Remove(MemberArgs),
    /// Hands a Raft group's leadership to a member (it calls an election,
    /// which it wins when its log is up to date).
    TransferLeader(MemberArgs),
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Any member's HTTP address (host:port)
    #[arg(long)]
    node: String,
    /// The new member's id
    #[arg(long)]
    id: u64,
    /// The new member's HTTP address (host:port), as the others reach it
    #[arg(long)]
    addr: String,
    /// Keep it a learner: it copies the log and serves reads, but does not
    /// vote
    #[arg(long)]
    learner: bool,
    /// A bearer token for the members' HTTP API
    #[arg(long, env = "AQUEDUCT_TOKEN")]
    token: Option<String>,
}

#[derive(Debug, Args)]
pub struct MemberArgs {
    /// Any member's HTTP address (host:port)
    #[arg(long)]
    node: String,
    /// The member's id
    #[arg(long)]
    id: u64,
    /// A bearer token for the members' HTTP API
    #[arg(long, env = "AQUEDUCT_TOKEN")]
    token: Option<String>,
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

/// How long a membership change may take (a new member copies the log
/// before it votes).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(600);

pub fn run(cmd: ClusterCommand) -> Result<()> {
    match cmd {
        ClusterCommand::Status(args) => status(&args),
        ClusterCommand::Add(args) => {
            let leader = leader_of(&args.node, args.token.as_deref())?;
            let body = serde_json::json!({
                "id": args.id, "addr": args.addr, "voter": !args.learner,
            })
            .to_string();
            call(
                &leader,
                "POST",
                "/v1/cluster/members",
                args.token.as_deref(),
                Some(&body),
            )
            .map_err(anyhow::Error::msg)?;
            eprintln!(
                "member {} at {} added as a {}",
                args.id,
                args.addr,
                if args.learner { "learner" } else { "voter" }
            );
            Ok(())
        }
        ClusterCommand::Remove(args) => {
            let leader = leader_of(&args.node, args.token.as_deref())?;
            let path = format!("/v1/cluster/members/{}", args.id);
            call(&leader, "DELETE", &path, args.token.as_deref(), None)
                .map_err(anyhow::Error::msg)?;
            eprintln!("member {} removed", args.id);
            Ok(())
        }
        ClusterCommand::TransferLeader(args) => transfer(&args),
    }
}

/// `method path` on `node`, its JSON answer or the error it gave.
fn call(
    node: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Result<Json, String> {
    let timeout = if method == "GET" {
        NODE_TIMEOUT
    } else {
        CHANGE_TIMEOUT
    };
    let mut r = http::request(node, method, path, token, body.map(str::as_bytes), timeout)
        .map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(http::error_of(r.status, &mut r.body).to_string());
    }
    let body = r.body.read_to_end(1 << 20).map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))
}

fn ask(node: &str, token: Option<&str>) -> Result<Json, String> {
    call(node, "GET", "/v1/replication", token, None)
}

/// The HTTP address of member `id`, from `status` (a member's view).
fn addr_of(status: &Json, id: u64) -> Option<String> {
    status["members"]
        .as_array()?
        .iter()
        .find(|m| m["id"].as_u64() == Some(id))?["addr"]
        .as_str()
        .map(str::to_string)
}

/// The leader's HTTP address, as `node` knows it.
fn leader_of(node: &str, token: Option<&str>) -> Result<String> {
    let status = call(node, "GET", "/v1/cluster", token, None).map_err(anyhow::Error::msg)?;
    let Some(id) = status["leader"].as_u64() else {
        anyhow::bail!("{node} knows no leader now (an election is under way); try again");
    };
    if status["node_id"].as_u64() == Some(id) {
        return Ok(node.to_string());
    }
    addr_of(&status, id)
        .ok_or_else(|| anyhow::anyhow!("{node} names leader {id} without an address"))
}

fn transfer(args: &MemberArgs) -> Result<()> {
    let token = args.token.as_deref();
    let leader = leader_of(&args.node, token)?;
    let body = serde_json::json!({ "id": args.id }).to_string();
    let now = call(&leader, "POST", "/v1/cluster/transfer", token, Some(&body))
        .map_err(anyhow::Error::msg)?;
    eprintln!("member {} leads the group (term {})", args.id, now["term"]);
    Ok(())
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
            "{:<22} {:<9} {:>6} {:>12} {:>12} {:>10}  {:<10} follows",
            "node", "role", "term", "committed", "applied", "lag", "state"
        );
        for (node, a) in &answers {
            match a {
                Ok(j) => {
                    let num = |k: &str| j[k].as_u64().map_or("-".to_string(), |v| v.to_string());
                    let follows = match j["leader"].as_u64() {
                        // A member of a Raft group follows its leader.
                        Some(l) if j["role"] != "leader" => format!("leader {l}"),
                        _ => j["follows"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|m| m.as_str())
                                    .collect::<Vec<_>>()
                                    .join(",")
                            })
                            .unwrap_or_default(),
                    };
                    println!(
                        "{:<22} {:<9} {:>6} {:>12} {:>12} {:>10}  {:<10} {}",
                        node,
                        j["role"].as_str().unwrap_or("?"),
                        num("term"),
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
