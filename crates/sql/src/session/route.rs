//! How a statement is answered: the [`Route`] decided once, before it
//! runs, from the bound statement and the session's state; the session
//! runs that route, and `EXPLAIN` prints it.
//!
//! A statement goes the cheapest way that gives the right answer:
//! 1. role and privilege statements: the catalog's roles (`roles.rs`);
//! 2. a statement naming `pg_catalog` or `information_schema` relations
//!    (found among the relations of the parsed statement): over those
//!    relations built from the catalog for it (`pg_catalog.rs`), read-only;
//! 3. a query in `release` mode: from the current release's snapshot;
//! 4. a read of maintained views only (`SELECT ... FROM v WHERE k = ...`):
//!    their rows, by a keyed lookup where the WHERE pins columns;
//! 5. whatever the binder binds for direct evaluation: one base table (by
//!    key, index or scan — `exec.rs`), writes, DDL, transaction control,
//!    settings, `pg_catalog` queries of drivers and psql;
//! 6. a query the binder says needs the dataflow ([`Plan::Dataflow`]):
//!    an automatic view — the query with its `column = literal`
//!    conditions turned into parameters (so `WHERE id = 5` and `WHERE id
//!    = 6` share one view), made on first use and keyed on those
//!    parameters;
//! 7. or one-shot evaluation through a temporary dataflow (`oneshot.rs`),
//!    for what no view can serve (no pinned column, a LIMIT that is not a
//!    constant, inside a transaction block, automatic views off).
//!
//! Nothing here looks at error codes or searches SQL text.

use aqueduct_dataflow::graph::Graph;
use aqueduct_values::{DataType, Value};
use sqlparser::ast::{self, Statement};

use aqueduct_expr::SqlError;

use aqueduct_plan::catalog_queries;
use aqueduct_plan::plan::{Access, Bound, Column, Ddl, NeedsDataflow, Outcome, Plan};
use aqueduct_views::auto_views::{lift_literals, AutoView, KeyParam, Lifted};
use aqueduct_views::compile::Compiler;

use super::state::Session;

/// How a statement is answered, and why.
// Made once per statement and consumed at once: boxing the bound plan
// would add an allocation to every point read.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(crate) enum Route {
    /// `CREATE ROLE`, `GRANT`, ...: the catalog's roles (`roles.rs`).
    Roles,
    /// It names `pg_catalog` or `information_schema` relations: bound and
    /// run over them, built from the catalog for it (read-only).
    CatalogRelations,
    /// A query in `release` mode, outside a transaction block: answered
    /// as of the current release, the same for every reader.
    ReleaseSnapshot,
    /// Every relation it names is one of these maintained views: over
    /// their rows (a keyed lookup where its WHERE pins their columns).
    Views(Vec<String>),
    /// Bound for direct evaluation (`exec.rs`), or run by the session
    /// itself (`BEGIN`, `SET`, `SHOW`, `EXPLAIN`, ...).
    Direct(Bound),
    /// A query that needs the dataflow, served by an automatic view keyed
    /// on the columns its WHERE pins (evaluated once when the view cannot
    /// be made or cannot answer these values).
    AutoView {
        why: NeedsDataflow,
        lifted: Box<Lifted>,
    },
    /// A query that needs the dataflow, evaluated once through a
    /// temporary dataflow.
    OneShot {
        why: NeedsDataflow,
        not_auto: NotAuto,
    },
}

/// Why a query that needs the dataflow gets no automatic view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NotAuto {
    /// Reads inside a transaction block see the block's own writes.
    InTransaction,
    /// `aqueduct.auto_views` is off.
    Off,
    /// A LIMIT or OFFSET that is not a constant.
    NonConstantLimit,
    /// No `column = value` condition to key a view on.
    NoKey,
}

impl std::fmt::Display for NotAuto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotAuto::InTransaction => {
                "inside a transaction block reads see the transaction's own writes"
            }
            NotAuto::Off => "automatic views are off (SET aqueduct.auto_views = on)",
            NotAuto::NonConstantLimit => "a LIMIT or OFFSET that is not a constant",
            NotAuto::NoKey => "no `column = value` condition to key a view on",
        })
    }
}

