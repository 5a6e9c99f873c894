//! Reading the log from any LSN: start-up replay, catch-up, subscribers,
//! `aqueduct wal tail --follow`. A reader sees only committed records and
//! keeps working while segments are sealed, compacted or merged under it.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::log::Log;
use crate::record::{Record, RecordView};
use crate::segment::{self, data_name, ScanEnd};
use crate::storage::StorageFile;
use crate::{Error, Lsn, Result};

/// How long a reader keeps retrying to find a segment that compaction is
/// replacing at that moment (the swap itself takes microseconds).
const LOCATE_DEADLINE: Duration = Duration::from_secs(5);

struct Cursor {
    base: Lsn,
    /// The generation of the file we hold open; compaction changes it.
    generation: u64,
    file: Arc<dyn StorageFile>,
    offset: u64,
    limit: u64,
    sealed: bool,
}

/// Reads committed records in LSN order, starting at a chosen LSN.
pub struct LogReader {
    log: Log,
    next_lsn: Lsn,
    cur: Option<Cursor>,
    buffered: VecDeque<Record>,
}

impl LogReader {
    pub(crate) fn new(log: Log, from: Lsn) -> LogReader {
        LogReader {
            log,
            next_lsn: from.max(1),
            cur: None,
            buffered: VecDeque::new(),
        }
    }

    /// The LSN this reader will look for next.
    pub fn position(&self) -> Lsn {
        self.buffered
            .front()
            .map(|r| r.lsn)
            .unwrap_or(self.next_lsn)
    }

