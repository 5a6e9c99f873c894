//! The isolation levels, case by case: for each level, the anomalies
//! PostgreSQL allows and forbids, with the outcome PostgreSQL gives (each
//! case notes it). READ COMMITTED and REPEATABLE READ lock the rows they
//! write; SERIALIZABLE stays optimistic and validated at commit.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_sql::{Engine, Session};
use common::{engine, ok, rows, run};

const LEVELS: [&str; 3] = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"];

fn setup() -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE acc (id int PRIMARY KEY, bal int NOT NULL)",
    );
    ok(&mut s, "INSERT INTO acc VALUES (1, 100), (2, 100)");
    (dir, e)
}

fn begin(s: &mut Session, level: &str) {
    ok(s, &format!("BEGIN ISOLATION LEVEL {level}"));
}

fn balance(s: &mut Session, id: i64) -> i64 {
    rows(s, &format!("SELECT bal FROM acc WHERE id = {id}"))[0][0]
        .parse()
        .unwrap()
}

/// Waits until `n` transactions wait for a row lock.
fn until_waiting(e: &Engine, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while e.database().locks.waiters() < n {
        assert!(Instant::now() < deadline, "no transaction came to wait");
        std::thread::yield_now();
    }
}

/// Runs `sql` in `s` on another thread (it may wait for a lock).
fn spawn(
    mut s: Session,
    sql: &'static str,
) -> std::thread::JoinHandle<(Session, Result<(), String>)> {
    std::thread::spawn(move || {
        let r = run(&mut s, sql).map(|_| ()).map_err(|e| e.code.to_string());
        (s, r)
    })
}

/// Lost update: two transactions add to one balance. PostgreSQL: under
/// READ COMMITTED the second waits for the first and adds to its result
/// (both commit, 120); under REPEATABLE READ and SERIALIZABLE one fails
/// with 40001.
#[test]
fn concurrent_increments_are_never_lost() {
    for level in LEVELS {
        let (_dir, e) = setup();
        let (mut a, mut b) = (e.session(), e.session());
        begin(&mut a, level);
        begin(&mut b, level);
        // Both read first, as an application would.
        assert_eq!(balance(&mut a, 1), 100);
        assert_eq!(balance(&mut b, 1), 100);
        ok(&mut a, "UPDATE acc SET bal = bal + 10 WHERE id = 1");
        let waiting = spawn(b, "UPDATE acc SET bal = bal + 10 WHERE id = 1");
        if level != "SERIALIZABLE" {
            until_waiting(&e, 1);
        }
        ok(&mut a, "COMMIT");
        let (mut b, updated) = waiting.join().unwrap();
        let committed = updated.and_then(|_| {
            run(&mut b, "COMMIT")
                .map(|_| ())
                .map_err(|e| e.code.to_string())
        });
        if committed.is_err() {
            run(&mut b, "ROLLBACK").ok();
        }
        let mut s = e.session();
        match level {
            "READ COMMITTED" => {
                assert_eq!(committed, Ok(()), "{level}");
                assert_eq!(balance(&mut s, 1), 120, "{level}");
            }
            _ => {
                assert_eq!(committed, Err("40001".into()), "{level}");
                assert_eq!(balance(&mut s, 1), 110, "{level}");
            }
        }
    }
}

/// Non-repeatable read: PostgreSQL's READ COMMITTED sees the other
/// transaction's commit on the second read; REPEATABLE READ and
/// SERIALIZABLE see their snapshot (SERIALIZABLE here: the read is
/// validated instead, and the transaction fails at commit if it wrote).
#[test]
fn a_second_read_sees_a_commit_only_under_read_committed() {
    for level in ["READ COMMITTED", "REPEATABLE READ"] {
        let (_dir, e) = setup();
        let (mut a, mut b) = (e.session(), e.session());
        begin(&mut a, level);
        assert_eq!(balance(&mut a, 1), 100);
        ok(&mut b, "UPDATE acc SET bal = 50 WHERE id = 1");
        let again = balance(&mut a, 1);
        match level {
            "READ COMMITTED" => assert_eq!(again, 50),
            _ => assert_eq!(again, 100),
        }
        ok(&mut a, "COMMIT");
    }
}

