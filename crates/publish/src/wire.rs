//! The lines of a publication stream (`docs/publications.md` §4): one JSON
//! object per line, each `{"v": 1, "type": ...}`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tracker::Deps;

/// The wire version this crate writes.
pub const WIRE_VERSION: u64 = 1;

/// Every wire version this crate reads.
pub const WIRE_VERSIONS_READ: &[u64] = &[1];

/// An LSN on the wire.
pub type Lsn = u64;

/// One line of a stream or of a bootstrap chunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireMessage {
    /// One frame of one source transaction.
    Txn(TxnMessage),
    /// A change to a published object's shape; a barrier.
    Schema(SchemaMessage),
    /// The first line of every stream.
    Epoch(EpochMessage),
    /// The stream passed everything up to `lsn` (transactions that
    /// published nothing).
    Progress(ProgressMessage),
    /// One row of a bootstrap chunk.
    Row(RowMessage),
    /// The end of a bootstrap chunk.
    ChunkEnd(ChunkEndMessage),
    /// The end of a bootstrap for message sinks: the snapshot's LSN.
    BootstrapEnd(BootstrapEndMessage),
    /// The server ends the stream.
    Error(ErrorMessage),
}

/// A `txn` line: one frame of a source transaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TxnMessage {
    /// The transaction's commit LSN; resume after it with `lsn + 1`.
    pub lsn: Lsn,
    /// The transaction's first LSN.
    pub first_lsn: Lsn,
    /// `"{server_id}:{lsn}"`, the idempotency key of message sinks.
    pub txid: String,
    /// RFC 3339 with microseconds.
    pub commit_time: String,
    /// The stream's epoch (§3.4).
    pub epoch: u64,
    /// Frame number within the transaction, from 0.
    pub frame: u32,
    /// Whether this is the transaction's last frame.
    pub last: bool,
    /// What the transaction waits for; only on frame 0, absent in weak mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deps: Option<Deps>,
    /// Sent on the transactions a subscriber receives after a bootstrap
    /// until it has caught up with the head of its first stream (§5.6).
    #[serde(default)]
    pub bootstrap: bool,
    /// The published changes of this frame.
    pub changes: Vec<Change>,
    /// External dependencies of a decorator's rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Vec<Origin>>,
}

/// An operation on a published row, after the row filter's transitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    /// A new row.
    Insert,
    /// A changed row.
    Update,
    /// A removed row.
    Delete,
}

/// One published row change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The object's published name.
    pub object: String,
    /// What happened to the row.
    pub op: ChangeOp,
    /// The key values in key-column order.
    pub key: Vec<Value>,
    /// Published attributes by published name; absent for a delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attrs: Option<Map<String, Value>>,
    /// The row version: this write's LSN.
    pub version: Lsn,
    /// The row's previous version; `null` for an insert.
    pub prev_version: Option<Lsn>,
}

/// An external dependency of a decorator's message (§8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The source server.
    pub server_id: String,
    /// The source transaction's LSN there.
    pub lsn: Lsn,
}

/// A `schema` line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemaMessage {
    /// The LSN of the schema change.
    pub lsn: Lsn,
    /// The stream's epoch.
    pub epoch: u64,
    /// The object's published name.
    pub object: String,
    /// What changed.
    pub change: SchemaChange,
}

/// A change to a published object's shape (§6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SchemaChange {
    /// A new attribute.
    AddAttribute {
        /// Published name.
        name: String,
        /// SQL type.
        #[serde(rename = "type")]
        ty: String,
        /// The value existing rows got, or `null` when rows follow as
        /// updates.
        #[serde(default)]
        existing: Value,
    },
    /// An attribute no longer published.
    DropAttribute {
        /// Published name.
        name: String,
    },
    /// A renamed attribute.
    RenameAttribute {
        /// Old name.
        from: String,
        /// New name.
        to: String,
    },
    /// An object added to the publication.
    AddObject {
        /// Published name.
        object: String,
        /// Its shape.
        schema: ObjectSchema,
    },
    /// An object dropped from the publication.
    DropObject {
        /// Published name.
        object: String,
    },
}

/// A published object's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectSchema {
    /// Its attributes.
    pub attributes: Vec<AttributeType>,
    /// Its key's attribute names.
    pub key: Vec<String>,
}

/// A published attribute and its SQL type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeType {
    /// Published name.
    pub name: String,
    /// SQL type.
    #[serde(rename = "type")]
    pub ty: String,
}

