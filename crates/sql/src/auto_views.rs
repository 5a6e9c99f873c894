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
    /// The query aggregates without GROUP BY: for a key the view holds no
    /// rows for, the answer is still one row (counts of zero, ...), which
    /// the view does not hold.
    pub global: bool,
}

/// A query whose `column = literal` conditions were turned into parameters,
/// so that queries differing only in those literals share one view.
#[derive(Clone, Debug)]
pub struct Lifted {
    pub query: ast::Query,
    /// The lifted query's text: the automatic view's name in the registry.
    pub sql: String,
    /// The literals, in parameter order after the query's own parameters
    /// (as text: the key column's type decides what they mean).
    pub literals: Vec<Value>,
}

/// Replaces each top-level `column = literal` condition of `q`'s WHERE with
/// `column = $n`, numbering after the parameters `q` already has.
pub fn lift_literals(q: &ast::Query) -> Lifted {
    let mut query = q.clone();
    let mut literals = Vec::new();
    if let ast::SetExpr::Select(sel) = query.body.as_mut() {
        if let Some(w) = sel.selection.take() {
            let mut next = max_placeholder(&q.to_string());
            let mut conjuncts = Vec::new();
            split(&w, &mut conjuncts);
            let lifted: Vec<ast::Expr> = conjuncts
                .into_iter()
                .map(|c| match literal_pin(c) {
                    Some((column, value)) => {
                        next += 1;
                        literals.push(value);
                        ast::Expr::BinaryOp {
                            left: Box::new(column),
                            op: ast::BinaryOperator::Eq,
                            right: Box::new(ast::Expr::Value(
                                ast::Value::Placeholder(format!("${next}")).into(),
                            )),
                        }
                    }
                    None => c.clone(),
                })
                .collect();
            sel.selection = lifted.into_iter().reduce(|a, b| ast::Expr::BinaryOp {
                left: Box::new(a),
                op: ast::BinaryOperator::And,
                right: Box::new(b),
            });
        }
    }
    Lifted {
        sql: query.to_string(),
        query,
        literals,
    }
}

/// The highest `$n` in `text` (0 when there is none).
fn max_placeholder(text: &str) -> usize {
    text.match_indices('$')
        .filter_map(|(i, _)| {
            let digits: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse::<usize>().ok()
        })
        .max()
        .unwrap_or(0)
}

/// `column = literal` (either way round), a number or a quoted string.
fn literal_pin(e: &ast::Expr) -> Option<(ast::Expr, Value)> {
    let ast::Expr::BinaryOp {
        left,
        op: ast::BinaryOperator::Eq,
        right,
    } = e
    else {
        return None;
    };
    let literal = |x: &ast::Expr| match x {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Some(Value::Text(n.clone())),
            ast::Value::SingleQuotedString(s) => Some(Value::Text(s.clone())),
            _ => None,
        },
        _ => None,
    };
    match (left.as_ref(), right.as_ref()) {
        (c, l) if is_column(c) => literal(l).map(|v| (c.clone(), v)),
        (l, c) if is_column(c) => literal(l).map(|v| (c.clone(), v)),
        _ => None,
    }
}

fn is_column(x: &ast::Expr) -> bool {
    matches!(
        x,
        ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
    )
}

/// Rewrites `SELECT ... WHERE c1 = $1 AND c2 = $2 AND rest` into
/// `SELECT ..., c1 AS key0, c2 AS key1 WHERE rest`, returning the new query
/// and the parameter of each key; `None` if the query is not of that shape.
pub fn parameterize(q: &ast::Query) -> Option<Parameterized> {
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
    // A key pins its column to one value in every result, so grouping by
    // it as well leaves the groups as they were. A query that aggregates
    // without GROUP BY returns a row even when nothing matches; a key with
    // no rows in the view is then answered another way (`global`).
    let grouped = match &sel.group_by {
        ast::GroupByExpr::Expressions(e, _) => !e.is_empty(),
        ast::GroupByExpr::All(_) => return None,
    };
    let global = !grouped && aggregates(&sel.projection);
    let mut params = Vec::new();
    for (i, (expr, param)) in keys.into_iter().enumerate() {
        if grouped || global {
            if let ast::GroupByExpr::Expressions(list, _) = &mut sel.group_by {
                if !list.contains(&expr) {
                    list.push(expr.clone());
                }
            }
        }
        sel.projection.push(ast::SelectItem::ExprWithAlias {
            expr,
            alias: ast::Ident::new(format!("{KEY_ALIAS}{i}")),
        });
        params.push(param);
    }
    let mut out = q.clone();
    out.body = Box::new(ast::SetExpr::Select(sel));
    Some(Parameterized {
        query: out,
        params,
        global,
    })
}

/// A query rewritten to be served by a view keyed on its parameters.
pub struct Parameterized {
    pub query: ast::Query,
    /// For each key column (in order), the parameter it is pinned to.
    pub params: Vec<usize>,
    /// The query aggregates without GROUP BY (see [`AutoView::global`]).
    pub global: bool,
}

/// Whether a projection calls an aggregate function (by name; a false
/// positive only makes the rewritten query fail to bind, and the query is
/// then answered without a view).
fn aggregates(projection: &[ast::SelectItem]) -> bool {
    projection.iter().any(|item| {
        let text = item.to_string().to_ascii_lowercase();
        ["count(", "sum(", "min(", "max(", "avg("]
            .iter()
            .any(|f| text.contains(f))
    })
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
    match (left.as_ref(), right.as_ref()) {
        (c, p) if is_column(c) => param(p).map(|n| (c.clone(), n)),
        (p, c) if is_column(c) => param(p).map(|n| (c.clone(), n)),
        _ => None,
    }
}

impl AutoView {
    /// Builds the description of a compiled automatic view.
    pub fn describe(
        entry: &ViewEntry,
        params: Vec<usize>,
        global: bool,
    ) -> Result<AutoView, SqlError> {
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
            global,
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
