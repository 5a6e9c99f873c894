//! One subscriber's stream (`docs/publications.md`, sections 3 and 4): the
//! change feed from the subscriber's watermark, each transaction projected
//! through the publication, given its dependency counts by a tracker of
//! the stream's epoch, and written as wire messages: an `epoch` line first,
//! then `txn`, `schema` and `progress` lines.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_expr::SqlError;
use aqueduct_feed::{
    rfc3339_micros, value_json, Change as FeedChange, ChangeMessage, Feed, Subscription,
};
use aqueduct_log::Lsn;
use aqueduct_publish::limits::WIRE_FRAME_BYTES_MAX;
use aqueduct_publish::{
    dep_hash, Change, DepTracker, EpochMessage, Mode, ProgressMessage, SchemaChange as WireSchema,
    SchemaMessage, TxnMessage, TxnObjects, WireMessage,
};
use aqueduct_tables::{row_log_key, ColumnSource, Database, DepRead, SchemaChange, TableId};

use crate::projection::Projection;
use crate::views::{published_views, PublishedView};
use aqueduct_views::views::ViewRegistry;

/// Transactions passed without a published change before a `progress`
/// line says so (one is also sent whenever the stream goes quiet).
const PROGRESS_EVERY_TXNS: u64 = 256;
/// How long a stream that passed transactions without a line waits for
/// the next before saying so with a `progress` line.
const PROGRESS_WHEN_QUIET: Duration = Duration::from_millis(100);

/// What a subscriber asks for.
#[derive(Clone, Debug)]
pub struct StreamRequest {
    pub publication: String,
    pub mode: Mode,
    /// The subscriber's epoch (§3.4): counters start at zero.
    pub epoch: u64,
    /// The subscriber's watermark: everything below it is applied.
    pub from_lsn: Lsn,
    pub server_id: String,
    /// For a subscriber just bootstrapped: transactions up to this LSN
    /// carry `bootstrap: true` (§5.6).
    pub bootstrap_until: Option<Lsn>,
}

/// A publication stream for one subscriber.
pub struct PublicationStream {
    db: Arc<Database>,
    views: Arc<ViewRegistry>,
    /// The published views, with their taps.
    published_views: BTreeMap<TableId, PublishedView>,
    sub: Subscription,
    projection: Projection,
    tracker: Option<DepTracker>,
    request: StreamRequest,
    /// Each published table's columns as the stream last saw them (from
    /// its rows and its `ALTER TABLE` records): what a schema change is
    /// compared with.
    columns_seen: std::collections::HashMap<TableId, Vec<String>>,
    /// The LSN of the last transaction passed without a line.
    quiet_until: Option<Lsn>,
    quiet_count: u64,
}

/// The SQLSTATE 22023 for a mode stronger than the publication's.
pub fn mode_refused(publication: &str, publishes: Mode, asked: Mode) -> SqlError {
    SqlError::new(
        "22023",
        format!("publication \"{publication}\" is published in {publishes} mode; {asked} mode is stronger"),
    )
    .with_hint(format!("subscribe in {publishes} mode or a weaker one"))
}

impl PublicationStream {
    /// Opens the stream and returns it with its first line.
    pub fn open(
        db: Arc<Database>,
        views: Arc<ViewRegistry>,
        feed: &Arc<Feed>,
        request: StreamRequest,
    ) -> Result<(PublicationStream, WireMessage), SqlError> {
        let projection = Projection::of(&db.read(), &request.publication)?;
        let def = projection.publication.clone();
        if !def.mode.allows(request.mode) {
            return Err(mode_refused(&def.name, def.mode, request.mode));
        }
        let published_views = published_views(&db.read(), &def, &views)?;
        for v in published_views.values() {
            if !v.covers(request.from_lsn.saturating_sub(1)) {
                return Err(SqlError::new(
                    "55000",
                    format!(
                        "the changes of view \"{}\" from LSN {} are not kept (the server restarted or the view was made anew since)",
                        v.name, request.from_lsn
                    ),
                )
                .with_hint("the subscriber bootstraps again"));
            }
        }
        let sub = feed
            .subscribe(request.from_lsn, None)
            .map_err(crate::feed_error)?;
        let tracker =
            (request.mode != Mode::Weak).then(|| DepTracker::new(request.mode, def.dep_slots));
        let epoch = WireMessage::Epoch(EpochMessage {
            epoch: request.epoch,
            from_lsn: request.from_lsn,
            server_id: request.server_id.clone(),
            dep_slots: def.dep_slots,
            objects: projection.schemas(),
            bootstrap_until: request.bootstrap_until,
        });
        Ok((
            PublicationStream {
                db,
                views,
                published_views,
                sub,
                projection,
                tracker,
                request,
                columns_seen: Default::default(),
                quiet_until: None,
                quiet_count: 0,
            },
            epoch,
        ))
    }

