//! Runs a case against Aqueduct (in process, on a temporary log) and SQLite
//! side by side, and compares every query after every batch.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::views::ViewOptions;
use aqueduct_sql::{param_from_text, Engine, Outcome, Prepared, Session};
use aqueduct_values::{Decimal, Value};
use rusqlite::types::{Value as SqlValue, ValueRef};

use super::query::{Features, Query};
use super::schema::{insert_sql, Lit, Ty};
use super::workload::{sqlite_schema, Alter, BatchKind, Case, Defaults, Sizes};

/// How a suite runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Create `CREATE VIEW v<i> AS <query>` and compare `SELECT * FROM v<i>`;
    /// otherwise run each query directly.
    pub use_views: bool,
    /// With views, also compare `SELECT * FROM v<i> WHERE o<k> = value`.
    pub lookups: bool,
    /// ... also on views with GROUP BY or aggregates (anywhere).
    pub grouped_lookups: bool,
    /// Also run each query prepared with `AND <column> = $1` added, with a
    /// new parameter value after every batch (automatic views).
    pub params: bool,
    /// ... also where automatic views are known to refuse the query: with
    /// ORDER BY/LIMIT, or pinning a column that is not a group key.
    pub all_params: bool,
    pub features: Features,
    pub sizes: Sizes,
    /// For testing the tester: pretend SQLite's answer after a batch lost
    /// its last row whenever it has two or more.
    pub sabotage: bool,
    /// Bound on view and operator state (0: none). A read refused because
    /// state that cannot be evicted would pass it (53200) raises the bound
    /// a little, as an operator would, and runs again: the bound stays just
    /// above what must be kept in full, so partial keys are evicted all
    /// the time.
    pub memory_limit: u64,
    /// Threads that, while each batch of writes runs, keep reading the
    /// views by key (the lookups and parameterised queries checked so far,
    /// again), so upqueries and evictions race with the writes.
    pub churn: usize,
    /// Run the schema changes while the churn threads read, rather than
    /// before they start.
    pub alter_under_churn: bool,
}

/// A value as both engines must agree on it: numbers by decimal value
/// (booleans as 0/1, as SQLite stores them; rounded to 9 places so an
/// average as SQLite's double and as Aqueduct's numeric agree), text as is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Norm {
    Null,
    Num(Decimal),
    Text(String),
}

impl fmt::Display for Norm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Norm::Null => write!(f, "NULL"),
            Norm::Num(d) => write!(f, "{d}"),
            Norm::Text(s) => write!(f, "'{s}'"),
        }
    }
}

fn num(d: Decimal) -> Norm {
    Norm::Num(d.round_dp(9).normalize())
}

fn float(f: f64) -> Norm {
    match Decimal::from_f64_retain(f) {
        Some(d) => num(d),
        None => Norm::Text(format!("float {f}")),
    }
}

pub fn norm_aqueduct(v: &Value) -> Norm {
    match v {
        Value::Null => Norm::Null,
        Value::Bool(b) => Norm::Num(Decimal::from(*b as i64)),
        Value::Int(i) => Norm::Num(Decimal::from(*i)),
        Value::Numeric(d) => num(*d),
        Value::Float(f) => float(*f),
        Value::Text(s) => Norm::Text(s.clone()),
        other => Norm::Text(other.to_string()),
    }
}

pub fn norm_sqlite(v: ValueRef<'_>) -> Norm {
    match v {
        ValueRef::Null => Norm::Null,
        ValueRef::Integer(i) => Norm::Num(Decimal::from(i)),
        ValueRef::Real(f) => float(f),
        ValueRef::Text(t) => Norm::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Norm::Text(format!("blob {b:?}")),
    }
}

pub type Rows = Vec<Vec<Norm>>;

