//! Time enters the engine through one clock, read once per statement (and
//! kept for a transaction block): `now()` is bound into a statement as a
//! constant, a maintained view refuses it, and a query that uses it is
//! never answered from state kept as time passes.

use crate::common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common::{engine, ok, rows, run, HandClock, CLOCK_START as START, HOUR};

#[test]
fn now_is_the_clock_read_once_per_statement_and_per_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let clock = Arc::new(HandClock(AtomicI64::new(START)));
    e.set_clock(clock.clone());
    let mut s = e.session();
    assert_eq!(
        rows(&mut s, "SELECT now(), current_timestamp"),
        vec![vec!["2024-01-01 00:00:00+00", "2024-01-01 00:00:00+00"]]
    );
    ok(&mut s, "BEGIN");
    clock.0.store(START + HOUR, Ordering::SeqCst);
    // now() is when the transaction began; statement_timestamp() moves.
    assert_eq!(
        rows(&mut s, "SELECT now(), statement_timestamp()"),
        vec![vec!["2024-01-01 00:00:00+00", "2024-01-01 01:00:00+00"]]
    );
    clock.0.store(START + 2 * HOUR, Ordering::SeqCst);
    assert_eq!(
        rows(
            &mut s,
            "SELECT transaction_timestamp(), statement_timestamp()"
        ),
        vec![vec!["2024-01-01 00:00:00+00", "2024-01-01 02:00:00+00"]]
    );
    ok(&mut s, "COMMIT");
    assert_eq!(
        rows(&mut s, "SELECT now()"),
        vec![vec!["2024-01-01 02:00:00+00"]]
    );
}

#[test]
fn maintained_views_refuse_now_and_reads_follow_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let clock = Arc::new(HandClock(AtomicI64::new(START)));
    e.set_clock(clock.clone());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE ev (id bigint PRIMARY KEY, owner bigint, at timestamptz)",
    );
    ok(
        &mut s,
        "INSERT INTO ev VALUES (1, 7, '2024-01-01 00:30:00+00'), (2, 7, '2024-01-01 05:00:00+00')",
    );
    let err = run(
        &mut s,
        "CREATE VIEW upcoming AS SELECT id FROM ev WHERE at > now()",
    )
    .unwrap_err();
    assert_eq!(err.code, "0A000", "{err}");
    assert!(err.message.contains("now()"), "{err}");
    assert!(err.hint.is_some(), "{err}");
    // A join with a pinned key would be an automatic view; with now() it
    // is evaluated afresh each time, so a row leaves as its time passes.
    let q = "SELECT a.id FROM ev a JOIN ev b ON a.id = b.id WHERE a.owner = 7 AND a.at > now() ORDER BY a.id";
    assert_eq!(rows(&mut s, q), vec![vec!["1"], vec!["2"]]);
    clock.0.store(START + HOUR, Ordering::SeqCst);
    assert_eq!(rows(&mut s, q), vec![vec!["2"]]);
    let p = s.prepare(q, &[]).unwrap();
    clock.0.store(START + 6 * HOUR, Ordering::SeqCst);
    assert_eq!(
        common::prepared_rows(&mut s, &p, &[]),
        Vec::<Vec<String>>::new()
    );
    // Direct evaluation of one table follows it too.
    clock.0.store(START, Ordering::SeqCst);
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM ev WHERE at > now()"),
        vec![vec!["2"]]
    );
}
