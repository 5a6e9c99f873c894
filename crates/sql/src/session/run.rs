//! Running a statement: the simple protocol's query strings, and each
//! statement the way its [`Route`] says.

use aqueduct_expr::SqlError;
use aqueduct_tables::{Catalog, Txn};
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;

use aqueduct_plan::catalog_queries;
use aqueduct_plan::exec;
use aqueduct_plan::parse::parse;
use aqueduct_plan::plan::{Column, InsertSource, Outcome, Plan};

use super::route::Route;
use super::state::{command, Session};

/// A prepared statement's plan, bound when it was prepared with the parameter
/// types its executions bind it with. It holds while the catalog keeps
/// the schema version it was bound against; the binder read no clock,
/// setting or session fact into it ([`aqueduct_plan::plan::Bound::session_dependent`]),
/// so binding again would give the same plan.
#[derive(Debug)]
pub(crate) struct KeptPlan {
    pub(crate) plan: Plan,
    pub(crate) columns: Vec<Column>,
    pub(crate) schema_version: u64,
}

impl Session {
    /// Runs a simple-protocol query string: every statement in order,
    /// stopping at the first error (as PostgreSQL does).
    pub fn execute(&mut self, sql: &str) -> Vec<Result<Outcome, SqlError>> {
        self.activity_starts(sql);
        let outcomes = aqueduct_plan::limits::with_statement_stack(|| self.execute_text(sql));
        self.activity_ends();
        outcomes
    }

