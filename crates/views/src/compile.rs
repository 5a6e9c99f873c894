//! Compiling a SELECT into dataflow operators, so a view is maintained
//! incrementally (see `docs/dataflow.md`, "From SQL to operators").
//!
//! The FROM clause becomes sources and joins; the clauses after FROM are
//! bound by the same code direct evaluation uses (`Binder::select_body`),
//! then turned into operators: filter → (project + aggregate + filter for
//! HAVING) → project → distinct → top-k → project dropping sort columns.
//! Operators identical to ones already in the graph are reused.

use std::collections::HashMap;

use aqueduct_dataflow::graph::{Graph, NodeId};
use aqueduct_dataflow::ops::{
    AggCall, Aggregate, Distinct, Expand, Filter, Join, JoinKind, Project, SetFunction, SortColumn,
    TopK, Union, Window,
};
use aqueduct_expr::{BinOp, Env, Expr};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use aqueduct_expr::SqlError;

use aqueduct_plan::bind::{ident, object_name, Binder, Scope, ScopeColumn};
use aqueduct_plan::plan::{Column, SelectBody, StatementTime, WindowItem};

/// What a compiled query produces.
pub struct Compiled {
    pub node: NodeId,
    pub columns: Vec<Column>,
    /// With [`Compiler::keep_order`]: the top-level ORDER BY over the output
    /// rows, which then carry hidden sort columns after `columns`.
    pub order: Vec<SortColumn>,
}

/// The qualifier of the columns set-returning functions in a select list
/// add (not one a query can name: it starts with a space).
const SET_FUNCTION_QUALIFIER: &str = " set function";

/// The source ids functions in `FROM` are read as: above every table id
/// and catalog relation id.
pub const FUNCTION_SOURCE_IDS: aqueduct_tables::TableId = u64::MAX / 8 * 3;

/// Deepest nesting of queries (views over views, subqueries) compiled.
pub const MAX_VIEW_NESTING: usize = 32;

pub struct Compiler<'a, 'g> {
    binder: Binder<'a>,
    graph: &'g mut Graph,
    /// Nodes this compilation added (they must be initialised).
    pub new_nodes: Vec<NodeId>,
    ctes: HashMap<String, (NodeId, Vec<Column>)>,
    /// Keep the top-level ORDER BY (for a result read once and sorted),
    /// instead of dropping it as a view's unordered rows do.
    pub keep_order: bool,
    /// Accept unbound parameters (to describe a statement, not to run it).
    pub allow_params: bool,
    /// The statement's parameters, when bound (one-shot evaluation).
    values: Vec<Value>,
    /// Rows of the functions in `FROM` (`generate_series`, `unnest`), by
    /// the source id each is read as (one-shot evaluation).
    pub function_rows: Vec<(aqueduct_tables::TableId, Vec<aqueduct_dataflow::Row>)>,
    /// Compiled to run once and be thrown away: a join with no equality
    /// between its sides (every pair of rows) is allowed, as its state is
    /// never kept.
    pub one_shot: bool,
    /// The top-level query's last this-many output columns are the keys of
    /// an automatic view: its ORDER BY ... LIMIT keeps a top-k per key.
    pub partition_last: usize,
    /// Nesting of queries being compiled (1 = the top level).
    depth: usize,
    /// The top-level ORDER BY, when kept.
    order: Vec<SortColumn>,
}

fn unsupported_in_view(what: &str) -> SqlError {
    SqlError::unsupported(format!("{what} in a maintained view"))
}

fn scope_of(columns: &[Column], qualifier: &str) -> Scope {
    Scope {
        columns: columns
            .iter()
            .map(|c| ScopeColumn {
                qualifier: Some(qualifier.to_string()),
                name: c.name.clone(),
                // Expressions over a numeric(p, s) column are plain numeric.
                ty: c.ty.unconstrained(),
                qualified_only: false,
                table: None,
            })
            .collect(),
    }
}

fn constant(e: &Option<Expr>, what: &str) -> Result<Option<usize>, SqlError> {
    let Some(e) = e else { return Ok(None) };
    if !e.is_constant() {
        return Err(unsupported_in_view(&format!("a non-constant {what}")));
    }
    match e.eval(&Env::new(&[], &[]))? {
        Value::Null => Ok(None),
        Value::Int(n) if n >= 0 => Ok(Some(n as usize)),
        Value::Int(_) => Err(SqlError::new(
            "2201W",
            format!("{what} must not be negative"),
        )),
        _ => Err(SqlError::datatype_mismatch(format!(
            "{what} must be an integer"
        ))),
    }
}

impl<'a, 'g> Compiler<'a, 'g> {
    pub fn new(catalog: &'a aqueduct_tables::Catalog, graph: &'g mut Graph) -> Compiler<'a, 'g> {
        Compiler {
            binder: Binder::new(catalog),
            graph,
            new_nodes: Vec::new(),
            ctes: HashMap::new(),
            keep_order: false,
            allow_params: false,
            one_shot: false,
            values: Vec::new(),
            function_rows: Vec::new(),
            partition_last: 0,
            depth: 0,
            order: Vec::new(),
        }
    }

    /// Binds parameters `$n` to `values` as constants.
    pub fn bind_values(&mut self, values: Vec<aqueduct_values::Value>) {
        self.values = values.clone();
        self.binder.set_values(values);
    }

    /// Lets the query have subqueries in expressions, prepared by
    /// `compiler` (one-shot evaluation's).
    pub fn allow_subqueries(
        &mut self,
        compiler: std::sync::Arc<dyn aqueduct_plan::plan::SubqueryCompiler>,
    ) {
        self.binder.allow_subqueries(compiler);
    }

    /// Binds `now()` and its kin to `time` (a query evaluated once; a
    /// maintained view refuses them).
    pub fn bind_time(&mut self, time: StatementTime) {
        self.binder.set_time(time);
    }

