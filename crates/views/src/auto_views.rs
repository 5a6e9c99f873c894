//! Automatic views: a prepared SELECT that direct evaluation cannot answer
//! (joins, subqueries, UNION, ...) and whose parameters pin columns
//! (`WHERE col = $1 AND other = $2`) becomes a maintained view keyed on those
//! columns, as in Noria. The application changes nothing: each execution is
//! a keyed lookup. Automatic views live in memory only and are made again
//! after a restart on first use.

use std::ops::Bound;

use aqueduct_dataflow::ops::{compare_rows, SortColumn};
use aqueduct_dataflow::Row;
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use aqueduct_expr::SqlError;

use crate::view_entry::ViewEntry;
use aqueduct_plan::plan::Column;

/// Prefix of the key columns an automatic view adds to its outputs.
const KEY_ALIAS: &str = "__aqueduct_key";

/// A prepared query served by an automatic view.
#[derive(Clone, Debug)]
pub struct AutoView {
    /// The view's name in the registry.
    pub view: String,
    /// Output columns the query itself has (the view appends key columns,
    /// then any hidden sort columns).
    pub visible: usize,
    /// For each key column (in order), how the query pins it.
    pub keys: Vec<KeyParam>,
    pub columns: Vec<Column>,
    pub param_types: Vec<DataType>,
    /// The query aggregates without GROUP BY: for a key the view holds no
    /// rows for, the answer is still one row (counts of zero, ...), which
    /// the view does not hold.
    pub global: bool,
    /// For a `global` query whose answer over no rows depends on nothing
    /// else (no HAVING, no subquery in its select list): that answer,
    /// computed once over empty tables, so a key without rows needs no
    /// evaluation over the tables.
    pub empty_row: Option<Row>,
    /// `SELECT DISTINCT` (rows merged from several keys are deduplicated).
    pub distinct: bool,
    /// ORDER BY over the view's rows, and the query's LIMIT and OFFSET,
    /// applied to the rows of the keys a read asks for.
    pub order: Vec<SortColumn>,
    pub limit: Option<usize>,
    pub offset: usize,
}

/// One lookup of an automatic view: rows whose `columns` are `prefix` and,
/// with `range`, whose last key column lies in it.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The key columns (positions among the view's keys) looked up by.
    pub columns: Vec<usize>,
    pub prefix: Vec<Value>,
    pub range: Option<(Bound<Value>, Bound<Value>)>,
    /// Rows whose key column (position) holds this value were found by an
    /// earlier side of an OR: left out, so each row comes once.
    pub exclude: Vec<(usize, Value)>,
}

