//! Base tables: held in memory, written only through the log, rebuilt from
//! it at start. Transactions are optimistic and serializable: they read the
//! latest committed state, remember what they read (with its version, the LSN
//! of the write that produced it), and at commit are validated under the
//! commit lock: if anything they read has changed, they fail with SQLSTATE
//! 40001 and the client retries.
//!
//! Log records written here (layout in `docs/table-records.md`):
//! - a row: `Put`/`Delete`, key `r` + table id (u64 BE) + encoded key values,
//!   body the encoded row;
//! - a schema change: `Schema`, key `s` + table id, body JSON.
//!   A transaction is one atomic log batch.

mod batch;
mod ephemeral;
mod index;
mod locks;
mod overlay;
mod publications;
mod roles;
mod schema;
mod sequences;
mod table;
mod txn_deps;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::{Log, Lsn, NewRecord, Record};
use aqueduct_values::{EnumType, Value};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

pub use aqueduct_log::{MAX_BATCH_BYTES, MAX_BODY_BYTES};
pub use batch::{
    decode_record, decode_row_key, encode_batch, row_log_key, AppliedBatch, Batch, BatchBuilder,
    BatchEntry,
};
pub use ephemeral::EphemeralRows;
pub use locks::{LockError, LockTable, RowId, TxnId};
pub use publications::{
    Attribute, Mode, ObjectKind, PublicationDef, PublishOps, PublishedObject, ViewColumn,
    DEP_SLOTS_DEFAULT, DEP_SLOTS_MAX,
};
pub use roles::{
    Acl, Grantee, Privilege, Privileges, RoleDef, ScramVerifier, Security, MAX_ROLE_NAME_BYTES,
    MAX_SCRAM_ITERATIONS, MIN_SCRAM_ITERATIONS, SCRAM_ITERATIONS, SCRAM_SALT_BYTES,
};
pub use schema::{
    enum_of, parse_type, ChainDef, CheckDef, ColumnDef, ColumnSource, FkAction, ForeignKeyDef,
    Identity, IndexDef, SchemaChange, SequenceDef, TableId, TableSchema, TimeMapDef,
    SCHEMA_RECORD_VERSION,
};
pub use sequences::{
    SequenceCache, SequenceError, SequenceState, SessionSequences, SEQUENCE_RESERVE_VALUES,
};
pub use table::{matches, Key, Row, RowVersion, Table};
pub use txn_deps::{DepRead, TxnDeps, TxnOrigin, ACTING_USER_BYTES_MAX};

mod snapshot_read;
pub use snapshot_read::{RowsAsk, WeightedRows};

/// Errors of the table layer, each with its SQLSTATE.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// 40001: a concurrent transaction changed what this one read.
    #[error("could not serialize access due to a concurrent update; retry the transaction")]
    SerializationFailure,
    /// 23505.
    #[error("duplicate key value violates unique constraint \"{constraint}\"")]
    UniqueViolation { constraint: String, detail: String },
    /// 58030 / 53100: the log could not take the write.
    #[error("{0}")]
    Log(#[from] aqueduct_log::Error),
    /// A wait for a row lock ended by the statement's interruption.
    #[error("{0}")]
    Interrupted(aqueduct_expr::SqlError),
    /// A check the committer asked for failed under the commit lock
    /// ([`Database::commit_checked`]).
    #[error("{0}")]
    Refused(aqueduct_expr::SqlError),
    /// XX001: a record in the log does not decode.
    #[error("log record at LSN {lsn} is not a valid table record: {reason}")]
    BadRecord { lsn: Lsn, reason: String },
}

impl From<TableError> for aqueduct_expr::SqlError {
    fn from(e: TableError) -> aqueduct_expr::SqlError {
        use aqueduct_expr::SqlError;
        let code = e.sqlstate();
        match e {
            TableError::UniqueViolation { constraint, detail } => SqlError::new(
                code,
                format!("duplicate key value violates unique constraint \"{constraint}\""),
            )
            .with_detail(detail),
            TableError::SerializationFailure => SqlError::new(code, e.to_string())
                .with_hint("the transaction may succeed if retried"),
            TableError::Interrupted(e) | TableError::Refused(e) => e,
            other => SqlError::new(code, other.to_string()),
        }
    }
}

impl TableError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            TableError::SerializationFailure => "40001",
            TableError::UniqueViolation { .. } => "23505",
            TableError::Log(aqueduct_log::Error::DiskFull { .. }) => "53100",
            TableError::Log(aqueduct_log::Error::Invalid(_)) => "54000",
            TableError::Log(_) => "58030",
            TableError::BadRecord { .. } => "XX001",
            TableError::Interrupted(e) | TableError::Refused(e) => e.code,
        }
    }
}

/// All tables, by id and by name.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub tables: BTreeMap<TableId, Table>,
    by_name: HashMap<String, TableId>,
    next_table_id: TableId,
    /// Maintained views by id (creation order): name and defining SQL.
    pub views: BTreeMap<TableId, (String, String)>,
    /// `COMMENT ON`: by object and column (0 for the object itself, else
    /// the column's 1-based position).
    pub comments: BTreeMap<(TableId, u32), String>,
    /// Time maps by id.
    pub time_maps: BTreeMap<TableId, TimeMapDef>,
    /// Transaction chains by id (`docs/chains.md`).
    pub chains: BTreeMap<TableId, ChainDef>,
    /// Roles, owners and privileges (`roles.rs`).
    pub security: Security,
    /// Sequences by id, as the log left them.
    pub sequences: BTreeMap<TableId, SequenceState>,
    /// Enum types by id.
    pub types: BTreeMap<TableId, Arc<EnumType>>,
    /// Publications by id (`docs/publications.md`).
    pub publications: BTreeMap<TableId, PublicationDef>,
    /// LSN of the last write applied: the tables are exactly as of it.
    lsn: Lsn,
    /// Counts the schema changes applied (sequence positions aside): a
    /// transaction that changes the schema commits only if no other one
    /// did since it began to.
    schema_version: u64,
}

