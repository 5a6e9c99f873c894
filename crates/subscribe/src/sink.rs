//! The sink interface the shell's adapters implement, and an in-memory
//! model of the two kinds of storing sink (`docs/publications.md` §5.3,
//! §5.4): a transactional one that commits rows and position together, and
//! a non-transactional one whose only protection is the per-row guard.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use aqueduct_publish::{Change, ChangeOp, Lsn, ObjectSchema, SchemaChange};
use serde_json::{Map, Value};

use crate::batch::{Item, Origin, Record, Resume, SchemaPos};

/// How a sink error should be handled (§5.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Retry without limit (connection lost, serialization failure, 5xx).
    Transient,
    /// Retry a few times, then dead-letter (constraint, bad value, 4xx).
    Permanent,
}

/// A failed sink operation, classified by the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkError {
    /// Transient or permanent.
    pub class: ErrorClass,
    /// What the sink said.
    pub message: String,
}

impl SinkError {
    /// A transient error.
    pub fn transient(message: impl Into<String>) -> SinkError {
        SinkError {
            class: ErrorClass::Transient,
            message: message.into(),
        }
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> SinkError {
        SinkError {
            class: ErrorClass::Permanent,
            message: message.into(),
        }
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = match self.class {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
        };
        write!(f, "{class} sink error: {}", self.message)
    }
}

impl std::error::Error for SinkError {}

/// Where a sink keeps the subscription's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PositionMode {
    /// In the same transaction as the rows ([`Record`]): exactly once.
    InApply,
    /// Apart, after the rows are confirmed (`StorePosition`): at least
    /// once, made harmless by the row guard or the receiver's own.
    Separate,
}

/// A sink as the shell drives it. Each call is one sink transaction where
/// the sink has transactions; calls never overlap on one connection.
pub trait Sink {
    /// Where this sink keeps positions.
    fn position_mode(&self) -> PositionMode;

    /// Applies `items` in order and `record`, atomically where the sink can:
    /// either everything is durable or nothing is.
    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError>;

    /// Stores the watermark (deleting `applied` rows and tombstones below
    /// it), the transactions applied above it, and the last schema change.
    /// Sinks that record `applied` in [`Sink::apply`] keep their own list
    /// and only delete below the watermark.
    fn store_position(
        &mut self,
        watermark: Lsn,
        applied_above: &[Lsn],
        schema: Option<SchemaPos>,
    ) -> Result<(), SinkError>;

    /// Stores a dead letter (its own transaction).
    fn store_dead_letter(
        &mut self,
        lsn: Lsn,
        error: &SinkError,
        attempts: u32,
    ) -> Result<(), SinkError>;

    /// Forgets a dead letter the operator retried or skipped.
    fn clear_dead_letter(&mut self, lsn: Lsn) -> Result<(), SinkError>;

    /// What the sink holds about the position, to start the agent from.
    fn resume(&self) -> Result<Resume, SinkError>;

