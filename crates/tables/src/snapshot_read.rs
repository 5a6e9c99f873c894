//! Reading many rows without stalling commits.
//!
//! An upquery may need a million rows of one key. Read under the tables'
//! lock, that would hold every commit back until the last row is copied.
//! [`Database::rows_at`] instead clones the tables it reads under the read
//! lock and reads the clones after releasing it. The tables are persistent
//! B-trees (`table.rs`), so a clone is a few pointer copies, and the rows
//! read are exactly those as of the LSN the lock was taken at. Commits go
//! on meanwhile: each copies the nodes on its path that the clone still
//! shares, until the read is done and drops the clone.

use std::collections::HashMap;
use std::sync::Arc;

use aqueduct_log::Lsn;

use crate::{Database, Row, Table, TableId};

/// A read `(table, columns, values, counted)`: the rows of `table` whose
/// `columns` equal `values`, or when `counted` the first of them weighted
/// by how many there are ([`Table::weighted_matching`]).
pub type RowsAsk = (TableId, Vec<usize>, Row, bool);

/// Shared rows with weights (a row weighted `n` stands for `n` copies).
pub type WeightedRows = Vec<(Arc<Row>, i64)>;

impl Database {
    /// For each ask, the rows of its table whose columns equal its values,
    /// with weights, all as of one LSN, which is returned too. The tables'
    /// read lock is held only to clone the tables asked for.
    pub fn rows_at(&self, asks: &[RowsAsk]) -> (Vec<WeightedRows>, Lsn) {
        let (tables, lsn) = {
            // Recursive: the caller may hold a read guard further up.
            let catalog = self.catalog.read_recursive();
            let mut tables: HashMap<TableId, Table> = HashMap::new();
            for &(t, ..) in asks {
                if let Some(table) = catalog.table_by_id(t) {
                    tables.entry(t).or_insert_with(|| table.clone());
                }
            }
            (tables, catalog.lsn())
        };
        let rows = asks
            .iter()
            .map(|(t, columns, values, counted)| match tables.get(t) {
                Some(table) => table.weighted_matching(columns, values, *counted),
                None => Vec::new(),
            })
            .collect();
        (rows, lsn)
    }
}
