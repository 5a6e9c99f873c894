//! Table definitions and the schema-change records that carry them in the log.
//!
//! A schema change is a `Schema` log record whose key is `s` + table id
//! (8 bytes, big-endian) and whose body is a JSON object, versioned by its
//! `"v"` field (see `docs/table-records.md`).

use std::sync::Arc;

use aqueduct_values::{DataType, EnumType, Value};
use serde::{Deserialize, Serialize};

use crate::publications::PublicationDef;
use crate::roles::{grantee_def, grantee_json, Grantee, Privilege, RoleDef, RoleJson};

/// A table's identity; never reused, so rows of a dropped table can never be
/// mistaken for rows of a new one.
pub type TableId = u64;

/// Version of the schema-change JSON.
pub const SCHEMA_RECORD_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    pub ty: DataType,
    pub not_null: bool,
    /// A constant default.
    pub default: Option<Value>,
    /// A default that is an expression (`now()`, `nextval('t_id_seq')`),
    /// as SQL text: bound and evaluated once per inserted row, and the
    /// value stored. At most one of `default` and `default_expr` is set.
    pub default_expr: Option<String>,
    /// `GENERATED {ALWAYS | BY DEFAULT} AS IDENTITY`.
    pub identity: Option<Identity>,
}

impl ColumnDef {
    /// A nullable column without a default.
    pub fn new(name: impl Into<String>, ty: DataType) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            not_null: false,
            default: None,
            default_expr: None,
            identity: None,
        }
    }

    /// Whether the column has a default of either kind.
    pub fn has_default(&self) -> bool {
        self.default.is_some() || self.default_expr.is_some()
    }
}

/// An identity column's kind and the sequence that feeds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `ALWAYS`: an explicit value is refused unless the INSERT says
    /// `OVERRIDING SYSTEM VALUE`; `BY DEFAULT`: one is taken.
    pub always: bool,
    pub sequence: TableId,
}

/// A `CHECK` constraint: its name and its condition as SQL text over the
/// table's columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckDef {
    pub name: String,
    pub sql: String,
}

/// What a foreign key does to referencing rows when the referenced row is
/// deleted or its key changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FkAction {
    #[default]
    NoAction,
    Restrict,
    Cascade,
    SetNull,
    SetDefault,
}

/// A `FOREIGN KEY (columns) REFERENCES table (columns)` constraint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignKeyDef {
    pub name: String,
    /// Referencing columns, positions in this table.
    pub columns: Vec<usize>,
    pub ref_table: TableId,
    /// Referenced columns, positions in `ref_table`: its primary key or a
    /// unique index, in the same order as `columns`.
    pub ref_columns: Vec<usize>,
    #[serde(default)]
    pub on_delete: FkAction,
    #[serde(default)]
    pub on_update: FkAction,
    /// `DEFERRABLE`: `SET CONSTRAINTS` may put its check off to the end of
    /// the transaction.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferrable: bool,
    /// `INITIALLY DEFERRED`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initially_deferred: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexDef {
    pub name: String,
    /// The indexed columns; for an index on expressions, the columns the
    /// expressions read (the index goes with any of them).
    pub columns: Vec<usize>,
    pub unique: bool,
    /// `CREATE INDEX ... (lower(email))`: the key expressions' SQL text,
    /// over the table's columns by name. Empty for an index on columns.
    pub expressions: Vec<String>,
    /// `CREATE INDEX ... WHERE cond` (a partial index): the condition's
    /// SQL text; only rows where it holds are in the index.
    pub predicate: Option<String>,
    /// A `UNIQUE ... DEFERRABLE` constraint: `SET CONSTRAINTS` may leave
    /// its check to `COMMIT` (which checks every unique index anyway).
    pub deferrable: bool,
    /// `INITIALLY DEFERRED`.
    pub initially_deferred: bool,
    /// Made by a `UNIQUE` constraint (the catalog lists a constraint
    /// for it), not by `CREATE UNIQUE INDEX`.
    pub constraint: bool,
}

impl IndexDef {
    /// An index on columns: `columns` are its key.
    pub fn on_columns(name: impl Into<String>, columns: Vec<usize>, unique: bool) -> IndexDef {
        IndexDef {
            name: name.into(),
            columns,
            unique,
            ..IndexDef::default()
        }
    }

