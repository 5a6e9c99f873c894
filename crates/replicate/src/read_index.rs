//! A follower's read index: the last LSN committed by the servers it
//! follows, asked now (`GET /v1/log/committed`), which a linearizable read
//! on the follower waits for its tables to reach
//! (`docs/replication.md`, "Reads on a follower").

use std::time::{Duration, Instant};

use aqueduct_log::Lsn;
use aqueduct_mirror::http;

use crate::FollowConfig;

/// Asks the members of `config` in turn, from a different one each call,
/// until one says its commit LSN; `hops`: followers the question has
/// passed through already.
pub fn committed_lsn(
    config: &FollowConfig,
    start: usize,
    hops: u32,
    timeout: Duration,
) -> Result<Lsn, String> {
    let deadline = Instant::now() + timeout;
    let mut why = Vec::new();
    for i in 0..config.members.len() {
        let addr = &config.members[(start + i) % config.members.len()];
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            why.push(format!("{addr}: no time left"));
            break;
        }
        match ask(addr, config.token.as_deref(), hops, left) {
            Ok(lsn) => return Ok(lsn),
            Err(e) => why.push(format!("{addr}: {e}")),
        }
    }
    Err(why.join("; "))
}

fn ask(addr: &str, token: Option<&str>, hops: u32, timeout: Duration) -> Result<Lsn, String> {
    let path = format!("/v1/log/committed?hops={hops}");
    let mut r =
        http::request(addr, "GET", &path, token, None, timeout).map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(http::error_of(r.status, &mut r.body).to_string());
    }
    r.body
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let body = r.body.read_to_end(4096).map_err(|e| e.to_string())?;
    let json: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
    json["committed"]
        .as_u64()
        .ok_or_else(|| "no committed LSN in the answer".to_string())
}
