//! Scheduled releases, after "the poor man's social network": reads in
//! `release` mode see the database as of the last release, taken at
//! wall-clock multiples of an interval that everyone knows in advance, so a
//! response is the same for every reader until the next release — hence
//! cacheable by any HTTP cache — and every release is one consistent state
//! (one-copy serializable), however stale.
//!
//! This crate is the state of releases, with no clock or thread of its own:
//! the server's releaser calls [`Releases::cut`] under the commit lock at
//! each release time and [`Releases::publish`] once the release's LSN is
//! durable; the commit consumer feeds [`Releases::on_commit`]; readers ask for
//! [`Releases::current`]. What a release keeps:
//!
//! - the tables as of its LSN — a clone of the catalog, cheap because the
//!   tables are persistent B-trees (`aqueduct_tables::Table`); only the
//!   current release's is kept;
//! - its change set: the rows written since the previous release, per
//!   table, kept for many releases (bounded by [`MAX_RELEASES_KEPT`] and
//!   [`MAX_CHANGE_BYTES_KEPT`]) and immutable once published;
//! - the time maps' buckets, updated from each change set (`time_maps.rs`).
//!
//! Releases live in memory: after a restart the history begins again at
//! the first release the new process cuts.

pub mod schedule;
mod time_maps;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use aqueduct_log::Lsn;
use aqueduct_tables::{Catalog, Row, RowChange, TableId};
use parking_lot::{Mutex, RwLock};

pub use schedule::Schedule;
pub use time_maps::{Bucket, BucketError, MAX_BUCKETS_KEPT};

/// Most releases whose change sets are kept (a day of 5-second releases).
pub const MAX_RELEASES_KEPT: usize = 17_280;
/// Most bytes of change sets kept; beyond it the oldest releases go.
pub const MAX_CHANGE_BYTES_KEPT: usize = 256 << 20;

/// What a write did to its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// One row written: the new row, or for a delete the row deleted.
#[derive(Clone, Debug)]
pub struct Change {
    /// The LSN of the commit that wrote it.
    pub lsn: Lsn,
    pub op: Op,
    pub row: Arc<Row>,
}

/// The writes to one table in one release's interval, in commit order.
#[derive(Clone, Debug)]
pub struct TableChanges {
    pub name: String,
    pub columns: Vec<String>,
    pub changes: Vec<Change>,
}

/// A published release.
#[derive(Debug)]
pub struct Release {
    pub id: u64,
    /// When it was due (`id × interval`), ms since the epoch.
    pub time_ms: u64,
    /// When it was cut (at or just after `time_ms`), ms since the epoch.
    pub cut_ms: u64,
    /// It holds every write up to this LSN and none after.
    pub lsn: Lsn,
    /// The previous release's LSN: the change set holds the writes in
    /// `(from_lsn, lsn]`.
    pub from_lsn: Lsn,
    /// Whether the change set holds every write of its interval: false
    /// for the first release after the server started (the interval began
    /// before it).
    pub complete: bool,
    /// Per table written.
    pub changes: BTreeMap<TableId, TableChanges>,
    bytes: usize,
}

impl Release {
    /// The writes to the table called `name` (empty when none).
    pub fn changes_of(&self, name: &str) -> Option<&TableChanges> {
        self.changes.values().find(|t| t.name == name)
    }
}

/// The database as of a release: what `release` reads read.
#[derive(Debug)]
pub struct Snapshot {
    pub release: Arc<Release>,
    pub catalog: Arc<Catalog>,
}

/// Why [`Releases::release`] has no such release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    Off,
    NotYet { current: Option<u64> },
    Gone { oldest: u64 },
}

#[derive(Debug, Default)]
struct Pending {
    changes: BTreeMap<TableId, Vec<Change>>,
    bytes: usize,
    /// The previous cut's LSN.
    since: Lsn,
    /// Whether every write since the interval began was captured.
    complete: bool,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<Snapshot>>,
    kept: VecDeque<Arc<Release>>,
    kept_bytes: usize,
    time_maps: time_maps::TimeMaps,
}

