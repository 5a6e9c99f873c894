//! Publication streams, the parts that need no server: the dependency
//! tracker that orders a publication's messages and the wire lines that
//! carry them (`docs/publications.md` §3, §4, §7).
//!
//! Modules, each depending only on those above it:
//!
//! - [`limits`]: the server side's limits, with compile-time checks that
//!   they fit together;
//! - [`dep_hash`]: the stable hash of dependency object names;
//! - [`tracker`]: delivery modes, dependency objects, slots and the
//!   per-stream [`DepTracker`] (`ops`/`ver` per slot, one epoch at a time);
//! - [`wire`]: the NDJSON lines of a stream, `{"v": 1, "type": ...}`.
//!
//! Everything is pure: no sockets, threads or clocks. The server's stream
//! feeds the tracker each transaction's objects in LSN order and writes
//! the resulting [`WireMessage`]s; the subscriber parses them with
//! [`parse_line`].

pub mod dep_hash;
pub mod limits;
pub mod tracker;
pub mod wire;

pub use dep_hash::dep_hash;
#[cfg(feature = "planted-bugs")]
pub use tracker::TrackerBug;
pub use tracker::{
    slot_of, valid_dep_slots, DepObject, DepTracker, Deps, Mode, TxnObjects, UnknownMode,
};
pub use wire::{
    parse_line, AttributeType, BootstrapAnswer, BootstrapEndMessage, Change, ChangeOp,
    ChunkEndMessage, ChunkInfo, EpochMessage, ErrorMessage, Lsn, ObjectSchema, Origin,
    ProgressMessage, RowMessage, SchemaChange, SchemaMessage, TxnMessage, WireError, WireMessage,
    WIRE_VERSION, WIRE_VERSIONS_READ,
};

/// The prefix of the durable consumers (in the server's change feed) of
/// every subscriber of `publication`.
pub fn consumer_prefix(publication: &str) -> String {
    format!("pub:{publication}:")
}

/// The durable consumer that holds the server's log for subscriber
/// `subscriber` of `publication`.
pub fn consumer_name(publication: &str, subscriber: &str) -> String {
    format!("{}{subscriber}", consumer_prefix(publication))
}
