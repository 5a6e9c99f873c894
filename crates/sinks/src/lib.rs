//! Aqueduct's subscriber sinks: where the subscribe crate's agent applies a
//! publication's stream (`docs/publications.md` §5.3, §5.4, §6), each
//! behind the [`aqueduct_subscribe::Sink`] trait.
//!
//! Modules:
//!
//! - `sql` (private): the state tables, guarded statements, schema
//!   changes and value literals shared by the SQL sinks, in three
//!   dialects;
//! - [`sqlite`]: [`SqliteSink`], a SQLite file, exactly once;
//! - [`postgres`]: [`PostgresSink`], a PostgreSQL database, exactly once;
//! - [`mariadb`]: [`MariaDbSink`], a MariaDB (or MySQL) database, exactly
//!   once;
//! - [`redis`]: [`RedisSink`], rows as Redis hashes, each batch one Lua
//!   script with its position, exactly once as far as Redis persists;
//! - [`jsonl`]: [`JsonLinesSink`], one JSON line per applied item on stdout
//!   or a file, at least once, its position in a state directory;
//! - [`spec`]: [`SinkSpec`], the sink named on a command line.

pub mod jsonl;
pub mod mariadb;
pub mod postgres;
pub mod redis;
pub mod spec;
mod sql;
pub mod sqlite;

pub use jsonl::JsonLinesSink;
pub use mariadb::MariaDbSink;
pub use postgres::PostgresSink;
pub use redis::RedisSink;
pub use spec::{BadSinkSpec, SinkSpec, SINK_FORMS};
pub use sql::{Identity, Rows, VERSION_COLUMN};
pub use sqlite::SqliteSink;
