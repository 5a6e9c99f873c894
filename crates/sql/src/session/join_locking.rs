//! `SELECT ... FROM a JOIN b ... FOR UPDATE [OF a] [NOWAIT | SKIP LOCKED]`
//! (as ORMs write `select_for_update()` with a filter across relations):
//! for each table it locks ([`JoinLocking`], decided by the binder), the
//! keys of the rows the query reads of it are found, those rows locked
//! through the one-table locking select (`exec.rs`), and the query then
//! runs over the rows locked, so `SKIP LOCKED` leaves the others out and a
//! row changed while it waited is seen as it is now (PostgreSQL re-checks
//! such a row the same way).

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::{JoinLocking, LockTarget, Outcome, RowLocking};
use aqueduct_values::{DataType, Value};
use sqlparser::ast::{self, Statement};

use super::run::literal_of;
use super::state::Session;

impl Session {
    pub(crate) fn run_join_locking(
        &mut self,
        st: &Statement,
        plan: &JoinLocking,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let Statement::Query(q) = st else {
            return Err(SqlError::new("XX000", "only a query locks rows"));
        };
        let mut query = q.as_ref().clone();
        query.locks.clear();
        let mut conditions = Vec::new();
        for target in &plan.targets {
            let width = target.key.len();
            let keys: Vec<Vec<Value>> = self
                .rows_of(keys_query(&query, target, plan.locking)?, hints, params)?
                .into_iter()
                .map(|mut row| row.split_off(row.len() - width))
                .collect();
            let locked = match rows_wanted(q, params) {
                // Others' rows are skipped until the LIMIT's rows are
                // locked, in the query's order, as PostgreSQL's scan does.
                Some(wanted) if plan.locking == RowLocking::SkipLocked => {
                    let mut locked: Vec<Vec<Value>> = Vec::new();
                    for key in keys {
                        if locked.len() >= wanted {
                            break;
                        }
                        if !locked.contains(&key) {
                            let lock = lock_query(target, &[key], plan.locking);
                            locked.extend(self.rows_of(lock, &[], &[])?);
                        }
                    }
                    locked
                }
                _ if keys.is_empty() => Vec::new(),
                _ => {
                    let lock = lock_query(target, &keys, plan.locking);
                    self.rows_of(lock, &[], &[])?
                }
            };
            conditions.push(key_in(Some(&target.qualifier), &target.key, &locked));
        }
        let ast::SetExpr::Select(select) = query.body.as_mut() else {
            return Err(SqlError::new("XX000", "a locking query is one SELECT"));
        };
        for c in conditions {
            select.selection = Some(match select.selection.take() {
                None => c,
                Some(w) => and(nested(w), c),
            });
        }
        let st = Statement::Query(Box::new(query));
        let route = self.route(&st, hints)?;
        self.run_route(&st, route, hints, params)
    }