impl Catalog {
    /// Builds the indexes a replay deferred ([`Catalog::replay_batch`]),
    /// the largest tables first, on as many threads as there are cores.
    fn finish_replay(&mut self) {
        let mut deferred: Vec<&mut Table> = self
            .tables
            .values_mut()
            .filter(|t| t.indexes_deferred())
            .collect();
        deferred.sort_by_key(|t| std::cmp::Reverse(t.len()));
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(deferred.len());
        let work = Mutex::new(deferred.into_iter());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let Some(t) = work.lock().next() else { break };
                    t.build_indexes();
                });
            }
        });
    }

    /// How many schema changes have been applied: equal numbers mean the
    /// same schema, so what is derived from the schema can be kept by it.
    pub fn schema_version(&self) -> u64 {
        self.schema_version
    }

    /// The LSN the tables are as of (every write up to it is applied).
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Whether [`Database::rows_at`] on these columns is a lookup (or a
    /// range of a key or index) rather than a scan.
    pub fn has_lookup(&self, table: TableId, columns: &[usize]) -> bool {
        self.table_by_id(table)
            .is_some_and(|t| t.has_lookup(columns))
    }
    /// The id of the view called `name`.
    pub fn view(&self, name: &str) -> Option<TableId> {
        self.views
            .iter()
            .find(|(_, (n, _))| n == name)
            .map(|(id, _)| *id)
    }

    /// The sequence called `name`.
    pub fn sequence(&self, name: &str) -> Option<&SequenceState> {
        self.sequences.values().find(|s| s.def.name == name)
    }

    /// The enum type called `name`.
    pub fn enum_type(&self, name: &str) -> Option<&Arc<EnumType>> {
        self.types.values().find(|t| t.name == name)
    }

    /// The publication named `name`.
    pub fn publication(&self, name: &str) -> Option<&PublicationDef> {
        self.publications.values().find(|p| p.name == name)
    }

    /// The time map called `name`.
    pub fn chain(&self, name: &str) -> Option<&ChainDef> {
        self.chains.values().find(|c| c.name == name)
    }

    pub fn time_map(&self, name: &str) -> Option<&TimeMapDef> {
        self.time_maps.values().find(|d| d.name == name)
    }

    pub fn table(&self, name: &str) -> Option<&Table> {
        self.by_name.get(name).and_then(|id| self.tables.get(id))
    }

    pub fn table_by_id(&self, id: TableId) -> Option<&Table> {
        self.tables.get(&id)
    }

    /// The id the next `CREATE TABLE` will get.
    pub fn next_table_id(&self) -> TableId {
        self.next_table_id.max(1)
    }

    /// Finds the table holding index `name`.
    pub fn index_owner(&self, name: &str) -> Option<&Table> {
        self.tables
            .values()
            .find(|t| t.schema.indexes.iter().any(|i| i.name == name))
    }

    /// Applies a schema change (replay, commit, and catalogs built in memory).
    pub fn apply_schema(&mut self, change: SchemaChange) {
        if !matches!(
            change,
            SchemaChange::ReserveSequence { .. } | SchemaChange::SetSequence { .. }
        ) {
            self.schema_version += 1;
        }
        if self.apply_security(&change) {
            return;
        }
        match change {
            SchemaChange::CreateTable(schema) => {
                self.next_table_id = self.next_table_id.max(schema.id + 1);
                self.by_name.insert(schema.name.clone(), schema.id);
                self.tables.insert(schema.id, Table::new(schema));
            }
            SchemaChange::DropTable { id } => {
                if let Some(t) = self.tables.remove(&id) {
                    self.by_name.remove(&t.schema.name);
                }
                self.drop_comments(id);
                // As PostgreSQL: a dropped table leaves every publication.
                for p in self.publications.values_mut() {
                    p.without(id);
                }
            }
            SchemaChange::CreateIndex { table, index } => {
                if let Some(t) = self.tables.get_mut(&table) {
                    t.add_index(index);
                }
            }
            SchemaChange::DropIndex { table, name } => {
                if let Some(t) = self.tables.get_mut(&table) {
                    t.drop_index(&name);
                }
            }
            SchemaChange::CreateView { id, name, sql } => {
                self.next_table_id = self.next_table_id.max(id + 1);
                self.views.insert(id, (name, sql));
            }
            SchemaChange::AlterView { id, sql } => {
                if let Some(v) = self.views.get_mut(&id) {
                    v.1 = sql;
                }
            }
            SchemaChange::DropView { id } => {
                self.views.remove(&id);
                self.drop_comments(id);
                // As a dropped table: a dropped view leaves every publication.
                for p in self.publications.values_mut() {
                    p.without(id);
                }
            }
            SchemaChange::CreateTimeMap(def) => {
                self.next_table_id = self.next_table_id.max(def.id + 1);
                self.time_maps.insert(def.id, def);
            }
            SchemaChange::DropTimeMap { id } => {
                self.time_maps.remove(&id);
            }
            SchemaChange::CreateChain(def) => {
                self.next_table_id = self.next_table_id.max(def.id + 1);
                self.chains.insert(def.id, def);
            }
            SchemaChange::DropChain { id } => {
                self.chains.remove(&id);
            }
            SchemaChange::AlterTable {
                schema, sources, ..
            } => {
                // A column's comment follows the column to its new place.
                let id = schema.id;
                let moved: Vec<((TableId, u32), String)> = sources
                    .iter()
                    .enumerate()
                    .filter_map(|(new, s)| match s {
                        ColumnSource::Old(old) => self
                            .comments
                            .get(&(id, *old as u32 + 1))
                            .map(|c| ((id, new as u32 + 1), c.clone())),
                        ColumnSource::Value(_) => None,
                    })
                    .collect();
                self.comments
                    .retain(|(object, column), _| *object != id || *column == 0);
                self.comments.extend(moved);
                for p in self.publications.values_mut() {
                    p.follow_alter(id, &sources);
                }
                if let Some(t) = self.tables.get_mut(&schema.id) {
                    if t.schema.name != schema.name {
                        self.by_name.remove(&t.schema.name);
                        self.by_name.insert(schema.name.clone(), schema.id);
                    }
                    t.alter(schema, &sources);
                }
            }
            SchemaChange::SetConstraints {
                table,
                checks,
                foreign_keys,
            } => {
                if let Some(t) = self.tables.get_mut(&table) {
                    t.set_constraints(checks, foreign_keys);
                }
            }
            SchemaChange::CreateType(t) => {
                self.next_table_id = self.next_table_id.max(t.id + 1);
                self.types.insert(t.id, Arc::new(t));
            }
            SchemaChange::AlterType(t) => {
                let t = Arc::new(t);
                for table in self.tables.values_mut() {
                    table.retype_enum(&t);
                }
                self.types.insert(t.id, t);
            }
            SchemaChange::DropType { id } => {
                self.types.remove(&id);
                self.drop_comments(id);
            }
            SchemaChange::Comment {
                object,
                column,
                text,
            } => match text {
                Some(text) => {
                    self.comments.insert((object, column), text);
                }
                None => {
                    self.comments.remove(&(object, column));
                }
            },
            SchemaChange::CreatePublication(def) | SchemaChange::AlterPublication(def) => {
                self.next_table_id = self.next_table_id.max(def.id + 1);
                self.publications.insert(def.id, def);
            }
            SchemaChange::DropPublication { id } => {
                self.publications.remove(&id);
            }
            SchemaChange::CreateSequence(def) => {
                self.next_table_id = self.next_table_id.max(def.id + 1);
                self.sequences.insert(def.id, SequenceState::new(def));
            }
            SchemaChange::AlterSequence(def) => {
                if let Some(s) = self.sequences.get_mut(&def.id) {
                    // Values in hand stay valid (the next adds the new
                    // increment) unless the direction turns.
                    let turned = (s.def.increment > 0) != (def.increment > 0);
                    s.def = def;
                    if turned {
                        let (value, is_called) = (s.value, s.is_called);
                        s.set(value, is_called);
                    }
                }
            }
            SchemaChange::DropSequence { id } => {
                self.sequences.remove(&id);
                self.drop_comments(id);
            }
            SchemaChange::SetSequence {
                id,
                value,
                is_called,
            } => {
                if let Some(s) = self.sequences.get_mut(&id) {
                    s.set(value, is_called);
                }
            }
            SchemaChange::ReserveSequence {
                id,
                upto,
                generation,
            } => {
                if let Some(s) = self.sequences.get_mut(&id) {
                    s.reserve(upto, generation);
                }
            }
            // Applied by `apply_security` above.
            SchemaChange::CreateRole(_)
            | SchemaChange::AlterRole(_)
            | SchemaChange::DropRole { .. }
            | SchemaChange::SetOwner { .. }
            | SchemaChange::Grant { .. }
            | SchemaChange::Revoke { .. } => {}
        }
    }

    fn drop_comments(&mut self, object: TableId) {
        self.comments.retain(|(o, _), _| *o != object);
    }

    /// Applies a row write (replay, commit, and catalogs built in memory).
    /// Returns the change as old and new row (`None` when nothing changed).
    pub fn apply_row(
        &mut self,
        table: TableId,
        key: Key,
        row: Option<Row>,
        lsn: Lsn,
    ) -> Option<RowChange> {
        self.write_row(table, key, row.map(Arc::new), lsn, Track::Changes)
    }

    /// [`Catalog::apply_row`], reporting the change only when `track`
    /// says so (a restart's replay has nobody to report it to, and moves
    /// the key into the table uncopied).
    pub(crate) fn write_row(
        &mut self,
        table: TableId,
        key: Key,
        row: Option<Arc<Row>>,
        lsn: Lsn,
        track: Track,
    ) -> Option<RowChange> {
        // Rows of a dropped table are skipped: ids are never reused.
        let t = self.tables.get_mut(&table)?;
        if t.schema.ephemeral {
            // Published, never stored: the consumers see an insert, the
            // table keeps nothing. Nothing deletes an ephemeral row, and a
            // delete record of one (there are none) would change nothing.
            let row = canonical_jsonb(t.schema.columns.iter().map(|c| &c.ty), row?);
            t.note_ephemeral(&key);
            return Some(RowChange {
                table,
                key,
                lsn,
                prev_lsn: None,
                old: None,
                new: Some(row),
            });
        }
        if track == Track::Nothing {
            // A replay: indexes are built once it ends (`finish_replay`).
            t.defer_indexes();
        }
        let (key, prev_lsn, old, new) = match row {
            Some(row) => {
                let new = canonical_jsonb(t.schema.columns.iter().map(|c| &c.ty), row);
                let kept = match track {
                    Track::Changes => Some(key.clone()),
                    Track::Nothing => None,
                };
                let old = t.put_version(key, new.clone(), lsn);
                let prev_lsn = old.as_ref().map(|o| o.lsn);
                (kept?, prev_lsn, old.map(|o| o.row), Some(new))
            }
            None => {
                let prev_lsn = t.get(&key).map(|v| v.lsn);
                let old = t.delete(&key, lsn);
                (key, prev_lsn, old, None)
            }
        };
        if old.is_none() && new.is_none() {
            return None;
        }
        Some(RowChange {
            table,
            key,
            lsn,
            prev_lsn,
            old,
            new,
        })
    }
}

