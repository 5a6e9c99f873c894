//! `interval`: PostgreSQL's span of time, three fields kept apart —
//! months, days and microseconds — since a month is no fixed number of
//! days (nor, across a daylight-saving change, a day a fixed number of
//! hours). Here: its text forms both ways (PostgreSQL's own input with
//! units, `hh:mm:ss`, `ago` and ISO 8601; the output of the default
//! `postgres` IntervalStyle), its comparison key, its arithmetic, and
//! timestamps moved by it.
//!
//! Everything follows PostgreSQL 15 (`interval_in`, `interval_out`,
//! `interval_mul`, `timestamp_pl_interval`, `timestamp_age`, ...), so that
//! results agree with it to the microsecond, including its fractional
//! carries: `'1.5 months'` is `1 mon 15 days`, and `'1 mon' / 7` is
//! `4 days 06:51:25.714286`.

use std::fmt::Write;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike};

use crate::{Value, ValueError, DAY_MICROS};

pub const MONTHS_PER_YEAR: i32 = 12;
/// The days of a month where one must be a number of days: comparisons,
/// `extract(epoch ...)`, `justify_days` and the carry of fractional months.
pub const DAYS_PER_MONTH: i32 = 30;
pub const DAYS_PER_WEEK: i32 = 7;
pub const SECOND_MICROS: i64 = 1_000_000;
const MILLISECOND_MICROS: i64 = 1000;
pub const MINUTE_MICROS: i64 = 60 * SECOND_MICROS;
pub const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;
const SECONDS_PER_DAY: f64 = 86_400.0;
const SECONDS_PER_MINUTE: i64 = 60;
const MINUTES_PER_HOUR: i64 = 60;
const HOURS_PER_DAY: i64 = 24;
const YEARS_PER_DECADE: i32 = 10;
const YEARS_PER_CENTURY: i32 = 100;
const YEARS_PER_MILLENNIUM: i32 = 1000;
/// Most fields one interval's text may have (PostgreSQL's `MAXDATEFIELDS`).
pub const MAX_INTERVAL_FIELDS: usize = 25;
/// Characters of a unit name that count (PostgreSQL's `TOKMAXLEN`), so
/// `microseconds` reads as `microsecon`.
const UNIT_NAME_CHARS: usize = 10;
/// Most digits after the point an interval keeps.
pub const MAX_INTERVAL_PRECISION: u32 = 6;
/// The largest magnitude of an ISO 8601 number PostgreSQL reads.
const MAX_ISO8601_NUMBER: f64 = 1.0e15;
/// Earliest timestamp PostgreSQL holds, 4714-11-24 00:00:00 BC (Julian
/// day 0), in microseconds since 1970. (The latest is past what chrono
/// can represent, which bounds it here.)
pub const MIN_TIMESTAMP_MICROS: i64 = -210_866_803_200_000_000;
/// Days in four years: a year is 365.25 days where it must be a number of
/// days (`extract(epoch ...)`).
const DAYS_PER_FOUR_YEARS: i64 = 1461;
/// That year in microseconds (a whole number: a day's are divisible by 4).
const YEAR_MICROS: i64 = DAY_MICROS / 4 * DAYS_PER_FOUR_YEARS;

/// An interval's three fields, as in [`Value::Interval`]. `==` here
/// compares the fields; SQL's equality (`'1 mon' = '30 days'`) compares
/// [`Interval::span_micros`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

/// The fields of an interval as PostgreSQL splits it for printing and
/// `extract` (`interval2itm`): whole years and the months left, days,
/// then hours, minutes, seconds and microseconds of the time, each with
/// the sign of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntervalParts {
    pub years: i32,
    pub months: i32,
    pub days: i32,
    pub hours: i64,
    pub minutes: i64,
    pub seconds: i64,
    pub micros: i64,
}

/// The fields an `INTERVAL '...' <fields>` literal names (PostgreSQL's
/// interval range): a bare number is read in the last of them, and
/// anything finer than the last is dropped (`INTERVAL '1 day 02:03:04'
/// HOUR TO MINUTE` is `1 day 02:03:00`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalFields {
    All,
    Year,
    Month,
    YearToMonth,
    Day,
    Hour,
    DayToHour,
    Minute,
    DayToMinute,
    HourToMinute,
    Second,
    DayToSecond,
    HourToSecond,
    MinuteToSecond,
}

fn interval_range() -> ValueError {
    ValueError::DatetimeOutOfRange { what: "interval" }
}

fn timestamp_range() -> ValueError {
    ValueError::DatetimeOutOfRange { what: "timestamp" }
}

/// A float that fits an `i32` (PostgreSQL's `FLOAT8_FITS_IN_INT32`), truncated.
fn f64_to_i32(f: f64) -> Result<i32, ValueError> {
    if f.is_nan() || f < i32::MIN as f64 || f >= -(i32::MIN as f64) {
        return Err(interval_range());
    }
    Ok(f as i32)
}

/// A float that fits an `i64` (`FLOAT8_FITS_IN_INT64`), truncated.
fn f64_to_i64(f: f64) -> Result<i64, ValueError> {
    if f.is_nan() || f < i64::MIN as f64 || f >= -(i64::MIN as f64) {
        return Err(interval_range());
    }
    Ok(f as i64)
}

/// Rounds to whole microseconds of a unit (PostgreSQL's `TSROUND`).
fn ts_round(f: f64) -> f64 {
    const PRECISION: f64 = 1_000_000.0;
    (f * PRECISION).round_ties_even() / PRECISION
}

impl Interval {
    pub const ZERO: Interval = Interval {
        months: 0,
        days: 0,
        micros: 0,
    };

    pub fn new(months: i32, days: i32, micros: i64) -> Interval {
        Interval {
            months,
            days,
            micros,
        }
    }

    /// The interval a value holds, if it is one.
    pub fn of(v: &Value) -> Option<Interval> {
        match v {
            Value::Interval {
                months,
                days,
                micros,
            } => Some(Interval::new(*months, *days, *micros)),
            _ => None,
        }
    }

    pub fn to_value(self) -> Value {
        Value::Interval {
            months: self.months,
            days: self.days,
            micros: self.micros,
        }
    }

    /// What PostgreSQL compares, sorts and hashes intervals by: the span
    /// in microseconds with a month as 30 days and a day as 24 hours.
    pub fn span_micros(self) -> i128 {
        let days = self.months as i128 * DAYS_PER_MONTH as i128 + self.days as i128;
        days * DAY_MICROS as i128 + self.micros as i128
    }

    /// `-interval`.
    pub fn checked_neg(self) -> Result<Interval, ValueError> {
        Ok(Interval::new(
            self.months.checked_neg().ok_or_else(interval_range)?,
            self.days.checked_neg().ok_or_else(interval_range)?,
            self.micros.checked_neg().ok_or_else(interval_range)?,
        ))
    }

    /// `interval + interval`, field by field.
    pub fn checked_add(self, other: Interval) -> Result<Interval, ValueError> {
        Ok(Interval::new(
            self.months
                .checked_add(other.months)
                .ok_or_else(interval_range)?,
            self.days
                .checked_add(other.days)
                .ok_or_else(interval_range)?,
            self.micros
                .checked_add(other.micros)
                .ok_or_else(interval_range)?,
        ))
    }

    /// `interval - interval`, field by field.
    pub fn checked_sub(self, other: Interval) -> Result<Interval, ValueError> {
        Ok(Interval::new(
            self.months
                .checked_sub(other.months)
                .ok_or_else(interval_range)?,
            self.days
                .checked_sub(other.days)
                .ok_or_else(interval_range)?,
            self.micros
                .checked_sub(other.micros)
                .ok_or_else(interval_range)?,
        ))
    }

    /// `interval * factor`; 22008 when a field overflows.
    pub fn checked_mul(self, factor: f64) -> Result<Interval, ValueError> {
        self.scaled(|x| x * factor)
    }

    /// `interval / divisor`; the caller refuses a zero divisor.
    pub fn checked_div(self, divisor: f64) -> Result<Interval, ValueError> {
        self.scaled(|x| x / divisor)
    }

    /// Each field scaled by `apply`, the fraction of a month carried down
    /// as 30 days and the fraction of a day as 24 hours (never up), as
    /// PostgreSQL's `interval_mul` and `interval_div` do.
    fn scaled(self, apply: impl Fn(f64) -> f64) -> Result<Interval, ValueError> {
        let month_f = apply(self.months as f64);
        let day_f = apply(self.days as f64);
        let months = f64_to_i32(month_f)?;
        let mut days = f64_to_i32(day_f)?;
        let month_remainder_days = ts_round((month_f - months as f64) * DAYS_PER_MONTH as f64);
        let mut sec_remainder = ts_round(
            (day_f - days as f64 + month_remainder_days - month_remainder_days.trunc())
                * SECONDS_PER_DAY,
        );
        // Rounding may make a whole day of seconds, and the carry more.
        if sec_remainder.abs() >= SECONDS_PER_DAY {
            let whole = (sec_remainder / SECONDS_PER_DAY).trunc();
            days = days.checked_add(whole as i32).ok_or_else(interval_range)?;
            sec_remainder -= whole * SECONDS_PER_DAY;
        }
        days = days
            .checked_add(month_remainder_days.trunc() as i32)
            .ok_or_else(interval_range)?;
        let micros =
            (apply(self.micros as f64) + sec_remainder * SECOND_MICROS as f64).round_ties_even();
        Ok(Interval::new(months, days, f64_to_i64(micros)?))
    }

