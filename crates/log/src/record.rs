//! Log records and their byte layout (see `docs/log-format.md`).
//!
//! A record is a fixed 48-byte header followed by the key and the body:
//!
//! ```text
//! 0   u32 record_crc  CRC32C of bytes 8..end (rest of header, key, body)
//! 4   u32 header_crc  CRC32C of bytes 8..48
//! 8   u32 key_len
//! 12  u32 body_len
//! 16  u64 lsn
//! 24  u64 term
//! 32  i64 timestamp   microseconds since the Unix epoch (for people, not ordering)
//! 40  u8  kind
//! 41  u8  flags       bit 0: BATCH_CONTINUES (more records of this batch follow)
//! 42  u16 reserved    zero
//! 44  u32 reserved    zero
//! ```
//!
//! All integers are little-endian. The header has its own checksum so that a
//! damaged length field is detected before the length is trusted.

use crate::{Lsn, MAX_BODY_BYTES, MAX_KEY_BYTES};

/// Size of the fixed record header in bytes.
pub const RECORD_HEADER_LEN: usize = 48;

/// Flag bit: another record of the same atomic batch follows this one.
pub const FLAG_BATCH_CONTINUES: u8 = 0b0000_0001;
const KNOWN_FLAGS: u8 = FLAG_BATCH_CONTINUES;

/// What a record means. Only `Put`, `Delete` and `TxnDeps` are subject to
/// compaction;
/// every other kind is kept forever (see [`RecordKind::is_compactable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// Set `key` to `body`.
    Put,
    /// Remove `key`; becomes a tombstone until nothing older holds the key.
    Delete,
    /// Marks a transaction boundary or carries transaction metadata.
    TxnMarker,
    /// A schema change (table, index, view definitions).
    Schema,
    /// One hop of a transaction chain.
    ChainHop,
    /// What a transaction read and who ran it (`docs/publications.md`,
    /// section 2), the first record of its batch. Compacted like a `put`
    /// of its one key: below every hold only the newest survives.
    TxnDeps,
    /// A kind defined by a later layer; never compacted.
    Other(u8),
}

impl RecordKind {
    /// The byte stored on disk.
    pub fn to_byte(self) -> u8 {
        match self {
            RecordKind::Put => 1,
            RecordKind::Delete => 2,
            RecordKind::TxnMarker => 3,
            RecordKind::Schema => 4,
            RecordKind::ChainHop => 5,
            RecordKind::TxnDeps => 6,
            RecordKind::Other(b) => b,
        }
    }

    /// Decodes the on-disk byte. Zero is never a valid kind: a zeroed region
    /// of a file must not decode as a record.
    pub fn from_byte(b: u8) -> Option<RecordKind> {
        Some(match b {
            0 => return None,
            1 => RecordKind::Put,
            2 => RecordKind::Delete,
            3 => RecordKind::TxnMarker,
            4 => RecordKind::Schema,
            5 => RecordKind::ChainHop,
            6 => RecordKind::TxnDeps,
            other => RecordKind::Other(other),
        })
    }

    /// Whether compaction may drop a record of this kind once a newer record
    /// for the same key exists (or, for a delete, once nothing older holds it).
    pub fn is_compactable(self) -> bool {
        matches!(
            self,
            RecordKind::Put | RecordKind::Delete | RecordKind::TxnDeps
        )
    }

    /// Short human-readable name (used by `aqueduct wal`).
    pub fn name(self) -> String {
        match self {
            RecordKind::Put => "put".into(),
            RecordKind::Delete => "delete".into(),
            RecordKind::TxnMarker => "txn".into(),
            RecordKind::Schema => "schema".into(),
            RecordKind::ChainHop => "chain-hop".into(),
            RecordKind::TxnDeps => "txn-deps".into(),
            RecordKind::Other(b) => format!("kind-{b}"),
        }
    }

    /// Inverse of [`RecordKind::name`].
    pub fn parse(s: &str) -> Option<RecordKind> {
        Some(match s {
            "put" => RecordKind::Put,
            "delete" => RecordKind::Delete,
            "txn" => RecordKind::TxnMarker,
            "schema" => RecordKind::Schema,
            "chain-hop" => RecordKind::ChainHop,
            "txn-deps" => RecordKind::TxnDeps,
            other => RecordKind::from_byte(other.strip_prefix("kind-")?.parse().ok()?)?,
        })
    }
}