/// Whether writing a row reports its change.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Track {
    Changes,
    Nothing,
}

/// A row whose `jsonb` columns hold jsonb values: a row written before
/// jsonb had a canonical form of its own kept the text as given (row tag
/// 11), which is parsed here so every reader sees one form.
fn canonical_jsonb<'t>(
    types: impl Iterator<Item = &'t aqueduct_values::DataType> + Clone,
    mut row: Arc<Row>,
) -> Arc<Row> {
    let is_text_json = |(v, ty): (&Value, &aqueduct_values::DataType)| {
        *ty == aqueduct_values::DataType::Jsonb && matches!(v, Value::Json(_))
    };
    // Most rows have no jsonb column: they are shared as they are.
    if !row.iter().zip(types.clone()).any(is_text_json) {
        return row;
    }
    for (v, ty) in Arc::make_mut(&mut row).iter_mut().zip(types) {
        if is_text_json((v, ty)) {
            let old = std::mem::replace(v, Value::Null);
            *v = match old.clone().coerce(ty) {
                Ok(j) => j,
                // Validated when written; kept as it was if it no longer parses.
                Err(_) => old,
            };
        }
    }
    row
}

/// One row changed by a commit: what downstream consumers (views, the
/// change feed) need.
#[derive(Clone, Debug)]
pub struct RowChange {
    pub table: TableId,
    /// The row's key (primary-key values, or the hidden row id).
    pub key: Key,
    /// The LSN of the write.
    pub lsn: Lsn,
    /// The LSN of the row's previous version (`None` for an insert).
    pub prev_lsn: Option<Lsn>,
    pub old: Option<Arc<Row>>,
    pub new: Option<Arc<Row>>,
}

/// Something told about every committed batch: views, releases, the change
/// feed. Consumers are called under the commit lock, in commit order, right
/// after the batch is applied, with the tables as of the batch's last LSN;
/// so they must not wait for anything a commit holds (a consumer that must
/// slow writers down, as the views' bounded queue does, blocks here, and
/// that is the backpressure).
pub trait CommitConsumer: Send + Sync {
    fn committed(&self, batch: &AppliedBatch, catalog: &Catalog);

    /// Called by the committing thread once the commit lock is released,
    /// after one or more `committed` calls: the place for work that need
    /// not hold up the next commit, such as waking readers.
    fn after_release(&self) {}

    /// Every commit up to `lsn` is acknowledged (durable, and on a member
    /// of a group committed by the group): what no crash can undo. Called
    /// with `lsn` growing, at least once for each acknowledged commit.
    fn visible(&self, _lsn: Lsn) {}
}

/// One change a transaction makes.
#[derive(Clone, Debug)]
pub enum Write {
    Put {
        table: TableId,
        key: Key,
        row: Arc<Row>,
    },
    Delete {
        table: TableId,
        key: Key,
    },
    Schema(SchemaChange),
}

/// Something a transaction read, and the version it saw.
#[derive(Clone, Debug)]
enum Read {
    /// A key looked up directly; `None` when the key was absent.
    Row {
        table: TableId,
        key: Key,
        version: Option<Lsn>,
    },
    /// A scan or any read by predicate: the whole table's version.
    Table { table: TableId, version: Lsn },
    /// The schema as a transaction that changes it found it.
    Schema { version: u64 },
    /// The columns and constraints of a table the transaction writes.
    Shape { table: TableId, shape: u64 },
}

/// A transaction's writes as of a `SAVEPOINT`.
#[derive(Clone, Debug)]
pub struct TxnSavepoint {
    writes: usize,
    log_bytes: usize,
    schema_changes: usize,
    deferred: usize,
    overlay: overlay::Overlay,
}

/// A foreign key check put off to the end of the transaction: the
/// constraint is `DEFERRABLE` and deferred (`INITIALLY DEFERRED`, `SET
/// CONSTRAINTS`), and failed when its statement ended.
#[derive(Clone, Debug, PartialEq)]
pub struct DeferredCheck {
    /// The referencing table.
    pub table: TableId,
    /// The foreign key's name.
    pub constraint: String,
    pub kind: DeferredKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DeferredKind {
    /// A row references these values, which no row of the referenced
    /// table had.
    References(Vec<Value>),
    /// The referenced key went while rows still referenced it.
    Referenced(Vec<Value>),
}

/// `SET CONSTRAINTS`: which deferrable constraints are deferred in this
/// transaction, over what each declares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConstraintModes {
    /// `SET CONSTRAINTS ALL ...`: `true` deferred.
    pub all: Option<bool>,
    /// `SET CONSTRAINTS name, ... ...`, later ones last.
    pub named: Vec<(String, bool)>,
}

impl ConstraintModes {
    /// Whether a constraint called `name`, deferrable or not, initially
    /// deferred or not, is deferred now.
    pub fn deferred(&self, name: &str, deferrable: bool, initially_deferred: bool) -> bool {
        if !deferrable {
            return false;
        }
        if let Some((_, d)) = self.named.iter().rev().find(|(n, _)| n == name) {
            return *d;
        }
        self.all.unwrap_or(initially_deferred)
    }

    /// Takes `SET CONSTRAINTS names|ALL deferred`.
    pub fn set(&mut self, names: Option<&[String]>, deferred: bool) {
        match names {
            None => {
                self.all = Some(deferred);
                self.named.clear();
            }
            Some(names) => {
                for n in names {
                    self.named.retain(|(m, _)| m != n);
                    self.named.push((n.clone(), deferred));
                }
            }
        }
    }
}

/// A transaction's isolation level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Each statement reads the latest committed state; rows written are
    /// locked until the end; reads are not validated at commit.
    ReadCommitted,
    /// One snapshot for the whole transaction; rows written are locked,
    /// and one changed by another transaction since the snapshot fails
    /// the write with 40001 (first updater wins).
    RepeatableRead,
    /// Optimistic and serializable: reads are validated at commit.
    #[default]
    Serializable,
}

