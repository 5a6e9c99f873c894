//! Automatic views: a prepared SELECT that direct evaluation cannot answer
//! (joins, subqueries, UNION, ...) and whose parameters pin columns
//! (`WHERE col = $1 AND other = $2`) becomes a maintained view keyed on those
//! columns, as in Noria. The application changes nothing: each execution is
//! a keyed lookup. Automatic views live in memory only and are made again
//! after a restart on first use.

use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use crate::views::ViewEntry;
use crate::{Column, SqlError};

/// Prefix of the key columns an automatic view adds to its outputs.
const KEY_ALIAS: &str = "__aqueduct_key";

/// A prepared query served by an automatic view.
#[derive(Clone, Debug)]
pub struct AutoView {
    /// The view's name in the registry.
    pub view: String,
    /// Output columns the query itself has (the view appends key columns).
    pub visible: usize,
    /// For each key column (in order), the parameter (0-based) it is pinned to.
    pub params: Vec<usize>,
    pub columns: Vec<Column>,
    pub param_types: Vec<DataType>,
}

/// Rewrites `SELECT ... WHERE c1 = $1 AND c2 = $2 AND rest` into
/// `SELECT ..., c1 AS key0, c2 AS key1 WHERE rest`, returning the new query
/// and the parameter of each key; `None` if the query is not of that shape.
pub fn parameterize(q: &ast::Query) -> Option<(ast::Query, Vec<usize>)> {
    if q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some() {
        return None;
    }
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    let mut conjuncts = Vec::new();
    split(sel.selection.as_ref()?, &mut conjuncts);
    let mut keys: Vec<(ast::Expr, usize)> = Vec::new();
    let mut rest = Vec::new();
    for c in conjuncts {
        match pinned(c) {
            Some(k) => keys.push(k),
            None => rest.push(c.clone()),
        }
    }
    let has_placeholder = |e: &ast::Expr| {
        let t = e.to_string();
        t.match_indices('$')
            .any(|(i, _)| t[i + 1..].starts_with(|c: char| c.is_ascii_digit()))
    };
    if keys.is_empty() || rest.iter().any(has_placeholder) {
        return None;
    }
    let mut sel = sel.clone();
    sel.selection = rest.into_iter().reduce(|a, b| ast::Expr::BinaryOp {
        left: Box::new(a),
        op: ast::BinaryOperator::And,
        right: Box::new(b),
    });
    if sel.projection.iter().any(|i| {
        matches!(i, ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } if has_placeholder(e))
    }) {
        return None;
    }
    let mut params = Vec::new();
    for (i, (expr, param)) in keys.into_iter().enumerate() {
        sel.projection.push(ast::SelectItem::ExprWithAlias {
            expr,
            alias: ast::Ident::new(format!("{KEY_ALIAS}{i}")),
        });
        params.push(param);
    }
    let mut out = q.clone();
    out.body = Box::new(ast::SetExpr::Select(sel));
    Some((out, params))
}

fn split<'e>(e: &'e ast::Expr, out: &mut Vec<&'e ast::Expr>) {
    match e {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            split(left, out);
            split(right, out);
        }
        ast::Expr::Nested(inner) => split(inner, out),
        other => out.push(other),
    }
}

/// `column = $n` (either way round): the column and the parameter index.
fn pinned(e: &ast::Expr) -> Option<(ast::Expr, usize)> {
    let ast::Expr::BinaryOp {
        left,
        op: ast::BinaryOperator::Eq,
        right,
    } = e
    else {
        return None;
    };
    let param = |x: &ast::Expr| match x {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => {
                p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
            }
            _ => None,
        },
        _ => None,
    };
    let is_column = |x: &ast::Expr| {
        matches!(
            x,
            ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
        )
    };
    match (left.as_ref(), right.as_ref()) {
        (c, p) if is_column(c) => param(p).map(|n| (c.clone(), n)),
        (p, c) if is_column(c) => param(p).map(|n| (c.clone(), n)),
        _ => None,
    }
}

impl AutoView {
    /// Builds the description of a compiled automatic view.
    pub fn describe(entry: &ViewEntry, params: Vec<usize>) -> Result<AutoView, SqlError> {
        let keys = params.len();
        let visible = entry.columns.len() - keys;
        let count = params.iter().max().map(|m| m + 1).unwrap_or(0);
        let mut param_types = vec![None; count];
        for (i, &p) in params.iter().enumerate() {
            param_types[p].get_or_insert(entry.columns[visible + i].ty.clone());
        }
        let param_types = param_types
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                t.ok_or_else(|| {
                    SqlError::unsupported(format!(
                        "parameter ${} in this query (only `column = $n` conditions are maintained)",
                        i + 1
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let columns = entry.columns[..visible].to_vec();
        Ok(AutoView {
            view: entry.name.clone(),
            visible,
            params,
            columns,
            param_types,
        })
    }

    /// The key values for a set of parameters, as the key columns' types.
    pub fn key(&self, params: &[Value]) -> Result<Vec<Value>, SqlError> {
        self.params
            .iter()
            .map(|&p| {
                let v = params.get(p).cloned().unwrap_or(Value::Null);
                Ok(v.coerce(&self.param_types[p])?)
            })
            .collect()
    }
}