    pub(crate) fn execute_text(&mut self, sql: &str) -> Vec<Result<Outcome, SqlError>> {
        if let Some(pieces) = super::custom::split_around_custom(sql) {
            // One at a time, stopping at the first error, as a query
            // string's statements run.
            let mut out = Vec::new();
            for piece in pieces {
                let results = self.execute_text(&piece);
                let failed = results.iter().any(Result::is_err);
                out.extend(results);
                if failed {
                    break;
                }
            }
            return out;
        }
        if let Some(kind) = super::custom::Custom::of(sql) {
            return vec![self.run_custom(kind, sql, &[])];
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
        // The front end feeds a COPY FROM STDIN its data after the query
        // string ran: nothing may follow it there.
        let copy_in = |st: &Statement| {
            matches!(
                st,
                Statement::Copy {
                    to: false,
                    target: sqlparser::ast::CopyTarget::Stdin,
                    ..
                }
            )
        };
        if statements[..statements.len() - 1].iter().any(copy_in) {
            self.note_error();
            return vec![Err(SqlError::unsupported(
                "a statement after COPY FROM STDIN in the same query string",
            )
            .with_hint(
                "send the statements after the COPY in a query of their own",
            ))];
        }
        let mut out = Vec::with_capacity(statements.len());
        for st in statements {
            let r = self.statement(|s| s.run(Some(&st), sql, &[], &[]));
            // A COPY FROM STDIN waits for its data: the front end runs it
            // before anything else.
            let stop = r.is_err() || matches!(r, Ok(Outcome::CopyIn { .. }));
            out.push(r);
            if stop {
                break;
            }
        }
        out
    }

    /// `REFRESH MATERIALIZED VIEW [CONCURRENTLY] name [WITH [NO] DATA]`:
    /// nothing to do, as every view is always current; an error if there is
    /// no such view. `None` for any other statement.
    pub(crate) fn refresh(&self, sql: &str) -> Option<Result<Outcome, SqlError>> {
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

    pub(crate) fn run(
        &mut self,
        st: Option<&Statement>,
        _sql: &str,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let Some(st) = st else {
            return Ok(Outcome::Empty);
        };
        if let Err(e) = self.authorize(st) {
            self.note_error();
            return Err(e);
        }
        self.run_authorized(st, hints, params)
    }

    /// A prepared statement on the plan it kept ([`KeptPlan`]), doing
    /// what [`Session::run_statement`] does for it outside a transaction
    /// block without binding it again. `None` when it must be bound again:
    /// inside a block, on a group member that sends its writes to the
    /// leader, or when the catalog changed since.
    ///
    pub(crate) fn run_kept(
        &mut self,
        kept: &KeptPlan,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Outcome>, SqlError> {
        if self.txn.is_some() || self.remote.is_some() {
            return Ok(None);
        }
        let reads = matches!(st, Statement::Query(_));
        if !reads && self.forwarding().is_some() {
            return Ok(None);
        }
        if reads
            && !self.chain_tickets.is_empty()
            && self.consistency() == crate::consistency::Consistency::Session
        {
            self.wait_for_chains()?;
        }
        self.follower_ready(Some(st))?;
        if self.engine.group_link().is_some() {
            // Outside a block nothing is recorded to move to the leader.
            self.movable = None;
        }
        self.count_statement(&kept.plan);
        self.run_autocommit(&kept.plan, &kept.columns, params, Some(kept.schema_version))
    }

    /// [`Session::run`] of a statement whose privileges were checked
    /// already (an execution of a prepared statement).
    pub(crate) fn run_authorized(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let result = self.run_statement(st, hints, params);
        if result.is_err() {
            self.note_error();
        }
        result
    }

    pub(crate) fn run_statement(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.start_statement();
        match st {
            Statement::Prepare {
                name,
                data_types,
                statement,
            } => return self.sql_prepare(name, data_types, statement),
            Statement::Execute {
                name: Some(name),
                parameters,
                immediate: false,
                ..
            } => return self.sql_execute(name, parameters),
            _ => {}
        }
        // A `session` read sees the effects of every chain this session
        // called, whose later hops may still run.
        if !self.chain_tickets.is_empty()
            && self.txn.is_none()
            && matches!(st, Statement::Query(_))
            && self.consistency() == crate::consistency::Consistency::Session
        {
            self.wait_for_chains()?;
        }
        if let Some(forwarded) = self.forward_if_needed(st, params) {
            return forwarded;
        }
        let result = self.run_here(st, hints, params);
        if self.engine.group_link().is_some() {
            self.record_for_move(st, params, &result);
        }
        result
    }

    fn run_here(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.follower_ready(Some(st))?;
        let inlined = self.inline_subqueries(st, params)?;
        let st = inlined.as_ref().unwrap_or(st);
        let route = self.route(st, hints)?;
        self.run_route(st, route, hints, params)
    }

    /// `PREPARE name [(types)] AS statement`: kept for `EXECUTE` in this
    /// session (42P05 when the name is taken).
    fn sql_prepare(
        &mut self,
        name: &sqlparser::ast::Ident,
        types: &[sqlparser::ast::DataType],
        statement: &Statement,
    ) -> Result<Outcome, SqlError> {
        let name = aqueduct_plan::bind::ident(name);
        if self.sql_prepared.contains_key(&name) {
            return Err(SqlError::new(
                "42P05",
                format!("prepared statement \"{name}\" already exists"),
            ));
        }
        if self.sql_prepared.len() >= MAX_SQL_PREPARED {
            return Err(SqlError::new(
                "53400",
                format!("more than {MAX_SQL_PREPARED} prepared statements in one session"),
            )
            .with_hint("DEALLOCATE the ones no longer used"));
        }
        let hints = {
            let db = self.engine.database();
            let catalog = db.read_in(self.txn.as_ref());
            types
                .iter()
                .map(|t| aqueduct_plan::bind::sql_type(&catalog, t).map(Some))
                .collect::<Result<Vec<_>, _>>()?
        };
        let sql = statement.to_string();
        // Checked now, as PostgreSQL does.
        self.prepare_inner(&sql, &hints)?;
        self.sql_prepared.insert(name, (sql, hints));
        Ok(command("PREPARE"))
    }

    /// `EXECUTE name [(values)]`: a statement `PREPARE` kept, run with
    /// its parameters bound to the values (26000 when there is none).
    fn sql_execute(
        &mut self,
        name: &sqlparser::ast::ObjectName,
        arguments: &[sqlparser::ast::Expr],
    ) -> Result<Outcome, SqlError> {
        let key = aqueduct_plan::bind::object_name(name)?;
        let Some((sql, hints)) = self.sql_prepared.get(&key).cloned() else {
            return Err(SqlError::new(
                "26000",
                format!("prepared statement \"{key}\" does not exist"),
            ));
        };
        let prepared = self.prepare_inner(&sql, &hints)?;
        if arguments.len() != prepared.params.len() {
            return Err(SqlError::new(
                "42601",
                format!(
                    "wrong number of parameters for prepared statement \"{key}\": expected {}, got {}",
                    prepared.params.len(),
                    arguments.len()
                ),
            ));
        }
        let mut values = Vec::with_capacity(arguments.len());
        for (a, ty) in arguments.iter().zip(&prepared.params) {
            let select = aqueduct_plan::parse::parse(&format!("SELECT {a}"))?
                .pop()
                .ok_or_else(|| SqlError::syntax(format!("bad parameter {a}")))?;
            let route = self.route(&select, &[])?;
            let Outcome::Rows { rows, .. } = self.run_route(&select, route, &[], &[])? else {
                return Err(SqlError::syntax(format!("bad parameter {a}")));
            };
            let v = rows
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
                .unwrap_or(Value::Null);
            values.push(v.coerce(ty)?);
        }
        self.execute_prepared_here(&prepared, &values)
    }

    /// `UPDATE` and `DELETE` whose WHERE has subqueries that do not refer
    /// to the row (`WHERE id IN (SELECT ... JOIN ...)`, as ORMs write a
    /// filter across relations): each run once now and replaced by its
    /// answer, so the write is bound with constants. A correlated one is
    /// refused (0A000).
    fn inline_subqueries(
        &mut self,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Statement>, SqlError> {
        if !filters_by_subquery(st) {
            return Ok(None);
        }
        let mut st = st.clone();
        let mut failure = None;
        let _ = sqlparser::ast::visit_expressions_mut(&mut st, |e| {
            if failure.is_some() {
                return std::ops::ControlFlow::Break(());
            }
            let replaced = match e {
                sqlparser::ast::Expr::Subquery(q) => {
                    self.subquery_answer(q, params)
                        .map(|rows| match rows.as_slice() {
                            [] => Ok(literal_of(&Value::Null)),
                            [one] => Ok(literal_of(&one[0])),
                            _ => Err(SqlError::new(
                                "21000",
                                "more than one row returned by a subquery used as an expression",
                            )),
                        })
                }
                sqlparser::ast::Expr::Exists { subquery, negated } => {
                    let negated = *negated;
                    self.subquery_answer(subquery, params)
                        .map(|rows| Ok(literal_of(&Value::Bool(rows.is_empty() == negated))))
                }
                sqlparser::ast::Expr::InSubquery {
                    expr,
                    subquery,
                    negated,
                } => {
                    let (expr, negated) = (expr.clone(), *negated);
                    self.subquery_answer(subquery, params).map(|rows| {
                        Ok(if rows.is_empty() {
                            literal_of(&Value::Bool(negated))
                        } else {
                            sqlparser::ast::Expr::InList {
                                expr,
                                list: rows.iter().map(|r| literal_of(&r[0])).collect(),
                                negated,
                            }
                        })
                    })
                }
                _ => return std::ops::ControlFlow::Continue(()),
            };
            match replaced.and_then(|r| r) {
                Ok(new) => *e = new,
                Err(err) => failure = Some(err),
            }
            std::ops::ControlFlow::Continue(())
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(Some(st)),
        }
    }

    /// The rows of a subquery of a write, run once (0A000 when it refers
    /// to the row being written).
    fn subquery_answer(
        &mut self,
        q: &sqlparser::ast::Query,
        params: &[Value],
    ) -> Result<Vec<Vec<Value>>, SqlError> {
        let correlated = {
            let db = self.engine.database();
            let catalog = db.read_in(self.txn.as_ref());
            aqueduct_plan::subqueries::is_correlated(&catalog, q)
        };
        if correlated {
            return Err(SqlError::unsupported(
                "a subquery in UPDATE or DELETE that refers to the row being written",
            )
            .with_hint("write the condition as a join in a subquery that does not refer to the row: WHERE id IN (SELECT ...)"));
        }
        let st = Statement::Query(Box::new(q.clone()));
        let route = self.route(&st, &[])?;
        match self.run_route(&st, route, &[], params)? {
            Outcome::Rows { rows, .. } => Ok(rows),
            _ => Err(SqlError::new("XX000", "a subquery gave no rows")),
        }
    }

    /// Runs `st` the way `route` says.
    pub(crate) fn run_route(
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
                        views,
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
        self.count_statement(&bound.plan);
        if self.failed
            && !matches!(
                bound.plan,
                Plan::Commit | Plan::Rollback | Plan::RollbackTo { .. }
            )
        {
            return Err(SqlError::in_failed_transaction());
        }
        match bound.plan {
            Plan::Begin { isolation } => {
                if self.txn.is_none() {
                    let level = isolation.unwrap_or_else(|| self.default_isolation());
                    self.txn = Some(self.engine.database().begin(level));
                    self.txn_began_micros = Some(self.time.statement_micros);
                }
                Ok(command("BEGIN"))
            }
            Plan::Commit => {
                let outcome = self.commit_block();
                let committed = matches!(&outcome, Ok(Outcome::Command { tag }) if tag == "COMMIT");
                self.settings_at_end(committed);
                outcome
            }
            Plan::Rollback => {
                if let Some(txn) = self.txn.take() {
                    self.engine.database().end(&txn);
                }
                self.settings_at_end(false);
                self.snapshot = None;
                self.failed = false;
                self.savepoints.clear();
                Ok(command("ROLLBACK"))
            }
            Plan::SetConstraints { names, deferred } => {
                // Outside a transaction block it changes nothing
                // (PostgreSQL warns).
                if let Some(txn) = self.txn.as_mut() {
                    txn.constraint_modes.set(names.as_deref(), deferred);
                    if !deferred {
                        let db = self.engine.database();
                        let catalog = db.read_in(Some(txn));
                        exec::check_deferred(&catalog, txn, exec::CheckDue::Immediate)?;
                    }
                }
                Ok(command("SET CONSTRAINTS"))
            }
            Plan::Savepoint { name } => {
                let Some(txn) = &self.txn else {
                    return Err(outside_block("SAVEPOINT"));
                };
                self.savepoints.push((name, txn.savepoint()));
                Ok(command("SAVEPOINT"))
            }
            Plan::ReleaseSavepoint { name } => {
                if self.txn.is_none() {
                    return Err(outside_block("RELEASE SAVEPOINT"));
                }
                let at = self.savepoint_index(&name)?;
                self.savepoints.truncate(at);
                Ok(command("RELEASE"))
            }
            Plan::RollbackTo { name } => {
                if self.txn.is_none() {
                    return Err(outside_block("ROLLBACK TO SAVEPOINT"));
                }
                let at = self.savepoint_index(&name)?;
                // The savepoint itself stays, as in PostgreSQL.
                self.savepoints.truncate(at + 1);
                let mark = &self.savepoints[at].1;
                self.txn.as_mut().expect("checked above").rollback_to(mark);
                self.failed = false;
                Ok(command("ROLLBACK"))
            }
            Plan::ShowViews => Ok(self.show_views()),
            Plan::ShowConsumers => Ok(self.show_consumers()),
            Plan::Explain { statement, dot } => self.explain(&statement, dot),
            Plan::Set { name, value, local } => self.set_in_block(&name, value, local),
            Plan::ResetAll => self.reset_all(),
            Plan::SetConfig { rows, local } => self.set_config(&rows, local),
            Plan::Maintenance { tag } => Ok(command(tag)),
            Plan::LockTables => match self.txn {
                Some(_) => Ok(command("LOCK TABLE")),
                None => Err(outside_block("LOCK TABLE")),
            },
            Plan::Deallocate { name } => Ok(command(if name == "all" {
                self.sql_prepared.clear();
                "DEALLOCATE ALL"
            } else {
                self.sql_prepared.remove(&name);
                "DEALLOCATE"
            })),
            Plan::Show { name } => self.show(&name),
            Plan::Copy(copy) => self.run_copy(copy, params),
            Plan::JoinLocking(locking) => self.run_join_locking(st, &locking, hints, params),
            plan => self.run_data(plan, bound.columns, params),
        }
    }

    /// Counts a statement about to run on `plan` in `/metrics`.
    fn count_statement(&self, plan: &Plan) {
        let m = &self.engine.metrics;
        match plan {
            Plan::Select(_) | Plan::Values(_) | Plan::Catalog(_) | Plan::JoinLocking(_) => {
                m.count(&m.select)
            }
            Plan::Insert(_) => m.count(&m.insert),
            Plan::Update(_) => m.count(&m.update),
            Plan::Delete(_) => m.count(&m.delete),
            Plan::Ddl(_) => m.count(&m.ddl),
            _ => m.count(&m.other),
        }
    }

    /// A query on a dataflow route (`auto`: its automatic view's lifted
    /// query, on that route).
    pub(crate) fn run_dataflow(
        &mut self,
        st: &Statement,
        auto: Option<aqueduct_views::auto_views::Lifted>,
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
    pub(crate) fn run_data(
        &mut self,
        plan: Plan,
        columns: Vec<Column>,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        // A SELECT without FROM that touches no sequence reads nothing:
        // evaluated holding no lock (`SELECT pg_sleep(10)` stalls nobody).
        if let Plan::Values(outputs) = &plan {
            if !outputs.iter().any(aqueduct_expr::Expr::needs_effects) {
                let env = aqueduct_expr::Env::new(&[], params);
                let row = outputs
                    .iter()
                    .map(|e| e.eval(&env))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(Outcome::Rows {
                    tag: "SELECT 1".into(),
                    columns,
                    rows: vec![row],
                });
            }
        }
        let plan = self.evaluate_insert_source(plan, params)?;
        let db = self.engine.database();
        if let Some(txn) = self.txn.as_mut() {
            if !txn.isolation.locks() {
                let catalog = db.read_in(Some(txn));
                return exec::execute(
                    db,
                    &catalog,
                    txn,
                    &mut self.sequences,
                    &plan,
                    columns,
                    params,
                );
            }
            return self.run_locking(plan, columns, params);
        }
        let out = self.run_autocommit(&plan, &columns, params, None)?;
        Ok(out.expect("run without a schema version to hold"))
    }

    /// A statement outside a transaction block on `plan`: a read directly,
    /// a write atomically under the commit lock. With `schema`, only
    /// against the catalog at that schema version, checked under the lock
    /// the statement reads the catalog with (`None` when it moved on: the
    /// plan is stale and nothing was read or written).
    fn run_autocommit(
        &mut self,
        plan: &Plan,
        columns: &[Column],
        params: &[Value],
        schema: Option<u64>,
    ) -> Result<Option<Outcome>, SqlError> {
        let db = self.engine.database();
        let current = |catalog: &Catalog| schema.is_none_or(|v| v == catalog.schema_version());
        if plan.is_read_only() {
            let seen = db.applied_lsn();
            let out = {
                let catalog = db.read();
                if !current(&catalog) {
                    return Ok(None);
                }
                let mut scratch = Txn::default();
                exec::execute(
                    db,
                    &catalog,
                    &mut scratch,
                    &mut self.sequences,
                    plan,
                    columns.to_vec(),
                    params,
                )?
            };
            db.await_visible(seen)?;
            return Ok(Some(out));
        }
        let owner = &self.principal.name;
        let origin = self.txn_origin();
        let sequences = &mut self.sequences;
        let (out, lsn) = db.run_exclusive(|catalog, txn| {
            if !current(catalog) {
                return Ok(None);
            }
            txn.origin = origin.clone();
            let out = exec::execute(db, catalog, txn, sequences, plan, columns.to_vec(), params)?;
            // The statement is the transaction: deferred checks end with it.
            exec::check_deferred(catalog, txn, exec::CheckDue::All)?;
            crate::roles::record_owners(txn, owner);
            Ok::<_, SqlError>(Some(out))
        })?;
        if let Some(lsn) = lsn {
            self.set_last_lsn(lsn);
        }
        Ok(out)
    }

    /// A statement of a READ COMMITTED or REPEATABLE READ transaction: run
    /// it, and if it writes rows (or references rows through foreign keys)
    /// that the transaction has not locked, undo it, lock them — waiting
    /// for their holders to end — and run it again on what they committed.
    /// A REPEATABLE READ transaction reads its snapshot, and a row it
    /// locks that changed since fails with 40001 (first updater wins).
    fn run_locking(
        &mut self,
        plan: Plan,
        columns: Vec<Column>,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let db = self.engine.database();
        let txn = self.txn.as_mut().expect("a transaction block");
        if txn.isolation == aqueduct_tables::Isolation::RepeatableRead && self.snapshot.is_none() {
            self.snapshot = Some(std::sync::Arc::new(db.read().clone()));
        }
        for _ in 0..MAX_LOCK_ROUNDS {
            let mark = txn.savepoint();
            let from = txn.write_count();
            let (out, rows, seen) = {
                let committed;
                let catalog: &Catalog = match &self.snapshot {
                    Some(s) if !txn.changes_schema() => s,
                    _ => {
                        committed = db.read_in(Some(txn));
                        &committed
                    }
                };
                let out = exec::execute(
                    db,
                    catalog,
                    txn,
                    &mut self.sequences,
                    &plan,
                    columns.clone(),
                    params,
                )?;
                // A new row of a table without a primary key has a fresh
                // hidden id no one else can write: nothing to lock.
                let mut rows = txn.rows_to_lock(from);
                rows.retain(|(t, k)| {
                    !catalog
                        .table_by_id(*t)
                        .is_some_and(|t| !t.schema.has_primary_key() && t.get(k).is_none())
                });
                let seen: Vec<Option<u64>> = rows.iter().map(|r| row_version(catalog, r)).collect();
                (out, rows, seen)
            };
            let missing: Vec<aqueduct_tables::RowId> = rows
                .iter()
                .filter(|r| db.locks.holder(r) != Some(txn.id))
                .cloned()
                .collect();
            // Free rows are locked at once; if none changed since the
            // statement read them, its writes stand as they are.
            let unchanged = || {
                let now = db.read();
                rows.iter()
                    .zip(&seen)
                    .all(|(r, v)| row_version(&now, r) == *v)
            };
            let taken = missing.is_empty()
                || db
                    .locks
                    .acquire(txn.id, &missing, true, &aqueduct_expr::interrupt::check)
                    .is_ok();
            if taken && (missing.is_empty() || unchanged()) {
                if let Some(snapshot) = &self.snapshot {
                    first_updater_wins(&db.read(), snapshot, &rows)?;
                }
                return Ok(out);
            }
            txn.rollback_to(&mark);
            let since = std::time::Instant::now();
            db.locks.acquire(txn.id, &missing, false, &|| {
                aqueduct_expr::interrupt::check_lock_wait(since)
            })?;
        }
        Err(SqlError::new(
            "40001",
            format!(
                "could not lock the rows the statement writes in {MAX_LOCK_ROUNDS} rounds; retry the transaction"
            ),
        ))
    }

    /// An `INSERT` whose rows come from a query only one-shot evaluation
    /// answers: the query run now (inside the transaction block, if any),
    /// its rows then written as copied ones. Other plans pass through.
    fn evaluate_insert_source(&mut self, plan: Plan, params: &[Value]) -> Result<Plan, SqlError> {
        let Plan::Insert(mut insert) = plan else {
            return Ok(plan);
        };
        let InsertSource::Evaluated(q) = &insert.source else {
            return Ok(Plan::Insert(insert));
        };
        let Outcome::Rows { rows, .. } = self.answer_by_dataflow(q, None, params)? else {
            return Err(SqlError::new("XX000", "an INSERT's query gave no rows"));
        };
        if let Some(r) = rows.first() {
            if r.len() != insert.columns.len() {
                return Err(SqlError::syntax(format!(
                    "INSERT has {} expressions but {} target columns",
                    r.len(),
                    insert.columns.len()
                )));
            }
        }
        insert.source = InsertSource::Copied(aqueduct_plan::plan::CopiedRows {
            rows,
            ..Default::default()
        });
        Ok(Plan::Insert(insert))
    }

    /// `COMMIT`: the block's deferred checks, then its commit
    /// (`ROLLBACK` when the block had failed).
    fn commit_block(&mut self) -> Result<Outcome, SqlError> {
        self.savepoints.clear();
        self.snapshot = None;
        let Some(txn) = self.txn.take() else {
            return Ok(command("COMMIT"));
        };
        let db = self.engine.database();
        if std::mem::take(&mut self.failed) {
            db.end(&txn);
            return Ok(command("ROLLBACK"));
        }
        self.commit_txn(txn)?;
        Ok(command("COMMIT"))
    }

    /// Commits `txn`, the foreign key checks put off to its end first,
    /// and ends it: a transaction block's `COMMIT`, and the end of a
    /// `COPY` that is its own transaction.
    pub(crate) fn commit_txn(&mut self, mut txn: Txn) -> Result<(), SqlError> {
        let db = self.engine.database();
        let deferred = {
            let catalog = db.read_in(Some(&txn));
            exec::check_deferred(&catalog, &mut txn, exec::CheckDue::All)
        };
        if let Err(e) = deferred {
            db.end(&txn);
            return Err(e);
        }
        txn.origin = self.txn_origin();
        let committed = db.commit_checked(&mut txn, &|c, t| exec::check_at_commit(c, t));
        db.end(&txn);
        if let Some(lsn) = committed? {
            self.set_last_lsn(lsn);
        }
        Ok(())
    }

    /// `SELECT set_config(name, value, false) [FROM ...]`: `rows` (the
    /// names and values) run as a query, then each set as `SET` does.
    pub(crate) fn set_config(
        &mut self,
        rows: &sqlparser::ast::Query,
        local: bool,
    ) -> Result<Outcome, SqlError> {
        let st = Statement::Query(Box::new(rows.clone()));
        let route = self.route(&st, &[])?;
        let Outcome::Rows { rows, .. } = self.run_route(&st, route, &[], &[])? else {
            return Err(SqlError::new(
                "XX000",
                "set_config's arguments gave no rows",
            ));
        };
        let mut out = Vec::new();
        for row in rows {
            let (Some(name), value) = (row[0].to_text(), row[1].to_text()) else {
                return Err(SqlError::new(
                    "22004",
                    "NULL value not allowed for the name of set_config",
                ));
            };
            let name = name.to_lowercase();
            self.set_in_block(&name, Some(value.unwrap_or_default()), local)?;
            out.push(vec![Value::Text(
                self.settings.get(&name).cloned().unwrap_or_default(),
            )]);
        }
        Ok(Outcome::Rows {
            tag: super::state::select_tag(out.len()),
            columns: vec![Column::computed("set_config", DataType::Text)],
            rows: out,
        })
    }

    /// Each maintained view's columns, by view name.
    pub(crate) fn view_columns(&self) -> aqueduct_plan::publications::ViewColumns {
        let views = &self.engine.views;
        views
            .names()
            .into_iter()
            .filter_map(|n| {
                let entry = views.get(&n)?;
                let columns = entry
                    .columns
                    .iter()
                    .map(|c| (c.name.clone(), c.ty.clone()))
                    .collect();
                Some((n, columns))
            })
            .collect()
    }

    /// The catalog with the catalog relations `st` names built in, from
    /// the catalog as this session sees it.
    pub(crate) fn with_catalog_relations(&self, st: &Statement) -> Catalog {
        let mut names = catalog_queries::catalog_relations(st);
        {
            let catalog = self.engine.database().read_in(self.txn.as_ref());
            names.extend(catalog_queries::sequences_read(&catalog, st));
        }
        let views = &self.engine.views;
        let view_columns = self.view_columns();
        let mut view_tables = std::collections::BTreeMap::new();
        for n in views.names() {
            if let Some(entry) = views.get(&n) {
                view_tables.insert(n, entry.tables.clone());
            }
        }
        let ctx = aqueduct_plan::pg_catalog::CatalogContext {
            user: self.principal.name.clone(),
            settings: self.settings.clone(),
            view_columns,
            view_tables,
            activity: self
                .engine
                .backends
                .list()
                .iter()
                .map(|b| {
                    let a = b.activity();
                    aqueduct_plan::pg_catalog::BackendActivity {
                        pid: b.pid,
                        user: b.user.clone(),
                        application_name: a.application_name.clone(),
                        client: b.client,
                        backend_start: b.started_micros,
                        xact_start: a.transaction_start_micros,
                        query_start: a.query_start_micros,
                        state_change: a.state_change_micros,
                        state: a.state.to_string(),
                        query: a.query,
                    }
                })
                .collect(),
        };
        // A REPEATABLE READ transaction's snapshot, once it has one.
        if let (Some(snapshot), Some(txn)) = (&self.snapshot, &self.txn) {
            if !txn.changes_schema() {
                return aqueduct_plan::pg_catalog::with_relations(snapshot, &names, &ctx);
            }
        }
        let catalog = self.engine.database().read_in(self.txn.as_ref());
        aqueduct_plan::pg_catalog::with_relations(&catalog, &names, &ctx)
    }

    /// A read of `pg_catalog` or `information_schema` relations, answered
    /// from them built from the catalog for this one statement.
    pub(crate) fn run_virtual(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let catalog = self.with_catalog_relations(st);
        self.run_read_only(
            catalog,
            st,
            hints,
            params,
            "the catalog relations are read-only",
        )
    }

    /// Binds and runs a read-only statement against a catalog built for
    /// it: directly, or once through a scratch dataflow (joins,
    /// subqueries, aggregates).
    pub(crate) fn run_read_only(
        &mut self,
        catalog: Catalog,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
        refusal: &str,
    ) -> Result<Outcome, SqlError> {
        let Statement::Query(q) = st else {
            return Err(SqlError::new("42809", refusal.to_string()));
        };
        let bound = self.bind(&catalog, st, hints)?;
        if let Plan::SetConfig { rows, local } = &bound.plan {
            return self.set_config(rows, *local);
        }
        if let Plan::Dataflow(_) = &bound.plan {
            let (columns, rows) = aqueduct_views::oneshot::evaluate_shared(
                std::sync::Arc::new(catalog),
                q,
                params,
                Some(self.time),
            )?;
            return Ok(Outcome::Rows {
                tag: super::state::select_tag(rows.len()),
                columns,
                rows,
            });
        }
        if !bound.plan.is_read_only() {
            return Err(SqlError::new("42809", refusal.to_string()));
        }
        let mut scratch = Txn::default();
        exec::execute(
            self.engine.database(),
            &catalog,
            &mut scratch,
            &mut aqueduct_tables::SessionSequences::default(),
            &bound.plan,
            bound.columns,
            params,
        )
    }
}

/// `v` as a SQL literal of its type (`'2024-01-01'::date`, `42`, `NULL`).
pub(super) fn literal_of(v: &Value) -> sqlparser::ast::Expr {
    use sqlparser::ast::{Expr, Value as Lit};
    let text = match v {
        Value::Null => return Expr::Value(Lit::Null.into()),
        Value::Bool(b) => return Expr::Value(Lit::Boolean(*b).into()),
        Value::Int(i) => return Expr::Value(Lit::Number(i.to_string(), false).into()),
        other => other.to_text().unwrap_or_default(),
    };
    let quoted = Expr::Value(Lit::SingleQuotedString(text).into());
    match v {
        // An untyped literal: read as the other side's type (an enum's).
        Value::Text(_) | Value::Enum(..) => quoted,
        other => {
            let ty = aqueduct_expr::expr::type_of_value(other);
            match sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
                .try_with_sql(&ty.to_string())
                .and_then(|mut p| p.parse_data_type())
            {
                Ok(data_type) => Expr::Cast {
                    kind: sqlparser::ast::CastKind::DoubleColon,
                    expr: Box::new(quoted),
                    data_type,
                    format: None,
                },
                Err(_) => quoted,
            }
        }
    }
}

/// The most statements one session may keep by `PREPARE`.
const MAX_SQL_PREPARED: usize = 10_000;

/// Rounds of locking one statement of a locking transaction may take (each
/// round finds rows others changed meanwhile).
const MAX_LOCK_ROUNDS: usize = 64;

/// The LSN of the write that made `row` as `catalog` has it.
fn row_version(catalog: &Catalog, (t, k): &aqueduct_tables::RowId) -> Option<u64> {
    catalog
        .table_by_id(*t)
        .and_then(|t| t.get(k))
        .map(|v| v.lsn)
}

/// A REPEATABLE READ transaction may write a row only as its snapshot has
/// it: one another transaction changed since fails it with 40001.
fn first_updater_wins(
    committed: &Catalog,
    snapshot: &Catalog,
    rows: &[aqueduct_tables::RowId],
) -> Result<(), SqlError> {
    if rows
        .iter()
        .any(|r| row_version(committed, r) != row_version(snapshot, r))
    {
        return Err(SqlError::new(
            "40001",
            "could not serialize access due to concurrent update",
        )
        .with_hint("the transaction may succeed if retried"));
    }
    Ok(())
}

/// SQLSTATE 25P01: a savepoint command outside `BEGIN ... COMMIT`.
fn outside_block(what: &str) -> SqlError {
    SqlError::new(
        "25P01",
        format!("{what} can only be used in transaction blocks"),
    )
}

impl Session {
    /// The newest savepoint called `name` (3B001 when there is none).
    fn savepoint_index(&self, name: &str) -> Result<usize, SqlError> {
        self.savepoints
            .iter()
            .rposition(|(n, _)| n == name)
            .ok_or_else(|| SqlError::new("3B001", format!("savepoint \"{name}\" does not exist")))
    }
}

/// Whether `st` is an UPDATE or DELETE whose WHERE holds a subquery (run
/// first, its value put in its place: `Session::inline_subqueries`).
pub(crate) fn filters_by_subquery(st: &Statement) -> bool {
    let selection = match st {
        Statement::Update(u) => u.selection.as_ref(),
        Statement::Delete(d) => d.selection.as_ref(),
        _ => None,
    };
    let Some(selection) = selection else {
        return false;
    };
    let mut found = false;
    let _ = sqlparser::ast::visit_expressions(selection, |e| {
        found |= matches!(
            e,
            sqlparser::ast::Expr::Subquery(_)
                | sqlparser::ast::Expr::Exists { .. }
                | sqlparser::ast::Expr::InSubquery { .. }
        );
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}
