//! A test case: schema, initial rows, the queries under test and a stream
//! of write batches. Writes are generated against a scratch SQLite so each
//! one can aim at rows that exist (the current MIN/MAX holder, a row in a
//! top-k window, a duplicate of a join key).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rusqlite::types::Value as SqlValue;

use super::query::{Features, Gen, Query};
use super::schema::{insert_sql, ColType, Lit, Schema};

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
    Eq(usize, Lit),
    IsNull(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Dml {
    Insert {
        table: usize,
        rows: Vec<Vec<Lit>>,
    },
    Update {
        table: usize,
        sets: Vec<(usize, Set)>,
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

    pub fn render(&self, schema: &Schema) -> String {
        let t = &schema.tables[self.table()];
        let filter = |f: &Filter| match f {
            Filter::All => String::new(),
            Filter::Id(id) => format!(" WHERE id = {id}"),
            Filter::Eq(c, v) => format!(" WHERE {} = {v}", t.columns[*c].name),
            Filter::IsNull(c) => format!(" WHERE {} IS NULL", t.columns[*c].name),
        };
        match self {
            Dml::Insert { rows, .. } => insert_sql(&t.name, rows),
            Dml::Update {
                sets, filter: f, ..
            } => {
                let sets: Vec<String> = sets
                    .iter()
                    .map(|(c, s)| {
                        let n = &t.columns[*c].name;
                        match s {
                            Set::Lit(v) => format!("{n} = {v}"),
                            Set::Add(k) => format!("{n} = {n} + {k}"),
                            Set::Not => format!("{n} = NOT {n}"),
                        }
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

#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub kind: BatchKind,
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
            schema: &schema,
            conn: &conn,
            next_id: initial.iter().map(|r| r.len() as i64 + 1).collect(),
        };
        let batches = (0..sizes.batches).map(|_| w.batch()).collect();
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
    schema: &'a Schema,
    conn: &'a rusqlite::Connection,
    next_id: Vec<i64>,
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

    fn batch(&mut self) -> Batch {
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
            self.conn
                .execute_batch(&d.render(self.schema))
                .unwrap_or_else(|e| panic!("generated DML fails: {e}: {}", d.render(self.schema)));
            stmts.push(d);
        }
        match kind {
            BatchKind::Autocommit => {}
            BatchKind::Commit => self.conn.execute_batch("COMMIT").unwrap(),
            BatchKind::Rollback => self.conn.execute_batch("ROLLBACK").unwrap(),
        }
        Batch { kind, stmts }
    }

    fn statement(&mut self, t: usize) -> Dml {
        let table = &self.schema.tables[t];
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
                let mut taken = ids.clone();
                let mut rows = Vec::new();
                for _ in 0..k {
                    let id = self.fresh_id(t, &taken);
                    taken.push(id);
                    rows.push(table.random_row(self.rng, id));
                }
                Dml::Insert { table: t, rows }
            }
            // A copy of an existing row under a new id: duplicate keys.
            25..=34 => {
                let src = *ids.choose(self.rng).unwrap();
                let mut row = self.row(t, src);
                row[0] = Lit::Int(self.fresh_id(t, &ids));
                Dml::Insert {
                    table: t,
                    rows: vec![row],
                }
            }
            // One row's values.
            35..=54 => {
                let id = *ids.choose(self.rng).unwrap();
                let mut sets = Vec::new();
                for _ in 0..self.rng.gen_range(1..=2) {
                    let c = self.rng.gen_range(1..ncols);
                    if sets.iter().any(|(x, _)| *x == c) {
                        continue;
                    }
                    sets.push((c, Set::Lit(table.random_value(self.rng, c))));
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
                    Lit::Null => Filter::IsNull(f),
                    v => Filter::Eq(f, v),
                };
                Dml::Update {
                    table: t,
                    sets: vec![(c, set)],
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
                    Lit::Null => Filter::IsNull(f),
                    v => Filter::Eq(f, v),
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
