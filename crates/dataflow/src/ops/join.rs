//! Equi-join on one or more columns, inner or left outer. Input 0 is the
//! left side, input 1 the right; an output row is the left row's columns
//! followed by the right row's.
//!
//! State: each side's rows indexed by join key (key → bag of rows). A delta
//! on one side is joined with the other side's current state and then folded
//! into its own, so when one batch changes both sides and they are delivered
//! one after the other, the output is `ΔL ⋈ R + L' ⋈ ΔR` (`L' = L + ΔL`),
//! which is exactly `(L + ΔL) ⋈ (R + ΔR) - L ⋈ R`. A self-join (the same
//! delta on both inputs in turn) is the special case `ΔL = ΔR`.
//!
//! A NULL in any key column never matches (SQL's `=`); such rows are not
//! indexed. In a LEFT join, a left row whose key has no right rows comes out
//! once per copy padded with NULLs: when a key's first right row arrives the
//! padded rows are retracted and the joined ones emitted, and when its last
//! right row goes the padded rows come back.

use std::collections::BTreeMap;

use aqueduct_expr::SqlError;
use aqueduct_values::Value;

use super::{columns, no_such_input};
use crate::{consolidate, stored_bytes, Delta, FastMap, Operator, Row};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
}

/// The rows of one side that share a key, with their total count.
#[derive(Debug, Default)]
struct Bag {
    rows: BTreeMap<Row, i64>,
    total: i64,
}

/// One side: join key → its rows.
/// Rows by join key: hashed, since lookups are by exact key.
type Index = FastMap<Row, Bag>;

impl Bag {
    /// Adds `w` copies of `row`, dropping rows whose count reaches zero.
    fn add(&mut self, row: Row, w: i64) {
        self.total += w;
        match self.rows.get_mut(&row) {
            Some(c) if *c + w == 0 => {
                self.rows.remove(&row);
            }
            Some(c) => *c += w,
            None => {
                self.rows.insert(row, w);
            }
        }
    }
}

/// Adds `w` copies of `row` under `key`, dropping keys left without rows,
/// and counts the bytes stored in `bytes`.
fn fold(index: &mut Index, bytes: &mut i64, key: Row, row: Row, w: i64) {
    match index.get_mut(&key) {
        Some(bag) => {
            let rows = bag.rows.len() as i64;
            let size = stored_bytes(&row);
            bag.add(row, w);
            *bytes += (bag.rows.len() as i64 - rows) * size;
            if bag.rows.is_empty() {
                debug_assert_eq!(bag.total, 0);
                *bytes -= stored_bytes(&key);
                index.remove(&key);
            }
        }
        None => {
            *bytes += stored_bytes(&key) + stored_bytes(&row);
            let mut bag = Bag::default();
            bag.add(row, w);
            index.insert(key, bag);
        }
    }
}

fn concat(left: &[Value], right: &[Value]) -> Row {
    let mut row = Vec::with_capacity(left.len() + right.len());
    row.extend_from_slice(left);
    row.extend_from_slice(right);
    row
}

pub struct Join {
    kind: JoinKind,
    left_key: Vec<usize>,
    right_key: Vec<usize>,
    /// Columns of a right row: the NULL padding of unmatched left rows.
    right_width: usize,
    /// Columns of a left row, when known (needed to trace keys).
    left_width: Option<usize>,
    left: Index,
    right: Index,
    bytes: i64,
}

impl Join {
    /// Joins where `left[left_key[i]] = right[right_key[i]]` for every `i`.
    pub fn new(
        kind: JoinKind,
        left_key: Vec<usize>,
        right_key: Vec<usize>,
        right_width: usize,
    ) -> Join {
        assert_eq!(
            left_key.len(),
            right_key.len(),
            "join keys of different lengths"
        );
        assert!(
            right_key.iter().all(|&c| c < right_width),
            "right key column beyond the right width"
        );
        Join {
            kind,
            left_key,
            right_key,
            right_width,
            left_width: None,
            left: Index::default(),
            right: Index::default(),
            bytes: 0,
        }
    }

