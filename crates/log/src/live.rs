//! Following a log that another process writes: no lock, no writes.
//!
//! [`LiveLogReader`] reads a log directory while a server appends to it,
//! seals segments, compacts and merges them. It never takes the directory's
//! lock and never changes anything: files are opened read-only, nothing is
//! repaired, no index or manifest is written, no leftover is removed. Its
//! position is an LSN, never a file offset across files, so it can move to
//! another file (a newer segment, or a compacted copy of one) and go on.
//! Why this is safe against every step of a concurrent writer is argued in
//! `docs/log-format.md` ("Reading a live log without its lock").
//!
//! The rules, in short:
//! - the manifest (replaced whole by rename) says which segments exist and
//!   which one is active; it is read again whenever the reader reaches the
//!   end of what it has;
//! - a segment file, once opened, is read to its end through that handle,
//!   even if compaction renames a new version over its name or removes it
//!   (the old version stays readable and holds records of the log);
//! - the active segment is final only once a manifest names a newer active
//!   segment; until then, bytes at its end that are not yet a complete
//!   record, or a batch whose last record is not yet there, are "not yet
//!   written", never corruption;
//! - records are handed out in LSN order, each once, whole batches only.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::manifest::Manifest;
use crate::record::{DecodeError, Record};
use crate::segment::{
    self, data_name, index_name, parse_data_name, ScanEnd, SegmentHeader, SegmentSummary,
    TailDamage, SEGMENT_HEADER_LEN,
};
use crate::storage::{FsStorage, Storage, StorageFile};
use crate::{Error, Lsn, Result};

/// The first pause of [`LiveLogReader::next_batch`] when nothing is new;
/// it doubles up to [`POLL_MAX`].
pub const POLL_MIN: Duration = Duration::from_millis(1);
/// The longest pause between two looks at the files while waiting.
pub const POLL_MAX: Duration = Duration::from_millis(50);
/// How long a listed segment may be missing before the reader gives up: a
/// file goes only after a manifest that no longer lists it is in place, so a
/// second look finds the new manifest at once.
const LOCATE_DEADLINE: Duration = Duration::from_secs(5);
/// How long bytes at the end of the active segment that look damaged (not
/// merely cut short) must stay unchanged, with the file not growing, before
/// they are reported as corruption. A write in flight finishes in far less.
pub const DAMAGE_GRACE: Duration = Duration::from_secs(2);

/// A segment as the manifest (or, without one, the directory) lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedSegment {
    pub base: Lsn,
    /// The highest segment: appends go to it.
    pub active: bool,
    /// For a sealed segment, its record count and first and last LSN as the
    /// manifest recorded them (a compaction since may have dropped some);
    /// `None` for the active segment and for logs without a manifest.
    pub records: Option<(u64, Lsn, Lsn)>,
}

/// The segments of the log in `storage`, in base order, the last one active.
pub fn list_segments(storage: &dyn Storage) -> Result<Vec<ListedSegment>> {
    if let Some(m) = Manifest::load(storage)? {
        if m.segments.is_empty() {
            return Err(Error::Invalid("the log manifest lists no segments".into()));
        }
        return Ok(m
            .segments
            .iter()
            .map(|e| ListedSegment {
                base: e.base,
                active: e.active,
                records: (!e.active).then_some((e.record_count, e.first_lsn, e.last_lsn)),
            })
            .collect());
    }
    // A log of format version 1 (no manifest): the files present. Only a
    // build of that version writes such a log; this one writes a manifest
    // at its first writable open.
    let mut bases: Vec<Lsn> = storage
        .list()
        .map_err(|e| Error::io("listing the log directory", e))?
        .iter()
        .filter_map(|n| parse_data_name(n))
        .collect();
    bases.sort_unstable();
    let n = bases.len();
    if n == 0 {
        return Err(Error::Invalid(format!(
            "{} holds no log (no manifest, no segment files)",
            storage.describe("")
        )));
    }
    Ok(bases
        .into_iter()
        .enumerate()
        .map(|(i, base)| ListedSegment {
            base,
            active: i + 1 == n,
            records: None,
        })
        .collect())
}

