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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aqueduct_expr::SqlError;

use crate::graph::{Graph, NodeId, TableId};
use crate::partial::{Entry, Fetch};
use crate::view::{Lsn, READ_CLOCK};
use crate::{Delta, Row};

/// A read of base rows: `(table, columns, values, counted)`, the rows of
/// the table whose columns equal the values, each weighted 1, or when
/// `counted` the first of them weighted by how many there are (the same
/// shape as the tables' `RowsAsk`, so asks pass through unconverted).
pub type Ask = (TableId, Vec<usize>, Row, bool);

/// Shared base rows with weights, as an upquery reads them.
pub type WeightedRows = Vec<(Arc<Row>, i64)>;

/// Weighted shared rows as a delta of owned rows (what operators take).
pub fn owned_delta(rows: &[(Arc<Row>, i64)]) -> Delta {
    rows.iter().map(|(r, w)| ((**r).clone(), *w)).collect()
}

/// Where upqueries get base rows: the tables, read at one consistent LSN.
pub trait Upstream: Send + Sync {
    /// For each ask, the table's rows it names with their weights, all as
    /// of one LSN, which is returned too. Every batch up to that LSN has
    /// been (or is about to be) submitted. The rows are shared (`Arc`), so
    /// the tables' lock is held only for the lookups, not for copying rows.
    fn rows_at(&self, asks: &[Ask]) -> Option<(Vec<WeightedRows>, Lsn)>;
}

/// Longest the worker waits for the batch of a write it saw in the tables
/// to be submitted (the commit that applied it is submitting it).
const SUBMIT_WAIT: Duration = Duration::from_secs(10);

/// Most keys evicted in one round: a round frees memory in one pass
/// through the operators; more rounds follow, each after the upqueries
/// waiting by then, so that readers do not wait behind a long eviction.
const MAX_EVICTIONS_PER_ROUND: usize = 256;

/// Over the limit, evict down to this share of it, so that the next few
/// fills do not each trigger an eviction round.
const EVICT_TO_PERCENT: u64 = 95;

/// A reader's request to fill keys of a partial view.
struct Request {
    ticket: u64,
    reader: u64,
    keys: Vec<Row>,
}

/// Most rows merged into one pass through the graph: enough to amortise
/// publishing, few enough that a reader waiting for its write is not stuck
/// behind a huge merged batch.
pub const MAX_MERGED_ROWS: usize = 100_000;
/// Committed batches queued for the worker before commits wait for room.
pub const MAX_QUEUED_BATCHES: usize = 4096;

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
    /// Upqueries waiting, without the graph, for the batch of a write
    /// they saw in the tables: a commit may take the graph meanwhile
    /// ([`Worker::drain`]).
    awaiting: usize,
    /// Batches taken off the queue and not yet processed (by the worker, or
    /// by a reader filling a key, which processes batches up to the LSN it
    /// read base rows at).
    in_flight: usize,
    /// LSN of the last batch processed and published.
    processed: Lsn,
    /// Set when the worker died: what readers are told.
    broken: Option<String>,
    closed: bool,
    /// LSN of the last batch submitted.
    submitted: Lsn,
    /// Upqueries waiting to be served, and the last ticket given and served.
    requests: Vec<Request>,
    issued: u64,
    answered: u64,
    /// Upqueries that could not be served, by ticket.
    refused: HashMap<u64, String>,
    /// The memory limit changed, or the last eviction round left state over
    /// it: check it even with nothing to process.
    limit_changed: bool,
    /// The last LSN the worker processes on its own: a batch after it
    /// waits until its commit is acknowledged ([`Worker::open_to`]), so
    /// the views never show a write a crash could undo and readers need
    /// not wait for other transactions' fsync. `Lsn::MAX` when ungated.
    gate: Lsn,
}

impl Queue {
    /// The first queued batch is at or before `lsn`.
    fn holds_up_to(&self, lsn: Lsn) -> bool {
        self.batches.front().is_some_and(|b| b.lsn <= lsn)
    }

