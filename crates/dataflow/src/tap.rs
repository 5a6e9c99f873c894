//! A tap on a view in full: the changes the dataflow made to it, by the
//! LSN of the batch that made them, in a bounded window. Publications read
//! a maintained view's changes from here (`docs/publications.md`,
//! section 8), since the log holds only base tables' changes.
//!
//! While a graph has a tap, the worker processes each batch alone (it does
//! not merge consecutive batches), so every change is the change of
//! exactly one transaction.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use crate::view::Lsn;
use crate::{Delta, Row};

/// Rows of changes a tap keeps. A reader further behind than the window
/// is told so ([`TapRead::Gone`]) and starts again from the view's rows.
pub const VIEW_TAP_ROWS_MAX: usize = 1 << 20;

/// What a tap holds for one LSN.
#[derive(Debug, PartialEq)]
pub enum TapRead {
    /// The view's changes at that LSN (empty: the batch did not change it).
    Changes(Delta),
    /// The tap does not hold that LSN any more (or never did): the window
    /// moved past it, or the view was remade or dropped.
    Gone,
}

#[derive(Default)]
struct TapState {
    /// Every change with an LSN above `from` is held (or was evicted, which
    /// moves `from` up).
    from: Lsn,
    /// The last LSN the tap saw changes for; the view is made anew or
    /// dropped after `ended` (`None` while it lives).
    ended: Option<Lsn>,
    window: VecDeque<(Lsn, Delta)>,
    rows: usize,
    /// Changes applied since the last publish.
    pending: Delta,
}

/// The changes of one view in full, shared by the view's writer (which
/// records) and the readers of its changes.
pub struct Tap {
    state: Mutex<TapState>,
    /// Rows of changes kept ([`VIEW_TAP_ROWS_MAX`] but in tests).
    limit: usize,
}

impl Tap {
    /// A tap holding every change after `from`, the LSN the view is at.
    pub fn new(from: Lsn) -> Tap {
        Tap::with_limit(from, VIEW_TAP_ROWS_MAX)
    }

    fn with_limit(from: Lsn, limit: usize) -> Tap {
        Tap {
            state: Mutex::new(TapState {
                from,
                ..TapState::default()
            }),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TapState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a delta applied to the view (visible at the next publish).
    pub(crate) fn record(&self, delta: &Delta) {
        self.lock().pending.extend(delta.iter().cloned());
    }

    /// The view was published at `lsn`: what was applied since the last
    /// publish is the change of `lsn`.
    pub(crate) fn publish(&self, lsn: Lsn) {
        let mut s = self.lock();
        let delta = std::mem::take(&mut s.pending);
        if delta.is_empty() {
            return;
        }
        assert!(
            s.window.back().is_none_or(|(last, _)| *last < lsn),
            "a tap's changes arrive in LSN order"
        );
        s.rows += delta.len();
        s.window.push_back((lsn, delta));
        while s.rows > self.limit && s.window.len() > 1 {
            let (gone, d) = s.window.pop_front().expect("more than one");
            s.rows -= d.len();
            s.from = s.from.max(gone);
        }
    }

    /// The view's writer is gone (the view was dropped or made anew) after
    /// the dataflow processed `lsn`.
    pub(crate) fn end(&self, lsn: Lsn) {
        let mut s = self.lock();
        s.ended.get_or_insert(lsn);
    }

    /// Whether every change after `after` is held, so far.
    pub fn covers(&self, after: Lsn) -> bool {
        let s = self.lock();
        after >= s.from && s.ended.is_none_or(|e| after <= e)
    }

    /// The changes at `lsn`, which the dataflow has processed.
    pub fn at(&self, lsn: Lsn) -> TapRead {
        let s = self.lock();
        if lsn <= s.from || s.ended.is_some_and(|e| lsn > e) {
            return TapRead::Gone;
        }
        match s.window.binary_search_by_key(&lsn, |(l, _)| *l) {
            Ok(i) => TapRead::Changes(s.window[i].1.clone()),
            Err(_) => TapRead::Changes(Vec::new()),
        }
    }

    /// `rows`, the view's rows as of `now`, taken back to `at` (at or
    /// before `now`) by undoing the changes in between; `None` when the tap
    /// does not hold them all. Rows come out once per copy.
    pub fn rows_before(&self, rows: Vec<Row>, now: Lsn, at: Lsn) -> Option<Vec<Row>> {
        let s = self.lock();
        if at < s.from || s.ended.is_some_and(|e| now > e) {
            return None;
        }
        let mut counts: BTreeMap<Row, i64> = BTreeMap::new();
        for r in rows {
            *counts.entry(r).or_default() += 1;
        }
        for (lsn, delta) in &s.window {
            if *lsn <= at || *lsn > now {
                continue;
            }
            for (r, w) in delta {
                *counts.entry(r.clone()).or_default() -= w;
            }
        }
        let mut out = Vec::new();
        for (r, n) in counts {
            for _ in 0..n.max(0) {
                out.push(r.clone());
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_values::Value;

    fn row(v: i64) -> Row {
        vec![Value::Int(v)]
    }

    #[test]
    fn changes_are_kept_by_lsn_and_undone_for_an_earlier_state() {
        let tap = Tap::new(10);
        tap.record(&vec![(row(1), 1)]);
        tap.publish(11);
        tap.record(&vec![(row(1), -1), (row(2), 1)]);
        tap.publish(13);
        assert_eq!(tap.at(11), TapRead::Changes(vec![(row(1), 1)]));
        assert_eq!(tap.at(12), TapRead::Changes(vec![]));
        assert_eq!(tap.at(10), TapRead::Gone);
        // The view at 13 holds row 2; at 11 it held row 1, at 10 nothing.
        assert_eq!(tap.rows_before(vec![row(2)], 13, 11), Some(vec![row(1)]));
        assert_eq!(tap.rows_before(vec![row(2)], 13, 10), Some(vec![]));
        assert_eq!(tap.rows_before(vec![row(2)], 13, 9), None);
        tap.end(13);
        assert_eq!(tap.at(14), TapRead::Gone);
        assert!(tap.covers(12) && !tap.covers(14));
    }

    #[test]
    fn the_window_is_bounded_and_says_what_it_lost() {
        let tap = Tap::with_limit(0, 100);
        let big: Delta = (0..51).map(|i| (row(i), 1)).collect();
        tap.record(&big);
        tap.publish(1);
        tap.record(&big);
        tap.publish(2);
        tap.record(&big);
        tap.publish(3);
        assert_eq!(tap.at(1), TapRead::Gone);
        assert!(!tap.covers(0) && tap.covers(2));
        assert!(matches!(tap.at(3), TapRead::Changes(d) if d.len() == big.len()));
    }
}
