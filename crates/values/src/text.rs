//! PostgreSQL text forms of values (what `psql` prints and text-format
//! parameters carry).

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike};

use crate::Value;

const EPOCH_DAYS_FROM_CE: i32 = 719_163;

pub(crate) fn to_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => if *b { "t" } else { "f" }.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format_float(*f),
        Value::Numeric(d) => d.to_string(),
        Value::Text(s) | Value::Json(s) => s.clone(),
        Value::Bytes(b) => {
            let mut s = String::with_capacity(2 + b.len() * 2);
            s.push_str("\\x");
            for byte in b {
                s.push_str(&format!("{byte:02x}"));
            }
            s
        }
        Value::Timestamp(t) => format_timestamp(*t),
        Value::TimestampTz(t) => format_timestamp_zone(*t, "+00"),
        Value::Date(d) => format_date(*d),
        Value::Uuid(u) => uuid::Uuid::from_u128(*u).hyphenated().to_string(),
        Value::Jsonb(j) => j.to_string(),
        Value::Array(items) => crate::format_array(items, to_text),
        Value::Interval {
            months,
            days,
            micros,
        } => crate::format_interval(crate::Interval::new(*months, *days, *micros)),
        Value::Enum(_, label) => label.to_string(),
    })
}

fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f == f64::INFINITY {
        "Infinity".into()
    } else if f == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        format_finite_float(f, 15)
    }
}