    /// Every batch up to `lsn` is processed (a write with nothing for the
    /// dataflow is never submitted, so none queued up to it and nothing
    /// running means everything up to it is reflected).
    fn reflects(&self, lsn: Lsn) -> bool {
        self.processed >= lsn || (!self.holds_up_to(lsn) && !self.busy && self.in_flight == 0)
    }
}

struct Shared {
    graph: Mutex<Graph>,
    queue: Mutex<Queue>,
    /// `Queue::processed`, stored whenever it moves: a reader whose LSN is
    /// already reflected learns it without taking the queue's lock.
    processed: AtomicU64,
    /// `Queue::gate`, stored whenever it moves: a commit whose LSN the
    /// gate has passed opens nothing and takes no lock.
    gate: AtomicU64,
    /// Signalled when a batch is queued or the worker is closed.
    work: Condvar,
    /// Signalled when a batch is processed or an upquery answered.
    done: Condvar,
    upstream: RwLock<Option<Arc<dyn Upstream>>>,
    /// Bytes all view and operator state may take (0: no limit).
    memory_limit: AtomicU64,
    /// Commits that waited for room in the queue.
    backpressure_waits: AtomicU64,
    /// Bytes all view and operator state took after the last batch.
    state_bytes: AtomicU64,
    /// An eviction went over the limit and has not yet brought the state
    /// down to [`EVICT_TO_PERCENT`] of it: rounds go on below the limit.
    draining: AtomicBool,
    /// Keys readers just filled themselves: the next eviction round spares
    /// them, so each reader finds its key.
    protected: Mutex<HashSet<(NodeId, Row)>>,
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
    /// Bytes of all view and operator state after the last batch.
    pub state_bytes: u64,
    /// `--memory-limit` (0: none).
    pub memory_limit: u64,
    /// Commits that waited for room in the worker's queue.
    pub backpressure_waits: u64,
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
                submitted: processed,
                gate: Lsn::MAX,
                ..Queue::default()
            }),
            processed: AtomicU64::new(processed),
            gate: AtomicU64::new(Lsn::MAX),
            work: Condvar::new(),
            done: Condvar::new(),
            upstream: RwLock::new(None),
            memory_limit: AtomicU64::new(0),
            backpressure_waits: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            protected: Mutex::new(HashSet::new()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("aqueduct-dataflow".into())
            // Views' expressions and plans nest as deep as a statement may.
            .stack_size(aqueduct_expr::limits::SERVER_THREAD_STACK_BYTES)
            .spawn(move || run(&s))
            .expect("spawn the dataflow worker");
        Worker {
            shared,
            thread: Some(thread),
        }
    }

    /// Queues a committed batch. Batches must be submitted in LSN order.
    /// With [`MAX_QUEUED_BATCHES`] already waiting, it waits for the worker
    /// to take some: commits are called here under the commit lock, so a
    /// dataflow that cannot keep up slows writers down (backpressure)
    /// instead of growing its queue without bound.
    pub fn submit(&self, lsn: Lsn, changes: Vec<(TableId, Delta)>) {
        let mut q = lock(&self.shared.queue);
        if q.batches.len() >= MAX_QUEUED_BATCHES {
            self.shared
                .backpressure_waits
                .fetch_add(1, Ordering::Relaxed);
            while q.batches.len() >= MAX_QUEUED_BATCHES && q.broken.is_none() && !q.closed {
                q = self.shared.done.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        }
        let last = q.batches.back().map(|b| b.lsn).unwrap_or(q.processed);
        assert!(lsn >= last, "batch {lsn} submitted after {last}");
        q.batches.push_back(Batch { lsn, changes });
        q.submitted = q.submitted.max(lsn);
        self.shared.work.notify_all();
    }

    /// Says the graph (empty of batches) is as of `lsn`: the tables were
    /// recovered up to it before any batch was submitted.
    pub fn start_at(&self, lsn: Lsn) {
        let mut graph = self.drain();
        let mut q = lock(&self.shared.queue);
        assert!(q.batches.is_empty(), "start_at before any batch");
        q.processed = q.processed.max(lsn);
        self.shared.processed.store(q.processed, Ordering::Release);
        q.submitted = q.submitted.max(lsn);
        graph.set_processed(q.processed);
    }

    /// Where upqueries read base rows.
    pub fn set_upstream(&self, upstream: Arc<dyn Upstream>) {
        *self
            .shared
            .upstream
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(upstream);
    }

    /// Bounds the bytes of all view and operator state (0: no bound).
    pub fn set_memory_limit(&self, bytes: u64) {
        self.shared.memory_limit.store(bytes, Ordering::Relaxed);
        lock(&self.shared.queue).limit_changed = true;
        self.shared.work.notify_all();
    }

    /// Records the bytes of all state in `graph` (which the caller holds,
    /// after changing it).
    pub fn note_state_bytes(&self, graph: &Graph) {
        note_state_bytes(&self.shared, graph);
    }

    pub fn memory_limit(&self) -> u64 {
        self.shared.memory_limit.load(Ordering::Relaxed)
    }

    /// Fills `keys` of the partial view read by `reader` and returns once
    /// they are readable, or at `deadline`. When nothing else holds the
    /// graph, the calling thread fills them itself (no hand-off to the
    /// worker thread and back); otherwise it asks the worker and waits.
    /// Readers missing the same key share one upquery: a key another read
    /// filled meanwhile costs nothing.
    pub fn upquery(&self, reader: u64, keys: Vec<Row>, deadline: Instant) -> Result<(), WaitError> {
        if let Some(why) = &lock(&self.shared.queue).broken {
            return Err(broken(why).into());
        }
        // The guard is dropped at once: this only asks whether it is free.
        let free = self.shared.graph.try_lock().is_ok();
        if free {
            return Ok(self.upquery_here(reader, keys)?);
        }
        self.upquery_by_worker(reader, keys, deadline)
    }

    /// Serves one upquery on the calling thread (see [`Worker::upquery`]).
    fn upquery_here(&self, reader: u64, keys: Vec<Row>) -> Result<(), SqlError> {
        let shared = &self.shared;
        let request = Request {
            ticket: 0,
            reader,
            keys,
        };
        let mut refused = HashMap::new();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            serve(shared, std::slice::from_ref(&request), &mut refused)
        }));
        match outcome {
            Ok(filled) => {
                // Eviction stays the worker's; the keys just filled are
                // spared by its next round, so this reader finds them.
                let limit = shared.memory_limit.load(Ordering::Relaxed);
                let over = limit > 0 && shared.state_bytes.load(Ordering::Relaxed) > limit;
                lock(&shared.protected).extend(filled);
                if over {
                    lock(&shared.queue).limit_changed = true;
                    shared.work.notify_all();
                }
                match refused.remove(&0) {
                    Some(why) => Err(SqlError::new("XX000", why)),
                    None => Ok(()),
                }
            }
            Err(panic) => {
                let why = panic_message(&*panic);
                tracing::error!("the dataflow stopped during an upquery: {why}");
                let mut q = lock(&shared.queue);
                q.broken = Some(why.clone());
                q.batches.clear();
                shared.done.notify_all();
                Err(broken(&why))
            }
        }
    }

    /// Hands one upquery to the worker thread and waits for it.
    fn upquery_by_worker(
        &self,
        reader: u64,
        keys: Vec<Row>,
        deadline: Instant,
    ) -> Result<(), WaitError> {
        let mut q = lock(&self.shared.queue);
        q.issued += 1;
        let ticket = q.issued;
        q.requests.push(Request {
            ticket,
            reader,
            keys,
        });
        self.shared.work.notify_all();
        loop {
            if let Some(why) = &q.broken {
                return Err(broken(why).into());
            }
            if q.answered >= ticket {
                return match q.refused.remove(&ticket) {
                    Some(why) => Err(SqlError::new("XX000", why).into()),
                    None => Ok(()),
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::Late(
                    SqlError::new(
                        "57014",
                        "the upquery for a key the view does not hold did not finish in time",
                    )
                    .with_hint(
                        "the dataflow is busy; raise aqueduct.upquery_timeout, or SET aqueduct.upquery_timeout_action = 'compute' to answer such reads from the tables",
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

    /// Waits until every submitted batch is processed and returns the graph,
    /// as of the last one. The caller holds the commit lock (see the module
    /// comment), so the graph stays at that LSN while the guard lives.
    pub fn drain(&self) -> MutexGuard<'_, Graph> {
        let mut q = lock(&self.shared.queue);
        // A worker that waits for a commit's batch holds no graph: the
        // commit (draining under the commit lock) must not wait for it,
        // nor for the batches queued before, which it runs itself; nor for
        // batches held at the gate, which the worker does not take.
        while ((q.awaiting == 0 && (q.busy || q.holds_up_to(q.gate))) || q.in_flight > 0)
            && q.broken.is_none()
        {
            q = self.shared.done.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        drop(q);
        let mut graph = lock(&self.shared.graph);
        // As in the worker's loop, a panic in an operator marks the
        // dataflow broken (readers are told) rather than wedging every
        // later drain on a batch left in flight.
        let ran = catch_unwind(AssertUnwindSafe(|| {
            while process_next(&self.shared, &mut graph, Lsn::MAX) {}
        }));
        if let Err(panic) = ran {
            let why = panic_message(&*panic);
            tracing::error!("the dataflow stopped while a commit ran its batches: {why}");
            let mut q = lock(&self.shared.queue);
            q.broken = Some(why);
            q.in_flight = 0;
            q.batches.clear();
            self.shared.done.notify_all();
        }
        graph
    }

    /// The graph, as of whatever the worker has processed (for reading its
    /// structure, or adding a reader that starts from an operator's output).
    pub fn graph(&self) -> MutexGuard<'_, Graph> {
        lock(&self.shared.graph)
    }

    /// From now on, batches after `lsn` wait for [`Worker::open_to`]
    /// before the worker processes them (readers and upqueries may still
    /// bring the graph further, and then wait for what they saw).
    pub fn gate_at(&self, lsn: Lsn) {
        let mut q = lock(&self.shared.queue);
        q.gate = lsn.max(q.processed);
        self.shared.gate.store(q.gate, Ordering::Release);
    }

    /// The commits up to `lsn` are acknowledged: the worker may process
    /// their batches.
    pub fn open_to(&self, lsn: Lsn) {
        if self.shared.gate.load(Ordering::Acquire) >= lsn {
            return;
        }
        let mut q = lock(&self.shared.queue);
        if lsn > q.gate {
            q.gate = lsn;
            self.shared.gate.store(lsn, Ordering::Release);
            self.shared.work.notify_all();
        }
    }

    /// The LSN of the last batch processed, without the queue's lock.
    pub fn processed_now(&self) -> Lsn {
        self.shared.processed.load(Ordering::Acquire)
    }

    /// The last LSN the worker processes on its own (`Lsn::MAX`: ungated).
    pub fn gate(&self) -> Lsn {
        self.shared.gate.load(Ordering::Acquire)
    }

    /// LSN up to which every batch is processed and published.
    pub fn processed(&self) -> Lsn {
        lock(&self.shared.queue).processed
    }

    /// Whether the views reflect every write up to `lsn` now (a read of
    /// them would not wait).
    pub fn reflects(&self, lsn: Lsn) -> bool {
        self.shared.processed.load(Ordering::Acquire) >= lsn
            || lock(&self.shared.queue).reflects(lsn)
    }

    /// Waits until every batch up to `lsn` is processed, for at most
    /// `timeout`. An error names how far behind the views are.
    pub fn wait_processed(&self, lsn: Lsn, timeout: Duration) -> Result<(), WaitError> {
        if self.shared.processed.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.shared.queue);
        loop {
            if let Some(why) = &q.broken {
                return Err(broken(why).into());
            }
            // A write with nothing for the dataflow may never be submitted:
            // nothing queued up to `lsn` means it is reflected.
            if q.reflects(lsn) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::Late(SqlError::new(
                    "57014",
                    format!(
                        "views are still at LSN {} after waiting {:?} for LSN {lsn} ({} batches queued); the dataflow is overloaded",
                        q.processed,
                        timeout,
                        q.batches.len()
                    ),
                )));
            }
            q = self
                .shared
                .done
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits, for at most `timeout`, until the worker has nothing left to
    /// do: no batch, upquery or eviction round queued or running. False if
    /// it is still busy at the deadline (or stopped).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.shared.queue);
        loop {
            if q.broken.is_some() {
                return false;
            }
            let idle = !q.busy
                && q.in_flight == 0
                && !q.holds_up_to(q.gate)
                && q.requests.is_empty()
                && !q.limit_changed;
            if idle {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
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
            busy: q.busy || q.in_flight > 0,
            state_bytes: self.shared.state_bytes.load(Ordering::Relaxed),
            memory_limit: self.memory_limit(),
            backpressure_waits: self.shared.backpressure_waits.load(Ordering::Relaxed),
        }
    }
}

/// What a caught panic says.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a dataflow operator panicked".into())
}

/// How a wait for the dataflow ended without what it waited for: a
/// caller that may answer another way (from the tables) does so for
/// [`WaitError::Late`] only.
#[derive(Debug)]
pub enum WaitError {
    /// The deadline passed first (SQLSTATE 57014).
    Late(SqlError),
    /// The wait cannot succeed: the dataflow stopped, the view went, the
    /// upquery was refused.
    Failed(SqlError),
}

impl From<SqlError> for WaitError {
    fn from(e: SqlError) -> Self {
        WaitError::Failed(e)
    }
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::Late(e) | WaitError::Failed(e) => e.fmt(f),
        }
    }
}