/// How publication goes, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReleaseStats {
    pub published: u64,
    /// Of the last release: from its due time to its cut, and to its
    /// publication (the cut plus the fsync of its LSN), in ms.
    pub cut_lag_ms: u64,
    pub publish_delay_ms: u64,
    /// The largest publication delay so far.
    pub max_publish_delay_ms: u64,
}

/// All releases of one database. Off until [`Releases::enable`].
#[derive(Debug, Default)]
pub struct Releases {
    schedule: RwLock<Option<Schedule>>,
    pending: Mutex<Pending>,
    state: RwLock<State>,
    stats: Mutex<ReleaseStats>,
}

/// Rough bytes a captured row takes: values, their payloads, the change.
fn change_bytes(row: &Row) -> usize {
    64 + row.iter().map(|v| 16 + v.payload_len()).sum::<usize>()
}

impl Releases {
    pub fn new() -> Releases {
        Releases::default()
    }

    /// Starts capturing changes for releases on `schedule`, from the state
    /// at `lsn` (call under the commit lock, before any later commit).
    /// A new schedule starts a new history: release ids of different
    /// intervals do not compare.
    pub fn enable(&self, schedule: Schedule, lsn: Lsn) {
        *self.pending.lock() = Pending {
            since: lsn,
            complete: false,
            ..Pending::default()
        };
        let mut current = self.schedule.write();
        if *current != Some(schedule) {
            *self.state.write() = State::default();
        }
        *current = Some(schedule);
    }

    pub fn schedule(&self) -> Option<Schedule> {
        *self.schedule.read()
    }

    /// Records a commit's row changes for the next release's change set.
    /// Called by the commit consumer, under the commit lock, in commit order.
    pub fn on_commit(&self, lsn: Lsn, changes: &[RowChange]) {
        if self.schedule.read().is_none() || changes.is_empty() {
            return;
        }
        let mut p = self.pending.lock();
        debug_assert!(lsn > p.since, "a commit at or below the last cut");
        for c in changes {
            let (op, row) = match (&c.old, &c.new) {
                (None, Some(new)) => (Op::Insert, new.clone()),
                (Some(_), Some(new)) => (Op::Update, new.clone()),
                (Some(old), None) => (Op::Delete, old.clone()),
                (None, None) => continue,
            };
            p.bytes += change_bytes(&row);
            p.changes
                .entry(c.table)
                .or_default()
                .push(Change { lsn, op, row });
        }
    }

    /// Cuts release `id` from `catalog`, the tables as of `lsn`, taking
    /// every change captured since the previous cut. Call under the commit
    /// lock so that no commit falls between the snapshot and the change
    /// set; then [`Releases::publish`] it once `lsn` is durable.
    pub fn cut(&self, id: u64, catalog: &Catalog, lsn: Lsn, now_ms: u64) -> Arc<Snapshot> {
        let schedule = self.schedule().expect("releases are enabled");
        let mut p = self.pending.lock();
        assert!(lsn >= p.since, "a release behind the previous one");
        let taken = std::mem::take(&mut p.changes);
        let bytes = std::mem::take(&mut p.bytes);
        let from_lsn = std::mem::replace(&mut p.since, lsn);
        let complete = std::mem::replace(&mut p.complete, true);
        drop(p);
        let changes = taken
            .into_iter()
            .filter_map(|(table, changes)| {
                // A table dropped since keeps nothing readable by name.
                let t = catalog.table_by_id(table)?;
                Some((
                    table,
                    TableChanges {
                        name: t.schema.name.clone(),
                        columns: t.schema.columns.iter().map(|c| c.name.clone()).collect(),
                        changes,
                    },
                ))
            })
            .collect();
        Arc::new(Snapshot {
            release: Arc::new(Release {
                id,
                time_ms: schedule.time_of(id),
                cut_ms: now_ms,
                lsn,
                from_lsn,
                complete,
                changes,
                bytes,
            }),
            catalog: Arc::new(catalog.clone()),
        })
    }