impl Route {
    /// The route's name, as the first word of its `EXPLAIN` says.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Route::Roles => "roles",
            Route::CatalogRelations => "catalog relations",
            Route::ReleaseSnapshot => "release snapshot",
            Route::Views(_) => "view lookup",
            Route::Direct(b) => match &b.plan {
                Plan::Select(p) => match p.access {
                    Access::Scan => "table scan",
                    _ => "keyed table read",
                },
                Plan::Values(_) => "constant row",
                Plan::Catalog(_) => "catalog query",
                Plan::Insert(_) | Plan::Update(_) | Plan::Delete(_) | Plan::Truncate(_) => "write",
                Plan::Ddl(_) => "DDL",
                Plan::Begin { .. }
                | Plan::Commit
                | Plan::Rollback
                | Plan::Savepoint { .. }
                | Plan::ReleaseSavepoint { .. }
                | Plan::RollbackTo { .. }
                | Plan::SetConstraints { .. } => "transaction control",
                Plan::Explain { .. } => "explain",
                Plan::Set { .. }
                | Plan::SetConfig { .. }
                | Plan::ResetAll
                | Plan::LockTables
                | Plan::Maintenance { .. }
                | Plan::Show { .. }
                | Plan::Deallocate { .. }
                | Plan::ShowViews
                | Plan::ShowConsumers => "session command",
                Plan::Copy(c) => match c.direction {
                    aqueduct_plan::plan::CopyDirection::FromStdin { .. } => "copy from stdin",
                    aqueduct_plan::plan::CopyDirection::ToStdout { .. } => "copy to stdout",
                },
                Plan::Dataflow(_) => "dataflow",
                Plan::JoinLocking(_) => "locking join",
            },
            Route::AutoView { .. } => "automatic view",
            Route::OneShot { .. } => "one-shot dataflow",
        }
    }
}

impl Session {
    /// The route `st` takes now: decided once, from the statement, the
    /// catalog and this session's state.
    pub(crate) fn route(
        &self,
        st: &Statement,
        hints: &[Option<DataType>],
    ) -> Result<Route, SqlError> {
        self.route_with(st, hints, true)
    }

    /// [`Session::route`]; `release`: whether the release snapshot is a
    /// route (not for a statement being prepared: the consistency level
    /// it runs at is the one set when it is executed).
    pub(crate) fn route_with(
        &self,
        st: &Statement,
        hints: &[Option<DataType>],
        release: bool,
    ) -> Result<Route, SqlError> {
        if crate::roles::is_role_statement(st) {
            return Ok(Route::Roles);
        }
        // (`EXPLAIN` and `PREPARE` name the relations of the statement
        // they explain or keep.)
        let reads_sequences = || {
            let catalog = self.engine.database().read_in(self.txn.as_ref());
            !catalog_queries::sequences_read(&catalog, st).is_empty()
        };
        if !matches!(st, Statement::Explain { .. } | Statement::Prepare { .. })
            && (catalog_queries::uses_virtual_tables(st) || reads_sequences())
        {
            return Ok(Route::CatalogRelations);
        }
        if release && self.release_read(Some(st)).is_some() {
            return Ok(Route::ReleaseSnapshot);
        }
        if matches!(
            st,
            Statement::Query(_)
                | Statement::Insert(_)
                | Statement::Update(_)
                | Statement::Delete(_)
        ) {
            if let Some(names) = self.views_only(st) {
                return Ok(Route::Views(names));
            }
        }
        self.route_bound(st, hints)
    }

    /// The route of a statement bound against the base tables.
    pub(crate) fn route_bound(
        &self,
        st: &Statement,
        hints: &[Option<DataType>],
    ) -> Result<Route, SqlError> {
        let bound = {
            let catalog = self.engine.database().read_in(self.txn.as_ref());
            let bound = self.bind(&catalog, st, hints)?;
            // A view is compiled against the catalog now, so a bad one
            // fails before anything is written.
            if let (Plan::Ddl(Ddl::CreateView { .. }), Statement::CreateView(cv)) =
                (&bound.plan, st)
            {
                aqueduct_views::views::ViewRegistry::check(&catalog, &cv.query)?;
            }
            bound
        };
        match (bound.plan, st) {
            (Plan::Dataflow(why), Statement::Query(q)) => Ok(self.dataflow_route(q, why)),
            (Plan::Dataflow(why), _) => Err(SqlError::new(
                "XX000",
                format!("only a query can need the dataflow ({why})"),
            )),
            (plan, _) => Ok(Route::Direct(Bound { plan, ..bound })),
        }
    }

