//! Materialized views: the leaves of the dataflow, read without locks.
//!
//! A view keeps its rows grouped by a key (the columns its readers look up
//! by). The single writer (the dataflow) applies a batch's changes to one copy
//! and publishes; readers keep reading the other copy meanwhile, so a reader
//! never waits for a writer and never sees half of a batch (left-right).
//!
//! Every view knows its watermark: the LSN of the last write it reflects. A
//! view is republished only when a batch changes it; the graph's shared
//! "processed" LSN covers the batches that did not, so a reader takes the
//! larger of the two (reading the shared LSN *before* entering the copy, so
//! that every batch it covers is already published).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use aqueduct_expr::SqlError;
use aqueduct_values::Value;
use left_right::{Absorb, ReadHandle, ReadHandleFactory, WriteHandle};

use crate::stats::ReadStats;
use crate::tap::Tap;
use crate::{row_bytes, Delta, FastMap, Row};

/// The LSN type of the log (kept as a plain integer here to stay below the log).
pub type Lsn = u64;

/// A view's failure: an operator on its path failed (say, a division by zero
/// in a projection of a newly written row). Reads report it; the rest of the
/// graph stays correct.
#[derive(Clone, Debug)]
pub struct ViewFailure {
    pub lsn: Lsn,
    pub error: SqlError,
}

/// The rows under one key, and for a partial view when the key was last
/// read (a tick of [`READ_CLOCK`], shared by both copies of the view).
#[derive(Clone, Debug, Default)]
struct Bag {
    rows: BTreeMap<Row, i64>,
    stamp: Option<Arc<AtomicU32>>,
}

/// A coarse clock for least-recently-read eviction: the dataflow worker
/// advances it, a read of a partial view's key stamps the key with it.
pub static READ_CLOCK: AtomicU32 = AtomicU32::new(1);

/// Marks a key read now. The stamp is written only when it changes, so a
/// hot key read by many threads at once stays in their caches unshared.
fn touch(stamp: &AtomicU32) {
    let now = READ_CLOCK.load(Ordering::Relaxed);
    if stamp.load(Ordering::Relaxed) != now {
        stamp.store(now, Ordering::Relaxed);
    }
}

#[derive(Clone, Debug, Default)]
pub struct ViewState {
    rows: FastMap<Vec<Value>, Bag>,
    /// Holds only the keys that were filled (by upqueries): a key it does
    /// not hold is unknown, not empty.
    partial: bool,
    watermark: Lsn,
    row_count: i64,
    bytes: i64,
    failure: Option<ViewFailure>,
    /// The keys in order, for views read by ranges of their last key column.
    ordered: Option<BTreeSet<Vec<Value>>>,
}

impl ViewState {
    /// The rows stored under `key`, each repeated by its multiplicity.
    pub fn lookup(&self, key: &[Value]) -> Vec<Row> {
        let mut out = Vec::new();
        self.for_each(key, |r| out.push(r.clone()));
        out
    }

    /// Calls `f` on every row stored under `key` (once per copy), without
    /// cloning anything. False when the view is partial and does not hold
    /// the key (then `f` is not called: the rows are unknown).
    pub fn for_each(&self, key: &[Value], mut f: impl FnMut(&Row)) -> bool {
        match self.rows.get(key) {
            Some(bag) => {
                if let Some(stamp) = &bag.stamp {
                    touch(stamp);
                }
                for (r, &n) in &bag.rows {
                    for _ in 0..n.max(0) {
                        f(r);
                    }
                }
                true
            }
            None => !self.partial,
        }
    }

    /// Whether the view holds every key (it is not partial).
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// Whether a read of `key` is answered without an upquery.
    pub fn holds(&self, key: &[Value]) -> bool {
        !self.partial || self.rows.contains_key(key)
    }