    /// Forgets the subscription before it is bootstrapped again (§5.6): its
    /// objects' rows, its position, applied transactions and tombstones,
    /// so no row the new snapshot lacks survives. Message sinks hold
    /// nothing to forget (their receivers see the new bootstrap's rows).
    fn reset(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    /// Deletes one object's rows before that object alone is bootstrapped
    /// again (§5.6), or with `filter` (a condition in the sink's own
    /// query language over its columns) the rows matching it. Its own
    /// transaction. Message sinks hold no rows: their receivers see the
    /// new rows flagged `bootstrap`; a sink that cannot filter refuses a
    /// filter.
    fn clear_object(&mut self, _object: &str, filter: Option<&str>) -> Result<(), SinkError> {
        match filter {
            None => Ok(()),
            Some(_) => Err(SinkError::permanent(
                "this sink holds no rows to delete by a condition",
            )),
        }
    }

    /// Where the sink's copy came from (§5.6); the default for a sink
    /// that stores none.
    fn origin(&self) -> Result<Origin, SinkError> {
        Ok(Origin::default())
    }

    /// Replaces what [`Sink::origin`] reads (its own transaction). Kept
    /// by [`Sink::reset`].
    fn set_origin(&mut self, _origin: &Origin) -> Result<(), SinkError> {
        Ok(())
    }

    /// Makes sure the sink can hold each of the publication's objects, as
    /// a stream's `epoch` line gives them (`EpochMessage::objects`):
    /// creates what is missing and leaves what exists alone, so calling it
    /// again, on every stream, changes nothing. The shell calls it when the
    /// `epoch` line arrives, before any change of that stream is applied.
    fn ensure_objects(&mut self, objects: &BTreeMap<String, ObjectSchema>)
        -> Result<(), SinkError>;

    /// Whether the transaction `lsn` of server `server_id` is applied in
    /// this sink by a subscription following that server (§8: a
    /// decorator's transaction waits for its origins). `None`: the sink
    /// cannot tell (it keeps no positions another subscription shares),
    /// so the agent does not wait.
    fn origin_applied(&self, server_id: &str, lsn: Lsn) -> Result<Option<bool>, SinkError> {
        let _ = (server_id, lsn);
        Ok(None)
    }

    /// Records the server the subscription follows (the stream's `epoch`
    /// line), where the sink keeps it and holds none yet, so that other
    /// subscriptions in the same sink can find what it applied
    /// ([`Sink::origin_applied`]).
    fn note_server(&mut self, server_id: &str) -> Result<(), SinkError> {
        let _ = server_id;
        Ok(())
    }
}

/// A stored row, or the tombstone of a deleted one.
#[derive(Clone, Debug, PartialEq)]
pub enum RowState {
    /// A row at `version`.
    Present {
        /// The row version (`_aq_version`).
        version: Lsn,
        /// Its attributes.
        attrs: Map<String, Value>,
    },
    /// Deleted at `version`; keeps older writes out.
    Tombstone {
        /// The delete's version.
        version: Lsn,
    },
}

impl RowState {
    /// The version the guard compares against.
    pub fn version(&self) -> Lsn {
        match self {
            RowState::Present { version, .. } | RowState::Tombstone { version } => *version,
        }
    }
}

/// A deliberate defect of the in-memory sink, for showing that the
/// simulator's checkers catch it. Exists only with `planted-bugs`.
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkBug {
    /// A delete removes the row and leaves no tombstone
    /// (`docs/publications.md` §10 item 7).
    NoTombstone,
}

/// Guarded rows per object, keyed by the key's JSON text, plus each
/// object's attributes as the applied schema changes left them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemRows {
    /// Rows and tombstones per object.
    pub objects: BTreeMap<String, BTreeMap<String, RowState>>,
    /// Attributes added by schema changes, per object, with the LSN of the
    /// schema change that last touched the object.
    pub schema: BTreeMap<String, (Lsn, BTreeSet<String>)>,
    #[cfg(feature = "planted-bugs")]
    bug: Option<SinkBug>,
}

/// The text a key is stored under.
pub fn key_text(key: &[Value]) -> String {
    Value::Array(key.to_vec()).to_string()
}

impl MemRows {
    /// A row's state.
    pub fn get(&self, object: &str, key: &str) -> Option<&RowState> {
        self.objects.get(object)?.get(key)
    }

    /// The present rows as `(object, key) -> (version, attrs)`.
    pub fn present(&self) -> BTreeMap<(String, String), (Lsn, Map<String, Value>)> {
        let mut out = BTreeMap::new();
        for (object, rows) in &self.objects {
            for (key, state) in rows {
                if let RowState::Present { version, attrs } = state {
                    out.insert((object.clone(), key.clone()), (*version, attrs.clone()));
                }
            }
        }
        out
    }

    /// Applies one change under the guard: an upsert only over a lower
    /// version, a delete leaves a tombstone. Returns whether it took effect.
    pub fn apply_change(&mut self, change: &Change) -> bool {
        let key = key_text(&change.key);
        let rows = self.objects.entry(change.object.clone()).or_default();
        if rows
            .get(&key)
            .is_some_and(|s| s.version() >= change.version)
        {
            return false;
        }
        match change.op {
            ChangeOp::Insert | ChangeOp::Update => {
                let attrs = change.attrs.clone().unwrap_or_default();
                rows.insert(
                    key,
                    RowState::Present {
                        version: change.version,
                        attrs,
                    },
                );
            }
            ChangeOp::Delete => {
                #[cfg(feature = "planted-bugs")]
                if self.bug == Some(SinkBug::NoTombstone) {
                    rows.remove(&key);
                    return true;
                }
                rows.insert(
                    key,
                    RowState::Tombstone {
                        version: change.version,
                    },
                );
            }
        }
        true
    }