    /// An automatic view or one-shot evaluation for `q`, which needs the
    /// dataflow because of `why`.
    pub(crate) fn dataflow_route(&self, q: &ast::Query, why: NeedsDataflow) -> Route {
        let not_auto = if self.txn.is_some() {
            NotAuto::InTransaction
        } else if !self.reads.auto_views {
            NotAuto::Off
        } else {
            let lifted = lift_literals(q);
            if self.engine.views.auto_view(&lifted.sql).is_some()
                || aqueduct_views::auto_views::parameterize(&lifted.query).is_some()
            {
                return Route::AutoView {
                    why,
                    lifted: Box::new(lifted),
                };
            }
            if q.limit_clause.is_some() || q.fetch.is_some() {
                NotAuto::NonConstantLimit
            } else {
                NotAuto::NoKey
            }
        };
        Route::OneShot { why, not_auto }
    }

    /// `EXPLAIN`: the route `st` takes and why, with its dataflow (as text
    /// lines, or one Graphviz DOT document with `dot`).
    pub(crate) fn explain(&self, st: &Statement, dot: bool) -> Result<Outcome, SqlError> {
        let route = self.route(st, &[])?;
        let (mut lines, graph_dot) = self.explain_route(st, &route)?;
        lines.push(format!("route: {}", route.name()));
        if dot {
            lines = vec![graph_dot.unwrap_or_else(|| {
                "digraph aqueduct {\n  // evaluated directly: no dataflow\n}\n".into()
            })];
        }
        Ok(Outcome::Rows {
            tag: format!("EXPLAIN {}", lines.len()),
            columns: vec![Column::computed(
                "QUERY PLAN",
                aqueduct_values::DataType::Text,
            )],
            rows: lines.into_iter().map(|l| vec![Value::Text(l)]).collect(),
        })
    }

    /// What `EXPLAIN` says of `route`: its lines (the first names the
    /// route and why it was taken) and its dataflow as DOT, if any.
    pub(crate) fn explain_route(
        &self,
        st: &Statement,
        route: &Route,
    ) -> Result<(Vec<String>, Option<String>), SqlError> {
        let views = &self.engine.views;
        let is_query = matches!(st, Statement::Query(_));
        match route {
            Route::Roles => Ok((vec![format!("run directly: {st}")], None)),
            Route::CatalogRelations if is_query => Ok((
                vec!["evaluated over the catalog relations, built for the statement from the catalog (directly, or once through a temporary dataflow)".into()],
                None,
            )),
            Route::CatalogRelations => Ok((
                vec!["refused: the catalog relations are read-only".into()],
                None,
            )),
            Route::ReleaseSnapshot => {
                let inner = self.route_with(st, &[], false)?;
                let (lines, dot) = self.explain_route(st, &inner)?;
                let mut out = vec![
                    "answered as of the current release (consistency 'release'), once per release and the same for every reader; as of the newest state it would be:".to_string(),
                ];
                out.extend(lines.into_iter().map(|l| format!("  {l}")));
                Ok((out, dot))
            }
            Route::Views(_) if !is_query => {
                Ok((vec!["refused: a view cannot be written".into()], None))
            }
            Route::Views(names) => {
                let mut lines = Vec::new();
                let mut dots = Vec::new();
                for name in names {
                    lines.push(format!(
                        "read from maintained view {name} (kept current by every commit; a WHERE that pins its columns is a keyed lookup, other reads scan it, and the rest of the statement runs over those rows)"
                    ));
                    lines.extend(views.explain(name).into_iter().map(|l| format!("  {l}")));
                    dots.push(views.dot_of(name));
                }
                Ok((lines, dots.into_iter().next()))
            }
            Route::Direct(_) if !is_query => Ok((vec![format!("run directly: {st}")], None)),
            Route::Direct(b) => {
                let how = match &b.plan {
                    Plan::Select(p) => match &p.access {
                        Access::PrimaryKey(_) => "by primary-key lookup",
                        Access::PrimaryKeys(_) => {
                            "by primary-key lookups (one per key of the IN list)"
                        }
                        Access::PrimaryKeysOfArray { .. } => {
                            "by primary-key lookups (one per element of the ANY array)"
                        }
                        Access::KeyPrefix(_) => {
                            "by a range of the primary key (its first columns pinned)"
                        }
                        Access::Index(..) => "by secondary-index lookup",
                        Access::Scan => "by a scan of the table",
                    },
                    Plan::Catalog(_) => "from the catalog (a query drivers or psql send)",
                    _ => "without reading a table",
                };
                Ok((
                    vec![format!(
                        "evaluated directly over the base tables, {how} (one table needs no dataflow)"
                    )],
                    None,
                ))
            }
            Route::AutoView { why, lifted } => {
                let Statement::Query(q) = st else {
                    return Ok((vec![format!("run directly: {st}")], None));
                };
                if let Some((auto, lifted)) = self.auto_for((**lifted).clone(), false)? {
                    let mut lines = vec![format!(
                        "read from automatic view {} keyed on {} (made for: {}; needs the dataflow: {why})",
                        auto.view,
                        describe_params(&auto, &lifted),
                        lifted.sql
                    )];
                    lines.extend(
                        views
                            .explain(&auto.view)
                            .into_iter()
                            .map(|l| format!("  {l}")),
                    );
                    return Ok((lines, Some(views.dot_of(&auto.view))));
                }
                let catalog = self.engine.database().read();
                let planned =
                    aqueduct_views::auto_views::parameterize(&lifted.query).and_then(|p| {
                        let mut scratch = Graph::new();
                        let mut c = Compiler::new(&catalog, &mut scratch);
                        let compiled = c.query(&p.query).ok()?;
                        Some((p, compiled, scratch))
                    });
                match planned {
                    Some((p, compiled, mut scratch)) => {
                        scratch.view("result", compiled.node, vec![]);
                        let keys = p
                            .keys
                            .iter()
                            .map(describe_key)
                            .collect::<Vec<_>>()
                            .join(", ");
                        let mut lines = vec![format!(
                            "will be answered from an automatic view keyed on {keys}, made on first execution (for: {}; needs the dataflow: {why})",
                            lifted.sql
                        )];
                        lines.extend(
                            scratch
                                .explain("result")
                                .into_iter()
                                .map(|l| format!("  {l}")),
                        );
                        Ok((lines, Some(scratch.dot())))
                    }
                    None => self.explain_one_shot(
                        q,
                        why,
                        "the automatic view would not be made the same way it binds (see the server log)",
                    ),
                }
            }
            Route::OneShot { why, not_auto } => {
                let Statement::Query(q) = st else {
                    return Ok((vec![format!("run directly: {st}")], None));
                };
                self.explain_one_shot(q, why, &not_auto.to_string())
            }
        }
    }