    /// Tells the join how wide its left rows are, so that keys on its
    /// output can be traced to its inputs.
    pub fn with_left_width(mut self, width: usize) -> Join {
        self.left_width = Some(width);
        self
    }

    fn padded(&self, left: &[Value]) -> Row {
        let mut row = Vec::with_capacity(left.len() + self.right_width);
        row.extend_from_slice(left);
        row.resize(left.len() + self.right_width, Value::Null);
        row
    }

    /// The key of `row`, or `None` when a key column is NULL.
    fn key(row: &[Value], cols: &[usize]) -> Option<Row> {
        let key = columns(row, cols);
        (!key.iter().any(Value::is_null)).then_some(key)
    }

    fn left_delta(&mut self, delta: Delta, out: &mut Delta) -> Result<(), SqlError> {
        for (row, w) in delta {
            if w == 0 {
                continue;
            }
            let Some(key) = Join::key(&row, &self.left_key) else {
                if self.kind == JoinKind::Left {
                    out.push((self.padded(&row), w));
                }
                continue;
            };
            match self.right.get(&key) {
                Some(bag) if bag.total > 0 => {
                    for (r, c) in &bag.rows {
                        out.push((concat(&row, r), w * c));
                        crate::budget::every_chunk(out)?;
                    }
                }
                _ if self.kind == JoinKind::Left => out.push((self.padded(&row), w)),
                _ => {}
            }
            fold(&mut self.left, &mut self.bytes, key, row, w);
        }
        Ok(())
    }

    fn right_delta(&mut self, delta: Delta, out: &mut Delta) -> Result<(), SqlError> {
        for (row, w) in delta {
            debug_assert_eq!(row.len(), self.right_width, "right row width");
            if w == 0 {
                continue;
            }
            let Some(key) = Join::key(&row, &self.right_key) else {
                continue;
            };
            let before = self.right.get(&key).map_or(0, |b| b.total);
            let after = before + w;
            if let Some(lefts) = self.left.get(&key) {
                if self.kind == JoinKind::Left && (before > 0) != (after > 0) {
                    // The key gains its first right rows (retract the
                    // padding) or loses its last (restore it).
                    let sign = if after > 0 { -1 } else { 1 };
                    for (l, c) in &lefts.rows {
                        out.push((self.padded(l), sign * c));
                    }
                }
                for (l, c) in &lefts.rows {
                    out.push((concat(l, &row), c * w));
                    crate::budget::every_chunk(out)?;
                }
            }
            fold(&mut self.right, &mut self.bytes, key, row, w);
        }
        Ok(())
    }
}

