//! Embedded mirrors: the application keeps its own in-memory copy of
//! Aqueduct tables, in data structures of its choosing, and this library
//! keeps it up to date (after Sirius, ATC'14, §3–4; `docs/mirrors.md`).
//!
//! The application implements [`Mirror`]: [`Mirror::load`] takes a row of
//! the bootstrap snapshot, [`Mirror::apply`] one committed change, in LSN
//! order. Two sources drive it:
//!
//! - [`Follower`] follows a running server over HTTP: `GET /v1/snapshot`,
//!   then `GET /v1/changes` from the snapshot's LSN + 1; it reconnects from
//!   the last applied LSN + 1 after a disconnect (a restart, even kill -9),
//!   and bootstraps again when the server says that position is gone.
//! - [`DirFollower`] reads a data directory in process, no server needed.
//!
//! Reads from the mirror are then the application's own: no I/O.
//! [`Position`] is what to save to resume a mirror without a new snapshot.

mod dir;
mod follow;
pub mod http;
mod json;

use std::sync::Arc;

pub use aqueduct_log::Lsn;
pub use aqueduct_tables::{parse_type, Key, Row};
pub use aqueduct_values::{DataType, Value};

pub use dir::DirFollower;
pub use follow::{Follower, FollowerConfig, Status};

/// A value of `/v1/sql`, `/v1/snapshot` or `/v1/changes` JSON as a value of
/// column type `ty` (numbers, booleans and json as JSON, the rest as
/// PostgreSQL text).
pub fn value_from_json(j: &serde_json::Value, ty: &DataType) -> Result<Value, Error> {
    json::value(j, ty)
}

/// A column of a mirrored table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: DataType,
}

/// A mirrored table: its name, columns and primary key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub columns: Vec<Column>,
    /// Column positions of the primary key; empty when the table has none
    /// (its rows are then keyed by a hidden row id, a `bigint`).
    pub primary_key: Vec<usize>,
    /// The table's id in the server's catalog, when known (ids are never
    /// reused; a `DROP TABLE` names the table by it).
    pub id: Option<u64>,
}

impl TableInfo {
    /// The position of column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    fn of(schema: &aqueduct_tables::TableSchema) -> TableInfo {
        TableInfo {
            name: schema.name.clone(),
            columns: schema
                .columns
                .iter()
                .map(|c| Column {
                    name: c.name.clone(),
                    ty: c.ty.clone(),
                })
                .collect(),
            primary_key: schema.primary_key.clone(),
            id: Some(schema.id),
        }
    }
}

/// What a row change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

/// One committed row change, values typed by the table's columns.
#[derive(Clone, Debug, PartialEq)]
pub struct RowChange {
    pub table: Arc<TableInfo>,
    /// The primary-key values (or the hidden row id).
    pub key: Key,
    pub op: Op,
    /// The row before: `None` for an insert, and when the source no longer
    /// has it (a log compacted below this change).
    pub old: Option<Row>,
    /// The row after: `None` for a delete.
    pub new: Option<Row>,
}

/// One committed change, as handed to [`Mirror::apply`].
#[derive(Clone, Debug, PartialEq)]
pub enum MirrorChange {
    /// A row inserted, updated or deleted.
    Row(RowChange),
    /// A table created (it has no rows yet).
    CreateTable(Arc<TableInfo>),
    /// A table dropped: its rows are gone with it (no row changes come
    /// for them).
    DropTable(Arc<TableInfo>),
}

/// The application's copy of the tables. The library calls it from the one
/// thread that runs the follower, in this order: [`Mirror::reset`], a
/// [`Mirror::load`] per snapshot row, [`Mirror::committed`] with the
/// snapshot's LSN; then, for each committed transaction after it, an
/// [`Mirror::apply`] per change and [`Mirror::committed`] with the
/// transaction's LSN. A re-bootstrap starts over with `reset`.
pub trait Mirror {
    /// Forget everything: a (new) snapshot follows.
    fn reset(&mut self) {}
    /// A row of the bootstrap snapshot.
    fn load(&mut self, table: &TableInfo, key: &Key, row: &Row);
    /// One committed change after the snapshot, in LSN order.
    fn apply(&mut self, lsn: Lsn, change: &MirrorChange);
    /// Every change up to `lsn` is applied: a transaction boundary (a
    /// mirror that publishes its state in steps can do so here).
    fn committed(&mut self, lsn: Lsn) {
        let _ = lsn;
    }
}

