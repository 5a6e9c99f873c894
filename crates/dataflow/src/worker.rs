//! The dataflow worker: committed batches are handed to a thread of their
//! own, so commits do not wait for views and the dataflow runs on the
//! second core while the first applies and logs the next writes.
//!
//! Committers `submit` a batch (an LSN and its per-table deltas) and return
//! at once. The worker takes everything queued, merges consecutive batches
//! into one (a view that skips the intermediate states ends in the same
//! state: deltas add up), runs it through the graph and publishes the views
//! at the last batch's LSN. Readers that must see a write wait for the
//! processed LSN to reach it (`wait_processed`).
//!
//! Changing the graph (a new view, a dropped one) needs it at a known LSN:
//! `drain` waits until every submitted batch is processed and hands out the
//! graph. Its caller must hold the commit lock, so nothing new is submitted
//! meanwhile and the graph matches the tables exactly.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aqueduct_expr::SqlError;

use crate::graph::{Graph, TableId};
use crate::view::Lsn;
use crate::Delta;

/// Most rows merged into one pass through the graph: enough to amortise
/// publishing, few enough that a reader waiting for its write is not stuck
/// behind a huge merged batch.
pub const MAX_MERGED_ROWS: usize = 100_000;

/// One committed batch.
struct Batch {
    lsn: Lsn,
    changes: Vec<(TableId, Delta)>,
}

#[derive(Default)]
struct Queue {
    batches: VecDeque<Batch>,
    /// The worker is running a batch it took from the queue.
    busy: bool,
    /// LSN of the last batch processed and published.
    processed: Lsn,
    /// Set when the worker died: what readers are told.
    broken: Option<String>,
    closed: bool,
}

struct Shared {
    graph: Mutex<Graph>,
    queue: Mutex<Queue>,
    /// Signalled when a batch is queued or the worker is closed.
    work: Condvar,
    /// Signalled when a batch is processed.
    done: Condvar,
}

/// Owns the graph and the thread that keeps it current.
pub struct Worker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Counters for `/metrics` and `SHOW VIEWS`.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkerStats {
    pub queued_batches: usize,
    pub processed: Lsn,
    /// A batch is being run now.
    pub busy: bool,
}

impl WorkerStats {
    /// Whether every write up to `lsn` is reflected (the same rule as
    /// [`Worker::wait_processed`]: an idle worker with nothing queued has
    /// everything submitted).
    pub fn reflects(&self, lsn: Lsn) -> bool {
        self.processed >= lsn || (self.queued_batches == 0 && !self.busy)
    }
}

