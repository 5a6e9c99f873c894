//! GROUP BY with aggregates: an output row is the group's values followed by
//! each aggregate's value.
//!
//! State: per group, its row count and one accumulator per aggregate
//! (`aqueduct_expr::agg`, the same math direct evaluation uses). For each
//! group a delta touches, the operator retracts the group's old output row
//! (if the group existed) and emits its new one (if it still has rows).
//!
//! With no GROUP BY columns the aggregate is global: one output row always,
//! even over no rows (COUNT 0, the others NULL). It is emitted by the first
//! call to `process`, so a graph primes a new global aggregate with an empty
//! delta.

use std::collections::BTreeMap;

use aqueduct_expr::agg::{Accumulator, AggFunc};
use aqueduct_expr::SqlError;
use aqueduct_values::Value;

use super::columns;
use crate::{consolidate, stored_bytes, Delta, FastMap, Operator, Row};

/// One aggregate: `func(column)`, or `COUNT(*)` with no column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AggCall {
    pub func: AggFunc,
    pub column: Option<usize>,
    pub distinct: bool,
}

impl AggCall {
    pub fn count_star() -> AggCall {
        AggCall {
            func: AggFunc::CountStar,
            column: None,
            distinct: false,
        }
    }

    /// `func(column)`.
    pub fn of(func: AggFunc, column: usize) -> AggCall {
        AggCall {
            func,
            column: Some(column),
            distinct: false,
        }
    }

    /// `func(DISTINCT column)`.
    pub fn distinct(func: AggFunc, column: usize) -> AggCall {
        AggCall {
            distinct: true,
            ..AggCall::of(func, column)
        }
    }
}

struct Group {
    /// Weighted count of the group's rows.
    rows: i64,
    accs: Vec<Accumulator>,
}

pub struct Aggregate {
    group_by: Vec<usize>,
    calls: Vec<AggCall>,
    groups: FastMap<Row, Group>,
    /// A global aggregate's row has been emitted.
    primed: bool,
    bytes: i64,
}

/// Estimated bytes of one accumulator (MIN/MAX and DISTINCT ones hold a
/// multiset of values besides, not counted).
const ACCUMULATOR_BYTES: i64 = 64;

impl Aggregate {
    pub fn new(group_by: Vec<usize>, calls: Vec<AggCall>) -> Aggregate {
        for c in &calls {
            assert_eq!(
                c.column.is_none(),
                c.func == AggFunc::CountStar,
                "COUNT(*) and only COUNT(*) has no column: {c:?}"
            );
        }
        let mut a = Aggregate {
            group_by,
            calls,
            groups: FastMap::default(),
            primed: false,
            bytes: 0,
        };
        if a.is_global() {
            let g = a.fresh();
            a.groups.insert(Vec::new(), g);
        }
        a
    }

    fn group_bytes(&self, key: &Row) -> i64 {
        stored_bytes(key) + ACCUMULATOR_BYTES * self.calls.len() as i64
    }

    fn is_global(&self) -> bool {
        self.group_by.is_empty()
    }

    fn fresh(&self) -> Group {
        Group {
            rows: 0,
            accs: self
                .calls
                .iter()
                .map(|c| Accumulator::new(c.func, c.distinct))
                .collect(),
        }
    }

    /// The output row of the group at `key`, if it has one.
    fn output(&self, key: &Row) -> Result<Option<Row>, SqlError> {
        let Some(g) = self.groups.get(key) else {
            return Ok(None);
        };
        if g.rows <= 0 && !self.is_global() {
            return Ok(None);
        }
        let mut row = Vec::with_capacity(key.len() + g.accs.len());
        row.extend_from_slice(key);
        for acc in &g.accs {
            row.push(acc.finish()?);
        }
        Ok(Some(row))
    }
}