impl Isolation {
    pub fn parse(s: &str) -> Option<Isolation> {
        Some(match s.trim().to_lowercase().replace('_', " ").as_str() {
            "read committed" | "read uncommitted" => Isolation::ReadCommitted,
            "repeatable read" => Isolation::RepeatableRead,
            "serializable" => Isolation::Serializable,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
            Isolation::Serializable => "serializable",
        }
    }

    /// Whether the transaction locks rows rather than validating reads.
    pub fn locks(self) -> bool {
        self != Isolation::Serializable
    }
}

/// A transaction's reads and buffered writes.
#[derive(Clone, Debug, Default)]
pub struct Txn {
    /// Its number in the lock table (0 for a transaction that locks nothing).
    pub id: TxnId,
    pub isolation: Isolation,
    /// Rows to lock besides those written: those foreign keys reference.
    lock_wanted: Vec<RowId>,
    reads: Vec<Read>,
    writes: Vec<Write>,
    /// Bytes of log `writes` take ([`Txn::log_bytes`]).
    log_bytes: usize,
    /// How many of `writes` change the schema ([`Txn::changes_schema`]).
    schema_changes: usize,
    /// The transaction's own view of keys it wrote (read-your-writes).
    overlay: overlay::Overlay,
    /// The furthest sequence reservation among `writes`, by sequence.
    reserved: HashMap<TableId, (i64, u64)>,
    /// Foreign key checks put off to the end of the transaction.
    pub deferred: Vec<DeferredCheck>,
    /// `SET CONSTRAINTS` in this transaction.
    pub constraint_modes: ConstraintModes,
    /// Its session and acting user, for publications' causal order.
    pub origin: TxnOrigin,
}

impl Txn {
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    pub fn is_read_only(&self) -> bool {
        self.writes.is_empty()
    }

    /// What the transaction read, for its `txn_deps` record: the rows it
    /// looked up and did not write, and the tables it scanned.
    pub fn deps(&self) -> TxnDeps {
        let written: std::collections::HashSet<(TableId, &Key)> = self
            .writes
            .iter()
            .filter_map(|w| match w {
                Write::Put { table, key, .. } | Write::Delete { table, key } => Some((*table, key)),
                Write::Schema(_) => None,
            })
            .collect();
        let reads = self
            .reads
            .iter()
            .filter_map(|r| match r {
                Read::Row {
                    table,
                    key,
                    version,
                } if !written.contains(&(*table, key)) => Some(DepRead::Row {
                    table: *table,
                    hash: aqueduct_publish::dep_hash(&row_log_key(*table, key)),
                    present: version.is_some(),
                }),
                Read::Table { table, .. } => Some(DepRead::Table(*table)),
                _ => None,
            })
            .collect();
        TxnDeps::new(self.origin.clone(), reads)
    }

    /// Records a point read of `key` in `table` as it is in `catalog`.
    pub fn note_row_read(&mut self, catalog: &Catalog, table: TableId, key: &Key) {
        if self.overlay.contains(table, key) {
            return;
        }
        if let Some(t) = catalog.table_by_id(table) {
            self.reads.push(Read::Row {
                table,
                key: key.clone(),
                version: t.get(key).map(|r| r.lsn),
            });
        }
    }

    /// Records that this transaction's schema changes were made against
    /// the schema as it is in `catalog` (once per transaction).
    pub fn note_schema_read(&mut self, catalog: &Catalog) {
        if !self.reads.iter().any(|r| matches!(r, Read::Schema { .. })) {
            self.reads.push(Read::Schema {
                version: catalog.schema_version,
            });
        }
    }

    /// Records the columns and constraints of `table`, which the
    /// transaction writes: it commits only if they did not change.
    pub fn note_shape(&mut self, catalog: &Catalog, table: TableId) {
        let Some(t) = catalog.table_by_id(table) else {
            return;
        };
        if self
            .reads
            .iter()
            .rev()
            .take(8)
            .any(|r| matches!(r, Read::Shape { table: x, .. } if *x == table))
        {
            return;
        }
        self.reads.push(Read::Shape {
            table,
            shape: t.shape,
        });
    }

    /// Whether the transaction changes the schema (`CREATE`, `DROP`, ...;
    /// sequence positions aside).
    pub fn changes_schema(&self) -> bool {
        self.schema_changes > 0
    }

    /// The catalog as this transaction sees it: `committed` with the
    /// transaction's own schema changes applied (its rows are in its
    /// overlay). `None` when it changes no schema.
    pub fn pending_catalog(&self, committed: &Catalog) -> Option<Catalog> {
        if !self.changes_schema() {
            return None;
        }
        let mut catalog = committed.clone();
        for w in &self.writes {
            if let Write::Schema(c) = w {
                catalog.apply_schema(c.clone());
            }
        }
        Some(catalog)
    }

    /// Records a scan (a read by predicate) of `table`.
    pub fn note_table_read(&mut self, catalog: &Catalog, table: TableId) {
        if let Some(t) = catalog.table_by_id(table) {
            self.reads.push(Read::Table {
                table,
                version: t.version,
            });
        }
    }

    /// This transaction's own version of a key, if it wrote one:
    /// `Some(None)` for a key it deleted.
    pub fn own(&self, table: TableId, key: &Key) -> Option<Option<&Row>> {
        self.overlay.get(table, key).map(|r| r.map(|r| &**r))
    }

    /// Rows this transaction wrote to `table` (for scans to merge in).
    pub fn own_rows(&self, table: TableId) -> impl Iterator<Item = (&Key, Option<&Row>)> {
        self.overlay.rows_of(table)
    }

    pub fn put(&mut self, table: TableId, key: Key, row: Row) {
        let row = Arc::new(row);
        self.overlay.insert(table, key.clone(), Some(row.clone()));
        self.push_write(Write::Put { table, key, row });
    }

    /// Room for `more` rows written to `table` (a bulk insert about to
    /// write them).
    pub fn reserve(&mut self, table: TableId, more: usize) {
        self.writes.reserve(more);
        self.overlay.reserve(table, more);
    }

    pub fn delete(&mut self, table: TableId, key: Key) {
        self.overlay.insert(table, key.clone(), None);
        self.push_write(Write::Delete { table, key });
    }

    pub fn schema(&mut self, change: SchemaChange) {
        self.push_write(Write::Schema(change));
    }

    fn push_write(&mut self, w: Write) {
        self.log_bytes += batch::write_record_len(&w);
        if matches!(&w, Write::Schema(c) if !matches!(
            c,
            SchemaChange::ReserveSequence { .. } | SchemaChange::SetSequence { .. }
        )) {
            self.schema_changes += 1;
        }
        self.writes.push(w);
    }

    /// Bytes of log the transaction's writes take so far (see
    /// [`Txn::check_size`]).
    pub fn log_bytes(&self) -> usize {
        self.log_bytes
    }

    /// 54000 once the writes take more log than one commit may append
    /// ([`MAX_BATCH_BYTES`]): a long load learns it as it grows, not at
    /// its commit.
    pub fn check_size(&self) -> Result<(), aqueduct_expr::SqlError> {
        if self.log_bytes <= MAX_BATCH_BYTES {
            return Ok(());
        }
        Err(aqueduct_expr::SqlError::new(
            "54000",
            format!(
                "transaction too large: its writes take {} bytes of log, more than one commit may append ({MAX_BATCH_BYTES} bytes, MAX_BATCH_BYTES)",
                self.log_bytes
            ),
        )
        .with_hint("commit in smaller transactions: split a large COPY into several COPY statements"))
    }

    /// Asks for `row` to be locked with the statement's writes (READ
    /// COMMITTED and REPEATABLE READ).
    pub fn want_lock(&mut self, table: TableId, key: Key) {
        if self.isolation.locks() {
            self.lock_wanted.push((table, key));
        }
    }

    /// The rows the writes since `from` (an index into the writes, from
    /// [`Txn::write_count`]) touch, and the rows asked for with
    /// [`Txn::want_lock`] (which it forgets).
    pub fn rows_to_lock(&mut self, from: usize) -> Vec<RowId> {
        let mut rows: Vec<RowId> = std::mem::take(&mut self.lock_wanted);
        for w in &self.writes[from.min(self.writes.len())..] {
            if let Write::Put { table, key, .. } | Write::Delete { table, key } = w {
                rows.push((*table, key.clone()));
            }
        }
        rows.sort();
        rows.dedup();
        rows
    }

