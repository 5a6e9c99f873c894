//! Reading many rows without stalling commits.
//!
//! An upquery may need a million rows of one key. Read under one read lock
//! of the tables, that would hold every commit back until the last row is
//! copied. [`Database::rows_at`] instead reads in pieces of at most
//! [`ROWS_PER_READ_LOCK`] rows, each under its own lock, so commits run in
//! between, and returns the rows exactly as of the LSN of its last piece.
//!
//! The pieces are read at rising LSNs T1 ≤ … ≤ Tn, each over a range of
//! keys: piece j holds the matching rows whose key lies in (end of piece
//! j-1, end of piece j], as of Tj. From the first piece on, a *tap* records
//! every change committed to a row that matches the read before or after
//! the change (commits offer their changes to the taps while they hold the
//! tables' write lock, so none slips between a piece and the tap). At the
//! end a change at LSN t to key K is already in the rows read iff t ≤ Tj
//! for the piece j whose range holds K; the others are applied in LSN
//! order. What is left is every matching row as of Tn: the tap is removed
//! under the lock of the last piece, so it holds no change after Tn.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::Lsn;
use parking_lot::{Mutex, RwLockReadGuard};

use crate::table::matches;
use crate::{Database, Key, Row, TableId};

/// Most rows read (or, for a scan, visited) under one read lock of the
/// tables: a few microseconds of copying. A commit waiting for the lock
/// waits for at most one piece, and a writer committing back to back finds
/// the reader holding the lock again each time, so pieces must be short
/// next to a commit (tens of microseconds) for writes to go on at nearly
/// full speed; re-seeking the index per piece costs the reader well under
/// a microsecond.
pub const ROWS_PER_READ_LOCK: usize = 128;

/// Longest a read in pieces waits for a commit under way before its next
/// piece: long enough for any ordinary commit, short enough that back to
/// back commits cannot starve the read.
const COMMIT_WAIT: Duration = Duration::from_micros(200);

/// Rows read between two looks at whether a commit is under way.
const ROWS_PER_STEP: usize = 16;

/// A read of the rows of `table` whose `columns` equal `values`.
pub type RowsAsk = (TableId, Vec<usize>, Row);

/// Changes committed during a read in pieces, to the rows it reads.
pub(crate) struct Tap {
    asks: Vec<RowsAsk>,
    changes: Mutex<Vec<Tapped>>,
}

/// One change to a row of an ask: the row before and after, each only if
/// it matches the ask.
struct Tapped {
    ask: usize,
    lsn: Lsn,
    key: Key,
    old: Option<Arc<Row>>,
    new: Option<Arc<Row>>,
}

impl Tap {
    /// Records a committed change if it touches a row of an ask.
    pub(crate) fn offer(
        &self,
        lsn: Lsn,
        table: TableId,
        key: &Key,
        old: Option<&Arc<Row>>,
        new: Option<&Arc<Row>>,
    ) {
        for (i, (t, columns, values)) in self.asks.iter().enumerate() {
            if *t != table {
                continue;
            }
            let pick = |r: Option<&Arc<Row>>| r.filter(|r| matches(r, columns, values)).cloned();
            let (old, new) = (pick(old), pick(new));
            if old.is_some() || new.is_some() {
                self.changes.lock().push(Tapped {
                    ask: i,
                    lsn,
                    key: key.clone(),
                    old,
                    new,
                });
            }
        }
    }
}

/// One ask's progress: the rows read so far, in key order, and per piece
/// the last key it covers (`None`: to the end) and the LSN it was read at.
#[derive(Default)]
struct Progress {
    rows: Vec<(Key, Arc<Row>)>,
    pieces: Vec<(Option<Key>, Lsn)>,
    resume: Option<Key>,
    done: bool,
}

