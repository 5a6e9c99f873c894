//! Raft's log storage and state machine over Aqueduct's log and tables
//! (`docs/replication.md`, "The Raft group").
//!
//! The log storage is the log itself plus the entry index
//! ([`super::entries`]): a batch entry's records are appended to the log at
//! the LSNs the leader gave them (on the leader they are there already,
//! appended by its commit), then the index says which entry they are. The
//! state machine applies a committed entry's batch to the tables with the
//! same step as recovery and followers (`Database::apply_appended`); the
//! leader skips the batches it applied when it committed them.

// The Raft library's storage error is large; its traits return it.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::{wire, FsStorage, Log, Lsn, Record, Storage, SyncPolicy};
use aqueduct_tables::{BatchBuilder, Database};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta};
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use super::entries::{EntryIndex, Kind, Meta};
use super::types::{
    storage_error, Entry, Group, LogId, Membership, NodeId, Proposal, StorageError,
    StoredMembership, Vote,
};

/// How often at most the committed log id is written down (it only
/// bounds how much a restart replays before asking the group).
const SAVE_COMMITTED_EVERY: Duration = Duration::from_millis(200);

/// The files of a member's Raft state, in its own directory
/// (`data_dir/raft`).
const STATE_FILE: &str = "state.json";
const STATE_TMP: &str = "state.json.tmp";
const ENTRIES_FILE: &str = "entries";

/// What a member keeps of Raft besides its log: its vote, the last log id
/// it knew committed, and the last it purged. A JSON file replaced
/// atomically (`raft/state.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct HardState {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

/// The Raft state of one member: shared by its log storage, the readers
/// of it, its state machine and the replicator its database proposes
/// through.
pub struct Shared {
    pub(crate) me: NodeId,
    pub(crate) db: Arc<Database>,
    storage: Arc<dyn Storage>,
    inner: Mutex<Inner>,
    /// The last LSN of the last entry applied here: what the group
    /// committed, as far as this member knows.
    committed_lsn: AtomicU64,
    /// The term of the last entry applied here that this member proposed
    /// as leader: equal to the current term once a new leader applied
    /// everything earlier leaders committed.
    ready_term: AtomicU64,
    moved: (Mutex<()>, Condvar),
    /// Commits waiting for the group to commit their LSN, by LSN: each is
    /// woken alone when its LSN is committed (a wake of every waiter per
    /// entry would cost each commit as many wakes as commits wait).
    committed_waiters: Mutex<std::collections::BTreeMap<Lsn, Vec<std::thread::Thread>>>,
    /// The last LSN of the last entry appended (and synced) here: the
    /// leader proposes its next entry once its last one is
    /// (`Member::propose`).
    pub(crate) appended: tokio::sync::watch::Sender<Lsn>,
    /// Set when this member's tables show writes the group did not commit
    /// (it lost its leadership with proposals in flight): it must rebuild
    /// them from the log (`Shared::diverged`).
    diverged: Mutex<Option<String>>,
    on_diverged: Mutex<Option<OnDiverged>>,
    /// Whether an append writes the log and the entry index on two
    /// threads at once: on a runtime of several threads; the simulation
    /// runs on one, where every step happens in one order.
    parallel_io: bool,
}

/// What the shell does when a member's tables must be rebuilt.
pub type OnDiverged = Box<dyn Fn(String) + Send + Sync>;

struct Inner {
    index: EntryIndex,
    hard: HardState,
    applied: Option<LogId>,
    committed_saved_at: tokio::time::Instant,
}

/// What opening a member's Raft state found, before the tables are
/// rebuilt.
pub struct Prepared {
    pub shared: Arc<PreparedShared>,
    /// Replay the log only up to this LSN: the group committed it.
    pub replay_until: Lsn,
}

/// [`Shared`] before the database exists.
pub struct PreparedShared {
    storage: Arc<dyn Storage>,
    index: Mutex<Option<EntryIndex>>,
    hard: HardState,
    applied: Option<LogId>,
    until: Lsn,
}

