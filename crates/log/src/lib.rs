//! Aqueduct's log: the one source of truth.
//!
//! Every committed write is a record with an LSN, a dense increasing 64-bit
//! position. The log is a directory of segments, each a data file and a sparse
//! index. Appends are group-committed under a durability policy, batches are
//! atomic, a torn tail is truncated at open, corruption anywhere else stops the
//! open with its location, and compaction runs in the background without
//! blocking appends (after Sirius, ATC'14, §6).
//!
//! Module map, in the order a write travels:
//! - [`record`]: one record's bytes.
//! - [`storage`] / [`sim`]: the file system, real or simulated with faults.
//! - [`segment`]: segment files, scans, indexes.
//! - [`log`]: open and recovery, append, group commit, truncation.
//! - [`reader`]: reading from any LSN.
//! - [`live`]: following a log another process writes, without its lock.
//! - [`compaction`]: dropping superseded records and merging segments.
//! - [`manifest`]: which segments the log is made of, checked at open.
//! - [`meta`]: small durable metadata beside the log (the Raft vote).
//! - [`lock`]: one process per directory.

pub mod compaction;
pub mod live;
pub mod lock;
pub mod log;
pub mod manifest;
pub mod meta;
pub mod metrics;
pub mod reader;
pub mod record;
pub mod segment;
pub mod sim;
pub mod storage;
pub mod wire;

use std::io;
use std::time::Duration;

pub use crate::compaction::{CompactionReport, ExpiredPuts, Expiry, Retention};
pub use crate::live::LiveLogReader;
pub use crate::log::{Log, LsnRange, RecoveryReport, SegmentStat};
pub use crate::meta::Meta;
pub use crate::metrics::LogMetrics;
pub use crate::reader::LogReader;
pub use crate::record::{NewRecord, Record, RecordKind, RecordView};
pub use crate::storage::{FsStorage, Storage, StorageFile};

/// A log sequence number. 0 means "no record"; the first record has LSN 1.
pub type Lsn = u64;

/// Version of the log's on-disk format, stored in every segment header and
/// in the manifest. Version 2 added the manifest (`docs/log-format.md`);
/// segments of version 1 are still read, and a log without a manifest is
/// upgraded when it is first opened for writing.
pub const FORMAT_VERSION: u16 = 2;
/// The oldest segment format version this build reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
/// Version of the index file layout (unchanged since format version 1).
pub const INDEX_FORMAT_VERSION: u16 = 1;
/// Version of the metadata file layout (3: adds the server id).
pub const META_FORMAT_VERSION: u16 = 3;
/// Largest key a record may carry.
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// Largest body a record may carry.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Largest number of bytes one atomic batch may take: one transaction's
/// writes (pgbench -i at scale 10 rewrites its 1,000,000 accounts, 184 MB,
/// in one `ALTER TABLE ... ADD PRIMARY KEY`).
pub const MAX_BATCH_BYTES: usize = 256 * 1024 * 1024;
/// One sparse index entry is kept per this many bytes of segment data.
pub const INDEX_INTERVAL_BYTES: u64 = 4096;
/// Sequential reads fetch this much at a time.
pub const READ_CHUNK_BYTES: usize = 1024 * 1024;
/// Default size at which the active segment is sealed and a new one started.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Default sync period for [`SyncPolicy::Interval`].
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(10);

/// When appended records are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// `append` returns only after an fdatasync covering the batch; concurrent
    /// appenders share one sync (group commit). Survives kill -9 and power loss.
    Always,
    /// Records are written to the OS at once (they survive kill -9) and synced
    /// every period (power loss can take the last period).
    Interval(Duration),
    /// Written to the OS at once, synced only when a segment is sealed.
    Never,
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<SyncPolicy, String> {
        match s {
            "always" => Ok(SyncPolicy::Always),
            "never" => Ok(SyncPolicy::Never),
            "interval" => Ok(SyncPolicy::Interval(DEFAULT_SYNC_INTERVAL)),
            other => match other
                .strip_prefix("interval:")
                .and_then(|ms| ms.parse().ok())
            {
                Some(ms) if ms > 0 => Ok(SyncPolicy::Interval(Duration::from_millis(ms))),
                _ => Err(format!(
                    "unknown fsync policy '{s}': use always, interval, interval:<ms> or never"
                )),
            },
        }
    }
}

/// Settings of an open log.
#[derive(Clone, Debug)]
pub struct Options {
    pub sync: SyncPolicy,
    /// The active segment is sealed once it holds this many bytes.
    pub segment_bytes: u64,
    /// What compaction must leave untouched.
    pub retention: Retention,
    /// Open for reading only: no tail repair, no writes, no index rebuild on disk.
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            sync: SyncPolicy::Always,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            retention: Retention::default(),
            read_only: false,
        }
    }
}

/// Everything that can go wrong, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "the disk is full while {context}: this write was not acknowledged and nothing \
         acknowledged was lost; free space and retry"
    )]
    DiskFull { context: String },
    #[error(
        "log corruption in {location} at byte offset {offset}{}: {reason}. The log refuses to \
         open. Inspect with `aqueduct wal verify <dir>`; to repair, cut the log before the bad \
         record with `aqueduct wal truncate <dir> --at <lsn>` (records from that LSN on are \
         removed; recover them from a replica if there is one)",
        lsn.map(|l| format!(" (LSN {l})")).unwrap_or_default()
    )]
    Corrupt {
        location: String,
        offset: u64,
        lsn: Option<Lsn>,
        reason: String,
    },
    #[error(
        "the log is not whole: {problem}. The log refuses to open, because replaying it would \
         silently lose or change committed records. To repair: {repair}"
    )]
    Inconsistent {
        problem: String,
        repair: String,
        /// The LSN at which `aqueduct wal truncate` would repair it, if cutting can.
        cut_at: Option<Lsn>,
    },
    #[error("{0}")]
    Locked(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error(
        "the log stopped accepting writes after a failed sync ({0}); what was acknowledged is \
         safe; restart the process to recover from what is on disk"
    )]
    Poisoned(String),
}

impl Error {
    /// Wraps an I/O error, recognising a full disk.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        let context = context.into();
        if storage::is_disk_full(&source) {
            Error::DiskFull { context }
        } else {
            Error::Io { context, source }
        }
    }

    /// Fills in the location of a corruption found inside segment `base`.
    pub(crate) fn at(self, storage: &dyn Storage, base: Lsn) -> Error {
        match self {
            Error::Corrupt {
                location,
                offset,
                lsn,
                reason,
            } if location.is_empty() => Error::Corrupt {
                location: storage.describe(&segment::data_name(base)),
                offset,
                lsn,
                reason,
            },
            other => other,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Microseconds since the Unix epoch, for record timestamps.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
