//! `ALTER SEQUENCE`: a sequence's new definition, checked as `CREATE
//! SEQUENCE` checks one, written as one `AlterSequence` record (and a
//! `SetSequence` for `RESTART`) in the transaction.

use aqueduct_expr::SqlError;
use aqueduct_tables::{SchemaChange, SequenceDef};
use aqueduct_values::DataType;

use crate::bind::{check_sequence_def, default_max, default_min, integer_max, integer_min};
use crate::effects::Fx;
use crate::plan::{Outcome, SequenceChange};
use crate::rows::refuse_taken_name;

/// Runs `ALTER SEQUENCE name ...` in `txn`.
pub(crate) fn alter_sequence(
    fx: &mut Fx<'_>,
    name: &str,
    if_exists: bool,
    change: &SequenceChange,
) -> Result<Outcome, SqlError> {
    let catalog = fx.catalog;
    let done = Ok(Outcome::Command {
        tag: "ALTER SEQUENCE".into(),
    });
    let Some(seq) = catalog.sequence(name) else {
        if if_exists {
            return done;
        }
        return Err(SqlError::new(
            "42P01",
            format!("relation \"{name}\" does not exist"),
        ));
    };
    let old = &seq.def;
    let old_ty = DataType::from_sql(&old.ty, &[]).unwrap_or(DataType::Int8);
    let ty = change.ty.clone().unwrap_or_else(|| old_ty.clone());
    let increment = change.increment.unwrap_or(old.increment);
    // A bound that was the old type's own limit follows the new type, as
    // in PostgreSQL.
    let min = match change.min {
        Some(Some(v)) => v,
        Some(None) => default_min(&ty, increment),
        None if change.ty.is_some() && old.min == integer_min(&old_ty) => integer_min(&ty),
        None => old.min,
    };
    let max = match change.max {
        Some(Some(v)) => v,
        Some(None) => default_max(&ty, increment),
        None if change.ty.is_some() && old.max == integer_max(&old_ty) => integer_max(&ty),
        None => old.max,
    };
    if let Some(cache) = change.cache.filter(|&c| c < 1) {
        return Err(SqlError::new(
            "22023",
            format!("CACHE ({cache}) must be greater than zero"),
        ));
    }
    let owned_by = match &change.owned_by {
        None => old.owned_by,
        Some(None) => None,
        Some(Some((table, column))) => {
            let t = catalog.table(table).ok_or_else(|| {
                SqlError::new("42P01", format!("relation \"{table}\" does not exist"))
            })?;
            let c = t.schema.column_index(column).ok_or_else(|| {
                SqlError::new(
                    "42703",
                    format!("column \"{column}\" of relation \"{table}\" does not exist"),
                )
            })?;
            Some((t.schema.id, c))
        }
    };
    let new_name = match &change.rename {
        Some(n) if n != name => {
            refuse_taken_name(catalog, n)?;
            n.clone()
        }
        _ => old.name.clone(),
    };
    let def = SequenceDef {
        id: old.id,
        name: new_name,
        ty: ty.to_string(),
        increment,
        min,
        max,
        start: change.start.unwrap_or(old.start),
        owned_by,
    };
    check_sequence_def(&def, &ty)?;
    // The value the sequence goes on from must fit the new bounds.
    let (value, is_called) = match change.restart {
        Some(to) => (to.unwrap_or(def.start), false),
        None => fx.db.sequences.current(seq),
    };
    if value < def.min {
        return Err(SqlError::new(
            "22023",
            format!(
                "RESTART value ({value}) cannot be less than MINVALUE ({})",
                def.min
            ),
        ));
    }
    if value > def.max {
        return Err(SqlError::new(
            "22023",
            format!(
                "RESTART value ({value}) cannot be greater than MAXVALUE ({})",
                def.max
            ),
        ));
    }
    let restart = change.restart.is_some();
    let txn = fx.txn.get_mut();
    txn.schema(SchemaChange::AlterSequence(def));
    if restart {
        txn.schema(SchemaChange::SetSequence {
            id: old.id,
            value,
            is_called,
        });
    }
    done
}
