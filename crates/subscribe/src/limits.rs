//! The subscriber's limits (`docs/publications.md` §7), with compile-time
//! checks that they fit together and with the server's.

use aqueduct_publish::limits::{DEP_SLOTS_DEFAULT, DEP_SLOTS_MAX, WIRE_FRAME_BYTES_MAX};

/// Received, unapplied transactions the agent holds at most.
pub const AGENT_WINDOW_TXNS_MAX: usize = 16_384;

/// Bytes of those transactions; when full the shell stops reading the
/// socket and the server's log absorbs the lag.
pub const AGENT_WINDOW_BYTES_MAX: usize = 256 << 20;

/// A transaction larger than this is applied streaming (not built yet).
pub const AGENT_TXN_BUFFER_BYTES_MAX: usize = 64 << 20;

/// Source transactions in one sink transaction.
pub const APPLY_BATCH_TXNS_MAX: usize = 256;

/// Rows in one sink transaction (one larger source transaction goes alone).
pub const APPLY_BATCH_ROWS_MAX: usize = 10_000;

/// Workers applying batches at once.
pub const WORKERS_MAX: usize = 64;

/// Workers when none are asked for.
pub const WORKERS_DEFAULT: usize = 4;

/// First retry delay after a sink error.
pub const RETRY_BASE_MS: u64 = 100;

/// Longest retry delay.
pub const RETRY_MAX_MS: u64 = 60_000;

/// Attempts of a transaction failing with permanent errors before it is
/// dead-lettered.
pub const DEAD_LETTER_ATTEMPTS: u32 = 8;

/// Dead letters held; past it the agent stops rather than drop data.
pub const DEAD_LETTERS_MAX: usize = 10_000;

/// How often the watermark is stored in the sink (and acknowledged).
pub const WATERMARK_STORE_INTERVAL_MS: u64 = 1_000;

/// How often the agent asks the sink again whether a decorator's
/// transaction's origins are applied there (§8).
pub const ORIGIN_RECHECK_MS: u64 = 250;

/// Bytes of the agent's `done` counter per slot.
pub const AGENT_BYTES_PER_SLOT: usize = 8;

// All workers can be busy with full batches.
const _: () = assert!(AGENT_WINDOW_TXNS_MAX >= APPLY_BATCH_TXNS_MAX * WORKERS_MAX);
// A full frame or a big transaction never fills the window alone.
const _: () = assert!(WIRE_FRAME_BYTES_MAX * 4 <= AGENT_WINDOW_BYTES_MAX);
const _: () = assert!(AGENT_TXN_BUFFER_BYTES_MAX <= AGENT_WINDOW_BYTES_MAX / 2);
const _: () = assert!(WORKERS_DEFAULT >= 1 && WORKERS_DEFAULT <= WORKERS_MAX);
const _: () = assert!(RETRY_BASE_MS > 0 && RETRY_BASE_MS <= RETRY_MAX_MS);
// Backoff doubles from the base and must reach the cap within the attempts
// counted in a u32 shift.
const _: () = assert!(RETRY_MAX_MS / RETRY_BASE_MS < 1 << 31);
const _: () = assert!(DEAD_LETTER_ATTEMPTS >= 1);
const _: () = assert!(DEP_SLOTS_DEFAULT as usize * AGENT_BYTES_PER_SLOT <= 512 << 10);
const _: () = assert!(DEP_SLOTS_MAX as usize * AGENT_BYTES_PER_SLOT <= 32 << 20);
// A causal timeout is at least RETRY_MAX_MS (checked at start); the stored
// position is never staler than a tenth of it.
const _: () = assert!(WATERMARK_STORE_INTERVAL_MS * 10 <= RETRY_MAX_MS);

// The PostgreSQL sink names every transaction of a batch as an origin of
// its sink transaction (`aqueduct.origin`), which takes this many.
const _: () = assert!(APPLY_BATCH_TXNS_MAX <= aqueduct_publish::limits::ORIGINS_PER_TXN_MAX);
