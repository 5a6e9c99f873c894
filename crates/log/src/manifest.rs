//! The manifest: which segments the log is made of.
//!
//! A file beside the segments, rewritten whole (temporary file, sync,
//! rename, directory sync) whenever the set of segments changes: a seal, a
//! compaction rewrite or merge, a purge, a truncation. Recovery checks the
//! directory against it, so a segment that was deleted, renamed, duplicated
//! or restored from an older copy stops the open instead of silently
//! removing or changing committed records. Layout and crash argument:
//! `docs/log-format.md` ("Manifest").
//!
//! ```text
//! 0   [8] magic "AQDLMANF"
//! 8   u16 format version (2)
//! 10  u16 flags          bit 0: a truncation is under way (truncating_after)
//! 12  u32 0
//! 16  u64 truncating_after
//! 24  u32 segment count
//! 28  u32 removed count
//! 32  u64 0
//! 40  segment entries, 64 bytes each, in base order; the last is the active one:
//!     u64 base, u64 generation, u64 covers_until, u64 first_lsn, u64 last_lsn,
//!     u64 record_count, u64 data_len, u32 flags (bit 0: active), u32 0
//! ..  removed entries, 16 bytes each: u64 base, u64 generation
//! ..  u32 CRC32C of everything before it
//! ```

use std::collections::HashMap;
use std::io;

use crate::meta::Meta;
use crate::segment::{data_name, tmp_name, SegmentHeader, SEGMENT_HEADER_LEN};
use crate::storage::Storage;
use crate::{Error, Lsn, Result, FORMAT_VERSION};

pub const MANIFEST_NAME: &str = "manifest";
const MANIFEST_MAGIC: &[u8; 8] = b"AQDLMANF";
const HEADER_LEN: usize = 40;
const ENTRY_LEN: usize = 64;
const REMOVED_LEN: usize = 16;
/// Most segments (and removed segments) a manifest may list: 2^20 segments
/// of 64 MiB are 64 TiB of log, and the file stays under 70 MiB.
pub const MAX_MANIFEST_SEGMENTS: usize = 1 << 20;
const FLAG_TRUNCATING: u16 = 1;
const ENTRY_FLAG_ACTIVE: u32 = 1;

/// One segment as the manifest records it. For the active segment the
/// record statistics are those known when the manifest was written (it
/// grows afterwards) and are not checked at open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManifestEntry {
    pub base: Lsn,
    pub generation: u64,
    pub covers_until: Lsn,
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    pub record_count: u64,
    pub data_len: u64,
    pub active: bool,
}

impl ManifestEntry {
    /// The lowest LSN the segment may hold.
    pub fn start(&self) -> Lsn {
        if self.record_count > 0 {
            self.first_lsn
        } else {
            self.base
        }
    }

