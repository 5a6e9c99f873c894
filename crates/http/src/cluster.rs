//! A Raft group's routes (`docs/replication.md`, "The Raft group"):
//!
//! - `POST /v1/raft/{append|vote|snapshot}`: Raft's messages between
//!   members (bincode bodies, `aqueduct_replicate::group::network`).
//! - `GET /v1/cluster`: this member's view of the group: role, term,
//!   leader, commit and applied LSNs, lag, members.
//! - `POST /v1/cluster/members` `{"id": N, "addr": "host:port", "voter":
//!   true}`: adds a member (as a learner that copies the log, then as a
//!   voter unless `voter` is false); on the leader.
//! - `DELETE /v1/cluster/members/{id}`: removes one; on the leader.
//! - `POST /v1/cluster/transfer` `{"id": N}`: on the leader, hands the
//!   leadership to member N (`aqueduct cluster transfer-leader`).
//! - `POST /v1/cluster/elect`: this member calls an election now (what
//!   the leader asks of the member it hands the leadership to).
//! - `POST /v1/cluster/forward`: statements a member that does not lead
//!   sends for its sessions (`aqueduct_sql::forward`).
//!
//! All need a superuser; on a server outside a group they answer 404.

use std::sync::Arc;

use aqueduct_expr::SqlError;
use aqueduct_replicate::group::network::{self, Call};
use aqueduct_replicate::group::Member;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::{error_response, AppState};

/// The member, once the caller is known to be a superuser.
fn member(s: &AppState, headers: &HeaderMap) -> Result<Arc<Member>, Box<Response>> {
    let principal = s.auth.principal(&s.engine, headers)?;
    if !principal.is_superuser(&s.engine.database().read()) {
        return Err(Box::new(error_response(
            StatusCode::FORBIDDEN,
            &SqlError::new("42501", "a Raft group's routes require a superuser")
                .with_hint("use --cluster-token with a token that maps to a superuser"),
        )));
    }
    s.cluster.clone().ok_or_else(|| {
        Box::new(error_response(
            StatusCode::NOT_FOUND,
            &SqlError::new("55000", "this server is not a member of a Raft group")
                .with_hint("start it with --node-id and --cluster"),
        ))
    })
}

fn failed(status: StatusCode, code: &'static str, why: String) -> Response {
    error_response(status, &SqlError::new(code, why))
}

pub(crate) async fn raft_message(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(call): Path<String>,
    body: Bytes,
) -> Response {
    let member = match member(&s, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let Some(call) = Call::parse(&call) else {
        return failed(
            StatusCode::NOT_FOUND,
            "42704",
            format!("no Raft message {call:?} (append, vote or snapshot)"),
        );
    };
    match network::answer(&member.raft, call, &body).await {
        Ok(bytes) => bytes.into_response(),
        Err(why) => failed(StatusCode::BAD_REQUEST, "08P01", why),
    }
}

/// `POST /v1/cluster/forward`: statements another member's session sent
/// because it does not lead (`aqueduct_sql::forward`).
pub(crate) async fn forward(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = member(&s, &headers) {
        return *r;
    }
    let (engine, blocks) = (s.engine.clone(), s.forwarded.clone());
    match tokio::task::spawn_blocking(move || blocks.answer(&engine, &body)).await {
        Ok(reply) => reply.into_response(),
        Err(e) => failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "XX000",
            format!("a forwarded statement failed: {e}"),
        ),
    }
}

pub(crate) async fn status(State(s): State<AppState>, headers: HeaderMap) -> Response {
    match member(&s, &headers) {
        Ok(m) => axum::Json(m.status()).into_response(),
        Err(r) => *r,
    }
}

#[derive(Deserialize)]
pub(crate) struct NewMember {
    id: u64,
    addr: String,
    voter: Option<bool>,
}

fn change_failed(why: String) -> Response {
    failed(StatusCode::CONFLICT, "55000", why)
}

pub(crate) async fn add(
    State(s): State<AppState>,
    headers: HeaderMap,
    axum::Json(m): axum::Json<NewMember>,
) -> Response {
    let member = match member(&s, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    if m.id == 0 {
        return failed(
            StatusCode::BAD_REQUEST,
            "22023",
            "member ids start at 1".into(),
        );
    }
    if let Err(e) = member.add_learner(m.id, m.addr.clone()).await {
        return change_failed(format!("adding member {} at {}: {e}", m.id, m.addr));
    }
    if m.voter.unwrap_or(true) {
        if let Err(e) = member.add_voter(m.id).await {
            return change_failed(format!("making member {} a voter: {e}", m.id));
        }
    }
    axum::Json(member.status()).into_response()
}

pub(crate) async fn remove(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    let member = match member(&s, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    match member.remove(id).await {
        Ok(()) => axum::Json(member.status()).into_response(),
        Err(e) => change_failed(format!("removing member {id}: {e}")),
    }
}

pub(crate) async fn elect(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let member = match member(&s, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    match member.raft.trigger().elect().await {
        Ok(()) => axum::Json(serde_json::json!({ "election": "called" })).into_response(),
        Err(e) => change_failed(format!("calling an election: {e}")),
    }
}

#[derive(Deserialize)]
pub(crate) struct Transfer {
    id: u64,
}

pub(crate) async fn transfer(
    State(s): State<AppState>,
    headers: HeaderMap,
    axum::Json(t): axum::Json<Transfer>,
) -> Response {
    let member = match member(&s, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    match member
        .transfer_to(t.id, aqueduct_replicate::group::TRANSFER_TIMEOUT)
        .await
    {
        Ok(()) => axum::Json(member.status()).into_response(),
        Err(e) => change_failed(format!("handing the leadership to member {}: {e}", t.id)),
    }
}
