//! The system catalog as PostgreSQL's tools read it: `pg_catalog` and
//! `information_schema` relations built from Aqueduct's own catalog for the
//! statement that reads them (never a second copy that could drift), and
//! the lookups behind the catalog functions (`pg_get_indexdef`,
//! `format_type`, `oid::regclass`, ...).
//!
//! Object ids are stable: a table, view, sequence or enum type has
//! `FIRST_USER_OID + 2·id` (its array type the next one), from the id the
//! log gave it; an index or constraint has an id hashed from its table's id
//! and its own name into a range no counter reaches. The catalog's own
//! relations, types and namespaces have PostgreSQL's fixed ids.
//! `docs/catalog.md` lists the relations and columns.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aqueduct_expr::{quote_ident, Lookup, LookupMiss};
use aqueduct_tables::{Catalog, ColumnDef, FkAction, SchemaChange, TableId, TableSchema};
use aqueduct_values::{DataType, Value, FIRST_USER_OID};

/// `pg_catalog`'s namespace id.
pub const NS_PG_CATALOG: u32 = 11;
/// `public`'s namespace id.
pub const NS_PUBLIC: u32 = 2200;

/// The `public` schema's comment, as PostgreSQL has it (pg_dump leaves
/// that one out of a dump), by the object's id and its catalog's.
const PUBLIC_SCHEMA_COMMENT: (u32, u32, &str) = (NS_PUBLIC, 2615, "standard public schema");

/// `pg_description`'s rows: the object's id, its catalog's id, the column
/// (0 for the object itself) and the comment (`COMMENT ON`).
pub fn descriptions(catalog: &Catalog) -> Vec<(u32, u32, i64, String)> {
    let (objoid, classoid, public) = PUBLIC_SCHEMA_COMMENT;
    let mut out = vec![(objoid, classoid, 0, public.to_string())];
    for (&(object, column), text) in &catalog.comments {
        let classoid = if catalog.types.contains_key(&object) {
            1247
        } else {
            1259
        };
        out.push((
            object_oid(object),
            classoid,
            i64::from(column),
            text.clone(),
        ));
    }
    out
}
/// `information_schema`'s namespace id.
pub const NS_INFORMATION_SCHEMA: u32 = 13_000;
/// `pg_database_owner`, the role that owns `public`.
const DATABASE_OWNER: u32 = 6171;
/// The database's id.
pub const DATABASE_OID: u32 = 5;
/// The ordered index method (`btree`).
const AM_BTREE: u32 = 403;
/// The table access method (`heap`).
const AM_HEAP: u32 = 2;
/// The first table id of the relations built here: far above any id the
/// log hands out, below the automatic views' ids.
pub const CATALOG_RELATION_IDS: TableId = u64::MAX / 4;
/// Ids of indexes and constraints are hashed into `[SUB_OID_BASE,
/// SUB_OID_BASE + SUB_OID_SPAN)`, above every id a counter gives.
const SUB_OID_BASE: u32 = 1 << 30;
const SUB_OID_SPAN: u32 = 1 << 30;

/// What the catalog relations need of the session reading them.
#[derive(Clone, Debug, Default)]
pub struct CatalogContext {
    /// The role the session runs as (it owns what predates owners).
    pub user: String,
    /// The session's settings (`pg_settings`, `current_setting`).
    pub settings: BTreeMap<String, String>,
    /// The result columns of each maintained view, by name.
    pub view_columns: BTreeMap<String, Vec<(String, DataType)>>,
    /// The base tables each maintained view reads, by name.
    pub view_tables: BTreeMap<String, Vec<TableId>>,
    /// The server's backends (`pg_stat_activity`).
    pub activity: Vec<BackendActivity>,
}

/// One backend as `pg_stat_activity` shows it (times in microseconds
/// since the Unix epoch).
#[derive(Clone, Debug, Default)]
pub struct BackendActivity {
    pub pid: i32,
    pub user: String,
    pub application_name: String,
    pub client: Option<std::net::SocketAddr>,
    pub backend_start: i64,
    pub xact_start: Option<i64>,
    pub query_start: Option<i64>,
    pub state_change: i64,
    pub state: String,
    pub query: String,
}

/// The id of a table, view, sequence or enum type with log id `id`.
pub fn object_oid(id: TableId) -> u32 {
    FIRST_USER_OID
        .saturating_add(u32::try_from(id.saturating_mul(2)).unwrap_or(u32::MAX - FIRST_USER_OID))
}

/// The id of an index or constraint `name` of the table with log id
/// `table` (`kind` tells an index from a constraint of the same name).
pub fn sub_oid(table: TableId, kind: u8, name: &str) -> u32 {
    // FNV-1a: stable across builds and restarts.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in table
        .to_le_bytes()
        .iter()
        .chain([kind].iter())
        .chain(name.as_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    SUB_OID_BASE + (h % u64::from(SUB_OID_SPAN)) as u32
}

/// The id of the `_RETURN` rule of the view with log id `view`.
fn view_rule_oid(view: TableId) -> u32 {
    sub_oid(view, b'r', "_RETURN")
}

/// The ids of the catalog's own relations.
pub fn system_relation_oids() -> impl Iterator<Item = u32> {
    SYSTEM_RELATIONS.iter().map(|(_, o)| *o)
}

/// The name of the catalog relation with PostgreSQL's fixed id `oid`.
pub fn relation_name_of(oid: u32) -> Option<&'static str> {
    SYSTEM_RELATIONS
        .iter()
        .find(|(_, o)| *o == oid)
        .map(|(name, _)| *name)
}

/// The catalog's own relations with PostgreSQL's fixed ids, as
/// `'pg_class'::regclass` finds them.
const SYSTEM_RELATIONS: &[(&str, u32)] = &[
    ("pg_type", 1247),
    ("pg_attribute", 1249),
    ("pg_proc", 1255),
    ("pg_class", 1259),
    ("pg_authid", 1260),
    ("pg_database", 1262),
    ("pg_tablespace", 1213),
    ("pg_am", 2601),
    ("pg_attrdef", 2604),
    ("pg_constraint", 2606),
    ("pg_depend", 2608),
    ("pg_description", 2609),
    ("pg_index", 2610),
    ("pg_inherits", 2611),
    ("pg_namespace", 2615),
    ("pg_rewrite", 2618),
    ("pg_trigger", 2620),
    ("pg_sequence", 2224),
    ("pg_collation", 3456),
    ("pg_enum", 3501),
    ("pg_extension", 3079),
    ("pg_init_privs", 3394),
    ("pg_language", 2612),
    ("pg_cast", 2605),
    ("pg_opclass", 2616),
    ("pg_opfamily", 2753),
    ("pg_operator", 2617),
    ("pg_aggregate", 2600),
    ("pg_conversion", 2607),
    ("pg_ts_parser", 3601),
    ("pg_ts_template", 3764),
    ("pg_ts_dict", 3600),
    ("pg_ts_config", 3602),
    ("pg_foreign_data_wrapper", 2328),
    ("pg_foreign_server", 1417),
    ("pg_user_mapping", 1418),
    ("pg_default_acl", 826),
    ("pg_event_trigger", 3466),
    ("pg_transform", 3576),
    ("pg_subscription", 6100),
    ("pg_largeobject_metadata", 2995),
    ("pg_seclabel", 3596),
    ("pg_shseclabel", 3592),
    ("pg_shdescription", 2396),
    ("pg_db_role_setting", 2964),
    ("pg_amop", 2602),
    ("pg_amproc", 2603),
    ("pg_publication", 6104),
    ("pg_publication_rel", 6106),
    ("pg_publication_namespace", 6237),
    ("pg_publication_tables", 6119),
    ("pg_policy", 3256),
    ("pg_statistic_ext", 3381),
    ("pg_foreign_table", 3118),
    ("pg_partitioned_table", 3350),
    ("pg_range", 3541),
    ("pg_auth_members", 1261),
];

/// A built-in type as `pg_type` lists it: (oid, name, length, category,
/// preferred, element oid (0: none), array oid, I/O function stem).
type BuiltinType = (
    u32,
    &'static str,
    i16,
    &'static str,
    bool,
    u32,
    u32,
    &'static str,
);

const BUILTIN_TYPES: &[BuiltinType] = &[
    (16, "bool", 1, "B", true, 0, 1000, "bool"),
    (17, "bytea", -1, "U", false, 0, 1001, "bytea"),
    (18, "char", 1, "Z", false, 0, 1002, "char"),
    (19, "name", 64, "S", false, 18, 1003, "name"),
    (20, "int8", 8, "N", false, 0, 1016, "int8"),
    (21, "int2", 2, "N", false, 0, 1005, "int2"),
    (23, "int4", 4, "N", false, 0, 1007, "int4"),
    (25, "text", -1, "S", true, 0, 1009, "text"),
    (26, "oid", 4, "N", false, 0, 1028, "oid"),
    (114, "json", -1, "U", false, 0, 199, "json_"),
    (700, "float4", 4, "N", false, 0, 1021, "float4"),
    (701, "float8", 8, "N", true, 0, 1022, "float8"),
    (1043, "varchar", -1, "S", false, 0, 1015, "varchar"),
    (1082, "date", 4, "D", false, 0, 1182, "date_"),
    (1114, "timestamp", 8, "D", false, 0, 1115, "timestamp_"),
    (1184, "timestamptz", 8, "D", true, 0, 1185, "timestamptz_"),
    (1186, "interval", 16, "T", true, 0, 1187, "interval_"),
    (1700, "numeric", -1, "N", false, 0, 1231, "numeric_"),
    (2950, "uuid", 16, "U", false, 0, 2951, "uuid_"),
    (3802, "jsonb", -1, "U", false, 0, 3807, "jsonb_"),
];

/// PostgreSQL's name for a built-in type oid in `format_type`.
fn formatted_builtin(oid: u32) -> Option<String> {
    if oid == 19 {
        return Some("name".into());
    }
    if oid == 18 {
        return Some("\"char\"".into());
    }
    if oid == 26 {
        return Some("oid".into());
    }
    let ty = DataType::from_pg_oid(oid)?;
    Some(ty.to_string())
}

/// How PostgreSQL stores a type's values (`attstorage`): in the row
/// (`p`), compressed in the row (`m`, numeric) or out of it (`x`).
fn storage(ty: &DataType) -> &'static str {
    match ty {
        DataType::Numeric | DataType::NumericTypmod { .. } => "m",
        DataType::Enum(_) => "p",
        t if t.pg_len() > 0 => "p",
        _ => "x",
    }
}