/// What went wrong. Two failures are "the same" for minimisation when
/// their kinds are equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailKind {
    /// Different rows.
    Mismatch,
    /// Different rows from a lookup on a view.
    LookupMismatch,
    /// Different rows from the prepared query with a parameter.
    ParamMismatch,
    /// Aqueduct failed to prepare or run the query with a parameter.
    ParamError(String),
    /// Aqueduct refused or failed a query SQLite answers (SQLSTATE, message).
    QueryError(String),
    /// Aqueduct refused `CREATE VIEW`.
    ViewError(String),
    /// SQLite rejected a query: a bug in the generator.
    SqliteError(String),
    /// A write SQLite accepts failed in Aqueduct, or changed another number of rows.
    Write(String),
    /// A schema change SQLite accepts (or, for one SQLite cannot run, that
    /// fits the schema) failed in Aqueduct.
    SchemaChange(String),
}

impl FailKind {
    /// What must stay the same while a case is minimised: the kind, and for
    /// errors the message without the SQL text and names it quotes.
    pub fn signature(&self) -> String {
        let msg = match self {
            FailKind::QueryError(m)
            | FailKind::ViewError(m)
            | FailKind::SqliteError(m)
            | FailKind::Write(m)
            | FailKind::SchemaChange(m)
            | FailKind::ParamError(m) => m.as_str(),
            FailKind::Mismatch | FailKind::LookupMismatch | FailKind::ParamMismatch => "",
        };
        let kind = format!("{self:?}");
        let kind = kind.split('(').next().unwrap();
        // "<the query> in a maintained view is not supported (SQLSTATE 0A000)"
        let msg = match msg.find(" in a maintained view") {
            Some(i) if msg[..i].contains("SELECT") => &msg[i..],
            _ => msg,
        };
        let mut out = String::new();
        let mut quoted = false;
        for c in msg.chars() {
            if c == '"' {
                quoted = !quoted;
            } else if !quoted {
                out.push(c);
            }
        }
        if matches!(self, FailKind::SchemaChange(_)) {
            // "... because view v2 depends on it": the same view under
            // another number once others are dropped.
            out = out
                .split(' ')
                .map(|w| w.trim_end_matches(|c: char| c.is_ascii_digit()))
                .collect::<Vec<_>>()
                .join(" ");
        }
        format!("{kind}: {out}")
    }
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub kind: FailKind,
    /// Which view (query) failed.
    pub view: Option<usize>,
    /// Where: "after the initial rows", "after batch 3".
    pub at: String,
    /// The statement that failed or disagreed.
    pub sql: String,
    pub aqueduct: Option<Rows>,
    pub sqlite: Option<Rows>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:?} {}", self.kind, self.at)?;
        if let Some(v) = self.view {
            writeln!(f, "  view v{v}")?;
        }
        writeln!(f, "  statement: {}", self.sql)?;
        if let (Some(a), Some(s)) = (&self.aqueduct, &self.sqlite) {
            writeln!(f, "  Aqueduct ({} rows):", a.len())?;
            write_rows(f, a)?;
            writeln!(f, "  SQLite ({} rows):", s.len())?;
            write_rows(f, s)?;
            let (only_a, only_s) = diff(a, s);
            writeln!(f, "  only in Aqueduct:")?;
            write_rows(f, &only_a)?;
            writeln!(f, "  only in SQLite:")?;
            write_rows(f, &only_s)?;
        }
        Ok(())
    }
}

fn write_rows(f: &mut fmt::Formatter<'_>, rows: &Rows) -> fmt::Result {
    for r in rows.iter().take(40) {
        let vals: Vec<String> = r.iter().map(|v| v.to_string()).collect();
        writeln!(f, "    ({})", vals.join(", "))?;
    }
    if rows.len() > 40 {
        writeln!(f, "    ... {} more", rows.len() - 40)?;
    }
    Ok(())
}

/// Multiset differences of two sorted row lists.
fn diff(a: &Rows, b: &Rows) -> (Rows, Rows) {
    let (mut i, mut j) = (0, 0);
    let (mut only_a, mut only_b) = (Vec::new(), Vec::new());
    while i < a.len() || j < b.len() {
        if j == b.len() || i < a.len() && a[i] < b[j] {
            only_a.push(a[i].clone());
            i += 1;
        } else if i == a.len() || b[j] < a[i] {
            only_b.push(b[j].clone());
            j += 1;
        } else {
            i += 1;
            j += 1;
        }
    }
    (only_a, only_b)
}

