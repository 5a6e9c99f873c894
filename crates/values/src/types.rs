//! Column types and conversion of values into them.

use std::fmt;

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use crate::text::{parse_date, parse_timestamp};
use crate::{Value, ValueError, DAY_MICROS, MAX_VALUE_BYTES};

/// The types a column may have.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    /// `numeric(precision, scale)`: values are rounded to `scale` places
    /// and refused when they need more than `precision` digits. Only a
    /// table column has it; expressions over the column see [`DataType::Numeric`]
    /// (see [`DataType::unconstrained`]).
    NumericTypmod {
        precision: u32,
        scale: u32,
    },
    Bool,
    Text,
    /// `varchar(n)`; `None` is unbounded.
    Varchar(Option<u32>),
    Bytea,
    Timestamp,
    TimestampTz,
    Date,
    Uuid,
    Json,
    Jsonb,
    /// A one-dimensional array of the element type (never an array).
    Array(Box<DataType>),
    /// `interval`: months, days and microseconds (see [`Value::Interval`]).
    Interval,
    /// An enum type (`CREATE TYPE ... AS ENUM`).
    Enum(std::sync::Arc<crate::EnumType>),
    /// `oid`: an object identifier, an unsigned 32-bit integer held as
    /// [`Value::Int`] (the system catalog's keys).
    Oid,
    /// `name`: the system catalog's identifier type, text here.
    Name,
    /// `"char"`: a single byte (the system catalog's kind codes such as
    /// `relkind`), text here.
    Char,
    /// `int2vector` and `oidvector`: the system catalog's lists of column
    /// numbers and of ids (`pg_index.indkey`), held as [`Value::Array`];
    /// their text is the numbers separated by spaces, and they are
    /// subscripted from 0.
    Vector(VectorKind),
}

/// Which of the system catalog's vector types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorKind {
    Int2,
    Oid,
}

impl DataType {
    /// Parses a SQL type name (lower case, without modifiers) and its
    /// modifiers; `name[]` is an array of `name`.
    pub fn from_sql(name: &str, modifiers: &[u64]) -> Option<DataType> {
        if let Some(element) = name.trim_end().strip_suffix("[]") {
            return match DataType::from_sql(element, modifiers)? {
                DataType::Array(_) => None,
                element => Some(DataType::Array(Box::new(element))),
            };
        }
        Some(match name {
            "smallint" | "int2" => DataType::Int2,
            "integer" | "int" | "int4" | "serial" => DataType::Int4,
            "bigint" | "int8" | "bigserial" => DataType::Int8,
            "real" | "float4" => DataType::Float4,
            "double precision" | "float8" | "double" | "float" => DataType::Float8,
            "numeric" | "decimal" => match *modifiers {
                [] => DataType::Numeric,
                [p] if p >= 1 => DataType::NumericTypmod {
                    precision: u32::try_from(p).ok()?,
                    scale: 0,
                },
                [p, s] if p >= 1 => DataType::NumericTypmod {
                    precision: u32::try_from(p).ok()?,
                    scale: u32::try_from(s).ok()?,
                },
                _ => return None,
            },
            "boolean" | "bool" => DataType::Bool,
            "text" | "string" => DataType::Text,
            "varchar" | "character varying" | "char" | "character" | "bpchar" => {
                DataType::Varchar(modifiers.first().map(|&n| n as u32))
            }
            "bytea" => DataType::Bytea,
            "timestamp" | "timestamp without time zone" => DataType::Timestamp,
            "timestamptz" | "timestamp with time zone" => DataType::TimestampTz,
            "date" => DataType::Date,
            "uuid" => DataType::Uuid,
            "json" => DataType::Json,
            "jsonb" => DataType::Jsonb,
            "interval" if modifiers.is_empty() => DataType::Interval,
            "oid" => DataType::Oid,
            "name" => DataType::Name,
            "\"char\"" => DataType::Char,
            "int2vector" => DataType::Vector(VectorKind::Int2),
            "oidvector" => DataType::Vector(VectorKind::Oid),
            _ => return None,
        })
    }

