//! Segment files: naming, the segment header, sequential scans, and the
//! sparse LSN → offset index kept beside each sealed segment.
//!
//! ```text
//! <base>.seg   48-byte header, then records back to back
//! <base>.idx   72-byte header, then 24-byte entries (sealed segments only)
//! ```
//! `<base>` is the segment's base LSN as 20 decimal digits, so names sort in
//! LSN order. Layouts are in `docs/log-format.md`.

use std::io;
use std::sync::Arc;

use crate::record::{self, DecodeError, RecordView, RECORD_HEADER_LEN};
use crate::storage::{Storage, StorageFile};
use crate::{
    Error, Lsn, FORMAT_VERSION, INDEX_FORMAT_VERSION, INDEX_INTERVAL_BYTES, OLDEST_FORMAT_VERSION,
    READ_CHUNK_BYTES,
};

pub const SEGMENT_MAGIC: &[u8; 8] = b"AQDLOGSG";
pub const INDEX_MAGIC: &[u8; 8] = b"AQDLOGIX";
pub const SEGMENT_HEADER_LEN: u64 = 48;
pub const INDEX_HEADER_LEN: usize = 72;
pub const INDEX_ENTRY_LEN: usize = 24;

pub fn data_name(base: Lsn) -> String {
    format!("{base:020}.seg")
}
pub fn index_name(base: Lsn) -> String {
    format!("{base:020}.idx")
}
pub fn tmp_name(name: &str) -> String {
    format!("{name}.tmp")
}

/// Parses `<20 digits>.seg` into a base LSN.
pub fn parse_data_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The fixed header at the start of every segment data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// No record in this segment has an LSN below `base`.
    pub base: Lsn,
    /// For a merged segment: the exclusive end of the LSN range it covers, so
    /// a leftover of the merge is recognised at open. 0 for ordinary segments.
    pub covers_until: Lsn,
    /// Changes whenever the file is rewritten; ties the index to the data.
    pub generation: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN as usize] {
        let mut b = [0u8; SEGMENT_HEADER_LEN as usize];
        b[0..8].copy_from_slice(SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.base.to_le_bytes());
        b[24..32].copy_from_slice(&self.covers_until.to_le_bytes());
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<SegmentHeader, String> {
        if b.len() < SEGMENT_HEADER_LEN as usize {
            return Err("segment header is cut short".into());
        }
        if &b[0..8] != SEGMENT_MAGIC {
            return Err("not an Aqueduct log segment (bad magic)".into());
        }
        let crc = u32::from_le_bytes(b[44..48].try_into().unwrap());
        if crc32c::crc32c(&b[0..44]) != crc {
            return Err("segment header checksum mismatch".into());
        }
        let version = u16::from_le_bytes(b[8..10].try_into().unwrap());
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(format!(
                "segment format version {version}, this build reads versions \
                 {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
            ));
        }
        Ok(SegmentHeader {
            base: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            covers_until: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            generation: u64::from_le_bytes(b[32..40].try_into().unwrap()),
        })
    }

    pub fn read(file: &dyn StorageFile) -> Result<SegmentHeader, String> {
        let mut b = [0u8; SEGMENT_HEADER_LEN as usize];
        match file.read_exact_at(&mut b, 0) {
            Ok(()) => SegmentHeader::decode(&b),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err("segment header is cut short".into())
            }
            Err(e) => Err(format!("cannot read segment header: {e}")),
        }
    }
}

/// The format version in a segment header's bytes (checked by `decode`).
pub fn header_version(b: &[u8; SEGMENT_HEADER_LEN as usize]) -> u16 {
    u16::from_le_bytes(b[8..10].try_into().unwrap())
}

/// A summary of a segment's records plus its sparse index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Bytes of the data file covered (header included).
    pub data_len: u64,
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    pub record_count: u64,
    /// Sparse (lsn, offset) pairs in increasing order; the first record is
    /// always present.
    pub entries: Vec<(Lsn, u64)>,
}

impl SegmentSummary {
    pub fn empty() -> SegmentSummary {
        SegmentSummary {
            data_len: SEGMENT_HEADER_LEN,
            ..Default::default()
        }
    }

