//! Aggregate functions, in one place for direct evaluation (`GROUP BY` in
//! `aqueduct-sql`) and the dataflow's aggregate operator, so a view and the
//! query it caches give the same values.
//!
//! An [`Accumulator`] takes values with signed weights: `+w` adds `w` copies,
//! `-w` retracts them. Its result after any sequence of updates equals its
//! result over the remaining values added from scratch, in any order: counts
//! are counts, sums are exact until [`Accumulator::finish`] rounds once
//! (`sum.rs`), MIN and MAX keep the multiset of values, and DISTINCT keeps a
//! count per distinct value.
//!
//! PostgreSQL semantics: NULL inputs are skipped by all but `COUNT(*)`; over
//! no values COUNT is 0 and the others are NULL; SUM of integers is an
//! integer (numeric when it leaves 64 bits), of numerics a numeric, of floats
//! a float; AVG of integers and numerics is a numeric with PostgreSQL's
//! scale, of floats a float.

mod sum;

use std::cmp::Ordering;
use std::collections::BTreeMap;

use aqueduct_values::{DataType, Value};

use crate::SqlError;
use sum::ExactSum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AggFunc {
    /// `COUNT(*)`: every row, NULLs included.
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// `array_agg`: the values, NULLs included, in the order they came.
    ArrayAgg,
    /// `jsonb_agg`: likewise, as a jsonb array.
    JsonbAgg,
    /// `array_agg(x ORDER BY k [DESC] [NULLS FIRST|LAST], ...)`: its
    /// argument is the array `[k, desc, nulls_first, ..., x]` the binder
    /// makes, and the values come out in the keys' order.
    OrderedArrayAgg,
    /// `jsonb_agg(x ORDER BY ...)`, likewise.
    OrderedJsonbAgg,
}

impl AggFunc {
    /// Whether it collects every value (NULLs too) into an array.
    pub fn collects(self) -> bool {
        matches!(
            self,
            AggFunc::ArrayAgg
                | AggFunc::JsonbAgg
                | AggFunc::OrderedArrayAgg
                | AggFunc::OrderedJsonbAgg
        )
    }

    /// The function called `name` (lower case). `count` is `COUNT(expr)`.
    pub fn by_name(name: &str) -> Option<AggFunc> {
        Some(match name {
            "count" => AggFunc::Count,
            "sum" => AggFunc::Sum,
            // Over booleans false sorts first: bool_and (every) is the
            // least value, bool_or the greatest.
            "min" | "bool_and" | "every" => AggFunc::Min,
            "max" | "bool_or" => AggFunc::Max,
            "avg" => AggFunc::Avg,
            "array_agg" => AggFunc::ArrayAgg,
            "jsonb_agg" => AggFunc::JsonbAgg,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AggFunc::CountStar | AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Avg => "avg",
            AggFunc::ArrayAgg | AggFunc::OrderedArrayAgg => "array_agg",
            AggFunc::JsonbAgg | AggFunc::OrderedJsonbAgg => "jsonb_agg",
        }
    }

    /// The result type over an argument of type `input`, as PostgreSQL
    /// declares it (`sum(int4)` is bigint, `sum(int8)` numeric, ...).
    pub fn result_type(self, input: &DataType) -> DataType {
        match self {
            AggFunc::CountStar | AggFunc::Count => DataType::Int8,
            AggFunc::Avg => match input {
                DataType::Float4 | DataType::Float8 => DataType::Float8,
                DataType::Interval => DataType::Interval,
                _ => DataType::Numeric,
            },
            AggFunc::Sum => match input {
                DataType::Int2 | DataType::Int4 => DataType::Int8,
                DataType::Int8 => DataType::Numeric,
                other => other.unconstrained(),
            },
            AggFunc::Min | AggFunc::Max => input.unconstrained(),
            AggFunc::ArrayAgg | AggFunc::OrderedArrayAgg => input.array_of(),
            AggFunc::JsonbAgg | AggFunc::OrderedJsonbAgg => DataType::Jsonb,
        }
    }
}

/// An ordered aggregate's entries (`[k, desc, nulls_first, ..., x]`, see
/// [`AggFunc::OrderedArrayAgg`]) sorted by their keys, as their values;
/// entries with equal keys keep the order they came in.
fn in_key_order(entries: &[(Value, i64)]) -> Vec<(Value, i64)> {
    let parts = |v: &Value| -> Vec<Value> {
        match v {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        }
    };
    let mut keyed: Vec<(Vec<Value>, i64)> = entries.iter().map(|(v, n)| (parts(v), *n)).collect();
    keyed.sort_by(|(a, _), (b, _)| {
        let keys = a.len().saturating_sub(1) / 3;
        for i in 0..keys {
            let (x, y) = (&a[3 * i], &b[3 * i]);
            let desc = a[3 * i + 1] == Value::Bool(true);
            let nulls_first = a[3 * i + 2] == Value::Bool(true);
            let order = match (x.is_null(), y.is_null()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) if nulls_first => std::cmp::Ordering::Less,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) if nulls_first => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                (false, false) => {
                    let o = x.sql_cmp(y).unwrap_or(std::cmp::Ordering::Equal);
                    if desc {
                        o.reverse()
                    } else {
                        o
                    }
                }
            };
            if order != std::cmp::Ordering::Equal {
                return order;
            }
        }
        std::cmp::Ordering::Equal
    });
    keyed
        .into_iter()
        .map(|(mut p, n)| (p.pop().unwrap_or(Value::Null), n))
        .collect()
}