    /// The definition of the view `name`, if there is one.
    fn view_sql(&self, name: &str) -> Option<String> {
        self.binder
            .catalog()
            .views
            .values()
            .find(|(n, _)| n == name)
            .map(|(_, sql)| sql.clone())
    }

    /// Parameter types the client declared.
    pub fn seed_param_types(&mut self, hints: &[Option<DataType>]) {
        self.binder.seed_param_types(hints);
    }

    /// The parameters' types, as the statement shows them.
    pub fn param_types(&self) -> Vec<DataType> {
        self.binder.param_types()
    }

    fn add(&mut self, op: Box<dyn aqueduct_dataflow::Operator>, parents: Vec<NodeId>) -> NodeId {
        let (id, new) = self.graph.operator(op, parents);
        if new {
            self.new_nodes.push(id);
        }
        id
    }

    pub fn query(&mut self, q: &ast::Query) -> Result<Compiled, SqlError> {
        self.depth += 1;
        let out = aqueduct_plan::limits::grow(|| self.query_inner(q));
        self.depth -= 1;
        let mut out = out?;
        if self.depth == 0 {
            out.order = std::mem::take(&mut self.order);
        }
        Ok(out)
    }

    fn query_inner(&mut self, q: &ast::Query) -> Result<Compiled, SqlError> {
        if let Some(with) = &q.with {
            if with.recursive {
                return Err(unsupported_in_view("WITH RECURSIVE"));
            }
            for cte in &with.cte_tables {
                let compiled = self.query(&cte.query)?;
                self.ctes
                    .insert(ident(&cte.alias.name), (compiled.node, compiled.columns));
            }
        }
        let (limit, offset) = self.binder.limit(q)?;
        match q.body.as_ref() {
            ast::SetExpr::Select(s) => self.select(s, q.order_by.as_ref(), limit, offset),
            ast::SetExpr::Query(inner) if q.order_by.is_none() && limit.is_none() => {
                self.query(inner)
            }
            ast::SetExpr::SetOperation {
                op: ast::SetOperator::Union,
                set_quantifier,
                left,
                right,
            } => {
                let top = self.keep_order && self.depth == 1;
                self.union(
                    set_quantifier,
                    left,
                    right,
                    q.order_by.as_ref(),
                    limit,
                    offset,
                    top,
                )
            }
            ast::SetExpr::Values(v)
                if self.one_shot && q.order_by.is_none() && limit.is_none() && offset.is_none() =>
            {
                self.values(v)
            }
            other => Err(unsupported_in_view(&format!("{other}"))),
        }
    }

    /// `left UNION [ALL] right`, with the `ORDER BY` / `LIMIT` / `OFFSET`
    /// of the query it is the body of (`top`: the outermost query's order
    /// is kept for its reader).
    #[allow(clippy::too_many_arguments)]
    fn union(
        &mut self,
        set_quantifier: &ast::SetQuantifier,
        left: &ast::SetExpr,
        right: &ast::SetExpr,
        order_by: Option<&ast::OrderBy>,
        limit: Option<Expr>,
        offset: Option<Expr>,
        top: bool,
    ) -> Result<Compiled, SqlError> {
        let l = self.set_expr(left)?;
        let r = self.set_expr(right)?;
        if l.columns.len() != r.columns.len() {
            return Err(SqlError::new(
                "42601",
                "each UNION query must have the same number of columns",
            ));
        }
        let (left_node, right_node, columns) = self.union_types(l, r)?;
        let width = columns.len();
        let mut node = self.add(Box::new(Union::new(2, width)), vec![left_node, right_node]);
        if !matches!(set_quantifier, ast::SetQuantifier::All) {
            node = self.add(Box::new(Distinct::new()), vec![node]);
        }
        // ORDER BY / LIMIT of a UNION sort its output columns.
        let order = union_order(order_by, &columns)?;
        let limit = constant(&limit, "LIMIT")?;
        let offset = constant(&offset, "OFFSET")?.unwrap_or(0);
        if limit.is_some() || offset > 0 {
            node = self.add(
                Box::new(TopK::new(vec![], order.clone(), limit, offset)),
                vec![node],
            );
        }
        if top {
            self.order = order;
        }
        Ok(Compiled {
            node,
            columns,
            order: Vec::new(),
        })
    }

    /// The two sides of a UNION with one type per column: where one side
    /// is text (say, a quoted literal) or a narrower number, it is cast to
    /// the other side's type, as PostgreSQL resolves the column.
    fn union_types(
        &mut self,
        l: Compiled,
        r: Compiled,
    ) -> Result<(NodeId, NodeId, Vec<Column>), SqlError> {
        let mut columns = l.columns.clone();
        let mut casts = (vec![], vec![]);
        for (i, (a, b)) in l.columns.iter().zip(&r.columns).enumerate() {
            let (ta, tb) = (&a.ty, &b.ty);
            let target = if ta == tb {
                None
            } else if *tb == DataType::Text || widens(tb, ta) {
                Some((1, ta.clone()))
            } else if *ta == DataType::Text || widens(ta, tb) {
                Some((0, tb.clone()))
            } else {
                return Err(SqlError::new(
                    "42804",
                    format!("UNION types {ta} and {tb} cannot be matched"),
                ));
            };
            let cast = |side: usize| match &target {
                Some((s, ty)) if *s == side => Expr::Cast(Box::new(Expr::Column(i)), ty.clone()),
                _ => Expr::Column(i),
            };
            casts.0.push(cast(0));
            casts.1.push(cast(1));
            if let Some((_, ty)) = &target {
                columns[i].ty = ty.clone();
            }
        }
        let identity = |v: &[Expr]| v.iter().all(|e| matches!(e, Expr::Column(_)));
        let left = if identity(&casts.0) {
            l.node
        } else {
            self.add(Box::new(Project::new(casts.0)), vec![l.node])
        };
        let right = if identity(&casts.1) {
            r.node
        } else {
            self.add(Box::new(Project::new(casts.1)), vec![r.node])
        };
        Ok((left, right, columns))
    }

