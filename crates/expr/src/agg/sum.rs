//! Exact sums for SUM and AVG that can be retracted.
//!
//! A dataflow aggregate subtracts a deleted value from the running sum, so
//! the sum must be exact: with rounding, `(a + b) - b` need not be `a`, and a
//! view would drift away from its query. Integers and numerics are summed as
//! one wide fixed-point integer at scale 28 (the finest a `Decimal` has);
//! floats as a wide fixed-point integer in units of 2^-1074 (the smallest
//! subnormal), so every finite `f64` and every weighted sum of them is exact.
//! The result is rounded once, at [`ExactSum::sum`] or [`ExactSum::avg`], and
//! does not depend on the order of the inputs. Intervals are summed field
//! by field in wrapping 128-bit integers: a wrapped sum is exact modulo
//! 2^128, and the true sum of fewer than 2^64 values of 64 bits is far
//! inside that, so what remains after retractions is exact.

use std::cmp::Ordering;

use aqueduct_values::{Decimal, Interval, Value};

use crate::numeric::{base10000_lead, div_scale};
use crate::SqlError;

/// Finest scale of a `Decimal`; integer and numeric inputs are summed at it.
const SCALE_MAX: u32 = 28;
/// A `Decimal` mantissa has 96 bits.
const DECIMAL_MANTISSA_BITS: usize = 96;
/// Bit 0 of a float sum weighs 2^-1074.
const FLOAT_UNIT_EXP: i32 = -1074;

/// Limbs of the numeric sum: |mantissa| < 2^96, times 10^28 < 2^93.1, times
/// |weight| ≤ 2^63 is below 2^253, which leaves 2^66 terms of headroom in 320
/// signed bits.
const NUMERIC_LIMBS: usize = 5;
/// Limbs for dividing the numeric sum (scaled by up to 10^28 more).
const QUOTIENT_LIMBS: usize = 8;
/// Limbs of the float sum: |mantissa × weight| < 2^116 at bit offsets up to
/// 2045 stays below 2^2161, far inside 2304 signed bits.
const FLOAT_LIMBS: usize = 36;

/// A fixed-width two's-complement integer, 64-bit limbs, least significant
/// first. Sized by its users so that it never wraps.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Wide<const N: usize>([u64; N]);

impl<const N: usize> Wide<N> {
    fn zero() -> Self {
        Wide([0; N])
    }

    fn from_u128(v: u128) -> Self {
        let mut w = Self::zero();
        w.0[0] = v as u64;
        w.0[1] = (v >> 64) as u64;
        w
    }

    fn is_zero(&self) -> bool {
        self.0.iter().all(|&l| l == 0)
    }

    fn is_negative(&self) -> bool {
        self.0[N - 1] >> 63 == 1
    }

    /// Adds `v`, sign-extended, starting at limb `start`.
    fn add_limbs(&mut self, v: &[u64], negative: bool, start: usize) {
        let ext = if negative { u64::MAX } else { 0 };
        let mut carry = false;
        for i in start..N {
            let x = v.get(i - start).copied().unwrap_or(ext);
            let (s1, c1) = self.0[i].overflowing_add(x);
            let (s2, c2) = s1.overflowing_add(carry as u64);
            self.0[i] = s2;
            carry = c1 || c2;
        }
    }

    fn add(&mut self, other: &Self) {
        self.add_limbs(&other.0, false, 0);
    }

    fn add_small(&mut self, v: u64) {
        self.add_limbs(&[v], false, 0);
    }

    /// Adds `v × 2^shift`.
    fn add_shifted(&mut self, v: i128, shift: usize) {
        let ext = if v < 0 { u64::MAX } else { 0 };
        let parts = [v as u64, (v >> 64) as u64, ext, ext];
        let b = shift % 64;
        let mut limbs = [0u64; 4];
        for (i, limb) in limbs.iter_mut().enumerate() {
            *limb = if b == 0 {
                parts[i]
            } else {
                let below = if i == 0 { 0 } else { parts[i - 1] };
                (parts[i] << b) | (below >> (64 - b))
            };
        }
        debug_assert!(shift / 64 + 3 <= N, "shift {shift} out of range");
        self.add_limbs(&limbs, v < 0, shift / 64);
    }

