//! A committed transaction as the log holds it, and the one place such a
//! batch is applied to the tables.
//!
//! Committing is two steps with this module between them:
//! 1. **append** — a transaction's writes are encoded ([`encode_batch`]) and
//!    appended to the log as one atomic batch; the log gives them LSNs;
//! 2. **apply** — the [`Batch`] (the writes with their LSNs) is applied to the
//!    catalog ([`Catalog::apply_batch`]) and handed to the commit consumers.
//!
//! Recovery decodes each batch of the log ([`decode_record`]) and applies it
//! with the same code; a follower applying a replicated stream will too.
//!
//! A row record names its previous version: the LSN of the row's last `put`
//! before it (table-records format version 2, `docs/table-records.md`), so a
//! reader of the log alone can tell an insert from an update and find the old
//! row without the tables in memory.

use std::collections::HashMap;
use std::sync::Arc;

use aqueduct_log::record::RECORD_HEADER_LEN;
use aqueduct_log::{Lsn, NewRecord, RecordKind, RecordView};
use aqueduct_values::{
    decode_row, decode_value, encode_row, encode_value, encoded_len, encoded_row_len,
};

use crate::overlay::FastHash;
use crate::txn_deps::TxnDeps;
use crate::{Catalog, Key, RowChange, SchemaChange, TableId, Track, Write};

/// First log-key byte of a row record.
pub(crate) const ROW_PREFIX: u8 = b'r';
/// First log-key byte of a schema record.
pub(crate) const SCHEMA_PREFIX: u8 = b's';
/// First body byte of a version-2 `put`: the previous version's LSN follows
/// (a version-1 body starts with the row format's version byte, 1).
const PUT_WITH_PREV: u8 = 0xF2;
/// Body length of a version-2 `delete`: the previous version's LSN.
const DELETE_WITH_PREV_LEN: usize = 8;

/// One write of a committed batch, with its LSN.
#[derive(Clone, Debug)]
pub struct BatchEntry {
    pub lsn: Lsn,
    pub write: Write,
    /// For a row write: the LSN of the row's previous version, if it had
    /// one (`None` for an insert, and for records written before the log
    /// kept it, which then apply exactly as before).
    pub prev_lsn: Option<Lsn>,
    /// Whether the record says what `prev_lsn` is (table-records version
    /// 2); a version-1 record does not.
    pub prev_known: bool,
}

/// A committed transaction: its writes in LSN order.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub first: Lsn,
    pub last: Lsn,
    /// When it was committed, in microseconds since the Unix epoch (the
    /// log records' timestamp).
    pub commit_micros: i64,
    /// What the transaction read and who ran it: its `txn_deps` record,
    /// at `first`, written while the catalog has a publication.
    pub deps: Option<Arc<TxnDeps>>,
    pub entries: Vec<BatchEntry>,
}

/// What applying a batch changed: what the commit consumers are given.
#[derive(Clone, Debug, Default)]
pub struct AppliedBatch {
    pub first: Lsn,
    pub last: Lsn,
    pub commit_micros: i64,
    /// Rows changed, in LSN order.
    pub changes: Vec<RowChange>,
    /// Schema changes with their LSNs, in LSN order.
    pub schema: Vec<(Lsn, SchemaChange)>,
    /// The batch's `txn_deps` record, if it has one.
    pub deps: Option<Arc<TxnDeps>>,
}

/// The log key of a row.
pub fn row_log_key(table: TableId, key: &Key) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + key.len() * 9);
    k.push(ROW_PREFIX);
    k.extend_from_slice(&table.to_be_bytes());
    for v in key {
        encode_value(v, &mut k);
    }
    k
}

/// Bytes the log key of a row takes ([`row_log_key`]).
fn row_log_key_len(key: &Key) -> usize {
    1 + std::mem::size_of::<TableId>() + key.iter().map(encoded_len).sum::<usize>()
}

/// Bytes the log record of a write takes, as [`encode_batch`] writes it
/// (for `jsonb` values, about: see [`encoded_len`]). A transaction keeps
/// the sum, so one too large for a batch is refused as it grows.
pub(crate) fn write_record_len(w: &Write) -> usize {
    RECORD_HEADER_LEN
        + match w {
            Write::Put { key, row, .. } => {
                row_log_key_len(key) + 1 + std::mem::size_of::<Lsn>() + encoded_row_len(row)
            }
            Write::Delete { key, .. } => row_log_key_len(key) + DELETE_WITH_PREV_LEN,
            // Schema changes are few and small: counted by their key only.
            Write::Schema(_) => 1 + std::mem::size_of::<TableId>(),
        }
}