impl Worker {
    /// Starts the worker thread over `graph`.
    pub fn start(graph: Graph) -> Worker {
        let processed = graph.processed();
        let shared = Arc::new(Shared {
            graph: Mutex::new(graph),
            queue: Mutex::new(Queue {
                processed,
                ..Queue::default()
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("aqueduct-dataflow".into())
            .spawn(move || run(&s))
            .expect("spawn the dataflow worker");
        Worker {
            shared,
            thread: Some(thread),
        }
    }

    /// Queues a committed batch. Batches must be submitted in LSN order.
    pub fn submit(&self, lsn: Lsn, changes: Vec<(TableId, Delta)>) {
        let mut q = lock(&self.shared.queue);
        let last = q.batches.back().map(|b| b.lsn).unwrap_or(q.processed);
        assert!(lsn >= last, "batch {lsn} submitted after {last}");
        q.batches.push_back(Batch { lsn, changes });
        self.shared.work.notify_one();
    }

    /// Waits until every submitted batch is processed and returns the graph,
    /// as of the last one. The caller holds the commit lock (see the module
    /// comment), so the graph stays at that LSN while the guard lives.
    pub fn drain(&self) -> MutexGuard<'_, Graph> {
        let mut q = lock(&self.shared.queue);
        while (q.busy || !q.batches.is_empty()) && q.broken.is_none() {
            q = self.shared.done.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        drop(q);
        lock(&self.shared.graph)
    }

    /// The graph, as of whatever the worker has processed (for reading its
    /// structure, or adding a reader that starts from an operator's output).
    pub fn graph(&self) -> MutexGuard<'_, Graph> {
        lock(&self.shared.graph)
    }

    /// LSN up to which every batch is processed and published.
    pub fn processed(&self) -> Lsn {
        lock(&self.shared.queue).processed
    }

    /// Waits until every batch up to `lsn` is processed, for at most
    /// `timeout`. An error names how far behind the views are.
    pub fn wait_processed(&self, lsn: Lsn, timeout: Duration) -> Result<(), SqlError> {
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.shared.queue);
        loop {
            if let Some(why) = &q.broken {
                return Err(SqlError::new(
                    "XX000",
                    format!("the views stopped being maintained: {why}; restart the server to rebuild them"),
                ));
            }
            // A write with nothing for the dataflow may never be submitted:
            // an empty queue means everything committed so far is reflected.
            if q.processed >= lsn || (q.batches.is_empty() && !q.busy) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(SqlError::new(
                    "57014",
                    format!(
                        "views are still at LSN {} after waiting {:?} for LSN {lsn} ({} batches queued); the dataflow is overloaded",
                        q.processed,
                        timeout,
                        q.batches.len()
                    ),
                ));
            }
            q = self
                .shared
                .done
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    pub fn stats(&self) -> WorkerStats {
        let q = lock(&self.shared.queue);
        WorkerStats {
            queued_batches: q.batches.len(),
            processed: q.processed,
            busy: q.busy,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks is caught in `run` and
    // recorded as `broken`; the data behind it is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The worker loop: take what is queued, merge, process, publish, repeat.
fn run(shared: &Shared) {
    loop {
        let (lsn, changes) = {
            let mut q = lock(&shared.queue);
            while q.batches.is_empty() && !q.closed {
                q = shared.work.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.batches.is_empty() {
                return;
            }
            q.busy = true;
            merge(&mut q.batches)
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            lock(&shared.graph).process(lsn, changes);
        }));
        let mut q = lock(&shared.queue);
        q.busy = false;
        q.processed = lsn;
        if let Err(panic) = outcome {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a dataflow operator panicked".into());
            tracing::error!("the dataflow worker stopped: {why}");
            q.broken = Some(why);
            q.batches.clear();
            shared.done.notify_all();
            return;
        }
        shared.done.notify_all();
    }
}

/// Takes queued batches from the front, up to [`MAX_MERGED_ROWS`] rows (at
/// least one batch), and merges them into one at the last one's LSN.
fn merge(queue: &mut VecDeque<Batch>) -> (Lsn, Vec<(TableId, Delta)>) {
    let first = queue.pop_front().expect("a queued batch");
    let mut lsn = first.lsn;
    let mut rows: usize = first.changes.iter().map(|(_, d)| d.len()).sum();
    if queue.is_empty() {
        return (lsn, first.changes);
    }
    let mut per_table: HashMap<TableId, Delta> = first.changes.into_iter().collect();
    while let Some(next) = queue.front() {
        let n: usize = next.changes.iter().map(|(_, d)| d.len()).sum();
        if rows + n > MAX_MERGED_ROWS {
            break;
        }
        let next = queue.pop_front().expect("just seen");
        rows += n;
        lsn = next.lsn;
        for (t, d) in next.changes {
            per_table.entry(t).or_default().extend(d);
        }
    }
    let mut changes: Vec<(TableId, Delta)> = per_table.into_iter().collect();
    changes.sort_by_key(|(t, _)| *t);
    (lsn, changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_values::Value;

    fn row(v: &[i64]) -> crate::Row {
        v.iter().map(|&i| Value::Int(i)).collect()
    }

    #[test]
    fn batches_are_processed_in_order_and_readers_can_wait_for_them() {
        let mut g = Graph::new();
        let src = g.source(1, "t");
        let (_, reader) = g.view("v", src, vec![0]);
        let worker = Worker::start(g);
        for i in 1..=200 {
            worker.submit(i, vec![(1, vec![(row(&[i as i64 % 7, i as i64]), 1)])]);
        }
        worker.wait_processed(200, Duration::from_secs(10)).unwrap();
        let (rows, watermark) = reader.read(|s, w| (s.row_count(), w)).unwrap();
        assert_eq!((rows, watermark), (200, 200));
        // Draining hands out the graph with nothing left to process.
        worker.submit(201, vec![(1, vec![(row(&[0, 7]), -1)])]);
        let g = worker.drain();
        assert_eq!(g.processed(), 201);
        drop(g);
        assert_eq!(reader.read(|s, _| s.row_count()).unwrap(), 199);
    }

    #[test]
    fn merging_keeps_the_last_lsn_and_every_row() {
        let mut q: VecDeque<Batch> = (1..=3)
            .map(|i| Batch {
                lsn: i,
                changes: vec![(i % 2, vec![(row(&[i as i64]), 1)])],
            })
            .collect();
        let (lsn, changes) = merge(&mut q);
        assert_eq!(lsn, 3);
        assert!(q.is_empty());
        let total: usize = changes.iter().map(|(_, d)| d.len()).sum();
        assert_eq!(total, 3);
        assert_eq!(changes[0].0, 0);
    }
}