impl From<WaitError> for SqlError {
    fn from(e: WaitError) -> Self {
        match e {
            WaitError::Late(e) | WaitError::Failed(e) => e,
        }
    }
}

fn broken(why: &str) -> SqlError {
    SqlError::new(
        "XX000",
        format!("the views stopped being maintained: {why}; restart the server to rebuild them"),
    )
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

/// The worker loop: serve upqueries first (readers wait on them), else take
/// what is queued, merge, process, publish; then keep state under the
/// memory limit. Repeat.
fn run(shared: &Shared) {
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    loop {
        let requests = {
            let mut q = lock(&shared.queue);
            while !q.holds_up_to(q.gate) && q.requests.is_empty() && !q.limit_changed && !q.closed {
                q = shared.work.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.requests.is_empty() && q.closed && !q.holds_up_to(q.gate) {
                return;
            }
            q.limit_changed = false;
            q.busy = true;
            (std::mem::take(&mut q.requests), q.gate)
        };
        let (requests, gate) = requests;
        READ_CLOCK.fetch_add(1, Ordering::Relaxed);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut refused = HashMap::new();
            let mut kept = HashSet::new();
            if requests.is_empty() {
                run_batches(shared, gate, 1);
            } else {
                kept = serve(shared, &requests, &mut refused);
            }
            // The readers waiting on these keys go first; eviction after.
            answer(shared, &requests, std::mem::take(&mut refused));
            kept.extend(std::mem::take(&mut *lock(&shared.protected)));
            enforce_limit(shared, &kept, &mut rng);
        }));
        let mut q = lock(&shared.queue);
        q.busy = false;
        if let Err(panic) = outcome {
            let why = panic_message(&*panic);
            tracing::error!("the dataflow worker stopped: {why}");
            q.broken = Some(why);
            q.batches.clear();
            shared.done.notify_all();
            return;
        }
        shared.done.notify_all();
    }
}

