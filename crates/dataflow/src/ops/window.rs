//! Window functions, `f(...) OVER (PARTITION BY p ORDER BY o)`: an output
//! row is the input row followed by one value per window function.
//!
//! State: per partition (the values of the PARTITION BY expressions),
//! every row with its count, in window order; peers (rows equal on the
//! ORDER BY values) are ordered by the whole row, so the order is total and
//! each row's values are a function of the partition's contents alone.
//! After a delta each touched partition's outputs are computed before and
//! after it, and the difference emitted: O(partition) per touched
//! partition, as a row's rank may move every row after it.
//!
//! A frame always starts at the start of the partition. By default
//! (PostgreSQL's) it ends at the current row's last peer (`RANGE BETWEEN
//! UNBOUNDED PRECEDING AND CURRENT ROW`; without an ORDER BY every row is
//! a peer of every other, so that is the whole partition); `ROWS ...
//! CURRENT ROW` ends it at the row itself, `... UNBOUNDED FOLLOWING` at the
//! end of the partition.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use aqueduct_expr::agg::{Accumulator, AggFunc};
use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_values::Value;

use crate::{consolidate, stored_bytes, Delta, Operator, Row};

/// A window function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowFunc {
    RowNumber,
    Rank,
    DenseRank,
    PercentRank,
    CumeDist,
    /// `ntile(n)`.
    Ntile,
    /// `lag(x [, offset [, default]])`.
    Lag,
    /// `lead(x [, offset [, default]])`.
    Lead,
    FirstValue,
    LastValue,
    /// `nth_value(x, n)`.
    NthValue,
    /// An aggregate over the frame.
    Aggregate(AggFunc),
}

impl WindowFunc {
    /// The window function called `name` (lower case), aggregates aside.
    pub fn by_name(name: &str) -> Option<WindowFunc> {
        Some(match name {
            "row_number" => WindowFunc::RowNumber,
            "rank" => WindowFunc::Rank,
            "dense_rank" => WindowFunc::DenseRank,
            "percent_rank" => WindowFunc::PercentRank,
            "cume_dist" => WindowFunc::CumeDist,
            "ntile" => WindowFunc::Ntile,
            "lag" => WindowFunc::Lag,
            "lead" => WindowFunc::Lead,
            "first_value" => WindowFunc::FirstValue,
            "last_value" => WindowFunc::LastValue,
            "nth_value" => WindowFunc::NthValue,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            WindowFunc::RowNumber => "row_number",
            WindowFunc::Rank => "rank",
            WindowFunc::DenseRank => "dense_rank",
            WindowFunc::PercentRank => "percent_rank",
            WindowFunc::CumeDist => "cume_dist",
            WindowFunc::Ntile => "ntile",
            WindowFunc::Lag => "lag",
            WindowFunc::Lead => "lead",
            WindowFunc::FirstValue => "first_value",
            WindowFunc::LastValue => "last_value",
            WindowFunc::NthValue => "nth_value",
            WindowFunc::Aggregate(a) => a.name(),
        }
    }

    /// How many arguments it takes: at least, at most.
    pub fn arity(self) -> (usize, usize) {
        match self {
            WindowFunc::RowNumber
            | WindowFunc::Rank
            | WindowFunc::DenseRank
            | WindowFunc::PercentRank
            | WindowFunc::CumeDist => (0, 0),
            WindowFunc::Ntile | WindowFunc::FirstValue | WindowFunc::LastValue => (1, 1),
            WindowFunc::Lag | WindowFunc::Lead => (1, 3),
            WindowFunc::NthValue => (2, 2),
            WindowFunc::Aggregate(AggFunc::CountStar) => (0, 0),
            WindowFunc::Aggregate(_) => (1, 1),
        }
    }
}

/// Where a row's frame ends (it starts at the start of the partition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FrameEnd {
    /// At the row's last peer: `RANGE` or `GROUPS ... CURRENT ROW`, the
    /// default.
    #[default]
    Peers,
    /// At the row itself: `ROWS ... CURRENT ROW`.
    Row,
    /// At the end of the partition: `... UNBOUNDED FOLLOWING`.
    Partition,
}

/// One window function with its arguments, evaluated over input rows.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowCall {
    pub func: WindowFunc,
    pub args: Vec<Expr>,
}