    fn negate(&mut self) {
        for l in &mut self.0 {
            *l = !*l;
        }
        self.add_small(1);
    }

    /// Magnitude and sign.
    fn abs(&self) -> (Self, bool) {
        let mut m = self.clone();
        let negative = m.is_negative();
        if negative {
            m.negate();
        }
        (m, negative)
    }

    /// Multiplies a non-negative value by `m`.
    fn mul_small(&mut self, m: u64) {
        let mut carry = 0u128;
        for l in &mut self.0 {
            let p = *l as u128 * m as u128 + carry;
            *l = p as u64;
            carry = p >> 64;
        }
        debug_assert!(carry == 0 && !self.is_negative(), "wide product overflowed");
    }

    fn mul_pow10(&mut self, mut k: u32) {
        while k > 0 {
            let step = k.min(19);
            self.mul_small(10u64.pow(step));
            k -= step;
        }
    }

    /// Divides a non-negative value by `d`, returning the remainder.
    fn div_small(&mut self, d: u64) -> u64 {
        let mut rem = 0u128;
        for l in self.0.iter_mut().rev() {
            let cur = (rem << 64) | *l as u128;
            *l = (cur / d as u128) as u64;
            rem = cur % d as u128;
        }
        rem as u64
    }

    /// Divides a non-negative value by 10^k, rounding towards zero.
    fn div_pow10(&mut self, mut k: u32) {
        while k > 0 {
            let step = k.min(19);
            self.div_small(10u64.pow(step));
            k -= step;
        }
    }

    /// Bits needed for a non-negative value (0 for zero).
    fn bit_len(&self) -> usize {
        for i in (0..N).rev() {
            if self.0[i] != 0 {
                return i * 64 + 64 - self.0[i].leading_zeros() as usize;
            }
        }
        0
    }

    /// The 64 bits starting at bit `lo`.
    fn bits_at(&self, lo: usize) -> u64 {
        let (i, b) = (lo / 64, lo % 64);
        let low = self.0[i] >> b;
        match self.0.get(i + 1) {
            Some(&high) if b > 0 => low | (high << (64 - b)),
            _ => low,
        }
    }

    /// Whether any bit below bit `lo` is set.
    fn any_below(&self, lo: usize) -> bool {
        let (i, b) = (lo / 64, lo % 64);
        self.0[..i].iter().any(|&l| l != 0) || (b > 0 && self.0[i] & ((1u64 << b) - 1) != 0)
    }

    /// The same value with `M` limbs (sign-extended; `M` must be large enough).
    fn resize<const M: usize>(&self) -> Wide<M> {
        let ext = if self.is_negative() { u64::MAX } else { 0 };
        let mut w = Wide([ext; M]);
        let n = N.min(M);
        w.0[..n].copy_from_slice(&self.0[..n]);
        debug_assert!(self.0[n..].iter().all(|&l| l == ext), "resize lost bits");
        w
    }

    /// A non-negative value below 2^128.
    fn to_u128(&self) -> Option<u128> {
        if self.bit_len() > 128 {
            return None;
        }
        Some(self.0[0] as u128 | (self.0[1] as u128) << 64)
    }

    /// Decimal digits of a non-negative value, without leading zeros.
    fn decimal_digits(&self) -> String {
        const CHUNK: u64 = 10_000_000_000_000_000_000;
        let mut v = self.clone();
        let mut chunks = Vec::new();
        while !v.is_zero() {
            chunks.push(v.div_small(CHUNK));
        }
        let Some((first, rest)) = chunks.split_last() else {
            return "0".into();
        };
        let mut s = first.to_string();
        for c in rest.iter().rev() {
            s.push_str(&format!("{c:019}"));
        }
        s
    }

