//! Change messages read back from the log, for a subscriber behind the
//! feed's memory: the same messages the feed built at commit time, decoded
//! from the log's batches. Memory is bounded whatever the lag: one batch at
//! a time and a bounded cache of recent row versions.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use aqueduct_log::{Log, LogReader, Lsn, Record};
use aqueduct_tables::{decode_record, Batch, BatchBuilder, Key, Row, SchemaChange, TableId, Write};

use crate::message::{Change, ChangeMessage, Op, TableInfo};
use crate::FeedError;

/// Row versions remembered to find old rows without a log read.
const RECENT_ROWS: usize = 65_536;
/// Records read from the log at a time.
const READ_AHEAD_RECORDS: usize = 512;

pub(crate) struct LogSource {
    log: Log,
    reader: LogReader,
    buffered: VecDeque<Record>,
    batches: BatchBuilder,
    /// Records before `from` that belong to a batch begun before it.
    skip_until_batch_end: bool,
    from: Lsn,
    recent: BTreeMap<Lsn, Arc<Row>>,
    tables: HashMap<TableId, Arc<TableInfo>>,
}

impl LogSource {
    /// Messages of transactions that begin at or after `from`, with table
    /// names from `tables` (and from schema records read on the way).
    pub(crate) fn new(log: &Log, from: Lsn, tables: HashMap<TableId, Arc<TableInfo>>) -> LogSource {
        // Reading from the record before `from` tells whether `from` is in
        // the middle of a batch.
        let start = from.saturating_sub(1).max(1);
        LogSource {
            log: log.clone(),
            reader: log.reader(start),
            buffered: VecDeque::new(),
            batches: BatchBuilder::default(),
            skip_until_batch_end: false,
            from: from.max(1),
            recent: BTreeMap::new(),
            tables,
        }
    }

    /// The next message, or `None` when the log has nothing more committed.
    pub(crate) fn next(&mut self) -> Result<Option<ChangeMessage>, FeedError> {
        loop {
            if self.buffered.is_empty() {
                self.buffered
                    .extend(self.reader.next_batch(READ_AHEAD_RECORDS)?);
                if self.buffered.is_empty() {
                    return Ok(None);
                }
            }
            let r = self.buffered.pop_front().expect("a record is buffered");
            if r.lsn < self.from {
                // Only the record just before `from` is read here.
                self.skip_until_batch_end = !r.ends_batch();
                continue;
            }
            if self.skip_until_batch_end {
                self.skip_until_batch_end = !r.ends_batch();
                continue;
            }
            let batch = self
                .batches
                .push(&r.view())
                .map_err(|reason| FeedError::BadRecord { lsn: r.lsn, reason })?;
            if let Some(batch) = batch {
                return Ok(Some(self.message(batch)?));
            }
        }
    }

    fn message(&mut self, batch: Batch) -> Result<ChangeMessage, FeedError> {
        let mut changes = Vec::with_capacity(batch.entries.len());
        for e in batch.entries {
            match e.write {
                Write::Schema(change) => {
                    self.learn(&change);
                    changes.push(Change::Schema { lsn: e.lsn, change });
                }
                // A delete of a row that was not there changed nothing.
                Write::Delete { .. } if e.prev_known && e.prev_lsn.is_none() => {}
                Write::Put { table, key, row } => {
                    self.remember(e.lsn, row.clone());
                    let op = match e.prev_lsn {
                        Some(_) => Op::Update,
                        None => Op::Insert,
                    };
                    changes.extend(self.row_change(
                        e.lsn,
                        table,
                        key,
                        op,
                        e.prev_lsn,
                        Some(row),
                    )?);
                }
                Write::Delete { table, key } => {
                    changes.extend(self.row_change(
                        e.lsn,
                        table,
                        key,
                        Op::Delete,
                        e.prev_lsn,
                        None,
                    )?);
                }
            }
        }
        Ok(ChangeMessage {
            first_lsn: batch.first,
            lsn: batch.last,
            commit_micros: batch.commit_micros,
            changes,
            deps: batch.deps.clone(),
        })
    }

    /// A row change with its old row looked up; `None` for a table it
    /// cannot name.
    fn row_change(
        &mut self,
        lsn: Lsn,
        table: TableId,
        key: Key,
        op: Op,
        prev_lsn: Option<Lsn>,
        new: Option<Arc<Row>>,
    ) -> Result<Option<Change>, FeedError> {
        let Some(info) = self.tables.get(&table).cloned() else {
            return Ok(None);
        };
        let old = match prev_lsn {
            Some(p) => self.row_at(p)?,
            None => None,
        };
        Ok(Some(Change::Row {
            lsn,
            table: info,
            key,
            op,
            prev_lsn,
            old,
            new,
        }))
    }

    fn learn(&mut self, change: &SchemaChange) {
        if let SchemaChange::CreateTable(schema) | SchemaChange::AlterTable { schema, .. } = change
        {
            self.tables
                .insert(schema.id, Arc::new(TableInfo::of(schema)));
        }
    }

    fn remember(&mut self, lsn: Lsn, row: Arc<Row>) {
        self.recent.insert(lsn, row);
        if self.recent.len() > RECENT_ROWS {
            self.recent.pop_first();
        }
    }

    /// The row a `put` at `lsn` wrote: remembered, or read from the log;
    /// `None` when compaction removed it (only below the log's exact point).
    fn row_at(&mut self, lsn: Lsn) -> Result<Option<Arc<Row>>, FeedError> {
        if let Some(r) = self.recent.get(&lsn) {
            return Ok(Some(r.clone()));
        }
        let mut reader = self.log.reader(lsn);
        let Some(r) = reader.next_batch(1)?.pop() else {
            return Ok(None);
        };
        if r.lsn != lsn {
            return Ok(None);
        }
        match decode_record(&r.view()) {
            Ok(Some(e)) => match e.write {
                Write::Put { row, .. } => Ok(Some(row)),
                _ => Ok(None),
            },
            Ok(None) => Ok(None),
            Err(reason) => Err(FeedError::BadRecord { lsn, reason }),
        }
    }
}
