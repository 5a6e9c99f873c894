//! Slot counters on the agent's side (`docs/publications.md` §3.3, §5.2,
//! §5.5): `done[s]`, the fallback debt per slot, and the index from each
//! unsatisfied slot to the items waiting on it.

use std::collections::{BTreeMap, HashMap};

use crate::window::Key;

/// `done` per slot for the current epoch, debts, and waiters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    done: Vec<u64>,
    debt: HashMap<u32, u64>,
    /// Per slot, the items waiting on it by the count they need: a bump
    /// wakes only those it satisfies, so a long chain on one slot (one
    /// user's transactions) costs one wake-up per item, not one per
    /// item and bump.
    waiters: HashMap<u32, BTreeMap<u64, Vec<Key>>>,
    /// Planted defect: debts are never paid.
    pub keep_debts: bool,
    /// Planted defect: a new epoch keeps the old counters.
    pub keep_on_epoch: bool,
}

impl Counters {
    /// Starts an epoch over `slots` counters (hashed slots plus `GLOBAL`):
    /// every count back to zero, no debt, nobody waiting.
    pub fn start_epoch(&mut self, slots: usize) {
        self.waiters.clear();
        if self.keep_on_epoch && self.done.len() == slots {
            return;
        }
        self.done = vec![0; slots];
        self.debt.clear();
    }

    /// Forgets every waiter (their items left the window).
    pub fn clear_waiters(&mut self) {
        self.waiters.clear();
    }

    /// Counters in this epoch.
    pub fn slots(&self) -> usize {
        self.done.len()
    }

    /// The first slot whose count is below what `pairs` need, with the
    /// count needed.
    pub fn first_unsatisfied(&self, pairs: &[(u32, u64)]) -> Option<(u32, u64)> {
        pairs
            .iter()
            .find(|&&(s, need)| self.done[s as usize] < need)
            .copied()
    }

    /// Takes the waiters of `slot` that its count now satisfies.
    fn satisfied_waiters(&mut self, slot: u32, woken: &mut Vec<Key>) {
        let done = self.done[slot as usize];
        let Some(by_need) = self.waiters.get_mut(&slot) else {
            return;
        };
        let later = by_need.split_off(&(done + 1));
        for (_, keys) in std::mem::replace(by_need, later) {
            woken.extend(keys);
        }
        if by_need.is_empty() {
            self.waiters.remove(&slot);
        }
    }

    /// Whether `pairs` are satisfied if the items counted in `extra` (slot
    /// to bumps) were applied first.
    pub fn satisfied_with(&self, pairs: &[(u32, u64)], extra: &HashMap<u32, u64>) -> bool {
        pairs
            .iter()
            .all(|&(s, need)| self.done[s as usize] + extra.get(&s).copied().unwrap_or(0) >= need)
    }

    /// Registers `key` as waiting on `slot` until its count reaches `need`.
    pub fn wait(&mut self, slot: u32, need: u64, key: Key) {
        self.waiters
            .entry(slot)
            .or_default()
            .entry(need)
            .or_default()
            .push(key);
    }

    /// Counts an applied item: each of its slots goes up by one, or pays
    /// one unit of that slot's debt. Returns the items that waited on the
    /// bumped slots (to check again).
    pub fn complete(&mut self, pairs: &[(u32, u64)]) -> Vec<Key> {
        let mut woken = Vec::new();
        for &(s, _) in pairs {
            match self.debt.get_mut(&s) {
                Some(d) if !self.keep_debts => {
                    *d -= 1;
                    if *d == 0 {
                        self.debt.remove(&s);
                    }
                }
                _ => {
                    self.done[s as usize] += 1;
                    self.satisfied_waiters(s, &mut woken);
                }
            }
        }
        woken
    }

    /// Causal fallback for an item that waited too long: each slot below
    /// its need is raised to it, the difference owed as debt. Returns the
    /// slots raised and the items that waited on them.
    pub fn fallback(&mut self, pairs: &[(u32, u64)]) -> (Vec<u32>, Vec<Key>) {
        let mut raised = Vec::new();
        let mut woken = Vec::new();
        for &(s, need) in pairs {
            let done = &mut self.done[s as usize];
            if *done < need {
                *self.debt.entry(s).or_default() += need - *done;
                *done = need;
                raised.push(s);
                self.satisfied_waiters(s, &mut woken);
            }
        }
        (raised, woken)
    }

    /// Slots with debt outstanding.
    pub fn debt_slots(&self) -> usize {
        self.debt.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bump_wakes_only_the_waiters_it_satisfies() {
        let mut c = Counters::default();
        c.start_epoch(4);
        for need in 1..=5u64 {
            c.wait(2, need, (need, 0));
        }
        assert_eq!(c.complete(&[(2, 0)]), vec![(1, 0)]);
        assert_eq!(c.complete(&[(2, 1)]), vec![(2, 0)]);
        // A fallback raising the count to 4 wakes 3 and 4, not 5.
        let (_, woken) = c.fallback(&[(2, 4)]);
        assert_eq!(woken, vec![(3, 0), (4, 0)]);
    }

    #[test]
    fn debt_is_paid_before_counting() {
        let mut c = Counters::default();
        c.start_epoch(4);
        let (raised, _) = c.fallback(&[(1, 2)]);
        assert_eq!(raised, vec![1]);
        assert_eq!(c.first_unsatisfied(&[(1, 2)]), None);
        // Each item applied pays one unit while debt is owed; then counts.
        c.complete(&[(1, 2)]);
        assert_eq!(c.debt_slots(), 1);
        c.complete(&[(1, 0)]);
        assert_eq!(c.debt_slots(), 0);
        assert_eq!(c.first_unsatisfied(&[(1, 3)]), Some((1, 3)));
        c.complete(&[(1, 1)]);
        assert_eq!(c.first_unsatisfied(&[(1, 4)]), Some((1, 4)));
        assert_eq!(c.first_unsatisfied(&[(1, 3)]), None);
    }
}