    /// The lines for what committed next, waiting up to `wait` for it: a
    /// transaction's frames and schema lines, a `progress` line, or
    /// nothing.
    pub fn next(&mut self, wait: Duration) -> Result<Vec<WireMessage>, SqlError> {
        let wait = if self.quiet_until.is_some() {
            wait.min(PROGRESS_WHEN_QUIET)
        } else {
            wait
        };
        let Some(msg) = self.sub.recv(wait).map_err(crate::feed_error)? else {
            return Ok(self.progress().into_iter().collect());
        };
        let mut out = self.lines_of(&msg)?;
        if out.is_empty() {
            self.quiet_until = Some(msg.lsn);
            self.quiet_count += 1;
            if self.quiet_count >= PROGRESS_EVERY_TXNS {
                out.extend(self.progress());
            }
        } else {
            self.quiet_until = None;
            self.quiet_count = 0;
        }
        Ok(out)
    }

    fn progress(&mut self) -> Option<WireMessage> {
        let lsn = self.quiet_until.take()?;
        self.quiet_count = 0;
        Some(WireMessage::Progress(ProgressMessage { lsn }))
    }

    /// The lines of one committed transaction.
    fn lines_of(&mut self, msg: &ChangeMessage) -> Result<Vec<WireMessage>, SqlError> {
        let mut out = Vec::new();
        let mut changes: Vec<Change> = Vec::new();
        let mut objects = TxnObjects::default();
        let publish = self.projection.publication.publish;
        for c in &msg.changes {
            match c {
                FeedChange::Row {
                    lsn,
                    table,
                    key,
                    op,
                    prev_lsn,
                    old,
                    new,
                } => {
                    let Some(object) = self.projection.objects.get(&table.id) else {
                        continue;
                    };
                    if self.columns_seen.get(&table.id) != Some(&table.columns) {
                        self.columns_seen.insert(table.id, table.columns.clone());
                    }
                    objects.writes.push(dep_hash(&row_log_key(table.id, key)));
                    if !objects.tables_written.contains(&table.id) {
                        objects.tables_written.push(table.id);
                    }
                    if let Some(change) = object.project(
                        publish,
                        table,
                        key,
                        *op,
                        *lsn,
                        *prev_lsn,
                        old.as_deref(),
                        new.as_deref(),
                    ) {
                        changes.push(change);
                    }
                }
                FeedChange::Schema { lsn, change } => {
                    out.extend(self.schema_lines(*lsn, change)?);
                }
            }
        }
        for (id, view) in &self.published_views {
            let Some(object) = self.projection.objects.get(id) else {
                continue;
            };
            for c in view.changes_at(&self.views, msg.lsn)? {
                objects.writes.push(dep_hash(&row_log_key(*id, &c.key)));
                if !objects.tables_written.contains(id) {
                    objects.tables_written.push(*id);
                }
                if let Some(change) = object.project(
                    publish,
                    &view.info,
                    &c.key,
                    c.op,
                    msg.lsn,
                    None,
                    c.old.as_ref(),
                    c.new.as_ref(),
                ) {
                    changes.push(change);
                }
            }
        }
        if changes.is_empty() {
            return Ok(out);
        }
        let mut origin = None;
        if let Some(deps) = &msg.deps {
            let published = |t: TableId| self.projection.objects.contains_key(&t);
            for r in &deps.reads {
                match *r {
                    DepRead::Row { table, hash, .. } if published(table) => {
                        objects.reads.push(hash)
                    }
                    DepRead::Table(table) if published(table) => objects.table_scans.push(table),
                    _ => {}
                }
            }
            objects.user = Some(deps.origin.user.clone());
            origin = Some(deps.origin.origins.clone()).filter(|o| !o.is_empty());
            objects.session = Some(deps.origin.session);
        }
        let deps = self.tracker.as_mut().map(|t| t.assign(&objects));
        let frames = frames(changes);
        let last = frames.len() - 1;
        for (i, changes) in frames.into_iter().enumerate() {
            out.push(WireMessage::Txn(TxnMessage {
                lsn: msg.lsn,
                first_lsn: msg.first_lsn,
                txid: format!("{}:{}", self.request.server_id, msg.lsn),
                commit_time: rfc3339_micros(msg.commit_micros),
                epoch: self.request.epoch,
                frame: i as u32,
                last: i == last,
                deps: if i == 0 { deps.clone() } else { None },
                bootstrap: self.request.bootstrap_until.is_some_and(|h| msg.lsn <= h),
                changes,
                origin: if i == 0 { origin.take() } else { None },
            }));
        }
        Ok(out)
    }