/// Encodes a transaction's writes as one log batch, stamped with
/// `commit_micros`, and returns the records with the [`Batch`] they will be
/// once the log gives them LSNs from `first` (a batch takes dense LSNs);
/// the writes move into the batch.
/// Each row write names the row's previous version, from `catalog` (the
/// state the batch applies to) or from an earlier write of the same batch.
/// `deps`, when given, is the batch's first record.
pub fn encode_batch(
    catalog: &Catalog,
    writes: Vec<Write>,
    deps: Option<TxnDeps>,
    first: Lsn,
    commit_micros: i64,
) -> (Vec<NewRecord>, Batch) {
    let mut records = Vec::with_capacity(writes.len() + 1);
    let mut prevs = Vec::with_capacity(writes.len());
    if let Some(d) = &deps {
        let mut record = d.record();
        record.timestamp_micros = commit_micros;
        records.push(record);
    }
    let offset = records.len() as u64;
    {
        let mut written: HashMap<(TableId, &Key), Option<Lsn>, FastHash> =
            HashMap::with_capacity_and_hasher(writes.len(), FastHash::default());
        for (i, w) in writes.iter().enumerate() {
            let lsn = first + offset + i as u64;
            let (mut record, prev_lsn) = match w {
                Write::Put { table, key, .. } | Write::Delete { table, key } => {
                    let prev = match written.get(&(*table, key)) {
                        Some(p) => *p,
                        None => catalog
                            .table_by_id(*table)
                            .and_then(|t| t.get(key))
                            .map(|v| v.lsn),
                    };
                    let is_put = matches!(w, Write::Put { .. });
                    written.insert((*table, key), is_put.then_some(lsn));
                    let prev_bytes = prev.unwrap_or(0).to_le_bytes();
                    let record = match w {
                        Write::Put { row, .. } => {
                            let mut body = Vec::with_capacity(9 + encoded_row_len(row));
                            body.push(PUT_WITH_PREV);
                            body.extend_from_slice(&prev_bytes);
                            encode_row(row, &mut body);
                            NewRecord::put(row_log_key(*table, key), body)
                        }
                        _ => NewRecord::new(
                            RecordKind::Delete,
                            row_log_key(*table, key),
                            prev_bytes.to_vec(),
                        ),
                    };
                    (record, prev)
                }
                Write::Schema(c) => {
                    let mut k = vec![SCHEMA_PREFIX];
                    k.extend_from_slice(&c.table().to_be_bytes());
                    (NewRecord::new(RecordKind::Schema, k, c.encode()), None)
                }
            };
            record.timestamp_micros = commit_micros;
            records.push(record);
            prevs.push(prev_lsn);
        }
    }
    let entries = writes
        .into_iter()
        .zip(prevs)
        .enumerate()
        .map(|(i, (write, prev_lsn))| BatchEntry {
            lsn: first + offset + i as u64,
            write,
            prev_lsn,
            prev_known: true,
        })
        .collect();
    let batch = Batch {
        first,
        last: first + records.len() as u64 - 1,
        commit_micros,
        deps: deps.map(Arc::new),
        entries,
    };
    (records, batch)
}

/// Decodes a record of the tables' layer; `Ok(None)` for records of other
/// layers, which the tables skip.
pub fn decode_record(r: &RecordView<'_>) -> Result<Option<BatchEntry>, String> {
    let write = match (r.kind, r.key.first()) {
        (RecordKind::Schema, Some(&SCHEMA_PREFIX)) => {
            return Ok(Some(BatchEntry {
                lsn: r.lsn,
                write: Write::Schema(SchemaChange::decode(r.body)?),
                prev_lsn: None,
                prev_known: true,
            }))
        }
        (RecordKind::Put | RecordKind::Delete, Some(&ROW_PREFIX)) => {
            let (table, key) = decode_row_key(r.key)?;
            (table, key)
        }
        _ => return Ok(None),
    };
    let (table, key) = write;
    let (prev, prev_known, row_bytes) = match r.kind {
        RecordKind::Put if r.body.first() == Some(&PUT_WITH_PREV) => {
            if r.body.len() < 9 {
                return Err("row record is cut short".into());
            }
            (
                u64::from_le_bytes(r.body[1..9].try_into().unwrap()),
                true,
                &r.body[9..],
            )
        }
        RecordKind::Delete if r.body.len() == DELETE_WITH_PREV_LEN => (
            u64::from_le_bytes(r.body.try_into().unwrap()),
            true,
            &r.body[..0],
        ),
        RecordKind::Delete if !r.body.is_empty() => {
            return Err(format!("delete record has a {}-byte body", r.body.len()))
        }
        _ => (0, false, r.body),
    };
    let write = if r.kind == RecordKind::Put {
        Write::Put {
            table,
            key,
            row: Arc::new(decode_row(row_bytes).map_err(|e| e.to_string())?),
        }
    } else {
        Write::Delete { table, key }
    };
    Ok(Some(BatchEntry {
        lsn: r.lsn,
        write,
        prev_lsn: (prev != 0).then_some(prev),
        prev_known,
    }))
}