    /// Calls `f` on every row whose key starts with `prefix` and whose next
    /// (last) key value lies between `low` and `high` — never NULL, which
    /// no comparison matches. Only for views made with ordered keys.
    pub fn for_each_in_range(
        &self,
        prefix: &[Value],
        low: Bound<&Value>,
        high: Bound<&Value>,
        mut f: impl FnMut(&Row),
    ) {
        let keys = self
            .ordered
            .as_ref()
            .expect("a range read of a view without ordered keys");
        let with = |v: &Value| {
            let mut k = prefix.to_vec();
            k.push(v.clone());
            k
        };
        let start = match low {
            Bound::Included(v) => Bound::Included(with(v)),
            Bound::Excluded(v) => Bound::Excluded(with(v)),
            Bound::Unbounded => Bound::Included(prefix.to_vec()),
        };
        for key in keys.range((start, Bound::Unbounded)) {
            // Every key has the same length: past the prefix is past the end.
            if !key.starts_with(prefix) {
                break;
            }
            debug_assert_eq!(key.len(), prefix.len() + 1, "the range column is last");
            let last = &key[prefix.len()];
            let below = match high {
                Bound::Included(h) => last <= h,
                Bound::Excluded(h) => last < h,
                Bound::Unbounded => true,
            };
            // NULL sorts after every value: past the high end, or the end.
            if !below || last.is_null() {
                break;
            }
            self.for_each(key, &mut f);
        }
    }

    /// Every row, in key order (for scans and tests).
    pub fn all(&self) -> Vec<Row> {
        let mut keys: Vec<&Vec<Value>> = self.rows.keys().collect();
        keys.sort();
        keys.into_iter().flat_map(|k| self.lookup(k)).collect()
    }

    /// The LSN of the last batch that changed this copy (see
    /// [`ViewReader::read`] for the view's watermark).
    pub fn watermark(&self) -> Lsn {
        self.watermark
    }

    pub fn row_count(&self) -> u64 {
        self.row_count.max(0) as u64
    }

    pub fn key_count(&self) -> usize {
        self.rows.len()
    }

    /// Approximate bytes held: keys and distinct rows with their payloads.
    pub fn bytes(&self) -> u64 {
        self.bytes.max(0) as u64
    }

    /// Why the view cannot be read, if an operator above it failed.
    pub fn failure(&self) -> Option<&ViewFailure> {
        self.failure.as_ref()
    }
}

#[derive(Clone, Debug)]
pub enum ViewOp {
    Change {
        key: Vec<Value>,
        row: Row,
        weight: i64,
    },
    Watermark(Lsn),
    Fail(ViewFailure),
    /// A partial view now holds `key` (its rows follow as changes).
    Fill {
        key: Vec<Value>,
        stamp: Arc<AtomicU32>,
    },
    /// A partial view no longer holds `key` (its rows were retracted first).
    Evict {
        key: Vec<Value>,
    },
}

const ENTRY_OVERHEAD: i64 = crate::ENTRY_OVERHEAD as i64;

impl Absorb<ViewOp> for ViewState {
    fn absorb_first(&mut self, op: &mut ViewOp, _other: &Self) {
        match op {
            ViewOp::Change { key, row, weight } => {
                debug_assert!(
                    !self.partial || self.rows.contains_key(key),
                    "a change to a key the partial view does not hold"
                );
                let bag = match self.rows.get_mut(key) {
                    Some(bag) => &mut bag.rows,
                    None => {
                        self.bytes += row_bytes(key) as i64 + ENTRY_OVERHEAD;
                        if let Some(keys) = &mut self.ordered {
                            keys.insert(key.clone());
                            self.bytes += row_bytes(key) as i64 + ENTRY_OVERHEAD;
                        }
                        &mut self.rows.entry(key.clone()).or_default().rows
                    }
                };
                let n = match bag.get_mut(row) {
                    Some(n) => n,
                    None => {
                        self.bytes += row_bytes(row) as i64 + ENTRY_OVERHEAD;
                        bag.entry(row.clone()).or_insert(0)
                    }
                };
                *n += *weight;
                if *n == 0 {
                    bag.remove(row);
                    self.bytes -= row_bytes(row) as i64 + ENTRY_OVERHEAD;
                }
                // A partial view keeps a key it holds even with no rows:
                // it knows the key has none.
                if bag.is_empty() && !self.partial {
                    self.rows.remove(key);
                    self.bytes -= row_bytes(key) as i64 + ENTRY_OVERHEAD;
                    if let Some(keys) = &mut self.ordered {
                        keys.remove(key);
                        self.bytes -= row_bytes(key) as i64 + ENTRY_OVERHEAD;
                    }
                }
                self.row_count += *weight;
            }
            ViewOp::Watermark(lsn) => self.watermark = *lsn,
            ViewOp::Fill { key, stamp } => {
                debug_assert!(self.partial, "a fill of a full view");
                if !self.rows.contains_key(key) {
                    self.bytes += row_bytes(key) as i64 + ENTRY_OVERHEAD;
                    self.rows.insert(
                        key.clone(),
                        Bag {
                            rows: BTreeMap::new(),
                            stamp: Some(stamp.clone()),
                        },
                    );
                }
            }
            ViewOp::Evict { key } => {
                if let Some(bag) = self.rows.remove(key) {
                    debug_assert!(bag.rows.is_empty(), "an evicted key's rows were retracted");
                    self.bytes -= row_bytes(key) as i64 + ENTRY_OVERHEAD;
                    for (row, n) in bag.rows {
                        self.bytes -= row_bytes(&row) as i64 + ENTRY_OVERHEAD;
                        self.row_count -= n;
                    }
                }
            }
            ViewOp::Fail(f) => {
                self.failure.get_or_insert_with(|| f.clone());
            }
        }
    }

