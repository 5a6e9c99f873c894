//! SQL types and values: what a column may hold, how values compare, their
//! PostgreSQL text forms, and the compact row encoding stored in log records.
//!
//! Row encoding (format version 1), used as the body of a row's log record:
//!
//! ```text
//! u8 version (1) | u16 column count | per column: u8 tag, payload
//! tag 0 NULL | 1 bool u8 | 2 int i64 | 3 float f64 | 4 numeric 16 bytes
//! 5 text u32 len + UTF-8 | 6 bytes u32 len + bytes | 7 timestamp i64 µs
//! 8 timestamptz i64 µs (UTC) | 9 date i32 days since 1970-01-01
//! 10 uuid 16 bytes | 11 json u32 len + UTF-8
//! 12 array u32 count + that many values (tag, payload; never an array)
//! 13 jsonb u32 len + its canonical text (UTF-8)
//! 14 interval i32 months | i32 days | i64 µs (PostgreSQL's three fields)
//! 15 enum i64 sort key + u32 len + label (UTF-8)
//! ```
//! All integers little-endian. Tags 12 to 15 were added later; rows
//! written before them decode unchanged (a jsonb written then is tag 11).

mod array;
mod enums;
mod interval;
mod jsonb;
mod text;
mod types;

use std::cmp::Ordering;
use std::fmt;

pub use array::{format_array, parse_array, MAX_ARRAY_ELEMENTS};
pub use enums::{
    EnumType, LabelError, LabelPlace, ENUM_SORT_GAP, FIRST_USER_OID, MAX_ENUM_LABEL_BYTES,
};
pub use interval::{
    age, format_interval, interval_part, parse_interval, parse_interval_fields,
    timestamp_difference, timestamp_plus_interval, Interval, IntervalFields, IntervalParts,
    UnitError, DAYS_PER_MONTH, HOUR_MICROS, MAX_INTERVAL_FIELDS, MAX_INTERVAL_PRECISION,
    MINUTE_MICROS, MIN_TIMESTAMP_MICROS, MONTHS_PER_YEAR, SECOND_MICROS,
};
pub use jsonb::{
    canonical_number, json_path_text, key_order, JsonStep, Jsonb, MAX_JSON_DEPTH,
    MAX_JSON_NUMBER_DIGITS, MAX_JSON_NUMBER_SCALE,
};
pub use rust_decimal::Decimal;
pub use text::format_float4;
pub use text::{format_date, format_finite_float, format_timestamp, parse_date, parse_timestamp};
pub use types::{
    numeric_typmod, parse_numeric, real_to_numeric, DataType, VectorKind, MAX_NUMERIC_DIGITS,
};

/// Largest text, bytea or json value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Largest encoded row, in bytes.
pub const MAX_ROW_BYTES: usize = 8 * 1024 * 1024;
/// Version of the row encoding.
pub const ROW_FORMAT_VERSION: u8 = 1;

/// One SQL value. The column's [`DataType`] says how wide an `Int` or `Float` is.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Numeric(Decimal),
    Text(String),
    Bytes(Vec<u8>),
    /// Microseconds since 1970-01-01 00:00:00, no time zone.
    Timestamp(i64),
    /// Microseconds since 1970-01-01 00:00:00 UTC.
    TimestampTz(i64),
    /// Days since 1970-01-01.
    Date(i32),
    Uuid(u128),
    /// `json`: the text as given.
    Json(String),
    /// `jsonb`, in canonical form.
    Jsonb(Jsonb),
    /// A one-dimensional array (lower bound 1); elements are never arrays.
    Array(Vec<Value>),
    /// `interval`: PostgreSQL's three fields, never folded into each
    /// other (a month is not 30 days until it is compared). SQL equality,
    /// ordering and hashing use [`Interval::span_micros`], so
    /// `'1 mon'` equals `'30 days'` as in PostgreSQL.
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
    /// A label of an enum type and its sort key (see [`EnumType`]).
    Enum(i64, Box<str>),
}