/// Opens the Raft state in `dir` (`data_dir/raft`) over `log`: removes log
/// records no entry holds (a leader's appends never proposed), and says
/// how far the tables may be rebuilt.
pub fn prepare(dir: &Path, log: &Log) -> Result<Prepared, String> {
    let storage = FsStorage::new(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    prepare_on(Arc::new(storage), log)
}

/// [`prepare`] on any storage (the simulation's keeps only what was
/// synced).
pub fn prepare_on(storage: Arc<dyn Storage>, log: &Log) -> Result<Prepared, String> {
    let state_path = storage.describe(STATE_FILE);
    let listed = storage
        .list()
        .map_err(|e| format!("listing {}: {e}", storage.describe("")))?;
    let fresh = !listed.iter().any(|n| n == STATE_FILE);
    let hard: HardState = if fresh {
        HardState::default()
    } else {
        let read = || -> std::io::Result<Vec<u8>> {
            let f = storage.open(STATE_FILE)?;
            f.read_vec(0, f.len()? as usize)
        };
        let bytes = read().map_err(|e| format!("reading {state_path}: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{state_path} is damaged: {e}"))?
    };
    let index = EntryIndex::open(&*storage, ENTRIES_FILE, hard.purged.map(|p| p.index))
        .map_err(|e| format!("opening the Raft entry index: {e}"))?;
    let mut index = index;
    let in_log = log.next_lsn().saturating_sub(1);
    // Index frames whose records the log lacks were written beside records
    // a crash took: never acknowledged, they go.
    let past_log = index
        .range(0, u64::MAX)
        .find(|m| m.last > in_log)
        .map(|m| m.index);
    if let Some(from) = past_log {
        tracing::warn!("removing Raft entries {from} and later: their records are not in the log");
        index
            .truncate_from(from)
            .map_err(|e| format!("cutting the Raft entry index: {e}"))?;
    }
    let held = index.last_lsn();
    if fresh && index.last().is_none() && in_log > 0 {
        return Err(format!(
            "the data directory holds a log of {in_log} records written outside a Raft group; \
             a member starts from an empty data directory (copy the data in through a \
             publication or a follower of this server)"
        ));
    }
    if in_log > held {
        tracing::warn!(
            "removing log records {}..={in_log}: appended by this member as leader, never proposed",
            held + 1
        );
        log.truncate_after(held)
            .map_err(|e| format!("removing unproposed records: {e}"))?;
    }
    // Replayed up to the entry the group is known to have committed; an
    // entry the index no longer holds is applied again from the start.
    let (applied, until) = match hard.committed.and_then(|c| Some((c, index.get(c.index)?))) {
        Some((c, m)) => (Some(c), m.end_lsn()),
        None => (None, 0),
    };
    write_hard(&*storage, &hard)?;
    Ok(Prepared {
        shared: Arc::new(PreparedShared {
            storage,
            index: Mutex::new(Some(index)),
            hard,
            applied,
            until,
        }),
        replay_until: until,
    })
}

impl PreparedShared {
    /// The member's shared state over its rebuilt `db`.
    pub fn attach(&self, me: NodeId, db: Arc<Database>) -> Arc<Shared> {
        let index = self.index.lock().take().expect("attached once");
        let applied = self.applied;
        // A leader restarted in its own term has applied its own entries.
        let ready_term = applied
            .filter(|a| a.leader_id.node_id == me)
            .map_or(0, |a| a.leader_id.term);
        assert_eq!(
            db.applied_lsn(),
            self.until,
            "the tables were rebuilt to another LSN than the group committed"
        );
        Arc::new(Shared {
            me,
            storage: self.storage.clone(),
            committed_lsn: AtomicU64::new(db.applied_lsn()),
            db,
            inner: Mutex::new(Inner {
                index,
                hard: self.hard.clone(),
                applied,
                committed_saved_at: tokio::time::Instant::now(),
            }),
            ready_term: AtomicU64::new(ready_term),
            moved: Default::default(),
            committed_waiters: Default::default(),
            appended: tokio::sync::watch::Sender::new(0),
            diverged: Mutex::new(None),
            on_diverged: Mutex::new(None),
            parallel_io: matches!(
                tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
                Ok(tokio::runtime::RuntimeFlavor::MultiThread)
            ),
        })
    }
}

fn write_hard(storage: &dyn Storage, hard: &HardState) -> Result<(), String> {
    let bytes = serde_json::to_vec(hard).expect("the Raft state serializes");
    let write = || -> std::io::Result<()> {
        let f = storage.create(STATE_TMP)?;
        f.write_at(&bytes, 0)?;
        f.sync()?;
        storage.rename(STATE_TMP, STATE_FILE)?;
        storage.sync_dir()
    };
    write().map_err(|e| format!("writing {}: {e}", storage.describe(STATE_FILE)))
}

impl Shared {
    pub fn log(&self) -> &Log {
        self.db.log()
    }

    /// The last LSN the group committed, as far as this member knows.
    pub fn committed_lsn(&self) -> Lsn {
        self.committed_lsn.load(Ordering::Acquire)
    }

    /// Waits until `ok()` holds or `deadline` passes; true if it held.
    pub(crate) fn wait_until(&self, deadline: Instant, ok: impl Fn() -> bool) -> bool {
        let mut guard = self.moved.0.lock();
        while !ok() {
            if self.moved.1.wait_until(&mut guard, deadline).timed_out() {
                return ok();
            }
        }
        true
    }

    pub(crate) fn notify(&self) {
        let _g = self.moved.0.lock();
        self.moved.1.notify_all();
    }

    /// Waits until the group committed `lsn` or this member diverged, at
    /// most until `deadline`; true unless the deadline passed first.
    pub(crate) fn await_committed_lsn(&self, lsn: Lsn, deadline: Instant) -> bool {
        let done = || self.committed_lsn() >= lsn || self.diverged.lock().is_some();
        loop {
            {
                // Checked again under the waiters' lock, which the waker
                // takes after moving the LSN: no wake is lost.
                let mut waiters = self.committed_waiters.lock();
                if done() {
                    return true;
                }
                waiters.entry(lsn).or_default().push(std::thread::current());
            }
            let now = Instant::now();
            if now >= deadline {
                return done();
            }
            std::thread::park_timeout(deadline - now);
        }
    }

    /// Wakes the commits waiting for LSNs up to `lsn` (all of them when
    /// `lsn` is `Lsn::MAX`).
    fn wake_committed(&self, lsn: Lsn) {
        let ready = {
            let mut waiters = self.committed_waiters.lock();
            let later = waiters.split_off(&lsn.saturating_add(1));
            std::mem::replace(&mut *waiters, later)
        };
        for t in ready.into_values().flatten() {
            t.unpark();
        }
    }

    pub(crate) fn ready_term(&self) -> u64 {
        self.ready_term.load(Ordering::Acquire)
    }

    /// Why this member must rebuild its tables, once it must.
    pub fn diverged(&self) -> Option<String> {
        self.diverged.lock().clone()
    }

    /// Records that the tables show writes the group did not commit, and
    /// tells the shell (which restarts the member to rebuild them).
    pub(crate) fn diverge(&self, why: String) {
        {
            let mut d = self.diverged.lock();
            if d.is_some() {
                return;
            }
            tracing::error!("{why}: this member rebuilds its tables from the log");
            *d = Some(why.clone());
        }
        self.notify();
        self.wake_committed(Lsn::MAX);
        if let Some(f) = &*self.on_diverged.lock() {
            f(why);
        }
    }

    pub fn set_on_diverged(&self, f: OnDiverged) {
        *self.on_diverged.lock() = Some(f);
    }

    /// The LSN an entry ends at (its last record, or where the entry
    /// before it ended).
    pub(crate) fn lsn_of(&self, index: u64) -> Option<Lsn> {
        self.inner.lock().index.get(index).map(Meta::end_lsn)
    }

    /// Entries `from..to` read back from the index and the log.
    fn entries(&self, from: u64, to: u64) -> Result<Vec<Entry>, StorageError> {
        let metas: Vec<Meta> = self.inner.lock().index.range(from, to).cloned().collect();
        let mut out = Vec::with_capacity(metas.len());
        let batches: Vec<&Meta> = metas.iter().filter(|m| m.kind == Kind::Batch).collect();
        let mut records = match (batches.first(), batches.last()) {
            (Some(a), Some(b)) => read_records(self.log(), a.first, b.last)?,
            _ => Vec::new(),
        }
        .into_iter()
        .peekable();
        let sender = wire::Sender {
            committed: self.committed_lsn(),
            exact_from: self.log().exact_from(),
        };
        for m in &metas {
            let log_id = LogId::new(openraft::CommittedLeaderId::new(m.term, m.leader), m.index);
            let payload = match m.kind {
                Kind::Blank => EntryPayload::Blank,
                Kind::Membership => {
                    let bytes = m.membership.as_deref().unwrap_or(&[]);
                    let membership: Membership = serde_json::from_slice(bytes)
                        .map_err(|e| storage_error(format!("entry {}: {e}", m.index)))?;
                    EntryPayload::Membership(membership)
                }
                Kind::Batch => {
                    let mut mine = Vec::new();
                    while let Some(r) = records.next_if(|r| r.lsn <= m.last) {
                        if r.lsn >= m.first {
                            mine.push(r);
                        }
                    }
                    // Compaction may have dropped the batch's last record:
                    // what is left still ends the batch.
                    if let Some(last) = mine.last_mut() {
                        last.flags &= !aqueduct_log::record::FLAG_BATCH_CONTINUES;
                    }
                    EntryPayload::Normal(Proposal {
                        first: m.first,
                        last: m.last,
                        records: wire::encode(&mine, sender),
                    })
                }
            };
            out.push(Entry { log_id, payload });
        }
        Ok(out)
    }

    /// Appends `entries` as the log storage does, then says so.
    fn append_entries(&self, entries: Vec<Entry>) -> Result<(), StorageError> {
        let log = self.log();
        let mut inner = self.inner.lock();
        let mut prev_lsn = inner.index.last_lsn();
        let mut metas = Vec::with_capacity(entries.len());
        let mut copies: Vec<Record> = Vec::new();
        let mut exact_from = None;
        let mut wait_for = 0;
        for e in entries {
            let mut meta = Meta {
                index: e.log_id.index,
                term: e.log_id.leader_id.term,
                leader: e.log_id.leader_id.node_id,
                kind: Kind::Blank,
                first: prev_lsn + 1,
                last: prev_lsn,
                membership: None,
            };
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Membership(m) => {
                    meta.kind = Kind::Membership;
                    meta.membership =
                        Some(serde_json::to_vec(&m).expect("a membership serializes"));
                }
                EntryPayload::Normal(p) => {
                    meta.kind = Kind::Batch;
                    if p.first != prev_lsn + 1 || p.last < p.first {
                        return Err(storage_error(format!(
                            "entry {} holds LSNs {}..={} after LSN {prev_lsn}",
                            meta.index, p.first, p.last
                        )));
                    }
                    meta.first = p.first;
                    meta.last = p.last;
                    if p.last < log.next_lsn() {
                        // Appended here already: by this member's commit.
                        if meta.leader != self.me {
                            let why = format!(
                                "the log here holds LSNs {}..={} that entry {} of leader {} \
                                 also claims",
                                p.first, p.last, meta.index, meta.leader
                            );
                            self.diverge(why.clone());
                            return Err(storage_error(why));
                        }
                        wait_for = p.last;
                    } else {
                        let (records, sender) = wire::decode(&p.records, p.first)
                            .map_err(|e| storage_error(format!("entry {}: {e}", meta.index)))?;
                        let mut expected = p.first;
                        for r in &records {
                            if r.lsn != expected {
                                exact_from = Some(sender.exact_from);
                            }
                            expected = r.lsn + 1;
                        }
                        // Compacted records are taken only by a member
                        // copying the log from its start: one with state
                        // of its own cannot apply a history with holes.
                        if exact_from.is_some() && log.next_lsn() > 1 && log.exact_from() <= p.first
                        {
                            return Err(storage_error(format!(
                                "entry {} holds records the leader compacted away, and this \
                                 member has state of its own: remove it from the group, empty \
                                 its data directory and add it again",
                                meta.index
                            )));
                        }
                        copies.extend(records);
                    }
                }
            }
            prev_lsn = meta.end_lsn();
            metas.push(meta);
        }
        if let Some(lsn) = exact_from {
            log.note_compacted_until(lsn)
                .map_err(|e| storage_error(format!("noting the copied log's exact point: {e}")))?;
        }
        if let Some(first) = copies.first() {
            if log.next_lsn() > first.lsn {
                let why = format!(
                    "the log here holds LSN {} and later, which the leader sends again",
                    first.lsn
                );
                self.diverge(why.clone());
                return Err(storage_error(why));
            }
        }
        // The records and the index are written and synced side by side
        // (one sync's wait, not two); Raft hears of the entries only once
        // both are durable. A crash between the two leaves index frames
        // past the log, which `prepare` removes: they were never
        // acknowledged.
        let sync = matches!(log.options().sync, SyncPolicy::Always);
        let index = &mut inner.index;
        let records = || {
            if !copies.is_empty() {
                log.append_copied(&copies)
                    .map(|_| ())
                    .map_err(|e| format!("appending a replicated batch: {e}"))
            } else if wait_for > 0 {
                log.await_committed(wait_for)
                    .map_err(|e| format!("syncing the log: {e}"))
            } else {
                Ok(())
            }
        };
        let (records, indexed) = if self.parallel_io {
            std::thread::scope(|scope| {
                let indexed = scope.spawn(|| index.append(&metas, sync));
                let records = records();
                (records, indexed.join())
            })
        } else {
            // The records first: a crash between the two leaves records
            // past the index, which `prepare` removes.
            let records = records();
            let indexed = match &records {
                Ok(()) => index.append(&metas, sync),
                Err(_) => Ok(()),
            };
            (records, Ok(indexed))
        };
        records.map_err(storage_error)?;
        match indexed {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(storage_error(format!("writing the Raft entry index: {e}"))),
            Err(_) => Err(storage_error("writing the Raft entry index panicked")),
        }
    }

    fn truncate(&self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.inner.lock();
        let Some(meta) = inner.index.get(log_id.index).cloned() else {
            return Ok(());
        };
        let keep = meta.first - 1;
        if let Err(e) = self.db.discard_after(keep) {
            let why = format!(
                "Raft entry {} and later were replaced by the leader, but their writes are \
                 applied here ({e})",
                log_id.index
            );
            self.diverge(why.clone());
            return Err(storage_error(why));
        }
        inner
            .index
            .truncate_from(log_id.index)
            .map_err(|e| storage_error(format!("cutting the Raft entry index: {e}")))
    }

    fn save_hard(&self, inner: &Inner) -> Result<(), StorageError> {
        write_hard(&*self.storage, &inner.hard).map_err(storage_error)
    }

    /// Applies committed entries to the tables.
    fn apply(&self, entries: Vec<Entry>) -> Result<Vec<()>, StorageError> {
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let lsn = match &e.payload {
                EntryPayload::Normal(p) => {
                    // The leader applied its own batches as it committed
                    // them (`Database::apply_committed` skips those).
                    if p.last > self.db.applied_lsn() {
                        let (records, _) = wire::decode(&p.records, p.first)
                            .map_err(|err| storage_error(format!("entry {}: {err}", e.log_id)))?;
                        let mut batches = BatchBuilder::default();
                        for r in &records {
                            if let Some(batch) = batches.push(&r.view()).map_err(|err| {
                                storage_error(format!("entry {}: {err}", e.log_id))
                            })? {
                                self.db.apply_committed(batch);
                            }
                        }
                    }
                    Some(p.last)
                }
                _ => None,
            };
            {
                let mut inner = self.inner.lock();
                inner.applied = Some(e.log_id);
                if let Some(lsn) = lsn {
                    self.committed_lsn.fetch_max(lsn, Ordering::AcqRel);
                }
            }
            if e.log_id.leader_id.node_id == self.me {
                self.ready_term
                    .fetch_max(e.log_id.leader_id.term, Ordering::AcqRel);
            }
            out.push(());
        }
        self.notify();
        self.wake_committed(self.committed_lsn());
        Ok(out)
    }

    fn applied_state(&self) -> (Option<LogId>, StoredMembership) {
        let inner = self.inner.lock();
        let applied = inner.applied;
        let membership = applied
            .and_then(|a| inner.index.membership_at(a.index))
            .and_then(|m| {
                let membership: Membership =
                    serde_json::from_slice(m.membership.as_deref()?).ok()?;
                Some(StoredMembership::new(
                    Some(LogId::new(
                        openraft::CommittedLeaderId::new(m.term, m.leader),
                        m.index,
                    )),
                    membership,
                ))
            })
            .unwrap_or_default();
        (applied, membership)
    }
}

