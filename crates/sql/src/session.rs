//! A client session: transaction state, settings, prepared statements.
//!
//! Transaction states follow PostgreSQL's `ReadyForQuery` status: idle,
//! in a transaction block, or in a failed block that only `ROLLBACK` (or
//! `COMMIT`, which then rolls back) ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_log::Lsn;
use aqueduct_tables::{Catalog, ColumnDef, SchemaChange, TableSchema, Txn};
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::bind::{self, Plan, StatementTime};
use crate::catalog_queries;
use crate::consistency::Ready;
use crate::exec;
use crate::routes::{PreparedAuto, Route};
use crate::view_read::ViewRead;
use crate::{Column, Engine, SqlError, MAX_SQL_BYTES};

/// A view a statement reads, with the key columns and the keys its
/// `WHERE` pins (none: all its rows).
type ViewReadKeys = (
    Arc<crate::views::ViewEntry>,
    Option<(Vec<usize>, Vec<Vec<Value>>)>,
);

/// Counts a statement in the running gauge until dropped (also when it
/// unwinds).
struct Running<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Running<'a> {
    fn start(gauge: &'a std::sync::atomic::AtomicU64) -> Running<'a> {
        gauge.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Running(gauge)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How long, and with how much memory, each statement may run.
#[derive(Clone, Copy, Debug, Default)]
struct StatementBounds {
    timeout: Option<std::time::Duration>,
    memory: Option<u64>,
}

/// Adds view `v` to `catalog` as a table holding `rows`.
fn add_view_table(
    catalog: &mut Catalog,
    v: &crate::views::ViewEntry,
    rows: Vec<Vec<Value>>,
    watermark: Lsn,
) {
    catalog.apply_schema(SchemaChange::CreateTable(TableSchema {
        id: v.id,
        name: v.name.clone(),
        columns: v
            .columns
            .iter()
            .map(|c| ColumnDef {
                name: c.name.clone(),
                ty: c.ty.clone(),
                not_null: false,
                default: None,
            })
            .collect(),
        primary_key: vec![],
        indexes: vec![],
    }));
    for (i, row) in rows.into_iter().enumerate() {
        catalog.apply_row(v.id, vec![Value::Int(i as i64)], Some(row), watermark);
    }
}

/// `ReadyForQuery` status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    Idle,
    InBlock,
    Failed,
}

/// What a statement produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Rows, with the command tag to send after them (`SELECT 3`, `INSERT 0 1`).
    Rows {
        columns: Vec<Column>,
        rows: Vec<Vec<Value>>,
        tag: String,
    },
    /// A command without rows, with its tag (`CREATE TABLE`, `UPDATE 2`).
    Command { tag: String },
    /// An empty query string.
    Empty,
}

/// A parsed statement with its parameter and result types.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub sql: String,
    /// Parameter types, in `$1, $2, ...` order.
    pub params: Vec<DataType>,
    /// Result columns; empty for statements without rows.
    pub columns: Vec<Column>,
    /// A read that finishes in microseconds (a key or index lookup, a view
    /// lookup): front ends may run it without moving to a blocking thread.
    pub quick: bool,
    statement: Option<Statement>,
    /// The automatic view that answers it, found when it was prepared.
    auto: Option<PreparedAuto>,
    /// A keyed read of one maintained view, planned when it was prepared.
    view_read: Option<ViewRead>,
    /// A statement the SQL parser does not know (`CREATE TIME MAP`), run
    /// from its text.
    custom: bool,
}

/// Where the rows of views read by a statement come from.
#[derive(Clone, Copy)]
enum ViewRows<'a> {
    /// The maintained views, as the session's consistency level asks.
    Views,
    /// Their queries evaluated over these tables.
    Tables(&'a Catalog),
    /// As of a release.
    Release(&'a aqueduct_releases::Snapshot),
}

/// Settings a client may read with `SHOW` and change with `SET`.
const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "serializable"),
    ("extra_float_digits", "1"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "off"),
    ("search_path", "public"),
    ("server_encoding", "UTF8"),
    ("server_version", "15.0 (Aqueduct)"),
    ("server_version_num", "150000"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("aqueduct.statement_memory_limit", "1GB"),
    ("timezone", "UTC"),
    ("transaction_isolation", "serializable"),
    ("aqueduct.last_lsn", "0"),
    ("aqueduct.auto_views", "on"),
    ("aqueduct.upquery_timeout", "5s"),
    ("aqueduct.upquery_timeout_action", "error"),
    ("aqueduct.consistency", "linearizable"),
    ("aqueduct.after_lsn", "0"),
    ("aqueduct.consistency_timeout", "30s"),
    ("aqueduct.consistency_timeout_action", "error"),
    ("aqueduct.release", "0"),
];

/// Settings clients may not change.
const READ_ONLY_SETTINGS: &[&str] = &[
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "is_superuser",
    "aqueduct.last_lsn",
    "aqueduct.release",
];

pub struct Session {
    pub(crate) engine: Arc<Engine>,
    pub(crate) txn: Option<Txn>,
    failed: bool,
    pub(crate) settings: BTreeMap<String, String>,
    last_lsn: Lsn,
    pub(crate) release_read_id: Option<u64>,
    /// `aqueduct.consistency`, parsed once when set (every read asks).
    pub(crate) consistency: crate::Consistency,
    /// The clock's reading for the running statement (`now()`).
    pub(crate) time: StatementTime,
    /// The clock's reading when the transaction block began.
    txn_began_micros: Option<i64>,
    /// The engine's clock when the session began.
    clock: Arc<dyn crate::Clock>,
    /// `statement_timeout` and `aqueduct.statement_memory_limit`, parsed
    /// once when set (every statement asks).
    bounds: StatementBounds,
    /// Stops the running statement (cancel, timeout, memory, shutdown).
    interrupt: aqueduct_expr::interrupt::Interrupt,
    /// Who the session runs as (`roles.rs`).
    pub(crate) principal: crate::roles::Principal,
    pub(crate) view_relations_cache: crate::roles::ViewRelationsCache,
}