/// One `ORDER BY` item of a window.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowOrder {
    pub expr: Expr,
    pub descending: bool,
    pub nulls_first: bool,
}

/// A row's place in its partition: its ORDER BY values as sort parts, then
/// the row itself (which breaks ties among peers).
type Place = (Vec<SortPart>, Row);

/// One ORDER BY value, ordered as its item says: NULLs first or last,
/// values ascending or descending.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SortPart {
    value: Value,
    descending: bool,
    nulls_first: bool,
}

impl Ord for SortPart {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.value.is_null(), other.value.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) if self.nulls_first => Ordering::Less,
            (true, false) => Ordering::Greater,
            (false, true) if self.nulls_first => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) if self.descending => other.value.cmp(&self.value),
            (false, false) => self.value.cmp(&other.value),
        }
    }
}

impl PartialOrd for SortPart {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether two rows' ORDER BY values make them peers: equal as SQL `=`
/// says (`1.0` and `1.00` are peers), NULLs equal to NULLs.
fn peers(a: &[SortPart], b: &[SortPart]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| match (x.value.is_null(), y.value.is_null()) {
            (true, true) => true,
            (false, false) => x
                .value
                .sql_cmp(&y.value)
                .map_or(x.value == y.value, |o| o.is_eq()),
            _ => false,
        })
}

pub struct Window {
    partition: Vec<Expr>,
    order: Vec<WindowOrder>,
    frame: FrameEnd,
    calls: Vec<WindowCall>,
    /// Partition key → rows in window order → count.
    partitions: BTreeMap<Row, BTreeMap<Place, i64>>,
    bytes: i64,
}

impl Window {
    pub fn new(
        partition: Vec<Expr>,
        order: Vec<WindowOrder>,
        frame: FrameEnd,
        calls: Vec<WindowCall>,
    ) -> Window {
        for c in &calls {
            let (min, max) = c.func.arity();
            assert!(
                (min..=max).contains(&c.args.len()),
                "{} takes {min} to {max} arguments: {c:?}",
                c.func.name()
            );
        }
        Window {
            partition,
            order,
            frame,
            calls,
            partitions: BTreeMap::new(),
            bytes: 0,
        }
    }

    fn place(&self, row: Row) -> Result<(Row, Place), SqlError> {
        let env = Env::new(&row, &[]);
        let key = self
            .partition
            .iter()
            .map(|e| e.eval(&env))
            .collect::<Result<Row, _>>()?;
        let parts = self
            .order
            .iter()
            .map(|o| {
                Ok(SortPart {
                    value: o.expr.eval(&env)?,
                    descending: o.descending,
                    nulls_first: o.nulls_first,
                })
            })
            .collect::<Result<Vec<_>, SqlError>>()?;
        Ok((key, (parts, row)))
    }

