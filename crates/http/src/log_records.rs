//! The log's records for followers (`docs/replication.md`):
//!
//! - `GET /v1/log?from_lsn=N[&max_records=M][&wait_ms=W]`: whole batches of
//!   committed records from LSN `N` (a batch boundary), about `M` records
//!   at most, in the wire layout of `aqueduct_log::wire`. With nothing
//!   committed past `N - 1` it waits up to `W` ms (at most
//!   [`MAX_LOG_WAIT`]) for a commit, then answers with no record. The
//!   headers say how far this server's log goes (`Aqueduct-Log-Committed`)
//!   and from where it holds every record (`Aqueduct-Log-Exact-From`).
//!   410 (SQLSTATE 55000) when compaction dropped records at or after `N`;
//!   409 when `N` is past the end of this log. Superusers only: the log
//!   holds every table.
//! - `GET /v1/log/committed[?hops=H]`: `{"committed": LSN}`, the last LSN
//!   committed by the log this server holds: its own, or on a follower the
//!   one the servers it follows report (asked now, `H + 1` hops on, at most
//!   [`MAX_COMMITTED_HOPS`]), which is what a linearizable read on a
//!   follower waits for.
//! - `GET /v1/replication`: this server's place in replication, as JSON:
//!   `role` (`primary`: it takes its own writes; `follower`), its
//!   committed and applied LSNs and exact point, and on a follower the
//!   servers it follows, how far they are, its lag and state.
//! - `...&bootstrap=ID`: a new follower copies the log as compaction left
//!   it, from LSN 1: the records below this log's exact point come with
//!   gaps, and compaction changes nothing at or above the follower's
//!   position while bootstrap `ID` goes on (a hold, dropped once a
//!   response finds no record past the follower — it reached the end — or
//!   after [`BOOTSTRAP_IDLE`] without a request).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use aqueduct_log::wire;
use aqueduct_sql::SqlError;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::{error_response, AppState};

/// Longest a request for records waits for a commit.
pub const MAX_LOG_WAIT: Duration = Duration::from_secs(10);
/// A bootstrap that sent no request for this long loses its hold (the
/// follower must start over).
pub const BOOTSTRAP_IDLE: Duration = Duration::from_secs(60);
/// Bootstraps held at once; more are refused (503).
pub const MAX_BOOTSTRAPS: usize = 16;
/// Followers a commit-LSN question may pass through (a chain of
/// followers; more is taken for a loop of them).
pub const MAX_COMMITTED_HOPS: u32 = 8;
/// How long a follower waits for the servers it follows to say their
/// commit LSN.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(5);
/// Records a response carries when the request does not say.
const DEFAULT_LOG_RECORDS: usize = 4096;

/// The response headers.
pub const COMMITTED_HEADER: &str = "aqueduct-log-committed";
pub const EXACT_FROM_HEADER: &str = "aqueduct-log-exact-from";

#[derive(Deserialize)]
pub(crate) struct LogQuery {
    from_lsn: u64,
    max_records: Option<usize>,
    wait_ms: Option<u64>,
    bootstrap: Option<String>,
}

/// The bootstraps going on: their hold's name and last request.
pub(crate) type BootstrapHolds = Arc<Mutex<HashMap<String, Instant>>>;

fn hold_name(id: &str) -> String {
    format!("follower-bootstrap:{id}")
}

/// Drops the holds of bootstraps that sent no request for
/// [`BOOTSTRAP_IDLE`] (their follower went away); run now and then by the
/// server, so a hold never outlives its follower for long.
pub(crate) fn sweep_bootstraps(holds: &BootstrapHolds, log: &aqueduct_log::Log) {
    let now = Instant::now();
    let gone: Vec<String> = {
        let mut held = holds.lock();
        let gone = held
            .iter()
            .filter(|(_, seen)| now.duration_since(**seen) >= BOOTSTRAP_IDLE)
            .map(|(id, _)| id.clone())
            .collect::<Vec<_>>();
        for id in &gone {
            held.remove(id);
        }
        gone
    };
    for id in gone {
        let _ = log.set_hold(&hold_name(&id), None);
    }
}

#[derive(Deserialize)]
pub(crate) struct CommittedQuery {
    hops: Option<u32>,
}

pub(crate) async fn committed(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<CommittedQuery>,
) -> Response {
    if let Err(r) = s.auth.principal(&s.engine, &headers) {
        return *r;
    }
    let hops = q.hops.unwrap_or(0);
    if hops > MAX_COMMITTED_HOPS {
        return error_response(
            StatusCode::LOOP_DETECTED,
            &SqlError::new(
                "55000",
                format!(
                    "the commit LSN was asked through more than {MAX_COMMITTED_HOPS} followers"
                ),
            )
            .with_hint("check the --follow settings: followers that follow each other form a loop"),
        );
    }
    let engine = s.engine.clone();
    let answer = tokio::task::spawn_blocking(move || match engine.commit_source() {
        None => Ok(engine.database().committed_lsn()),
        Some(source) => source.committed_lsn_via(hops + 1, COMMITTED_TIMEOUT),
    })
    .await;
    match answer {
        Ok(Ok(lsn)) => axum::Json(serde_json::json!({ "committed": lsn })).into_response(),
        Ok(Err(why)) => error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &SqlError::new(
                "55000",
                format!("the servers this follower follows did not say their commit LSN: {why}"),
            ),
        ),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &SqlError::new("XX000", format!("asking the commit LSN: {e}")),
        ),
    }
}

