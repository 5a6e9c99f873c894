//! The extended protocol: preparing a statement once (its route decided,
//! an automatic view or a keyed view read found) and executing it with
//! parameters.

use aqueduct_expr::SqlError;
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;

use aqueduct_plan::bind;
use aqueduct_plan::parse::parse;
use aqueduct_plan::plan::{Column, Outcome, Plan};
use aqueduct_views::view_read::ViewRead;

use super::custom::Custom;
use super::dataflow::PreparedAuto;
use super::route::Route;
use super::state::{select_tag, Session};
use crate::consistency::Consistency;

/// A parsed statement with its parameter and result types.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Unique in the process: what a session remembers about a statement
    /// it executed (that its role may run it) is kept under this.
    pub(crate) id: u64,
    pub sql: String,
    /// Parameter types, in `$1, $2, ...` order.
    pub params: Vec<DataType>,
    /// Result columns; empty for statements without rows.
    pub columns: Vec<Column>,
    /// A read that finishes in microseconds (a key or index lookup, a view
    /// lookup): front ends may run it without moving to a blocking thread.
    pub quick: bool,
    pub(crate) statement: Option<Statement>,
    /// The automatic view that answers it, found when it was prepared.
    pub(crate) auto: Option<PreparedAuto>,
    /// A keyed read of one maintained view, planned when it was prepared.
    pub(crate) view_read: Option<ViewRead>,
    /// A statement the SQL parser does not know (`CREATE TIME MAP`), run
    /// from its text.
    pub(crate) custom: Option<Custom>,
    /// A read or write of the tables whose plan depends on nothing but
    /// the catalog, bound once when it was prepared.
    pub(crate) plan: Option<std::sync::Arc<super::run::KeptPlan>>,
}