/// A record to be appended: the log assigns its LSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRecord {
    pub kind: RecordKind,
    pub key: Vec<u8>,
    pub body: Vec<u8>,
    /// Raft term of the entry; 0 outside replication.
    pub term: u64,
    /// Wall-clock time in microseconds since the epoch; 0 means "now".
    pub timestamp_micros: i64,
}

impl NewRecord {
    pub fn put(key: impl Into<Vec<u8>>, body: impl Into<Vec<u8>>) -> NewRecord {
        NewRecord::new(RecordKind::Put, key, body)
    }

    pub fn delete(key: impl Into<Vec<u8>>) -> NewRecord {
        NewRecord::new(RecordKind::Delete, key, Vec::new())
    }

    pub fn new(kind: RecordKind, key: impl Into<Vec<u8>>, body: impl Into<Vec<u8>>) -> NewRecord {
        NewRecord {
            kind,
            key: key.into(),
            body: body.into(),
            term: 0,
            timestamp_micros: 0,
        }
    }

    /// Bytes this record takes in a segment.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.key.len() + self.body.len()
    }
}

/// A record as stored in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub lsn: Lsn,
    pub term: u64,
    pub timestamp_micros: i64,
    pub kind: RecordKind,
    pub flags: u8,
    pub key: Vec<u8>,
    pub body: Vec<u8>,
}

impl Record {
    /// True when this record closes its atomic batch.
    pub fn ends_batch(&self) -> bool {
        self.flags & FLAG_BATCH_CONTINUES == 0
    }

    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            lsn: self.lsn,
            term: self.term,
            timestamp_micros: self.timestamp_micros,
            kind: self.kind,
            flags: self.flags,
            key: &self.key,
            body: &self.body,
        }
    }

    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.key.len() + self.body.len()
    }
}

/// A record borrowed from a read buffer; replay hands these out without copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub lsn: Lsn,
    pub term: u64,
    pub timestamp_micros: i64,
    pub kind: RecordKind,
    pub flags: u8,
    pub key: &'a [u8],
    pub body: &'a [u8],
}

impl RecordView<'_> {
    pub fn ends_batch(&self) -> bool {
        self.flags & FLAG_BATCH_CONTINUES == 0
    }

    pub fn to_owned(&self) -> Record {
        Record {
            lsn: self.lsn,
            term: self.term,
            timestamp_micros: self.timestamp_micros,
            kind: self.kind,
            flags: self.flags,
            key: self.key.to_vec(),
            body: self.body.to_vec(),
        }
    }

    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.key.len() + self.body.len()
    }

    /// Appends the encoded record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        encode_parts(
            out,
            self.lsn,
            self.term,
            self.timestamp_micros,
            self.kind,
            self.flags,
            self.key,
            self.body,
        );
    }
}

/// Encodes one record. Lengths are checked by the caller against
/// `MAX_KEY_BYTES` / `MAX_BODY_BYTES`; here they are asserted.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_parts(
    out: &mut Vec<u8>,
    lsn: Lsn,
    term: u64,
    timestamp_micros: i64,
    kind: RecordKind,
    flags: u8,
    key: &[u8],
    body: &[u8],
) {
    assert!(key.len() <= MAX_KEY_BYTES && body.len() <= MAX_BODY_BYTES);
    assert!(lsn > 0, "LSN 0 is reserved for 'nothing'");
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&term.to_le_bytes());
    out.extend_from_slice(&timestamp_micros.to_le_bytes());
    out.push(kind.to_byte());
    out.push(flags);
    out.extend_from_slice(&[0u8; 6]);
    debug_assert_eq!(out.len() - start, RECORD_HEADER_LEN);
    let header_crc = crc32c::crc32c(&out[start + 8..start + RECORD_HEADER_LEN]);
    out.extend_from_slice(key);
    out.extend_from_slice(body);
    let record_crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&record_crc.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&header_crc.to_le_bytes());
}

/// Why bytes at some offset are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than a header remain.
    ShortHeader,
    /// The header checksum does not match (or its fields are impossible).
    BadHeader,
    /// The header is valid but the record extends past the available bytes.
    ShortRecord { needed: usize },
    /// The header is valid but the key/body checksum does not match.
    BadPayload { lsn: Lsn },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::ShortHeader => write!(f, "record header is cut short"),
            DecodeError::BadHeader => write!(f, "record header checksum mismatch"),
            DecodeError::ShortRecord { needed } => {
                write!(f, "record is cut short ({needed} bytes expected)")
            }
            DecodeError::BadPayload { lsn } => {
                write!(f, "record checksum mismatch (header says LSN {lsn})")
            }
        }
    }
}