    pub fn write_count(&self) -> usize {
        self.writes.len()
    }

    /// The rows this transaction writes.
    /// The tables this transaction wrote rows of.
    pub fn written_tables(&self) -> Vec<TableId> {
        let mut out: Vec<TableId> = self.overlay.tables().collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn written_rows(&self) -> impl Iterator<Item = (TableId, &Key)> {
        self.overlay.iter().map(|(t, k, _)| (t, k))
    }

    /// Reserves values of sequence `id` up to `upto` with this
    /// transaction's commit, unless it already does.
    pub fn reserve_sequence(&mut self, id: TableId, upto: i64, generation: u64) {
        if self.reserved.get(&id) == Some(&(upto, generation)) {
            return;
        }
        self.reserved.insert(id, (upto, generation));
        self.push_write(Write::Schema(SchemaChange::ReserveSequence {
            id,
            upto,
            generation,
        }));
    }

    /// Marks the present state of the transaction's writes (`SAVEPOINT`).
    pub fn savepoint(&self) -> TxnSavepoint {
        TxnSavepoint {
            writes: self.writes.len(),
            log_bytes: self.log_bytes,
            schema_changes: self.schema_changes,
            deferred: self.deferred.len(),
            overlay: self.overlay.clone(),
        }
    }

    /// Undoes the writes made since `at` (`ROLLBACK TO SAVEPOINT`). The
    /// reads made since stay in the read set: the transaction saw them,
    /// and keeping them can only make `COMMIT` fail more often, never let
    /// a conflict through.
    pub fn rollback_to(&mut self, at: &TxnSavepoint) {
        assert!(
            at.writes <= self.writes.len(),
            "a savepoint from the future"
        );
        // Sequence values handed out since stay handed out: their
        // reservations are kept.
        let kept: Vec<Write> = self.writes[at.writes..]
            .iter()
            .filter(|w| matches!(w, Write::Schema(SchemaChange::ReserveSequence { .. })))
            .cloned()
            .collect();
        self.writes.truncate(at.writes);
        self.log_bytes = at.log_bytes;
        self.schema_changes = at.schema_changes;
        for w in kept {
            self.push_write(w);
        }
        self.deferred.truncate(at.deferred);
        self.overlay = at.overlay.clone();
    }

    fn validate(&self, catalog: &Catalog) -> Result<(), TableError> {
        // Tables this transaction made: nobody else can have written them.
        let created: HashSet<TableId> = self
            .writes
            .iter()
            .filter_map(|w| match w {
                Write::Schema(SchemaChange::CreateTable(t)) => Some(t.id),
                _ => None,
            })
            .collect();
        // Tables it altered: its own shape reads may be of the altered
        // table; a concurrent change fails its schema read instead.
        let altered: HashSet<TableId> = self
            .writes
            .iter()
            .filter_map(|w| match w {
                Write::Schema(SchemaChange::AlterTable { schema, .. }) => Some(schema.id),
                Write::Schema(SchemaChange::SetConstraints { table, .. }) => Some(*table),
                _ => None,
            })
            .collect();
        for r in &self.reads {
            let ok = match r {
                Read::Row { table, .. } | Read::Table { table, .. } if created.contains(table) => {
                    true
                }
                // Read committed and repeatable read do not validate reads:
                // the rows they write are locked instead.
                Read::Row { .. } | Read::Table { .. } if self.isolation.locks() => true,
                Read::Schema { version } => catalog.schema_version == *version,
                Read::Shape { table, .. } if created.contains(table) || altered.contains(table) => {
                    true
                }
                Read::Shape { table, shape } => catalog
                    .table_by_id(*table)
                    .is_some_and(|t| t.shape == *shape),
                // A key absent when read and absent now reads the same at
                // the commit, where the transaction is serialized: inserts
                // and deletes of other keys do not conflict with it.
                Read::Row {
                    table,
                    key,
                    version,
                } => match catalog.table_by_id(*table) {
                    None => false,
                    Some(t) => t.get(key).map(|r| r.lsn) == *version,
                },
                Read::Table { table, version } => catalog
                    .table_by_id(*table)
                    .is_some_and(|t| t.version == *version),
            };
            if !ok {
                return Err(TableError::SerializationFailure);
            }
        }
        Ok(())
    }
}

/// The catalog a transaction reads and binds against ([`Database::read_in`]).
pub enum TxnCatalog<'a> {
    Committed(RwLockReadGuard<'a, Catalog>),
    Pending(Box<Catalog>),
}

impl std::ops::Deref for TxnCatalog<'_> {
    type Target = Catalog;

    fn deref(&self) -> &Catalog {
        match self {
            TxnCatalog::Committed(c) => c,
            TxnCatalog::Pending(c) => c,
        }
    }
}

/// Counters the server exports on `/metrics`.
#[derive(Debug, Default)]
pub struct TableMetrics {
    pub commits: AtomicU64,
    pub serialization_failures: AtomicU64,
    pub rows_written: AtomicU64,
}

/// What replaying the log at start found.
#[derive(Clone, Debug, Default)]
pub struct ReplayReport {
    pub records: u64,
    pub last_lsn: Lsn,
    pub tables: usize,
    pub rows: usize,
    pub elapsed: Duration,
}

/// The base tables, backed by the log.
pub struct Database {
    log: Log,
    catalog: RwLock<Catalog>,
    /// The catalog's [`Catalog::schema_version`], stored whenever a batch
    /// is applied: what a reader that keeps something by schema version
    /// compares without taking the catalog's lock.
    schema_version: AtomicU64,
    /// Serializes validation, log append and apply of commits.
    commit: Mutex<()>,
    /// LSN of the last write applied to the catalog.
    applied: AtomicU64,
    /// The last LSN the consumers were told is acknowledged
    /// ([`CommitConsumer::visible`]).
    told_visible: AtomicU64,
    /// Signalled when `applied` moves (for readers of a follower waiting
    /// for an LSN).
    applied_moved: (Mutex<()>, parking_lot::Condvar),
    /// Hidden row ids, unique across all tables and transactions.
    next_rowid: std::sync::atomic::AtomicI64,
    consumers: RwLock<Vec<Arc<dyn CommitConsumer>>>,
    /// Sequence values in hand.
    pub sequences: SequenceCache,
    /// Row locks of READ COMMITTED and REPEATABLE READ transactions.
    pub locks: LockTable,
    next_txn: AtomicU64,
    pub metrics: TableMetrics,
    /// Set on a follower: why it takes no write of its own (every write
    /// comes from the members it follows, through `apply_appended`).
    read_only: RwLock<Option<String>>,
    /// Set on a member of a Raft group: what proposes its commits to the
    /// group and says when the group committed them.
    replicator: RwLock<Option<Arc<dyn Replicator>>>,
}

/// A group that replicates the log (a Raft group, `docs/replication.md`).
/// On its leader a commit is appended and applied as on a single server,
/// then proposed to the group, and acknowledged (and shown to readers)
/// only once the group committed it.
pub trait Replicator: Send + Sync {
    /// Before the commit lock is taken: waits (boundedly) until this member
    /// may write, if it leads but cannot yet. Never under the lock, which
    /// applying the group's commits needs.
    fn await_writable(&self);
    /// Under the commit lock, before a local write is appended: refuses
    /// it where this member may not write (not the leader, or not yet
    /// applied what earlier leaders committed). Does not wait.
    fn may_write(&self) -> Result<(), TableError>;
    /// Under the commit lock, after `records` were appended at their LSNs
    /// and before they are applied: proposes them to the group, in commit
    /// order. An error leaves them unproposed (the caller removes them).
    fn propose(&self, records: Vec<Record>) -> Result<(), TableError>;
    /// Waits until the group committed every record up to `lsn`; an error
    /// says the write's outcome is unknown (40003).
    fn await_committed(&self, lsn: Lsn) -> Result<(), TableError>;
    /// Whether the group committed every record up to `lsn`.
    fn is_committed(&self, lsn: Lsn) -> bool;
    /// The last LSN the group committed, as far as this member knows.
    fn committed_lsn(&self) -> Lsn;
    /// The log refused a local write (its disk failed): the member stops
    /// leading, so that the group elects a leader that can write.
    fn log_failed(&self, why: &str);
}

/// Batches a replay holds decoded, waiting to be applied, at most.
const REPLAY_QUEUE_BATCHES: usize = 16;
/// Records between two calls of a replay's progress callback.
const REPLAY_PROGRESS_EVERY: u64 = 65_536;

/// Reads and decodes `log`'s records up to `until` into batches for
/// [`Database::open_until`] to apply; returns how many records it read.
fn decode_log(
    log: &Log,
    until: Lsn,
    to_apply: std::sync::mpsc::SyncSender<Batch>,
) -> Result<u64, TableError> {
    let mut batches = BatchBuilder::default();
    let mut records = 0;
    let mut bad = None;
    log.replay(0, |r| {
        if r.lsn > until {
            return Ok(());
        }
        match batches.push(&r) {
            Ok(Some(batch)) => {
                if to_apply.send(batch).is_err() {
                    return Err(aqueduct_log::Error::Invalid("the replay stopped".into()));
                }
            }
            Ok(None) => {}
            Err(reason) => {
                bad = Some(TableError::BadRecord { lsn: r.lsn, reason });
                return Err(aqueduct_log::Error::Invalid("stop".into()));
            }
        }
        records += 1;
        Ok(())
    })
    .map_err(|e| bad.take().unwrap_or(TableError::Log(e)))?;
    Ok(records)
}

impl Database {
    /// Rebuilds the tables by replaying `log`. `progress(lsn)` is called now
    /// and then with the replayed LSN.
    pub fn open(
        log: Log,
        progress: &mut dyn FnMut(Lsn),
    ) -> Result<(Database, ReplayReport), TableError> {
        Database::open_until(log, None, progress)
    }

