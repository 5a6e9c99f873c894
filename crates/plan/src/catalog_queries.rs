//! The catalog as clients ask for it: `SHOW TABLES`, `information_schema`
//! tables and `pg_tables` (answered as ordinary tables built on demand), and
//! the listing queries psql sends for `\dt` and `\d name`. Other
//! `pg_catalog` queries get a clear error instead of a wrong answer.

use aqueduct_tables::{Catalog, ColumnDef, SchemaChange, TableSchema};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use aqueduct_expr::SqlError;

use crate::plan::{CatalogPlan, Column, Plan};

/// A recognised catalog query: its plan, result columns and parameter types.
pub type Recognised = (Plan, Vec<Column>, Vec<DataType>);

/// The types Aqueduct has, as `pg_type` would list them: (oid, name).
fn pg_types() -> Vec<(u32, &'static str)> {
    vec![
        (16, "bool"),
        (17, "bytea"),
        (20, "int8"),
        (21, "int2"),
        (23, "int4"),
        (25, "text"),
        (114, "json"),
        (700, "float4"),
        (701, "float8"),
        (1043, "varchar"),
        (1082, "date"),
        (1114, "timestamp"),
        (1184, "timestamptz"),
        (1186, "interval"),
        (1700, "numeric"),
        (2950, "uuid"),
        (3802, "jsonb"),
    ]
}

pub fn show_tables(catalog: &Catalog) -> Result<(Plan, Vec<Column>), SqlError> {
    let _ = catalog;
    Ok((
        Plan::Catalog(CatalogPlan::Tables),
        vec![Column::computed("name", DataType::Text)],
    ))
}

/// A relation of the catalog, recognised by its name in the parsed
/// statement (never by searching the statement's text, so a string
/// literal that mentions one is just a string).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogRelation {
    /// `information_schema.*` and `pg_tables`: ordinary tables built from
    /// the catalog for the statement that reads them ([`virtual_catalog`]).
    Virtual,
    /// `pg_type`, `pg_class` and other `pg_catalog` relations: only the
    /// queries drivers and psql send are answered ([`recognise`]).
    PgCatalog,
}

/// Which catalog relation `name` is, if any. `pg_type` and `pg_class`
/// are found unqualified too, as PostgreSQL searches `pg_catalog` first.
pub fn catalog_relation(name: &ast::ObjectName) -> Option<CatalogRelation> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p.as_ident() {
            Some(i) if i.quote_style.is_some() => i.value.clone(),
            Some(i) => i.value.to_lowercase(),
            None => String::new(),
        })
        .collect();
    match parts
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["information_schema", _] => Some(CatalogRelation::Virtual),
        ["pg_tables"] | ["pg_catalog", "pg_tables"] => Some(CatalogRelation::Virtual),
        ["pg_type" | "pg_class"] | ["pg_catalog", _] => Some(CatalogRelation::PgCatalog),
        _ => None,
    }
}

/// The catalog relations a statement (or a part of one) names, in the
/// order it names them.
pub fn catalog_relations<T: ast::Visit>(node: &T) -> Vec<CatalogRelation> {
    let mut out = Vec::new();
    let _ = ast::visit_relations(node, |name| {
        if let Some(r) = catalog_relation(name) {
            out.push(r);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}

/// Whether a statement reads the virtual catalog tables
/// (`information_schema.*`, `pg_tables`).
pub fn uses_virtual_tables(st: &ast::Statement) -> bool {
    catalog_relations(st).contains(&CatalogRelation::Virtual)
}

/// The last part of a column reference (`typname`, `t.oid` → `oid`).
fn column_named(e: &ast::Expr) -> Option<String> {
    match e {
        ast::Expr::Identifier(i) => Some(i.value.to_lowercase()),
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.to_lowercase()),
        ast::Expr::Nested(inner) => column_named(inner),
        _ => None,
    }
}

/// The string literal `e` is (through parentheses and `COLLATE`).
fn string_literal(e: &ast::Expr) -> Option<&str> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => Some(s),
            _ => None,
        },
        ast::Expr::Nested(inner) | ast::Expr::Collate { expr: inner, .. } => string_literal(inner),
        _ => None,
    }
}

