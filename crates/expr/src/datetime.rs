//! Arithmetic of dates, timestamps and intervals, and `extract` /
//! `date_part` of intervals, as PostgreSQL's operators and functions:
//! `timestamp ± interval` is a timestamp (a date is moved as its
//! midnight), `timestamp - timestamp` an interval of days and time,
//! `interval * number` and `interval / number` carry fractions down.
//! A `timestamptz` moves by UTC days (sessions here are in UTC).

use aqueduct_values::{DataType, Interval, UnitError, Value, ValueError, DAY_MICROS};

use crate::expr::BinOp;
use crate::SqlError;

fn division_by_zero() -> SqlError {
    SqlError::new("22012", "division by zero")
}

/// Makes the value of a moved timestamp: a timestamp or a timestamptz.
type MakeInstant = fn(i64) -> Value;

/// A timestamp, timestamptz or date (its midnight) as microseconds since
/// 1970, and how to make the result of moving it (a date moves as a
/// timestamp); `None` for other values.
fn instant(v: &Value) -> Result<Option<(i64, MakeInstant)>, SqlError> {
    Ok(Some(match v {
        Value::Timestamp(t) => (*t, Value::Timestamp as MakeInstant),
        Value::TimestampTz(t) => (*t, Value::TimestampTz),
        Value::Date(d) => match (*d as i64).checked_mul(DAY_MICROS) {
            Some(t) => (t, Value::Timestamp),
            None => return Err(ValueError::DatetimeOutOfRange { what: "timestamp" }.into()),
        },
        _ => return Ok(None),
    }))
}

fn factor(v: &Value) -> Option<f64> {
    match v {
        Value::Int(_) | Value::Float(_) | Value::Numeric(_) => v.as_f64(),
        _ => None,
    }
}

/// `a op b` where an interval, or two timestamps, are involved; `None`
/// when PostgreSQL has no such operator among these.
pub(crate) fn arithmetic(op: BinOp, a: &Value, b: &Value) -> Result<Option<Value>, SqlError> {
    Ok(match (Interval::of(a), Interval::of(b)) {
        (Some(x), Some(y)) => match op {
            BinOp::Add => Some(x.checked_add(y)?.to_value()),
            BinOp::Sub => Some(x.checked_sub(y)?.to_value()),
            _ => None,
        },
        (Some(x), None) => match (op, factor(b)) {
            (BinOp::Mul, Some(f)) => Some(x.checked_mul(f)?.to_value()),
            // (-0.0 matches too.)
            (BinOp::Div, Some(0.0)) => return Err(division_by_zero()),
            (BinOp::Div, Some(f)) => Some(x.checked_div(f)?.to_value()),
            // interval + timestamp
            (BinOp::Add, None) => match instant(b)? {
                Some((t, make)) => Some(move_instant(t, x, make)?),
                None => None,
            },
            _ => None,
        },
        (None, Some(y)) => match (op, factor(a)) {
            (BinOp::Mul, Some(f)) => Some(y.checked_mul(f)?.to_value()),
            (BinOp::Add | BinOp::Sub, None) => match instant(a)? {
                Some((t, make)) if op == BinOp::Add => Some(move_instant(t, y, make)?),
                Some((t, make)) => Some(move_instant(t, y.checked_neg()?, make)?),
                None => None,
            },
            _ => None,
        },
        // timestamp - timestamp (a date as its midnight; date - date is a
        // number of days, elsewhere).
        (None, None) if op == BinOp::Sub && !matches!((a, b), (Value::Date(_), Value::Date(_))) => {
            match (instant(a)?, instant(b)?) {
                (Some((x, _)), Some((y, _))) => {
                    Some(aqueduct_values::timestamp_difference(x, y)?.to_value())
                }
                _ => None,
            }
        }
        (None, None) => None,
    })
}

fn move_instant(t: i64, iv: Interval, make: MakeInstant) -> Result<Value, SqlError> {
    Ok(make(aqueduct_values::timestamp_plus_interval(t, iv)?))
}

/// `extract(unit from v)` (a numeric) or `date_part('unit', v)` (a
/// double precision) of an interval.
pub(crate) fn part(unit: &Value, v: &Value, numeric: bool) -> Result<Value, SqlError> {
    let unit = unit.to_text().unwrap_or_default();
    let Some(iv) = Interval::of(v) else {
        let name = if numeric { "extract" } else { "date_part" };
        return Err(
            SqlError::unsupported(format!("{name} of a {}", v.kind_name()))
                .with_hint("extract and date_part take an interval"),
        );
    };
    aqueduct_values::interval_part(iv, &unit, numeric).map_err(|e| match e {
        UnitError::Unsupported => SqlError::new(
            "0A000",
            format!("unit \"{unit}\" not supported for type interval"),
        ),
        UnitError::Unrecognized => SqlError::new(
            "22023",
            format!("unit \"{unit}\" not recognized for type interval"),
        ),
    })
}