    /// The PostgreSQL type OID, as drivers expect it.
    pub fn pg_oid(&self) -> u32 {
        match self {
            DataType::Bool => 16,
            DataType::Bytea => 17,
            DataType::Int8 => 20,
            DataType::Int2 => 21,
            DataType::Int4 => 23,
            DataType::Text => 25,
            DataType::Json => 114,
            DataType::Float4 => 700,
            DataType::Float8 => 701,
            DataType::Varchar(_) => 1043,
            DataType::Date => 1082,
            DataType::Timestamp => 1114,
            DataType::TimestampTz => 1184,
            DataType::Numeric | DataType::NumericTypmod { .. } => 1700,
            DataType::Uuid => 2950,
            DataType::Jsonb => 3802,
            DataType::Interval => 1186,
            DataType::Enum(t) => t.oid(),
            DataType::Oid => 26,
            DataType::Name => 19,
            DataType::Char => 18,
            DataType::Vector(VectorKind::Int2) => 22,
            DataType::Vector(VectorKind::Oid) => 30,
            DataType::Array(element) => match &**element {
                DataType::Bool => 1000,
                DataType::Bytea => 1001,
                DataType::Int2 => 1005,
                DataType::Int4 => 1007,
                DataType::Text => 1009,
                DataType::Varchar(_) => 1015,
                DataType::Int8 => 1016,
                DataType::Float4 => 1021,
                DataType::Float8 => 1022,
                DataType::Timestamp => 1115,
                DataType::Date => 1182,
                DataType::TimestampTz => 1185,
                DataType::Numeric | DataType::NumericTypmod { .. } => 1231,
                DataType::Uuid => 2951,
                DataType::Json => 199,
                DataType::Jsonb => 3807,
                DataType::Interval => 1187,
                DataType::Enum(t) => t.array_oid(),
                DataType::Oid => 1028,
                DataType::Name => 1003,
                DataType::Char => 1002,
                DataType::Vector(VectorKind::Int2) => 1006,
                DataType::Vector(VectorKind::Oid) => 1013,
                DataType::Array(_) => unreachable!("arrays of arrays are never built"),
            },
        }
    }

    /// The element type of an array type.
    pub fn element(&self) -> Option<&DataType> {
        match self {
            DataType::Array(e) => Some(e),
            _ => None,
        }
    }

    /// The array type of elements of this type.
    pub fn array_of(&self) -> DataType {
        match self {
            DataType::Array(_) => self.clone(),
            other => DataType::Array(Box::new(other.unconstrained())),
        }
    }

    /// The type with PostgreSQL OID `oid`, if we support it.
    pub fn from_pg_oid(oid: u32) -> Option<DataType> {
        Some(match oid {
            16 => DataType::Bool,
            17 => DataType::Bytea,
            20 => DataType::Int8,
            21 => DataType::Int2,
            23 => DataType::Int4,
            25 => DataType::Text,
            114 => DataType::Json,
            700 => DataType::Float4,
            701 => DataType::Float8,
            1043 => DataType::Varchar(None),
            1082 => DataType::Date,
            1114 => DataType::Timestamp,
            1184 => DataType::TimestampTz,
            1700 => DataType::Numeric,
            2950 => DataType::Uuid,
            3802 => DataType::Jsonb,
            1186 => DataType::Interval,
            26 => DataType::Oid,
            19 => DataType::Name,
            18 => DataType::Char,
            22 => DataType::Vector(VectorKind::Int2),
            30 => DataType::Vector(VectorKind::Oid),
            1000 | 1001 | 1005 | 1007 | 1009 | 1015 | 1016 | 1021 | 1022 | 1115 | 1182 | 1185
            | 1231 | 2951 | 199 | 3807 | 1187 | 1028 | 1003 | 1002 => {
                let element = [
                    16u32, 17, 21, 23, 25, 1043, 20, 700, 701, 1114, 1082, 1184, 1700, 2950, 114,
                    3802, 1186, 26, 19, 18,
                ]
                .into_iter()
                .filter_map(DataType::from_pg_oid)
                .find(|e| e.array_of().pg_oid() == oid)?;
                DataType::Array(Box::new(element))
            }
            _ => return None,
        })
    }

    /// Byte width for the wire protocol's RowDescription (-1: variable).
    pub fn pg_len(&self) -> i16 {
        match self {
            DataType::Bool | DataType::Char => 1,
            DataType::Int2 => 2,
            DataType::Int4 | DataType::Float4 | DataType::Date | DataType::Oid => 4,
            DataType::Name => 64,
            DataType::Int8 | DataType::Float8 | DataType::Timestamp | DataType::TimestampTz => 8,
            DataType::Uuid | DataType::Interval => 16,
            _ => -1,
        }
    }

    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            DataType::Int2
                | DataType::Int4
                | DataType::Int8
                | DataType::Float4
                | DataType::Float8
                | DataType::Numeric
                | DataType::NumericTypmod { .. }
                | DataType::Oid
        )
    }

    /// The type without a `numeric` precision and scale: what an expression
    /// reading a `numeric(p, s)` column has (as in PostgreSQL, arithmetic
    /// on it is plain `numeric`). Other types are unchanged.
    pub fn unconstrained(&self) -> DataType {
        match self {
            DataType::NumericTypmod { .. } => DataType::Numeric,
            DataType::Array(e) => DataType::Array(Box::new(e.unconstrained())),
            other => other.clone(),
        }
    }

    /// The type as a reader without this catalog's enum types takes it
    /// (the change feed's table headers, mirrors): an enum is its labels'
    /// text. Other types are unchanged.
    pub fn portable(&self) -> DataType {
        match self {
            DataType::Enum(_) => DataType::Text,
            DataType::Array(e) => DataType::Array(Box::new(e.portable())),
            other => other.clone(),
        }
    }

    pub fn is_textual(&self) -> bool {
        matches!(
            self,
            DataType::Text | DataType::Varchar(_) | DataType::Name | DataType::Char
        )
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataType::Int2 => "smallint",
            DataType::Int4 => "integer",
            DataType::Int8 => "bigint",
            DataType::Float4 => "real",
            DataType::Float8 => "double precision",
            DataType::Numeric => "numeric",
            DataType::NumericTypmod { precision, scale } => {
                return write!(f, "numeric({precision},{scale})")
            }
            DataType::Bool => "boolean",
            DataType::Text => "text",
            DataType::Varchar(None) => "character varying",
            DataType::Varchar(Some(n)) => return write!(f, "character varying({n})"),
            DataType::Bytea => "bytea",
            DataType::Timestamp => "timestamp without time zone",
            DataType::TimestampTz => "timestamp with time zone",
            DataType::Date => "date",
            DataType::Uuid => "uuid",
            DataType::Json => "json",
            DataType::Jsonb => "jsonb",
            DataType::Interval => "interval",
            DataType::Array(element) => return write!(f, "{element}[]"),
            DataType::Enum(t) => &t.name,
            DataType::Oid => "oid",
            DataType::Name => "name",
            DataType::Char => "\"char\"",
            DataType::Vector(VectorKind::Int2) => "int2vector",
            DataType::Vector(VectorKind::Oid) => "oidvector",
        })
    }
}