    /// The `schema` lines a schema change makes for this publication, and
    /// the projection brought up to date.
    fn schema_lines(
        &mut self,
        lsn: Lsn,
        change: &SchemaChange,
    ) -> Result<Vec<WireMessage>, SqlError> {
        let name = self.projection.publication.name.clone();
        let id = self.projection.publication.id;
        let relevant = match change {
            SchemaChange::AlterTable { schema, .. } => {
                self.projection.objects.contains_key(&schema.id)
            }
            SchemaChange::DropTable { id }
            | SchemaChange::DropView { id }
            | SchemaChange::AlterView { id, .. } => self.projection.objects.contains_key(id),
            SchemaChange::CreateTable(_) => self.projection.publication.all_tables,
            SchemaChange::CreatePublication(p) | SchemaChange::AlterPublication(p) => p.id == id,
            SchemaChange::DropPublication { id: dropped } if *dropped == id => {
                return Err(SqlError::new(
                    "42704",
                    format!("publication \"{name}\" was dropped at LSN {lsn}"),
                ));
            }
            _ => false,
        };
        if !relevant {
            return Ok(Vec::new());
        }
        let mut changes: Vec<(String, WireSchema)> = Vec::new();
        if let SchemaChange::AlterTable {
            schema,
            sources,
            old_columns,
        } = change
        {
            let object = &self.projection.objects[&schema.id];
            let all_columns = self
                .projection
                .publication
                .object(schema.id)
                .is_none_or(|o| o.all_columns);
            if all_columns {
                // The record names the columns it replaced; one written
                // before it kept them is compared with what the stream saw.
                let old = if old_columns.is_empty() {
                    self.columns_seen
                        .get(&schema.id)
                        .cloned()
                        .unwrap_or_else(|| object.columns().to_vec())
                } else {
                    old_columns.clone()
                };
                let mut kept = vec![false; old.len()];
                for (i, src) in sources.iter().enumerate() {
                    let column = &schema.columns[i];
                    match src {
                        ColumnSource::Old(j) => {
                            if let Some(before) = old.get(*j) {
                                kept[*j] = true;
                                if *before != column.name {
                                    changes.push((
                                        object.name.clone(),
                                        WireSchema::RenameAttribute {
                                            from: before.clone(),
                                            to: column.name.clone(),
                                        },
                                    ));
                                }
                            }
                        }
                        ColumnSource::Value(v) => changes.push((
                            object.name.clone(),
                            WireSchema::AddAttribute {
                                name: column.name.clone(),
                                ty: column.ty.to_string(),
                                existing: value_json(v),
                            },
                        )),
                    }
                }
                for (j, a) in old.iter().enumerate() {
                    if !kept[j] && object.schema().key.iter().all(|k| k != a) {
                        changes.push((
                            object.name.clone(),
                            WireSchema::DropAttribute { name: a.clone() },
                        ));
                    }
                }
                self.columns_seen.insert(
                    schema.id,
                    schema.columns.iter().map(|c| c.name.clone()).collect(),
                );
            }
        }
        let before: BTreeMap<TableId, String> = self
            .projection
            .objects
            .iter()
            .map(|(id, o)| (*id, o.name.clone()))
            .collect();
        self.projection = Projection::of(&self.db.read(), &name)?;
        let views = published_views(&self.db.read(), &self.projection.publication, &self.views)?;
        for (id, view) in &views {
            if self
                .published_views
                .get(id)
                .is_some_and(|old| !old.same_tap(view))
            {
                return Err(SqlError::new(
                    "55000",
                    format!("view \"{}\" was made anew at LSN {lsn}", view.name),
                )
                .with_hint("the subscriber bootstraps again"));
            }
        }
        self.published_views = views;
        for (id, object) in &self.projection.objects {
            if !before.contains_key(id) {
                changes.push((
                    object.name.clone(),
                    WireSchema::AddObject {
                        object: object.name.clone(),
                        schema: object.schema().clone(),
                    },
                ));
            }
        }
        for (id, object) in &before {
            if !self.projection.objects.contains_key(id) {
                changes.push((
                    object.clone(),
                    WireSchema::DropObject {
                        object: object.clone(),
                    },
                ));
            }
        }
        Ok(changes
            .into_iter()
            .map(|(object, change)| {
                WireMessage::Schema(SchemaMessage {
                    lsn,
                    epoch: self.request.epoch,
                    object,
                    change,
                })
            })
            .collect())
    }
}

