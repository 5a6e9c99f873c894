//! Incremental dataflow (after Noria): base-table changes enter as deltas,
//! flow through operators, and come out as changes to views.
//!
//! A delta is a bag of rows with signed weights: `(row, +2)` means two more
//! copies of `row`, `(row, -1)` one fewer. Weights give SQL's bag semantics
//! (duplicates from tables without keys, `UNION ALL`, projections) without
//! special cases, and an update is simply a retraction plus an insertion.
//!
//! Every operator is a pure state machine: `process(port, delta)` consumes a
//! delta arriving on one input and returns the delta it emits; the same state
//! and input always give the same output, so replicas and replays agree.
//! Operators live one per file under [`ops`].

mod budget;
pub mod graph;
pub mod ops;
pub mod partial;
pub mod stats;
pub mod tap;
pub mod view;
pub mod worker;

use aqueduct_expr::SqlError;
use aqueduct_values::Value;

pub type Row = Vec<Value>;

/// The hasher of the state maps rows are looked up in at every change and
/// read (operators' state, views): seeded per map, much faster than the
/// standard library's on short keys.
pub type FastHash = foldhash::fast::RandomState;
/// A hash map with [`FastHash`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastHash>;

/// Rows with signed multiplicities.
pub type Delta = Vec<(Row, i64)>;

/// An incremental operator.
pub trait Operator: Send {
    /// Short name for `EXPLAIN` ("filter", "join", ...).
    fn name(&self) -> &'static str;
    /// The operator with its parameters, e.g. `filter[#1 > 3]`. Two operators
    /// with equal signatures over the same inputs compute the same thing, so
    /// a new view reuses the existing one instead of adding a copy.
    fn signature(&self) -> String;
    /// How many inputs it takes.
    fn inputs(&self) -> usize {
        1
    }
    /// Consumes `delta` arriving on input `port` and returns what it emits.
    /// When one batch changes several inputs, the caller delivers them one
    /// port at a time; each call sees the state left by the previous one.
    fn process(&mut self, port: usize, delta: Delta) -> Result<Delta, SqlError>;
    /// Rows held in state (0 for stateless operators).
    fn state_rows(&self) -> usize {
        0
    }
    /// Approximate bytes of state (0 for stateless operators), kept as
    /// state changes so that asking is cheap.
    fn state_bytes(&self) -> usize {
        0
    }
    /// Where the output columns `key` come from, for partial state: per
    /// input, `Some(columns)` when every output row with a given key is
    /// computed from exactly the input rows with that value in `columns`
    /// (so filling one key needs those input rows only), or `None` for an
    /// input whose rows may all be needed (kept in full). `None` overall
    /// when no input carries the key: the operator must be kept in full.
    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        let _ = key;
        None
    }
    /// The columns of input `port` that its output depends on, when it
    /// reads only some: input rows that agree on them are interchangeable,
    /// so `n` of them may arrive as one row weighted `n` (a fill sends a
    /// hot key's million votes to a `COUNT(*)` as one row). `None`: all.
    fn input_columns(&self, port: usize) -> Option<Vec<usize>> {
        let _ = port;
        None
    }
}

/// Bookkeeping bytes per stored row or key besides its values: map entry,
/// pointers, counts. An estimate, used the same way everywhere.
pub const ENTRY_OVERHEAD: usize = 48;

/// Bytes `row` takes when stored in a map of state.
pub fn stored_bytes(row: &[Value]) -> i64 {
    (row_bytes(row) + ENTRY_OVERHEAD) as i64
}

/// Approximate bytes a row takes in memory: its values and their contents.
pub fn row_bytes(row: &[Value]) -> usize {
    std::mem::size_of::<Row>()
        + row
            .iter()
            .map(|v| std::mem::size_of::<Value>() + v.payload_len())
            .sum::<usize>()
}

/// Sums the weights of equal rows and drops rows whose weight is zero. The
/// result is sorted, so equal inputs give byte-for-byte equal outputs.
pub fn consolidate(delta: &mut Delta) {
    // Often sorted already (an operator's consolidated output, copies of
    // one row): then checking is all the sorting there is to do.
    if !delta.is_sorted_by(|a, b| a.0 <= b.0) {
        delta.sort_by(|a, b| a.0.cmp(&b.0));
    }
    // In place; the first of equal rows stays, as the stable sort put it.
    delta.dedup_by(|next, kept| {
        let equal = next.0 == kept.0;
        if equal {
            kept.1 += next.1;
        }
        equal
    });
    delta.retain(|(_, w)| *w != 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consolidation_merges_and_cancels() {
        let r = |i: i64| vec![Value::Int(i)];
        let mut d = vec![(r(2), 1), (r(1), 1), (r(2), -1), (r(1), 2), (r(3), -1)];
        consolidate(&mut d);
        assert_eq!(d, vec![(r(1), 3), (r(3), -1)]);
        // Sorted input is merged without sorting.
        let mut d = vec![(r(1), 1), (r(1), -1), (r(2), 2), (r(2), 1), (r(4), 1)];
        consolidate(&mut d);
        assert_eq!(d, vec![(r(2), 3), (r(4), 1)]);
    }
}