    /// Compares two non-negative values.
    fn cmp_magnitude(&self, other: &Self) -> Ordering {
        self.0.iter().rev().cmp(other.0.iter().rev())
    }
}

/// round-half-away-from-zero of `num × 10^up / (div × 10^down)`, for `num ≥ 0`
/// (PostgreSQL's numeric rounding).
fn rounded_quotient(
    num: &Wide<QUOTIENT_LIMBS>,
    up: u32,
    div: u64,
    down: u32,
) -> Wide<QUOTIENT_LIMBS> {
    let mut x = num.clone();
    x.mul_pow10(up);
    let mut q = x.clone();
    q.div_pow10(down);
    q.div_small(div);
    // Round up when 2x ≥ (2q + 1) · div · 10^down.
    let mut twice = x;
    twice.mul_small(2);
    let mut edge = q.clone();
    edge.mul_small(2);
    edge.add_small(1);
    edge.mul_small(div);
    edge.mul_pow10(down);
    if twice.cmp_magnitude(&edge) != Ordering::Less {
        q.add_small(1);
    }
    q
}

fn numeric_out_of_range() -> SqlError {
    SqlError::new("22003", "numeric value out of range")
}

/// The `Decimal` with the largest scale, at most `scale`, that holds
/// `magnitude_at(scale)`; 22003 when not even the integer part fits.
fn fit_decimal(
    negative: bool,
    scale: u32,
    magnitude_at: impl Fn(u32) -> Wide<QUOTIENT_LIMBS>,
) -> Result<Decimal, SqlError> {
    let mut scale = scale.min(SCALE_MAX);
    loop {
        let q = magnitude_at(scale);
        if q.bit_len() <= DECIMAL_MANTISSA_BITS {
            let m = q.to_u128().expect("fits 96 bits") as i128;
            let m = if negative { -m } else { m };
            return Decimal::try_from_i128_with_scale(m, scale).map_err(|_| numeric_out_of_range());
        }
        if scale == 0 {
            return Err(numeric_out_of_range());
        }
        scale -= 1;
    }
}

/// The result scale PostgreSQL's `numeric_div` gives `sum / count`
/// (`select_div_scale`): at least 16 significant digits, at least the sum's
/// scale.
fn pg_div_scale(sum_digits: &str, sum_scale: u32, count: u64) -> i64 {
    div_scale(
        base10000_lead(sum_digits, sum_scale),
        sum_scale,
        base10000_lead(&count.to_string(), 0),
        0,
    )
}

/// Sum of floats in units of 2^-1074, with infinities and NaNs counted apart.
#[derive(Clone, Debug)]
struct FloatSum {
    fixed: Wide<FLOAT_LIMBS>,
    nan: i64,
    pos_inf: i64,
    neg_inf: i64,
}

impl FloatSum {
    fn new() -> FloatSum {
        FloatSum {
            fixed: Wide::zero(),
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
        }
    }

    fn add(&mut self, f: f64, weight: i64) {
        if f.is_nan() {
            self.nan += weight;
        } else if f == f64::INFINITY {
            self.pos_inf += weight;
        } else if f == f64::NEG_INFINITY {
            self.neg_inf += weight;
        } else {
            let bits = f.to_bits();
            let exp = ((bits >> 52) & 0x7ff) as usize;
            let frac = bits & ((1u64 << 52) - 1);
            // f = ±mantissa × 2^(shift - 1074).
            let (mantissa, shift) = if exp == 0 {
                (frac, 0)
            } else {
                (frac | 1 << 52, exp - 1)
            };
            let mut term = mantissa as i128 * weight as i128;
            if bits >> 63 == 1 {
                term = -term;
            }
            self.fixed.add_shifted(term, shift);
        }
    }

