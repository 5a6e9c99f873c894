//! Time maps: for one column of one table, the distinct values written in
//! each period, at several period lengths (say 5 s, 1 min, 1 h). A client
//! that wants "which of these authors wrote since time t" reads a few
//! coarse buckets and descends into finer ones only where they say yes.
//!
//! Maintained incrementally: each release adds the values of its change
//! set to the bucket of each period that contains its interval. A bucket is
//! complete (immutable) once the last release of its period is out.

use std::collections::{BTreeMap, BTreeSet};

use aqueduct_tables::{TableId, TimeMapDef};
use aqueduct_values::Value;

use crate::schedule::Schedule;
use crate::Release;

/// Buckets kept per period of each time map; older ones are dropped.
pub const MAX_BUCKETS_KEPT: usize = 4_096;

/// One time map's buckets.
#[derive(Debug)]
pub(crate) struct TimeMapState {
    def: TimeMapDef,
    /// The first release whose writes this map has all of: buckets that
    /// begin before it are partial (the map was made, or the server
    /// started, within them).
    since: u64,
    /// Per period (in `def.periods_ms` order): bucket start (ms) to values.
    buckets: Vec<BTreeMap<u64, BTreeSet<Value>>>,
}

/// What a bucket holds, as served.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub values: Vec<Value>,
    /// Its period is over and every release in it is out: it never changes.
    pub complete: bool,
    /// Some of its releases happened before the map had all their writes
    /// (made, or server started, within the period): values may be missing.
    pub partial: bool,
    /// The releases whose writes it holds: `first..=last`.
    pub first_release: u64,
    pub last_release: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BucketError {
    NoSuchMap(String),
    NoSuchPeriod { map: String, periods_ms: Vec<u64> },
    Misaligned { start_ms: u64, period_ms: u64 },
    NotYet { start_ms: u64 },
    Gone { oldest_ms: u64 },
}

impl std::fmt::Display for BucketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketError::NoSuchMap(m) => write!(f, "time map \"{m}\" does not exist"),
            BucketError::NoSuchPeriod { map, periods_ms } => write!(
                f,
                "time map \"{map}\" is not kept at that period; its periods are {}",
                periods_ms
                    .iter()
                    .map(|p| format!("{p}ms"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            BucketError::Misaligned {
                start_ms,
                period_ms,
            } => write!(
                f,
                "start_ms {start_ms} is not a multiple of the period {period_ms} ms"
            ),
            BucketError::NotYet { start_ms } => {
                write!(f, "no release has reached the bucket at {start_ms} yet")
            }
            BucketError::Gone { oldest_ms } => write!(
                f,
                "that bucket is no longer kept; the oldest kept starts at {oldest_ms}"
            ),
        }
    }
}

impl TimeMapState {
    fn new(def: TimeMapDef, since: u64) -> TimeMapState {
        let buckets = def.periods_ms.iter().map(|_| BTreeMap::new()).collect();
        TimeMapState {
            def,
            since,
            buckets,
        }
    }

    /// Adds release `r`'s writes to the bucket of each period holding its
    /// interval.
    fn add(&mut self, schedule: &Schedule, r: &Release) {
        let at = schedule.interval_start(r.id);
        let values: BTreeSet<Value> = r
            .changes
            .get(&self.def.table)
            .into_iter()
            .flat_map(|t| t.changes.iter())
            .map(|c| c.row[self.def.column].clone())
            .filter(|v| !v.is_null())
            .collect();
        for (i, &period) in self.def.periods_ms.iter().enumerate() {
            let buckets = &mut self.buckets[i];
            let bucket = buckets.entry(at - at % period).or_default();
            bucket.extend(values.iter().cloned());
            while buckets.len() > MAX_BUCKETS_KEPT {
                buckets.pop_first();
            }
        }
    }
}

/// Every time map's buckets.
#[derive(Debug, Default)]
pub(crate) struct TimeMaps {
    maps: BTreeMap<TableId, TimeMapState>,
}

impl TimeMaps {
    /// Brings the maps up to release `r`: maps declared since are started
    /// (complete from the next release on), dropped ones forgotten, and
    /// `r`'s writes added to every map that has all of them.
    pub(crate) fn add(
        &mut self,
        schedule: &Schedule,
        defs: &BTreeMap<TableId, TimeMapDef>,
        r: &Release,
    ) {
        self.maps.retain(|id, m| defs.get(id) == Some(&m.def));
        for (id, def) in defs {
            let since = if r.complete { r.id } else { r.id + 1 };
            self.maps
                .entry(*id)
                .or_insert_with(|| TimeMapState::new(def.clone(), since))
                .add(schedule, r);
        }
    }

    /// The bucket of map `name` at `period_ms` starting at `start_ms`, as
    /// of release `current`.
    pub(crate) fn bucket(
        &self,
        schedule: &Schedule,
        current: u64,
        name: &str,
        period_ms: u64,
        start_ms: u64,
    ) -> Result<Bucket, BucketError> {
        let m = self
            .maps
            .values()
            .find(|m| m.def.name == name)
            .ok_or_else(|| BucketError::NoSuchMap(name.to_string()))?;
        let i = m
            .def
            .periods_ms
            .iter()
            .position(|&p| p == period_ms)
            .ok_or_else(|| BucketError::NoSuchPeriod {
                map: name.to_string(),
                periods_ms: m.def.periods_ms.clone(),
            })?;
        if !start_ms.is_multiple_of(period_ms) {
            return Err(BucketError::Misaligned {
                start_ms,
                period_ms,
            });
        }
        let interval = schedule.interval_ms();
        let first_release = start_ms / interval + 1;
        let last_release = (start_ms + period_ms) / interval;
        if first_release > current {
            return Err(BucketError::NotYet { start_ms });
        }
        let buckets = &m.buckets[i];
        let oldest = buckets.keys().next().copied();
        let values = match buckets.get(&start_ms) {
            Some(v) => v.iter().cloned().collect(),
            None => match oldest {
                Some(o) if start_ms < o => return Err(BucketError::Gone { oldest_ms: o }),
                // Before the map's first release: nothing known.
                _ => Vec::new(),
            },
        };
        Ok(Bucket {
            values,
            complete: current >= last_release,
            partial: first_release < m.since,
            first_release,
            last_release,
        })
    }
}
