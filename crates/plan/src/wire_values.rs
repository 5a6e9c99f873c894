//! Values in PostgreSQL's text and binary formats (those of the wire
//! protocol and of `COPY`) for the types Aqueduct has, in both directions:
//! shared by the PostgreSQL front end (`crates/pg`) and `COPY` (`copy.rs`).
//!
//! Binary formats follow PostgreSQL's `*send`/`*recv` functions. Dates and
//! timestamps count from 2000-01-01 on the wire but from 1970-01-01 in
//! [`Value`], hence the epoch shifts below. An interval is its three
//! fields as `interval_send` writes them: i64 microseconds, i32 days,
//! i32 months.

use aqueduct_expr::SqlError;
use aqueduct_values::{DataType, Decimal, Value};
use bytes::{BufMut, BytesMut};

/// Days from 1970-01-01 to 2000-01-01 (PostgreSQL's epoch).
pub const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
pub const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS as i64 * 86_400_000_000;

/// The version byte that starts a binary `jsonb` value.
const JSONB_VERSION: u8 = 1;

/// A binary interval: microseconds, days, months.
pub const INTERVAL_BYTES: usize = 16;

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
/// PostgreSQL's limit on a numeric's display scale.
const NUMERIC_MAX_DSCALE: u16 = 0x3FFF;
/// Base-10000 digits a `Decimal` (96-bit mantissa, < 8e28) can need before
/// the decimal point; a larger weight cannot fit.
const NUMERIC_MAX_WEIGHT: i16 = 7;
/// Largest scale a `Decimal` carries.
const DECIMAL_MAX_SCALE: u32 = 28;

fn cannot_send(v: &Value, ty: &DataType) -> SqlError {
    SqlError::new(
        "XX000",
        format!("cannot send a {} value as {ty}", v.kind_name()),
    )
}

/// Appends one value (not NULL) in text format.
pub fn encode_text(v: &Value, ty: &DataType, out: &mut BytesMut) -> Result<(), SqlError> {
    // A float4 is held as the f64 nearest to it; printed as f64 it would show
    // digits the float4 never had (0.1 as 0.10000000149011612).
    if let (DataType::Float4, Value::Float(f)) = (ty, v) {
        out.put_slice(aqueduct_values::format_float4(*f as f32).as_bytes());
        return Ok(());
    }
    // An int2vector or oidvector is its numbers separated by spaces.
    if let (DataType::Vector(_), Value::Array(items)) = (ty, v) {
        let text: Vec<String> = items.iter().filter_map(Value::to_text).collect();
        out.put_slice(text.join(" ").as_bytes());
        return Ok(());
    }
    if let (DataType::Array(element), Value::Array(items)) = (ty, v) {
        if **element == DataType::Float4 {
            let text = aqueduct_values::format_array(items, |e| match e {
                Value::Float(f) => Some(aqueduct_values::format_float4(*f as f32)),
                other => other.to_text(),
            });
            out.put_slice(text.as_bytes());
            return Ok(());
        }
    }
    match v.to_text() {
        Some(s) => {
            out.put_slice(s.as_bytes());
            Ok(())
        }
        None => Err(cannot_send(v, ty)),
    }
}