/// Where a mirror is: everything up to `lsn` is applied, and the tables it
/// knows. Saved with the application's copy of the data, it lets a new
/// process resume from `lsn + 1` instead of bootstrapping again
/// ([`Follower::resume`], [`DirFollower::resume`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub lsn: Lsn,
    pub tables: Vec<TableInfo>,
}

impl Position {
    /// As JSON text: `{"lsn": N, "tables": [{"name", "id", "columns":
    /// [{"name", "type"}], "primary_key": [...]}]}`.
    pub fn to_json(&self) -> String {
        json::position_to_json(self).to_string()
    }

    pub fn from_json(s: &str) -> Result<Position, Error> {
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|e| Error::Protocol(format!("bad position: {e}")))?;
        json::position_from_json(&v)
    }
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the server at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("the connection to the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server answered {code}: {message}")]
    Server {
        /// The SQLSTATE (`55000`: the position is gone, bootstrap again).
        code: String,
        message: String,
    },
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    #[error("{0}")]
    Log(#[from] aqueduct_log::Error),
    #[error("log record at LSN {lsn} is not a valid table record: {reason}")]
    BadRecord { lsn: Lsn, reason: String },
}

impl Error {
    /// Whether the server said the position asked for is gone (SQLSTATE
    /// 55000): only a new bootstrap can continue.
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Server { code, .. } if code == "55000")
    }
}

/// The plainest mirror: every row by key, per table name. Handy where an
/// application wants no structure of its own, and in tests. It checks each
/// change against what it holds (an insert of a key it has, an update or
/// delete of a key it lacks or whose row differs from the change's old
/// row) and notes any mismatch in `anomalies`: a mirror fed every change
/// exactly once never has one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tables {
    pub tables: std::collections::BTreeMap<String, std::collections::BTreeMap<Key, Row>>,
    /// Changes that did not fit what the mirror held (at most
    /// [`Tables::MAX_ANOMALIES`] are kept).
    pub anomalies: Vec<String>,
}

impl Tables {
    pub const MAX_ANOMALIES: usize = 100;

    fn anomaly(&mut self, what: String) {
        if self.anomalies.len() < Tables::MAX_ANOMALIES {
            self.anomalies.push(what);
        }
    }
}

impl Mirror for Tables {
    fn reset(&mut self) {
        self.tables.clear();
    }

    fn load(&mut self, table: &TableInfo, key: &Key, row: &Row) {
        self.tables
            .entry(table.name.clone())
            .or_default()
            .insert(key.clone(), row.clone());
    }

    fn apply(&mut self, lsn: Lsn, change: &MirrorChange) {
        match change {
            MirrorChange::CreateTable(t) => {
                if self
                    .tables
                    .insert(t.name.clone(), Default::default())
                    .is_some()
                {
                    self.anomaly(format!("LSN {lsn}: table {} created twice", t.name));
                }
            }
            MirrorChange::DropTable(t) => {
                self.tables.remove(&t.name);
            }
            MirrorChange::Row(c) => {
                let rows = self.tables.entry(c.table.name.clone()).or_default();
                let before = match &c.new {
                    Some(new) => rows.insert(c.key.clone(), new.clone()),
                    None => rows.remove(&c.key),
                };
                let fits = match c.op {
                    Op::Insert => before.is_none(),
                    Op::Update | Op::Delete => {
                        before.is_some() && (c.old.is_none() || before == c.old)
                    }
                };
                if !fits {
                    self.anomaly(format!(
                        "LSN {lsn}: {:?} of {}{:?} found {:?}",
                        c.op, c.table.name, c.key, before
                    ));
                }
            }
        }
    }
}