    /// Every output row of the partition at `key`: each copy of each row,
    /// in window order, with its window values.
    fn outputs(&self, key: &Row) -> Result<Vec<(Row, i64)>, SqlError> {
        let Some(rows) = self.partitions.get(key) else {
            return Ok(Vec::new());
        };
        // The copies, in order.
        let mut copies: Vec<&Place> = Vec::new();
        for (place, &c) in rows {
            debug_assert!(c > 0, "a stored row has a positive count");
            for _ in 0..c {
                copies.push(place);
            }
        }
        let n = copies.len();
        // Peer groups: `peer_end[i]` is one past the last peer of row i,
        // `peer_start[i]` its first peer, `dense[i]` its group's number.
        let mut peer_start = vec![0; n];
        let mut peer_end = vec![n; n];
        let mut dense = vec![1; n];
        let mut start = 0;
        let mut group = 1;
        for i in 0..n {
            if i > 0 && !peers(&copies[i - 1].0, &copies[i].0) {
                for end in &mut peer_end[start..i] {
                    *end = i;
                }
                start = i;
                group += 1;
            }
            peer_start[i] = start;
            dense[i] = group;
        }
        // Where each row's frame ends (one past its last row).
        let frame_end: Vec<usize> = match self.frame {
            FrameEnd::Peers => peer_end.clone(),
            FrameEnd::Row => (1..=n).collect(),
            FrameEnd::Partition => vec![n; n],
        };
        // The aggregates over each frame, `[0, frame_end)`, kept running.
        let mut aggregates: Vec<Vec<Value>> = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            let WindowFunc::Aggregate(func) = call.func else {
                aggregates.push(Vec::new());
                continue;
            };
            let mut acc = Accumulator::insert_only(func, false);
            let mut values = Vec::with_capacity(n);
            let mut added = 0;
            for &end in &frame_end {
                while added < end {
                    let row = &copies[added].1;
                    let v = match call.args.first() {
                        Some(e) => e.eval(&Env::new(row, &[]))?,
                        None => Value::Null,
                    };
                    acc.insert(&v)?;
                    added += 1;
                }
                values.push(acc.finish()?);
            }
            aggregates.push(values);
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let row = &copies[i].1;
            let env = Env::new(row, &[]);
            let mut values = Vec::with_capacity(self.calls.len());
            for (call, agg) in self.calls.iter().zip(&aggregates) {
                let at = |j: usize, e: &Expr| e.eval(&Env::new(&copies[j].1, &[]));
                let v = match call.func {
                    WindowFunc::RowNumber => Value::Int(i as i64 + 1),
                    WindowFunc::Rank => Value::Int(peer_start[i] as i64 + 1),
                    WindowFunc::DenseRank => Value::Int(dense[i]),
                    WindowFunc::PercentRank if n > 1 => {
                        Value::Float(peer_start[i] as f64 / (n - 1) as f64)
                    }
                    WindowFunc::PercentRank => Value::Float(0.0),
                    WindowFunc::CumeDist => Value::Float(peer_end[i] as f64 / n as f64),
                    WindowFunc::Ntile => ntile(&call.args[0].eval(&env)?, i, n)?,
                    WindowFunc::Lag | WindowFunc::Lead => {
                        let offset = match call.args.get(1) {
                            Some(e) => e.eval(&env)?,
                            None => Value::Int(1),
                        };
                        let offset = match offset {
                            Value::Null => None,
                            Value::Int(k) if call.func == WindowFunc::Lag => Some(-(k as i128)),
                            Value::Int(k) => Some(k as i128),
                            other => {
                                return Err(SqlError::datatype_mismatch(format!(
                                    "the offset of {} must be an integer, not {other:?}",
                                    call.func.name()
                                )))
                            }
                        };
                        match offset {
                            None => Value::Null,
                            Some(k) => {
                                let j = i as i128 + k;
                                if (0..n as i128).contains(&j) {
                                    at(j as usize, &call.args[0])?
                                } else {
                                    match call.args.get(2) {
                                        Some(d) => d.eval(&env)?,
                                        None => Value::Null,
                                    }
                                }
                            }
                        }
                    }
                    WindowFunc::FirstValue => at(0, &call.args[0])?,
                    WindowFunc::LastValue => at(frame_end[i] - 1, &call.args[0])?,
                    WindowFunc::NthValue => match call.args[1].eval(&env)? {
                        Value::Null => Value::Null,
                        Value::Int(k) if k <= 0 => {
                            return Err(SqlError::new(
                                "22016",
                                "argument of nth_value must be greater than zero",
                            ))
                        }
                        Value::Int(k) if (k as u64) <= frame_end[i] as u64 => {
                            at(k as usize - 1, &call.args[0])?
                        }
                        Value::Int(_) => Value::Null,
                        other => {
                            return Err(SqlError::datatype_mismatch(format!(
                                "the position of nth_value must be an integer, not {other:?}"
                            )))
                        }
                    },
                    WindowFunc::Aggregate(_) => agg[i].clone(),
                };
                values.push(v);
            }
            let mut r = Vec::with_capacity(row.len() + values.len());
            r.extend_from_slice(row);
            r.extend(values);
            out.push((r, 1));
            crate::budget::every_chunk(&out)?;
        }
        Ok(out)
    }
}