/// A value that does not fit where it was put.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// SQLSTATE 22P02 / 22007 / 22008: text that is not a value of the type.
    #[error("invalid input syntax for type {ty}: \"{input}\"")]
    Syntax { ty: String, input: String },
    /// SQLSTATE 22003.
    #[error("value out of range for type {ty}")]
    OutOfRange { ty: String },
    /// SQLSTATE 22003, with PostgreSQL's own message (`integer out of
    /// range`, `numeric field overflow`, ...).
    #[error("{0}")]
    Range(String),
    /// SQLSTATE 22P02: text that is not a label of the enum type.
    #[error("invalid input value for enum {ty}: \"{input}\"")]
    EnumLabel { ty: String, input: String },
    /// SQLSTATE 22003: a value with more digits before the point than a
    /// `numeric(precision, scale)` column allows.
    #[error("numeric field overflow")]
    NumericFieldOverflow { precision: u32, scale: u32 },
    /// SQLSTATE 22008: a date or timestamp whose fields are out of range
    /// (`2024-02-30`).
    #[error("date/time field value out of range: \"{input}\"")]
    DatetimeField { input: String },
    /// SQLSTATE 22008: an interval or timestamp result its type cannot
    /// hold (`interval out of range`, `timestamp out of range`).
    #[error("{what} out of range")]
    DatetimeOutOfRange { what: &'static str },
    /// SQLSTATE 22015: an interval's text with a field too large
    /// (`'2147483648 days'`).
    #[error("interval field value out of range: \"{input}\"")]
    IntervalField { input: String },
    /// SQLSTATE 22001.
    #[error("value too long for type {ty}")]
    TooLong { ty: String },
    /// SQLSTATE 42804.
    #[error("cannot use a value of type {from} as {to}")]
    Mismatch { from: String, to: String },
    /// SQLSTATE 54000.
    #[error("value of {bytes} bytes exceeds the limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    /// SQLSTATE 22P02: text that is not an array literal.
    #[error("malformed array literal: \"{input}\"")]
    MalformedArray { input: String, detail: String },
    /// SQLSTATE 22P05: `\u0000` in jsonb.
    #[error("unsupported Unicode escape sequence")]
    UnsupportedEscape,
    /// SQLSTATE 54001: json nested deeper than [`MAX_JSON_DEPTH`].
    #[error("json nests deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// SQLSTATE 0A000.
    #[error("{0} are not supported")]
    Unsupported(String),
    /// SQLSTATE XX001: an undecodable stored row.
    #[error("stored row is damaged: {0}")]
    Corrupt(String),
}

impl ValueError {
    /// PostgreSQL's DETAIL line for this error, if it has one.
    pub fn detail(&self) -> Option<String> {
        match self {
            ValueError::NumericFieldOverflow { precision, scale } => {
                let digits = *precision as i64 - *scale as i64;
                let bound = if digits == 0 {
                    "1".to_string()
                } else {
                    format!("10^{digits}")
                };
                Some(format!(
                    "A field with precision {precision}, scale {scale} must round to an absolute value less than {bound}."
                ))
            }
            ValueError::MalformedArray { detail, .. } => Some(detail.clone()),
            ValueError::UnsupportedEscape => Some("\\u0000 cannot be converted to text.".into()),
            _ => None,
        }
    }

