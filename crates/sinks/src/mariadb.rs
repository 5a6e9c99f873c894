//! The MariaDB sink: rows, tombstones and the position in one database,
//! each batch one InnoDB transaction (`docs/publications.md` §5.3, §5.4,
//! §6), over the synchronous `mysql` client without TLS.
//!
//! State tables carry an `aqueduct_` prefix in the connected database
//! (`aqueduct_subscription`, `aqueduct_applied`, `aqueduct_tombstones`,
//! `aqueduct_dead_letters`, and `aqueduct_objects` with each data table's
//! published shape); data tables are named as published, in the same
//! database. Columns take MariaDB types mapped from the published
//! PostgreSQL ones (integers, DECIMAL, TINYINT(1), DOUBLE, DATE,
//! DATETIME(6) in UTC, JSON for json and arrays, CHAR(36) for uuid,
//! LONGBLOB for bytea, LONGTEXT or, in keys, VARCHAR for the rest); text
//! compares byte by byte without padding, as in Aqueduct. Sessions run
//! with `ANSI_QUOTES`, `NO_BACKSLASH_ESCAPES`, strict mode and UTC. Column
//! names compare without case in MariaDB, so attributes differing only in
//! case cannot share a table. As in the other SQL sinks, several
//! subscriptions can share a database and its data tables.
//!
//! MariaDB commits DDL implicitly: a schema change runs its DDL first,
//! written to be repeated harmlessly (`ADD COLUMN IF NOT EXISTS`, `DROP
//! COLUMN IF EXISTS`, a rename checked in `information_schema`), and then
//! records the new shape and the schema position in a following
//! transaction. A crash in between leaves the position before the change,
//! so the change is applied again and its DDL does nothing.
//!
//! Errors: deadlocks (1213), lock wait timeouts (1205), the server going
//! away or refusing connections are transient; everything else the server
//! reports is permanent. A connection that failed is opened again on the
//! next call.

use std::cell::RefCell;

use aqueduct_subscribe::SinkError;
use mysql::prelude::Queryable;
use mysql::{Conn, Opts, TxOpts, Value};

use crate::classified;
use crate::sql::{Exec, Sql};
use crate::sql_sink::{sql_sink, SqlSink};

/// The session settings every connection starts with.
const SESSION: &str = "SET SESSION sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES,\
     STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,\
     NO_ENGINE_SUBSTITUTION', time_zone = '+00:00', NAMES utf8mb4";

/// Server error codes that are worth retrying: lock wait timeout, deadlock,
/// too many connections, server shutdown, query interrupted, connection
/// killed.
const TRANSIENT_CODES: [u16; 6] = [1205, 1213, 1040, 1053, 1317, 1927];

/// A MariaDB (or MySQL) database holding a subscription's copy and its
/// position.
pub struct MariaDbSink {
    opts: Opts,
    conn: RefCell<Option<Conn>>,
    sql: Sql,
}

/// Classifies a MariaDB error (§5.5): deadlocks, lock wait timeouts, the
/// server shutting down or out of connections, and every error below the
/// server's answers (I/O, protocol, a lost or refused connection) are
/// transient; every other server error is permanent, as is a bad URL.
pub fn classify(e: mysql::Error) -> SinkError {
    let transient = match &e {
        mysql::Error::MySqlError(m) => TRANSIENT_CODES.contains(&m.code),
        mysql::Error::UrlError(_)
        | mysql::Error::FromValueError(_)
        | mysql::Error::FromRowError(_) => false,
        _ => true,
    };
    classified(transient, format!("mariadb: {e}"))
}

/// Whether an error leaves the connection unusable, so the next call opens
/// another.
fn breaks_connection(e: &mysql::Error) -> bool {
    !matches!(
        e,
        mysql::Error::MySqlError(_)
            | mysql::Error::FromValueError(_)
            | mysql::Error::FromRowError(_)
    )
}

/// Statements on a connection or a transaction.
struct Db<'a, Q: Queryable> {
    q: &'a mut Q,
    broken: bool,
}

impl<Q: Queryable> Db<'_, Q> {
    fn check<T>(&mut self, r: Result<T, mysql::Error>) -> Result<T, SinkError> {
        r.map_err(|e| {
            self.broken |= breaks_connection(&e);
            classify(e)
        })
    }
}

