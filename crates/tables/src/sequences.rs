//! Sequences: their durable state in the catalog and the cache of values
//! a server hands out between log records (`docs/sequences.md`).
//!
//! A value is handed out from a range held in memory. The first time a
//! transaction takes a value beyond what the log says is reserved, it
//! writes a `ReserveSequence` record for the whole range with its other
//! writes; so a value in a committed row is always covered by a committed
//! reservation, and after a restart the sequence goes on after it. No log
//! sync of its own: the reservation rides on the transaction's commit.
//! Values taken by transactions that never commit may be handed out again
//! after a crash (never while the server runs), as in PostgreSQL.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::schema::{SequenceDef, TableId};
use crate::Txn;

/// How many values one reservation covers (PostgreSQL logs 32 ahead too).
pub const SEQUENCE_RESERVE_VALUES: i64 = 32;

/// A sequence as the log left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceState {
    pub def: SequenceDef,
    /// PostgreSQL's `last_value`: the last value handed out (or reserved),
    /// or the next one when `is_called` is false.
    pub value: i64,
    pub is_called: bool,
    /// Counts `setval`s and `ALTER SEQUENCE`s; reservations name the
    /// generation they were made in.
    pub generation: u64,
}

impl SequenceState {
    pub fn new(def: SequenceDef) -> SequenceState {
        SequenceState {
            value: def.start,
            is_called: false,
            generation: 0,
            def,
        }
    }

    /// The next value to hand out after a restart.
    fn next_after_log(&self) -> Option<i64> {
        if self.is_called {
            self.value.checked_add(self.def.increment)
        } else {
            Some(self.value)
        }
    }

    /// Whether `v` is already covered by the log.
    fn durable(&self, v: i64) -> bool {
        match self.next_after_log() {
            None => true,
            Some(next) => self.before(v, next),
        }
    }

    /// Whether `a` comes before `b` in the sequence's direction.
    fn before(&self, a: i64, b: i64) -> bool {
        if self.def.increment > 0 {
            a < b
        } else {
            a > b
        }
    }

    fn in_range(&self, v: i64) -> bool {
        (self.def.min..=self.def.max).contains(&v)
    }

    /// Applies a reservation from the log.
    pub fn reserve(&mut self, upto: i64, generation: u64) {
        if generation != self.generation {
            return;
        }
        if !self.is_called || self.before(self.value, upto) {
            self.value = upto;
            self.is_called = true;
        }
    }

    /// Applies a `setval` or `RESTART`.
    pub fn set(&mut self, value: i64, is_called: bool) {
        self.value = value;
        self.is_called = is_called;
        self.generation += 1;
    }
}

/// Why `nextval` gave no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SequenceError {
    /// 2200H: the sequence reached its limit.
    Exhausted { name: String, limit: i64, max: bool },
}

impl std::fmt::Display for SequenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequenceError::Exhausted { name, limit, max } => write!(
                f,
                "nextval: reached {} value of sequence \"{name}\" ({limit})",
                if *max { "maximum" } else { "minimum" }
            ),
        }
    }
}

/// What one session's `nextval` calls returned: `currval` and `lastval`
/// read it.
#[derive(Clone, Debug, Default)]
pub struct SessionSequences {
    values: HashMap<TableId, i64>,
    last: Option<i64>,
}

impl SessionSequences {
    pub fn returned(&mut self, seq: TableId, v: i64) {
        self.values.insert(seq, v);
        self.last = Some(v);
    }

    pub fn current(&self, seq: TableId) -> Option<i64> {
        self.values.get(&seq).copied()
    }

    pub fn last(&self) -> Option<i64> {
        self.last
    }
}

/// A range that starts where the log leaves `state`: it ends at the last
/// value the log covers.
fn fresh(state: &SequenceState) -> Range {
    Range {
        generation: state.generation,
        last: state.value,
        called: state.is_called,
        limit: if state.is_called {
            state.value
        } else {
            state.value.saturating_sub(state.def.increment)
        },
    }
}

/// The values a server has in hand: per sequence, the next one and the
/// end of the range reserved for it.
#[derive(Debug, Default)]
pub struct SequenceCache {
    ranges: Mutex<HashMap<TableId, Range>>,
}

#[derive(Clone, Copy, Debug)]
struct Range {
    generation: u64,
    /// The last value handed out, or the next one when `called` is false
    /// (PostgreSQL's `last_value` and `is_called`). The next value adds
    /// the sequence's increment as it is now, so `ALTER SEQUENCE
    /// INCREMENT` applies from the next call.
    last: i64,
    called: bool,
    /// The last value of the range reserved so far.
    limit: i64,
}