    /// Whether the table keeps this index itself (its key is columns,
    /// every row is in it). An index on expressions or a partial index is
    /// in the catalog only: the statements that write the table check a
    /// unique one (`aqueduct-plan`), and no read looks rows up through it.
    pub fn is_physical(&self) -> bool {
        self.expressions.is_empty() && self.predicate.is_none()
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableSchema {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Column positions of the primary key; empty means a hidden row id.
    pub primary_key: Vec<usize>,
    pub indexes: Vec<IndexDef>,
    pub checks: Vec<CheckDef>,
    pub foreign_keys: Vec<ForeignKeyDef>,
    /// Published but not stored (`CREATE TABLE ... WITH (ephemeral =
    /// true)`, Synapse's ephemerals): its inserts are written to the log
    /// and reach the change feed, but no row is kept in memory, and
    /// compaction drops its rows once every hold on the log is past them.
    pub ephemeral: bool,
    /// The column naming the entity a row belongs to (`CREATE TABLE ...
    /// WITH (shard_key = 'user_id')`): rows of several tables with the
    /// same value form one shard, which one hop of a chain owns
    /// (`docs/chains.md`).
    pub shard_key: Option<String>,
}

impl TableSchema {
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    pub fn has_primary_key(&self) -> bool {
        !self.primary_key.is_empty()
    }

    /// The primary key of `row` (not for tables with a hidden row id).
    pub fn key_of(&self, row: &[Value]) -> Vec<Value> {
        self.primary_key.iter().map(|&i| row[i].clone()).collect()
    }
}

/// A schema change as stored in the log.
#[derive(Clone, Debug, PartialEq)]
pub enum SchemaChange {
    CreateTable(TableSchema),
    DropTable {
        id: TableId,
    },
    CreateIndex {
        table: TableId,
        index: IndexDef,
    },
    DropIndex {
        table: TableId,
        name: String,
    },
    /// A maintained view: its name and defining query (SQL text). `id`
    /// comes from the same counter as table ids.
    CreateView {
        id: TableId,
        name: String,
        sql: String,
    },
    DropView {
        id: TableId,
    },
    /// A view's query rewritten (`ALTER TABLE ... RENAME TO` renames the
    /// table in the queries of the views that read it): same id and name.
    AlterView {
        id: TableId,
        sql: String,
    },
    /// A time map: for each release interval, and for coarser periods
    /// made of them, the distinct values of one column of the rows written
    /// in it (`docs/consistency.md`). `id` comes from the table-id counter.
    CreateTimeMap(TimeMapDef),
    DropTimeMap {
        id: TableId,
    },
    /// A transaction chain (`CREATE CHAIN`, `docs/chains.md`): its name and
    /// its declaration's text. `id` comes from the table-id counter.
    CreateChain(ChainDef),
    DropChain {
        id: TableId,
    },
    /// A role created in SQL (`CREATE ROLE`, `CREATE USER`).
    CreateRole(RoleDef),
    /// A role's new attributes (`ALTER ROLE`); same id and name.
    AlterRole(RoleDef),
    DropRole {
        id: TableId,
    },
    /// The owner of a table or view, written with its creation.
    SetOwner {
        object: TableId,
        owner: String,
    },
    Grant {
        object: TableId,
        grantee: Grantee,
        privileges: Vec<Privilege>,
    },
    Revoke {
        object: TableId,
        grantee: Grantee,
        privileges: Vec<Privilege>,
    },
    /// `ALTER TABLE` changing columns: the table's new definition (same
    /// id), and for each of its columns where the values of existing rows
    /// come from. Rows whose new values are computed (a volatile default,
    /// `ALTER COLUMN ... TYPE`) follow as row writes in the same batch.
    AlterTable {
        schema: TableSchema,
        sources: Vec<ColumnSource>,
        /// The table's column names before the change (empty in records
        /// written before they were kept): what a reader of the log that
        /// never saw the old definition compares the new one with.
        old_columns: Vec<String>,
    },
    /// A table's CHECK constraints and foreign keys, replaced (`ALTER
    /// TABLE ... ADD/DROP CONSTRAINT`, `DROP TABLE ... CASCADE` dropping
    /// the foreign keys that reference the table).
    SetConstraints {
        table: TableId,
        checks: Vec<CheckDef>,
        foreign_keys: Vec<ForeignKeyDef>,
    },
    /// `CREATE SEQUENCE`, or the sequence a `serial` or identity column
    /// creates. Its id comes from the table-id counter.
    CreateSequence(SequenceDef),
    /// `ALTER SEQUENCE` options: the new definition, same id.
    AlterSequence(SequenceDef),
    DropSequence {
        id: TableId,
    },
    /// `setval`, `ALTER SEQUENCE ... RESTART`: the sequence's position,
    /// as PostgreSQL's `last_value` and `is_called`. Starts a new
    /// generation, so reservations made before it are void.
    SetSequence {
        id: TableId,
        value: i64,
        is_called: bool,
    },
    /// Values up to `upto` were handed out (or may be, from a cached
    /// range): written with the transaction that first used one of them,
    /// so a value in a committed row is never handed out again, also
    /// after a crash. Ignored unless `generation` is the sequence's
    /// present one.
    ReserveSequence {
        id: TableId,
        upto: i64,
        generation: u64,
    },
    /// `CREATE TYPE name AS ENUM (...)`. Its id comes from the table-id
    /// counter.
    CreateType(EnumType),
    /// `ALTER TYPE ... ADD VALUE`, `RENAME TO`: the new definition, same
    /// id. Columns of the type take it.
    AlterType(EnumType),
    DropType {
        id: TableId,
    },
    /// `COMMENT ON`: the comment of a table, view, sequence or type
    /// (`column` 0) or of a table's column (`column` its 1-based
    /// position); `text` `None` removes it.
    Comment {
        object: TableId,
        column: u32,
        text: Option<String>,
    },
    /// `CREATE PUBLICATION`: the whole definition. Its id comes from the
    /// table-id counter.
    CreatePublication(PublicationDef),
    /// `ALTER PUBLICATION`: the whole new definition, same id.
    AlterPublication(PublicationDef),
    DropPublication {
        id: TableId,
    },
}

/// Where a column of an altered table takes existing rows' values from.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnSource {
    /// The row's value of the column at this position before the change.
    Old(usize),
    /// A constant (a new column's default, or NULL).
    Value(Value),
}

/// A sequence's definition (`docs/sequences.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceDef {
    pub id: TableId,
    pub name: String,
    /// `smallint`, `integer` or `bigint`: bounds the default limits.
    pub ty: String,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub start: i64,
    /// The column that owns it (`serial`, identity): dropped with it.
    #[serde(default)]
    pub owned_by: Option<(TableId, usize)>,
}

