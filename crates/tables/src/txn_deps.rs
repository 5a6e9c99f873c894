//! What a transaction read and who ran it, as the `txn_deps` log record
//! carries it (`docs/publications.md`, section 2): causal delivery to
//! subscribers needs both, and a subscriber that is behind reads the log.
//! Written as the first record of a writing transaction's batch, only
//! while the catalog has a publication.
//!
//! Body layout (all integers little-endian):
//!
//! ```text
//! u8   version (1, or 2 when the transaction has origins)
//! u64  session id
//! u16  length of the acting user, then its UTF-8 bytes
//! u8   flags (bit 0: row reads overflowed into table reads)
//! u32  count of reads, then each:
//!        u8  kind (1 row present, 2 row absent, 3 whole table)
//!        u64 table id
//!        u64 dep_hash of the row's log key (0 for a whole table)
//! version 2 only:
//! u16  count of origins (`aqueduct.origin`), then each:
//!        u8  length of the server id, then its UTF-8 bytes
//!        u64 the source transaction's LSN there
//! ```
//!
//! A transaction without origins is written as version 1, byte for byte
//! as before, so older records and older readers are unaffected.

use aqueduct_log::{NewRecord, RecordKind, RecordView};
use aqueduct_publish::limits::{
    ORIGINS_PER_TXN_MAX, ORIGIN_SERVER_ID_BYTES_MAX, READ_DEPS_PER_TXN_MAX,
};
pub use aqueduct_publish::Origin;

use crate::schema::TableId;

/// The record kind of `txn_deps` records.
pub const TXN_DEPS_KIND: RecordKind = RecordKind::TxnDeps;
/// The log key of every `txn_deps` record.
pub const TXN_DEPS_KEY: &[u8] = b"d";
const VERSION: u8 = 1;
/// The version of records that carry origins.
const VERSION_ORIGINS: u8 = 2;
const FLAG_OVERFLOW: u8 = 1;
/// Longest acting user kept, in bytes (a longer one is cut at a character
/// boundary: users are told apart by their first 255 bytes).
pub const ACTING_USER_BYTES_MAX: usize = 255;

/// One read a transaction made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DepRead {
    /// A row looked up by key: `hash` is `dep_hash` of its log key;
    /// `present` whether the row existed.
    Row {
        table: TableId,
        hash: u64,
        present: bool,
    },
    /// A scan or a read by predicate of the whole table.
    Table(TableId),
}

/// Who ran a transaction: its session and acting user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnOrigin {
    pub session: u64,
    /// The session's `aqueduct.acting_user`, or its role's name.
    pub user: String,
    /// The source transactions on other servers this one's rows derive
    /// from (`aqueduct.origin`): a decorator's writes (at most
    /// [`ORIGINS_PER_TXN_MAX`], each server id at most
    /// [`ORIGIN_SERVER_ID_BYTES_MAX`] bytes; the session checks both).
    pub origins: Vec<Origin>,
}

/// A transaction's reads and origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnDeps {
    pub origin: TxnOrigin,
    /// Row reads past [`READ_DEPS_PER_TXN_MAX`] became whole-table reads.
    pub overflow: bool,
    pub reads: Vec<DepRead>,
}

impl TxnDeps {
    /// The deps of a transaction that read `reads` (rows it wrote left
    /// out by the caller): past the limit, row reads become reads of
    /// their tables.
    pub fn new(origin: TxnOrigin, mut reads: Vec<DepRead>) -> TxnDeps {
        reads.sort_unstable();
        reads.dedup();
        let overflow = reads.len() > READ_DEPS_PER_TXN_MAX;
        if overflow {
            let mut tables: Vec<DepRead> = reads
                .iter()
                .map(|r| match *r {
                    DepRead::Row { table, .. } | DepRead::Table(table) => DepRead::Table(table),
                })
                .collect();
            tables.sort_unstable();
            tables.dedup();
            reads = tables;
        }
        TxnDeps {
            origin,
            overflow,
            reads,
        }
    }

    /// The log record.
    pub fn record(&self) -> NewRecord {
        let mut user = self.origin.user.as_str();
        if user.len() > ACTING_USER_BYTES_MAX {
            let mut end = ACTING_USER_BYTES_MAX;
            while !user.is_char_boundary(end) {
                end -= 1;
            }
            user = &user[..end];
        }
        let mut b = Vec::with_capacity(16 + user.len() + self.reads.len() * 17);
        let origins = &self.origin.origins[..self.origin.origins.len().min(ORIGINS_PER_TXN_MAX)];
        b.push(if origins.is_empty() {
            VERSION
        } else {
            VERSION_ORIGINS
        });
        b.extend_from_slice(&self.origin.session.to_le_bytes());
        b.extend_from_slice(&(user.len() as u16).to_le_bytes());
        b.extend_from_slice(user.as_bytes());
        b.push(if self.overflow { FLAG_OVERFLOW } else { 0 });
        b.extend_from_slice(&(self.reads.len() as u32).to_le_bytes());
        for r in &self.reads {
            let (kind, table, hash) = match *r {
                DepRead::Row {
                    table,
                    hash,
                    present,
                } => (if present { 1u8 } else { 2 }, table, hash),
                DepRead::Table(table) => (3, table, 0),
            };
            b.push(kind);
            b.extend_from_slice(&table.to_le_bytes());
            b.extend_from_slice(&hash.to_le_bytes());
        }
        if !origins.is_empty() {
            b.extend_from_slice(&(origins.len() as u16).to_le_bytes());
            for o in origins {
                let id =
                    &o.server_id.as_bytes()[..o.server_id.len().min(ORIGIN_SERVER_ID_BYTES_MAX)];
                b.push(id.len() as u8);
                b.extend_from_slice(id);
                b.extend_from_slice(&o.lsn.to_le_bytes());
            }
        }
        NewRecord::new(TXN_DEPS_KIND, TXN_DEPS_KEY.to_vec(), b)
    }

