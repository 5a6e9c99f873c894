//! The agent's inputs, effects and settings (`docs/publications.md` §5.1):
//! everything the shell and the core say to each other, as typed values.

use aqueduct_publish::{ErrorMessage, Lsn, Mode, WireMessage};

use crate::batch::{BatchId, Item, Record, SchemaPos};
use crate::limits::{
    AGENT_WINDOW_BYTES_MAX, AGENT_WINDOW_TXNS_MAX, APPLY_BATCH_ROWS_MAX, APPLY_BATCH_TXNS_MAX,
    DEAD_LETTERS_MAX, RETRY_MAX_MS, WATERMARK_STORE_INTERVAL_MS, WORKERS_DEFAULT, WORKERS_MAX,
};
use crate::sink::{PositionMode, SinkError};

/// Why a stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The connection closed or broke.
    Closed(String),
    /// The server ended it with an `error` line (`55000`: position refused).
    Error(ErrorMessage),
}

/// An operator's command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operator {
    /// Try a dead letter again from scratch.
    RetryDeadLetter(Lsn),
    /// Count a dead letter as applied without its rows.
    SkipDeadLetter(Lsn),
    /// Bootstrap again (not built yet: the agent stops and says so).
    Rebootstrap,
}

/// What happens to the agent. Time is always passed in.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// The shell is up; the agent asks to connect.
    Start {
        /// Now.
        now_ms: u64,
    },
    /// A line of the stream, parsed by the shell.
    Received {
        /// Now.
        now_ms: u64,
        /// The line.
        line: WireMessage,
        /// Its length in bytes, for the window's bound.
        bytes: usize,
    },
    /// The sink holds every origin of the transaction at `lsn` (or cannot
    /// tell): it may be applied (answers [`Effect::CheckOrigins`]).
    OriginsApplied {
        /// Now.
        now_ms: u64,
        /// The transaction.
        lsn: Lsn,
    },
    /// A batch committed in the sink.
    Applied {
        /// Now.
        now_ms: u64,
        /// Which.
        batch: BatchId,
    },
    /// A batch failed; nothing of it is in the sink.
    SinkFailed {
        /// Now.
        now_ms: u64,
        /// Which.
        batch: BatchId,
        /// Why.
        error: SinkError,
    },
    /// A `StorePosition` is durable.
    PositionStored {
        /// Now.
        now_ms: u64,
        /// The watermark it stored.
        watermark: Lsn,
    },
    /// Time passed (at least at each `RetryAt`).
    Tick {
        /// Now.
        now_ms: u64,
    },
    /// The stream ended.
    Disconnected {
        /// Now.
        now_ms: u64,
        /// Why.
        reason: StreamEnd,
    },
    /// An operator's command.
    Command {
        /// Now.
        now_ms: u64,
        /// Which.
        cmd: Operator,
    },
}

/// A bootstrap step (§5.6); not built yet, the names are reserved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapStep {
    /// Ask the server for a snapshot.
    Request,
}

/// What the shell must do. Within one `step`'s effects: start `Apply`s,
/// write `StorePosition` and `DeadLetter` durably, then send `Ack`s.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Apply `items` in order and `record` as one sink transaction on
    /// `worker`, then report `Applied` or `SinkFailed`.
    Apply {
        /// Names the batch in the report.
        batch: BatchId,
        /// The idle worker to use.
        worker: usize,
        /// What to apply, in order.
        items: Vec<Item>,
        /// The position to write with it.
        record: Record,
    },
    /// Store the position apart from rows, then report `PositionStored`.
    StorePosition {
        /// Everything below is applied.
        watermark: Lsn,
        /// Transactions applied at or above it.
        applied_above: Vec<Lsn>,
        /// The last schema change applied.
        schema: Option<SchemaPos>,
    },
    /// Tell the server everything up to `lsn` is durably applied.
    Ack {
        /// Durable up to and including.
        lsn: Lsn,
    },
    /// Open a stream.
    Connect {
        /// Its first LSN.
        from_lsn: Lsn,
        /// Its epoch.
        epoch: u64,
    },
    /// Stop (`false`) or resume (`true`) reading the socket.
    Pause {
        /// Whether to read.
        reading: bool,
    },
    /// Send a `Tick` at `at_ms` (a retry is due).
    RetryAt {
        /// The transaction waiting.
        lsn: Lsn,
        /// When.
        at_ms: u64,
    },
    /// Store a dead letter durably; it stays unapplied.
    DeadLetter {
        /// The transaction.
        lsn: Lsn,
        /// Its last error.
        error: SinkError,
        /// Attempts made.
        attempts: u32,
    },
    /// Forget a stored dead letter (the operator retried or skipped it).
    DeadLetterCleared {
        /// The transaction.
        lsn: Lsn,
    },
    /// A transaction waited past the causal timeout and is applied anyway,
    /// out of order on `slots` (for metrics and the log).
    CausalFallback {
        /// The transaction.
        lsn: Lsn,
        /// The slots whose order it skipped.
        slots: Vec<u32>,
    },
    /// Ask the sink whether each origin of the transaction at `lsn` is
    /// applied there (§8); answer with [`Input::OriginsApplied`] when all
    /// are, or when the sink cannot tell. Asked again every
    /// `ORIGIN_RECHECK_MS` while the transaction waits.
    CheckOrigins {
        /// The decorator's transaction.
        lsn: Lsn,
        /// Its origins.
        origins: Vec<aqueduct_publish::Origin>,
    },
    /// A transaction waited past the causal timeout for its origins and
    /// is applied anyway (for metrics and the log).
    OriginFallback {
        /// The transaction.
        lsn: Lsn,
        /// The origins not known applied.
        origins: Vec<aqueduct_publish::Origin>,
    },
    /// A bootstrap step.
    Bootstrap(BootstrapStep),
    /// Stop: an operator is needed.
    Fail {
        /// Why.
        reason: String,
    },
}

