//! A test case: schema, initial rows, the queries under test and a stream
//! of write batches, some preceded by schema changes. Writes are generated
//! against a scratch SQLite so each one can aim at rows that exist (the
//! current MIN/MAX holder, a row in a top-k window, a duplicate of a join
//! key). Statements name columns rather than number them, so a case stays
//! meaningful while it is minimised: a write or schema change that no
//! longer fits the schema is refused by SQLite and skipped on both engines.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rusqlite::types::Value as SqlValue;

use super::query::{Features, Gen, Query};
use super::schema::{insert_named_sql, insert_sql, ColType, Column, Lit, Schema};

#[derive(Clone, Debug, PartialEq)]
pub enum Set {
    Lit(Lit),
    /// `col = col + k`.
    Add(Lit),
    /// `col = NOT col`.
    Not,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    All,
    Id(i64),
    Eq(String, Lit),
    IsNull(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Dml {
    Insert {
        table: usize,
        /// The columns `rows` give values for.
        columns: Vec<String>,
        rows: Vec<Vec<Lit>>,
        /// Columns left to their default. Aqueduct's statement leaves them
        /// out; SQLite's gives the default's value, since SQLite cannot
        /// change a column's default (see [`Alter::SetDefault`]).
        defaulted: Vec<String>,
    },
    Update {
        table: usize,
        sets: Vec<(String, Set)>,
        filter: Filter,
    },
    Delete {
        table: usize,
        filter: Filter,
    },
}

impl Dml {
    pub fn table(&self) -> usize {
        match self {
            Dml::Insert { table, .. } | Dml::Update { table, .. } | Dml::Delete { table, .. } => {
                *table
            }
        }
    }

    /// The statement as Aqueduct runs it.
    pub fn render(&self, schema: &Schema) -> String {
        self.render_with(schema, None)
    }

    /// The statement as SQLite runs it: columns left to their default are
    /// given the value of the default `defaults` holds.
    pub fn render_sqlite(&self, schema: &Schema, defaults: &Defaults) -> String {
        self.render_with(schema, Some(defaults))
    }

    fn render_with(&self, schema: &Schema, defaults: Option<&Defaults>) -> String {
        let t = &schema.tables[self.table()];
        let filter = |f: &Filter| match f {
            Filter::All => String::new(),
            Filter::Id(id) => format!(" WHERE id = {id}"),
            Filter::Eq(c, v) => format!(" WHERE {c} = {v}"),
            Filter::IsNull(c) => format!(" WHERE {c} IS NULL"),
        };
        match self {
            Dml::Insert {
                columns,
                rows,
                defaulted,
                ..
            } => match defaults {
                Some(d) if !defaulted.is_empty() => {
                    let mut columns = columns.clone();
                    columns.extend(defaulted.iter().cloned());
                    let rows: Vec<Vec<Lit>> = rows
                        .iter()
                        .map(|r| {
                            let mut r = r.clone();
                            r.extend(defaulted.iter().map(|c| d.get(self.table(), c)));
                            r
                        })
                        .collect();
                    insert_named_sql(&t.name, &columns, &rows)
                }
                _ => insert_named_sql(&t.name, columns, rows),
            },
            Dml::Update {
                sets, filter: f, ..
            } => {
                let sets: Vec<String> = sets
                    .iter()
                    .map(|(n, s)| match s {
                        Set::Lit(v) => format!("{n} = {v}"),
                        Set::Add(k) => format!("{n} = {n} + {k}"),
                        Set::Not => format!("{n} = NOT {n}"),
                    })
                    .collect();
                format!("UPDATE {} SET {}{}", t.name, sets.join(", "), filter(f))
            }
            Dml::Delete { filter: f, .. } => format!("DELETE FROM {}{}", t.name, filter(f)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind {
    /// Each statement commits on its own.
    Autocommit,
    /// `BEGIN; ...; COMMIT`: one atomic change.
    Commit,
    /// `BEGIN; ...; ROLLBACK`: no change at all.
    Rollback,
}

/// A schema change, run on both engines outside any transaction before a
/// batch's writes.
#[derive(Clone, Debug, PartialEq)]
pub enum Alter {
    /// `ALTER TABLE t ADD COLUMN name ty [NOT NULL] [DEFAULT v]` (SQLite
    /// wants a default for NOT NULL).
    AddColumn {
        table: usize,
        name: String,
        ty: ColType,
        not_null: bool,
        default: Option<Lit>,
    },
    /// `ALTER TABLE t DROP COLUMN name`, of a column no query names and
    /// no index covers (SQLite refuses to drop an indexed column).
    DropColumn { table: usize, name: String },
    /// `ALTER TABLE t ALTER COLUMN name SET DEFAULT v` (`DROP DEFAULT`
    /// for `None`). SQLite has no such statement: Aqueduct alone runs it,
    /// and SQLite's inserts give the value where Aqueduct's leave the
    /// column to its default.
    SetDefault {
        table: usize,
        name: String,
        default: Option<Lit>,
    },
    /// `CREATE INDEX name ON t (column)`.
    CreateIndex {
        table: usize,
        name: String,
        column: String,
    },
}

impl Alter {
    pub fn table(&self) -> usize {
        match self {
            Alter::AddColumn { table, .. }
            | Alter::DropColumn { table, .. }
            | Alter::SetDefault { table, .. }
            | Alter::CreateIndex { table, .. } => *table,
        }
    }

    /// Whether SQLite runs it too.
    pub fn on_sqlite(&self) -> bool {
        !matches!(self, Alter::SetDefault { .. })
    }

    pub fn render(&self, schema: &Schema) -> String {
        let t = &schema.tables[self.table()].name;
        match self {
            Alter::AddColumn {
                name,
                ty,
                not_null,
                default,
                ..
            } => {
                let mut sql = format!("ALTER TABLE {t} ADD COLUMN {name} {}", ty.sql());
                if *not_null {
                    sql += " NOT NULL";
                }
                if let Some(d) = default {
                    sql += &format!(" DEFAULT {}", d.default_sql());
                }
                sql
            }
            Alter::DropColumn { name, .. } => format!("ALTER TABLE {t} DROP COLUMN {name}"),
            Alter::SetDefault {
                name,
                default: Some(d),
                ..
            } => format!(
                "ALTER TABLE {t} ALTER COLUMN {name} SET DEFAULT {}",
                d.default_sql()
            ),
            Alter::SetDefault { name, .. } => {
                format!("ALTER TABLE {t} ALTER COLUMN {name} DROP DEFAULT")
            }
            Alter::CreateIndex { name, column, .. } => {
                format!("CREATE INDEX {name} ON {t} ({column})")
            }
        }
    }

    /// SQL that SQLite refuses if the change does not fit the schema as it
    /// is: the change itself, or for a change SQLite does not run, a read
    /// of the column.
    pub fn sqlite_probe(&self, schema: &Schema) -> String {
        match self {
            Alter::SetDefault { table, name, .. } => {
                format!("SELECT {name} FROM {} LIMIT 0", schema.tables[*table].name)
            }
            other => other.render(schema),
        }
    }
}

/// The columns' defaults as the schema changes run so far left them (no
/// entry: NULL).
#[derive(Clone, Debug, Default)]
pub struct Defaults(BTreeMap<(usize, String), Lit>);

impl Defaults {
    pub fn get(&self, table: usize, column: &str) -> Lit {
        self.0
            .get(&(table, column.to_string()))
            .cloned()
            .unwrap_or(Lit::Null)
    }

    /// Follows a schema change that ran.
    pub fn apply(&mut self, a: &Alter) {
        match a {
            Alter::AddColumn {
                table,
                name,
                default,
                ..
            }
            | Alter::SetDefault {
                table,
                name,
                default,
            } => match default {
                Some(d) => {
                    self.0.insert((*table, name.clone()), d.clone());
                }
                None => {
                    self.0.remove(&(*table, name.clone()));
                }
            },
            Alter::DropColumn { table, name } => {
                self.0.remove(&(*table, name.clone()));
            }
            Alter::CreateIndex { .. } => {}
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub kind: BatchKind,
    /// Schema changes run (each on its own) before the batch's writes.
    pub changes: Vec<Alter>,
    pub stmts: Vec<Dml>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub query: Query,
    /// `CREATE MATERIALIZED VIEW` rather than `CREATE VIEW`.
    pub materialized: bool,
    /// Also run the query prepared with `AND <column> = $1` added (see
    /// `Query::with_param`); the number picks the column.
    pub param: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub schema: Schema,
    /// Initial rows of each table.
    pub initial: Vec<Vec<Vec<Lit>>>,
    pub views: Vec<View>,
    /// Views are created before the initial rows are inserted.
    pub views_first: bool,
    pub batches: Vec<Batch>,
    /// Close and reopen the engine after this batch (1-based).
    pub restart_after: Option<usize>,
}

/// How big a generated case is.
#[derive(Clone, Debug)]
pub struct Sizes {
    pub views: usize,
    pub batches: usize,
    pub schema_changes: SchemaChanges,
}

/// Which schema changes a generated case makes, and how often.
#[derive(Clone, Debug)]
pub struct SchemaChanges {
    /// The chance that schema changes come before a batch.
    pub chance: f64,
    /// Whether columns added earlier are dropped again.
    pub drop_columns: bool,
}

/// Reads a SQLite value back as a literal of a column's type.
pub fn lit_from_sqlite(v: &SqlValue, ty: ColType) -> Lit {
    match (v, ty) {
        (SqlValue::Null, _) => Lit::Null,
        (SqlValue::Integer(i), ColType::Boolean) => Lit::Bool(*i != 0),
        (SqlValue::Integer(i), ColType::Numeric) => Lit::Num(i.to_string()),
        (SqlValue::Integer(i), _) => Lit::Int(*i),
        (SqlValue::Real(f), _) => Lit::Num(format!("{f}")),
        (SqlValue::Text(s), _) => Lit::Text(s.clone()),
        (SqlValue::Blob(_), _) => panic!("no blobs in generated data"),
    }
}

pub fn sqlite_schema(conn: &rusqlite::Connection, schema: &Schema) {
    conn.execute_batch("PRAGMA case_sensitive_like = ON")
        .unwrap();
    for t in &schema.tables {
        conn.execute_batch(&t.create_sql()).unwrap();
    }
}

impl Case {
    pub fn generate(seed: u64, features: &Features, sizes: &Sizes) -> Case {
        let mut rng = StdRng::seed_from_u64(seed);
        let schema = Schema::random(&mut rng, features.dates);
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        sqlite_schema(&conn, &schema);
        let mut initial = Vec::new();
        for t in &schema.tables {
            let n = if rng.gen_bool(0.05) {
                0
            } else {
                rng.gen_range(5..=35)
            };
            let rows: Vec<Vec<Lit>> = (1..=n).map(|id| t.random_row(&mut rng, id)).collect();
            if !rows.is_empty() {
                conn.execute_batch(&insert_sql(&t.name, &rows)).unwrap();
            }
            initial.push(rows);
        }
        let views = {
            let mut g = Gen::new(&mut rng, features, &schema);
            let mut views: Vec<View> = Vec::new();
            for i in 0..sizes.views {
                // Sometimes the same query again, or one over an earlier
                // one: views that share their dataflow.
                let shared = if i > 0 { g.rng.gen_range(0..10) } else { 9 };
                if shared < 3 && features.subqueries {
                    let prev: &View = views.choose(g.rng).unwrap();
                    if shared == 0 {
                        views.push(prev.clone());
                        continue;
                    }
                    g.reuse = Some(prev.query.clone());
                }
                let query = g.query();
                assert!(
                    query.valid(),
                    "seed {seed}: generated an invalid query:\n{}",
                    query.render()
                );
                // A query SQLite cannot prepare is a bug in the generator.
                if let Err(e) = conn.prepare(&query.render()) {
                    panic!(
                        "seed {seed}: generated a query SQLite rejects ({e}):\n{}",
                        query.render()
                    );
                }
                let materialized = g.rng.gen_bool(0.3);
                let param = Some(g.rng.gen_range(0..100));
                views.push(View {
                    query,
                    materialized,
                    param,
                });
            }
            views
        };
        let views_first = rng.gen_bool(0.3);
        let mut w = Writer {
            rng: &mut rng,
            schema: schema.clone(),
            conn: &conn,
            next_id: initial.iter().map(|r| r.len() as i64 + 1).collect(),
            defaults: Defaults::default(),
            indexed: Vec::new(),
            next_name: 1,
        };
        let batches = (0..sizes.batches)
            .map(|_| {
                let mut changes = Vec::new();
                let sc = &sizes.schema_changes;
                if sc.chance > 0.0 && w.rng.gen_bool(sc.chance) {
                    for _ in 0..w.rng.gen_range(1..=2) {
                        changes.extend(w.schema_change(sc.drop_columns));
                    }
                }
                w.batch(changes)
            })
            .collect();
        let restart_after = if sizes.batches > 0 && rng.gen_bool(0.25) {
            Some(rng.gen_range(1..=sizes.batches))
        } else {
            None
        };
        Case {
            restart_after,
            seed,
            schema,
            initial,
            views,
            views_first,
            batches,
        }
    }
}

struct Writer<'a> {
    rng: &'a mut StdRng,
    /// The schema as the changes so far left it.
    schema: Schema,
    conn: &'a rusqlite::Connection,
    next_id: Vec<i64>,
    defaults: Defaults,
    /// Indexed columns (table, column).
    indexed: Vec<(usize, String)>,
    /// Number for the next added column's or index's name.
    next_name: usize,
}

impl Writer<'_> {
    fn ids(&self, t: usize) -> Vec<i64> {
        let name = &self.schema.tables[t].name;
        let mut st = self
            .conn
            .prepare(&format!("SELECT id FROM {name} ORDER BY id"))
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    fn row(&self, t: usize, id: i64) -> Vec<Lit> {
        let table = &self.schema.tables[t];
        let mut st = self
            .conn
            .prepare(&format!("SELECT * FROM {} WHERE id = {id}", table.name))
            .unwrap();
        let vals: Vec<SqlValue> = st
            .query_row([], |r| {
                (0..table.columns.len())
                    .map(|i| r.get::<_, SqlValue>(i))
                    .collect()
            })
            .unwrap();
        vals.iter()
            .zip(&table.columns)
            .map(|(v, c)| lit_from_sqlite(v, c.ty))
            .collect()
    }

    /// The id of the row holding the smallest or largest value of `col`.
    fn extreme(&self, t: usize, col: usize, max: bool) -> Option<i64> {
        let table = &self.schema.tables[t];
        let c = &table.columns[col].name;
        self.conn
            .query_row(
                &format!(
                    "SELECT id FROM {} WHERE {c} IS NOT NULL ORDER BY {c} {}, id LIMIT 1",
                    table.name,
                    if max { "DESC" } else { "ASC" }
                ),
                [],
                |r| r.get(0),
            )
            .ok()
    }

    fn fresh_id(&mut self, t: usize, taken: &[i64]) -> i64 {
        // Sometimes reuse the id of a deleted row.
        if self.rng.gen_bool(0.2) {
            let free: Vec<i64> = (1..self.next_id[t])
                .filter(|i| !taken.contains(i))
                .collect();
            if let Some(id) = free.choose(self.rng) {
                return *id;
            }
        }
        self.next_id[t] += 1;
        self.next_id[t] - 1
    }

    /// A schema change of a random table, applied to the scratch SQLite and
    /// to the writer's schema.
    fn schema_change(&mut self, drop_columns: bool) -> Option<Alter> {
        let t = self.rng.gen_range(0..self.schema.tables.len());
        let table = &self.schema.tables[t];
        // Columns added earlier: queries generated up front never name
        // them, so they may be dropped.
        let added: Vec<&Column> = table.columns[1..]
            .iter()
            .filter(|c| c.name.starts_with("extra"))
            .filter(|c| !self.indexed.contains(&(t, c.name.clone())))
            .collect();
        let mut new_column = None;
        let change = match self.rng.gen_range(0..100) {
            0..=54 => {
                let mut c = Column::random(self.rng, &format!("extra{}", self.next_name), false);
                self.next_name += 1;
                let default = if self.rng.gen_bool(0.6) {
                    c.domain.choose(self.rng).cloned()
                } else {
                    None
                };
                // SQLite adds a NOT NULL column only with a default.
                c.nullable = c.nullable || default.is_none();
                let change = Alter::AddColumn {
                    table: t,
                    name: c.name.clone(),
                    ty: c.ty,
                    not_null: !c.nullable,
                    default,
                };
                new_column = Some(c);
                change
            }
            55..=69 if drop_columns && !added.is_empty() => Alter::DropColumn {
                table: t,
                name: added.choose(self.rng).unwrap().name.clone(),
            },
            70..=84 => {
                let c = self.rng.gen_range(1..table.columns.len());
                let default = if self.rng.gen_bool(0.75) {
                    table.columns[c].domain.choose(self.rng).cloned()
                } else {
                    None
                };
                Alter::SetDefault {
                    table: t,
                    name: table.columns[c].name.clone(),
                    default,
                }
            }
            85..=99 => {
                let c = self.rng.gen_range(1..table.columns.len());
                let name = format!("ix{}", self.next_name);
                self.next_name += 1;
                Alter::CreateIndex {
                    table: t,
                    name,
                    column: table.columns[c].name.clone(),
                }
            }
            _ => return None,
        };
        if change.on_sqlite() {
            let sql = change.render(&self.schema);
            self.conn
                .execute_batch(&sql)
                .unwrap_or_else(|e| panic!("generated schema change fails: {e}: {sql}"));
        }
        self.defaults.apply(&change);
        let table = &mut self.schema.tables[t];
        match &change {
            Alter::AddColumn { .. } => table.columns.extend(new_column),
            Alter::DropColumn { name, .. } => table.columns.retain(|c| &c.name != name),
            Alter::SetDefault { .. } => {}
            Alter::CreateIndex { column, .. } => self.indexed.push((t, column.clone())),
        }
        Some(change)
    }

    fn batch(&mut self, changes: Vec<Alter>) -> Batch {
        let kind = match self.rng.gen_range(0..10) {
            0..=5 => BatchKind::Autocommit,
            6..=8 => BatchKind::Commit,
            _ => BatchKind::Rollback,
        };
        let n = self.rng.gen_range(1..=5);
        if kind != BatchKind::Autocommit {
            self.conn.execute_batch("BEGIN").unwrap();
        }
        let mut stmts = Vec::new();
        for _ in 0..n {
            let t = self.rng.gen_range(0..self.schema.tables.len());
            let d = self.statement(t);
            let sql = d.render_sqlite(&self.schema, &self.defaults);
            self.conn
                .execute_batch(&sql)
                .unwrap_or_else(|e| panic!("generated DML fails: {e}: {sql}"));
            stmts.push(d);
        }
        match kind {
            BatchKind::Autocommit => {}
            BatchKind::Commit => self.conn.execute_batch("COMMIT").unwrap(),
            BatchKind::Rollback => self.conn.execute_batch("ROLLBACK").unwrap(),
        }
        Batch {
            kind,
            changes,
            stmts,
        }
    }

    fn statement(&mut self, t: usize) -> Dml {
        let table = self.schema.tables[t].clone();
        let names: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
        let name = |c: usize| names[c].clone();
        let ids = self.ids(t);
        let ncols = table.columns.len();
        let mut choice = self.rng.gen_range(0..100);
        if ids.is_empty() {
            choice = 0;
        } else if ids.len() > 60 && choice < 35 {
            choice += 50;
        }
        match choice {
            // New rows.
            0..=24 => {
                let k = self.rng.gen_range(1..=3);
                // Sometimes leave a column that has a default, or may be
                // NULL, to its default (all rows of the statement alike).
                let defaulted: Vec<usize> = (1..ncols)
                    .filter(|&c| {
                        let has_default = self.defaults.get(t, &names[c]) != Lit::Null;
                        (has_default || table.columns[c].nullable) && self.rng.gen_bool(0.2)
                    })
                    .collect();
                let mut taken = ids.clone();
                let mut rows = Vec::new();
                for _ in 0..k {
                    let id = self.fresh_id(t, &taken);
                    taken.push(id);
                    let row = table.random_row(self.rng, id);
                    rows.push(
                        row.into_iter()
                            .enumerate()
                            .filter(|(c, _)| !defaulted.contains(c))
                            .map(|(_, v)| v)
                            .collect(),
                    );
                }
                Dml::Insert {
                    table: t,
                    columns: (0..ncols)
                        .filter(|c| !defaulted.contains(c))
                        .map(name)
                        .collect(),
                    rows,
                    defaulted: defaulted.into_iter().map(name).collect(),
                }
            }
            // A copy of an existing row under a new id: duplicate keys.
            25..=34 => {
                let src = *ids.choose(self.rng).unwrap();
                let mut row = self.row(t, src);
                row[0] = Lit::Int(self.fresh_id(t, &ids));
                Dml::Insert {
                    table: t,
                    columns: names.clone(),
                    rows: vec![row],
                    defaulted: vec![],
                }
            }
            // One row's values.
            35..=54 => {
                let id = *ids.choose(self.rng).unwrap();
                let mut sets = Vec::new();
                for _ in 0..self.rng.gen_range(1..=2) {
                    let c = self.rng.gen_range(1..ncols);
                    if sets.iter().any(|(x, _)| *x == names[c]) {
                        continue;
                    }
                    sets.push((name(c), Set::Lit(table.random_value(self.rng, c))));
                }
                Dml::Update {
                    table: t,
                    sets,
                    filter: Filter::Id(id),
                }
            }
            // Several rows, relative to their values.
            55..=64 => {
                let c = self.rng.gen_range(1..ncols);
                let set = match table.columns[c].ty {
                    ColType::Integer | ColType::BigInt => {
                        Set::Add(Lit::Int(*[-1, 1, 2].choose(self.rng).unwrap()))
                    }
                    ColType::Numeric => Set::Add(Lit::Num(
                        ["1", "-0.5"].choose(self.rng).unwrap().to_string(),
                    )),
                    ColType::Boolean => Set::Not,
                    ColType::Text | ColType::Date => Set::Lit(table.random_value(self.rng, c)),
                };
                let f = self.rng.gen_range(1..ncols);
                let filter = match table.random_value(self.rng, f) {
                    Lit::Null => Filter::IsNull(name(f)),
                    v => Filter::Eq(name(f), v),
                };
                Dml::Update {
                    table: t,
                    sets: vec![(name(c), set)],
                    filter,
                }
            }
            // One row.
            65..=79 => Dml::Delete {
                table: t,
                filter: Filter::Id(*ids.choose(self.rng).unwrap()),
            },
            // The row holding a column's MIN or MAX (what feeds an
            // aggregate or the top of an ORDER BY).
            80..=91 => {
                let c = self.rng.gen_range(1..ncols);
                let max = self.rng.gen_bool(0.5);
                let id = self
                    .extreme(t, c, max)
                    .unwrap_or_else(|| *ids.choose(self.rng).unwrap());
                Dml::Delete {
                    table: t,
                    filter: Filter::Id(id),
                }
            }
            // All rows with a value.
            92..=97 => {
                let f = self.rng.gen_range(1..ncols);
                let filter = match table.random_value(self.rng, f) {
                    Lit::Null => Filter::IsNull(name(f)),
                    v => Filter::Eq(name(f), v),
                };
                Dml::Delete { table: t, filter }
            }
            // Everything.
            _ => Dml::Delete {
                table: t,
                filter: Filter::All,
            },
        }
    }
}
