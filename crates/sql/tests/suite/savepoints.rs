//! `SAVEPOINT`, `RELEASE SAVEPOINT` and `ROLLBACK TO SAVEPOINT`, as
//! PostgreSQL has them: writes after a savepoint are undone, an error inside
//! the block is recovered from, savepoints nest, and reads (tables and
//! views) see the transaction as it is after the rollback.

use crate::common;

use common::{engine, ok, rows, run};

fn code(s: &mut aqueduct_sql::Session, sql: &str) -> &'static str {
    run(s, sql).expect_err(sql).code
}

#[test]
fn rollback_to_undoes_later_writes_and_recovers_from_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE t (id bigint PRIMARY KEY, x int)");
    ok(&mut s, "CREATE VIEW total AS SELECT count(*) AS n FROM t");
    ok(&mut s, "BEGIN");
    ok(&mut s, "INSERT INTO t VALUES (1, 10)");
    ok(&mut s, "SAVEPOINT a");
    ok(&mut s, "INSERT INTO t VALUES (2, 20)");
    ok(&mut s, "UPDATE t SET x = 11 WHERE id = 1");
    assert_eq!(rows(&mut s, "SELECT n FROM total"), [["2"]]);
    ok(&mut s, "ROLLBACK TO SAVEPOINT a");
    assert_eq!(
        rows(&mut s, "SELECT id, x FROM t ORDER BY id"),
        [["1", "10"]]
    );
    assert_eq!(rows(&mut s, "SELECT n FROM total"), [["1"]]);

    // An error fails the block until a rollback to a savepoint.
    ok(&mut s, "SAVEPOINT b");
    assert_eq!(code(&mut s, "SELECT 1 / 0"), "22012");
    assert_eq!(code(&mut s, "INSERT INTO t VALUES (3, 30)"), "25P02");
    ok(&mut s, "ROLLBACK TO b");
    ok(&mut s, "INSERT INTO t VALUES (3, 30)");

    // Nesting: rolling back to `a` drops `b`; the savepoint rolled back to
    // stays; RELEASE drops it.
    ok(&mut s, "SAVEPOINT c");
    ok(&mut s, "INSERT INTO t VALUES (4, 40)");
    ok(&mut s, "ROLLBACK TO a");
    // As in PostgreSQL, naming a savepoint that is not there is an error
    // that fails the block; a rollback to one that is recovers.
    assert_eq!(code(&mut s, "RELEASE SAVEPOINT b"), "3B001");
    assert_eq!(code(&mut s, "INSERT INTO t VALUES (5, 50)"), "25P02");
    ok(&mut s, "ROLLBACK TO a");
    ok(&mut s, "INSERT INTO t VALUES (5, 50)");
    ok(&mut s, "RELEASE a");
    ok(&mut s, "COMMIT");
    assert_eq!(
        rows(&mut s, "SELECT id, x FROM t ORDER BY id"),
        [["1", "10"], ["5", "50"]]
    );
    assert_eq!(rows(&mut s, "SELECT n FROM total"), [["2"]]);

    // Outside a transaction block.
    assert_eq!(code(&mut s, "SAVEPOINT x"), "25P01");
    assert_eq!(code(&mut s, "RELEASE x"), "25P01");
    assert_eq!(code(&mut s, "ROLLBACK TO x"), "25P01");
    // A released savepoint is gone; a failed block commits as a rollback.
    ok(&mut s, "BEGIN");
    ok(&mut s, "SAVEPOINT a");
    ok(&mut s, "INSERT INTO t VALUES (6, 60)");
    ok(&mut s, "RELEASE a");
    assert_eq!(code(&mut s, "ROLLBACK TO a"), "3B001");
    ok(&mut s, "COMMIT");
    assert_eq!(rows(&mut s, "SELECT count(*) FROM t"), [["2"]]);
    // A savepoint does not outlive its transaction.
    ok(&mut s, "BEGIN");
    ok(&mut s, "SAVEPOINT a");
    ok(&mut s, "COMMIT");
    ok(&mut s, "BEGIN");
    assert_eq!(code(&mut s, "ROLLBACK TO a"), "3B001");
    ok(&mut s, "ROLLBACK");
}

#[test]
fn reads_before_a_rollback_still_conflict() {
    // A value read after the savepoint and then rolled back over stays in
    // the read set: a concurrent change to it fails COMMIT (never a lost
    // conflict).
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    let mut other = e.session();
    ok(&mut s, "CREATE TABLE t (id bigint PRIMARY KEY, x int)");
    ok(&mut s, "INSERT INTO t VALUES (1, 10), (2, 20)");
    ok(&mut s, "BEGIN");
    ok(&mut s, "SAVEPOINT a");
    assert_eq!(rows(&mut s, "SELECT x FROM t WHERE id = 2"), [["20"]]);
    ok(&mut s, "ROLLBACK TO a");
    ok(&mut s, "UPDATE t SET x = 11 WHERE id = 1");
    ok(&mut other, "UPDATE t SET x = 21 WHERE id = 2");
    assert_eq!(code(&mut s, "COMMIT"), "40001");
}
