//! Prepared keyed reads of one maintained view: `SELECT <columns> FROM view
//! WHERE col = $1 [AND col2 = $2 ...]`, the shape a web application reads a
//! view in. Found once when the statement is prepared; each execution is
//! then one view lookup and a projection — no parse, no bind, no executor.
//!
//! Anything else that reads views (ORDER BY, expressions, IN lists, ranges,
//! joins of views) takes the general path, which copies the rows it needs
//! into a scratch catalog and runs the SQL executor over them.

use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use crate::view_entry::ViewEntry;
use aqueduct_plan::plan::Column;

/// Where one key column's value comes from.
#[derive(Clone, Debug)]
enum KeyValue {
    /// The statement's parameter (0-based).
    Param(usize),
    /// A literal written in the statement, already of the column's type.
    Literal(Value),
}

/// A prepared keyed read of one view.
#[derive(Clone, Debug)]
pub struct ViewRead {
    view: String,
    /// The entry the plan was made for: a view dropped and made again
    /// under the same name is planned again.
    uid: u64,
    /// The view's columns looked up by, and the values they must hold.
    key: Vec<usize>,
    values: Vec<KeyValue>,
    /// The view's columns the result has, in order.
    project: Vec<usize>,
    pub columns: Vec<Column>,
    pub param_types: Vec<DataType>,
}

impl ViewRead {
    /// A plan for `st` reading `view`, or `None` when it has another shape.
    /// `hints` are the parameter types the client declared: a declared type
    /// other than the key column's goes the general way, which converts it.
    pub fn plan(st: &ast::Statement, view: &ViewEntry, hints: &[Option<DataType>]) -> Option<Self> {
        let ast::Statement::Query(q) = st else {
            return None;
        };
        if q.with.is_some()
            || q.order_by.is_some()
            || q.limit_clause.is_some()
            || q.fetch.is_some()
            || !q.locks.is_empty()
        {
            return None;
        }
        let ast::SetExpr::Select(sel) = q.body.as_ref() else {
            return None;
        };
        if sel.distinct.is_some()
            || sel.top.is_some()
            || sel.into.is_some()
            || sel.having.is_some()
            || sel.qualify.is_some()
            || !matches!(&sel.group_by, ast::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty())
            || sel.from.len() != 1
            || !sel.from[0].joins.is_empty()
        {
            return None;
        }
        // The view, under its own name or an alias.
        let qualifier = match &sel.from[0].relation {
            ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let last = aqueduct_plan::bind::ident(name.0.last()?.as_ident()?);
                if last != view.name {
                    return None;
                }
                match alias {
                    Some(a) if a.columns.is_empty() => aqueduct_plan::bind::ident(&a.name),
                    Some(_) => return None,
                    None => last,
                }
            }
            _ => return None,
        };
        let column = |e: &ast::Expr| -> Option<usize> {
            let name = match e {
                ast::Expr::Identifier(i) => aqueduct_plan::bind::ident(i),
                ast::Expr::CompoundIdentifier(p) if p.len() == 2 => {
                    if aqueduct_plan::bind::ident(&p[0]) != qualifier {
                        return None;
                    }
                    aqueduct_plan::bind::ident(&p[1])
                }
                _ => return None,
            };
            view.columns.iter().position(|c| c.name == name)
        };

        let mut project = Vec::new();
        let mut columns = Vec::new();
        for item in &sel.projection {
            match item {
                ast::SelectItem::Wildcard(o) if wildcard_plain(o) => {
                    project.extend(0..view.columns.len());
                    columns.extend(view.columns.iter().cloned());
                }
                ast::SelectItem::UnnamedExpr(e) => {
                    let c = column(e)?;
                    project.push(c);
                    columns.push(view.columns[c].clone());
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let c = column(expr)?;
                    project.push(c);
                    columns.push(Column {
                        name: aqueduct_plan::bind::ident(alias),
                        ..view.columns[c].clone()
                    });
                }
                _ => return None,
            }
        }

