//! The server side's limits of publication streams (`docs/publications.md`
//! §7). The subscriber's own limits live in its crate.

/// Default size of a publication's hashed dependency space, in slots.
/// A stream's tracker holds 16 bytes a slot: 1 MiB.
pub const DEP_SLOTS_DEFAULT: u32 = 65_536;

/// Largest `dep_slots` a publication may ask for: 64 MiB of tracker per
/// stream at most.
pub const DEP_SLOTS_MAX: u32 = 4_194_304;

/// Row reads recorded per transaction; past it the transaction's row reads
/// become whole-table reads (coarser, never wrong).
pub const READ_DEPS_PER_TXN_MAX: usize = 4_096;

/// Bytes of one recorded read in the `txn_deps` log record body.
pub const READ_DEP_RECORD_BYTES: usize = 17;

/// Origins (source transactions of other servers, `aqueduct.origin`) one
/// transaction may carry (`docs/publications.md` §8); more are refused.
/// At least the transactions of one agent batch (the subscriber's
/// `APPLY_BATCH_TXNS_MAX`, asserted there), which the PostgreSQL sink
/// names as the origins of the batch's sink transaction.
pub const ORIGINS_PER_TXN_MAX: usize = 256;

/// Bytes of one origin's server id.
pub const ORIGIN_SERVER_ID_BYTES_MAX: usize = 64;

/// Bytes of a log record body (the log's own limit).
pub const LOG_BODY_BYTES_MAX: usize = 16 << 20;

/// Bytes of one line of a publication stream.
pub const WIRE_FRAME_BYTES_MAX: usize = 4 << 20;

/// Rows in one bootstrap chunk, about.
pub const BOOTSTRAP_CHUNK_ROWS: u64 = 50_000;

/// Smallest chunk a subscriber may ask for (`chunk_rows`), in rows.
pub const BOOTSTRAP_CHUNK_ROWS_MIN: u64 = 100;

/// Chunks of one bootstrap at most: a larger publication gets larger
/// chunks, so the chunk list stays small.
pub const BOOTSTRAP_CHUNKS_MAX: usize = 65_536;

/// Bootstrap snapshots one server holds at once (a new bootstrap of the
/// same subscriber replaces its old one; past the limit a request is
/// refused with 53300).
pub const BOOTSTRAP_SNAPSHOTS_MAX: usize = 8;

/// How long a bootstrap snapshot is held after its last use, in seconds.
pub const BOOTSTRAP_SNAPSHOT_TTL_S: u64 = 3_600;

/// Publication streams one server serves at once (shared with the feed's
/// stream limit).
pub const PUBLICATION_STREAMS_MAX: usize = 256;

/// How long a stream waits for the dataflow to reach a transaction whose
/// changes to a published view it sends (or a bootstrap for a view's rows
/// at its LSN); past it the stream ends with 57014 and the subscriber
/// asks again.
pub const VIEW_CHANGES_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Bytes of the tracker's counters per slot (`ops` and `ver`).
pub const TRACKER_BYTES_PER_SLOT: usize = 16;

const _: () = assert!(DEP_SLOTS_DEFAULT.is_power_of_two());
const _: () = assert!(DEP_SLOTS_MAX.is_power_of_two());
const _: () = assert!(DEP_SLOTS_DEFAULT <= DEP_SLOTS_MAX);
// The GLOBAL slot is `dep_slots` itself and must fit a u32.
const _: () = assert!(DEP_SLOTS_MAX < u32::MAX);
// A stream's tracker stays within 64 MiB (plus the GLOBAL slot).
const _: () = assert!(DEP_SLOTS_MAX as usize * TRACKER_BYTES_PER_SLOT <= 64 << 20);
// The `txn_deps` body (with its header) stays far below a log body.
const _: () = assert!(READ_DEPS_PER_TXN_MAX * READ_DEP_RECORD_BYTES + 1024 <= 70 << 10);
const _: () = assert!(READ_DEPS_PER_TXN_MAX * READ_DEP_RECORD_BYTES * 64 <= LOG_BODY_BYTES_MAX);
// Origins add at most a few KiB to the `txn_deps` body.
const _: () = assert!(ORIGINS_PER_TXN_MAX * (ORIGIN_SERVER_ID_BYTES_MAX + 9) + 2 <= 32 << 10);
const _: () = assert!(ORIGIN_SERVER_ID_BYTES_MAX <= u8::MAX as usize);
// A line is well below a log body, so one record's worth of changes can be
// cut into frames.
const _: () = assert!(WIRE_FRAME_BYTES_MAX < LOG_BODY_BYTES_MAX);
const _: () = assert!(BOOTSTRAP_CHUNK_ROWS > 0 && BOOTSTRAP_SNAPSHOTS_MAX > 0);
const _: () =
    assert!(BOOTSTRAP_CHUNK_ROWS_MIN > 0 && BOOTSTRAP_CHUNK_ROWS_MIN <= BOOTSTRAP_CHUNK_ROWS);
// A chunk number fits the wire's u32.
const _: () = assert!(BOOTSTRAP_CHUNKS_MAX as u64 <= u32::MAX as u64);