    /// The sum rounded to the nearest `f64` (ties to even); 22003 when it
    /// overflows without an infinite input, as PostgreSQL's float addition.
    fn total(&self) -> Result<f64, SqlError> {
        if self.nan > 0 || (self.pos_inf > 0 && self.neg_inf > 0) {
            return Ok(f64::NAN);
        }
        if self.pos_inf > 0 {
            return Ok(f64::INFINITY);
        }
        if self.neg_inf > 0 {
            return Ok(f64::NEG_INFINITY);
        }
        let (m, negative) = self.fixed.abs();
        let bits = m.bit_len();
        let magnitude = if bits <= 64 {
            // Below 2^64 units: rounding (if any) happens in the conversion,
            // and the scaled result is either exact subnormal or normal.
            m.0[0] as f64 * f64::from_bits(1)
        } else {
            // The top 64 bits with a sticky bit for everything below: one
            // correct rounding to 53 bits, then an exact power-of-two scale.
            let lo = bits - 64;
            let top = m.bits_at(lo) | m.any_below(lo) as u64;
            scale2(top as f64, lo as i32 + FLOAT_UNIT_EXP)
        };
        if magnitude.is_infinite() {
            return Err(SqlError::new("22003", "value out of range: overflow"));
        }
        Ok(if negative { -magnitude } else { magnitude })
    }
}

/// `x × 2^k` in steps that stay exact while the result is normal.
fn scale2(mut x: f64, mut k: i32) -> f64 {
    let pow2 = |e: i32| f64::from_bits(((e + 1023) as u64) << 52);
    while k > 1000 {
        x *= pow2(1000);
        k -= 1000;
    }
    while k < -1000 {
        x *= pow2(-1000);
        k += 1000;
    }
    x * pow2(k)
}

/// The running sum of SUM and AVG, by weight.
#[derive(Clone, Debug)]
pub(super) struct ExactSum {
    /// Σ weight × value × 10^28 over integer and numeric inputs.
    fixed: Wide<NUMERIC_LIMBS>,
    /// Weighted count of integer and numeric inputs by scale (integers at 0).
    scales: [i64; SCALE_MAX as usize + 1],
    /// Weighted count of numeric inputs: none means an integer result.
    numerics: i64,
    /// Weighted count of float inputs: some means a float result.
    floats: i64,
    float_sum: Option<Box<FloatSum>>,
    /// Weighted count of interval inputs: some means an interval result.
    intervals: i64,
    /// Σ weight × (months, days, microseconds) of the interval inputs.
    interval_sum: [i128; 3],
    /// Weighted count of all inputs.
    count: i64,
}

impl ExactSum {
    pub(super) fn new() -> ExactSum {
        ExactSum {
            fixed: Wide::zero(),
            scales: [0; SCALE_MAX as usize + 1],
            numerics: 0,
            floats: 0,
            float_sum: None,
            intervals: 0,
            interval_sum: [0; 3],
            count: 0,
        }
    }

    /// Whether `v` can be summed (the caller checks before changing state).
    pub(super) fn accepts(v: &Value) -> bool {
        matches!(
            v,
            Value::Int(_) | Value::Numeric(_) | Value::Float(_) | Value::Interval { .. }
        )
    }

    /// Adds `weight` copies of a non-NULL value [`accepts`](Self::accepts) took.
    pub(super) fn add(&mut self, v: &Value, weight: i64) {
        let (mantissa, scale) = match v {
            Value::Int(i) => (*i as i128, 0),
            Value::Numeric(d) => {
                self.numerics += weight;
                (d.mantissa(), d.scale())
            }
            Value::Float(f) => {
                self.floats += weight;
                self.count += weight;
                self.float_sum
                    .get_or_insert_with(|| Box::new(FloatSum::new()))
                    .add(*f, weight);
                return;
            }
            Value::Interval {
                months,
                days,
                micros,
            } => {
                self.intervals += weight;
                self.count += weight;
                let fields = [*months as i128, *days as i128, *micros as i128];
                for (sum, f) in self.interval_sum.iter_mut().zip(fields) {
                    *sum = sum.wrapping_add(f.wrapping_mul(weight as i128));
                }
                return;
            }
            other => unreachable!("sum of {}", other.kind_name()),
        };
        self.count += weight;
        self.scales[scale as usize] += weight;
        let mut term = Wide::<NUMERIC_LIMBS>::from_u128(mantissa.unsigned_abs());
        term.mul_pow10(SCALE_MAX - scale);
        term.mul_small(weight.unsigned_abs());
        if (mantissa < 0) != (weight < 0) {
            term.negate();
        }
        self.fixed.add(&term);
    }

