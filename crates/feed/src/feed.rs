//! The feed: a consumer of committed batches that keeps the most recent
//! messages in a bounded buffer shared by every subscriber, and hands out
//! subscriptions, named consumers and bootstrap snapshots.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use aqueduct_log::{Log, Lsn};
use aqueduct_tables::{
    AppliedBatch, Catalog, CommitConsumer, Database, SchemaChange, Table, TableId,
};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::consumers::{ConsumerInfo, Consumers};
use crate::message::{Change, ChangeMessage, Op, TableInfo};
use crate::subscription::Subscription;
use crate::{FeedError, FeedOptions};

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct FeedMetrics {
    pub published: AtomicU64,
    pub delivered: AtomicU64,
    pub subscribers: AtomicUsize,
    pub cut_off: AtomicU64,
}

/// Counts a subscription as active while it lives.
pub(crate) struct ActiveGuard(Arc<Feed>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.metrics.subscribers.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Memory {
    /// Recent messages in LSN order.
    ring: VecDeque<Arc<ChangeMessage>>,
    bytes: usize,
    /// Every transaction beginning at or after this LSN (and committed) is
    /// in `ring`.
    start: Lsn,
    /// The last LSN published.
    head: Lsn,
}

pub(crate) enum FromMemory {
    /// At least one message, in order.
    Messages(Vec<Arc<ChangeMessage>>),
    /// Nothing new before the deadline.
    Nothing,
    /// The position is older than memory holds: read the log.
    Behind,
}

/// A consistent copy of tables at one LSN, for a consumer to start from
/// before it follows the feed from `lsn + 1`.
pub struct Snapshot {
    pub lsn: Lsn,
    pub tables: Vec<SnapshotTable>,
}

/// One table of a [`Snapshot`]: a copy of the table (persistent trees, so
/// the copy costs a few pointers), read with `table.scan()`.
pub struct SnapshotTable {
    pub info: Arc<TableInfo>,
    pub table: Table,
}

/// The change feed of one database.
pub struct Feed {
    log: Log,
    options: FeedOptions,
    memory: Mutex<Memory>,
    arrived: Condvar,
    tables: RwLock<HashMap<TableId, Arc<TableInfo>>>,
    consumers: Consumers,
    pub metrics: FeedMetrics,
    last_cap_check: Mutex<Instant>,
    /// Consumers' own caps (publications set theirs).
    caps_of: RwLock<Option<Arc<crate::CapsOf>>>,
    /// Set on a member of a Raft group ([`Feed::set_replicator`]).
    replicator: RwLock<Option<Arc<dyn aqueduct_tables::Replicator>>>,
    /// Messages were published that waiting subscribers were not yet told
    /// of: they are woken once the commit lock is released.
    unannounced: std::sync::atomic::AtomicBool,
}

impl Feed {
    /// Attaches a feed to `db`: it sees every commit after this call.
    /// Named consumers are kept in the log's directory.
    pub fn attach(db: &Database, options: FeedOptions) -> Result<Arc<Feed>, FeedError> {
        let consumers = Consumers::load(db.log())?;
        let mut feed = None;
        db.add_consumer_at(|catalog, lsn| {
            let f = Arc::new(Feed {
                log: db.log().clone(),
                memory: Mutex::new(Memory {
                    ring: VecDeque::new(),
                    bytes: 0,
                    start: lsn + 1,
                    head: lsn,
                }),
                arrived: Condvar::new(),
                tables: RwLock::new(
                    catalog
                        .tables
                        .values()
                        .map(|t| (t.schema.id, Arc::new(TableInfo::of(&t.schema))))
                        .collect(),
                ),
                consumers,
                metrics: FeedMetrics::default(),
                last_cap_check: Mutex::new(Instant::now()),
                caps_of: Default::default(),
                replicator: Default::default(),
                unannounced: Default::default(),
                options,
            });
            feed = Some(f.clone());
            f
        });
        let feed = feed.expect("the feed was attached");
        feed.consumers.restore_holds(&feed.log)?;
        Ok(feed)
    }

    pub(crate) fn log(&self) -> &Log {
        &self.log
    }

    /// Makes the feed deliver only what the group `replicator` proposes
    /// to committed (a member of a Raft group).
    pub fn set_replicator(&self, replicator: Arc<dyn aqueduct_tables::Replicator>) {
        *self.replicator.write() = Some(replicator);
    }

    /// Waits until no crash can undo the write at `lsn`: durable here and,
    /// on a member of a group, committed by the group.
    pub(crate) fn await_visible(&self, lsn: Lsn) -> Result<(), FeedError> {
        self.log.await_committed(lsn)?;
        let replicator = self.replicator.read().clone();
        if let Some(r) = replicator {
            r.await_committed(lsn)
                .map_err(|e| FeedError::Uncommitted(e.into()))?;
        }
        Ok(())
    }

    pub fn options(&self) -> &FeedOptions {
        &self.options
    }

    /// The last LSN the feed has published.
    pub fn head(&self) -> Lsn {
        self.memory.lock().head
    }

    /// Bytes of messages held in memory.
    pub fn memory_bytes(&self) -> usize {
        self.memory.lock().bytes
    }

    pub(crate) fn memory_start(&self) -> Lsn {
        self.memory.lock().start
    }

    pub(crate) fn table_infos(&self) -> HashMap<TableId, Arc<TableInfo>> {
        self.tables.read().clone()
    }

    /// Subscribes from `from`: the first message is the first transaction
    /// that begins at or after it (`0` or `1`: everything the log holds).
    /// `tables` restricts row changes to those tables.
    pub fn subscribe(
        self: &Arc<Feed>,
        from: Lsn,
        tables: Option<Vec<TableId>>,
    ) -> Result<Subscription, FeedError> {
        self.check_start(from)?;
        Ok(self.subscription(from, tables, None))
    }

    fn subscription(
        self: &Arc<Feed>,
        from: Lsn,
        tables: Option<Vec<TableId>>,
        consumer: Option<String>,
    ) -> Subscription {
        self.metrics.subscribers.fetch_add(1, Ordering::Relaxed);
        Subscription {
            feed: self.clone(),
            next: from.max(1),
            fetch_from: from.max(1),
            buffered: Default::default(),
            tables,
            source: None,
            consumer,
            _active: ActiveGuard(self.clone()),
        }
    }

    /// Whether a subscriber can start exactly at `from`: from the very
    /// beginning, or where compaction has not removed records.
    pub(crate) fn check_start(&self, from: Lsn) -> Result<(), FeedError> {
        let exact = self.log.exact_from();
        if from > 1 && from < exact && from < self.memory_start() {
            return Err(FeedError::Gone {
                from,
                oldest: exact,
            });
        }
        Ok(())
    }

    /// Cuts off a subscriber reading the log that is too far behind.
    pub(crate) fn check_lag(&self, next: Lsn) -> Result<(), FeedError> {
        let head = self.head();
        let lag = head.saturating_sub(next.saturating_sub(1));
        match self.options.max_lag {
            Some(max) if lag > max => {
                self.metrics.cut_off.fetch_add(1, Ordering::Relaxed);
                Err(FeedError::TooFarBehind { next, head, max })
            }
            _ => Ok(()),
        }
    }

    /// Up to `max` messages from `next` on, waiting until `deadline` for
    /// the first.
    pub(crate) fn read_memory(
        &self,
        next: Lsn,
        max: usize,
        deadline: Instant,
    ) -> Result<FromMemory, FeedError> {
        let mut m = self.memory.lock();
        loop {
            if next < m.start {
                return Ok(FromMemory::Behind);
            }
            let i = m.ring.partition_point(|msg| msg.first_lsn < next);
            if i < m.ring.len() {
                let end = m.ring.len().min(i + max.max(1));
                return Ok(FromMemory::Messages(
                    m.ring.range(i..end).cloned().collect(),
                ));
            }
            if self.arrived.wait_until(&mut m, deadline).timed_out() {
                return Ok(FromMemory::Nothing);
            }
        }
    }

    fn publish(&self, msg: ChangeMessage) {
        let bytes = msg.approx_bytes();
        let mut m = self.memory.lock();
        m.head = msg.lsn;
        m.ring.push_back(Arc::new(msg));
        m.bytes += bytes;
        while m.bytes > self.options.memory_bytes && m.ring.len() > 1 {
            let gone = m.ring.pop_front().expect("the ring is not empty");
            m.bytes -= gone.approx_bytes();
            m.start = gone.lsn + 1;
        }
        drop(m);
        self.metrics.published.fetch_add(1, Ordering::Relaxed);
        self.unannounced.store(true, Ordering::Release);
    }

    /// Moves past a transaction ending at `last` without holding it:
    /// memory starts after it, and subscribers at or before it read the
    /// log.
    fn skip(&self, last: Lsn) {
        let mut m = self.memory.lock();
        m.head = last;
        m.start = last + 1;
        m.ring.clear();
        m.bytes = 0;
        drop(m);
        self.metrics.published.fetch_add(1, Ordering::Relaxed);
        self.unannounced.store(true, Ordering::Release);
    }

    /// A consistent copy of `tables` (all when `None`) at one LSN, taken
    /// with commits paused (a clone of persistent trees: cheap); the copy
    /// and the feed from `lsn + 1` together miss nothing and repeat nothing.
    /// Returns once the snapshot's LSN is durable, so no consumer starts
    /// from a state a crash could take back.
    pub fn snapshot(db: &Database, tables: Option<&[String]>) -> Result<Snapshot, FeedError> {
        let snap = Feed::snapshot_now(db, tables)?;
        db.await_visible(snap.lsn)
            .map_err(|e| FeedError::Uncommitted(e.into()))?;
        Ok(snap)
    }

    fn snapshot_now(db: &Database, tables: Option<&[String]>) -> Result<Snapshot, FeedError> {
        db.with_commits_paused(|catalog, lsn| {
            let mut out = Vec::new();
            for t in catalog.tables.values() {
                if tables.is_some_and(|names| !names.iter().any(|n| n == &t.schema.name)) {
                    continue;
                }
                out.push(SnapshotTable {
                    info: Arc::new(TableInfo::of(&t.schema)),
                    table: t.clone(),
                });
            }
            if let Some(names) = tables {
                for n in names {
                    if catalog.table(n).is_none() {
                        return Err(FeedError::NoSuchTable(n.clone()));
                    }
                }
            }
            Ok(Snapshot { lsn, tables: out })
        })
    }

    /// The first LSN committed at or after `micros` (the commit time every
    /// record of a batch carries), where the log is exact; `None` when
    /// nothing was committed since. Reads the log from its exact point:
    /// as long as the retained log.
    pub fn first_lsn_at(&self, micros: i64) -> Result<Option<Lsn>, FeedError> {
        let mut reader = self.log.reader(self.log.exact_from().max(1));
        let mut found = None;
        loop {
            let got = reader.read_with(4096, |r| {
                if found.is_none() && r.timestamp_micros >= micros {
                    found = Some(r.lsn);
                }
                Ok(())
            })?;
            if found.is_some() || got == 0 {
                return Ok(found);
            }
        }
    }

    // ------------------------------------------------------ named consumers

    /// Registers the durable consumer `name` (or finds it): the log keeps
    /// every record from its position on until it acknowledges them.
    /// A new consumer starts at `from`, or after the last commit.
    pub fn register(&self, name: &str, from: Option<Lsn>) -> Result<ConsumerInfo, FeedError> {
        let from = from.unwrap_or_else(|| self.head() + 1);
        self.check_start(from)?;
        self.consumers.register(&self.log, name, from)
    }

    /// Removes the durable consumer `name`, releasing what the log kept for it.
    pub fn unregister(&self, name: &str) -> Result<(), FeedError> {
        self.consumers.unregister(&self.log, name)
    }

    /// Subscribes as the durable consumer `name`, from its position.
    pub fn subscribe_as(
        self: &Arc<Feed>,
        name: &str,
        tables: Option<Vec<TableId>>,
    ) -> Result<Subscription, FeedError> {
        let info = self.consumers.get(name)?;
        Ok(self.subscription(info.next_lsn, tables, Some(name.to_string())))
    }

    pub(crate) fn check_consumer(&self, name: &str) -> Result<(), FeedError> {
        self.enforce_caps();
        self.consumers.get(name).map(|_| ())
    }

    /// Everything up to `lsn` is done with for consumer `name`.
    pub fn ack(&self, name: &str, lsn: Lsn) -> Result<(), FeedError> {
        let head = self.head();
        if lsn > head {
            return Err(FeedError::AckAhead { lsn, head });
        }
        self.consumers.ack(&self.log, name, lsn)
    }

    /// Every durable consumer, with its position and lag.
    pub fn consumers(&self) -> Vec<ConsumerInfo> {
        let head = self.head();
        let mut list = self.consumers.list();
        for c in &mut list {
            c.lag = head.saturating_sub(c.next_lsn.saturating_sub(1));
        }
        list
    }

    /// Drops consumers that hold more log than the caps allow (at most once
    /// a second; also called from the server's maintenance loop).
    pub fn enforce_caps(&self) {
        {
            let mut last = self.last_cap_check.lock();
            if last.elapsed() < std::time::Duration::from_secs(1) {
                return;
            }
            *last = Instant::now();
        }
        self.enforce_caps_now();
    }

    /// Sets how a consumer's own caps are found by its name.
    pub fn set_caps_of(&self, caps_of: Arc<crate::CapsOf>) {
        *self.caps_of.write() = Some(caps_of);
    }

    /// [`Feed::enforce_caps`] without the rate limit.
    pub fn enforce_caps_now(&self) {
        let caps_of = self.caps_of.read().clone();
        if let Err(e) = self
            .consumers
            .enforce(&self.log, &self.options, caps_of.as_deref())
        {
            tracing::warn!("checking the change feed's consumers: {e}");
        }
    }
}

impl CommitConsumer for Feed {
    /// Wakes waiting subscribers outside the commit lock, once for every
    /// commit published since the last wake-up.
    fn after_release(&self) {
        if self.unannounced.swap(false, Ordering::AcqRel) {
            // Taking the lock orders the wake-up after a subscriber's check
            // of the ring and its wait: none misses it.
            drop(self.memory.lock());
            self.arrived.notify_all();
        }
    }

    fn committed(&self, batch: &AppliedBatch, catalog: &Catalog) {
        if !batch.schema.is_empty() {
            let mut tables = self.tables.write();
            for (_, c) in &batch.schema {
                // Rows after an ALTER TABLE have the new columns.
                if let SchemaChange::CreateTable(s) | SchemaChange::AlterTable { schema: s, .. } = c
                {
                    tables.insert(s.id, Arc::new(TableInfo::of(s)));
                }
            }
            // Dropped tables keep their info: a subscriber reading the log
            // may still meet their rows.
            let _ = catalog;
        }
        // A transaction larger than memory holds (a bulk load) is not
        // copied into a message at all: subscribers read it from the log.
        let bytes = ChangeMessage::bytes_of(batch.changes.len(), batch.schema.len())
            + batch
                .changes
                .iter()
                .map(|c| ChangeMessage::rows_bytes(&c.old, &c.new))
                .sum::<usize>();
        if bytes > self.options.memory_bytes {
            self.skip(batch.last);
            return;
        }
        let tables = self.tables.read();
        let mut changes = Vec::with_capacity(batch.changes.len() + batch.schema.len());
        let mut schema = batch.schema.iter().peekable();
        for c in &batch.changes {
            while let Some((lsn, s)) = schema.next_if(|(l, _)| *l < c.lsn) {
                changes.push(Change::Schema {
                    lsn: *lsn,
                    change: s.clone(),
                });
            }
            let Some(info) = tables.get(&c.table) else {
                continue;
            };
            let op = match (&c.old, &c.new) {
                (None, _) => Op::Insert,
                (Some(_), Some(_)) => Op::Update,
                (Some(_), None) => Op::Delete,
            };
            changes.push(Change::Row {
                lsn: c.lsn,
                table: info.clone(),
                key: c.key.clone(),
                op,
                prev_lsn: c.prev_lsn,
                old: c.old.clone(),
                new: c.new.clone(),
            });
        }
        for (lsn, s) in schema {
            changes.push(Change::Schema {
                lsn: *lsn,
                change: s.clone(),
            });
        }
        drop(tables);
        self.publish(ChangeMessage {
            first_lsn: batch.first,
            lsn: batch.last,
            commit_micros: batch.commit_micros,
            changes,
            deps: batch.deps.clone(),
        });
    }
}