    fn set_expr(&mut self, e: &ast::SetExpr) -> Result<Compiled, SqlError> {
        match e {
            ast::SetExpr::Select(s) => self.select(s, None, None, None),
            ast::SetExpr::Query(q) => self.query(q),
            // Arms of a chain of UNIONs, compiled in place: a copy of each
            // arm's rest of the chain would be quadratic in its length.
            ast::SetExpr::SetOperation {
                op: ast::SetOperator::Union,
                set_quantifier,
                left,
                right,
            } => aqueduct_plan::limits::grow(|| {
                self.union(set_quantifier, left, right, None, None, None, false)
            }),
            ast::SetExpr::SetOperation { .. } => Err(unsupported_in_view(&format!("{e}"))),
            ast::SetExpr::Values(v) if self.one_shot => self.values(v),
            other => self.query(&ast::Query {
                with: None,
                body: Box::new(other.clone()),
                order_by: None,
                limit_clause: None,
                fetch: None,
                locks: vec![],
                for_clause: None,
                settings: None,
                format_clause: None,
                pipe_operators: vec![],
            }),
        }
    }

    /// A FROM item: a table, a CTE or a subquery, with the scope it brings.
    fn relation(&mut self, f: &ast::TableFactor) -> Result<(NodeId, Scope), SqlError> {
        // A plan of thousands of joins takes long, and its scopes much
        // memory, to compile.
        aqueduct_expr::interrupt::check()?;
        match f {
            ast::TableFactor::Table {
                name,
                alias,
                args: Some(args),
                with_ordinality,
                ..
            } if self.one_shot => {
                let args: Vec<&ast::Expr> = args
                    .args
                    .iter()
                    .map(|a| match a {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e),
                        other => Err(unsupported_in_view(&format!("the argument {other}"))),
                    })
                    .collect::<Result<_, _>>()?;
                let n = object_name(name)?;
                self.function_source(&n, &args, alias.as_ref(), *with_ordinality)
            }
            ast::TableFactor::UNNEST {
                alias,
                array_exprs,
                with_offset: false,
                with_ordinality,
                ..
            } if self.one_shot => {
                let args: Vec<&ast::Expr> = array_exprs.iter().collect();
                self.function_source("unnest", &args, alias.as_ref(), *with_ordinality)
            }
            ast::TableFactor::Table { name, alias, .. } => {
                let n = object_name(name)?;
                let qualifier = alias.as_ref().map(|a| ident(&a.name)).unwrap_or(n.clone());
                if let Some((node, columns)) = self.ctes.get(&n) {
                    return Ok((*node, scope_of(columns, &qualifier)));
                }
                // A view over a view compiles the inner view's query in
                // place; its operators are found again by signature, so the
                // two views share them.
                if self.binder.table(&n).is_err() {
                    if let Some(sql) = self.view_sql(&n) {
                        if self.depth > MAX_VIEW_NESTING {
                            return Err(SqlError::new(
                                "54001",
                                format!("views nested more than {MAX_VIEW_NESTING} deep"),
                            ));
                        }
                        let inner = aqueduct_plan::parse::view_query(&sql)?;
                        let compiled = self.query(&inner)?;
                        return Ok((compiled.node, scope_of(&compiled.columns, &qualifier)));
                    }
                }
                let t = self.binder.table(&n)?;
                let node = self.graph.source(t.schema.id, &t.schema.name);
                Ok((node, Scope::table(t, &qualifier)))
            }
            ast::TableFactor::Derived {
                subquery, alias, ..
            } => {
                let compiled = self.query(subquery)?;
                let qualifier = alias
                    .as_ref()
                    .map(|a| ident(&a.name))
                    .ok_or_else(|| SqlError::syntax("a subquery in FROM must have an alias"))?;
                let mut scope = scope_of(&compiled.columns, &qualifier);
                // `AS v(a, b)` names its columns.
                let names = alias.iter().flat_map(|a| a.columns.iter());
                for (c, name) in scope.columns.iter_mut().zip(names) {
                    c.name = ident(&name.name);
                }
                Ok((compiled.node, scope))
            }
            ast::TableFactor::NestedJoin {
                table_with_joins, ..
            } => self.join_item(table_with_joins, &mut Vec::new()),
            other => Err(unsupported_in_view(&format!("{other}"))),
        }
    }

    /// `VALUES (...), (...)` evaluated once: its rows, made now, as a
    /// source with columns `column1`, `column2`, ...
    fn values(&mut self, v: &ast::Values) -> Result<Compiled, SqlError> {
        let mut rows = Vec::new();
        let mut types: Vec<Option<DataType>> = Vec::new();
        for row in &v.rows {
            let mut out = Vec::new();
            for (i, e) in row.iter().enumerate() {
                let bound = self.binder.expr(e, &Scope::empty(), None)?;
                if types.len() <= i {
                    types.push(None);
                }
                if types[i].is_none() {
                    types[i] = self.binder.known_type(&bound, &Scope::empty());
                }
                out.push(bound.eval(&Env::new(&[], &self.values))?);
            }
            if rows
                .first()
                .is_some_and(|r: &Vec<Value>| r.len() != out.len())
            {
                return Err(SqlError::new(
                    "42601",
                    "VALUES lists must all be the same length",
                ));
            }
            rows.push(out);
        }
        let columns: Vec<Column> = types
            .into_iter()
            .enumerate()
            .map(|(i, t)| Column::computed(format!("column{}", i + 1), t.unwrap_or(DataType::Text)))
            .collect();
        for r in &mut rows {
            for (v, c) in r.iter_mut().zip(&columns) {
                *v = std::mem::replace(v, Value::Null).coerce(&c.ty)?;
            }
        }
        let (node, _) = self.rows_source("values", rows);
        Ok(Compiled {
            node,
            columns,
            order: Vec::new(),
        })
    }

    /// A source of rows made now (one-shot evaluation), with an empty
    /// scope.
    fn rows_source(&mut self, name: &str, rows: Vec<aqueduct_dataflow::Row>) -> (NodeId, Scope) {
        let id = FUNCTION_SOURCE_IDS + self.function_rows.len() as u64;
        self.function_rows.push((id, rows));
        (self.graph.source(id, name), Scope::empty())
    }

    /// A function in `FROM` (`generate_series`, `unnest`): its rows, made
    /// now from its constant arguments, read as a source of their own.
    fn function_source(
        &mut self,
        name: &str,
        args: &[&ast::Expr],
        alias: Option<&ast::TableAlias>,
        with_ordinality: bool,
    ) -> Result<(NodeId, Scope), SqlError> {
        let n = name.strip_prefix("pg_catalog.").unwrap_or(name).to_string();
        let mut values = Vec::new();
        for e in args {
            let bound = self.binder.expr(e, &Scope::empty(), None)?;
            let ty = self.binder.known_type(&bound, &Scope::empty());
            let v = bound.eval(&Env::new(&[], &self.values))?;
            values.push((v, ty));
        }
        let made = crate::table_functions::rows(&n, &values)?.ok_or_else(|| {
            SqlError::new("42883", format!("function {n}() does not exist in FROM"))
                .with_hint("FROM takes generate_series(start, stop [, step]), unnest(array), pg_options_to_table(options) and pg_partition_ancestors(relation)")
        })?;
        let mut rows = made.rows;
        if with_ordinality {
            for (i, r) in rows.iter_mut().enumerate() {
                r.push(Value::Int(i as i64 + 1));
            }
        }
        let (node, _) = self.rows_source(&n, rows);
        let qualifier = alias.map(|a| ident(&a.name)).unwrap_or(n.clone());
        let named = |i: usize| alias.and_then(|a| a.columns.get(i)).map(|c| ident(&c.name));
        let single = made.columns.len() == 1;
        let mut columns: Vec<ScopeColumn> = made
            .columns
            .into_iter()
            .enumerate()
            .map(|(i, (name, ty))| ScopeColumn {
                qualifier: Some(qualifier.clone()),
                // A function of one column named by its alias alone
                // (`generate_series(1, 3) s`) has the alias as its name.
                name: named(i).unwrap_or_else(|| {
                    if single && alias.is_some() && name == n {
                        qualifier.clone()
                    } else {
                        name
                    }
                }),
                ty,
                qualified_only: false,
                table: None,
            })
            .collect();
        if with_ordinality {
            columns.push(ScopeColumn {
                qualifier: Some(qualifier.clone()),
                name: named(columns.len()).unwrap_or_else(|| "ordinality".into()),
                ty: DataType::Int8,
                qualified_only: false,
                table: None,
            });
        }
        Ok((node, Scope { columns }))
    }

    /// Joins `left` and `right` on the equalities in `on` (conjuncts of
    /// `left.col = right.col`); other conjuncts filter an inner join.
    fn join(
        &mut self,
        left: (NodeId, Scope),
        right: (NodeId, Scope),
        kind: JoinKind,
        on: Option<&ast::Expr>,
        extra: &mut Vec<Expr>,
    ) -> Result<(NodeId, Scope), SqlError> {
        let lw = left.1.columns.len();
        let rw = right.1.columns.len();
        let mut scope = left.1.clone();
        scope.columns.extend(right.1.columns.iter().cloned());
        let mut conjuncts = Vec::new();
        if let Some(on) = on {
            let bound = self.binder.expr(on, &scope, Some(&DataType::Bool))?;
            split_and(bound, &mut conjuncts);
        }
        // Conditions from WHERE that link a comma-separated FROM item.
        let mut keys: Vec<(usize, usize)> = Vec::new();
        let mut residual = Vec::new();
        // `b.attnum = a.conkey[1]`: an expression over the left side equal
        // to a right column is a key too, computed into a left column
        // (after the left's own, at `lw + i`).
        let mut computed: Vec<Expr> = Vec::new();
        let left_only = |e: &Expr| {
            let cols = e.columns();
            !cols.is_empty() && cols.iter().all(|&i| i < lw)
        };
        for c in conjuncts.into_iter().chain(std::mem::take(extra)) {
            if let Expr::Binary(BinOp::Eq, a, b) = &c {
                match (a.as_ref(), b.as_ref()) {
                    (Expr::Column(i), Expr::Column(j)) | (Expr::Column(j), Expr::Column(i))
                        if *i < lw && *j >= lw && *j < lw + rw =>
                    {
                        keys.push((*i, *j - lw));
                        continue;
                    }
                    (e, Expr::Column(j)) | (Expr::Column(j), e)
                        if *j >= lw && *j < lw + rw && left_only(e) =>
                    {
                        computed.push(e.clone());
                        keys.push((lw + computed.len() - 1, *j - lw));
                        continue;
                    }
                    _ => {}
                }
            }
            residual.push(c);
        }
        if keys.is_empty() && !self.one_shot {
            return Err(SqlError::unsupported(
                "a join without an equality between its two sides (it would need unbounded state)",
            )
            .with_hint("join on columns, e.g. ON a.id = b.a_id"));
        }
        // A LEFT JOIN condition that reads only the right side's columns
        // (`ON a.id = b.a_id AND b.kind = 'x'`) picks the right rows that
        // may match: it filters the right input before the join.
        let mut right_node = right.0;
        if kind == JoinKind::Left {
            let (right_only, rest): (Vec<Expr>, Vec<Expr>) = residual
                .into_iter()
                .partition(|c| c.columns().iter().all(|&i| i >= lw && i < lw + rw));
            residual = rest;
            for mut c in right_only {
                c.walk_mut(&mut |e| {
                    if let Expr::Column(i) = e {
                        *i -= lw;
                    }
                });
                right_node = self.add(Box::new(Filter::new(c)), vec![right_node]);
            }
        }
        // One that reads only the left side's columns (`ON c.kind = 'S'
        // AND d.id = c.id`) decides which left rows may match: their key
        // is NULL (which never matches) where it does not hold.
        let mut left_only = Vec::new();
        if kind == JoinKind::Left {
            let (l, rest): (Vec<Expr>, Vec<Expr>) = residual
                .into_iter()
                .partition(|c| c.columns().iter().all(|&i| i < lw));
            left_only = l;
            residual = rest;
        }
        if kind == JoinKind::Left && !residual.is_empty() {
            return Err(unsupported_in_view(
                "a LEFT JOIN condition that reads both sides other than column equalities",
            ));
        }
        if !left_only.is_empty() && keys.is_empty() {
            return Err(unsupported_in_view(
                "a LEFT JOIN with no equality between its sides and a condition on the left side",
            ));
        }
        for &(l, r) in &keys {
            // (A computed key's type is its expression's.)
            let lt = match scope.columns.get(l).filter(|_| l < lw) {
                Some(c) => c.ty.clone(),
                None => self
                    .binder
                    .known_type(&computed[l - lw], &scope)
                    .unwrap_or(DataType::Text),
            };
            let (lt, rt) = (&lt, &scope.columns[lw + r].ty);
            if lt.is_textual() != rt.is_textual() {
                return Err(SqlError::new(
                    "42883",
                    format!("operator does not exist: {lt} = {rt}"),
                )
                .with_hint("cast one side, e.g. CAST(col AS date)"));
            }
        }
        let (lk, rk): (Vec<usize>, Vec<usize>) = keys.into_iter().unzip();
        let mut node = if left_only.is_empty() && computed.is_empty() {
            self.add(
                Box::new(Join::new(kind, lk, rk, rw).with_left_width(lw)),
                vec![left.0, right_node],
            )
        } else {
            // The left side with its computed keys, and with its keys NULL
            // where a condition on it alone does not hold.
            let mut outputs: Vec<Expr> = (0..lw).map(Expr::Column).collect();
            outputs.extend(computed.iter().cloned());
            let mut width = outputs.len();
            let mut keys_left = lk.clone();
            if let Some(cond) = left_only
                .into_iter()
                .reduce(|a, b| Expr::Binary(BinOp::And, Box::new(a), Box::new(b)))
            {
                outputs.extend(lk.iter().map(|&k| Expr::Case {
                    operand: None,
                    whens: vec![(cond.clone(), Expr::Column(k))],
                    otherwise: None,
                }));
                keys_left = (width..width + lk.len()).collect();
                width += lk.len();
            }
            let keyed = self.add(Box::new(Project::new(outputs)), vec![left.0]);
            let joined = self.add(
                Box::new(Join::new(kind, keys_left, rk, rw).with_left_width(width)),
                vec![keyed, right_node],
            );
            let back: Vec<Expr> = (0..lw).chain(width..width + rw).map(Expr::Column).collect();
            self.add(Box::new(Project::new(back)), vec![joined])
        };
        for r in residual {
            node = self.add(Box::new(Filter::new(r)), vec![node]);
        }
        Ok((node, scope))
    }

    fn join_item(
        &mut self,
        twj: &ast::TableWithJoins,
        extra: &mut Vec<Expr>,
    ) -> Result<(NodeId, Scope), SqlError> {
        let mut acc = self.relation(&twj.relation)?;
        for j in &twj.joins {
            let right = self.relation(&j.relation)?;
            let (kind, constraint) = match &j.join_operator {
                ast::JoinOperator::Join(c) | ast::JoinOperator::Inner(c) => (JoinKind::Inner, c),
                ast::JoinOperator::Left(c) | ast::JoinOperator::LeftOuter(c) => (JoinKind::Left, c),
                other => {
                    return Err(unsupported_in_view(&format!(
                        "the join {}",
                        format!("{other:?}").split('(').next().unwrap_or("")
                    )))
                }
            };
            let mut using = Vec::new();
            let on = match constraint {
                ast::JoinConstraint::On(e) => Some(e),
                // `USING (a, b)`: each column of that name on the left
                // equals the right's (both stay in scope).
                ast::JoinConstraint::Using(names) => {
                    let lw = acc.1.columns.len();
                    for n in names {
                        let name = object_name(n)?;
                        let find = |scope: &Scope| {
                            scope.columns.iter().rposition(|c| c.name == name).ok_or_else(|| {
                                SqlError::new(
                                    "42703",
                                    format!("column \"{name}\" specified in USING clause does not exist in both tables"),
                                )
                            })
                        };
                        let (l, r) = (find(&acc.1)?, find(&right.1)?);
                        using.push(Expr::Binary(
                            BinOp::Eq,
                            Box::new(Expr::Column(l)),
                            Box::new(Expr::Column(lw + r)),
                        ));
                    }
                    None
                }
                _ => return Err(unsupported_in_view("a join without ON or USING")),
            };
            acc = self.join(acc, right, kind, on, &mut using)?;
        }
        let _ = extra;
        Ok(acc)
    }

    fn select(
        &mut self,
        s: &ast::Select,
        order_by: Option<&ast::OrderBy>,
        limit: Option<Expr>,
        offset: Option<Expr>,
    ) -> Result<Compiled, SqlError> {
        let (mut acc, rest) = match s.from.split_first() {
            Some((first, rest)) => (self.join_item(first, &mut Vec::new())?, rest),
            // Once: one row of no columns to select from.
            None if self.one_shot => (self.rows_source("one row", vec![Vec::new()]), &[][..]),
            None => return Err(unsupported_in_view("a SELECT without FROM")),
        };
        // Comma-separated items join on equalities found in WHERE.
        let mut where_conjuncts: Vec<ast::Expr> = Vec::new();
        if let Some(w) = &s.selection {
            split_ast_and(w, &mut where_conjuncts);
        }
        let mut remaining = where_conjuncts;
        for item in rest {
            // `FROM t, unnest(t.a) WITH ORDINALITY x(v, i)`: a function
            // over the items before it expands their rows.
            if let Some(lateral) = self.lateral_function(item, &acc)? {
                acc = lateral;
                continue;
            }
            let right = self.join_item(item, &mut Vec::new())?;
            let mut scope = acc.1.clone();
            scope.columns.extend(right.1.columns.iter().cloned());
            let mut linking = Vec::new();
            let mut keep = Vec::new();
            for c in remaining {
                match self.binder.expr(&c, &scope, Some(&DataType::Bool)) {
                    Ok(bound) if links(&bound, acc.1.columns.len()) => linking.push(bound),
                    _ => keep.push(c),
                }
            }
            remaining = keep;
            acc = self.join(acc, right, JoinKind::Inner, None, &mut linking)?;
        }
        let (mut input, mut scope) = acc;
        let mut select = s.clone();
        select.selection = conjoin(remaining);
        // Set-returning functions in the select list expand each row
        // after WHERE (`expand.rs`); the list then reads their columns.
        if let Some(functions) = self.set_functions(&mut select, &scope)? {
            if let Some(w) = select.selection.take() {
                let cond = self.binder.expr(&w, &scope, Some(&DataType::Bool))?;
                input = self.add(Box::new(Filter::new(cond)), vec![input]);
            }
            let width = scope.columns.len();
            let mut set = Vec::new();
            for (i, (f, ty)) in functions.into_iter().enumerate() {
                set.push(f);
                scope.columns.push(ScopeColumn {
                    qualifier: Some(SET_FUNCTION_QUALIFIER.into()),
                    name: format!("f{i}"),
                    ty,
                    qualified_only: true,
                    table: None,
                });
            }
            input = self.add(Box::new(Expand::new(set, width)), vec![input]);
        }
        // A column of a table keeps its table, position and declared type
        // (`numeric(p, s)` with its modifier) in the result's metadata, as
        // in a read of one table.
        let catalog = self.binder.catalog();
        let origin = |c: usize| {
            let col = &scope.columns[c];
            let declared = col.table.and_then(|(id, i)| {
                let t = catalog.table_by_id(id)?;
                Some((id, i, t.schema.columns.get(i)?.ty.clone()))
            });
            match declared {
                Some((table_id, i, ty)) => Column {
                    name: col.name.clone(),
                    ty,
                    table_id,
                    column_id: (i + 1) as i16,
                },
                None => Column::computed(col.name.clone(), col.ty.clone()),
            }
        };
        let (body, columns) = self
            .binder
            .select_body(&scope, &origin, &select, order_by, limit, offset)?;
        if self.binder.has_params() && !self.allow_params {
            return Err(unsupported_in_view("a parameter"));
        }
        let node = self.body(input, scope.columns.len(), body)?;
        Ok(Compiled {
            node,
            columns,
            order: Vec::new(),
        })
    }

    /// A comma item that is `unnest(...)` or `generate_series(...)` over
    /// columns of the items before it (`acc`): those rows expanded by it
    /// (`expand.rs`), with its columns in scope. `None` for any other item.
    fn lateral_function(
        &mut self,
        item: &ast::TableWithJoins,
        acc: &(NodeId, Scope),
    ) -> Result<Option<(NodeId, Scope)>, SqlError> {
        if !item.joins.is_empty() {
            return Ok(None);
        }
        let (name, args, alias, ordinality): (String, Vec<&ast::Expr>, _, bool) = match &item
            .relation
        {
            ast::TableFactor::Table {
                name,
                alias,
                args: Some(args),
                with_ordinality,
                ..
            } => {
                let mut exprs = Vec::new();
                for a in &args.args {
                    match a {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => exprs.push(e),
                        _ => return Ok(None),
                    }
                }
                (object_name(name)?, exprs, alias.as_ref(), *with_ordinality)
            }
            ast::TableFactor::UNNEST {
                alias,
                array_exprs,
                with_offset: false,
                with_ordinality,
                ..
            } => (
                "unnest".into(),
                array_exprs.iter().collect(),
                alias.as_ref(),
                *with_ordinality,
            ),
            _ => return Ok(None),
        };
        let name = name
            .strip_prefix("pg_catalog.")
            .unwrap_or(&name)
            .to_string();
        if !matches!(name.as_str(), "unnest" | "generate_series") {
            return Ok(None);
        }
        // Lateral only when an argument reads the items before it.
        let mut bound = Vec::new();
        for a in &args {
            match self.binder.expr(a, &acc.1, None) {
                Ok(e) => bound.push(e),
                Err(_) => return Ok(None),
            }
        }
        if bound.iter().all(|e| e.columns().is_empty()) {
            return Ok(None);
        }
        let mut functions = Vec::new();
        let mut types = Vec::new();
        if name == "unnest" {
            for e in bound {
                types.push(match self.binder.known_type(&e, &acc.1) {
                    Some(DataType::Array(t)) => *t,
                    Some(DataType::Vector(aqueduct_values::VectorKind::Int2)) => DataType::Int2,
                    Some(DataType::Vector(aqueduct_values::VectorKind::Oid)) => DataType::Oid,
                    _ => DataType::Text,
                });
                functions.push(SetFunction::Unnest(e));
            }
        } else {
            let mut it = bound.into_iter();
            let (Some(a), Some(b)) = (it.next(), it.next()) else {
                return Err(SqlError::new(
                    "42883",
                    "generate_series takes two or three arguments",
                ));
            };
            functions.push(SetFunction::Series(a, b, it.next()));
            types.push(DataType::Int4);
        }
        if ordinality {
            functions.push(SetFunction::Ordinality);
            types.push(DataType::Int8);
        }
        let qualifier = alias.map(|a| ident(&a.name)).unwrap_or(name.clone());
        let width = acc.1.columns.len();
        let node = self.add(Box::new(Expand::new(functions, width)), vec![acc.0]);
        let mut scope = acc.1.clone();
        let single = types.len() == 1;
        for (i, ty) in types.into_iter().enumerate() {
            let given = alias.and_then(|a| a.columns.get(i)).map(|c| ident(&c.name));
            let default = if ordinality && i + 1 == scope.columns.len() - width + 1 && !single {
                "ordinality".to_string()
            } else if single && alias.is_some() {
                qualifier.clone()
            } else {
                name.clone()
            };
            scope.columns.push(ScopeColumn {
                qualifier: Some(qualifier.clone()),
                name: given.unwrap_or(default),
                ty,
                qualified_only: false,
                table: None,
            });
        }
        Ok(Some((node, scope)))
    }

    /// The set-returning functions of `select`'s list (`unnest(a)`,
    /// `generate_subscripts(a, 1)`, `generate_series(x, y)` as whole
    /// items), bound over `scope`; each item becomes a reference to the
    /// column its function's values will be in, keeping its name. `None`
    /// when there is none.
    fn set_functions(
        &mut self,
        select: &mut ast::Select,
        scope: &Scope,
    ) -> Result<Option<Vec<(SetFunction, DataType)>>, SqlError> {
        let mut found = Vec::new();
        for item in &mut select.projection {
            let (expr, alias) = match item {
                ast::SelectItem::UnnamedExpr(e) => (e.clone(), None),
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    (expr.clone(), Some(alias.clone()))
                }
                _ => continue,
            };
            let ast::Expr::Function(f) = &expr else {
                continue;
            };
            let name = object_name(&f.name)?;
            let name = name
                .strip_prefix("pg_catalog.")
                .unwrap_or(&name)
                .to_string();
            if !matches!(
                name.as_str(),
                "unnest" | "generate_subscripts" | "generate_series"
            ) {
                continue;
            }
            let ast::FunctionArguments::List(list) = &f.args else {
                continue;
            };
            let mut args = Vec::new();
            for a in &list.args {
                let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = a else {
                    return Err(unsupported_in_view(&format!("the argument {a} of {name}")));
                };
                args.push(self.binder.expr(e, scope, None)?);
            }
            let (function, ty) = match (name.as_str(), args.as_slice()) {
                ("unnest", [a]) => {
                    let ty = match self.binder.known_type(a, scope) {
                        Some(DataType::Array(e)) => *e,
                        Some(DataType::Vector(aqueduct_values::VectorKind::Int2)) => DataType::Int2,
                        Some(DataType::Vector(aqueduct_values::VectorKind::Oid)) => DataType::Oid,
                        _ => DataType::Text,
                    };
                    (SetFunction::Unnest(a.clone()), ty)
                }
                ("generate_subscripts", [a, d]) => (
                    SetFunction::Subscripts(a.clone(), d.clone()),
                    DataType::Int4,
                ),
                ("generate_series", [a, b]) => (
                    SetFunction::Series(a.clone(), b.clone(), None),
                    DataType::Int4,
                ),
                ("generate_series", [a, b, c]) => (
                    SetFunction::Series(a.clone(), b.clone(), Some(c.clone())),
                    DataType::Int4,
                ),
                _ => {
                    return Err(SqlError::new(
                        "42883",
                        format!(
                            "function {name} with {} arguments does not exist",
                            args.len()
                        ),
                    ))
                }
            };
            let column = ast::Expr::CompoundIdentifier(vec![
                ast::Ident::new(SET_FUNCTION_QUALIFIER),
                ast::Ident::new(format!("f{}", found.len())),
            ]);
            *item = ast::SelectItem::ExprWithAlias {
                expr: column,
                alias: alias.unwrap_or_else(|| ast::Ident::new(name.clone())),
            };
            found.push((function, ty));
        }
        Ok((!found.is_empty()).then_some(found))
    }

    fn body(&mut self, input: NodeId, width: usize, body: SelectBody) -> Result<NodeId, SqlError> {
        let mut node = input;
        let mut width = width;
        if let Some(f) = body.filter {
            node = self.add(Box::new(Filter::new(f)), vec![node]);
        }
        if let Some(g) = body.grouping {
            width = g.keys.len() + g.aggregates.len();
            // Project the group keys and aggregate arguments into columns.
            let k = g.keys.len();
            let mut pre = g.keys.clone();
            let mut calls = Vec::new();
            for a in &g.aggregates {
                match &a.arg {
                    None => calls.push(AggCall::count_star()),
                    Some(e) => {
                        pre.push(e.clone());
                        let col = pre.len() - 1;
                        calls.push(if a.distinct {
                            AggCall::distinct(a.func, col)
                        } else {
                            AggCall::of(a.func, col)
                        });
                    }
                }
            }
            node = self.add(Box::new(Project::new(pre)), vec![node]);
            node = self.add(
                Box::new(Aggregate::new((0..k).collect(), calls)),
                vec![node],
            );
            if let Some(h) = g.having {
                node = self.add(Box::new(Filter::new(h)), vec![node]);
            }
        }
        if !body.windows.is_empty() {
            node = self.windows(node, width, &body.windows);
        }
        node = self.add(Box::new(Project::new(body.outputs.clone())), vec![node]);
        if body.distinct {
            node = self.add(Box::new(Distinct::new()), vec![node]);
        }
        let limit = constant(&body.limit, "LIMIT")?;
        let offset = constant(&body.offset, "OFFSET")?.unwrap_or(0);
        let top_level = self.keep_order && self.depth == 1 && !body.order_by.is_empty();
        let order = || {
            body.order_by
                .iter()
                .map(|k| match &k.expr {
                    Expr::Column(c) => Ok(SortColumn {
                        column: *c,
                        descending: k.desc,
                        nulls_first: k.nulls_first,
                    }),
                    _ => Err(unsupported_in_view("this ORDER BY")),
                })
                .collect::<Result<Vec<_>, _>>()
        };
        if limit.is_some() || offset > 0 {
            let group_by = if self.depth == 1 && self.partition_last > 0 {
                assert!(self.partition_last <= body.visible, "keys are outputs");
                (body.visible - self.partition_last..body.visible).collect()
            } else {
                vec![]
            };
            node = self.add(
                Box::new(TopK::new(group_by, order()?, limit, offset)),
                vec![node],
            );
        }
        if top_level {
            // The reader sorts by these and drops the hidden columns.
            self.order = order()?;
            return Ok(node);
        }
        if body.visible < body.outputs.len() {
            let keep = (0..body.visible).map(Expr::Column).collect();
            node = self.add(Box::new(Project::new(keep)), vec![node]);
        }
        Ok(node)
    }
}

