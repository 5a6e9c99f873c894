//! A maintained view as its readers see it: what the registry
//! (`views.rs`), automatic views and keyed reads share.

use aqueduct_dataflow::ops::SortColumn;
use aqueduct_tables::TableId;

use aqueduct_plan::plan::Column;

/// One maintained view, as readers see it.
#[derive(Clone)]
pub struct ViewEntry {
    pub id: TableId,
    pub name: String,
    pub sql: String,
    pub columns: Vec<Column>,
    /// For an automatic view with ORDER BY: the order of its rows, which
    /// then carry hidden sort columns after `columns`.
    pub order: Vec<SortColumn>,
    pub(crate) options: InstallOptions,
    /// The base tables its rows are computed from (through views it
    /// reads, too): what a read of it inside a transaction depends on.
    pub tables: Vec<TableId>,
    /// Tells entries apart, also from a later view of the same name.
    pub(crate) uid: u64,
}

impl ViewEntry {
    /// Tells entries apart, also from a later view of the same name.
    pub fn uid(&self) -> u64 {
        self.uid
    }
}

/// How a view is compiled.
#[derive(Clone, Copy, Debug, Default)]
pub struct InstallOptions {
    /// Keep the ORDER BY (and its hidden sort columns) for reads to sort by.
    pub keep_order: bool,
    /// The last this-many columns are automatic-view keys (top-k per key).
    pub partition_last: usize,
}
