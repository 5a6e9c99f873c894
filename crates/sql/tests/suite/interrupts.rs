//! A running statement stops when its `statement_timeout` passes, when it
//! is cancelled from another thread, when it exceeds
//! `aqueduct.statement_memory_limit`, and at shutdown; the session (and
//! others) go on. Each statement would otherwise run for hours or grow
//! without bound; the tests give them a generous time bound.

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use aqueduct_sql::{Outcome, Session, SqlError};

/// No statement here may take longer than this to stop.
const BOUND: Duration = Duration::from_secs(60);

/// A table of `n` rows that all join with each other.
fn session(dir: &std::path::Path, n: usize) -> Session {
    let e = common::engine(dir);
    let mut s = e.session();
    common::ok(&mut s, "CREATE TABLE t (id int PRIMARY KEY, k int)");
    let values: Vec<String> = (0..n).map(|i| format!("({i}, 1)")).collect();
    common::ok(
        &mut s,
        &format!("INSERT INTO t VALUES {}", values.join(", ")),
    );
    s
}

/// Three-way self-join: n³ rows.
const BLOW_UP: &str =
    "SELECT count(*) FROM t a JOIN t b ON a.k = b.k JOIN t c ON b.k = c.k JOIN t d ON c.k = d.k";

/// Waits (at most [`BOUND`]) until `engine` runs a statement.
fn await_running(engine: &aqueduct_sql::Engine) {
    let started = Instant::now();
    while engine.metrics.running.load(Ordering::Relaxed) == 0 {
        assert!(started.elapsed() < BOUND, "no statement started");
        std::thread::yield_now();
    }
}

/// Runs `sql` on its own thread and waits at most [`BOUND`].
fn run_bounded(s: Session, sql: &'static str) -> (Session, Result<Outcome, SqlError>, Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = s;
        let started = Instant::now();
        let r = s.execute(sql).pop().unwrap();
        let _ = tx.send((s, r, started.elapsed()));
    });
    rx.recv_timeout(BOUND).expect("the statement did not stop")
}

#[test]
fn statement_timeout_stops_a_runaway_join() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path(), 300);
    common::ok(&mut s, "SET statement_timeout = '300ms'");
    let (mut s, r, took) = run_bounded(s, BLOW_UP);
    let e = r.expect_err("timed out");
    assert_eq!(e.code, "57014", "{e}");
    assert_eq!(e.message, "canceling statement due to statement timeout");
    assert!(e.hint.is_some());
    assert!(took < BOUND, "{took:?}");
    // The next statement has its own deadline, and the session goes on.
    assert_eq!(
        common::rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec!["300"]]
    );
    common::ok(&mut s, "SET statement_timeout = 0");
    assert_eq!(
        common::rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec!["300"]]
    );
}

#[test]
fn a_timeout_inside_a_transaction_fails_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path(), 300);
    common::ok(&mut s, "SET statement_timeout = '300ms'");
    common::ok(&mut s, "BEGIN");
    common::ok(&mut s, "INSERT INTO t VALUES (1000, 2)");
    let (mut s, r, _) = run_bounded(s, BLOW_UP);
    assert_eq!(r.unwrap_err().code, "57014");
    assert_eq!(common::run(&mut s, "SELECT 1").unwrap_err().code, "25P02");
    common::ok(&mut s, "ROLLBACK");
    // Nothing of the transaction was written.
    assert_eq!(
        common::rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec!["300"]]
    );
}

#[test]
fn a_cancel_from_another_thread_stops_the_running_statement() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path(), 300);
    let handle = s.interrupt_handle();
    let engine = s.engine().clone();
    let canceller = std::thread::spawn(move || {
        await_running(&engine);
        handle.cancel();
    });
    let (mut s, r, _) = run_bounded(s, BLOW_UP);
    canceller.join().unwrap();
    let e = r.expect_err("cancelled");
    assert_eq!(e.code, "57014", "{e}");
    assert_eq!(e.message, "canceling statement due to user request");
    // A cancel applies to the statement that was running only.
    assert_eq!(
        common::rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec!["300"]]
    );
}

#[test]
fn the_statement_memory_limit_fails_a_statement_and_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path(), 1000);
    let mut other = s.engine().session();
    common::ok(&mut s, "SET aqueduct.statement_memory_limit = '32MB'");
    let (mut s, r, _) = run_bounded(s, BLOW_UP);
    let e = r.expect_err("out of memory");
    assert_eq!(e.code, "53200", "{e}");
    assert!(e.hint.is_some());
    assert_eq!(
        common::rows(&mut other, "SELECT count(*) FROM t"),
        vec![vec!["1000"]]
    );
    assert_eq!(
        common::rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec!["1000"]]
    );
    // A bad value is refused with what the setting takes.
    let e = common::run(&mut s, "SET aqueduct.statement_memory_limit = 'lots'").unwrap_err();
    assert_eq!(e.code, "22023");
    let e = common::run(&mut s, "SET statement_timeout = 'soon'").unwrap_err();
    assert_eq!(e.code, "22023");
}

#[test]
fn shutdown_stops_every_running_statement() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path(), 300);
    let engine = s.engine().clone();
    let stopper = std::thread::spawn(move || {
        await_running(&engine);
        engine.interrupt_all();
    });
    let (_, r, _) = run_bounded(s, BLOW_UP);
    stopper.join().unwrap();
    assert_eq!(r.unwrap_err().code, "57P01");
}

/// What direct evaluation makes after the scan (projected rows, sort keys,
/// DISTINCT rows, groups) counts against the memory limit too: a statement
/// that reads a few MB and makes rows of 32 times their size stops.
#[test]
fn rows_made_after_the_scan_count_against_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let e = common::engine(dir.path());
    let mut s = e.session();
    common::ok(&mut s, "CREATE TABLE w (id int PRIMARY KEY, v text)");
    let value = "x".repeat(1_000);
    let values: Vec<String> = (0..2_100).map(|i| format!("({i}, '{value}')")).collect();
    common::ok(
        &mut s,
        &format!("INSERT INTO w VALUES {}", values.join(", ")),
    );
    let wide = vec!["v"; 32].join(" || ");
    // Under the limit: the scan alone.
    common::ok(&mut s, "SET aqueduct.statement_memory_limit = '16MB'");
    assert_eq!(
        common::rows(&mut s, "SELECT count(*) FROM w WHERE v <> ''"),
        vec![vec!["2100"]]
    );
    for sql in [
        format!("SELECT {wide} FROM w"),
        format!("SELECT id FROM w ORDER BY {wide}"),
        format!("SELECT DISTINCT id, {wide} FROM w"),
    ] {
        let e = common::run(&mut s, &sql).expect_err("over the limit");
        assert_eq!(e.code, "53200", "{sql}: {e}");
    }
    common::ok(&mut s, "SET aqueduct.statement_memory_limit = 0");
    assert_eq!(
        common::rows(
            &mut s,
            &format!("SELECT count(*) FROM (SELECT {wide} AS c FROM w) s")
        ),
        vec![vec!["2100"]]
    );
}