struct Cursor {
    base: Lsn,
    generation: u64,
    file: Arc<dyn StorageFile>,
    /// Where the next batch starts: always a batch boundary.
    offset: u64,
    /// No more bytes will be added: a sealed segment, or a version of one.
    last: bool,
}

/// Bad bytes at the end of the active segment that do not look like a
/// write in flight, and since when they have been seen unchanged.
#[derive(Clone, Debug)]
struct Suspect {
    base: Lsn,
    offset: u64,
    len: u64,
    since: Instant,
    lsn: Option<Lsn>,
    reason: String,
}

enum Located {
    At(Cursor),
    /// Nothing at or past the position yet.
    Nothing,
    /// A listed segment file is gone (by this name).
    Missing(String),
}

enum Step {
    /// Stopped because `max` records were gathered.
    Full,
    /// At the end of what the file holds now (a batch may be unfinished).
    End,
    /// Bytes at the end that look damaged (see [`DAMAGE_GRACE`]).
    Damaged(Suspect),
}

/// Follows a log directory that another process may be writing; see the
/// module documentation.
pub struct LiveLogReader {
    storage: Arc<dyn Storage>,
    next_lsn: Lsn,
    cur: Option<Cursor>,
    /// Versions (base, generation) of sealed segments read to their end:
    /// such a file never changes, so it holds nothing more. A compacted or
    /// merged copy under the same name is a new generation and is read.
    passed: Vec<(Lsn, u64)>,
    suspect: Option<Suspect>,
}

impl LiveLogReader {
    /// Follows the log in `dir` from LSN `from` (0 or 1: from the start).
    /// Takes no lock and creates nothing; fails if `dir` holds no log.
    pub fn open(dir: impl AsRef<Path>, from: Lsn) -> Result<LiveLogReader> {
        let dir = dir.as_ref();
        let storage = FsStorage::existing(dir)
            .map_err(|e| Error::io(format!("opening {}", dir.display()), e))?;
        LiveLogReader::with_storage(Arc::new(storage), from)
    }

    /// Follows the log in `storage` from LSN `from`. Uses only
    /// [`Storage::list`], [`Storage::open_read`] and reads.
    pub fn with_storage(storage: Arc<dyn Storage>, from: Lsn) -> Result<LiveLogReader> {
        list_segments(storage.as_ref())?;
        Ok(LiveLogReader {
            storage,
            next_lsn: from.max(1),
            cur: None,
            passed: Vec::new(),
            suspect: None,
        })
    }

    /// The LSN this reader looks for next: every record below it that the
    /// reader will ever hand out has been handed out.
    pub fn position(&self) -> Lsn {
        self.next_lsn
    }

    /// The segments of the log as its manifest lists them now.
    pub fn segments(&self) -> Result<Vec<ListedSegment>> {
        list_segments(self.storage.as_ref())
    }

    /// Waits up to `timeout` for records at or past [`position`], then
    /// returns whole batches of them, in LSN order: as many batches as are
    /// there, stopping once `max` records are gathered (a batch larger than
    /// `max` comes whole). Empty if none came in time. Pauses between looks
    /// start at [`POLL_MIN`] and grow to [`POLL_MAX`].
    ///
    /// [`position`]: LiveLogReader::position
    pub fn next_batch(&mut self, max: usize, timeout: Duration) -> Result<Vec<Record>> {
        let deadline = Instant::now() + timeout;
        let mut pause = POLL_MIN;
        loop {
            let got = self.poll(max)?;
            let now = Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(POLL_MAX);
        }
    }

