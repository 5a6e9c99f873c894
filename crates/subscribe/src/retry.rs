//! Retry delays: exponential backoff from [`RETRY_BASE_MS`] to
//! [`RETRY_MAX_MS`], with jitter drawn from the transaction's LSN so the
//! same failure retries at the same time under the simulator.

use aqueduct_publish::dep_hash::mix64;

use crate::limits::{RETRY_BASE_MS, RETRY_MAX_MS};

/// The delay before attempt `attempt + 1` of the transaction at `lsn`
/// (`attempt` counts failures so far, from 1): between half and all of
/// `min(RETRY_MAX_MS, RETRY_BASE_MS * 2^(attempt-1))`.
pub fn backoff_ms(attempt: u32, lsn: u64) -> u64 {
    let shift = attempt.saturating_sub(1).min(31);
    let full = RETRY_BASE_MS.saturating_mul(1 << shift).min(RETRY_MAX_MS);
    let half = full / 2;
    half + mix64(lsn ^ (u64::from(attempt) << 56)) % (full - half + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        for lsn in [0, 1, 77, u64::MAX] {
            let mut prev_full = 0;
            for a in 1..40 {
                let d = backoff_ms(a, lsn);
                let full = (RETRY_BASE_MS << (a - 1).min(31)).min(RETRY_MAX_MS);
                assert!(d >= full / 2 && d <= full, "{a} {d}");
                assert!(full >= prev_full);
                prev_full = full;
                assert_eq!(d, backoff_ms(a, lsn));
            }
        }
        assert!(backoff_ms(1, 5) <= RETRY_BASE_MS);
        assert!(backoff_ms(30, 5) >= RETRY_MAX_MS / 2);
    }
}