    /// `justify_hours`: whole days of the time moved to the days, the
    /// two of one sign.
    pub fn justify_hours(self) -> Result<Interval, ValueError> {
        let mut days = self.days;
        let mut micros = self.micros;
        let whole = micros / DAY_MICROS;
        micros -= whole * DAY_MICROS;
        days = i32::try_from(days as i64 + whole).map_err(|_| interval_range())?;
        if days > 0 && micros < 0 {
            micros += DAY_MICROS;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= DAY_MICROS;
            days += 1;
        }
        Ok(Interval::new(self.months, days, micros))
    }

    /// `justify_days`: whole 30-day months moved to the months, the two
    /// of one sign.
    pub fn justify_days(self) -> Result<Interval, ValueError> {
        let whole = self.days / DAYS_PER_MONTH;
        let mut days = self.days - whole * DAYS_PER_MONTH;
        let mut months = self.months.checked_add(whole).ok_or_else(interval_range)?;
        if months > 0 && days < 0 {
            days += DAYS_PER_MONTH;
            months -= 1;
        } else if months < 0 && days > 0 {
            days -= DAYS_PER_MONTH;
            months += 1;
        }
        Ok(Interval::new(months, days, self.micros))
    }

    /// `justify_interval`: both justifications, all three fields of one sign.
    pub fn justify_interval(self) -> Result<Interval, ValueError> {
        let Interval {
            mut months,
            mut days,
            mut micros,
        } = self;
        // Moving whole months first keeps the days from overflowing.
        if (days > 0 && micros > 0) || (days < 0 && micros < 0) {
            let whole = days / DAYS_PER_MONTH;
            days -= whole * DAYS_PER_MONTH;
            months = months.checked_add(whole).ok_or_else(interval_range)?;
        }
        let whole_days = micros / DAY_MICROS;
        micros -= whole_days * DAY_MICROS;
        days = i32::try_from(days as i64 + whole_days).map_err(|_| interval_range())?;
        let whole = days / DAYS_PER_MONTH;
        days -= whole * DAYS_PER_MONTH;
        months = months.checked_add(whole).ok_or_else(interval_range)?;
        if months > 0 && (days < 0 || (days == 0 && micros < 0)) {
            days += DAYS_PER_MONTH;
            months -= 1;
        } else if months < 0 && (days > 0 || (days == 0 && micros > 0)) {
            days -= DAYS_PER_MONTH;
            months += 1;
        }
        if days > 0 && micros < 0 {
            micros += DAY_MICROS;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= DAY_MICROS;
            days += 1;
        }
        Ok(Interval::new(months, days, micros))
    }

    /// The fields PostgreSQL prints and `extract` reads.
    pub fn parts(self) -> IntervalParts {
        let mut time = self.micros;
        let hours = time / HOUR_MICROS;
        time -= hours * HOUR_MICROS;
        let minutes = time / MINUTE_MICROS;
        time -= minutes * MINUTE_MICROS;
        let seconds = time / SECOND_MICROS;
        IntervalParts {
            years: self.months / MONTHS_PER_YEAR,
            months: self.months % MONTHS_PER_YEAR,
            days: self.days,
            hours,
            minutes,
            seconds,
            micros: time - seconds * SECOND_MICROS,
        }
    }

    /// `extract(epoch from interval)` in microseconds: a year as 365.25
    /// days, a month as 30.
    pub fn epoch_micros(self) -> i128 {
        let years = (self.months / MONTHS_PER_YEAR) as i128;
        let months = (self.months % MONTHS_PER_YEAR) as i128;
        let days = months * DAYS_PER_MONTH as i128 + self.days as i128;
        years * YEAR_MICROS as i128 + days * DAY_MICROS as i128 + self.micros as i128
    }

    /// `date_part('epoch', interval)`: the same in seconds, computed in
    /// floating point in PostgreSQL's order (so it rounds as it does).
    pub fn epoch_seconds(self) -> f64 {
        let mut f = self.micros as f64 / SECOND_MICROS as f64;
        f += (YEAR_MICROS / SECOND_MICROS) as f64 * (self.months / MONTHS_PER_YEAR) as f64;
        f += (DAYS_PER_MONTH as f64 * SECONDS_PER_DAY) * (self.months % MONTHS_PER_YEAR) as f64;
        f += SECONDS_PER_DAY * self.days as f64;
        f
    }

    /// `make_interval(years, months, weeks, days, hours, mins, secs)`.
    pub fn make(
        [years, months, weeks, days, hours, mins]: [i32; 6],
        secs: f64,
    ) -> Result<Interval, ValueError> {
        if !secs.is_finite() {
            return Err(interval_range());
        }
        let total_months = years
            .checked_mul(MONTHS_PER_YEAR)
            .and_then(|m| m.checked_add(months))
            .ok_or_else(interval_range)?;
        let total_days = weeks
            .checked_mul(DAYS_PER_WEEK)
            .and_then(|d| d.checked_add(days))
            .ok_or_else(interval_range)?;
        let sec_micros = f64_to_i64((secs * SECOND_MICROS as f64).round_ties_even())?;
        let micros = (hours as i64 * HOUR_MICROS)
            .checked_add(mins as i64 * MINUTE_MICROS)
            .and_then(|m| m.checked_add(sec_micros))
            .ok_or_else(interval_range)?;
        Ok(Interval::new(total_months, total_days, micros))
    }

    /// Drops what is finer than `fields` allow and rounds the seconds to
    /// `precision` digits (PostgreSQL's `AdjustIntervalForTypmod`).
    fn restrict(mut self, fields: IntervalFields, precision: Option<u32>) -> Interval {
        use IntervalFields as F;
        let truncate = |micros: i64, unit: i64| (micros / unit) * unit;
        match fields {
            F::All | F::Second | F::DayToSecond | F::HourToSecond | F::MinuteToSecond => {}
            F::Year => {
                self.months = (self.months / MONTHS_PER_YEAR) * MONTHS_PER_YEAR;
                self.days = 0;
                self.micros = 0;
            }
            F::Month | F::YearToMonth => {
                self.days = 0;
                self.micros = 0;
            }
            F::Day => self.micros = 0,
            F::Hour | F::DayToHour => self.micros = truncate(self.micros, HOUR_MICROS),
            F::Minute | F::DayToMinute | F::HourToMinute => {
                self.micros = truncate(self.micros, MINUTE_MICROS)
            }
        }
        if let Some(p) = precision.filter(|&p| p < MAX_INTERVAL_PRECISION) {
            let scale = 10i64.pow(MAX_INTERVAL_PRECISION - p);
            // Half away from zero, on the magnitude.
            let rounded = |m: i64| m.saturating_add(scale / 2) / scale * scale;
            let m = self.micros;
            self.micros = if m >= 0 {
                rounded(m)
            } else {
                -rounded(m.saturating_neg())
            };
        }
        self
    }
}

/// Why `extract` cannot take a unit from a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitError {
    /// A unit of dates and times that this type has not (`dow` of an
    /// interval): SQLSTATE 0A000.
    Unsupported,
    /// No unit at all: SQLSTATE 22023.
    Unrecognized,
}

/// Units of PostgreSQL's date-token table that no interval has.
const DATE_ONLY_UNITS: [&str; 7] = ["dow", "doy", "isodow", "isoyear", "j", "jd", "julian"];
/// Decimal places of `extract`'s seconds and epoch, and of its milliseconds.
const SECONDS_SCALE: u32 = 6;
const MILLISECONDS_SCALE: u32 = 3;
const MONTHS_PER_QUARTER: i32 = 3;