fn is_first_param(e: &ast::Expr) -> bool {
    matches!(e, ast::Expr::Value(v) if matches!(&v.value, ast::Value::Placeholder(p) if p == "$1"))
}

/// The columns compared with `$1` in `select` (`typname = $1` → `typname`).
fn compared_with_first_param(select: &ast::Select) -> Vec<String> {
    let mut out = Vec::new();
    let _ = ast::visit_expressions(select, |e| {
        if let ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } = e
        {
            let named = match (is_first_param(left), is_first_param(right)) {
                (false, true) => column_named(left),
                (true, false) => column_named(right),
                _ => None,
            };
            out.extend(named);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}

/// The pattern of psql's `relname OPERATOR(pg_catalog.~) '^(name)$'`.
fn relname_pattern(select: &ast::Select) -> Option<String> {
    let mut found = None;
    let _ = ast::visit_expressions(select, |e| {
        if let ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::PGCustomBinaryOperator(op),
            right,
        } = e
        {
            let regex = op.last().is_some_and(|o| o == "~");
            if regex && column_named(left).as_deref() == Some("relname") {
                if let Some(p) = string_literal(right) {
                    if let Some(name) = p.strip_prefix("^(").and_then(|p| p.strip_suffix(")$")) {
                        found = Some(name.to_string());
                        return std::ops::ControlFlow::Break(());
                    }
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    found
}

/// The aliases of `select`'s output columns.
fn output_aliases(select: &ast::Select) -> Vec<&str> {
    select
        .projection
        .iter()
        .filter_map(|item| match item {
            ast::SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.as_str()),
            _ => None,
        })
        .collect()
}

/// Recognises the `pg_catalog` queries drivers and psql send, from the
/// relations a SELECT names and its parsed clauses. `None` when it names
/// no `pg_catalog` relation.
pub fn recognise(catalog: &Catalog, select: &ast::Select) -> Result<Option<Recognised>, SqlError> {
    let _ = catalog;
    let mut pg_type = false;
    let mut pg_class = false;
    let _ = ast::visit_relations(select, |name| {
        if catalog_relation(name) == Some(CatalogRelation::PgCatalog) {
            let last = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase());
            match last.as_deref() {
                Some("pg_type") => pg_type = true,
                Some("pg_class") => pg_class = true,
                _ => {}
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    let text_col = |n: &str| Column::computed(n, DataType::Text);
    if pg_type {
        let compared = compared_with_first_param(select);
        if compared.iter().any(|c| c == "typname") {
            return Ok(Some((
                Plan::Catalog(CatalogPlan::TypeByName),
                vec![Column::computed("oid", DataType::Int8), text_col("typname")],
                vec![DataType::Text],
            )));
        }
        if compared.iter().any(|c| c == "oid") {
            return Ok(Some((
                Plan::Catalog(CatalogPlan::TypeByOid),
                vec![
                    Column::computed("is_array", DataType::Bool),
                    text_col("typtype"),
                    text_col("typname"),
                    Column::computed("oid", DataType::Int8),
                ],
                vec![DataType::Int8],
            )));
        }
        return Err(unsupported_catalog_query());
    }
    if !pg_class {
        return match catalog_relations(select).contains(&CatalogRelation::PgCatalog) {
            true => Err(unsupported_catalog_query()),
            false => Ok(None),
        };
    }
    let aliases = output_aliases(select);
    if ["Schema", "Name", "Type"]
        .iter()
        .all(|a| aliases.contains(a))
    {
        return Ok(Some((
            Plan::Catalog(CatalogPlan::PsqlList),
            vec![
                text_col("Schema"),
                text_col("Name"),
                text_col("Type"),
                text_col("Owner"),
            ],
            vec![],
        )));
    }
    if let Some(name) = relname_pattern(select) {
        return Ok(Some((
            Plan::Catalog(CatalogPlan::PsqlLookup(name)),
            vec![text_col("oid"), text_col("nspname"), text_col("relname")],
            vec![],
        )));
    }
    Err(unsupported_catalog_query())
}

pub fn unsupported_catalog_query() -> SqlError {
    SqlError::unsupported("this pg_catalog query").with_hint(
        "Aqueduct answers SHOW TABLES, information_schema.tables, information_schema.columns, \
         pg_catalog.pg_tables, and psql's \\dt",
    )
}

/// Runs a recognised catalog query.
pub fn run(catalog: &Catalog, plan: &CatalogPlan, params: &[Value]) -> Vec<Vec<Value>> {
    let text = |s: &str| Value::Text(s.to_string());
    match plan {
        CatalogPlan::TypeByName => pg_types()
            .into_iter()
            .filter(|(_, name)| params.first() == Some(&text(name)))
            .map(|(oid, name)| vec![Value::Int(oid as i64), text(name)])
            .collect(),
        CatalogPlan::TypeByOid => pg_types()
            .into_iter()
            .filter(|(oid, _)| params.first() == Some(&Value::Int(*oid as i64)))
            .map(|(oid, name)| {
                vec![
                    Value::Bool(false),
                    text("b"),
                    text(name),
                    Value::Int(oid as i64),
                ]
            })
            .collect(),
        CatalogPlan::Tables => catalog
            .tables
            .values()
            .map(|t| vec![text(&t.schema.name)])
            .collect(),
        CatalogPlan::PsqlList => {
            let mut rows: Vec<Vec<Value>> = catalog
                .tables
                .values()
                .map(|t| {
                    vec![
                        text("public"),
                        text(&t.schema.name),
                        text("table"),
                        text("aqueduct"),
                    ]
                })
                .collect();
            rows.sort();
            rows
        }
        CatalogPlan::PsqlLookup(pattern) => catalog
            .tables
            .values()
            .filter(|t| t.schema.name == *pattern)
            .map(|t| {
                vec![
                    text(&(16384 + t.schema.id).to_string()),
                    text("public"),
                    text(&t.schema.name),
                ]
            })
            .collect(),
    }
}

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef::new(name, ty)
}

/// A catalog holding only the virtual tables, filled from `catalog`.
pub fn virtual_catalog(catalog: &Catalog) -> Catalog {
    let mut v = Catalog::default();
    let text = |s: &str| Value::Text(s.to_string());
    let defs = [
        (
            "information_schema.tables",
            vec![
                col("table_catalog", DataType::Text),
                col("table_schema", DataType::Text),
                col("table_name", DataType::Text),
                col("table_type", DataType::Text),
            ],
        ),
        (
            "information_schema.columns",
            vec![
                col("table_catalog", DataType::Text),
                col("table_schema", DataType::Text),
                col("table_name", DataType::Text),
                col("column_name", DataType::Text),
                col("ordinal_position", DataType::Int4),
                col("column_default", DataType::Text),
                col("is_nullable", DataType::Text),
                col("data_type", DataType::Text),
            ],
        ),
        (
            "pg_tables",
            vec![
                col("schemaname", DataType::Text),
                col("tablename", DataType::Text),
                col("tableowner", DataType::Text),
            ],
        ),
    ];
    for (i, (name, columns)) in defs.into_iter().enumerate() {
        v.apply_schema(SchemaChange::CreateTable(TableSchema {
            id: i as u64 + 1,
            name: name.into(),
            columns,
            ..TableSchema::default()
        }));
    }
    let mut rowid = 0;
    let mut add = |v: &mut Catalog, table: u64, row: Vec<Value>| {
        rowid += 1;
        v.apply_row(table, vec![Value::Int(rowid)], Some(row), 1);
    };
    for t in catalog.tables.values() {
        let name = &t.schema.name;
        add(
            &mut v,
            1,
            vec![
                text("aqueduct"),
                text("public"),
                text(name),
                text("BASE TABLE"),
            ],
        );
        add(
            &mut v,
            3,
            vec![text("public"), text(name), text("aqueduct")],
        );
        for (i, c) in t.schema.columns.iter().enumerate() {
            add(
                &mut v,
                2,
                vec![
                    text("aqueduct"),
                    text("public"),
                    text(name),
                    text(&c.name),
                    Value::Int(i as i64 + 1),
                    c.default
                        .as_ref()
                        .and_then(|d| d.to_text())
                        .or_else(|| c.default_expr.clone())
                        .map(Value::Text)
                        .unwrap_or(Value::Null),
                    text(if c.not_null { "NO" } else { "YES" }),
                    // PostgreSQL's data_type has no modifiers
                    // (`character varying`, `numeric`).
                    text(
                        &match &c.ty {
                            DataType::Varchar(_) => DataType::Varchar(None),
                            other => other.unconstrained(),
                        }
                        .to_string(),
                    ),
                ],
            );
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(sql: &str) -> ast::Select {
        let st = crate::parse::parse(sql).unwrap().pop().unwrap();
        let ast::Statement::Query(q) = st else {
            panic!("{sql}")
        };
        match *q.body {
            ast::SetExpr::Select(s) => *s,
            other => panic!("{other}"),
        }
    }

    fn plan(sql: &str) -> Option<CatalogPlan> {
        match recognise(&Catalog::default(), &select(sql)) {
            Ok(Some((Plan::Catalog(p), _, _))) => Some(p),
            Ok(_) => None,
            Err(e) => panic!("{sql}: {e}"),
        }
    }

    /// The queries psql and drivers send are recognised from their parsed
    /// relations and clauses.
    #[test]
    fn driver_and_psql_queries_are_recognised() {
        let dt = r#"SELECT n.nspname as "Schema", c.relname as "Name",
              CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' END as "Type",
              pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
            FROM pg_catalog.pg_class c
                 LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r','p','') AND n.nspname <> 'pg_catalog'
                  AND n.nspname !~ '^pg_toast' AND pg_catalog.pg_table_is_visible(c.oid)
            ORDER BY 1,2"#;
        assert!(matches!(plan(dt), Some(CatalogPlan::PsqlList)));
        let d = "SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c \
                 LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE c.relname OPERATOR(pg_catalog.~) '^(items)$' COLLATE pg_catalog.default \
                 AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 2, 3";
        assert!(matches!(plan(d), Some(CatalogPlan::PsqlLookup(n)) if n == "items"));
        let by_name = "SELECT pg_type.oid, typname FROM pg_catalog.pg_type \
                       LEFT JOIN pg_catalog.pg_namespace n ON (pg_type.typnamespace = n.oid) \
                       WHERE typname = $1";
        assert!(matches!(plan(by_name), Some(CatalogPlan::TypeByName)));
        let by_oid = "SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid \
                      FROM pg_catalog.pg_type LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r \
                      from pg_namespace as ns join ( select s.r, (current_schemas(false))[s.r] as nspname \
                      from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r using ( nspname ) \
                      ) as sp ON sp.nspoid = typnamespace WHERE pg_type.oid = $1 ORDER BY sp.r, pg_type.oid DESC";
        if let Ok(st) = crate::parse::parse(by_oid) {
            let ast::Statement::Query(q) = &st[0] else {
                panic!()
            };
            if let ast::SetExpr::Select(s) = q.body.as_ref() {
                assert!(matches!(
                    recognise(&Catalog::default(), s),
                    Ok(Some((Plan::Catalog(CatalogPlan::TypeByOid), _, _)))
                ));
            }
        }
        let t_oid = "SELECT t.oid, t.typname FROM pg_type t WHERE t.oid = $1";
        assert!(matches!(plan(t_oid), Some(CatalogPlan::TypeByOid)));
        // Other pg_catalog reads are refused, saying what is answered.
        let other = "SELECT * FROM pg_catalog.pg_class";
        assert!(recognise(&Catalog::default(), &select(other)).is_err());
    }

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
            if let ast::Statement::Query(q) = &st {
                if let ast::SetExpr::Select(s) = q.body.as_ref() {
                    assert!(
                        recognise(&Catalog::default(), s).unwrap().is_none(),
                        "{sql}"
                    );
                }
            }
        }
        for sql in [
            "SELECT * FROM information_schema.columns",
            "SELECT * FROM pg_catalog.pg_tables",
            "SELECT * FROM t WHERE id IN (SELECT 1 FROM pg_tables)",
            "INSERT INTO pg_tables VALUES ('a', 'b', 'c')",
        ] {
            let st = crate::parse::parse(sql).unwrap().pop().unwrap();
            assert!(uses_virtual_tables(&st), "{sql}");
        }
    }
}
