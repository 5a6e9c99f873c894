//! Subqueries in expressions (`(SELECT ...)`, `EXISTS`, `IN (SELECT
//! ...)`, `ARRAY(SELECT ...)`), correlated or not, for statements
//! evaluated once: the subquery's references to the enclosing query's
//! columns become parameters numbered after the statement's own, and a
//! [`SubqueryCompiler`] (one-shot evaluation's) prepares it to run for the
//! values they take in each row. Maintained views have no compiler, so a
//! subquery there is refused.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use aqueduct_expr::{Expr, SqlError, Subquery, SubqueryKind};
use aqueduct_values::DataType;
use sqlparser::ast::{self, Visit, Visitor};

use crate::bind::{ident, object_name, Binder, Scope};

/// The relation names and aliases a query's FROM clauses (at any depth)
/// introduce.
#[derive(Default)]
struct Relations {
    qualifiers: HashSet<String>,
    names: Vec<String>,
}

impl Visitor for Relations {
    type Break = ();

    fn pre_visit_table_factor(&mut self, f: &ast::TableFactor) -> ControlFlow<()> {
        match f {
            // An alias hides the relation's name.
            ast::TableFactor::Table { name, alias, .. } => {
                if let Ok(n) = object_name(name) {
                    let last = n.rsplit('.').next().unwrap_or(&n).to_string();
                    if alias.is_none() {
                        self.qualifiers.insert(last);
                    }
                    self.names.push(n);
                }
                if let Some(a) = alias {
                    self.qualifiers.insert(ident(&a.name));
                }
            }
            ast::TableFactor::Derived { alias: Some(a), .. }
            | ast::TableFactor::Function { alias: Some(a), .. }
            | ast::TableFactor::UNNEST { alias: Some(a), .. } => {
                self.qualifiers.insert(ident(&a.name));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Whether `q` refers to relations outside it: a qualifier none of its
/// FROM items introduces, or a bare column none of its tables has.
pub fn is_correlated(catalog: &aqueduct_tables::Catalog, q: &ast::Query) -> bool {
    let mut inner = Relations::default();
    let _ = q.visit(&mut inner);
    let columns: HashSet<String> = inner
        .names
        .iter()
        .filter_map(|n| catalog.table(n))
        .flat_map(|t| t.schema.columns.iter().map(|c| c.name.clone()))
        .collect();
    // Output names the query gives its own items (ORDER BY may use them).
    let aliases: HashSet<String> = match q.body.as_ref() {
        ast::SetExpr::Select(s) => s
            .projection
            .iter()
            .filter_map(|i| match i {
                ast::SelectItem::ExprWithAlias { alias, .. } => Some(ident(alias)),
                _ => None,
            })
            .collect(),
        _ => HashSet::new(),
    };
    ast::visit_expressions(q, |e| {
        let outer = match e {
            ast::Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let q = ident(&parts[parts.len() - 2]);
                !inner.qualifiers.contains(&q)
            }
            ast::Expr::Identifier(i) => {
                let n = ident(i);
                !columns.contains(&n) && !aliases.contains(&n)
            }
            _ => false,
        };
        if outer {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

impl Binder<'_> {
    /// Binds a subquery in an expression: `kind` says what it answers,
    /// `left` is `IN`'s or `ANY`'s left operand.
    pub(crate) fn subquery(
        &mut self,
        kind: SubqueryKind,
        q: &ast::Query,
        left: Option<&ast::Expr>,
        scope: &Scope,
    ) -> Result<Expr, SqlError> {
        let Some(compiler) = self.subqueries.clone() else {
            return Err(SqlError::unsupported("subqueries in a maintained view").with_hint(
                "join the tables instead, or run the query directly (it is then evaluated once)",
            ));
        };
        let mut inner = Relations::default();
        let _ = q.visit(&mut inner);
        let inner_columns: HashSet<String> = inner
            .names
            .iter()
            .filter_map(|n| self.catalog().table(n))
            .flat_map(|t| t.schema.columns.iter().map(|c| c.name.clone()))
            .collect();
        let outer_has = |qualifier: Option<&str>, name: &str| {
            scope.columns.iter().any(|c| {
                c.name == name
                    && match qualifier {
                        Some(q) => c.qualifier.as_deref() == Some(q),
                        None => !c.qualified_only,
                    }
            })
        };
        // The outer references, in the order first met, as the parameter
        // each becomes: numbered after every parameter of the statement's
        // the subquery names, and every one seen so far.
        let mut named = 0;
        let _ = ast::visit_expressions(q, |e| {
            if let ast::Expr::Value(v) = e {
                if let ast::Value::Placeholder(p) = &v.value {
                    if let Some(n) = p.strip_prefix('$').and_then(|d| d.parse::<usize>().ok()) {
                        named = named.max(n);
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
        let first = self.parameter_count().max(named);
        let mut outer: Vec<ast::Expr> = Vec::new();
        let mut rewritten = q.clone();
        let _ = ast::visit_expressions_mut(&mut rewritten, |e| {
            let is_outer = match e {
                ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                    let q = ident(&parts[0]);
                    !inner.qualifiers.contains(&q) && outer_has(Some(&q), &ident(&parts[1]))
                }
                // `pg_catalog.pg_attribute.attrelid`: schema, table, column.
                ast::Expr::CompoundIdentifier(parts)
                    if parts.len() == 3
                        && matches!(ident(&parts[0]).as_str(), "pg_catalog" | "public") =>
                {
                    let q = ident(&parts[1]);
                    !inner.qualifiers.contains(&q) && outer_has(Some(&q), &ident(&parts[2]))
                }
                ast::Expr::Identifier(i) => {
                    let n = ident(i);
                    !inner_columns.contains(&n) && outer_has(None, &n)
                }
                _ => false,
            };
            if is_outer {
                let at = match outer.iter().position(|o| o == e) {
                    Some(at) => at,
                    None => {
                        outer.push(e.clone());
                        outer.len() - 1
                    }
                };
                *e = ast::Expr::Value(
                    ast::Value::Placeholder(format!("${}", first + at + 1)).into(),
                );
            }
            ControlFlow::<()>::Continue(())
        });
        let mut args = Vec::new();
        if let Some(l) = left {
            args.push(self.expr(l, scope, None)?);
        }
        let mut outer_types = Vec::new();
        for o in &outer {
            let bound = self.expr(o, scope, None)?;
            outer_types.push(self.known_type(&bound, scope));
            args.push(bound);
        }
        let prepared = compiler.prepare(&rewritten, first, &outer_types)?;
        // The statement's parameters the subquery names are the statement's.
        for (i, ty) in prepared.params.iter().enumerate().take(named) {
            self.param(&format!("${}", i + 1), Some(ty))?;
        }
        let (columns, runner) = (prepared.columns, prepared.runner);
        if kind != SubqueryKind::Exists && columns.len() != 1 {
            return Err(SqlError::new(
                "42601",
                "subquery must return only one column",
            ));
        }
        let ty = match &kind {
            SubqueryKind::Exists | SubqueryKind::Any(_) | SubqueryKind::All(_) => DataType::Bool,
            SubqueryKind::Scalar => columns[0].ty.clone(),
            SubqueryKind::Array => columns[0].ty.array_of(),
        };
        Ok(Expr::Subquery(
            Arc::new(Subquery { kind, runner, ty }),
            args,
        ))
    }
}