/// `extract(unit from interval)` (a `numeric`) or, when `numeric` is
/// false, `date_part('unit', interval)` (a `double precision`), as
/// PostgreSQL's `interval_part_common` computes them.
pub fn interval_part(iv: Interval, unit: &str, numeric: bool) -> Result<Value, UnitError> {
    let unit = unit.to_ascii_lowercase();
    let p = iv.parts();
    let second_micros = p.seconds * SECOND_MICROS + p.micros;
    let scaled = |m: i128, scale: u32, f: f64| {
        if numeric {
            Value::Numeric(rust_decimal::Decimal::from_i128_with_scale(m, scale))
        } else {
            Value::Float(f)
        }
    };
    let whole = match unit_word(&unit) {
        Some(UnitWord::Unit(u)) => match u {
            Unit::Microsecond => {
                let f = p.seconds as f64 * SECOND_MICROS as f64 + p.micros as f64;
                return Ok(scaled(second_micros as i128, 0, f));
            }
            Unit::Millisecond => {
                let f = p.seconds as f64 * MILLISECOND_MICROS as f64
                    + p.micros as f64 / MILLISECOND_MICROS as f64;
                return Ok(scaled(second_micros as i128, MILLISECONDS_SCALE, f));
            }
            Unit::Second => {
                let f = p.seconds as f64 + p.micros as f64 / SECOND_MICROS as f64;
                return Ok(scaled(second_micros as i128, SECONDS_SCALE, f));
            }
            Unit::Minute => p.minutes,
            Unit::Hour => p.hours,
            Unit::Day => p.days as i64,
            Unit::Month => p.months as i64,
            Unit::Quarter => (p.months / MONTHS_PER_QUARTER + 1) as i64,
            Unit::Year => p.years as i64,
            Unit::Decade => (p.years / YEARS_PER_DECADE) as i64,
            Unit::Century => (p.years / YEARS_PER_CENTURY) as i64,
            Unit::Millennium => (p.years / YEARS_PER_MILLENNIUM) as i64,
            Unit::Week | Unit::Timezone => return Err(UnitError::Unsupported),
        },
        Some(UnitWord::Ago) => return Err(UnitError::Unrecognized),
        None if unit == "epoch" => {
            return Ok(scaled(iv.epoch_micros(), SECONDS_SCALE, iv.epoch_seconds()));
        }
        None if DATE_ONLY_UNITS.contains(&unit.as_str()) => return Err(UnitError::Unsupported),
        None => return Err(UnitError::Unrecognized),
    };
    Ok(scaled(whole as i128, 0, whole as f64))
}

// ---- output ----

/// The `postgres` IntervalStyle: `1 year 2 mons 3 days 04:05:06.789`,
/// `-1 days +01:00:00`, `00:00:00` (what psql shows by default).
pub fn format_interval(iv: Interval) -> String {
    let p = iv.parts();
    let mut out = String::new();
    let mut is_zero = true;
    // A field after a negative one shows its sign even when positive.
    let mut is_before = false;
    for (value, unit) in [
        (p.years as i64, "year"),
        (p.months as i64, "mon"),
        (p.days as i64, "day"),
    ] {
        if value == 0 {
            continue;
        }
        if !is_zero {
            out.push(' ');
        }
        if is_before && value > 0 {
            out.push('+');
        }
        let plural = if value == 1 { "" } else { "s" };
        let _ = write!(out, "{value} {unit}{plural}");
        is_before = value < 0;
        is_zero = false;
    }
    if is_zero || iv.micros != 0 {
        if !is_zero {
            out.push(' ');
        }
        if iv.micros < 0 {
            out.push('-');
        } else if is_before {
            out.push('+');
        }
        let _ = write!(
            out,
            "{:02}:{:02}:{:02}",
            p.hours.unsigned_abs(),
            p.minutes.unsigned_abs(),
            p.seconds.unsigned_abs()
        );
        if p.micros != 0 {
            let digits = format!("{:06}", p.micros.unsigned_abs());
            out.push('.');
            out.push_str(digits.trim_end_matches('0'));
        }
    }
    out
}

// ---- input ----

/// Why text is not an interval: bad syntax (22007) or a field too large
/// (22015).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fail {
    Syntax,
    Field,
}

/// Reads PostgreSQL's text form of an interval.
pub fn parse_interval(s: &str) -> Result<Interval, ValueError> {
    parse_interval_fields(s, IntervalFields::All, None)
}

/// Reads an interval literal with a fields qualifier and a seconds
/// precision (`INTERVAL '90' MINUTE`, `INTERVAL '1.25' SECOND(1)`).
pub fn parse_interval_fields(
    s: &str,
    fields: IntervalFields,
    precision: Option<u32>,
) -> Result<Interval, ValueError> {
    let decoded = match tokenize(s).and_then(|tokens| decode(&tokens, fields)) {
        // What is no interval of PostgreSQL's own form may be ISO 8601.
        Err(Fail::Syntax) => decode_iso8601(s),
        other => other,
    };
    let input = || s.chars().take(100).collect::<String>();
    let parts = decoded.map_err(|f| match f {
        Fail::Syntax => ValueError::Syntax {
            ty: "interval".into(),
            input: input(),
        },
        Fail::Field => ValueError::IntervalField { input: input() },
    })?;
    let months = parts.years as i64 * MONTHS_PER_YEAR as i64 + parts.months as i64;
    let months = i32::try_from(months).map_err(|_| interval_range())?;
    Ok(Interval::new(months, parts.days, parts.micros).restrict(fields, precision))
}

/// The fields read so far (PostgreSQL's `pg_itm_in`); years and months
/// apart until the end, so each overflows on its own.
#[derive(Clone, Copy, Debug, Default)]
struct Parts {
    years: i32,
    months: i32,
    days: i32,
    micros: i64,
}

fn field<T>(v: Option<T>) -> Result<T, Fail> {
    v.ok_or(Fail::Field)
}

impl Parts {
    fn add_micros(&mut self, val: i64, scale: i64) -> Result<(), Fail> {
        self.micros = field(
            val.checked_mul(scale)
                .and_then(|p| self.micros.checked_add(p)),
        )?;
        Ok(())
    }

    /// A fraction of `scale` microseconds, rounded to whole microseconds.
    fn add_fract_micros(&mut self, frac: f64, scale: i64) -> Result<(), Fail> {
        if frac == 0.0 {
            return Ok(());
        }
        let f = frac * scale as f64;
        let whole = f as i64;
        let micros = whole.saturating_add((f - whole as f64).round_ties_even() as i64);
        self.micros = field(self.micros.checked_add(micros))?;
        Ok(())
    }

    /// `val` and its fraction `frac` of `scale` microseconds.
    fn add_time(&mut self, val: i64, frac: f64, scale: i64) -> Result<(), Fail> {
        self.add_micros(val, scale)?;
        self.add_fract_micros(frac, scale)
    }

    fn add_days(&mut self, val: i64, scale: i32) -> Result<(), Fail> {
        let val = field(i32::try_from(val).ok())?;
        self.days = field(
            val.checked_mul(scale)
                .and_then(|d| self.days.checked_add(d)),
        )?;
        Ok(())
    }

    /// A fraction of `scale` days: whole days, the rest as microseconds.
    fn add_fract_days(&mut self, frac: f64, scale: i32) -> Result<(), Fail> {
        if frac == 0.0 {
            return Ok(());
        }
        let f = frac * scale as f64;
        let whole = f as i32;
        self.days = field(self.days.checked_add(whole))?;
        self.add_fract_micros(f - whole as f64, DAY_MICROS)
    }

    fn add_months(&mut self, val: i64) -> Result<(), Fail> {
        let val = field(i32::try_from(val).ok())?;
        self.months = field(self.months.checked_add(val))?;
        Ok(())
    }

    fn add_years(&mut self, val: i64, scale: i32) -> Result<(), Fail> {
        let val = field(i32::try_from(val).ok())?;
        self.years = field(
            val.checked_mul(scale)
                .and_then(|y| self.years.checked_add(y)),
        )?;
        Ok(())
    }

    /// A fraction of `scale` years, as whole months (rounded).
    fn add_fract_years(&mut self, frac: f64, scale: i32) -> Result<(), Fail> {
        let months = (frac * scale as f64 * MONTHS_PER_YEAR as f64).round_ties_even() as i32;
        self.months = field(self.months.checked_add(months))?;
        Ok(())
    }
}

/// How a piece of interval text reads (PostgreSQL's `ParseDateTime`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `12`, `1.5`, `.5`
    Number,
    /// `12:30`, `1:02:03.5`
    Time,
    /// Date-like: `1-2` (years-months), `1.5.3`, `day2`: read as a number.
    Date,
    /// A sign and digits: `-1`, `+1:30`, `-1.5`.
    Signed,
    /// Letters: a unit or `ago`.
    Word,
    /// A sign and letters: never valid in an interval.
    SignedWord,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    text: String,
}

/// Unit names that are also words of PostgreSQL's date-token table: these
/// end a word followed by digits or `+` (`1 h2` is an hour and 2 seconds),
/// while other words run on into a date-like token (`1 day2` is wrong).
const DATE_TABLE_UNITS: [&str; 6] = ["d", "dec", "h", "m", "mon", "y"];