    /// "LSN 5 to 9 (5 records)", for messages.
    pub fn describe_range(&self) -> String {
        if self.active {
            format!(
                "the newest records, from LSN {} on (it was the active segment)",
                self.start()
            )
        } else if self.record_count == 0 {
            "no records".into()
        } else {
            format!(
                "LSN {} to {} ({} records)",
                self.first_lsn, self.last_lsn, self.record_count
            )
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// In base order; the last one is the active segment.
    pub segments: Vec<ManifestEntry>,
    /// Segments (base, generation) on their way out: no longer part of the
    /// log, their files possibly still present. Recovery removes them.
    pub removed: Vec<(Lsn, u64)>,
    /// Set while a truncation after this LSN is under way.
    pub truncating_after: Option<Lsn>,
}

/// A failed [`Manifest::store`]: whether the old manifest is certainly
/// still the durable one.
#[derive(Debug)]
pub struct StoreError {
    pub error: io::Error,
    /// False once the rename was attempted: either version may survive a crash.
    pub clean: bool,
}

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(
            HEADER_LEN + self.segments.len() * ENTRY_LEN + self.removed.len() * REMOVED_LEN + 4,
        );
        b.extend_from_slice(MANIFEST_MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let flags = if self.truncating_after.is_some() {
            FLAG_TRUNCATING
        } else {
            0
        };
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&[0u8; 4]);
        b.extend_from_slice(&self.truncating_after.unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.removed.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0u8; 8]);
        for e in &self.segments {
            for v in [
                e.base,
                e.generation,
                e.covers_until,
                e.first_lsn,
                e.last_lsn,
                e.record_count,
                e.data_len,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            let flags = if e.active { ENTRY_FLAG_ACTIVE } else { 0 };
            b.extend_from_slice(&flags.to_le_bytes());
            b.extend_from_slice(&[0u8; 4]);
        }
        for &(base, generation) in &self.removed {
            b.extend_from_slice(&base.to_le_bytes());
            b.extend_from_slice(&generation.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> std::result::Result<Manifest, String> {
        if b.len() < HEADER_LEN + 4 || &b[0..8] != MANIFEST_MAGIC {
            return Err("not an Aqueduct log manifest (bad magic or too short)".into());
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err("manifest checksum mismatch".into());
        }
        let version = u16::from_le_bytes(b[8..10].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(format!(
                "manifest format version {version}, this build reads version {FORMAT_VERSION}"
            ));
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let flags = u16::from_le_bytes(b[10..12].try_into().unwrap());
        let segments = u32_at(24) as usize;
        let removed = u32_at(28) as usize;
        if segments > MAX_MANIFEST_SEGMENTS || removed > MAX_MANIFEST_SEGMENTS {
            return Err(format!(
                "manifest lists {segments} segments and {removed} removed ones, more than \
                 the limit of {MAX_MANIFEST_SEGMENTS}"
            ));
        }
        if body.len() != HEADER_LEN + segments * ENTRY_LEN + removed * REMOVED_LEN {
            return Err("manifest length does not match its counts".into());
        }
        let mut m = Manifest {
            truncating_after: (flags & FLAG_TRUNCATING != 0).then(|| u64_at(16)),
            ..Default::default()
        };
        for i in 0..segments {
            let at = HEADER_LEN + i * ENTRY_LEN;
            let e = ManifestEntry {
                base: u64_at(at),
                generation: u64_at(at + 8),
                covers_until: u64_at(at + 16),
                first_lsn: u64_at(at + 24),
                last_lsn: u64_at(at + 32),
                record_count: u64_at(at + 40),
                data_len: u64_at(at + 48),
                active: u32_at(at + 56) & ENTRY_FLAG_ACTIVE != 0,
            };
            if e.active != (i + 1 == segments) {
                return Err("manifest entry order: only the last segment is active".into());
            }
            if m.segments.last().is_some_and(|p| p.base >= e.base) {
                return Err(format!("manifest entry {i} is out of base order"));
            }
            m.segments.push(e);
        }
        for i in 0..removed {
            let at = HEADER_LEN + segments * ENTRY_LEN + i * REMOVED_LEN;
            m.removed.push((u64_at(at), u64_at(at + 8)));
        }
        Ok(m)
    }

    /// Reads the manifest; `None` when there is none (a log written by
    /// format version 1, or a directory being created).
    pub fn load(storage: &dyn Storage) -> Result<Option<Manifest>> {
        let f = match storage.open_read(MANIFEST_NAME) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("opening the log manifest", e)),
        };
        let len = f
            .len()
            .map_err(|e| Error::io("reading the log manifest", e))?;
        let bytes = f
            .read_vec(0, len as usize)
            .map_err(|e| Error::io("reading the log manifest", e))?;
        Manifest::decode(&bytes)
            .map(Some)
            .map_err(|reason| Error::Inconsistent {
                problem: format!(
                    "the manifest {}, which lists the segments the log is made of, is damaged \
                 ({reason})",
                    storage.describe(MANIFEST_NAME)
                ),
                repair: "restore the manifest from a backup; or, if the segment files present are \
                     all the log should hold, rebuild it from them with `aqueduct wal \
                     rebuild-manifest <dir>`"
                    .into(),
                cut_at: None,
            })
    }

    /// Writes the manifest durably, via a temporary file and a rename.
    pub fn store(&self, storage: &dyn Storage) -> std::result::Result<(), StoreError> {
        let tmp = tmp_name(MANIFEST_NAME);
        let clean = |error| StoreError { error, clean: true };
        let f = storage.create(&tmp).map_err(clean)?;
        let written = f.write_at(&self.encode(), 0).and_then(|()| f.sync());
        if let Err(error) = written {
            let _ = storage.remove(&tmp);
            return Err(clean(error));
        }
        storage
            .rename(&tmp, MANIFEST_NAME)
            .and_then(|()| storage.sync_dir())
            .map_err(|error| StoreError {
                error,
                clean: false,
            })
    }
}

/// A segment data file found in the directory at open.
pub(crate) struct Found {
    pub base: Lsn,
    pub len: u64,
    /// `Err` when the header is unreadable.
    pub header: std::result::Result<SegmentHeader, String>,
    /// The format version in the header bytes (0 when unreadable).
    pub version: u16,
}

/// What recovery does with a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Part of the log.
    Keep,
    /// Left behind by an interrupted operation: removed (ignored when read-only).
    Leftover,
}

/// The outcome of checking the directory.
pub(crate) struct Plan {
    pub fates: Vec<Fate>,
    /// Sealed segments whose summary must match the manifest's record of
    /// them (same generation, no truncation under way through them).
    pub expected: HashMap<Lsn, ManifestEntry>,
}

const MOVE_AWAY: &str = "move the file out of the log directory (keep it until the log is \
                         healthy again); if it is a segment of this log under the wrong name, \
                         rename it back";

fn unknown(storage: &dyn Storage, f: &Found, why: &str) -> Error {
    Error::Inconsistent {
        problem: format!(
            "{} is not one of the log's segments: {why}",
            storage.describe(&data_name(f.base))
        ),
        repair: MOVE_AWAY.into(),
        cut_at: None,
    }
}

/// Decides which segment files make up the log, checking them against the
/// manifest (`None`: a log of format version 1, or `adopt`, which takes the
/// files present as they are). Refuses, with what to do, any file set that
/// a crash in the middle of an operation cannot explain. `found` is in base
/// order. The rules and why they accept every crash state are in
/// `docs/log-format.md` ("Checking the directory at open").
pub(crate) fn plan(
    storage: &dyn Storage,
    found: &[Found],
    manifest: Option<&Manifest>,
    meta: &Meta,
    adopt: bool,
) -> Result<Plan> {
    // A file whose header names another base was renamed or copied.
    for f in found {
        if let Ok(h) = &f.header {
            if h.base != f.base {
                return Err(Error::Inconsistent {
                    problem: format!(
                        "{} holds the segment with base LSN {} (its header says so): it was \
                         renamed or copied from {}",
                        storage.describe(&data_name(f.base)),
                        h.base,
                        data_name(h.base)
                    ),
                    repair: format!(
                        "if {} is missing, rename this file back to that name; otherwise \
                         {MOVE_AWAY}",
                        data_name(h.base)
                    ),
                    cut_at: None,
                });
            }
        }
    }
    // Which files lie inside the range a merged segment absorbed.
    let mut covered = vec![false; found.len()];
    let mut covered_until = 0;
    for (i, f) in found.iter().enumerate() {
        if f.base < covered_until {
            covered[i] = true;
            continue;
        }
        if let Ok(h) = &f.header {
            covered_until = covered_until.max(h.covers_until);
        }
    }
    let Some(m) = manifest else {
        if !adopt {
            if let Some(f) = found
                .iter()
                .find(|f| f.version >= 2 && f.len > SEGMENT_HEADER_LEN)
            {
                return Err(Error::Inconsistent {
                    problem: format!(
                        "the manifest {} is missing, although {} was written by a build \
                         that keeps one (format version {}), so nothing tells whether \
                         segments are missing",
                        storage.describe(MANIFEST_NAME),
                        storage.describe(&data_name(f.base)),
                        f.version
                    ),
                    repair: "restore the manifest from a backup; or, if the segment files \
                             present are all the log should hold, rebuild it from them with \
                             `aqueduct wal rebuild-manifest <dir>`"
                        .into(),
                    cut_at: None,
                });
            }
        }
        // Format version 1: the segments present are the log.
        let fates = covered
            .iter()
            .map(|&c| if c { Fate::Leftover } else { Fate::Keep })
            .collect();
        return Ok(Plan {
            fates,
            expected: HashMap::new(),
        });
    };

    let listed: HashMap<Lsn, &ManifestEntry> = m.segments.iter().map(|e| (e.base, e)).collect();
    let truncating = m.truncating_after;
    // Under a truncation after L, segments holding records above L may be
    // cut or gone.
    let cut_by_truncation =
        |e: &ManifestEntry| truncating.is_some_and(|l| e.active || e.last_lsn > l);
    let highest = found.last().map(|f| f.base);
    let mut fates = Vec::with_capacity(found.len());
    let mut expected = HashMap::new();
    for (i, f) in found.iter().enumerate() {
        let entry = listed.get(&f.base).copied();
        let generation = f.header.as_ref().ok().map(|h| h.generation);
        let being_removed = generation.is_some_and(|g| m.removed.contains(&(f.base, g)));
        if covered[i] {
            // A merge renames the merged segment in before it removes the
            // ones it absorbed, and drops them from the manifest after.
            if entry.is_some() || being_removed {
                fates.push(Fate::Leftover);
                continue;
            }
            return Err(unknown(
                storage,
                f,
                "it lies inside the range a merged segment already holds, and the manifest \
                 does not list it (a copy, or a file restored from before the merge)",
            ));
        }
        let Some(e) = entry else {
            if being_removed {
                fates.push(Fate::Leftover);
            } else if f.len <= SEGMENT_HEADER_LEN {
                // A segment whose creation a crash interrupted: no records.
                // The highest one may become the active segment.
                fates.push(if Some(f.base) == highest {
                    Fate::Keep
                } else {
                    Fate::Leftover
                });
            } else {
                return Err(unknown(
                    storage,
                    f,
                    "it holds records but the manifest does not list it (a copy, or a file \
                     restored from elsewhere)",
                ));
            }
            continue;
        };
        fates.push(Fate::Keep);
        let Some(generation) = generation else {
            continue; // an unreadable header is reported as damage later
        };
        if generation < e.generation {
            return Err(Error::Inconsistent {
                problem: format!(
                    "{} is an older version of that segment (generation {generation}, but the \
                     log rewrote it as generation {}): a copy restored from a backup, or \
                     from before a compaction rewrote or merged it; replaying it would \
                     change or lose committed records",
                    storage.describe(&data_name(f.base)),
                    e.generation
                ),
                repair: format!(
                    "put the current version of the file back; or accept losing {} and \
                     everything after it with `aqueduct wal truncate <dir> --at {}`",
                    e.describe_range(),
                    e.start()
                ),
                cut_at: Some(e.start()),
            });
        }
        if generation == e.generation && !e.active && !cut_by_truncation(e) {
            if f.len != e.data_len {
                return Err(Error::Inconsistent {
                    problem: format!(
                        "{} is {} bytes long, but the log sealed it at {} bytes: a copy \
                         restored from an older backup, or a file cut short",
                        storage.describe(&data_name(f.base)),
                        f.len,
                        e.data_len
                    ),
                    repair: format!(
                        "put the complete file back; or accept losing {} and everything \
                         after it with `aqueduct wal truncate <dir> --at {}`",
                        e.describe_range(),
                        e.start()
                    ),
                    cut_at: Some(e.start()),
                });
            }
            expected.insert(e.base, e.clone());
        }
        // A newer generation: rewritten after the manifest was written (a
        // crash came before the manifest caught up).
    }

    // Listed segments that are gone.
    let kept: Vec<&Found> = found
        .iter()
        .zip(&fates)
        .filter(|(_, &fate)| fate == Fate::Keep)
        .map(|(f, _)| f)
        .collect();
    let present = |base: Lsn| kept.iter().any(|f| f.base == base);
    let merged_over = |base: Lsn| {
        kept.iter().any(|f| {
            f.base < base
                && f.header
                    .as_ref()
                    .is_ok_and(|h| h.covers_until > base && !listed_same(m, f.base, h.generation))
        })
    };
    // The listed segments from `suffix` on are all gone.
    let suffix = m
        .segments
        .iter()
        .rposition(|e| present(e.base))
        .map_or(0, |i| i + 1);
    for (i, e) in m.segments.iter().enumerate() {
        if present(e.base) {
            continue;
        }
        let purged = !e.active && (e.record_count == 0 || e.last_lsn <= meta.purged_lsn);
        let truncated = truncating.is_some_and(|l| i >= suffix && e.start() > l);
        if purged || truncated || merged_over(e.base) {
            continue;
        }
        let oldest = i == 0;
        return Err(Error::Inconsistent {
            problem: format!(
                "segment {} ({}{}) is missing: the manifest lists it{}",
                data_name(e.base),
                e.describe_range(),
                if e.active { "" } else { ", sealed" },
                if oldest && meta.purged_lsn < e.start() {
                    format!(
                        " and nothing was purged up to it (the purge point is LSN {})",
                        meta.purged_lsn
                    )
                } else {
                    String::new()
                }
            ),
            repair: format!(
                "restore the file from a backup or a replica (the same generation, {}, or a \
                 newer one); or accept losing {} and everything after it with `aqueduct wal \
                 truncate <dir> --at {}`",
                e.generation,
                e.describe_range(),
                e.start()
            ),
            cut_at: Some(e.start()),
        });
    }
    Ok(Plan { fates, expected })
}

/// Whether the manifest lists segment `base` at `generation` (so a merge
/// it records is complete, and the segments it absorbed are not expected).
fn listed_same(m: &Manifest, base: Lsn, generation: u64) -> bool {
    m.segments
        .iter()
        .any(|e| e.base == base && e.generation == generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let sealed = ManifestEntry {
            base: 1,
            generation: 3,
            covers_until: 40,
            first_lsn: 1,
            last_lsn: 39,
            record_count: 20,
            data_len: 4000,
            active: false,
        };
        let active = ManifestEntry {
            base: 40,
            generation: 4,
            active: true,
            ..Default::default()
        };
        Manifest {
            segments: vec![sealed, active],
            removed: vec![(17, 2)],
            truncating_after: Some(12),
        }
    }

    #[test]
    fn round_trip_and_damage() {
        let m = sample();
        let b = m.encode();
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x08;
            assert!(Manifest::decode(&d).is_err(), "byte {i}");
        }
        assert!(Manifest::decode(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn empty_and_without_truncation() {
        let m = Manifest {
            truncating_after: None,
            ..sample()
        };
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
        let none = Manifest::default();
        assert_eq!(Manifest::decode(&none.encode()).unwrap(), none);
    }
}
