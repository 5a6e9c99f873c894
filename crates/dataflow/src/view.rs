//! Materialized views: the leaves of the dataflow, read without locks.
//!
//! A view keeps its rows grouped by a key (the columns its readers look up
//! by). The single writer (the dataflow) applies a batch's changes to one copy
//! and publishes; readers keep reading the other copy meanwhile, so a reader
//! never waits for a writer and never sees half of a batch (left-right).
//! Every published copy carries its watermark: the LSN of the last write it
//! reflects.

use std::collections::{BTreeMap, HashMap};

use aqueduct_values::Value;
use left_right::{Absorb, ReadHandle, ReadHandleFactory, WriteHandle};

use crate::{Delta, Row};

/// The LSN type of the log (kept as a plain integer here to stay below the log).
pub type Lsn = u64;

#[derive(Clone, Debug, Default)]
pub struct ViewState {
    rows: HashMap<Vec<Value>, BTreeMap<Row, i64>>,
    watermark: Lsn,
    row_count: i64,
}

impl ViewState {
    /// The rows stored under `key`, each repeated by its multiplicity.
    pub fn lookup(&self, key: &[Value]) -> Vec<Row> {
        match self.rows.get(key) {
            None => Vec::new(),
            Some(bag) => bag
                .iter()
                .flat_map(|(r, &n)| std::iter::repeat_n(r.clone(), n.max(0) as usize))
                .collect(),
        }
    }

    /// Every row, in key order (for scans and tests).
    pub fn all(&self) -> Vec<Row> {
        let mut keys: Vec<&Vec<Value>> = self.rows.keys().collect();
        keys.sort();
        keys.into_iter().flat_map(|k| self.lookup(k)).collect()
    }

    pub fn watermark(&self) -> Lsn {
        self.watermark
    }

    pub fn row_count(&self) -> u64 {
        self.row_count.max(0) as u64
    }

    pub fn key_count(&self) -> usize {
        self.rows.len()
    }
}

#[derive(Clone, Debug)]
pub enum ViewOp {
    Change {
        key: Vec<Value>,
        row: Row,
        weight: i64,
    },
    Watermark(Lsn),
}

impl Absorb<ViewOp> for ViewState {
    fn absorb_first(&mut self, op: &mut ViewOp, _other: &Self) {
        match op {
            ViewOp::Change { key, row, weight } => {
                let bag = self.rows.entry(key.clone()).or_default();
                let n = bag.entry(row.clone()).or_insert(0);
                *n += *weight;
                if *n == 0 {
                    bag.remove(row);
                }
                if bag.is_empty() {
                    self.rows.remove(key);
                }
                self.row_count += *weight;
            }
            ViewOp::Watermark(lsn) => self.watermark = *lsn,
        }
    }

    fn sync_with(&mut self, first: &Self) {
        self.clone_from(first);
    }
}

/// The writer's end of a view, owned by the dataflow.
pub struct ViewWriter {
    key: Vec<usize>,
    handle: WriteHandle<ViewState, ViewOp>,
}

/// The readers' end: clone freely; each thread takes its own handle.
#[derive(Clone)]
pub struct ViewReader {
    key: Vec<usize>,
    factory: ReadHandleFactory<ViewState>,
}

/// Creates an empty view keyed by the columns `key` of its rows.
pub fn new_view(key: Vec<usize>) -> (ViewWriter, ViewReader) {
    let (w, r) = left_right::new::<ViewState, ViewOp>();
    (
        ViewWriter {
            key: key.clone(),
            handle: w,
        },
        ViewReader {
            key,
            factory: r.factory(),
        },
    )
}

impl ViewWriter {
    pub fn key_columns(&self) -> &[usize] {
        &self.key
    }

    /// Applies a delta (not yet visible to readers).
    pub fn apply(&mut self, delta: &Delta) {
        for (row, w) in delta {
            let key = self.key.iter().map(|&c| row[c].clone()).collect();
            self.handle.append(ViewOp::Change {
                key,
                row: row.clone(),
                weight: *w,
            });
        }
    }

    /// Makes everything applied visible, as of `lsn`.
    pub fn publish(&mut self, lsn: Lsn) {
        self.handle.append(ViewOp::Watermark(lsn));
        self.handle.publish();
    }
}

impl ViewReader {
    /// The key columns of the view's rows.
    pub fn key_columns(&self) -> &[usize] {
        &self.key
    }

    /// A handle for one thread (a session keeps one per view it reads).
    pub fn handle(&self) -> ReadHandle<ViewState> {
        self.factory.handle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_whole_batches_only() {
        let (mut w, r) = new_view(vec![0]);
        let h = r.handle();
        let row = |k: i64, v: i64| vec![Value::Int(k), Value::Int(v)];
        w.apply(&vec![(row(1, 10), 1), (row(1, 11), 2), (row(2, 20), 1)]);
        assert!(h
            .enter()
            .map(|s| s.lookup(&[Value::Int(1)]).is_empty())
            .unwrap_or(true));
        w.publish(7);
        {
            let s = h.enter().unwrap();
            assert_eq!(
                s.lookup(&[Value::Int(1)]),
                vec![row(1, 10), row(1, 11), row(1, 11)]
            );
            assert_eq!(s.watermark(), 7);
            assert_eq!(s.row_count(), 4);
        }
        w.apply(&vec![(row(1, 11), -2)]);
        w.publish(8);
        let s = h.enter().unwrap();
        assert_eq!(s.lookup(&[Value::Int(1)]), vec![row(1, 10)]);
        assert_eq!(s.key_count(), 2);
    }
}