/// The agent's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// The mode the agent subscribes in.
    pub mode: Mode,
    /// Workers (global mode uses one).
    pub workers: usize,
    /// Where the sink keeps positions.
    pub position: PositionMode,
    /// `--causal-timeout`; `None`: strict causal; `Some(0)`: weak.
    pub causal_timeout_ms: Option<u64>,
    /// The server id stored with the subscription; another is refused.
    pub server_id: Option<String>,
    /// Window bound in transactions.
    pub window_txns_max: usize,
    /// Window bound in bytes.
    pub window_bytes_max: usize,
    /// Source transactions per batch.
    pub batch_txns_max: usize,
    /// Rows per batch.
    pub batch_rows_max: usize,
    /// How often the position is stored.
    pub store_interval_ms: u64,
    /// Dead letters held before the agent stops.
    pub dead_letters_max: usize,
}

impl AgentConfig {
    /// The defaults of §7 for `mode` and a sink keeping positions so.
    pub fn new(mode: Mode, position: PositionMode) -> AgentConfig {
        AgentConfig {
            mode,
            workers: WORKERS_DEFAULT,
            position,
            causal_timeout_ms: None,
            server_id: None,
            window_txns_max: AGENT_WINDOW_TXNS_MAX,
            window_bytes_max: AGENT_WINDOW_BYTES_MAX,
            batch_txns_max: APPLY_BATCH_TXNS_MAX,
            batch_rows_max: APPLY_BATCH_ROWS_MAX,
            store_interval_ms: WATERMARK_STORE_INTERVAL_MS,
            dead_letters_max: DEAD_LETTERS_MAX,
        }
    }

    /// Refuses settings outside the limits; smaller bounds than the
    /// limits are allowed (the simulator uses them).
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 || self.workers > WORKERS_MAX {
            return Err(format!("workers must be 1 to {WORKERS_MAX}"));
        }
        if let Some(t) = self.causal_timeout_ms {
            if t > 0 && t < RETRY_MAX_MS {
                return Err(format!(
                    "a causal timeout below {RETRY_MAX_MS} ms would turn a transient sink outage into weak order"
                ));
            }
        }
        let bounded = |v: usize, max: usize| v >= 1 && v <= max;
        if !bounded(self.window_txns_max, AGENT_WINDOW_TXNS_MAX)
            || !bounded(self.window_bytes_max, AGENT_WINDOW_BYTES_MAX)
            || !bounded(self.batch_txns_max, APPLY_BATCH_TXNS_MAX)
            || !bounded(self.batch_rows_max, APPLY_BATCH_ROWS_MAX)
            || !bounded(self.dead_letters_max, DEAD_LETTERS_MAX)
        {
            return Err("a bound is outside the agent's limits".into());
        }
        if self.store_interval_ms == 0 || self.store_interval_ms > WATERMARK_STORE_INTERVAL_MS {
            return Err("the position store interval is outside its limit".into());
        }
        Ok(())
    }

    /// Workers actually used: one in global mode.
    pub fn effective_workers(&self) -> usize {
        if self.mode == Mode::Global {
            1
        } else {
            self.workers
        }
    }
}