/// Appends one value (not NULL) in binary format for a column of type `ty`.
pub fn encode_binary(v: &Value, ty: &DataType, out: &mut BytesMut) -> Result<(), SqlError> {
    let range = || {
        SqlError::new(
            "22003",
            format!("{} value out of range for type {ty}", v.kind_name()),
        )
    };
    match (ty, v) {
        (DataType::Int2, Value::Int(i)) => out.put_i16(i16::try_from(*i).map_err(|_| range())?),
        (DataType::Int4, Value::Int(i)) => out.put_i32(i32::try_from(*i).map_err(|_| range())?),
        (DataType::Int8, Value::Int(i)) => out.put_i64(*i),
        (DataType::Oid, Value::Int(i)) => out.put_u32(u32::try_from(*i).map_err(|_| range())?),
        // `name` and `"char"` send their bytes (a `"char"` is one byte).
        (DataType::Name | DataType::Char, Value::Text(s)) => out.put_slice(s.as_bytes()),
        (DataType::Float4, Value::Float(f)) => out.put_f32(*f as f32),
        (DataType::Float8, Value::Float(f)) => out.put_f64(*f),
        (DataType::Numeric | DataType::NumericTypmod { .. }, Value::Numeric(d)) => {
            encode_numeric(d, out)
        }
        (DataType::Bool, Value::Bool(b)) => out.put_u8(u8::from(*b)),
        (DataType::Text | DataType::Varchar(_), Value::Text(s)) => out.put_slice(s.as_bytes()),
        (DataType::Bytea, Value::Bytes(b)) => out.put_slice(b),
        (DataType::Timestamp, Value::Timestamp(t))
        | (DataType::TimestampTz, Value::TimestampTz(t)) => {
            out.put_i64(t.checked_sub(PG_EPOCH_MICROS).ok_or_else(range)?)
        }
        (DataType::Date, Value::Date(d)) => {
            out.put_i32(d.checked_sub(PG_EPOCH_DAYS).ok_or_else(range)?)
        }
        (DataType::Uuid, Value::Uuid(u)) => out.put_u128(*u),
        (
            DataType::Interval,
            Value::Interval {
                months,
                days,
                micros,
            },
        ) => {
            out.put_i64(*micros);
            out.put_i32(*days);
            out.put_i32(*months);
        }
        (DataType::Json, Value::Json(s)) => out.put_slice(s.as_bytes()),
        // An enum's binary form is its label (`enum_send`).
        (DataType::Enum(_), Value::Enum(_, label)) => out.put_slice(label.as_bytes()),
        (DataType::Array(element), Value::Array(items)) => encode_array(items, element, out)?,
        (DataType::Jsonb, Value::Json(s)) => {
            out.put_u8(JSONB_VERSION);
            out.put_slice(s.as_bytes());
        }
        // The text types' binary format is their text: anything printable fits.
        (DataType::Text | DataType::Varchar(_) | DataType::Json, v) => encode_text(v, ty, out)?,
        (DataType::Jsonb, v) => {
            out.put_u8(JSONB_VERSION);
            encode_text(v, ty, out)?;
        }
        // A computed column whose values are of another kind than its declared
        // type (an int in a numeric column, say): convert once, then send.
        (_, v) => {
            let converted = v.clone().coerce(ty).map_err(|_| cannot_send(v, ty))?;
            if std::mem::discriminant(&converted) == std::mem::discriminant(v) {
                return Err(cannot_send(v, ty));
            }
            encode_binary(&converted, ty, out)?
        }
    }
    Ok(())
}