fn syntax(ty: &DataType, input: &str) -> ValueError {
    ValueError::Syntax {
        ty: ty.to_string(),
        input: input.chars().take(100).collect(),
    }
}

fn range(ty: &DataType) -> ValueError {
    ValueError::OutOfRange { ty: ty.to_string() }
}

/// PostgreSQL's error for text that is a number too large (or too small)
/// for `ty`: `value "3000000000" is out of range for type integer`.
fn input_range(ty: &DataType, input: &str, quoted_value: bool) -> ValueError {
    let input: String = input.chars().take(100).collect();
    ValueError::Range(if quoted_value {
        format!("value \"{input}\" is out of range for type {ty}")
    } else {
        format!("\"{input}\" is out of range for type {ty}")
    })
}

/// PostgreSQL's error for a number that does not fit an integer type:
/// `integer out of range`.
fn integer_range(ty: &DataType) -> ValueError {
    ValueError::Range(format!("{ty} out of range"))
}

fn int_in(ty: &DataType, i: i64) -> Result<Value, ValueError> {
    let ok = match ty {
        DataType::Int2 => i16::try_from(i).is_ok(),
        DataType::Int4 => i32::try_from(i).is_ok(),
        _ => true,
    };
    if ok {
        Ok(Value::Int(i))
    } else {
        Err(integer_range(ty))
    }
}

fn check_len(v: Value) -> Result<Value, ValueError> {
    let n = v.payload_len();
    if n > MAX_VALUE_BYTES {
        return Err(ValueError::TooLarge {
            bytes: n,
            limit: MAX_VALUE_BYTES,
        });
    }
    Ok(v)
}

/// Parses PostgreSQL's text form of a value of type `ty`.
pub(crate) fn parse_text(s: &str, ty: &DataType) -> Result<Value, ValueError> {
    let t = s.trim();
    match ty {
        DataType::Enum(e) => enum_label(e, s),
        DataType::Oid => parse_oid(t).ok_or_else(|| syntax(ty, s)),
        DataType::Name => check_len(Value::Text(truncate_name(s).to_string())),
        DataType::Char => Ok(Value::Text(first_byte_char(s))),
        DataType::Vector(kind) => {
            let element = match kind {
                VectorKind::Int2 => DataType::Int2,
                VectorKind::Oid => DataType::Oid,
            };
            Ok(Value::Array(
                t.split_whitespace()
                    .map(|n| parse_text(n, &element))
                    .collect::<Result<_, _>>()?,
            ))
        }
        DataType::Int2 | DataType::Int4 | DataType::Int8 => {
            let i: i64 = t.parse().map_err(|e: std::num::ParseIntError| {
                if matches!(
                    e.kind(),
                    std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
                ) {
                    input_range(ty, s, true)
                } else {
                    syntax(ty, s)
                }
            })?;
            int_in(ty, i).map_err(|_| input_range(ty, s, true))
        }
        DataType::Float4 | DataType::Float8 => parse_float(s, ty),
        DataType::Numeric => parse_numeric(t).map(Value::Numeric),
        DataType::NumericTypmod { precision, scale } => {
            numeric_typmod(parse_numeric(t)?, *precision, *scale).map(Value::Numeric)
        }
        DataType::Bool => match t.to_ascii_lowercase().as_str() {
            "t" | "true" | "y" | "yes" | "on" | "1" => Ok(Value::Bool(true)),
            "f" | "false" | "n" | "no" | "off" | "0" => Ok(Value::Bool(false)),
            _ => Err(syntax(ty, s)),
        },
        DataType::Text => check_len(Value::Text(s.to_string())),
        DataType::Varchar(_) => coerce(Value::Text(s.to_string()), ty),
        DataType::Bytea => {
            let bytes = match s.strip_prefix("\\x") {
                Some(hex) => decode_hex(hex).ok_or_else(|| syntax(ty, s))?,
                None => s.as_bytes().to_vec(),
            };
            check_len(Value::Bytes(bytes))
        }
        DataType::Timestamp => parse_timestamp(t, false)
            .map(Value::Timestamp)
            .ok_or_else(|| datetime_error(ty, s)),
        DataType::TimestampTz => parse_timestamp(t, true)
            .map(Value::TimestampTz)
            .ok_or_else(|| datetime_error(ty, s)),
        DataType::Date => parse_date(t)
            .map(Value::Date)
            .ok_or_else(|| datetime_error(ty, s)),
        DataType::Uuid => uuid::Uuid::parse_str(t)
            .map(|u| Value::Uuid(u.as_u128()))
            .map_err(|_| syntax(ty, s)),
        DataType::Interval => crate::parse_interval(s).map(crate::Interval::to_value),
        DataType::Json => {
            crate::Jsonb::validate_json(s)?;
            check_len(Value::Json(s.to_string()))
        }
        DataType::Jsonb => {
            if s.len() > MAX_VALUE_BYTES {
                return check_len(Value::Text(s.to_string()));
            }
            check_len(Value::Jsonb(crate::Jsonb::parse(s)?))
        }
        DataType::Array(element) => {
            if s.len() > MAX_VALUE_BYTES {
                return check_len(Value::Text(s.to_string()));
            }
            check_len(Value::Array(crate::parse_array(s, element)?))
        }
    }
}

