//! `numeric` arithmetic as PostgreSQL does it: exact, with PostgreSQL's
//! result scales (the display scale, `dscale`, that decides how many digits
//! after the point are printed):
//!
//! - `+` and `-`: the larger scale of the operands (`0.00 + 1` is `1.00`);
//! - `*`: the sum of the scales (`2.00 * 0` is `0.00`);
//! - `/`: `select_div_scale` — at least 16 significant digits, at least
//!   either operand's scale (`1.50 / 3` is `0.50000000000000000000`),
//!   rounded half away from zero;
//! - `%`: the larger scale, the sign of the dividend;
//! - `round(x, s)`: half away from zero, to scale `s` (at least 0).
//!
//! A `Decimal` holds 96 bits of mantissa and at most 28 places; a result
//! that needs more is refused (SQLSTATE 22003) rather than rounded.

use aqueduct_values::{Decimal, MAX_NUMERIC_DIGITS};
use num_bigint::BigInt;

use crate::SqlError;

/// PostgreSQL's `NUMERIC_MIN_SIG_DIGITS`: the least significant digits of a quotient.
const DIV_MIN_SIG_DIGITS: i64 = 16;
/// PostgreSQL's `NUMERIC_MAX_DISPLAY_SCALE`.
const MAX_DISPLAY_SCALE: i64 = 1000;
/// The most places a `Decimal` has.
const MAX_SCALE: u32 = MAX_NUMERIC_DIGITS as u32;

fn too_wide() -> SqlError {
    SqlError::new(
        "22003",
        format!(
            "numeric result needs more than {MAX_NUMERIC_DIGITS} significant digits or \
             decimal places, which Aqueduct's numeric does not hold"
        ),
    )
    .with_hint("round or cast the operands to fewer digits")
}

/// `m × 10^-scale` as a `Decimal`, refused when it does not fit.
fn make(m: i128, scale: u32) -> Result<Decimal, SqlError> {
    if scale > MAX_SCALE {
        return Err(too_wide());
    }
    // Positive zero: PostgreSQL's numeric has no -0.
    Decimal::try_from_i128_with_scale(m, scale).map_err(|_| too_wide())
}

fn pow10(k: u32) -> Option<i128> {
    10i128.checked_pow(k)
}

/// The mantissa of `d` at scale `s ≥ d.scale()`.
fn aligned(d: &Decimal, s: u32) -> Result<i128, SqlError> {
    pow10(s - d.scale())
        .and_then(|p| d.mantissa().checked_mul(p))
        .ok_or_else(too_wide)
}

pub fn add(x: Decimal, y: Decimal) -> Result<Decimal, SqlError> {
    let s = x.scale().max(y.scale());
    let m = aligned(&x, s)?
        .checked_add(aligned(&y, s)?)
        .ok_or_else(too_wide)?;
    make(m, s)
}

pub fn sub(x: Decimal, y: Decimal) -> Result<Decimal, SqlError> {
    add(x, neg(y))
}

pub fn mul(x: Decimal, y: Decimal) -> Result<Decimal, SqlError> {
    let m = x
        .mantissa()
        .checked_mul(y.mantissa())
        .ok_or_else(too_wide)?;
    make(m, x.scale() + y.scale())
}

/// `x % y` for `y ≠ 0`: truncated, with the dividend's sign.
pub fn rem(x: Decimal, y: Decimal) -> Result<Decimal, SqlError> {
    let s = x.scale().max(y.scale());
    make(aligned(&x, s)? % aligned(&y, s)?, s)
}

pub fn neg(x: Decimal) -> Decimal {
    if x.is_zero() {
        x
    } else {
        -x
    }
}

/// PostgreSQL's numeric digits are base 10000: the weight (power of 10000)
/// of the first non-zero digit of `digits × 10^-scale` and that digit.
/// Zero is (0, 0), as PostgreSQL's `select_div_scale` sees it.
pub(crate) fn base10000_lead(digits: &str, scale: u32) -> (i64, u64) {
    let d = digits.as_bytes();
    if digits.bytes().all(|b| b == b'0') {
        return (0, 0);
    }
    let digits = digits.trim_start_matches('0');
    let d = &d[d.len() - digits.len()..];
    // Power of ten of the leading decimal digit.
    let lead = d.len() as i64 - 1 - scale as i64;
    let weight = lead.div_euclid(4);
    let mut group = 0u64;
    for p in (4 * weight..4 * weight + 4).rev() {
        let i = lead - p;
        let digit = if (0..d.len() as i64).contains(&i) {
            (d[i as usize] - b'0') as u64
        } else {
            0
        };
        group = group * 10 + digit;
    }
    (weight, group)
}