/// Whether the answer of `q` (a query aggregating without GROUP BY) for
/// a key with no rows is its answer over empty tables: no HAVING (which
/// the view applies per key) and no subquery in the select list (which
/// would read tables of its own).
pub fn empty_answer_is_fixed(q: &ast::Query) -> bool {
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return false;
    };
    let subquery = ast::visit_expressions(&sel.projection, |e| match e {
        ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. } => {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    sel.having.is_none() && subquery.is_continue()
}

/// Most key combinations one read looks up (`IN` lists multiply); beyond
/// that the query is evaluated once instead.
pub const MAX_KEYS_PER_READ: usize = 1024;

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
/// `column = $n` (and `column IN (literals)` with `column IN ($n, ...)`),
/// numbering after the parameters `q` already has.
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
                .map(|c| lift_conjunct(c, &mut next, &mut literals))
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

/// A number or quoted string (a negative number included), as text.
fn literal(x: &ast::Expr) -> Option<Value> {
    match x {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Some(Value::Text(n.clone())),
            ast::Value::SingleQuotedString(s) => Some(Value::Text(s.clone())),
            _ => None,
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match literal(expr)? {
            Value::Text(n) if n.starts_with(|c: char| c.is_ascii_digit()) => {
                Some(Value::Text(format!("-{n}")))
            }
            _ => None,
        },
        _ => None,
    }
}

/// `c` with the literals of `column = / < / <= / > / >= literal`,
/// `column IN (literals)` and `column BETWEEN literal AND literal` replaced
/// by parameters `$next + 1, ...` (their values pushed on `literals`).
fn lift_conjunct(c: &ast::Expr, next: &mut usize, literals: &mut Vec<Value>) -> ast::Expr {
    let mut take = |v: Value| {
        *next += 1;
        literals.push(v);
        ast::Expr::Value(ast::Value::Placeholder(format!("${next}")).into())
    };
    let comparison = |op: &ast::BinaryOperator| {
        use ast::BinaryOperator as B;
        matches!(op, B::Eq | B::Lt | B::LtEq | B::Gt | B::GtEq)
    };
    match c {
        // `a = 1 OR b = 2`: both sides.
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Or,
            right,
        } => ast::Expr::BinaryOp {
            left: Box::new(lift_conjunct(left, next, literals)),
            op: ast::BinaryOperator::Or,
            right: Box::new(lift_conjunct(right, next, literals)),
        },
        ast::Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                ast::Expr::BinaryOp {
                    op: ast::BinaryOperator::Or,
                    ..
                }
            ) =>
        {
            ast::Expr::Nested(Box::new(lift_conjunct(inner, next, literals)))
        }
        ast::Expr::BinaryOp { left, op, right } if comparison(op) => {
            match (left.as_ref(), right.as_ref()) {
                (col, l) if is_column(col) && literal(l).is_some() => ast::Expr::BinaryOp {
                    left: left.clone(),
                    op: op.clone(),
                    right: Box::new(take(literal(l).expect("checked"))),
                },
                (l, col) if is_column(col) && literal(l).is_some() => ast::Expr::BinaryOp {
                    left: Box::new(take(literal(l).expect("checked"))),
                    op: op.clone(),
                    right: right.clone(),
                },
                _ => c.clone(),
            }
        }
        ast::Expr::InList {
            expr,
            list,
            negated: false,
        } if is_column(expr) && !list.is_empty() && list.iter().all(|x| literal(x).is_some()) => {
            ast::Expr::InList {
                expr: expr.clone(),
                list: list
                    .iter()
                    .map(|x| take(literal(x).expect("checked")))
                    .collect(),
                negated: false,
            }
        }
        ast::Expr::Between {
            expr,
            negated: false,
            low,
            high,
        } if is_column(expr) && literal(low).is_some() && literal(high).is_some() => {
            ast::Expr::Between {
                expr: expr.clone(),
                negated: false,
                low: Box::new(take(literal(low).expect("checked"))),
                high: Box::new(take(literal(high).expect("checked"))),
            }
        }
        _ => c.clone(),
    }
}

fn is_column(x: &ast::Expr) -> bool {
    matches!(
        x,
        ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
    )
}

