//! The operators, one per file.

mod aggregate;
mod distinct;
mod expand;
mod filter;
mod join;
mod project;
mod topk;
mod union;
mod window;

pub use aggregate::{AggCall, Aggregate};
pub use distinct::Distinct;
pub use expand::{Expand, SetFunction, MAX_EXPANSION};
pub use filter::Filter;
pub use join::{Join, JoinKind};
pub use project::Project;
pub use topk::{compare_rows, SortColumn, TopK};
pub use union::Union;
pub use window::{FrameEnd, Window, WindowCall, WindowFunc, WindowOrder};

#[cfg(test)]
pub(crate) mod testing;

use aqueduct_expr::SqlError;
use aqueduct_values::Value;

use crate::Row;

/// The values of `cols` in `row`: a group or join key.
pub(crate) fn columns(row: &[Value], cols: &[usize]) -> Row {
    cols.iter().map(|&c| row[c].clone()).collect()
}

/// A delta on an input the operator does not have: a bug in the graph.
pub(crate) fn no_such_input(op: &str, port: usize) -> SqlError {
    SqlError::new("XX000", format!("{op} has no input {port}"))
}