/// Write skew: each transaction checks the sum and takes from a different
/// account. PostgreSQL allows it under READ COMMITTED and REPEATABLE READ
/// (both commit) and forbids it under SERIALIZABLE (one fails, 40001).
#[test]
fn write_skew_is_refused_only_under_serializable() {
    for level in LEVELS {
        let (_dir, e) = setup();
        let (mut a, mut b) = (e.session(), e.session());
        begin(&mut a, level);
        begin(&mut b, level);
        assert_eq!(rows(&mut a, "SELECT sum(bal) FROM acc")[0][0], "200");
        assert_eq!(rows(&mut b, "SELECT sum(bal) FROM acc")[0][0], "200");
        ok(&mut a, "UPDATE acc SET bal = bal - 150 WHERE id = 1");
        ok(&mut b, "UPDATE acc SET bal = bal - 150 WHERE id = 2");
        let ra = run(&mut a, "COMMIT").map(|_| ()).map_err(|e| e.code);
        let rb = run(&mut b, "COMMIT").map(|_| ()).map_err(|e| e.code);
        match level {
            "SERIALIZABLE" => assert!(ra.is_err() || rb.is_err(), "{level}: both committed"),
            _ => assert_eq!((ra, rb), (Ok(()), Ok(())), "{level}"),
        }
    }
}

/// Two transactions lock two rows in opposite orders: PostgreSQL detects
/// the deadlock and fails one with 40P01; the other commits.
#[test]
fn a_deadlock_fails_one_transaction() {
    for level in ["READ COMMITTED", "REPEATABLE READ"] {
        let (_dir, e) = setup();
        let (mut a, mut b) = (e.session(), e.session());
        begin(&mut a, level);
        begin(&mut b, level);
        ok(&mut a, "UPDATE acc SET bal = bal + 1 WHERE id = 1");
        ok(&mut b, "UPDATE acc SET bal = bal + 1 WHERE id = 2");
        let waiting = spawn(a, "UPDATE acc SET bal = bal + 1 WHERE id = 2");
        until_waiting(&e, 1);
        let err = run(&mut b, "UPDATE acc SET bal = bal + 1 WHERE id = 1").unwrap_err();
        assert_eq!(err.code, "40P01", "{level}");
        ok(&mut b, "ROLLBACK");
        let (mut a, r) = waiting.join().unwrap();
        assert_eq!(r, Ok(()));
        ok(&mut a, "COMMIT");
        let mut s = e.session();
        assert_eq!((balance(&mut s, 1), balance(&mut s, 2)), (101, 101));
    }
}

/// Writers that take no locks respect them: an autocommit UPDATE waits for
/// the READ COMMITTED transaction holding the row and then adds to its
/// result; a SERIALIZABLE transaction writing the row fails with 40001.
#[test]
fn writers_without_locks_respect_them() {
    let (_dir, e) = setup();
    let (mut a, b) = (e.session(), e.session());
    begin(&mut a, "READ COMMITTED");
    ok(&mut a, "UPDATE acc SET bal = bal + 10 WHERE id = 1");
    let waiting = spawn(b, "UPDATE acc SET bal = bal * 2 WHERE id = 1");
    until_waiting(&e, 1);
    ok(&mut a, "COMMIT");
    let (mut b, r) = waiting.join().unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(balance(&mut b, 1), 220);

    let (mut c, mut d) = (e.session(), e.session());
    begin(&mut c, "READ COMMITTED");
    ok(&mut c, "UPDATE acc SET bal = 0 WHERE id = 2");
    begin(&mut d, "SERIALIZABLE");
    ok(&mut d, "UPDATE acc SET bal = 1 WHERE id = 2");
    assert_eq!(run(&mut d, "COMMIT").unwrap_err().code, "40001");
    ok(&mut c, "COMMIT");
    assert_eq!(balance(&mut c, 2), 0);
}

/// A child inserted under READ COMMITTED while another transaction deletes
/// its parent: the delete waits for the insert's transaction and then
/// finds the child (PostgreSQL: 23503), so no child is left without parent.
#[test]
fn a_parent_cannot_go_under_a_concurrent_child() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let (mut a, mut b) = (e.session(), e.session());
    ok(&mut a, "CREATE TABLE parent (id int PRIMARY KEY)");
    ok(
        &mut a,
        "CREATE TABLE child (id int PRIMARY KEY, p int REFERENCES parent)",
    );
    ok(&mut a, "INSERT INTO parent VALUES (1)");
    begin(&mut a, "READ COMMITTED");
    begin(&mut b, "READ COMMITTED");
    ok(&mut a, "INSERT INTO child VALUES (1, 1)");
    let waiting = spawn(b, "DELETE FROM parent WHERE id = 1");
    until_waiting(&e, 1);
    ok(&mut a, "COMMIT");
    let (mut b, r) = waiting.join().unwrap();
    assert_eq!(r, Err("23503".into()));
    ok(&mut b, "ROLLBACK");
    assert_eq!(rows(&mut a, "SELECT count(*) FROM parent")[0][0], "1");
}