    /// The PostgreSQL SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ValueError::Syntax { ty, .. }
                if ty.starts_with("timestamp") || ty == "date" || ty == "interval" =>
            {
                "22007"
            }
            ValueError::Syntax { .. }
            | ValueError::MalformedArray { .. }
            | ValueError::EnumLabel { .. } => "22P02",
            ValueError::UnsupportedEscape => "22P05",
            ValueError::Unsupported(_) => "0A000",
            ValueError::TooDeep { .. } => "54001",
            ValueError::OutOfRange { .. }
            | ValueError::Range(_)
            | ValueError::NumericFieldOverflow { .. } => "22003",
            ValueError::DatetimeField { .. } | ValueError::DatetimeOutOfRange { .. } => "22008",
            ValueError::IntervalField { .. } => "22015",
            ValueError::TooLong { .. } => "22001",
            ValueError::Mismatch { .. } => "42804",
            ValueError::TooLarge { .. } => "54000",
            ValueError::Corrupt(_) => "XX001",
        }
    }
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// A short name of the value's kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "double precision",
            Value::Numeric(_) => "numeric",
            Value::Text(_) => "text",
            Value::Bytes(_) => "bytea",
            Value::Timestamp(_) => "timestamp",
            Value::TimestampTz(_) => "timestamptz",
            Value::Date(_) => "date",
            Value::Uuid(_) => "uuid",
            Value::Json(_) => "json",
            Value::Jsonb(_) => "jsonb",
            Value::Array(_) => "array",
            Value::Interval { .. } => "interval",
            Value::Enum(..) => "enum",
        }
    }

    /// Converts to the column type `ty`, checking range, length and syntax.
    /// Text converts to any type by parsing, as an untyped literal does in PostgreSQL.
    pub fn coerce(self, ty: &DataType) -> Result<Value, ValueError> {
        types::coerce(self, ty)
    }

    /// Size in bytes of variable-length contents, checked against limits.
    pub fn payload_len(&self) -> usize {
        match self {
            Value::Text(s) | Value::Json(s) => s.len(),
            Value::Enum(_, l) => l.len(),
            Value::Bytes(b) => b.len(),
            Value::Jsonb(j) => j.size(),
            Value::Array(items) => items.iter().map(Value::payload_len).sum(),
            _ => 0,
        }
    }

    /// The PostgreSQL text form (what `psql` prints). `None` for NULL.
    pub fn to_text(&self) -> Option<String> {
        text::to_text(self)
    }

    /// As f64, for arithmetic across numeric kinds.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            Value::Numeric(d) => d.to_string().parse().ok(),
            _ => None,
        }
    }

    /// SQL comparison: `None` when either side is NULL or the kinds do not compare.
    pub fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        if self.is_null() || other.is_null() {
            return None;
        }
        compare(self, other)
    }
}

fn rank(v: &Value) -> u8 {
    match v {
        Value::Bool(_) => 1,
        Value::Int(_) | Value::Float(_) | Value::Numeric(_) => 2,
        Value::Text(_) => 3,
        Value::Bytes(_) => 4,
        Value::Timestamp(_) => 5,
        Value::TimestampTz(_) => 6,
        Value::Date(_) => 7,
        Value::Uuid(_) => 8,
        Value::Json(_) => 9,
        Value::Jsonb(_) => 10,
        Value::Array(_) => 11,
        Value::Interval { .. } => 12,
        Value::Enum(..) => 13,
        Value::Null => 14,
    }
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    use Value::*;
    Some(match (a, b) {
        (Bool(x), Bool(y)) => x.cmp(y),
        (Int(x), Int(y)) => x.cmp(y),
        (Float(x), Float(y)) => x.total_cmp(y),
        (Numeric(x), Numeric(y)) => x.cmp(y),
        (Int(x), Numeric(y)) => Decimal::from(*x).cmp(y),
        (Numeric(x), Int(y)) => x.cmp(&Decimal::from(*y)),
        (Int(_) | Numeric(_), Float(_)) | (Float(_), Int(_) | Numeric(_)) => {
            a.as_f64()?.total_cmp(&b.as_f64()?)
        }
        (Text(x), Text(y)) | (Json(x), Json(y)) => x.cmp(y),
        (Bytes(x), Bytes(y)) => x.cmp(y),
        (Timestamp(x), Timestamp(y)) | (TimestampTz(x), TimestampTz(y)) => x.cmp(y),
        (Timestamp(x), TimestampTz(y)) | (TimestampTz(x), Timestamp(y)) => x.cmp(y),
        (Date(x), Date(y)) => x.cmp(y),
        (Date(d), Timestamp(t)) | (Date(d), TimestampTz(t)) => {
            (*d as i128 * DAY_MICROS as i128).cmp(&(*t as i128))
        }
        (Timestamp(t), Date(d)) | (TimestampTz(t), Date(d)) => {
            (*t as i128).cmp(&(*d as i128 * DAY_MICROS as i128))
        }
        (Uuid(x), Uuid(y)) => x.cmp(y),
        (Jsonb(x), Jsonb(y)) => x.cmp(y),
        // Element by element (NULL elements equal to each other and after
        // the rest, as PostgreSQL's array comparison), then by length.
        (Array(x), Array(y)) => x.cmp(y),
        (Interval { .. }, Interval { .. }) => {
            let span = |v| self::Interval::of(v).map(self::Interval::span_micros);
            span(a).cmp(&span(b))
        }
        (Enum(x, _), Enum(y, _)) => x.cmp(y),
        _ => return None,
    })
}

