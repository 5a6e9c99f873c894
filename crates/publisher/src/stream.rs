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
        feed: &Arc<Feed>,
        request: StreamRequest,
    ) -> Result<(PublicationStream, WireMessage), SqlError> {
        let projection = Projection::of(&db.read(), &request.publication)?;
        let def = projection.publication.clone();
        if !def.mode.allows(request.mode) {
            return Err(mode_refused(&def.name, def.mode, request.mode));
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
        if changes.is_empty() {
            return Ok(out);
        }
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
                origin: None,
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
            SchemaChange::DropTable { id } => self.projection.objects.contains_key(id),
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

/// A transaction's changes cut into frames that each fit a line.
fn frames(changes: Vec<Change>) -> Vec<Vec<Change>> {
    // Room for the frame's own fields and its dependency lists.
    const BUDGET: usize = WIRE_FRAME_BYTES_MAX - (256 << 10);
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
