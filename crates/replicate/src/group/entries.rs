//! The Raft entry index: which log records each Raft entry holds
//! (`docs/replication.md`, "The Raft entry index").
//!
//! The records of a Raft entry live in the log, once; this file says, for
//! each entry, its log id (term, leader, index), its kind, and the LSN
//! range of its records (empty for a blank or membership entry, whose
//! membership is kept here). It is appended to after the entry's records
//! are durable in the log, and cut back when Raft truncates its log, so
//! the log never holds less than this file describes; at open, log
//! records past the last entry described (appended by a leader that lost
//! its place before proposing them) are removed.
//!
//! Each entry is one frame: `len: u32` (bytes after the checksum),
//! `crc32c: u32` of those bytes, then `index: u64`, `term: u64`,
//! `leader: u64`, `first_lsn: u64`, `last_lsn: u64`, `kind: u8` and, for a
//! membership entry, the membership as JSON. All integers little-endian. A
//! torn or damaged frame at the end is cut off at open.

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_log::{Lsn, Storage, StorageFile};

/// Bytes of a frame before its membership.
const FRAME_FIXED: usize = 4 + 4 + 8 * 5 + 1;
/// A frame longer than this is damage, not an entry.
const MAX_FRAME_BYTES: usize = 1 << 20;

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No records: a new leader's first entry.
    Blank,
    /// One batch of log records.
    Batch,
    /// A membership change (no records).
    Membership,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Blank => 0,
            Kind::Batch => 1,
            Kind::Membership => 2,
        }
    }

    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Blank,
            1 => Kind::Batch,
            2 => Kind::Membership,
            _ => return None,
        })
    }
}

/// One entry as the index knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub index: u64,
    pub term: u64,
    pub leader: u64,
    pub kind: Kind,
    /// The entry's records are the log's from `first` to `last`; an entry
    /// without records has `last == first - 1`.
    pub first: Lsn,
    pub last: Lsn,
    /// A membership entry's membership, as JSON.
    pub membership: Option<Vec<u8>>,
}

impl Meta {
    /// The LSN the entry ends at: its last record's, or for an entry
    /// without records, the one before it (where the previous entry ended).
    pub fn end_lsn(&self) -> Lsn {
        self.last.max(self.first.saturating_sub(1))
    }
}

/// The entry index of one member, on disk and in memory.
pub struct EntryIndex {
    file: Arc<dyn StorageFile>,
    /// Entries not purged, in index order (consecutive indexes).
    entries: Vec<(Meta, u64)>,
    /// Every membership entry kept, by index (memberships are few; a purge
    /// keeps them, as the state machine names the last one applied).
    memberships: BTreeMap<u64, Meta>,
    len: u64,
}

impl EntryIndex {
    /// Opens (or creates) the index, file `name` of `storage`, cutting a
    /// damaged tail and dropping entries at or below `purged`.
    pub fn open(
        storage: &dyn Storage,
        name: &str,
        purged: Option<u64>,
    ) -> std::io::Result<EntryIndex> {
        let file = if storage.list()?.iter().any(|n| n == name) {
            storage.open(name)?
        } else {
            let file = storage.create(name)?;
            storage.sync_dir()?;
            file
        };
        let bytes = file.read_vec(0, file.len()? as usize)?;
        let mut entries: Vec<(Meta, u64)> = Vec::new();
        let mut memberships = BTreeMap::new();
        let mut at = 0usize;
        while let Some((meta, next)) = decode(&bytes, at) {
            if let Some((last, _)) = entries.last() {
                if meta.index != last.index + 1 {
                    break;
                }
            }
            if meta.kind == Kind::Membership {
                memberships.insert(meta.index, meta.clone());
            }
            entries.push((meta, at as u64));
            at = next;
        }
        if at < bytes.len() {
            tracing::warn!(
                "the Raft entry index ends in {} damaged or torn bytes; cut off",
                bytes.len() - at
            );
            file.truncate(at as u64)?;
            file.sync()?;
        }
        let keep_from = purged.map_or(0, |p| p + 1);
        entries.retain(|(m, _)| m.index >= keep_from);
        Ok(EntryIndex {
            file,
            entries,
            memberships,
            len: at as u64,
        })
    }

    /// The last entry, if any is kept.
    pub fn last(&self) -> Option<&Meta> {
        self.entries.last().map(|(m, _)| m)
    }

    /// The entry at `index`, if kept.
    pub fn get(&self, index: u64) -> Option<&Meta> {
        let first = self.entries.first()?.0.index;
        let i = index.checked_sub(first)? as usize;
        self.entries.get(i).map(|(m, _)| m)
    }

    /// The kept entries with indexes in `from..to`.
    pub fn range(&self, from: u64, to: u64) -> impl Iterator<Item = &Meta> {
        // Indexes are consecutive: the start is found, not searched for.
        let first = self.entries.first().map_or(0, |(m, _)| m.index);
        let start = (from.saturating_sub(first) as usize).min(self.entries.len());
        self.entries[start..]
            .iter()
            .map(|(m, _)| m)
            .take_while(move |m| m.index < to)
    }