    /// Weighted count of the values summed.
    pub(super) fn count(&self) -> i64 {
        self.count
    }

    /// The integer/numeric part: magnitude at its scale, sign, and the scale
    /// (the largest scale among the inputs, as `numeric` addition keeps).
    fn fixed_total(&self) -> (Wide<QUOTIENT_LIMBS>, bool, u32) {
        let scale = (0..=SCALE_MAX)
            .rev()
            .find(|&s| self.scales[s as usize] != 0)
            .unwrap_or(0);
        let (mut m, negative) = self.fixed.abs();
        // Exact: every input had at most `scale` digits after the point.
        m.div_pow10(SCALE_MAX - scale);
        (m.resize(), negative, scale)
    }

    fn fixed_decimal(&self) -> Result<Decimal, SqlError> {
        let (m, negative, scale) = self.fixed_total();
        fit_decimal(negative, scale, |s| rounded_quotient(&m, 0, 1, scale - s))
    }

    fn float_total(&self) -> Result<f64, SqlError> {
        let mut f = match &self.float_sum {
            Some(fs) => fs.total()?,
            None => 0.0,
        };
        if self.count != self.floats {
            let d = Value::Numeric(self.fixed_decimal()?);
            f += d.as_f64().unwrap_or(f64::NAN);
        }
        Ok(f)
    }

    /// The sum of the interval inputs; 22008 when a field overflows.
    fn interval_total(&self) -> Result<Interval, SqlError> {
        let range = || SqlError::new("22008", "interval out of range");
        let [months, days, micros] = self.interval_sum;
        Ok(Interval::new(
            i32::try_from(months).map_err(|_| range())?,
            i32::try_from(days).map_err(|_| range())?,
            i64::try_from(micros).map_err(|_| range())?,
        ))
    }

    /// SUM: NULL over no values; an integer sum stays an integer while it
    /// fits in 64 bits.
    pub(super) fn sum(&self) -> Result<Value, SqlError> {
        if self.count == 0 {
            return Ok(Value::Null);
        }
        if self.intervals != 0 {
            return Ok(self.interval_total()?.to_value());
        }
        if self.floats != 0 {
            return Ok(Value::Float(self.float_total()?));
        }
        if self.numerics == 0 {
            let (m, negative, _) = self.fixed_total();
            if let Some(v) = m.to_u128() {
                let v = if negative { -(v as i128) } else { v as i128 };
                if let Ok(i) = i64::try_from(v) {
                    return Ok(Value::Int(i));
                }
            }
        }
        Ok(Value::Numeric(self.fixed_decimal()?))
    }