/// C's `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// Splits interval text into tokens as PostgreSQL's `ParseDateTime` does:
/// white space and other punctuation (`@`, `,`) separate them, letters
/// are lower-cased.
fn tokenize(s: &str) -> Result<Vec<Token>, Fail> {
    let b = s.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let alpha = |i: usize| b.get(i).is_some_and(u8::is_ascii_alphabetic);
    while i < b.len() {
        let c = b[i];
        if is_space(c) {
            i += 1;
            continue;
        }
        if tokens.len() >= MAX_INTERVAL_FIELDS {
            return Err(Fail::Syntax);
        }
        let mut text = String::new();
        let mut take = |i: &mut usize| {
            text.push(b[*i].to_ascii_lowercase() as char);
            *i += 1;
        };
        let kind = if c.is_ascii_digit() {
            while digit(i) {
                take(&mut i);
            }
            match b.get(i) {
                Some(b':') => {
                    take(&mut i);
                    while digit(i) || matches!(b.get(i), Some(b':' | b'.')) {
                        take(&mut i);
                    }
                    Kind::Time
                }
                Some(&delim @ (b'-' | b'/' | b'.')) => {
                    take(&mut i);
                    if digit(i) {
                        let mut kind = if delim == b'.' {
                            Kind::Number
                        } else {
                            Kind::Date
                        };
                        while digit(i) {
                            take(&mut i);
                        }
                        if b.get(i) == Some(&delim) {
                            kind = Kind::Date;
                            take(&mut i);
                            while digit(i) || b.get(i) == Some(&delim) {
                                take(&mut i);
                            }
                        }
                        kind
                    } else {
                        while b
                            .get(i)
                            .is_some_and(|&x| x.is_ascii_alphanumeric() || x == delim)
                        {
                            take(&mut i);
                        }
                        Kind::Date
                    }
                }
                _ => Kind::Number,
            }
        } else if c == b'.' {
            take(&mut i);
            while digit(i) {
                take(&mut i);
            }
            Kind::Number
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while alpha(i) {
                take(&mut i);
            }
            let word = &s[start..i];
            let date_like = match b.get(i) {
                Some(b'-' | b'/' | b'.') => true,
                Some(&x) if x == b'+' || x.is_ascii_digit() => {
                    !DATE_TABLE_UNITS.contains(&word.to_ascii_lowercase().as_str())
                }
                _ => false,
            };
            if date_like {
                take(&mut i);
                while b.get(i).is_some_and(|&x| {
                    x.is_ascii_alphanumeric()
                        || matches!(x, b'+' | b'-' | b'/' | b'_' | b'.' | b':')
                }) {
                    take(&mut i);
                }
                Kind::Date
            } else {
                Kind::Word
            }
        } else if c == b'+' || c == b'-' {
            take(&mut i);
            while b.get(i).is_some_and(|&x| is_space(x)) {
                i += 1;
            }
            if digit(i) {
                while digit(i) || matches!(b.get(i), Some(b':' | b'.' | b'-')) {
                    take(&mut i);
                }
                Kind::Signed
            } else if alpha(i) {
                while alpha(i) {
                    take(&mut i);
                }
                Kind::SignedWord
            } else {
                return Err(Fail::Syntax);
            }
        } else if c.is_ascii_punctuation() {
            i += 1;
            continue;
        } else {
            return Err(Fail::Syntax);
        };
        tokens.push(Token { kind, text });
    }
    Ok(tokens)
}

/// A unit of interval text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
    Decade,
    Century,
    Millennium,
    /// `timezone`: a unit of `extract`, not of an interval.
    Timezone,
}

/// A word of interval text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnitWord {
    Unit(Unit),
    Ago,
}

/// The unit (or `ago`) a word names, PostgreSQL's spellings, compared on
/// their first ten characters.
pub(crate) fn unit_word(word: &str) -> Option<UnitWord> {
    use Unit as U;
    let key: String = word
        .chars()
        .take(UNIT_NAME_CHARS)
        .collect::<String>()
        .to_ascii_lowercase();
    let unit = match key.as_str() {
        "ago" => return Some(UnitWord::Ago),
        "us" | "usec" | "usecs" | "usecond" | "useconds" | "microsecon" => U::Microsecond,
        "ms" | "msec" | "msecs" | "msecond" | "mseconds" | "millisecon" => U::Millisecond,
        "s" | "sec" | "secs" | "second" | "seconds" => U::Second,
        "m" | "min" | "mins" | "minute" | "minutes" => U::Minute,
        "h" | "hr" | "hrs" | "hour" | "hours" => U::Hour,
        "d" | "day" | "days" => U::Day,
        "w" | "week" | "weeks" => U::Week,
        "mon" | "mons" | "month" | "months" => U::Month,
        "qtr" | "quarter" => U::Quarter,
        "y" | "yr" | "yrs" | "year" | "years" => U::Year,
        "dec" | "decs" | "decade" | "decades" => U::Decade,
        "c" | "cent" | "century" | "centuries" => U::Century,
        "mil" | "mils" | "millennium" | "millennia" => U::Millennium,
        "timezone" | "timezone_h" | "timezone_m" => U::Timezone,
        _ => return None,
    };
    Some(UnitWord::Unit(unit))
}

/// Which fields a token set, to refuse one given twice (`1 day 2 days`).
mod seen {
    pub const MICROSECOND: u32 = 1 << 0;
    pub const MILLISECOND: u32 = 1 << 1;
    pub const SECOND: u32 = 1 << 2;
    pub const MINUTE: u32 = 1 << 3;
    pub const HOUR: u32 = 1 << 4;
    pub const DAY: u32 = 1 << 5;
    pub const WEEK: u32 = 1 << 6;
    pub const MONTH: u32 = 1 << 7;
    pub const YEAR: u32 = 1 << 8;
    pub const DECADE: u32 = 1 << 9;
    pub const CENTURY: u32 = 1 << 10;
    pub const MILLENNIUM: u32 = 1 << 11;
    pub const ALL_SECONDS: u32 = SECOND | MILLISECOND | MICROSECOND;
    pub const TIME: u32 = HOUR | MINUTE | ALL_SECONDS;
}

/// The unit a number takes from the words after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// None yet: the last field of the qualifier (seconds without one).
    Default,
    Unit(Unit),
    /// Right after `ago`: a number there has no unit.
    NoUnit,
}

/// The unit of a bare number under `fields`.
fn default_unit(fields: IntervalFields) -> Unit {
    use IntervalFields as F;
    match fields {
        F::Year => Unit::Year,
        F::Month | F::YearToMonth => Unit::Month,
        F::Day => Unit::Day,
        F::Hour | F::DayToHour => Unit::Hour,
        F::Minute | F::DayToMinute | F::HourToMinute => Unit::Minute,
        _ => Unit::Second,
    }
}

/// Reads PostgreSQL's form from its tokens, right to left so that each
/// number finds the unit after it (`DecodeInterval`).
fn decode(tokens: &[Token], fields: IntervalFields) -> Result<Parts, Fail> {
    let mut parts = Parts::default();
    let mut pending = Pending::Default;
    let mut set = 0u32;
    let mut ago = false;
    for token in tokens.iter().rev() {
        let mask = match token.kind {
            Kind::Time => {
                parts.micros = time_micros(&token.text, fields)?;
                pending = Pending::Unit(Unit::Day);
                seen::TIME
            }
            Kind::Signed
                if token.text[1..].contains(':')
                    && time_micros(&token.text[1..], fields).is_ok() =>
            {
                let t = time_micros(&token.text[1..], fields)?;
                parts.micros = if token.text.starts_with('-') { -t } else { t };
                pending = Pending::Unit(Unit::Day);
                seen::TIME
            }
            Kind::Signed | Kind::Number | Kind::Date => {
                number(&token.text, &mut pending, fields, &mut parts)?
            }
            Kind::Word => {
                match unit_word(&token.text).ok_or(Fail::Syntax)? {
                    UnitWord::Unit(u) => pending = Pending::Unit(u),
                    UnitWord::Ago => {
                        ago = true;
                        pending = Pending::NoUnit;
                    }
                }
                0
            }
            Kind::SignedWord => return Err(Fail::Syntax),
        };
        if set & mask != 0 {
            return Err(Fail::Syntax);
        }
        set |= mask;
    }
    if set == 0 {
        return Err(Fail::Syntax);
    }
    if ago {
        parts = Parts {
            years: field(parts.years.checked_neg())?,
            months: field(parts.months.checked_neg())?,
            days: field(parts.days.checked_neg())?,
            micros: field(parts.micros.checked_neg())?,
        };
    }
    Ok(parts)
}

/// C's `strtol` in base 10: leading space, a sign, digits; the value and
/// the text after it, or zero and all of it when there are no digits.
fn leading_integer(text: &str) -> Result<(i64, &str), Fail> {
    let b = text.as_bytes();
    let mut i = 0;
    while b.get(i).is_some_and(|&x| is_space(x)) {
        i += 1;
    }
    let negative = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let start = i;
    // Accumulated negatively, so that the most negative value fits.
    let mut v: i64 = 0;
    while let Some(d) = b.get(i).filter(|x| x.is_ascii_digit()) {
        v = field(
            v.checked_mul(10)
                .and_then(|v| v.checked_sub(i64::from(d - b'0'))),
        )?;
        i += 1;
    }
    if i == start {
        return Ok((0, text));
    }
    let v = if negative { v } else { field(v.checked_neg())? };
    Ok((v, &text[i..]))
}