    /// [`Database::open`] replaying only the records up to `until` (a
    /// member of a Raft group: what its group committed; the rest is
    /// applied when the group commits it).
    pub fn open_until(
        log: Log,
        until: Option<Lsn>,
        progress: &mut dyn FnMut(Lsn),
    ) -> Result<(Database, ReplayReport), TableError> {
        let started = Instant::now();
        let until = until.unwrap_or(Lsn::MAX).min(log.committed_lsn());
        let mut catalog = Catalog::default();
        let mut report = ReplayReport::default();
        // Two steps on two threads: this one applies the batches that the
        // other reads and decodes, through a bounded queue.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(REPLAY_QUEUE_BATCHES);
        let decoded = std::thread::scope(|scope| {
            let decoder = std::thread::Builder::new()
                .name("replay-decode".into())
                .spawn_scoped(scope, || decode_log(&log, until, tx))
                .map_err(|e| TableError::Log(aqueduct_log::Error::io("starting replay", e)))?;
            let mut since_progress = 0;
            for batch in rx {
                since_progress += batch.last + 1 - batch.first;
                let last = batch.last;
                catalog.replay_batch(batch);
                if since_progress >= REPLAY_PROGRESS_EVERY {
                    since_progress = 0;
                    progress(last);
                }
            }
            decoder.join().unwrap_or_else(|_| {
                Err(TableError::Log(aqueduct_log::Error::Invalid(
                    "the replay's decoding thread panicked".into(),
                )))
            })
        })?;
        catalog.finish_replay();
        report.records = decoded;
        report.last_lsn = until;
        catalog.lsn = report.last_lsn;
        report.tables = catalog.tables.len();
        report.rows = catalog.tables.values().map(|t| t.len()).sum();
        report.elapsed = started.elapsed();
        let max_rowid = catalog
            .tables
            .values()
            .map(|t| t.peek_rowid())
            .max()
            .unwrap_or(1);
        let db = Database {
            schema_version: AtomicU64::new(catalog.schema_version),
            applied: AtomicU64::new(report.last_lsn),
            told_visible: AtomicU64::new(report.last_lsn),
            applied_moved: Default::default(),
            next_rowid: std::sync::atomic::AtomicI64::new(max_rowid),
            consumers: RwLock::new(Vec::new()),
            sequences: SequenceCache::default(),
            locks: LockTable::default(),
            next_txn: AtomicU64::new(1),
            read_only: RwLock::new(None),
            replicator: RwLock::new(None),
            log,
            catalog: RwLock::new(catalog),
            commit: Mutex::new(()),
            metrics: TableMetrics::default(),
        };
        Ok((db, report))
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// A consistent view of all tables for the duration of the guard.
    pub fn read(&self) -> RwLockReadGuard<'_, Catalog> {
        self.catalog.read()
    }

    /// The catalog as transaction `txn` sees it: the committed one, or a
    /// copy with the transaction's own schema changes applied.
    pub fn read_in(&self, txn: Option<&Txn>) -> TxnCatalog<'_> {
        let committed = self.catalog.read();
        match txn.and_then(|t| t.pending_catalog(&committed)) {
            Some(pending) => TxnCatalog::Pending(Box::new(pending)),
            None => TxnCatalog::Committed(committed),
        }
    }