    fn sync_with(&mut self, first: &Self) {
        self.clone_from(first);
    }
}

/// The writer's end of a view, owned by the dataflow.
pub struct ViewWriter {
    key: Vec<usize>,
    partial: bool,
    stats: Arc<ReadStats>,
    handle: WriteHandle<ViewState, ViewOp>,
    /// Whether anything was applied since the last publish.
    dirty: bool,
    /// Where its changes are also kept, for a publication of the view.
    tap: Option<Arc<Tap>>,
    /// The LSN of the last publish (where a tap ends when the view goes).
    published: Lsn,
}

impl Drop for ViewWriter {
    fn drop(&mut self) {
        if let Some(tap) = &self.tap {
            tap.end(self.published);
        }
    }
}

/// Ids that tell readers apart in each thread's cache of read handles.
static NEXT_READER: AtomicU64 = AtomicU64::new(1);

/// Read handles this thread has taken, by reader id. A handle is cheap to
/// use but costly to make (it registers with the writer), so each thread
/// keeps one per view it reads.
const CACHED_HANDLES: usize = 4096;

thread_local! {
    static HANDLES: RefCell<FastMap<u64, ReadHandle<ViewState>>> = RefCell::new(FastMap::default());
}

/// The readers' end: clone freely and read from any thread.
#[derive(Clone)]
pub struct ViewReader {
    id: u64,
    key: Vec<usize>,
    factory: ReadHandleFactory<ViewState>,
    processed: Arc<AtomicU64>,
    partial: bool,
    stats: Arc<ReadStats>,
}

/// How a view keeps its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ViewKind {
    /// Every key, in a hash map.
    #[default]
    Full,
    /// Every key, also in order, for reads of a range of the last key column.
    Ordered,
    /// Only the keys filled by upqueries (see `docs/partial-state.md`).
    Partial,
}

/// Creates an empty view keyed by the columns `key` of its rows. `processed`
/// is the LSN up to which the dataflow has handled every batch.
pub fn new_view(key: Vec<usize>, processed: Arc<AtomicU64>) -> (ViewWriter, ViewReader) {
    new_view_with(key, processed, ViewKind::Full)
}

/// [`new_view`], keeping its rows as `kind` says.
pub fn new_view_with(
    key: Vec<usize>,
    processed: Arc<AtomicU64>,
    kind: ViewKind,
) -> (ViewWriter, ViewReader) {
    let partial = kind == ViewKind::Partial;
    let state = ViewState {
        ordered: (kind == ViewKind::Ordered).then(BTreeSet::new),
        partial,
        ..ViewState::default()
    };
    let stats = Arc::new(ReadStats::default());
    let (w, r) = left_right::new_from_empty::<ViewState, ViewOp>(state);
    (
        ViewWriter {
            key: key.clone(),
            partial,
            stats: stats.clone(),
            handle: w,
            dirty: false,
            tap: None,
            published: 0,
        },
        ViewReader {
            id: NEXT_READER.fetch_add(1, Ordering::Relaxed),
            key,
            factory: r.factory(),
            processed,
            partial,
            stats,
        },
    )
}

