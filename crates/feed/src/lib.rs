//! The change feed: the log's stream of committed transactions as ordered
//! messages (`docs/change-feed.md`).
//!
//! - [`Feed`] consumes every committed batch of a [`aqueduct_tables::Database`]
//!   and keeps the latest messages in memory, bounded in bytes and shared by
//!   all subscribers.
//! - A [`Subscription`] reads from any LSN the log still holds exactly: from
//!   memory while it keeps up, from the log when it is behind (so writers
//!   are never blocked and memory does not grow with its lag), cut off past
//!   [`FeedOptions::max_lag`].
//! - Named consumers are durable: the log keeps what the slowest still
//!   needs, up to a cap in bytes or idle time after which it is dropped.
//! - [`Feed::snapshot`] gives the tables at one LSN, to start from before
//!   following the feed from the next LSN.

mod consumers;
mod feed;
mod log_source;
mod message;
mod subscription;

use std::time::Duration;

use aqueduct_log::Lsn;
use aqueduct_tables::TableSchema;

pub use consumers::{ConsumerInfo, MAX_CONSUMER_NAME_BYTES};
pub use feed::{Feed, FeedMetrics, Snapshot, SnapshotTable};
pub use message::{rfc3339_micros, value_json, Change, ChangeMessage, Op, TableInfo};
pub use subscription::{Subscription, RECV_BATCH};

/// Bytes of recent messages the feed keeps in memory by default.
pub const DEFAULT_FEED_MEMORY_BYTES: usize = 64 << 20;

/// Settings of a feed.
#[derive(Clone, Debug)]
pub struct FeedOptions {
    /// Bytes of recent messages kept in memory for subscribers that keep up.
    pub memory_bytes: usize,
    /// A subscriber more than this many LSNs behind the head is cut off
    /// with [`FeedError::TooFarBehind`]; `None`: never.
    pub max_lag: Option<u64>,
    /// A named consumer holding more bytes of log than this is dropped.
    pub consumer_max_bytes: Option<u64>,
    /// A named consumer behind that acknowledged nothing for this long is
    /// dropped.
    pub consumer_max_age: Option<Duration>,
}

impl Default for FeedOptions {
    fn default() -> FeedOptions {
        FeedOptions {
            memory_bytes: DEFAULT_FEED_MEMORY_BYTES,
            max_lag: None,
            consumer_max_bytes: None,
            consumer_max_age: None,
        }
    }
}

/// The caps of one durable consumer, where they differ from the feed's
/// (a publication's `max_lag` and `max_lag_age`); `None` fields keep the
/// feed's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerCaps {
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
}

/// Looks up a consumer's own caps by its name.
pub type CapsOf = dyn Fn(&str) -> Option<ConsumerCaps> + Send + Sync;

/// What can go wrong, each saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error(
        "the change feed no longer holds LSN {from}: compaction removed records below LSN \
         {oldest}; bootstrap again from a snapshot and follow from its LSN"
    )]
    Gone { from: Lsn, oldest: Lsn },
    #[error(
        "this subscriber fell too far behind: it needs LSN {next} and the feed is at LSN {head}, \
         more than the limit of {max}; bootstrap again from a snapshot"
    )]
    TooFarBehind { next: Lsn, head: Lsn, max: u64 },
    #[error(
        "change-feed consumer \"{name}\" was dropped because {reason}; bootstrap again from a \
         snapshot and register it anew"
    )]
    ConsumerDropped { name: String, reason: String },
    #[error("cannot acknowledge LSN {lsn}: the change feed has only reached LSN {head}")]
    AckAhead { lsn: Lsn, head: Lsn },
    #[error("change-feed consumer \"{0}\" does not exist; register it first")]
    NoSuchConsumer(String),
    #[error(
        "\"{0}\" is not a valid consumer name: use 1 to {MAX_CONSUMER_NAME_BYTES} bytes without \
         control characters"
    )]
    BadName(String),
    #[error("table \"{0}\" does not exist")]
    NoSuchTable(String),
    #[error("log record at LSN {lsn} is not a valid table record: {reason}")]
    BadRecord { lsn: Lsn, reason: String },
    #[error("the change feed's consumer list is damaged ({0}); restore the file `consumers` or remove it to forget every consumer")]
    BadConsumerFile(String),
    #[error("{what} the change feed's consumer list: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    Log(#[from] aqueduct_log::Error),
    /// A member of a Raft group could not see a write committed by its
    /// group (40003, or what the group said).
    #[error("{0}")]
    Uncommitted(aqueduct_expr::SqlError),
}

impl FeedError {
    fn io(what: &'static str, source: std::io::Error) -> FeedError {
        FeedError::Io { what, source }
    }

    /// The SQLSTATE a front end reports it with.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            FeedError::Gone { .. }
            | FeedError::TooFarBehind { .. }
            | FeedError::ConsumerDropped { .. } => "55000",
            FeedError::NoSuchConsumer(_) => "42704",
            FeedError::BadName(_) => "42602",
            FeedError::AckAhead { .. } => "22023",
            FeedError::NoSuchTable(_) => "42P01",
            FeedError::BadRecord { .. } | FeedError::BadConsumerFile(_) => "XX001",
            FeedError::Io { .. } | FeedError::Log(_) => "58030",
            FeedError::Uncommitted(e) => e.code,
        }
    }
}

impl TableInfo {
    pub fn of(schema: &TableSchema) -> TableInfo {
        TableInfo {
            id: schema.id,
            name: schema.name.clone(),
            columns: schema.columns.iter().map(|c| c.name.clone()).collect(),
        }
    }
}