/// A transaction chain's declaration: `CREATE CHAIN name (params) AS
/// $$ HOP ... $$`, kept as the statement's text and parsed where it is run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainDef {
    pub id: TableId,
    pub name: String,
    pub sql: String,
}

/// A time map's declaration: `CREATE TIME MAP name ON table (column)
/// EVERY '5s', '1min', ...`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeMapDef {
    pub id: TableId,
    pub name: String,
    pub table: TableId,
    /// The column's position in the table.
    pub column: usize,
    /// The periods it is kept at, in milliseconds, ascending.
    pub periods_ms: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
struct ColumnJson {
    name: String,
    ty: String,
    not_null: bool,
    /// The default's text form.
    default: Option<String>,
    /// A default expression's SQL text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<Identity>,
    /// For a column of an enum type (or an array of one, `ty` then
    /// `enum[]`): the type as it was when the record was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enum_type: Option<EnumJson>,
}

/// An enum type: labels in order with their sort keys.
#[derive(Clone, Serialize, Deserialize)]
struct EnumJson {
    id: TableId,
    name: String,
    labels: Vec<(String, i64)>,
}

fn enum_json(t: &EnumType) -> EnumJson {
    EnumJson {
        id: t.id,
        name: t.name.clone(),
        labels: t.labels.clone(),
    }
}

fn enum_def(j: EnumJson) -> Result<EnumType, String> {
    if !j.labels.windows(2).all(|w| w[0].1 < w[1].1) {
        return Err(format!("enum type {} has labels out of order", j.name));
    }
    Ok(EnumType {
        id: j.id,
        name: j.name,
        labels: j.labels,
    })
}

/// The enum type a column's type is or holds.
pub fn enum_of(ty: &DataType) -> Option<&Arc<EnumType>> {
    match ty {
        DataType::Enum(t) => Some(t),
        DataType::Array(e) => enum_of(e),
        _ => None,
    }
}

/// A column type's text in a record: an enum type is `enum` (its
/// definition goes beside it), other types as `Display` writes them.
fn type_text(ty: &DataType) -> String {
    match ty {
        DataType::Enum(_) => "enum".into(),
        DataType::Array(e) if matches!(**e, DataType::Enum(_)) => "enum[]".into(),
        other => other.to_string(),
    }
}

#[derive(Serialize, Deserialize)]
struct IndexJson {
    name: String,
    columns: Vec<usize>,
    unique: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    expressions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    predicate: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    deferrable: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    initially_deferred: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    constraint: bool,
}

#[derive(Serialize, Deserialize)]
struct TableJson {
    id: TableId,
    name: String,
    columns: Vec<ColumnJson>,
    primary_key: Vec<usize>,
    indexes: Vec<IndexJson>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    checks: Vec<CheckDef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    foreign_keys: Vec<ForeignKeyDef>,
    /// Absent (false) in records of ordinary tables and in every record
    /// written before ephemeral tables existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    ephemeral: bool,
    /// Absent in records of tables without a shard key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard_key: Option<String>,
}

/// Where a column of an altered table takes its values from.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SourceJson {
    Old(usize),
    /// A constant in its text form (`None` for NULL).
    Value(Option<String>),
}

fn table_json(t: &TableSchema) -> TableJson {
    TableJson {
        id: t.id,
        name: t.name.clone(),
        columns: t
            .columns
            .iter()
            .map(|c| ColumnJson {
                name: c.name.clone(),
                ty: type_text(&c.ty),
                enum_type: enum_of(&c.ty).map(|t| enum_json(t)),
                not_null: c.not_null,
                default: c.default.as_ref().and_then(|d| d.to_text()),
                default_expr: c.default_expr.clone(),
                identity: c.identity,
            })
            .collect(),
        primary_key: t.primary_key.clone(),
        indexes: t.indexes.iter().map(index_json).collect(),
        checks: t.checks.clone(),
        foreign_keys: t.foreign_keys.clone(),
        ephemeral: t.ephemeral,
        shard_key: t.shard_key.clone(),
    }
}