    /// The rows `q` answers.
    fn rows_of(
        &mut self,
        q: ast::Query,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Vec<Vec<Value>>, SqlError> {
        let st = Statement::Query(Box::new(q));
        let route = self.route(&st, hints)?;
        match self.run_route(&st, route, hints, params)? {
            Outcome::Rows { rows, .. } => Ok(rows),
            _ => Err(SqlError::new("XX000", "a query gave no rows")),
        }
    }
}

/// How many rows `q`'s constant (or parameter) LIMIT and OFFSET let it
/// read, when it has a LIMIT.
fn rows_wanted(q: &ast::Query, params: &[Value]) -> Option<usize> {
    let count = |e: &ast::Expr| -> Option<usize> {
        match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => n.parse().ok(),
                ast::Value::Placeholder(p) => {
                    let i: usize = p.strip_prefix('$')?.parse().ok()?;
                    match params.get(i.checked_sub(1)?)? {
                        Value::Int(n) => usize::try_from(*n).ok(),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        }
    };
    match q.limit_clause.as_ref()? {
        ast::LimitClause::LimitOffset { limit, offset, .. } => {
            let skipped = match offset {
                Some(o) => count(&o.value)?,
                None => 0,
            };
            Some(count(limit.as_ref()?)?.saturating_add(skipped))
        }
        ast::LimitClause::OffsetCommaLimit { offset, limit } => {
            Some(count(limit)?.saturating_add(count(offset)?))
        }
    }
}

/// `query` answering, after its own columns (so ORDER BY may name them),
/// the keys of `target`'s rows it reads. Under `SKIP LOCKED` without its
/// LIMIT: the rows others hold are left out before the limit counts.
fn keys_query(
    query: &ast::Query,
    target: &LockTarget,
    locking: RowLocking,
) -> Result<ast::Query, SqlError> {
    let mut q = query.clone();
    if locking == RowLocking::SkipLocked {
        q.limit_clause = None;
        q.fetch = None;
    }
    let ast::SetExpr::Select(select) = q.body.as_mut() else {
        return Err(SqlError::new("XX000", "a locking query is one SELECT"));
    };
    select.projection.extend(
        target
            .key
            .iter()
            .map(|k| ast::SelectItem::UnnamedExpr(column(Some(&target.qualifier), k))),
    );
    Ok(q)
}

/// `SELECT key FROM table WHERE key IN (keys) FOR UPDATE [NOWAIT | SKIP
/// LOCKED]`: a one-table locking select.
fn lock_query(target: &LockTarget, keys: &[Vec<Value>], locking: RowLocking) -> ast::Query {
    let projection: Vec<String> = target.key.iter().map(|k| quoted(k)).collect();
    let sql = format!(
        "SELECT {} FROM {} FOR UPDATE{}",
        projection.join(", "),
        quoted(&target.table),
        match locking {
            RowLocking::Wait => "",
            RowLocking::NoWait => " NOWAIT",
            RowLocking::SkipLocked => " SKIP LOCKED",
        }
    );
    let mut q =
        match sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, &sql)
            .ok()
            .and_then(|mut v| v.pop())
        {
            Some(Statement::Query(q)) => *q,
            other => unreachable!("a locking select built from names parses: {other:?}"),
        };
    if let ast::SetExpr::Select(select) = q.body.as_mut() {
        select.selection = Some(key_in(None, &target.key, keys));
    }
    q
}

/// `(key) IN (rows)`: `k IN (...)` for a key of one column, else an OR of
/// ANDs; `false` for no rows.
fn key_in(qualifier: Option<&str>, key: &[String], rows: &[Vec<Value>]) -> ast::Expr {
    if rows.is_empty() {
        return ast::Expr::Value(ast::Value::Boolean(false).into());
    }
    if let [k] = key {
        return ast::Expr::InList {
            expr: Box::new(column(qualifier, k)),
            list: rows.iter().map(|r| literal_of(&r[0])).collect(),
            negated: false,
        };
    }
    rows.iter()
        .map(|r| {
            key.iter()
                .zip(r)
                .map(|(k, v)| ast::Expr::BinaryOp {
                    left: Box::new(column(qualifier, k)),
                    op: ast::BinaryOperator::Eq,
                    right: Box::new(literal_of(v)),
                })
                .reduce(and)
                .map(nested)
                .expect("a primary key has columns")
        })
        .reduce(|a, b| ast::Expr::BinaryOp {
            left: Box::new(a),
            op: ast::BinaryOperator::Or,
            right: Box::new(b),
        })
        .map(nested)
        .expect("rows is not empty")
}

fn column(qualifier: Option<&str>, name: &str) -> ast::Expr {
    let name = ast::Ident::with_quote('"', name);
    match qualifier {
        Some(q) => ast::Expr::CompoundIdentifier(vec![ast::Ident::with_quote('"', q), name]),
        None => ast::Expr::Identifier(name),
    }
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn and(a: ast::Expr, b: ast::Expr) -> ast::Expr {
    ast::Expr::BinaryOp {
        left: Box::new(a),
        op: ast::BinaryOperator::And,
        right: Box::new(b),
    }
}

fn nested(e: ast::Expr) -> ast::Expr {
    ast::Expr::Nested(Box::new(e))
}
