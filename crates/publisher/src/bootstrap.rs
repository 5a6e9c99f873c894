//! A subscriber's bootstrap (`docs/publications.md`, section 5.6): the
//! publication's tables at one LSN `S`, projected, in chunks, after which
//! the subscriber's stream starts at `S + 1`. The subscriber's durable
//! consumer holds the log from at or before `S + 1` before the snapshot is
//! taken, so compaction can remove nothing the stream needs.

use std::sync::Arc;

use aqueduct_expr::SqlError;
use aqueduct_feed::{value_json, Feed, Snapshot};
use aqueduct_log::Lsn;
use aqueduct_publish::limits::BOOTSTRAP_CHUNK_ROWS;
use aqueduct_publish::{
    BootstrapEndMessage, ChunkEndMessage, EpochMessage, RowMessage, WireMessage,
};
use aqueduct_tables::Database;

use crate::projection::Projection;

/// A snapshot of a publication being sent.
pub struct Bootstrap {
    /// The snapshot's LSN `S`.
    pub lsn: Lsn,
    snapshot: Snapshot,
    projection: Projection,
    /// The table being sent and the key of the last row sent of it.
    table: usize,
    after: Option<aqueduct_tables::Key>,
    chunk: u32,
    in_chunk: u64,
    done: bool,
}

impl Bootstrap {
    /// Takes the snapshot for subscriber consumer `consumer` and returns
    /// it with its first line (an `epoch` line: epoch 0 from `S + 1`, and
    /// the objects' shapes).
    pub fn start(
        db: &Arc<Database>,
        feed: &Arc<Feed>,
        publication: &str,
        mode: aqueduct_publish::Mode,
        consumer: &str,
        server_id: &str,
    ) -> Result<(Bootstrap, WireMessage), SqlError> {
        let projection = Projection::of(&db.read(), publication)?;
        let def = &projection.publication;
        if !def.mode.allows(mode) {
            return Err(crate::mode_refused(&def.name, def.mode, mode));
        }
        let names: Vec<String> = projection
            .objects
            .values()
            .map(|o| o.name.clone())
            .collect();
        // Hold the log first (a consumer that exists keeps its place, which
        // is at or before the snapshot), then move the hold to S + 1.
        feed.register(consumer, None).map_err(crate::feed_error)?;
        let snapshot = Feed::snapshot(db, Some(&names)).map_err(crate::feed_error)?;
        let lsn = snapshot.lsn;
        if lsn > 0 {
            feed.ack(consumer, lsn).map_err(crate::feed_error)?;
        }
        let projection = Projection::of(&db.read(), publication)?;
        let first = WireMessage::Epoch(EpochMessage {
            epoch: 0,
            from_lsn: lsn + 1,
            server_id: server_id.to_string(),
            dep_slots: projection.publication.dep_slots,
            objects: projection.schemas(),
            bootstrap_until: None,
        });
        Ok((
            Bootstrap {
                lsn,
                snapshot,
                projection,
                table: 0,
                after: None,
                chunk: 0,
                in_chunk: 0,
                done: false,
            },
            first,
        ))
    }

    /// The next lines, up to about `max` rows' worth; empty at the end.
    pub fn next_lines(&mut self, max: usize) -> Vec<WireMessage> {
        let mut out = Vec::new();
        while out.len() < max && !self.done {
            let Some(t) = self.snapshot.tables.get(self.table) else {
                if self.in_chunk > 0 {
                    out.push(end_chunk(&mut self.chunk, &mut self.in_chunk));
                }
                out.push(WireMessage::BootstrapEnd(BootstrapEndMessage {
                    lsn: self.lsn,
                }));
                self.done = true;
                break;
            };
            let Some(object) = self.projection.objects.get(&t.info.id) else {
                self.table += 1;
                self.after = None;
                continue;
            };
            use std::ops::Bound;
            let lo = match &self.after {
                Some(k) => Bound::Excluded(k),
                None => Bound::Unbounded,
            };
            let mut last = None;
            for (key, version) in t.table.range(lo, Bound::Unbounded).take(max - out.len()) {
                last = Some(key.clone());
                let Some(attrs) = object.snapshot_row(key, &version.row) else {
                    continue;
                };
                out.push(WireMessage::Row(RowMessage {
                    object: object.name.clone(),
                    key: key.iter().map(value_json).collect(),
                    attrs,
                    version: version.lsn,
                    bootstrap: true,
                }));
                self.in_chunk += 1;
                if self.in_chunk >= BOOTSTRAP_CHUNK_ROWS {
                    out.push(end_chunk(&mut self.chunk, &mut self.in_chunk));
                }
            }
            match last {
                Some(k) => self.after = Some(k),
                None => {
                    self.table += 1;
                    self.after = None;
                }
            }
        }
        out
    }
}

/// The `chunk_end` line of the chunk being sent; the next one begins.
fn end_chunk(chunk: &mut u32, in_chunk: &mut u64) -> WireMessage {
    let m = WireMessage::ChunkEnd(ChunkEndMessage {
        chunk: *chunk,
        rows: *in_chunk,
    });
    *chunk += 1;
    *in_chunk = 0;
    m
}
