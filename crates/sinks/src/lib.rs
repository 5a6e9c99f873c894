//! Aqueduct's subscriber sinks: where the subscribe crate's agent applies a
//! publication's stream (`docs/publications.md` §5.3, §5.4, §6), each
//! behind the [`aqueduct_subscribe::Sink`] trait.
//!
//! Modules:
//!
//! - `sql` (private): the state tables, guarded statements, schema
//!   changes and value literals shared by the SQL sinks, in three
//!   dialects;
//! - `sql_sink` (private): the [`aqueduct_subscribe::Sink`] of the SQL
//!   sinks, written once over what differs between them;
//! - [`sqlite`]: [`SqliteSink`], a SQLite file, exactly once;
//! - [`postgres`]: [`PostgresSink`], a PostgreSQL database, exactly once;
//! - [`mariadb`]: [`MariaDbSink`], a MariaDB (or MySQL) database, exactly
//!   once;
//! - [`redis`]: [`RedisSink`], rows as Redis hashes, each batch one Lua
//!   script with its position, exactly once as far as Redis persists;
//! - [`jsonl`]: [`JsonLinesSink`], one JSON line per applied item on stdout
//!   or a file, at least once, its position in a state directory;
//! - [`nats`]: [`NatsSink`], a NATS JetStream message per applied item,
//!   at least once;
//! - [`rabbitmq`]: [`RabbitMqSink`], RabbitMQ messages under publisher
//!   confirms, at least once;
//! - [`webhook`]: [`WebhookSink`], an HTTP POST per applied item (or per
//!   change), at least once;
//! - `state_dir` (private): the position and dead letters of the message
//!   sinks, in a state directory;
//! - [`spec`]: [`SinkSpec`], the sink named on a command line.

pub mod jsonl;
pub mod mariadb;
pub mod nats;
pub mod postgres;
pub mod rabbitmq;
pub mod redis;
pub mod spec;
mod sql;
mod sql_sink;
pub mod sqlite;
mod state_dir;
pub mod webhook;

pub use jsonl::JsonLinesSink;
pub use mariadb::MariaDbSink;
pub use nats::NatsSink;
pub use postgres::PostgresSink;
pub use rabbitmq::RabbitMqSink;
pub use redis::RedisSink;
pub use spec::{BadSinkSpec, SinkSpec, SINK_FORMS};
pub use sql::{Identity, Rows, VERSION_COLUMN};
pub use sqlite::SqliteSink;
pub use state_dir::{DEAD_LETTERS_FILE, POSITION_FILE};
pub use webhook::WebhookSink;

use aqueduct_subscribe::SinkError;

/// An error of the class a sink's classification found (§5.5): transient
/// (worth retrying) or permanent.
pub(crate) fn classified(transient: bool, message: String) -> SinkError {
    if transient {
        SinkError::transient(message)
    } else {
        SinkError::permanent(message)
    }
}