/// An `epoch` line, the first of every stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochMessage {
    /// The epoch the agent asked for.
    pub epoch: u64,
    /// Where the stream starts.
    pub from_lsn: Lsn,
    /// The server's id; a different one means another log.
    pub server_id: String,
    /// The publication's dependency space.
    pub dep_slots: u32,
    /// Each published object's shape as of `from_lsn`, by published name.
    /// Its attributes include every key column (a change always carries
    /// its key, whether or not the column list names the key's columns).
    #[serde(default)]
    pub objects: std::collections::BTreeMap<String, ObjectSchema>,
    /// On the streams of a subscriber just bootstrapped (§5.6): the head
    /// the server had when the first stream after the bootstrap opened.
    /// Transactions up to it carry `bootstrap: true`; the subscriber is
    /// in sync once it has applied past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_until: Option<Lsn>,
}

/// A `progress` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressMessage {
    /// Everything up to and including this LSN has been sent.
    pub lsn: Lsn,
}

/// A bootstrap `row` line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowMessage {
    /// The object's published name.
    pub object: String,
    /// The key values.
    pub key: Vec<Value>,
    /// Published attributes.
    pub attrs: Map<String, Value>,
    /// The row version.
    pub version: Lsn,
    /// Always true.
    #[serde(default)]
    pub bootstrap: bool,
}

/// A `chunk_end` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEndMessage {
    /// Chunk number.
    pub chunk: u32,
    /// Rows in it.
    pub rows: u64,
}

/// A `bootstrap_end` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapEndMessage {
    /// The snapshot's LSN `S`.
    pub lsn: Lsn,
}

/// An `error` line: the server stopped the stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// SQLSTATE-style code (`55000`: position refused, bootstrap again).
    pub code: String,
    /// Human-readable reason.
    pub message: String,
}

/// A line that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Not JSON, or not the shape of any message.
    Malformed(String),
    /// A `v` this reader does not know.
    UnknownVersion {
        /// The line's `v`, as written.
        found: String,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Malformed(m) => write!(f, "malformed stream line: {m}"),
            WireError::UnknownVersion { found } => {
                let known: Vec<String> = WIRE_VERSIONS_READ.iter().map(|v| v.to_string()).collect();
                write!(
                    f,
                    "unknown wire version {found}: this reader reads version {}",
                    known.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for WireError {}

/// Reads one line (without its newline).
pub fn parse_line(line: &str) -> Result<WireMessage, WireError> {
    let mut value: Value =
        serde_json::from_str(line).map_err(|e| WireError::Malformed(e.to_string()))?;
    let obj = value
        .as_object_mut()
        .ok_or_else(|| WireError::Malformed("not a JSON object".into()))?;
    match obj.remove("v") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|v| WIRE_VERSIONS_READ.contains(&v)) => {}
        Some(other) => {
            return Err(WireError::UnknownVersion {
                found: other.to_string(),
            })
        }
        None => return Err(WireError::Malformed("no \"v\" field".into())),
    }
    serde_json::from_value(value).map_err(|e| WireError::Malformed(e.to_string()))
}

#[derive(Serialize)]
struct Versioned<'a> {
    v: u64,
    #[serde(flatten)]
    msg: &'a WireMessage,
}

impl WireMessage {
    /// The message as one line (no newline), `v` and `type` first.
    pub fn to_line(&self) -> String {
        serde_json::to_string(&Versioned {
            v: WIRE_VERSION,
            msg: self,
        })
        .expect("wire messages always serialize")
    }

    /// The message's LSN where it has one.
    pub fn lsn(&self) -> Option<Lsn> {
        match self {
            WireMessage::Txn(t) => Some(t.lsn),
            WireMessage::Schema(s) => Some(s.lsn),
            WireMessage::Progress(p) => Some(p.lsn),
            WireMessage::BootstrapEnd(b) => Some(b.lsn),
            WireMessage::Row(r) => Some(r.version),
            WireMessage::Epoch(_) | WireMessage::ChunkEnd(_) | WireMessage::Error(_) => None,
        }
    }
}

/// The server's answer to a bootstrap request (§5.6), one JSON object:
/// the snapshot's LSN `S`, its id, the objects' shapes and the chunks to
/// fetch (`GET .../bootstrap/{boot_id}/chunks/{chunk}`, each `row` lines
/// and a `chunk_end` line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapAnswer {
    /// The snapshot's id, naming it in chunk requests.
    pub boot_id: String,
    /// The snapshot's LSN `S`.
    pub lsn: Lsn,
    /// The server's id.
    pub server_id: String,
    /// The publication's dependency space.
    pub dep_slots: u32,
    /// The shapes of the objects bootstrapped, by published name.
    pub objects: std::collections::BTreeMap<String, ObjectSchema>,
    /// The chunks, in order.
    pub chunks: Vec<ChunkInfo>,
}