/// Tells the readers of `requests` their keys are filled (or why not).
fn answer(shared: &Shared, requests: &[Request], refused: HashMap<u64, String>) {
    let Some(last) = requests.last() else {
        return;
    };
    let mut q = lock(&shared.queue);
    q.answered = q.answered.max(last.ticket);
    q.refused.extend(refused);
    shared.done.notify_all();
}

/// Processes queued batches with LSNs up to `upto`, at most `rounds`
/// merged batches (`usize::MAX`: until none is left up to `upto`).
fn run_batches(shared: &Shared, upto: Lsn, rounds: usize) {
    for _ in 0..rounds {
        let mut graph = lock(&shared.graph);
        if !process_next(shared, &mut graph, upto) {
            return;
        }
    }
}

/// Processes the next queued batch (merged with those after it, up to LSN
/// `upto`) on `graph`, which the caller holds locked: a batch is taken off
/// the queue and run with the graph locked, so whichever thread does it
/// (the worker, or a reader filling a key), batches run in LSN order.
/// False when no batch up to `upto` is queued.
fn process_next(shared: &Shared, graph: &mut Graph, upto: Lsn) -> bool {
    let (lsn, changes) = {
        let mut q = lock(&shared.queue);
        if q.batches.front().is_none_or(|b| b.lsn > upto) {
            return false;
        }
        q.in_flight += 1;
        // A tapped view keeps each transaction's changes apart.
        merge(&mut q.batches, upto, !graph.has_taps())
    };
    graph.process(lsn, changes);
    note_state_bytes(shared, graph);
    {
        let mut q = lock(&shared.queue);
        q.in_flight -= 1;
        assert!(lsn >= q.processed, "batches are processed in LSN order");
        q.processed = lsn;
        shared.processed.store(lsn, Ordering::Release);
    }
    shared.done.notify_all();
    true
}