    /// Applies a schema change; repeating one is harmless (as `ADD COLUMN
    /// IF NOT EXISTS`).
    pub fn apply_schema(&mut self, object: &str, lsn: Lsn, change: &SchemaChange) {
        let entry = self.schema.entry(object.to_string()).or_default();
        entry.0 = entry.0.max(lsn);
        match change {
            SchemaChange::AddAttribute { name, existing, .. } => {
                if entry.1.insert(name.clone()) {
                    for state in self
                        .objects
                        .entry(object.to_string())
                        .or_default()
                        .values_mut()
                    {
                        if let RowState::Present { attrs, .. } = state {
                            attrs
                                .entry(name.clone())
                                .or_insert_with(|| existing.clone());
                        }
                    }
                }
            }
            SchemaChange::DropAttribute { name } => {
                entry.1.remove(name);
                for state in self
                    .objects
                    .entry(object.to_string())
                    .or_default()
                    .values_mut()
                {
                    if let RowState::Present { attrs, .. } = state {
                        attrs.remove(name);
                    }
                }
            }
            SchemaChange::RenameAttribute { from, to } => {
                if entry.1.remove(from) {
                    entry.1.insert(to.clone());
                }
                for state in self
                    .objects
                    .entry(object.to_string())
                    .or_default()
                    .values_mut()
                {
                    if let RowState::Present { attrs, .. } = state {
                        if let Some(v) = attrs.remove(from) {
                            attrs.insert(to.clone(), v);
                        }
                    }
                }
            }
            SchemaChange::AddObject { object, .. } => {
                self.objects.entry(object.clone()).or_default();
            }
            SchemaChange::DropObject { object } => {
                self.objects.remove(object);
            }
        }
    }

    /// Deletes tombstones below `watermark`: nothing older can arrive once
    /// the watermark passed them.
    pub fn prune_tombstones(&mut self, watermark: Lsn) {
        for rows in self.objects.values_mut() {
            rows.retain(
                |_, s| !matches!(s, RowState::Tombstone { version } if *version < watermark),
            );
        }
    }
}

/// One committed sink transaction, as the simulator's checkers read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// The LSNs of the items, in order.
    pub lsns: Vec<Lsn>,
}

/// An in-memory storing sink: guarded rows, and either the position in the
/// same transaction ([`MemSink::transactional`]) or apart
/// ([`MemSink::guarded`]). It keeps a history of commits and a count of
/// applications per source transaction for the checkers.
#[derive(Clone, Debug)]
pub struct MemSink {
    mode: PositionMode,
    /// The rows.
    pub rows: MemRows,
    /// `subscription.watermark`.
    pub watermark: Lsn,
    /// `applied`: transactions applied at or above the watermark.
    pub applied: BTreeSet<Lsn>,
    /// `subscription.schema_lsn`.
    pub schema_pos: Option<SchemaPos>,
    /// `dead_letters`: LSN to attempts.
    pub dead_letters: BTreeMap<Lsn, u32>,
    /// Times each source transaction was applied (the exactly-once counter
    /// column).
    pub apply_count: BTreeMap<Lsn, u32>,
    /// Every commit, in order.
    pub history: Vec<Commit>,
    /// The objects' shapes as [`Sink::ensure_objects`] first saw them.
    pub objects: BTreeMap<String, ObjectSchema>,
}

impl MemSink {
    /// A sink that commits rows, `applied` and the watermark atomically.
    pub fn transactional() -> MemSink {
        MemSink::new(PositionMode::InApply)
    }

    /// A sink with per-row atomicity only; positions stored apart.
    pub fn guarded() -> MemSink {
        MemSink::new(PositionMode::Separate)
    }

    fn new(mode: PositionMode) -> MemSink {
        MemSink {
            mode,
            rows: MemRows::default(),
            watermark: 0,
            applied: BTreeSet::new(),
            schema_pos: None,
            dead_letters: BTreeMap::new(),
            apply_count: BTreeMap::new(),
            history: Vec::new(),
            objects: BTreeMap::new(),
        }
    }

    /// Plants a defect (tests of the checkers only).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: SinkBug) {
        self.rows.bug = Some(bug);
    }

    /// [`Sink::apply`] with a look at the rows before each item is applied
    /// (the simulator checks what each transaction sees).
    pub fn apply_observed(
        &mut self,
        items: &[Item],
        record: &Record,
        mut before_each: impl FnMut(&Item, &MemRows),
    ) {
        for item in items {
            before_each(item, &self.rows);
            match item {
                Item::Txn(t) => {
                    for change in &t.changes {
                        self.rows.apply_change(change);
                    }
                    *self.apply_count.entry(t.lsn).or_default() += 1;
                }
                Item::Schema(s, _) => self.rows.apply_schema(&s.object, s.lsn, &s.change),
                Item::Skip { lsn } => *self.apply_count.entry(*lsn).or_default() += 1,
            }
        }
        if self.mode == PositionMode::InApply {
            self.applied.extend(record.applied.iter().copied());
            if let Some(pos) = record.schema {
                self.schema_pos = self.schema_pos.max(Some(pos));
            }
            if let Some(w) = record.watermark {
                self.set_watermark(w);
            }
        } else {
            // Schema messages are barriers: recording the last one applied
            // with it is as safe here as in a transactional sink.
            if let Some(pos) = record.schema {
                self.schema_pos = self.schema_pos.max(Some(pos));
            }
        }
        self.history.push(Commit {
            lsns: items.iter().map(Item::lsn).collect(),
        });
    }

    fn set_watermark(&mut self, w: Lsn) {
        assert!(
            w >= self.watermark,
            "stored watermark moves back from {} to {w}",
            self.watermark
        );
        self.watermark = w;
        self.applied = self.applied.split_off(&w);
        self.rows.prune_tombstones(w);
    }
}

