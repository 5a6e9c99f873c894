//! The PostgreSQL sink: rows, tombstones and the position in one
//! database, each batch one transaction (`docs/publications.md` §5.3,
//! §5.4), over the synchronous `postgres` client without TLS.
//!
//! State tables live in the schema `aqueduct` (`aqueduct.subscription`,
//! `aqueduct.applied`, `aqueduct.tombstones`, `aqueduct.dead_letters`, and
//! `aqueduct.objects` with each data table's published shape); data tables
//! in `public` or the schema given at construction, with the published
//! types. Values are written as text literals cast to each attribute's
//! type. Sessions run with `standard_conforming_strings` on, ISO dates and
//! UTC, so text forms read back as the wire writes them. As in SQLite,
//! several subscriptions can share a database and its data tables.
//!
//! A broken connection is opened again on the next call.

use std::cell::RefCell;

use aqueduct_subscribe::SinkError;
use postgres::{Client, GenericClient, NoTls, SimpleQueryMessage};

use crate::classified;
use crate::sql::{Exec, Sql};
use crate::sql_sink::{sql_sink, SqlSink};

/// The session settings every connection starts with.
const SESSION: &str = "SET standard_conforming_strings = on; SET DateStyle = 'ISO, MDY'; \
     SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres'; SET bytea_output = 'hex'; \
     SET extra_float_digits = 3;";

/// A PostgreSQL database holding a subscription's copy and its position.
pub struct PostgresSink {
    config: String,
    client: RefCell<Option<Client>>,
    sql: Sql,
}

/// Classifies a PostgreSQL error (§5.5): SQLSTATE classes 08 (connection),
/// 40 (serialization failure, deadlock), 53 (insufficient resources) and
/// 57 (operator intervention, shutdown), and errors without a SQLSTATE (a
/// lost connection) are transient; every other SQLSTATE is permanent.
pub fn classify(e: postgres::Error) -> SinkError {
    let transient = e
        .code()
        .is_none_or(|code| matches!(&code.code()[..2], "08" | "40" | "53" | "57"));
    classified(transient, format!("postgres: {e}"))
}

/// Statements on a client or a transaction.
struct Db<'a, C: GenericClient>(&'a mut C);

impl<C: GenericClient> Exec for Db<'_, C> {
    fn exec(&mut self, sql: &str) -> Result<(), SinkError> {
        self.0.batch_execute(sql).map_err(classify)
    }

    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, SinkError> {
        let mut out = Vec::new();
        for m in self.0.simple_query(sql).map_err(classify)? {
            if let SimpleQueryMessage::Row(row) = m {
                out.push(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                );
            }
        }
        Ok(out)
    }
}

impl PostgresSink {
    /// Connects with `config` (a `postgres://` URL or `host=... port=...`
    /// pairs) for the subscription `name`, data tables in `public`.
    pub fn connect(config: &str, name: &str) -> Result<PostgresSink, SinkError> {
        PostgresSink::connect_in(config, name, "public")
    }

    /// As [`PostgresSink::connect`], data tables in `data_schema` (created
    /// if missing).
    pub fn connect_in(
        config: &str,
        name: &str,
        data_schema: &str,
    ) -> Result<PostgresSink, SinkError> {
        let mut sink = PostgresSink {
            config: config.to_string(),
            client: RefCell::new(None),
            sql: Sql::postgres(name, data_schema),
        };
        let setup = sink.sql.setup();
        // Two agents starting at once can race to create the same schema
        // or table; the loser's error is a unique violation, and a second
        // try finds everything there.
        let first = sink.in_transaction(|_, db| db.exec(&setup));
        if first.is_err() {
            sink.in_transaction(|_, db| db.exec(&setup))?;
        }
        Ok(sink)
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        let mut slot = self.client.borrow_mut();
        if slot.as_ref().is_none_or(Client::is_closed) {
            let mut client = Client::connect(&self.config, NoTls).map_err(classify)?;
            client.batch_execute(SESSION).map_err(classify)?;
            *slot = Some(client);
        }
        f(slot.as_mut().expect("connected"))
    }
}

impl SqlSink for PostgresSink {
    fn sql(&self) -> &Sql {
        &self.sql
    }

    fn in_transaction(
        &mut self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        let sql = &self.sql;
        self.with_client(|client| {
            let mut tx = client.transaction().map_err(classify)?;
            // Dropped without a commit, the transaction rolls back.
            f(sql, &mut Db(&mut tx))?;
            tx.commit().map_err(classify)
        })
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        self.with_client(|client| f(&self.sql, &mut Db(client)))
    }
}

sql_sink!(PostgresSink);
