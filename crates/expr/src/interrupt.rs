//! Stopping a running statement: one [`Interrupt`] per session, armed for
//! each statement with its deadline (`statement_timeout`) and memory budget
//! (`aqueduct.statement_memory_limit`), cancelled from other threads (a
//! protocol CancelRequest, server shutdown).
//!
//! The statement's thread enters the handle ([`Interrupt::enter`]) for the
//! statement's duration; the loops that can run long or allocate much (table
//! scans, filters, grouping, sorting, compiling a plan, filling a one-shot
//! dataflow, a join's output) call [`check`] every [`CHECK_EVERY`] rows or
//! per node, and [`charge`] for the bytes they produce. Both are no-ops on a
//! thread that entered no handle (the dataflow worker maintaining views).
//! Nothing checks once a write has reached its commit: a write is
//! interrupted only before it appends to the log.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::SqlError;

/// Rows a loop may go through between two checks.
pub const CHECK_EVERY: usize = 1024;

/// Default of `aqueduct.statement_memory_limit`: bytes of rows one statement
/// may produce (scanned, joined, grouped, sorted, returned) before it fails
/// with SQLSTATE 53200.
pub const DEFAULT_STATEMENT_MEMORY_BYTES: u64 = 1024 * 1024 * 1024;

const RUNNING: u8 = 0;
const CANCELLED: u8 = 1;
/// The session's client is gone: this and every later statement stop.
const CLOSED: u8 = 2;

/// The interrupt handle of one session. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct Interrupt {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: AtomicU8,
    /// Set once for the whole server (shutdown): every statement stops.
    shutdown: Arc<AtomicBool>,
    armed: parking_lot::Mutex<Budget>,
    used: AtomicU64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Budget {
    deadline: Option<Instant>,
    memory: Option<u64>,
    /// `lock_timeout`: longest one wait for a row lock.
    lock_wait: Option<Duration>,
}

/// What bounds one statement: `statement_timeout`,
/// `aqueduct.statement_memory_limit`, `lock_timeout` (`None` or zero for
/// the durations: none).
#[derive(Debug, Default, Clone, Copy)]
pub struct Bounds {
    pub timeout: Option<Duration>,
    pub memory: Option<u64>,
    pub lock_timeout: Option<Duration>,
}

impl Interrupt {
    /// A handle that also stops when `shutdown` is set.
    pub fn new(shutdown: Arc<AtomicBool>) -> Interrupt {
        Interrupt {
            inner: Arc::new(Inner {
                shutdown,
                ..Default::default()
            }),
        }
    }

    /// Cancels the statement running now, if any (a cancel that arrives
    /// between statements is dropped, as PostgreSQL does).
    pub fn cancel(&self) {
        self.inner.state.store(CANCELLED, Ordering::SeqCst);
    }

    /// Stops the statement running now and every later one: the session's
    /// client is gone (unlike [`cancel`](Interrupt::cancel), it is not
    /// reset when the next statement starts).
    pub fn close(&self) {
        self.inner.state.store(CLOSED, Ordering::SeqCst);
    }