impl SequenceCache {
    /// Hands out the next value of `seq` (as the log left it in `state`),
    /// adding a reservation to `txn` when the value is not yet covered.
    pub fn next(&self, state: &SequenceState, txn: &mut Txn) -> Result<i64, SequenceError> {
        let mut ranges = self.ranges.lock();
        let range = ranges.entry(state.def.id).or_insert_with(|| fresh(state));
        if range.generation != state.generation {
            *range = fresh(state);
        }
        let exhausted = || SequenceError::Exhausted {
            name: state.def.name.clone(),
            limit: if state.def.increment > 0 {
                state.def.max
            } else {
                state.def.min
            },
            max: state.def.increment > 0,
        };
        let next = if range.called {
            range.last.checked_add(state.def.increment)
        } else {
            Some(range.last)
        };
        let Some(v) = next.filter(|&v| state.in_range(v)) else {
            return Err(exhausted());
        };
        if state.before(range.limit, v) {
            // A new range: as many values as fit before the bound.
            let span = state
                .def
                .increment
                .saturating_mul(SEQUENCE_RESERVE_VALUES - 1);
            range.limit = v.saturating_add(span).clamp(state.def.min, state.def.max);
        }
        range.last = v;
        range.called = true;
        if !state.durable(v) {
            txn.reserve_sequence(state.def.id, range.limit, state.generation);
        }
        Ok(v)
    }

    /// PostgreSQL's `last_value` and `is_called` of `seq`: what this
    /// server handed out last, where the log says less.
    pub fn current(&self, state: &SequenceState) -> (i64, bool) {
        match self.ranges.lock().get(&state.def.id) {
            Some(r) if r.generation == state.generation => (r.last, r.called),
            _ => (state.value, state.is_called),
        }
    }

    /// Forgets what is cached for `seq` (dropped, or set anew).
    pub fn forget(&self, seq: TableId) {
        self.ranges.lock().remove(&seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SchemaChange, Write};

    fn def(increment: i64, min: i64, max: i64, start: i64) -> SequenceDef {
        SequenceDef {
            id: 5,
            name: "s".into(),
            ty: "bigint".into(),
            increment,
            min,
            max,
            start,
            owned_by: None,
        }
    }

    fn reservations(txn: &Txn) -> Vec<i64> {
        txn.writes()
            .iter()
            .filter_map(|w| match w {
                Write::Schema(SchemaChange::ReserveSequence { upto, .. }) => Some(*upto),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn one_reservation_covers_a_range_and_a_restart_goes_on_after_it() {
        let mut state = SequenceState::new(def(1, 1, i64::MAX, 1));
        let cache = SequenceCache::default();
        let mut txn = Txn::default();
        let got: Vec<i64> = (0..40)
            .map(|_| cache.next(&state, &mut txn).unwrap())
            .collect();
        assert_eq!(got, (1..=40).collect::<Vec<_>>());
        assert_eq!(reservations(&txn), vec![32, 64]);
        // The log has the reservations; a new server starts after them.
        for upto in reservations(&txn) {
            state.reserve(upto, 0);
        }
        let restarted = SequenceCache::default();
        assert_eq!(restarted.next(&state, &mut Txn::default()).unwrap(), 65);
    }

    #[test]
    fn a_value_not_covered_by_the_log_is_reserved_by_every_transaction_using_it() {
        let state = SequenceState::new(def(1, 1, i64::MAX, 1));
        let cache = SequenceCache::default();
        let (mut a, mut b) = (Txn::default(), Txn::default());
        assert_eq!(cache.next(&state, &mut a).unwrap(), 1);
        // `a` has not committed: `b`'s value is not covered yet either.
        assert_eq!(cache.next(&state, &mut b).unwrap(), 2);
        assert_eq!(reservations(&a), vec![32]);
        assert_eq!(reservations(&b), vec![32]);
    }

    #[test]
    fn descending_bounded_and_set_sequences() {
        let mut state = SequenceState::new(def(-2, -5, -1, -1));
        let cache = SequenceCache::default();
        let mut txn = Txn::default();
        let got: Vec<i64> = (0..3)
            .map(|_| cache.next(&state, &mut txn).unwrap())
            .collect();
        assert_eq!(got, vec![-1, -3, -5]);
        assert!(matches!(
            cache.next(&state, &mut txn),
            Err(SequenceError::Exhausted { max: false, .. })
        ));
        state.set(-2, false);
        assert_eq!(cache.next(&state, &mut txn).unwrap(), -2);
        // A reservation from before the setval is void.
        state.reserve(-100, 0);
        assert_eq!((state.value, state.generation), (-2, 1));
    }
}
