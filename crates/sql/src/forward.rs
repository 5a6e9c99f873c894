//! Writes on any member of a Raft group (`docs/replication.md`, "Writes
//! on any member"): a member that does not lead sends each statement that
//! writes to the leader, which runs it in a session of the client's role
//! and answers with its outcome.
//!
//! - Outside a transaction block the statement runs there alone
//!   (autocommit), and the client gets the leader's outcome.
//! - A transaction block moves to the leader at its first write: the
//!   leader begins a block at the same isolation level, runs again the
//!   statements the block ran here, then the write. The block moves only
//!   if every statement run again there gives what it gave here (else it
//!   is rolled back there and the client gets 40001), so what the client
//!   saw is what the leader's transaction saw. From then on every
//!   statement of the block, to its `COMMIT` or `ROLLBACK`, runs on the
//!   leader, in a session the leader holds for it (`ForwardedBlocks`).
//!
//! The request and its reply are JSON (`POST /v1/cluster/forward`, member
//! to member, with the group's token). Values travel in the row codec of
//! `aqueduct_values` (hex), so every type arrives as it left.

use std::collections::BTreeMap;
use std::time::Duration;

use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_plan::plan::{Column, Outcome};
use aqueduct_values::{DataType, Value};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::roles::Principal;
use crate::txn_status::TxnStatus;

/// How long a member waits for the leader's answer to a forwarded
/// statement (the leader's own statement timeout bounds the statement).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest request or reply between members (a moved block's
/// statements, a statement's returned rows).
pub const MAX_FORWARD_BYTES: usize = 64 << 20;
/// How long a session that ended waits for the leader to roll back the
/// block it held there (the leader's idle expiry does it otherwise).
pub const ABANDON_TIMEOUT: Duration = Duration::from_secs(5);
/// Transaction blocks a leader holds for other members at once.
pub const MAX_FORWARDED_BLOCKS: usize = 256;
/// A held block no statement reached for this long is rolled back.
pub const FORWARDED_BLOCK_IDLE: Duration = Duration::from_secs(60);
/// Statements of a block this member records to move the block to the
/// leader at its first write; a block that ran more stays here, and its
/// write is refused (25006) with a hint to begin it on the leader.
pub const MAX_MOVABLE_STATEMENTS: usize = 1_000;
/// Rows those recorded statements may have returned, together.
pub const MAX_MOVABLE_ROWS: usize = 100_000;

/// Where a member sends the writes it may not take.
pub trait GroupLink: Send + Sync {
    /// `None` when this member takes writes itself; else the leader's
    /// HTTP address, or why no leader is known.
    fn leader(&self) -> Option<Result<String, SqlError>>;
    /// Sends `body` (a [`ForwardRequest`]) to the member at `to` and
    /// returns its answer (a [`ForwardReply`]).
    fn send(&self, to: &str, body: &[u8], timeout: Duration) -> Result<Vec<u8>, SqlError>;
    /// Changes the group's membership (on the leader; waits until the
    /// group committed the change).
    fn change(&self, change: &MembershipChange) -> Result<(), String>;
    /// Every member this one knows of, each as it says it stands (asked
    /// over the network, boundedly).
    fn members(&self) -> Vec<MemberState>;
}

/// `ALTER CLUSTER ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// Adds a member at an HTTP address: a learner that copies the log,
    /// then a voter unless `voter` is false.
    Add {
        id: u64,
        addr: String,
        voter: bool,
    },
    Remove {
        id: u64,
    },
    /// Hands the leadership to member `id`.
    Transfer {
        id: u64,
    },
}