/// [`leading_integer`] within `i32` (C's `strtoint`).
fn leading_int32(text: &str) -> Result<(i64, &str), Fail> {
    let (v, rest) = leading_integer(text)?;
    field(i32::try_from(v).ok())?;
    Ok((v, rest))
}

/// A fraction: `.` and digits (none is zero).
fn fraction(text: &str) -> Result<f64, Fail> {
    let digits = text.strip_prefix('.').ok_or(Fail::Syntax)?;
    if digits.is_empty() {
        return Ok(0.0);
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Fail::Syntax);
    }
    format!("0.{digits}").parse().map_err(|_| Fail::Syntax)
}

/// `hh:mm[:ss[.f]]` or `mm:ss.f` as microseconds (`DecodeTime`).
fn time_micros(text: &str, fields: IntervalFields) -> Result<i64, Fail> {
    const MAX_SECONDS: i64 = 60; // a leap second reads
    let (mut hour, rest) = leading_integer(text)?;
    let rest = rest.strip_prefix(':').ok_or(Fail::Syntax)?;
    let (mut minute, rest) = leading_int32(rest)?;
    let mut second = 0;
    let mut fsec = 0;
    let minutes_seconds = |hour: &mut i64, minute: &mut i64, second: &mut i64| {
        field(i32::try_from(*hour).ok())?;
        *second = *minute;
        *minute = *hour;
        *hour = 0;
        Ok::<(), Fail>(())
    };
    if rest.is_empty() {
        if fields == IntervalFields::MinuteToSecond {
            minutes_seconds(&mut hour, &mut minute, &mut second)?;
        }
    } else if rest.starts_with('.') {
        // `mm:ss.f` is always minutes and seconds.
        fsec = (fraction(rest)? * SECOND_MICROS as f64).round_ties_even() as i64;
        minutes_seconds(&mut hour, &mut minute, &mut second)?;
    } else if let Some(rest) = rest.strip_prefix(':') {
        let (s, rest) = leading_int32(rest)?;
        second = s;
        if rest.starts_with('.') {
            fsec = (fraction(rest)? * SECOND_MICROS as f64).round_ties_even() as i64;
        } else if !rest.is_empty() {
            return Err(Fail::Syntax);
        }
    } else {
        return Err(Fail::Syntax);
    }
    if hour < 0
        || !(0..MINUTES_PER_HOUR).contains(&minute)
        || !(0..=MAX_SECONDS).contains(&second)
        || !(0..=SECOND_MICROS).contains(&fsec)
    {
        return Err(Fail::Field);
    }
    let mut parts = Parts {
        micros: fsec,
        ..Parts::default()
    };
    parts.add_micros(hour, HOUR_MICROS)?;
    parts.add_micros(minute, MINUTE_MICROS)?;
    parts.add_micros(second, SECOND_MICROS)?;
    Ok(parts.micros)
}

/// A number token in the unit `pending` says; returns the field it set.
fn number(
    text: &str,
    pending: &mut Pending,
    fields: IntervalFields,
    parts: &mut Parts,
) -> Result<u32, Fail> {
    let mut unit = match *pending {
        Pending::Default => default_unit(fields),
        Pending::Unit(u) => u,
        Pending::NoUnit => return Err(Fail::Syntax),
    };
    *pending = Pending::Unit(unit);
    let negative = text.starts_with('-');
    let (mut val, rest) = leading_integer(text)?;
    let mut frac = 0.0;
    if let Some(months) = rest.strip_prefix('-') {
        // SQL's `years-months`.
        let (m, after) = leading_int32(months)?;
        if !(0..MONTHS_PER_YEAR as i64).contains(&m) {
            return Err(Fail::Field);
        }
        if !after.is_empty() {
            return Err(Fail::Syntax);
        }
        let m = if negative { -m } else { m };
        val = field(
            val.checked_mul(MONTHS_PER_YEAR as i64)
                .and_then(|v| v.checked_add(m)),
        )?;
        unit = Unit::Month;
        *pending = Pending::Unit(unit);
    } else if rest.starts_with('.') {
        frac = fraction(rest)?;
        if negative {
            frac = -frac;
        }
    } else if !rest.is_empty() {
        return Err(Fail::Syntax);
    }
    Ok(match unit {
        Unit::Microsecond => {
            parts.add_time(val, frac, 1)?;
            seen::MICROSECOND
        }
        Unit::Millisecond => {
            parts.add_time(val, frac, MILLISECOND_MICROS)?;
            seen::MILLISECOND
        }
        Unit::Second => {
            parts.add_time(val, frac, SECOND_MICROS)?;
            if frac == 0.0 {
                seen::SECOND
            } else {
                seen::ALL_SECONDS
            }
        }
        Unit::Minute => {
            parts.add_time(val, frac, MINUTE_MICROS)?;
            seen::MINUTE
        }
        Unit::Hour => {
            parts.add_time(val, frac, HOUR_MICROS)?;
            // A number before hours is days: `1 2 hours`.
            *pending = Pending::Unit(Unit::Day);
            seen::HOUR
        }
        Unit::Day => {
            parts.add_days(val, 1)?;
            parts.add_fract_micros(frac, DAY_MICROS)?;
            seen::DAY
        }
        Unit::Week => {
            parts.add_days(val, DAYS_PER_WEEK)?;
            parts.add_fract_days(frac, DAYS_PER_WEEK)?;
            seen::WEEK
        }
        Unit::Month => {
            parts.add_months(val)?;
            parts.add_fract_days(frac, DAYS_PER_MONTH)?;
            seen::MONTH
        }
        Unit::Year | Unit::Decade | Unit::Century | Unit::Millennium => {
            let (scale, mask) = match unit {
                Unit::Year => (1, seen::YEAR),
                Unit::Decade => (YEARS_PER_DECADE, seen::DECADE),
                Unit::Century => (YEARS_PER_CENTURY, seen::CENTURY),
                _ => (YEARS_PER_MILLENNIUM, seen::MILLENNIUM),
            };
            parts.add_years(val, scale)?;
            parts.add_fract_years(frac, scale)?;
            mask
        }
        Unit::Quarter | Unit::Timezone => return Err(Fail::Syntax),
    })
}

/// A number of ISO 8601 text at `i` (C's `strtod`): its whole part, its
/// fraction with the same sign, and where it ends.
fn iso8601_number(s: &str, i: usize) -> Result<(i64, f64, usize), Fail> {
    let b = s.as_bytes();
    let starts = b
        .get(i)
        .is_some_and(|&x| x.is_ascii_digit() || matches!(x, b'-' | b'+' | b'.'));
    if !starts {
        return Err(Fail::Syntax);
    }
    let mut j = i;
    if matches!(b[j], b'-' | b'+') {
        j += 1;
    }
    let digits_from = j;
    while b.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    let mut digits = j - digits_from;
    if b.get(j) == Some(&b'.') {
        j += 1;
        let from = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        digits += j - from;
    }
    if digits == 0 {
        return Err(Fail::Syntax);
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(b.get(k), Some(b'-' | b'+')) {
            k += 1;
        }
        if b.get(k).is_some_and(u8::is_ascii_digit) {
            while b.get(k).is_some_and(u8::is_ascii_digit) {
                k += 1;
            }
            j = k;
        }
    }
    let text = &s[i..j];
    let val: f64 = text.parse().map_err(|_| Fail::Syntax)?;
    // strtod's range error: overflow, or underflow of a nonzero number.
    let nonzero = text
        .split(['e', 'E'])
        .next()
        .is_some_and(|m| m.bytes().any(|d| (b'1'..=b'9').contains(&d)));
    if val.is_infinite() || (val == 0.0 && nonzero) {
        return Err(Fail::Syntax);
    }
    if !(-MAX_ISO8601_NUMBER..=MAX_ISO8601_NUMBER).contains(&val) {
        return Err(Fail::Field);
    }
    let whole = val.trunc() as i64;
    Ok((whole, val - whole as f64, j))
}

/// Digits at `start`, after one `-` (ISO 8601's basic format is told by them).
fn integer_width(s: &str, start: usize) -> usize {
    let rest = &s[start..];
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    rest.bytes().take_while(u8::is_ascii_digit).count()
}