    /// The last membership entry at or below `index`.
    pub fn membership_at(&self, index: u64) -> Option<&Meta> {
        self.memberships.range(..=index).next_back().map(|(_, m)| m)
    }

    /// The last LSN any kept entry holds (0 with none).
    pub fn last_lsn(&self) -> Lsn {
        self.last().map_or(0, Meta::end_lsn)
    }

    /// Appends `metas` (consecutive indexes after the last) and syncs when
    /// `sync` says so.
    pub fn append(&mut self, metas: &[Meta], sync: bool) -> std::io::Result<()> {
        let mut out = Vec::new();
        let mut offsets = Vec::with_capacity(metas.len());
        for m in metas {
            if let Some(last) = self.last() {
                assert_eq!(
                    m.index,
                    last.index + 1,
                    "Raft entry {} appended after entry {}",
                    m.index,
                    last.index
                );
            }
            offsets.push(self.len + out.len() as u64);
            encode(m, &mut out);
            self.entries
                .push((m.clone(), *offsets.last().expect("one")));
            if m.kind == Kind::Membership {
                self.memberships.insert(m.index, m.clone());
            }
        }
        self.file.write_at(&out, self.len)?;
        if sync {
            self.file.sync()?;
        }
        self.len += out.len() as u64;
        Ok(())
    }

    /// Removes the entries from `index` on (Raft truncating a conflicting
    /// suffix).
    pub fn truncate_from(&mut self, index: u64) -> std::io::Result<()> {
        let Some(pos) = self.entries.iter().position(|(m, _)| m.index >= index) else {
            return Ok(());
        };
        let offset = self.entries[pos].1;
        self.entries.truncate(pos);
        self.memberships.retain(|&i, _| i < index);
        self.file.truncate(offset)?;
        self.file.sync()?;
        self.len = offset;
        Ok(())
    }

    /// Forgets the entries at or below `index` (Raft purging its log; the
    /// caller has made the purge point durable first).
    pub fn purge_through(&mut self, index: u64) {
        self.entries.retain(|(m, _)| m.index > index);
    }
}

fn encode(m: &Meta, out: &mut Vec<u8>) {
    let membership = m.membership.as_deref().unwrap_or(&[]);
    let mut body = Vec::with_capacity(FRAME_FIXED - 8 + membership.len());
    for v in [m.index, m.term, m.leader, m.first, m.last] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.push(m.kind.byte());
    body.extend_from_slice(membership);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
}

/// The frame at `at`, and where the next starts; `None` at the end or at
/// a torn or damaged frame.
fn decode(bytes: &[u8], at: usize) -> Option<(Meta, usize)> {
    let head = bytes.get(at..at + 8)?;
    let len = u32::from_le_bytes(head[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().ok()?);
    if !(FRAME_FIXED - 8..=MAX_FRAME_BYTES).contains(&len) {
        return None;
    }
    let body = bytes.get(at + 8..at + 8 + len)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let u = |i: usize| u64::from_le_bytes(body[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let kind = Kind::of(body[40])?;
    let rest = &body[41..];
    Some((
        Meta {
            index: u(0),
            term: u(1),
            leader: u(2),
            first: u(3),
            last: u(4),
            kind,
            membership: (kind == Kind::Membership).then(|| rest.to_vec()),
        },
        at + 8 + len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(index: u64, first: Lsn, last: Lsn) -> Meta {
        Meta {
            index,
            term: 1,
            leader: 1,
            kind: Kind::Batch,
            first,
            last,
            membership: None,
        }
    }

    #[test]
    fn entries_survive_reopen_truncate_and_a_torn_tail() {
        let storage = aqueduct_log::sim::SimStorage::new(7);
        let open = |purged| EntryIndex::open(&*storage, "entries", purged).unwrap();
        let mut ix = open(None);
        let mut m = meta(1, 1, 0);
        m.kind = Kind::Membership;
        m.membership = Some(b"{\"voters\":[1]}".to_vec());
        ix.append(&[m, meta(2, 1, 3), meta(3, 4, 4)], true).unwrap();
        ix.append(&[meta(4, 5, 9)], true).unwrap();
        drop(ix);
        let ix = open(None);
        assert_eq!(ix.last().unwrap().index, 4);
        assert_eq!(ix.get(2).unwrap().last, 3);
        assert_eq!(ix.membership_at(4).unwrap().index, 1);
        assert_eq!(ix.last_lsn(), 9);
        drop(ix);
        // A torn last frame is cut off.
        let len = storage.contents("entries").unwrap().len();
        storage.cut("entries", len - 3);
        let mut ix = open(None);
        assert_eq!(ix.last().unwrap().index, 3);
        ix.truncate_from(3).unwrap();
        ix.append(&[meta(3, 4, 6)], true).unwrap();
        drop(ix);
        let ix = open(Some(1));
        assert_eq!(ix.get(1), None);
        assert_eq!(ix.get(3).unwrap().last, 6);
        assert_eq!(ix.range(2, 10).count(), 2);
    }
}