impl Operator for Aggregate {
    fn name(&self) -> &'static str {
        "aggregate"
    }

    fn signature(&self) -> String {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|c| {
                let arg = match c.column {
                    None => "*".to_string(),
                    Some(col) => format!("{}#{col}", if c.distinct { "distinct " } else { "" }),
                };
                format!("{}({arg})", c.func.name())
            })
            .collect();
        format!("aggregate[group {:?}; {}]", self.group_by, calls.join(", "))
    }

    fn process(&mut self, _port: usize, mut delta: Delta) -> Result<Delta, SqlError> {
        // Net changes only when signs mix: rows that cancel out are never
        // seen (a text inserted and deleted in one batch is no SUM error)
        // and no count dips below zero midway. Rows of one sign cannot
        // cancel, nor take a count below where it ends, so they are taken
        // as they come: the million rows of a fill need no sort.
        let positive = delta.iter().any(|(_, w)| *w > 0);
        if positive && delta.iter().any(|(_, w)| *w < 0) {
            consolidate(&mut delta);
        }
        // Touched groups and their output before this delta.
        let mut before: BTreeMap<Row, Option<Row>> = BTreeMap::new();
        if !self.primed && self.is_global() {
            before.insert(Vec::new(), None);
            self.primed = true;
        }
        let null = Value::Null;
        let mut rest = &delta[..];
        while let Some((first, _)) = rest.first() {
            // Consecutive rows of a group (a consolidated delta has them
            // together, and a fill's rows are mostly of one group) share
            // one key and one lookup.
            let key = columns(first, &self.group_by);
            let same_group = |row: &Row| self.group_by.iter().zip(&key).all(|(&c, k)| row[c] == *k);
            let run = rest.iter().position(|(row, _)| !same_group(row));
            let (rows, tail) = rest.split_at(run.unwrap_or(rest.len()));
            rest = tail;
            if !before.contains_key(&key) {
                let old = self.output(&key)?;
                before.insert(key.clone(), old);
            }
            if !self.groups.contains_key(&key) {
                let g = self.fresh();
                self.bytes += self.group_bytes(&key);
                self.groups.insert(key.clone(), g);
            }
            let g = self.groups.get_mut(&key).expect("group just ensured");
            for (row, w) in rows {
                g.rows += w;
                for (acc, call) in g.accs.iter_mut().zip(&self.calls) {
                    let v = call.column.map_or(&null, |c| &row[c]);
                    acc.update(v, *w)?;
                }
            }
        }
        let mut out = Vec::with_capacity(2 * before.len());
        for (key, old) in before {
            let new = self.output(&key)?;
            if new.is_none() && !self.is_global() {
                if let Some(g) = self.groups.remove(&key) {
                    debug_assert!(g.rows == 0 && g.accs.iter().all(Accumulator::is_empty));
                    self.bytes -= self.group_bytes(&key);
                }
            }
            if old != new {
                out.extend(old.map(|r| (r, -1)));
                out.extend(new.map(|r| (r, 1)));
            }
        }
        consolidate(&mut out);
        Ok(out)
    }

    fn state_rows(&self) -> usize {
        self.groups.len()
    }

    fn state_bytes(&self) -> usize {
        self.bytes.max(0) as usize
    }

    /// A key made of group columns traces to the columns they group by; a
    /// global aggregate (one row whatever the input) has no key.
    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        let cols = key
            .iter()
            .map(|&k| self.group_by.get(k).copied())
            .collect::<Option<Vec<usize>>>()?;
        (!self.is_global()).then(|| vec![Some(cols)])
    }

    /// The group columns and the aggregated ones.
    fn input_columns(&self, _port: usize) -> Option<Vec<usize>> {
        let mut cols = self.group_by.clone();
        cols.extend(self.calls.iter().filter_map(|c| c.column));
        cols.sort_unstable();
        cols.dedup();
        Some(cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};
    use aqueduct_values::Decimal;
    use proptest::prelude::*;

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    #[test]
    fn retracts_the_old_group_row_and_emits_the_new() {
        let mut a = Aggregate::new(
            vec![0],
            vec![AggCall::count_star(), AggCall::of(AggFunc::Sum, 1)],
        );
        let out = a
            .process(
                0,
                vec![(vec![int(1), int(5)], 1), (vec![int(1), int(7)], 1)],
            )
            .unwrap();
        assert_eq!(out, vec![(vec![int(1), int(2), int(12)], 1)]);
        let out = a.process(0, vec![(vec![int(1), int(5)], -1)]).unwrap();
        assert_eq!(
            out,
            vec![
                (vec![int(1), int(1), int(7)], 1),
                (vec![int(1), int(2), int(12)], -1)
            ]
        );
        // The group's last row goes: its row goes too.
        let out = a.process(0, vec![(vec![int(1), int(7)], -1)]).unwrap();
        assert_eq!(out, vec![(vec![int(1), int(1), int(7)], -1)]);
        assert_eq!(a.state_rows(), 0);
    }

    #[test]
    fn unchanged_output_emits_nothing() {
        let mut a = Aggregate::new(vec![0], vec![AggCall::of(AggFunc::Max, 1)]);
        a.process(0, vec![(vec![int(1), int(9)], 1)]).unwrap();
        let out = a.process(0, vec![(vec![int(1), int(3)], 1)]).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn global_aggregate_has_a_row_over_no_rows() {
        let mut a = Aggregate::new(
            vec![],
            vec![
                AggCall::count_star(),
                AggCall::of(AggFunc::Count, 0),
                AggCall::of(AggFunc::Sum, 0),
                AggCall::of(AggFunc::Min, 0),
                AggCall::of(AggFunc::Avg, 0),
            ],
        );
        let empty = vec![int(0), int(0), Value::Null, Value::Null, Value::Null];
        // Priming with an empty delta emits the row over no rows.
        assert_eq!(a.process(0, vec![]).unwrap(), vec![(empty.clone(), 1)]);
        assert!(a.process(0, vec![]).unwrap().is_empty());
        let one = vec![
            int(1),
            int(1),
            int(4),
            int(4),
            Value::Numeric(Decimal::new(40000000000000000, 16)),
        ];
        let mut expected = vec![(empty.clone(), -1), (one.clone(), 1)];
        consolidate(&mut expected);
        assert_eq!(a.process(0, vec![(vec![int(4)], 1)]).unwrap(), expected);
        // Deleting every row goes back to the row over no rows.
        let mut expected = vec![(one, -1), (empty, 1)];
        consolidate(&mut expected);
        assert_eq!(a.process(0, vec![(vec![int(4)], -1)]).unwrap(), expected);
        assert_eq!(a.state_rows(), 1);
    }

    #[test]
    fn min_survives_deleting_the_minimum() {
        let mut a = Aggregate::new(vec![0], vec![AggCall::of(AggFunc::Min, 1)]);
        a.process(
            0,
            vec![(vec![int(1), int(2)], 1), (vec![int(1), int(5)], 1)],
        )
        .unwrap();
        let out = a.process(0, vec![(vec![int(1), int(2)], -1)]).unwrap();
        assert_eq!(
            out,
            vec![(vec![int(1), int(2)], -1), (vec![int(1), int(5)], 1)]
        );
    }

    #[test]
    fn sum_of_text_fails() {
        let mut a = Aggregate::new(vec![], vec![AggCall::of(AggFunc::Sum, 0)]);
        let x = vec![Value::Text("x".into())];
        // Unless the text cancels out within the delta.
        let out = a.process(0, vec![(x.clone(), 1), (x.clone(), -1)]).unwrap();
        assert_eq!(out, vec![(vec![Value::Null], 1)]);
        let e = a.process(0, vec![(x.clone(), 1), (x, 1)]).unwrap_err();
        assert_eq!(e.code, "42883");
    }

    /// PostgreSQL's avg of small non-negative integers: `numeric_div` keeps
    /// 16 significant digits, 20 decimals when the sum's first base-10000
    /// digit is at most the count's (valid while both are below 10000).
    fn pg_avg_small(sum: i64, n: i64) -> Value {
        assert!((0..10000).contains(&sum) && (1..10000).contains(&n));
        let scale = if sum <= n { 20 } else { 16 };
        let scaled = sum as i128 * 10i128.pow(scale);
        let q = (2 * scaled + n as i128) / (2 * n as i128);
        Value::Numeric(Decimal::from_i128_with_scale(q, scale))
    }

    /// The reference: group with a map, then each aggregate by hand.
    fn recompute(rows: &[Row], group_by: &[usize]) -> Vec<Row> {
        let mut groups: BTreeMap<Row, Vec<&Row>> = BTreeMap::new();
        if group_by.is_empty() {
            groups.insert(Vec::new(), Vec::new());
        }
        for r in rows {
            groups.entry(columns(r, group_by)).or_default().push(r);
        }
        groups
            .into_iter()
            .map(|(key, rows)| {
                let col = |c: usize| -> Vec<i64> {
                    rows.iter()
                        .filter_map(|r| match r[c] {
                            Value::Int(i) => Some(i),
                            _ => None,
                        })
                        .collect()
                };
                let (b, c) = (col(1), col(2));
                let mut distinct_b = b.clone();
                distinct_b.sort();
                distinct_b.dedup();
                let mut distinct_c = c.clone();
                distinct_c.sort();
                distinct_c.dedup();
                let or_null = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
                let sum = |v: &[i64]| or_null((!v.is_empty()).then(|| v.iter().sum()));
                let mut out = key;
                out.extend([
                    int(rows.len() as i64),
                    int(b.len() as i64),
                    int(distinct_b.len() as i64),
                    sum(&c),
                    sum(&distinct_c),
                    or_null(b.iter().min().copied()),
                    or_null(c.iter().max().copied()),
                    if c.is_empty() {
                        Value::Null
                    } else {
                        pg_avg_small(c.iter().sum(), c.len() as i64)
                    },
                ]);
                out
            })
            .collect()
    }

    fn calls() -> Vec<AggCall> {
        vec![
            AggCall::count_star(),
            AggCall::of(AggFunc::Count, 1),
            AggCall::distinct(AggFunc::Count, 1),
            AggCall::of(AggFunc::Sum, 2),
            AggCall::distinct(AggFunc::Sum, 2),
            AggCall::of(AggFunc::Min, 1),
            AggCall::of(AggFunc::Max, 2),
            AggCall::of(AggFunc::Avg, 2),
        ]
    }

    #[test]
    fn grouped_matches_recompute() {
        check_against_recompute(
            || Box::new(Aggregate::new(vec![0], calls())),
            |inputs| recompute(&inputs[0], &[0]),
            1,
            int_rows(3),
        );
    }

    #[test]
    fn global_matches_recompute() {
        check_against_recompute(
            || Box::new(Aggregate::new(vec![], calls())),
            |inputs| recompute(&inputs[0], &[]),
            1,
            int_rows(3),
        );
    }

    /// Everything the groups hold, in key order, and the bytes counted.
    fn state(a: &Aggregate) -> Vec<String> {
        let mut groups: Vec<String> = a
            .groups
            .iter()
            .map(|(k, g)| format!("{k:?}: {} rows, {:?}", g.rows, g.accs))
            .collect();
        groups.sort();
        groups.push(format!("{} bytes", a.bytes));
        groups
    }

    proptest! {
        /// A delta of one sign (a fill's or an eviction's rows) is taken
        /// as it comes; a mixed one is consolidated first. Either way the
        /// output and the state are those of the consolidated delta.
        #[test]
        fn unconsolidated_deltas_give_what_consolidated_ones_do(
            rows in prop::collection::vec(int_rows(3), 0..40),
            deleted in prop::collection::vec(any::<bool>(), 40),
            global in any::<bool>(),
        ) {
            let group_by = if global { vec![] } else { vec![0] };
            let mut raw = Aggregate::new(group_by.clone(), calls());
            let mut net = Aggregate::new(group_by, calls());
            let (gone, kept): (Vec<_>, Vec<_>) =
                rows.iter().cloned().zip(&deleted).partition(|(_, d)| **d);
            let with = |rows: &[(Row, &bool)], w: i64| -> Delta {
                rows.iter().map(|(r, _)| (r.clone(), w)).collect()
            };
            let inserted = with(&gone, 1).into_iter().chain(with(&kept, 1)).collect();
            // In one delta: the rows gone out (below zero) and back in
            // twice, the others out and back in.
            let mixed = [
                with(&gone, -1),
                with(&kept, -1),
                with(&gone, 2),
                with(&kept, 1),
            ]
            .concat();
            for delta in [inserted, with(&gone, -1), mixed, with(&kept, -1)] {
                let mut consolidated = delta.clone();
                consolidate(&mut consolidated);
                prop_assert_eq!(
                    raw.process(0, delta).unwrap(),
                    net.process(0, consolidated).unwrap()
                );
                prop_assert_eq!(state(&raw), state(&net));
            }
        }
    }

    /// Numerics of several scales and floats of very different magnitudes,
    /// so a sum that is not exact under retraction would drift.
    fn numeric_rows() -> impl Strategy<Value = Row> + Clone {
        let numeric =
            (-1000i64..1000, 0u32..5).prop_map(|(m, s)| Value::Numeric(Decimal::new(m, s)));
        let float = prop_oneof![
            (-1e6f64..1e6).prop_map(Value::Float),
            Just(Value::Float(1e15)),
            Just(Value::Float(1e-300)),
            Just(Value::Float(0.1)),
        ];
        (
            0i64..3,
            prop_oneof![4 => numeric, 1 => Just(Value::Null)],
            prop_oneof![4 => float, 1 => Just(Value::Null)],
        )
            .prop_map(|(g, n, f)| vec![int(g), n, f])
    }

    #[test]
    fn equals_direct_evaluation_on_numerics_and_floats() {
        let calls = vec![
            AggCall::of(AggFunc::Sum, 1),
            AggCall::of(AggFunc::Avg, 1),
            AggCall::of(AggFunc::Min, 1),
            AggCall::of(AggFunc::Sum, 2),
            AggCall::of(AggFunc::Avg, 2),
            AggCall::distinct(AggFunc::Sum, 2),
            AggCall::of(AggFunc::Max, 2),
        ];
        let reference = calls.clone();
        check_against_recompute(
            move || Box::new(Aggregate::new(vec![0], calls.clone())),
            // What `aqueduct-sql` does for GROUP BY: one insert-only pass.
            move |inputs| {
                let mut groups: BTreeMap<Row, Vec<Accumulator>> = BTreeMap::new();
                for r in &inputs[0] {
                    let accs = groups.entry(columns(r, &[0])).or_insert_with(|| {
                        reference
                            .iter()
                            .map(|c| Accumulator::insert_only(c.func, c.distinct))
                            .collect()
                    });
                    for (acc, c) in accs.iter_mut().zip(&reference) {
                        acc.insert(&r[c.column.unwrap()]).unwrap();
                    }
                }
                groups
                    .into_iter()
                    .map(|(mut key, accs)| {
                        key.extend(accs.iter().map(|a| a.finish().unwrap()));
                        key
                    })
                    .collect()
            },
            1,
            numeric_rows(),
        );
    }
}