pub(crate) async fn replication(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = s.auth.principal(&s.engine, &headers) {
        return *r;
    }
    let db = s.engine.database();
    let log = db.log();
    if let Some(member) = &s.cluster {
        // A member of a Raft group: its role in the group, and what the
        // group committed as it knows.
        let mut body = member.status();
        body["committed_lsn"] = body["commit_lsn"].clone();
        body["lag_records"] = body["lag"].clone();
        body["exact_from"] = serde_json::json!(log.exact_from());
        return axum::Json(body).into_response();
    }
    let mut body = serde_json::json!({
        "role": "primary",
        "committed_lsn": log.committed_lsn(),
        "applied_lsn": db.applied_lsn(),
        "exact_from": log.exact_from(),
    });
    if let Some(status) = &s.replication {
        body["role"] = "follower".into();
        if let (Some(out), serde_json::Value::Object(more)) = (body.as_object_mut(), status()) {
            out.extend(more);
        }
    }
    axum::Json(body).into_response()
}

pub(crate) async fn records(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<LogQuery>,
) -> Response {
    let principal = match s.auth.principal(&s.engine, &headers) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    if !principal.is_superuser(&s.engine.database().read()) {
        return error_response(
            StatusCode::FORBIDDEN,
            &SqlError::new("42501", "reading the log requires a superuser")
                .with_hint("follow with a token that maps to a superuser"),
        );
    }
    let from = q.from_lsn.max(1);
    let max = q.max_records.unwrap_or(DEFAULT_LOG_RECORDS);
    let wait = Duration::from_millis(q.wait_ms.unwrap_or(0)).min(MAX_LOG_WAIT);
    if let Some(id) = &q.bootstrap {
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return error_response(
                StatusCode::BAD_REQUEST,
                &SqlError::new(
                    "22023",
                    "bootstrap takes an id of 1 to 64 letters and digits",
                ),
            );
        }
    }
    let engine = s.engine.clone();
    let holds = s.follower_bootstraps.clone();
    let read = tokio::task::spawn_blocking(move || {
        let log = engine.database().log();
        let next = log.next_lsn();
        // The bootstrap's hold, moved to where the follower is now (set
        // before the exact point is read, so no compaction pass slips in).
        let bootstrapping = match &q.bootstrap {
            None => false,
            Some(id) => {
                let mut held = holds.lock();
                let known = held.contains_key(id);
                if !known && from != 1 {
                    false
                } else if !known && held.len() >= MAX_BOOTSTRAPS {
                    return Err((
                        StatusCode::SERVICE_UNAVAILABLE,
                        SqlError::new(
                            "53300",
                            format!("too many followers bootstrapping (at most {MAX_BOOTSTRAPS} at once)"),
                        )
                        .with_hint("retry later"),
                    ));
                } else {
                    held.insert(id.clone(), Instant::now());
                    drop(held);
                    log.hold_as_compacted(&hold_name(id), from);
                    true
                }
            }
        };
        let exact_from = log.exact_from();
        if from < exact_from && !bootstrapping {            return Err((
                StatusCode::GONE,
                SqlError::new(
                    "55000",
                    format!(
                        "records from LSN {from} were compacted away here (this server holds every record from LSN {exact_from})"
                    ),
                )
                .with_hint("follow another member that still holds them, or start the follower anew from a snapshot"),
            ));
        }
        if from > next {
            return Err((
                StatusCode::CONFLICT,
                SqlError::new(
                    "55000",
                    format!(
                        "LSN {from} is past the end of this server's log (its next LSN is {next}): the follower holds records this log never had"
                    ),
                )
                .with_hint("a follower follows one log: give it the members of the cluster it was made from, or start it anew"),
            ));
        }
        let records = wire::read_batches(log, from, max, wait).map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                SqlError::new("58030", format!("reading the log from LSN {from}: {e}")),
            )
        })?;
        if records.is_empty() {
            // At the end of the log: a bootstrap is over, its hold goes.
            if let Some(id) = q.bootstrap.as_ref().filter(|_| bootstrapping) {
                holds.lock().remove(id);
                let _ = log.set_hold(&hold_name(id), None);
            }
        }
        // On a member of a Raft group, only what the group committed.
        let committed = engine.database().committed_lsn();
        let mut records = records;
        records.retain(|r| r.lsn <= committed);
        let sender = wire::Sender {
            committed,
            exact_from,
        };
        Ok((wire::encode(&records, sender), sender.committed, exact_from))
    })
    .await;
    match read {
        Ok(Ok((body, committed, exact_from))) => (
            [
                (header::CONTENT_TYPE, wire::CONTENT_TYPE.to_string()),
                (
                    header::HeaderName::from_static(COMMITTED_HEADER),
                    committed.to_string(),
                ),
                (
                    header::HeaderName::from_static(EXACT_FROM_HEADER),
                    exact_from.to_string(),
                ),
            ],
            body,
        )
            .into_response(),
        Ok(Err((status, e))) => error_response(status, &e),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &SqlError::new("XX000", format!("reading the log: {e}")),
        ),
    }
}
