//! Values on the wire: the result formats the wire's messages name, and
//! type modifiers. The values' text and binary forms themselves are
//! `aqueduct_plan`'s `wire_values` (shared with `COPY`), re-exported here.

use aqueduct_sql::SqlError;
use aqueduct_values::DataType;

pub(crate) use aqueduct_sql::wire_values::{
    decode_binary, decode_text, encode_binary, encode_text,
};

/// Result column format (the wire's format codes 0 and 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Binary,
}

impl Format {
    pub(crate) fn code(self) -> i16 {
        match self {
            Format::Text => 0,
            Format::Binary => 1,
        }
    }

    pub(crate) fn from_code(code: i16) -> Result<Format, SqlError> {
        match code {
            0 => Ok(Format::Text),
            1 => Ok(Format::Binary),
            other => Err(SqlError::new(
                "22023",
                format!("unsupported format code: {other}"),
            )),
        }
    }
}

/// The type modifier RowDescription reports, as PostgreSQL's `atttypmod`
/// has it: `varchar(n)` carries n + 4, `numeric(p, s)` (p << 16 | s) + 4.
pub(crate) fn type_modifier(ty: &DataType) -> i32 {
    match ty {
        DataType::Varchar(Some(n)) => i32::try_from(*n).map_or(-1, |n| n.saturating_add(4)),
        DataType::NumericTypmod { precision, scale } => {
            i32::try_from((precision << 16 | scale) + 4).unwrap_or(-1)
        }
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_sql::wire_values::{
        decode_numeric, encode_numeric, INTERVAL_BYTES, PG_EPOCH_DAYS,
    };
    use aqueduct_values::{Decimal, Value};
    use bytes::BytesMut;
    use proptest::prelude::*;
    use std::str::FromStr;
    // rust_decimal's own PostgreSQL codec serves as an independent reference.
    use rust_decimal::Decimal as RefDecimal;
    use tokio_postgres::types::{FromSql, ToSql, Type};

    fn enc(d: &Decimal) -> Vec<u8> {
        let mut b = BytesMut::new();
        encode_numeric(d, &mut b);
        b.to_vec()
    }

    #[test]
    fn numeric_known_encodings() {
        // 12345.678: weight 1, digits 1 2345 6780, dscale 3.
        assert_eq!(
            enc(&Decimal::from_str("12345.678").unwrap()),
            [0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c]
        );
        // 0.00012: weight -1, digit 1 and 2000, dscale 5.
        assert_eq!(
            enc(&Decimal::from_str("0.00012").unwrap()),
            [0, 2, 0xff, 0xff, 0, 0, 0, 5, 0, 1, 0x07, 0xd0]
        );
        assert_eq!(
            enc(&Decimal::from_str("0.00").unwrap()),
            [0, 0, 0, 0, 0, 0, 0, 2]
        );
        assert_eq!(
            enc(&Decimal::from_str("-20000").unwrap()),
            [0, 1, 0, 1, 0x40, 0, 0, 0, 0, 2]
        );
    }

    #[test]
    fn numeric_decode_edge_cases() {
        // NaN, absurd weights and bad lengths are errors, not panics.
        assert!(decode_numeric(&[0, 0, 0, 0, 0xC0, 0, 0, 0]).is_err());
        assert!(decode_numeric(&[0, 1, 0x7f, 0xff, 0, 0, 0, 0, 0, 1]).is_err());
        assert!(decode_numeric(&[0, 2, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
        assert!(decode_numeric(&[0xff, 0xff, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(decode_numeric(&[0, 1, 0, 0, 0, 0, 0, 0, 0x27, 0x10]).is_err());
        // 1e-40 rounds to zero at Decimal's 28 places.
        let tiny = decode_numeric(&[0, 1, 0xff, 0xf6, 0, 0, 0, 40, 0, 1]).unwrap();
        assert!(tiny.is_zero());
    }

    fn arb_decimal() -> impl Strategy<Value = Decimal> {
        (any::<i64>(), any::<i32>(), 0u32..=28).prop_map(|(hi, lo, scale)| {
            let m = (hi as i128) << 32 | (lo as u32 as i128);
            Decimal::from_i128_with_scale(m, scale)
        })
    }

    proptest! {
        #[test]
        fn numeric_matches_rust_decimal_codec(d in arb_decimal()) {
            let ours = enc(&d);
            // The reference decodes what we send to the same value ...
            let theirs = RefDecimal::from_sql(&Type::NUMERIC, &ours).unwrap();
            prop_assert_eq!(theirs.to_string(), d.to_string());
            // ... and we decode what it sends.
            let mut b = BytesMut::new();
            let r = RefDecimal::from_str(&d.to_string()).unwrap();
            r.to_sql(&Type::NUMERIC, &mut b).unwrap();
            let back = decode_numeric(&b).unwrap();
            prop_assert_eq!(back, d);
            prop_assert_eq!(back.scale(), d.scale());
        }

        #[test]
        fn numeric_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_numeric(&b);
        }

        #[test]
        fn binary_roundtrip(i in any::<i64>(), f in any::<f64>(), days in -1_000_000i32..1_000_000, us in -(1i64 << 60)..(1i64 << 60), u in any::<u128>()) {
            let cases = [
                (DataType::Int8, Value::Int(i)),
                (DataType::Int4, Value::Int(i as i32 as i64)),
                (DataType::Int2, Value::Int(i as i16 as i64)),
                (DataType::Float8, Value::Float(f)),
                (DataType::Date, Value::Date(days)),
                (DataType::Timestamp, Value::Timestamp(us)),
                (DataType::TimestampTz, Value::TimestampTz(us)),
                (DataType::Uuid, Value::Uuid(u)),
                (DataType::Bool, Value::Bool(i % 2 == 0)),
                (DataType::Bytea, Value::Bytes(i.to_le_bytes().to_vec())),
                (
                    DataType::Jsonb,
                    Value::Text(format!("{{\"b\":{i},\"a\":[]}}")).coerce(&DataType::Jsonb).unwrap(),
                ),
                (
                    DataType::Array(Box::new(DataType::Int4)),
                    Value::Array(vec![Value::Int(i as i32 as i64), Value::Null]),
                ),
                (
                    DataType::Array(Box::new(DataType::Text)),
                    Value::Array(vec![Value::Text(format!("a {i}")), Value::Text(String::new())]),
                ),
                (DataType::Array(Box::new(DataType::Uuid)), Value::Array(vec![Value::Uuid(u)])),
                (DataType::Interval, Value::Interval { months: i as i32, days: days.wrapping_neg(), micros: us }),
                (
                    DataType::Array(Box::new(DataType::Interval)),
                    Value::Array(vec![Value::Null, Value::Interval { months: days, days: i as i32, micros: i }]),
                ),
                (DataType::Array(Box::new(DataType::Int8)), Value::Array(vec![])),
            ];
            for (ty, v) in cases {
                let mut b = BytesMut::new();
                encode_binary(&v, &ty, &mut b).unwrap();
                let back = decode_binary(&b, &ty).unwrap();
                match (&v, &back) {
                    (Value::Float(x), Value::Float(y)) => prop_assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
                    _ => prop_assert_eq!(format!("{v:?}"), format!("{back:?}")),
                }
            }
        }
    }

    #[test]
    fn arrays_match_the_reference_codec() {
        // What we send, a reference client reads ...
        let ty = DataType::Array(Box::new(DataType::Int4));
        let v = Value::Array(vec![Value::Int(1), Value::Null, Value::Int(-3)]);
        let mut b = BytesMut::new();
        encode_binary(&v, &ty, &mut b).unwrap();
        let theirs = Vec::<Option<i32>>::from_sql(&Type::INT4_ARRAY, &b).unwrap();
        assert_eq!(theirs, vec![Some(1), None, Some(-3)]);
        // ... and what it sends, we read, as the type's OID says.
        let mut b = BytesMut::new();
        vec!["x".to_string(), "y z".to_string()]
            .to_sql(&Type::TEXT_ARRAY, &mut b)
            .unwrap();
        let ty = DataType::from_pg_oid(Type::TEXT_ARRAY.oid()).unwrap();
        assert_eq!(ty.to_string(), "text[]");
        let back = decode_binary(&b, &ty).unwrap();
        assert_eq!(back.to_text().unwrap(), "{x,\"y z\"}");
        let mut b = BytesMut::new();
        Vec::<i64>::new().to_sql(&Type::INT8_ARRAY, &mut b).unwrap();
        let back = decode_binary(&b, &DataType::Array(Box::new(DataType::Int8))).unwrap();
        assert_eq!(back, Value::Array(vec![]));
        // An element type other than the declared one is refused.
        let mut b = BytesMut::new();
        vec![1i64].to_sql(&Type::INT8_ARRAY, &mut b).unwrap();
        let e = decode_binary(&b, &DataType::Array(Box::new(DataType::Int4))).unwrap_err();
        assert_eq!(e.code, "42804");
        // Text output of a real[] keeps the reals' own digits.
        let mut out = BytesMut::new();
        let reals = Value::Array(vec![Value::Float(0.1f32 as f64)]);
        encode_text(
            &reals,
            &DataType::Array(Box::new(DataType::Float4)),
            &mut out,
        )
        .unwrap();
        assert_eq!(&out[..], b"{0.1}");
    }

    #[test]
    fn epochs() {
        // 2000-01-01 is zero on the wire.
        let mut b = BytesMut::new();
        encode_binary(&Value::Date(PG_EPOCH_DAYS), &DataType::Date, &mut b).unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 0]);
        assert!(decode_binary(&[0, 0, 0], &DataType::Int4).is_err());
        assert!(decode_binary(&[2], &DataType::Bool).is_err());
        assert!(decode_binary(&[2, b'{', b'}'], &DataType::Jsonb).is_err());
        assert!(decode_binary(&[0xff, 0xfe], &DataType::Text).is_err());
    }

    #[test]
    fn intervals_are_micros_days_months() {
        // interval '1 mon 2 days 00:00:03.000004' as PostgreSQL's interval_send writes it.
        let v = Value::Text("1 mon 2 days 00:00:03.000004".into())
            .coerce(&DataType::Interval)
            .unwrap();
        let mut b = BytesMut::new();
        encode_binary(&v, &DataType::Interval, &mut b).unwrap();
        let mut want = 3_000_004i64.to_be_bytes().to_vec();
        want.extend_from_slice(&2i32.to_be_bytes());
        want.extend_from_slice(&1i32.to_be_bytes());
        assert_eq!(&b[..], &want[..]);
        assert_eq!(
            format!("{:?}", decode_binary(&want, &DataType::Interval).unwrap()),
            format!("{v:?}")
        );
        // Negative fields, and a length other than 16, as PostgreSQL's interval_recv.
        let neg = Value::Interval {
            months: -1,
            days: -2,
            micros: -3,
        };
        let mut b = BytesMut::new();
        encode_binary(&neg, &DataType::Interval, &mut b).unwrap();
        assert_eq!(&b[..8], &(-3i64).to_be_bytes());
        assert_eq!(
            format!("{:?}", decode_binary(&b, &DataType::Interval).unwrap()),
            format!("{neg:?}")
        );
        let e = decode_binary(&want[..12], &DataType::Interval).unwrap_err();
        assert_eq!(e.code, "22P03");
        // The text form is PostgreSQL's.
        let mut t = BytesMut::new();
        encode_text(&neg, &DataType::Interval, &mut t).unwrap();
        assert_eq!(&t[..], b"-1 mons -2 days -00:00:00.000003");
        // In an array, each element is an interval_send body.
        let ty = DataType::Array(Box::new(DataType::Interval));
        let arr = Value::Array(vec![v.clone(), Value::Null]);
        let mut b = BytesMut::new();
        encode_binary(&arr, &ty, &mut b).unwrap();
        // dimensions, has-NULLs flag, then the element type's OID.
        assert_eq!(&b[8..12], &DataType::Interval.pg_oid().to_be_bytes());
        assert_eq!(&b[20..24], &(INTERVAL_BYTES as i32).to_be_bytes());
        assert_eq!(&b[24..40], &want[..]);
        assert_eq!(
            format!("{:?}", decode_binary(&b, &ty).unwrap()),
            format!("{arr:?}")
        );
    }

    #[test]
    fn float4_text_has_float4_digits() {
        let mut b = BytesMut::new();
        encode_text(&Value::Float(0.1f32 as f64), &DataType::Float4, &mut b).unwrap();
        assert_eq!(&b[..], b"0.1");
        // PostgreSQL prints 123456789::real as 1.2345679e+08.
        let mut b = BytesMut::new();
        encode_text(
            &Value::Float(123456789f32 as f64),
            &DataType::Float4,
            &mut b,
        )
        .unwrap();
        assert_eq!(&b[..], b"1.2345679e+08");
    }
}