/// PostgreSQL's shortest round-trip form: plain digits when the decimal
/// exponent is in [-4, `digits`), otherwise `d.ddde±XX` with at least two
/// exponent digits (15 for double precision, 6 for real).
pub fn format_finite_float(f: f64, digits: i32) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    if (-4..digits).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// A `real` as PostgreSQL prints it: the shortest digits that read back as
/// the same `f32`, in exponent form when the decimal exponent is below -4
/// or at least 6 (`1.2345679e+08`, `1e-05`, `123456.7`).
pub fn format_float4(f: f32) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// Whether `s` is written like a date or timestamp (digits in the places
/// of `YYYY-MM-DD[ HH:MM[:SS[.f]]][zone]`), so that failing to read it
/// means a field is out of range rather than bad syntax.
pub(crate) fn has_datetime_shape(s: &str) -> bool {
    let Some((body, _)) = split_zone(s) else {
        return false;
    };
    let body = body.trim().replacen('T', " ", 1);
    let (date, time) = match body.split_once(' ') {
        Some((d, t)) => (d, Some(t.trim())),
        None => (body.as_str(), None),
    };
    let numbers = |part: &str, sep: char, counts: &[usize]| {
        let fields: Vec<&str> = part.split(sep).collect();
        counts.contains(&fields.len())
            && fields
                .iter()
                .all(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    };
    numbers(date, '-', &[3]) && time.is_none_or(|t| numbers(t, ':', &[2, 3]))
}

/// `YYYY-MM-DD` of a date, and whether it is BC: PostgreSQL counts
/// years 1 BC, 2 BC, ... where the proleptic calendar has 0, -1, ...
fn ymd(d: NaiveDate) -> (String, bool) {
    let (year, bc) = if d.year() <= 0 {
        (1 - d.year(), true)
    } else {
        (d.year(), false)
    };
    (format!("{year:04}-{:02}-{:02}", d.month(), d.day()), bc)
}

/// `YYYY-MM-DD[ BC]` for days since 1970-01-01.
pub fn format_date(days: i32) -> String {
    match NaiveDate::from_num_days_from_ce_opt(days + EPOCH_DAYS_FROM_CE) {
        Some(d) => match ymd(d) {
            (date, true) => format!("{date} BC"),
            (date, false) => date,
        },
        None => format!("day {days}"),
    }
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff][ BC]` for microseconds since the epoch.
pub fn format_timestamp(micros: i64) -> String {
    format_timestamp_zone(micros, "")
}

/// A timestamp with `zone` after its time and before a `BC`, as
/// PostgreSQL writes `0001-04-06 06:21:14+00 BC`.
fn format_timestamp_zone(micros: i64, zone: &str) -> String {
    let Some(dt) = DateTime::from_timestamp_micros(micros) else {
        return format!("{micros} µs");
    };
    let dt = dt.naive_utc();
    let (date, bc) = ymd(dt.date());
    let mut out = format!("{date} {}", dt.format("%H:%M:%S"));
    let frac = dt.nanosecond() / 1000;
    if frac != 0 {
        let f = format!("{frac:06}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out.push_str(zone);
    if bc {
        out.push_str(" BC");
    }
    out
}

/// Parses a date `YYYY-MM-DD` into days since 1970-01-01.
pub fn parse_date(s: &str) -> Option<i32> {
    let d = NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").ok()?;
    Some(d.num_days_from_ce() - EPOCH_DAYS_FROM_CE)
}

/// Parses `YYYY-MM-DD[ T]HH:MM[:SS[.f]][zone]` (or a bare date) into
/// microseconds since the epoch. With `with_zone`, an offset (`+02`, `+02:00`,
/// `Z`) is applied to get UTC; without it, any offset is ignored as
/// PostgreSQL does for `timestamp without time zone`.
pub fn parse_timestamp(s: &str, with_zone: bool) -> Option<i64> {
    let s = s.trim();
    let (body, offset_secs) = split_zone(s)?;
    let body = body.trim().replace('T', " ");
    let naive = [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(&body, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(&body, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    })?;
    let micros = naive.and_utc().timestamp_micros();
    Some(if with_zone {
        micros - offset_secs as i64 * 1_000_000
    } else {
        micros
    })
}

/// Splits a trailing zone (`Z`, `UTC`, `+hh`, `+hh:mm`, `-hhmm`) off a timestamp.
fn split_zone(s: &str) -> Option<(&str, i32)> {
    if let Some(b) = s.strip_suffix('Z').or_else(|| s.strip_suffix(" UTC")) {
        return Some((b, 0));
    }
    // The zone sign comes after the time part (after the last ':' or digit run).
    let time_start = s.find(' ').or_else(|| s.find('T'));
    let Some(ts) = time_start else {
        return Some((s, 0));
    };
    let tail = &s[ts..];
    let Some(pos) = tail.rfind(['+', '-']) else {
        return Some((s, 0));
    };
    let zone = &tail[pos..];
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits: String = zone[1..].chars().filter(|c| c.is_ascii_digit()).collect();
    let (h, m) = match digits.len() {
        1 | 2 => (digits.parse::<i32>().ok()?, 0),
        4 => (digits[..2].parse().ok()?, digits[2..].parse().ok()?),
        _ => return None,
    };
    Some((&s[..ts + pos], sign * (h * 3600 + m * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_print_as_postgres_prints_them() {
        // SELECT 3e38::real, 1e-10::real, 123456789::real, ... in PostgreSQL 15.
        for (f, text) in [
            (3e38f32, "3e+38"),
            (1e-10, "1e-10"),
            (123456789.0, "1.2345679e+08"),
            (0.1, "0.1"),
            (1234567.0, "1.234567e+06"),
            (999999.0, "999999"),
            (1e6, "1e+06"),
            (123456.7, "123456.7"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0"),
            (f32::NAN, "NaN"),
            (f32::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(format_float4(f), text);
        }
    }

    #[test]
    fn timestamps_parse_with_zones() {
        let base = parse_timestamp("2024-01-02 03:04:05", false).unwrap();
        assert_eq!(parse_timestamp("2024-01-02T03:04:05", false), Some(base));
        assert_eq!(parse_timestamp("2024-01-02 03:04:05+00", true), Some(base));
        assert_eq!(
            parse_timestamp("2024-01-02 05:04:05+02:00", true),
            Some(base)
        );
        assert_eq!(parse_timestamp("2024-01-02 03:04:05Z", true), Some(base));
        assert_eq!(format_timestamp(base), "2024-01-02 03:04:05");
        assert_eq!(parse_timestamp("2024-13-02 03:04:05", false), None);
        assert_eq!(parse_date("1970-01-02"), Some(1));
        assert_eq!(format_date(-1), "1969-12-31");
    }

    #[test]
    fn years_before_one_are_bc() {
        // Year 0 of the proleptic calendar is 1 BC (PostgreSQL's output).
        let year_one = parse_timestamp("0001-01-01 00:00:00", false).unwrap();
        let day = 86_400_000_000;
        assert_eq!(format_timestamp(year_one - day), "0001-12-31 00:00:00 BC");
        assert_eq!(
            to_text(&Value::TimestampTz(year_one - day + 1)).unwrap(),
            "0001-12-31 00:00:00.000001+00 BC"
        );
        assert_eq!(
            format_date(parse_date("0001-01-01").unwrap() - 367),
            "0002-12-31 BC"
        );
        assert_eq!(format_timestamp(year_one), "0001-01-01 00:00:00");
    }
}
