//! `WITH RECURSIVE` in a query evaluated once: each common table
//! expression is computed before the query, the recursive ones by
//! iteration as PostgreSQL defines it (the non-recursive term once, then
//! the recursive term over the rows the last step added, until a step adds
//! none; `UNION` without `ALL` keeps each row once), and put in a copy of
//! the catalog as a table the rest of the query reads by its name.

use std::collections::HashSet;
use std::sync::Arc;

use aqueduct_dataflow::Row;
use aqueduct_expr::SqlError;
use aqueduct_tables::{Catalog, ColumnDef, SchemaChange, TableId, TableSchema};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use aqueduct_plan::plan::Column;

/// Steps one recursive term may take before the query is refused.
pub const MAX_RECURSION_STEPS: usize = 100_000;
/// Rows one recursive common table expression may hold.
pub const MAX_RECURSION_ROWS: usize = 10_000_000;

/// The ids of the tables common table expressions become: above table
/// ids, catalog relations and functions in FROM.
const CTE_TABLE_IDS: TableId = u64::MAX / 8 * 5;

/// Whether `q` has `WITH RECURSIVE`.
pub fn is_recursive(q: &ast::Query) -> bool {
    q.with.as_ref().is_some_and(|w| w.recursive)
}

/// Runs a query once over a catalog (how one-shot evaluation answers).
pub type Evaluate<'a> =
    dyn FnMut(Arc<Catalog>, &ast::Query) -> Result<(Vec<Column>, Vec<Row>), SqlError> + 'a;

/// `q`'s common table expressions computed into a copy of `catalog`, and
/// `q` without its `WITH`, to be evaluated over that copy.
pub fn materialize(
    catalog: Arc<Catalog>,
    q: &ast::Query,
    evaluate: &mut Evaluate<'_>,
) -> Result<(Arc<Catalog>, ast::Query), SqlError> {
    let Some(with) = &q.with else {
        return Ok((catalog, q.clone()));
    };
    let mut current = catalog;
    for (n, cte) in with.cte_tables.iter().enumerate() {
        let name = aqueduct_plan::bind::ident(&cte.alias.name);
        let id = CTE_TABLE_IDS + n as u64;
        let (columns, rows) = match cte.query.body.as_ref() {
            ast::SetExpr::SetOperation {
                op: ast::SetOperator::Union,
                set_quantifier,
                left,
                right,
            } if with.recursive && names(right, &name) => {
                let all = matches!(set_quantifier, ast::SetQuantifier::All);
                let (columns, first) = evaluate(current.clone(), &body_query(left))?;
                let mut seen: HashSet<Row> = HashSet::new();
                let mut rows = Vec::new();
                let mut working = Vec::new();
                for r in first {
                    if all || seen.insert(r.clone()) {
                        rows.push(r.clone());
                        working.push(r);
                    }
                }
                let mut steps = 0;
                while !working.is_empty() {
                    steps += 1;
                    if steps > MAX_RECURSION_STEPS || rows.len() > MAX_RECURSION_ROWS {
                        return Err(SqlError::new(
                            "54001",
                            format!(
                                "the recursive query \"{name}\" took more than {MAX_RECURSION_STEPS} steps or {MAX_RECURSION_ROWS} rows"
                            ),
                        )
                        .with_hint("make its recursive term stop: a condition that ends it, or UNION instead of UNION ALL"));
                    }
                    let step = with_table(&current, id, &name, &cte.alias, &columns, &working);
                    let (_, next) = evaluate(Arc::new(step), &body_query(right))?;
                    working = Vec::new();
                    for r in next {
                        if all || seen.insert(r.clone()) {
                            rows.push(r.clone());
                            working.push(r);
                        }
                    }
                    aqueduct_expr::interrupt::check()?;
                }
                (columns, rows)
            }
            _ => evaluate(current.clone(), &cte.query)?,
        };
        current = Arc::new(with_table(&current, id, &name, &cte.alias, &columns, &rows));
    }
    let mut body = q.clone();
    body.with = None;
    Ok((current, body))
}

/// Whether a query body names the relation `name` (the recursive term
/// reads the table it builds).
fn names(body: &ast::SetExpr, name: &str) -> bool {
    let mut found = false;
    let _ = ast::visit_relations(body, |n| {
        found |= aqueduct_plan::bind::object_name(n).is_ok_and(|r| r == name);
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}

/// A query of one body.
fn body_query(body: &ast::SetExpr) -> ast::Query {
    ast::Query {
        with: None,
        body: Box::new(body.clone()),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: vec![],
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: vec![],
    }
}

/// `catalog` with table `name` (id `id`) holding `rows`, its columns
/// named by the alias's column list or else by the query's.
fn with_table(
    catalog: &Catalog,
    id: TableId,
    name: &str,
    alias: &ast::TableAlias,
    columns: &[Column],
    rows: &[Row],
) -> Catalog {
    let mut out = catalog.clone();
    if let Some(existing) = out.table(name).map(|t| t.schema.id) {
        out.apply_schema(SchemaChange::DropTable { id: existing });
    }
    let defs: Vec<ColumnDef> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let named = alias
                .columns
                .get(i)
                .map(|a| aqueduct_plan::bind::ident(&a.name))
                .unwrap_or_else(|| c.name.clone());
            let ty = match &c.ty {
                DataType::NumericTypmod { .. } => DataType::Numeric,
                other => other.clone(),
            };
            ColumnDef::new(named, ty)
        })
        .collect();
    out.apply_schema(SchemaChange::CreateTable(TableSchema {
        id,
        name: name.to_string(),
        columns: defs,
        ..TableSchema::default()
    }));
    for (i, r) in rows.iter().enumerate() {
        out.apply_row(id, vec![Value::Int(i as i64)], Some(r.clone()), 1);
    }
    out
}