/// `age(a, b)` of two timestamps (or dates, as their midnights).
pub(crate) fn age(a: &Value, b: &Value) -> Result<Value, SqlError> {
    match (instant(a)?, instant(b)?) {
        (Some((x, _)), Some((y, _))) => Ok(aqueduct_values::age(x, y)?.to_value()),
        _ => Err(SqlError::new(
            "42883",
            format!(
                "function age({}, {}) does not exist",
                a.kind_name(),
                b.kind_name()
            ),
        )
        .with_hint("age takes timestamps")),
    }
}

/// `make_interval(years, months, weeks, days, hours, mins, secs)`.
pub(crate) fn make_interval(args: &[Value]) -> Result<Value, SqlError> {
    let int = |i: usize| -> Result<i32, SqlError> {
        match args.get(i) {
            None => Ok(0),
            Some(v) => match v.clone().coerce(&DataType::Int4)? {
                Value::Int(n) => Ok(n as i32),
                _ => Err(SqlError::new("22023", "make_interval takes integers")),
            },
        }
    };
    let fields = [int(0)?, int(1)?, int(2)?, int(3)?, int(4)?, int(5)?];
    let secs = match args.get(6) {
        None => 0.0,
        Some(v) => v
            .as_f64()
            .ok_or_else(|| SqlError::new("22023", "make_interval takes seconds as a number"))?,
    };
    Ok(Interval::make(fields, secs)?.to_value())
}

/// `justify_days`, `justify_hours` or `justify_interval` of an interval.
pub(crate) fn justify(
    v: &Value,
    name: &str,
    f: fn(Interval) -> Result<Interval, ValueError>,
) -> Result<Value, SqlError> {
    let iv = Interval::of(v).ok_or_else(|| {
        SqlError::new(
            "42883",
            format!("function {name}({}) does not exist", v.kind_name()),
        )
    })?;
    Ok(f(iv)?.to_value())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(s: &str) -> Value {
        Value::Text(s.into()).coerce(&DataType::Interval).unwrap()
    }

    fn ts(s: &str) -> Value {
        Value::Text(s.into()).coerce(&DataType::Timestamp).unwrap()
    }

    fn text(r: Result<Option<Value>, SqlError>) -> String {
        r.unwrap().unwrap().to_text().unwrap()
    }

    #[test]
    fn operators_as_postgres() {
        assert_eq!(
            text(arithmetic(BinOp::Add, &ts("2024-01-31"), &iv("1 mon"))),
            "2024-02-29 00:00:00"
        );
        assert_eq!(
            text(arithmetic(BinOp::Add, &iv("1 day"), &Value::Date(0))),
            "1970-01-02 00:00:00"
        );
        assert_eq!(
            text(arithmetic(BinOp::Sub, &Value::Date(0), &iv("1 day"))),
            "1969-12-31 00:00:00"
        );
        assert_eq!(
            text(arithmetic(
                BinOp::Sub,
                &Value::TimestampTz(0),
                &iv("1 hour")
            )),
            "1969-12-31 23:00:00+00"
        );
        assert_eq!(
            text(arithmetic(BinOp::Sub, &ts("2024-03-01"), &ts("2024-02-01"))),
            "29 days"
        );
        assert_eq!(
            text(arithmetic(BinOp::Sub, &ts("2024-03-01"), &Value::Date(0))),
            "19783 days"
        );
        assert!(arithmetic(BinOp::Sub, &Value::Date(1), &Value::Date(0))
            .unwrap()
            .is_none());
        assert!(arithmetic(BinOp::Add, &ts("2024-03-01"), &ts("2024-02-01"))
            .unwrap()
            .is_none());
        assert_eq!(
            text(arithmetic(BinOp::Mul, &Value::Int(2), &iv("1 hour"))),
            "02:00:00"
        );
        assert_eq!(
            text(arithmetic(BinOp::Div, &iv("1 mon"), &Value::Int(3))),
            "10 days"
        );
        assert!(arithmetic(BinOp::Div, &Value::Int(3), &iv("1 mon"))
            .unwrap()
            .is_none());
        // A date whose midnight no timestamp holds.
        let e = arithmetic(BinOp::Add, &Value::Date(i32::MAX), &iv("1 day")).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22008", "timestamp out of range")
        );
        for zero in [Value::Float(0.0), Value::Float(-0.0), Value::Int(0)] {
            let e = arithmetic(BinOp::Div, &iv("1 day"), &zero).unwrap_err();
            assert_eq!(e.code, "22012");
        }
        let e = arithmetic(BinOp::Add, &iv("2147483647 days"), &iv("1 day")).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22008", "interval out of range")
        );
    }

    #[test]
    fn extract_errors_name_the_unit() {
        let unit = Value::Text("dow".into());
        assert_eq!(part(&unit, &iv("1 day"), true).unwrap_err().code, "0A000");
        let unit = Value::Text("foo".into());
        let e = part(&unit, &iv("1 day"), false).unwrap_err();
        assert_eq!(e.message, "unit \"foo\" not recognized for type interval");
    }
}