        let mut conjuncts = Vec::new();
        crate::auto_views::split(sel.selection.as_ref()?, &mut conjuncts);
        let mut key = Vec::new();
        let mut values = Vec::new();
        let mut param_types: Vec<Option<DataType>> = Vec::new();
        for c in conjuncts {
            let ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } = c
            else {
                return None;
            };
            let (col, value) = match (column(left), column(right)) {
                (Some(c), None) => (c, right.as_ref()),
                (None, Some(c)) => (c, left.as_ref()),
                _ => return None,
            };
            if key.contains(&col) {
                return None;
            }
            let ty = &view.columns[col].ty;
            let ast::Expr::Value(v) = value else {
                return None;
            };
            let value = match &v.value {
                ast::Value::Placeholder(p) => {
                    let n = p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)?;
                    if param_types.len() <= n {
                        param_types.resize(n + 1, None);
                    }
                    if param_types[n].is_some() {
                        return None;
                    }
                    if let Some(Some(hint)) = hints.get(n) {
                        if hint != ty {
                            return None;
                        }
                    }
                    param_types[n] = Some(ty.clone());
                    KeyValue::Param(n)
                }
                ast::Value::Number(n, _) => {
                    KeyValue::Literal(Value::Text(n.clone()).coerce(ty).ok()?)
                }
                ast::Value::SingleQuotedString(s) => {
                    KeyValue::Literal(Value::Text(s.clone()).coerce(ty).ok()?)
                }
                _ => return None,
            };
            key.push(col);
            values.push(value);
        }
        // Every parameter the client declared is used, each as one key.
        if hints.len() > param_types.len() {
            return None;
        }
        let param_types = param_types.into_iter().collect::<Option<Vec<_>>>()?;
        Some(ViewRead {
            view: view.name.clone(),
            uid: view.uid(),
            key,
            values,
            project,
            columns,
            param_types,
        })
    }

    pub fn view(&self) -> &str {
        &self.view
    }

    /// Whether `entry` is still the view this plan was made for.
    pub fn planned_for(&self, entry: &ViewEntry) -> bool {
        entry.uid() == self.uid
    }

    /// The key columns looked up by.
    pub fn key(&self) -> &[usize] {
        &self.key
    }

    /// The key values for `params` (already of the parameter types), or
    /// `None` when one is NULL: `col = NULL` holds for no row.
    pub fn key_values(&self, params: &[Value]) -> Option<Vec<Value>> {
        self.values
            .iter()
            .map(|v| match v {
                KeyValue::Param(n) => params.get(*n).filter(|v| !v.is_null()).cloned(),
                KeyValue::Literal(v) => (!v.is_null()).then(|| v.clone()),
            })
            .collect()
    }

    /// Calls `f` with [`ViewRead::key_values`], borrowing the parameters
    /// themselves when they are the key in order (no copy).
    pub fn with_key_values<T>(&self, params: &[Value], f: impl FnOnce(Option<&[Value]>) -> T) -> T {
        let in_order = self.values.len() == params.len()
            && self
                .values
                .iter()
                .enumerate()
                .all(|(i, v)| matches!(v, KeyValue::Param(n) if *n == i));
        if in_order {
            return f((!params.iter().any(Value::is_null)).then_some(params));
        }
        f(self.key_values(params).as_deref())
    }

    /// A view row as a result row.
    pub fn project(&self, row: &[Value]) -> Vec<Value> {
        self.project.iter().map(|&c| row[c].clone()).collect()
    }

    /// Calls `f` on a view row as a result row: the row itself when the
    /// result has the view's columns in order, else a copy made in
    /// `scratch`.
    pub fn with_projected<T>(
        &self,
        row: &[Value],
        scratch: &mut Vec<Value>,
        f: impl FnOnce(&[Value]) -> T,
    ) -> T {
        let in_order = self.project.len() == row.len()
            && self.project.iter().enumerate().all(|(i, &c)| i == c);
        if in_order {
            return f(row);
        }
        scratch.clear();
        scratch.extend(self.project.iter().map(|&c| row[c].clone()));
        f(scratch)
    }
}

/// `*` without EXCEPT, REPLACE and the like.
fn wildcard_plain(o: &ast::WildcardAdditionalOptions) -> bool {
    o.opt_ilike.is_none()
        && o.opt_exclude.is_none()
        && o.opt_except.is_none()
        && o.opt_replace.is_none()
        && o.opt_rename.is_none()
}