/// Whether the batch of `lsn` is queued (or processed) already.
fn submitted(shared: &Shared, lsn: Lsn) -> bool {
    lock(&shared.queue).submitted >= lsn
}

/// Waits, without the graph, until the batch of `lsn` is submitted (the
/// commit that applied it is submitting it); false after [`SUBMIT_WAIT`].
fn await_submitted(shared: &Shared, lsn: Lsn, deadline: Instant) -> bool {
    let mut q = lock(&shared.queue);
    q.awaiting += 1;
    shared.done.notify_all();
    let mut came = true;
    while q.submitted < lsn {
        let now = Instant::now();
        if now >= deadline {
            came = false;
            break;
        }
        q = shared
            .work
            .wait_timeout(q, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    q.awaiting -= 1;
    came
}

/// Brings `graph` (held locked) to exactly `lsn`, the LSN base rows were
/// read at, whose batch is submitted: processes every batch up to it.
/// Keys being filled are not held yet, so those batches do not touch
/// them; the rows read at `lsn` already contain them.
fn catch_up(shared: &Shared, graph: &mut Graph, lsn: Lsn) {
    while process_next(shared, graph, lsn) {}
    assert!(
        graph.processed() >= lsn || lock(&shared.queue).batches.is_empty(),
        "the graph did not reach the LSN base rows were read at"
    );
}

/// Records the bytes of all state (for `/metrics` and the memory limit).
fn note_state_bytes(shared: &Shared, graph: &Graph) {
    shared
        .state_bytes
        .store(graph.state_bytes(), Ordering::Relaxed);
}

/// Reads the base rows of `keys` of partial views and brings the graph to
/// the LSN they were read at; then `apply` gets them (with the graph
/// locked). An error says why the rows could not be read.
fn with_base_rows(
    shared: &Shared,
    keys: &[(NodeId, Row)],
    apply: impl FnOnce(&mut Graph, Fetch),
) -> Result<(), String> {
    let upstream = shared
        .upstream
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or("upqueries have no tables to read from")?;
    let deadline = Instant::now() + SUBMIT_WAIT;
    loop {
        // The graph stays locked from reading the rows to applying them,
        // so no batch after the rows' LSN runs in between (whichever
        // thread runs batches).
        let mut graph = lock(&shared.graph);
        let mut asks: Vec<Ask> = Vec::new();
        for (view, key) in keys {
            for e in graph.entries_of(*view) {
                asks.push((e.table, e.columns, key.clone(), e.counted));
            }
        }
        asks.sort();
        asks.dedup();
        let (rows, lsn) = upstream.rows_at(&asks).ok_or("the tables are closed")?;
        assert!(
            graph.processed() <= lsn,
            "the graph is at LSN {} but the tables at {lsn}",
            graph.processed()
        );
        if !submitted(shared, lsn) {
            // The commit that wrote `lsn` is still between applying it and
            // queueing its batch, and may need the graph meanwhile (an
            // ALTER TABLE drops the views over the table first): let go of
            // it, wait, and read the rows again, through the views there
            // are by then.
            drop(graph);
            if !await_submitted(shared, lsn, deadline) {
                return Err(format!(
                    "the write at LSN {lsn} never reached the dataflow; the upquery was abandoned"
                ));
            }
            continue;
        }
        catch_up(shared, &mut graph, lsn);
        let found: HashMap<Ask, WeightedRows> = asks.into_iter().zip(rows).collect();
        let fetch = |e: &Entry, key: &Row| -> Delta {
            owned_delta(
                found
                    .get(&(e.table, e.columns.clone(), key.clone(), e.counted))
                    .expect("every entry of every key was asked for"),
            )
        };
        apply(&mut graph, &fetch);
        note_state_bytes(shared, &graph);
        return Ok(());
    }
}

/// Serves upquery requests: the keys no partial view holds yet are filled
/// in one pass. Returns the keys filled (spared by the eviction that may
/// follow, so their readers find them).
fn serve(
    shared: &Shared,
    requests: &[Request],
    refused: &mut HashMap<u64, String>,
) -> HashSet<(NodeId, Row)> {
    let mut wanted: BTreeMap<NodeId, Vec<Row>> = BTreeMap::new();
    {
        let graph = lock(&shared.graph);
        for r in requests {
            match graph.partial_of(r.reader) {
                Some(view) => {
                    for k in &r.keys {
                        if !graph.holds(view, k) {
                            wanted.entry(view).or_default().push(k.clone());
                        }
                    }
                }
                None => {
                    refused.insert(r.ticket, "the view was dropped".to_string());
                }
            }
        }
    }
    let keys: Vec<(NodeId, Row)> = wanted
        .iter()
        .flat_map(|(v, ks)| ks.iter().map(|k| (*v, k.clone())))
        .collect();
    if keys.is_empty() {
        return HashSet::new();
    }
    let outcome = with_base_rows(shared, &keys, |graph, fetch| {
        for (view, ks) in &wanted {
            graph.fill(*view, ks, fetch);
        }
    });
    if let Err(why) = outcome {
        for r in requests {
            refused.insert(r.ticket, why.clone());
        }
    }
    keys.into_iter().collect()
}

/// Evicts least recently read keys of partial views while all state takes
/// more than the memory limit.
fn enforce_limit(shared: &Shared, keep: &HashSet<(NodeId, Row)>, rng: &mut u64) {
    let limit = shared.memory_limit.load(Ordering::Relaxed);
    let bytes = lock(&shared.graph).state_bytes();
    shared.state_bytes.store(bytes, Ordering::Relaxed);
    let target = limit / 100 * EVICT_TO_PERCENT;
    // Evicting starts over the limit and goes on down to the target, so
    // that a round frees room for many fills rather than for the next one.
    let draining = shared.draining.load(Ordering::Relaxed);
    if limit == 0 || bytes <= target || (!draining && bytes <= limit) {
        shared.draining.store(false, Ordering::Relaxed);
        return;
    }
    shared.draining.store(true, Ordering::Relaxed);
    let victims = {
        let graph = lock(&shared.graph);
        let keys = graph.partial_keys().max(1) as u64;
        let partial: u64 = graph
            .partial_views()
            .iter()
            .map(|(v, _, _)| graph.view_bytes(*v))
            .sum();
        let per_key = (partial / keys).max(1);
        let n = ((bytes - target) / per_key + 1).min(MAX_EVICTIONS_PER_ROUND as u64) as usize;
        graph.eviction_victims(n, keep, rng)
    };
    if victims.is_empty() {
        return;
    }
    let mut by_view: BTreeMap<NodeId, Vec<Row>> = BTreeMap::new();
    for (v, k) in &victims {
        by_view.entry(*v).or_default().push(k.clone());
    }
    let outcome = with_base_rows(shared, &victims, |graph, fetch| {
        for (view, ks) in &by_view {
            graph.evict(*view, ks, fetch);
        }
        note_state_bytes(shared, graph);
    });
    if let Err(why) = outcome {
        tracing::warn!("cannot evict: {why}");
        return;
    }
    // Still above the target: another round soon, after the upqueries
    // waiting by then.
    if shared.state_bytes.load(Ordering::Relaxed) > target {
        lock(&shared.queue).limit_changed = true;
    }
}

/// Takes queued batches from the front, up to [`MAX_MERGED_ROWS`] rows (at
/// least one batch) and LSN `upto`, and merges them into one at the last
/// one's LSN; only the first when `may_merge` is false.
fn merge(queue: &mut VecDeque<Batch>, upto: Lsn, may_merge: bool) -> (Lsn, Vec<(TableId, Delta)>) {
    let first = queue.pop_front().expect("a queued batch");
    let mut lsn = first.lsn;
    let mut rows: usize = first.changes.iter().map(|(_, d)| d.len()).sum();
    if queue.is_empty() || !may_merge {
        return (lsn, first.changes);
    }
    let mut per_table: HashMap<TableId, Delta> = first.changes.into_iter().collect();
    while let Some(next) = queue.front() {
        let n: usize = next.changes.iter().map(|(_, d)| d.len()).sum();
        if rows + n > MAX_MERGED_ROWS || next.lsn > upto {
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
        // Idle means every batch submitted is processed and published.
        for i in 202..=300 {
            worker.submit(i, vec![(1, vec![(row(&[i as i64 % 7, i as i64]), 1)])]);
        }
        assert!(worker.wait_idle(Duration::from_secs(10)));
        assert_eq!(worker.processed(), 300);
        assert_eq!(reader.read(|s, _| s.row_count()).unwrap(), 298);
    }

    #[test]
    fn a_tapped_view_gets_each_batchs_changes_apart() {
        let mut g = Graph::new();
        let src = g.source(1, "t");
        let _ = g.view("v", src, vec![0]);
        let tap = g.tap("v").expect("a view in full");
        let worker = Worker::start(g);
        // Queued while the graph is held, so the worker finds them all
        // waiting at once, which it would otherwise merge.
        let held = lock(&worker.shared.graph);
        for i in 1..=50 {
            worker.submit(i, vec![(1, vec![(row(&[i as i64]), 1)])]);
        }
        drop(held);
        worker.wait_processed(50, Duration::from_secs(10)).unwrap();
        for i in 1..=50u64 {
            assert_eq!(
                tap.at(i),
                crate::tap::TapRead::Changes(vec![(row(&[i as i64]), 1)]),
                "the changes of LSN {i}"
            );
        }
    }

    #[test]
    fn a_full_queue_makes_writers_wait_for_the_worker() {
        let mut g = Graph::new();
        let src = g.source(1, "t");
        let (_, reader) = g.view("v", src, vec![0]);
        let worker = Arc::new(Worker::start(g));
        // The worker cannot run while the graph is held: the queue fills.
        let held = lock(&worker.shared.graph);
        for i in 1..=MAX_QUEUED_BATCHES as u64 + 1 {
            // The first batch may be taken off the queue before the worker
            // blocks on the graph, so one more fits.
            if lock(&worker.shared.queue).batches.len() == MAX_QUEUED_BATCHES {
                break;
            }
            worker.submit(i, vec![(1, vec![(row(&[i as i64]), 1)])]);
        }
        let next = lock(&worker.shared.queue).submitted + 1;
        let w = worker.clone();
        let writer = std::thread::spawn(move || {
            w.submit(next, vec![(1, vec![(row(&[next as i64]), 1)])]);
        });
        // The writer waits (counted), and the queue never exceeds its bound.
        while worker.stats().backpressure_waits == 0 {
            std::thread::yield_now();
        }
        assert!(!writer.is_finished());
        assert!(lock(&worker.shared.queue).batches.len() <= MAX_QUEUED_BATCHES);
        drop(held);
        writer.join().unwrap();
        worker
            .wait_processed(next, Duration::from_secs(30))
            .unwrap();
        assert_eq!(reader.read(|s, _| s.row_count()).unwrap(), next);
    }

    #[test]
    fn merging_keeps_the_last_lsn_and_every_row() {
        let mut q: VecDeque<Batch> = (1..=3)
            .map(|i| Batch {
                lsn: i,
                changes: vec![(i % 2, vec![(row(&[i as i64]), 1)])],
            })
            .collect();
        let (lsn, changes) = merge(&mut q, Lsn::MAX, true);
        assert_eq!(lsn, 3);
        assert!(q.is_empty());
        let total: usize = changes.iter().map(|(_, d)| d.len()).sum();
        assert_eq!(total, 3);
        assert_eq!(changes[0].0, 0);
    }
}