/// Reads ISO 8601 durations: `P1Y2M3DT4H5M6S` (any numbers may have
/// fractions, units may repeat), and the alternative formats
/// `P0001-02-03T04:05:06` and `P00010203T040506` (`DecodeISO8601Interval`).
fn decode_iso8601(s: &str) -> Result<Parts, Fail> {
    /// Digits of the basic format's date (`YYYYMMDD`) and time (`hhmmss`).
    const BASIC_DATE_DIGITS: usize = 8;
    const BASIC_TIME_DIGITS: usize = 6;
    const HUNDRED: i64 = 100;
    const TEN_THOUSAND: i64 = HUNDRED * HUNDRED;
    let b = s.as_bytes();
    if b.len() < 2 || b[0] != b'P' {
        return Err(Fail::Syntax);
    }
    let mut parts = Parts::default();
    let mut i = 1;
    let mut date_part = true;
    let mut have_field = false;
    while i < b.len() {
        if b[i] == b'T' {
            date_part = false;
            have_field = false;
            i += 1;
            continue;
        }
        let field_start = i;
        let (val, frac, next) = iso8601_number(s, i)?;
        i = next;
        let unit = b.get(i).copied();
        if unit.is_some() {
            i += 1;
        }
        if date_part {
            match unit {
                Some(b'Y') => {
                    parts.add_years(val, 1)?;
                    parts.add_fract_years(frac, 1)?;
                }
                Some(b'M') => {
                    parts.add_months(val)?;
                    parts.add_fract_days(frac, DAYS_PER_MONTH)?;
                }
                Some(b'W') => {
                    parts.add_days(val, DAYS_PER_WEEK)?;
                    parts.add_fract_days(frac, DAYS_PER_WEEK)?;
                }
                Some(b'D') => {
                    parts.add_days(val, 1)?;
                    parts.add_fract_micros(frac, DAY_MICROS)?;
                }
                Some(b'T') | None
                    if integer_width(s, field_start) == BASIC_DATE_DIGITS && !have_field =>
                {
                    parts.add_years(val / TEN_THOUSAND, 1)?;
                    parts.add_months((val / HUNDRED) % HUNDRED)?;
                    parts.add_days(val % HUNDRED, 1)?;
                    parts.add_fract_micros(frac, DAY_MICROS)?;
                    if unit.is_none() {
                        return Ok(parts);
                    }
                    date_part = false;
                    have_field = false;
                    continue;
                }
                Some(b'T' | b'-') | None => {
                    if have_field {
                        return Err(Fail::Syntax);
                    }
                    parts.add_years(val, 1)?;
                    parts.add_fract_years(frac, 1)?;
                    match unit {
                        None => return Ok(parts),
                        Some(b'T') => {
                            date_part = false;
                            have_field = false;
                            continue;
                        }
                        _ => {}
                    }
                    let (val, frac, next) = iso8601_number(s, i)?;
                    i = next;
                    parts.add_months(val)?;
                    parts.add_fract_days(frac, DAYS_PER_MONTH)?;
                    match b.get(i) {
                        None => return Ok(parts),
                        Some(b'T') => {
                            i += 1;
                            date_part = false;
                            have_field = false;
                            continue;
                        }
                        Some(b'-') => i += 1,
                        _ => return Err(Fail::Syntax),
                    }
                    let (val, frac, next) = iso8601_number(s, i)?;
                    i = next;
                    parts.add_days(val, 1)?;
                    parts.add_fract_micros(frac, DAY_MICROS)?;
                    match b.get(i) {
                        None => return Ok(parts),
                        Some(b'T') => {
                            i += 1;
                            date_part = false;
                            have_field = false;
                            continue;
                        }
                        _ => return Err(Fail::Syntax),
                    }
                }
                _ => return Err(Fail::Syntax),
            }
        } else {
            match unit {
                Some(b'H') => parts.add_time(val, frac, HOUR_MICROS)?,
                Some(b'M') => parts.add_time(val, frac, MINUTE_MICROS)?,
                Some(b'S') => parts.add_time(val, frac, SECOND_MICROS)?,
                None if integer_width(s, field_start) == BASIC_TIME_DIGITS && !have_field => {
                    parts.add_micros(val / TEN_THOUSAND, HOUR_MICROS)?;
                    parts.add_micros((val / HUNDRED) % HUNDRED, MINUTE_MICROS)?;
                    parts.add_micros(val % HUNDRED, SECOND_MICROS)?;
                    parts.add_fract_micros(frac, 1)?;
                    return Ok(parts);
                }
                None | Some(b':') => {
                    if have_field {
                        return Err(Fail::Syntax);
                    }
                    parts.add_time(val, frac, HOUR_MICROS)?;
                    if unit.is_none() {
                        return Ok(parts);
                    }
                    let (val, frac, next) = iso8601_number(s, i)?;
                    i = next;
                    parts.add_time(val, frac, MINUTE_MICROS)?;
                    match b.get(i) {
                        None => return Ok(parts),
                        Some(b':') => i += 1,
                        _ => return Err(Fail::Syntax),
                    }
                    let (val, frac, next) = iso8601_number(s, i)?;
                    parts.add_time(val, frac, SECOND_MICROS)?;
                    return if next == b.len() {
                        Ok(parts)
                    } else {
                        Err(Fail::Syntax)
                    };
                }
                _ => return Err(Fail::Syntax),
            }
        }
        have_field = true;
    }
    Ok(parts)
}

// ---- timestamps ----

/// Whether a timestamp (µs since 1970) is within PostgreSQL's range and
/// ours.
fn checked_timestamp(t: i64) -> Result<i64, ValueError> {
    if t < MIN_TIMESTAMP_MICROS || DateTime::from_timestamp_micros(t).is_none() {
        return Err(timestamp_range());
    }
    Ok(t)
}

fn naive(t: i64) -> Result<NaiveDateTime, ValueError> {
    DateTime::from_timestamp_micros(t)
        .map(|d| d.naive_utc())
        .ok_or_else(timestamp_range)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days in `month` (1 to 12) of `year`.
fn days_in_month(year: i64, month: u32) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 31,
    }
}

/// `timestamp + interval` (µs since 1970): the months first, by the
/// calendar, with the day clamped to the month's last
/// (`2024-01-31 + 1 mon` is `2024-02-29`), then the days, then the time.
/// A `timestamptz` moves the same way, its days being UTC days.
pub fn timestamp_plus_interval(t: i64, iv: Interval) -> Result<i64, ValueError> {
    let mut t = t;
    if iv.months != 0 {
        let dt = naive(t)?;
        let index =
            dt.year() as i64 * MONTHS_PER_YEAR as i64 + dt.month0() as i64 + iv.months as i64;
        let year = index.div_euclid(MONTHS_PER_YEAR as i64);
        let month = index.rem_euclid(MONTHS_PER_YEAR as i64) as u32 + 1;
        let day = (dt.day() as i64).min(days_in_month(year, month)) as u32;
        let date = i32::try_from(year)
            .ok()
            .and_then(|y| NaiveDate::from_ymd_opt(y, month, day))
            .ok_or_else(timestamp_range)?;
        t = checked_timestamp(date.and_time(dt.time()).and_utc().timestamp_micros())?;
    }
    if iv.days != 0 {
        let moved = (iv.days as i64)
            .checked_mul(DAY_MICROS)
            .and_then(|d| t.checked_add(d));
        t = checked_timestamp(moved.ok_or_else(timestamp_range)?)?;
    }
    checked_timestamp(t.checked_add(iv.micros).ok_or_else(timestamp_range)?)
}

/// `timestamp - timestamp`: the difference as days and time (whole days
/// of 24 hours; never months), as PostgreSQL's `timestamp_mi`.
pub fn timestamp_difference(a: i64, b: i64) -> Result<Interval, ValueError> {
    let micros = a.checked_sub(b).ok_or_else(interval_range)?;
    Interval::new(0, 0, micros).justify_hours()
}