    /// Runs one statement with this handle: `now + timeout` its deadline
    /// (`None` or zero: none), `memory` its budget of bytes.
    pub fn enter<R>(&self, now: Instant, bounds: Bounds, f: impl FnOnce() -> R) -> R {
        *self.inner.armed.lock() = Budget {
            deadline: bounds.timeout.filter(|t| !t.is_zero()).map(|t| now + t),
            memory: bounds.memory,
            lock_wait: bounds.lock_timeout.filter(|t| !t.is_zero()),
        };
        self.inner.used.store(0, Ordering::Relaxed);
        // A cancel that came between statements is dropped; a closed
        // session stays closed.
        let _ = self.inner.state.compare_exchange(
            CANCELLED,
            RUNNING,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        struct Restore(Option<Interrupt>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| *c.borrow_mut() = self.0.take());
            }
        }
        let _restore = Restore(previous);
        f()
    }

    /// Err if the statement must stop: cancelled, past its deadline (as of
    /// `now`), or the server is shutting down.
    pub fn check_at(&self, now: Instant) -> Result<(), SqlError> {
        if self.inner.shutdown.load(Ordering::Relaxed) {
            return Err(SqlError::new(
                "57P01",
                "terminating connection due to administrator command",
            )
            .with_hint("the server is shutting down; reconnect when it is back"));
        }
        match self.inner.state.load(Ordering::Relaxed) {
            CANCELLED => {
                return Err(SqlError::new(
                    "57014",
                    "canceling statement due to user request",
                ))
            }
            CLOSED => {
                return Err(SqlError::new(
                    "08006",
                    "canceling statement: the connection to the client was lost",
                ))
            }
            _ => {}
        }
        if let Some(deadline) = self.inner.armed.lock().deadline {
            if now >= deadline {
                return Err(SqlError::new(
                    "57014",
                    "canceling statement due to statement timeout",
                )
                .with_hint("make the statement cheaper, or raise statement_timeout (SET statement_timeout = '30s'; 0 turns it off)"));
            }
        }
        Ok(())
    }

    /// Adds `bytes` to the statement's memory account: Err past its budget.
    pub fn charge(&self, bytes: u64) -> Result<(), SqlError> {
        let used = self.inner.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        match self.inner.armed.lock().memory {
            Some(limit) if used > limit => Err(SqlError::new(
                "53200",
                format!("out of memory: the statement needed more than {limit} bytes"),
            )
            .with_detail("aqueduct.statement_memory_limit bounds the rows one statement produces")
            .with_hint("narrow the statement (a WHERE, a LIMIT, fewer joins), or raise SET aqueduct.statement_memory_limit")),
            _ => Ok(()),
        }
    }

    /// Bytes charged to the statement running now (or the last one).
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Interrupt>> = const { RefCell::new(None) };
}

/// Err if the statement this thread runs must stop (see
/// [`Interrupt::check_at`]); Ok on a thread running no statement.
pub fn check() -> Result<(), SqlError> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(i) => i.check_at(Instant::now()),
        None => Ok(()),
    })
}

/// [`check`] for a statement waiting for a row lock since `since`: also
/// Err once the wait is longer than its `lock_timeout` (55P03).
pub fn check_lock_wait(since: Instant) -> Result<(), SqlError> {
    check()?;
    let limit = CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .and_then(|i| i.inner.armed.lock().lock_wait)
    });
    match limit {
        Some(limit) if since.elapsed() >= limit => Err(SqlError::new(
            "55P03",
            "canceling statement due to lock timeout",
        )
        .with_hint(
            "another transaction holds the row; retry, or raise lock_timeout (0 turns it off)",
        )),
        _ => Ok(()),
    }
}

/// Charges `bytes` to the statement this thread runs (see
/// [`Interrupt::charge`]), and checks it.
pub fn charge(bytes: u64) -> Result<(), SqlError> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(i) => {
            i.charge(bytes)?;
            i.check_at(Instant::now())
        }
        None => Ok(()),
    })
}

/// Rows sorted at once by [`sort_by`] between two checks.
pub const SORT_RUN: usize = 8 * CHECK_EVERY;