/// `ntile(buckets)` of row `i` of `n`: as PostgreSQL deals them, the first
/// `n % buckets` buckets hold one row more than the others.
fn ntile(buckets: &Value, i: usize, n: usize) -> Result<Value, SqlError> {
    let b = match buckets {
        Value::Null => return Ok(Value::Null),
        Value::Int(b) if *b > 0 => *b as usize,
        Value::Int(_) => {
            return Err(SqlError::new(
                "22014",
                "argument of ntile must be greater than zero",
            ))
        }
        other => {
            return Err(SqlError::datatype_mismatch(format!(
                "the argument of ntile must be an integer, not {other:?}"
            )))
        }
    };
    let size = n / b;
    let bigger = n % b;
    // The first `bigger` buckets have `size + 1` rows.
    let in_bigger = bigger * (size + 1);
    let bucket = if i < in_bigger {
        i / (size + 1)
    } else {
        bigger + (i - in_bigger) / size.max(1)
    };
    Ok(Value::Int(bucket as i64 + 1))
}

impl Operator for Window {
    fn name(&self) -> &'static str {
        "window"
    }

    fn signature(&self) -> String {
        let order: Vec<String> = self
            .order
            .iter()
            .map(|o| {
                format!(
                    "{:?} {} nulls {}",
                    o.expr,
                    if o.descending { "desc" } else { "asc" },
                    if o.nulls_first { "first" } else { "last" }
                )
            })
            .collect();
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|c| format!("{:?}{:?}", c.func, c.args))
            .collect();
        format!(
            "window[partition {:?}; order {}; frame {:?}; {}]",
            self.partition,
            order.join(", "),
            self.frame,
            calls.join(", ")
        )
    }

    fn process(&mut self, _port: usize, mut delta: Delta) -> Result<Delta, SqlError> {
        consolidate(&mut delta);
        // Touched partitions and their outputs before this delta.
        let mut before: BTreeMap<Row, Vec<(Row, i64)>> = BTreeMap::new();
        for (row, w) in delta {
            let (key, place) = self.place(row)?;
            if !before.contains_key(&key) {
                let old = self.outputs(&key)?;
                before.insert(key.clone(), old);
            }
            if !self.partitions.contains_key(&key) {
                self.bytes += stored_bytes(&key);
            }
            let rows = self.partitions.entry(key).or_default();
            match rows.get_mut(&place) {
                Some(c) if *c + w == 0 => {
                    self.bytes -= 2 * stored_bytes(&place.1);
                    rows.remove(&place);
                }
                Some(c) => *c += w,
                None => {
                    // The row and its ORDER BY values (about as large again).
                    self.bytes += 2 * stored_bytes(&place.1);
                    rows.insert(place, w);
                }
            }
        }
        let mut out = Vec::new();
        for (key, old) in before {
            if self.partitions.get(&key).is_some_and(BTreeMap::is_empty) {
                self.partitions.remove(&key);
                self.bytes -= stored_bytes(&key);
            }
            out.extend(self.outputs(&key)?);
            out.extend(old.into_iter().map(|(r, c)| (r, -c)));
        }
        consolidate(&mut out);
        Ok(out)
    }

    fn state_rows(&self) -> usize {
        self.partitions.values().map(BTreeMap::len).sum()
    }

    fn state_bytes(&self) -> usize {
        self.bytes.max(0) as usize
    }

    /// A key made of columns the partition is by: every output row with
    /// that key comes from input rows with the same values there, and so
    /// from whole partitions.
    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        let by_partition = key
            .iter()
            .all(|k| self.partition.contains(&Expr::Column(*k)));
        by_partition.then(|| vec![Some(key.to_vec())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    fn col(c: usize) -> Expr {
        Expr::Column(c)
    }

    fn asc(c: usize) -> WindowOrder {
        WindowOrder {
            expr: col(c),
            descending: false,
            nulls_first: false,
        }
    }

    fn call(func: WindowFunc, args: Vec<Expr>) -> WindowCall {
        WindowCall { func, args }
    }

    #[test]
    fn a_new_row_moves_the_ranks_after_it() {
        let mut w = Window::new(
            vec![col(0)],
            vec![asc(1)],
            FrameEnd::Peers,
            vec![
                call(WindowFunc::RowNumber, vec![]),
                call(WindowFunc::Rank, vec![]),
            ],
        );
        let out = w
            .process(
                0,
                vec![(vec![int(1), int(5)], 1), (vec![int(1), int(9)], 1)],
            )
            .unwrap();
        assert_eq!(
            out,
            vec![
                (vec![int(1), int(5), int(1), int(1)], 1),
                (vec![int(1), int(9), int(2), int(2)], 1),
            ]
        );
        // A row before both: each moves down one.
        let out = w.process(0, vec![(vec![int(1), int(3)], 1)]).unwrap();
        assert_eq!(
            out,
            vec![
                (vec![int(1), int(3), int(1), int(1)], 1),
                (vec![int(1), int(5), int(1), int(1)], -1),
                (vec![int(1), int(5), int(2), int(2)], 1),
                (vec![int(1), int(9), int(2), int(2)], -1),
                (vec![int(1), int(9), int(3), int(3)], 1),
            ]
        );
        // Another partition is untouched.
        let out = w.process(0, vec![(vec![int(2), int(0)], 1)]).unwrap();
        assert_eq!(out, vec![(vec![int(2), int(0), int(1), int(1)], 1)]);
        // Deleting everything leaves nothing.
        let gone = vec![
            (vec![int(1), int(3)], -1),
            (vec![int(1), int(5)], -1),
            (vec![int(1), int(9)], -1),
            (vec![int(2), int(0)], -1),
        ];
        w.process(0, gone).unwrap();
        assert_eq!(w.state_rows(), 0);
        assert_eq!(w.state_bytes(), 0);
    }

    #[test]
    fn peers_share_rank_and_frame() {
        let mut w = Window::new(
            vec![],
            vec![asc(0)],
            FrameEnd::Peers,
            vec![
                call(WindowFunc::Rank, vec![]),
                call(WindowFunc::DenseRank, vec![]),
                call(WindowFunc::Aggregate(AggFunc::CountStar), vec![]),
                call(WindowFunc::Aggregate(AggFunc::Sum), vec![col(0)]),
            ],
        );
        let out = w
            .process(0, vec![(vec![int(1)], 2), (vec![int(4)], 1)])
            .unwrap();
        assert_eq!(
            out,
            vec![
                (vec![int(1), int(1), int(1), int(2), int(2)], 2),
                (vec![int(4), int(3), int(2), int(3), int(6)], 1),
            ]
        );
    }

    #[test]
    fn ntile_deals_as_postgres_does() {
        // 7 rows in 3 buckets: 3, 2, 2.
        let got: Vec<i64> = (0..7)
            .map(|i| match ntile(&int(3), i, 7).unwrap() {
                Value::Int(b) => b,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(got, vec![1, 1, 1, 2, 2, 3, 3]);
        // More buckets than rows: one row each.
        assert_eq!(ntile(&int(5), 1, 2).unwrap(), int(2));
        assert_eq!(ntile(&int(0), 0, 2).unwrap_err().code, "22014");
    }

    /// Sorts a partition as PostgreSQL would: by the ORDER BY values with
    /// the flags, ties by the whole row.
    fn sorted(rows: &[Row], order: &[WindowOrder]) -> Vec<Row> {
        let key = |r: &Row| -> Vec<SortPart> {
            order
                .iter()
                .map(|o| SortPart {
                    value: o.expr.eval(&Env::new(r, &[])).unwrap(),
                    descending: o.descending,
                    nulls_first: o.nulls_first,
                })
                .collect()
        };
        let mut rows = rows.to_vec();
        rows.sort_by(|a, b| key(a).cmp(&key(b)).then_with(|| a.cmp(b)));
        rows
    }

    /// The reference: each function by its definition, row by row, with
    /// peers found by comparing every pair.
    fn recompute(
        rows: &[Row],
        partition: &[usize],
        order: &[WindowOrder],
        frame: FrameEnd,
    ) -> Vec<Row> {
        let mut parts: BTreeMap<Row, Vec<Row>> = BTreeMap::new();
        for r in rows {
            let key = partition.iter().map(|&c| r[c].clone()).collect();
            parts.entry(key).or_default().push(r.clone());
        }
        let order_values = |r: &Row| -> Vec<Value> {
            order
                .iter()
                .map(|o| o.expr.eval(&Env::new(r, &[])).unwrap())
                .collect()
        };
        let mut out = Vec::new();
        for (_, rows) in parts {
            let rows = sorted(&rows, order);
            let n = rows.len();
            let is_peer = |i: usize, j: usize| order_values(&rows[i]) == order_values(&rows[j]);
            for i in 0..n {
                let first_peer = (0..n).find(|&j| is_peer(i, j)).unwrap();
                let last_peer = (0..n).rev().find(|&j| is_peer(i, j)).unwrap();
                let distinct_before = (0..first_peer)
                    .filter(|&j| j == 0 || !is_peer(j, j - 1))
                    .count();
                let end = match frame {
                    FrameEnd::Peers => last_peer,
                    FrameEnd::Row => i,
                    FrameEnd::Partition => n - 1,
                };
                let frame = &rows[..=end];
                let c1: Vec<i64> = frame
                    .iter()
                    .filter_map(|r| match r[1] {
                        Value::Int(v) => Some(v),
                        _ => None,
                    })
                    .collect();
                let or_null = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
                let mut r = rows[i].clone();
                r.extend([
                    int(i as i64 + 1),
                    int(first_peer as i64 + 1),
                    int(distinct_before as i64 + 1),
                    Value::Float(if n > 1 {
                        first_peer as f64 / (n - 1) as f64
                    } else {
                        0.0
                    }),
                    Value::Float((last_peer + 1) as f64 / n as f64),
                    if i >= 1 {
                        rows[i - 1][1].clone()
                    } else {
                        int(-1)
                    },
                    rows.get(i + 2).map_or(Value::Null, |r| r[2].clone()),
                    rows[0][2].clone(),
                    rows[end][2].clone(),
                    frame.get(1).map_or(Value::Null, |r| r[1].clone()),
                    int(frame.len() as i64),
                    int(c1.len() as i64),
                    or_null((!c1.is_empty()).then(|| c1.iter().sum())),
                    or_null(c1.iter().max().copied()),
                ]);
                out.push(r);
            }
        }
        out
    }

    fn calls() -> Vec<WindowCall> {
        vec![
            call(WindowFunc::RowNumber, vec![]),
            call(WindowFunc::Rank, vec![]),
            call(WindowFunc::DenseRank, vec![]),
            call(WindowFunc::PercentRank, vec![]),
            call(WindowFunc::CumeDist, vec![]),
            call(
                WindowFunc::Lag,
                vec![col(1), Expr::Literal(int(1)), Expr::Literal(int(-1))],
            ),
            call(WindowFunc::Lead, vec![col(2), Expr::Literal(int(2))]),
            call(WindowFunc::FirstValue, vec![col(2)]),
            call(WindowFunc::LastValue, vec![col(2)]),
            call(WindowFunc::NthValue, vec![col(1), Expr::Literal(int(2))]),
            call(WindowFunc::Aggregate(AggFunc::CountStar), vec![]),
            call(WindowFunc::Aggregate(AggFunc::Count), vec![col(1)]),
            call(WindowFunc::Aggregate(AggFunc::Sum), vec![col(1)]),
            call(WindowFunc::Aggregate(AggFunc::Max), vec![col(1)]),
        ]
    }

    #[test]
    fn matches_recompute() {
        let desc_nulls_last = WindowOrder {
            descending: true,
            ..asc(1)
        };
        let nulls_first = WindowOrder {
            nulls_first: true,
            ..asc(2)
        };
        let cases: Vec<(Vec<usize>, Vec<WindowOrder>, FrameEnd)> = vec![
            (vec![0], vec![asc(1)], FrameEnd::Peers),
            (
                vec![],
                vec![desc_nulls_last, nulls_first.clone()],
                FrameEnd::Peers,
            ),
            (vec![0, 1], vec![nulls_first], FrameEnd::Peers),
            (vec![0], vec![], FrameEnd::Peers),
            (vec![0], vec![asc(1)], FrameEnd::Row),
            (vec![], vec![asc(2)], FrameEnd::Partition),
        ];
        for (partition, order, frame) in cases {
            let (p, o) = (partition.clone(), order.clone());
            check_against_recompute(
                || {
                    Box::new(Window::new(
                        partition.iter().map(|&c| col(c)).collect(),
                        order.clone(),
                        frame,
                        calls(),
                    ))
                },
                |inputs| recompute(&inputs[0], &p, &o, frame),
                1,
                int_rows(3),
            );
        }
    }
}
