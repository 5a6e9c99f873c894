//! A subscriber's bootstrap (`docs/publications.md`, section 5.6): the
//! publication's tables at one LSN `S`, projected, cut into chunks of
//! key ranges that a subscriber fetches in parallel, after which its
//! stream starts at `S + 1`. For a whole bootstrap the subscriber's
//! durable consumer holds the log from at or before `S + 1` before the
//! snapshot is taken, so compaction can remove nothing the stream needs.
//! A partial bootstrap (some objects only, for a re-bootstrap of one
//! object or an object added to the publication) leaves the consumer
//! alone: the subscriber's stream goes on from its own position.
//!
//! Snapshots are held in [`Bootstraps`], a bounded map, until released,
//! replaced by a new bootstrap of the same subscriber, or unused for
//! `BOOTSTRAP_SNAPSHOT_TTL_S`.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aqueduct_expr::SqlError;
use aqueduct_feed::{value_json, Feed, Snapshot};
use aqueduct_log::Lsn;
use aqueduct_publish::limits::{
    BOOTSTRAP_CHUNKS_MAX, BOOTSTRAP_CHUNK_ROWS, BOOTSTRAP_CHUNK_ROWS_MIN, BOOTSTRAP_SNAPSHOTS_MAX,
    BOOTSTRAP_SNAPSHOT_TTL_S,
};
use aqueduct_publish::{BootstrapAnswer, ChunkEndMessage, ChunkInfo, RowMessage, WireMessage};
use aqueduct_tables::{Database, Key};
use aqueduct_views::views::ViewRegistry;

use crate::projection::Projection;

/// One chunk: a range of one snapshot table's keys.
struct ChunkRange {
    /// Index into the snapshot's tables.
    table: usize,
    /// First key, inclusive; `None` from the table's start.
    from: Option<Key>,
    /// Next chunk's first key, exclusive; `None` to the table's end.
    to: Option<Key>,
}

/// A snapshot of a publication being sent, chunk by chunk.
pub struct Bootstrap {
    /// The snapshot's LSN `S`.
    pub lsn: Lsn,
    /// Its id.
    pub id: String,
    /// The subscriber's durable consumer.
    pub consumer: String,
    snapshot: Snapshot,
    projection: Projection,
    chunks: Vec<ChunkRange>,
    answer: BootstrapAnswer,
}

/// What a subscriber asks to bootstrap.
pub struct BootstrapRequest<'a> {
    pub publication: &'a str,
    pub mode: aqueduct_publish::Mode,
    /// The subscriber's durable consumer.
    pub consumer: &'a str,
    pub server_id: &'a str,
    /// Only these objects (published names): a partial bootstrap, which
    /// leaves the consumer's hold alone. `None`: all of them.
    pub objects: Option<Vec<String>>,
    /// Rows per chunk asked for (clamped to the limits).
    pub chunk_rows: Option<u64>,
}

impl Bootstrap {
    /// Takes the snapshot and cuts it into chunks.
    pub fn start(
        db: &Arc<Database>,
        views: &ViewRegistry,
        feed: &Arc<Feed>,
        req: &BootstrapRequest<'_>,
    ) -> Result<Bootstrap, SqlError> {
        let projection = Projection::of(&db.read(), req.publication)?;
        let def = &projection.publication;
        if !def.mode.allows(req.mode) {
            return Err(crate::mode_refused(&def.name, def.mode, req.mode));
        }
        let mut names: Vec<String> = projection
            .objects
            .values()
            .map(|o| o.name.clone())
            .collect();
        if let Some(wanted) = &req.objects {
            for w in wanted {
                if !names.contains(w) {
                    return Err(SqlError::new(
                        "42704",
                        format!("publication \"{}\" has no object \"{w}\"", def.name),
                    ));
                }
            }
            names.retain(|n| wanted.contains(n));
        }
        // Published views keep their changes from before the snapshot on;
        // their rows at its LSN join its tables.
        let mut published = crate::views::published_views(&db.read(), def, views)?;
        published.retain(|_, v| names.contains(&v.name));
        names.retain(|n| !published.values().any(|v| &v.name == n));
        let mut snapshot = if req.objects.is_none() {
            // Hold the log first (a consumer that exists keeps its place,
            // which is at or before the snapshot), then move the hold to
            // S + 1.
            feed.register(req.consumer, None)
                .map_err(crate::feed_error)?;
            let snapshot = Feed::snapshot(db, Some(&names)).map_err(crate::feed_error)?;
            if snapshot.lsn > 0 {
                feed.ack(req.consumer, snapshot.lsn)
                    .map_err(crate::feed_error)?;
            }
            snapshot
        } else {
            Feed::snapshot(db, Some(&names)).map_err(crate::feed_error)?
        };
        crate::views::add_view_tables(&mut snapshot, &published, views)?;
        names.extend(published.values().map(|v| v.name.clone()));
        let lsn = snapshot.lsn;
        let projection = Projection::of(&db.read(), req.publication)?;
        let total: usize = snapshot.tables.iter().map(|t| t.table.len()).sum();
        let per_chunk = req
            .chunk_rows
            .unwrap_or(BOOTSTRAP_CHUNK_ROWS)
            .clamp(BOOTSTRAP_CHUNK_ROWS_MIN, BOOTSTRAP_CHUNK_ROWS)
            .max((total as u64).div_ceil(BOOTSTRAP_CHUNKS_MAX as u64 / 2))
            .max(1);
        let mut chunks = Vec::new();
        let mut infos = Vec::new();
        for (i, t) in snapshot.tables.iter().enumerate() {
            let Some(object) = projection.objects.get(&t.info.id) else {
                continue;
            };
            let mut starts: Vec<Key> = Vec::new();
            let mut rows: Vec<u64> = Vec::new();
            for (n, (key, _)) in t.table.scan().enumerate() {
                if (n as u64).is_multiple_of(per_chunk) {
                    starts.push(key.clone());
                    rows.push(0);
                }
                *rows.last_mut().expect("a chunk started") += 1;
            }
            for (j, r) in rows.into_iter().enumerate() {
                infos.push(ChunkInfo {
                    chunk: chunks.len() as u32,
                    object: object.name.clone(),
                    rows: r,
                });
                chunks.push(ChunkRange {
                    table: i,
                    from: (j > 0).then(|| starts[j].clone()),
                    to: starts.get(j + 1).cloned(),
                });
            }
        }
        let id = boot_id(lsn);
        let answer = BootstrapAnswer {
            boot_id: id.clone(),
            lsn,
            server_id: req.server_id.to_string(),
            dep_slots: projection.publication.dep_slots,
            objects: projection
                .schemas()
                .into_iter()
                .filter(|(n, _)| names.contains(n))
                .collect(),
            chunks: infos,
        };
        Ok(Bootstrap {
            lsn,
            id,
            consumer: req.consumer.to_string(),
            snapshot,
            projection,
            chunks,
            answer,
        })
    }