impl ViewWriter {
    pub fn key_columns(&self) -> &[usize] {
        &self.key
    }

    /// The view's tap, made now (as of `lsn`, where the view is) if it
    /// has none. Only a view in full has one.
    pub fn tap(&mut self, lsn: Lsn) -> Arc<Tap> {
        assert!(
            !self.partial,
            "a partial view's changes cover only its keys"
        );
        self.tap
            .get_or_insert_with(|| Arc::new(Tap::new(lsn)))
            .clone()
    }

    /// Whether the view has a tap.
    pub fn is_tapped(&self) -> bool {
        self.tap.is_some()
    }

    /// Applies a delta (not yet visible to readers).
    pub fn apply(&mut self, delta: &Delta) {
        if let Some(tap) = &self.tap {
            tap.record(delta);
        }
        for (row, w) in delta {
            let key = self.key.iter().map(|&c| row[c].clone()).collect();
            self.handle.append(ViewOp::Change {
                key,
                row: row.clone(),
                weight: *w,
            });
            self.dirty = true;
        }
    }

    /// Whether the view holds only the keys filled by upqueries.
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// The key of `row` in this view.
    pub fn key_of(&self, row: &[Value]) -> Vec<Value> {
        self.key.iter().map(|&c| row[c].clone()).collect()
    }

    /// A partial view starts holding `key`; the rows of the key follow as
    /// changes before the next publish.
    pub fn fill(&mut self, key: Vec<Value>, stamp: Arc<AtomicU32>) {
        assert!(self.partial, "only a partial view is filled");
        self.handle.append(ViewOp::Fill { key, stamp });
        self.stats.fills.fetch_add(1, Ordering::Relaxed);
        self.dirty = true;
    }

    /// A partial view stops holding `key`, whose rows were retracted.
    pub fn evict(&mut self, key: Vec<Value>) {
        assert!(self.partial, "only a partial view is evicted");
        self.handle.append(ViewOp::Evict { key });
        self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        self.dirty = true;
    }

    /// The published copy's approximate bytes.
    pub fn bytes(&self) -> u64 {
        self.handle.enter().map_or(0, |s| s.bytes())
    }

    /// Marks the view failed (visible at the next publish).
    pub fn fail(&mut self, failure: ViewFailure) {
        self.handle.append(ViewOp::Fail(failure));
        self.dirty = true;
    }

    /// Whether there is anything to publish.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Makes everything applied visible, as of `lsn`.
    pub fn publish(&mut self, lsn: Lsn) {
        // The tap has the changes before readers see the state they make.
        if let Some(tap) = &self.tap {
            tap.publish(lsn);
        }
        self.published = lsn;
        self.handle.append(ViewOp::Watermark(lsn));
        self.handle.publish();
        self.dirty = false;
    }
}

impl ViewReader {
    /// Tells this view apart from every other (also from a later view of
    /// the same name).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The key columns of the view's rows.
    pub fn key_columns(&self) -> &[usize] {
        &self.key
    }

    /// Whether the view holds only the keys filled by upqueries.
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// Its hits, misses, upquery latencies and evictions.
    pub fn stats(&self) -> &Arc<ReadStats> {
        &self.stats
    }

    /// A new handle (for a thread that wants to hold one itself).
    pub fn handle(&self) -> ReadHandle<ViewState> {
        self.factory.handle()
    }