/// An `oid` from its text: an unsigned 32-bit number (PostgreSQL also
/// takes a negative one, as its two's complement).
fn parse_oid(t: &str) -> Option<Value> {
    let i: i64 = t.parse().ok()?;
    match i {
        0..=0xFFFF_FFFF => Some(Value::Int(i)),
        -0x8000_0000..=-1 => Some(Value::Int(i + 0x1_0000_0000)),
        _ => None,
    }
}

/// The longest an identifier of type `name` is, in bytes (PostgreSQL's
/// NAMEDATALEN - 1): longer text is cut to it.
pub const NAME_MAX_BYTES: usize = 63;

fn truncate_name(s: &str) -> &str {
    let mut end = s.len().min(NAME_MAX_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A `"char"`'s value: the text's first character (PostgreSQL keeps its
/// first byte), empty for empty text.
fn first_byte_char(s: &str) -> String {
    s.chars().next().map(String::from).unwrap_or_default()
}

/// A date or timestamp that did not parse: 22008 when it has the shape of
/// one but a field is out of range (`2024-02-30`, `25:00`), else 22007.
fn datetime_error(ty: &DataType, s: &str) -> ValueError {
    if crate::text::has_datetime_shape(s.trim()) {
        ValueError::DatetimeField {
            input: s.chars().take(100).collect(),
        }
    } else {
        syntax(ty, s)
    }
}

/// `real` and `double precision` from text, as PostgreSQL's `float4in` and
/// `float8in`: a number that overflows to infinity or underflows to zero is
/// out of range (22003); `Infinity`, `-inf` and `NaN` are values.
fn parse_float(s: &str, ty: &DataType) -> Result<Value, ValueError> {
    let t = s.trim();
    let special = match t.to_ascii_lowercase().as_str() {
        "nan" | "+nan" | "-nan" => Some(f64::NAN),
        "infinity" | "+infinity" | "inf" | "+inf" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    };
    if let Some(f) = special {
        return Ok(Value::Float(f));
    }
    let nonzero = t
        .split(['e', 'E'])
        .next()
        .is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b)));
    let f = if *ty == DataType::Float4 {
        let f: f32 = t.parse().map_err(|_| syntax(ty, s))?;
        if f.is_infinite() || (f == 0.0 && nonzero) {
            return Err(input_range(ty, s, false));
        }
        f as f64
    } else {
        let f: f64 = t.parse().map_err(|_| syntax(ty, s))?;
        if f.is_infinite() || (f == 0.0 && nonzero) {
            return Err(input_range(ty, s, false));
        }
        f
    };
    Ok(Value::Float(f))
}

/// Significant digits a `numeric` holds (rust_decimal's 96-bit mantissa).
pub const MAX_NUMERIC_DIGITS: usize = 28;

/// Parses a `numeric`, refusing (rather than rounding) values with more
/// significant digits than it can hold exactly.
pub fn parse_numeric(t: &str) -> Result<Decimal, ValueError> {
    let ty = DataType::Numeric;
    let mantissa = t.split(['e', 'E']).next().unwrap_or(t);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let significant = digits.trim_start_matches('0').len();
    if significant > MAX_NUMERIC_DIGITS {
        return Err(ValueError::OutOfRange {
            ty: format!("numeric (at most {MAX_NUMERIC_DIGITS} significant digits)"),
        });
    }
    let d = match t.parse::<Decimal>() {
        Ok(d) => d,
        Err(_) if t.contains(['e', 'E']) && mantissa.bytes().any(|b| b.is_ascii_digit()) => {
            Decimal::from_scientific(t).map_err(|_| ValueError::OutOfRange {
                ty: format!(
                    "numeric (at most {MAX_NUMERIC_DIGITS} significant digits and decimal places)"
                ),
            })?
        }
        Err(_) => return Err(syntax(&ty, t)),
    };
    Ok(positive_zero(d))
}

