//! A transaction's own view of the rows it wrote (read-your-writes): per
//! table, each written key's final row, or `None` for a deleted one.
//!
//! Looked up once per row a statement reads or writes, so it is keyed per
//! table (a lookup borrows the key, never copies it) and hashed with a fast
//! seeded hash: a bulk load of a million rows does a million inserts and
//! a million lookups here.

use std::collections::HashMap;
use std::sync::Arc;

use aqueduct_values::Value;

use crate::{Key, Row, TableId};

/// The hasher of the transaction-local maps: seeded per map, fast on the
/// short keys rows have.
pub(crate) type FastHash = foldhash::fast::RandomState;

type Rows = HashMap<Key, Option<Arc<Row>>, FastHash>;

#[derive(Clone, Debug, Default)]
pub(crate) struct Overlay {
    tables: HashMap<TableId, Rows, FastHash>,
}

impl Overlay {
    /// The transaction's version of `key`: `Some(None)` for a deleted key,
    /// `None` for a key it did not write.
    pub(crate) fn get(&self, table: TableId, key: &[Value]) -> Option<Option<&Arc<Row>>> {
        self.tables.get(&table)?.get(key).map(Option::as_ref)
    }

    pub(crate) fn contains(&self, table: TableId, key: &[Value]) -> bool {
        self.tables.get(&table).is_some_and(|t| t.contains_key(key))
    }

    pub(crate) fn insert(&mut self, table: TableId, key: Key, row: Option<Arc<Row>>) {
        self.tables.entry(table).or_default().insert(key, row);
    }

    /// Room for `more` keys of `table` without rehashing (a bulk insert).
    pub(crate) fn reserve(&mut self, table: TableId, more: usize) {
        self.tables.entry(table).or_default().reserve(more);
    }

    /// Every written key with its final row.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TableId, &Key, Option<&Arc<Row>>)> {
        self.tables
            .iter()
            .flat_map(|(&t, rows)| rows.iter().map(move |(k, r)| (t, k, r.as_ref())))
    }

    /// The written keys of `table` with their final rows.
    pub(crate) fn rows_of(&self, table: TableId) -> impl Iterator<Item = (&Key, Option<&Row>)> {
        self.tables
            .get(&table)
            .into_iter()
            .flat_map(|rows| rows.iter().map(|(k, r)| (k, r.as_deref())))
    }

    /// The tables with a written key, in no order.
    pub(crate) fn tables(&self) -> impl Iterator<Item = TableId> + '_ {
        self.tables
            .iter()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(&t, _)| t)
    }
}