    /// Makes `snap` the release `release` reads see, keeps its change set
    /// and adds it to the time maps. Releases are published in id order.
    pub fn publish(&self, snap: Arc<Snapshot>, now_ms: u64) {
        {
            let r = &snap.release;
            let mut st = self.stats.lock();
            st.published += 1;
            st.cut_lag_ms = r.cut_ms.saturating_sub(r.time_ms);
            st.publish_delay_ms = now_ms.saturating_sub(r.time_ms);
            st.max_publish_delay_ms = st.max_publish_delay_ms.max(st.publish_delay_ms);
        }
        let schedule = self.schedule().expect("releases are enabled");
        let mut s = self.state.write();
        let r = snap.release.clone();
        if let Some(prev) = s.kept.back() {
            assert!(
                r.id > prev.id && r.lsn >= prev.lsn,
                "releases are published in order"
            );
        }
        s.time_maps.add(&schedule, &snap.catalog.time_maps, &r);
        s.kept_bytes += r.bytes;
        s.kept.push_back(r);
        while s.kept.len() > MAX_RELEASES_KEPT
            || (s.kept_bytes > MAX_CHANGE_BYTES_KEPT && s.kept.len() > 1)
        {
            let old = s.kept.pop_front().expect("non-empty");
            s.kept_bytes -= old.bytes;
        }
        s.current = Some(snap);
    }

    /// The release `release` reads see now.
    pub fn current(&self) -> Option<Arc<Snapshot>> {
        self.state.read().current.clone()
    }

    /// A kept release by id.
    pub fn release(&self, id: u64) -> Result<Arc<Release>, Missing> {
        if self.schedule().is_none() {
            return Err(Missing::Off);
        }
        let s = self.state.read();
        let (Some(first), Some(last)) = (s.kept.front(), s.kept.back()) else {
            return Err(Missing::NotYet { current: None });
        };
        if id > last.id {
            return Err(Missing::NotYet {
                current: Some(last.id),
            });
        }
        if id < first.id {
            return Err(Missing::Gone { oldest: first.id });
        }
        // The releaser cuts every id in turn; one whose publication
        // failed (its LSN never became durable) is missing.
        match s.kept.binary_search_by_key(&id, |r| r.id) {
            Ok(i) => Ok(s.kept[i].clone()),
            Err(_) => Err(Missing::Gone { oldest: first.id }),
        }
    }

    /// A bucket of time map `name`, as of the current release.
    pub fn time_map_bucket(
        &self,
        name: &str,
        period_ms: u64,
        start_ms: u64,
    ) -> Result<Bucket, BucketError> {
        let schedule = self
            .schedule()
            .ok_or_else(|| BucketError::NoSuchMap(name.to_string()))?;
        let s = self.state.read();
        let current = s.current.as_ref().map_or(0, |c| c.release.id);
        s.time_maps
            .bucket(&schedule, current, name, period_ms, start_ms)
    }

    pub fn stats(&self) -> ReleaseStats {
        *self.stats.lock()
    }

    /// (releases kept, bytes of their change sets), for metrics.
    pub fn kept(&self) -> (usize, usize) {
        let s = self.state.read();
        (s.kept.len(), s.kept_bytes)
    }
}

/// Releases capture every committed batch's row changes, except those of
/// ephemeral tables: nothing reads their rows, and their change sets would
/// hold what the tables never keep.
impl aqueduct_tables::CommitConsumer for Releases {
    fn committed(&self, batch: &aqueduct_tables::AppliedBatch, catalog: &Catalog) {
        let ephemeral = |c: &RowChange| {
            catalog
                .table_by_id(c.table)
                .is_some_and(|t| t.schema.ephemeral)
        };
        if batch.changes.iter().any(ephemeral) {
            let kept: Vec<RowChange> = batch
                .changes
                .iter()
                .filter(|c| !ephemeral(c))
                .cloned()
                .collect();
            self.on_commit(batch.last, &kept);
        } else {
            self.on_commit(batch.last, &batch.changes);
        }
    }
}
