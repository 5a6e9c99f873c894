//! Live, incremental, restartable compaction (after Sirius §6.1, done as one
//! pass over the compactable prefix of sealed segments).
//!
//! 1. The compactable range is the longest prefix of sealed segments that
//!    retention allows: every record below `Retention::protect_from`, and
//!    segments whose newest record is older than `Retention::min_age`.
//! 2. A scan of the range finds, for each key, the LSN of its newest `Put` or
//!    `Delete`.
//! 3. Segments are rewritten oldest first, keeping records that are not
//!    compactable (schema, transaction markers, chain hops, ...) and the newest
//!    `Put` of each key. The newest `Delete` of a key is dropped too: every
//!    older record of the key sits in an older segment, rewritten earlier in
//!    this pass, or in this very segment, so nothing older holds the key once
//!    this segment is swapped in. A `Put` the layer above says has expired
//!    ([`Expiry`]: a row of an ephemeral table) is dropped even when it is
//!    its key's newest version; the range is below every hold, so every
//!    durable reader has consumed it. Each rewrite goes to `<base>.seg.tmp`, is
//!    synced, and is renamed over the segment: a crash leaves either version,
//!    and either version (with the rest of the log) replays to the same state.
//! 4. Adjacent small segments are merged into the first of them; the merged
//!    header's `covers_until` tells recovery to remove the absorbed segments
//!    if a crash left them behind.
//!
//! Only sealed segments are touched and the writer lock is never taken, so
//! appends proceed during compaction. Memory: one entry per distinct key of
//! the range (the key bytes and an LSN).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::log::{manifest_of, Log, SealedSegment};
use crate::record::{RecordKind, RecordView, FLAG_BATCH_CONTINUES};
use crate::segment::{
    self, data_name, index_name, tmp_name, write_atomically, ScanEnd, SegmentHeader,
    SegmentSummary, SEGMENT_HEADER_LEN,
};
use crate::storage::{Storage, StorageFile};
use crate::{now_micros, Error, Lsn, Result};

/// Lowers the calling thread to the lowest CPU priority, so compaction
/// yields the CPU to appends and reads. The background compaction thread
/// calls it; call it in any thread of your own that runs [`Log::compact`].
pub fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the current thread; no memory involved.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// What compaction must leave untouched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Records at or above this LSN (and the segments holding them) are kept
    /// exactly: the state as of any LSN from here on can be rebuilt, and a
    /// reader starting here sees every record.
    pub protect_from: Option<Lsn>,
    /// Segments whose newest record is younger than this are left alone.
    pub min_age: Duration,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionReport {
    pub segments_considered: usize,
    pub segments_rewritten: usize,
    pub segments_removed: usize,
    pub segments_merged: usize,
    pub records_before: u64,
    pub records_after: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// What compaction of the whole log (ignoring retention) would reclaim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reclaimable {
    pub keys: u64,
    pub records: u64,
    pub bytes: u64,
}

/// Says, for one pass, whether a `Put` record (by its key) has expired.
pub type ExpiredPuts = Box<dyn Fn(&[u8]) -> bool + Send>;

/// Records compaction may drop although no later record of their key
/// replaces them: rows published but not stored (ephemeral tables). The
/// log does not know what keys mean; the layer that does sets this
/// ([`Log::set_expiry`]). Only records of the compactable range are asked
/// about, so a record at or above any hold, or above
/// [`Retention::protect_from`], is never dropped this way.
pub trait Expiry: Send + Sync {
    /// Called once at the start of each pass, before compaction takes its
    /// lock: the predicate for the pass, or `None` when nothing expires.
    fn for_pass(&self) -> Option<ExpiredPuts>;
}

/// Newest compactable LSN per key.
type NewestByKey = HashMap<Vec<u8>, Lsn>;

fn keep(r: &RecordView<'_>, newest: &NewestByKey, expired: Option<&ExpiredPuts>) -> bool {
    if !r.kind.is_compactable() {
        return true;
    }
    if r.kind == RecordKind::Put && expired.is_some_and(|f| f(r.key)) {
        return false;
    }
    matches!(r.kind, RecordKind::Put | RecordKind::TxnDeps) && newest.get(r.key) == Some(&r.lsn)
}

