//! Column types and conversion of values into them.

use std::fmt;

use rust_decimal::prelude::{FromPrimitive, ToPrimitive};
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
}

impl DataType {
    /// Parses a SQL type name (lower case, without modifiers) and its modifiers.
    pub fn from_sql(name: &str, modifiers: &[u64]) -> Option<DataType> {
        Some(match name {
            "smallint" | "int2" => DataType::Int2,
            "integer" | "int" | "int4" | "serial" => DataType::Int4,
            "bigint" | "int8" | "bigserial" => DataType::Int8,
            "real" | "float4" => DataType::Float4,
            "double precision" | "float8" | "double" | "float" => DataType::Float8,
            "numeric" | "decimal" => DataType::Numeric,
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
            DataType::Numeric => 1700,
            DataType::Uuid => 2950,
            DataType::Jsonb => 3802,
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
            _ => return None,
        })
    }

    /// Byte width for the wire protocol's RowDescription (-1: variable).
    pub fn pg_len(&self) -> i16 {
        match self {
            DataType::Bool => 1,
            DataType::Int2 => 2,
            DataType::Int4 | DataType::Float4 | DataType::Date => 4,
            DataType::Int8 | DataType::Float8 | DataType::Timestamp | DataType::TimestampTz => 8,
            DataType::Uuid => 16,
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
        )
    }

    pub fn is_textual(&self) -> bool {
        matches!(self, DataType::Text | DataType::Varchar(_))
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

fn int_in(ty: &DataType, i: i64) -> Result<Value, ValueError> {
    let ok = match ty {
        DataType::Int2 => i16::try_from(i).is_ok(),
        DataType::Int4 => i32::try_from(i).is_ok(),
        _ => true,
    };
    if ok {
        Ok(Value::Int(i))
    } else {
        Err(range(ty))
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
        DataType::Int2 | DataType::Int4 | DataType::Int8 => {
            let i: i64 = t.parse().map_err(|e: std::num::ParseIntError| {
                if matches!(
                    e.kind(),
                    std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
                ) {
                    range(ty)
                } else {
                    syntax(ty, s)
                }
            })?;
            int_in(ty, i)
        }
        DataType::Float4 | DataType::Float8 => {
            let f = match t.to_ascii_lowercase().as_str() {
                "nan" => f64::NAN,
                "infinity" | "+infinity" | "inf" => f64::INFINITY,
                "-infinity" | "-inf" => f64::NEG_INFINITY,
                _ => t.parse::<f64>().map_err(|_| syntax(ty, s))?,
            };
            float_in(ty, f)
        }
        DataType::Numeric => parse_numeric(t).map(Value::Numeric),
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
            .ok_or_else(|| syntax(ty, s)),
        DataType::TimestampTz => parse_timestamp(t, true)
            .map(Value::TimestampTz)
            .ok_or_else(|| syntax(ty, s)),
        DataType::Date => parse_date(t).map(Value::Date).ok_or_else(|| syntax(ty, s)),
        DataType::Uuid => uuid::Uuid::parse_str(t)
            .map(|u| Value::Uuid(u.as_u128()))
            .map_err(|_| syntax(ty, s)),
        DataType::Json | DataType::Jsonb => {
            serde_json::from_str::<serde_json::Value>(s).map_err(|_| syntax(ty, s))?;
            check_len(Value::Json(s.to_string()))
        }
    }
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
    t.parse::<Decimal>()
        .or_else(|_| Decimal::from_scientific(t))
        .map_err(|_| syntax(&ty, t))
}

fn float_in(ty: &DataType, f: f64) -> Result<Value, ValueError> {
    if *ty == DataType::Float4 {
        if f.is_finite() && (f as f32).is_infinite() {
            return Err(range(ty));
        }
        return Ok(Value::Float(f as f32 as f64));
    }
    Ok(Value::Float(f))
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

pub(crate) fn coerce(v: Value, ty: &DataType) -> Result<Value, ValueError> {
    let mismatch = |v: &Value| ValueError::Mismatch {
        from: v.kind_name().to_string(),
        to: ty.to_string(),
    };
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
        (Value::Text(s), _) => parse_text(&s, ty),
        (Value::Int(i), DataType::Int2 | DataType::Int4 | DataType::Int8) => int_in(ty, i),
        (Value::Int(i), DataType::Float4 | DataType::Float8) => float_in(ty, i as f64),
        (Value::Int(i), DataType::Numeric) => Ok(Value::Numeric(Decimal::from(i))),
        (Value::Float(f), DataType::Float4 | DataType::Float8) => float_in(ty, f),
        (Value::Float(f), DataType::Int2 | DataType::Int4 | DataType::Int8) => {
            let r = f.round_ties_even();
            if !r.is_finite() || r < i64::MIN as f64 || r >= i64::MAX as f64 {
                return Err(range(ty));
            }
            int_in(ty, r as i64)
        }
        (Value::Float(f), DataType::Numeric) => Decimal::from_f64(f)
            .map(Value::Numeric)
            .ok_or_else(|| range(ty)),
        (Value::Numeric(d), DataType::Numeric) => Ok(Value::Numeric(d)),
        (Value::Numeric(d), DataType::Int2 | DataType::Int4 | DataType::Int8) => {
            let r =
                d.round_dp_with_strategy(0, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
            int_in(ty, r.to_i64().ok_or_else(|| range(ty))?)
        }
        (Value::Numeric(d), DataType::Float4 | DataType::Float8) => {
            float_in(ty, d.to_f64().ok_or_else(|| range(ty))?)
        }
        (Value::Bool(b), DataType::Bool) => Ok(Value::Bool(b)),
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
        (Value::Json(s), DataType::Json | DataType::Jsonb) => Ok(Value::Json(s)),
        (Value::Json(s), DataType::Text | DataType::Varchar(_)) => coerce(Value::Text(s), ty),
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
        ] {
            assert_eq!(DataType::from_pg_oid(ty.pg_oid()), Some(ty));
        }
    }
}