/// A member of the group, as `SHOW CLUSTER` lists it.
#[derive(Clone, Debug, Default)]
pub struct MemberState {
    pub id: u64,
    pub addr: String,
    pub voter: bool,
    /// leader, follower, candidate, learner (or unreachable).
    pub role: String,
    pub term: Option<u64>,
    pub commit_lsn: Option<u64>,
    pub applied_lsn: Option<u64>,
    /// Records its log holds past what the group committed.
    pub lag: Option<u64>,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// One statement to run on the leader.
#[derive(Clone, Debug, PartialEq)]
pub struct Forwarded {
    pub sql: String,
    pub params: Vec<Value>,
}

/// A forwarded request: statements run in order, stopping at the first
/// error, in the block `block` holds on the leader or in a new session.
#[derive(Clone, Debug)]
pub struct ForwardRequest {
    pub block: Option<u64>,
    pub principal: Principal,
    /// The session's settings that differ from a new session's (applied
    /// to a new session only).
    pub settings: BTreeMap<String, String>,
    pub statements: Vec<Forwarded>,
}

/// The leader's answer.
#[derive(Clone, Debug)]
pub struct ForwardReply {
    /// The block the leader holds for the session, while one is open.
    pub block: Option<u64>,
    pub status: TxnStatus,
    /// One per statement run (the last an error when one failed).
    pub results: Vec<Result<Outcome, SqlError>>,
    /// The LSN of the session's last commit there (0 if none).
    pub last_lsn: Lsn,
}

#[derive(Serialize, Deserialize)]
struct RequestJson {
    block: Option<u64>,
    role: String,
    bootstrap: bool,
    settings: BTreeMap<String, String>,
    statements: Vec<StatementJson>,
}

#[derive(Serialize, Deserialize)]
struct StatementJson {
    sql: String,
    /// Each parameter in the value codec, hex.
    params: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct ReplyJson {
    block: Option<u64>,
    status: String,
    results: Vec<serde_json::Value>,
    last_lsn: Lsn,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd-length hex".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn encode_value(v: &Value) -> String {
    let mut out = Vec::new();
    aqueduct_values::encode_value(v, &mut out);
    hex(&out)
}

fn decode_value(s: &str) -> Result<Value, String> {
    let bytes = unhex(s)?;
    let (v, used) = aqueduct_values::decode_value(&bytes).map_err(|e| e.to_string())?;
    if used != bytes.len() {
        return Err("trailing bytes after a value".into());
    }
    Ok(v)
}

fn bad(why: impl std::fmt::Display) -> SqlError {
    SqlError::new(
        "08P01",
        format!("a forwarded statement's message is malformed: {why}"),
    )
}

impl ForwardRequest {
    pub fn encode(&self) -> Vec<u8> {
        let j = RequestJson {
            block: self.block,
            role: self.principal.name.clone(),
            bootstrap: self.principal.bootstrap,
            settings: self.settings.clone(),
            statements: self
                .statements
                .iter()
                .map(|s| StatementJson {
                    sql: s.sql.clone(),
                    params: s.params.iter().map(encode_value).collect(),
                })
                .collect(),
        };
        serde_json::to_vec(&j).expect("a request encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<ForwardRequest, SqlError> {
        let j: RequestJson = serde_json::from_slice(bytes).map_err(bad)?;
        let statements = j
            .statements
            .into_iter()
            .map(|s| {
                Ok(Forwarded {
                    sql: s.sql,
                    params: s
                        .params
                        .iter()
                        .map(|p| decode_value(p))
                        .collect::<Result<_, _>>()?,
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(bad)?;
        Ok(ForwardRequest {
            block: j.block,
            principal: Principal {
                name: j.role,
                bootstrap: j.bootstrap,
            },
            settings: j.settings,
            statements,
        })
    }
}

fn status_text(s: TxnStatus) -> &'static str {
    match s {
        TxnStatus::Idle => "idle",
        TxnStatus::InBlock => "block",
        TxnStatus::Failed => "failed",
    }
}

fn outcome_json(r: &Result<Outcome, SqlError>) -> serde_json::Value {
    match r {
        Err(e) => json!({"error": {
            "code": e.code, "message": e.message, "detail": e.detail,
            "hint": e.hint, "context": e.context,
        }}),
        Ok(Outcome::Rows { columns, rows, tag }) => json!({
            "tag": tag,
            "columns": columns.iter().map(|c| json!({
                "name": c.name, "type": c.ty.to_string(),
                "table_id": c.table_id, "column_id": c.column_id,
            })).collect::<Vec<_>>(),
            "rows": rows.iter().map(|r| {
                let mut out = Vec::new();
                aqueduct_values::encode_row(r, &mut out);
                hex(&out)
            }).collect::<Vec<_>>(),
        }),
        Ok(Outcome::Command { tag }) => json!({"tag": tag}),
        Ok(Outcome::Empty) => json!({"empty": true}),
        Ok(Outcome::CopyIn { .. } | Outcome::CopyOut { .. }) => outcome_json(&Err(copy_refused())),
    }
}

/// COPY's data travels in the PostgreSQL protocol's own messages, which
/// a forwarded statement does not carry.
pub fn copy_refused() -> SqlError {
    SqlError::new(
        "25006",
        "COPY FROM STDIN cannot run on a member that does not lead the group",
    )
    .with_hint("run the COPY on the leader; `aqueduct cluster status` names it")
}

fn outcome_of(
    j: &serde_json::Value,
    catalog: &aqueduct_tables::Catalog,
) -> Result<Result<Outcome, SqlError>, String> {
    let text = |k: &str| j[k].as_str().map(str::to_string);
    if let Some(e) = j.get("error") {
        let s = |k: &str| e[k].as_str().map(str::to_string);
        let mut err = SqlError::new(
            aqueduct_expr::static_code(e["code"].as_str().unwrap_or("XX000")),
            s("message").unwrap_or_default(),
        );
        err.detail = s("detail");
        err.hint = s("hint");
        err.context = s("context");
        return Ok(Err(err));
    }
    if j.get("empty").is_some() {
        return Ok(Ok(Outcome::Empty));
    }
    let tag = text("tag").ok_or("an outcome without a tag")?;
    let Some(columns) = j.get("columns").and_then(|c| c.as_array()) else {
        return Ok(Ok(Outcome::Command { tag }));
    };
    let columns = columns
        .iter()
        .map(|c| {
            let ty = c["type"].as_str().unwrap_or("text");
            // An enum type is named by its name, found in the catalog
            // (the same on every member).
            let ty = aqueduct_tables::parse_type(ty)
                .ok()
                .or_else(|| catalog.enum_type(ty).map(|t| DataType::Enum(t.clone())))
                .unwrap_or(DataType::Text);
            Column {
                name: c["name"].as_str().unwrap_or("?column?").to_string(),
                ty,
                table_id: c["table_id"].as_u64().unwrap_or(0),
                column_id: c["column_id"].as_i64().unwrap_or(0) as i16,
            }
        })
        .collect();
    let rows = j["rows"]
        .as_array()
        .ok_or("rows without rows")?
        .iter()
        .map(|r| {
            let bytes = unhex(r.as_str().unwrap_or_default())?;
            aqueduct_values::decode_row(&bytes).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Ok(Outcome::Rows { columns, rows, tag }))
}

impl ForwardReply {
    pub fn encode(&self) -> Vec<u8> {
        let j = ReplyJson {
            block: self.block,
            status: status_text(self.status).into(),
            results: self.results.iter().map(outcome_json).collect(),
            last_lsn: self.last_lsn,
        };
        serde_json::to_vec(&j).expect("a reply encodes")
    }

    /// Decodes a reply; `catalog` resolves enum types by name.
    pub fn decode(
        bytes: &[u8],
        catalog: &aqueduct_tables::Catalog,
    ) -> Result<ForwardReply, SqlError> {
        let j: ReplyJson = serde_json::from_slice(bytes).map_err(bad)?;
        let status = match j.status.as_str() {
            "idle" => TxnStatus::Idle,
            "block" => TxnStatus::InBlock,
            "failed" => TxnStatus::Failed,
            other => return Err(bad(format!("status {other:?}"))),
        };
        let results = j
            .results
            .iter()
            .map(|r| outcome_of(r, catalog))
            .collect::<Result<Vec<_>, String>>()
            .map_err(bad)?;
        Ok(ForwardReply {
            block: j.block,
            status,
            results,
            last_lsn: j.last_lsn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let request = ForwardRequest {
            block: Some(7),
            principal: Principal {
                name: "app".into(),
                bootstrap: false,
            },
            settings: [("search_path".to_string(), "app".to_string())].into(),
            statements: vec![Forwarded {
                sql: "INSERT INTO t VALUES ($1, $2) RETURNING *".into(),
                params: vec![Value::Int(3), Value::Text("x'y".into())],
            }],
        };
        let back = ForwardRequest::decode(&request.encode()).unwrap();
        assert_eq!(back.statements, request.statements);
        assert_eq!(back.block, Some(7));
        assert_eq!(back.principal.name, "app");
        let reply = ForwardReply {
            block: None,
            status: TxnStatus::Failed,
            results: vec![
                Ok(Outcome::Rows {
                    columns: vec![Column::computed("a", DataType::Int8)],
                    rows: vec![vec![Value::Int(1)], vec![Value::Null]],
                    tag: "INSERT 0 2".into(),
                }),
                Ok(Outcome::Command {
                    tag: "UPDATE 1".into(),
                }),
                Err(SqlError::new("23505", "duplicate").with_hint("h")),
            ],
            last_lsn: 42,
        };
        let back = ForwardReply::decode(&reply.encode(), &Default::default()).unwrap();
        assert_eq!(back.status, TxnStatus::Failed);
        assert_eq!(back.last_lsn, 42);
        match &back.results[0] {
            Ok(Outcome::Rows { columns, rows, tag }) => {
                assert_eq!(columns[0].ty, DataType::Int8);
                assert_eq!(rows, &vec![vec![Value::Int(1)], vec![Value::Null]]);
                assert_eq!(tag, "INSERT 0 2");
            }
            other => panic!("{other:?}"),
        }
        let e = back.results[2].as_ref().unwrap_err();
        assert_eq!((e.code, e.hint.as_deref()), ("23505", Some("h")));
    }
}
