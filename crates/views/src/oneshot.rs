//! One-shot evaluation: a query that direct evaluation cannot answer
//! (joins, aggregates over joins, subqueries, UNION, reads mixing views and
//! tables) and that no maintained view serves is compiled into a scratch
//! dataflow, filled once from the tables, read and thrown away.
//!
//! It runs the very operators maintained views use, so a query has one
//! meaning whichever path answers it; only the state is not kept. Inside a
//! transaction the scan of every table it reads is recorded (so commit-time
//! validation sees the dependency) and the transaction's own writes are
//! included.

use aqueduct_dataflow::graph::Graph;
use aqueduct_dataflow::ops::compare_rows;
use aqueduct_dataflow::Row;
use aqueduct_tables::{Catalog, TableId, Txn};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aqueduct_expr::{SqlError, SubqueryRunner};
pub use aqueduct_plan::plan::has_subquery;
use aqueduct_plan::plan::{PreparedSubquery, SubqueryCompiler};

use crate::compile::Compiler;
use aqueduct_plan::plan::{Column, StatementTime};

/// The result columns and parameter types of `q`, without running it.
pub fn describe(
    catalog: &Catalog,
    q: &ast::Query,
    hints: &[Option<DataType>],
    time: StatementTime,
) -> Result<(Vec<Column>, Vec<DataType>), SqlError> {
    // `WITH RECURSIVE`: its tables' columns from their first terms, empty.
    if crate::recursive::is_recursive(q) {
        let mut columns_of = |c: Arc<Catalog>, q: &ast::Query| {
            describe(&c, q, hints, time).map(|(columns, _)| (columns, Vec::new()))
        };
        let (shaped, body) =
            crate::recursive::materialize(Arc::new(catalog.clone()), q, &mut columns_of)?;
        return describe(&shaped, &body, hints, time);
    }
    let mut scratch = Graph::new();
    let mut c = Compiler::new(catalog, &mut scratch);
    c.bind_time(time);
    c.allow_params = true;
    c.one_shot = true;
    if has_subquery(q) {
        c.allow_subqueries(Arc::new(Subqueries {
            catalog: Arc::new(catalog.clone()),
            params: Vec::new(),
            time: Some(time),
            describe: true,
        }));
    }
    c.seed_param_types(hints);
    let compiled = c.query(q)?;
    Ok((compiled.columns, c.param_types()))
}

/// Runs `q` once over `catalog` (as `txn` sees it) with parameters bound to
/// `params`: its columns and rows, in ORDER BY order when it has one.
/// `time` binds `now()` and its kin (`None`: a view's query, which has
/// none).
pub fn evaluate(
    catalog: &Catalog,
    txn: &mut Txn,
    q: &ast::Query,
    params: &[Value],
    time: Option<StatementTime>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    evaluate_with(catalog, q, params, time, &mut |t| {
        aqueduct_plan::exec::scan_rows(catalog, txn, t)
    })
}

/// Runs `q` once as if every table it reads were empty (with the tables'
/// schemas from `catalog`): what a query that aggregates without GROUP BY
/// answers when nothing matches.
pub fn evaluate_empty(
    catalog: &Catalog,
    q: &ast::Query,
    params: &[Value],
) -> Result<Vec<Row>, SqlError> {
    Ok(evaluate_with(catalog, q, params, None, &mut |_| Ok(Vec::new()))?.1)
}

/// Runs `q` once over `catalog` as committed (outside any transaction),
/// with subqueries in its expressions (correlated or not) run for each
/// row's values (see `aqueduct_plan::subqueries`).
pub fn evaluate_shared(
    catalog: Arc<Catalog>,
    q: &ast::Query,
    params: &[Value],
    time: Option<StatementTime>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    evaluate_typed(catalog, q, params, &[], time)
}

/// [`evaluate_shared`], the parameters' types known (`hints`, by
/// position): a subquery's outer values keep their columns' types.
fn evaluate_typed(
    catalog: Arc<Catalog>,
    q: &ast::Query,
    params: &[Value],
    hints: &[Option<DataType>],
    time: Option<StatementTime>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    if crate::recursive::is_recursive(q) {
        let mut evaluate =
            |c: Arc<Catalog>, q: &ast::Query| evaluate_typed(c, q, params, hints, time);
        let (catalog, body) = crate::recursive::materialize(catalog, q, &mut evaluate)?;
        return evaluate_typed(catalog, &body, params, hints, time);
    }
    let subqueries = Arc::new(Subqueries {
        catalog: catalog.clone(),
        params: params.to_vec(),
        time,
        describe: false,
    });
    let mut scratch = Txn::default();
    evaluate_with_subqueries(
        &catalog,
        q,
        params,
        hints,
        time,
        Some(subqueries),
        &mut |t| aqueduct_plan::exec::scan_rows(&catalog, &mut scratch, t),
    )
}

