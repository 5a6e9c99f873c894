//! The log handle: open and recovery, atomic appends, group commit,
//! segment sealing, truncation for replication, and statistics.
//!
//! Locks, always taken in this order: `compaction` → `writer` → `segments` →
//! `sync`. Appends take `writer` (and `sync` briefly); compaction works on
//! sealed segments only and takes `segments` just to swap an entry, so it never
//! waits for an append and an append never waits for it.

use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::compaction::{self, CompactionReport};
use crate::lock::DirLock;
use crate::manifest::{self, Fate, Found, Manifest, ManifestEntry};
use crate::meta::Meta;
use crate::metrics::LogMetrics;
use crate::reader::LogReader;
use crate::record::{self, NewRecord, Record, RecordView, FLAG_BATCH_CONTINUES};
use crate::segment::{
    self, data_name, index_name, parse_data_name, ScanEnd, SegmentHeader, SegmentSummary,
    TailDamage, SEGMENT_HEADER_LEN,
};
use crate::storage::{FsStorage, Storage, StorageFile};
use crate::{
    now_micros, Error, Lsn, Options, Result, SyncPolicy, MAX_BATCH_BYTES, MAX_BODY_BYTES,
    MAX_KEY_BYTES,
};

/// The LSNs given to one appended batch, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LsnRange {
    pub first: Lsn,
    pub last: Lsn,
}

/// What opening the log found and did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub segments: usize,
    pub records: u64,
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    /// Bytes of a torn record removed from the end of the log.
    pub torn_bytes_truncated: u64,
    /// Records of an incomplete batch removed from the end of the log.
    pub incomplete_batch_records_dropped: u64,
    pub indexes_rebuilt: usize,
    /// Leftovers of interrupted compactions and merges that were removed.
    pub leftovers_removed: usize,
    pub elapsed: Duration,
}

/// One segment, as `aqueduct wal stat` shows it.
#[derive(Clone, Debug)]
pub struct SegmentStat {
    pub base: Lsn,
    pub name: String,
    pub bytes: u64,
    pub records: u64,
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    pub sealed: bool,
}

/// A sealed (immutable) segment as the log knows it.
#[derive(Clone, Debug)]
pub(crate) struct SealedSegment {
    pub header: SegmentHeader,
    pub summary: Arc<SegmentSummary>,
}

/// What readers may see: everything up to `lsn`, which ends at byte
/// `active_len` of the active segment `active_base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Visible {
    pub lsn: Lsn,
    pub active_base: Lsn,
    pub active_len: u64,
}

pub(crate) struct Active {
    pub header: SegmentHeader,
    pub file: Arc<dyn StorageFile>,
    pub summary: SegmentSummary,
}

pub(crate) struct Writer {
    pub active: Active,
    pub next_lsn: Lsn,
    scratch: Vec<u8>,
    offsets: Vec<(Lsn, u64, u64)>,
}

struct SyncState {
    durable: Lsn,
    syncing: bool,
    visible: Visible,
    /// Appenders parked until their LSN is durable. Waking only those a sync
    /// satisfied (and one next leader) keeps hundreds of waiters from all
    /// stampeding on every sync.
    waiters: Vec<(Lsn, std::thread::Thread)>,
}

pub(crate) struct Inner {
    pub storage: Arc<dyn Storage>,
    pub opts: Options,
    pub writer: Mutex<Writer>,
    /// Sealed segments in LSN order; replaced whole (copy on write).
    pub segments: RwLock<Arc<Vec<SealedSegment>>>,
    sync: Mutex<SyncState>,
    /// `SyncState::durable`, stored under `sync` whenever it changes: a
    /// reader whose LSN is already durable (nearly every read) learns it
    /// without taking the lock.
    durable_now: std::sync::atomic::AtomicU64,
    sync_cv: Condvar,
    poisoned: OnceLock<String>,
    pub compaction: Mutex<()>,
    /// Retention holds by name: compaction keeps every record at or above
    /// the lowest ([`Log::set_hold`]).
    pub holds: Mutex<std::collections::BTreeMap<String, Lsn>>,
    /// Which records compaction may drop although they are their key's
    /// newest version ([`Log::set_expiry`]).
    pub expiry: Mutex<Option<Arc<dyn crate::compaction::Expiry>>>,
    /// Serialises manifest writes; taken after `writer`, before `segments`.
    pub manifest: Mutex<ManifestState>,
    pub meta: Mutex<Meta>,
    pub generations: Mutex<u64>,
    pub metrics: LogMetrics,
    pub(crate) shutdown: Arc<Shutdown>,
    _lock: Option<DirLock>,
}

/// What the manifest needs beyond the sealed list: the active segment, and
/// segments removed from the list whose files may still be present.
pub(crate) struct ManifestState {
    pub active: SegmentHeader,
    pub removed: Vec<(Lsn, u64)>,
}

/// A handle to an open log; clones share it. When the last handle is
/// dropped, background work stops and the directory lock is released before
/// the drop returns, so the directory can be reopened at once.
#[derive(Clone)]
pub struct Log {
    pub(crate) inner: Arc<Inner>,
    /// `None` for the background threads' own short-lived handles.
    users: Option<Arc<Users>>,
}

