//! What a statement may do with an ephemeral table (`CREATE TABLE t (...)
//! WITH (ephemeral = true)`): published but not stored, so it takes
//! inserts (`INSERT`, `COPY FROM`) and schema changes, and nothing that
//! would read its rows, which are never kept. Every statement is checked
//! here before it is bound (the sessions call [`refuse_unsupported`]):
//! reads (`SELECT`, `FOR UPDATE`, `COPY TO`, subqueries, views over one),
//! `UPDATE`, `DELETE`, `INSERT ... ON CONFLICT`, `CREATE INDEX`. The
//! binder refuses the rest where it resolves the table: a foreign key
//! referencing one, a unique constraint on one (`bind.rs`, `alter.rs`).
//! `TRUNCATE` is allowed and has nothing to do.
//!
//! Refusals are SQLSTATE 0A000, naming the table and what to do instead.

use std::ops::ControlFlow;

use aqueduct_expr::SqlError;
use aqueduct_tables::Catalog;
use sqlparser::ast::{self, Statement, Visit, Visitor};

use crate::bind::{ephemeral_refused as refused, ident, object_name};

/// What to tell a client that wants an ephemeral table's rows.
const READ_HINT: &str = "An ephemeral table keeps none of its rows: read them from the change \
                         feed or a publication, or create the table without WITH (ephemeral = \
                         true) to keep them.";

/// Refuses what `st` would do to an ephemeral table that it cannot.
/// Looks up only the names `st` uses (never every table), so its cost
/// follows the statement, not the catalog.
pub fn refuse_unsupported(catalog: &Catalog, st: &Statement) -> Result<(), SqlError> {
    let ephemeral = |name: &str| catalog.table(name).is_some_and(|t| t.schema.ephemeral);
    let target_of = |n: &ast::ObjectName| object_name(n).ok().filter(|n| ephemeral(n));
    match st {
        Statement::Insert(i) => {
            if let ast::TableObject::TableName(n) = &i.table {
                if let (Some(t), Some(_)) = (target_of(n), &i.on) {
                    return Err(refused(
                        &t,
                        "INSERT ... ON CONFLICT",
                        "No stored row can conflict with an insert into an ephemeral table: \
                         drop the ON CONFLICT clause.",
                    ));
                }
            }
            // RETURNING returns the rows written, reading nothing stored.
            match &i.source {
                Some(q) => refuse_reads(catalog, q.as_ref()),
                None => Ok(()),
            }
        }
        Statement::Update(u) => {
            if let ast::TableFactor::Table { name, .. } = &u.table.relation {
                if let Some(t) = target_of(name) {
                    return Err(refused(
                        &t,
                        "UPDATE",
                        "Rows of an ephemeral table are never kept, so none can change: insert a \
                         new row instead.",
                    ));
                }
            }
            refuse_reads(catalog, st)
        }
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
            };
            if let Some(ast::TableFactor::Table { name, .. }) = from.first().map(|t| &t.relation) {
                if let Some(t) = target_of(name) {
                    return Err(refused(
                        &t,
                        "DELETE",
                        "Rows of an ephemeral table are never kept, so none can be deleted; \
                         compaction drops them from the log once every subscriber has them.",
                    ));
                }
            }
            refuse_reads(catalog, st)
        }
        Statement::Copy {
            source: ast::CopySource::Table { table_name, .. },
            to: true,
            ..
        } => match target_of(table_name) {
            Some(t) => Err(refused(&t, "COPY ... TO", READ_HINT)),
            None => Ok(()),
        },
        Statement::CreateIndex(c) => match target_of(&c.table_name) {
            Some(t) => Err(refused(
                &t,
                "an index",
                "An ephemeral table has no rows to index: index the tables its subscribers keep.",
            )),
            None => Ok(()),
        },
        Statement::Copy {
            source: ast::CopySource::Query(q),
            ..
        } => refuse_reads(catalog, q.as_ref()),
        Statement::Explain { statement, .. } => refuse_unsupported(catalog, statement),
        Statement::Query(_) | Statement::CreateView(_) | Statement::Declare { .. } => {
            refuse_reads(catalog, st)
        }
        // Schema changes (ALTER, DROP, TRUNCATE, COMMENT, GRANT), COPY FROM
        // and publications name the table without reading rows.
        _ => Ok(()),
    }
}

/// Refuses a read of any ephemeral table `node` names (a relation named
/// like a common table expression of the statement is the CTE, not the
/// table).
fn refuse_reads<T: Visit>(catalog: &Catalog, node: &T) -> Result<(), SqlError> {
    let mut ctes = CteNames::default();
    let _ = node.visit(&mut ctes);
    let mut names = Vec::new();
    let _ = ast::visit_relations(node, |n| {
        if let Ok(n) = object_name(n) {
            names.push(n);
        }
        ControlFlow::<()>::Continue(())
    });
    for n in names {
        if ctes.0.contains(&n) {
            continue;
        }
        if catalog.table(&n).is_some_and(|t| t.schema.ephemeral) {
            let what = if is_view(node) { "a view" } else { "reading" };
            return Err(refused(&n, what, READ_HINT));
        }
    }
    Ok(())
}

fn is_view<T: Visit>(node: &T) -> bool {
    struct Views(bool);
    impl Visitor for Views {
        type Break = ();
        fn pre_visit_statement(&mut self, st: &Statement) -> ControlFlow<()> {
            self.0 |= matches!(st, Statement::CreateView(_));
            ControlFlow::Continue(())
        }
    }
    let mut v = Views(false);
    let _ = node.visit(&mut v);
    v.0
}

/// The names of the common table expressions of a statement.
#[derive(Default)]
struct CteNames(Vec<String>);

impl Visitor for CteNames {
    type Break = ();
    fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<()> {
        if let Some(w) = &q.with {
            self.0
                .extend(w.cte_tables.iter().map(|c| ident(&c.alias.name)));
        }
        ControlFlow::Continue(())
    }
}