/// Rewrites `SELECT ... WHERE c1 = $1 AND c2 IN ($2, $3) AND rest
/// [ORDER BY ... LIMIT n OFFSET m]` into `SELECT ..., c1 AS key0, c2 AS key1
/// WHERE rest [ORDER BY ... LIMIT n + m]`, returning the new query and how
/// each key column is pinned; `None` if the query is not of that shape.
///
/// The view keeps, per key, the first `n + m` rows in order (a top-k per
/// key); a read merges the keys it asks for, sorts, and skips and takes.
pub fn parameterize(q: &ast::Query) -> Option<Parameterized> {
    if q.fetch.is_some() {
        return None;
    }
    let (limit, offset) = constant_limit(q)?;
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    // A window sees the rows WHERE leaves: taking a condition out of
    // WHERE would change its partitions.
    if aqueduct_plan::bind::select_has_window(sel, q.order_by.as_ref()) {
        return None;
    }
    let mut conjuncts = Vec::new();
    split(sel.selection.as_ref()?, &mut conjuncts);
    let mut keys: Vec<(ast::Expr, KeyParam)> = Vec::new();
    let mut rest = Vec::new();
    for c in conjuncts {
        match pinned(c) {
            Some((col, k)) => match keys.iter_mut().find(|(e, _)| *e == col) {
                None => keys.push((col, k)),
                // `col > $1 AND col < $2`: one range.
                Some((_, existing)) => match (existing, k) {
                    (
                        KeyParam::Range { low, high },
                        KeyParam::Range {
                            low: new_low,
                            high: new_high,
                        },
                    ) if (low.is_none() || new_low.is_none())
                        && (high.is_none() || new_high.is_none()) =>
                    {
                        *low = low.or(new_low);
                        *high = high.or(new_high);
                    }
                    _ => rest.push(c.clone()),
                },
            },
            None => match pinned_or(c) {
                // One OR group, over columns no other condition pins.
                Some(group)
                    if !keys.iter().any(|(_, k)| matches!(k, KeyParam::Or(_)))
                        && group.iter().all(|(c, _)| !keys.iter().any(|(e, _)| e == c)) =>
                {
                    keys.extend(group)
                }
                _ => rest.push(c.clone()),
            },
        }
    }
    if keys
        .iter()
        .filter(|(e, _)| keys.iter().filter(|(o, _)| o == e).count() > 1)
        .count()
        > 0
    {
        return None;
    }
    // A range is read over the last key column.
    let ranges = keys
        .iter()
        .filter(|(_, k)| matches!(k, KeyParam::Range { .. }))
        .count();
    if ranges > 1 {
        return None;
    }
    keys.sort_by_key(|(_, k)| matches!(k, KeyParam::Range { .. }));
    if keys.is_empty() || rest.iter().any(|e| max_placeholder(&e.to_string()) > 0) {
        return None;
    }
    // Several values for one column, at most one such column.
    let many = keys
        .iter()
        .filter(|(_, k)| matches!(k, KeyParam::Many(_)))
        .count();
    if many > 1 {
        return None;
    }
    // All three read the rows of several keys.
    let ors = keys
        .iter()
        .filter(|(_, k)| matches!(k, KeyParam::Or(_)))
        .count();
    let many = many + ranges + ors;
    let mut sel = sel.clone();
    sel.selection = rest.into_iter().reduce(|a, b| ast::Expr::BinaryOp {
        left: Box::new(a),
        op: ast::BinaryOperator::And,
        right: Box::new(b),
    });
    if sel.projection.iter().any(|i| {
        matches!(i, ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } if max_placeholder(&e.to_string()) > 0)
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
    if many > 0 {
        // Rows of several keys are merged: each group must belong to one
        // key, so the column must already be a group key (or nothing is
        // grouped), and a global aggregate would span keys.
        let grouped_by_key = keys.iter().all(|(e, k)| match (k, &sel.group_by) {
            (KeyParam::One(_), _) => true,
            (_, ast::GroupByExpr::Expressions(list, _)) => list.contains(e),
            _ => false,
        });
        if global || (grouped && !grouped_by_key) {
            return None;
        }
    }
    let distinct = match &sel.distinct {
        None => false,
        Some(ast::Distinct::Distinct) => true,
        Some(_) => return None,
    };
    let mut pins = Vec::new();
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
        pins.push(param);
    }
    let mut out = q.clone();
    out.body = Box::new(ast::SetExpr::Select(sel));
    // Per key, the rows up to the last one a read may take.
    out.limit_clause = limit.map(|n| ast::LimitClause::LimitOffset {
        limit: Some(ast::Expr::Value(
            ast::Value::Number((n + offset).to_string(), false).into(),
        )),
        offset: None,
        limit_by: vec![],
    });
    Some(Parameterized {
        query: out,
        keys: pins,
        global,
        distinct,
        limit,
        offset,
    })
}

/// `LIMIT n OFFSET m` of `q` when both are constants (or absent).
fn constant_limit(q: &ast::Query) -> Option<(Option<usize>, usize)> {
    let number = |e: &ast::Expr| match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    };
    match &q.limit_clause {
        None => Some((None, 0)),
        Some(ast::LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) if limit_by.is_empty() => {
            let limit = match limit {
                None => None,
                Some(l) => Some(number(l)?),
            };
            let offset = match offset {
                None => 0,
                Some(o) => number(&o.value)?,
            };
            Some((limit, offset))
        }
        _ => None,
    }
}