/// Owned by user handles: stops and joins the background threads.
struct Users {
    shutdown: Arc<Shutdown>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Drop for Users {
    fn drop(&mut self) {
        *self.shutdown.stop.lock() = true;
        self.shutdown.cv.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Log {
    /// Opens (or creates) the log in directory `dir`, taking its lock.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<(Log, RecoveryReport)> {
        let dir = dir.as_ref();
        let lock = DirLock::acquire(dir)?;
        let storage =
            FsStorage::new(dir).map_err(|e| Error::io(format!("opening {}", dir.display()), e))?;
        Log::open_inner(Arc::new(storage), opts, Some(lock), false)
    }

    /// Opens the log taking the segment files present as the whole log,
    /// whatever the manifest says, and rewrites the manifest to name them.
    /// For an operator who has decided so (`aqueduct wal rebuild-manifest`)
    /// and for tools that have just written the files themselves.
    pub fn open_adopting(dir: impl AsRef<Path>, opts: Options) -> Result<(Log, RecoveryReport)> {
        if opts.read_only {
            return Err(Error::Invalid(
                "adopting the segments present rewrites the manifest: open writable".into(),
            ));
        }
        let dir = dir.as_ref();
        let lock = DirLock::acquire(dir)?;
        let storage =
            FsStorage::new(dir).map_err(|e| Error::io(format!("opening {}", dir.display()), e))?;
        Log::open_inner(Arc::new(storage), opts, Some(lock), true)
    }

    /// Opens the log on any storage (tests use [`crate::sim::SimStorage`]).
    pub fn open_with_storage(
        storage: Arc<dyn Storage>,
        opts: Options,
    ) -> Result<(Log, RecoveryReport)> {
        Log::open_inner(storage, opts, None, false)
    }

    fn open_inner(
        storage: Arc<dyn Storage>,
        opts: Options,
        lock: Option<DirLock>,
        adopt: bool,
    ) -> Result<(Log, RecoveryReport)> {
        let started = Instant::now();
        let mut recovered = recover(storage.as_ref(), &opts, adopt)?;
        if !opts.read_only && recovered.meta.server_id == 0 {
            // A new directory, or one from a build before server ids: its
            // id is drawn once and kept from now on.
            let mut m = recovered.meta.clone();
            m.server_id = loop {
                let id: u128 = rand::random();
                if id != 0 {
                    break id;
                }
            };
            m.store(storage.as_ref())?;
            recovered.meta = m;
        }
        let mut report = recovered.report;
        report.elapsed = started.elapsed();
        let last_lsn = recovered.next_lsn - 1;
        let visible = Visible {
            lsn: last_lsn,
            active_base: recovered.active.header.base,
            active_len: recovered.active.summary.data_len,
        };
        let manifest = Mutex::new(ManifestState {
            active: recovered.active.header,
            removed: Vec::new(),
        });
        let inner = Arc::new(Inner {
            manifest,
            storage,
            writer: Mutex::new(Writer {
                active: recovered.active,
                next_lsn: recovered.next_lsn,
                scratch: Vec::new(),
                offsets: Vec::new(),
            }),
            segments: RwLock::new(Arc::new(recovered.sealed)),
            sync: Mutex::new(SyncState {
                durable: last_lsn,
                syncing: false,
                visible,
                waiters: Vec::new(),
            }),
            durable_now: std::sync::atomic::AtomicU64::new(last_lsn),
            sync_cv: Condvar::new(),
            poisoned: OnceLock::new(),
            compaction: Mutex::new(()),
            holds: Mutex::new(Default::default()),
            expiry: Mutex::new(None),
            meta: Mutex::new(recovered.meta),
            generations: Mutex::new(recovered.max_generation),
            metrics: LogMetrics::default(),
            shutdown: Arc::new(Shutdown::default()),
            opts,
            _lock: lock,
        });
        let users = Arc::new(Users {
            shutdown: inner.shutdown.clone(),
            threads: Mutex::new(Vec::new()),
        });
        if let SyncPolicy::Interval(period) = inner.opts.sync {
            if !inner.opts.read_only {
                let t =
                    spawn_interval_syncer(Arc::downgrade(&inner), inner.shutdown.clone(), period);
                users.threads.lock().push(t);
            }
        }
        if inner.opts.read_only
            && (report.torn_bytes_truncated > 0 || report.incomplete_batch_records_dropped > 0)
        {
            tracing::warn!(
                torn_bytes = report.torn_bytes_truncated,
                dropped_records = report.incomplete_batch_records_dropped,
                "the log ends in a torn write left by a crash; it is ignored now and will be \
                 removed when the log is next opened for writing"
            );
        } else if report.torn_bytes_truncated > 0 || report.incomplete_batch_records_dropped > 0 {
            tracing::warn!(
                torn_bytes = report.torn_bytes_truncated,
                dropped_records = report.incomplete_batch_records_dropped,
                "the log ended in a torn write left by a crash; the unacknowledged tail was removed"
            );
        }
        let log = Log {
            inner,
            users: Some(users),
        };
        Ok((log, report))
    }

    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// Appends one record; see [`Log::append`].
    pub fn append_one(&self, record: NewRecord) -> Result<Lsn> {
        Ok(self.append(std::slice::from_ref(&record))?.first)
    }

    /// Appends `batch` atomically: after a crash it is either wholly in the
    /// log or wholly absent. Returns once the sync policy is satisfied.
    pub fn append(&self, batch: &[NewRecord]) -> Result<LsnRange> {
        let range = self.write_batch(batch, At::Next)?;
        self.await_committed(range.last)?;
        Ok(range)
    }

    /// Writes `batch` atomically and returns its LSNs without waiting for the
    /// sync policy; pair with [`Log::await_committed`] before acknowledging.
    /// This lets a caller release its own locks during the shared sync.
    pub fn append_pending(&self, batch: &[NewRecord]) -> Result<LsnRange> {
        self.write_batch(batch, At::Next)
    }

    /// Waits until `lsn` satisfies the sync policy (durable under `always`,
    /// written otherwise). Returns at once for already committed LSNs.
    pub fn await_committed(&self, lsn: Lsn) -> Result<()> {
        if self.inner.opts.sync == SyncPolicy::Always {
            self.inner.wait_durable(lsn)
        } else {
            Ok(())
        }
    }

    /// Appends `batch` only if its first LSN would be `first` (replication
    /// appends entries at positions chosen by the leader).
    pub fn append_at(&self, first: Lsn, batch: &[NewRecord]) -> Result<LsnRange> {
        let range = self.write_batch(batch, At::Exactly(first))?;
        self.await_committed(range.last)?;
        Ok(range)
    }

    /// Appends records copied from another log at the same LSNs, batch by
    /// batch, keeping each record's term, time and batch flags (a follower
    /// copying a member's log, `docs/replication.md`). `records` are whole
    /// batches with increasing LSNs from [`Log::next_lsn`] on; gaps are
    /// allowed (records a member's compaction dropped, copied by a new
    /// follower), after which the caller says so with
    /// [`Log::note_compacted_until`]. Waits once, after the last, for them
    /// to be durable as the sync policy says.
    pub fn append_copied(&self, records: &[Record]) -> Result<LsnRange> {
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return Err(Error::Invalid("no record to append".into()));
        };
        if !last.ends_batch() {
            return Err(Error::Invalid(format!(
                "the records end inside a batch (at LSN {})",
                last.lsn
            )));
        }
        let mut start = 0;
        for (i, r) in records.iter().enumerate() {
            if !r.ends_batch() {
                continue;
            }
            let batch: Vec<NewRecord> = records[start..=i]
                .iter()
                .map(|r| NewRecord {
                    kind: r.kind,
                    key: r.key.clone(),
                    body: r.body.clone(),
                    term: r.term,
                    timestamp_micros: r.timestamp_micros,
                })
                .collect();
            let lsns: Vec<Lsn> = records[start..=i].iter().map(|r| r.lsn).collect();
            self.write_batch(&batch, At::Copied(&lsns))?;
            start = i + 1;
        }
        self.await_committed(last.lsn)?;
        Ok(LsnRange {
            first: first.lsn,
            last: last.lsn,
        })
    }

    /// Records below `lsn` may be missing, as if compaction had dropped
    /// them (a follower that copied a member's compacted log): readers
    /// starting below it are told, as after a compaction here.
    pub fn note_compacted_until(&self, lsn: Lsn) -> Result<()> {
        let _pass = self.inner.compaction.lock();
        let mut meta = self.inner.meta.lock();
        if meta.compacted_until >= lsn {
            return Ok(());
        }
        let mut m = meta.clone();
        m.compacted_until = lsn;
        m.store(self.inner.storage.as_ref())?;
        *meta = m;
        Ok(())
    }

    fn write_batch(&self, batch: &[NewRecord], at: At<'_>) -> Result<LsnRange> {
        validate_batch(batch)?;
        if self.inner.opts.read_only {
            return Err(Error::Invalid("the log was opened read-only".into()));
        }
        if let Some(p) = self.inner.poisoned.get() {
            return Err(Error::Poisoned(p.clone()));
        }
        let now = now_micros();
        let mut w = self.inner.writer.lock();
        let next = w.next_lsn;
        let first = match at {
            At::Next => next,
            At::Exactly(expected) if expected == next => next,
            At::Exactly(expected) => {
                return Err(Error::Invalid(format!(
                    "append at LSN {expected}, but the next LSN is {next}"
                )));
            }
            At::Copied(lsns) => {
                assert_eq!(lsns.len(), batch.len(), "one LSN per record");
                if lsns[0] < next || lsns.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(Error::Invalid(format!(
                        "copied records must have increasing LSNs from the next LSN {next} on, got {}..={}",
                        lsns[0],
                        lsns[lsns.len() - 1]
                    )));
                }
                lsns[0]
            }
        };
        let lsn_of = |i: usize| match at {
            At::Copied(lsns) => lsns[i],
            _ => first + i as u64,
        };
        let start = w.active.summary.data_len;
        let Writer {
            scratch, offsets, ..
        } = &mut *w;
        scratch.clear();
        offsets.clear();
        for (i, r) in batch.iter().enumerate() {
            let lsn = lsn_of(i);
            let flags = if i + 1 < batch.len() {
                FLAG_BATCH_CONTINUES
            } else {
                0
            };
            let at = start + scratch.len() as u64;
            let ts = if r.timestamp_micros == 0 {
                now
            } else {
                r.timestamp_micros
            };
            record::encode_parts(scratch, lsn, r.term, ts, r.kind, flags, &r.key, &r.body);
            offsets.push((lsn, at, r.encoded_len() as u64));
        }
        if let Err(e) = w.active.file.write_at(&w.scratch, start) {
            // Leave no partial batch behind; if even that fails, stop writing.
            if let Err(t) = w.active.file.truncate(start) {
                self.inner
                    .poison(format!("could not undo a failed append: {t}"));
            }
            return Err(Error::io("appending to the log", e));
        }
        let Writer {
            active, offsets, ..
        } = &mut *w;
        for &(lsn, at, len) in offsets.iter() {
            active.summary.add(lsn, at, len);
        }
        let last = lsn_of(batch.len() - 1);
        w.next_lsn = last + 1;
        self.inner.metrics.appended(batch.len(), w.scratch.len());
        if self.inner.opts.sync != SyncPolicy::Always {
            self.inner.publish(Visible {
                lsn: last,
                active_base: w.active.header.base,
                active_len: w.active.summary.data_len,
            });
        }
        if w.active.summary.data_len >= self.inner.opts.segment_bytes {
            self.inner.seal(&mut w)?;
        }
        Ok(LsnRange { first, last })
    }

