//! The log's records over the wire: what a follower pulls from a member it
//! catches up from (`docs/replication.md`, "The records on the wire").
//!
//! A body is a header of [`WIRE_HEADER_LEN`] bytes — the magic `AQLR`, the
//! format version (`u32`, little-endian), the number of records that
//! follow (`u64`), the last LSN the sending log has committed (`u64`, so
//! the follower knows how far behind it is) and the LSN from which the
//! sending log holds every record (`u64`, its exact point) — then the
//! records, each exactly as it is stored in a segment
//! (`docs/log-format.md`: its own checksums, LSN, term, time, kind and
//! batch flag). The records are whole batches in LSN order, with no gap
//! from the exact point on (below it, compaction dropped some): a
//! follower appends them at the same LSNs and applies each batch as the
//! member did.

use std::time::Duration;

use crate::record::{self, Record};
use crate::{Log, Lsn};

/// The four bytes a body starts with.
pub const WIRE_MAGIC: [u8; 4] = *b"AQLR";
/// The version of the body's layout.
pub const WIRE_VERSION: u32 = 1;
/// The media type of a body.
pub const CONTENT_TYPE: &str = "application/vnd.aqueduct.log-records";
/// Bytes before the first record.
pub const WIRE_HEADER_LEN: usize = 32;
/// Records one response carries at most (a batch is never split, so one
/// batch larger than this goes whole).
pub const MAX_WIRE_RECORDS: usize = 65_536;
/// Bytes of records one response carries at most, besides the batch that
/// crosses it.
pub const MAX_WIRE_BYTES: usize = 32 << 20;

/// What a body says of the log that sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    /// The last LSN it has committed.
    pub committed: Lsn,
    /// It holds every record from this LSN on.
    pub exact_from: Lsn,
}

/// Encodes `records` as a body from `sender`.
pub fn encode(records: &[Record], sender: Sender) -> Vec<u8> {
    let len: usize = records.iter().map(Record::encoded_len).sum();
    let mut out = Vec::with_capacity(WIRE_HEADER_LEN + len);
    out.extend_from_slice(&WIRE_MAGIC);
    out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    out.extend_from_slice(&sender.committed.to_le_bytes());
    out.extend_from_slice(&sender.exact_from.to_le_bytes());
    for r in records {
        r.view().encode_into(&mut out);
    }
    out
}

/// Decodes a body, checking every record's checksums, that the LSNs
/// increase from `from` on without a gap from the sender's exact point on,
/// and that the last record ends its batch. Returns the records and what
/// the body says of its sender; the error says what is wrong.
pub fn decode(body: &[u8], from: Lsn) -> Result<(Vec<Record>, Sender), String> {
    if body.len() < WIRE_HEADER_LEN || body[0..4] != WIRE_MAGIC {
        return Err("the body is not a run of log records (no AQLR header)".into());
    }
    let version = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes"));
    if version != WIRE_VERSION {
        return Err(format!(
            "log records of format version {version}; this build reads version {WIRE_VERSION}"
        ));
    }
    let count = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    let sender = Sender {
        committed: u64::from_le_bytes(body[16..24].try_into().expect("8 bytes")),
        exact_from: u64::from_le_bytes(body[24..32].try_into().expect("8 bytes")),
    };
    let mut out = Vec::new();
    let mut at = WIRE_HEADER_LEN;
    let mut next = from;
    while at < body.len() {
        let (view, len) = record::decode(&body[at..])
            .map_err(|e| format!("record {} of the body: {e:?}", out.len() + 1))?;
        // The LSNs skipped must all be below the exact point.
        let gap_allowed = view.lsn <= sender.exact_from;
        if view.lsn < next || (view.lsn > next && !gap_allowed) {
            return Err(format!(
                "record at LSN {} where LSN {next} was expected",
                view.lsn
            ));
        }
        next = view.lsn + 1;
        out.push(view.to_owned());
        at += len;
    }
    if out.len() as u64 != count {
        return Err(format!(
            "the header announces {count} records, the body holds {}",
            out.len()
        ));
    }
    if out.last().is_some_and(|r| !r.ends_batch()) {
        return Err("the body ends inside a batch".into());
    }
    Ok((out, sender))
}

/// Whole batches of `log` from `from` (a batch boundary), up to about
/// `max_records` records and [`MAX_WIRE_BYTES`] bytes (counted record by
/// record; the batch that crosses either goes whole); waits up to `wait`
/// for a commit when there is nothing yet. Only records the log counts as
/// committed are read.
pub fn read_batches(
    log: &Log,
    from: Lsn,
    max_records: usize,
    wait: Duration,
) -> crate::Result<Vec<Record>> {
    let max_records = max_records.clamp(1, MAX_WIRE_RECORDS);
    if log.committed_lsn() < from {
        log.wait_for(from, wait);
    }
    let mut reader = log.reader(from);
    let mut out: Vec<Record> = Vec::new();
    let mut bytes = 0usize;
    loop {
        let read = reader.read_while(usize::MAX, |r| {
            bytes += r.encoded_len();
            out.push(r.to_owned());
            let full = out.len() >= max_records || bytes >= MAX_WIRE_BYTES;
            Ok(!(full && r.ends_batch()))
        })?;
        let at_boundary = out.last().is_none_or(Record::ends_batch);
        if read == 0 || at_boundary {
            break;
        }
    }
    // A batch is committed whole, so an unfinished one at the end can only
    // be one being appended now: it goes in the next response.
    while out.last().is_some_and(|r| !r.ends_batch()) {
        out.pop();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordKind;

    fn record(lsn: Lsn, ends: bool) -> Record {
        Record {
            lsn,
            term: 0,
            timestamp_micros: 1,
            kind: RecordKind::Put,
            flags: if ends {
                0
            } else {
                record::FLAG_BATCH_CONTINUES
            },
            key: vec![lsn as u8],
            body: vec![1, 2, 3],
        }
    }

    #[test]
    fn a_body_round_trips_and_damage_is_named() {
        let records = vec![record(5, false), record(6, true), record(7, true)];
        let sender = Sender {
            committed: 9,
            exact_from: 1,
        };
        let body = encode(&records, sender);
        assert_eq!(decode(&body, 5).unwrap(), (records.clone(), sender));
        assert!(decode(&body, 4).unwrap_err().contains("LSN 4 was expected"));
        let mut bad = body.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(decode(&bad, 5).unwrap_err().contains("record 3"));
        let cut = encode(&records[..1], sender);
        assert!(decode(&cut, 5).unwrap_err().contains("inside a batch"));
        let mut other = body.clone();
        other[4] = 9;
        assert!(decode(&other, 5).unwrap_err().contains("version 9"));
        assert!(decode(b"{}", 5).is_err());
        // A gap only below the sender's exact point.
        let gapped = vec![record(5, true), record(8, true), record(9, true)];
        let body = encode(&gapped, sender);
        assert!(decode(&body, 5).unwrap_err().contains("LSN 6 was expected"));
        let compacted = Sender {
            committed: 9,
            exact_from: 9,
        };
        let body = encode(&gapped, compacted);
        assert_eq!(decode(&body, 5).unwrap().0, gapped);
        let late = vec![record(5, true), record(9, true), record(11, true)];
        let body = encode(&late, compacted);
        assert!(decode(&body, 5)
            .unwrap_err()
            .contains("LSN 10 was expected"));
    }
}
