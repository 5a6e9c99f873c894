//! A small durable record kept beside the log: what was purged from its front
//! and the replication vote. Written whole via a temporary file and a rename.
//!
//! ```text
//! 0  [8] magic "AQDLMETA"
//! 8  u16 format version, u16 0, u32 0
//! 16 u64 purged_lsn    records at or below this LSN were purged on purpose
//! 24 u64 purged_term
//! 32 u32 vote_len, then vote_len bytes of vote
//! .. u64 compacted_until (format versions 2 and 3; version 1 files lack
//!        it and read as 0)
//! .. [16] server_id (format version 3; older files lack it and read as 0)
//! .. u32 CRC32C of everything before it
//! ```
//!
//! `server_id`: a random 128-bit id drawn once, when the log is first
//! opened writable without one (a new data directory, or one written by an
//! older build). It names this log to subscribers: another id behind the
//! same address means a wiped or different server. Never 0 once drawn.
//!
//! `compacted_until`: compaction may have dropped records below this LSN, so
//! a reader that must see every record (a change-feed consumer) can start
//! exactly only at or above it. Stored before compaction rewrites anything.

use crate::segment::write_atomically;
use crate::storage::Storage;
use crate::{Error, Lsn, Result, META_FORMAT_VERSION};

pub const META_NAME: &str = "meta";
const META_MAGIC: &[u8; 8] = b"AQDLMETA";
/// Largest vote payload stored in the metadata file.
pub const MAX_VOTE_BYTES: usize = 4096;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub purged_lsn: Lsn,
    pub purged_term: u64,
    /// Opaque bytes owned by the replication layer (its vote).
    pub vote: Vec<u8>,
    /// Records below this LSN may have been removed by compaction.
    pub compacted_until: Lsn,
    /// The log's random id; 0 until one is drawn.
    pub server_id: u128,
}

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.vote.len() <= MAX_VOTE_BYTES);
        let mut b = Vec::with_capacity(40 + self.vote.len());
        b.extend_from_slice(META_MAGIC);
        b.extend_from_slice(&META_FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&[0u8; 6]);
        b.extend_from_slice(&self.purged_lsn.to_le_bytes());
        b.extend_from_slice(&self.purged_term.to_le_bytes());
        b.extend_from_slice(&(self.vote.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.vote);
        b.extend_from_slice(&self.compacted_until.to_le_bytes());
        b.extend_from_slice(&self.server_id.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> std::result::Result<Meta, String> {
        if b.len() < 40 || &b[0..8] != META_MAGIC {
            return Err("bad metadata header".into());
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err("metadata checksum mismatch".into());
        }
        let version = u16::from_le_bytes(b[8..10].try_into().unwrap());
        let tail = match version {
            1 => 0,
            2 => 8,
            META_FORMAT_VERSION => 24,
            v => return Err(format!("metadata format version {v} is unknown")),
        };
        let vote_len = u32::from_le_bytes(b[32..36].try_into().unwrap()) as usize;
        if 36 + vote_len + tail != body.len() {
            return Err("metadata length mismatch".into());
        }
        let rest = &body[36 + vote_len..];
        let compacted_until = match tail {
            0 => 0,
            _ => u64::from_le_bytes(rest[..8].try_into().unwrap()),
        };
        let server_id = match tail {
            24 => u128::from_le_bytes(rest[8..24].try_into().unwrap()),
            _ => 0,
        };
        Ok(Meta {
            purged_lsn: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            purged_term: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            vote: b[36..36 + vote_len].to_vec(),
            compacted_until,
            server_id,
        })
    }

    /// Reads the metadata; a missing file is the default.
    pub fn load(storage: &dyn Storage) -> Result<Meta> {
        let f = match storage.open(META_NAME) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Meta::default()),
            Err(e) => return Err(Error::io("opening the log metadata", e)),
        };
        let len = f
            .len()
            .map_err(|e| Error::io("reading the log metadata", e))?;
        let bytes = f
            .read_vec(0, len as usize)
            .map_err(|e| Error::io("reading the log metadata", e))?;
        Meta::decode(&bytes).map_err(|reason| Error::Corrupt {
            location: storage.describe(META_NAME),
            offset: 0,
            lsn: None,
            reason,
        })
    }

    pub fn store(&self, storage: &dyn Storage) -> Result<()> {
        if self.vote.len() > MAX_VOTE_BYTES {
            return Err(Error::Invalid(format!(
                "vote of {} bytes exceeds the limit of {MAX_VOTE_BYTES}",
                self.vote.len()
            )));
        }
        write_atomically(storage, META_NAME, &self.encode())
            .map_err(|e| Error::io("writing the log metadata", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = Meta {
            purged_lsn: 42,
            purged_term: 3,
            vote: b"term=3,node=1".to_vec(),
            compacted_until: 77,
            server_id: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321,
        };
        let b = m.encode();
        assert_eq!(Meta::decode(&b).unwrap(), m);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(Meta::decode(&d).is_err(), "byte {i}");
        }
    }

    #[test]
    fn a_version_2_file_reads_without_a_server_id() {
        let m = Meta {
            purged_lsn: 5,
            compacted_until: 9,
            ..Meta::default()
        };
        let mut b = m.encode();
        // Version 2 of the same: no server id, its version, its checksum.
        b.truncate(b.len() - 4 - 16);
        b[8..10].copy_from_slice(&2u16.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(Meta::decode(&b).unwrap(), m);
    }
}
