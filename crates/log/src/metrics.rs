//! Counters the log keeps for `/metrics`: cheap atomics, read as a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the sync latency histogram buckets.
pub const SYNC_BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

#[derive(Debug, Default)]
pub struct LogMetrics {
    pub batches: AtomicU64,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_micros_total: AtomicU64,
    /// Cumulative counts per bucket of `SYNC_BUCKETS`, plus one for +Inf.
    pub sync_buckets: [AtomicU64; SYNC_BUCKETS.len() + 1],
    pub compaction_passes: AtomicU64,
    pub segments_sealed: AtomicU64,
}

impl LogMetrics {
    pub(crate) fn appended(&self, records: usize, bytes: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.records.fetch_add(records as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn synced(&self, took: Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_micros_total
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let i = SYNC_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(SYNC_BUCKETS.len());
        self.sync_buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Cumulative bucket counts, as Prometheus histograms expect.
    pub fn sync_histogram(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        let mut out = Vec::with_capacity(SYNC_BUCKETS.len() + 1);
        for (i, b) in self.sync_buckets.iter().enumerate() {
            total += b.load(Ordering::Relaxed);
            out.push((SYNC_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), total));
        }
        out
    }
}
