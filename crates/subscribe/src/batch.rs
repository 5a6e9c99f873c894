//! What a worker applies: the items of one sink transaction and the
//! position record written with them (`docs/publications.md` §5.3).

use std::sync::Arc;

use aqueduct_publish::{Lsn, SchemaMessage, TxnMessage};

/// Names one `Apply`; the shell reports its outcome with it.
pub type BatchId = u64;

/// Where a schema message sits in the stream: its LSN and its place among
/// the schema messages at that LSN. Schema messages are applied in stream
/// order, so the last one applied is all a sink needs to store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchemaPos {
    /// The schema change's LSN.
    pub lsn: Lsn,
    /// Its index among the schema messages at `lsn`.
    pub seq: u32,
}

/// One unit of a sink transaction, applied in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A whole source transaction (its frames joined, `deps` of frame 0).
    Txn(Arc<TxnMessage>),
    /// A schema change, always alone in its sink transaction.
    Schema(Arc<SchemaMessage>, SchemaPos),
    /// A dead letter the operator skipped: recorded as applied, no rows.
    Skip {
        /// The skipped transaction's LSN.
        lsn: Lsn,
    },
}

impl Item {
    /// The LSN the item is recorded under.
    pub fn lsn(&self) -> Lsn {
        match self {
            Item::Txn(t) => t.lsn,
            Item::Schema(s, _) => s.lsn,
            Item::Skip { lsn } => *lsn,
        }
    }

    /// Row changes in the item.
    pub fn rows(&self) -> usize {
        match self {
            Item::Txn(t) => t.changes.len(),
            Item::Schema(..) | Item::Skip { .. } => 0,
        }
    }
}

/// The position written in the same sink transaction as a batch's rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// LSNs to insert into `applied` (empty for sinks that store positions
    /// apart).
    pub applied: Vec<Lsn>,
    /// When set: `subscription.watermark` becomes it, and `applied` rows
    /// below it are deleted. Everything below it is already committed.
    pub watermark: Option<Lsn>,
    /// When set: the last schema message applied (`subscription.schema_lsn`).
    pub schema: Option<SchemaPos>,
}

impl Record {
    /// Nothing to record.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.watermark.is_none() && self.schema.is_none()
    }
}

/// What a sink durably holds about a subscription's position; the agent
/// starts from it (§5.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// Everything below it is applied.
    pub watermark: Lsn,
    /// Transactions at or above the watermark already applied.
    pub applied_above: Vec<Lsn>,
    /// The last schema message applied.
    pub schema: Option<SchemaPos>,
    /// Dead letters with their attempts so far.
    pub dead_letters: Vec<(Lsn, u32)>,
}

/// Where a sink's copy came from (`docs/publications.md` §5.6): the
/// server it was bootstrapped from, the bootstrap's LSN `S`, and the head
/// the first stream after it was given (the copy is in sync once the
/// watermark is past it). Stored apart from the position; a sink that
/// cannot store it has none.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    /// The server's id, as its stream's `epoch` line gives it.
    #[serde(default)]
    pub server_id: Option<String>,
    /// The LSN `S` of the last whole bootstrap.
    #[serde(default)]
    pub boot_lsn: Option<Lsn>,
    /// The `bootstrap_until` of the first stream after that bootstrap.
    #[serde(default)]
    pub sync_lsn: Option<Lsn>,
}

impl Origin {
    /// Whether the copy is still catching up after its bootstrap, given
    /// the watermark.
    pub fn bootstrapping(&self, watermark: Lsn) -> bool {
        match (self.boot_lsn, self.sync_lsn) {
            (Some(_), None) => true,
            (_, Some(h)) => watermark <= h,
            (None, None) => false,
        }
    }
}
