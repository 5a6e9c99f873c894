//! `CREATE TYPE ... AS ENUM`, `ALTER TYPE` and `DROP TYPE`: each one
//! schema record in the transaction.

use aqueduct_expr::SqlError;
use aqueduct_tables::{enum_of, Catalog, SchemaChange, Txn};
use aqueduct_values::EnumType;

use crate::plan::{Outcome, TypeChange};

fn label_error(e: aqueduct_values::LabelError) -> SqlError {
    SqlError::new(e.sqlstate(), e.to_string())
}

fn type_exists(name: &str) -> SqlError {
    SqlError::new("42710", format!("type \"{name}\" already exists"))
}

fn no_type(name: &str) -> SqlError {
    SqlError::new("42704", format!("type \"{name}\" does not exist"))
}

/// Whether `name` is taken as a type: an enum's, or a table's row type.
fn type_name_taken(catalog: &Catalog, name: &str) -> bool {
    catalog.enum_type(name).is_some()
        || catalog.table(name).is_some()
        || catalog.view(name).is_some()
        || aqueduct_values::DataType::from_sql(name, &[]).is_some()
}

/// `CREATE TYPE name AS ENUM (labels)`.
pub(crate) fn create_enum(
    catalog: &Catalog,
    txn: &mut Txn,
    name: &str,
    labels: &[String],
) -> Result<Outcome, SqlError> {
    if type_name_taken(catalog, name) {
        return Err(type_exists(name));
    }
    let t = EnumType::new(catalog.next_table_id(), name, labels).map_err(label_error)?;
    txn.schema(SchemaChange::CreateType(t));
    Ok(Outcome::Command {
        tag: "CREATE TYPE".into(),
    })
}

/// `ALTER TYPE name ADD VALUE ...` or `RENAME TO ...`.
pub(crate) fn alter_type(
    catalog: &Catalog,
    txn: &mut Txn,
    name: &str,
    change: &TypeChange,
) -> Result<Outcome, SqlError> {
    let t = catalog.enum_type(name).ok_or_else(|| no_type(name))?;
    let mut new = (**t).clone();
    match change {
        TypeChange::AddValue {
            label,
            place,
            if_not_exists,
        } => match new.add(label, place) {
            Ok(()) => {}
            Err(aqueduct_values::LabelError::Exists(_)) if *if_not_exists => {
                return Ok(Outcome::Command {
                    tag: "ALTER TYPE".into(),
                })
            }
            Err(e) => return Err(label_error(e)),
        },
        TypeChange::Rename(to) => {
            if type_name_taken(catalog, to) {
                return Err(type_exists(to));
            }
            new.name = to.clone();
        }
    }
    txn.schema(SchemaChange::AlterType(new));
    Ok(Outcome::Command {
        tag: "ALTER TYPE".into(),
    })
}

/// `DROP TYPE [IF EXISTS] names`: refused (2BP01) while a column has the
/// type.
pub(crate) fn drop_types(
    catalog: &Catalog,
    txn: &mut Txn,
    names: &[String],
    if_exists: bool,
    cascade: bool,
) -> Result<Outcome, SqlError> {
    for name in names {
        let Some(t) = catalog.enum_type(name) else {
            if if_exists {
                continue;
            }
            return Err(no_type(name));
        };
        for table in catalog.tables.values() {
            for c in &table.schema.columns {
                if enum_of(&c.ty).is_some_and(|e| e.id == t.id) {
                    let err = SqlError::new(
                        "2BP01",
                        format!("cannot drop type {name} because other objects depend on it"),
                    )
                    .with_detail(format!(
                        "column {} of table {} depends on type {name}",
                        c.name, table.schema.name
                    ));
                    let _ = cascade;
                    return Err(err.with_hint(
                        "drop the column, or change its type, first (CASCADE does not drop columns here)",
                    ));
                }
            }
        }
        txn.schema(SchemaChange::DropType { id: t.id });
    }
    Ok(Outcome::Command {
        tag: "DROP TYPE".into(),
    })
}