/// The scale PostgreSQL gives a quotient whose dividend has leading
/// base-10000 digit `lead1` and scale `scale1`, and divisor likewise
/// (`select_div_scale`).
pub(crate) fn div_scale(lead1: (i64, u64), scale1: u32, lead2: (i64, u64), scale2: u32) -> i64 {
    let (w1, d1) = lead1;
    let (w2, d2) = lead2;
    let mut qweight = w1 - w2;
    if d1 <= d2 {
        qweight -= 1;
    }
    (DIV_MIN_SIG_DIGITS - qweight * 4)
        .max(scale1 as i64)
        .max(scale2 as i64)
        .clamp(0, MAX_DISPLAY_SCALE)
}

fn lead(d: &Decimal) -> (i64, u64) {
    base10000_lead(&d.mantissa().unsigned_abs().to_string(), d.scale())
}

/// `x / y` at PostgreSQL's scale, rounded half away from zero.
pub fn div(x: Decimal, y: Decimal) -> Result<Decimal, SqlError> {
    if y.is_zero() {
        return Err(SqlError::new("22012", "division by zero"));
    }
    let rscale = div_scale(lead(&x), x.scale(), lead(&y), y.scale());
    if rscale > MAX_SCALE as i64 {
        return Err(too_wide());
    }
    // q = x.m × 10^(y.s − x.s + rscale) / y.m
    let k = y.scale() as i64 - x.scale() as i64 + rscale;
    let mut num = BigInt::from(x.mantissa());
    let mut den = BigInt::from(y.mantissa());
    let ten = BigInt::from(10);
    if k >= 0 {
        num *= ten.pow(k as u32);
    } else {
        den *= ten.pow((-k) as u32);
    }
    let q = &num / &den;
    let r = &num - &q * &den;
    let twice: BigInt = r.magnitude().clone().into();
    let twice = twice * 2;
    let half_up = twice >= BigInt::from(den.magnitude().clone());
    let negative =
        (num.sign() == num_bigint::Sign::Minus) != (den.sign() == num_bigint::Sign::Minus);
    let q = if half_up {
        if negative {
            q - 1
        } else {
            q + 1
        }
    } else {
        q
    };
    let q = i128::try_from(&q).map_err(|_| too_wide())?;
    make(q, rscale as u32)
}