impl Compiler<'_, '_> {
    /// The window functions over rows of `width` columns: one Window
    /// operator per distinct window (the calls over one window share it),
    /// then, when that put them out of order, a Project putting call `i`
    /// at column `width + i`, where the select list reads it.
    fn windows(&mut self, input: NodeId, width: usize, windows: &[WindowItem]) -> NodeId {
        let mut node = input;
        // Calls grouped by window, in order of first appearance.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let same = |g: &Vec<usize>| {
                let first = &windows[g[0]];
                first.partition == w.partition && first.order == w.order && first.frame == w.frame
            };
            match groups.iter_mut().find(|g| same(g)) {
                Some(g) => g.push(i),
                None => groups.push(vec![i]),
            }
        }
        let mut placed = Vec::new();
        for g in &groups {
            let first = &windows[g[0]];
            let calls = g.iter().map(|&i| windows[i].call.clone()).collect();
            node = self.add(
                Box::new(Window::new(
                    first.partition.clone(),
                    first.order.clone(),
                    first.frame,
                    calls,
                )),
                vec![node],
            );
            placed.extend(g.iter().copied());
        }
        if placed.iter().enumerate().any(|(at, &i)| at != i) {
            let mut outputs: Vec<Expr> = (0..width).map(Expr::Column).collect();
            for i in 0..windows.len() {
                let at = placed
                    .iter()
                    .position(|&p| p == i)
                    .expect("every call placed");
                outputs.push(Expr::Column(width + at));
            }
            node = self.add(Box::new(Project::new(outputs)), vec![node]);
        }
        node
    }
}