impl Session {
    pub(crate) fn new(engine: Arc<Engine>) -> Session {
        let mut settings: BTreeMap<String, String> = DEFAULT_SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let consistency = engine.default_consistency();
        settings.insert("aqueduct.consistency".into(), consistency.as_str().into());
        if let Some(timeout) = engine.default_statement_timeout() {
            settings.insert("statement_timeout".into(), timeout);
        }
        let interrupt = engine.new_interrupt();
        let clock = engine.clock();
        Session {
            interrupt,
            engine,
            txn: None,
            failed: false,
            settings,
            last_lsn: 0,
            release_read_id: None,
            consistency,
            time: StatementTime {
                transaction_micros: 0,
                statement_micros: 0,
            },
            txn_began_micros: None,
            principal: Default::default(),
            view_relations_cache: Default::default(),
            bounds: StatementBounds::default(),
            clock,
        }
        .with_default_principal()
        .with_bounds()
    }

    /// Parses the statement bounds from the settings (when they change).
    fn with_bounds(mut self) -> Session {
        self.refresh_bounds();
        self
    }

    fn refresh_bounds(&mut self) {
        self.bounds = StatementBounds {
            timeout: self
                .settings
                .get("statement_timeout")
                .and_then(|v| parse_duration(v)),
            memory: self
                .settings
                .get("aqueduct.statement_memory_limit")
                .and_then(|v| crate::limits::parse_bytes(v))
                .filter(|&b| b > 0),
        };
    }

    fn with_default_principal(mut self) -> Session {
        self.set_principal(crate::roles::Principal::default());
        self
    }

    /// The handle that stops this session's running statement from another
    /// thread (a protocol cancel request).
    pub fn interrupt_handle(&self) -> aqueduct_expr::interrupt::Interrupt {
        self.interrupt.clone()
    }

    /// Runs `f` as one statement: with the statement stack, and under the
    /// session's interrupt handle armed with `statement_timeout` and
    /// `aqueduct.statement_memory_limit` as set now.
    fn statement<R>(&mut self, f: impl FnOnce(&mut Session) -> R) -> R {
        let StatementBounds { timeout, memory } = self.bounds;
        let interrupt = self.interrupt.clone();
        let engine = self.engine.clone();
        crate::limits::with_statement_stack(|| {
            interrupt.enter(std::time::Instant::now(), timeout, memory, || {
                // Counted once the handle is armed, so a cancel that sees
                // the statement running is not dropped as early.
                let _running = Running::start(&engine.metrics.running);
                f(self)
            })
        })
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn status(&self) -> TxnStatus {
        match (&self.txn, self.failed) {
            (None, _) => TxnStatus::Idle,
            (Some(_), false) => TxnStatus::InBlock,
            (Some(_), true) => TxnStatus::Failed,
        }
    }

    /// The LSN of this session's last committed write (0 if none).
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }

    /// `SET name = value`, for front ends that take settings elsewhere
    /// (HTTP query parameters and headers).
    pub fn configure(&mut self, name: &str, value: &str) -> Result<(), SqlError> {
        self.set(name, Some(value.to_string())).map(|_| ())
    }

    /// The release the last `release` read was answered from.
    pub fn release_read_id(&self) -> Option<u64> {
        self.release_read_id
    }

