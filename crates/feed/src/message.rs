//! One committed transaction as the change feed delivers it, and its JSON
//! form (one line per message on `/v1/changes`, `docs/change-feed.md`).

use std::sync::Arc;

use aqueduct_log::Lsn;
use aqueduct_tables::{Key, Row, SchemaChange, TableId};
use aqueduct_values::Value;
use serde_json::{json, Map, Value as Json};

/// The name and column names of a table, shared by every change to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<String>,
}

/// What a change did to its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// One change of a committed transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A row written.
    Row {
        lsn: Lsn,
        table: Arc<TableInfo>,
        /// The row's key: its primary-key values, or its hidden row id.
        key: Key,
        op: Op,
        /// The LSN of the row's previous version (`None` for an insert).
        prev_lsn: Option<Lsn>,
        old: Option<Arc<Row>>,
        new: Option<Arc<Row>>,
    },
    /// A schema change (`CREATE TABLE`, `DROP VIEW`, a grant, ...), as the
    /// schema record in the log (`docs/table-records.md`).
    Schema { lsn: Lsn, change: SchemaChange },
}

impl Change {
    pub fn lsn(&self) -> Lsn {
        match self {
            Change::Row { lsn, .. } | Change::Schema { lsn, .. } => *lsn,
        }
    }

    /// The id of the table a row change is to.
    pub fn table_id(&self) -> Option<TableId> {
        match self {
            Change::Row { table, .. } => Some(table.id),
            Change::Schema { .. } => None,
        }
    }
}

/// One committed transaction: its changes in LSN order.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeMessage {
    /// The transaction's first LSN.
    pub first_lsn: Lsn,
    /// Its last LSN: the LSN the transaction committed at. A consumer that
    /// saw this message resumes from `lsn + 1`.
    pub lsn: Lsn,
    /// Commit time, microseconds since the Unix epoch.
    pub commit_micros: i64,
    pub changes: Vec<Change>,
    /// What the transaction read and who ran it (its `txn_deps` record),
    /// for publications' causal order; `None` while no publication
    /// existed when it committed.
    pub deps: Option<Arc<aqueduct_tables::TxnDeps>>,
}

impl ChangeMessage {
    /// Approximate bytes held, for the feed's memory bound.
    pub fn approx_bytes(&self) -> usize {
        let mut schema = 0;
        let rows: usize = self
            .changes
            .iter()
            .map(|c| match c {
                Change::Row { old, new, .. } => Self::rows_bytes(old, new),
                Change::Schema { .. } => {
                    schema += 1;
                    0
                }
            })
            .sum();
        Self::bytes_of(self.changes.len() - schema, schema) + rows
    }

    /// [`ChangeMessage::approx_bytes`] of a message of `rows` row changes
    /// and `schema` schema changes, besides the rows themselves.
    pub fn bytes_of(rows: usize, schema: usize) -> usize {
        64 + rows * ROW_CHANGE_BYTES + schema * SCHEMA_CHANGE_BYTES
    }

    /// [`ChangeMessage::approx_bytes`] of one row change's rows.
    pub fn rows_bytes(old: &Option<Arc<Row>>, new: &Option<Arc<Row>>) -> usize {
        let row = |r: &Option<Arc<Row>>| r.as_ref().map_or(0, |r| row_bytes(r));
        row(old) + row(new)
    }

    /// The message restricted to row changes of `tables` (schema changes
    /// are kept); `None` keeps everything.
    pub fn filtered(self: &Arc<Self>, tables: Option<&[TableId]>) -> Arc<ChangeMessage> {
        let Some(tables) = tables else {
            return self.clone();
        };
        let keep = |c: &Change| c.table_id().is_none_or(|t| tables.contains(&t));
        if self.changes.iter().all(keep) {
            return self.clone();
        }
        Arc::new(ChangeMessage {
            changes: self.changes.iter().filter(|c| keep(c)).cloned().collect(),
            ..(**self).clone()
        })
    }

    /// The message as JSON: `{"lsn", "first_lsn", "commit_time",
    /// "changes": [...]}`, each row as an object of column names.
    pub fn to_json(&self) -> Json {
        let changes: Vec<Json> = self.changes.iter().map(change_json).collect();
        json!({
            "lsn": self.lsn,
            "first_lsn": self.first_lsn,
            "commit_time": rfc3339_micros(self.commit_micros),
            "changes": changes,
        })
    }
}

/// A row change's bytes besides its rows, for the feed's memory bound.
const ROW_CHANGE_BYTES: usize = 64;
/// A schema change's bytes, for the feed's memory bound.
const SCHEMA_CHANGE_BYTES: usize = 256;

fn row_bytes(r: &Row) -> usize {
    r.iter()
        .map(|v| match v {
            Value::Text(s) | Value::Json(s) => 24 + s.len(),
            Value::Bytes(b) => 24 + b.len(),
            _ => 24,
        })
        .sum()
}

fn change_json(c: &Change) -> Json {
    match c {
        Change::Row {
            lsn,
            table,
            key,
            op,
            prev_lsn,
            old,
            new,
        } => {
            let row = |r: &Option<Arc<Row>>| match r {
                None => Json::Null,
                Some(r) => Json::Object(
                    table
                        .columns
                        .iter()
                        .zip(r.iter())
                        .map(|(c, v)| (c.clone(), value_json(v)))
                        .collect::<Map<String, Json>>(),
                ),
            };
            json!({
                "lsn": lsn,
                "table": table.name,
                "key": key.iter().map(value_json).collect::<Vec<_>>(),
                "op": op.name(),
                "prev_lsn": prev_lsn,
                "old": row(old),
                "new": row(new),
            })
        }
        Change::Schema { lsn, change } => {
            let body: Json = serde_json::from_slice(&change.encode()).unwrap_or(Json::Null);
            json!({ "lsn": lsn, "op": "schema", "schema": body })
        }
    }
}

/// A SQL value as JSON: integers, floats and booleans as JSON numbers and
/// booleans, json/jsonb as nested JSON, everything else (numeric included,
/// so no precision is lost) as its PostgreSQL text form.
pub fn value_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => json!(i),
        Value::Float(f) if f.is_finite() => json!(f),
        Value::Json(s) => serde_json::from_str(s).unwrap_or_else(|_| Json::String(s.clone())),
        Value::Jsonb(j) => {
            serde_json::from_str(&j.to_string()).unwrap_or_else(|_| Json::String(j.to_string()))
        }
        Value::Array(items) => Json::Array(items.iter().map(value_json).collect()),
        other => Json::String(other.to_text().unwrap_or_default()),
    }
}

/// `micros` since the Unix epoch as RFC 3339 UTC with microseconds.
pub fn rfc3339_micros(micros: i64) -> String {
    Value::TimestampTz(micros)
        .to_text()
        .unwrap_or_else(|| micros.to_string())
}