/// Parsed header fields, valid once `decode_header` returns them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub lsn: Lsn,
    pub total_len: usize,
}

/// Checks the header at the start of `buf` and returns the record's total length.
pub(crate) fn decode_header(buf: &[u8]) -> Result<Header, DecodeError> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(DecodeError::ShortHeader);
    }
    let header_crc = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if crc32c::crc32c(&buf[8..RECORD_HEADER_LEN]) != header_crc {
        return Err(DecodeError::BadHeader);
    }
    let key_len = u32::from_le_bytes(buf[8..12].try_into().unwrap()) as usize;
    let body_len = u32::from_le_bytes(buf[12..16].try_into().unwrap()) as usize;
    let lsn = u64::from_le_bytes(buf[16..24].try_into().unwrap());
    let kind = buf[40];
    let flags = buf[41];
    if key_len > MAX_KEY_BYTES
        || body_len > MAX_BODY_BYTES
        || lsn == 0
        || RecordKind::from_byte(kind).is_none()
        || flags & !KNOWN_FLAGS != 0
    {
        return Err(DecodeError::BadHeader);
    }
    Ok(Header {
        lsn,
        total_len: RECORD_HEADER_LEN + key_len + body_len,
    })
}

/// Decodes and verifies one record at the start of `buf`.
/// Returns the record and the number of bytes it occupies.
pub fn decode(buf: &[u8]) -> Result<(RecordView<'_>, usize), DecodeError> {
    let header = decode_header(buf)?;
    if buf.len() < header.total_len {
        return Err(DecodeError::ShortRecord {
            needed: header.total_len,
        });
    }
    let record_crc = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    if crc32c::crc32c(&buf[8..header.total_len]) != record_crc {
        return Err(DecodeError::BadPayload { lsn: header.lsn });
    }
    let key_len = u32::from_le_bytes(buf[8..12].try_into().unwrap()) as usize;
    let view = RecordView {
        lsn: header.lsn,
        term: u64::from_le_bytes(buf[24..32].try_into().unwrap()),
        timestamp_micros: i64::from_le_bytes(buf[32..40].try_into().unwrap()),
        kind: RecordKind::from_byte(buf[40]).expect("checked by decode_header"),
        flags: buf[41],
        key: &buf[RECORD_HEADER_LEN..RECORD_HEADER_LEN + key_len],
        body: &buf[RECORD_HEADER_LEN + key_len..header.total_len],
    };
    Ok((view, header.total_len))
}

/// Records longer than this are not searched for a single damaged byte
/// ([`single_damaged_byte`]): past it, a chance match for bytes a crash left
/// unwritten becomes likely (about `len * 255 / 2^32`).
pub const MAX_DAMAGE_SEARCH_BYTES: usize = 64 * 1024;

/// CRC-32C (reflected, polynomial 0x82F63B78) of one byte from a zero state.
const fn crc32c_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

const CRC_TABLE: [u32; 256] = crc32c_table();

/// `CRC_TABLE[i] >> 24` is different for every `i`; this inverts it.
const fn crc_top_byte_inverse() -> [u8; 256] {
    let mut inv = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        inv[(CRC_TABLE[i] >> 24) as usize] = i as u8;
        i += 1;
    }
    inv
}

const CRC_TOP_INVERSE: [u8; 256] = crc_top_byte_inverse();

