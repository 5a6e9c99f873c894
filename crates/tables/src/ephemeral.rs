//! Ephemeral tables (Synapse §3.1's objects published but not stored):
//! what compaction is told about their rows.
//!
//! Their inserts are row records like any table's, so the change feed,
//! durable consumers and publications see them; the table keeps none of
//! them ([`crate::Catalog::apply_row`]). Each row is its key's only
//! version, so compaction would keep it forever: [`EphemeralRows`] tells
//! the log which records have expired, and the log drops them once they
//! are below every hold (every durable consumer acknowledged them).
//!
//! One record per table without a primary key stays: the one with the
//! table's highest hidden row id, so replay restores the row-id counter
//! and no id is handed out twice. A subscriber that keeps the rows would
//! otherwise take a reused id as an update of an older row.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use aqueduct_log::{ExpiredPuts, Expiry};
use aqueduct_values::Value;

use crate::batch::{decode_row_key, ROW_PREFIX};
use crate::{Catalog, Database, TableId};

/// Bytes of a row record's key before the key values: the prefix byte and
/// the table id.
const ROW_KEY_HEAD: usize = 1 + std::mem::size_of::<TableId>();

/// What each ephemeral table keeps in the log below every hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keeps {
    /// Nothing: a primary key names the rows, no counter to restore.
    Nothing,
    /// The row with this hidden row id (the table's highest) and any
    /// higher one.
    RowIdFrom(i64),
}

/// The ephemeral tables of `catalog` and what each keeps.
fn ephemeral_tables(catalog: &Catalog) -> HashMap<TableId, Keeps> {
    catalog
        .tables
        .values()
        .filter(|t| t.schema.ephemeral)
        .map(|t| {
            let keeps = if t.schema.has_primary_key() {
                Keeps::Nothing
            } else {
                Keeps::RowIdFrom(t.peek_rowid() - 1)
            };
            (t.schema.id, keeps)
        })
        .collect()
}

/// Whether the `put` record keyed `key` is a row of an ephemeral table
/// that compaction may drop.
fn expired(tables: &HashMap<TableId, Keeps>, key: &[u8]) -> bool {
    if key.first() != Some(&ROW_PREFIX) || key.len() < ROW_KEY_HEAD {
        return false;
    }
    let id = TableId::from_be_bytes(key[1..ROW_KEY_HEAD].try_into().expect("eight bytes"));
    match tables.get(&id) {
        None => false,
        Some(Keeps::Nothing) => true,
        Some(Keeps::RowIdFrom(highest)) => match decode_row_key(key) {
            Ok((_, k)) => !matches!(k.as_slice(), [Value::Int(id)] if id >= highest),
            // Not a key this layer wrote: leave it to the key rule.
            Err(_) => false,
        },
    }
}

/// The [`Expiry`] of a database's ephemeral rows: asks the catalog, at the
/// start of each compaction pass, which tables are ephemeral.
pub struct EphemeralRows {
    db: Weak<Database>,
}

impl Expiry for EphemeralRows {
    fn for_pass(&self) -> Option<ExpiredPuts> {
        let db = self.db.upgrade()?;
        let tables = ephemeral_tables(&db.read());
        if tables.is_empty() {
            return None;
        }
        Some(Box::new(move |key| expired(&tables, key)))
    }
}

impl Database {
    /// Lets compaction drop the rows of ephemeral tables once they are
    /// below every hold on the log (the server calls it once, at start).
    pub fn expire_ephemeral_rows(self: &Arc<Self>) {
        self.log().set_expiry(Some(Arc::new(EphemeralRows {
            db: Arc::downgrade(self),
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_log_key;

    #[test]
    fn only_rows_of_ephemeral_tables_expire_and_the_highest_row_id_stays() {
        let tables = HashMap::from([(7, Keeps::Nothing), (8, Keeps::RowIdFrom(41))]);
        // A primary-keyed ephemeral table: every row.
        assert!(expired(
            &tables,
            &row_log_key(7, &vec![Value::Text("a".into())])
        ));
        // Hidden row ids: all but the highest.
        assert!(expired(&tables, &row_log_key(8, &vec![Value::Int(40)])));
        assert!(!expired(&tables, &row_log_key(8, &vec![Value::Int(41)])));
        assert!(!expired(&tables, &row_log_key(8, &vec![Value::Int(42)])));
        // Other tables, schema records, keys of other layers: never.
        assert!(!expired(&tables, &row_log_key(9, &vec![Value::Int(1)])));
        let mut schema_key = vec![b's'];
        schema_key.extend_from_slice(&7u64.to_be_bytes());
        assert!(!expired(&tables, &schema_key));
        assert!(!expired(&tables, b"r"));
        assert!(!expired(&tables, b""));
    }
}