impl Database {
    /// For each ask, the rows of its table whose columns equal its values,
    /// all as of one LSN, which is returned too: read in pieces of at most
    /// `per_lock` rows, each under its own read lock (module comment), so
    /// commits go on meanwhile. Rows are in key order.
    pub fn rows_at(&self, asks: &[RowsAsk], per_lock: usize) -> (Vec<Vec<Arc<Row>>>, Lsn) {
        let mut progress: Vec<Progress> = asks.iter().map(|_| Progress::default()).collect();
        let mut tap: Option<Arc<Tap>> = None;
        loop {
            if tap.is_some() {
                self.let_commit_finish();
            }
            // Recursive: the caller may hold a read guard further up.
            let catalog = self.catalog.read_recursive();
            let lsn = catalog.lsn();
            let mut budget = per_lock;
            let mut stepped = false;
            'piece: for ((table, columns, values), p) in asks.iter().zip(&mut progress) {
                while !p.done && budget > 0 {
                    // Once commits are tapped, a piece ends as soon as one
                    // is under way (after at least one step, so the read
                    // always advances): the commit then finds the lock free
                    // and does not have to sleep until the piece ends.
                    if stepped && tap.is_some() && self.commit.is_locked() {
                        break 'piece;
                    }
                    stepped = true;
                    let step = budget.min(ROWS_PER_STEP);
                    let (rows, resume) = match catalog.table_by_id(*table) {
                        Some(t) => t.rows_matching(columns, values, p.resume.as_ref(), step),
                        None => (Vec::new(), None),
                    };
                    // An unfinished read stopped at the step's budget.
                    budget = match resume {
                        Some(_) => budget - step,
                        None => budget.saturating_sub(rows.len().max(1)),
                    };
                    p.rows.extend(rows);
                    p.done = resume.is_none();
                    p.pieces.push((resume.clone(), lsn));
                    p.resume = resume;
                }
            }
            if progress.iter().all(|p| p.done) {
                if let Some(tap) = &tap {
                    self.untap(tap);
                }
                drop(catalog);
                let changes = tap.map(|t| std::mem::take(&mut *t.changes.lock()));
                let rows = progress
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| settle(p, changes.iter().flatten().filter(|c| c.ask == i)))
                    .collect();
                return (rows, lsn);
            }
            // More to read: from here on, record what commits change.
            if tap.is_none() {
                let t = Arc::new(Tap {
                    asks: asks.to_vec(),
                    changes: Mutex::new(Vec::new()),
                });
                self.taps.lock().push(t.clone());
                self.tapping.fetch_add(1, Ordering::AcqRel);
                tap = Some(t);
            }
            // A recursive read lock does not wait for a queued writer, so
            // hand the lock over to a waiting commit before the next piece.
            RwLockReadGuard::unlock_fair(catalog);
        }
    }

    /// Before the next piece, lets a commit under way finish (for up to
    /// [`COMMIT_WAIT`]): a writer committing back to back then takes the
    /// tables' locks without waiting for pieces, and the read goes on
    /// between its commits. Spins: a commit's locks are held for
    /// microseconds, less than putting a thread to sleep and waking it.
    fn let_commit_finish(&self) {
        let started = Instant::now();
        while self.commit.is_locked() && started.elapsed() < COMMIT_WAIT {
            std::hint::spin_loop();
        }
    }

    fn untap(&self, tap: &Arc<Tap>) {
        let mut taps = self.taps.lock();
        let before = taps.len();
        taps.retain(|t| !Arc::ptr_eq(t, tap));
        assert_eq!(taps.len() + 1, before, "a tap is registered once");
        self.tapping.fetch_sub(1, Ordering::AcqRel);
    }

    /// Offers a committed change to the reads in progress. Called with the
    /// tables' write lock held.
    pub(crate) fn offer_to_taps(
        &self,
        lsn: Lsn,
        table: TableId,
        key: &Key,
        old: Option<&Arc<Row>>,
        new: Option<&Arc<Row>>,
    ) {
        if self.tapping.load(Ordering::Acquire) == 0 {
            return;
        }
        for tap in self.taps.lock().iter() {
            tap.offer(lsn, table, key, old, new);
        }
    }
}

/// The rows of one ask as of the LSN of its last piece: the changes the
/// pieces read before them missed are applied in LSN order.
fn settle<'a>(p: Progress, changes: impl Iterator<Item = &'a Tapped>) -> Vec<Arc<Row>> {
    let mut changes = changes.peekable();
    if changes.peek().is_none() {
        return p.rows.into_iter().map(|(_, r)| r).collect();
    }
    let mut rows: BTreeMap<Key, Arc<Row>> = p.rows.into_iter().collect();
    for c in changes {
        let piece = p
            .pieces
            .partition_point(|(end, _)| end.as_ref().is_some_and(|e| *e < c.key));
        let (_, read_at) = &p.pieces[piece];
        if c.lsn <= *read_at {
            continue;
        }
        if c.old.is_some() {
            assert!(
                rows.remove(&c.key).is_some(),
                "a change at LSN {} removes a row the read does not hold",
                c.lsn
            );
        }
        if let Some(new) = &c.new {
            rows.insert(c.key.clone(), new.clone());
        }
    }
    rows.into_values().collect()
}