impl Sink for MemSink {
    fn position_mode(&self) -> PositionMode {
        self.mode
    }

    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        self.apply_observed(items, record, |_, _| {});
        Ok(())
    }

    fn store_position(
        &mut self,
        watermark: Lsn,
        applied_above: &[Lsn],
        schema: Option<SchemaPos>,
    ) -> Result<(), SinkError> {
        if self.mode == PositionMode::Separate {
            self.applied = applied_above.iter().copied().collect();
        }
        self.schema_pos = self.schema_pos.max(schema);
        self.set_watermark(watermark);
        Ok(())
    }

    fn store_dead_letter(
        &mut self,
        lsn: Lsn,
        _error: &SinkError,
        attempts: u32,
    ) -> Result<(), SinkError> {
        self.dead_letters.insert(lsn, attempts);
        Ok(())
    }

    fn clear_dead_letter(&mut self, lsn: Lsn) -> Result<(), SinkError> {
        self.dead_letters.remove(&lsn);
        Ok(())
    }

    fn resume(&self) -> Result<Resume, SinkError> {
        Ok(Resume {
            watermark: self.watermark,
            applied_above: self.applied.iter().copied().collect(),
            schema: self.schema_pos,
            dead_letters: self.dead_letters.iter().map(|(&l, &a)| (l, a)).collect(),
        })
    }

    fn ensure_objects(
        &mut self,
        objects: &BTreeMap<String, ObjectSchema>,
    ) -> Result<(), SinkError> {
        for (name, shape) in objects {
            self.objects
                .entry(name.clone())
                .or_insert_with(|| shape.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(op: ChangeOp, version: Lsn) -> Change {
        Change {
            object: "posts".into(),
            op,
            key: vec![json!(1)],
            attrs: (op != ChangeOp::Delete)
                .then(|| json!({"v": version}).as_object().unwrap().clone()),
            version,
            prev_version: None,
        }
    }

    #[test]
    fn guard_and_tombstone() {
        let mut rows = MemRows::default();
        assert!(rows.apply_change(&change(ChangeOp::Insert, 5)));
        assert!(!rows.apply_change(&change(ChangeOp::Update, 4)));
        assert!(!rows.apply_change(&change(ChangeOp::Update, 5)));
        assert!(rows.apply_change(&change(ChangeOp::Delete, 9)));
        assert!(!rows.apply_change(&change(ChangeOp::Insert, 7)));
        assert!(rows.present().is_empty());
        rows.prune_tombstones(9);
        assert_eq!(rows.get("posts", "[1]").map(RowState::version), Some(9));
        rows.prune_tombstones(10);
        assert!(rows.get("posts", "[1]").is_none());
    }

    #[test]
    fn position_in_apply() {
        let mut s = MemSink::transactional();
        s.apply(
            &[Item::Skip { lsn: 4 }],
            &Record {
                applied: vec![4],
                watermark: None,
                schema: None,
            },
        )
        .unwrap();
        s.store_position(3, &[], None).unwrap();
        assert_eq!(s.resume().unwrap().applied_above, vec![4]);
        s.store_position(5, &[], None).unwrap();
        assert!(s.resume().unwrap().applied_above.is_empty());
    }

    #[test]
    fn ensure_objects_keeps_first_shape() {
        use aqueduct_publish::AttributeType;
        let shape = |ty: &str| ObjectSchema {
            attributes: vec![AttributeType {
                name: "id".into(),
                ty: ty.into(),
            }],
            key: vec!["id".into()],
        };
        let mut s = MemSink::transactional();
        let first = BTreeMap::from([("posts".to_string(), shape("bigint"))]);
        s.ensure_objects(&first).unwrap();
        s.ensure_objects(&first).unwrap();
        let other = BTreeMap::from([("posts".to_string(), shape("text"))]);
        s.ensure_objects(&other).unwrap();
        assert_eq!(s.objects, first);
    }
}