/// Counters for the summary line.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub comparisons: usize,
    pub nonempty: usize,
    pub rows: usize,
    pub lookups: usize,
    pub params: usize,
    pub writes: usize,
    /// Keys of partial views filled by upqueries, and evicted.
    pub fills: u64,
    pub evictions: u64,
    /// Reads the churn threads made.
    pub churn_reads: usize,
}

/// A read the churn threads repeat: SQL and its parameter, if any.
type ChurnRead = (String, Option<String>);

struct Engines {
    /// The Aqueduct statement running now, for reporting a hang.
    trace: Option<Arc<Mutex<String>>>,
    /// Reads the churn threads repeat: SQL and its parameter, if any.
    churn_reads: Arc<Mutex<Vec<ChurnRead>>>,
    memory_limit: u64,
    /// The session and its engine; `None` only while restarting.
    aq: Option<(Session, Arc<Engine>)>,
    /// The prepared parameterised query of each view, made on first use.
    prepared: BTreeMap<usize, Prepared>,
    sqlite: rusqlite::Connection,
    /// Column defaults after the schema changes run so far.
    defaults: Defaults,
    /// Tables a column was added to: their rows are compared too.
    altered: Vec<usize>,
    _dir: tempfile::TempDir,
}

fn aqueduct(dir: &std::path::Path, memory_limit: u64) -> Arc<Engine> {
    let (log, _) = Log::open(
        dir,
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap();
    Engine::open_with(
        log,
        &mut |_| {},
        ViewOptions {
            partial: true,
            memory_limit,
        },
    )
    .unwrap()
}

/// Most reads the churn threads keep to repeat.
const CHURN_READS: usize = 64;

impl Engines {
    fn aq(&mut self, sql: &str) -> Result<Outcome, aqueduct_sql::SqlError> {
        if let Some(t) = &self.trace {
            *t.lock().unwrap() = sql.to_string();
        }
        self.retry(|s| s.execute(sql).pop().unwrap())
    }

    /// Runs `f` on the session, again after raising the memory limit while
    /// it is refused for want of memory.
    fn retry<T>(
        &mut self,
        mut f: impl FnMut(&mut Session) -> Result<T, aqueduct_sql::SqlError>,
    ) -> Result<T, aqueduct_sql::SqlError> {
        loop {
            let out = f(&mut self.aq.as_mut().unwrap().0);
            match &out {
                Err(e) if e.code == "53200" && self.memory_limit > 0 => self.raise_limit(),
                _ => return out,
            }
        }
    }

    fn engine(&self) -> &Arc<Engine> {
        &self.aq.as_ref().unwrap().1
    }

    /// Raises the memory limit by a quarter and a little (a read needed
    /// more state kept in full than it allowed).
    fn raise_limit(&mut self) {
        let now = self
            .engine()
            .views
            .progress()
            .memory_limit
            .max(self.memory_limit);
        assert!(now < 1 << 40, "the memory limit keeps being too small");
        self.memory_limit = now + now / 4 + 2048;
        self.engine().views.set_memory_limit(self.memory_limit);
    }

    /// Remembers a read for the churn threads to repeat.
    fn churn_read(&self, sql: &str, param: Option<String>) {
        let mut reads = self.churn_reads.lock().unwrap();
        if reads.len() >= CHURN_READS {
            reads.remove(0);
        }
        reads.push((sql.to_string(), param));
    }

    /// Closes the engine and opens it again on the same log: tables and
    /// views are rebuilt from the log.
    fn restart(&mut self) {
        self.prepared.clear();
        self.aq = None;
        let engine = aqueduct(self._dir.path(), self.memory_limit);
        self.aq = Some((engine.session(), engine));
    }
}

fn aq_rows(e: &mut Engines, sql: &str) -> Result<Rows, String> {
    match e.aq(sql) {
        Ok(Outcome::Rows { rows, .. }) => Ok(sorted(
            rows.iter()
                .map(|r| r.iter().map(norm_aqueduct).collect())
                .collect(),
        )),
        Ok(other) => Err(format!("expected rows, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn aq_ok(e: &mut Engines, sql: &str) -> Result<Outcome, String> {
    e.aq(sql).map_err(|e| e.to_string())
}

fn sqlite_rows(conn: &rusqlite::Connection, sql: &str) -> Result<Rows, String> {
    sqlite_rows_with(conn, sql, &[])
}

fn sqlite_rows_with(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[SqlValue],
) -> Result<Rows, String> {
    let mut st = conn.prepare(sql).map_err(|e| e.to_string())?;
    let n = st.column_count();
    let mut rows = st
        .query(rusqlite::params_from_iter(params))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(|e| e.to_string())? {
        out.push((0..n).map(|i| norm_sqlite(r.get_ref(i).unwrap())).collect());
    }
    Ok(sorted(out))
}

fn sorted(mut rows: Rows) -> Rows {
    rows.sort();
    rows
}

/// The number at the end of a command tag (`INSERT 0 3`, `UPDATE 2`).
fn tag_count(o: &Outcome) -> Option<usize> {
    match o {
        Outcome::Command { tag } | Outcome::Rows { tag, .. } | Outcome::CopyOut { tag, .. } => {
            tag.rsplit(' ').next().and_then(|n| n.parse().ok())
        }
        Outcome::Empty | Outcome::CopyIn { .. } => None,
    }
}

/// Parameter values to try for a parameter of type `ty`: values the
/// columns hold (and one that no row has).
pub fn param_values(ty: Ty) -> Vec<Lit> {
    let num = |s: &str| Lit::Num(s.to_string());
    let text = |s: &str| Lit::Text(s.to_string());
    match ty {
        Ty::Int => (-3..=9).map(Lit::Int).collect(),
        Ty::Num => vec![
            num("0"),
            num("0.5"),
            num("1.25"),
            num("2"),
            num("-0.75"),
            num("3.5"),
            num("1"),
            num("7"),
        ],
        Ty::Text => ["a", "b", "ab", "ba", "abc", "B", "", "bb", "zz"]
            .map(text)
            .to_vec(),
        Ty::Bool => vec![Lit::Bool(true), Lit::Bool(false)],
        Ty::Date => super::schema::DATES.iter().map(|d| text(d)).collect(),
    }
}

/// The parameter as text (for Aqueduct) and as a SQLite value.
fn param_value(l: &Lit) -> (String, SqlValue) {
    match l {
        Lit::Null => ("NULL".into(), SqlValue::Null),
        Lit::Int(i) => (i.to_string(), SqlValue::Integer(*i)),
        Lit::Num(s) => (s.clone(), SqlValue::Real(s.parse().unwrap())),
        Lit::Text(s) => (s.clone(), SqlValue::Text(s.clone())),
        Lit::Bool(b) => (b.to_string(), SqlValue::Integer(*b as i64)),
    }
}

/// A literal for a value of an output column, for lookups; `None` where
/// equality would be fragile (averages and other long decimals).
fn lookup_lit(v: &Norm, ty: Ty) -> Option<Lit> {
    Some(match (v, ty) {
        (Norm::Null, _) => Lit::Null,
        (Norm::Num(d), Ty::Bool) => Lit::Bool(!d.is_zero()),
        (Norm::Num(d), Ty::Int) => Lit::Int(i64::try_from(*d).ok()?),
        (Norm::Num(d), Ty::Num) if d.scale() <= 4 => Lit::Num(d.to_string()),
        (Norm::Text(s), Ty::Text | Ty::Date) => Lit::Text(s.clone()),
        _ => return None,
    })
}

/// Runs `case`; the first disagreement is the error.
pub fn run(case: &Case, cfg: &Config) -> Result<Stats, Box<Failure>> {
    run_traced(case, cfg, None)
}

/// [`run`], keeping the Aqueduct statement in progress in `trace`.
pub fn run_traced(
    case: &Case,
    cfg: &Config,
    trace: Option<Arc<Mutex<String>>>,
) -> Result<Stats, Box<Failure>> {
    let dir = tempfile::tempdir().unwrap();
    let engine = aqueduct(dir.path(), cfg.memory_limit);
    let mut e = Engines {
        trace,
        churn_reads: Arc::default(),
        memory_limit: cfg.memory_limit,
        aq: Some((engine.session(), engine)),
        prepared: BTreeMap::new(),
        sqlite: rusqlite::Connection::open_in_memory().unwrap(),
        defaults: Defaults::default(),
        altered: Vec::new(),
        _dir: dir,
    };
    let mut stats = Stats::default();
    sqlite_schema(&e.sqlite, &case.schema);
    for t in &case.schema.tables {
        aq_ok(&mut e, &t.create_sql()).expect("CREATE TABLE");
    }
    // Queries SQLite cannot prepare are invalid (the generator's bug, or a
    // simplification too far while minimising).
    for (i, v) in case.views.iter().enumerate() {
        let sql = v.query.render();
        if let Err(err) = e.sqlite.prepare(&sql) {
            return Err(Box::new(Failure {
                kind: FailKind::SqliteError(err.to_string()),
                view: Some(i),
                at: "preparing the queries in SQLite".into(),
                sql,
                aqueduct: None,
                sqlite: None,
            }));
        }
    }
    if case.views_first {
        create_views(&mut e, case, cfg)?;
    }
    for (t, rows) in case.schema.tables.iter().zip(&case.initial) {
        if !rows.is_empty() {
            let sql = insert_sql(&t.name, rows);
            e.sqlite.execute_batch(&sql).unwrap();
            aq_ok(&mut e, &sql).map_err(|err| Failure {
                kind: FailKind::Write(err),
                view: None,
                at: "loading the initial rows".into(),
                sql: sql.clone(),
                aqueduct: None,
                sqlite: None,
            })?;
        }
    }
    if !case.views_first {
        create_views(&mut e, case, cfg)?;
    }
    check(&mut e, case, cfg, "after the initial rows", 0, &mut stats)?;
    for (b, batch) in case.batches.iter().enumerate() {
        let mut churn = None;
        if cfg.alter_under_churn {
            churn = Some(Churn::start(&e, cfg.churn));
        }
        if schema_changes(&mut e, case, b)? {
            // The views over a changed table are made anew: compare them
            // before any write.
            let at = format!("before batch {}, after its schema changes", b + 1);
            check(&mut e, case, cfg, &at, b + 1, &mut stats)?;
        }
        let churn = churn.unwrap_or_else(|| Churn::start(&e, cfg.churn));
        let at = format!("in batch {}", b + 1);
        if batch.kind != BatchKind::Autocommit {
            e.sqlite.execute_batch("BEGIN").unwrap();
            aq_ok(&mut e, "BEGIN").unwrap();
        }
        for d in &batch.stmts {
            let sql = d.render(&case.schema);
            // SQLite decides whether a write is valid (minimisation may
            // drop the delete that made room for an insert, or the schema
            // change that added a column).
            let sqlite_sql = d.render_sqlite(&case.schema, &e.defaults);
            let Ok(n) = e.sqlite.execute(&sqlite_sql, []) else {
                continue;
            };
            stats.writes += 1;
            let fail = |kind| Failure {
                kind,
                view: None,
                at: at.clone(),
                sql: sql.clone(),
                aqueduct: None,
                sqlite: None,
            };
            match aq_ok(&mut e, &sql) {
                Err(err) => return Err(Box::new(fail(FailKind::Write(err)))),
                Ok(o) if tag_count(&o) != Some(n) => {
                    return Err(Box::new(fail(FailKind::Write(format!(
                        "Aqueduct says {o:?}, SQLite changed {n} rows"
                    )))))
                }
                Ok(_) => {}
            }
        }
        let end = match batch.kind {
            BatchKind::Autocommit => None,
            BatchKind::Commit => Some("COMMIT"),
            BatchKind::Rollback => Some("ROLLBACK"),
        };
        if let Some(end) = end {
            // Inside the transaction every read (of a view too) sees its
            // own writes. (Not under a memory limit: a read refused for
            // want of memory there would abort the transaction.)
            if cfg.memory_limit == 0 {
                let at = format!("in batch {}, before its {end}", b + 1);
                check(&mut e, case, cfg, &at, b + 1, &mut stats)?;
            }
            e.sqlite.execute_batch(end).unwrap();
            aq_ok(&mut e, end).map_err(|err| Failure {
                kind: FailKind::Write(err),
                view: None,
                at: at.clone(),
                sql: end.into(),
                aqueduct: None,
                sqlite: None,
            })?;
        }
        stats.churn_reads += churn.stop()?;
        let mut at = format!("after batch {}", b + 1);
        if case.restart_after == Some(b + 1) {
            e.restart();
            at += " and a restart";
        }
        check(&mut e, case, cfg, &at, b + 1, &mut stats)?;
    }
    for v in e.engine().views.stats() {
        stats.fills += v.reads.fills;
        stats.evictions += v.reads.evictions;
    }
    Ok(stats)
}

/// Runs the schema changes before batch `b` on both engines; whether any
/// ran. SQLite decides whether a change fits the schema (minimisation may
/// drop the change that added a column a later one drops).
fn schema_changes(e: &mut Engines, case: &Case, b: usize) -> Result<bool, Box<Failure>> {
    let mut ran = false;
    for change in &case.batches[b].changes {
        let probe = change.sqlite_probe(&case.schema);
        if e.sqlite.execute_batch(&probe).is_err() {
            continue;
        }
        let sql = change.render(&case.schema);
        aq_ok(e, &sql).map_err(|err| Failure {
            kind: FailKind::SchemaChange(err),
            view: None,
            at: format!("before batch {}", b + 1),
            sql: sql.clone(),
            aqueduct: None,
            sqlite: None,
        })?;
        e.defaults.apply(change);
        if matches!(change, Alter::AddColumn { .. }) && !e.altered.contains(&change.table()) {
            e.altered.push(change.table());
        }
        ran = true;
    }
    Ok(ran)
}

/// The statement that reads all of table `t`'s rows.
pub fn table_rows_sql(case: &Case, t: usize) -> String {
    format!("SELECT * FROM {}", case.schema.tables[t].name)
}

pub fn view_ddl(case: &Case, i: usize) -> String {
    let v = &case.views[i];
    format!(
        "CREATE {}VIEW v{i} AS {}",
        if v.materialized { "MATERIALIZED " } else { "" },
        v.query.render()
    )
}

fn create_views(e: &mut Engines, case: &Case, cfg: &Config) -> Result<(), Box<Failure>> {
    if !cfg.use_views {
        return Ok(());
    }
    for i in 0..case.views.len() {
        let sql = view_ddl(case, i);
        aq_ok(e, &sql).map_err(|err| Failure {
            kind: FailKind::ViewError(err),
            view: Some(i),
            at: "creating the views".into(),
            sql,
            aqueduct: None,
            sqlite: None,
        })?;
    }
    Ok(())
}

fn check(
    e: &mut Engines,
    case: &Case,
    cfg: &Config,
    at: &str,
    step: usize,
    stats: &mut Stats,
) -> Result<(), Box<Failure>> {
    // The rows of tables with added columns: the values a new column took
    // from its default or from later writes.
    for t in e.altered.clone() {
        let sql = table_rows_sql(case, t);
        let fail = |kind, aqueduct, sqlite| Failure {
            kind,
            view: None,
            at: at.to_string(),
            sql: sql.clone(),
            aqueduct,
            sqlite,
        };
        let expected = sqlite_rows(&e.sqlite, &sql)
            .map_err(|err| fail(FailKind::SqliteError(err), None, None))?;
        let got = aq_rows(e, &sql)
            .map_err(|err| fail(FailKind::QueryError(err), None, Some(expected.clone())))?;
        stats.comparisons += 1;
        stats.rows += expected.len();
        if !expected.is_empty() {
            stats.nonempty += 1;
        }
        if got != expected {
            return Err(Box::new(fail(
                FailKind::Mismatch,
                Some(got),
                Some(expected),
            )));
        }
    }
    for (i, v) in case.views.iter().enumerate() {
        let query = v.query.render();
        let fail = |kind, sql: &str, aqueduct, sqlite| Failure {
            kind,
            view: Some(i),
            at: at.to_string(),
            sql: sql.to_string(),
            aqueduct,
            sqlite,
        };
        let mut expected = sqlite_rows(&e.sqlite, &query)
            .map_err(|err| fail(FailKind::SqliteError(err), &query, None, None))?;
        if cfg.sabotage && step > 0 && expected.len() >= 2 {
            expected.pop();
        }
        let aq_sql = if cfg.use_views {
            format!("SELECT * FROM v{i}")
        } else {
            query.clone()
        };
        let got = aq_rows(e, &aq_sql).map_err(|err| {
            fail(
                FailKind::QueryError(err),
                &aq_sql,
                None,
                Some(expected.clone()),
            )
        })?;
        stats.comparisons += 1;
        stats.rows += expected.len();
        if !expected.is_empty() {
            stats.nonempty += 1;
        }
        if got != expected {
            let sql = if cfg.use_views {
                format!("{aq_sql} -- v{i} is {query}")
            } else {
                query.clone()
            };
            return Err(Box::new(fail(
                FailKind::Mismatch,
                &sql,
                Some(got),
                Some(expected),
            )));
        }
        if cfg.use_views
            && cfg.lookups
            && (cfg.grouped_lookups || !v.query.has_grouping())
            && !expected.is_empty()
        {
            // A lookup by one output column, on a value some row has.
            let pick = (step * 7 + i * 3) % expected.len();
            let col = (step + i) % v.query.types.len();
            let Some(lit) = lookup_lit(&expected[pick][col], v.query.types[col]) else {
                continue;
            };
            let cond = match lit {
                Lit::Null => format!("o{col} IS NULL"),
                l => format!("o{col} = {l}"),
            };
            let sqlite_sql = format!("SELECT * FROM ({query}) AS sub WHERE {cond}");
            let aq_sql = format!("SELECT * FROM v{i} WHERE {cond}");
            let expected = sqlite_rows(&e.sqlite, &sqlite_sql)
                .map_err(|err| fail(FailKind::SqliteError(err), &sqlite_sql, None, None))?;
            let got = aq_rows(e, &aq_sql).map_err(|err| {
                fail(
                    FailKind::QueryError(err),
                    &aq_sql,
                    None,
                    Some(expected.clone()),
                )
            })?;
            stats.lookups += 1;
            e.churn_read(&aq_sql, None);
            if got != expected {
                return Err(Box::new(fail(
                    FailKind::LookupMismatch,
                    &format!("{aq_sql} -- v{i} is {query}"),
                    Some(got),
                    Some(expected),
                )));
            }
        }
        if let Some((pq, ty)) = param_query(case, i, cfg) {
            let values = param_values(ty);
            let lit = &values[(step * 5 + i) % values.len()];
            param_check(e, i, &pq.render(), lit, stats)
                .map_err(|(kind, sql, a, s)| Box::new(fail(kind, &sql, a, s)))?;
        }
    }
    Ok(())
}

/// The prepared variant of view `i`'s query that `cfg` runs, with its
/// parameter's type.
pub fn param_query(case: &Case, i: usize, cfg: &Config) -> Option<(Query, Ty)> {
    let v = &case.views[i];
    let pick = v.param.filter(|_| cfg.params)?;
    // Direct evaluation answers every query of the direct suite; in the
    // views suite automatic views serve those with joins, subqueries, ...
    let auto = cfg.use_views;
    if auto && !cfg.grouped_lookups && v.query.has_grouping() {
        // Automatic views over aggregates miss rows, like lookups on such
        // views.
        return None;
    }
    v.query
        .with_param(&case.schema, pick, auto && !cfg.all_params)
}

type ParamFailure = (FailKind, String, Option<Rows>, Option<Rows>);

/// Runs the prepared query `sql` with `$1` = `lit` in both engines.
fn param_check(
    e: &mut Engines,
    view: usize,
    sql: &str,
    lit: &Lit,
    stats: &mut Stats,
) -> Result<(), ParamFailure> {
    let (text, sqlite_value) = param_value(lit);
    let shown = format!("{sql} -- with $1 = {lit}");
    let expected = sqlite_rows_with(&e.sqlite, sql, &[sqlite_value])
        .map_err(|err| (FailKind::SqliteError(err), shown.clone(), None, None))?;
    if let Some(t) = &e.trace {
        *t.lock().unwrap() = shown.clone();
    }
    let aq_err = |err: aqueduct_sql::SqlError| {
        (
            FailKind::ParamError(err.to_string()),
            shown.clone(),
            None,
            None,
        )
    };
    let p = match e.prepared.get(&view) {
        Some(p) => p.clone(),
        None => {
            let p = e.retry(|s| s.prepare(sql, &[None])).map_err(aq_err)?;
            e.prepared.insert(view, p.clone());
            p
        }
    };
    let value = param_from_text(&text, &p.params[0]).map_err(aq_err)?;
    let got = match e
        .retry(|s| s.execute_prepared(&p, std::slice::from_ref(&value)))
        .map_err(aq_err)?
    {
        Outcome::Rows { rows, .. } => sorted(
            rows.iter()
                .map(|r| r.iter().map(norm_aqueduct).collect())
                .collect(),
        ),
        other => {
            return Err((
                FailKind::ParamError(format!("expected rows, got {other:?}")),
                shown,
                None,
                None,
            ))
        }
    };
    stats.params += 1;
    e.churn_read(sql, Some(text));
    if got != expected {
        return Err((FailKind::ParamMismatch, shown, Some(got), Some(expected)));
    }
    Ok(())
}

/// Reader threads that repeat earlier keyed reads while a batch of writes
/// runs. Their answers are not compared (the state moves under them); an
/// internal error (XX000: the dataflow broke) fails the case.
struct Churn {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Result<usize, String>>>,
}

/// Reads each churn thread makes at least, so that some overlap the writes.
const CHURN_MIN_READS: usize = 8;

impl Churn {
    fn start(e: &Engines, threads: usize) -> Churn {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reads = e.churn_reads.lock().unwrap().clone();
        let threads = if reads.is_empty() { 0 } else { threads };
        let threads = (0..threads)
            .map(|t| {
                let engine = e.engine().clone();
                let stop = stop.clone();
                let reads = reads.clone();
                std::thread::spawn(move || {
                    let mut session = engine.session();
                    let mut prepared: BTreeMap<String, Prepared> = BTreeMap::new();
                    let mut n = 0;
                    while n < CHURN_MIN_READS || !stop.load(std::sync::atomic::Ordering::Acquire) {
                        let (sql, param) = &reads[(n * 7 + t * 3) % reads.len()];
                        n += 1;
                        let out = match param {
                            None => session.execute(sql).pop().unwrap(),
                            Some(text) => {
                                let p = match prepared.get(sql) {
                                    Some(p) => p.clone(),
                                    None => match session.prepare(sql, &[None]) {
                                        Ok(p) => {
                                            prepared.insert(sql.clone(), p.clone());
                                            p
                                        }
                                        Err(_) => continue,
                                    },
                                };
                                match param_from_text(text, &p.params[0]) {
                                    Ok(v) => session.execute_prepared(&p, &[v]),
                                    Err(_) => continue,
                                }
                            }
                        };
                        if let Err(err) = out {
                            if err.code == "XX000" {
                                return Err(format!("{sql}: {err}"));
                            }
                        }
                    }
                    Ok(n)
                })
            })
            .collect();
        Churn { stop, threads }
    }

    /// Stops the threads; how many reads they made.
    fn stop(self) -> Result<usize, Box<Failure>> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let mut reads = 0;
        for t in self.threads {
            match t.join().expect("a churn thread panicked") {
                Ok(n) => reads += n,
                Err(why) => {
                    return Err(Box::new(Failure {
                        kind: FailKind::QueryError(why),
                        view: None,
                        at: "a concurrent read while writes ran".into(),
                        sql: String::new(),
                        aqueduct: None,
                        sqlite: None,
                    }))
                }
            }
        }
        Ok(reads)
    }
}