/// A column's type modifier as `pg_attribute.atttypmod` has it.
fn typmod(ty: &DataType) -> i64 {
    match ty {
        DataType::Varchar(Some(n)) => i64::from(*n) + 4,
        DataType::NumericTypmod { precision, scale } => {
            ((i64::from(*precision) << 16) | i64::from(*scale)) + 4
        }
        DataType::Array(e) => typmod(e),
        _ => -1,
    }
}

/// A relation of the user's as the catalog relations describe it.
struct Rel {
    oid: u32,
    name: String,
    /// `r`, `v`, `S` or `i`.
    kind: &'static str,
    owner: String,
    /// Name, type, not null, default SQL (tables only).
    columns: Vec<(String, DataType, bool, Option<String>)>,
    /// The table's log id (tables, sequences, views, indexes' tables).
    table: TableId,
}

struct Index {
    oid: u32,
    name: String,
    table: TableId,
    table_oid: u32,
    table_name: String,
    unique: bool,
    primary: bool,
    /// Column numbers (1-based; 0 for an expression).
    keys: Vec<i64>,
    /// Each key as SQL (a column's name or an expression).
    key_sql: Vec<String>,
    expressions: Vec<String>,
    predicate: Option<String>,
    immediate: bool,
}

struct Constraint {
    oid: u32,
    name: String,
    /// `p`, `u`, `f` or `c`.
    kind: &'static str,
    table_oid: u32,
    table_name: String,
    keys: Vec<i64>,
    index_oid: u32,
    ref_oid: u32,
    ref_name: String,
    ref_keys: Vec<i64>,
    on_update: &'static str,
    on_delete: &'static str,
    deferrable: bool,
    deferred: bool,
    check: Option<String>,
    /// The unique constraint a foreign key's referenced columns match.
    ref_constraint: Option<String>,
    /// `pg_get_constraintdef(oid, true)`; without `pretty` a CHECK's
    /// condition has parentheses of its own.
    def: String,
}

impl Constraint {
    fn plain_def(&self) -> String {
        match &self.check {
            Some(sql) => format!("CHECK (({sql}))"),
            None => self.def.clone(),
        }
    }
}

/// The user's objects as the relations and functions describe them.
struct Model<'a> {
    catalog: &'a Catalog,
    ctx: &'a CatalogContext,
    relations: Vec<Rel>,
    indexes: Vec<Index>,
    constraints: Vec<Constraint>,
}

fn fk_action(a: FkAction) -> (&'static str, &'static str) {
    match a {
        FkAction::NoAction => ("a", "NO ACTION"),
        FkAction::Restrict => ("r", "RESTRICT"),
        FkAction::Cascade => ("c", "CASCADE"),
        FkAction::SetNull => ("n", "SET NULL"),
        FkAction::SetDefault => ("d", "SET DEFAULT"),
    }
}