/// Runs `q` once inside transaction `txn`, with subqueries in its
/// expressions: every table it names is read as the transaction sees it
/// (its own writes in, each read recorded for the commit's check) into a
/// copy of the catalog the query and its subqueries then read.
pub fn evaluate_in_transaction(
    catalog: &Catalog,
    txn: &mut Txn,
    q: &ast::Query,
    params: &[Value],
    time: Option<StatementTime>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    let mut names: Vec<String> = Vec::new();
    let _ = ast::visit_relations(q, |n| {
        if let Ok(name) = aqueduct_plan::bind::object_name(n) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    let mut seen = catalog.clone();
    for name in names {
        let Some(t) = catalog.table(&name) else {
            continue;
        };
        let rows = aqueduct_plan::exec::scan_rows(catalog, txn, t)?;
        let schema = t.schema.as_ref().clone();
        let id = schema.id;
        seen.apply_schema(aqueduct_tables::SchemaChange::DropTable { id });
        seen.apply_schema(aqueduct_tables::SchemaChange::CreateTable(schema.clone()));
        for (i, row) in rows.into_iter().enumerate() {
            let key = if schema.has_primary_key() {
                schema.key_of(&row)
            } else {
                vec![Value::Int(i as i64)]
            };
            seen.apply_row(id, key, Some(row), 1);
        }
    }
    evaluate_shared(Arc::new(seen), q, params, time)
}

/// One-shot evaluation's [`SubqueryCompiler`]: a subquery is evaluated
/// once per distinct set of outer values, over the same catalog.
struct Subqueries {
    catalog: Arc<Catalog>,
    /// The statement's parameters (outer references come after them).
    params: Vec<Value>,
    time: Option<StatementTime>,
    /// Only describing the statement: nothing runs.
    describe: bool,
}

impl SubqueryCompiler for Subqueries {
    fn prepare(
        &self,
        q: &ast::Query,
        first: usize,
        outer: &[Option<DataType>],
    ) -> Result<PreparedSubquery, SqlError> {
        let mut hints: Vec<Option<DataType>> = vec![None; first];
        hints.extend(outer.iter().cloned());
        let time = self.time.unwrap_or(StatementTime {
            transaction_micros: 0,
            statement_micros: 0,
        });
        let (columns, param_types) = describe(&self.catalog, q, &hints, time)?;
        let mut params = self.params.clone();
        params.resize(first, Value::Null);
        Ok(PreparedSubquery {
            columns,
            params: param_types,
            runner: Box::new(SubqueryRun {
                catalog: self.catalog.clone(),
                query: q.clone(),
                params,
                hints,
                time: self.time,
                describe: self.describe,
                answers: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// Most distinct outer values one subquery remembers its answers for.
const SUBQUERY_ANSWERS: usize = 4096;

struct SubqueryRun {
    catalog: Arc<Catalog>,
    query: ast::Query,
    params: Vec<Value>,
    /// The parameters' types: the statement's unknown, the outer
    /// references' their columns'.
    hints: Vec<Option<DataType>>,
    time: Option<StatementTime>,
    describe: bool,
    answers: Mutex<HashMap<Vec<Value>, Vec<Vec<Value>>>>,
}

impl SubqueryRunner for SubqueryRun {
    fn rows(&self, outer: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
        if self.describe {
            return Ok(Vec::new());
        }
        if let Some(rows) = self.answers.lock().expect("not poisoned").get(outer) {
            return Ok(rows.clone());
        }
        let mut params = self.params.clone();
        params.extend_from_slice(outer);
        let rows = aqueduct_expr::limits::grow(|| {
            evaluate_typed(
                self.catalog.clone(),
                &self.query,
                &params,
                &self.hints,
                self.time,
            )
        })?
        .1;
        let mut answers = self.answers.lock().expect("not poisoned");
        if answers.len() >= SUBQUERY_ANSWERS {
            answers.clear();
        }
        answers.insert(outer.to_vec(), rows.clone());
        Ok(rows)
    }
}

fn evaluate_with(
    catalog: &Catalog,
    q: &ast::Query,
    params: &[Value],
    time: Option<StatementTime>,
    scan: &mut dyn FnMut(&aqueduct_tables::Table) -> Result<Vec<Row>, SqlError>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    evaluate_with_subqueries(catalog, q, params, &[], time, None, scan)
}

fn evaluate_with_subqueries(
    catalog: &Catalog,
    q: &ast::Query,
    params: &[Value],
    hints: &[Option<DataType>],
    time: Option<StatementTime>,
    subqueries: Option<Arc<Subqueries>>,
    scan: &mut dyn FnMut(&aqueduct_tables::Table) -> Result<Vec<Row>, SqlError>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    let mut graph = Graph::new();
    let mut c = Compiler::new(catalog, &mut graph);
    c.keep_order = true;
    c.one_shot = true;
    if let Some(s) = subqueries {
        c.allow_subqueries(s);
    }
    c.seed_param_types(hints);
    c.bind_values(params.to_vec());
    if let Some(time) = time {
        c.bind_time(time);
    }
    let compiled = c.query(q)?;
    let mut nodes = std::mem::take(&mut c.new_nodes);
    // Functions in FROM made their rows already.
    let mut tables: Vec<(TableId, Vec<Row>)> = std::mem::take(&mut c.function_rows);
    let (view, reader) = graph.view("result", compiled.node, vec![]);
    nodes.push(view);
    // Every table the plan reads, as the transaction sees it.
    for id in graph.source_tables() {
        if tables.iter().any(|(t, _)| *t == id) {
            continue;
        }
        let t = catalog
            .table_by_id(id)
            .ok_or_else(|| SqlError::new("XX000", format!("table {id} vanished while reading")))?;
        let rows = scan(t)?;
        tables.push((id, rows));
    }
    let rows_of = |id: TableId| -> Vec<Row> {
        tables
            .iter()
            .find(|(t, _)| *t == id)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    };
    graph.initialize(&nodes, &rows_of, 0)?;
    let mut rows = reader
        .read(|state, _| match state.failure() {
            Some(f) => Err(f.error.clone()),
            None => Ok(state.all()),
        })
        .unwrap_or_else(|| Ok(Vec::new()))?;
    if !compiled.order.is_empty() {
        aqueduct_expr::interrupt::sort_by(&mut rows, |a, b| compare_rows(&compiled.order, a, b))?;
    }
    let visible = compiled.columns.len();
    for r in &mut rows {
        r.truncate(visible);
    }
    Ok((compiled.columns, rows))
}