/// How a key column of an automatic view is pinned by the query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyParam {
    /// `column = $n`.
    One(usize),
    /// `column IN ($n, $m, ...)`.
    Many(Vec<usize>),
    /// One side of `a = $n OR b = $m OR ...`: rows matching any side.
    Or(usize),
    /// `column > $n`, `column <= $m`, `column BETWEEN $n AND $m`: the
    /// parameters of the low and high ends, and whether each is included.
    Range {
        low: Option<(usize, bool)>,
        high: Option<(usize, bool)>,
    },
}

/// A query rewritten to be served by a view keyed on its parameters.
pub struct Parameterized {
    pub query: ast::Query,
    /// For each key column (in order), how the query pins it.
    pub keys: Vec<KeyParam>,
    /// The query aggregates without GROUP BY (see [`AutoView::global`]).
    pub global: bool,
    /// `SELECT DISTINCT`: rows merged from several keys are deduplicated.
    pub distinct: bool,
    /// The query's own LIMIT and OFFSET, applied after merging keys.
    pub limit: Option<usize>,
    pub offset: usize,
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

/// The operands of a chain of `op` (AND or OR), parentheses looked through.
pub(crate) fn split_by<'e>(
    e: &'e ast::Expr,
    op: &ast::BinaryOperator,
    out: &mut Vec<&'e ast::Expr>,
) {
    match e {
        ast::Expr::BinaryOp { left, op: o, right } if o == op => {
            split_by(left, op, out);
            split_by(right, op, out);
        }
        ast::Expr::Nested(inner) => split_by(inner, op, out),
        other => out.push(other),
    }
}

/// The conjuncts of a WHERE.
pub fn split<'e>(e: &'e ast::Expr, out: &mut Vec<&'e ast::Expr>) {
    split_by(e, &ast::BinaryOperator::And, out)
}

/// `column = $n` (either way round) or `column IN ($n, ...)`: the column
/// and its parameters (0-based).
fn pinned(e: &ast::Expr) -> Option<(ast::Expr, KeyParam)> {
    let param = |x: &ast::Expr| match x {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => {
                p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
            }
            _ => None,
        },
        _ => None,
    };
    use ast::BinaryOperator as B;
    // `column op $n` as a key; `flipped` when written `$n op column`.
    let key = |op: &B, n: usize, flipped: bool| -> Option<KeyParam> {
        let op = match (op, flipped) {
            (B::Eq, _) => return Some(KeyParam::One(n)),
            (B::Lt, false) | (B::Gt, true) => (false, false),
            (B::LtEq, false) | (B::GtEq, true) => (false, true),
            (B::Gt, false) | (B::Lt, true) => (true, false),
            (B::GtEq, false) | (B::LtEq, true) => (true, true),
            _ => return None,
        };
        Some(match op {
            (true, inclusive) => KeyParam::Range {
                low: Some((n, inclusive)),
                high: None,
            },
            (false, inclusive) => KeyParam::Range {
                low: None,
                high: Some((n, inclusive)),
            },
        })
    };
    match e {
        ast::Expr::BinaryOp { left, op, right } => match (left.as_ref(), right.as_ref()) {
            (c, p) if is_column(c) => Some((c.clone(), key(op, param(p)?, false)?)),
            (p, c) if is_column(c) => Some((c.clone(), key(op, param(p)?, true)?)),
            _ => None,
        },
        ast::Expr::Between {
            expr,
            negated: false,
            low,
            high,
        } if is_column(expr) => Some((
            expr.as_ref().clone(),
            KeyParam::Range {
                low: Some((param(low)?, true)),
                high: Some((param(high)?, true)),
            },
        )),
        ast::Expr::InList {
            expr,
            list,
            negated: false,
        } if is_column(expr) && !list.is_empty() => {
            let params = list.iter().map(param).collect::<Option<Vec<_>>>()?;
            Some((expr.as_ref().clone(), KeyParam::Many(params)))
        }
        _ => None,
    }
}