impl<'a> Model<'a> {
    fn new(catalog: &'a Catalog, ctx: &'a CatalogContext) -> Model<'a> {
        let owner_of = |id: TableId| {
            catalog
                .acl(id)
                .and_then(|a| a.owner.clone())
                .unwrap_or_else(|| ctx.user.clone())
        };
        let mut relations = Vec::new();
        let mut indexes = Vec::new();
        let mut constraints = Vec::new();
        for t in catalog.tables.values() {
            let s = &t.schema;
            if s.id >= CATALOG_RELATION_IDS {
                continue;
            }
            relations.push(Rel {
                oid: object_oid(s.id),
                name: s.name.clone(),
                kind: "r",
                owner: owner_of(s.id),
                columns: s
                    .columns
                    .iter()
                    .map(|c| (c.name.clone(), c.ty.clone(), c.not_null, default_sql(c)))
                    .collect(),
                table: s.id,
            });
            Self::table_indexes(s, &mut indexes);
        }
        for (id, (name, sql)) in &catalog.views {
            let columns = ctx
                .view_columns
                .get(name)
                .map(|cols| {
                    cols.iter()
                        .map(|(n, t)| (n.clone(), t.clone(), false, None))
                        .collect()
                })
                .unwrap_or_default();
            let _ = sql;
            relations.push(Rel {
                oid: object_oid(*id),
                name: name.clone(),
                kind: "v",
                owner: owner_of(*id),
                columns,
                table: *id,
            });
        }
        for s in catalog.sequences.values() {
            relations.push(Rel {
                oid: object_oid(s.def.id),
                name: s.def.name.clone(),
                kind: "S",
                owner: owner_of(s.def.id),
                columns: vec![
                    ("last_value".into(), DataType::Int8, true, None),
                    ("log_cnt".into(), DataType::Int8, true, None),
                    ("is_called".into(), DataType::Bool, true, None),
                ],
                table: s.def.id,
            });
        }
        for ix in &indexes {
            let table = relations
                .iter()
                .find(|r| r.table == ix.table && r.kind == "r");
            let columns = ix
                .key_sql
                .iter()
                .zip(&ix.keys)
                .map(|(sql, &k)| {
                    let ty = table
                        .filter(|_| k > 0)
                        .map(|t| t.columns[(k - 1) as usize].1.clone())
                        .unwrap_or(DataType::Text);
                    let name = if k > 0 { sql.clone() } else { "expr".into() };
                    (name, ty, false, None)
                })
                .collect();
            relations.push(Rel {
                oid: ix.oid,
                name: ix.name.clone(),
                kind: "i",
                owner: owner_of(ix.table),
                columns,
                table: ix.table,
            });
        }
        for t in catalog.tables.values() {
            if t.schema.id < CATALOG_RELATION_IDS {
                Self::table_constraints(catalog, &t.schema, &indexes, &mut constraints);
            }
        }
        Model {
            catalog,
            ctx,
            relations,
            indexes,
            constraints,
        }
    }

    fn table_indexes(s: &TableSchema, out: &mut Vec<Index>) {
        let table_oid = object_oid(s.id);
        let col_sql = |c: usize| quote_ident(&s.columns[c].name);
        if s.has_primary_key() {
            let name = format!("{}_pkey", s.name);
            out.push(Index {
                oid: sub_oid(s.id, b'i', &name),
                name,
                table: s.id,
                table_oid,
                table_name: s.name.clone(),
                unique: true,
                primary: true,
                keys: s.primary_key.iter().map(|&c| c as i64 + 1).collect(),
                key_sql: s.primary_key.iter().map(|&c| col_sql(c)).collect(),
                expressions: Vec::new(),
                predicate: None,
                immediate: true,
            });
        }
        for ix in &s.indexes {
            let (keys, key_sql) = if ix.expressions.is_empty() {
                (
                    ix.columns.iter().map(|&c| c as i64 + 1).collect(),
                    ix.columns.iter().map(|&c| col_sql(c)).collect(),
                )
            } else {
                (
                    vec![0; ix.expressions.len()],
                    ix.expressions.iter().map(|e| format!("({e})")).collect(),
                )
            };
            out.push(Index {
                oid: sub_oid(s.id, b'i', &ix.name),
                name: ix.name.clone(),
                table: s.id,
                table_oid,
                table_name: s.name.clone(),
                unique: ix.unique,
                primary: false,
                keys,
                key_sql,
                expressions: ix.expressions.clone(),
                predicate: ix.predicate.clone(),
                immediate: !ix.deferrable,
            });
        }
    }

    fn table_constraints(
        catalog: &Catalog,
        s: &TableSchema,
        indexes: &[Index],
        out: &mut Vec<Constraint>,
    ) {
        let table_oid = object_oid(s.id);
        let names = |cols: &[usize], schema: &TableSchema| {
            cols.iter()
                .map(|&c| quote_ident(&schema.columns[c].name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let blank = |name: String, kind: &'static str| Constraint {
            oid: sub_oid(s.id, b'c', &name),
            name,
            kind,
            table_oid,
            table_name: s.name.clone(),
            keys: Vec::new(),
            index_oid: 0,
            ref_oid: 0,
            ref_name: String::new(),
            ref_keys: Vec::new(),
            on_update: " ",
            on_delete: " ",
            deferrable: false,
            deferred: false,
            check: None,
            ref_constraint: None,
            def: String::new(),
        };
        for ix in indexes.iter().filter(|i| i.table == s.id) {
            let schema_ix = s.indexes.iter().find(|i| i.name == ix.name);
            if !ix.primary && !schema_ix.is_some_and(|i| i.constraint) {
                continue;
            }
            let (kind, word) = if ix.primary {
                ("p", "PRIMARY KEY")
            } else {
                ("u", "UNIQUE")
            };
            let mut c = blank(ix.name.clone(), kind);
            c.keys = ix.keys.clone();
            c.index_oid = ix.oid;
            c.deferrable = schema_ix.is_some_and(|i| i.deferrable);
            c.deferred = schema_ix.is_some_and(|i| i.initially_deferred);
            c.def =
                format!("{word} ({})", ix.key_sql.join(", ")) + &deferral(c.deferrable, c.deferred);
            out.push(c);
        }
        for fk in &s.foreign_keys {
            let Some(target) = catalog.table_by_id(fk.ref_table) else {
                continue;
            };
            let mut c = blank(fk.name.clone(), "f");
            c.keys = fk.columns.iter().map(|&k| k as i64 + 1).collect();
            c.ref_oid = object_oid(fk.ref_table);
            c.ref_name = target.schema.name.clone();
            c.ref_keys = fk.ref_columns.iter().map(|&k| k as i64 + 1).collect();
            let (upd, upd_sql) = fk_action(fk.on_update);
            let (del, del_sql) = fk_action(fk.on_delete);
            c.on_update = upd;
            c.on_delete = del;
            c.deferrable = fk.deferrable;
            c.deferred = fk.initially_deferred;
            let referenced: Vec<i64> = c.ref_keys.clone();
            c.ref_constraint = indexes
                .iter()
                .filter(|i| i.table == fk.ref_table && i.unique)
                .find(|i| {
                    let mut a = i.keys.clone();
                    let mut b = referenced.clone();
                    a.sort_unstable();
                    b.sort_unstable();
                    a == b
                })
                .map(|i| {
                    c.index_oid = i.oid;
                    i.name.clone()
                });
            let mut def = format!(
                "FOREIGN KEY ({}) REFERENCES {}({})",
                names(&fk.columns, s),
                quote_ident(&target.schema.name),
                names(&fk.ref_columns, &target.schema)
            );
            if upd != "a" {
                def += &format!(" ON UPDATE {upd_sql}");
            }
            if del != "a" {
                def += &format!(" ON DELETE {del_sql}");
            }
            c.def = def + &deferral(c.deferrable, c.deferred);
            out.push(c);
        }
        for check in &s.checks {
            let mut c = blank(check.name.clone(), "c");
            c.check = Some(check.sql.clone());
            c.def = format!("CHECK ({})", check.sql);
            out.push(c);
        }
    }

    fn relation(&self, oid: u32) -> Option<&Rel> {
        self.relations.iter().find(|r| r.oid == oid)
    }

    fn index_def(ix: &Index) -> String {
        let mut def = format!(
            "CREATE {}INDEX {} ON public.{} USING btree ({})",
            if ix.unique { "UNIQUE " } else { "" },
            quote_ident(&ix.name),
            quote_ident(&ix.table_name),
            ix.key_sql.join(", ")
        );
        if let Some(p) = &ix.predicate {
            def += &format!(" WHERE ({p})");
        }
        def
    }

    /// Every type as `pg_type` lists it: built-in ones, their arrays, and
    /// the enum types with theirs.
    fn types(&self) -> Vec<TypeRow> {
        let mut out = Vec::new();
        for &(oid, name, len, category, preferred, elem, array, io) in BUILTIN_TYPES {
            out.push(TypeRow {
                oid,
                name: name.into(),
                len,
                kind: "b",
                category,
                preferred,
                elem,
                array,
                io: io.into(),
                namespace: NS_PG_CATALOG,
                owner: "aqueduct".into(),
            });
            out.push(TypeRow {
                oid: array,
                name: format!("_{name}"),
                len: -1,
                kind: "b",
                category: "A",
                preferred: false,
                elem: oid,
                array: 0,
                io: "array_".into(),
                namespace: NS_PG_CATALOG,
                owner: "aqueduct".into(),
            });
        }
        for t in self.catalog.types.values() {
            out.push(TypeRow {
                oid: t.oid(),
                name: t.name.clone(),
                len: 4,
                kind: "e",
                category: "E",
                preferred: false,
                elem: 0,
                array: t.array_oid(),
                io: "enum_".into(),
                namespace: NS_PUBLIC,
                owner: self.ctx.user.clone(),
            });
            out.push(TypeRow {
                oid: t.array_oid(),
                name: format!("_{}", t.name),
                len: -1,
                kind: "b",
                category: "A",
                preferred: false,
                elem: t.oid(),
                array: 0,
                io: "array_".into(),
                namespace: NS_PUBLIC,
                owner: self.ctx.user.clone(),
            });
        }
        out
    }

    /// `format_type(oid, NULL)` for every type.
    fn type_names(&self) -> HashMap<Vec<Value>, Value> {
        let mut out = HashMap::new();
        for t in self.types() {
            let name = if t.namespace == NS_PUBLIC {
                let base = if t.elem != 0 {
                    self.catalog
                        .types
                        .values()
                        .find(|e| e.oid() == t.elem)
                        .map(|e| format!("{}[]", quote_ident(&e.name)))
                } else {
                    Some(quote_ident(&t.name))
                };
                base.unwrap_or_default()
            } else if t.elem != 0 && t.category == "A" {
                format!("{}[]", formatted_builtin(t.elem).unwrap_or_default())
            } else {
                formatted_builtin(t.oid).unwrap_or(t.name.clone())
            };
            out.insert(vec![oid(t.oid)], Value::Text(name));
        }
        out
    }
}

struct TypeRow {
    oid: u32,
    name: String,
    len: i16,
    kind: &'static str,
    category: &'static str,
    preferred: bool,
    elem: u32,
    array: u32,
    io: String,
    namespace: u32,
    owner: String,
}

fn deferral(deferrable: bool, deferred: bool) -> String {
    match (deferrable, deferred) {
        (false, _) => String::new(),
        (true, false) => " DEFERRABLE".into(),
        (true, true) => " DEFERRABLE INITIALLY DEFERRED".into(),
    }
}

/// A column's default as SQL, as `pg_get_expr(adbin, adrelid)` gives it.
fn default_sql(c: &ColumnDef) -> Option<String> {
    if let Some(e) = &c.default_expr {
        return Some(e.clone());
    }
    let v = c.default.as_ref()?;
    let text = v.to_text()?;
    Some(match v {
        Value::Int(_) | Value::Float(_) | Value::Numeric(_) => text,
        Value::Bool(b) => b.to_string(),
        _ => format!("'{}'::{}", text.replace('\'', "''"), type_sql_name(&c.ty)),
    })
}

/// A type as `format_type` writes it.
fn type_sql_name(ty: &DataType) -> String {
    match ty {
        DataType::Enum(t) => quote_ident(&t.name),
        DataType::Array(e) => format!("{}[]", type_sql_name(e)),
        other => other.to_string(),
    }
}

fn oid(o: u32) -> Value {
    Value::Int(i64::from(o))
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

fn int(i: i64) -> Value {
    Value::Int(i)
}

fn boolean(b: bool) -> Value {
    Value::Bool(b)
}

fn int2_array(keys: &[i64]) -> Value {
    Value::Array(keys.iter().map(|&k| Value::Int(k)).collect())
}

fn null() -> Value {
    Value::Null
}

/// One relation's columns: `name type` pairs, comma-separated.
fn columns(spec: &str) -> Vec<ColumnDef> {
    spec.split(',')
        .map(|c| {
            let (name, ty) = c.trim().split_once(' ').expect("name and type");
            let ty = match ty {
                "char" => DataType::Char,
                other => DataType::from_sql(other, &[]).expect("a known type"),
            };
            ColumnDef::new(name, ty)
        })
        .collect()
}

/// A catalog relation: its name, its columns, and its rows.
struct Relation {
    name: &'static str,
    columns: &'static str,
    rows: fn(&Model) -> Vec<Vec<Value>>,
}

const RELATIONS: &[Relation] = &[
    Relation {
        name: "pg_namespace",
        columns: "oid oid, nspname name, nspowner oid, nspacl text",
        rows: |_| {
            [
                (NS_PG_CATALOG, "pg_catalog"),
                (NS_PUBLIC, "public"),
                (NS_INFORMATION_SCHEMA, "information_schema"),
            ]
            .iter()
            .map(|&(o, n)| {
                // PostgreSQL 15's `public` belongs to pg_database_owner.
                let owner = if o == NS_PUBLIC { DATABASE_OWNER } else { 10 };
                vec![oid(o), text(n), oid(owner), null()]
            })
            .collect()
        },
    },
    Relation {
        name: "pg_class",
        columns: "oid oid, relname name, relnamespace oid, reltype oid, reloftype oid, \
                  relowner oid, relam oid, relfilenode oid, reltablespace oid, relpages int4, \
                  reltuples float4, relallvisible int4, reltoastrelid oid, relhasindex bool, \
                  relisshared bool, relpersistence char, relkind char, relnatts int2, \
                  relchecks int2, relhasrules bool, relhastriggers bool, relhassubclass bool, \
                  relrowsecurity bool, relforcerowsecurity bool, relispopulated bool, \
                  relreplident char, relispartition bool, relrewrite oid, relfrozenxid int8, \
                  relminmxid int8, relacl text[], reloptions text[], relpartbound text",
        rows: |m| {
            m.relations
                .iter()
                .map(|r| {
                    // A table's and its indexes' row counts are exact; an
                    // index's one page is its metapage, as a new btree's.
                    let rows = match r.kind {
                        "r" | "i" => m.catalog.table_by_id(r.table).map_or(0, |t| t.len() as i64),
                        _ => 0,
                    };
                    let has_index = m
                        .indexes
                        .iter()
                        .any(|i| i.table == r.table && r.kind == "r");
                    let checks = m
                        .constraints
                        .iter()
                        .filter(|c| c.table_oid == r.oid && c.kind == "c")
                        .count();
                    // PostgreSQL keeps a foreign key by triggers on both
                    // tables, and tools look for foreign keys only then.
                    let triggers = m
                        .constraints
                        .iter()
                        .any(|c| c.kind == "f" && (c.table_oid == r.oid || c.ref_oid == r.oid));
                    vec![
                        oid(r.oid),
                        text(&r.name),
                        oid(NS_PUBLIC),
                        oid(0),
                        oid(0),
                        oid(role_oid(m.catalog, &r.owner)),
                        oid(match r.kind {
                            "r" | "S" => AM_HEAP,
                            "i" => AM_BTREE,
                            _ => 0,
                        }),
                        oid(if r.kind == "v" { 0 } else { r.oid }),
                        oid(0),
                        int(if r.kind == "i" { 1 } else { 0 }),
                        Value::Float(if matches!(r.kind, "r" | "i") {
                            rows as f64
                        } else {
                            -1.0
                        }),
                        int(0),
                        oid(0),
                        boolean(has_index),
                        boolean(false),
                        text("p"),
                        text(r.kind),
                        int(r.columns.len() as i64),
                        int(checks as i64),
                        boolean(r.kind == "v"),
                        boolean(triggers),
                        boolean(false),
                        boolean(false),
                        boolean(false),
                        boolean(true),
                        text(if r.kind == "r" { "d" } else { "n" }),
                        boolean(false),
                        oid(0),
                        int(0),
                        int(0),
                        null(),
                        // An ephemeral table's storage parameter, which
                        // psql's \d+ prints as "Options: ephemeral=true".
                        match m.catalog.table_by_id(r.table) {
                            Some(t) if r.kind == "r" && t.schema.ephemeral => {
                                Value::Array(vec![text("ephemeral=true")])
                            }
                            _ => null(),
                        },
                        null(),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_attribute",
        columns: "attrelid oid, attname name, atttypid oid, attstattarget int4, attlen int2, \
                  attnum int2, attndims int4, attcacheoff int4, atttypmod int4, attbyval bool, \
                  attalign char, attstorage char, attcompression char, attnotnull bool, \
                  atthasdef bool, atthasmissing bool, attidentity char, attgenerated char, \
                  attisdropped bool, attislocal bool, attinhcount int4, attcollation oid, \
                  attacl text[], attoptions text[], attfdwoptions text[], attmissingval text",
        rows: |m| {
            let mut out = Vec::new();
            for r in &m.relations {
                let identity = |i: usize| {
                    m.catalog
                        .table_by_id(r.table)
                        .filter(|_| r.kind == "r")
                        .and_then(|t| t.schema.columns[i].identity.as_ref())
                        .map_or("", |id| if id.always { "a" } else { "d" })
                };
                for (i, (name, ty, not_null, default)) in r.columns.iter().enumerate() {
                    let textual = ty.is_textual() && !matches!(ty, DataType::Char);
                    out.push(vec![
                        oid(r.oid),
                        text(name),
                        oid(ty.pg_oid()),
                        int(-1),
                        int(i64::from(ty.pg_len())),
                        int(i as i64 + 1),
                        int(i64::from(matches!(ty, DataType::Array(_)))),
                        int(-1),
                        int(typmod(ty)),
                        boolean(ty.pg_len() > 0 && ty.pg_len() <= 8),
                        text(match ty.pg_len() {
                            1 => "c",
                            2 => "s",
                            4 => "i",
                            _ => "d",
                        }),
                        text(storage(ty)),
                        text(""),
                        boolean(*not_null),
                        boolean(default.is_some() && r.kind == "r"),
                        boolean(false),
                        text(identity(i)),
                        text(""),
                        boolean(false),
                        boolean(true),
                        int(0),
                        oid(if textual { 100 } else { 0 }),
                        null(),
                        null(),
                        null(),
                        null(),
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "pg_type",
        columns: "oid oid, typname name, typnamespace oid, typowner oid, typlen int2, \
                  typbyval bool, typtype char, typcategory char, typispreferred bool, \
                  typisdefined bool, typdelim char, typrelid oid, typsubscript text, \
                  typelem oid, typarray oid, typinput text, typoutput text, typreceive text, \
                  typsend text, typmodin text, typmodout text, typanalyze text, typalign char, \
                  typstorage char, typnotnull bool, typbasetype oid, typtypmod int4, \
                  typndims int4, typcollation oid, typdefaultbin text, typdefault text, \
                  typacl text[]",
        rows: |m| {
            m.types()
                .into_iter()
                .map(|t| {
                    let io = |suffix: &str| match t.io.strip_suffix('_') {
                        Some(stem) => format!("{stem}_{suffix}"),
                        None => format!("{}{suffix}", t.io),
                    };
                    let textual = matches!(t.oid, 25 | 1043 | 19);
                    vec![
                        oid(t.oid),
                        text(&t.name),
                        oid(t.namespace),
                        oid(role_oid(m.catalog, &t.owner)),
                        int(i64::from(t.len)),
                        boolean(t.len > 0 && t.len <= 8),
                        text(t.kind),
                        text(t.category),
                        boolean(t.preferred),
                        boolean(true),
                        text(","),
                        oid(0),
                        text(if t.category == "A" {
                            "array_subscript_handler"
                        } else {
                            "-"
                        }),
                        oid(t.elem),
                        oid(t.array),
                        text(&io("in")),
                        text(&io("out")),
                        text(&io("recv")),
                        text(&io("send")),
                        text("-"),
                        text("-"),
                        text("-"),
                        text(match t.len {
                            1 => "c",
                            2 => "s",
                            4 => "i",
                            _ => "d",
                        }),
                        // As `attstorage` has it for a column of the type.
                        text(match t.oid {
                            1700 => "m",
                            _ if t.len > 0 => "p",
                            _ => "x",
                        }),
                        boolean(false),
                        oid(0),
                        int(-1),
                        int(0),
                        oid(if textual { 100 } else { 0 }),
                        null(),
                        null(),
                        null(),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_enum",
        columns: "oid oid, enumtypid oid, enumsortorder float4, enumlabel name",
        rows: |m| {
            let mut out = Vec::new();
            for t in m.catalog.types.values() {
                for (i, (label, _)) in t.labels.iter().enumerate() {
                    out.push(vec![
                        oid(sub_oid(t.id, b'e', label)),
                        oid(t.oid()),
                        Value::Float(i as f64 + 1.0),
                        text(label),
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "pg_range",
        columns: "rngtypid oid, rngsubtype oid, rngmultitypid oid, rngcollation oid, \
                  rngsubopc oid, rngcanonical text, rngsubdiff text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_index",
        columns: "indexrelid oid, indrelid oid, indnatts int2, indnkeyatts int2, \
                  indisunique bool, indnullsnotdistinct bool, indisprimary bool, \
                  indisexclusion bool, indimmediate bool, indisclustered bool, indisvalid bool, \
                  indcheckxmin bool, indisready bool, indislive bool, indisreplident bool, \
                  indkey int2vector, indcollation oidvector, indclass oidvector, \
                  indoption int2vector, \
                  indexprs text, indpred text",
        rows: |m| {
            m.indexes
                .iter()
                .map(|ix| {
                    let n = ix.keys.len() as i64;
                    vec![
                        oid(ix.oid),
                        oid(ix.table_oid),
                        int(n),
                        int(n),
                        boolean(ix.unique),
                        boolean(false),
                        boolean(ix.primary),
                        boolean(false),
                        boolean(ix.immediate),
                        boolean(false),
                        boolean(true),
                        boolean(false),
                        boolean(true),
                        boolean(true),
                        boolean(false),
                        int2_array(&ix.keys),
                        Value::Array(vec![oid(0); ix.keys.len()]),
                        Value::Array(vec![oid(0); ix.keys.len()]),
                        int2_array(&vec![0; ix.keys.len()]),
                        if ix.expressions.is_empty() {
                            null()
                        } else {
                            text(&ix.expressions.join(", "))
                        },
                        ix.predicate.as_deref().map_or(null(), text),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_constraint",
        columns: "oid oid, conname name, connamespace oid, contype char, condeferrable bool, \
                  condeferred bool, convalidated bool, conrelid oid, contypid oid, conindid oid, \
                  conparentid oid, confrelid oid, confupdtype char, confdeltype char, \
                  confmatchtype char, conislocal bool, coninhcount int4, connoinherit bool, \
                  conkey int2[], confkey int2[], conbin text",
        rows: |m| {
            m.constraints
                .iter()
                .map(|c| {
                    vec![
                        oid(c.oid),
                        text(&c.name),
                        oid(NS_PUBLIC),
                        text(c.kind),
                        boolean(c.deferrable),
                        boolean(c.deferred),
                        boolean(true),
                        oid(c.table_oid),
                        oid(0),
                        oid(c.index_oid),
                        oid(0),
                        oid(c.ref_oid),
                        text(c.on_update),
                        text(c.on_delete),
                        text(if c.kind == "f" { "s" } else { " " }),
                        boolean(true),
                        int(0),
                        boolean(false),
                        int2_array(&c.keys),
                        if c.kind == "f" {
                            int2_array(&c.ref_keys)
                        } else {
                            null()
                        },
                        c.check.as_deref().map_or(null(), text),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_attrdef",
        columns: "oid oid, adrelid oid, adnum int2, adbin text",
        rows: |m| {
            let mut out = Vec::new();
            for r in m.relations.iter().filter(|r| r.kind == "r") {
                for (i, (name, _, _, default)) in r.columns.iter().enumerate() {
                    if let Some(d) = default {
                        out.push(vec![
                            oid(sub_oid(r.table, b'd', name)),
                            oid(r.oid),
                            int(i as i64 + 1),
                            text(d),
                        ]);
                    }
                }
            }
            out
        },
    },
    Relation {
        name: "pg_description",
        columns: "objoid oid, classoid oid, objsubid int4, description text",
        rows: |m| {
            descriptions(m.catalog)
                .into_iter()
                .map(|(o, class, column, description)| {
                    vec![oid(o), oid(class), int(column), text(&description)]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_database",
        columns: "oid oid, datname name, datdba oid, encoding int4, datlocprovider char, \
                  datistemplate bool, datallowconn bool, datconnlimit int4, datfrozenxid int8, \
                  datminmxid int8, dattablespace oid, datcollate text, datctype text, \
                  daticulocale text, datcollversion text, datacl text[]",
        rows: |_| {
            vec![vec![
                oid(DATABASE_OID),
                text("aqueduct"),
                oid(10),
                int(6),
                text("c"),
                boolean(false),
                boolean(true),
                int(-1),
                int(0),
                int(1),
                oid(1663),
                // Text compares by its bytes (collation C); case mapping
                // is Unicode's (ctype C.UTF-8).
                text("C"),
                text("C.UTF-8"),
                null(),
                null(),
                null(),
            ]]
        },
    },
    Relation {
        name: "pg_roles",
        columns: "rolname name, rolsuper bool, rolinherit bool, rolcreaterole bool, \
                  rolcreatedb bool, rolcanlogin bool, rolreplication bool, rolconnlimit int4, \
                  rolpassword text, rolvaliduntil timestamptz, rolbypassrls bool, \
                  rolconfig text[], oid oid",
        rows: |m| {
            roles(m)
                .into_iter()
                .map(|(o, name, superuser, createrole, login)| {
                    vec![
                        text(&name),
                        boolean(superuser),
                        boolean(true),
                        boolean(superuser || createrole),
                        boolean(superuser),
                        boolean(login),
                        boolean(superuser),
                        int(-1),
                        text("********"),
                        null(),
                        boolean(superuser),
                        null(),
                        oid(o),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_user",
        columns: "usename name, usesysid oid, usecreatedb bool, usesuper bool, userepl bool, \
                  usebypassrls bool, passwd text, valuntil timestamptz, useconfig text[]",
        rows: |m| {
            roles(m)
                .into_iter()
                .filter(|r| r.4)
                .map(|(o, name, superuser, _, _)| {
                    vec![
                        text(&name),
                        oid(o),
                        boolean(superuser),
                        boolean(superuser),
                        boolean(superuser),
                        boolean(superuser),
                        text("********"),
                        null(),
                        null(),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_stat_activity",
        columns: "datid oid, datname name, pid int4, leader_pid int4, usesysid oid, \
                  usename name, application_name text, client_addr text, \
                  client_hostname text, client_port int4, backend_start timestamptz, \
                  xact_start timestamptz, query_start timestamptz, state_change timestamptz, \
                  wait_event_type text, wait_event text, state text, backend_xid int8, \
                  backend_xmin int8, query_id int8, query text, backend_type text",
        rows: |m| {
            let at = |micros: Option<i64>| micros.map_or(Value::Null, Value::TimestampTz);
            m.ctx
                .activity
                .iter()
                .map(|b| {
                    vec![
                        oid(DATABASE_OID),
                        text("aqueduct"),
                        int(i64::from(b.pid)),
                        null(),
                        oid(role_oid(m.catalog, &b.user)),
                        text(&b.user),
                        text(&b.application_name),
                        b.client.map_or(Value::Null, |c| text(&c.ip().to_string())),
                        null(),
                        b.client.map_or(int(-1), |c| int(i64::from(c.port()))),
                        at(Some(b.backend_start)),
                        at(b.xact_start),
                        at(b.query_start),
                        at(Some(b.state_change)),
                        if b.state == "active" { null() } else { text("Client") },
                        if b.state == "active" { null() } else { text("ClientRead") },
                        text(&b.state),
                        null(),
                        null(),
                        null(),
                        text(&b.query),
                        text("client backend"),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_auth_members",
        columns: "roleid oid, member oid, grantor oid, admin_option bool",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_proc",
        columns: "oid oid, proname name, pronamespace oid, proowner oid, prolang oid, \
                  procost float4, prorows float4, provariadic oid, prosupport text, \
                  prokind char, prosecdef bool, proleakproof bool, proisstrict bool, \
                  proretset bool, provolatile char, proparallel char, pronargs int2, \
                  pronargdefaults int2, prorettype oid, proargtypes oidvector, proallargtypes oid[], \
                  proargmodes char[], proargnames text[], prosrc text, probin text, \
                  proconfig text[], proacl text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_sequence",
        columns: "seqrelid oid, seqtypid oid, seqstart int8, seqincrement int8, seqmax int8, \
                  seqmin int8, seqcache int8, seqcycle bool",
        rows: |m| {
            m.catalog
                .sequences
                .values()
                .map(|s| {
                    let ty = DataType::from_sql(&s.def.ty, &[]).unwrap_or(DataType::Int8);
                    vec![
                        oid(object_oid(s.def.id)),
                        oid(ty.pg_oid()),
                        int(s.def.start),
                        int(s.def.increment),
                        int(s.def.max),
                        int(s.def.min),
                        int(1),
                        boolean(false),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_sequences",
        columns: "schemaname name, sequencename name, sequenceowner name, data_type text, \
                  start_value int8, min_value int8, max_value int8, increment_by int8, \
                  cycle bool, cache_size int8, last_value int8",
        rows: |m| {
            m.catalog
                .sequences
                .values()
                .map(|s| {
                    let ty = DataType::from_sql(&s.def.ty, &[]).unwrap_or(DataType::Int8);
                    let owner = m
                        .relation(object_oid(s.def.id))
                        .map_or(m.ctx.user.clone(), |r| r.owner.clone());
                    vec![
                        text("public"),
                        text(&s.def.name),
                        text(&owner),
                        text(&ty.to_string()),
                        int(s.def.start),
                        int(s.def.min),
                        int(s.def.max),
                        int(s.def.increment),
                        boolean(false),
                        int(1),
                        if s.is_called { int(s.value) } else { null() },
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_tables",
        columns: "schemaname name, tablename name, tableowner name, tablespace name, \
                  hasindexes bool, hasrules bool, hastriggers bool, rowsecurity bool",
        rows: |m| {
            m.relations
                .iter()
                .filter(|r| r.kind == "r")
                .map(|r| {
                    vec![
                        text("public"),
                        text(&r.name),
                        text(&r.owner),
                        null(),
                        boolean(m.indexes.iter().any(|i| i.table == r.table)),
                        boolean(false),
                        boolean(false),
                        boolean(false),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_views",
        columns: "schemaname name, viewname name, viewowner name, definition text",
        rows: |m| {
            m.relations
                .iter()
                .filter(|r| r.kind == "v")
                .map(|r| {
                    vec![
                        text("public"),
                        text(&r.name),
                        text(&r.owner),
                        text(&view_definition(m.catalog, r.table)),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_matviews",
        columns: "schemaname name, matviewname name, matviewowner name, tablespace name, \
                  hasindexes bool, ispopulated bool, definition text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_indexes",
        columns: "schemaname name, tablename name, indexname name, tablespace name, indexdef text",
        rows: |m| {
            m.indexes
                .iter()
                .map(|ix| {
                    vec![
                        text("public"),
                        text(&ix.table_name),
                        text(&ix.name),
                        null(),
                        text(&Model::index_def(ix)),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_settings",
        columns: "name text, setting text, unit text, category text, short_desc text, \
                  extra_desc text, context text, vartype text, source text, min_val text, \
                  max_val text, enumvals text[], boot_val text, reset_val text, \
                  sourcefile text, sourceline int4, pending_restart bool",
        rows: |m| {
            m.ctx
                .settings
                .iter()
                .map(|(name, value)| {
                    vec![
                        text(name),
                        text(value),
                        null(),
                        text("Aqueduct"),
                        text(""),
                        null(),
                        text("user"),
                        text("string"),
                        text("session"),
                        null(),
                        null(),
                        null(),
                        text(value),
                        text(value),
                        null(),
                        null(),
                        boolean(false),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_am",
        columns: "oid oid, amname name, amhandler text, amtype char",
        rows: |_| {
            vec![
                vec![
                    oid(AM_HEAP),
                    text("heap"),
                    text("heap_tableam_handler"),
                    text("t"),
                ],
                vec![oid(AM_BTREE), text("btree"), text("bthandler"), text("i")],
                vec![oid(405), text("hash"), text("hashhandler"), text("i")],
            ]
        },
    },
    Relation {
        name: "pg_collation",
        columns: "oid oid, collname name, collnamespace oid, collowner oid, collprovider char, \
                  collisdeterministic bool, collencoding int4, collcollate text, collctype text",
        rows: |_| {
            [(100, "default", "d"), (950, "C", "c"), (951, "POSIX", "c")]
                .iter()
                .map(|&(o, n, p)| {
                    vec![
                        oid(o),
                        text(n),
                        oid(NS_PG_CATALOG),
                        oid(10),
                        text(p),
                        boolean(true),
                        int(-1),
                        text(if o == 100 { "" } else { n }),
                        text(if o == 100 { "" } else { n }),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_depend",
        columns: "classid oid, objid oid, objsubid int4, refclassid oid, refobjid oid, \
                  refobjsubid int4, deptype char",
        rows: |m| {
            let mut out = Vec::new();
            for s in m.catalog.sequences.values() {
                if let Some((table, column)) = s.def.owned_by {
                    let identity = m
                        .catalog
                        .table_by_id(table)
                        .and_then(|t| t.schema.columns.get(column))
                        .is_some_and(|c| c.identity.is_some());
                    out.push(vec![
                        oid(1259),
                        oid(object_oid(s.def.id)),
                        int(0),
                        oid(1259),
                        oid(object_oid(table)),
                        int(column as i64 + 1),
                        text(if identity { "i" } else { "a" }),
                    ]);
                }
            }
            // A view's rule belongs to the view and reads its tables.
            for r in m.relations.iter().filter(|r| r.kind == "v") {
                let rule = oid(view_rule_oid(r.table));
                out.push(vec![oid(2618), rule.clone(), int(0), oid(1259), oid(r.oid), int(0), text("i")]);
                for &t in m.ctx.view_tables.get(&r.name).into_iter().flatten() {
                    out.push(vec![
                        oid(2618),
                        rule.clone(),
                        int(0),
                        oid(1259),
                        oid(object_oid(t)),
                        int(0),
                        text("n"),
                    ]);
                }
            }
            // A serial column's default reads its sequence: pg_dump makes
            // the sequence first.
            for seq in m.catalog.sequences.values() {
                let Some((table, column)) = seq.def.owned_by else {
                    continue;
                };
                let Some(t) = m.catalog.table_by_id(table) else {
                    continue;
                };
                let Some(c) = t.schema.columns.get(column) else {
                    continue;
                };
                if c.default_expr.is_some() {
                    out.push(vec![
                        oid(2604),
                        oid(sub_oid(table, b'd', &c.name)),
                        int(0),
                        oid(1259),
                        oid(object_oid(seq.def.id)),
                        int(0),
                        text("n"),
                    ]);
                }
            }
            for ix in &m.indexes {
                let constraint = m
                    .constraints
                    .iter()
                    .find(|c| c.index_oid == ix.oid && c.kind != "f");
                out.push(match constraint {
                    Some(c) => vec![
                        oid(1259),
                        oid(ix.oid),
                        int(0),
                        oid(2606),
                        oid(c.oid),
                        int(0),
                        text("i"),
                    ],
                    None => vec![
                        oid(1259),
                        oid(ix.oid),
                        int(0),
                        oid(1259),
                        oid(ix.table_oid),
                        int(0),
                        text("a"),
                    ],
                });
            }
            out
        },
    },
    Relation {
        name: "pg_inherits",
        columns: "inhrelid oid, inhparent oid, inhseqno int4, inhdetachpending bool",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_trigger",
        columns: "oid oid, tgrelid oid, tgparentid oid, tgname name, tgfoid oid, tgtype int2, \
                  tgenabled char, tgisinternal bool, tgconstrrelid oid, tgconstrindid oid, \
                  tgconstraint oid, tgdeferrable bool, tginitdeferred bool, tgnargs int2, \
                  tgattr int2[], tgargs bytea, tgqual text, tgoldtable name, tgnewtable name",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_rewrite",
        columns: "oid oid, rulename name, ev_class oid, ev_type char, ev_enabled char, \
                  is_instead bool, ev_qual text, ev_action text",
        // A view's `_RETURN` rule: what pg_dump orders views by.
        rows: |m| {
            m.relations
                .iter()
                .filter(|r| r.kind == "v")
                .map(|r| {
                    vec![
                        oid(view_rule_oid(r.table)),
                        text("_RETURN"),
                        oid(r.oid),
                        text("1"),
                        text("O"),
                        boolean(true),
                        null(),
                        null(),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_policy",
        columns: "oid oid, polname name, polrelid oid, polcmd char, polpermissive bool, \
                  polroles oid[], polqual text, polwithcheck text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_statistic_ext",
        columns: "oid oid, stxrelid oid, stxname name, stxnamespace oid, stxowner oid, \
                  stxstattarget int4, stxkeys int2[], stxkind char[], stxexprs text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_publication",
        columns: "oid oid, pubname name, pubowner oid, puballtables bool, pubinsert bool, \
                  pubupdate bool, pubdelete bool, pubtruncate bool, pubviaroot bool",
        rows: |m| {
            m.catalog
                .publications
                .values()
                .map(|p| {
                    let owner = m.catalog.owner(p.id).unwrap_or(&m.ctx.user);
                    vec![
                        oid(object_oid(p.id)),
                        text(&p.name),
                        oid(role_oid(m.catalog, owner)),
                        boolean(p.all_tables),
                        boolean(p.publish.insert),
                        boolean(p.publish.update),
                        boolean(p.publish.delete),
                        // A TRUNCATE is published as the deletes it makes.
                        boolean(p.publish.delete),
                        boolean(false),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "pg_publication_rel",
        columns: "oid oid, prpubid oid, prrelid oid, prqual text, prattrs int2vector",
        rows: |m| {
            let mut out = Vec::new();
            for p in m.catalog.publications.values() {
                for o in &p.objects {
                    let Some((name, _)) = published_relation(m.catalog, o) else {
                        continue;
                    };
                    out.push(vec![
                        oid(sub_oid(p.id, b'p', &name)),
                        oid(object_oid(p.id)),
                        oid(object_oid(o.relation)),
                        o.filter.as_ref().map_or(null(), |f| text(&format!("({f})"))),
                        published_attnums(o).map_or(null(), |a| int2_array(&a)),
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "pg_publication_tables",
        columns: "pubname name, schemaname name, tablename name, attnames name[], \
                  rowfilter text",
        rows: |m| {
            let mut out = Vec::new();
            for p in m.catalog.publications.values() {
                let mut relations: Vec<(TableId, String, Vec<String>)> = if p.all_tables {
                    m.catalog
                        .tables
                        .values()
                        .map(|t| {
                            let columns = t.schema.columns.iter().map(|c| c.name.clone());
                            (t.schema.id, t.schema.name.clone(), columns.collect())
                        })
                        .collect()
                } else {
                    p.objects
                        .iter()
                        .filter_map(|o| {
                            let (name, columns) = published_relation(m.catalog, o)?;
                            Some((o.relation, name, columns))
                        })
                        .collect()
                };
                relations.sort_by_key(|(id, _, _)| *id);
                for (id, name, columns) in relations {
                    let object = p.object(id);
                    let names: Vec<Value> = match object.and_then(published_attnums) {
                        Some(nums) => nums
                            .iter()
                            .filter_map(|&n| columns.get(n as usize - 1))
                            .map(|c| text(c))
                            .collect(),
                        None => columns.iter().map(|c| text(c)).collect(),
                    };
                    out.push(vec![
                        text(&p.name),
                        text("public"),
                        text(&name),
                        Value::Array(names),
                        object
                            .and_then(|o| o.filter.as_ref())
                            .map_or(null(), |f| text(&format!("({f})"))),
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "pg_publication_namespace",
        columns: "oid oid, pnpubid oid, pnnspid oid",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_extension",
        columns: "oid oid, extname name, extowner oid, extnamespace oid, extrelocatable bool, \
                  extversion text, extconfig oid[], extcondition text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_foreign_table",
        columns: "ftrelid oid, ftserver oid, ftoptions text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_partitioned_table",
        columns: "partrelid oid, partstrat char, partnatts int2, partdefid oid, \
                  partattrs int2[], partclass oid[], partcollation oid[], partexprs text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_tablespace",
        columns: "oid oid, spcname name, spcowner oid, spcacl text[], spcoptions text[]",
        rows: |_| {
            vec![
                vec![oid(1663), text("pg_default"), oid(10), null(), null()],
                vec![oid(1664), text("pg_global"), oid(10), null(), null()],
            ]
        },
    },
    Relation {
        name: "pg_init_privs",
        columns: "objoid oid, classoid oid, objsubid int4, privtype char, initprivs text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_language",
        columns: "oid oid, lanname name, lanowner oid, lanispl bool, lanpltrusted bool, lanplcallfoid oid, laninline oid, lanvalidator oid, lanacl text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_cast",
        columns: "oid oid, castsource oid, casttarget oid, castfunc oid, castcontext char, castmethod char",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_opclass",
        columns: "oid oid, opcmethod oid, opcname name, opcnamespace oid, opcowner oid, opcfamily oid, opcintype oid, opcdefault bool, opckeytype oid",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_opfamily",
        columns: "oid oid, opfmethod oid, opfname name, opfnamespace oid, opfowner oid",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_operator",
        columns: "oid oid, oprname name, oprnamespace oid, oprowner oid, oprkind char, oprcanmerge bool, oprcanhash bool, oprleft oid, oprright oid, oprresult oid, oprcom oid, oprnegate oid, oprcode text, oprrest text, oprjoin text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_aggregate",
        columns: "aggfnoid oid, aggkind char, aggnumdirectargs int2, aggtransfn text, aggfinalfn text, aggcombinefn text, aggserialfn text, aggdeserialfn text, aggmtransfn text, aggminvtransfn text, aggmfinalfn text, aggfinalextra bool, aggmfinalextra bool, aggfinalmodify char, aggmfinalmodify char, aggsortop oid, aggtranstype oid, aggtransspace int4, aggmtranstype oid, aggmtransspace int4, agginitval text, aggminitval text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_conversion",
        columns: "oid oid, conname name, connamespace oid, conowner oid, conforencoding int4, contoencoding int4, conproc text, condefault bool",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_ts_parser",
        columns: "oid oid, prsname name, prsnamespace oid, prsstart text, prstoken text, prsend text, prsheadline text, prslextype text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_ts_template",
        columns: "oid oid, tmplname name, tmplnamespace oid, tmplinit text, tmpllexize text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_ts_dict",
        columns: "oid oid, dictname name, dictnamespace oid, dictowner oid, dicttemplate oid, dictinitoption text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_ts_config",
        columns: "oid oid, cfgname name, cfgnamespace oid, cfgowner oid, cfgparser oid",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_foreign_data_wrapper",
        columns: "oid oid, fdwname name, fdwowner oid, fdwhandler oid, fdwvalidator oid, fdwacl text[], fdwoptions text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_foreign_server",
        columns: "oid oid, srvname name, srvowner oid, srvfdw oid, srvtype text, srvversion text, srvacl text[], srvoptions text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_user_mapping",
        columns: "oid oid, umuser oid, umserver oid, umoptions text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_default_acl",
        columns: "oid oid, defaclrole oid, defaclnamespace oid, defaclobjtype char, defaclacl text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_event_trigger",
        columns: "oid oid, evtname name, evtevent name, evtowner oid, evtfoid oid, evtenabled char, evttags text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_transform",
        columns: "oid oid, trftype oid, trflang oid, trffromsql oid, trftosql oid",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_subscription",
        columns: "oid oid, subdbid oid, subname name, subowner oid, subenabled bool, subbinary bool, substream bool, subtwophasestate char, subdisableonerr bool, subconninfo text, subslotname name, subsynccommit text, subpublications text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_largeobject_metadata",
        columns: "oid oid, lomowner oid, lomacl text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_seclabel",
        columns: "objoid oid, classoid oid, objsubid int4, provider text, label text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_shseclabel",
        columns: "objoid oid, classoid oid, provider text, label text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_shdescription",
        columns: "objoid oid, classoid oid, description text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_db_role_setting",
        columns: "setdatabase oid, setrole oid, setconfig text[]",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_amop",
        columns: "oid oid, amopfamily oid, amoplefttype oid, amoprighttype oid, amopstrategy int2, amoppurpose char, amopopr oid, amopmethod oid, amopsortfamily oid",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_amproc",
        columns: "oid oid, amprocfamily oid, amproclefttype oid, amprocrighttype oid, amprocnum int2, amproc text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "pg_seclabels",
        columns: "objoid oid, classoid oid, objsubid int4, objtype text, objnamespace oid, \
                  objname text, provider text, label text",
        rows: |_| Vec::new(),
    },
    Relation {
        name: "information_schema.schemata",
        columns: "catalog_name name, schema_name name, schema_owner name, \
                  default_character_set_catalog name, default_character_set_schema name, \
                  default_character_set_name name, sql_path text",
        rows: |m| {
            ["pg_catalog", "public", "information_schema"]
                .iter()
                .map(|s| {
                    vec![
                        text("aqueduct"),
                        text(s),
                        text(&m.ctx.user),
                        null(),
                        null(),
                        null(),
                        null(),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "information_schema.tables",
        columns: "table_catalog name, table_schema name, table_name name, table_type text, \
                  self_referencing_column_name name, reference_generation text, \
                  user_defined_type_catalog name, user_defined_type_schema name, \
                  user_defined_type_name name, is_insertable_into text, is_typed text, \
                  commit_action text",
        rows: |m| {
            m.relations
                .iter()
                .filter(|r| matches!(r.kind, "r" | "v"))
                .map(|r| {
                    vec![
                        text("aqueduct"),
                        text("public"),
                        text(&r.name),
                        text(if r.kind == "r" { "BASE TABLE" } else { "VIEW" }),
                        null(),
                        null(),
                        null(),
                        null(),
                        null(),
                        text(if r.kind == "r" { "YES" } else { "NO" }),
                        text("NO"),
                        null(),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "information_schema.views",
        columns: "table_catalog name, table_schema name, table_name name, \
                  view_definition text, check_option text, is_updatable text, \
                  is_insertable_into text, is_trigger_updatable text, \
                  is_trigger_deletable text, is_trigger_insertable_into text",
        rows: |m| {
            m.relations
                .iter()
                .filter(|r| r.kind == "v")
                .map(|r| {
                    vec![
                        text("aqueduct"),
                        text("public"),
                        text(&r.name),
                        text(&view_definition(m.catalog, r.table)),
                        text("NONE"),
                        text("NO"),
                        text("NO"),
                        text("NO"),
                        text("NO"),
                        text("NO"),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "information_schema.columns",
        columns: "table_catalog name, table_schema name, table_name name, column_name name, \
                  ordinal_position int4, column_default text, is_nullable text, data_type text, \
                  character_maximum_length int4, character_octet_length int4, \
                  numeric_precision int4, numeric_precision_radix int4, numeric_scale int4, \
                  datetime_precision int4, udt_catalog name, udt_schema name, udt_name name, \
                  is_identity text, identity_generation text, is_generated text, \
                  generation_expression text, is_updatable text",
        rows: |m| {
            let mut out = Vec::new();
            for r in m.relations.iter().filter(|r| matches!(r.kind, "r" | "v")) {
                let table = m.catalog.table_by_id(r.table).filter(|_| r.kind == "r");
                for (i, (name, ty, not_null, default)) in r.columns.iter().enumerate() {
                    let identity = table.and_then(|t| t.schema.columns[i].identity.as_ref());
                    let (precision, radix, scale) = match ty {
                        DataType::Int2 => (int(16), int(2), int(0)),
                        DataType::Int4 => (int(32), int(2), int(0)),
                        DataType::Int8 => (int(64), int(2), int(0)),
                        DataType::Float4 => (int(24), int(2), null()),
                        DataType::Float8 => (int(53), int(2), null()),
                        DataType::NumericTypmod { precision, scale } => {
                            (int(i64::from(*precision)), int(10), int(i64::from(*scale)))
                        }
                        DataType::Numeric => (null(), int(10), null()),
                        _ => (null(), null(), null()),
                    };
                    let (data_type, udt) = match ty {
                        DataType::Array(_) => ("ARRAY".to_string(), udt_name(ty)),
                        DataType::Enum(t) => ("USER-DEFINED".to_string(), t.name.clone()),
                        DataType::Varchar(_) => ("character varying".into(), udt_name(ty)),
                        other => (other.unconstrained().to_string(), udt_name(ty)),
                    };
                    let max_len = match ty {
                        DataType::Varchar(Some(n)) => int(i64::from(*n)),
                        _ => null(),
                    };
                    let octets = match ty {
                        DataType::Varchar(Some(n)) => int(i64::from(*n) * 4),
                        DataType::Varchar(None) | DataType::Text => int(1_073_741_824),
                        _ => null(),
                    };
                    let datetime = match ty {
                        DataType::Timestamp | DataType::TimestampTz | DataType::Interval => int(6),
                        DataType::Date => int(0),
                        _ => null(),
                    };
                    out.push(vec![
                        text("aqueduct"),
                        text("public"),
                        text(&r.name),
                        text(name),
                        int(i as i64 + 1),
                        if identity.is_some() {
                            null()
                        } else {
                            default.as_deref().map_or(null(), text)
                        },
                        text(if *not_null { "NO" } else { "YES" }),
                        text(&data_type),
                        max_len,
                        octets,
                        precision,
                        radix,
                        scale,
                        datetime,
                        text("aqueduct"),
                        text(if matches!(ty, DataType::Enum(_)) {
                            "public"
                        } else {
                            "pg_catalog"
                        }),
                        text(&udt),
                        text(if identity.is_some() { "YES" } else { "NO" }),
                        identity.map_or(null(), |id| {
                            text(if id.always { "ALWAYS" } else { "BY DEFAULT" })
                        }),
                        text("NEVER"),
                        null(),
                        text(if r.kind == "r" { "YES" } else { "NO" }),
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "information_schema.table_constraints",
        columns: "constraint_catalog name, constraint_schema name, constraint_name name, \
                  table_catalog name, table_schema name, table_name name, constraint_type text, \
                  is_deferrable text, initially_deferred text, enforced text, nulls_distinct text",
        rows: |m| {
            let yes_no = |b: bool| text(if b { "YES" } else { "NO" });
            m.constraints
                .iter()
                .map(|c| {
                    vec![
                        text("aqueduct"),
                        text("public"),
                        text(&c.name),
                        text("aqueduct"),
                        text("public"),
                        text(&c.table_name),
                        text(match c.kind {
                            "p" => "PRIMARY KEY",
                            "u" => "UNIQUE",
                            "f" => "FOREIGN KEY",
                            _ => "CHECK",
                        }),
                        yes_no(c.deferrable),
                        yes_no(c.deferred),
                        text("YES"),
                        if c.kind == "u" { text("YES") } else { null() },
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "information_schema.key_column_usage",
        columns: "constraint_catalog name, constraint_schema name, constraint_name name, \
                  table_catalog name, table_schema name, table_name name, column_name name, \
                  ordinal_position int4, position_in_unique_constraint int4",
        rows: |m| {
            let mut out = Vec::new();
            for c in m.constraints.iter().filter(|c| c.kind != "c") {
                let Some(rel) = m.relation(c.table_oid) else {
                    continue;
                };
                for (i, &k) in c.keys.iter().enumerate() {
                    if k < 1 {
                        continue;
                    }
                    out.push(vec![
                        text("aqueduct"),
                        text("public"),
                        text(&c.name),
                        text("aqueduct"),
                        text("public"),
                        text(&c.table_name),
                        text(&rel.columns[(k - 1) as usize].0),
                        int(i as i64 + 1),
                        if c.kind == "f" {
                            int(i as i64 + 1)
                        } else {
                            null()
                        },
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "information_schema.referential_constraints",
        columns: "constraint_catalog name, constraint_schema name, constraint_name name, \
                  unique_constraint_catalog name, unique_constraint_schema name, \
                  unique_constraint_name name, match_option text, update_rule text, \
                  delete_rule text",
        rows: |m| {
            let rule = |code: &str| {
                text(match code {
                    "r" => "RESTRICT",
                    "c" => "CASCADE",
                    "n" => "SET NULL",
                    "d" => "SET DEFAULT",
                    _ => "NO ACTION",
                })
            };
            m.constraints
                .iter()
                .filter(|c| c.kind == "f")
                .map(|c| {
                    vec![
                        text("aqueduct"),
                        text("public"),
                        text(&c.name),
                        text("aqueduct"),
                        text("public"),
                        c.ref_constraint.as_deref().map_or(null(), text),
                        text("NONE"),
                        rule(c.on_update),
                        rule(c.on_delete),
                    ]
                })
                .collect()
        },
    },
    Relation {
        name: "information_schema.constraint_column_usage",
        columns: "table_catalog name, table_schema name, table_name name, column_name name, \
                  constraint_catalog name, constraint_schema name, constraint_name name",
        rows: |m| {
            let mut out = Vec::new();
            for c in m.constraints.iter().filter(|c| c.kind != "c") {
                let (rel_oid, keys) = if c.kind == "f" {
                    (c.ref_oid, &c.ref_keys)
                } else {
                    (c.table_oid, &c.keys)
                };
                let Some(rel) = m.relation(rel_oid) else {
                    continue;
                };
                for &k in keys.iter().filter(|&&k| k > 0) {
                    out.push(vec![
                        text("aqueduct"),
                        text("public"),
                        text(&rel.name),
                        text(&rel.columns[(k - 1) as usize].0),
                        text("aqueduct"),
                        text("public"),
                        text(&c.name),
                    ]);
                }
            }
            out
        },
    },
    Relation {
        name: "information_schema.sequences",
        columns: "sequence_catalog name, sequence_schema name, sequence_name name, \
                  data_type text, numeric_precision int4, numeric_precision_radix int4, \
                  numeric_scale int4, start_value text, minimum_value text, \
                  maximum_value text, increment text, cycle_option text",
        rows: |m| {
            m.catalog
                .sequences
                .values()
                .map(|s| {
                    let ty = DataType::from_sql(&s.def.ty, &[]).unwrap_or(DataType::Int8);
                    let bits = match ty {
                        DataType::Int2 => 16,
                        DataType::Int4 => 32,
                        _ => 64,
                    };
                    vec![
                        text("aqueduct"),
                        text("public"),
                        text(&s.def.name),
                        text(&ty.to_string()),
                        int(bits),
                        int(2),
                        int(0),
                        text(&s.def.start.to_string()),
                        text(&s.def.min.to_string()),
                        text(&s.def.max.to_string()),
                        text(&s.def.increment.to_string()),
                        text("NO"),
                    ]
                })
                .collect()
        },
    },
];

/// `udt_name`: the type's name in `pg_type` (`int4`, `_text`, `varchar`).
fn udt_name(ty: &DataType) -> String {
    match ty {
        DataType::Array(e) => format!("_{}", udt_name(e)),
        DataType::Enum(t) => t.name.clone(),
        other => BUILTIN_TYPES
            .iter()
            .find(|t| t.0 == other.pg_oid())
            .map_or_else(|| other.to_string(), |t| t.1.to_string()),
    }
}

/// A maintained view's query as `pg_views.definition` gives it.
fn view_definition(catalog: &Catalog, id: TableId) -> String {
    let Some((_, sql)) = catalog.views.get(&id) else {
        return String::new();
    };
    let query = crate::parse::parse(sql)
        .ok()
        .and_then(|mut st| st.pop())
        .and_then(|st| match st {
            sqlparser::ast::Statement::CreateView(cv) => Some(cv.query.to_string()),
            _ => None,
        });
    format!(" {};", query.unwrap_or_else(|| sql.clone()))
}

/// The roles as `pg_roles` lists them: (oid, name, superuser, createrole,
/// login). The session's role is there even when it was not created in
/// SQL (the server's configured superuser).
fn roles(m: &Model) -> Vec<(u32, String, bool, bool, bool)> {
    let mut out: Vec<(u32, String, bool, bool, bool)> = m
        .catalog
        .security
        .roles
        .values()
        .map(|r| {
            (
                object_oid(r.id),
                r.name.clone(),
                r.superuser,
                r.createrole,
                r.login,
            )
        })
        .collect();
    if !out.iter().any(|r| r.1 == m.ctx.user) {
        out.insert(0, (10, m.ctx.user.clone(), true, true, true));
    }
    out.push((
        DATABASE_OWNER,
        "pg_database_owner".into(),
        false,
        false,
        false,
    ));
    out
}

/// The 1-based column numbers a column list publishes (PostgreSQL's
/// `prattrs`); `None` without a column list. Computed attributes have no
/// column number and are not listed.
/// The name and columns of the table or view a publication's object is.
fn published_relation(
    catalog: &Catalog,
    o: &aqueduct_tables::PublishedObject,
) -> Option<(String, Vec<String>)> {
    match o.kind {
        aqueduct_tables::ObjectKind::Table => {
            let t = catalog.table_by_id(o.relation)?;
            let columns = t.schema.columns.iter().map(|c| c.name.clone()).collect();
            Some((t.schema.name.clone(), columns))
        }
        aqueduct_tables::ObjectKind::View => {
            let (name, _) = catalog.views.get(&o.relation)?;
            let columns = o.view_columns.iter().map(|c| c.name.clone()).collect();
            Some((name.clone(), columns))
        }
    }
}

fn published_attnums(o: &aqueduct_tables::PublishedObject) -> Option<Vec<i64>> {
    if o.all_columns {
        return None;
    }
    Some(
        o.attributes
            .iter()
            .filter_map(|a| match a {
                aqueduct_tables::Attribute::Column { column, .. } => Some(*column as i64 + 1),
                aqueduct_tables::Attribute::Computed { .. } => None,
            })
            .collect(),
    )
}

/// A role's oid by name (10, PostgreSQL's bootstrap superuser's, for the
/// configured superuser).
fn role_oid(catalog: &Catalog, name: &str) -> u32 {
    catalog.role(name).map_or(10, |r| object_oid(r.id))
}

/// Whether `name` (as the binder resolves relation names: `pg_class`,
/// `information_schema.tables`) is a catalog relation built here.
pub fn is_catalog_relation(name: &str) -> bool {
    RELATIONS.iter().any(|r| r.name == name)
}

/// `catalog` with the catalog relations named in `names` added as
/// tables filled from it, for one statement to read.
pub fn with_relations(catalog: &Catalog, names: &[String], ctx: &CatalogContext) -> Catalog {
    let model = Model::new(catalog, ctx);
    let mut out = catalog.clone();
    // A sequence read as a relation (`SELECT last_value, is_called FROM
    // s`, as pg_dump reads one): its one row.
    for (i, name) in names.iter().enumerate() {
        let Some(seq) = catalog
            .sequence(name)
            .filter(|_| catalog.table(name).is_none())
        else {
            continue;
        };
        let id = CATALOG_RELATION_IDS + (RELATIONS.len() + i) as u64;
        out.apply_schema(SchemaChange::CreateTable(TableSchema {
            id,
            name: name.clone(),
            columns: columns("last_value int8, log_cnt int8, is_called bool"),
            ..TableSchema::default()
        }));
        out.apply_row(
            id,
            vec![Value::Int(1)],
            Some(vec![int(seq.value), int(0), boolean(seq.is_called)]),
            1,
        );
    }
    for (i, r) in RELATIONS.iter().enumerate() {
        if !names.iter().any(|n| n == r.name) {
            continue;
        }
        let id = CATALOG_RELATION_IDS + i as u64;
        let mut columns = columns(r.columns);
        // A system catalog (not a view over one) has PostgreSQL's system
        // column `tableoid`, which pg_dump reads; it comes last here.
        let tableoid = SYSTEM_RELATIONS
            .iter()
            .find(|(n, _)| *n == r.name)
            .map(|&(_, o)| o);
        if tableoid.is_some() {
            columns.push(ColumnDef::new("tableoid", DataType::Oid));
        }
        let width = columns.len();
        out.apply_schema(SchemaChange::CreateTable(TableSchema {
            id,
            name: r.name.into(),
            columns,
            ..TableSchema::default()
        }));
        for (rowid, mut row) in (r.rows)(&model).into_iter().enumerate() {
            if let Some(o) = tableoid {
                row.push(oid(o));
            }
            debug_assert_eq!(row.len(), width, "{}: a row of another width", r.name);
            out.apply_row(id, vec![Value::Int(rowid as i64 + 1)], Some(row), 1);
        }
    }
    out
}

/// The catalog functions' answers, for the binder to look up.
pub struct CatalogLookups {
    /// `pg_get_indexdef(oid)`, and `pg_get_indexdef(oid, column, pretty)`
    /// keyed by (oid, column).
    pub index_def: Arc<Lookup>,
    pub index_column: Arc<Lookup>,
    pub constraint_def: Arc<Lookup>,
    pub view_def: Arc<Lookup>,
    pub user_by_id: Arc<Lookup>,
    pub type_name: Arc<Lookup>,
    /// `oid::regclass`, `oid::regtype`, `oid::regnamespace`,
    /// `oid::regrole` as text.
    pub relation_name: Arc<Lookup>,
    pub namespace_name: Arc<Lookup>,
    /// `pg_relation_is_publishable(oid)`: true for tables.
    pub publishable: Arc<Lookup>,
    /// `pg_get_serial_sequence(table, column)`: the sequence the column
    /// owns, schema-qualified.
    pub serial_sequence: Arc<Lookup>,
    /// A relation's or a type's id by its name (plain or schema-qualified):
    /// `$1::regclass`, `to_regclass(text)`, `to_regtype(text)`.
    pub relation_by_name: Arc<Lookup>,
    pub type_by_name: Arc<Lookup>,
    /// Names to ids: relations (with the catalog's own), types,
    /// namespaces, roles.
    pub relation_oid: HashMap<String, u32>,
    pub type_oid: HashMap<String, u32>,
    pub namespace_oid: HashMap<String, u32>,
    pub role_oid: HashMap<String, u32>,
}

fn lookup(
    name: &'static str,
    rows: HashMap<Vec<Value>, Value>,
    otherwise: LookupMiss,
) -> Arc<Lookup> {
    let ty = if otherwise == LookupMiss::False {
        DataType::Bool
    } else {
        DataType::Text
    };
    Arc::new(Lookup {
        name,
        rows,
        otherwise,
        ty,
    })
}

/// The catalog functions' answers over `catalog`.
pub fn lookups(catalog: &Catalog, ctx: &CatalogContext) -> CatalogLookups {
    let m = Model::new(catalog, ctx);
    let mut index_def = HashMap::new();
    let mut index_column = HashMap::new();
    for ix in &m.indexes {
        let def = Model::index_def(ix);
        index_def.insert(vec![oid(ix.oid)], text(&def));
        index_column.insert(vec![oid(ix.oid), int(0)], text(&def));
        for (i, k) in ix.key_sql.iter().enumerate() {
            index_column.insert(vec![oid(ix.oid), int(i as i64 + 1)], text(k));
        }
    }
    let mut constraint_def = HashMap::new();
    for c in &m.constraints {
        constraint_def.insert(vec![oid(c.oid), Value::Bool(true)], text(&c.def));
        constraint_def.insert(vec![oid(c.oid), Value::Bool(false)], text(&c.plain_def()));
    }
    let view_def = m
        .relations
        .iter()
        .filter(|r| r.kind == "v")
        .map(|r| (vec![oid(r.oid)], text(&view_definition(catalog, r.table))))
        .collect();
    let role_list = roles(&m);
    let user_by_id = role_list
        .iter()
        .map(|r| (vec![oid(r.0)], text(&r.1)))
        .collect();
    let mut relation_name: HashMap<Vec<Value>, Value> = m
        .relations
        .iter()
        .map(|r| (vec![oid(r.oid)], text(&quote_ident(&r.name))))
        .collect();
    let mut relation_oid: HashMap<String, u32> = m
        .relations
        .iter()
        .map(|r| (r.name.clone(), r.oid))
        .collect();
    for &(name, o) in SYSTEM_RELATIONS {
        relation_name.insert(vec![oid(o)], text(name));
        relation_oid.insert(name.to_string(), o);
    }
    let types = m.types();
    let type_oid = types
        .iter()
        .map(|t| (t.name.clone(), t.oid))
        .chain(
            BUILTIN_TYPES
                .iter()
                .filter_map(|t| formatted_builtin(t.0).map(|n| (n, t.0))),
        )
        .collect();
    let namespaces = [
        (NS_PG_CATALOG, "pg_catalog"),
        (NS_PUBLIC, "public"),
        (NS_INFORMATION_SCHEMA, "information_schema"),
    ];
    let publishable = m
        .relations
        .iter()
        .filter(|r| r.kind == "r")
        .map(|r| (vec![oid(r.oid)], Value::Bool(true)))
        .collect();
    let by_name = |name: &'static str, names: &HashMap<String, u32>, schema: &str| {
        let mut rows = HashMap::new();
        for (n, o) in names {
            rows.insert(vec![text(n)], oid(*o));
            rows.insert(vec![text(&format!("{schema}.{n}"))], oid(*o));
            rows.insert(vec![text(&format!("{schema}.{}", quote_ident(n)))], oid(*o));
            rows.insert(vec![text(&quote_ident(n))], oid(*o));
        }
        Arc::new(Lookup {
            name,
            rows,
            otherwise: LookupMiss::Null,
            ty: DataType::Oid,
        })
    };
    let relation_by_name = {
        let mut l = by_name("regclass", &relation_oid, "public").rows.clone();
        for &(n, o) in SYSTEM_RELATIONS {
            l.insert(vec![text(&format!("pg_catalog.{n}"))], oid(o));
        }
        Arc::new(Lookup {
            name: "regclass",
            rows: l,
            otherwise: LookupMiss::Null,
            ty: DataType::Oid,
        })
    };
    let type_by_name = {
        let mut l = by_name("regtype", &type_oid, "pg_catalog").rows.clone();
        for t in m.catalog.types.values() {
            l.insert(vec![text(&format!("public.{}", t.name))], oid(t.oid()));
        }
        Arc::new(Lookup {
            name: "regtype",
            rows: l,
            otherwise: LookupMiss::Null,
            ty: DataType::Oid,
        })
    };
    let mut serial = HashMap::new();
    for seq in catalog.sequences.values() {
        let Some((table, column)) = seq.def.owned_by else {
            continue;
        };
        let Some(t) = catalog.table_by_id(table) else {
            continue;
        };
        let Some(c) = t.schema.columns.get(column) else {
            continue;
        };
        let answer = text(&format!("public.{}", quote_ident(&seq.def.name)));
        let name = &t.schema.name;
        for table_name in [
            name.clone(),
            quote_ident(name),
            format!("public.{name}"),
            format!("public.{}", quote_ident(name)),
        ] {
            serial.insert(vec![text(&table_name), text(&c.name)], answer.clone());
        }
    }
    CatalogLookups {
        serial_sequence: lookup("pg_get_serial_sequence", serial, LookupMiss::Null),
        relation_by_name,
        type_by_name,
        publishable: lookup("pg_relation_is_publishable", publishable, LookupMiss::False),
        index_def: lookup("pg_get_indexdef", index_def, LookupMiss::Null),
        index_column: lookup("pg_get_indexdef", index_column, LookupMiss::Null),
        constraint_def: lookup("pg_get_constraintdef", constraint_def, LookupMiss::Null),
        view_def: lookup("pg_get_viewdef", view_def, LookupMiss::Null),
        user_by_id: lookup("pg_get_userbyid", user_by_id, LookupMiss::UnknownOid),
        type_name: lookup("format_type", m.type_names(), LookupMiss::Text("???")),
        relation_name: lookup("regclass", relation_name, LookupMiss::FirstAsText),
        namespace_name: lookup(
            "regnamespace",
            namespaces
                .iter()
                .map(|&(o, n)| (vec![oid(o)], text(n)))
                .collect(),
            LookupMiss::FirstAsText,
        ),
        relation_oid,
        type_oid,
        namespace_oid: namespaces
            .iter()
            .map(|&(o, n)| (n.to_string(), o))
            .collect(),
        role_oid: role_list.iter().map(|r| (r.1.clone(), r.0)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_relation_has_rows_of_its_width_and_known_column_types() {
        let ctx = CatalogContext {
            user: "aqueduct".into(),
            ..CatalogContext::default()
        };
        let names: Vec<String> = RELATIONS.iter().map(|r| r.name.to_string()).collect();
        let c = with_relations(&Catalog::default(), &names, &ctx);
        for r in RELATIONS {
            assert!(c.table(r.name).is_some(), "{}", r.name);
        }
    }

    #[test]
    fn typmods_format_as_postgres_writes_them() {
        use aqueduct_expr::format_typmod;
        assert_eq!(
            format_typmod("character varying", 259),
            "character varying(255)"
        );
        assert_eq!(
            format_typmod("numeric", (10 << 16 | 2) + 4),
            "numeric(10,2)"
        );
        assert_eq!(format_typmod("integer", -1), "integer");
        assert_eq!(
            format_typmod("character varying[]", 14),
            "character varying(10)[]"
        );
    }

    #[test]
    fn sub_oids_are_stable_and_out_of_the_counters_reach() {
        let a = sub_oid(3, b'i', "users_pkey");
        assert_eq!(a, sub_oid(3, b'i', "users_pkey"));
        assert_ne!(a, sub_oid(4, b'i', "users_pkey"));
        assert!(a >= SUB_OID_BASE);
        assert!(object_oid(1_000_000) < SUB_OID_BASE);
    }
}