/// `age(a, b)`: the difference in calendar years, months and days and
/// then time, as PostgreSQL's `timestamp_age` (`age('2024-03-31',
/// '2024-02-29')` is `1 mon 2 days`).
pub fn age(a: i64, b: i64) -> Result<Interval, ValueError> {
    let (x, y) = (naive(a)?, naive(b)?);
    let micro = |d: &NaiveDateTime| i64::from(d.nanosecond() / 1000);
    let mut fsec = micro(&x) - micro(&y);
    let mut sec = x.second() as i64 - y.second() as i64;
    let mut min = x.minute() as i64 - y.minute() as i64;
    let mut hour = x.hour() as i64 - y.hour() as i64;
    let mut mday = x.day() as i64 - y.day() as i64;
    let mut mon = x.month() as i64 - y.month() as i64;
    let mut year = x.year() as i64 - y.year() as i64;
    let before = a < b;
    let flip = |v: &mut [&mut i64]| v.iter_mut().for_each(|f| **f = -**f);
    if before {
        flip(&mut [
            &mut fsec, &mut sec, &mut min, &mut hour, &mut mday, &mut mon, &mut year,
        ]);
    }
    // Borrow from the next larger field; a month's days are those of
    // the earlier timestamp's month.
    while fsec < 0 {
        fsec += SECOND_MICROS;
        sec -= 1;
    }
    while sec < 0 {
        sec += SECONDS_PER_MINUTE;
        min -= 1;
    }
    while min < 0 {
        min += MINUTES_PER_HOUR;
        hour -= 1;
    }
    while hour < 0 {
        hour += HOURS_PER_DAY;
        mday -= 1;
    }
    let earlier = if before { &x } else { &y };
    while mday < 0 {
        mday += days_in_month(earlier.year() as i64, earlier.month());
        mon -= 1;
    }
    while mon < 0 {
        mon += MONTHS_PER_YEAR as i64;
        year -= 1;
    }
    if before {
        flip(&mut [
            &mut fsec, &mut sec, &mut min, &mut hour, &mut mday, &mut mon, &mut year,
        ]);
    }
    let months =
        i32::try_from(year * MONTHS_PER_YEAR as i64 + mon).map_err(|_| interval_range())?;
    let days = i32::try_from(mday).map_err(|_| interval_range())?;
    let micros =
        ((hour * MINUTES_PER_HOUR + min) * SECONDS_PER_MINUTE + sec) * SECOND_MICROS + fsec;
    Ok(Interval::new(months, days, micros))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_parses_or_fails_cleanly(
            s in "[0-9PTYMWDHS.:+@, -]{0,24}|[a-z0-9 .:+-]{0,24}|.{0,12}"
        ) {
            if let Ok(v) = parse_interval(&s) {
                prop_assert_eq!(parse_interval(&format_interval(v)).unwrap(), v);
            }
        }

        #[test]
        fn printed_intervals_read_back(months: i32, days: i32, micros: i64) {
            let v = Interval::new(months, days, micros);
            prop_assert_eq!(parse_interval(&format_interval(v)).unwrap(), v);
        }

        #[test]
        fn arithmetic_fails_cleanly(
            months: i32, days: i32, micros: i64, f: f64, t: i64, other: i64
        ) {
            let v = Interval::new(months, days, micros);
            let _ = v.checked_mul(f);
            if f != 0.0 {
                let _ = v.checked_div(f);
            }
            let _ = (v.justify_days(), v.justify_hours(), v.justify_interval());
            let _ = (v.checked_neg(), v.checked_add(v), v.checked_sub(v.checked_neg().unwrap_or_default()));
            let _ = timestamp_plus_interval(t, v);
            let _ = timestamp_difference(t, other);
            let _ = age(t, other);
            let _ = v.restrict(IntervalFields::Second, Some(1));
            for unit in ["epoch", "second", "milliseconds", "year", "quarter", "week", "x"] {
                let _ = interval_part(v, unit, true);
                let _ = interval_part(v, unit, false);
            }
        }
    }

    fn iv(s: &str) -> Interval {
        parse_interval(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn shown(s: &str) -> String {
        format_interval(iv(s))
    }

    #[test]
    fn input_and_output_match_postgres() {
        // SELECT '...'::interval in PostgreSQL 15 (IntervalStyle postgres).
        for (input, output) in [
            ("1 day", "1 day"),
            ("2 hours 30 minutes", "02:30:00"),
            (
                "1 year 2 mons 3 days 04:05:06.789",
                "1 year 2 mons 3 days 04:05:06.789",
            ),
            ("-1 day", "-1 days"),
            ("3 weeks", "21 days"),
            ("1.5 hours", "01:30:00"),
            ("90 seconds", "00:01:30"),
            ("P1Y2M3DT4H5M6S", "1 year 2 mons 3 days 04:05:06"),
            ("@ 1 day ago", "-1 days"),
            ("0", "00:00:00"),
            ("2 days 1 hour", "2 days 01:00:00"),
            ("-1 second", "-00:00:01"),
            ("1 mon -1 days", "1 mon -1 days"),
            ("-1 year 2 mons", "-10 mons"),
            ("-1 day 01:00:00", "-1 days +01:00:00"),
            ("-1 mon 1 day", "-1 mons +1 day"),
            (
                "1 year -2 mons +3 days -04:05:06.789",
                "10 mons 3 days -04:05:06.789",
            ),
            ("1-2", "1 year 2 mons"),
            ("1.5 years", "1 year 6 mons"),
            ("1.5 months", "1 mon 15 days"),
            ("1.5 weeks", "10 days 12:00:00"),
            (".5 hours", "00:30:00"),
            ("1:30.5", "00:01:30.5"),
            ("100:00:00", "100:00:00"),
            ("1:2:60", "01:03:00"),
            ("0:0:0.9999999", "00:00:01"),
            ("0.0000015 seconds", "00:00:00.000001"),
            ("1 2 hours", "1 day 02:00:00"),
            ("1 day 2", "1 day 00:00:02"),
            ("1 -1:2", "1 day -01:02:00"),
            ("1.5 days 01:00", "1 day 13:00:00"),
            ("01:00 1.5 days", "1 day 01:00:00"),
            ("1 h2", "01:00:02"),
            ("1day", "1 day"),
            ("1. day", "1 day"),
            ("1 Day 2 HOURS", "1 day 02:00:00"),
            (
                "1 yr 2 mon 3 w 4 d 5 hr 6 min 7 sec 8 ms 9 us",
                "1 year 2 mons 25 days 05:06:07.008009",
            ),
            ("1 century 1 decade 1 millennium", "1110 years"),
            ("1 microseconds", "00:00:00.000001"),
            ("ago 1 day", "-1 days"),
            ("P1.5Y", "1 year 6 mons"),
            ("PT1.5H", "01:30:00"),
            ("P-1.5M", "-1 mons -15 days"),
            ("P1M1M", "2 mons"),
            ("PT", "00:00:00"),
            ("P2", "2 years"),
            ("P1-2-3", "1 year 2 mons 3 days"),
            ("P00010203", "1 year 2 mons 3 days"),
            ("PT010203", "01:02:03"),
            ("P0001-02-03T04:05:06", "1 year 2 mons 3 days 04:05:06"),
            ("9223372036854775807 us", "2562047788:00:54.775807"),
            ("-2147483648 mons", "-178956970 years -8 mons"),
        ] {
            assert_eq!(shown(input), output, "{input}");
        }
    }

    #[test]
    fn bad_input_has_postgres_codes() {
        for (input, code) in [
            ("", "22007"),
            ("day", "22007"),
            ("1 2 days", "22007"),
            ("1 day 1 day", "22007"),
            ("5 ago", "22007"),
            ("1 dayz", "22007"),
            ("1 quarter", "22007"),
            ("1e3 seconds", "22007"),
            ("-.5 hours", "22007"),
            ("1day2hours", "22007"),
            ("1.day", "22007"),
            ("10:00:00.5 1", "22007"),
            ("p1d", "22007"),
            ("P", "22007"),
            ("P1Y2", "22007"),
            ("1:60", "22015"),
            ("2147483648 days", "22015"),
            ("9223372036854775808 us", "22015"),
            ("2562047789:00:00", "22015"),
            ("178956971 years", "22008"),
            ("1 day ünits", "22007"),
        ] {
            let e = parse_interval(input).unwrap_err();
            assert_eq!(e.sqlstate(), code, "{input}: {e}");
        }
        assert_eq!(
            parse_interval("abc").unwrap_err().to_string(),
            "invalid input syntax for type interval: \"abc\""
        );
        let many = "1 ".repeat(MAX_INTERVAL_FIELDS + 1);
        assert_eq!(parse_interval(&many).unwrap_err().sqlstate(), "22007");
    }

    #[test]
    fn qualifiers_read_bare_numbers_and_drop_finer_fields() {
        let q = |s: &str, f, p| format_interval(parse_interval_fields(s, f, p).unwrap());
        use IntervalFields as F;
        assert_eq!(q("1", F::Year, None), "1 year");
        assert_eq!(q("1.5", F::Year, None), "1 year");
        assert_eq!(q("2", F::Hour, None), "02:00:00");
        assert_eq!(q("1.5", F::Hour, None), "01:00:00");
        assert_eq!(q("2", F::DayToHour, None), "02:00:00");
        assert_eq!(q("1 day 2:03:04", F::HourToMinute, None), "1 day 02:03:00");
        assert_eq!(q("2:03", F::MinuteToSecond, None), "00:02:03");
        assert_eq!(q("14 mons 3 days", F::Year, None), "1 year");
        assert_eq!(
            q("1 day 2:03:04.5678", F::Second, Some(2)),
            "1 day 02:03:04.57"
        );
        assert_eq!(q("-1.5678", F::Second, Some(2)), "-00:00:01.57");
    }

    #[test]
    fn text_round_trips() {
        for (m, d, us) in [
            (0, 0, 0),
            (14, 3, 14_706_789_000),
            (-14, -3, -14_706_789_000),
            (1, -1, 1),
            (-1, 1, -1),
            (i32::MAX, i32::MIN, i64::MAX),
            (i32::MIN, i32::MAX, i64::MIN + 1),
            (0, 0, -1),
            (12, 0, 0),
        ] {
            let v = Interval::new(m, d, us);
            let text = format_interval(v);
            assert_eq!(parse_interval(&text).unwrap(), v, "{text}");
        }
    }

    #[test]
    fn comparison_counts_a_month_as_thirty_days() {
        assert_eq!(iv("1 mon").span_micros(), iv("30 days").span_micros());
        assert_eq!(iv("1 day").span_micros(), iv("24 hours").span_micros());
        assert!(iv("1 year").span_micros() < iv("364 days").span_micros());
        assert!(iv("1 mon").span_micros() < iv("1 mon 1 us").span_micros());
    }

    #[test]
    fn multiplication_and_division_carry_down_as_postgres() {
        let op = |s: &str, f: fn(Interval) -> Result<Interval, ValueError>| {
            format_interval(f(iv(s)).unwrap())
        };
        assert_eq!(op("1 mon", |i| i.checked_div(3.0)), "10 days");
        assert_eq!(
            op("1 mon 1 day", |i| i.checked_div(7.0)),
            "4 days 10:17:08.546743"
        );
        assert_eq!(
            op("1 year", |i| i.checked_div(7.0)),
            "1 mon 21 days 10:17:08.5344"
        );
        assert_eq!(
            op("-1 mon", |i| i.checked_div(7.0)),
            "-4 days -06:51:25.6896"
        );
        assert_eq!(op("1 hour", |i| i.checked_div(2.5)), "00:24:00");
        assert_eq!(op("1 day", |i| i.checked_mul(1.5)), "1 day 12:00:00");
        assert_eq!(op("1 mon", |i| i.checked_mul(0.3)), "9 days");
        assert_eq!(
            op("1 mon 1 day 1 sec", |i| i.checked_mul(2.7)),
            "2 mons 23 days 16:48:02.7"
        );
        assert_eq!(
            op("7 mon 29 days", |i| i.checked_mul(0.49)),
            "3 mons 27 days 02:38:24"
        );
        assert_eq!(
            op("1 mon 29 days 23:59:59.999999", |i| i.checked_mul(1.000001)),
            "1 mon 29 days 24:00:05.183999"
        );
        assert_eq!(
            iv("1 mon").checked_mul(f64::NAN).unwrap_err().sqlstate(),
            "22008"
        );
        assert_eq!(
            iv("1 day")
                .checked_mul(2147483648.0)
                .unwrap_err()
                .sqlstate(),
            "22008"
        );
        assert_eq!(
            iv("1 day").checked_div(1e-300).unwrap_err().sqlstate(),
            "22008"
        );
    }

    #[test]
    fn justify_as_postgres() {
        let j = |s: &str, f: fn(Interval) -> Result<Interval, ValueError>| {
            format_interval(f(iv(s)).unwrap())
        };
        assert_eq!(j("35 days", Interval::justify_days), "1 mon 5 days");
        assert_eq!(j("-35 days", Interval::justify_days), "-1 mons -5 days");
        assert_eq!(j("1 mon -35 days", Interval::justify_days), "-5 days");
        assert_eq!(j("27 hours", Interval::justify_hours), "1 day 03:00:00");
        assert_eq!(j("-27 hours", Interval::justify_hours), "-1 days -03:00:00");
        assert_eq!(j("1 day -27 hours", Interval::justify_hours), "-03:00:00");
        assert_eq!(
            j("1 mon -1 hour", Interval::justify_interval),
            "29 days 23:00:00"
        );
        assert_eq!(
            j("-1 mon 1 hour", Interval::justify_interval),
            "-29 days -23:00:00"
        );
        assert_eq!(
            j("1 mon 35 days 27 hours", Interval::justify_interval),
            "2 mons 6 days 03:00:00"
        );
    }

    fn ts(s: &str) -> i64 {
        crate::parse_timestamp(s, false).unwrap()
    }

    #[test]
    fn timestamps_move_by_the_calendar() {
        let plus = |t: &str, i: &str| {
            crate::format_timestamp(timestamp_plus_interval(ts(t), iv(i)).unwrap())
        };
        assert_eq!(plus("2024-01-31", "1 mon"), "2024-02-29 00:00:00");
        assert_eq!(plus("2023-01-31", "1 mon 1 day"), "2023-03-01 00:00:00");
        assert_eq!(plus("2024-03-31 10:00", "-1 mon"), "2024-02-29 10:00:00");
        assert_eq!(
            plus("2024-01-01", "-1 mon -1 day -1 hour"),
            "2023-11-29 23:00:00"
        );
        assert_eq!(plus("2024-02-29", "1 year"), "2025-02-28 00:00:00");
        assert_eq!(plus("2024-01-15", "-13 mons"), "2022-12-15 00:00:00");
        let e = timestamp_plus_interval(ts("2024-01-01"), iv("300000 years")).unwrap_err();
        assert_eq!(
            (e.sqlstate(), e.to_string().as_str()),
            ("22008", "timestamp out of range")
        );
        let diff = |a: &str, b: &str| format_interval(timestamp_difference(ts(a), ts(b)).unwrap());
        assert_eq!(diff("2024-03-01", "2024-02-01"), "29 days");
        assert_eq!(
            diff("2024-03-01 10:00", "2024-02-01 12:30"),
            "28 days 21:30:00"
        );
        assert_eq!(diff("2024-02-01", "2024-03-01 10:00"), "-29 days -10:00:00");
        let age_of = |a: &str, b: &str| format_interval(age(ts(a), ts(b)).unwrap());
        assert_eq!(
            age_of("2024-03-01", "2023-01-31 10:00"),
            "1 year 1 mon 14:00:00"
        );
        assert_eq!(
            age_of("2023-01-31", "2024-03-01 10:00"),
            "-1 years -1 mons -1 days -10:00:00"
        );
        assert_eq!(age_of("2024-03-31", "2024-02-29"), "1 mon 2 days");
        assert_eq!(age_of("2024-02-29", "2024-03-31"), "-1 mons -2 days");
    }

    #[test]
    fn extract_units_as_postgres() {
        let part = |u: &str, s: &str, numeric| {
            interval_part(iv(s), u, numeric).map(|v| v.to_text().unwrap())
        };
        let v = "1 year 2 mons 3 days 04:05:06.789";
        assert_eq!(part("epoch", v, true).unwrap(), "37015506.789000");
        assert_eq!(part("epoch", v, false).unwrap(), "37015506.789000005");
        assert_eq!(
            part("second", "-1 day -04:05:06.789", true).unwrap(),
            "-6.789000"
        );
        assert_eq!(part("minute", "-04:05:06", true).unwrap(), "-5");
        assert_eq!(part("HOUR", "-04:05:06", true).unwrap(), "-4");
        assert_eq!(part("days", "40 days", true).unwrap(), "40");
        assert_eq!(part("month", "14 mons", true).unwrap(), "2");
        assert_eq!(part("year", "-14 mons", true).unwrap(), "-1");
        assert_eq!(part("microseconds", "1.5 s", true).unwrap(), "1500000");
        assert_eq!(part("milliseconds", "1.5 s", true).unwrap(), "1500.000");
        assert_eq!(part("quarter", "5 mons", true).unwrap(), "2");
        assert_eq!(part("decade", "25 years", true).unwrap(), "2");
        assert_eq!(part("century", "250 years", true).unwrap(), "2");
        assert_eq!(part("millennium", "2500 years", true).unwrap(), "2");
        assert_eq!(part("day", "40 days", false).unwrap(), "40");
        assert_eq!(part("epoch", "1.5 s", false).unwrap(), "1.5");
        assert_eq!(part("dow", "1 day", true), Err(UnitError::Unsupported));
        assert_eq!(part("week", "1 day", true), Err(UnitError::Unsupported));
        assert_eq!(part("foo", "1 day", true), Err(UnitError::Unrecognized));
    }

    #[test]
    fn epoch_and_parts() {
        let v = iv("1 year 2 mons 3 days 04:05:06.789");
        assert_eq!(v.epoch_micros(), 37_015_506_789_000);
        assert_eq!(v.epoch_seconds(), 37015506.789000005);
        assert_eq!(iv("-1 mon").epoch_micros(), -2_592_000_000_000);
        let p = iv("-1 day -04:05:06.789").parts();
        assert_eq!(
            (p.hours, p.minutes, p.seconds, p.micros),
            (-4, -5, -6, -789_000)
        );
        let p = iv("-14 mons").parts();
        assert_eq!((p.years, p.months), (-1, -2));
        assert_eq!(
            format_interval(Interval::make([1, 2, 3, 4, 5, 6], 7.5).unwrap()),
            "1 year 2 mons 25 days 05:06:07.5"
        );
        assert!(Interval::make([i32::MAX, 0, 0, 0, 0, 0], 0.0).is_err());
    }
}