/// PostgreSQL's binary array (`array_send`): dimensions (0 for an empty
/// array, else 1), a has-NULLs flag, the element type's OID, then per
/// dimension its length and lower bound (1), then each element as a
/// length (-1 for NULL) and its binary form.
fn encode_array(items: &[Value], element: &DataType, out: &mut BytesMut) -> Result<(), SqlError> {
    let count = i32::try_from(items.len())
        .map_err(|_| SqlError::new("54000", "array too large to send"))?;
    out.put_i32(i32::from(!items.is_empty()));
    out.put_i32(i32::from(items.iter().any(Value::is_null)));
    out.put_u32(element.pg_oid());
    if !items.is_empty() {
        out.put_i32(count);
        out.put_i32(1);
    }
    for item in items {
        if item.is_null() {
            out.put_i32(-1);
            continue;
        }
        let at = out.len();
        out.put_i32(0);
        encode_binary(item, element, out)?;
        let len = i32::try_from(out.len() - at - 4)
            .map_err(|_| SqlError::new("54000", "array element too large to send"))?;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// Reads PostgreSQL's binary array of `element` values (`array_recv`):
/// one dimension at most, elements of the declared element type.
fn decode_array(b: &[u8], ty: &DataType, element: &DataType) -> Result<Value, SqlError> {
    let mut at = 0usize;
    let mut next = |n: usize| -> Result<&[u8], SqlError> {
        let part = b
            .get(at..at + n)
            .ok_or_else(|| bad_binary(ty, "cut short"))?;
        at += n;
        Ok(part)
    };
    let int = |bytes: &[u8]| i32::from_be_bytes(bytes.try_into().expect("four bytes"));
    let dims = int(next(4)?);
    let _has_nulls = int(next(4)?);
    let oid = u32::from_be_bytes(next(4)?.try_into().expect("four bytes"));
    if oid != element.pg_oid() {
        return Err(SqlError::new(
            "42804",
            format!(
                "binary data has array element type {oid} instead of expected {}",
                element.pg_oid()
            ),
        ));
    }
    let count = match dims {
        0 => 0,
        1 => {
            let n = int(next(4)?);
            let _lower = int(next(4)?);
            usize::try_from(n).map_err(|_| bad_binary(ty, "negative length"))?
        }
        _ => return Err(SqlError::unsupported("multidimensional arrays")),
    };
    if count > aqueduct_values::MAX_ARRAY_ELEMENTS {
        return Err(bad_binary(ty, "too many elements"));
    }
    let mut items = Vec::with_capacity(count.min(b.len()));
    for _ in 0..count {
        let len = int(next(4)?);
        if len < 0 {
            items.push(Value::Null);
            continue;
        }
        let body = next(len as usize)?;
        items.push(decode_binary(body, element)?);
    }
    if at != b.len() {
        return Err(bad_binary(ty, "trailing bytes"));
    }
    Ok(Value::Array(items))
}

fn bad_binary(ty: &DataType, why: &str) -> SqlError {
    SqlError::new(
        "22P03",
        format!("incorrect binary data format for type {ty}: {why}"),
    )
}

fn fixed<const N: usize>(b: &[u8], ty: &DataType) -> Result<[u8; N], SqlError> {
    b.try_into()
        .map_err(|_| bad_binary(ty, &format!("expected {N} bytes, got {}", b.len())))
}

fn utf8(b: &[u8]) -> Result<String, SqlError> {
    String::from_utf8(b.to_vec())
        .map_err(|_| SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\""))
}

/// Decodes one binary-format parameter of type `ty`.
pub fn decode_binary(b: &[u8], ty: &DataType) -> Result<Value, SqlError> {
    let v = match ty {
        DataType::Int2 => Value::Int(i16::from_be_bytes(fixed(b, ty)?).into()),
        DataType::Int4 => Value::Int(i32::from_be_bytes(fixed(b, ty)?).into()),
        DataType::Int8 => Value::Int(i64::from_be_bytes(fixed(b, ty)?)),
        DataType::Float4 => Value::Float(f32::from_be_bytes(fixed(b, ty)?).into()),
        DataType::Float8 => Value::Float(f64::from_be_bytes(fixed(b, ty)?)),
        DataType::Numeric | DataType::NumericTypmod { .. } => Value::Numeric(decode_numeric(b)?),
        DataType::Bool => match fixed::<1>(b, ty)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            other => return Err(bad_binary(ty, &format!("byte {other}"))),
        },
        DataType::Text
        | DataType::Varchar(_)
        | DataType::Enum(_)
        | DataType::Name
        | DataType::Char => Value::Text(utf8(b)?),
        DataType::Oid => Value::Int(u32::from_be_bytes(fixed(b, ty)?).into()),
        DataType::Bytea => Value::Bytes(b.to_vec()),
        DataType::Timestamp | DataType::TimestampTz => {
            let t = i64::from_be_bytes(fixed(b, ty)?)
                .checked_add(PG_EPOCH_MICROS)
                .ok_or_else(|| SqlError::new("22008", format!("{ty} out of range")))?;
            if *ty == DataType::Timestamp {
                Value::Timestamp(t)
            } else {
                Value::TimestampTz(t)
            }
        }
        DataType::Date => Value::Date(
            i32::from_be_bytes(fixed(b, ty)?)
                .checked_add(PG_EPOCH_DAYS)
                .ok_or_else(|| SqlError::new("22008", "date out of range"))?,
        ),
        DataType::Uuid => Value::Uuid(u128::from_be_bytes(fixed(b, ty)?)),
        DataType::Interval => {
            let b: [u8; INTERVAL_BYTES] = fixed(b, ty)?;
            let (micros, rest) = b.split_at(8);
            let (days, months) = rest.split_at(4);
            Value::Interval {
                months: i32::from_be_bytes(months.try_into().expect("four bytes")),
                days: i32::from_be_bytes(days.try_into().expect("four bytes")),
                micros: i64::from_be_bytes(micros.try_into().expect("eight bytes")),
            }
        }
        DataType::Json => Value::Json(utf8(b)?),
        DataType::Array(element) => decode_array(b, ty, element)?,
        // Binary vectors are arrays of their elements.
        DataType::Vector(kind) => {
            let element = match kind {
                aqueduct_values::VectorKind::Int2 => DataType::Int2,
                aqueduct_values::VectorKind::Oid => DataType::Oid,
            };
            decode_array(b, &element.array_of(), &element)?
        }
        DataType::Jsonb => match b.split_first() {
            Some((&JSONB_VERSION, rest)) => Value::Json(utf8(rest)?),
            Some((v, _)) => return Err(bad_binary(ty, &format!("unsupported jsonb version {v}"))),
            None => return Err(bad_binary(ty, "empty")),
        },
    };
    // Re-checks what the bytes alone cannot: varchar length, JSON syntax,
    // value size limits.
    Ok(v.coerce(ty)?)
}

/// Decodes one text-format parameter of type `ty`.
pub fn decode_text(b: &[u8], ty: &DataType) -> Result<Value, SqlError> {
    let s = std::str::from_utf8(b)
        .map_err(|_| SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\""))?;
    crate::parse::param_from_text(s, ty)
}

