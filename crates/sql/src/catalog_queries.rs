//! The catalog as clients ask for it: `SHOW TABLES`, `information_schema`
//! tables and `pg_tables` (answered as ordinary tables built on demand), and
//! the listing queries psql sends for `\dt` and `\d name`. Other
//! `pg_catalog` queries get a clear error instead of a wrong answer.

use aqueduct_tables::{Catalog, ColumnDef, SchemaChange, TableSchema};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use crate::bind::Plan;
use crate::{Column, SqlError};

#[derive(Clone, Debug)]
pub enum CatalogPlan {
    /// `SHOW TABLES`: one column of names.
    Tables,
    /// psql's `\dt` / `\d`: Schema, Name, Type, Owner.
    PsqlList,
    /// psql's first `\d name` query: oid, nspname, relname of tables matching.
    PsqlLookup(String),
    /// Drivers' type lookups in `pg_type` by name (`$1`): oid, typname.
    TypeByName,
    /// Drivers' type lookups in `pg_type` by oid (`$1`): is_array, typtype, typname, oid.
    TypeByOid,
}

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

/// Recognises psql's catalog queries in a SELECT.
pub fn recognise(catalog: &Catalog, select: &ast::Select) -> Result<Option<Recognised>, SqlError> {
    let _ = catalog;
    let text = select.to_string();
    let text_col = |n: &str| Column::computed(n, DataType::Text);
    if text.contains("pg_catalog.pg_type") || text.contains("FROM pg_type") {
        if text.contains("typname = $1") {
            return Ok(Some((
                Plan::Catalog(CatalogPlan::TypeByName),
                vec![Column::computed("oid", DataType::Int8), text_col("typname")],
                vec![DataType::Text],
            )));
        }
        if text.contains("pg_type.oid = $1") || text.contains("t.oid = $1") {
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
    if !text.contains("pg_catalog.pg_class") {
        return Ok(None);
    }
    if text.contains("AS \"Schema\"")
        && text.contains("AS \"Name\"")
        && text.contains("AS \"Type\"")
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
    if text.contains("c.relname OPERATOR(pg_catalog.~)") {
        if let Some(start) = text.find("'^(") {
            let rest = &text[start + 3..];
            if let Some(end) = rest.find(")$'") {
                return Ok(Some((
                    Plan::Catalog(CatalogPlan::PsqlLookup(rest[..end].to_string())),
                    vec![text_col("oid"), text_col("nspname"), text_col("relname")],
                    vec![],
                )));
            }
        }
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

/// Whether a statement reads the virtual catalog tables.
pub fn uses_virtual_tables(sql: &str) -> bool {
    let s = sql.to_ascii_lowercase();
    s.contains("information_schema.") || s.contains("pg_tables")
}

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
    }
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
            primary_key: vec![],
            indexes: vec![],
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