    /// AVG: NULL over no values; a float over floats, otherwise a numeric
    /// with the scale PostgreSQL gives `sum / count`, rounded half away from
    /// zero (capped at the 28 digits a `Decimal` holds).
    pub(super) fn avg(&self) -> Result<Value, SqlError> {
        if self.count <= 0 {
            return Ok(Value::Null);
        }
        if self.intervals != 0 {
            // PostgreSQL's interval_avg: the sum divided by the count.
            return Ok(self
                .interval_total()?
                .checked_div(self.count as f64)?
                .to_value());
        }
        if self.floats != 0 {
            return Ok(Value::Float(self.float_total()? / self.count as f64));
        }
        let n = self.count as u64;
        let (m, negative, scale) = self.fixed_total();
        let rscale = pg_div_scale(&m.decimal_digits(), scale, n);
        let rscale = u32::try_from(rscale).unwrap_or(SCALE_MAX);
        let d = fit_decimal(negative, rscale, |s| {
            if s >= scale {
                rounded_quotient(&m, s - scale, n, 0)
            } else {
                rounded_quotient(&m, 0, n, scale - s)
            }
        })?;
        Ok(Value::Numeric(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn num(s: &str) -> Value {
        Value::Numeric(Decimal::from_str(s).unwrap())
    }

    fn sum_of(values: &[Value]) -> ExactSum {
        let mut s = ExactSum::new();
        for v in values {
            s.add(v, 1);
        }
        s
    }

    fn text(v: Value) -> String {
        v.to_text().unwrap_or_else(|| "NULL".into())
    }

    #[test]
    fn wide_shifts_and_divides() {
        let mut w = Wide::<4>::zero();
        w.add_shifted(-3, 70);
        w.add_shifted(5, 70);
        assert_eq!(w.bit_len(), 72);
        assert_eq!(w.bits_at(70), 2);
        w.add_shifted(-2, 70);
        assert!(w.is_zero());
        let mut w = Wide::<4>::from_u128(u128::MAX);
        w.mul_pow10(20);
        assert_eq!(
            w.decimal_digits(),
            format!("{}{}", u128::MAX, "0".repeat(20))
        );
        w.div_pow10(20);
        assert_eq!(w.to_u128(), Some(u128::MAX));
    }

    #[test]
    fn integer_sums_overflow_into_numeric_and_back() {
        let mut s = sum_of(&[Value::Int(i64::MAX), Value::Int(1)]);
        // Verified with PostgreSQL 15: sum(int8) = 9223372036854775808.
        assert_eq!(text(s.sum().unwrap()), "9223372036854775808");
        s.add(&Value::Int(1), -1);
        assert!(matches!(s.sum().unwrap(), Value::Int(i64::MAX)));
        s.add(&Value::Int(i64::MAX), -1);
        assert!(s.sum().unwrap().is_null());
    }

    #[test]
    fn numeric_sums_keep_the_largest_scale() {
        // PostgreSQL 15: sum(1.50, 2.5) = 4.00.
        let mut s = sum_of(&[num("1.50"), num("2.5")]);
        assert_eq!(text(s.sum().unwrap()), "4.00");
        s.add(&num("1.50"), -1);
        assert_eq!(text(s.sum().unwrap()), "2.5");
    }

    #[test]
    fn averages_have_postgres_scale() {
        // Each expected value printed by PostgreSQL 15.
        let ints = |v: &[i64]| sum_of(&v.iter().map(|&i| Value::Int(i)).collect::<Vec<_>>());
        let avg = |s: ExactSum| text(s.avg().unwrap());
        assert_eq!(avg(ints(&[1, 2])), "1.5000000000000000");
        assert_eq!(avg(ints(&[1, 1, 1])), "1.00000000000000000000");
        assert_eq!(avg(ints(&[0, 0])), "0.00000000000000000000");
        assert_eq!(avg(ints(&[100000, 100000])), "100000.000000000000");
        assert_eq!(avg(ints(&[-1, -2])), "-1.5000000000000000");
        assert_eq!(avg(ints(&[1, 2, 2])), "1.6666666666666667");
        assert_eq!(avg(ints(&[12345678, 1])), "6172839.500000000000");
        assert_eq!(
            avg(sum_of(&[num("1.5"), num("2.25")])),
            "1.8750000000000000"
        );
        assert_eq!(
            avg(sum_of(&[num("0.0001"), num("0.0002")])),
            "0.00015000000000000000"
        );
        assert_eq!(avg(sum_of(&[Value::Float(1.0), Value::Float(2.0)])), "1.5");
    }

    #[test]
    fn interval_sums_and_averages_as_postgres() {
        let iv = |s: &str| {
            Value::Text(s.into())
                .coerce(&aqueduct_values::DataType::Interval)
                .unwrap()
        };
        let mut s = sum_of(&[iv("1 mon"), iv("1 day"), iv("1 hour")]);
        assert_eq!(text(s.sum().unwrap()), "1 mon 1 day 01:00:00");
        assert_eq!(text(s.avg().unwrap()), "10 days 08:20:00");
        s.add(&iv("1 day"), -1);
        assert_eq!(text(s.sum().unwrap()), "1 mon 01:00:00");
        let s = sum_of(&[iv("1 mon"), iv("2 mons 1 day")]);
        assert_eq!(text(s.avg().unwrap()), "1 mon 15 days 12:00:00");
        // Past the range while many values are in, exact again once they
        // are retracted.
        let mut s = sum_of(&[iv("2147483647 days"), iv("2147483647 days")]);
        assert_eq!(s.sum().unwrap_err().code, "22008");
        s.add(&iv("2147483647 days"), -1);
        assert_eq!(text(s.sum().unwrap()), "2147483647 days");
        let mut s = sum_of(&[iv("9223372036854775807 us")]);
        s.add(&iv("9223372036854775807 us"), i64::MAX - 1);
        s.add(&iv("9223372036854775807 us"), 1 - i64::MAX);
        assert_eq!(text(s.sum().unwrap()), "2562047788:00:54.775807");
    }

    #[test]
    fn float_sums_are_exact_under_retraction() {
        let mut s = sum_of(&[Value::Float(1e20), Value::Float(1.0)]);
        s.add(&Value::Float(1e20), -1);
        assert!(matches!(s.sum().unwrap(), Value::Float(f) if f == 1.0));
        // 0.1 three times: the exact sum is a tie, rounded to even.
        let s = sum_of(&[Value::Float(0.1), Value::Float(0.1), Value::Float(0.1)]);
        assert!(matches!(s.sum().unwrap(), Value::Float(f) if f == 0.1 + 0.1 + 0.1));
        let tiny = f64::from_bits(1);
        let s = sum_of(&[Value::Float(tiny), Value::Float(tiny)]);
        assert!(matches!(s.sum().unwrap(), Value::Float(f) if f == 2.0 * tiny));
        let s = sum_of(&[Value::Float(f64::MAX), Value::Float(-1.5)]);
        assert!(matches!(s.sum().unwrap(), Value::Float(f) if f == f64::MAX));
    }

    #[test]
    fn float_specials_match_postgres() {
        let s = sum_of(&[Value::Float(f64::INFINITY), Value::Float(f64::NEG_INFINITY)]);
        assert!(matches!(s.sum().unwrap(), Value::Float(f) if f.is_nan()));
        // PostgreSQL 15: ERROR: value out of range: overflow.
        let s = sum_of(&[Value::Float(1e308), Value::Float(1e308)]);
        assert_eq!(s.sum().unwrap_err().code, "22003");
    }

    #[test]
    fn float_sums_round_correctly() {
        // Against a reference built from exact rationals on random inputs:
        // sums of two floats must equal IEEE addition (correctly rounded).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = f64::from_bits(x);
            // Half the time b's exponent is near a's, so the bits overlap.
            let y = x.rotate_left(29);
            let b = if y & 1 == 0 {
                f64::from_bits(y)
            } else {
                let exp = ((x >> 52) & 0x7ff).saturating_sub(y % 60);
                f64::from_bits((y & 0x800F_FFFF_FFFF_FFFF) | exp << 52)
            };
            if !a.is_finite() || !b.is_finite() || !(a + b).is_finite() || a + b == 0.0 {
                continue;
            }
            let s = sum_of(&[Value::Float(a), Value::Float(b)]);
            let Value::Float(got) = s.sum().unwrap() else {
                panic!("not a float")
            };
            assert_eq!(got.to_bits(), (a + b).to_bits(), "{a:e} + {b:e}");
        }
        // Around the subnormal boundary.
        for i in 0..2000u64 {
            let a = f64::from_bits((i * 0x1234_5678_9ABC) % (1 << 54));
            let b = -f64::from_bits((i * 0x0FED_CBA9_8765 + 7) % (1 << 53));
            let s = sum_of(&[Value::Float(a), Value::Float(b)]);
            let Value::Float(got) = s.sum().unwrap() else {
                panic!("not a float")
            };
            assert_eq!(got, a + b, "{a:e} + {b:e}");
        }
    }
}
