//! Operators' share of stopping a running statement: while a statement
//! fills a one-shot dataflow on its thread, a join's output is charged to
//! its memory budget and its interrupt handle checked every
//! [`CHECK_EVERY`] rows (`aqueduct_expr::interrupt`). On the dataflow
//! worker, which runs no statement, both are no-ops.

use aqueduct_expr::interrupt::{self, CHECK_EVERY};
use aqueduct_expr::SqlError;

use crate::Delta;

/// After a row was pushed on `out`: every [`CHECK_EVERY`] rows, charges
/// their bytes to the running statement and checks its interrupt.
#[inline]
pub(crate) fn every_chunk(out: &Delta) -> Result<(), SqlError> {
    if !out.len().is_multiple_of(CHECK_EVERY) || !interrupt::active() {
        return Ok(());
    }
    let chunk = &out[out.len() - CHECK_EVERY..];
    let bytes: usize = chunk.iter().map(|(r, _)| crate::row_bytes(r)).sum();
    interrupt::charge(bytes as u64)
}