    /// Like [`LiveLogReader::next_batch`], without waiting: whole batches
    /// present now, possibly none.
    pub fn poll(&mut self, max: usize) -> Result<Vec<Record>> {
        let max = max.max(1);
        let mut out = Vec::new();
        let mut missing_since = None;
        let mut misses = 0u32;
        loop {
            if self.cur.is_none() {
                match self.locate()? {
                    Located::At(c) => self.cur = Some(c),
                    Located::Nothing => return Ok(out),
                    Located::Missing(name) => {
                        // Removed after the manifest we read: the manifest
                        // that no longer lists it is already in place.
                        let since = *missing_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > LOCATE_DEADLINE {
                            return Err(Error::Inconsistent {
                                problem: format!(
                                    "{} is missing although the log manifest lists it",
                                    self.storage.describe(&name)
                                ),
                                repair: "check the log with `aqueduct wal verify <dir>`".into(),
                                cut_at: None,
                            });
                        }
                        misses += 1;
                        if misses < 16 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(POLL_MIN);
                        }
                        continue;
                    }
                }
            }
            match self.read_cursor(&mut out, max)? {
                Step::Full => return Ok(out),
                step => {
                    let c = self.cur.as_mut().expect("a cursor");
                    if c.last {
                        self.passed.push((c.base, c.generation));
                        self.cur = None;
                        continue;
                    }
                    // The end of what the segment holds now. It is final
                    // once a manifest names a newer active segment; that
                    // manifest is written only after its last batch.
                    let active = list_segments(self.storage.as_ref())?
                        .last()
                        .map(|s| s.base)
                        .expect("a listing is never empty");
                    if active > c.base {
                        c.last = true;
                        self.suspect = None;
                        continue; // read it once more, to its final end
                    }
                    if active < c.base {
                        return Err(Error::Inconsistent {
                            problem: format!(
                                "the log's active segment went back from {} to {}: the log \
                                 was truncated while it was followed",
                                data_name(c.base),
                                data_name(active)
                            ),
                            repair: format!(
                                "follow it again from the LSN you need (this reader was at LSN \
                                 {})",
                                self.next_lsn
                            ),
                            cut_at: None,
                        });
                    }
                    if let Step::Damaged(s) = step {
                        self.note_damage(s)?;
                    } else {
                        self.suspect = None;
                    }
                    return Ok(out);
                }
            }
        }
    }

    /// Reports damage seen unchanged for [`DAMAGE_GRACE`].
    fn note_damage(&mut self, s: Suspect) -> Result<()> {
        let same = self
            .suspect
            .as_ref()
            .is_some_and(|p| (p.base, p.offset, p.len) == (s.base, s.offset, s.len));
        if !same {
            self.suspect = Some(s);
            return Ok(());
        }
        let p = self.suspect.as_ref().expect("noted");
        if p.since.elapsed() < DAMAGE_GRACE {
            return Ok(());
        }
        Err(Error::Corrupt {
            location: self.storage.describe(&data_name(p.base)),
            offset: p.offset,
            lsn: p.lsn,
            reason: p.reason.clone(),
        })
    }

    /// Reads whole batches from the cursor into `out`.
    fn read_cursor(&mut self, out: &mut Vec<Record>, max: usize) -> Result<Step> {
        let storage = self.storage.clone();
        let c = self.cur.as_mut().expect("a cursor");
        let len = c
            .file
            .len()
            .map_err(|e| Error::io("reading a segment length", e))?;
        let mut next = self.next_lsn;
        let mut batch: Vec<Record> = Vec::new();
        let mut batch_end = c.offset;
        let mut seen = 0;
        let mut full = false;
        let end = segment::scan(c.file.as_ref(), c.offset, len, |r, off| {
            seen = r.lsn;
            if r.lsn >= next && batch.last().is_none_or(|b| r.lsn > b.lsn) {
                batch.push(r.to_owned());
            }
            if r.ends_batch() {
                if let Some(last) = batch.last() {
                    next = last.lsn + 1;
                }
                out.append(&mut batch);
                batch_end = off + r.encoded_len() as u64;
                if out.len() >= max {
                    full = true;
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .map_err(|e| e.at(storage.as_ref(), c.base))?;
        self.next_lsn = next;
        c.offset = batch_end;
        if full {
            return Ok(Step::Full);
        }
        match end {
            ScanEnd::Clean { end } => {
                if c.last && !batch.is_empty() {
                    // A finished segment that ends inside a batch (written
                    // by an older tool): nothing more of it can come.
                    self.next_lsn = batch.last().expect("not empty").lsn + 1;
                    out.append(&mut batch);
                    c.offset = end;
                }
                Ok(Step::End)
            }
            ScanEnd::Bad { offset, error } => {
                let corrupt = |lsn, reason| Error::Corrupt {
                    location: storage.describe(&data_name(c.base)),
                    offset,
                    lsn,
                    reason,
                };
                if c.last {
                    // A finished segment was complete before any manifest
                    // called it sealed: bad bytes in it are damage.
                    return Err(corrupt(segment::bad_lsn(&error), error.to_string()));
                }
                if matches!(
                    error,
                    DecodeError::ShortHeader | DecodeError::ShortRecord { .. }
                ) {
                    return Ok(Step::End); // not yet written in full
                }
                match segment::classify_tail(c.file.as_ref(), offset, len, &error, seen)? {
                    TailDamage::Torn => Ok(Step::End),
                    TailDamage::Corrupt { lsn, reason } => Ok(Step::Damaged(Suspect {
                        base: c.base,
                        offset,
                        len,
                        since: Instant::now(),
                        lsn,
                        reason,
                    })),
                }
            }
        }
    }

    /// Opens the first listed segment that may hold a record at or past
    /// `next_lsn`.
    fn locate(&mut self) -> Result<Located> {
        let listed = list_segments(self.storage.as_ref())?;
        self.passed
            .retain(|p| listed.iter().any(|s| s.base == p.0 && !s.active));
        for s in &listed {
            if let Some((count, _, last)) = s.records {
                // A newer version (compacted) holds a subset of these; a
                // merge that this manifest does not know yet holds the next
                // segment's records too, and that segment is listed here.
                if count == 0 || last < self.next_lsn {
                    continue;
                }
            }
            let name = data_name(s.base);
            let file = match self.storage.open_read(&name) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Located::Missing(name)),
                Err(e) => {
                    return Err(Error::io(
                        format!("opening {}", self.storage.describe(&name)),
                        e,
                    ))
                }
            };
            let header = match SegmentHeader::read(file.as_ref()) {
                Ok(h) => h,
                // A segment is listed only once its header is written;
                // without a manifest the newest file may still be new.
                Err(_) if s.active && s.records.is_none() => return Ok(Located::Nothing),
                Err(reason) => {
                    return Err(Error::Corrupt {
                        location: self.storage.describe(&name),
                        offset: 0,
                        lsn: None,
                        reason,
                    })
                }
            };
            if header.base != s.base {
                return Err(Error::Corrupt {
                    location: self.storage.describe(&name),
                    offset: 0,
                    lsn: None,
                    reason: format!("its header names base LSN {}", header.base),
                });
            }
            if self.passed.contains(&(s.base, header.generation)) {
                // Read to its end already; the manifest's counts are those
                // of an older version, or this is a merge's leftover.
                continue;
            }
            let offset = if s.active {
                SEGMENT_HEADER_LEN
            } else {
                self.seek(s.base, &header, file.as_ref())
            };
            return Ok(Located::At(Cursor {
                base: s.base,
                generation: header.generation,
                file,
                offset,
                last: !s.active,
            }));
        }
        Ok(Located::Nothing)
    }

    /// Where to start scanning a sealed segment for `next_lsn`: from its
    /// index when the index describes this very file, else from the start.
    fn seek(&self, base: Lsn, header: &SegmentHeader, file: &dyn StorageFile) -> u64 {
        let index = || -> Option<SegmentSummary> {
            let len = file.len().ok()?;
            let f = self.storage.open_read(&index_name(base)).ok()?;
            let bytes = f.read_vec(0, f.len().ok()? as usize).ok()?;
            SegmentSummary::decode_index(&bytes, header.generation, len).ok()
        };
        index().map_or(SEGMENT_HEADER_LEN, |s| s.seek(self.next_lsn))
    }
}

/// An LSN from which at least the last `n` records (as the manifest counts
/// sealed segments, the active one not counted) remain: the first LSN of
/// the newest sealed segments that hold `n`, or 1.
/// With `n` 0, the active segment's base.
pub fn start_of_last(segments: &[ListedSegment], n: u64) -> Lsn {
    let mut need = n;
    if need == 0 {
        return segments.last().map_or(1, |s| s.base);
    }
    for s in segments.iter().rev() {
        if let Some((count, first, _)) = s.records {
            if count == 0 {
                continue;
            }
            if count >= need {
                return first;
            }
            need -= count;
        } else if !s.active {
            return 1; // counts unknown (no manifest)
        }
    }
    1
}