    /// Whether `r` is a `txn_deps` record.
    pub fn is_record(r: &RecordView<'_>) -> bool {
        r.kind == TXN_DEPS_KIND && r.key == TXN_DEPS_KEY
    }

    /// Decodes a `txn_deps` record's body.
    pub fn decode(body: &[u8]) -> Result<TxnDeps, String> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8], String> {
            let s = body
                .get(at..at + n)
                .ok_or_else(|| "txn_deps record is cut short".to_string())?;
            at += n;
            Ok(s)
        };
        let version = take(1)?[0];
        if version != VERSION && version != VERSION_ORIGINS {
            return Err(format!(
                "txn_deps record version {version} is not known (this build reads {VERSION} and {VERSION_ORIGINS})"
            ));
        }
        let session = u64::from_le_bytes(take(8)?.try_into().unwrap());
        let len = u16::from_le_bytes(take(2)?.try_into().unwrap()) as usize;
        let user = std::str::from_utf8(take(len)?)
            .map_err(|_| "txn_deps acting user is not UTF-8".to_string())?
            .to_string();
        let flags = take(1)?[0];
        let count = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
        if count > READ_DEPS_PER_TXN_MAX {
            return Err(format!("txn_deps record has {count} reads"));
        }
        let mut reads = Vec::with_capacity(count);
        for _ in 0..count {
            let kind = take(1)?[0];
            let table = u64::from_le_bytes(take(8)?.try_into().unwrap());
            let hash = u64::from_le_bytes(take(8)?.try_into().unwrap());
            reads.push(match kind {
                1 | 2 => DepRead::Row {
                    table,
                    hash,
                    present: kind == 1,
                },
                3 => DepRead::Table(table),
                other => return Err(format!("txn_deps read of unknown kind {other}")),
            });
        }
        let mut origins = Vec::new();
        if version == VERSION_ORIGINS {
            let count = u16::from_le_bytes(take(2)?.try_into().unwrap()) as usize;
            if count > ORIGINS_PER_TXN_MAX {
                return Err(format!("txn_deps record has {count} origins"));
            }
            for _ in 0..count {
                let len = take(1)?[0] as usize;
                let server_id = std::str::from_utf8(take(len)?)
                    .map_err(|_| "txn_deps origin server id is not UTF-8".to_string())?
                    .to_string();
                let lsn = u64::from_le_bytes(take(8)?.try_into().unwrap());
                origins.push(Origin { server_id, lsn });
            }
        }
        if at != body.len() {
            return Err("txn_deps record has bytes after its reads".into());
        }
        Ok(TxnDeps {
            origin: TxnOrigin {
                session,
                user,
                origins,
            },
            overflow: flags & FLAG_OVERFLOW != 0,
            reads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let d = TxnDeps::new(
            TxnOrigin {
                session: 7,
                user: "alice".into(),
                origins: Vec::new(),
            },
            vec![
                DepRead::Table(3),
                DepRead::Row {
                    table: 2,
                    hash: 99,
                    present: false,
                },
                DepRead::Table(3),
            ],
        );
        assert_eq!(d.reads.len(), 2);
        let r = d.record();
        assert_eq!(TxnDeps::decode(&r.body).unwrap(), d);
        assert!(TxnDeps::decode(&r.body[..r.body.len() - 1]).is_err());
        assert_eq!(r.body[0], VERSION, "no origins: the version-1 layout");
    }

    #[test]
    fn origins_round_trip_and_old_records_still_decode() {
        let mut d = TxnDeps::new(
            TxnOrigin {
                session: 3,
                user: "bob".into(),
                origins: vec![
                    Origin {
                        server_id: "00aa".into(),
                        lsn: 41,
                    },
                    Origin {
                        server_id: "00bb".into(),
                        lsn: 7,
                    },
                ],
            },
            vec![DepRead::Table(1)],
        );
        let r = d.record();
        assert_eq!(r.body[0], VERSION_ORIGINS);
        assert_eq!(TxnDeps::decode(&r.body).unwrap(), d);
        assert!(TxnDeps::decode(&r.body[..r.body.len() - 1]).is_err());
        // A version-1 body (as written before origins existed) decodes
        // with none.
        d.origin.origins.clear();
        let old = d.record();
        assert_eq!(old.body[0], VERSION);
        assert_eq!(TxnDeps::decode(&old.body).unwrap().origin.origins, vec![]);
    }

    #[test]
    fn too_many_row_reads_become_table_reads() {
        let reads = (0..READ_DEPS_PER_TXN_MAX as u64 + 1)
            .map(|i| DepRead::Row {
                table: i % 2,
                hash: i,
                present: true,
            })
            .collect();
        let d = TxnDeps::new(TxnOrigin::default(), reads);
        assert!(d.overflow);
        assert_eq!(d.reads, vec![DepRead::Table(0), DepRead::Table(1)]);
        assert_eq!(TxnDeps::decode(&d.record().body).unwrap(), d);
    }
}