/// A fresh [`Prepared::id`].
fn next_prepared_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Session {
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

    pub(crate) fn prepare_inner(
        &mut self,
        sql: &str,
        hints: &[Option<DataType>],
    ) -> Result<Prepared, SqlError> {
        self.start_statement();
        if let Some(kind) = Custom::of(sql) {
            return Ok(Prepared {
                id: next_prepared_id(),
                sql: sql.to_string(),
                params: self.custom_parameter_types(kind, sql, hints),
                columns: kind.columns(),
                quick: false,
                statement: None,
                auto: None,
                view_read: None,
                custom: Some(kind),
                plan: None,
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
                id: next_prepared_id(),
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
                custom: None,
                plan: None,
            });
        };
        // Whether the statement binds against the base tables as they are
        // (so its plan may be kept).
        let mut direct = false;
        let bound = match self.route_with(st, hints, false)? {
            Route::Roles => {
                return Ok(Prepared {
                    id: next_prepared_id(),
                    sql: sql.to_string(),
                    params: Vec::new(),
                    columns: Vec::new(),
                    quick: false,
                    statement,
                    auto: None,
                    view_read: None,
                    custom: None,
                    plan: None,
                })
            }
            Route::Views(_) => {
                if let Some(read) = self.plan_view_read(st, hints) {
                    return Ok(Prepared {
                        id: next_prepared_id(),
                        sql: sql.to_string(),
                        params: read.param_types.clone(),
                        columns: read.columns.clone(),
                        quick: true,
                        statement,
                        auto: None,
                        view_read: Some(read),
                        custom: None,
                        plan: None,
                    });
                }
                match self.views_as_tables(st, &[], None)? {
                    Some(views) => self.bind(&views, st, hints)?,
                    // The views went meanwhile: as if they never were.
                    None => match self.route_bound(st, hints)? {
                        Route::Direct(bound) => bound,
                        other => return self.prepare_dataflow(sql, hints, statement, other),
                    },
                }
            }
            Route::CatalogRelations => {
                let catalog = self.with_catalog_relations(st);
                let bound = self.bind(&catalog, st, hints)?;
                if let (Plan::Dataflow(_), Statement::Query(q)) = (&bound.plan, st) {
                    let q = q.as_ref().clone();
                    return self.prepared_one_shot(sql, statement, &catalog, &q, hints);
                }
                bound
            }
            Route::Direct(bound) => {
                if let (Plan::JoinLocking(_), Statement::Query(q)) = (&bound.plan, st) {
                    let q = q.as_ref().clone();
                    let db = self.engine.database();
                    let catalog = db.read_in(self.txn.as_ref());
                    return self.prepared_one_shot(sql, statement, &catalog, &q, hints);
                }
                direct = true;
                bound
            }
            other => return self.prepare_dataflow(sql, hints, statement, other),
        };
        let plan = if direct {
            self.kept_plan(st, &bound)
        } else {
            None
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
            id: next_prepared_id(),
            sql: sql.to_string(),
            params: bound.params,
            columns: bound.columns,
            quick,
            statement,
            auto: None,
            view_read: None,
            custom: None,
            plan,
        })
    }

    /// The plan to keep for `st`, bound directly against the tables as
    /// `bound`: for a read or write of the tables (a query, INSERT, UPDATE
    /// or DELETE) outside a transaction block (whose catalog may
    /// hold its own schema changes) that depends on nothing but the
    /// catalog. Bound again with the parameter types it was given, as
    /// each execution would bind it.
    fn kept_plan(
        &self,
        st: &Statement,
        bound: &aqueduct_plan::plan::Bound,
    ) -> Option<std::sync::Arc<super::run::KeptPlan>> {
        let keeps = |plan: &Plan| match (plan, st) {
            (Plan::Select(_), Statement::Query(_)) => true,
            // An INSERT whose query one-shot evaluation answers runs that
            // query first, as an UPDATE or DELETE runs its WHERE's
            // subqueries first: bound again each time.
            (Plan::Insert(i), Statement::Insert(_)) => {
                !matches!(i.source, aqueduct_plan::plan::InsertSource::Evaluated(_))
            }
            (Plan::Update(_), Statement::Update(_)) | (Plan::Delete(_), Statement::Delete(_)) => {
                !super::run::filters_by_subquery(st)
            }
            _ => false,
        };
        if self.txn.is_some() || bound.session_dependent || !keeps(&bound.plan) {
            return None;
        }
        let hints: Vec<Option<DataType>> = bound.params.iter().cloned().map(Some).collect();
        let catalog = self.engine.database().read();
        let again = self.bind(&catalog, st, &hints).ok()?;
        if again.session_dependent || again.params != bound.params || !keeps(&again.plan) {
            return None;
        }
        Some(std::sync::Arc::new(super::run::KeptPlan {
            plan: again.plan,
            columns: again.columns,
            schema_version: catalog.schema_version(),
        }))
    }

    /// Prepares a query on a dataflow route: bound to its automatic view
    /// when it has one, else described for one-shot evaluation.
    pub(crate) fn prepare_dataflow(
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
                    id: next_prepared_id(),
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
                    custom: None,
                    plan: None,
                });
            }
        }
        let q = q.as_ref().clone();
        let db = self.engine.database();
        let catalog = db.read_in(self.txn.as_ref());
        self.prepared_one_shot(sql, statement, &catalog, &q, hints)
    }

    /// `q` prepared for one-shot evaluation over `catalog`: its columns and
    /// parameter types as the dataflow compiles it.
    fn prepared_one_shot(
        &self,
        sql: &str,
        statement: Option<Statement>,
        catalog: &aqueduct_tables::Catalog,
        q: &sqlparser::ast::Query,
        hints: &[Option<DataType>],
    ) -> Result<Prepared, SqlError> {
        let (columns, params) = aqueduct_views::oneshot::describe(catalog, q, hints, self.time)?;
        Ok(Prepared {
            id: next_prepared_id(),
            sql: sql.to_string(),
            params,
            columns,
            quick: false,
            statement,
            auto: None,
            view_read: None,
            custom: None,
            plan: None,
        })
    }

    /// Whether `p` can run on the caller's thread without waiting: a quick
    /// read, every write it may see already durable, and for one a view
    /// answers, the views already reflect every committed write (else a
    /// front end should run it where waiting blocks nobody else).
    pub fn runs_without_waiting(&self, p: &Prepared) -> bool {
        let db = self.engine.database();
        if !p.quick
            || self.remote.is_some()
            || self.consistency() == crate::consistency::Consistency::Release
        {
            return false;
        }
        if p.auto.is_some() || p.view_read.is_some() {
            // Inside a transaction block a view read may evaluate the
            // view's query over the transaction's writes. Outside, the
            // views hold acknowledged commits only: a read of them waits
            // for their dataflow, never for another writer's fsync.
            let views = &self.engine.views;
            return self.txn.is_none()
                && views.reflects(db.committed_lsn())
                && db.is_visible(views.reflected_now());
        }
        // A read of the tables waits for what it sees to be durable: with
        // a commit's fsync under way it would wait for it, so it goes
        // elsewhere.
        db.is_visible(db.applied_lsn())
    }

    /// Executes a prepared statement with its parameter values (already of
    /// the prepared parameter types).
    pub fn execute_prepared(
        &mut self,
        p: &Prepared,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let mut rows = Vec::new();
        if let Some(read) = self.quick_view_read(p, params, &mut |r| rows.push(r.to_vec())) {
            return read.map(|n| Outcome::Rows {
                tag: select_tag(n as usize),
                columns: p.columns.clone(),
                rows,
            });
        }
        self.execute_prepared_framed(p, params)
    }

    /// Executes a prepared statement, calling `f` on each row it returns
    /// in place of collecting them, and returns how many there were (0
    /// for a statement that returns none). A keyed read of a view hands
    /// `f` the view's own rows: nothing is copied or allocated per read.
    /// The rows' columns are `p.columns`. On an error, rows `f` already
    /// got are not the statement's answer.
    pub fn execute_prepared_each(
        &mut self,
        p: &Prepared,
        params: &[Value],
        mut f: impl FnMut(&[Value]),
    ) -> Result<u64, SqlError> {
        if let Some(read) = self.quick_view_read(p, params, &mut f) {
            return read;
        }
        match self.execute_prepared_framed(p, params)? {
            Outcome::Rows { rows, .. } => {
                rows.iter().for_each(|r| f(r));
                Ok(rows.len() as u64)
            }
            _ => Ok(0),
        }
    }

    /// A prepared keyed read of a view, answered without the statement
    /// frame (timeouts, the statement stack, the statement's clock) when
    /// it can wait for nothing and check nothing anew: outside a
    /// transaction block, on a server that takes its own writes, its
    /// privileges already checked at this schema version, the views at
    /// the session's consistency level already, and the key held by a
    /// keyed reader that exists. `None` when any of that fails, with `f`
    /// called on no row: the framed path then does what is missing.
    fn quick_view_read(
        &mut self,
        p: &Prepared,
        params: &[Value],
        f: &mut dyn FnMut(&[Value]),
    ) -> Option<Result<u64, SqlError>> {
        let read = p.view_read.as_ref()?;
        if p.custom.is_some()
            || p.auto.is_some()
            || self.remote.is_some()
            || params.len() != p.params.len()
            || !self.authorized_already(p.id)
            || self.engine.follows()
        {
            return None;
        }
        if self.consistency() == Consistency::Release {
            return None;
        }
        let views = &self.engine.views;
        let db = self.engine.database();
        // What `views_ready` waits for, asked without waiting; an error
        // (a session token from nowhere) the framed path reports.
        let target = match self.views_target().ok()? {
            Some(target) if views.reflects(target) => target,
            Some(_) => return None,
            None => views.reflected_now(),
        };
        let entry = views.get(read.view())?;
        if !read.planned_for(&entry) {
            return None;
        }
        let mut count = 0u64;
        let seen = read.with_key_values(params, |key| match key {
            // `col = NULL` holds for no row.
            None => Some(target),
            Some(key) => {
                let mut scratch = Vec::new();
                let copy = views.lookup_held(&entry, read.key(), key, |row| {
                    count += 1;
                    read.with_projected(row, &mut scratch, &mut *f);
                })?;
                Some(target.max(copy))
            }
        })?;
        self.activity_starts(&p.sql);
        self.engine.metrics.count(&self.engine.metrics.select);
        // The copy read may be past the acknowledged commits (a key just
        // filled from the tables): what it showed must be acknowledged
        // before the answer is.
        let visible = if db.is_visible(seen) {
            Ok(count)
        } else {
            self.statement(|s| s.engine.database().await_visible(seen))
                .map(|()| count)
                .map_err(SqlError::from)
        };
        if visible.is_err() {
            self.note_error();
        }
        self.activity_ends();
        Some(visible)
    }

    /// [`Session::execute_prepared`] in the statement frame.
    fn execute_prepared_framed(
        &mut self,
        p: &Prepared,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.activity_starts(&p.sql);
        let outcome = self.statement(|s| s.execute_prepared_here(p, params));
        self.activity_ends();
        outcome
    }

    pub(crate) fn execute_prepared_here(
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
            if let Err(e) = self.authorize_prepared(p.id, st) {
                self.note_error();
                return Err(e);
            }
        }
        if let Some(kind) = p.custom {
            return self.run_custom(kind, &p.sql, params);
        }
        // A block held on the group's leader reads there too (its own
        // writes are there): no read here, by a view or otherwise.
        if let (Some(_), Some(st)) = (&self.remote, &p.statement) {
            let hints: Vec<Option<DataType>> = p.params.iter().cloned().map(Some).collect();
            return self.run_authorized(st, &hints, params);
        }
        self.follower_ready(p.statement.as_ref())?;
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
        if let (Some(kept), Some(st)) = (&p.plan, &p.statement) {
            match self.run_kept(kept, st, params) {
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
                self.run_authorized(st, &hints, params)
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
}