/// PostgreSQL's numeric has no negative zero.
fn positive_zero(mut d: Decimal) -> Decimal {
    if d.is_zero() {
        d.set_sign_positive(true);
    }
    d
}

/// Rounds `d` (half away from zero) to `scale` places and checks that it
/// fits `numeric(precision, scale)`, as PostgreSQL stores into such a column.
pub fn numeric_typmod(d: Decimal, precision: u32, scale: u32) -> Result<Decimal, ValueError> {
    let too_many = || ValueError::OutOfRange {
        ty: format!(
            "numeric({precision},{scale}) (at most {MAX_NUMERIC_DIGITS} significant digits)"
        ),
    };
    if scale > MAX_NUMERIC_DIGITS as u32 {
        return Err(too_many());
    }
    let mut r =
        d.round_dp_with_strategy(scale, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
    // Pad to the scale (1 is 1.00 in numeric(10,2)).
    if r.scale() < scale {
        let m = r.mantissa();
        let padded = 10i128
            .checked_pow(scale - r.scale())
            .and_then(|p| m.checked_mul(p))
            .ok_or_else(too_many)?;
        r = Decimal::try_from_i128_with_scale(padded, scale).map_err(|_| too_many())?;
    }
    // |r| < 10^(precision - scale).
    let bound = if precision >= scale {
        match 10i128.checked_pow(precision - scale) {
            Some(b) if precision - scale <= MAX_NUMERIC_DIGITS as u32 => {
                Some(Decimal::from_i128_with_scale(b, 0))
            }
            _ => None,
        }
    } else {
        Some(Decimal::from_i128_with_scale(1, scale - precision))
    };
    if bound.is_some_and(|b| r.abs() >= b) {
        return Err(ValueError::NumericFieldOverflow { precision, scale });
    }
    Ok(positive_zero(r))
}

fn float_in(ty: &DataType, f: f64) -> Result<Value, ValueError> {
    if *ty == DataType::Float4 {
        let narrow = f as f32;
        if f.is_finite() && narrow.is_infinite() {
            return Err(ValueError::Range("value out of range: overflow".into()));
        }
        if f != 0.0 && narrow == 0.0 {
            return Err(ValueError::Range("value out of range: underflow".into()));
        }
        return Ok(Value::Float(narrow as f64));
    }
    Ok(Value::Float(f))
}

/// A `numeric` as PostgreSQL's `float4_numeric` makes it from a `real`: its
/// 6 significant digits (`FLT_DIG`), without trailing zeros
/// (`123456.7::real::numeric` is 123457).
pub fn real_to_numeric(f: f32) -> Result<Decimal, ValueError> {
    float_digits_to_numeric(f as f64, 6, &DataType::Numeric)
}

/// A `numeric` as PostgreSQL's `float8_numeric` makes it: the float's 15
/// significant digits (`DBL_DIG`), without trailing zeros.
fn float_to_numeric(f: f64, ty: &DataType) -> Result<Decimal, ValueError> {
    float_digits_to_numeric(f, 15, ty)
}

fn float_digits_to_numeric(f: f64, digits: usize, ty: &DataType) -> Result<Decimal, ValueError> {
    if !f.is_finite() {
        return Err(ValueError::Range(format!(
            "cannot convert {} to numeric",
            if f.is_nan() { "NaN" } else { "infinity" }
        )));
    }
    if f == 0.0 {
        return Ok(Decimal::ZERO);
    }
    let text = format!("{f:.*e}", digits - 1);
    let d = Decimal::from_scientific(&text).map_err(|_| range(ty))?;
    Ok(positive_zero(d.normalize()))
}

/// A `numeric` as a float, correctly rounded (through its text, as
/// PostgreSQL converts).
fn numeric_to_float(d: &Decimal, ty: &DataType) -> Result<Value, ValueError> {
    let text = d.to_string();
    if *ty == DataType::Float4 {
        let f: f32 = text.parse().map_err(|_| range(ty))?;
        if f.is_infinite() {
            return Err(ValueError::Range("value out of range: overflow".into()));
        }
        return Ok(Value::Float(f as f64));
    }
    Ok(Value::Float(text.parse().map_err(|_| range(ty))?))
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The value of enum type `t` labelled `label`: 22P02 when it has none.
fn enum_label(t: &crate::EnumType, label: &str) -> Result<Value, ValueError> {
    match t.sort_of(label) {
        Some(sort) => Ok(Value::Enum(sort, label.into())),
        None => Err(ValueError::EnumLabel {
            ty: t.name.clone(),
            input: label.chars().take(100).collect(),
        }),
    }
}

pub(crate) fn coerce(v: Value, ty: &DataType) -> Result<Value, ValueError> {
    let mismatch = |v: &Value| ValueError::Mismatch {
        from: v.kind_name().to_string(),
        to: ty.to_string(),
    };
    if let DataType::NumericTypmod { precision, scale } = ty {
        return match coerce(v, &DataType::Numeric)? {
            Value::Numeric(d) => numeric_typmod(d, *precision, *scale).map(Value::Numeric),
            other => Ok(other),
        };
    }
    match (v, ty) {
        (Value::Null, _) => Ok(Value::Null),
        (Value::Text(s), DataType::Text) => check_len(Value::Text(s)),
        (Value::Text(s), DataType::Varchar(limit)) => {
            if let Some(n) = limit {
                if s.chars().count() > *n as usize {
                    return Err(ValueError::TooLong { ty: ty.to_string() });
                }
            }
            check_len(Value::Text(s))
        }
        (Value::Text(s), DataType::Enum(t)) => enum_label(t, &s),
        (Value::Enum(_, label), DataType::Enum(t)) => enum_label(t, &label),
        (Value::Text(s), _) => parse_text(&s, ty),
        (Value::Int(i), DataType::Int2 | DataType::Int4 | DataType::Int8) => int_in(ty, i),
        (Value::Int(i), DataType::Oid) => {
            parse_oid(&i.to_string()).ok_or_else(|| integer_range(ty))
        }
        (Value::Int(i), DataType::Float4 | DataType::Float8) => float_in(ty, i as f64),
        (Value::Int(i), DataType::Numeric) => Ok(Value::Numeric(Decimal::from(i))),
        (Value::Float(f), DataType::Float4 | DataType::Float8) => float_in(ty, f),
        (Value::Float(f), DataType::Int2 | DataType::Int4 | DataType::Int8) => {
            let r = f.round_ties_even();
            if !r.is_finite() || r < i64::MIN as f64 || r >= i64::MAX as f64 {
                return Err(integer_range(ty));
            }
            int_in(ty, r as i64)
        }
        (Value::Float(f), DataType::Numeric) => float_to_numeric(f, ty).map(Value::Numeric),
        (Value::Numeric(d), DataType::Numeric) => Ok(Value::Numeric(d)),
        (Value::Numeric(d), DataType::Int2 | DataType::Int4 | DataType::Int8) => {
            let r =
                d.round_dp_with_strategy(0, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
            int_in(ty, r.to_i64().ok_or_else(|| integer_range(ty))?)
        }
        (Value::Numeric(d), DataType::Float4 | DataType::Float8) => numeric_to_float(&d, ty),
        (Value::Bool(b), DataType::Bool) => Ok(Value::Bool(b)),
        // The cast to text spells booleans out (the output form is t/f).
        (Value::Bool(b), DataType::Text | DataType::Varchar(_)) => {
            coerce(Value::Text(if b { "true" } else { "false" }.into()), ty)
        }
        (Value::Bytes(b), DataType::Bytea) => check_len(Value::Bytes(b)),
        (Value::Timestamp(t), DataType::Timestamp) => Ok(Value::Timestamp(t)),
        (Value::TimestampTz(t), DataType::TimestampTz) => Ok(Value::TimestampTz(t)),
        (Value::Timestamp(t), DataType::TimestampTz) => Ok(Value::TimestampTz(t)),
        (Value::TimestampTz(t), DataType::Timestamp) => Ok(Value::Timestamp(t)),
        (Value::Date(d), DataType::Date) => Ok(Value::Date(d)),
        (Value::Date(d), DataType::Timestamp) => Ok(Value::Timestamp(
            (d as i64)
                .checked_mul(DAY_MICROS)
                .ok_or_else(|| range(ty))?,
        )),
        (Value::Date(d), DataType::TimestampTz) => Ok(Value::TimestampTz(
            (d as i64)
                .checked_mul(DAY_MICROS)
                .ok_or_else(|| range(ty))?,
        )),
        (Value::Timestamp(t) | Value::TimestampTz(t), DataType::Date) => {
            Ok(Value::Date(t.div_euclid(DAY_MICROS) as i32))
        }
        (Value::Uuid(u), DataType::Uuid) => Ok(Value::Uuid(u)),
        (v @ Value::Interval { .. }, DataType::Interval) => Ok(v),
        (Value::Json(s), DataType::Json) => Ok(Value::Json(s)),
        (Value::Json(s), DataType::Jsonb) => parse_text(&s, ty),
        (Value::Jsonb(j), DataType::Jsonb) => Ok(Value::Jsonb(j)),
        (Value::Jsonb(j), DataType::Json) => Ok(Value::Json(j.to_string())),
        (Value::Json(s), DataType::Text | DataType::Varchar(_)) => coerce(Value::Text(s), ty),
        (Value::Array(items), DataType::Vector(_)) => Ok(Value::Array(items)),
        (Value::Array(items), DataType::Array(element)) => Ok(Value::Array(
            items
                .into_iter()
                .map(|v| coerce(v, element))
                .collect::<Result<_, _>>()?,
        )),
        (v, DataType::Name | DataType::Char) => match v.to_text() {
            Some(t) => parse_text(&t, ty),
            None => Ok(Value::Null),
        },
        (v, DataType::Text | DataType::Varchar(_)) => match v.to_text() {
            Some(t) => coerce(Value::Text(t), ty),
            None => Ok(Value::Null),
        },
        (v, _) => Err(mismatch(&v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_enforced() {
        assert!(Value::Int(40_000).coerce(&DataType::Int2).is_err());
        assert!(Value::Int(40_000).coerce(&DataType::Int4).is_ok());
        assert_eq!(
            Value::Text("12".into()).coerce(&DataType::Int4).unwrap(),
            Value::Int(12)
        );
        let e = Value::Text("x1".into())
            .coerce(&DataType::Int4)
            .unwrap_err();
        assert_eq!(e.sqlstate(), "22P02");
        let e = Value::Text("abcd".into())
            .coerce(&DataType::Varchar(Some(3)))
            .unwrap_err();
        assert_eq!(e.sqlstate(), "22001");
        let e = Value::Text("{bad".into())
            .coerce(&DataType::Jsonb)
            .unwrap_err();
        assert_eq!(e.sqlstate(), "22P02");
    }

    #[test]
    fn out_of_range_errors_read_as_postgres() {
        let msg = |r: Result<Value, ValueError>| {
            let e = r.unwrap_err();
            (e.sqlstate(), e.to_string())
        };
        assert_eq!(
            msg(Value::Int(2_147_483_648).coerce(&DataType::Int4)),
            ("22003", "integer out of range".into())
        );
        assert_eq!(
            msg(Value::Int(32_768).coerce(&DataType::Int2)),
            ("22003", "smallint out of range".into())
        );
        assert_eq!(
            msg(Value::Text("3000000000".into()).coerce(&DataType::Int4)),
            (
                "22003",
                "value \"3000000000\" is out of range for type integer".into()
            )
        );
        // '1e400'::float8, '1e-400'::float8 and '1e39'::real overflow or
        // underflow; a denormal is a value.
        for (text, ty) in [
            ("1e400", DataType::Float8),
            ("-1e400", DataType::Float8),
            ("1e-400", DataType::Float8),
            ("1e39", DataType::Float4),
            ("1e-50", DataType::Float4),
        ] {
            let (code, m) = msg(Value::Text(text.into()).coerce(&ty));
            assert_eq!(code, "22003");
            assert_eq!(m, format!("\"{text}\" is out of range for type {ty}"));
        }
        assert_eq!(
            parse_text("1e-310", &DataType::Float8).unwrap(),
            Value::Float(1e-310)
        );
        assert!(parse_text("-Infinity", &DataType::Float8)
            .is_ok_and(|v| v == Value::Float(f64::NEG_INFINITY)));
        assert!(parse_text("x1", &DataType::Float8).is_err());
        // 1e39::float8::real overflows, 1e-50::float8::real underflows.
        assert_eq!(
            msg(Value::Float(1e39).coerce(&DataType::Float4)).1,
            "value out of range: overflow"
        );
        assert_eq!(
            msg(Value::Float(1e-50).coerce(&DataType::Float4)).1,
            "value out of range: underflow"
        );
    }

    #[test]
    fn impossible_dates_are_field_errors() {
        // '2024-02-30'::date is 22008 in PostgreSQL, 'abc'::date 22007.
        for (text, ty, code) in [
            ("2024-02-30", DataType::Date, "22008"),
            ("2024-13-01", DataType::Date, "22008"),
            ("abc", DataType::Date, "22007"),
            ("2024-02-30 10:00", DataType::Timestamp, "22008"),
            ("2024-02-01 25:00", DataType::Timestamp, "22008"),
            ("2024-02-01 25:00+02", DataType::TimestampTz, "22008"),
            ("yesterday-ish", DataType::Timestamp, "22007"),
        ] {
            let e = Value::Text(text.into()).coerce(&ty).unwrap_err();
            assert_eq!(e.sqlstate(), code, "{text}");
        }
        let e = Value::Text("2024-02-30".into())
            .coerce(&DataType::Date)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "date/time field value out of range: \"2024-02-30\""
        );
    }

    #[test]
    fn booleans_cast_to_text_are_spelled_out() {
        // true::text is 'true' in PostgreSQL; the output form stays t/f.
        assert_eq!(
            Value::Bool(true).coerce(&DataType::Text).unwrap(),
            Value::Text("true".into())
        );
        assert_eq!(
            Value::Bool(false).coerce(&DataType::Varchar(None)).unwrap(),
            Value::Text("false".into())
        );
        assert_eq!(Value::Bool(true).to_text().unwrap(), "t");
    }

    #[test]
    fn numeric_typmod_rounds_pads_and_overflows() {
        let ty = DataType::from_sql("numeric", &[10, 2]).unwrap();
        assert_eq!(ty.to_string(), "numeric(10,2)");
        assert_eq!(ty.unconstrained(), DataType::Numeric);
        let text = |v: &str, ty: &DataType| {
            Value::Text(v.into())
                .coerce(ty)
                .map(|v| v.to_text().unwrap())
        };
        // PostgreSQL: 1.234 -> 1.23, 1 -> 1.00, 1.235 -> 1.24, -1.235 -> -1.24.
        assert_eq!(text("1.234", &ty).unwrap(), "1.23");
        assert_eq!(text("1", &ty).unwrap(), "1.00");
        assert_eq!(text("1.235", &ty).unwrap(), "1.24");
        assert_eq!(text("-1.235", &ty).unwrap(), "-1.24");
        assert_eq!(text("-0.001", &ty).unwrap(), "0.00");
        assert_eq!(
            Value::Int(1).coerce(&ty).unwrap().to_text().unwrap(),
            "1.00"
        );
        let six_two = DataType::from_sql("numeric", &[6, 2]).unwrap();
        let e = text("123456.78", &six_two).unwrap_err();
        assert_eq!(e.sqlstate(), "22003");
        assert_eq!(e.to_string(), "numeric field overflow");
        assert_eq!(
            e.detail().unwrap(),
            "A field with precision 6, scale 2 must round to an absolute value less than 10^4."
        );
        // 9999.995 rounds to 10000.00, which does not fit either.
        assert!(text("9999.995", &six_two).is_err());
        assert_eq!(text("9999.994", &six_two).unwrap(), "9999.99");
        let three = DataType::from_sql("numeric", &[3]).unwrap();
        assert_eq!(text("999.4", &three).unwrap(), "999");
        assert!(text("999.5", &three).is_err());
        // numeric(3,5) holds values below 10^-2.
        let tiny = DataType::from_sql("numeric", &[3, 5]).unwrap();
        assert_eq!(text("0.001234", &tiny).unwrap(), "0.00123");
        assert!(text("0.01", &tiny).is_err());
        assert!(DataType::from_sql("numeric", &[0]).is_none());
    }

    #[test]
    fn floats_become_numerics_with_fifteen_digits() {
        // PostgreSQL's float8 -> numeric keeps 15 significant digits.
        for (f, text) in [
            (0.1, "0.1"),
            (1.0 / 3.0, "0.333333333333333"),
            (123456789012345678.0, "123456789012346000"),
            (1e20, "100000000000000000000"),
            (-0.0, "0"),
        ] {
            let v = Value::Float(f).coerce(&DataType::Numeric).unwrap();
            assert_eq!(v.to_text().unwrap(), text);
        }
        assert!(Value::Float(f64::NAN).coerce(&DataType::Numeric).is_err());
        // A real keeps 6: 123456.7::real::numeric is 123457.
        assert_eq!(real_to_numeric(123456.7).unwrap().to_string(), "123457");
        assert_eq!(real_to_numeric(0.1).unwrap().to_string(), "0.1");
        // And back, correctly rounded.
        let d = parse_numeric("0.1").unwrap();
        assert_eq!(
            Value::Numeric(d).coerce(&DataType::Float8).unwrap(),
            Value::Float(0.1)
        );
    }

    #[test]
    fn exponent_numerics_keep_postgres_scale() {
        // 1.50e1 is 15.0, 1e5 is 100000, 1.5e-3 is 0.0015.
        for (text, shown) in [
            ("1.50e1", "15.0"),
            ("1e5", "100000"),
            ("1.5e-3", "0.0015"),
            ("1e-10", "0.0000000001"),
        ] {
            assert_eq!(parse_numeric(text).unwrap().to_string(), shown);
        }
        assert_eq!(parse_numeric("1e400").unwrap_err().sqlstate(), "22003");
        assert_eq!(parse_numeric("1x").unwrap_err().sqlstate(), "22P02");
    }

    #[test]
    fn text_forms_round_trip() {
        for (ty, s) in [
            (DataType::Bool, "t"),
            (DataType::Int8, "-42"),
            (DataType::Float8, "1.5"),
            (DataType::Numeric, "12.3400"),
            (DataType::Bytea, "\\x00ff10"),
            (DataType::Timestamp, "2024-02-29 13:45:01.25"),
            (DataType::TimestampTz, "2024-02-29 13:45:01+00"),
            (DataType::Date, "1999-12-31"),
            (DataType::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            (DataType::Json, "{\"a\": [1, 2]}"),
            (DataType::Interval, "1 year 2 mons -3 days +04:05:06.789"),
            (DataType::Interval, "-00:00:00.000001"),
        ] {
            let v = parse_text(s, &ty).unwrap();
            assert_eq!(v.to_text().unwrap(), s, "{ty}");
        }
    }

    #[test]
    fn oids_round_trip() {
        for ty in [
            DataType::Int2,
            DataType::Int4,
            DataType::Int8,
            DataType::Float4,
            DataType::Float8,
            DataType::Numeric,
            DataType::Bool,
            DataType::Text,
            DataType::Bytea,
            DataType::Timestamp,
            DataType::TimestampTz,
            DataType::Date,
            DataType::Uuid,
            DataType::Json,
            DataType::Jsonb,
            DataType::Interval,
            DataType::Array(Box::new(DataType::Interval)),
        ] {
            assert_eq!(DataType::from_pg_oid(ty.pg_oid()), Some(ty));
        }
    }
}