    /// The answer to the bootstrap request.
    pub fn answer(&self) -> &BootstrapAnswer {
        &self.answer
    }

    /// Sends chunk `n`'s lines through `emit` (its `row` lines, then its
    /// `chunk_end`), until `emit` says the client has gone.
    pub fn send_chunk(
        &self,
        n: u32,
        mut emit: impl FnMut(&WireMessage) -> bool,
    ) -> Result<(), SqlError> {
        let range = self.chunks.get(n as usize).ok_or_else(|| {
            SqlError::new(
                "22023",
                format!("bootstrap {} has no chunk {n}", self.answer.boot_id),
            )
        })?;
        let t = &self.snapshot.tables[range.table];
        let object = &self.projection.objects[&t.info.id];
        let lo = range
            .from
            .as_ref()
            .map_or(Bound::Unbounded, Bound::Included);
        let hi = range.to.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut sent = 0u64;
        for (key, version) in t.table.range(lo, hi) {
            let Some(attrs) = object.snapshot_row(key, &version.row) else {
                continue;
            };
            let line = WireMessage::Row(RowMessage {
                object: object.name.clone(),
                key: key.iter().map(value_json).collect(),
                attrs,
                version: version.lsn,
                bootstrap: true,
            });
            if !emit(&line) {
                return Ok(());
            }
            sent += 1;
        }
        emit(&WireMessage::ChunkEnd(ChunkEndMessage {
            chunk: n,
            rows: sent,
        }));
        Ok(())
    }
}

/// A new snapshot id: its LSN, the time and a counter, so no two of one
/// server's are equal.
fn boot_id(lsn: Lsn) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{lsn:x}-{nanos:x}-{n:x}")
}

/// The bootstrap snapshots a server holds: at most
/// `BOOTSTRAP_SNAPSHOTS_MAX`, each until released, replaced by a new
/// bootstrap of the same subscriber, or unused for
/// `BOOTSTRAP_SNAPSHOT_TTL_S`.
#[derive(Default)]
pub struct Bootstraps {
    held: Mutex<HashMap<String, (Arc<Bootstrap>, Instant)>>,
}

impl Bootstraps {
    /// Holds `b`; refuses (53300) when the map is full of live snapshots
    /// of other subscribers.
    pub fn insert(&self, b: Bootstrap) -> Result<Arc<Bootstrap>, SqlError> {
        let ttl = Duration::from_secs(BOOTSTRAP_SNAPSHOT_TTL_S);
        let mut held = self.held.lock().expect("bootstraps");
        held.retain(|_, (old, used)| used.elapsed() < ttl && old.consumer != b.consumer);
        if held.len() >= BOOTSTRAP_SNAPSHOTS_MAX {
            return Err(SqlError::new(
                "53300",
                format!("the server holds {BOOTSTRAP_SNAPSHOTS_MAX} bootstrap snapshots already"),
            )
            .with_hint("try again when a running bootstrap has finished"));
        }
        let b = Arc::new(b);
        held.insert(b.id.clone(), (b.clone(), Instant::now()));
        Ok(b)
    }

    /// The snapshot `id`, its TTL started again.
    pub fn get(&self, id: &str) -> Result<Arc<Bootstrap>, SqlError> {
        let mut held = self.held.lock().expect("bootstraps");
        match held.get_mut(id) {
            Some((b, used)) if used.elapsed() < Duration::from_secs(BOOTSTRAP_SNAPSHOT_TTL_S) => {
                *used = Instant::now();
                Ok(b.clone())
            }
            _ => Err(SqlError::new(
                "55000",
                format!("bootstrap {id} is not held (released, replaced or expired)"),
            )
            .with_hint("start a new bootstrap")),
        }
    }

    /// Releases the snapshot `id`; whether it was held.
    pub fn release(&self, id: &str) -> bool {
        self.held.lock().expect("bootstraps").remove(id).is_some()
    }

    /// Snapshots held now.
    pub fn len(&self) -> usize {
        self.held.lock().expect("bootstraps").len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