#[test]
fn the_level_is_chosen_per_transaction_and_by_default() {
    let (_dir, e) = setup();
    let mut s = e.session();
    assert_eq!(
        rows(&mut s, "SHOW transaction_isolation")[0][0],
        "serializable"
    );
    ok(
        &mut s,
        "SET default_transaction_isolation = 'read committed'",
    );
    ok(&mut s, "BEGIN");
    assert_eq!(
        rows(&mut s, "SHOW transaction_isolation")[0][0],
        "read committed"
    );
    ok(&mut s, "COMMIT");
    ok(&mut s, "BEGIN");
    ok(&mut s, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    assert_eq!(
        rows(&mut s, "SHOW transaction_isolation")[0][0],
        "repeatable read"
    );
    ok(&mut s, "SELECT 1");
    ok(&mut s, "UPDATE acc SET bal = 0 WHERE id = 1");
    assert_eq!(
        run(&mut s, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            .unwrap_err()
            .code,
        "25001"
    );
    ok(&mut s, "ROLLBACK");
    assert_eq!(
        run(&mut s, "SET default_transaction_isolation = 'chaos'")
            .unwrap_err()
            .code,
        "22023"
    );
    // Locks end with their session.
    let mut t = e.session();
    begin(&mut t, "READ COMMITTED");
    ok(&mut t, "UPDATE acc SET bal = 5 WHERE id = 2");
    assert_eq!(e.database().locks.len(), 1);
    drop(t);
    assert_eq!(e.database().locks.len(), 0);
}

/// pgbench's TPC-B transaction under READ COMMITTED, rows of a table
/// without a primary key among its writes: it commits.
#[test]
fn a_locking_transaction_inserts_into_a_table_without_a_key() {
    let (_dir, e) = setup();
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE history (id int, delta int)");
    begin(&mut s, "READ COMMITTED");
    ok(&mut s, "UPDATE acc SET bal = bal + 5 WHERE id = 1");
    ok(&mut s, "INSERT INTO history VALUES (1, 5)");
    ok(&mut s, "COMMIT");
    assert_eq!(rows(&mut s, "SELECT count(*) FROM history")[0][0], "1");
    assert_eq!(e.database().locks.len(), 0);
}

/// A job queue on `FOR UPDATE SKIP LOCKED`: two workers each take a
/// different job; `NOWAIT` on a taken job fails with 55P03; a plain
/// `FOR UPDATE` waits for the taker to end (PostgreSQL's behaviour).
#[test]
fn workers_take_different_jobs_with_skip_locked() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let (mut a, mut b) = (e.session(), e.session());
    ok(
        &mut a,
        "CREATE TABLE jobs (id int PRIMARY KEY, done boolean NOT NULL)",
    );
    ok(
        &mut a,
        "INSERT INTO jobs VALUES (1, false), (2, false), (3, false)",
    );
    let take = "SELECT id FROM jobs WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED";
    begin(&mut a, "READ COMMITTED");
    begin(&mut b, "READ COMMITTED");
    assert_eq!(rows(&mut a, take), vec![vec!["1".to_string()]]);
    assert_eq!(rows(&mut b, take), vec![vec!["2".to_string()]]);
    assert_eq!(
        run(&mut b, "SELECT id FROM jobs WHERE id = 1 FOR UPDATE NOWAIT")
            .unwrap_err()
            .code,
        "55P03"
    );
    ok(&mut b, "ROLLBACK");
    begin(&mut b, "READ COMMITTED");
    ok(&mut a, "UPDATE jobs SET done = true WHERE id = 1");
    let waiting = spawn(
        b,
        "SELECT id FROM jobs WHERE id = 1 AND NOT done FOR UPDATE",
    );
    until_waiting(&e, 1);
    ok(&mut a, "COMMIT");
    let (mut b, r) = waiting.join().unwrap();
    assert_eq!(r, Ok(()));
    // After the wait it read the committed row: done, so none.
    assert!(rows(
        &mut b,
        "SELECT id FROM jobs WHERE id = 1 AND NOT done FOR UPDATE"
    )
    .is_empty());
    assert_eq!(rows(&mut b, take), vec![vec!["2".to_string()]]);
    ok(&mut b, "COMMIT");
}

/// `lock_timeout`: a statement that waits longer than it for a row lock
/// fails with 55P03, in a transaction block and outside one; the holder
/// is not disturbed, and 0 waits as long as it takes.
#[test]
fn a_wait_for_a_row_lock_ends_at_lock_timeout() {
    let (_dir, e) = setup();
    let mut holder = e.session();
    begin(&mut holder, "READ COMMITTED");
    ok(&mut holder, "UPDATE acc SET bal = bal + 1 WHERE id = 1");
    let mut waiter = e.session();
    ok(&mut waiter, "SET lock_timeout = '50ms'");
    begin(&mut waiter, "READ COMMITTED");
    let started = Instant::now();
    let err = run(&mut waiter, "UPDATE acc SET bal = bal + 10 WHERE id = 1").unwrap_err();
    assert_eq!(err.code, "55P03", "{err}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    ok(&mut waiter, "ROLLBACK");
    let err = run(&mut waiter, "UPDATE acc SET bal = bal + 10 WHERE id = 1").unwrap_err();
    assert_eq!(err.code, "55P03", "autocommit: {err}");
    // With no limit the wait lasts until the holder ends.
    ok(&mut waiter, "SET lock_timeout = 0");
    let h = spawn(waiter, "UPDATE acc SET bal = bal + 10 WHERE id = 1");
    until_waiting(&e, 1);
    ok(&mut holder, "COMMIT");
    let (mut waiter, r) = h.join().unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(balance(&mut waiter, 1), 111);
}

/// `FOR UPDATE` over a join (as ORMs write `select_for_update()` with a
/// filter across relations): the rows read of each locked table are
/// locked (only those of `OF` tables), `SKIP LOCKED` leaves others' rows
/// out before the LIMIT, `NOWAIT` fails with 55P03, and an `OF` naming a
/// relation not in FROM fails with 42P01 as in PostgreSQL.
#[test]
fn for_update_over_a_join_locks_the_rows_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let (mut a, mut b) = (e.session(), e.session());
    ok(
        &mut a,
        "CREATE TABLE owners (id int PRIMARY KEY, name text NOT NULL)",
    );
    ok(
        &mut a,
        "CREATE TABLE jobs (id int PRIMARY KEY, owner int REFERENCES owners (id), done boolean NOT NULL)",
    );
    ok(&mut a, "INSERT INTO owners VALUES (1, 'ann'), (2, 'bob')");
    ok(
        &mut a,
        "INSERT INTO jobs VALUES (1, 1, false), (2, 1, false), (3, 2, false)",
    );
    let take = "SELECT j.id, o.name FROM jobs j JOIN owners o ON o.id = j.owner \
                WHERE o.name = 'ann' AND NOT j.done ORDER BY j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED";
    begin(&mut a, "READ COMMITTED");
    begin(&mut b, "READ COMMITTED");
    assert_eq!(
        rows(&mut a, take),
        vec![vec!["1".to_string(), "ann".to_string()]]
    );
    assert_eq!(
        rows(&mut b, take),
        vec![vec!["2".to_string(), "ann".to_string()]]
    );
    // Only the jobs were locked: the owner's row is free.
    assert_eq!(
        rows(
            &mut b,
            "SELECT name FROM owners WHERE id = 1 FOR UPDATE NOWAIT"
        ),
        vec![vec!["ann".to_string()]]
    );
    assert_eq!(
        run(
            &mut b,
            "SELECT j.id FROM jobs j JOIN owners o ON o.id = j.owner WHERE j.id = 1 FOR UPDATE NOWAIT"
        )
        .unwrap_err()
        .code,
        "55P03"
    );
    ok(&mut b, "ROLLBACK");
    begin(&mut b, "READ COMMITTED");
    // Without OF every table's rows are locked: b now holds owner 2.
    assert_eq!(
        rows(
            &mut b,
            "SELECT j.id FROM jobs j JOIN owners o ON o.id = j.owner WHERE o.id = 2 FOR UPDATE"
        ),
        vec![vec!["3".to_string()]]
    );
    assert_eq!(
        run(
            &mut a,
            "SELECT id FROM owners WHERE id = 2 FOR UPDATE NOWAIT"
        )
        .unwrap_err()
        .code,
        "55P03"
    );
    ok(&mut b, "COMMIT");
    ok(&mut a, "ROLLBACK");
    assert_eq!(
        run(
            &mut a,
            "SELECT j.id FROM jobs j JOIN owners o ON o.id = j.owner FOR UPDATE OF nobody"
        )
        .unwrap_err()
        .code,
        "42P01"
    );
    assert_eq!(
        run(
            &mut a,
            "SELECT count(*) FROM jobs j JOIN owners o ON o.id = j.owner GROUP BY o.id FOR UPDATE"
        )
        .unwrap_err()
        .code,
        "0A000"
    );
}