fn open_segment(storage: &dyn Storage, base: Lsn) -> Result<Arc<dyn StorageFile>> {
    storage
        .open(&data_name(base))
        .map_err(|e| Error::io(format!("opening {}", storage.describe(&data_name(base))), e))
}

/// Scans a whole segment, failing on any bad record.
fn scan_all(
    storage: &dyn Storage,
    file: &dyn StorageFile,
    base: Lsn,
    len: u64,
    mut visit: impl FnMut(RecordView<'_>, u64) -> Result<()>,
) -> Result<()> {
    let end = segment::scan(file, SEGMENT_HEADER_LEN, len, |r, off| {
        visit(r, off)?;
        Ok(true)
    })
    .map_err(|e| e.at(storage, base))?;
    match end {
        ScanEnd::Clean { .. } => Ok(()),
        ScanEnd::Bad { offset, error } => Err(Error::Corrupt {
            location: storage.describe(&data_name(base)),
            offset,
            lsn: segment::bad_lsn(&error),
            reason: error.to_string(),
        }),
    }
}

/// Builds the newest-LSN map over `segments` (each given by base and length).
fn newest_by_key(storage: &dyn Storage, segments: &[(Lsn, u64)]) -> Result<NewestByKey> {
    let mut newest = NewestByKey::new();
    for &(base, len) in segments {
        let file = open_segment(storage, base)?;
        scan_all(storage, file.as_ref(), base, len, |r, _| {
            if r.kind.is_compactable() {
                match newest.get_mut(r.key) {
                    Some(l) => *l = r.lsn,
                    None => {
                        newest.insert(r.key.to_vec(), r.lsn);
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(newest)
}

/// What compacting every segment, sealed or not, would drop.
pub fn reclaimable(log: &Log) -> Result<Reclaimable> {
    let storage = log.storage().as_ref();
    let segs: Vec<(Lsn, u64)> = log.segments().iter().map(|s| (s.base, s.bytes)).collect();
    let newest = newest_by_key(storage, &segs)?;
    let expiry = log.inner.expiry.lock().clone();
    let expired = expiry.and_then(|e| e.for_pass());
    let mut out = Reclaimable {
        keys: newest.len() as u64,
        ..Default::default()
    };
    for &(base, len) in &segs {
        let file = open_segment(storage, base)?;
        scan_all(storage, file.as_ref(), base, len, |r, _| {
            if !keep(&r, &newest, expired.as_ref()) {
                out.records += 1;
                out.bytes += r.encoded_len() as u64;
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// Timestamp of the newest record of a sealed segment.
fn newest_timestamp(storage: &dyn Storage, s: &SealedSegment) -> Result<i64> {
    let file = open_segment(storage, s.header.base)?;
    let mut ts = 0;
    let from = s.summary.seek(s.summary.last_lsn);
    segment::scan(file.as_ref(), from, s.summary.data_len, |r, _| {
        ts = r.timestamp_micros;
        Ok(true)
    })
    .map_err(|e| e.at(storage, s.header.base))?;
    Ok(ts)
}

/// One full pass. `progress(done, planned)` is called as segments complete.
pub(crate) fn compact(
    log: &Log,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<CompactionReport> {
    let inner = &log.inner;
    // Asked before the lock: the layer above reads its own state to answer,
    // and must never wait for a pass while a holder of that state waits to
    // set a hold (which takes the lock).
    let expiry = inner.expiry.lock().clone();
    let expired = expiry.and_then(|e| e.for_pass());
    let _guard = inner.compaction.lock();
    let storage = inner.storage.as_ref();
    let retention = inner.opts.retention.clone();
    let held = inner.holds.lock().values().min().copied();
    let protect_from = retention
        .protect_from
        .unwrap_or(Lsn::MAX)
        .min(held.unwrap_or(Lsn::MAX));
    let now = now_micros();

    // 1. The compactable prefix.
    let sealed = inner.segments.read().clone();
    let mut range: Vec<SealedSegment> = Vec::new();
    for s in sealed.iter() {
        if s.summary.record_count > 0 && s.summary.last_lsn >= protect_from {
            break;
        }
        if !retention.min_age.is_zero() && s.summary.record_count > 0 {
            let age = now.saturating_sub(newest_timestamp(storage, s)?);
            if age < retention.min_age.as_micros() as i64 {
                break;
            }
        }
        range.push(s.clone());
    }
    let mut report = CompactionReport {
        segments_considered: range.len(),
        ..Default::default()
    };
    if range.is_empty() {
        return Ok(report);
    }
    // Readers that need every record learn, before anything is dropped,
    // that records below the range's end may be gone.
    let until = range
        .iter()
        .map(|s| s.summary.last_lsn + 1)
        .max()
        .unwrap_or(0);
    {
        let mut meta = inner.meta.lock();
        if meta.compacted_until < until {
            let mut m = meta.clone();
            m.compacted_until = until;
            m.store(storage)?;
            *meta = m;
        }
    }
    let planned = range.len() * 2;
    let mut done = 0;

    // 2. Newest record per key.
    let bases: Vec<(Lsn, u64)> = range
        .iter()
        .map(|s| (s.header.base, s.summary.data_len))
        .collect();
    let newest = newest_by_key(storage, &bases)?;
    done += range.len();
    progress(done, planned);

    // 3. Rewrite oldest first.
    let mut survivors: Vec<SealedSegment> = Vec::new();
    for s in &range {
        if inner.shutdown.stopping() {
            // Every step so far is complete on disk; the next pass resumes.
            return Ok(report);
        }
        report.records_before += s.summary.record_count;
        report.bytes_before += s.summary.data_len;
        match rewrite(log, s, &newest, expired.as_ref())? {
            Rewritten::Unchanged => survivors.push(s.clone()),
            Rewritten::Replaced(new) => {
                report.segments_rewritten += 1;
                survivors.push(new);
            }
            Rewritten::Removed => report.segments_removed += 1,
        }
        done += 1;
        progress(done, planned);
    }

    // 4. Merge adjacent small segments.
    let limit = inner.opts.segment_bytes;
    let mut i = 0;
    while i + 1 < survivors.len() {
        let a = &survivors[i];
        let b = &survivors[i + 1];
        if a.summary.data_len + b.summary.data_len - SEGMENT_HEADER_LEN <= limit {
            let merged = merge(log, a, b)?;
            report.segments_merged += 1;
            survivors[i] = merged;
            survivors.remove(i + 1);
        } else {
            i += 1;
        }
    }
    for s in &survivors {
        report.records_after += s.summary.record_count;
        report.bytes_after += s.summary.data_len;
    }
    inner
        .metrics
        .compaction_passes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if report.segments_rewritten + report.segments_removed + report.segments_merged > 0 {
        tracing::info!(
            segments = report.segments_considered,
            rewritten = report.segments_rewritten,
            merged = report.segments_merged,
            records_before = report.records_before,
            records_after = report.records_after,
            "log compaction pass finished"
        );
    }
    Ok(report)
}

enum Rewritten {
    Unchanged,
    Replaced(SealedSegment),
    Removed,
}

/// Writes the kept records of `s` to a temporary file and swaps it in.
fn rewrite(
    log: &Log,
    s: &SealedSegment,
    newest: &NewestByKey,
    expired: Option<&ExpiredPuts>,
) -> Result<Rewritten> {
    let storage = log.storage().as_ref();
    let base = s.header.base;
    let file = open_segment(storage, base)?;
    // Count first: most segments of a compacted log need no rewrite.
    let mut dropped = 0u64;
    scan_all(storage, file.as_ref(), base, s.summary.data_len, |r, _| {
        dropped += !keep(&r, newest, expired) as u64;
        Ok(())
    })?;
    if dropped == 0 {
        return Ok(Rewritten::Unchanged);
    }
    if dropped == s.summary.record_count {
        // The manifest drops it, and readers stop looking for it, before its
        // file goes.
        let gone = (base, s.header.generation);
        swap_and_record(log, base, None, Some(gone), false)?;
        remove_segment(storage, base)?;
        log.inner.manifest.lock().removed.retain(|&r| r != gone);
        return Ok(Rewritten::Removed);
    }
    let header = SegmentHeader {
        generation: log.inner.next_generation(),
        ..s.header
    };
    let mut out = SegmentWriter::create(storage, base, &header)?;
    // A kept record waits here until we know whether its batch goes on.
    let mut pending: Option<(Vec<u8>, u8)> = None;
    scan_all(storage, file.as_ref(), base, s.summary.data_len, |r, _| {
        if keep(&r, newest, expired) {
            if let Some((bytes, _)) = pending.take() {
                out.push_encoded(&bytes)?;
            }
            let mut bytes = Vec::with_capacity(r.encoded_len());
            r.encode_into(&mut bytes);
            pending = Some((bytes, r.flags));
        }
        if r.ends_batch() {
            if let Some((bytes, flags)) = pending.as_mut() {
                if *flags & FLAG_BATCH_CONTINUES != 0 {
                    // The batch's last records were dropped: end it here.
                    let (view, _) = crate::record::decode(bytes).expect("just encoded");
                    let mut fixed = Vec::with_capacity(bytes.len());
                    RecordView {
                        flags: *flags & !FLAG_BATCH_CONTINUES,
                        ..view
                    }
                    .encode_into(&mut fixed);
                    *bytes = fixed;
                    *flags &= !FLAG_BATCH_CONTINUES;
                }
            }
        }
        Ok(())
    })?;
    if let Some((bytes, _)) = pending.take() {
        out.push_encoded(&bytes)?;
    }
    let summary = out.finish(storage, base, &header)?;
    let new = SealedSegment {
        header,
        summary: Arc::new(summary),
    };
    // Renamed in already: until the manifest names the new generation,
    // recovery takes a newer generation than the recorded one as this.
    swap_and_record(log, base, Some(new.clone()), None, false)?;
    Ok(Rewritten::Replaced(new))
}

/// Concatenates `b` onto `a` into a new file named for `a`, then removes `b`.
fn merge(log: &Log, a: &SealedSegment, b: &SealedSegment) -> Result<SealedSegment> {
    let storage = log.storage().as_ref();
    // Never hold `segments` while taking `writer`: a seal takes them in the
    // other order (lock order: writer before segments).
    let segs = log.inner.segments.read().clone();
    let pos = segs
        .iter()
        .position(|s| s.header.base == b.header.base)
        .expect("merged segment is listed");
    let next_base = match segs.get(pos + 1) {
        Some(s) => s.header.base,
        None => log.inner.writer.lock().active.header.base,
    };
    let header = SegmentHeader {
        base: a.header.base,
        covers_until: next_base,
        generation: log.inner.next_generation(),
    };
    let mut out = SegmentWriter::create(storage, a.header.base, &header)?;
    for s in [a, b] {
        let file = open_segment(storage, s.header.base)?;
        scan_all(
            storage,
            file.as_ref(),
            s.header.base,
            s.summary.data_len,
            |r, _| {
                let mut bytes = Vec::with_capacity(r.encoded_len());
                r.encode_into(&mut bytes);
                out.push_encoded(&bytes)
            },
        )?;
    }
    let summary = out.finish(storage, a.header.base, &header)?;
    let merged = SealedSegment {
        header,
        summary: Arc::new(summary),
    };
    // Readers switch to the merged segment, and the manifest lists `b` as
    // removed, before `b`'s file goes. Until the manifest is written,
    // recovery removes `b` as a segment the merged one covers.
    let gone = (b.header.base, b.header.generation);
    swap_and_record(log, a.header.base, Some(merged.clone()), Some(gone), true)?;
    remove_segment(storage, b.header.base)?;
    log.inner.manifest.lock().removed.retain(|&r| r != gone);
    Ok(merged)
}

fn remove_segment(storage: &dyn Storage, base: Lsn) -> Result<()> {
    let io = |e| Error::io("removing a compacted segment", e);
    storage.remove(&data_name(base)).map_err(io)?;
    match storage.remove(&index_name(base)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    storage.sync_dir().map_err(io)
}

/// Swaps segment `base` for `new` (or drops it), drops `gone` (a segment
/// whose file is about to be removed), and writes the manifest to match.
///
/// If the manifest cannot be written: a dropped segment stays listed, so
/// its file must stay (the caller returns the error before removing it);
/// a segment already renamed in (`new`) is swapped anyway, since that is
/// what the disk holds, and `gone` absorbed by a merge (`keep_gone`) stays
/// in the manifest's removed list so a later manifest still explains it.
fn swap_and_record(
    log: &Log,
    base: Lsn,
    new: Option<SealedSegment>,
    gone: Option<(Lsn, u64)>,
    keep_gone: bool,
) -> Result<()> {
    let inner = &log.inner;
    let mut ms = inner.manifest.lock();
    let renamed_in = new.is_some();
    let also_remove = gone.map(|g| g.0).filter(|&g| g != base);
    let v = replaced(&inner.segments.read(), base, new, also_remove);
    let mut removed = ms.removed.clone();
    removed.extend(gone);
    let stored = manifest_of(&v, &ms.active, None, removed.clone(), None)
        .store(inner.storage.as_ref())
        .map_err(|e| Error::io("writing the log manifest", e.error));
    if stored.is_ok() || keep_gone {
        ms.removed = removed;
    }
    if stored.is_ok() || renamed_in {
        *inner.segments.write() = Arc::new(v);
    }
    stored
}

/// The list with segment `base` swapped for `new` (or dropped), and
/// `also_remove` dropped.
fn replaced(
    segs: &[SealedSegment],
    base: Lsn,
    new: Option<SealedSegment>,
    also_remove: Option<Lsn>,
) -> Vec<SealedSegment> {
    let mut v: Vec<SealedSegment> = segs
        .iter()
        .filter(|s| Some(s.header.base) != also_remove)
        .cloned()
        .collect();
    let pos = v
        .iter()
        .position(|s| s.header.base == base)
        .expect("compacted segment is listed");
    match new {
        Some(n) => v[pos] = n,
        None => {
            v.remove(pos);
        }
    }
    v
}

/// Builds a replacement segment in `<base>.seg.tmp`.
struct SegmentWriter {
    file: Arc<dyn StorageFile>,
    buf: Vec<u8>,
    written: u64,
    summary: SegmentSummary,
}

/// Replacement segments are written in pieces of this size.
const REWRITE_BUFFER_BYTES: usize = 1024 * 1024;

impl SegmentWriter {
    fn create(storage: &dyn Storage, base: Lsn, header: &SegmentHeader) -> Result<SegmentWriter> {
        let file = storage
            .create(&tmp_name(&data_name(base)))
            .map_err(|e| Error::io("creating a compacted segment", e))?;
        let mut buf = Vec::with_capacity(REWRITE_BUFFER_BYTES);
        buf.extend_from_slice(&header.encode());
        Ok(SegmentWriter {
            file,
            buf,
            written: 0,
            summary: SegmentSummary::empty(),
        })
    }

    fn push_encoded(&mut self, bytes: &[u8]) -> Result<()> {
        let (r, len) = crate::record::decode(bytes).expect("caller passes one valid record");
        let offset = self.written + self.buf.len() as u64;
        self.summary.add(r.lsn, offset, len as u64);
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= REWRITE_BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .write_at(&self.buf, self.written)
            .map_err(|e| Error::io("writing a compacted segment", e))?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Syncs the new file, renames it over the segment, and writes its index.
    fn finish(
        mut self,
        storage: &dyn Storage,
        base: Lsn,
        header: &SegmentHeader,
    ) -> Result<SegmentSummary> {
        self.flush()?;
        let io = |e| Error::io("installing a compacted segment", e);
        self.file.sync().map_err(io)?;
        storage
            .rename(&tmp_name(&data_name(base)), &data_name(base))
            .map_err(io)?;
        storage.sync_dir().map_err(io)?;
        if let Err(e) = write_atomically(
            storage,
            &index_name(base),
            &self.summary.encode_index(header.generation),
        ) {
            tracing::warn!("could not write the index of compacted segment {base}: {e}");
        }
        Ok(self.summary)
    }
}