/// `round(x, places)`: half away from zero to `places` digits after the
/// point (before it, when negative); the result's scale is `max(places, 0)`.
pub fn round(x: Decimal, places: i64) -> Result<Decimal, SqlError> {
    let places = places.clamp(-(MAX_DISPLAY_SCALE * 2), MAX_DISPLAY_SCALE * 2);
    let scale = x.scale() as i64;
    if places >= scale {
        // Only padding: 12.3456 to 10 places is 12.3456000000.
        let s = u32::try_from(places).map_err(|_| too_wide())?;
        if s > MAX_SCALE {
            return Err(too_wide());
        }
        return make(aligned(&x, s)?, s);
    }
    // Drop `scale - places` digits, rounding half away from zero.
    let drop = (scale - places) as u32;
    let m = x.mantissa();
    let q = match pow10(drop) {
        None => 0,
        Some(p) => {
            let q = m / p;
            let r = (m % p).unsigned_abs();
            if r * 2 >= p.unsigned_abs() {
                q + m.signum()
            } else {
                q
            }
        }
    };
    if places >= 0 {
        make(q, places as u32)
    } else {
        let up = pow10((-places) as u32)
            .and_then(|p| q.checked_mul(p))
            .ok_or_else(too_wide)?;
        make(up, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn n(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn text(r: Result<Decimal, SqlError>) -> String {
        r.unwrap().to_string()
    }

    #[test]
    fn quotients_have_postgres_scale() {
        // SELECT 1.50/3, 7::numeric/2, 10.0/3, 3/2.0 in PostgreSQL 15.
        assert_eq!(text(div(n("1.50"), n("3"))), "0.50000000000000000000");
        assert_eq!(text(div(n("7"), n("2"))), "3.5000000000000000");
        assert_eq!(text(div(n("10.0"), n("3"))), "3.3333333333333333");
        assert_eq!(text(div(n("3"), n("2.0"))), "1.5000000000000000");
        assert_eq!(text(div(n("2"), n("3"))), "0.66666666666666666667");
        assert_eq!(text(div(n("-2"), n("3"))), "-0.66666666666666666667");
        assert_eq!(text(div(n("1"), n("30000"))), "0.000033333333333333333333");
        assert_eq!(text(div(n("100000"), n("3"))), "33333.333333333333");
        assert_eq!(text(div(n("0"), n("3"))), "0.00000000000000000000");
        assert_eq!(
            text(div(n("12345678901234567890"), n("7"))),
            "1763668414462081127"
        );
        assert_eq!(text(div(n("1"), n("0.0003"))), "3333.3333333333333333");
        assert_eq!(text(div(n("0.0003"), n("7"))), "0.000042857142857142857143");
        assert_eq!(text(div(n("99999999"), n("1.1"))), "90909090.000000000000");
        assert_eq!(div(n("1"), n("0")).unwrap_err().code, "22012");
        // PostgreSQL prints 32 places here; a Decimal holds 28.
        assert_eq!(div(n("1"), n("3000000000000.0")).unwrap_err().code, "22003");
    }

    #[test]
    fn sums_and_products_keep_their_scale() {
        // SELECT 0.00 + 1, 0.0 * 5, 2.00 * 0, 0.10 * 0.10, 2.5 - 2.50.
        assert_eq!(text(add(n("0.00"), n("1"))), "1.00");
        assert_eq!(text(mul(n("0.0"), n("5"))), "0.0");
        assert_eq!(text(mul(n("2.00"), n("0"))), "0.00");
        assert_eq!(text(mul(n("0.10"), n("0.10"))), "0.0100");
        assert_eq!(text(sub(n("2.5"), n("2.50"))), "0.00");
        assert_eq!(text(sub(n("0"), n("0.00"))), "0.00");
        assert_eq!(neg(n("0.00")).to_string(), "0.00");
        // SELECT 7.5 % 2, 7 % 2.00, -7.5 % 2, 7.25 % 0.5.
        assert_eq!(text(rem(n("7.5"), n("2"))), "1.5");
        assert_eq!(text(rem(n("7"), n("2.00"))), "1.00");
        assert_eq!(text(rem(n("-7.5"), n("2"))), "-1.5");
        assert_eq!(text(rem(n("7.25"), n("0.5"))), "0.25");
        // Exact or refused, never rounded.
        let big = n("10000000000000000000000000000");
        assert_eq!(add(big, n("0.1")).unwrap_err().code, "22003");
        let wide = n("1.234567890123456");
        assert_eq!(mul(wide, wide).unwrap_err().code, "22003");
        let digits = n("123456789012345678");
        assert_eq!(mul(digits, digits).unwrap_err().code, "22003");
    }

    #[test]
    fn round_is_half_away_from_zero() {
        // SELECT round(2.5), round(-2.5), round(12.345, 2), round(0.5),
        // round(1234.5, -2), round(12.3456, 10), round(-0.4).
        assert_eq!(text(round(n("2.5"), 0)), "3");
        assert_eq!(text(round(n("-2.5"), 0)), "-3");
        assert_eq!(text(round(n("12.345"), 2)), "12.35");
        assert_eq!(text(round(n("0.5"), 0)), "1");
        assert_eq!(text(round(n("1234.5"), -2)), "1200");
        assert_eq!(text(round(n("1250"), -2)), "1300");
        assert_eq!(text(round(n("12.3456"), 10)), "12.3456000000");
        assert_eq!(text(round(n("-0.4"), 0)), "0");
        assert_eq!(text(round(n("5"), 2)), "5.00");
        assert_eq!(text(round(n("123.45"), -5)), "0");
    }
}