/// Whether a value of type `from` converts to `to` without loss in a UNION
/// (integers to wider integers, numeric or float; numeric to float).
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType as T;
    let rank = |t: &DataType| match t {
        T::Int2 => Some(0),
        T::Int4 => Some(1),
        T::Int8 => Some(2),
        T::Numeric => Some(3),
        T::Float4 => Some(4),
        T::Float8 => Some(5),
        _ => None,
    };
    matches!((rank(from), rank(to)), (Some(a), Some(b)) if a < b)
}

/// The ORDER BY of a UNION: output columns by name or by position.
fn union_order(
    order_by: Option<&ast::OrderBy>,
    columns: &[Column],
) -> Result<Vec<SortColumn>, SqlError> {
    let Some(o) = order_by else {
        return Ok(Vec::new());
    };
    let ast::OrderByKind::Expressions(items) = &o.kind else {
        return Err(unsupported_in_view("ORDER BY ALL"));
    };
    items
        .iter()
        .map(|item| {
            let column = match &item.expr {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Number(n, _) => n
                        .parse::<usize>()
                        .ok()
                        .filter(|&p| p >= 1 && p <= columns.len())
                        .map(|p| p - 1)
                        .ok_or_else(|| {
                            SqlError::new(
                                "42P10",
                                format!("ORDER BY position {n} is not in select list"),
                            )
                        })?,
                    _ => return Err(unsupported_in_view("this ORDER BY of a UNION")),
                },
                ast::Expr::Identifier(i) => {
                    let name = ident(i);
                    columns.iter().position(|c| c.name == name).ok_or_else(|| {
                        SqlError::new(
                            "42703",
                            format!("column \"{name}\" does not exist in the UNION's output"),
                        )
                        .with_hint("ORDER BY of a UNION names its output columns")
                    })?
                }
                _ => {
                    return Err(SqlError::new(
                        "0A000",
                        "ORDER BY of a UNION takes output column names or positions",
                    ))
                }
            };
            let descending = matches!(item.options.sort, Some(ast::OrderBySort::Desc));
            Ok(SortColumn {
                column,
                descending,
                nulls_first: item.options.nulls_first.unwrap_or(descending),
            })
        })
        .collect()
}