/// The table id and key values of a row record's log key.
pub fn decode_row_key(k: &[u8]) -> Result<(TableId, Key), String> {
    if k.first() != Some(&ROW_PREFIX) || k.len() < 9 {
        return Err("row key is cut short".into());
    }
    let table = u64::from_be_bytes(k[1..9].try_into().unwrap());
    // Most keys are one value: room for exactly that, since a key is kept
    // in memory with its row (a pushed-to empty Vec would hold four).
    let mut key = Vec::with_capacity(1);
    let mut rest = &k[9..];
    while !rest.is_empty() {
        let (v, used) = decode_value(rest).map_err(|e| e.to_string())?;
        key.push(v);
        rest = &rest[used..];
    }
    key.shrink_to_fit();
    Ok((table, key))
}

impl Catalog {
    /// Applies a committed batch: the only code that changes the tables
    /// (local commits, recovery, and followers use it). Rows of tables that
    /// do not exist are skipped (ids are never reused).
    pub fn apply_batch(&mut self, batch: &Batch) -> AppliedBatch {
        self.apply_owned_batch(batch.clone())
    }

    /// Applies a batch at a restart, where nobody consumes its changes:
    /// [`Catalog::apply_owned_batch`] without collecting them (no key is
    /// copied for them).
    pub fn replay_batch(&mut self, batch: Batch) {
        self.write_batch(batch, Track::Nothing);
    }

    /// [`Catalog::apply_batch`] of a batch the caller is done with: its
    /// keys and rows move into the tables rather than being copied.
    pub fn apply_owned_batch(&mut self, batch: Batch) -> AppliedBatch {
        self.write_batch(batch, Track::Changes)
    }

    fn write_batch(&mut self, batch: Batch, track: Track) -> AppliedBatch {
        assert!(
            batch.first > self.lsn || batch.entries.is_empty(),
            "batch at LSN {} applied to tables already at LSN {}",
            batch.first,
            self.lsn
        );
        let mut applied = AppliedBatch {
            first: batch.first,
            last: batch.last,
            commit_micros: batch.commit_micros,
            deps: batch.deps,
            ..AppliedBatch::default()
        };
        for e in batch.entries {
            let change = match e.write {
                Write::Put { table, key, row } => {
                    self.write_row(table, key, Some(row), e.lsn, track)
                }
                Write::Delete { table, key } => self.write_row(table, key, None, e.lsn, track),
                Write::Schema(c) => {
                    if track == Track::Changes {
                        applied.schema.push((e.lsn, c.clone()));
                    }
                    self.apply_schema(c);
                    None
                }
            };
            applied.changes.extend(change);
        }
        self.lsn = self.lsn.max(batch.last);
        applied
    }
}

/// Groups decoded records into batches by their `BATCH_CONTINUES` flags.
#[derive(Default)]
pub struct BatchBuilder {
    current: Batch,
    open: bool,
}

impl BatchBuilder {
    /// Adds a record; returns the batch it completes, if it is the last of
    /// one. Records of other layers count for the batch's bounds only.
    pub fn push(&mut self, r: &RecordView<'_>) -> Result<Option<Batch>, String> {
        if !self.open {
            self.current = Batch {
                first: r.lsn,
                last: r.lsn,
                commit_micros: r.timestamp_micros,
                deps: None,
                entries: Vec::new(),
            };
            self.open = true;
        }
        self.current.last = r.lsn;
        if TxnDeps::is_record(r) {
            self.current.deps = Some(Arc::new(TxnDeps::decode(r.body)?));
        } else if let Some(entry) = decode_record(r)? {
            self.current.entries.push(entry);
        }
        if r.ends_batch() {
            self.open = false;
            return Ok(Some(std::mem::take(&mut self.current)));
        }
        Ok(None)
    }
}