    /// Settings reported to a client at connection start (`ParameterStatus`).
    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        [
            ("server_version", "server_version"),
            ("server_encoding", "server_encoding"),
            ("client_encoding", "client_encoding"),
            ("DateStyle", "datestyle"),
            ("TimeZone", "timezone"),
            ("integer_datetimes", "integer_datetimes"),
            ("standard_conforming_strings", "standard_conforming_strings"),
            ("IntervalStyle", "intervalstyle"),
            ("is_superuser", "is_superuser"),
            ("application_name", "application_name"),
            ("aqueduct.last_lsn", "aqueduct.last_lsn"),
        ]
        .iter()
        .map(|(shown, key)| (shown.to_string(), self.settings[*key].clone()))
        .collect()
    }

    /// Marks an open transaction failed, as any error inside one does
    /// (front ends call it for errors the session did not see, such as a
    /// parameter that would not decode).
    pub fn fail_transaction(&mut self) {
        if self.txn.is_some() {
            self.failed = true;
        }
    }

    /// Reads the clock for a statement that starts now.
    fn start_statement(&mut self) {
        let now = self.clock.now_micros();
        let transaction_micros = match (&self.txn, self.txn_began_micros) {
            (Some(_), Some(began)) => began,
            _ => now,
        };
        self.time = StatementTime {
            transaction_micros,
            statement_micros: now,
        };
    }

    /// Ends any open transaction without committing (client went away).
    pub fn abandon(&mut self) {
        self.txn = None;
        self.failed = false;
    }

    /// Runs a simple-protocol query string: every statement in order,
    /// stopping at the first error (as PostgreSQL does).
    pub fn execute(&mut self, sql: &str) -> Vec<Result<Outcome, SqlError>> {
        crate::limits::with_statement_stack(|| self.execute_text(sql))
    }

    fn execute_text(&mut self, sql: &str) -> Vec<Result<Outcome, SqlError>> {
        if crate::time_maps::is_time_map_statement(sql) {
            let r = self.run_time_map(sql);
            if r.is_err() {
                self.note_error();
            }
            return vec![r];
        }
        if let Some(r) = self.refresh(sql) {
            if r.is_err() {
                self.note_error();
            }
            return vec![r];
        }
        let mut statements = match parse(sql) {
            Ok(s) => s,
            Err(e) => {
                self.note_error();
                return vec![Err(e)];
            }
        };
        crate::roles::substitute_current_user(&mut statements, sql, &self.principal.name);
        if statements.is_empty() {
            return vec![Ok(Outcome::Empty)];
        }
        let mut out = Vec::with_capacity(statements.len());
        for st in statements {
            let r = self.statement(|s| s.run(Some(&st), sql, &[], &[]));
            let failed = r.is_err();
            out.push(r);
            if failed {
                break;
            }
        }
        out
    }

    /// `REFRESH MATERIALIZED VIEW [CONCURRENTLY] name [WITH [NO] DATA]`:
    /// nothing to do, as every view is always current; an error if there is
    /// no such view. `None` for any other statement.
    fn refresh(&self, sql: &str) -> Option<Result<Outcome, SqlError>> {
        let words: Vec<&str> = sql
            .trim()
            .trim_end_matches(';')
            .split_whitespace()
            .collect();
        let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
        if lower.len() < 4 || lower[..3] != ["refresh", "materialized", "view"] {
            return None;
        }
        let mut rest = &words[3..];
        if rest
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case("concurrently"))
        {
            rest = &rest[1..];
        }
        let tail: Vec<String> = rest
            .iter()
            .skip(1)
            .map(|w| w.to_ascii_lowercase())
            .collect();
        if rest.is_empty()
            || !(tail.is_empty() || tail == ["with", "data"] || tail == ["with", "no", "data"])
        {
            return Some(Err(SqlError::syntax(format!(
                "syntax error in REFRESH MATERIALIZED VIEW: {sql}"
            ))));
        }
        let name = match rest[0].strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
            Some(quoted) => quoted.to_string(),
            None => rest[0].to_lowercase(),
        };
        let name = name.strip_prefix("public.").unwrap_or(&name).to_string();
        if self.engine.database().read().view(&name).is_none() {
            return Some(Err(SqlError::new(
                "42P01",
                format!("materialized view \"{name}\" does not exist"),
            )));
        }
        Some(Ok(command("REFRESH MATERIALIZED VIEW")))
    }

    /// Parses and describes one statement for the extended protocol.
    /// `hints` are the parameter types the client declared (`None`: infer).
    pub fn prepare(&mut self, sql: &str, hints: &[Option<DataType>]) -> Result<Prepared, SqlError> {
        let prepared = self.statement(|s| s.prepare_inner(sql, hints));
        if prepared.is_err() {
            // An error inside a transaction block aborts it, whichever
            // protocol message caused it.
            self.note_error();
        }
        prepared
    }

    fn prepare_inner(
        &mut self,
        sql: &str,
        hints: &[Option<DataType>],
    ) -> Result<Prepared, SqlError> {
        self.start_statement();
        if crate::time_maps::is_time_map_statement(sql) {
            return Ok(Prepared {
                sql: sql.to_string(),
                params: Vec::new(),
                columns: Vec::new(),
                quick: false,
                statement: None,
                auto: None,
                view_read: None,
                custom: true,
            });
        }
        let mut statements = parse(sql)?;
        crate::roles::substitute_current_user(&mut statements, sql, &self.principal.name);
        if statements.len() > 1 {
            return Err(SqlError::syntax(
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let statement = statements.pop();
        let Some(st) = &statement else {
            return Ok(Prepared {
                sql: sql.to_string(),
                params: hints
                    .iter()
                    .map(|h| h.clone().unwrap_or(DataType::Text))
                    .collect(),
                columns: Vec::new(),
                quick: true,
                statement: None,
                auto: None,
                view_read: None,
                custom: false,
            });
        };
        let bound = match self.route_with(st, hints, false)? {
            Route::Roles => {
                return Ok(Prepared {
                    sql: sql.to_string(),
                    params: Vec::new(),
                    columns: Vec::new(),
                    quick: false,
                    statement,
                    auto: None,
                    view_read: None,
                    custom: false,
                })
            }
            Route::Views(_) => {
                if let Some(read) = self.plan_view_read(st, hints) {
                    return Ok(Prepared {
                        sql: sql.to_string(),
                        params: read.param_types.clone(),
                        columns: read.columns.clone(),
                        quick: true,
                        statement,
                        auto: None,
                        view_read: Some(read),
                        custom: false,
                    });
                }
                match self.views_as_tables(st, &[], None)? {
                    Some(views) => bind::bind(&views, st, hints, &self.settings, self.time)?,
                    // The views went meanwhile: as if they never were.
                    None => match self.route_bound(st, hints)? {
                        Route::Direct(bound) => bound,
                        other => return self.prepare_dataflow(sql, hints, statement, other),
                    },
                }
            }
            Route::CatalogRelations => {
                let virtual_catalog =
                    catalog_queries::virtual_catalog(&self.engine.database().read());
                let bound = bind::bind(&virtual_catalog, st, hints, &self.settings, self.time)?;
                if let Plan::Dataflow(why) = &bound.plan {
                    return Err(catalog_relations_unsupported(why));
                }
                bound
            }
            Route::Direct(bound) => bound,
            other => return self.prepare_dataflow(sql, hints, statement, other),
        };
        let quick = match &bound.plan {
            Plan::Select(p) => matches!(
                p.access,
                bind::Access::PrimaryKey(_)
                    | bind::Access::PrimaryKeys(_)
                    | bind::Access::Index(..)
            ),
            Plan::Values(_) => true,
            _ => false,
        };
        Ok(Prepared {
            sql: sql.to_string(),
            params: bound.params,
            columns: bound.columns,
            quick,
            statement,
            auto: None,
            view_read: None,
            custom: false,
        })
    }

    /// Prepares a query on a dataflow route: bound to its automatic view
    /// when it has one, else described for one-shot evaluation.
    fn prepare_dataflow(
        &mut self,
        sql: &str,
        hints: &[Option<DataType>],
        statement: Option<Statement>,
        route: Route,
    ) -> Result<Prepared, SqlError> {
        let Some(Statement::Query(q)) = &statement else {
            return Err(SqlError::new(
                "XX000",
                format!("the {} route is for queries", route.name()),
            ));
        };
        if let Route::AutoView { lifted, .. } = route {
            if let Some((view, lifted)) = self.auto_for(*lifted, true)? {
                let own = view.param_types.len() - lifted.literals.len();
                // A type the client declared stands (the value is then
                // converted to the key column's type).
                let params = view.param_types[..own]
                    .iter()
                    .enumerate()
                    .map(|(i, t)| hints.get(i).cloned().flatten().unwrap_or_else(|| t.clone()))
                    .collect();
                return Ok(Prepared {
                    sql: sql.to_string(),
                    params,
                    columns: view.columns.clone(),
                    quick: true,
                    statement,
                    auto: Some(PreparedAuto {
                        view,
                        literals: lifted.literals,
                        generation: self.engine.views.auto_generation(),
                    }),
                    view_read: None,
                    custom: false,
                });
            }
        }
        let (columns, params) = {
            let catalog = self.engine.database().read();
            crate::oneshot::describe(&catalog, q, hints, self.time)?
        };
        Ok(Prepared {
            sql: sql.to_string(),
            params,
            columns,
            quick: false,
            statement,
            auto: None,
            view_read: None,
            custom: false,
        })
    }

    /// Whether `p` can run on the caller's thread without waiting: a quick
    /// read, every write it may see already durable, and for one a view
    /// answers, the views already reflect every committed write (else a
    /// front end should run it where waiting blocks nobody else).
    pub fn runs_without_waiting(&self, p: &Prepared) -> bool {
        let db = self.engine.database();
        let applied = db.applied_lsn();
        // A read waits for what it sees to be durable: with a commit's
        // fsync under way it would wait for it, so it goes elsewhere.
        p.quick
            && self.consistency() != crate::Consistency::Release
            && db.is_visible(applied)
            && ((p.auto.is_none() && p.view_read.is_none())
                // Inside a transaction block a view read may evaluate the
                // view's query over the transaction's writes.
                || (self.txn.is_none() && self.engine.views.reflects(applied)))
    }

    /// Executes a prepared statement with its parameter values (already of
    /// the prepared parameter types).
    pub fn execute_prepared(
        &mut self,
        p: &Prepared,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.statement(|s| s.execute_prepared_here(p, params))
    }

    fn execute_prepared_here(
        &mut self,
        p: &Prepared,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.start_statement();
        if params.len() != p.params.len() {
            return Err(SqlError::new(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but prepared statement requires {}",
                    params.len(),
                    p.params.len()
                ),
            ));
        }
        if let Some(st) = &p.statement {
            if let Err(e) = self.authorize(st) {
                self.note_error();
                return Err(e);
            }
        }
        if p.custom {
            let out = self.run_time_map(&p.sql);
            if out.is_err() {
                self.note_error();
            }
            return out;
        }
        if let Some(st) = self.release_read(p.statement.as_ref()) {
            let hints: Vec<Option<DataType>> = p.params.iter().cloned().map(Some).collect();
            let auto = p
                .auto
                .as_ref()
                .filter(|a| a.generation == self.engine.views.auto_generation())
                .map(|a| {
                    let values: Vec<Value> = params
                        .iter()
                        .cloned()
                        .chain(a.literals.iter().cloned())
                        .collect();
                    (&a.view, values)
                });
            let out = self.read_release(st, &hints, params, auto);
            if out.is_err() {
                self.note_error();
            }
            return out;
        }
        if let Some(a) = &p.auto {
            if a.generation == self.engine.views.auto_generation() && self.auto_views_on() {
                let values: Vec<Value> = params
                    .iter()
                    .cloned()
                    .chain(a.literals.iter().cloned())
                    .collect();
                match self.read_auto(&a.view, &values) {
                    Ok(Some(out)) => return Ok(out),
                    Ok(None) => {}
                    Err(e) => {
                        self.note_error();
                        return Err(e);
                    }
                }
            }
        }
        if let Some(read) = &p.view_read {
            match self.read_view(read, params) {
                Ok(Some(out)) => return Ok(out),
                Ok(None) => {}
                Err(e) => {
                    self.note_error();
                    return Err(e);
                }
            }
        }
        match &p.statement {
            None => Ok(Outcome::Empty),
            Some(st) => {
                let hints: Vec<Option<DataType>> = p.params.iter().cloned().map(Some).collect();
                self.run(Some(st), &p.sql, &hints, params)
            }
        }
    }

    /// Executes `sql` (one statement) with parameters, inferring their types
    /// from the values given (the HTTP API's path).
    pub fn execute_with_params(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let hints: Vec<Option<DataType>> = params.iter().map(|_| None).collect();
        let p = self.prepare(sql, &hints)?;
        let coerced = params
            .iter()
            .zip(&p.params)
            .map(|(v, ty)| v.clone().coerce(ty))
            .collect::<Result<Vec<_>, _>>()?;
        self.execute_prepared(&p, &coerced)
    }

    fn note_error(&mut self) {
        self.engine.metrics.count(&self.engine.metrics.errors);
        if self.txn.is_some() {
            self.failed = true;
        }
    }

    fn run(
        &mut self,
        st: Option<&Statement>,
        _sql: &str,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let Some(st) = st else {
            return Ok(Outcome::Empty);
        };
        let result = self
            .authorize(st)
            .and_then(|()| self.run_statement(st, hints, params));
        if result.is_err() {
            self.note_error();
        }
        result
    }

    fn run_statement(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.start_statement();
        let route = self.route(st, hints)?;
        self.run_route(st, route, hints, params)
    }

    /// Runs `st` the way `route` says.
    fn run_route(
        &mut self,
        st: &Statement,
        route: Route,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let bound = match route {
            Route::Roles => {
                return self
                    .run_role_statement(st)
                    .unwrap_or_else(|| Err(SqlError::new("XX000", "not a role statement")))
            }
            Route::CatalogRelations => return self.run_virtual(st, hints, params),
            Route::ReleaseSnapshot => return self.read_release(st, hints, params, None),
            Route::Views(_) => match self.view_catalog(st, params)? {
                Some(views) => {
                    self.engine.metrics.count(&self.engine.metrics.select);
                    return self.run_read_only(
                        &views,
                        st,
                        hints,
                        params,
                        "a view cannot be written",
                    );
                }
                // The views went meanwhile: as if they never were.
                None => {
                    let route = self.route_bound(st, hints)?;
                    return self.run_route(st, route, hints, params);
                }
            },
            Route::AutoView { lifted, .. } => return self.run_dataflow(st, Some(*lifted), params),
            Route::OneShot { .. } => return self.run_dataflow(st, None, params),
            Route::Direct(bound) => bound,
        };
        let m = &self.engine.metrics;
        match &bound.plan {
            Plan::Select(_) | Plan::Values(_) | Plan::Catalog(_) => m.count(&m.select),
            Plan::Insert(_) => m.count(&m.insert),
            Plan::Update(_) => m.count(&m.update),
            Plan::Delete(_) => m.count(&m.delete),
            Plan::Ddl(_) => m.count(&m.ddl),
            _ => m.count(&m.other),
        }
        if self.failed && !matches!(bound.plan, Plan::Commit | Plan::Rollback) {
            return Err(SqlError::in_failed_transaction());
        }
        match bound.plan {
            Plan::Begin => {
                if self.txn.is_none() {
                    self.txn = Some(Txn::default());
                    self.txn_began_micros = Some(self.time.statement_micros);
                }
                Ok(command("BEGIN"))
            }
            Plan::Commit => {
                let Some(txn) = self.txn.take() else {
                    return Ok(command("COMMIT"));
                };
                if std::mem::take(&mut self.failed) {
                    return Ok(command("ROLLBACK"));
                }
                if let Some(lsn) = self.engine.database().commit(&txn)? {
                    self.set_last_lsn(lsn);
                }
                Ok(command("COMMIT"))
            }
            Plan::Rollback => {
                self.txn = None;
                self.failed = false;
                Ok(command("ROLLBACK"))
            }
            Plan::ShowViews => Ok(self.show_views()),
            Plan::Explain { statement, dot } => self.explain(&statement, dot),
            Plan::Set { name, value } => self.set(&name, value),
            Plan::Deallocate { name } => Ok(command(if name == "all" {
                "DEALLOCATE ALL"
            } else {
                "DEALLOCATE"
            })),
            Plan::Show { name } => self.show(&name),
            Plan::Ddl(_) if self.txn.is_some() => Err(SqlError::new(
                "25001",
                "schema changes inside a transaction block are not supported",
            )
            .with_hint("run CREATE/DROP statements outside BEGIN ... COMMIT")),
            plan => self.run_data(plan, bound.columns, params),
        }
    }

    /// A query on a dataflow route (`auto`: its automatic view's lifted
    /// query, on that route).
    fn run_dataflow(
        &mut self,
        st: &Statement,
        auto: Option<crate::auto_views::Lifted>,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        if self.failed {
            return Err(SqlError::in_failed_transaction());
        }
        let Statement::Query(q) = st else {
            return Err(SqlError::new("XX000", "only a query needs the dataflow"));
        };
        self.answer_by_dataflow(q, auto, params)
    }

    /// Reads and writes: inside a transaction block through its `Txn`,
    /// otherwise atomically under the commit lock (writes) or directly (reads).
    fn run_data(
        &mut self,
        plan: Plan,
        columns: Vec<Column>,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let db = self.engine.database();
        if let Some(txn) = self.txn.as_mut() {
            let catalog = db.read();
            return exec::execute(db, &catalog, txn, &plan, columns, params);
        }
        if plan.is_read_only() {
            let seen = db.applied_lsn();
            let out = {
                let catalog = db.read();
                let mut scratch = Txn::default();
                exec::execute(db, &catalog, &mut scratch, &plan, columns, params)?
            };
            db.await_visible(seen)?;
            return Ok(out);
        }
        let owner = &self.principal.name;
        let (out, lsn) = db.run_exclusive(|catalog, txn| {
            let out = exec::execute(db, catalog, txn, &plan, columns, params)?;
            crate::roles::record_owners(txn, owner);
            Ok::<_, SqlError>(out)
        })?;
        if let Some(lsn) = lsn {
            self.set_last_lsn(lsn);
        }
        Ok(out)
    }

    /// A read of `information_schema` or `pg_tables`, answered from tables
    /// built from the catalog for this one statement.
    fn run_virtual(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let virtual_catalog = catalog_queries::virtual_catalog(&self.engine.database().read());
        self.run_read_only(
            &virtual_catalog,
            st,
            hints,
            params,
            "the catalog views are read-only",
        )
    }

    /// Binds and runs a read-only statement against a catalog built for it.
    fn run_read_only(
        &mut self,
        catalog: &Catalog,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
        refusal: &str,
    ) -> Result<Outcome, SqlError> {
        if !matches!(st, Statement::Query(_)) {
            return Err(SqlError::new("42809", refusal.to_string()));
        }
        let bound = bind::bind(catalog, st, hints, &self.settings, self.time)?;
        if let Plan::Dataflow(why) = &bound.plan {
            return Err(catalog_relations_unsupported(why));
        }
        if !bound.plan.is_read_only() {
            return Err(SqlError::new("42809", refusal.to_string()));
        }
        let mut scratch = Txn::default();
        exec::execute(
            self.engine.database(),
            catalog,
            &mut scratch,
            &bound.plan,
            bound.columns,
            params,
        )
    }

    /// The maintained views `st` reads, when every relation it names is one
    /// (anything else — a table, a CTE — goes the general way).
    pub(crate) fn views_only(&self, st: &Statement) -> Option<Vec<String>> {
        let relations = bind::relations(st);
        if relations.is_empty() {
            return None;
        }
        // A query over views that direct evaluation cannot answer over their
        // rows (a join, a set operation, a subquery) goes the general way,
        // which compiles the views' queries into its dataflow.
        if matches!(st, Statement::Query(_)) && !bind::reads_one_relation(st) {
            return None;
        }
        let views = &self.engine.views;
        relations
            .into_iter()
            .map(|r| views.get(&r).map(|_| r))
            .collect()
    }

    /// The maintained views a statement reads, as tables holding their
    /// current rows (read lock-free from the views, as the session's
    /// consistency level asks), or `None`.
    fn view_catalog(
        &mut self,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Catalog>, SqlError> {
        if self.views_only(st).is_none() {
            return Ok(None);
        }
        if self.txn.is_some() {
            return self.views_as_tables_in_txn(st, params);
        }
        match self.views_ready()? {
            Ready::At(seen) => {
                let out = self.views_as_tables(st, params, Some(ViewRows::Views))?;
                self.engine.database().await_visible(seen)?;
                Ok(out)
            }
            Ready::Compute => {
                let db = self.engine.database();
                let seen = db.applied_lsn();
                let out = self.views_as_tables(st, params, Some(ViewRows::Tables(&db.read())))?;
                db.await_visible(seen)?;
                Ok(out)
            }
        }
    }

    /// The maintained views `st` reads as tables as of the release
    /// `snap`, or `None` when it reads anything else.
    pub(crate) fn release_view_catalog(
        &self,
        snap: &aqueduct_releases::Snapshot,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Catalog>, SqlError> {
        self.views_as_tables(st, params, Some(ViewRows::Release(snap)))
    }

    /// The views `st` reads, each with the columns and keys its `WHERE`
    /// pins when it reads just one; `None` when it reads anything else.
    fn view_reads(&self, st: &Statement, params: &[Value]) -> Option<Vec<ViewReadKeys>> {
        let names = self.views_only(st)?;
        let entries: Vec<_> = names
            .iter()
            .filter_map(|n| self.engine.views.get(n))
            .collect();
        if entries.is_empty() {
            return None;
        }
        let single = entries.len() == 1;
        Some(
            entries
                .into_iter()
                .map(|v| {
                    let keyed = if single {
                        equality_key(st, &v, params)
                    } else {
                        None
                    };
                    (v, keyed)
                })
                .collect(),
        )
    }

    /// The views `st` reads as tables: with no rows (`rows` None, for
    /// describing a statement), or with the rows `rows` says where to get.
    fn views_as_tables(
        &self,
        st: &Statement,
        params: &[Value],
        rows: Option<ViewRows>,
    ) -> Result<Option<Catalog>, SqlError> {
        let Some(reads) = self.view_reads(st, params) else {
            return Ok(None);
        };
        let views = &self.engine.views;
        let mut catalog = Catalog::default();
        for (v, keyed) in reads {
            let (rows, watermark) = match (keyed, rows) {
                (_, None) => (Vec::new(), 0),
                (Some((cols, combos)), Some(ViewRows::Views)) => {
                    let (found, watermark) = self.lookup_view(&v, &cols, &combos)?;
                    (found.into_iter().flatten().collect(), watermark)
                }
                (None, Some(ViewRows::Views)) => views.rows(&v)?,
                (Some((cols, combos)), Some(ViewRows::Tables(tables))) => {
                    let mut found = Vec::new();
                    for key in &combos {
                        found.extend(views.compute_lookup(tables, &v, &cols, key)?);
                    }
                    (found, tables.lsn())
                }
                (Some((cols, combos)), Some(ViewRows::Release(snap))) => {
                    let mut found = Vec::new();
                    for key in &combos {
                        found.extend(self.engine.release_lookup(snap, &v, &cols, key)?);
                    }
                    (found, snap.release.lsn)
                }
                (None, Some(ViewRows::Tables(tables))) => {
                    (views.compute_lookup(tables, &v, &[], &[])?, tables.lsn())
                }
                (None, Some(ViewRows::Release(snap))) => (
                    views.compute_lookup(&snap.catalog, &v, &[], &[])?,
                    snap.release.lsn,
                ),
            };
            add_view_table(&mut catalog, &v, rows, watermark);
        }
        Ok(Some(catalog))
    }

    /// [`Session::views_as_tables`] for a read inside a transaction block
    /// (`txn_view_reads.rs`): the rows as the transaction sees them, the
    /// read noted for validation at COMMIT.
    fn views_as_tables_in_txn(
        &mut self,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Catalog>, SqlError> {
        let Some(reads) = self.view_reads(st, params) else {
            return Ok(None);
        };
        let mut catalog = Catalog::default();
        for (v, keyed) in reads {
            let rows: Vec<_> = match keyed {
                Some((cols, combos)) => self.view_rows_in_txn(&v, &cols, &combos)?,
                None => self.view_rows_in_txn(&v, &[], &[])?,
            }
            .into_iter()
            .flatten()
            .collect();
            add_view_table(&mut catalog, &v, rows, 0);
        }
        Ok(Some(catalog))
    }

    /// A keyed read of one view planned for `st`, when it has that shape.
    fn plan_view_read(&self, st: &Statement, hints: &[Option<DataType>]) -> Option<ViewRead> {
        let names = self.views_only(st)?;
        let [name] = names.as_slice() else {
            return None;
        };
        ViewRead::plan(st, &*self.engine.views.get(name)?, hints)
    }

    /// Runs a planned keyed view read; `None` when the view it was planned
    /// for is gone (the statement then takes the general path).
    fn read_view(
        &mut self,
        read: &ViewRead,
        params: &[Value],
    ) -> Result<Option<Outcome>, SqlError> {
        let Some(entry) = self.engine.views.get(read.view()) else {
            return Ok(None);
        };
        if !read.planned_for(&entry) {
            return Ok(None);
        }
        if self.failed {
            return Err(SqlError::in_failed_transaction());
        }
        self.engine.metrics.count(&self.engine.metrics.select);
        let rows = match read.key_values(params) {
            None => Vec::new(),
            Some(key) if self.txn.is_some() => {
                let found = self.view_rows_in_txn(&entry, read.key(), &[key])?;
                found.iter().flatten().map(|r| read.project(r)).collect()
            }
            Some(key) => {
                let db = self.engine.database();
                let (rows, seen) = match self.views_ready()? {
                    Ready::At(seen) => {
                        let (mut found, _) = self.lookup_view(&entry, read.key(), &[key])?;
                        (found.pop().unwrap_or_default(), seen)
                    }
                    Ready::Compute => {
                        let seen = db.applied_lsn();
                        let rows = self.engine.views.compute_lookup(
                            &db.read(),
                            &entry,
                            read.key(),
                            &key,
                        )?;
                        (rows, seen)
                    }
                };
                db.await_visible(seen)?;
                rows.iter().map(|r| read.project(r)).collect()
            }
        };
        Ok(Some(Outcome::Rows {
            tag: format!("SELECT {}", rows.len()),
            columns: read.columns.clone(),
            rows,
        }))
    }

    /// How long a read waits for the upquery that fills a missing key.
    pub(crate) fn upquery_timeout(&self) -> std::time::Duration {
        parse_duration(&self.settings["aqueduct.upquery_timeout"])
            .unwrap_or(crate::views::DEFAULT_UPQUERY_TIMEOUT)
    }

    /// What a read does when its upquery takes longer than that.
    pub(crate) fn on_upquery_timeout(&self) -> crate::views::OnTimeout {
        match self.settings["aqueduct.upquery_timeout_action"].as_str() {
            "compute" => crate::views::OnTimeout::Compute,
            _ => crate::views::OnTimeout::Error,
        }
    }

    /// A keyed lookup of a view, with this session's upquery timeout; on
    /// timeout, by setting, the rows are computed from the base tables
    /// instead (without filling the key).
    fn lookup_view(
        &self,
        v: &crate::views::ViewEntry,
        cols: &[usize],
        keys: &[Vec<Value>],
    ) -> Result<(Vec<Vec<aqueduct_dataflow::Row>>, Lsn), SqlError> {
        let views = &self.engine.views;
        match views.lookup_many(v, cols, keys, self.upquery_timeout()) {
            Err(e)
                if e.code == crate::views::UPQUERY_TIMEOUT_CODE
                    && self.on_upquery_timeout() == crate::views::OnTimeout::Compute =>
            {
                let db = self.engine.database();
                let catalog = db.read();
                let lsn = catalog.lsn();
                let rows = keys
                    .iter()
                    .map(|k| views.compute_lookup(&catalog, v, cols, k))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((rows, lsn))
            }
            other => other,
        }
    }

    fn show_views(&self) -> Outcome {
        let rows: Vec<Vec<Value>> = self
            .engine
            .views
            .stats()
            .into_iter()
            .map(|v| {
                vec![
                    Value::Text(v.name),
                    Value::Int(v.watermark as i64),
                    Value::Int(v.rows as i64),
                    Value::Int(v.keys as i64),
                    Value::Int(v.bytes as i64),
                    Value::Text(match v.failed {
                        None => "maintained".into(),
                        Some(e) => format!("failed: {e}"),
                    }),
                    Value::Text(v.state),
                    Value::Int(v.reads.hits as i64),
                    Value::Int(v.reads.misses as i64),
                    Value::Float(v.reads.hit_rate()),
                    Value::Int(v.reads.evictions as i64),
                    v.reads
                        .upquery
                        .quantile_us(0.5)
                        .map_or(Value::Null, |us| Value::Int(us as i64)),
                    v.reads
                        .upquery
                        .quantile_us(0.99)
                        .map_or(Value::Null, |us| Value::Int(us as i64)),
                ]
            })
            .collect();
        Outcome::Rows {
            tag: format!("SHOW VIEWS {}", rows.len()),
            columns: bind::show_views_columns(),
            rows,
        }
    }

    pub(crate) fn set_last_lsn(&mut self, lsn: Lsn) {
        self.last_lsn = lsn;
        self.settings
            .insert("aqueduct.last_lsn".into(), lsn.to_string());
    }

    fn set(&mut self, name: &str, value: Option<String>) -> Result<Outcome, SqlError> {
        let key = name.to_ascii_lowercase();
        if READ_ONLY_SETTINGS.contains(&key.as_str()) {
            return Err(SqlError::new(
                "55P02",
                format!("parameter \"{name}\" cannot be changed"),
            ));
        }
        let default = DEFAULT_SETTINGS.iter().find(|(k, _)| *k == key);
        if default.is_none() && !key.contains('.') {
            return Err(SqlError::new(
                "42704",
                format!("unrecognized configuration parameter \"{name}\""),
            ));
        }
        if let Some(v) = &value {
            check_setting(&key, v)?;
        }
        if key == "transaction_isolation" || key == "default_transaction_isolation" {
            // Every transaction is serializable; weaker requests get the stronger level.
        } else if key == "aqueduct.consistency" {
            // RESET goes back to the server's default, not the built-in one.
            self.consistency = match &value {
                Some(v) => crate::Consistency::parse(v).expect("checked above"),
                None => self.engine.default_consistency(),
            };
            self.settings.insert(key, self.consistency.as_str().into());
        } else {
            let v =
                value.unwrap_or_else(|| default.map(|(_, v)| v.to_string()).unwrap_or_default());
            self.settings.insert(key, v);
            self.refresh_bounds();
        }
        Ok(command("SET"))
    }

    fn show(&self, name: &str) -> Result<Outcome, SqlError> {
        let key = name.to_ascii_lowercase();
        if key == "all" {
            let rows = self
                .settings
                .iter()
                .map(|(k, v)| vec![Value::Text(k.clone()), Value::Text(v.clone())])
                .collect::<Vec<_>>();
            return Ok(Outcome::Rows {
                tag: format!("SHOW {}", rows.len()),
                columns: vec![
                    Column::computed("name", DataType::Text),
                    Column::computed("setting", DataType::Text),
                ],
                rows,
            });
        }
        let value = self.settings.get(&key).ok_or_else(|| {
            SqlError::new(
                "42704",
                format!("unrecognized configuration parameter \"{name}\""),
            )
        })?;
        Ok(Outcome::Rows {
            columns: vec![Column::computed(key.clone(), DataType::Text)],
            rows: vec![vec![Value::Text(value.clone())]],
            tag: "SHOW".into(),
        })
    }
}

/// A query over catalog relations (or over maintained views read as
/// tables) that direct evaluation does not answer.
fn catalog_relations_unsupported(why: &bind::NeedsDataflow) -> SqlError {
    SqlError::unsupported(format!("{why} over the catalog views"))
}

fn command(tag: &str) -> Outcome {
    Outcome::Command { tag: tag.into() }
}

/// Parses SQL text into statements (PostgreSQL dialect).
pub(crate) fn parse(sql: &str) -> Result<Vec<Statement>, SqlError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::new(
            "54000",
            format!(
                "query of {} bytes exceeds the limit of {MAX_SQL_BYTES} bytes",
                sql.len()
            ),
        ));
    }
    if sql.trim().trim_matches(';').trim().is_empty() {
        return Ok(Vec::new());
    }
    let rewritten = crate::roles::rewrite_user_statements(sql);
    let sql = rewritten.as_deref().unwrap_or(sql);
    let dialect = PostgreSqlDialect {};
    let statements = sqlparser::tokenizer::Tokenizer::new(&dialect, sql)
        .with_unescape(true)
        .tokenize_with_location()
        .map_err(sqlparser::parser::ParserError::from)
        .and_then(|tokens| {
            crate::limits::check_tokens(&tokens)
                .map_err(|_| sqlparser::parser::ParserError::RecursionLimitExceeded)?;
            Parser::new(&dialect)
                .with_recursion_limit(crate::limits::PARSER_RECURSION_LIMIT)
                .with_tokens_with_locations(tokens)
                .parse_statements()
        })
        .map_err(|e| {
            if matches!(e, sqlparser::parser::ParserError::RecursionLimitExceeded) {
                return crate::limits::too_complex();
            }
            let msg = e.to_string();
            let msg = msg.strip_prefix("sql parser error: ").unwrap_or(&msg);
            SqlError::syntax(format!("syntax error: {msg}"))
        })?;
    for st in &statements {
        crate::limits::check_depth(st)?;
    }
    Ok(statements)
}

/// For `SELECT ... FROM view WHERE col = value AND other IN (...) ...`: the
/// view columns pinned to constants (or given parameters), sorted, and every
/// combination of their values, so the rows can be found by keyed lookups
/// instead of a scan.
/// A duration setting: `5s`, `250ms`, `1min`, `1h`, or a number of
/// milliseconds (as PostgreSQL's `statement_timeout`).
pub fn parse_duration(v: &str) -> Option<std::time::Duration> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit.trim() {
        "" | "ms" => n,
        "s" => n.checked_mul(1000)?,
        "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(ms))
}

/// Refuses a value a setting cannot take, saying what it takes.
fn check_setting(key: &str, value: &str) -> Result<(), SqlError> {
    let ok = match key {
        "aqueduct.upquery_timeout" => parse_duration(value).is_some_and(|d| !d.is_zero()),
        "aqueduct.upquery_timeout_action" => matches!(value, "error" | "compute"),
        "aqueduct.auto_views" => matches!(value, "on" | "off"),
        "aqueduct.consistency" => crate::Consistency::parse(value).is_some(),
        "aqueduct.after_lsn" => value.trim().parse::<Lsn>().is_ok(),
        "aqueduct.consistency_timeout" => parse_duration(value).is_some_and(|d| !d.is_zero()),
        "aqueduct.consistency_timeout_action" => matches!(value, "error" | "compute"),
        "statement_timeout" => parse_duration(value).is_some(),
        "aqueduct.statement_memory_limit" => crate::limits::parse_bytes(value).is_some(),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let takes = match key {
        "aqueduct.upquery_timeout" | "aqueduct.consistency_timeout" => {
            "a positive duration such as '5s', '250ms' or '1min'"
        }
        "aqueduct.upquery_timeout_action" | "aqueduct.consistency_timeout_action" => {
            "'error' or 'compute'"
        }
        "aqueduct.consistency" => "'eventual', 'session', 'release' or 'linearizable'",
        "aqueduct.after_lsn" => "an LSN, as SHOW aqueduct.last_lsn reports after a write",
        "statement_timeout" => "a duration such as '5s', '250ms' or '1min' (0: none)",
        "aqueduct.statement_memory_limit" => "a size such as '512MB' or '2GB' (0: none)",
        _ => "'on' or 'off'",
    };
    Err(SqlError::new(
        "22023",
        format!("invalid value for parameter \"{key}\": \"{value}\""),
    )
    .with_hint(format!("{key} takes {takes}")))
}

fn equality_key(
    st: &Statement,
    view: &crate::views::ViewEntry,
    params: &[Value],
) -> Option<(Vec<usize>, Vec<Vec<Value>>)> {
    use sqlparser::ast;
    let Statement::Query(q) = st else { return None };
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    if sel.from.len() != 1 || !sel.from[0].joins.is_empty() {
        return None;
    }
    let mut conjuncts = Vec::new();
    crate::auto_views::split(sel.selection.as_ref()?, &mut conjuncts);
    let mut key: Vec<(usize, Vec<Value>)> = Vec::new();
    for c in conjuncts {
        // `col = value` or `col IN (values)`.
        let (col, vals): (&ast::Expr, Vec<&ast::Expr>) = match c {
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } => match (left.as_ref(), right.as_ref()) {
                (c @ (ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)), v)
                | (v, c @ (ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_))) => {
                    (c, vec![v])
                }
                _ => continue,
            },
            ast::Expr::InList {
                expr,
                list,
                negated: false,
            } if !list.is_empty() => (expr.as_ref(), list.iter().collect()),
            _ => continue,
        };
        let col = match col {
            ast::Expr::Identifier(i) => bind::ident(i),
            ast::Expr::CompoundIdentifier(p) => bind::ident(p.last()?),
            _ => continue,
        };
        let Some(pos) = view.columns.iter().position(|c| c.name == col) else {
            continue;
        };
        let mut values = Vec::new();
        for val in vals {
            let value = match val {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Placeholder(p) => {
                        let n: usize = p.strip_prefix('$')?.parse().ok()?;
                        params.get(n.checked_sub(1)?)?.clone()
                    }
                    ast::Value::Number(n, _) => Value::Text(n.clone()),
                    ast::Value::SingleQuotedString(s) => Value::Text(s.clone()),
                    _ => return None,
                },
                _ => return None,
            };
            // A value of the wrong type is left to the normal path's error.
            let Ok(value) = value.coerce(&view.columns[pos].ty) else {
                return None;
            };
            // NULL matches nothing; the statement's own WHERE says so.
            if !value.is_null() && !values.contains(&value) {
                values.push(value);
            }
        }
        key.push((pos, values));
    }
    if key.is_empty() {
        return None;
    }
    // The lookups fetch a superset of the answer (the whole WHERE is then
    // evaluated over their rows), so one condition per column is enough.
    key.sort_by_key(|(c, _)| *c);
    key.dedup_by_key(|(c, _)| *c);
    let columns: Vec<usize> = key.iter().map(|(c, _)| *c).collect();
    let mut combos: Vec<Vec<Value>> = vec![Vec::new()];
    for (_, values) in key {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push(v.clone());
                    c
                })
            })
            .collect();
        if combos.len() > crate::auto_views::MAX_KEYS_PER_READ {
            return None;
        }
    }
    Some((columns, combos))
}
