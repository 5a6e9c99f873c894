//! A linearizability checker for registers (Wing and Gong's search, with
//! Lowe's memo of visited states): a history of writes and reads of one
//! register, each with the instants it was invoked and answered, is
//! linearizable when some order of the operations respects real time (an
//! operation answered before another was invoked comes first) and makes
//! every read return the last value written before it.
//!
//! Histories of several registers are checked register by register
//! (linearizability is local). A failed operation whose effect is unknown
//! is not allowed in: the harness only records acknowledged writes and
//! answered reads, and a write whose answer was lost would need to be
//! recorded as possibly taking effect at any later time.

use std::collections::HashSet;
use std::time::Instant;

/// One operation on a register.
#[derive(Clone, Debug)]
pub struct Op {
    pub invoked: Instant,
    pub answered: Instant,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Wrote this value (values are unique per register).
    Write(i64),
    /// Read this value (`None`: the register did not exist yet).
    Read(Option<i64>),
}

/// Most operations of one register checked (the search is exponential in
/// the concurrency, not in the length, but its memo grows with both).
pub const MAX_OPS: usize = 4096;

/// `Ok` when `ops` (one register, starting absent) is linearizable; the
/// error says how far an order got.
pub fn check(ops: &[Op]) -> Result<(), String> {
    assert!(ops.len() <= MAX_OPS, "too many operations for one register");
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| ops[i].invoked);
    let mut done = vec![false; ops.len()];
    let mut seen: HashSet<(Vec<u64>, Option<i64>)> = HashSet::new();
    // Depth-first over (operations placed, the register's value), on an
    // explicit stack: each frame is the value before it and the candidate
    // tried next.
    let mut stack: Vec<(Option<i64>, usize, usize)> = Vec::new();
    let mut value: Option<i64> = None;
    let mut placed = 0usize;
    let mut from = 0usize;
    let mut furthest = 0usize;
    loop {
        if placed == ops.len() {
            return Ok(());
        }
        // The operations that may come next: not placed, invoked before
        // every unplaced operation was answered.
        let horizon = order
            .iter()
            .filter(|&&i| !done[i])
            .map(|&i| ops[i].answered)
            .min()
            .expect("an operation is left");
        let mut next = None;
        for (k, &i) in order.iter().enumerate().skip(from) {
            if done[i] {
                continue;
            }
            if ops[i].invoked > horizon {
                break;
            }
            let after = match &ops[i].kind {
                Kind::Write(v) => Some(*v),
                Kind::Read(v) if *v == value => value,
                Kind::Read(_) => continue,
            };
            done[i] = true;
            let key = (bits(&done), after);
            if seen.insert(key) {
                next = Some((k, i, after));
                break;
            }
            done[i] = false;
        }
        match next {
            Some((k, _, after)) => {
                stack.push((value, k, order[k]));
                value = after;
                placed += 1;
                furthest = furthest.max(placed);
                from = 0;
            }
            None => {
                let Some((before, k, i)) = stack.pop() else {
                    return Err(format!(
                        "not linearizable: at most {furthest} of the {} operations fit one order",
                        ops.len()
                    ));
                };
                done[i] = false;
                value = before;
                placed -= 1;
                from = k + 1;
            }
        }
    }
}

fn bits(done: &[bool]) -> Vec<u64> {
    let mut out = vec![0u64; done.len().div_ceil(64)];
    for (i, d) in done.iter().enumerate() {
        if *d {
            out[i / 64] |= 1 << (i % 64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An operation over [a, b] in milliseconds after `t0`.
    fn op(t0: Instant, a: u64, b: u64, kind: Kind) -> Op {
        Op {
            invoked: t0 + Duration::from_millis(a),
            answered: t0 + Duration::from_millis(b),
            kind,
        }
    }

    #[test]
    fn sequential_and_concurrent_histories_that_fit_pass() {
        let t = Instant::now();
        let h = vec![
            op(t, 0, 1, Kind::Read(None)),
            op(t, 2, 3, Kind::Write(1)),
            op(t, 4, 5, Kind::Read(Some(1))),
            // Concurrent with the write of 2: either value may be read.
            op(t, 6, 10, Kind::Write(2)),
            op(t, 7, 8, Kind::Read(Some(1))),
            op(t, 7, 9, Kind::Read(Some(2))),
            op(t, 11, 12, Kind::Read(Some(2))),
        ];
        check(&h).unwrap();
    }

    #[test]
    fn a_stale_read_is_caught() {
        let t = Instant::now();
        // The write of 2 was answered before the read began, which still
        // returns 1.
        let h = vec![
            op(t, 0, 1, Kind::Write(1)),
            op(t, 2, 3, Kind::Write(2)),
            op(t, 4, 5, Kind::Read(Some(1))),
        ];
        assert!(check(&h).is_err());
    }

    #[test]
    fn reads_going_back_in_time_are_caught() {
        let t = Instant::now();
        // Both reads overlap the write, but the first sees the new value
        // and the second, which began after it, the old one.
        let h = vec![
            op(t, 0, 1, Kind::Write(1)),
            op(t, 2, 20, Kind::Write(2)),
            op(t, 3, 4, Kind::Read(Some(2))),
            op(t, 5, 6, Kind::Read(Some(1))),
        ];
        assert!(check(&h).is_err());
        // A value never written is caught too.
        assert!(check(&[op(t, 0, 1, Kind::Read(Some(9)))]).is_err());
    }
}