/// The log's records from `from` to `to` (fewer where compaction dropped
/// some).
fn read_records(log: &Log, from: Lsn, to: Lsn) -> Result<Vec<Record>, StorageError> {
    let mut reader = log.reader(from);
    let mut out = Vec::new();
    loop {
        let batch = reader
            .next_batch(4096)
            .map_err(|e| storage_error(format!("reading the log from LSN {from}: {e}")))?;
        if batch.is_empty() {
            return Ok(out);
        }
        for r in batch {
            if r.lsn > to {
                return Ok(out);
            }
            out.push(r);
        }
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i + 1,
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(&i) => i + 1,
        Bound::Excluded(&i) => i,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

/// Raft's log storage (and a reader of it) over a member's log.
#[derive(Clone)]
pub struct LogStore(pub Arc<Shared>);

impl RaftLogReader<Group> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (from, to) = bounds(&range);
        let shared = self.0.clone();
        super::runtime::blocking(|| shared.entries(from, to))
    }
}

impl RaftLogStorage<Group> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<Group>, StorageError> {
        let inner = self.0.inner.lock();
        let purged = inner.hard.purged;
        let last = inner
            .index
            .last()
            .map(|m| LogId::new(openraft::CommittedLeaderId::new(m.term, m.leader), m.index))
            .or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let mut inner = self.0.inner.lock();
        inner.hard.vote = Some(*vote);
        self.0.save_hard(&inner)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.0.inner.lock().hard.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let mut inner = self.0.inner.lock();
        inner.hard.committed = committed;
        if inner.committed_saved_at.elapsed() >= SAVE_COMMITTED_EVERY {
            inner.committed_saved_at = tokio::time::Instant::now();
            // Not synced: a stale committed id only makes a restart replay
            // less before the group tells it more.
            let shared = self.0.clone();
            drop(inner);
            super::runtime::blocking(|| shared.save_hard(&shared.inner.lock()))?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.0.inner.lock().hard.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<Group>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let shared = self.0.clone();
        let result = super::runtime::blocking(|| shared.append_entries(entries));
        if result.is_ok() {
            let last = shared.inner.lock().index.last_lsn();
            shared.appended.send_replace(last);
        }
        if let Err(e) = &result {
            // A member that cannot keep entries leaves the group's work to
            // the others until it is restarted on a sound disk.
            if shared.diverged().is_none() {
                shared.diverge(format!("its log storage failed: {e}"));
            }
        }
        match &result {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        result
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let shared = self.0.clone();
        super::runtime::blocking(|| shared.truncate(log_id))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.0.inner.lock();
        inner.hard.purged = Some(log_id);
        self.0.save_hard(&inner)?;
        inner.index.purge_through(log_id.index);
        Ok(())
    }
}

/// Raft's state machine: the member's tables.
#[derive(Clone)]
pub struct StateMachine(pub Arc<Shared>);

/// Snapshots are not taken: the group never purges entries a member may
/// still need, and the log they point into is itself what a new member
/// copies (compacted below its exact point), so nothing asks for one.
pub struct NoSnapshots;

const NO_SNAPSHOTS: &str = "this group takes no Raft snapshots: members copy the (compacted) \
                            log through entries, which are never purged";

impl RaftSnapshotBuilder<Group> for NoSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Group>, StorageError> {
        Err(storage_error(NO_SNAPSHOTS))
    }
}

impl RaftStateMachine<Group> for StateMachine {
    type SnapshotBuilder = NoSnapshots;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok(self.0.applied_state())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let shared = self.0.clone();
        super::runtime::blocking(|| shared.apply(entries))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        NoSnapshots
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<std::io::Cursor<Vec<u8>>>, StorageError> {
        Err(storage_error(NO_SNAPSHOTS))
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        _snapshot: Box<std::io::Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        Err(storage_error(NO_SNAPSHOTS))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Group>>, StorageError> {
        Ok(None)
    }
}