/// Microseconds in a day.
pub const DAY_MICROS: i64 = 86_400_000_000;

/// A total order for keys and sorting: NULLs last, kinds that do not compare
/// ordered by kind. Agrees with [`Value::sql_cmp`] wherever that is defined.
impl Ord for Value {
    fn cmp(&self, other: &Value) -> Ordering {
        // Keys are mostly integers: compared without the general match
        // (the row map and indexes compare a key per tree level).
        if let (Value::Int(x), Value::Int(y)) = (self, other) {
            return x.cmp(y);
        }
        match (self.is_null(), other.is_null()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        compare(self, other).unwrap_or_else(|| rank(self).cmp(&rank(other)))
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Value) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        use rust_decimal::prelude::ToPrimitive;
        // Values that compare equal across kinds (3 = 3.0, a date and its
        // midnight timestamp) must hash equally.
        let float = |f: f64, state: &mut H| {
            if f.fract() == 0.0 && f.abs() < 9.2e18 {
                (2u8, f as i64).hash(state)
            } else {
                (3u8, f.to_bits()).hash(state)
            }
        };
        match self {
            Value::Null => 0u8.hash(state),
            Value::Bool(b) => (1u8, *b).hash(state),
            Value::Int(i) => (2u8, *i).hash(state),
            Value::Float(f) => float(*f, state),
            Value::Numeric(d) => match d.to_i64() {
                Some(i) if d.fract().is_zero() => (2u8, i).hash(state),
                // Normalised first: 1.64 and 1.6400 are equal and must not
                // round to different floats.
                _ => float(d.normalize().to_f64().unwrap_or(f64::NAN), state),
            },
            Value::Text(s) => (4u8, s).hash(state),
            Value::Bytes(b) => (5u8, b).hash(state),
            Value::Timestamp(t) | Value::TimestampTz(t) => (6u8, *t as i128).hash(state),
            Value::Date(d) => (6u8, *d as i128 * DAY_MICROS as i128).hash(state),
            Value::Uuid(u) => (7u8, *u).hash(state),
            Value::Json(s) => (8u8, s).hash(state),
            Value::Jsonb(j) => (9u8, j).hash(state),
            Value::Array(items) => (10u8, items).hash(state),
            // Equal spans are equal ('1 mon' = '30 days'): hash the span.
            Value::Interval {
                months,
                days,
                micros,
            } => (
                11u8,
                self::Interval::new(*months, *days, *micros).span_micros(),
            )
                .hash(state),
            Value::Enum(sort, _) => (12u8, *sort).hash(state),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_text() {
            Some(t) => f.write_str(&t),
            None => f.write_str("NULL"),
        }
    }
}

/// Encodes a row for a log record body.
pub fn encode_row(row: &[Value], out: &mut Vec<u8>) {
    out.push(ROW_FORMAT_VERSION);
    out.extend_from_slice(&(row.len() as u16).to_le_bytes());
    for v in row {
        encode_value(v, out);
    }
}

/// Encodes one value (also used for keys).
pub fn encode_value(v: &Value, out: &mut Vec<u8>) {
    let var = |out: &mut Vec<u8>, tag: u8, b: &[u8]| {
        out.push(tag);
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    match v {
        Value::Null => out.push(0),
        Value::Bool(b) => out.extend_from_slice(&[1, *b as u8]),
        Value::Int(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(3);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Value::Numeric(d) => {
            out.push(4);
            out.extend_from_slice(&d.serialize());
        }
        Value::Text(s) => var(out, 5, s.as_bytes()),
        Value::Bytes(b) => var(out, 6, b),
        Value::Timestamp(t) => {
            out.push(7);
            out.extend_from_slice(&t.to_le_bytes());
        }
        Value::TimestampTz(t) => {
            out.push(8);
            out.extend_from_slice(&t.to_le_bytes());
        }
        Value::Date(d) => {
            out.push(9);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Value::Uuid(u) => {
            out.push(10);
            out.extend_from_slice(&u.to_le_bytes());
        }
        Value::Json(s) => var(out, 11, s.as_bytes()),
        Value::Array(items) => {
            out.push(12);
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for item in items {
                assert!(
                    !matches!(item, Value::Array(_)),
                    "arrays of arrays are refused before they are stored"
                );
                encode_value(item, out);
            }
        }
        Value::Jsonb(j) => var(out, 13, j.to_string().as_bytes()),
        Value::Interval {
            months,
            days,
            micros,
        } => {
            out.push(14);
            out.extend_from_slice(&months.to_le_bytes());
            out.extend_from_slice(&days.to_le_bytes());
            out.extend_from_slice(&micros.to_le_bytes());
        }
        Value::Enum(sort, label) => {
            out.push(15);
            out.extend_from_slice(&sort.to_le_bytes());
            out.extend_from_slice(&(label.len() as u32).to_le_bytes());
            out.extend_from_slice(label.as_bytes());
        }
    }
}

/// Bytes [`encode_value`] writes for `v`; for `jsonb`, whose text is
/// made only as it is written, its size in memory stands in.
pub fn encoded_len(v: &Value) -> usize {
    match v {
        Value::Null => 1,
        Value::Bool(_) => 2,
        Value::Date(_) => 5,
        Value::Int(_) | Value::Float(_) | Value::Timestamp(_) | Value::TimestampTz(_) => 9,
        Value::Numeric(_) | Value::Uuid(_) | Value::Interval { .. } => 17,
        Value::Text(s) | Value::Json(s) => 5 + s.len(),
        Value::Bytes(b) => 5 + b.len(),
        Value::Jsonb(j) => 5 + j.size(),
        Value::Array(items) => 5 + items.iter().map(encoded_len).sum::<usize>(),
        Value::Enum(_, label) => 13 + label.len(),
    }
}

/// Bytes [`encode_row`] writes for `row`.
pub fn encoded_row_len(row: &[Value]) -> usize {
    3 + row.iter().map(encoded_len).sum::<usize>()
}

/// Decodes a row written by [`encode_row`].
pub fn decode_row(b: &[u8]) -> Result<Vec<Value>, ValueError> {
    let bad = |why: &str| ValueError::Corrupt(why.to_string());
    if b.len() < 3 {
        return Err(bad("row is cut short"));
    }
    if b[0] != ROW_FORMAT_VERSION {
        return Err(bad(&format!("row format version {} is unknown", b[0])));
    }
    let n = u16::from_le_bytes([b[1], b[2]]) as usize;
    let mut pos = 3;
    let mut row = Vec::with_capacity(n);
    for _ in 0..n {
        let (v, used) = decode_value(&b[pos..])?;
        row.push(v);
        pos += used;
    }
    if pos != b.len() {
        return Err(bad("trailing bytes after the row"));
    }
    Ok(row)
}

/// Decodes one value; returns it and the bytes used.
pub fn decode_value(b: &[u8]) -> Result<(Value, usize), ValueError> {
    let bad = || ValueError::Corrupt("value is cut short or malformed".into());
    let fixed = |n: usize| -> Result<&[u8], ValueError> { b.get(1..1 + n).ok_or_else(bad) };
    let var = || -> Result<(&[u8], usize), ValueError> {
        let len = u32::from_le_bytes(fixed(4)?.try_into().unwrap()) as usize;
        let body = b.get(5..5 + len).ok_or_else(bad)?;
        Ok((body, 5 + len))
    };
    let string = |bytes: &[u8]| {
        String::from_utf8(bytes.to_vec()).map_err(|_| ValueError::Corrupt("invalid UTF-8".into()))
    };
    let tag = *b.first().ok_or_else(bad)?;
    Ok(match tag {
        0 => (Value::Null, 1),
        1 => (Value::Bool(fixed(1)?[0] != 0), 2),
        2 => (
            Value::Int(i64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            9,
        ),
        3 => (
            Value::Float(f64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            9,
        ),
        4 => (
            Value::Numeric(Decimal::deserialize(fixed(16)?.try_into().unwrap())),
            17,
        ),
        5 => {
            let (body, used) = var()?;
            (Value::Text(string(body)?), used)
        }
        6 => {
            let (body, used) = var()?;
            (Value::Bytes(body.to_vec()), used)
        }
        7 => (
            Value::Timestamp(i64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            9,
        ),
        8 => (
            Value::TimestampTz(i64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            9,
        ),
        9 => (
            Value::Date(i32::from_le_bytes(fixed(4)?.try_into().unwrap())),
            5,
        ),
        10 => (
            Value::Uuid(u128::from_le_bytes(fixed(16)?.try_into().unwrap())),
            17,
        ),
        11 => {
            let (body, used) = var()?;
            (Value::Json(string(body)?), used)
        }
        12 => {
            let count = u32::from_le_bytes(fixed(4)?.try_into().unwrap()) as usize;
            if count > MAX_ARRAY_ELEMENTS {
                return Err(bad());
            }
            let mut pos = 5;
            let mut items = Vec::with_capacity(count.min(b.len()));
            for _ in 0..count {
                let rest = b.get(pos..).ok_or_else(bad)?;
                if rest.first() == Some(&12) {
                    return Err(ValueError::Corrupt("array nested in an array".into()));
                }
                let (v, used) = decode_value(rest)?;
                items.push(v);
                pos += used;
            }
            (Value::Array(items), pos)
        }
        13 => {
            let (body, used) = var()?;
            let j = Jsonb::parse(&string(body)?)
                .map_err(|_| ValueError::Corrupt("stored jsonb does not parse".into()))?;
            (Value::Jsonb(j), used)
        }
        14 => {
            let body = fixed(16)?;
            let int = |r: std::ops::Range<usize>| i32::from_le_bytes(body[r].try_into().unwrap());
            (
                Value::Interval {
                    months: int(0..4),
                    days: int(4..8),
                    micros: i64::from_le_bytes(body[8..16].try_into().unwrap()),
                },
                17,
            )
        }
        15 => {
            let sort = i64::from_le_bytes(fixed(8)?.try_into().unwrap());
            let len =
                u32::from_le_bytes(b.get(9..13).ok_or_else(bad)?.try_into().unwrap()) as usize;
            let body = b.get(13..13 + len).ok_or_else(bad)?;
            (Value::Enum(sort, string(body)?.into()), 13 + len)
        }
        t => return Err(ValueError::Corrupt(format!("unknown value tag {t}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<f64>().prop_map(Value::Float),
            ".{0,20}".prop_map(Value::Text),
            prop::collection::vec(any::<u8>(), 0..20).prop_map(Value::Bytes),
            any::<i64>().prop_map(Value::Timestamp),
            any::<i32>().prop_map(Value::Date),
            any::<u128>().prop_map(Value::Uuid),
            (any::<i64>(), 0u32..10).prop_map(|(m, s)| Value::Numeric(Decimal::new(m, s))),
            "[a-c]{0,3}".prop_map(|k| Value::Jsonb(
                Jsonb::parse(&format!("{{\"{k}\": [1, \"x\", null], \"b\": 2.50}}")).unwrap()
            )),
            prop::collection::vec(
                prop_oneof![Just(Value::Null), any::<i64>().prop_map(Value::Int)],
                0..4
            )
            .prop_map(Value::Array),
            (any::<i64>(), "[a-z]{1,8}").prop_map(|(s, l)| Value::Enum(s, l.into())),
            prop::collection::vec(".{0,5}".prop_map(Value::Text), 0..4).prop_map(Value::Array),
            (any::<i32>(), any::<i32>(), any::<i64>()).prop_map(|(months, days, micros)| {
                Value::Interval {
                    months,
                    days,
                    micros,
                }
            }),
            // Small spans, so that equal spans written differently occur.
            (-2i32..2, -60i32..60, -2i64..2).prop_map(|(months, days, hours)| Value::Interval {
                months,
                days,
                micros: hours * HOUR_MICROS,
            }),
        ]
    }

    proptest! {
        #[test]
        fn rows_round_trip(row in prop::collection::vec(value(), 0..8)) {
            let mut b = Vec::new();
            encode_row(&row, &mut b);
            if !row.iter().any(|v| matches!(v, Value::Jsonb(_))) {
                prop_assert_eq!(b.len(), encoded_row_len(&row));
            }
            let back = decode_row(&b).unwrap();
            prop_assert_eq!(back.len(), row.len());
            for (x, y) in row.iter().zip(&back) {
                prop_assert_eq!(x.cmp(y), Ordering::Equal);
            }
        }

        #[test]
        fn equal_values_hash_equally(a in value(), b in value(), extra in 0u32..8) {
            use std::hash::{BuildHasher, RandomState};
            let h = RandomState::new();
            prop_assert!(a != b || h.hash_one(&a) == h.hash_one(&b));
            // The same number at another scale (1.64 and 1.6400).
            if let Value::Numeric(d) = &a {
                let mut wide = *d;
                wide.rescale(d.scale() + extra);
                if wide == *d {
                    prop_assert_eq!(h.hash_one(&a), h.hash_one(Value::Numeric(wide)));
                }
            }
        }

        #[test]
        fn decoding_garbage_never_panics(b in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_row(&b);
        }

        #[test]
        fn order_is_total_and_consistent(a in value(), b in value(), c in value()) {
            prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
            if a <= b && b <= c {
                prop_assert!(a <= c);
            }
        }
    }

    #[test]
    fn old_rows_decode_and_new_tags_are_checked() {
        // A jsonb written before tag 13: tag 11 and its text, as it was.
        let mut b = vec![ROW_FORMAT_VERSION, 1, 0, 11];
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(br#"{"b":1}  "#);
        assert_eq!(
            decode_row(&b).unwrap(),
            vec![Value::Json(r#"{"b":1}  "#.into())]
        );
        // Tags 12 and 13 round trip; jsonb is stored as its canonical text.
        let doc = Value::Text(r#"{"b": 1, "a": [1.50, null]}"#.into())
            .coerce(&DataType::Jsonb)
            .unwrap();
        let row = vec![
            Value::Array(vec![Value::Text("a b".into()), Value::Null, Value::Int(3)]),
            doc.clone(),
            Value::Array(vec![]),
        ];
        let mut b = Vec::new();
        encode_row(&row, &mut b);
        assert!(String::from_utf8_lossy(&b).contains(r#"{"a": [1.50, null], "b": 1}"#));
        let back = decode_row(&b).unwrap();
        assert_eq!(back, row);
        assert_eq!(back[1].to_text(), doc.to_text());
        // An array inside an array, or a tag-13 body that is not JSON, is damage.
        let mut nested = vec![ROW_FORMAT_VERSION, 1, 0, 12];
        nested.extend_from_slice(&1u32.to_le_bytes());
        nested.push(12);
        nested.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode_row(&nested).unwrap_err().sqlstate(), "XX001");
        let mut bad = vec![ROW_FORMAT_VERSION, 1, 0, 13];
        bad.extend_from_slice(&1u32.to_le_bytes());
        bad.push(b'{');
        assert_eq!(decode_row(&bad).unwrap_err().sqlstate(), "XX001");
        // A count larger than the bytes that follow is damage, not a huge allocation.
        let mut huge = vec![ROW_FORMAT_VERSION, 1, 0, 12];
        huge.extend_from_slice(&1_000_000u32.to_le_bytes());
        assert!(decode_row(&huge).is_err());
    }

    #[test]
    fn intervals_have_tag_14_and_compare_by_their_span() {
        let iv = |months, days, micros| Value::Interval {
            months,
            days,
            micros,
        };
        // The bytes of tag 14, field by field, little-endian.
        let mut b = Vec::new();
        encode_value(&iv(-2, 3, -4), &mut b);
        let mut want = vec![14];
        want.extend_from_slice(&(-2i32).to_le_bytes());
        want.extend_from_slice(&3i32.to_le_bytes());
        want.extend_from_slice(&(-4i64).to_le_bytes());
        assert_eq!(b, want);
        // The fields come back as written, not normalised.
        let row = vec![iv(1, 0, 0), iv(0, 30, 0), iv(i32::MIN, i32::MAX, i64::MIN)];
        let mut b = Vec::new();
        encode_row(&row, &mut b);
        let back = decode_row(&b).unwrap();
        for (x, y) in row.iter().zip(&back) {
            assert_eq!(format!("{x:?}"), format!("{y:?}"));
        }
        // A body cut short is damage.
        let mut cut = vec![ROW_FORMAT_VERSION, 1, 0, 14];
        cut.extend_from_slice(&[0; 15]);
        assert_eq!(decode_row(&cut).unwrap_err().sqlstate(), "XX001");
        // '1 mon' = '30 days' = '720 hours', and they hash alike.
        use std::hash::{BuildHasher, RandomState};
        let h = RandomState::new();
        let month = iv(1, 0, 0);
        for same in [iv(0, 30, 0), iv(0, 0, 720 * HOUR_MICROS), iv(2, -30, 0)] {
            assert_eq!(month, same);
            assert_eq!(h.hash_one(&month), h.hash_one(&same));
        }
        assert!(iv(0, 0, 1) > iv(0, 0, 0));
        assert!(iv(12, 0, 0) < iv(0, 364, 0));
        assert_eq!(iv(0, 1, 0).sql_cmp(&Value::Int(1)), None);
    }

    #[test]
    fn array_types_name_and_number_as_postgres() {
        for (name, oid, shown) in [
            ("text[]", 1009, "text[]"),
            ("int[]", 1007, "integer[]"),
            ("bigint[]", 1016, "bigint[]"),
            ("uuid[]", 2951, "uuid[]"),
            ("jsonb[]", 3807, "jsonb[]"),
            ("interval[]", 1187, "interval[]"),
            ("boolean[]", 1000, "boolean[]"),
        ] {
            let ty = DataType::from_sql(name, &[]).unwrap();
            assert_eq!(ty.pg_oid(), oid, "{name}");
            assert_eq!(ty.to_string(), shown);
            assert_eq!(DataType::from_pg_oid(oid), Some(ty));
        }
        assert_eq!(DataType::from_sql("text[][]", &[]), None);
    }

    #[test]
    fn numbers_compare_across_kinds() {
        assert_eq!(
            Value::Int(2).sql_cmp(&Value::Float(2.5)),
            Some(Ordering::Less)
        );
        assert_eq!(
            Value::Numeric(Decimal::new(25, 1)).sql_cmp(&Value::Int(2)),
            Some(Ordering::Greater)
        );
        assert_eq!(Value::Int(1).sql_cmp(&Value::Null), None);
        assert_eq!(Value::Int(3), Value::Float(3.0));
    }
}