/// Whether one damaged byte explains why a complete record's checksum
/// fails; returns that byte's offset in the record. `record` is the whole
/// record (header and payload) and its header must be valid.
///
/// CRC-32C is linear: for two messages of the same length, the XOR of
/// their checksums is the zero-initialised CRC of the XOR of the messages.
/// An error of pattern `m` at byte `j` of an `n`-byte message leaves the
/// syndrome `Z^(n-1-j)(T[m])`, where `T` is the byte table and `Z` feeds
/// one zero byte. `Z` is invertible, so walking the syndrome back one byte
/// at a time and looking it up in `T` finds `j` in O(n). A write torn by a
/// crash leaves zeroes over a run of bytes, which a single byte explains
/// only by chance (see [`MAX_DAMAGE_SEARCH_BYTES`]).
pub fn single_damaged_byte(record: &[u8]) -> Option<usize> {
    if record.len() < RECORD_HEADER_LEN || record.len() > MAX_DAMAGE_SEARCH_BYTES {
        return None;
    }
    let stored = u32::from_le_bytes(record[0..4].try_into().unwrap());
    let syndrome = crc32c::crc32c(&record[8..]) ^ stored;
    if syndrome == 0 {
        return None;
    }
    // The stored checksum itself took the damage.
    let bytes = syndrome.to_le_bytes();
    if bytes.iter().filter(|&&b| b != 0).count() == 1 {
        return bytes.iter().position(|&b| b != 0);
    }
    let covered = &record[8..];
    let mut s = syndrome;
    for k in 0..covered.len() {
        let m = CRC_TOP_INVERSE[(s >> 24) as usize];
        if m != 0 && CRC_TABLE[m as usize] == s {
            return Some(8 + covered.len() - 1 - k);
        }
        // Undo one zero byte: s = (prev >> 8) ^ T[prev & 0xff].
        let i = CRC_TOP_INVERSE[(s >> 24) as usize];
        s = ((s ^ CRC_TABLE[i as usize]) << 8) | i as u32;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut out = Vec::new();
        encode_parts(
            &mut out,
            7,
            3,
            1_700_000_000_000_000,
            RecordKind::Put,
            FLAG_BATCH_CONTINUES,
            b"users/1",
            b"{\"name\":\"ada\"}",
        );
        out
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let (view, len) = decode(&bytes).unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(view.lsn, 7);
        assert_eq!(view.term, 3);
        assert_eq!(view.kind, RecordKind::Put);
        assert!(!view.ends_batch());
        assert_eq!(view.key, b"users/1");
        assert_eq!(view.body, b"{\"name\":\"ada\"}");
        let mut again = Vec::new();
        view.encode_into(&mut again);
        assert_eq!(again, bytes);
    }

    #[test]
    fn every_truncation_is_detected() {
        let bytes = sample();
        for cut in 0..bytes.len() {
            let err = decode(&bytes[..cut]).unwrap_err();
            assert!(matches!(
                err,
                DecodeError::ShortHeader | DecodeError::ShortRecord { .. }
            ));
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let bytes = sample();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(decode(&b).is_err(), "flip of bit {i} went unnoticed");
        }
    }

    #[test]
    fn crc_table_matches_the_library_and_its_top_bytes_differ() {
        let mut seen = [false; 256];
        for (i, &t) in CRC_TABLE.iter().enumerate() {
            assert!(!seen[(t >> 24) as usize], "top byte of T[{i}] repeats");
            seen[(t >> 24) as usize] = true;
        }
        // The table agrees with the crc32c crate through linearity.
        let a = [0u8, 0, 0, 0];
        let b = [0x5au8, 0, 0, 0];
        let s = crc32c::crc32c(&a) ^ crc32c::crc32c(&b);
        let mut state = CRC_TABLE[0x5a];
        for _ in 0..3 {
            state = (state >> 8) ^ CRC_TABLE[(state & 0xff) as usize];
        }
        assert_eq!(s, state);
    }

    #[test]
    fn every_single_damaged_byte_is_located() {
        let bytes = sample();
        for i in (0..4).chain(RECORD_HEADER_LEN..bytes.len()) {
            for mask in [0x01u8, 0x80, 0x24, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= mask;
                assert_eq!(single_damaged_byte(&b), Some(i), "byte {i} mask {mask:#x}");
            }
        }
        assert_eq!(single_damaged_byte(&bytes), None, "an intact record");
    }

    #[test]
    fn zeroes_over_a_record_tail_are_not_one_damaged_byte() {
        let bytes = sample();
        for from in RECORD_HEADER_LEN..bytes.len() - 1 {
            let mut b = bytes.clone();
            b[from..].iter_mut().for_each(|x| *x = 0);
            if b[from..] == bytes[from..] {
                continue;
            }
            let changed = bytes[from..].iter().filter(|&&x| x != 0).count();
            if changed > 1 {
                assert_eq!(single_damaged_byte(&b), None, "zeroes from {from}");
            }
        }
    }

    #[test]
    fn zeroes_are_not_a_record() {
        assert_eq!(decode(&[0u8; 64]).unwrap_err(), DecodeError::BadHeader);
    }

    #[test]
    fn kind_names_round_trip() {
        for b in 1..=255u8 {
            let k = RecordKind::from_byte(b).unwrap();
            assert_eq!(k.to_byte(), b);
            assert_eq!(RecordKind::parse(&k.name()), Some(k));
        }
    }
}