/// A value in the MIN/MAX multiset. Values equal in SQL but written
/// differently (`1.0` and `1.00`, `1` and `1.0::float8`, `'1 mon'` and
/// `'30 days'`) are ordered by kind, scale and fields, so the result does
/// not depend on the order of the inputs.
#[derive(Clone, Debug)]
struct Exact(Value);

fn form(v: &Value) -> (&'static str, u32, (i32, i32, i64)) {
    match v {
        Value::Numeric(d) => ("numeric", d.scale(), (0, 0, 0)),
        Value::Interval {
            months,
            days,
            micros,
        } => ("interval", 0, (*months, *days, *micros)),
        other => (other.kind_name(), 0, (0, 0, 0)),
    }
}

impl Ord for Exact {
    fn cmp(&self, other: &Exact) -> Ordering {
        self.0
            .cmp(&other.0)
            .then_with(|| form(&self.0).cmp(&form(&other.0)))
    }
}

impl PartialOrd for Exact {
    fn partial_cmp(&self, other: &Exact) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Exact {
    fn eq(&self, other: &Exact) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Exact {}

#[derive(Clone, Debug)]
enum State {
    Count(i64),
    /// SUM and AVG.
    Sum(Box<ExactSum>),
    /// MIN and MAX: value → weighted count.
    Extreme(BTreeMap<Exact, i64>),
    /// `array_agg` and `jsonb_agg`: values with their weights in the order
    /// they first came; a retraction takes from the latest copy.
    Collect(Vec<(Value, i64)>),
}

/// The running state of one aggregate over one group.
#[derive(Clone, Debug)]
pub struct Accumulator {
    func: AggFunc,
    /// For `DISTINCT`: value → weighted count; the aggregate sees each value
    /// once while its count is positive.
    distinct: Option<BTreeMap<Value, i64>>,
    /// False for direct evaluation: values are only added, and MIN/MAX keep
    /// just the best one.
    retractable: bool,
    state: State,
}

impl Accumulator {
    /// An accumulator that takes insertions and retractions.
    pub fn new(func: AggFunc, distinct: bool) -> Accumulator {
        let state = match func {
            AggFunc::CountStar | AggFunc::Count => State::Count(0),
            AggFunc::Sum | AggFunc::Avg => State::Sum(Box::new(ExactSum::new())),
            AggFunc::Min | AggFunc::Max => State::Extreme(BTreeMap::new()),
            AggFunc::ArrayAgg
            | AggFunc::JsonbAgg
            | AggFunc::OrderedArrayAgg
            | AggFunc::OrderedJsonbAgg => State::Collect(Vec::new()),
        };
        Accumulator {
            func,
            distinct: (distinct && func != AggFunc::CountStar).then(BTreeMap::new),
            retractable: true,
            state,
        }
    }

    /// An accumulator for one pass over rows: only insertions, and MIN/MAX
    /// in constant space.
    pub fn insert_only(func: AggFunc, distinct: bool) -> Accumulator {
        Accumulator {
            retractable: false,
            ..Accumulator::new(func, distinct)
        }
    }

    pub fn func(&self) -> AggFunc {
        self.func
    }

    /// Adds one row's value.
    pub fn insert(&mut self, v: &Value) -> Result<(), SqlError> {
        self.update(v, 1)
    }

    /// Adds `weight` copies of `v` (retracts them when negative). On error
    /// the state is unchanged.
    pub fn update(&mut self, v: &Value, weight: i64) -> Result<(), SqlError> {
        assert!(
            self.retractable || weight >= 0,
            "retraction from an insert-only accumulator"
        );
        if weight == 0 {
            return Ok(());
        }
        if self.func == AggFunc::CountStar {
            self.apply(v, weight);
            return Ok(());
        }
        if v.is_null() && !self.func.collects() {
            return Ok(());
        }
        if matches!(self.func, AggFunc::Sum | AggFunc::Avg) && !ExactSum::accepts(v) {
            return Err(SqlError::new(
                "42883",
                format!(
                    "function {}({}) does not exist",
                    self.func.name(),
                    v.kind_name()
                ),
            )
            .with_hint("add explicit casts to a numeric type"));
        }
        let Some(seen) = &mut self.distinct else {
            self.apply(v, weight);
            return Ok(());
        };
        // The value counts once while present; retract the stored copy, so
        // exactly what went in comes out.
        let before = seen.get(v).copied().unwrap_or(0);
        let after = before + weight;
        let change = ((before > 0) != (after > 0)).then(|| {
            let key = seen
                .get_key_value(v)
                .map_or_else(|| v.clone(), |(k, _)| k.clone());
            (key, if after > 0 { 1 } else { -1 })
        });
        match (before, after) {
            (_, 0) => {
                seen.remove(v);
            }
            (0, _) => {
                seen.insert(v.clone(), after);
            }
            _ => *seen.get_mut(v).expect("counted value") = after,
        }
        if let Some((key, w)) = change {
            self.apply(&key, w);
        }
        Ok(())
    }

    fn apply(&mut self, v: &Value, weight: i64) {
        match &mut self.state {
            State::Count(n) => *n += weight,
            State::Sum(s) => s.add(v, weight),
            State::Collect(values) => {
                // Exactly the value that went in comes out (1.0 stays 1.0).
                let same = |x: &Value| x == v && x.to_text() == v.to_text();
                if weight > 0 {
                    match values.last_mut() {
                        Some((x, n)) if same(x) => *n += weight,
                        _ => values.push((v.clone(), weight)),
                    }
                    return;
                }
                let mut left = -weight;
                let mut i = values.len();
                while left > 0 && i > 0 {
                    i -= 1;
                    if same(&values[i].0) {
                        let take = left.min(values[i].1);
                        values[i].1 -= take;
                        left -= take;
                        if values[i].1 == 0 {
                            values.remove(i);
                        }
                    }
                }
            }
            State::Extreme(values) => {
                let key = Exact(v.clone());
                match values.get_mut(&key) {
                    Some(c) if *c + weight == 0 => {
                        values.remove(&key);
                    }
                    Some(c) => *c += weight,
                    None => {
                        values.insert(key, weight);
                    }
                }
                if !self.retractable && values.len() > 1 {
                    // Keep only the best value.
                    if self.func == AggFunc::Min {
                        values.pop_last();
                    } else {
                        values.pop_first();
                    }
                }
            }
        }
    }

    /// The aggregate's value now.
    pub fn finish(&self) -> Result<Value, SqlError> {
        match &self.state {
            State::Count(n) => Ok(Value::Int(*n)),
            State::Sum(s) if self.func == AggFunc::Avg => s.avg(),
            State::Sum(s) => s.sum(),
            State::Extreme(values) => {
                let best = if self.func == AggFunc::Min {
                    values.first_key_value()
                } else {
                    values.last_key_value()
                };
                Ok(best.map(|(v, _)| v.0.clone()).unwrap_or(Value::Null))
            }
            State::Collect(values) if values.is_empty() => Ok(Value::Null),
            State::Collect(values) => {
                let ordered;
                let values = if matches!(
                    self.func,
                    AggFunc::OrderedArrayAgg | AggFunc::OrderedJsonbAgg
                ) {
                    ordered = in_key_order(values);
                    &ordered
                } else {
                    values
                };
                let all = values
                    .iter()
                    .flat_map(|(v, n)| std::iter::repeat_n(v, usize::try_from(*n).unwrap_or(0)));
                if matches!(self.func, AggFunc::JsonbAgg | AggFunc::OrderedJsonbAgg) {
                    Ok(Value::Jsonb(aqueduct_values::Jsonb::Array(
                        all.map(crate::json::to_jsonb).collect::<Result<_, _>>()?,
                    )))
                } else {
                    if values.iter().any(|(v, _)| matches!(v, Value::Array(_))) {
                        return Err(SqlError::unsupported("array_agg of arrays"));
                    }
                    Ok(Value::Array(all.cloned().collect()))
                }
            }
        }
    }

    /// True when no value is held (every insertion was retracted).
    pub fn is_empty(&self) -> bool {
        match &self.state {
            State::Count(n) => *n == 0,
            State::Sum(s) => s.count() == 0,
            State::Extreme(values) => values.is_empty(),
            State::Collect(values) => values.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_values::Decimal;
    use std::str::FromStr;

    fn ints(v: &[i64]) -> Vec<Value> {
        v.iter().map(|&i| Value::Int(i)).collect()
    }

    fn run(func: AggFunc, distinct: bool, values: &[Value]) -> Value {
        let mut a = Accumulator::new(func, distinct);
        for v in values {
            a.insert(v).unwrap();
        }
        a.finish().unwrap()
    }

    #[test]
    fn over_no_rows_count_is_zero_and_the_rest_null() {
        assert_eq!(run(AggFunc::CountStar, false, &[]), Value::Int(0));
        assert_eq!(run(AggFunc::Count, false, &[]), Value::Int(0));
        for f in [AggFunc::Sum, AggFunc::Min, AggFunc::Max, AggFunc::Avg] {
            assert!(run(f, false, &[]).is_null(), "{f:?}");
        }
    }

    #[test]
    fn nulls_are_skipped_except_by_count_star() {
        let v = vec![Value::Null, Value::Int(2), Value::Null];
        assert_eq!(run(AggFunc::CountStar, false, &v), Value::Int(3));
        assert_eq!(run(AggFunc::Count, false, &v), Value::Int(1));
        assert_eq!(run(AggFunc::Sum, false, &v), Value::Int(2));
        assert!(run(AggFunc::Sum, false, &[Value::Null]).is_null());
    }

    #[test]
    fn distinct_counts_each_value_once_while_present() {
        let mut a = Accumulator::new(AggFunc::Sum, true);
        for v in ints(&[3, 3, 4]) {
            a.insert(&v).unwrap();
        }
        assert_eq!(a.finish().unwrap(), Value::Int(7));
        a.update(&Value::Int(3), -1).unwrap();
        assert_eq!(a.finish().unwrap(), Value::Int(7));
        a.update(&Value::Int(3), -1).unwrap();
        assert_eq!(a.finish().unwrap(), Value::Int(4));
        a.update(&Value::Int(4), -1).unwrap();
        assert!(a.finish().unwrap().is_null());
        assert!(a.is_empty());
    }

    #[test]
    fn min_and_max_survive_deleting_the_extreme() {
        let mut min = Accumulator::new(AggFunc::Min, false);
        let mut max = Accumulator::new(AggFunc::Max, false);
        for v in ints(&[5, 1, 9, 1]) {
            min.insert(&v).unwrap();
            max.insert(&v).unwrap();
        }
        min.update(&Value::Int(1), -1).unwrap();
        assert_eq!(min.finish().unwrap(), Value::Int(1));
        min.update(&Value::Int(1), -1).unwrap();
        assert_eq!(min.finish().unwrap(), Value::Int(5));
        max.update(&Value::Int(9), -1).unwrap();
        assert_eq!(max.finish().unwrap(), Value::Int(5));
    }

    #[test]
    fn insert_only_extremes_keep_one_value() {
        let mut a = Accumulator::insert_only(AggFunc::Max, false);
        for v in ints(&[5, 1, 9, 1]) {
            a.insert(&v).unwrap();
        }
        assert_eq!(a.finish().unwrap(), Value::Int(9));
        let State::Extreme(values) = &a.state else {
            unreachable!()
        };
        assert_eq!(values.len(), 1);
    }

    #[test]
    fn equal_values_written_differently_do_not_depend_on_order() {
        let n = |s: &str| Value::Numeric(Decimal::from_str(s).unwrap());
        let forward = [n("1.0"), n("1.00")];
        let backward = [n("1.00"), n("1.0")];
        for f in [AggFunc::Min, AggFunc::Max] {
            let a = run(f, false, &forward).to_text();
            assert_eq!(a, run(f, false, &backward).to_text());
        }
    }

    #[test]
    fn sum_of_text_is_an_error_and_leaves_state_alone() {
        let mut a = Accumulator::new(AggFunc::Sum, false);
        a.insert(&Value::Int(1)).unwrap();
        let e = a.insert(&Value::Text("x".into())).unwrap_err();
        assert_eq!(e.code, "42883");
        assert_eq!(a.finish().unwrap(), Value::Int(1));
    }

    #[test]
    fn array_agg_keeps_nulls_order_and_retractions() {
        let mut a = Accumulator::new(AggFunc::ArrayAgg, false);
        for v in [Value::Int(3), Value::Null, Value::Int(1), Value::Int(3)] {
            a.insert(&v).unwrap();
        }
        assert_eq!(a.finish().unwrap().to_text().unwrap(), "{3,NULL,1,3}");
        a.update(&Value::Int(3), -1).unwrap();
        assert_eq!(a.finish().unwrap().to_text().unwrap(), "{3,NULL,1}");
        let mut j = Accumulator::new(AggFunc::JsonbAgg, false);
        j.insert(&Value::Text("x".into())).unwrap();
        j.insert(&Value::Null).unwrap();
        assert_eq!(j.finish().unwrap().to_text().unwrap(), r#"["x", null]"#);
        assert!(run(AggFunc::ArrayAgg, false, &[]).is_null());
    }

    #[test]
    fn result_types_follow_postgres() {
        assert_eq!(AggFunc::Sum.result_type(&DataType::Int4), DataType::Int8);
        assert_eq!(AggFunc::Sum.result_type(&DataType::Int8), DataType::Numeric);
        assert_eq!(AggFunc::Avg.result_type(&DataType::Int4), DataType::Numeric);
        assert_eq!(
            AggFunc::Avg.result_type(&DataType::Float4),
            DataType::Float8
        );
        assert_eq!(AggFunc::Count.result_type(&DataType::Text), DataType::Int8);
        assert_eq!(AggFunc::Max.result_type(&DataType::Text), DataType::Text);
        for f in [AggFunc::Sum, AggFunc::Avg, AggFunc::Min, AggFunc::Max] {
            assert_eq!(f.result_type(&DataType::Interval), DataType::Interval);
        }
    }

    #[test]
    fn extremes_of_equal_intervals_do_not_depend_on_order() {
        let iv = |m, d| Value::Interval {
            months: m,
            days: d,
            micros: 0,
        };
        for f in [AggFunc::Min, AggFunc::Max] {
            let a = run(f, false, &[iv(1, 0), iv(0, 30)]);
            let b = run(f, false, &[iv(0, 30), iv(1, 0)]);
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
        assert_eq!(
            run(AggFunc::Max, false, &[iv(1, 0), iv(0, 31)])
                .to_text()
                .unwrap(),
            "31 days"
        );
    }
}
