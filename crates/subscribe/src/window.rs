//! The window of received, unapplied stream items in stream order
//! (`docs/publications.md` §5.2), bounded by the agent.

use std::collections::{BTreeMap, BTreeSet};

use aqueduct_publish::{Lsn, TxnMessage};

use crate::batch::{BatchId, Item};

/// An item's place in the stream: its LSN, then schema messages at that
/// LSN by their index, then the transaction at that LSN ([`TXN_SUB`]).
pub(crate) type Key = (Lsn, u32);

/// The sub-key of a transaction.
pub(crate) const TXN_SUB: u32 = u32::MAX;

/// Where an item is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Frames still arriving.
    Assembling,
    /// Complete, some slot not yet done.
    Waiting,
    /// Complete, its origins (a decorator's source transactions on other
    /// servers, §8) not yet known applied in the sink.
    Origins,
    /// Applicable; waits for a worker.
    Ready,
    /// Being applied in a batch.
    InFlight(BatchId),
    /// Failed; due again at this time.
    Retry(u64),
    /// Dead-lettered; waits for an operator.
    Dead,
}

/// A transaction still being assembled, or a complete item.
#[derive(Clone, Debug)]
pub(crate) enum Content {
    Partial(TxnMessage),
    Done(Item),
}

/// One item of the window.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// The first LSN the item covers (a transaction's `first_lsn`).
    pub first_lsn: Lsn,
    pub content: Content,
    /// `(slot, need)` pairs; empty in weak mode and for schema messages.
    pub pairs: Vec<(u32, u64)>,
    pub bytes: usize,
    pub state: State,
    /// Failed attempts.
    pub attempts: u32,
    /// Applied alone (after its batch failed).
    pub solo: bool,
    /// When it started waiting (for the causal timeout).
    pub since_ms: u64,
}

impl Entry {
    /// The complete item, if complete.
    pub fn item(&self) -> Option<&Item> {
        match &self.content {
            Content::Done(item) => Some(item),
            Content::Partial(_) => None,
        }
    }

    pub fn is_schema(&self) -> bool {
        matches!(self.content, Content::Done(Item::Schema(..)))
    }
}

/// The entries in stream order, with their byte total and the keys of
/// schema messages (the barriers).
#[derive(Debug, Default)]
pub(crate) struct Window {
    entries: BTreeMap<Key, Entry>,
    bytes: usize,
    schemas: BTreeSet<Key>,
}

impl Window {
    pub fn insert(&mut self, key: Key, entry: Entry) {
        self.bytes += entry.bytes;
        if entry.is_schema() {
            self.schemas.insert(key);
        }
        let old = self.entries.insert(key, entry);
        assert!(old.is_none(), "stream item {key:?} received twice");
    }

    pub fn remove(&mut self, key: &Key) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        self.bytes -= e.bytes;
        self.schemas.remove(key);
        Some(e)
    }

    pub fn get(&self, key: &Key) -> Option<&Entry> {
        self.entries.get(key)
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut Entry> {
        self.entries.get_mut(key)
    }

    /// Adds bytes of a later frame.
    pub fn grow(&mut self, key: &Key, bytes: usize) {
        if let Some(e) = self.entries.get_mut(key) {
            e.bytes += bytes;
            self.bytes += bytes;
        }
    }

    /// Records that an entry became a schema-free item (a skipped one).
    pub fn replace_item(&mut self, key: &Key, item: Item) {
        if let Some(e) = self.entries.get_mut(key) {
            e.content = Content::Done(item);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn first(&self) -> Option<(&Key, &Entry)> {
        self.entries.iter().next()
    }

    pub fn last(&self) -> Option<(&Key, &Entry)> {
        self.entries.iter().next_back()
    }

    /// The first barrier in the window.
    pub fn first_schema(&self) -> Option<Key> {
        self.schemas.iter().next().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Entry)> {
        self.entries.iter()
    }

    /// Keeps only entries for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&Key, &Entry) -> bool) {
        let drop: Vec<Key> = self
            .entries
            .iter()
            .filter(|(k, e)| !keep(k, e))
            .map(|(k, _)| *k)
            .collect();
        for k in drop {
            self.remove(&k);
        }
    }
}
