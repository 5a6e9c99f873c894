//! Sharded tables and the hops that touch them (`docs/chains.md`,
//! "Sharded tables").
//!
//! A table that names its shard key (`CREATE TABLE ... WITH (shard_key =
//! 'user_id')`) keeps each entity's rows in one shard, with the rows of
//! every other table keyed by the same entity. A hop runs on the shard of
//! its key (`HOP ON $user`), so every statement of the hop must stay in
//! that shard: an `INSERT` puts the hop's key in the shard-key column, and
//! an `UPDATE`, a `DELETE` and every `SELECT` reading the table say
//! `shard_key_column = $key` in their `WHERE` (a conjunct at its top
//! level). Checked once, at declaration; a hop that could reach another
//! shard is refused (42P13), naming the statement and what it lacks.
//! Tables without a shard key are global: any hop may use them.

use std::ops::ControlFlow;

use aqueduct_expr::SqlError;
use aqueduct_tables::Catalog;
use sqlparser::ast::{self, Expr, SetExpr, Statement, Visit, Visitor};

use super::declare::{relation, ChainDecl, HopKey};

/// Refuses a hop whose statements may touch rows of a sharded table
/// outside the hop's shard.
pub fn check_hops(decl: &ChainDecl, catalog: &Catalog) -> Result<(), SqlError> {
    for (i, hop) in decl.hops.iter().enumerate() {
        let key = Key(&hop.key);
        let statements = hop
            .abort_if
            .iter()
            .chain(hop.statements.iter().map(|s| &s.statement));
        for st in statements {
            if let Err(why) = check_statement(st, &key, catalog) {
                return Err(SqlError::new(
                    "42P13",
                    format!(
                        "hop {} of chain {} may reach another shard: {why}",
                        i + 1,
                        decl.name
                    ),
                )
                .with_detail(format!("in: {st}"))
                .with_hint(
                    "a hop touches a sharded table only where its shard key equals the hop's key (HOP ON $key)",
                ));
            }
        }
    }
    Ok(())
}

/// The hop's key as it appears in its rewritten statements.
struct Key<'a>(&'a HopKey);

impl Key<'_> {
    fn is(&self, e: &Expr) -> bool {
        let e = strip(e);
        match (self.0, e) {
            (HopKey::Param(slot), Expr::Value(v)) => {
                matches!(&v.value, ast::Value::Placeholder(p) if *p == format!("${}", slot + 1))
            }
            (HopKey::Constant(c), Expr::Value(v)) => match &v.value {
                ast::Value::SingleQuotedString(s) | ast::Value::Number(s, _) => *s == c.to_string(),
                _ => false,
            },
            _ => false,
        }
    }
}

/// An expression without casts and parentheses around it.
fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => strip(inner),
        Expr::Cast { expr, .. } => strip(expr),
        other => other,
    }
}

fn shard_column(catalog: &Catalog, table: &str) -> Option<String> {
    catalog
        .table(table)
        .and_then(|t| t.schema.shard_key.clone())
}

/// Whether `selection` has `[qualifier.]column = key` as a conjunct at
/// its top level, the qualifier (when given) one of `names`.
fn pins(selection: Option<&Expr>, column: &str, names: &[String], key: &Key) -> bool {
    let Some(e) = selection else {
        return false;
    };
    match strip(e) {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => pins(Some(left), column, names, key) || pins(Some(right), column, names, key),
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } => {
            let is_column = |e: &Expr| match strip(e) {
                Expr::Identifier(i) => i.value.eq_ignore_ascii_case(column),
                Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                    parts[1].value.eq_ignore_ascii_case(column)
                        && names.iter().any(|n| parts[0].value.eq_ignore_ascii_case(n))
                }
                _ => false,
            };
            (is_column(left) && key.is(right)) || (is_column(right) && key.is(left))
        }
        _ => false,
    }
}

fn check_statement(st: &Statement, key: &Key, catalog: &Catalog) -> Result<(), String> {
    match st {
        Statement::Insert(i) => {
            if let ast::TableObject::TableName(n) = &i.table {
                let table = relation(n);
                if let Some(col) = shard_column(catalog, &table) {
                    check_insert(i, &table, &col, key, catalog)?;
                }
            }
        }
        Statement::Update(u) => {
            if let ast::TableFactor::Table { name, alias, .. } = &u.table.relation {
                let table = relation(name);
                if let Some(col) = shard_column(catalog, &table) {
                    let names = names_of(&table, alias);
                    if !pins(u.selection.as_ref(), &col, &names, key) {
                        return Err(format!("UPDATE {table} lacks WHERE {col} = the hop's key"));
                    }
                }
            }
        }
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
            };
            if let Some(ast::TableFactor::Table { name, alias, .. }) =
                from.first().map(|t| &t.relation)
            {
                let table = relation(name);
                if let Some(col) = shard_column(catalog, &table) {
                    let names = names_of(&table, alias);
                    if !pins(d.selection.as_ref(), &col, &names, key) {
                        return Err(format!(
                            "DELETE FROM {table} lacks WHERE {col} = the hop's key"
                        ));
                    }
                }
            }
        }
        _ => {}
    }
    // Every SELECT inside (the statement's own, subqueries, an INSERT's
    // source) pins the sharded tables it reads.
    let mut selects = Selects {
        key,
        catalog,
        error: None,
    };
    let _ = st.visit(&mut selects);
    match selects.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn names_of(table: &str, alias: &Option<ast::TableAlias>) -> Vec<String> {
    let mut names = vec![table.to_string()];
    if let Some(a) = alias {
        names.push(a.name.value.to_ascii_lowercase());
    }
    names
}

fn check_insert(
    i: &ast::Insert,
    table: &str,
    col: &str,
    key: &Key,
    catalog: &Catalog,
) -> Result<(), String> {
    let schema = &catalog.table(table).expect("sharded, so it exists").schema;
    let position = if i.columns.is_empty() {
        schema.column_index(col)
    } else {
        i.columns
            .iter()
            .position(|c| c.to_string().eq_ignore_ascii_case(col))
    };
    let lacks = || format!("INSERT INTO {table} does not set {col} to the hop's key");
    let Some(position) = position else {
        return Err(lacks());
    };
    let Some(source) = &i.source else {
        return Err(lacks());
    };
    let ok = match source.body.as_ref() {
        SetExpr::Values(v) => v
            .rows
            .iter()
            .all(|row| row.content.get(position).is_some_and(|e| key.is(e))),
        SetExpr::Select(s) => s.projection.get(position).is_some_and(|p| match p {
            ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                key.is(e)
            }
            _ => false,
        }),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(lacks())
    }
}

/// Finds the SELECTs of a statement that read a sharded table without
/// pinning it to the hop's key.
struct Selects<'a> {
    key: &'a Key<'a>,
    catalog: &'a Catalog,
    error: Option<String>,
}

impl Visitor for Selects<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(s) = q.body.as_ref() {
            for t in &s.from {
                let factors =
                    std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation));
                for f in factors {
                    let ast::TableFactor::Table { name, alias, .. } = f else {
                        continue;
                    };
                    let table = relation(name);
                    let Some(col) = shard_column(self.catalog, &table) else {
                        continue;
                    };
                    let names = names_of(&table, alias);
                    if !pins(s.selection.as_ref(), &col, &names, self.key) {
                        self.error = Some(format!(
                            "a SELECT reads {table} without WHERE {col} = the hop's key"
                        ));
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }
}