    /// Reads up to `max` records, copying them.
    pub fn next_batch(&mut self, max: usize) -> Result<Vec<Record>> {
        let mut out: Vec<Record> = Vec::new();
        while out.len() < max {
            match self.buffered.pop_front() {
                Some(r) => out.push(r),
                None => break,
            }
        }
        let want = max - out.len();
        if want > 0 {
            self.read_with(want, |r| {
                out.push(r.to_owned());
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// Waits up to `timeout` for records past what was read, then reads them.
    pub fn follow(&mut self, max: usize, timeout: Duration) -> Result<Vec<Record>> {
        let got = self.next_batch(max)?;
        if !got.is_empty() {
            return Ok(got);
        }
        self.log.wait_for(self.next_lsn, timeout);
        self.next_batch(max)
    }

    /// Calls `f` for up to `max` records without copying them. Returns how
    /// many were read; 0 means the reader is at the end of what is committed.
    pub fn read_with(
        &mut self,
        max: usize,
        mut f: impl FnMut(RecordView<'_>) -> Result<()>,
    ) -> Result<usize> {
        self.read_while(max, |r| f(r).map(|()| true))
    }

    /// Like [`LogReader::read_with`], `f` saying after each record whether
    /// to go on: a read stops after the record it says no to, and the
    /// reader continues after it next time.
    pub fn read_while(
        &mut self,
        max: usize,
        mut f: impl FnMut(RecordView<'_>) -> Result<bool>,
    ) -> Result<usize> {
        debug_assert!(self.buffered.is_empty() || max == 0);
        let mut go_on = true;
        let mut count = 0usize;
        let mut misses = 0u32;
        let mut deadline = None;
        while count < max && go_on {
            if self.cur.is_none() {
                match self.locate() {
                    Ok(Some(c)) => self.cur = Some(c),
                    Ok(None) => return Ok(count),
                    Err(e)
                        if e.kind() == io::ErrorKind::NotFound
                            && *deadline.get_or_insert_with(|| {
                                std::time::Instant::now() + LOCATE_DEADLINE
                            }) > std::time::Instant::now() =>
                    {
                        // Compaction is swapping the segment between our look
                        // and our open; its list update follows at once.
                        misses += 1;
                        if misses < 16 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        continue;
                    }
                    Err(e) => return Err(Error::io("opening a log segment", e)),
                }
            }
            let c = self.cur.as_mut().expect("located");
            if c.offset >= c.limit {
                if !self.extend_limit() {
                    return Ok(count);
                }
                continue;
            }
            let next_lsn = &mut self.next_lsn;
            let end = segment::scan(c.file.as_ref(), c.offset, c.limit, |r, _| {
                if r.lsn < *next_lsn {
                    return Ok(true);
                }
                go_on = f(r)?;
                *next_lsn = r.lsn + 1;
                count += 1;
                Ok(count < max && go_on)
            })?;
            match end {
                ScanEnd::Clean { end } => c.offset = end,
                ScanEnd::Bad { offset, error } => {
                    return Err(Error::Corrupt {
                        location: self.log.storage().describe(&data_name(c.base)),
                        offset,
                        lsn: segment::bad_lsn(&error),
                        reason: error.to_string(),
                    })
                }
            }
        }
        Ok(count)
    }

    /// At the end of the cursor's range: grow it if more was committed to the
    /// same segment, or move on. Returns false when there is nothing more now.
    fn extend_limit(&mut self) -> bool {
        let c = self.cur.as_mut().expect("cursor");
        let vis = self.log.visible();
        if !c.sealed {
            if vis.active_base == c.base {
                if vis.active_len > c.limit {
                    c.limit = vis.active_len;
                    return true;
                }
                return false;
            }
            // The segment was sealed (or truncated away) since we opened it.
            let segs = self.log.inner.segments.read().clone();
            if let Some(s) = segs
                .iter()
                .find(|s| s.header.base == c.base && s.header.generation == c.generation)
            {
                c.sealed = true;
                c.limit = c.limit.max(s.summary.data_len);
                if c.offset < c.limit {
                    return true;
                }
            }
        }
        self.cur = None;
        true
    }

    /// Finds and opens the segment holding the first record >= `next_lsn`.
    fn locate(&mut self) -> io::Result<Option<Cursor>> {
        let vis = self.log.visible();
        if self.next_lsn > vis.lsn {
            return Ok(None);
        }
        let storage = self.log.storage().clone();
        let segs = self.log.inner.segments.read().clone();
        for s in segs.iter() {
            if s.summary.record_count == 0 || s.summary.last_lsn < self.next_lsn {
                continue;
            }
            let file = open_generation(storage.as_ref(), s.header.base, s.header.generation)?;
            return Ok(Some(Cursor {
                base: s.header.base,
                generation: s.header.generation,
                file,
                offset: s.summary.seek(self.next_lsn),
                limit: s.summary.data_len,
                sealed: true,
            }));
        }
        // The active segment, as far as it is visible.
        let (base, generation, offset) = {
            let w = self.log.inner.writer.lock();
            (
                w.active.header.base,
                w.active.header.generation,
                w.active.summary.seek(self.next_lsn),
            )
        };
        if base != vis.active_base {
            // A seal raced with us; look again with fresh state.
            return Err(io::ErrorKind::NotFound.into());
        }
        let file = open_generation(storage.as_ref(), base, generation)?;
        Ok(Some(Cursor {
            base,
            generation,
            file,
            offset: offset.min(vis.active_len),
            limit: vis.active_len,
            sealed: false,
        }))
    }
}

/// Opens segment `base` and checks it is the version (generation) whose
/// summary we hold; a rewritten file counts as not found, so the caller
/// looks again with the fresh segment list.
fn open_generation(
    storage: &dyn crate::storage::Storage,
    base: Lsn,
    generation: u64,
) -> io::Result<Arc<dyn StorageFile>> {
    let file = storage.open(&data_name(base))?;
    match segment::SegmentHeader::read(file.as_ref()) {
        Ok(h) if h.generation == generation => Ok(file),
        _ => Err(io::ErrorKind::NotFound.into()),
    }
}

impl Iterator for LogReader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.buffered.is_empty() {
            let mut got = VecDeque::new();
            if let Err(e) = self.read_with(1024, |r| {
                got.push_back(r.to_owned());
                Ok(())
            }) {
                return Some(Err(e));
            }
            self.buffered = got;
        }
        self.buffered.pop_front().map(Ok)
    }
}