/// One chunk of a bootstrap: a range of one object's keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkInfo {
    /// Its number, from 0.
    pub chunk: u32,
    /// The object's published name.
    pub object: String,
    /// The table rows in its range (those the row filter passes are sent).
    pub rows: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn samples() -> Vec<WireMessage> {
        vec![
            WireMessage::Txn(TxnMessage {
                lsn: 42,
                first_lsn: 40,
                txid: "srv1:42".into(),
                commit_time: "2025-01-02T03:04:05.123456Z".into(),
                epoch: 3,
                frame: 0,
                last: true,
                deps: Some(Deps {
                    w: vec![(1, 0), (7, 2)],
                    r: vec![(9, 1)],
                }),
                bootstrap: false,
                changes: vec![
                    Change {
                        object: "posts".into(),
                        op: ChangeOp::Insert,
                        key: vec![json!(1)],
                        attrs: Some(attrs(json!({"id": 1, "body": "helo"}))),
                        version: 42,
                        prev_version: None,
                    },
                    Change {
                        object: "comments".into(),
                        op: ChangeOp::Delete,
                        key: vec![json!(5), json!("x")],
                        attrs: None,
                        version: 42,
                        prev_version: Some(30),
                    },
                ],
                origin: Some(vec![Origin {
                    server_id: "other".into(),
                    lsn: 7,
                }]),
            }),
            WireMessage::Schema(SchemaMessage {
                lsn: 50,
                epoch: 3,
                object: "posts".into(),
                change: SchemaChange::AddAttribute {
                    name: "likes".into(),
                    ty: "bigint".into(),
                    existing: json!(0),
                },
            }),
            WireMessage::Schema(SchemaMessage {
                lsn: 51,
                epoch: 3,
                object: "posts".into(),
                change: SchemaChange::AddObject {
                    object: "likes".into(),
                    schema: ObjectSchema {
                        attributes: vec![AttributeType {
                            name: "id".into(),
                            ty: "bigint".into(),
                        }],
                        key: vec!["id".into()],
                    },
                },
            }),
            WireMessage::Schema(SchemaMessage {
                lsn: 52,
                epoch: 3,
                object: "posts".into(),
                change: SchemaChange::RenameAttribute {
                    from: "a".into(),
                    to: "b".into(),
                },
            }),
            WireMessage::Epoch(EpochMessage {
                epoch: 3,
                from_lsn: 40,
                server_id: "srv1".into(),
                dep_slots: 65_536,
                objects: Default::default(),
                bootstrap_until: None,
            }),
            WireMessage::Progress(ProgressMessage { lsn: 99 }),
            WireMessage::Row(RowMessage {
                object: "users".into(),
                key: vec![json!(1)],
                attrs: attrs(json!({"id": 1, "name": "ann"})),
                version: 12,
                bootstrap: true,
            }),
            WireMessage::ChunkEnd(ChunkEndMessage {
                chunk: 2,
                rows: 500,
            }),
            WireMessage::BootstrapEnd(BootstrapEndMessage { lsn: 77 }),
            WireMessage::Error(ErrorMessage {
                code: "55000".into(),
                message: "subscriber dropped".into(),
            }),
        ]
    }

    #[test]
    fn round_trip_every_type() {
        for m in samples() {
            let line = m.to_line();
            assert!(line.starts_with("{\"v\":1,\"type\":"), "{line}");
            assert!(!line.contains('\n'));
            assert_eq!(parse_line(&line).unwrap(), m, "{line}");
        }
    }

    #[test]
    fn txn_shape() {
        let line = samples()[0].to_line();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["deps"], json!({"w": [[1, 0], [7, 2]], "r": [[9, 1]]}));
        assert_eq!(v["changes"][0]["prev_version"], Value::Null);
        assert!(v["changes"][1].get("attrs").is_none());
        let weak = r#"{"v":1,"type":"txn","lsn":5,"first_lsn":5,"txid":"s:5","commit_time":"t","epoch":0,"frame":0,"last":true,"changes":[]}"#;
        match parse_line(weak).unwrap() {
            WireMessage::Txn(t) => assert!(t.deps.is_none() && !t.bootstrap),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_version_refused() {
        let err = parse_line(r#"{"v":2,"type":"progress","lsn":1}"#).unwrap_err();
        assert_eq!(err, WireError::UnknownVersion { found: "2".into() });
        assert!(err.to_string().contains("reads version 1"), "{err}");
        assert!(matches!(
            parse_line(r#"{"type":"progress","lsn":1}"#),
            Err(WireError::Malformed(_))
        ));
        assert!(matches!(
            parse_line(r#"{"v":1,"type":"nope"}"#),
            Err(WireError::Malformed(_))
        ));
        assert!(matches!(parse_line("[1]"), Err(WireError::Malformed(_))));
    }
}
