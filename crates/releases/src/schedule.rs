//! The release schedule: a pure function of the interval and the wall
//! clock, so every client can compute it without asking the server.
//!
//! Release `n` happens at `n × interval` milliseconds after the Unix
//! epoch. Its state is the database as of the last write committed before
//! that instant; its change set holds the writes committed in
//! `[(n − 1) × interval, n × interval)`.

use std::time::Duration;

/// The shortest release interval accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    interval_ms: u64,
}

impl Schedule {
    /// A schedule with releases every `interval` (whole milliseconds, at
    /// least [`MIN_INTERVAL`]).
    pub fn new(interval: Duration) -> Result<Schedule, String> {
        let ms = interval.as_millis();
        if interval < MIN_INTERVAL || !interval.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(format!(
                "a release interval must be a whole number of milliseconds, at least {} ms; got {:?}",
                MIN_INTERVAL.as_millis(),
                interval
            ));
        }
        Ok(Schedule {
            interval_ms: ms as u64,
        })
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// The newest release due at `now_ms` (its time is at or before it).
    pub fn due_at(&self, now_ms: u64) -> u64 {
        now_ms / self.interval_ms
    }

    /// When release `id` happens, in milliseconds since the epoch.
    pub fn time_of(&self, id: u64) -> u64 {
        id * self.interval_ms
    }

    /// The start of the interval whose writes release `id` publishes.
    pub fn interval_start(&self, id: u64) -> u64 {
        id.saturating_sub(1) * self.interval_ms
    }

    /// Whole seconds from `now_ms` until the release after the one due
    /// then: how long a response about the current release stays fresh.
    pub fn seconds_until_next(&self, now_ms: u64) -> u64 {
        let next = self.time_of(self.due_at(now_ms) + 1);
        (next - now_ms) / 1000
    }

    /// Whether `period` (ms) can be a time-map period: a multiple of the
    /// interval, so each release's writes fall in exactly one bucket.
    pub fn fits(&self, period_ms: u64) -> bool {
        period_ms > 0 && period_ms.is_multiple_of(self.interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_fall_on_multiples_of_the_interval() {
        let s = Schedule::new(Duration::from_secs(5)).unwrap();
        assert_eq!(s.due_at(0), 0);
        assert_eq!(s.due_at(4_999), 0);
        assert_eq!(s.due_at(5_000), 1);
        assert_eq!(s.time_of(3), 15_000);
        assert_eq!(s.interval_start(3), 10_000);
        assert_eq!(s.seconds_until_next(15_000), 5);
        assert_eq!(s.seconds_until_next(19_999), 0);
        assert!(s.fits(30_000) && !s.fits(7_000) && !s.fits(0));
    }

    #[test]
    fn odd_intervals_are_refused() {
        assert!(Schedule::new(Duration::from_millis(5)).is_err());
        assert!(Schedule::new(Duration::from_micros(1_500)).is_err());
        assert!(Schedule::new(Duration::from_millis(250)).is_ok());
    }
}