    /// `EXPLAIN` of one-shot evaluation: why no view serves `q`, and the
    /// temporary dataflow.
    pub(crate) fn explain_one_shot(
        &self,
        q: &ast::Query,
        why: &NeedsDataflow,
        not_auto: &str,
    ) -> Result<(Vec<String>, Option<String>), SqlError> {
        let catalog = self.engine.database().read();
        let mut scratch = Graph::new();
        let mut c = Compiler::new(&catalog, &mut scratch);
        c.bind_time(self.time);
        c.allow_params = true;
        c.keep_order = true;
        let compiled = c.query(q)?;
        drop(c);
        scratch.view("result", compiled.node, vec![]);
        let mut lines = vec![format!(
            "evaluated once through a temporary dataflow, not maintained: {not_auto} (needs the dataflow: {why})"
        )];
        lines.extend(
            scratch
                .explain("result")
                .into_iter()
                .map(|l| format!("  {l}")),
        );
        Ok((lines, Some(scratch.dot())))
    }
}

/// `$1`, `one of $2, $3` for `EXPLAIN`.
fn describe_key(k: &KeyParam) -> String {
    let end = |b: &Option<(usize, bool)>, incl: &str, excl: &str| match b {
        None => String::new(),
        Some((n, true)) => format!(" {incl} ${}", n + 1),
        Some((n, false)) => format!(" {excl} ${}", n + 1),
    };
    match k {
        KeyParam::Range { low, high } => {
            format!("a range ({}{} )", end(low, ">=", ">"), end(high, "<=", "<"))
        }
        KeyParam::One(n) => format!("${}", n + 1),
        KeyParam::Or(n) => format!("or ${}", n + 1),
        KeyParam::Many(ns) => format!(
            "one of {}",
            ns.iter()
                .map(|n| format!("${}", n + 1))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The keys of an automatic view and where their values come from, for
/// `EXPLAIN`.
fn describe_params(auto: &AutoView, lifted: &Lifted) -> String {
    let own = auto.param_types.len() - lifted.literals.len();
    let mut out = auto
        .keys
        .iter()
        .map(describe_key)
        .collect::<Vec<_>>()
        .join(", ");
    if own < auto.param_types.len() {
        out.push_str(&format!(" (from ${} on: literals of the query)", own + 1));
    }
    if auto.limit.is_some() || auto.offset > 0 {
        out.push_str("; a top-k per key");
    }
    out
}
