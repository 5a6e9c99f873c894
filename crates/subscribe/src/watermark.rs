//! The agent's position (`docs/publications.md` §5.3): how far the stream
//! got, what is applied above the watermark, what is durable in the sink,
//! and what was acknowledged. An acknowledgement never passes what is
//! durable.

use std::collections::BTreeSet;

use aqueduct_publish::Lsn;

use crate::batch::SchemaPos;

#[derive(Debug)]
pub(crate) struct Positions {
    /// The first LSN the stream has not covered yet.
    pub stream_pos: Lsn,
    /// Transactions applied at or above the watermark.
    pub applied_above: BTreeSet<Lsn>,
    /// The last schema message applied.
    pub schema_applied: Option<SchemaPos>,
    /// The watermark durable in the sink.
    pub durable: Lsn,
    /// The last LSN acknowledged.
    pub acked: Option<Lsn>,
    /// A watermark being stored.
    pub storing: Option<Lsn>,
    /// When the last store started.
    pub last_store_ms: u64,
}

impl Positions {
    /// Positions starting the stream at `start`, with `durable` stored.
    pub fn new(
        start: Lsn,
        durable: Lsn,
        applied_above: &[Lsn],
        schema: Option<SchemaPos>,
    ) -> Positions {
        assert!(start >= durable);
        Positions {
            stream_pos: start,
            applied_above: applied_above
                .iter()
                .copied()
                .filter(|&l| l >= start)
                .collect(),
            schema_applied: schema,
            durable,
            acked: None,
            storing: None,
            last_store_ms: 0,
        }
    }

    /// The watermark: the lowest LSN not known applied, given the first
    /// LSN of the oldest unapplied item in the window.
    pub fn watermark(&self, oldest_unapplied: Option<Lsn>) -> Lsn {
        let w = oldest_unapplied.map_or(self.stream_pos, |f| f.min(self.stream_pos));
        assert!(
            w >= self.durable,
            "watermark {w} below the durable one {}",
            self.durable
        );
        w
    }

    /// Forgets applied LSNs below the watermark.
    pub fn prune(&mut self, watermark: Lsn) {
        self.applied_above = self.applied_above.split_off(&watermark);
    }

    /// Whether the position should be stored now.
    pub fn store_due(&self, now_ms: u64, watermark: Lsn, interval_ms: u64) -> bool {
        watermark > self.durable
            && self.storing.is_none()
            && now_ms >= self.last_store_ms.saturating_add(interval_ms)
    }

    pub fn begin_store(&mut self, now_ms: u64, watermark: Lsn) {
        assert!(self.storing.is_none(), "two position stores at once");
        self.storing = Some(watermark);
        self.last_store_ms = now_ms;
    }

    /// A store failed: nothing changed in the sink.
    pub fn store_failed(&mut self) {
        self.storing = None;
    }

    /// A store of `watermark` is durable. Returns the LSN to acknowledge,
    /// if it moved.
    pub fn stored(&mut self, watermark: Lsn) -> Option<Lsn> {
        if self.storing == Some(watermark) {
            self.storing = None;
        }
        self.durable = self.durable.max(watermark);
        let lsn = self.durable.checked_sub(1)?;
        if self.acked.is_some_and(|a| a >= lsn) {
            return None;
        }
        assert!(
            lsn < self.durable,
            "ack {lsn} not below the durable watermark"
        );
        self.acked = Some(lsn);
        Some(lsn)
    }
}