/// `a = $n OR b = $m OR ...` over different columns: each column with its
/// parameter.
fn pinned_or(e: &ast::Expr) -> Option<Vec<(ast::Expr, KeyParam)>> {
    let mut parts = Vec::new();
    split_by(e, &ast::BinaryOperator::Or, &mut parts);
    if parts.len() < 2 {
        return None;
    }
    let mut out: Vec<(ast::Expr, KeyParam)> = Vec::new();
    for p in parts {
        match pinned(p)? {
            (col, KeyParam::One(n)) if !out.iter().any(|(c, _)| *c == col) => {
                out.push((col, KeyParam::Or(n)))
            }
            _ => return None,
        }
    }
    Some(out)
}

impl AutoView {
    /// Builds the description of a compiled automatic view.
    pub fn describe(entry: &ViewEntry, p: Parameterized) -> Result<AutoView, SqlError> {
        let keys = p.keys.len();
        let visible = entry.columns.len() - keys;
        let all: Vec<(usize, usize)> = p
            .keys
            .iter()
            .enumerate()
            .flat_map(|(i, k)| match k {
                KeyParam::One(n) | KeyParam::Or(n) => vec![(i, *n)],
                KeyParam::Many(ns) => ns.iter().map(|n| (i, *n)).collect(),
                KeyParam::Range { low, high } => {
                    low.iter().chain(high).map(|(n, _)| (i, *n)).collect()
                }
            })
            .collect();
        let count = all.iter().map(|(_, n)| n + 1).max().unwrap_or(0);
        let mut param_types = vec![None; count];
        for &(i, n) in &all {
            param_types[n].get_or_insert(entry.columns[visible + i].ty.clone());
        }
        let param_types = param_types
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                t.ok_or_else(|| {
                    SqlError::unsupported(format!(
                        "parameter ${} in this query (only `column = $n` and `column IN ($n, ...)` conditions key a view)",
                        i + 1
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AutoView {
            view: entry.name.clone(),
            visible,
            keys: p.keys,
            columns: entry.columns[..visible].to_vec(),
            param_types,
            global: p.global,
            empty_row: None,
            distinct: p.distinct,
            order: entry.order.clone(),
            limit: p.limit,
            offset: p.offset,
        })
    }

    /// What to look up for a set of parameters (converted to the key
    /// columns' types): each the values of the equality keys, and the range
    /// of the last key column when it has one. NULL never matches `=`,
    /// `IN` or a comparison, so lookups with one are left out. An error if
    /// a value does not convert; `None` if there are too many lookups.
    pub fn lookups(&self, params: &[Value]) -> Result<Option<Vec<Lookup>>, SqlError> {
        let value = |n: usize| -> Result<Value, SqlError> {
            let v = params.get(n).cloned().unwrap_or(Value::Null);
            Ok(v.coerce(&self.param_types[n])?)
        };
        let mut combos: Vec<Vec<Value>> = vec![Vec::new()];
        let mut columns = Vec::new();
        let mut ors: Vec<(usize, Value)> = Vec::new();
        let mut range = None;
        let mut range_column = None;
        for (i, k) in self.keys.iter().enumerate() {
            let values = match k {
                KeyParam::One(n) => vec![value(*n)?],
                KeyParam::Many(ns) => ns.iter().map(|&n| value(n)).collect::<Result<_, _>>()?,
                KeyParam::Or(n) => {
                    ors.push((i, value(*n)?));
                    continue;
                }
                KeyParam::Range { low, high } => {
                    let bound =
                        |b: &Option<(usize, bool)>| -> Result<Option<Bound<Value>>, SqlError> {
                            Ok(match b {
                                None => Some(Bound::Unbounded),
                                Some((n, inclusive)) => {
                                    let v = value(*n)?;
                                    if v.is_null() {
                                        None
                                    } else if *inclusive {
                                        Some(Bound::Included(v))
                                    } else {
                                        Some(Bound::Excluded(v))
                                    }
                                }
                            })
                        };
                    match (bound(low)?, bound(high)?) {
                        (Some(l), Some(h)) => range = Some((l, h)),
                        _ => return Ok(Some(Vec::new())),
                    }
                    range_column = Some(i);
                    continue;
                }
            };
            columns.push(i);
            let mut next = Vec::with_capacity(combos.len() * values.len());
            for c in &combos {
                for v in &values {
                    if v.is_null() {
                        continue;
                    }
                    let mut c = c.clone();
                    c.push(v.clone());
                    if !next.contains(&c) {
                        next.push(c);
                    }
                }
            }
            if next.len() > MAX_KEYS_PER_READ {
                return Ok(None);
            }
            combos = next;
        }
        // Without an OR, one lookup per combination; with one, one per side
        // (a NULL side matches nothing), each leaving out the rows an
        // earlier side found.
        let sides: Vec<Option<(usize, Value)>> = if ors.is_empty() {
            vec![None]
        } else {
            ors.iter()
                .filter(|(_, v)| !v.is_null())
                .cloned()
                .map(Some)
                .collect()
        };
        let mut out = Vec::new();
        for (s, side) in sides.iter().enumerate() {
            let mut cols = columns.clone();
            let exclude: Vec<(usize, Value)> = sides[..s].iter().flatten().cloned().collect();
            if let Some((i, _)) = side {
                cols.push(*i);
            }
            cols.extend(range_column);
            for prefix in &combos {
                let mut prefix = prefix.clone();
                if let Some((_, v)) = side {
                    prefix.push(v.clone());
                }
                out.push(Lookup {
                    columns: cols.clone(),
                    prefix,
                    range: range.clone(),
                    exclude: exclude.clone(),
                });
            }
        }
        if out.len() > MAX_KEYS_PER_READ {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// The answer from the rows of every key looked up: merged, made
    /// distinct, sorted, offset and limited as the query says, and cut to
    /// its own columns.
    pub fn finish(&self, mut rows: Vec<Row>, keys_read: usize) -> Vec<Row> {
        // Rows of different keys may be equal (a range or an OR reads many
        // keys in one lookup), so DISTINCT is applied to the merged rows.
        if self.distinct
            && (keys_read > 1 || self.keys.iter().any(|k| !matches!(k, KeyParam::One(_))))
        {
            let mut seen = std::collections::HashSet::new();
            rows.retain(|r| seen.insert(r[..self.visible].to_vec()));
        }
        if !self.order.is_empty() {
            rows.sort_by(|a, b| compare_rows(&self.order, a, b));
        }
        if self.offset > 0 || self.limit.is_some() {
            rows = rows
                .into_iter()
                .skip(self.offset)
                .take(self.limit.unwrap_or(usize::MAX))
                .collect();
        }
        for r in &mut rows {
            r.truncate(self.visible);
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> ast::Query {
        match aqueduct_plan::parse::parse(sql).unwrap().pop() {
            Some(ast::Statement::Query(q)) => *q,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_empty_answer_is_fixed_without_having_or_subqueries() {
        let fixed = |sql: &str| empty_answer_is_fixed(&query(sql));
        assert!(fixed("SELECT count(*), sum(x) + 1 FROM t WHERE k = $1"));
        assert!(fixed(
            "SELECT coalesce(max(x), 'selected') FROM t WHERE k = $1"
        ));
        assert!(!fixed(
            "SELECT count(*) FROM t WHERE k = $1 HAVING count(*) < 2"
        ));
        assert!(!fixed(
            "SELECT count(*), (SELECT max(y) FROM u) FROM t WHERE k = $1"
        ));
        assert!(!fixed(
            "SELECT count(*), EXISTS (SELECT 1 FROM u) FROM t WHERE k = $1"
        ));
    }
}
