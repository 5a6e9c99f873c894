//! What readers of a view did: hits, misses, how long the upqueries that
//! filled the misses took, and how many keys were evicted. Shared by the
//! view's readers (on every read) and the dataflow worker (on evictions),
//! reported by `SHOW VIEWS` and `/metrics`.
//!
//! A hit is counted on every read, from every thread, so the hit counter is
//! striped: each thread adds to its own cache line and a report sums them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Counter stripes: more than the cores a reader is likely to run on.
const STRIPES: usize = 16;

#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// A counter many threads add to without sharing a cache line.
#[derive(Default)]
pub struct StripedCounter {
    stripes: [Padded; STRIPES],
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: Cell<usize> = Cell::new(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES);
}

impl StripedCounter {
    pub fn add(&self, n: u64) {
        let i = STRIPE.with(Cell::get);
        self.stripes[i].0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }
}

/// Upper bounds of the upquery latency buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 13] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// A latency histogram with fixed buckets (Prometheus style: a count per
/// upper bound, plus one above the last, a sum and a count).
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

/// A copy of a histogram's counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Count per bucket of [`LATENCY_BUCKETS_US`], then the count above it.
    pub buckets: Vec<u64>,
    pub sum_us: u64,
    pub count: u64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_us: self.sum_us.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

impl HistogramSnapshot {
    /// The upper bound of the bucket holding quantile `q` (0..=1), in
    /// microseconds; `None` with no samples or past the last bucket.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return LATENCY_BUCKETS_US.get(i).copied();
            }
        }
        None
    }
}

/// The read statistics of one view.
#[derive(Default)]
pub struct ReadStats {
    pub hits: StripedCounter,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Keys filled by upqueries.
    pub fills: AtomicU64,
    /// Time from a read's miss to the filled key being readable.
    pub upquery: Histogram,
}

/// A copy of a view's read statistics.
#[derive(Clone, Debug, Default)]
pub struct ReadStatsSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub fills: u64,
    pub upquery: HistogramSnapshot,
}

impl ReadStats {
    pub fn snapshot(&self) -> ReadStatsSnapshot {
        ReadStatsSnapshot {
            hits: self.hits.get(),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            upquery: self.upquery.snapshot(),
        }
    }
}

impl ReadStatsSnapshot {
    /// Adds another view's statistics (a view read through several readers).
    pub fn add(&mut self, other: &ReadStatsSnapshot) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.evictions += other.evictions;
        self.fills += other.fills;
        if self.upquery.buckets.is_empty() {
            self.upquery.buckets = vec![0; other.upquery.buckets.len()];
        }
        for (a, b) in self.upquery.buckets.iter_mut().zip(&other.upquery.buckets) {
            *a += b;
        }
        self.upquery.sum_us += other.upquery.sum_us;
        self.upquery.count += other.upquery.count;
    }

    /// Hits over all reads, 1 when nothing was read.
    pub fn hit_rate(&self) -> f64 {
        let reads = self.hits + self.misses;
        if reads == 0 {
            1.0
        } else {
            self.hits as f64 / reads as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_their_stripes_and_quantiles_name_bucket_bounds() {
        let s = ReadStats::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        s.hits.add(1);
                    }
                });
            }
        });
        assert_eq!(s.hits.get(), 4000);
        for us in [40, 80, 90, 3_000] {
            s.upquery.record(Duration::from_micros(us));
        }
        let snap = s.snapshot().upquery;
        assert_eq!(snap.count, 4);
        assert_eq!(snap.quantile_us(0.5), Some(100));
        assert_eq!(snap.quantile_us(1.0), Some(5_000));
        assert_eq!(HistogramSnapshot::default().quantile_us(0.5), None);
    }
}