/// Sorts `v` stably by `cmp`, like `slice::sort_by`, checking the running
/// statement's interrupt at bounded intervals (see [`check`]): runs of
/// [`SORT_RUN`] rows are sorted alone, then merged pairwise, with a check
/// after each run and every [`CHECK_EVERY`] rows merged. On an Err the
/// rows are dropped and `v` is left empty.
pub fn sort_by<T>(
    v: &mut Vec<T>,
    mut cmp: impl FnMut(&T, &T) -> std::cmp::Ordering,
) -> Result<(), SqlError> {
    if v.len() <= SORT_RUN {
        v.sort_by(&mut cmp);
        return Ok(());
    }
    let mut runs: Vec<Vec<T>> = Vec::with_capacity(v.len().div_ceil(SORT_RUN));
    let mut rows = std::mem::take(v).into_iter();
    loop {
        let mut run: Vec<T> = rows.by_ref().take(SORT_RUN).collect();
        if run.is_empty() {
            break;
        }
        check()?;
        run.sort_by(&mut cmp);
        runs.push(run);
    }
    // Pairwise merges: each row is moved once per pass, log2(runs) passes.
    while runs.len() > 1 {
        let mut merged = Vec::with_capacity(runs.len().div_ceil(2));
        let mut pairs = runs.into_iter();
        while let Some(left) = pairs.next() {
            let Some(right) = pairs.next() else {
                merged.push(left);
                break;
            };
            let mut out = Vec::with_capacity(left.len() + right.len());
            let mut left = left.into_iter().peekable();
            let mut right = right.into_iter().peekable();
            loop {
                // Ties take the left (earlier) row: the sort stays stable.
                let next = match (left.peek(), right.peek()) {
                    (Some(l), Some(r)) => {
                        if cmp(r, l) == std::cmp::Ordering::Less {
                            right.next()
                        } else {
                            left.next()
                        }
                    }
                    (Some(_), None) => left.next(),
                    (None, Some(_)) => right.next(),
                    (None, None) => break,
                };
                out.extend(next);
                if out.len().is_multiple_of(CHECK_EVERY) {
                    check()?;
                }
            }
            merged.push(out);
        }
        runs = merged;
    }
    *v = runs.pop().unwrap_or_default();
    Ok(())
}

/// Whether this thread runs a statement with an interrupt handle.
pub fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_by_sorts_stably_as_the_slice_sort_does() {
        for n in [0, 1, SORT_RUN, SORT_RUN + 1, 5 * SORT_RUN + 17] {
            // Many ties, each row remembering its place.
            let rows: Vec<(u64, usize)> = (0..n)
                .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % 97, i))
                .collect();
            let mut expected = rows.clone();
            expected.sort_by_key(|a| a.0);
            let mut got = rows;
            sort_by(&mut got, |a, b| a.0.cmp(&b.0)).unwrap();
            assert_eq!(got, expected, "{n} rows");
        }
    }

    #[test]
    fn a_closed_handle_stops_every_later_statement() {
        let i = Interrupt::default();
        i.cancel();
        // A cancel between statements is dropped.
        i.enter(Instant::now(), Bounds::default(), || check().unwrap());
        i.close();
        for _ in 0..2 {
            let e = i
                .enter(Instant::now(), Bounds::default(), check)
                .unwrap_err();
            assert_eq!(e.code, "08006");
        }
    }

    #[test]
    fn a_lock_wait_past_lock_timeout_stops_the_statement() {
        let i = Interrupt::default();
        let bounds = Bounds {
            lock_timeout: Some(Duration::from_millis(50)),
            ..Bounds::default()
        };
        i.enter(Instant::now(), bounds, || {
            check_lock_wait(Instant::now()).unwrap();
            let long_ago = Instant::now() - Duration::from_millis(60);
            assert_eq!(check_lock_wait(long_ago).unwrap_err().code, "55P03");
        });
        // Zero is no limit, as in PostgreSQL.
        i.enter(Instant::now(), Bounds::default(), || {
            check_lock_wait(Instant::now() - Duration::from_secs(3600)).unwrap();
        });
    }

    #[test]
    fn sort_by_stops_a_cancelled_statement() {
        let i = Interrupt::default();
        i.enter(Instant::now(), Bounds::default(), || {
            let mut rows: Vec<u64> = (0..4 * SORT_RUN as u64).rev().collect();
            let mut compared = 0usize;
            i.cancel();
            let e = sort_by(&mut rows, |a, b| {
                compared += 1;
                a.cmp(b)
            })
            .unwrap_err();
            assert_eq!(e.code, "57014");
            // Stopped before it sorted the second run.
            assert!(compared < 2 * SORT_RUN * 16, "{compared}");
            assert!(rows.is_empty());
        });
    }
}