/// Whether a bound condition is an equality between a column left of
/// `split` and one at or right of it (a join condition).
fn links(e: &Expr, split: usize) -> bool {
    match e {
        Expr::Binary(BinOp::Eq, a, b) => matches!(
            (a.as_ref(), b.as_ref()),
            (Expr::Column(i), Expr::Column(j)) if (*i < split) != (*j < split)
        ),
        _ => false,
    }
}

fn split_and(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Binary(BinOp::And, l, r) => {
            split_and(*l, out);
            split_and(*r, out);
        }
        other => out.push(other),
    }
}

fn split_ast_and(e: &ast::Expr, out: &mut Vec<ast::Expr>) {
    match e {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            split_ast_and(left, out);
            split_ast_and(right, out);
        }
        ast::Expr::Nested(inner) => match inner.as_ref() {
            ast::Expr::BinaryOp {
                op: ast::BinaryOperator::And,
                ..
            } => split_ast_and(inner, out),
            _ => out.push(e.clone()),
        },
        other => out.push(other.clone()),
    }
}

fn conjoin(mut parts: Vec<ast::Expr>) -> Option<ast::Expr> {
    let first = if parts.is_empty() {
        return None;
    } else {
        parts.remove(0)
    };
    Some(parts.into_iter().fold(first, |acc, p| ast::Expr::BinaryOp {
        left: Box::new(acc),
        op: ast::BinaryOperator::And,
        right: Box::new(p),
    }))
}