impl<Q: Queryable> Exec for Db<'_, Q> {
    fn exec(&mut self, sql: &str) -> Result<(), SinkError> {
        let r = run(self.q, sql);
        self.check(r).map(drop)
    }

    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, SinkError> {
        let r = run(self.q, sql);
        self.check(r)
    }
}

/// Runs statements separated by semicolons and returns the rows of all
/// their results. Every result is read: the client reports an error in a
/// statement after the first only there (the server runs none after it).
fn run<Q: Queryable>(q: &mut Q, sql: &str) -> Result<Vec<Vec<Option<String>>>, mysql::Error> {
    let mut result = q.query_iter(sql)?;
    let mut rows = Vec::new();
    while let Some(set) = result.iter() {
        for row in set {
            rows.push(row?.unwrap().into_iter().map(cell).collect());
        }
    }
    Ok(rows)
}

/// A cell as text; the text protocol sends every value as bytes.
fn cell(v: Value) -> Option<String> {
    match v {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Double(f) => Some(f.to_string()),
        other => Some(other.as_sql(true).trim_matches('\'').to_string()),
    }
}

/// `mariadb://...` as the `mysql://...` URL the client reads.
fn mysql_url(url: &str) -> String {
    match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_string(),
    }
}

impl MariaDbSink {
    /// Connects with `url` (`mariadb://user[:password]@host:port/db` or
    /// `mysql://...`, with the client's options as query parameters) for
    /// the subscription `name`, creating the state tables if missing.
    pub fn connect(url: &str, name: &str) -> Result<MariaDbSink, SinkError> {
        let opts = Opts::from_url(&mysql_url(url))
            .map_err(|e| SinkError::permanent(format!("mariadb: {e}")))?;
        if opts.get_db_name().is_none() {
            return Err(SinkError::permanent(
                "mariadb: the URL names no database (mariadb://user@host:port/db)",
            ));
        }
        let sink = MariaDbSink {
            opts,
            conn: RefCell::new(None),
            sql: Sql::mariadb(name),
        };
        // Every statement of the setup is safe to repeat, and DDL commits
        // on its own anyway.
        let setup = sink.sql.setup();
        sink.read(|_, db| db.exec(&setup))?;
        Ok(sink)
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&Sql, &mut Conn) -> Result<T, (SinkError, bool)>,
    ) -> Result<T, SinkError> {
        let mut slot = self.conn.borrow_mut();
        if slot.is_none() {
            let mut conn = Conn::new(self.opts.clone()).map_err(classify)?;
            run(&mut conn, SESSION).map_err(classify)?;
            *slot = Some(conn);
        }
        let conn = slot.as_mut().expect("connected");
        f(&self.sql, conn).map_err(|(e, broken)| {
            if broken {
                *slot = None;
            }
            e
        })
    }
}

impl SqlSink for MariaDbSink {
    const DDL_APART: bool = true;

    fn sql(&self) -> &Sql {
        &self.sql
    }

    /// Runs `f` outside a transaction (each statement commits on its own).
    fn read<T>(
        &self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        self.with_conn(|sql, conn| {
            let mut db = Db {
                q: conn,
                broken: false,
            };
            f(sql, &mut db).map_err(|e| (e, db.broken))
        })
    }

    /// Runs `f` in one transaction, committed if it succeeds.
    fn in_transaction(
        &mut self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        self.with_conn(|sql, conn| {
            let broken = |e: mysql::Error| {
                let b = breaks_connection(&e);
                (classify(e), b)
            };
            let mut tx = conn.start_transaction(TxOpts::default()).map_err(broken)?;
            let mut db = Db {
                q: &mut tx,
                broken: false,
            };
            // Dropped without a commit, the transaction rolls back.
            f(sql, &mut db).map_err(|e| (e, db.broken))?;
            tx.commit().map_err(broken)
        })
    }
}

sql_sink!(MariaDbSink);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(mysql_url("mariadb://u@h:1/db"), "mysql://u@h:1/db");
        assert_eq!(mysql_url("mysql://u@h/db"), "mysql://u@h/db");
        let err = MariaDbSink::connect("mariadb://u@127.0.0.1:1", "s")
            .err()
            .expect("no database named");
        assert_eq!(err.class, aqueduct_subscribe::ErrorClass::Permanent);
    }
}