    /// Notes a record at `offset` of `len` bytes, keeping the index sparse.
    pub fn add(&mut self, lsn: Lsn, offset: u64, len: u64) {
        debug_assert!(lsn > self.last_lsn, "LSNs increase within a segment");
        let due = match self.entries.last() {
            None => true,
            Some(&(_, last_off)) => offset - last_off >= INDEX_INTERVAL_BYTES,
        };
        if due {
            self.entries.push((lsn, offset));
        }
        if self.record_count == 0 {
            self.first_lsn = lsn;
        }
        self.last_lsn = lsn;
        self.record_count += 1;
        self.data_len = offset + len;
    }

    /// The offset to start scanning from to find the first record with LSN >= `lsn`.
    pub fn seek(&self, lsn: Lsn) -> u64 {
        match self.entries.partition_point(|&(l, _)| l <= lsn) {
            0 => SEGMENT_HEADER_LEN,
            i => self.entries[i - 1].1,
        }
    }

    pub fn encode_index(&self, generation: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(INDEX_HEADER_LEN + self.entries.len() * INDEX_ENTRY_LEN);
        b.extend_from_slice(INDEX_MAGIC);
        b.extend_from_slice(&INDEX_FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&[0u8; 6]);
        b.extend_from_slice(&generation.to_le_bytes());
        b.extend_from_slice(&self.data_len.to_le_bytes());
        b.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        b.extend_from_slice(&self.first_lsn.to_le_bytes());
        b.extend_from_slice(&self.last_lsn.to_le_bytes());
        b.extend_from_slice(&self.record_count.to_le_bytes());
        b.extend_from_slice(&[0u8; 4]);
        let crc = crc32c::crc32c(&b[0..68]);
        b.extend_from_slice(&crc.to_le_bytes());
        for &(lsn, off) in &self.entries {
            let start = b.len();
            b.extend_from_slice(&lsn.to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&[0u8; 4]);
            let crc = crc32c::crc32c(&b[start..start + 20]);
            b.extend_from_slice(&crc.to_le_bytes());
        }
        b
    }

    /// Decodes an index file; any inconsistency is an error (the caller rebuilds).
    pub fn decode_index(
        b: &[u8],
        generation: u64,
        data_len: u64,
    ) -> Result<SegmentSummary, String> {
        if b.len() < INDEX_HEADER_LEN || &b[0..8] != INDEX_MAGIC {
            return Err("bad index header".into());
        }
        let crc = u32::from_le_bytes(b[68..72].try_into().unwrap());
        if crc32c::crc32c(&b[0..68]) != crc {
            return Err("index header checksum mismatch".into());
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        if u16::from_le_bytes(b[8..10].try_into().unwrap()) != INDEX_FORMAT_VERSION {
            return Err("index format version differs".into());
        }
        if u(16) != generation {
            return Err("index belongs to an older version of the segment".into());
        }
        if u(24) != data_len {
            return Err(format!(
                "index covers {} bytes but the segment has {data_len}",
                u(24)
            ));
        }
        let count = u(32) as usize;
        if b.len() != INDEX_HEADER_LEN + count * INDEX_ENTRY_LEN {
            return Err("index length does not match its entry count".into());
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let e = &b[INDEX_HEADER_LEN + i * INDEX_ENTRY_LEN..][..INDEX_ENTRY_LEN];
            let crc = u32::from_le_bytes(e[20..24].try_into().unwrap());
            if crc32c::crc32c(&e[0..20]) != crc {
                return Err(format!("index entry {i} checksum mismatch"));
            }
            let lsn = u64::from_le_bytes(e[0..8].try_into().unwrap());
            let off = u64::from_le_bytes(e[8..16].try_into().unwrap());
            if off < SEGMENT_HEADER_LEN || off >= data_len {
                return Err(format!("index entry {i} points outside the segment"));
            }
            if let Some(&(pl, po)) = entries.last() {
                if lsn <= pl || off <= po {
                    return Err(format!("index entry {i} is out of order"));
                }
            }
            entries.push((lsn, off));
        }
        let s = SegmentSummary {
            data_len,
            first_lsn: u(40),
            last_lsn: u(48),
            record_count: u(56),
            entries,
        };
        if (s.record_count == 0) != s.entries.is_empty() {
            return Err("index entry count contradicts its record count".into());
        }
        Ok(s)
    }
}

/// How a scan of a segment ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte up to `end` was a valid record.
    Clean { end: u64 },
    /// The bytes at `offset` are not a valid record.
    Bad { offset: u64, error: DecodeError },
}