/// Appends `d` in PostgreSQL's binary numeric format: digit count, weight
/// (base-10000 exponent of the first digit), sign, display scale, then the
/// base-10000 digits, most significant first.
pub fn encode_numeric(d: &Decimal, out: &mut BytesMut) {
    let scale = d.scale();
    let mut m = d.mantissa().unsigned_abs();
    // Pad the fraction to whole base-10000 digits so they align with the point.
    let frac_groups = scale.div_ceil(4);
    m *= 10u128.pow(frac_groups * 4 - scale);
    let mut groups = Vec::with_capacity(10);
    while m > 0 {
        groups.push((m % 10_000) as i16);
        m /= 10_000;
    }
    groups.reverse();
    let mut weight = groups.len() as i16 - frac_groups as i16 - 1;
    let leading = groups.iter().take_while(|&&g| g == 0).count();
    groups.drain(..leading);
    weight -= leading as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    let (weight, sign) = if groups.is_empty() {
        (0, NUMERIC_POS)
    } else if d.is_sign_negative() {
        (weight, NUMERIC_NEG)
    } else {
        (weight, NUMERIC_POS)
    };
    out.put_i16(groups.len() as i16);
    out.put_i16(weight);
    out.put_u16(sign);
    out.put_u16(scale as u16);
    for g in groups {
        out.put_i16(g);
    }
}

/// Decodes PostgreSQL's binary numeric format (see [`encode_numeric`]).
pub fn decode_numeric(b: &[u8]) -> Result<Decimal, SqlError> {
    let ty = DataType::Numeric;
    if b.len() < 8 {
        return Err(bad_binary(&ty, "shorter than its header"));
    }
    let ndigits = i16::from_be_bytes([b[0], b[1]]);
    let weight = i16::from_be_bytes([b[2], b[3]]);
    let sign = u16::from_be_bytes([b[4], b[5]]);
    let dscale = u16::from_be_bytes([b[6], b[7]]);
    if ndigits < 0 || b.len() != 8 + 2 * ndigits as usize {
        return Err(bad_binary(&ty, "digit count does not match its length"));
    }
    match sign {
        NUMERIC_POS | NUMERIC_NEG => {}
        NUMERIC_NAN | NUMERIC_PINF | NUMERIC_NINF => {
            return Err(SqlError::new(
                "22003",
                "numeric NaN and Infinity are not supported",
            ))
        }
        other => return Err(bad_binary(&ty, &format!("sign {other:#x}"))),
    }
    if dscale > NUMERIC_MAX_DSCALE {
        return Err(bad_binary(&ty, "display scale out of range"));
    }
    let out_of_range = || {
        SqlError::new(
            "22003",
            "numeric value out of range for Aqueduct's numeric (28 significant digits)",
        )
    };
    let digits: Vec<i16> = b[8..]
        .chunks_exact(2)
        .map(|c| i16::from_be_bytes([c[0], c[1]]))
        .collect();
    if digits.iter().any(|d| !(0..10_000).contains(d)) {
        return Err(bad_binary(&ty, "digit out of range"));
    }
    if digits.iter().all(|&d| d == 0) {
        return Ok(Decimal::new(0, u32::from(dscale).min(DECIMAL_MAX_SCALE)));
    }
    if weight > NUMERIC_MAX_WEIGHT {
        return Err(out_of_range());
    }
    // PostgreSQL may carry more places than a Decimal holds (28), or a
    // value whose digits at its display scale overflow 96 bits: keep the
    // largest scale that fits, rounding half away from zero as PostgreSQL does.
    let wanted = u32::from(dscale).min(DECIMAL_MAX_SCALE);
    for scale in (0..=wanted).rev() {
        if let Some(m) = numeric_mantissa(&digits, weight, scale) {
            let m = if sign == NUMERIC_NEG { -m } else { m };
            if let Ok(d) = Decimal::try_from_i128_with_scale(m, scale) {
                return Ok(d);
            }
        }
    }
    Err(out_of_range())
}

/// The base-10000 `digits` (first one at 10000^`weight`) as an integer
/// scaled by 10^`scale`, rounded; `None` if it overflows.
fn numeric_mantissa(digits: &[i16], weight: i16, scale: u32) -> Option<i128> {
    let lowest = -(scale as i32);
    let mut mantissa: i128 = 0;
    let mut round_up = false;
    let mut last_exp = i32::MAX;
    for (i, &g) in digits.iter().enumerate() {
        let e = i32::from(weight) - i as i32;
        for k in (0..4).rev() {
            let exp = 4 * e + k;
            let digit = (g as i32 / 10i32.pow(k as u32)) % 10;
            if exp < lowest {
                if exp == lowest - 1 {
                    round_up = digit >= 5;
                }
                continue;
            }
            mantissa = mantissa.checked_mul(10)?.checked_add(digit.into())?;
            last_exp = exp;
        }
    }
    if last_exp == i32::MAX {
        // Every digit lies beyond the scale.
        return Some(i128::from(round_up));
    }
    for _ in lowest..last_exp {
        mantissa = mantissa.checked_mul(10)?;
    }
    if round_up {
        mantissa = mantissa.checked_add(1)?;
    }
    Some(mantissa)
}
