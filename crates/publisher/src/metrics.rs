//! Counters of each publication's streams, for `/metrics`
//! (`docs/publications.md`, section 9). The subscribers' positions and
//! lag come from their durable consumers in the change feed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aqueduct_publish::WireMessage;

/// One publication's counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// `txn` lines sent (frames counted once per transaction).
    pub messages: AtomicU64,
    /// Changes sent in them.
    pub changes: AtomicU64,
    /// `schema` lines sent.
    pub schema_messages: AtomicU64,
    /// Bytes of every line sent, bootstrap included.
    pub bytes: AtomicU64,
    /// Streams open now.
    pub streams: AtomicU64,
    /// Bootstraps started, and the rows they sent.
    pub bootstraps: AtomicU64,
    pub bootstrap_rows: AtomicU64,
}

impl Counters {
    /// Counts one line sent.
    pub fn sent(&self, line: &WireMessage, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        match line {
            WireMessage::Txn(t) => {
                if t.frame == 0 {
                    self.messages.fetch_add(1, Ordering::Relaxed);
                }
                self.changes
                    .fetch_add(t.changes.len() as u64, Ordering::Relaxed);
            }
            WireMessage::Schema(_) => {
                self.schema_messages.fetch_add(1, Ordering::Relaxed);
            }
            WireMessage::Row(_) => {
                self.bootstrap_rows.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Counts an open stream while it lives.
pub struct StreamGauge(Arc<Counters>);

impl StreamGauge {
    pub fn new(counters: Arc<Counters>) -> StreamGauge {
        counters.streams.fetch_add(1, Ordering::Relaxed);
        StreamGauge(counters)
    }
}

impl Drop for StreamGauge {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every publication's counters, by name (kept for publications that
/// were dropped: counters only grow).
#[derive(Debug, Default)]
pub struct PublicationMetrics {
    by_name: Mutex<BTreeMap<String, Arc<Counters>>>,
}

impl PublicationMetrics {
    /// The counters of `publication`.
    pub fn of(&self, publication: &str) -> Arc<Counters> {
        self.by_name
            .lock()
            .expect("publication metrics")
            .entry(publication.to_string())
            .or_default()
            .clone()
    }

    /// All of them, by name.
    pub fn all(&self) -> Vec<(String, Arc<Counters>)> {
        self.by_name
            .lock()
            .expect("publication metrics")
            .iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect()
    }
}