/// Reads records from `file` starting at `offset` until `limit` bytes,
/// calling `visit(record, offset)` for each. The visitor returns `false` to stop.
pub fn scan(
    file: &dyn StorageFile,
    mut offset: u64,
    limit: u64,
    mut visit: impl FnMut(RecordView<'_>, u64) -> Result<bool, Error>,
) -> Result<ScanEnd, Error> {
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = 0usize; // position in buf
    loop {
        if offset >= limit {
            return Ok(ScanEnd::Clean { end: offset });
        }
        let avail = &buf[pos..];
        let need_more = match record::decode(avail) {
            Ok((view, len)) => {
                if offset + len as u64 > limit {
                    return Ok(ScanEnd::Bad {
                        offset,
                        error: DecodeError::ShortRecord { needed: len },
                    });
                }
                if !visit(view, offset)? {
                    return Ok(ScanEnd::Clean {
                        end: offset + len as u64,
                    });
                }
                pos += len;
                offset += len as u64;
                None
            }
            Err(DecodeError::ShortHeader) => Some(RECORD_HEADER_LEN),
            Err(DecodeError::ShortRecord { needed }) => Some(needed),
            Err(error) => return Ok(ScanEnd::Bad { offset, error }),
        };
        if let Some(needed) = need_more {
            let remaining_in_file = (limit - offset) as usize;
            if remaining_in_file < needed {
                // The file ends inside this record.
                let error = match record::decode(&read_upto(file, offset, remaining_in_file)?) {
                    Err(e) => e,
                    Ok(_) => unreachable!("a record cannot fit in fewer bytes than it needs"),
                };
                return Ok(ScanEnd::Bad { offset, error });
            }
            // Refill: keep the unread tail, read the next chunk.
            let want = needed.max(READ_CHUNK_BYTES).min(remaining_in_file);
            // After the drain, buf[0] is the byte at file offset `offset`.
            buf.drain(..pos);
            pos = 0;
            let have = buf.len();
            if have < want {
                buf.resize(want, 0);
                file.read_exact_at(&mut buf[have..], offset + have as u64)
                    .map_err(|e| Error::io("reading a segment", e))?;
            }
        }
    }
}

fn read_upto(file: &dyn StorageFile, offset: u64, len: usize) -> Result<Vec<u8>, Error> {
    file.read_vec(offset, len)
        .map_err(|e| Error::io("reading a segment", e))
}

/// Scans a whole segment, building its summary. Returns where the scan ended.
pub fn summarize(file: &dyn StorageFile, len: u64) -> Result<(SegmentSummary, ScanEnd), Error> {
    let mut s = SegmentSummary::empty();
    let mut prev = 0;
    let mut out_of_order = None;
    let end = scan(file, SEGMENT_HEADER_LEN, len, |r, off| {
        if r.lsn <= prev {
            out_of_order = Some((off, r.lsn));
            return Ok(false);
        }
        prev = r.lsn;
        s.add(r.lsn, off, r.encoded_len() as u64);
        Ok(true)
    })?;
    if let Some((offset, lsn)) = out_of_order {
        return Err(Error::Corrupt {
            location: String::new(),
            offset,
            lsn: Some(lsn),
            reason: "LSN does not increase".into(),
        });
    }
    Ok((s, end))
}

/// Writes `bytes` to `name` via a temporary file and an atomic rename.
pub fn write_atomically(storage: &dyn Storage, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_name(name);
    let f = storage.create(&tmp)?;
    f.write_at(bytes, 0)?;
    f.sync()?;
    storage.rename(&tmp, name)?;
    storage.sync_dir()
}

/// Loads a sealed segment's summary from its index, or rebuilds the index by
/// scanning the data (and writes it back) when the index is missing or stale.
/// With `write_back` false (read-only opens) a rebuilt index stays in memory.
pub fn load_or_rebuild_index(
    storage: &dyn Storage,
    base: Lsn,
    file: &Arc<dyn StorageFile>,
    header: &SegmentHeader,
    data_len: u64,
    write_back: bool,
) -> Result<(SegmentSummary, bool), Error> {
    let idx = index_name(base);
    let problem = match storage.open(&idx) {
        Ok(f) => {
            let len = f.len().map_err(|e| Error::io("reading an index", e))? as usize;
            match f.read_vec(0, len) {
                Ok(bytes) => {
                    match SegmentSummary::decode_index(&bytes, header.generation, data_len) {
                        Ok(s) => return Ok((s, false)),
                        Err(p) => p,
                    }
                }
                Err(e) => format!("cannot read it: {e}"),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => "it is missing".to_string(),
        Err(e) => format!("cannot open it: {e}"),
    };
    tracing::warn!(
        index = %storage.describe(&idx),
        "rebuilding the segment index because {problem}"
    );
    let (summary, end) = summarize(file.as_ref(), data_len).map_err(|e| e.at(storage, base))?;
    if let ScanEnd::Bad { offset, error } = end {
        return Err(Error::Corrupt {
            location: storage.describe(&data_name(base)),
            offset,
            lsn: bad_lsn(&error),
            reason: error.to_string(),
        });
    }
    if write_back {
        write_atomically(storage, &idx, &summary.encode_index(header.generation))
            .map_err(|e| Error::io("writing a rebuilt index", e))?;
    }
    Ok((summary, true))
}

/// What bad bytes at the end of the newest segment are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TailDamage {
    /// A write that a crash left unfinished: the file ends inside the
    /// record, or the record's last bytes are part of the run of zeroes that
    /// ends the file (space the file grew by whose data never landed). Such
    /// a record was never synced, hence never acknowledged under `always`.
    Torn,
    /// The bytes were written in full and are wrong: damage, not a crash.
    /// `lsn` is the record's LSN when its header is readable.
    Corrupt { lsn: Option<Lsn>, reason: String },
}

/// Tells a torn tail from damage, for bad bytes met at `offset` of the
/// newest segment (`len` bytes long) after records up to `after_lsn`:
/// - a complete, valid record with a higher LSN further on: damage;
/// - the file ends inside the header or the record: torn;
/// - a complete record (or header) none of whose bytes lies in the run of
///   zeroes that ends the file: damage, since a crash cannot have written
///   every byte and left them wrong;
/// - a complete record whose tail lies in that run, when one damaged byte
///   before the run explains its checksum ([`record::single_damaged_byte`]):
///   damage (a record whose true last bytes are zero); otherwise torn.
pub fn classify_tail(
    file: &dyn StorageFile,
    offset: u64,
    len: u64,
    error: &DecodeError,
    after_lsn: Lsn,
) -> Result<TailDamage, Error> {
    let bytes = file
        .read_vec(offset, (len - offset) as usize)
        .map_err(|e| Error::io("reading a segment tail", e))?;
    for i in 1..bytes.len() {
        if let Ok((r, _)) = record::decode(&bytes[i..]) {
            if r.lsn > after_lsn {
                return Ok(TailDamage::Corrupt {
                    lsn: bad_lsn(error),
                    reason: format!(
                        "{error}, yet a valid record follows at offset {}",
                        offset + i as u64
                    ),
                });
            }
        }
    }
    // Where the run of zeroes that ends the file starts (relative to `offset`).
    let zeroes_from = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let written_in_full = "every byte of it was written (none lies in zeroes a crash leaves), \
         so this is damage, not a write torn by a crash, and the record may have been \
         acknowledged; the log will not drop it silently";
    match *error {
        DecodeError::ShortHeader | DecodeError::ShortRecord { .. } => Ok(TailDamage::Torn),
        DecodeError::BadHeader => {
            if zeroes_from >= RECORD_HEADER_LEN {
                Ok(TailDamage::Corrupt {
                    lsn: None,
                    reason: format!("{error} in the last record of the log: {written_in_full}"),
                })
            } else {
                Ok(TailDamage::Torn)
            }
        }
        DecodeError::BadPayload { lsn } => {
            let total = record::decode_header(&bytes)
                .map(|h| h.total_len)
                .expect("a payload error comes with a valid header");
            if zeroes_from >= total {
                return Ok(TailDamage::Corrupt {
                    lsn: Some(lsn),
                    reason: format!("{error}, the last record of the log: {written_in_full}"),
                });
            }
            match record::single_damaged_byte(&bytes[..total]) {
                // A byte inside the zeroes may just not have been written.
                Some(at) if at < zeroes_from => Ok(TailDamage::Corrupt {
                    lsn: Some(lsn),
                    reason: format!(
                        "{error}, the last record of the log: it is complete and one damaged \
                         byte, at offset {}, explains the mismatch, so this is damage, not a \
                         write torn by a crash, and the record may have been acknowledged; \
                         the log will not drop it silently",
                        offset + at as u64
                    ),
                }),
                _ => Ok(TailDamage::Torn),
            }
        }
    }
}

pub fn bad_lsn(e: &DecodeError) -> Option<Lsn> {
    match e {
        DecodeError::BadPayload { lsn } => Some(*lsn),
        _ => None,
    }
}
