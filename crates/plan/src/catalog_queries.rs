//! The catalog as clients ask for it: `SHOW TABLES`' rows, and the statements
//! that name `pg_catalog` or `information_schema` relations, which run
//! over those relations built from the catalog for them
//! (`pg_catalog.rs`). A relation is recognised by its name in the parsed
//! statement, never by searching the statement's text.

use aqueduct_tables::Catalog;
use aqueduct_values::Value;
use sqlparser::ast;

use crate::plan::CatalogPlan;

/// The catalog relation `name` names, as the binder resolves it
/// (`pg_catalog.pg_class` and `pg_class` are `pg_class`;
/// `information_schema.tables` keeps its schema), if it is one.
pub fn catalog_relation(name: &ast::ObjectName) -> Option<String> {
    let resolved = crate::bind::object_name(name).ok()?;
    crate::pg_catalog::is_catalog_relation(&resolved).then_some(resolved)
}

/// The catalog relations a statement (or a part of one) names, each once,
/// in the order it first names them.
pub fn catalog_relations<T: ast::Visit>(node: &T) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let _ = ast::visit_relations(node, |name| {
        if let Some(r) = catalog_relation(name) {
            if !out.contains(&r) {
                out.push(r);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}

/// Whether a statement reads catalog relations.
pub fn uses_virtual_tables(st: &ast::Statement) -> bool {
    !catalog_relations(st).is_empty()
}

/// The sequences a query reads as relations (`SELECT last_value FROM s`).
pub fn sequences_read(catalog: &Catalog, st: &ast::Statement) -> Vec<String> {
    let ast::Statement::Query(_) = st else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let _ = ast::visit_relations(st, |name| {
        if let Ok(n) = crate::bind::object_name(name) {
            if catalog.sequence(&n).is_some() && catalog.table(&n).is_none() && !out.contains(&n) {
                out.push(n);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}

/// Runs a catalog plan.
pub fn run(catalog: &Catalog, plan: &CatalogPlan, params: &[Value]) -> Vec<Vec<Value>> {
    let _ = params;
    let text = |s: &str| Value::Text(s.to_string());
    match plan {
        CatalogPlan::Tables => catalog
            .tables
            .values()
            .map(|t| vec![text(&t.schema.name)])
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catalog relations are found by name, never in string literals.
    #[test]
    fn literals_are_not_relations() {
        for sql in [
            "SELECT * FROM t WHERE name = 'pg_tables'",
            "SELECT * FROM t WHERE name = 'information_schema.tables'",
            "SELECT * FROM t WHERE name = 'FROM pg_type WHERE typname = $1'",
            "INSERT INTO t VALUES ('pg_catalog.pg_class')",
        ] {
            let st = crate::parse::parse(sql).unwrap().pop().unwrap();
            assert!(catalog_relations(&st).is_empty(), "{sql}");
        }
        for (sql, names) in [
            ("SELECT * FROM information_schema.columns", vec!["information_schema.columns"]),
            ("SELECT * FROM pg_catalog.pg_tables", vec!["pg_tables"]),
            ("SELECT * FROM t WHERE id IN (SELECT 1 FROM pg_tables)", vec!["pg_tables"]),
            ("INSERT INTO pg_tables VALUES ('a', 'b', 'c')", vec!["pg_tables"]),
            (
                "SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace",
                vec!["pg_class", "pg_namespace"],
            ),
        ] {
            let st = crate::parse::parse(sql).unwrap().pop().unwrap();
            assert!(uses_virtual_tables(&st), "{sql}");
            assert_eq!(catalog_relations(&st), names, "{sql}");
        }
    }
}