impl Operator for Join {
    fn name(&self) -> &'static str {
        "join"
    }

    fn signature(&self) -> String {
        let kind = match self.kind {
            JoinKind::Inner => "inner",
            JoinKind::Left => "left",
        };
        format!(
            "join[{kind} {:?} = {:?}, right width {}]",
            self.left_key, self.right_key, self.right_width
        )
    }

    fn inputs(&self) -> usize {
        2
    }

    fn process(&mut self, port: usize, delta: Delta) -> Result<Delta, SqlError> {
        let mut out = Vec::new();
        match port {
            0 => self.left_delta(delta, &mut out)?,
            1 => self.right_delta(delta, &mut out)?,
            _ => return Err(no_such_input("join", port)),
        }
        consolidate(&mut out);
        Ok(out)
    }

    fn state_rows(&self) -> usize {
        let rows = |i: &Index| i.values().map(|b| b.rows.len()).sum::<usize>();
        rows(&self.left) + rows(&self.right)
    }

    fn state_bytes(&self) -> usize {
        self.bytes.max(0) as usize
    }

    /// A key column of one side that is a join column is also the matching
    /// column of the other side (they are equal in every joined row). A
    /// side that cannot express the whole key is kept in full: every row
    /// of it may meet a row of the keyed side. With a LEFT join the key
    /// must be made of left columns: a left row is padded exactly when the
    /// right side has no rows for it, which a right side holding only some
    /// keys cannot tell.
    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        type Col<'a> = &'a dyn Fn(usize) -> Option<usize>;
        let side = |own: &[usize], other: &[usize], on_own: Col, on_other: Col| {
            key.iter()
                .map(|&k| {
                    if let Some(c) = on_own(k) {
                        return Some(c);
                    }
                    let c = on_other(k)?;
                    let i = other.iter().position(|&o| o == c)?;
                    Some(own[i])
                })
                .collect::<Option<Vec<usize>>>()
        };
        let lw = self.left_width?;
        // A LEFT join's padded rows have NULL in every right column: a key
        // column on the right would put them under the NULL key, which no
        // reader holds.
        if self.kind == JoinKind::Left && key.iter().any(|&k| k >= lw) {
            return None;
        }
        let on_left = |k: usize| (k < lw).then_some(k);
        let on_right = |k: usize| (k >= lw).then(|| k - lw);
        let left = side(&self.left_key, &self.right_key, &on_left, &on_right);
        let right = side(&self.right_key, &self.left_key, &on_right, &on_left);
        match (left, right) {
            (None, None) => None,
            (None, Some(_)) if self.kind == JoinKind::Left => None,
            (l, r) => Some(vec![l, r]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    fn row(v: &[Option<i64>]) -> Row {
        v.iter()
            .map(|x| x.map_or(Value::Null, Value::Int))
            .collect()
    }

    #[test]
    fn inner_join_on_two_columns_multiplies_weights() {
        let mut j = Join::new(JoinKind::Inner, vec![0, 1], vec![1, 0], 3);
        let out = j
            .process(1, vec![(row(&[Some(2), Some(1), Some(9)]), 2)])
            .unwrap();
        assert!(out.is_empty());
        let out = j
            .process(
                0,
                vec![(row(&[Some(1), Some(2)]), 3), (row(&[Some(1), Some(3)]), 1)],
            )
            .unwrap();
        assert_eq!(
            out,
            vec![(row(&[Some(1), Some(2), Some(2), Some(1), Some(9)]), 6)]
        );
        // Deleting the right row retracts every joined copy.
        let out = j
            .process(1, vec![(row(&[Some(2), Some(1), Some(9)]), -2)])
            .unwrap();
        assert_eq!(
            out,
            vec![(row(&[Some(1), Some(2), Some(2), Some(1), Some(9)]), -6)]
        );
        assert_eq!(j.state_rows(), 2);
    }

    #[test]
    fn null_keys_never_match() {
        let mut j = Join::new(JoinKind::Inner, vec![0], vec![0], 1);
        j.process(1, vec![(vec![Value::Null], 1)]).unwrap();
        assert!(j
            .process(0, vec![(vec![Value::Null, int(1)], 1)])
            .unwrap()
            .is_empty());
        assert_eq!(j.state_rows(), 0);
        // In a LEFT join the left row comes out padded, and stays so.
        let mut j = Join::new(JoinKind::Left, vec![0], vec![0], 1);
        j.process(1, vec![(vec![Value::Null], 1)]).unwrap();
        let out = j.process(0, vec![(vec![Value::Null, int(1)], 1)]).unwrap();
        assert_eq!(out, vec![(vec![Value::Null, int(1), Value::Null], 1)]);
    }

    #[test]
    fn left_join_swaps_padding_for_matches_and_back() {
        let mut j = Join::new(JoinKind::Left, vec![0], vec![0], 2);
        let l = vec![int(1), int(10)];
        let padded = vec![int(1), int(10), Value::Null, Value::Null];
        // Two copies of the left row, no match: two padded rows.
        assert_eq!(
            j.process(0, vec![(l.clone(), 2)]).unwrap(),
            vec![(padded.clone(), 2)]
        );
        // First right row: padding out, joined rows in.
        let r1 = vec![int(1), int(7)];
        let joined1 = vec![int(1), int(10), int(1), int(7)];
        let mut expected = vec![(padded.clone(), -2), (joined1.clone(), 2)];
        consolidate(&mut expected);
        assert_eq!(j.process(1, vec![(r1.clone(), 1)]).unwrap(), expected);
        // A second right row only adds joined rows.
        let r2 = vec![int(1), int(8)];
        let joined2 = vec![int(1), int(10), int(1), int(8)];
        assert_eq!(
            j.process(1, vec![(r2.clone(), 1)]).unwrap(),
            vec![(joined2.clone(), 2)]
        );
        assert_eq!(j.process(1, vec![(r1, -1)]).unwrap(), vec![(joined1, -2)]);
        // The last right row goes: padding comes back.
        let mut expected = vec![(padded, 2), (joined2, -2)];
        consolidate(&mut expected);
        assert_eq!(j.process(1, vec![(r2, -1)]).unwrap(), expected);
    }

    #[test]
    fn both_sides_in_one_batch() {
        // Left and right rows with the same key arrive in one batch,
        // delivered left first: the pair comes out exactly once.
        let mut j = Join::new(JoinKind::Left, vec![0], vec![0], 1);
        let out0 = j.process(0, vec![(vec![int(5)], 1)]).unwrap();
        let out1 = j.process(1, vec![(vec![int(5)], 1)]).unwrap();
        let mut all = [out0, out1].concat();
        consolidate(&mut all);
        assert_eq!(all, vec![(vec![int(5), int(5)], 1)]);
        // Both go in one batch, right first this time.
        let out1 = j.process(1, vec![(vec![int(5)], -1)]).unwrap();
        let out0 = j.process(0, vec![(vec![int(5)], -1)]).unwrap();
        let mut all = [out1, out0].concat();
        consolidate(&mut all);
        assert_eq!(all, vec![(vec![int(5), int(5)], -1)]);
        assert_eq!(j.state_rows(), 0);
    }

    #[test]
    fn unknown_input_is_an_error() {
        let mut j = Join::new(JoinKind::Inner, vec![0], vec![0], 1);
        assert_eq!(j.process(2, vec![]).unwrap_err().code, "XX000");
    }

    /// The reference: a nested loop with SQL's NULL rule.
    fn nested_loop(
        kind: JoinKind,
        left: &[Row],
        right: &[Row],
        lk: &[usize],
        rk: &[usize],
        right_width: usize,
    ) -> Vec<Row> {
        let mut out = Vec::new();
        for l in left {
            let mut matched = false;
            for r in right {
                let eq = lk
                    .iter()
                    .zip(rk)
                    .all(|(&a, &b)| l[a].sql_cmp(&r[b]) == Some(std::cmp::Ordering::Equal));
                if eq {
                    matched = true;
                    out.push(concat(l, r));
                }
            }
            if !matched && kind == JoinKind::Left {
                let mut p = l.clone();
                p.extend(std::iter::repeat_n(Value::Null, right_width));
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn matches_recompute() {
        for kind in [JoinKind::Inner, JoinKind::Left] {
            for (lk, rk) in [(vec![0], vec![1]), (vec![0, 1], vec![1, 0])] {
                let (lk2, rk2) = (lk.clone(), rk.clone());
                check_against_recompute(
                    || Box::new(Join::new(kind, lk.clone(), rk.clone(), 2)),
                    |inputs| nested_loop(kind, &inputs[0], &inputs[1], &lk2, &rk2, 2),
                    2,
                    int_rows(2),
                );
            }
        }
    }

    /// One input delivered to both sides in turn, as a self-join is wired.
    struct SelfJoin(Join);

    impl Operator for SelfJoin {
        fn name(&self) -> &'static str {
            "self-join"
        }
        fn signature(&self) -> String {
            self.0.signature()
        }
        fn process(&mut self, _port: usize, delta: Delta) -> Result<Delta, SqlError> {
            let mut out = self.0.process(0, delta.clone())?;
            out.extend(self.0.process(1, delta)?);
            Ok(out)
        }
    }

    #[test]
    fn self_join_matches_recompute() {
        for kind in [JoinKind::Inner, JoinKind::Left] {
            check_against_recompute(
                || Box::new(SelfJoin(Join::new(kind, vec![0], vec![1], 2))),
                |inputs| nested_loop(kind, &inputs[0], &inputs[0], &[0], &[1], 2),
                1,
                int_rows(2),
            );
        }
    }
}