    /// Runs `f` on the current published copy and the view's watermark,
    /// without taking any lock a writer holds. `None` if the view is gone.
    pub fn read<T>(&self, f: impl FnOnce(&ViewState, Lsn) -> T) -> Option<T> {
        // Read the processed LSN first: every batch up to it is published,
        // so the copy entered next reflects at least that much.
        let processed = self.processed.load(Ordering::Acquire);
        HANDLES.with(|cell| {
            let mut handles = cell.borrow_mut();
            if handles.len() >= CACHED_HANDLES && !handles.contains_key(&self.id) {
                handles.clear();
            }
            let handle = handles
                .entry(self.id)
                .or_insert_with(|| self.factory.handle());
            let guard = handle.enter()?;
            let watermark = processed.max(guard.watermark());
            Some(f(&guard, watermark))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_whole_batches_only() {
        let processed = Arc::new(AtomicU64::new(0));
        let (mut w, r) = new_view(vec![0], processed.clone());
        let h = r.handle();
        let row = |k: i64, v: i64| vec![Value::Int(k), Value::Int(v)];
        w.apply(&vec![(row(1, 10), 1), (row(1, 11), 2), (row(2, 20), 1)]);
        assert!(h
            .enter()
            .map(|s| s.lookup(&[Value::Int(1)]).is_empty())
            .unwrap_or(true));
        w.publish(7);
        {
            let s = h.enter().unwrap();
            assert_eq!(
                s.lookup(&[Value::Int(1)]),
                vec![row(1, 10), row(1, 11), row(1, 11)]
            );
            assert_eq!(s.watermark(), 7);
            assert_eq!(s.row_count(), 4);
        }
        w.apply(&vec![(row(1, 11), -2)]);
        w.publish(8);
        let s = h.enter().unwrap();
        assert_eq!(s.lookup(&[Value::Int(1)]), vec![row(1, 10)]);
        assert_eq!(s.key_count(), 2);
    }

    #[test]
    fn watermark_follows_the_processed_lsn_and_failures_and_bytes_are_published() {
        let processed = Arc::new(AtomicU64::new(0));
        let (mut w, r) = new_view(vec![0], processed.clone());
        let row = |k: i64, s: &str| vec![Value::Int(k), Value::Text(s.into())];
        w.apply(&vec![(row(1, "abc"), 2)]);
        w.publish(3);
        processed.store(3, Ordering::Release);
        let bytes = r.read(|s, _| s.bytes()).unwrap();
        assert!(bytes > 0);
        // A later batch that did not touch the view still moves its watermark.
        processed.store(9, Ordering::Release);
        assert_eq!(r.read(|s, lsn| (s.watermark(), lsn)), Some((3, 9)));
        w.apply(&vec![(row(1, "abc"), -2)]);
        w.fail(ViewFailure {
            lsn: 10,
            error: SqlError::new("22012", "division by zero"),
        });
        w.publish(10);
        r.read(|s, _| {
            assert_eq!(s.bytes(), 0, "every byte counted in is counted out");
            assert_eq!(s.failure().unwrap().error.code, "22012");
        })
        .unwrap();
    }

    #[test]
    fn range_reads_take_the_keys_between_the_bounds_and_never_null() {
        let (mut w, r) = new_view_with(vec![0, 1], Arc::new(AtomicU64::new(0)), ViewKind::Ordered);
        let row = |a: i64, b: Option<i64>| vec![Value::Int(a), b.map_or(Value::Null, Value::Int)];
        let mut delta = vec![];
        for a in 1..=2 {
            for b in [Some(1), Some(3), Some(5), None] {
                delta.push((row(a, b), 1));
            }
        }
        w.apply(&delta);
        w.publish(1);
        let read = |low: Bound<&Value>, high: Bound<&Value>| {
            r.read(|s, _| {
                let mut out = vec![];
                s.for_each_in_range(&[Value::Int(1)], low, high, |r| out.push(r[1].clone()));
                out
            })
            .unwrap()
        };
        let (one, three, five) = (Value::Int(1), Value::Int(3), Value::Int(5));
        assert_eq!(
            read(Bound::Excluded(&one), Bound::Unbounded),
            vec![three.clone(), five.clone()]
        );
        assert_eq!(
            read(Bound::Unbounded, Bound::Included(&three)),
            vec![one.clone(), three.clone()]
        );
        assert_eq!(
            read(Bound::Included(&three), Bound::Excluded(&five)),
            vec![three.clone()]
        );
        assert_eq!(read(Bound::Unbounded, Bound::Unbounded).len(), 3);
        // Deleting a key's last row takes it out of the order too.
        w.apply(&vec![(row(1, Some(3)), -1)]);
        w.publish(2);
        assert_eq!(read(Bound::Unbounded, Bound::Unbounded), vec![one, five]);
    }
}