/// At least the bytes `v` takes as JSON (a string's every character
/// escaped as `\u00XX`, a number at its longest): cheap to add up.
fn json_bytes_bound(v: &serde_json::Value) -> usize {
    use serde_json::Value as J;
    match v {
        J::Null | J::Bool(_) => 5,
        J::Number(_) => 24,
        J::String(s) => 6 * s.len() + 2,
        J::Array(a) => 2 + a.iter().map(|x| json_bytes_bound(x) + 1).sum::<usize>(),
        J::Object(m) => {
            2 + m
                .iter()
                .map(|(k, x)| 6 * k.len() + 4 + json_bytes_bound(x))
                .sum::<usize>()
        }
    }
}

/// At least the bytes `c` takes as JSON.
fn change_bytes_bound(c: &Change) -> usize {
    // The field names, the operation and two LSNs.
    const FIXED: usize = 128;
    FIXED
        + 6 * c.object.len()
        + c.key.iter().map(|k| json_bytes_bound(k) + 1).sum::<usize>()
        + c.attrs.as_ref().map_or(0, |m| {
            m.iter()
                .map(|(k, x)| 6 * k.len() + 4 + json_bytes_bound(x))
                .sum::<usize>()
        })
}

/// A transaction's changes cut into frames that each fit a line.
fn frames(changes: Vec<Change>) -> Vec<Vec<Change>> {
    // Room for the frame's own fields and its dependency lists.
    const BUDGET: usize = WIRE_FRAME_BYTES_MAX - (256 << 10);
    // Most transactions fit a frame by far: no need to write them twice.
    if changes.iter().map(change_bytes_bound).sum::<usize>() <= BUDGET {
        return vec![changes];
    }
    let mut out = vec![Vec::new()];
    let mut bytes = 0usize;
    for c in changes {
        let size = serde_json::to_string(&c).map_or(0, |s| s.len()) + 1;
        let current = out.last_mut().expect("one frame at least");
        if !current.is_empty() && bytes + size > BUDGET {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        out.last_mut().expect("one frame at least").push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cheap_bound_is_never_below_the_written_size() {
        let values = [
            json!(null),
            json!(true),
            json!(-1.234_567_890_123_456_7e-300),
            json!(u64::MAX),
            json!("\u{1}\u{1f}\"\\\n"),
            json!("née 😀"),
            json!([1, "a", null, [2.5, {"x\u{2}": "\u{7f}"}]]),
            json!({"": {"": []}}),
        ];
        for v in values {
            let written = serde_json::to_string(&v).unwrap().len();
            assert!(json_bytes_bound(&v) >= written, "{v}");
            let c = Change {
                object: "o\u{3}".into(),
                op: aqueduct_publish::ChangeOp::Update,
                key: vec![v.clone(), json!(i64::MIN)],
                attrs: Some([("k\u{4}".to_string(), v.clone())].into_iter().collect()),
                version: u64::MAX,
                prev_version: Some(u64::MAX),
            };
            let written = serde_json::to_string(&c).unwrap().len();
            assert!(change_bytes_bound(&c) >= written, "{c:?}");
        }
        // Past the budget the frames are cut by the written sizes.
        let big = Change {
            object: "o".into(),
            op: aqueduct_publish::ChangeOp::Insert,
            key: vec![json!(1)],
            attrs: Some(
                [("b".to_string(), json!("x".repeat(1 << 20)))]
                    .into_iter()
                    .collect(),
            ),
            version: 1,
            prev_version: None,
        };
        assert_eq!(frames(vec![big.clone(); 12]).len(), 4);
    }
}