    /// Makes every appended record durable now.
    pub fn sync(&self) -> Result<Lsn> {
        let last = self.inner.writer.lock().next_lsn - 1;
        self.inner.wait_durable(last)?;
        Ok(last)
    }

    /// The LSN the next append will get.
    pub fn next_lsn(&self) -> Lsn {
        self.inner.writer.lock().next_lsn
    }

    /// The highest LSN known to be on stable storage.
    pub fn durable_lsn(&self) -> Lsn {
        self.inner
            .durable_now
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether [`Log::await_committed`] for `lsn` would return at once.
    pub fn is_committed(&self, lsn: Lsn) -> bool {
        self.inner.opts.sync != SyncPolicy::Always || self.durable_lsn() >= lsn
    }

    /// The highest LSN acknowledged to writers, hence visible to readers.
    pub fn committed_lsn(&self) -> Lsn {
        self.inner.sync.lock().visible.lsn
    }

    /// The lowest LSN still in the log (0 when empty).
    pub fn first_lsn(&self) -> Lsn {
        let segs = self.inner.segments.read().clone();
        for s in segs.iter() {
            if s.summary.record_count > 0 {
                return s.summary.first_lsn;
            }
        }
        let w = self.inner.writer.lock();
        w.active.summary.first_lsn
    }

    /// Waits until `lsn` is committed or `timeout` passes; returns the committed LSN.
    pub fn wait_for(&self, lsn: Lsn, timeout: Duration) -> Lsn {
        let deadline = Instant::now() + timeout;
        let mut st = self.inner.sync.lock();
        while st.visible.lsn < lsn {
            if self.inner.sync_cv.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        st.visible.lsn
    }

    /// A reader positioned at the first record with LSN >= `from`.
    pub fn reader(&self, from: Lsn) -> LogReader {
        LogReader::new(self.clone(), from)
    }

    /// Calls `f` for every committed record with LSN >= `from`, in order,
    /// without copying. Verifies every checksum on the way.
    pub fn replay(
        &self,
        from: Lsn,
        mut f: impl FnMut(RecordView<'_>) -> Result<()>,
    ) -> Result<u64> {
        let mut reader = self.reader(from);
        let mut n = 0u64;
        loop {
            let got = reader.read_with(usize::MAX, |r| {
                n += 1;
                f(r)
            })?;
            if got == 0 {
                return Ok(n);
            }
        }
    }

    /// Segments in LSN order.
    pub fn segments(&self) -> Vec<SegmentStat> {
        let (active_header, active_summary) = {
            let w = self.inner.writer.lock();
            (w.active.header, w.active.summary.clone())
        };
        let sealed = self.inner.segments.read().clone();
        let stat = |h: &SegmentHeader, s: &SegmentSummary, sealed: bool| SegmentStat {
            base: h.base,
            name: data_name(h.base),
            bytes: s.data_len,
            records: s.record_count,
            first_lsn: s.first_lsn,
            last_lsn: s.last_lsn,
            sealed,
        };
        let mut out: Vec<SegmentStat> = sealed
            .iter()
            .map(|s| stat(&s.header, &s.summary, true))
            .collect();
        out.push(stat(&active_header, &active_summary, false));
        out
    }

    /// Seals the active segment now (tests and the operator tool use this to
    /// make the tail eligible for compaction).
    pub fn seal_active(&self) -> Result<()> {
        let mut w = self.inner.writer.lock();
        if w.active.summary.record_count == 0 {
            return Ok(());
        }
        self.inner.seal(&mut w)
    }

    /// One compaction pass over the segments retention allows.
    pub fn compact(&self) -> Result<CompactionReport> {
        compaction::compact(self, &mut |_, _| {})
    }

    /// Like [`Log::compact`], reporting (segments done, segments planned).
    pub fn compact_with_progress(
        &self,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CompactionReport> {
        compaction::compact(self, progress)
    }

    /// Runs compaction in a background thread every `period` until the log is
    /// dropped. Appends are never blocked by it.
    pub fn start_background_compaction(&self, period: Duration) {
        let weak = Arc::downgrade(&self.inner);
        let shutdown = self.inner.shutdown.clone();
        let thread = std::thread::Builder::new()
            .name("log-compaction".into())
            .spawn(move || {
                compaction::lower_thread_priority();
                // Holds the log only while working, so dropping the log ends it.
                while !shutdown.wait(period) {
                    let Some(inner) = weak.upgrade() else { return };
                    let log = Log { inner, users: None };
                    if let Err(e) = log.compact() {
                        tracing::warn!("background log compaction failed: {e}");
                    }
                }
            })
            .expect("spawning the compaction thread");
        if let Some(users) = &self.users {
            users.threads.lock().push(thread);
        }
    }

    /// Removes every record with LSN > `lsn` (replication: a conflicting
    /// suffix). Crash-safe: each step leaves a prefix of the log.
    pub fn truncate_after(&self, lsn: Lsn) -> Result<()> {
        let inner = &self.inner;
        let _c = inner.compaction.lock();
        let mut w = inner.writer.lock();
        if lsn + 1 >= w.next_lsn {
            return Ok(());
        }
        let storage = inner.storage.as_ref();
        let io = |what: &str, e| Error::io(format!("truncating the log: {what}"), e);
        // Drop whole segments from the newest down, then cut the one holding `lsn`.
        let mut sealed: Vec<SealedSegment> = inner.segments.read().as_ref().clone();
        let goes = |s: &SealedSegment| s.header.base > lsn || s.summary.first_lsn > lsn;
        if w.active.header.base > lsn + 1 || w.active.summary.first_lsn > lsn {
            if let Some(s) = sealed.iter().rev().find(|s| !goes(s)) {
                if s.header.covers_until != 0 {
                    return Err(Error::Invalid(format!(
                        "cannot truncate after LSN {lsn}: it lies in compacted, merged history"
                    )));
                }
            }
        }
        // The manifest says a truncation is under way, so that recovery
        // accepts every state the steps below pass through.
        inner.record_truncation(&sealed, &w.active, Some(lsn))?;
        if w.active.header.base > lsn + 1 || w.active.summary.first_lsn > lsn {
            // The active segment goes entirely; an older one becomes active.
            storage
                .remove(&data_name(w.active.header.base))
                .map_err(|e| io("removing a segment", e))?;
            storage.sync_dir().map_err(|e| io("syncing", e))?;
            loop {
                match sealed.last() {
                    Some(s) if goes(s) => {
                        let base = s.header.base;
                        let _ = storage.remove(&index_name(base));
                        storage
                            .remove(&data_name(base))
                            .map_err(|e| io("removing a segment", e))?;
                        storage.sync_dir().map_err(|e| io("syncing", e))?;
                        sealed.pop();
                    }
                    _ => break,
                }
            }
            w.active = match sealed.pop() {
                Some(s) => {
                    let _ = storage.remove(&index_name(s.header.base));
                    let file = storage
                        .open(&data_name(s.header.base))
                        .map_err(|e| io("reopening a segment", e))?;
                    Active {
                        header: s.header,
                        file,
                        summary: s.summary.as_ref().clone(),
                    }
                }
                None => {
                    let generation = inner.next_generation();
                    create_segment(storage, lsn + 1, generation)
                        .map_err(|e| io("creating a segment", e))?
                }
            };
        }
        // Cut the active segment after `lsn`.
        let cut = {
            let a = &w.active;
            let mut cut = a.summary.data_len;
            if a.summary.last_lsn > lsn {
                let from = a.summary.seek(lsn + 1);
                segment::scan(a.file.as_ref(), from, a.summary.data_len, |r, off| {
                    if r.lsn > lsn {
                        cut = off;
                        return Ok(false);
                    }
                    Ok(true)
                })
                .map_err(|e| e.at(storage, a.header.base))?;
            }
            cut
        };
        w.active
            .file
            .truncate(cut)
            .map_err(|e| io("cutting the segment", e))?;
        w.active.file.sync().map_err(|e| io("syncing", e))?;
        let (summary, _) = segment::summarize(w.active.file.as_ref(), cut)
            .map_err(|e| e.at(storage, w.active.header.base))?;
        w.active.summary = summary;
        w.next_lsn = (lsn + 1).max(w.active.header.base);
        if let Err(e) = inner.record_truncation(&sealed, &w.active, None) {
            // The manifest still says a truncation is under way; appends
            // must not go on under it.
            inner.poison(format!("could not record a finished truncation: {e}"));
        }
        *inner.segments.write() = Arc::new(sealed);
        let mut st = inner.sync.lock();
        let durable = st.durable.min(lsn);
        inner.set_durable(&mut st, durable);
        st.visible = Visible {
            lsn: st.visible.lsn.min(lsn),
            active_base: w.active.header.base,
            active_len: cut,
        };
        Ok(())
    }

    /// Removes whole sealed segments that hold only records with LSN < `lsn`,
    /// and remembers the purge point (with its term) in the metadata.
    pub fn purge_before(&self, lsn: Lsn, term: u64) -> Result<()> {
        let inner = &self.inner;
        let _c = inner.compaction.lock();
        {
            let mut meta = inner.meta.lock();
            let mut m = meta.clone();
            m.purged_lsn = m.purged_lsn.max(lsn.saturating_sub(1));
            m.purged_term = term;
            m.store(inner.storage.as_ref())?;
            *meta = m;
        }
        // The manifest drops the purged segments (listing them as removed)
        // before their files go.
        let gone: Vec<(Lsn, u64)> = {
            let mut ms = inner.manifest.lock();
            let segs = inner.segments.read().clone();
            let n = segs.iter().take_while(|s| s.summary.last_lsn < lsn).count();
            if n == 0 {
                return Ok(());
            }
            let gone: Vec<(Lsn, u64)> = segs[..n]
                .iter()
                .map(|s| (s.header.base, s.header.generation))
                .collect();
            let kept = segs[n..].to_vec();
            let mut removed = ms.removed.clone();
            removed.extend(&gone);
            manifest_of(&kept, &ms.active, None, removed.clone(), None)
                .store(inner.storage.as_ref())
                .map_err(|e| Error::io("writing the log manifest", e.error))?;
            ms.removed = removed;
            *inner.segments.write() = Arc::new(kept);
            gone
        };
        let storage = inner.storage.as_ref();
        for &(base, _) in &gone {
            let _ = storage.remove(&index_name(base));
            storage
                .remove(&data_name(base))
                .map_err(|e| Error::io("purging a segment", e))?;
            storage
                .sync_dir()
                .map_err(|e| Error::io("purging a segment", e))?;
        }
        inner.manifest.lock().removed.retain(|r| !gone.contains(r));
        Ok(())
    }

    /// The durable metadata (purge point, vote).
    /// Keeps every record at or above `from` out of compaction's reach
    /// while the hold `name` exists (`None` removes it). Waits for a
    /// compaction pass under way, so once this returns no pass removes a
    /// held record. Refused when compaction already went past `from`.
    pub fn set_hold(&self, name: &str, from: Option<Lsn>) -> Result<()> {
        self.put_hold(name, from, false)
    }

    fn put_hold(&self, name: &str, from: Option<Lsn>, below_exact: bool) -> Result<()> {
        let _pass = self.inner.compaction.lock();
        let mut holds = self.inner.holds.lock();
        match from {
            None => {
                holds.remove(name);
            }
            Some(lsn) => {
                let exact = self.exact_from();
                if lsn < exact && !below_exact {
                    return Err(Error::Invalid(format!(
                        "cannot keep the log from LSN {lsn}: compaction already removed records \
                         below LSN {exact}"
                    )));
                }
                holds.insert(name.to_string(), lsn);
            }
        }
        Ok(())
    }

    /// Like [`Log::set_hold`] for a reader that takes the log as compaction
    /// left it (a new follower copying it, `docs/replication.md`): allowed
    /// below [`Log::exact_from`], it keeps compaction from changing any
    /// record at or above `from` while the reader goes on, so it never
    /// misses a tombstone whose older put it already read.
    pub fn hold_as_compacted(&self, name: &str, from: Lsn) {
        self.put_hold(name, Some(from), true)
            .expect("a hold below the exact point is allowed");
    }

    /// Tells compaction which rows expire: records it may drop, once
    /// they are below every hold, although no later record of their key
    /// replaces them (rows of ephemeral tables, which the layer above
    /// knows by their keys). `None`: every key's newest version stays.
    pub fn set_expiry(&self, expiry: Option<Arc<dyn crate::compaction::Expiry>>) {
        *self.inner.expiry.lock() = expiry;
    }

    /// The retention holds, by name.
    pub fn holds(&self) -> std::collections::BTreeMap<String, Lsn> {
        self.inner.holds.lock().clone()
    }

    /// The lowest LSN from which the log holds every record appended (and
    /// not purged): a reader starting at or above it misses nothing;
    /// below it, compaction may have dropped records.
    pub fn exact_from(&self) -> Lsn {
        let meta = self.inner.meta.lock();
        meta.compacted_until.max(meta.purged_lsn + 1).max(1)
    }

    pub fn meta(&self) -> Meta {
        self.inner.meta.lock().clone()
    }

    /// The log's random id (`meta`), as 32 hex digits; all zeros only for
    /// a log opened read-only that never had one.
    pub fn server_id(&self) -> String {
        format!("{:032x}", self.inner.meta.lock().server_id)
    }

    /// Stores the replication vote durably.
    pub fn save_vote(&self, vote: &[u8]) -> Result<()> {
        let mut meta = self.inner.meta.lock();
        let mut m = meta.clone();
        m.vote = vote.to_vec();
        m.store(self.inner.storage.as_ref())?;
        *meta = m;
        Ok(())
    }

    /// Counters for monitoring.
    pub fn metrics(&self) -> &LogMetrics {
        &self.inner.metrics
    }

    pub(crate) fn visible(&self) -> Visible {
        self.inner.sync.lock().visible
    }
}

/// Tells background threads that the log is gone.
#[derive(Default)]
pub(crate) struct Shutdown {
    stop: Mutex<bool>,
    cv: Condvar,
}

impl Shutdown {
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.lock()
    }

    /// Returns true when the log was dropped; otherwise waits up to `period`.
    fn wait(&self, period: Duration) -> bool {
        let mut s = self.stop.lock();
        if !*s {
            self.cv.wait_for(&mut s, period);
        }
        *s
    }
}

impl Inner {
    fn poison(&self, why: String) {
        tracing::error!("log writes stopped: {why}");
        let _ = self.poisoned.set(why);
        // Never called with `sync` held.
        self.wake_waiters(&self.sync.lock());
        self.sync_cv.notify_all();
    }

    /// Writes the manifest for a truncation: with `truncating_after` before
    /// its first step, without it once done (the active segment then being
    /// `active`).
    fn record_truncation(
        &self,
        sealed: &[SealedSegment],
        active: &Active,
        truncating_after: Option<Lsn>,
    ) -> Result<()> {
        let mut ms = self.manifest.lock();
        manifest_of(
            sealed,
            &active.header,
            Some(&active.summary),
            ms.removed.clone(),
            truncating_after,
        )
        .store(self.storage.as_ref())
        .map_err(|e| Error::io("writing the log manifest", e.error))?;
        ms.active = active.header;
        Ok(())
    }

    pub(crate) fn next_generation(&self) -> u64 {
        let mut g = self.generations.lock();
        *g += 1;
        *g
    }

    fn publish(&self, v: Visible) {
        let mut st = self.sync.lock();
        if v.lsn >= st.visible.lsn {
            st.visible = v;
        }
        drop(st);
        self.sync_cv.notify_all();
    }

    /// Group commit: the first waiter syncs for everyone written so far;
    /// the others wait for its result.
    /// Sets the durable LSN; `st` is `self.sync` locked.
    fn set_durable(&self, st: &mut SyncState, lsn: Lsn) {
        st.durable = lsn;
        self.durable_now
            .store(lsn, std::sync::atomic::Ordering::Release);
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        // Durable already: nothing to wait for, poisoned or not.
        if self.durable_now.load(std::sync::atomic::Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let me = std::thread::current();
        let mut parked = false;
        let mut st = self.sync.lock();
        loop {
            if st.durable >= lsn || self.poisoned.get().is_some() {
                if parked {
                    st.waiters.retain(|(_, t)| t.id() != me.id());
                }
                return match self.poisoned.get() {
                    Some(p) if st.durable < lsn => Err(Error::Poisoned(p.clone())),
                    _ => Ok(()),
                };
            }
            if st.syncing {
                if !parked {
                    st.waiters.push((lsn, me.clone()));
                    parked = true;
                }
                drop(st);
                std::thread::park();
                st = self.sync.lock();
                continue;
            }
            // Lead: sync everything written so far, for everyone.
            if parked {
                st.waiters.retain(|(_, t)| t.id() != me.id());
                parked = false;
            }
            st.syncing = true;
            drop(st);
            let (visible, file) = {
                let w = self.writer.lock();
                let v = Visible {
                    lsn: w.next_lsn - 1,
                    active_base: w.active.header.base,
                    active_len: w.active.summary.data_len,
                };
                (v, w.active.file.clone())
            };
            let started = Instant::now();
            let result = file.sync();
            self.metrics.synced(started.elapsed());
            if let Err(e) = &result {
                self.poison(format!("fdatasync failed: {e}"));
            }
            st = self.sync.lock();
            st.syncing = false;
            if result.is_ok() {
                let durable = st.durable.max(visible.lsn);
                self.set_durable(&mut st, durable);
                if visible.lsn >= st.visible.lsn {
                    st.visible = visible;
                }
            }
            self.wake_waiters(&st);
            self.sync_cv.notify_all();
        }
    }

    /// Unparks the waiters whose LSN is durable (all of them once the log is
    /// poisoned), and the lowest other waiter to lead the next sync.
    fn wake_waiters(&self, st: &SyncState) {
        let poisoned = self.poisoned.get().is_some();
        let mut next: Option<&(Lsn, std::thread::Thread)> = None;
        for w in &st.waiters {
            if poisoned || w.0 <= st.durable {
                w.1.unpark();
            } else if next.is_none_or(|n| w.0 < n.0) {
                next = Some(w);
            }
        }
        if !st.syncing {
            if let Some((_, t)) = next {
                t.unpark();
            }
        }
    }

    /// Makes the active segment immutable, writes its index and starts a new one.
    pub(crate) fn seal(&self, w: &mut Writer) -> Result<()> {
        if let Err(e) = w.active.file.sync() {
            self.poison(format!("fdatasync failed while sealing a segment: {e}"));
            return Err(Error::Poisoned(format!("fdatasync failed: {e}")));
        }
        let storage = self.storage.as_ref();
        let base = w.active.header.base;
        let index = w.active.summary.encode_index(w.active.header.generation);
        if let Err(e) = segment::write_atomically(storage, &index_name(base), &index) {
            // The index is a hint; it is rebuilt at open.
            tracing::warn!("could not write the index of segment {base}: {e}");
        }
        let generation = self.next_generation();
        let give_up = |e: String| {
            // Keep appending to the current segment; it just grows.
            let _ = storage.remove(&data_name(w.next_lsn));
            if let Err(e2) = storage.sync_dir() {
                self.poison(format!("could not remove a half-made segment: {e2}"));
            }
            tracing::warn!("could not start a new segment, continuing in the old one: {e}");
        };
        let new = match create_segment(storage, w.next_lsn, generation) {
            Ok(a) => a,
            Err(e) => {
                give_up(e.to_string());
                return Ok(());
            }
        };
        // The manifest names the new segment before any record goes to it;
        // until then it is an empty segment that recovery may drop.
        let mut ms = self.manifest.lock();
        let mut v = self.segments.read().as_ref().clone();
        v.push(SealedSegment {
            header: w.active.header,
            summary: Arc::new(w.active.summary.clone()),
        });
        let recorded = manifest_of(&v, &new.header, None, ms.removed.clone(), None).store(storage);
        match recorded {
            Ok(()) => ms.active = new.header,
            Err(e) if e.clean => {
                drop(ms);
                give_up(format!("could not write the log manifest: {}", e.error));
                return Ok(());
            }
            Err(e) => {
                // Either manifest may be the durable one now; only a restart
                // (which checks the directory against it) can tell.
                drop(ms);
                let why = format!("could not write the log manifest: {}", e.error);
                self.poison(why.clone());
                return Err(Error::Poisoned(why));
            }
        }
        self.metrics
            .segments_sealed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _old = std::mem::replace(&mut w.active, new);
        *self.segments.write() = Arc::new(v);
        drop(ms);
        let last = w.next_lsn - 1;
        let mut st = self.sync.lock();
        let durable = st.durable.max(last);
        self.set_durable(&mut st, durable);
        st.visible = Visible {
            lsn: last.max(st.visible.lsn),
            active_base: w.active.header.base,
            active_len: w.active.summary.data_len,
        };
        self.wake_waiters(&st);
        drop(st);
        self.sync_cv.notify_all();
        Ok(())
    }
}

fn spawn_interval_syncer(
    weak: Weak<Inner>,
    shutdown: Arc<Shutdown>,
    period: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("log-sync".into())
        .spawn(move || {
            while !shutdown.wait(period) {
                let Some(inner) = weak.upgrade() else { return };
                let last = inner.writer.lock().next_lsn - 1;
                if let Err(e) = inner.wait_durable(last) {
                    tracing::error!("periodic log sync failed: {e}");
                    return;
                }
            }
        })
        .expect("spawning the log sync thread")
}

/// Where a batch goes in the log.
#[derive(Clone, Copy)]
enum At<'a> {
    /// At the next LSNs.
    Next,
    /// At the next LSNs, which must begin here.
    Exactly(Lsn),
    /// At these LSNs (one per record, increasing, from the next LSN on).
    Copied(&'a [Lsn]),
}

fn validate_batch(batch: &[NewRecord]) -> Result<()> {
    if batch.is_empty() {
        return Err(Error::Invalid("an empty batch cannot be appended".into()));
    }
    let mut total = 0usize;
    for r in batch {
        if r.key.len() > MAX_KEY_BYTES {
            return Err(Error::Invalid(format!(
                "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
                r.key.len()
            )));
        }
        if r.body.len() > MAX_BODY_BYTES {
            return Err(Error::Invalid(format!(
                "value of {} bytes exceeds the limit of {MAX_BODY_BYTES}",
                r.body.len()
            )));
        }
        total += r.encoded_len();
    }
    if total > MAX_BATCH_BYTES {
        return Err(Error::Invalid(format!(
            "batch of {total} bytes exceeds the limit of {MAX_BATCH_BYTES}"
        )));
    }
    Ok(())
}

/// Creates an empty segment durably: header written and synced, name synced.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    base: Lsn,
    generation: u64,
) -> std::io::Result<Active> {
    let header = SegmentHeader {
        base,
        covers_until: 0,
        generation,
    };
    let file = storage.create(&data_name(base))?;
    file.write_at(&header.encode(), 0)?;
    file.sync()?;
    storage.sync_dir()?;
    Ok(Active {
        header,
        file,
        summary: SegmentSummary::empty(),
    })
}

struct Recovered {
    sealed: Vec<SealedSegment>,
    active: Active,
    next_lsn: Lsn,
    meta: Meta,
    max_generation: u64,
    report: RecoveryReport,
}

/// Recovery, in the order of `docs/log-format.md` ("Opening a log").
fn recover(storage: &dyn Storage, opts: &Options, adopt: bool) -> Result<Recovered> {
    let mut report = RecoveryReport::default();
    let writable = !opts.read_only;
    let names = storage
        .list()
        .map_err(|e| Error::io("listing the log directory", e))?;
    // 1. Temporary files are unfinished rewrites: the originals are intact.
    for name in names.iter().filter(|n| n.ends_with(".tmp")) {
        if writable {
            storage
                .remove(name)
                .map_err(|e| Error::io("removing a leftover temporary file", e))?;
        }
        report.leftovers_removed += 1;
    }
    let mut bases: Vec<Lsn> = names.iter().filter_map(|n| parse_data_name(n)).collect();
    bases.sort_unstable();
    let meta = Meta::load(storage)?;

    let manifest = if adopt {
        None
    } else {
        Manifest::load(storage)?
    };

    // 2. Headers, and the directory checked against the manifest: which
    // files make up the log, and which are leftovers of interrupted work.
    let mut found = Vec::with_capacity(bases.len());
    let mut files = Vec::with_capacity(bases.len());
    for &base in &bases {
        let name = data_name(base);
        let file = storage
            .open(&name)
            .map_err(|e| Error::io(format!("opening {}", storage.describe(&name)), e))?;
        let len = file
            .len()
            .map_err(|e| Error::io("reading a segment length", e))?;
        let mut raw = [0u8; SEGMENT_HEADER_LEN as usize];
        let (header, version) = match file.read_exact_at(&mut raw, 0) {
            Ok(()) => (SegmentHeader::decode(&raw), segment::header_version(&raw)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                (Err("segment header is cut short".to_string()), 0)
            }
            Err(e) => (Err(format!("cannot read segment header: {e}")), 0),
        };
        found.push(Found {
            base,
            len,
            header,
            version,
        });
        files.push(file);
    }
    let plan = manifest::plan(storage, &found, manifest.as_ref(), &meta, adopt)?;
    let mut max_generation = manifest.as_ref().map_or(0, |m| {
        m.segments
            .iter()
            .map(|e| e.generation)
            .chain(m.removed.iter().map(|r| r.1))
            .max()
            .unwrap_or(0)
    });
    let last_kept = found
        .iter()
        .zip(&plan.fates)
        .rfind(|(_, &fate)| fate == Fate::Keep)
        .map(|(f, _)| f.base);
    let mut segs: Vec<(SegmentHeader, Arc<dyn StorageFile>, u64)> = Vec::new();
    for ((f, file), &fate) in found.into_iter().zip(files).zip(&plan.fates) {
        let name = data_name(f.base);
        if fate == Fate::Leftover {
            tracing::info!(
                "removing {name}: left behind by an interrupted merge, compaction, purge or \
                 segment creation"
            );
            if writable {
                let _ = storage.remove(&index_name(f.base));
                storage
                    .remove(&name)
                    .map_err(|e| Error::io("removing a leftover segment", e))?;
            }
            report.leftovers_removed += 1;
            continue;
        }
        let header = match f.header {
            Ok(h) => h,
            Err(_) if Some(f.base) == last_kept && f.len <= SEGMENT_HEADER_LEN => {
                // Created but not yet complete when the machine stopped: it
                // holds no records. Recreate it.
                tracing::warn!("recreating {name}: its creation was cut short by a crash");
                if !writable {
                    continue;
                }
                let a = create_segment(storage, f.base, max_generation + 1)
                    .map_err(|e| Error::io("recreating a segment", e))?;
                segs.push((a.header, a.file, SEGMENT_HEADER_LEN));
                max_generation += 1;
                continue;
            }
            Err(reason) => {
                return Err(Error::Corrupt {
                    location: storage.describe(&name),
                    offset: 0,
                    lsn: None,
                    reason,
                })
            }
        };
        max_generation = max_generation.max(header.generation);
        segs.push((header, file, f.len));
    }

    if writable && report.leftovers_removed > 0 {
        storage
            .sync_dir()
            .map_err(|e| Error::io("syncing the log directory", e))?;
    }

    // 3. An empty directory gets its first segment.
    if segs.is_empty() {
        let base = meta.purged_lsn + 1;
        if !writable {
            return Err(Error::Invalid("the log directory holds no log".into()));
        }
        let a = create_segment(storage, base, max_generation + 1)
            .map_err(|e| Error::io("creating the first segment", e))?;
        // Until this is written, the directory holds one empty segment and
        // no manifest: a fresh log, which the next open starts again.
        manifest_of(&[], &a.header, None, Vec::new(), None)
            .store(storage)
            .map_err(|e| Error::io("writing the log manifest", e.error))?;
        report.segments = 1;
        return Ok(Recovered {
            sealed: Vec::new(),
            next_lsn: base,
            active: a,
            meta,
            max_generation: max_generation + 1,
            report,
        });
    }

    // 4. Sealed segments: their index, or a scan that rebuilds it.
    let (active_header, active_file, active_len) = segs.pop().expect("not empty");
    let mut sealed = Vec::with_capacity(segs.len());
    let mut prev_last = 0;
    for (header, file, len) in segs {
        let (summary, rebuilt) =
            segment::load_or_rebuild_index(storage, header.base, &file, &header, len, writable)?;
        report.indexes_rebuilt += rebuilt as usize;
        if let Some(e) = plan.expected.get(&header.base) {
            check_recorded(storage, e, &summary)?;
        }
        check_order(storage, &header, &summary, prev_last)?;
        if summary.record_count > 0 {
            prev_last = summary.last_lsn;
        }
        report.records += summary.record_count;
        sealed.push(SealedSegment {
            header,
            summary: Arc::new(summary),
        });
    }

    // 5. The active segment: a torn tail is cut, corruption refuses.
    let summary = recover_tail(
        storage,
        &active_header,
        &active_file,
        active_len,
        writable,
        &mut report,
    )?;
    check_order(storage, &active_header, &summary, prev_last)?;
    if writable {
        // Its index, if any, is from an earlier seal and will be rewritten.
        let _ = storage.remove(&index_name(active_header.base));
        // What we found may still be only in the OS cache (written under
        // `never` before a clean exit); make it durable so `durable_lsn` is true.
        active_file
            .sync()
            .map_err(|e| Error::io("syncing the active segment", e))?;
    }
    report.records += summary.record_count;
    report.segments = sealed.len() + 1;
    let last = if summary.record_count > 0 {
        summary.last_lsn
    } else {
        prev_last
    };
    let next_lsn = (last + 1).max(active_header.base).max(meta.purged_lsn + 1);
    report.last_lsn = next_lsn - 1;
    report.first_lsn = sealed
        .iter()
        .map(|s| &*s.summary)
        .chain(std::iter::once(&summary))
        .find(|s| s.record_count > 0)
        .map(|s| s.first_lsn)
        .unwrap_or(0);
    // 6. The manifest now names exactly these segments (a log of format
    // version 1 gets its first one here).
    if writable {
        let now = manifest_of(&sealed, &active_header, None, Vec::new(), None);
        if manifest.as_ref() != Some(&now) {
            now.store(storage)
                .map_err(|e| Error::io("writing the log manifest", e.error))?;
            if manifest.is_none() && !adopt {
                tracing::info!("the log now keeps a manifest of its segments (format version 2)");
            }
        }
    }
    Ok(Recovered {
        sealed,
        active: Active {
            header: active_header,
            file: active_file,
            summary,
        },
        next_lsn,
        meta,
        max_generation,
        report,
    })
}

/// What the manifest records of a segment, from the log's own segments.
pub(crate) fn manifest_of(
    sealed: &[SealedSegment],
    active: &SegmentHeader,
    active_summary: Option<&SegmentSummary>,
    removed: Vec<(Lsn, u64)>,
    truncating_after: Option<Lsn>,
) -> Manifest {
    let entry = |h: &SegmentHeader, s: Option<&SegmentSummary>, active: bool| {
        let s = s.cloned().unwrap_or_default();
        ManifestEntry {
            base: h.base,
            generation: h.generation,
            covers_until: h.covers_until,
            first_lsn: s.first_lsn,
            last_lsn: s.last_lsn,
            record_count: s.record_count,
            data_len: s.data_len,
            active,
        }
    };
    let mut segments: Vec<ManifestEntry> = sealed
        .iter()
        .map(|s| entry(&s.header, Some(&s.summary), false))
        .collect();
    segments.push(entry(active, active_summary, true));
    Manifest {
        segments,
        removed,
        truncating_after,
    }
}

/// A sealed segment of the generation the manifest names must hold what
/// the manifest recorded when it was sealed or rewritten.
fn check_recorded(storage: &dyn Storage, e: &ManifestEntry, s: &SegmentSummary) -> Result<()> {
    if (s.record_count, s.first_lsn, s.last_lsn) == (e.record_count, e.first_lsn, e.last_lsn) {
        return Ok(());
    }
    Err(Error::Inconsistent {
        problem: format!(
            "{} holds {} records, LSN {} to {}, but the log recorded {}: a different copy of \
             that segment",
            storage.describe(&data_name(e.base)),
            s.record_count,
            s.first_lsn,
            s.last_lsn,
            e.describe_range()
        ),
        repair: format!(
            "put the right version of the file back; or accept losing {} and everything after \
             it with `aqueduct wal truncate <dir> --at {}`",
            e.describe_range(),
            e.start()
        ),
        cut_at: Some(e.start()),
    })
}

fn check_order(
    storage: &dyn Storage,
    header: &SegmentHeader,
    s: &SegmentSummary,
    prev_last: Lsn,
) -> Result<()> {
    if s.record_count > 0 && (s.first_lsn < header.base || s.first_lsn <= prev_last) {
        return Err(Error::Corrupt {
            location: storage.describe(&data_name(header.base)),
            offset: SEGMENT_HEADER_LEN,
            lsn: Some(s.first_lsn),
            reason: format!(
                "first LSN {} does not follow the previous segment's last LSN {prev_last}",
                s.first_lsn
            ),
        });
    }
    Ok(())
}

/// Scans the active segment. Bad bytes that a crash can explain are a torn
/// write and are cut off, together with any incomplete batch before them;
/// anything else is corruption ([`segment::classify_tail`]).
fn recover_tail(
    storage: &dyn Storage,
    header: &SegmentHeader,
    file: &Arc<dyn StorageFile>,
    len: u64,
    writable: bool,
    report: &mut RecoveryReport,
) -> Result<SegmentSummary> {
    let location = || storage.describe(&data_name(header.base));
    let mut summary = SegmentSummary::empty();
    // The summary as of the end of the last complete batch.
    let mut committed = (SEGMENT_HEADER_LEN, 0u64, 0u64, 0usize);
    let end = segment::scan(file.as_ref(), SEGMENT_HEADER_LEN, len, |r, off| {
        if r.lsn <= summary.last_lsn {
            return Err(Error::Corrupt {
                location: location(),
                offset: off,
                lsn: Some(r.lsn),
                reason: "LSN does not increase".into(),
            });
        }
        summary.add(r.lsn, off, r.encoded_len() as u64);
        if r.ends_batch() {
            committed = (
                summary.data_len,
                summary.last_lsn,
                summary.record_count,
                summary.entries.len(),
            );
        }
        Ok(true)
    })?;
    let valid_end = match end {
        ScanEnd::Clean { end } => end,
        ScanEnd::Bad { offset, error } => {
            match segment::classify_tail(file.as_ref(), offset, len, &error, summary.last_lsn)? {
                TailDamage::Corrupt { lsn, reason } => {
                    return Err(Error::Corrupt {
                        location: location(),
                        offset,
                        lsn,
                        reason,
                    })
                }
                TailDamage::Torn => {}
            }
            report.torn_bytes_truncated = len - offset;
            offset
        }
    };
    let (batch_end, last_lsn, record_count, entries) = committed;
    report.incomplete_batch_records_dropped = summary.record_count - record_count;
    summary.data_len = batch_end;
    summary.last_lsn = last_lsn;
    summary.record_count = record_count;
    summary.entries.truncate(entries);
    if record_count == 0 {
        summary.first_lsn = 0;
    }
    if batch_end < len {
        tracing::warn!(
            segment = %location(),
            cut_at = batch_end,
            "truncating a torn tail of {} bytes",
            len - batch_end
        );
        if writable {
            file.truncate(batch_end)
                .and_then(|_| file.sync())
                .map_err(|e| Error::io("truncating a torn tail", e))?;
        }
    }
    debug_assert!(batch_end <= valid_end);
    Ok(summary)
}
