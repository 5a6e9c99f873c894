//! Row locks for READ COMMITTED and REPEATABLE READ transactions
//! (`docs/sql.md`, "Transactions and isolation").
//!
//! A transaction at those levels locks every row it writes, and every row
//! a foreign key of a row it writes references, before its statement's
//! writes stand; it holds the locks until it commits or rolls back. A lock
//! held by another transaction is waited for; a wait that would close a
//! cycle fails with 40P01 (deadlock detected). Writers that take no locks
//! respect them: an autocommit statement waits for the rows it writes to
//! be unlocked, a SERIALIZABLE commit that writes a locked row fails with
//! 40001. So a row locked by a transaction changes only by that transaction
//! until it ends.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{Key, TableId};

/// A transaction's number, for the lock table.
pub type TxnId = u64;

/// A row, as locks name it.
pub type RowId = (TableId, Key);

/// Why a lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// 40P01: waiting would close a cycle of waits.
    Deadlock { holder: TxnId },
    /// 55P03: `NOWAIT` and the row is locked.
    NotAvailable,
    /// The statement was cancelled, timed out or the server stops.
    Interrupted(aqueduct_expr::SqlError),
}

impl From<LockError> for aqueduct_expr::SqlError {
    fn from(e: LockError) -> aqueduct_expr::SqlError {
        use aqueduct_expr::SqlError;
        match e {
            LockError::Deadlock { holder } => SqlError::new("40P01", "deadlock detected")
                .with_detail(format!(
                    "The transaction waited for a row locked by transaction {holder}, which waits for a row this one locked."
                ))
                .with_hint("the transaction may succeed if retried"),
            LockError::NotAvailable => {
                SqlError::new("55P03", "could not obtain lock on row")
            }
            LockError::Interrupted(e) => e,
        }
    }
}

#[derive(Default)]
struct State {
    owners: HashMap<RowId, TxnId>,
    held: HashMap<TxnId, Vec<RowId>>,
    /// Who waits for whom (one row at a time).
    waits_for: HashMap<TxnId, TxnId>,
    /// Statements that hold no locks waiting for a row.
    lockless_waiting: usize,
}

impl State {
    /// Whether `from` waiting for `to` closes a cycle.
    fn closes_cycle(&self, from: TxnId, mut to: TxnId) -> bool {
        let mut steps = 0;
        loop {
            if to == from {
                return true;
            }
            match self.waits_for.get(&to) {
                Some(&next) if steps < self.waits_for.len() => {
                    to = next;
                    steps += 1;
                }
                _ => return false,
            }
        }
    }
}

/// How often a waiter looks at its statement's interrupt flag.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The row locks of one database.
#[derive(Default)]
pub struct LockTable {
    state: Mutex<State>,
    released: Condvar,
}

impl LockTable {
    /// Locks `rows` for `txn`, waiting for other holders; with `nowait`
    /// fails at once instead. Rows already held by `txn` are kept.
    /// `interrupted` is asked now and then while waiting.
    pub fn acquire(
        &self,
        txn: TxnId,
        rows: &[RowId],
        nowait: bool,
        interrupted: &dyn Fn() -> Result<(), aqueduct_expr::SqlError>,
    ) -> Result<(), LockError> {
        let mut state = self.state.lock();
        for row in rows {
            loop {
                match state.owners.get(row) {
                    None => {
                        state.owners.insert(row.clone(), txn);
                        state.held.entry(txn).or_default().push(row.clone());
                        break;
                    }
                    Some(&owner) if owner == txn => break,
                    Some(&owner) => {
                        if nowait {
                            return Err(LockError::NotAvailable);
                        }
                        if state.closes_cycle(txn, owner) {
                            return Err(LockError::Deadlock { holder: owner });
                        }
                        state.waits_for.insert(txn, owner);
                        self.released.wait_for(&mut state, WAIT_SLICE);
                        state.waits_for.remove(&txn);
                        if let Err(e) = interrupted() {
                            return Err(LockError::Interrupted(e));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The transaction holding `row`, if any.
    pub fn holder(&self, row: &RowId) -> Option<TxnId> {
        self.state.lock().owners.get(row).copied()
    }

    /// The first of `rows` locked by a transaction other than `txn`.
    pub fn locked_by_other<'k>(
        &self,
        txn: Option<TxnId>,
        rows: impl Iterator<Item = (TableId, &'k Key)>,
    ) -> Option<RowId> {
        let state = self.state.lock();
        // No row is locked (the common case, and a bulk load's): nothing
        // to look up.
        if state.owners.is_empty() {
            return None;
        }
        rows.map(|(t, k)| (t, k.clone()))
            .find(|r| state.owners.get(r).is_some_and(|o| Some(*o) != txn))
    }

    /// Waits until `row` is not locked, up to `deadline`, asking
    /// `interrupted` now and then (an autocommit statement before it
    /// writes the row).
    pub fn wait_unlocked(
        &self,
        row: &RowId,
        interrupted: &dyn Fn() -> Result<(), aqueduct_expr::SqlError>,
    ) -> Result<(), aqueduct_expr::SqlError> {
        let mut state = self.state.lock();
        state.lockless_waiting += 1;
        let mut result = Ok(());
        while state.owners.contains_key(row) {
            self.released.wait_for(&mut state, WAIT_SLICE);
            if let Err(e) = interrupted() {
                result = Err(e);
                break;
            }
        }
        state.lockless_waiting -= 1;
        result
    }

    /// Releases every lock `txn` holds (it committed or rolled back).
    pub fn release_all(&self, txn: TxnId) {
        let mut state = self.state.lock();
        if let Some(rows) = state.held.remove(&txn) {
            for r in rows {
                if state.owners.get(&r) == Some(&txn) {
                    state.owners.remove(&r);
                }
            }
            self.released.notify_all();
        }
        state.waits_for.remove(&txn);
    }

    /// How many transactions wait for a lock (for metrics and tests).
    pub fn waiters(&self) -> usize {
        let state = self.state.lock();
        state.waits_for.len() + state.lockless_waiting
    }

    /// How many rows are locked (for metrics and tests).
    pub fn len(&self) -> usize {
        self.state.lock().owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_values::Value;

    fn row(k: i64) -> RowId {
        (1, vec![Value::Int(k)])
    }

    #[test]
    fn a_cycle_of_waits_is_refused_and_release_wakes_waiters() {
        let locks = std::sync::Arc::new(LockTable::default());
        let ok = || Ok(());
        locks.acquire(1, &[row(1)], false, &ok).unwrap();
        locks.acquire(2, &[row(2)], false, &ok).unwrap();
        assert!(matches!(
            locks.acquire(2, &[row(1)], true, &ok),
            Err(LockError::NotAvailable)
        ));
        // 1 waits for 2 on another thread; 2 asking for 1's row is a cycle.
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(1, &[row(2)], false, &|| Ok(())))
        };
        while locks.state.lock().waits_for.get(&1) != Some(&2) {
            std::thread::yield_now();
        }
        assert!(matches!(
            locks.acquire(2, &[row(1)], false, &ok),
            Err(LockError::Deadlock { holder: 1 })
        ));
        locks.release_all(2);
        waiter.join().unwrap().unwrap();
        assert_eq!(locks.holder(&row(2)), Some(1));
        locks.release_all(1);
        assert!(locks.is_empty());
    }
}
