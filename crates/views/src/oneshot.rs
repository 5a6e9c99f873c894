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

use aqueduct_expr::SqlError;

use crate::compile::Compiler;
use aqueduct_plan::plan::{Column, StatementTime};

/// The result columns and parameter types of `q`, without running it.
pub fn describe(
    catalog: &Catalog,
    q: &ast::Query,
    hints: &[Option<DataType>],
    time: StatementTime,
) -> Result<(Vec<Column>, Vec<DataType>), SqlError> {
    let mut scratch = Graph::new();
    let mut c = Compiler::new(catalog, &mut scratch);
    c.bind_time(time);
    c.allow_params = true;
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

fn evaluate_with(
    catalog: &Catalog,
    q: &ast::Query,
    params: &[Value],
    time: Option<StatementTime>,
    scan: &mut dyn FnMut(&aqueduct_tables::Table) -> Result<Vec<Row>, SqlError>,
) -> Result<(Vec<Column>, Vec<Row>), SqlError> {
    let mut graph = Graph::new();
    let mut c = Compiler::new(catalog, &mut graph);
    c.keep_order = true;
    c.bind_values(params.to_vec());
    if let Some(time) = time {
        c.bind_time(time);
    }
    let compiled = c.query(q)?;
    let mut nodes = std::mem::take(&mut c.new_nodes);
    let (view, reader) = graph.view("result", compiled.node, vec![]);
    nodes.push(view);
    // Every table the plan reads, as the transaction sees it.
    let mut tables: Vec<(TableId, Vec<Row>)> = Vec::new();
    for id in graph.source_tables() {
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
