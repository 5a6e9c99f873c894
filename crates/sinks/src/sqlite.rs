//! The SQLite sink: rows, tombstones and the position in one database
//! file, each batch one transaction (`docs/publications.md` §5.3, §5.4).
//!
//! State tables carry an `aqueduct_` prefix: `aqueduct_subscription`,
//! `aqueduct_applied`, `aqueduct_tombstones`, `aqueduct_dead_letters`,
//! and `aqueduct_objects` (each data table's published shape, since SQLite
//! column types only keep a storage class). Data tables are named as
//! published. One file can hold several subscriptions, each under its own
//! name in the state tables; the data tables are shared between them, so
//! subscriptions writing one object must follow the same server (their row
//! versions are compared with each other).

use std::path::Path;
use std::time::Duration;

use aqueduct_subscribe::SinkError;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::classified;
use crate::sql::{Exec, Sql};
use crate::sql_sink::{sql_sink, SqlSink};

/// How long a statement waits for another connection's lock before the
/// error is reported (as transient).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A SQLite database holding a subscription's copy and its position.
pub struct SqliteSink {
    conn: Connection,
    sql: Sql,
}

/// Classifies a SQLite error (§5.5): a lock held elsewhere or a full or
/// failing disk is transient, everything else (constraints, type
/// mismatches, bad SQL) permanent.
pub fn classify(e: rusqlite::Error) -> SinkError {
    let transient = matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
        )
    );
    classified(transient, format!("sqlite: {e}"))
}

impl SqliteSink {
    /// Opens (creating if needed) the database at `path` for the
    /// subscription `name`, with its state tables.
    pub fn open(path: impl AsRef<Path>, name: &str) -> Result<SqliteSink, SinkError> {
        let conn = Connection::open(path).map_err(classify)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
        // WAL with a sync at every commit: a committed batch survives a
        // power loss, and readers do not block the writer.
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
            .map_err(classify)?;
        let mut sink = SqliteSink {
            conn,
            sql: Sql::sqlite(name),
        };
        let setup = sink.sql.setup();
        sink.in_transaction(|_, db| db.exec(&setup))?;
        Ok(sink)
    }

    /// How long a statement waits for another connection's lock before
    /// failing with a transient error (five seconds unless set).
    pub fn set_busy_timeout(&mut self, timeout: Duration) -> Result<(), SinkError> {
        self.conn.busy_timeout(timeout).map_err(classify)
    }
}

impl SqlSink for SqliteSink {
    fn sql(&self) -> &Sql {
        &self.sql
    }

    fn in_transaction(
        &mut self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        // Dropped without a commit, the transaction rolls back.
        f(&self.sql, &mut Db(&tx))?;
        tx.commit().map_err(classify)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        f(&self.sql, &mut Db(&self.conn))
    }
}

sql_sink!(SqliteSink);

/// Statements on a connection or, through `Deref`, a transaction.
struct Db<'a>(&'a Connection);

impl Exec for Db<'_> {
    fn exec(&mut self, sql: &str) -> Result<(), SinkError> {
        self.0.execute_batch(sql).map_err(classify)
    }

    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, SinkError> {
        query(self.0, sql)
    }
}

fn query(conn: &Connection, sql: &str) -> Result<Vec<Vec<Option<String>>>, SinkError> {
    let mut stmt = conn.prepare(sql).map_err(classify)?;
    let n = stmt.column_count();
    let mut rows = stmt.query([]).map_err(classify)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(classify)? {
        let mut cells = Vec::with_capacity(n);
        for i in 0..n {
            cells.push(match row.get_ref(i).map_err(classify)? {
                ValueRef::Null => None,
                ValueRef::Integer(v) => Some(v.to_string()),
                ValueRef::Real(v) => Some(format!("{v:?}")),
                ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => {
                    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                    Some(format!("\\x{hex}"))
                }
            });
        }
        out.push(cells);
    }
    Ok(out)
}