    /// [`Database::read`] that does not wait behind a writer queued for the
    /// lock, for threads that may already hold a read guard further up.
    pub fn read_recursive(&self) -> RwLockReadGuard<'_, Catalog> {
        self.catalog.read_recursive()
    }

    /// Adds a consumer told about every later commit ([`CommitConsumer`]).
    /// Under the commit lock, so it starts exactly after `applied_lsn()`.
    pub fn add_consumer(&self, consumer: Arc<dyn CommitConsumer>) {
        self.add_consumer_at(|_, _| consumer);
    }

    /// [`Database::add_consumer`] with the consumer made by `make` from the
    /// tables as of `applied_lsn()`, with commits paused: it sees exactly
    /// the commits after that LSN.
    pub fn add_consumer_at(&self, make: impl FnOnce(&Catalog, Lsn) -> Arc<dyn CommitConsumer>) {
        let _guard = self.commit.lock();
        let consumer = make(&self.catalog.read(), self.applied_lsn());
        self.consumers.write().push(consumer);
    }

    /// Runs `f` with the commit lock held: no commit is applied meanwhile,
    /// so `f` sees the tables exactly as of `applied_lsn()` (views are
    /// created this way, from a consistent state, before their first delta).
    pub fn with_commits_paused<T>(&self, f: impl FnOnce(&Catalog, Lsn) -> T) -> T {
        let _guard = self.commit.lock();
        let catalog = self.catalog.read();
        f(&catalog, self.applied_lsn())
    }

    /// A new transaction at `isolation`.
    pub fn begin(&self, isolation: Isolation) -> Txn {
        Txn {
            id: self.next_txn.fetch_add(1, Ordering::Relaxed),
            isolation,
            ..Txn::default()
        }
    }

    /// Ends a transaction's hold on its locks (after its commit or
    /// rollback).
    pub fn end(&self, txn: &Txn) {
        if txn.id != 0 {
            self.locks.release_all(txn.id);
        }
    }

    /// A hidden row id for a new row of a table without a primary key.
    pub fn allocate_rowid(&self) -> i64 {
        self.next_rowid.fetch_add(1, Ordering::Relaxed)
    }

    /// The catalog's schema version now, without its lock (a change
    /// being applied may not show yet: what is kept by version is checked
    /// again under the lock where it matters).
    pub fn schema_version_now(&self) -> u64 {
        self.schema_version.load(Ordering::Acquire)
    }

    /// LSN of the last applied write.
    pub fn applied_lsn(&self) -> Lsn {
        self.applied.load(Ordering::Acquire)
    }

    /// Waits until every write up to `lsn` is applied here, for at most
    /// `timeout`; false if it was not by then (a follower behind).
    pub fn await_applied(&self, lsn: Lsn, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self.applied_moved.0.lock();
        while self.applied_lsn() < lsn {
            if self
                .applied_moved
                .1
                .wait_until(&mut guard, deadline)
                .timed_out()
            {
                return self.applied_lsn() >= lsn;
            }
        }
        true
    }

    /// Waits until whatever a reader saw (up to `lsn`) is committed per the
    /// sync policy, so no reader acts on a write that a crash could undo.
    pub fn await_visible(&self, lsn: Lsn) -> Result<(), TableError> {
        self.log.await_committed(lsn)?;
        if let Some(r) = self.replicator() {
            r.await_committed(lsn)?;
        }
        self.tell_visible(lsn);
        Ok(())
    }

    /// Tells the consumers that the commits up to `lsn` are acknowledged,
    /// once per new LSN.
    fn tell_visible(&self, lsn: Lsn) {
        let lsn = lsn.min(self.applied_lsn());
        if self.told_visible.fetch_max(lsn, Ordering::AcqRel) >= lsn {
            return;
        }
        for c in self.consumers.read().iter() {
            c.visible(lsn);
        }
    }

    /// Whether [`Database::await_visible`] for `lsn` would return at once.
    pub fn is_visible(&self, lsn: Lsn) -> bool {
        self.log.is_committed(lsn) && self.replicator().is_none_or(|r| r.is_committed(lsn))
    }

    /// Makes this database a member of a replicating group: its commits
    /// are proposed to the group through `replicator` and acknowledged
    /// once the group committed them.
    pub fn set_replicator(&self, replicator: Arc<dyn Replicator>) {
        *self.replicator.write() = Some(replicator);
    }

    /// What proposes this database's commits to its group, if it is a
    /// member of one.
    pub fn replicator(&self) -> Option<Arc<dyn Replicator>> {
        self.replicator.read().clone()
    }

    /// The last LSN whose writes no crash can undo: durable here and, on a
    /// member of a group, committed by the group. What readers outside
    /// this server (followers, subscribers) may be given.
    pub fn committed_lsn(&self) -> Lsn {
        let durable = self.log.committed_lsn();
        match self.replicator() {
            Some(r) => durable.min(r.committed_lsn()),
            None => durable,
        }
    }

    /// Runs `f` with the commit lock held, then commits what it wrote without
    /// validation: nothing else can commit in between, so an autocommit
    /// statement is atomic and never conflicts.
    pub fn run_exclusive<T, E: From<TableError>>(
        &self,
        f: impl FnMut(&Catalog, &mut Txn) -> Result<T, E>,
    ) -> Result<(T, Option<Lsn>), E> {
        let mut f = f;
        if let Some(r) = self.replicator() {
            r.await_writable();
        }
        let (guard, mut txn, out) = loop {
            let guard = self.commit.lock();
            let mut txn = Txn::default();
            let out = {
                let catalog = self.catalog.read();
                f(&catalog, &mut txn)?
            };
            // A row locked by an open transaction is written only by it:
            // wait for it to end (without the commit lock, which its
            // commit needs), then run the statement again.
            match self.locks.locked_by_other(None, txn.written_rows()) {
                None => break (guard, txn, out),
                Some(row) => {
                    drop(guard);
                    let since = Instant::now();
                    self.locks
                        .wait_unlocked(&row, &|| aqueduct_expr::interrupt::check_lock_wait(since))
                        .map_err(|e| E::from(TableError::Interrupted(e)))?;
                }
            }
        };
        let lsn = self.append_and_apply(&mut txn)?;
        drop(guard);
        self.after_release();
        if let Some(lsn) = lsn {
            self.await_visible(lsn)?;
        }
        Ok((out, lsn))
    }

    /// Validates and commits an explicit transaction. Returns the LSN of its
    /// last record (`None` for a read-only transaction).
    pub fn commit(&self, txn: &Txn) -> Result<Option<Lsn>, TableError> {
        self.commit_checked(&mut txn.clone(), &|_, _| Ok(()))
    }

    /// [`Database::commit`], with `check` run on the committed catalog
    /// under the commit lock after the transaction is validated (for
    /// constraints the tables do not keep themselves): its error fails
    /// the commit.
    /// The commit moves the writes out of `txn` into the log batch and the
    /// tables (no copy of each write); what is left of `txn` is for
    /// [`Database::end`].
    pub fn commit_checked(
        &self,
        txn: &mut Txn,
        check: &dyn Fn(&Catalog, &Txn) -> Result<(), aqueduct_expr::SqlError>,
    ) -> Result<Option<Lsn>, TableError> {
        let lsn = self.commit_unacknowledged(txn, check)?;
        if let Some(lsn) = lsn {
            self.await_visible(lsn)?;
        }
        Ok(lsn)
    }

    /// [`Database::commit_checked`] up to the point where it waits for the
    /// commit to be durable (and, on a member of a group, committed by the
    /// group): the caller waits for that (`Database::await_visible`, or
    /// [`Database::is_visible`]) before acknowledging it. The group's
    /// simulation commits this way, as its one thread cannot wait.
    pub fn commit_unacknowledged(
        &self,
        txn: &mut Txn,
        check: &dyn Fn(&Catalog, &Txn) -> Result<(), aqueduct_expr::SqlError>,
    ) -> Result<Option<Lsn>, TableError> {
        if !txn.writes.is_empty() {
            if let Some(r) = self.replicator() {
                r.await_writable();
            }
        }
        let guard = self.commit.lock();
        if !txn.isolation.locks()
            && self
                .locks
                .locked_by_other(Some(txn.id), txn.written_rows())
                .is_some()
        {
            self.metrics
                .serialization_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(TableError::SerializationFailure);
        }
        if let Err(e) = txn.validate(&self.catalog.read()) {
            self.metrics
                .serialization_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        check(&self.catalog.read(), txn).map_err(TableError::Refused)?;
        let lsn = self.append_and_apply(txn)?;
        drop(guard);
        self.after_release();
        Ok(lsn)
    }

    /// With the commit lock held: appends the transaction and applies it.
    fn append_and_apply(&self, txn: &mut Txn) -> Result<Option<Lsn>, TableError> {
        let Some(batch) = self.append(txn)? else {
            return Ok(None);
        };
        let last = batch.last;
        self.apply(batch);
        Ok(Some(last))
    }

    /// Step one of a commit, with the commit lock held: checks unique
    /// indexes and appends the writes to the log as one batch (without
    /// waiting for its sync). `None` for a transaction that wrote nothing.
    /// The writes move out of `txn` into the batch.
    fn append(&self, txn: &mut Txn) -> Result<Option<Batch>, TableError> {
        if txn.writes.is_empty() {
            return Ok(None);
        }
        if let Some(why) = &*self.read_only.read() {
            return Err(TableError::Refused(
                aqueduct_expr::SqlError::new(
                    "25006",
                    format!("cannot execute a write on this server: {why}"),
                )
                .with_hint("send writes to the server it follows; reads are served here"),
            ));
        }
        let replicator = self.replicator();
        if let Some(r) = &replicator {
            r.may_write()?;
        }
        self.check_unique(txn)?;
        let first = self.log.next_lsn();
        let catalog = self.catalog.read();
        // Read only by publications' streams: written while there is one.
        let deps = (!catalog.publications.is_empty()).then(|| txn.deps());
        let (mut records, batch) = encode_batch(
            &catalog,
            std::mem::take(&mut txn.writes),
            deps,
            first,
            aqueduct_log::now_micros(),
        );
        drop(catalog);
        // Every record carries the commit's time, as its copies do.
        for r in records.iter_mut().filter(|r| r.timestamp_micros == 0) {
            r.timestamp_micros = batch.commit_micros;
        }
        let range = match self.log.append_pending(&records) {
            Ok(range) => range,
            Err(e) => {
                // A member whose log takes no write must not go on leading.
                if let Some(r) = &replicator {
                    r.log_failed(&e.to_string());
                }
                return Err(e.into());
            }
        };
        assert_eq!(
            (range.first, range.last),
            (batch.first, batch.last),
            "the log gave a batch other LSNs than the next ones"
        );
        if let Some(r) = &replicator {
            let copies = appended_copies(records, range.first);
            if let Err(e) = r.propose(copies) {
                // Not applied and never acknowledged: it goes again.
                self.log.truncate_after(range.first - 1)?;
                return Err(e);
            }
        }
        Ok(Some(batch))
    }

    /// Step two, with the commit lock held: applies an appended batch to
    /// the tables, tells the consumers, and moves `applied_lsn`.
    fn apply(&self, batch: Batch) {
        let (last, rows) = (batch.last, batch.entries.len() as u64);
        let applied = {
            let mut catalog = self.catalog.write();
            let applied = catalog.apply_owned_batch(batch);
            self.schema_version
                .store(catalog.schema_version, Ordering::Release);
            applied
        };
        let consumers = self.consumers.read().clone();
        if !consumers.is_empty() {
            let catalog = self.catalog.read();
            for c in &consumers {
                c.committed(&applied, &catalog);
            }
        }
        self.applied.store(last, Ordering::Release);
        {
            let _moved = self.applied_moved.0.lock();
            self.applied_moved.1.notify_all();
        }
        // A batch acknowledged before it is applied (a follower's copy, an
        // entry its group committed) is visible at once.
        if self.is_visible(last) {
            self.tell_visible(last);
        }
        self.metrics.commits.fetch_add(1, Ordering::Relaxed);
        self.metrics.rows_written.fetch_add(rows, Ordering::Relaxed);
    }

    /// Makes the database take no write of its own (`Some(why)`: a
    /// follower, whose writes come only through [`Database::apply_appended`]),
    /// or take them again (`None`).
    pub fn set_read_only(&self, why: Option<String>) {
        *self.read_only.write() = why;
    }

    /// Why the database takes no write of its own, when it does not.
    pub fn read_only(&self) -> Option<String> {
        self.read_only.read().clone()
    }

    /// Applies a batch that is already in the log at its LSNs (a follower
    /// applying a replicated stream after appending it with
    /// `Log::append_at`): the same step two as a local commit.
    pub fn apply_appended(&self, batch: Batch) {
        let guard = self.commit.lock();
        self.apply_appended_under(guard, batch);
    }

    /// Applies an appended batch with the commit lock `guard` held, then
    /// releases it.
    fn apply_appended_under(&self, guard: parking_lot::MutexGuard<'_, ()>, batch: Batch) {
        assert!(
            batch.last < self.log.next_lsn(),
            "batch {}..={} applied before it was appended",
            batch.first,
            batch.last
        );
        self.apply(batch);
        drop(guard);
        self.after_release();
    }

    /// [`Database::apply_appended`] for a batch a group committed: skipped
    /// when the tables show it already (on the leader that appended it,
    /// which applied it when it committed it). Decided under the commit
    /// lock, so a commit applying its own batch meanwhile is seen. True if
    /// applied here.
    pub fn apply_committed(&self, batch: Batch) -> bool {
        // Applied LSNs only grow: a batch shown already needs no lock (the
        // leader's committers hold it most of the time).
        if batch.last <= self.applied_lsn() {
            return false;
        }
        let guard = self.commit.lock();
        if batch.last <= self.applied_lsn() {
            return false;
        }
        self.apply_appended_under(guard, batch);
        true
    }

    /// Tells the consumers the commit lock is released.
    fn after_release(&self) {
        for c in self.consumers.read().iter() {
            c.after_release();
        }
    }

    /// Discards an appended suffix that was never applied (a follower's
    /// uncommitted entries the leader replaced): every record after `lsn`.
    /// Refused for a suffix that was applied: the tables already show it.
    pub fn discard_after(&self, lsn: Lsn) -> Result<(), TableError> {
        let _guard = self.commit.lock();
        if lsn < self.applied_lsn() {
            return Err(TableError::Log(aqueduct_log::Error::Invalid(format!(
                "cannot discard the log after LSN {lsn}: writes up to LSN {} are applied",
                self.applied_lsn()
            ))));
        }
        Ok(self.log.truncate_after(lsn)?)
    }

    /// Unique indexes hold after the transaction's final writes.
    fn check_unique(&self, txn: &Txn) -> Result<(), TableError> {
        let committed = self.catalog.read();
        let pending = txn.pending_catalog(&committed);
        let catalog = pending.as_ref().unwrap_or(&committed);
        let mut claimed: HashMap<(TableId, String, Vec<Value>), Key> = HashMap::new();
        for (table, key, row) in txn.overlay.iter() {
            let (Some(t), Some(row)) = (catalog.table_by_id(table), row) else {
                continue;
            };
            for (name, other) in t.unique_conflicts(key, row) {
                // If this transaction also rewrote the other row, its final
                // version is checked against this one through `claimed`.
                if !txn.overlay.contains(table, &other) {
                    return Err(unique_error(&t.schema, &name, row));
                }
            }
            for def in t
                .schema
                .indexes
                .iter()
                .filter(|i| i.unique && i.is_physical())
            {
                let values: Vec<Value> = def.columns.iter().map(|&c| row[c].clone()).collect();
                if values.iter().any(Value::is_null) {
                    continue;
                }
                if let Some(k) = claimed.insert((table, def.name.clone(), values), key.clone()) {
                    if &k != key {
                        return Err(unique_error(&t.schema, &def.name, row));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The records of a batch appended from `first` on, as the log holds them.
fn appended_copies(records: Vec<NewRecord>, first: Lsn) -> Vec<Record> {
    let count = records.len();
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| Record {
            lsn: first + i as u64,
            term: r.term,
            timestamp_micros: r.timestamp_micros,
            kind: r.kind,
            flags: if i + 1 < count {
                aqueduct_log::record::FLAG_BATCH_CONTINUES
            } else {
                0
            },
            key: r.key,
            body: r.body,
        })
        .collect()
}

fn unique_error(schema: &TableSchema, index: &str, row: &Row) -> TableError {
    let def = schema.indexes.iter().find(|i| i.name == index);
    let detail = match def {
        Some(d) => format!(
            "Key ({})=({}) already exists.",
            d.columns
                .iter()
                .map(|&c| schema.columns[c].name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            d.columns
                .iter()
                .map(|&c| row[c].to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => String::new(),
    };
    TableError::UniqueViolation {
        constraint: index.to_string(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_values::DataType;

    #[test]
    fn jsonb_written_as_text_reads_back_canonical() {
        let types = [DataType::Jsonb, DataType::Json];
        // Both written before jsonb had a row tag of its own.
        let old = vec![
            Value::Json(r#"{"b":1,"a":2}"#.into()),
            Value::Json(r#"{"b":1,"a":2}"#.into()),
        ];
        let row = canonical_jsonb(types.iter(), Arc::new(old));
        assert!(matches!(row[0], Value::Jsonb(_)));
        assert_eq!(row[0].to_text().unwrap(), r#"{"a": 2, "b": 1}"#);
        // json keeps its text as given.
        assert_eq!(row[1].to_text().unwrap(), r#"{"b":1,"a":2}"#);
        assert_eq!(
            parse_type("character varying(20)[]").unwrap(),
            DataType::Array(Box::new(DataType::Varchar(Some(20))))
        );
        assert_eq!(
            parse_type(&DataType::Array(Box::new(DataType::Int8)).to_string()).unwrap(),
            DataType::Array(Box::new(DataType::Int8))
        );
        assert!(parse_type("text[][]").is_err());
    }
}