fn table_def(j: TableJson) -> Result<TableSchema, String> {
    let columns = j
        .columns
        .into_iter()
        .map(|c| {
            let ty = match (c.ty.as_str(), c.enum_type) {
                ("enum", Some(t)) => DataType::Enum(Arc::new(enum_def(t)?)),
                ("enum[]", Some(t)) => {
                    DataType::Array(Box::new(DataType::Enum(Arc::new(enum_def(t)?))))
                }
                (text, _) => parse_type(text)?,
            };
            let default = match c.default {
                Some(d) => Some(
                    Value::Text(d)
                        .coerce(&ty)
                        .map_err(|e| format!("bad default: {e}"))?,
                ),
                None => None,
            };
            Ok(ColumnDef {
                name: c.name,
                ty,
                not_null: c.not_null,
                default,
                default_expr: c.default_expr,
                identity: c.identity,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(TableSchema {
        id: j.id,
        name: j.name,
        columns,
        primary_key: j.primary_key,
        indexes: j.indexes.into_iter().map(index_def).collect(),
        checks: j.checks,
        foreign_keys: j.foreign_keys,
        ephemeral: j.ephemeral,
        shard_key: j.shard_key,
    })
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum ChangeJson {
    CreateTable {
        v: u32,
        #[serde(flatten)]
        table: TableJson,
    },
    AlterTable {
        v: u32,
        #[serde(flatten)]
        table: TableJson,
        sources: Vec<SourceJson>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        old_columns: Vec<String>,
    },
    DropTable {
        v: u32,
        id: TableId,
    },
    CreateIndex {
        v: u32,
        table: TableId,
        index: IndexJson,
    },
    DropIndex {
        v: u32,
        table: TableId,
        name: String,
    },
    CreateView {
        v: u32,
        id: TableId,
        name: String,
        sql: String,
    },
    DropView {
        v: u32,
        id: TableId,
    },
    AlterView {
        v: u32,
        id: TableId,
        sql: String,
    },
    CreateTimeMap {
        v: u32,
        #[serde(flatten)]
        def: TimeMapDef,
    },
    DropTimeMap {
        v: u32,
        id: TableId,
    },
    CreateChain {
        v: u32,
        #[serde(flatten)]
        def: ChainDef,
    },
    DropChain {
        v: u32,
        id: TableId,
    },
    CreateRole {
        v: u32,
        role: RoleJson,
    },
    AlterRole {
        v: u32,
        role: RoleJson,
    },
    DropRole {
        v: u32,
        id: TableId,
    },
    SetOwner {
        v: u32,
        object: TableId,
        owner: String,
    },
    Grant {
        v: u32,
        object: TableId,
        /// A role name; absent for PUBLIC.
        #[serde(default)]
        grantee: Option<String>,
        privileges: Vec<Privilege>,
    },
    Revoke {
        v: u32,
        object: TableId,
        #[serde(default)]
        grantee: Option<String>,
        privileges: Vec<Privilege>,
    },
    SetConstraints {
        v: u32,
        table: TableId,
        checks: Vec<CheckDef>,
        foreign_keys: Vec<ForeignKeyDef>,
    },
    CreateSequence {
        v: u32,
        #[serde(flatten)]
        def: SequenceDef,
    },
    AlterSequence {
        v: u32,
        #[serde(flatten)]
        def: SequenceDef,
    },
    DropSequence {
        v: u32,
        id: TableId,
    },
    SetSequence {
        v: u32,
        id: TableId,
        value: i64,
        is_called: bool,
    },
    ReserveSequence {
        v: u32,
        id: TableId,
        upto: i64,
        generation: u64,
    },
    CreateType {
        v: u32,
        #[serde(flatten)]
        def: EnumJson,
    },
    AlterType {
        v: u32,
        #[serde(flatten)]
        def: EnumJson,
    },
    DropType {
        v: u32,
        id: TableId,
    },
    Comment {
        v: u32,
        object: TableId,
        column: u32,
        #[serde(default)]
        text: Option<String>,
    },
    CreatePublication {
        v: u32,
        publication: PublicationDef,
    },
    AlterPublication {
        v: u32,
        publication: PublicationDef,
    },
    DropPublication {
        v: u32,
        id: TableId,
    },
}

fn index_json(i: &IndexDef) -> IndexJson {
    IndexJson {
        name: i.name.clone(),
        columns: i.columns.clone(),
        unique: i.unique,
        expressions: i.expressions.clone(),
        predicate: i.predicate.clone(),
        deferrable: i.deferrable,
        initially_deferred: i.initially_deferred,
        constraint: i.constraint,
    }
}

fn index_def(i: IndexJson) -> IndexDef {
    IndexDef {
        name: i.name,
        columns: i.columns,
        unique: i.unique,
        expressions: i.expressions,
        predicate: i.predicate,
        deferrable: i.deferrable,
        initially_deferred: i.initially_deferred,
        constraint: i.constraint,
    }
}

impl SchemaChange {
    pub fn table(&self) -> TableId {
        match self {
            SchemaChange::CreateTable(t) => t.id,
            SchemaChange::DropTable { id } => *id,
            SchemaChange::CreateIndex { table, .. } | SchemaChange::DropIndex { table, .. } => {
                *table
            }
            SchemaChange::CreateView { id, .. }
            | SchemaChange::DropView { id }
            | SchemaChange::AlterView { id, .. } => *id,
            SchemaChange::CreateTimeMap(def) => def.id,
            SchemaChange::DropTimeMap { id } => *id,
            SchemaChange::CreateChain(def) => def.id,
            SchemaChange::DropChain { id } => *id,
            SchemaChange::CreateRole(r) | SchemaChange::AlterRole(r) => r.id,
            SchemaChange::DropRole { id } => *id,
            SchemaChange::SetOwner { object, .. }
            | SchemaChange::Grant { object, .. }
            | SchemaChange::Revoke { object, .. } => *object,
            SchemaChange::SetConstraints { table, .. } => *table,
            SchemaChange::AlterTable { schema, .. } => schema.id,
            SchemaChange::CreateSequence(d) | SchemaChange::AlterSequence(d) => d.id,
            SchemaChange::DropSequence { id }
            | SchemaChange::SetSequence { id, .. }
            | SchemaChange::ReserveSequence { id, .. } => *id,
            SchemaChange::CreateType(t) | SchemaChange::AlterType(t) => t.id,
            SchemaChange::DropType { id } => *id,
            SchemaChange::Comment { object, .. } => *object,
            SchemaChange::CreatePublication(p) | SchemaChange::AlterPublication(p) => p.id,
            SchemaChange::DropPublication { id } => *id,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let v = SCHEMA_RECORD_VERSION;
        let j = match self {
            SchemaChange::CreateTable(t) => ChangeJson::CreateTable {
                v,
                table: table_json(t),
            },
            SchemaChange::AlterTable {
                schema,
                sources,
                old_columns,
            } => ChangeJson::AlterTable {
                v,
                old_columns: old_columns.clone(),
                table: table_json(schema),
                sources: sources
                    .iter()
                    .map(|s| match s {
                        ColumnSource::Old(i) => SourceJson::Old(*i),
                        ColumnSource::Value(v) => SourceJson::Value(v.to_text()),
                    })
                    .collect(),
            },
            SchemaChange::DropTable { id } => ChangeJson::DropTable { v, id: *id },
            SchemaChange::CreateIndex { table, index } => ChangeJson::CreateIndex {
                v,
                table: *table,
                index: index_json(index),
            },
            SchemaChange::DropIndex { table, name } => ChangeJson::DropIndex {
                v,
                table: *table,
                name: name.clone(),
            },
            SchemaChange::CreateView { id, name, sql } => ChangeJson::CreateView {
                v,
                id: *id,
                name: name.clone(),
                sql: sql.clone(),
            },
            SchemaChange::DropView { id } => ChangeJson::DropView { v, id: *id },
            SchemaChange::AlterView { id, sql } => ChangeJson::AlterView {
                v,
                id: *id,
                sql: sql.clone(),
            },
            SchemaChange::CreateTimeMap(def) => ChangeJson::CreateTimeMap {
                v,
                def: def.clone(),
            },
            SchemaChange::DropTimeMap { id } => ChangeJson::DropTimeMap { v, id: *id },
            SchemaChange::CreateChain(def) => ChangeJson::CreateChain {
                v,
                def: def.clone(),
            },
            SchemaChange::DropChain { id } => ChangeJson::DropChain { v, id: *id },
            SchemaChange::CreateRole(r) => ChangeJson::CreateRole {
                v,
                role: RoleJson::from_def(r),
            },
            SchemaChange::AlterRole(r) => ChangeJson::AlterRole {
                v,
                role: RoleJson::from_def(r),
            },
            SchemaChange::DropRole { id } => ChangeJson::DropRole { v, id: *id },
            SchemaChange::SetOwner { object, owner } => ChangeJson::SetOwner {
                v,
                object: *object,
                owner: owner.clone(),
            },
            SchemaChange::Grant {
                object,
                grantee,
                privileges,
            } => ChangeJson::Grant {
                v,
                object: *object,
                grantee: grantee_json(grantee),
                privileges: privileges.clone(),
            },
            SchemaChange::Revoke {
                object,
                grantee,
                privileges,
            } => ChangeJson::Revoke {
                v,
                object: *object,
                grantee: grantee_json(grantee),
                privileges: privileges.clone(),
            },
            SchemaChange::SetConstraints {
                table,
                checks,
                foreign_keys,
            } => ChangeJson::SetConstraints {
                v,
                table: *table,
                checks: checks.clone(),
                foreign_keys: foreign_keys.clone(),
            },
            SchemaChange::CreateSequence(def) => ChangeJson::CreateSequence {
                v,
                def: def.clone(),
            },
            SchemaChange::AlterSequence(def) => ChangeJson::AlterSequence {
                v,
                def: def.clone(),
            },
            SchemaChange::DropSequence { id } => ChangeJson::DropSequence { v, id: *id },
            SchemaChange::SetSequence {
                id,
                value,
                is_called,
            } => ChangeJson::SetSequence {
                v,
                id: *id,
                value: *value,
                is_called: *is_called,
            },
            SchemaChange::ReserveSequence {
                id,
                upto,
                generation,
            } => ChangeJson::ReserveSequence {
                v,
                id: *id,
                upto: *upto,
                generation: *generation,
            },
            SchemaChange::CreateType(t) => ChangeJson::CreateType {
                v,
                def: enum_json(t),
            },
            SchemaChange::AlterType(t) => ChangeJson::AlterType {
                v,
                def: enum_json(t),
            },
            SchemaChange::DropType { id } => ChangeJson::DropType { v, id: *id },
            SchemaChange::Comment {
                object,
                column,
                text,
            } => ChangeJson::Comment {
                v,
                object: *object,
                column: *column,
                text: text.clone(),
            },
            SchemaChange::CreatePublication(p) => ChangeJson::CreatePublication {
                v,
                publication: p.clone(),
            },
            SchemaChange::AlterPublication(p) => ChangeJson::AlterPublication {
                v,
                publication: p.clone(),
            },
            SchemaChange::DropPublication { id } => ChangeJson::DropPublication { v, id: *id },
        };
        serde_json::to_vec(&j).expect("schema JSON")
    }

    pub fn decode(b: &[u8]) -> Result<SchemaChange, String> {
        let j: ChangeJson =
            serde_json::from_slice(b).map_err(|e| format!("bad schema record: {e}"))?;
        let check = |v: u32| {
            if v == SCHEMA_RECORD_VERSION {
                Ok(())
            } else {
                Err(format!("schema record version {v} is unknown"))
            }
        };
        Ok(match j {
            ChangeJson::CreateTable { v, table } => {
                check(v)?;
                SchemaChange::CreateTable(table_def(table)?)
            }
            ChangeJson::AlterTable {
                v,
                table,
                sources,
                old_columns,
            } => {
                check(v)?;
                let schema = table_def(table)?;
                if sources.len() != schema.columns.len() {
                    return Err("an altered table needs a source for every column".into());
                }
                let sources = sources
                    .into_iter()
                    .zip(&schema.columns)
                    .map(|(s, c)| {
                        Ok(match s {
                            SourceJson::Old(i) => ColumnSource::Old(i),
                            SourceJson::Value(None) => ColumnSource::Value(Value::Null),
                            SourceJson::Value(Some(t)) => ColumnSource::Value(
                                Value::Text(t)
                                    .coerce(&c.ty)
                                    .map_err(|e| format!("bad column value: {e}"))?,
                            ),
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                SchemaChange::AlterTable {
                    schema,
                    sources,
                    old_columns,
                }
            }
            ChangeJson::DropTable { v, id } => {
                check(v)?;
                SchemaChange::DropTable { id }
            }
            ChangeJson::CreateIndex { v, table, index } => {
                check(v)?;
                SchemaChange::CreateIndex {
                    table,
                    index: index_def(index),
                }
            }
            ChangeJson::DropIndex { v, table, name } => {
                check(v)?;
                SchemaChange::DropIndex { table, name }
            }
            ChangeJson::CreateView { v, id, name, sql } => {
                check(v)?;
                SchemaChange::CreateView { id, name, sql }
            }
            ChangeJson::DropView { v, id } => {
                check(v)?;
                SchemaChange::DropView { id }
            }
            ChangeJson::AlterView { v, id, sql } => {
                check(v)?;
                SchemaChange::AlterView { id, sql }
            }
            ChangeJson::CreateTimeMap { v, def } => {
                check(v)?;
                SchemaChange::CreateTimeMap(def)
            }
            ChangeJson::DropTimeMap { v, id } => {
                check(v)?;
                SchemaChange::DropTimeMap { id }
            }
            ChangeJson::CreateChain { v, def } => {
                check(v)?;
                SchemaChange::CreateChain(def)
            }
            ChangeJson::DropChain { v, id } => {
                check(v)?;
                SchemaChange::DropChain { id }
            }
            ChangeJson::CreateRole { v, role } => {
                check(v)?;
                SchemaChange::CreateRole(role.into_def()?)
            }
            ChangeJson::AlterRole { v, role } => {
                check(v)?;
                SchemaChange::AlterRole(role.into_def()?)
            }
            ChangeJson::DropRole { v, id } => {
                check(v)?;
                SchemaChange::DropRole { id }
            }
            ChangeJson::SetOwner { v, object, owner } => {
                check(v)?;
                SchemaChange::SetOwner { object, owner }
            }
            ChangeJson::Grant {
                v,
                object,
                grantee,
                privileges,
            } => {
                check(v)?;
                SchemaChange::Grant {
                    object,
                    grantee: grantee_def(grantee),
                    privileges,
                }
            }
            ChangeJson::Revoke {
                v,
                object,
                grantee,
                privileges,
            } => {
                check(v)?;
                SchemaChange::Revoke {
                    object,
                    grantee: grantee_def(grantee),
                    privileges,
                }
            }
            ChangeJson::SetConstraints {
                v,
                table,
                checks,
                foreign_keys,
            } => {
                check(v)?;
                SchemaChange::SetConstraints {
                    table,
                    checks,
                    foreign_keys,
                }
            }
            ChangeJson::CreateSequence { v, def } => {
                check(v)?;
                SchemaChange::CreateSequence(def)
            }
            ChangeJson::AlterSequence { v, def } => {
                check(v)?;
                SchemaChange::AlterSequence(def)
            }
            ChangeJson::DropSequence { v, id } => {
                check(v)?;
                SchemaChange::DropSequence { id }
            }
            ChangeJson::SetSequence {
                v,
                id,
                value,
                is_called,
            } => {
                check(v)?;
                SchemaChange::SetSequence {
                    id,
                    value,
                    is_called,
                }
            }
            ChangeJson::ReserveSequence {
                v,
                id,
                upto,
                generation,
            } => {
                check(v)?;
                SchemaChange::ReserveSequence {
                    id,
                    upto,
                    generation,
                }
            }
            ChangeJson::CreateType { v, def } => {
                check(v)?;
                SchemaChange::CreateType(enum_def(def)?)
            }
            ChangeJson::AlterType { v, def } => {
                check(v)?;
                SchemaChange::AlterType(enum_def(def)?)
            }
            ChangeJson::DropType { v, id } => {
                check(v)?;
                SchemaChange::DropType { id }
            }
            ChangeJson::Comment {
                v,
                object,
                column,
                text,
            } => {
                check(v)?;
                SchemaChange::Comment {
                    object,
                    column,
                    text,
                }
            }
            ChangeJson::CreatePublication { v, publication } => {
                check(v)?;
                SchemaChange::CreatePublication(publication)
            }
            ChangeJson::AlterPublication { v, publication } => {
                check(v)?;
                SchemaChange::AlterPublication(publication)
            }
            ChangeJson::DropPublication { v, id } => {
                check(v)?;
                SchemaChange::DropPublication { id }
            }
        })
    }
}

/// Parses a type as [`DataType`]'s `Display` writes it.
pub fn parse_type(s: &str) -> Result<DataType, String> {
    // `varchar(10)[]`: the array suffix follows the modifiers.
    if let Some(element) = s.trim().strip_suffix("[]") {
        return match parse_type(element)? {
            DataType::Array(_) => Err(format!("unknown type {s}")),
            element => Ok(DataType::Array(Box::new(element))),
        };
    }
    let (name, mods) = match s.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.trim_end_matches(')')
                .split(',')
                .filter_map(|m| m.trim().parse().ok())
                .collect::<Vec<u64>>(),
        ),
        None => (s.trim(), Vec::new()),
    };
    DataType::from_sql(name, &mods).ok_or_else(|| format!("unknown type {s}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_changes_round_trip() {
        let t = TableSchema {
            id: 7,
            name: "users".into(),
            columns: vec![
                ColumnDef {
                    name: "id".into(),
                    ty: DataType::Int8,
                    not_null: true,
                    default: None,
                    default_expr: None,
                    identity: None,
                },
                ColumnDef {
                    name: "name".into(),
                    ty: DataType::Varchar(Some(20)),
                    not_null: false,
                    default: Some(Value::Text("anon".into())),
                    default_expr: None,
                    identity: None,
                },
            ],
            primary_key: vec![0],
            indexes: vec![IndexDef::on_columns("users_name", vec![1], false)],
            checks: vec![CheckDef {
                name: "users_id_check".into(),
                sql: "id > 0".into(),
            }],
            foreign_keys: vec![ForeignKeyDef {
                name: "users_boss_fkey".into(),
                columns: vec![0],
                ref_table: 7,
                ref_columns: vec![0],
                on_delete: FkAction::Cascade,
                on_update: FkAction::SetNull,
                deferrable: true,
                initially_deferred: true,
            }],
            ephemeral: false,
            shard_key: None,
        };
        let serial = ColumnDef {
            default_expr: Some("nextval('users_id_seq'::regclass)".into()),
            identity: Some(Identity {
                always: true,
                sequence: 6,
            }),
            ..ColumnDef::new("n", DataType::Int4)
        };
        for c in [
            SchemaChange::CreateTable(TableSchema {
                columns: vec![serial],
                ..t.clone()
            }),
            SchemaChange::CreateSequence(SequenceDef {
                id: 6,
                name: "users_id_seq".into(),
                ty: "integer".into(),
                increment: -2,
                min: -100,
                max: -1,
                start: -1,
                owned_by: Some((7, 0)),
            }),
            SchemaChange::SetSequence {
                id: 6,
                value: 10,
                is_called: false,
            },
            SchemaChange::ReserveSequence {
                id: 6,
                upto: 42,
                generation: 3,
            },
            SchemaChange::DropSequence { id: 6 },
            SchemaChange::SetConstraints {
                table: 7,
                checks: vec![],
                foreign_keys: t.foreign_keys.clone(),
            },
            SchemaChange::CreateTable(t.clone()),
            SchemaChange::CreateTable(TableSchema {
                columns: vec![ColumnDef {
                    name: "price".into(),
                    ty: DataType::NumericTypmod {
                        precision: 10,
                        scale: 2,
                    },
                    not_null: false,
                    default: Some(
                        Value::Text("1.5".into())
                            .coerce(&DataType::Numeric)
                            .unwrap(),
                    ),
                    default_expr: None,
                    identity: None,
                }],
                ..t
            }),
            SchemaChange::DropTable { id: 7 },
            SchemaChange::DropIndex {
                table: 7,
                name: "users_name".into(),
            },
            SchemaChange::CreateRole(crate::RoleDef {
                id: 9,
                name: "alice".into(),
                login: true,
                superuser: false,
                createrole: true,
                password: Some(crate::ScramVerifier::derive(
                    "pw",
                    b"salt-salt-salt!!",
                    4096,
                )),
            }),
            SchemaChange::AlterRole(crate::RoleDef {
                id: 9,
                name: "alice".into(),
                login: false,
                superuser: true,
                createrole: false,
                password: None,
            }),
            SchemaChange::DropRole { id: 9 },
            SchemaChange::AlterView {
                id: 11,
                sql: "CREATE VIEW v AS SELECT x.a FROM t2 AS x".into(),
            },
            SchemaChange::SetOwner {
                object: 7,
                owner: "alice".into(),
            },
            SchemaChange::Grant {
                object: 7,
                grantee: Grantee::Public,
                privileges: vec![Privilege::Select, Privilege::Delete],
            },
            SchemaChange::Revoke {
                object: 7,
                grantee: Grantee::Role("bob".into()),
                privileges: vec![Privilege::Insert],
            },
        ] {
            assert_eq!(SchemaChange::decode(&c.encode()).unwrap(), c);
        }
    }

    #[test]
    fn enum_types_and_columns_round_trip_and_alter_type_reaches_columns() {
        let labels: Vec<String> = ["sad", "ok", "happy"].map(String::from).to_vec();
        let mood = EnumType::new(3, "mood", &labels).unwrap();
        let mut added = mood.clone();
        added
            .add("meh", &aqueduct_values::LabelPlace::Before("ok".into()))
            .unwrap();
        let ty = DataType::Enum(Arc::new(mood.clone()));
        let mut column = ColumnDef::new("feeling", ty.clone());
        column.default = Some(Value::Text("ok".into()).coerce(&ty).unwrap());
        let table = TableSchema {
            id: 4,
            name: "people".into(),
            columns: vec![
                column,
                ColumnDef::new("seen", DataType::Array(Box::new(ty.clone()))),
            ],
            ..TableSchema::default()
        };
        for c in [
            SchemaChange::CreateType(mood.clone()),
            SchemaChange::CreateTable(table.clone()),
            SchemaChange::AlterType(added.clone()),
            SchemaChange::DropType { id: 3 },
            SchemaChange::Comment {
                object: 7,
                column: 2,
                text: Some("the user's \"name\"".into()),
            },
            SchemaChange::Comment {
                object: 7,
                column: 0,
                text: None,
            },
        ] {
            assert_eq!(SchemaChange::decode(&c.encode()).unwrap(), c);
        }
        // Replayed: the column takes the added label.
        let mut catalog = crate::Catalog::default();
        catalog.apply_schema(SchemaChange::CreateType(mood));
        catalog.apply_schema(SchemaChange::CreateTable(table));
        catalog.apply_schema(SchemaChange::AlterType(added));
        let t = catalog.table("people").unwrap();
        let meh = Value::Text("meh".into()).coerce(&t.schema.columns[0].ty);
        let ok = Value::Text("ok".into()).coerce(&t.schema.columns[0].ty);
        assert!(meh.clone().unwrap() < ok.unwrap(), "{meh:?}");
        assert!(Value::Text("{meh}".into())
            .coerce(&t.schema.columns[1].ty)
            .is_ok());
    }

    #[test]
    fn numeric_precision_and_scale_are_kept_and_old_records_load() {
        let column = |ty: &str| {
            format!(
                r#"{{"op":"create_table","v":1,"id":3,"name":"m","columns":[{{"name":"n","ty":"{ty}","not_null":false,"default":"1.5"}}],"primary_key":[],"indexes":[]}}"#
            )
        };
        // A record written before numeric(p, s) was kept: plain numeric.
        let SchemaChange::CreateTable(old) =
            SchemaChange::decode(column("numeric").as_bytes()).unwrap()
        else {
            panic!("not a table")
        };
        assert_eq!(old.columns[0].ty, DataType::Numeric);
        assert_eq!(
            old.columns[0].default.as_ref().unwrap().to_text().unwrap(),
            "1.5"
        );
        // Today's record: the type text carries them, and the default is
        // read at that scale.
        let SchemaChange::CreateTable(new) =
            SchemaChange::decode(column("numeric(10,2)").as_bytes()).unwrap()
        else {
            panic!("not a table")
        };
        assert_eq!(
            new.columns[0].ty,
            DataType::NumericTypmod {
                precision: 10,
                scale: 2
            }
        );
        assert_eq!(
            new.columns[0].default.as_ref().unwrap().to_text().unwrap(),
            "1.50"
        );
        let again = SchemaChange::decode(&SchemaChange::CreateTable(new.clone()).encode()).unwrap();
        assert_eq!(again, SchemaChange::CreateTable(new));
    }

    #[test]
    fn the_ephemeral_flag_is_kept_and_absent_means_stored() {
        let old = br#"{"op":"create_table","v":1,"id":3,"name":"m","columns":[],"primary_key":[],"indexes":[]}"#;
        let SchemaChange::CreateTable(t) = SchemaChange::decode(old).unwrap() else {
            panic!("not a table")
        };
        assert!(!t.ephemeral, "a record without the flag is a stored table");
        let stored = String::from_utf8(SchemaChange::CreateTable(t.clone()).encode()).unwrap();
        assert!(!stored.contains("ephemeral"), "{stored}");
        let eph = TableSchema {
            ephemeral: true,
            ..t
        };
        let text = String::from_utf8(SchemaChange::CreateTable(eph.clone()).encode()).unwrap();
        assert!(text.contains(r#""ephemeral":true"#), "{text}");
        assert_eq!(
            SchemaChange::decode(text.as_bytes()).unwrap(),
            SchemaChange::CreateTable(eph)
        );
    }
}
