//! Foreign keys and sequences under concurrent serializable transactions.
//! The oracle is the constraint itself, checked on the final state (no
//! child without its parent, after any interleaving), and for sequences
//! the values every session was handed (never one twice).

use crate::common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use aqueduct_sql::{Engine, Outcome, Session};
use common::{engine, ok, rows};
use rand::{Rng, SeedableRng};

const SESSIONS: usize = 4;
const ROUNDS: usize = 200;
const PARENTS: i64 = 6;

/// Runs `statements` as one transaction, meeting the other sessions at
/// `barrier` before COMMIT so that every round's transactions overlap;
/// false if any statement or the commit failed.
fn transaction(s: &mut Session, statements: &[String], barrier: &Barrier) -> bool {
    ok(s, "BEGIN");
    let mut failed = false;
    for st in statements {
        if let Err(e) = s.execute(st).pop().unwrap() {
            assert!(
                ["40001", "23503", "23505"].contains(&e.code),
                "{st}: unexpected {e}"
            );
            failed = true;
            break;
        }
    }
    barrier.wait();
    if failed {
        s.execute("ROLLBACK");
        return false;
    }
    match s.execute("COMMIT").pop().unwrap() {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e.code, "40001", "COMMIT: unexpected {e}");
            false
        }
    }
}

fn orphans(s: &mut Session) -> Vec<Vec<String>> {
    rows(
        s,
        "SELECT c.id, c.parent FROM child c LEFT JOIN parent p ON p.id = c.parent \
         WHERE c.parent IS NOT NULL AND p.id IS NULL",
    )
}

fn workload(e: &Arc<Engine>, seed: u64) -> (usize, usize) {
    let barrier = Arc::new(Barrier::new(SESSIONS));
    let handles: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let e = e.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed + n as u64);
                let mut s = e.session();
                let (mut committed, mut failed) = (0, 0);
                for _ in 0..ROUNDS {
                    let p = rng.gen_range(0..PARENTS);
                    let statements = match rng.gen_range(0..4) {
                        0 => vec![format!(
                            "INSERT INTO parent VALUES ({p}) ON CONFLICT DO NOTHING"
                        )],
                        1 => vec![format!("DELETE FROM parent WHERE id = {p}")],
                        // Children go too, so parents can be deleted again.
                        2 => vec![format!("DELETE FROM child WHERE parent = {p}")],
                        // The insert's own check is what must hold against
                        // concurrent deletes.
                        _ => vec![format!("INSERT INTO child (parent) VALUES ({p})")],
                    };
                    if transaction(&mut s, &statements, &barrier) {
                        committed += 1;
                    } else {
                        failed += 1;
                    }
                }
                (committed, failed)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

#[test]
fn no_child_outlives_its_parent_under_concurrent_transactions() {
    for seed in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let mut s = e.session();
        ok(&mut s, "CREATE TABLE parent (id int PRIMARY KEY)");
        ok(
            &mut s,
            "CREATE TABLE child (id serial PRIMARY KEY, parent int REFERENCES parent)",
        );
        let (committed, failed) = workload(&e, seed);
        assert!(
            committed > ROUNDS,
            "seed {seed}: too few commits: {committed}"
        );
        assert!(failed > 0, "seed {seed}: no transaction ever conflicted");
        assert_eq!(orphans(&mut s), Vec::<Vec<String>>::new(), "seed {seed}");
        // Every child got its own id.
        let ids = rows(&mut s, "SELECT count(*), count(DISTINCT id) FROM child");
        assert_eq!(ids[0][0], ids[0][1]);
    }
}

/// The two orders of a child's insert and its parent's delete in
/// overlapping transactions: one of the two fails, whichever commits first.
#[test]
fn a_child_insert_and_its_parents_delete_cannot_both_commit() {
    for child_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let (mut a, mut b) = (e.session(), e.session());
        ok(&mut a, "CREATE TABLE parent (id int PRIMARY KEY)");
        ok(
            &mut a,
            "CREATE TABLE child (id serial PRIMARY KEY, parent int REFERENCES parent)",
        );
        ok(&mut a, "INSERT INTO parent VALUES (1)");
        ok(&mut a, "BEGIN");
        ok(&mut b, "BEGIN");
        ok(&mut a, "INSERT INTO child (parent) VALUES (1)");
        ok(&mut b, "DELETE FROM parent WHERE id = 1");
        let (first, second) = if child_first {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        ok(first, "COMMIT");
        let e2 = second.execute("COMMIT").pop().unwrap().unwrap_err();
        assert_eq!(e2.code, "40001", "child first: {child_first}: {e2}");
        assert_eq!(orphans(&mut a), Vec::<Vec<String>>::new());
    }
}

#[test]
fn sessions_never_get_the_same_value_and_rolled_back_values_stay_used() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE SEQUENCE shared");
    let handles: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let e = e.clone();
            std::thread::spawn(move || {
                let mut s = e.session();
                let mut got = Vec::new();
                for i in 0..200 {
                    let in_block = (i + n) % 3 == 0;
                    if in_block {
                        ok(&mut s, "BEGIN");
                    }
                    match ok(&mut s, "SELECT nextval('shared')") {
                        Outcome::Rows { rows, .. } => got.push(rows[0][0].to_string()),
                        other => panic!("{other:?}"),
                    }
                    if in_block {
                        ok(&mut s, if i % 2 == 0 { "ROLLBACK" } else { "COMMIT" });
                    }
                }
                got
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut count = 0;
    for h in handles {
        for v in h.join().unwrap() {
            count += 1;
            assert!(all.insert(v.clone()), "value {v} handed out twice");
        }
    }
    assert_eq!(count, SESSIONS * 200);
    // The next value comes after every one handed out, rolled back or not.
    let max = all.iter().map(|v| v.parse::<i64>().unwrap()).max().unwrap();
    let next: i64 = rows(&mut s, "SELECT nextval('shared')")[0][0]
        .parse()
        .unwrap();
    assert!(next > max, "{next} after {max}");
}

/// A unique index on an expression between overlapping transactions, at
/// each isolation level: the second to commit the same key fails with
/// 23505 at COMMIT (the statements' own checks saw no conflict yet), and
/// the table never holds the key twice.
#[test]
fn an_expression_unique_index_holds_between_overlapping_transactions() {
    for level in ["SERIALIZABLE", "REPEATABLE READ", "READ COMMITTED"] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let (mut a, mut b) = (e.session(), e.session());
        ok(
            &mut a,
            "CREATE TABLE users (id int PRIMARY KEY, email text)",
        );
        ok(
            &mut a,
            "CREATE UNIQUE INDEX users_email ON users (lower(email))",
        );
        ok(&mut a, &format!("BEGIN ISOLATION LEVEL {level}"));
        ok(&mut b, &format!("BEGIN ISOLATION LEVEL {level}"));
        ok(&mut a, "INSERT INTO users VALUES (1, 'Ann@example.com')");
        ok(&mut b, "INSERT INTO users VALUES (2, 'ann@EXAMPLE.com')");
        ok(&mut a, "COMMIT");
        let err = b.execute("COMMIT").pop().unwrap().unwrap_err();
        assert_eq!(err.code, "23505", "{level}: {err}");
        assert_eq!(
            rows(&mut a, "SELECT count(*) FROM users"),
            vec![vec!["1".to_string()]],
            "{level}"
        );
        // Other keys still commit side by side.
        ok(&mut a, &format!("BEGIN ISOLATION LEVEL {level}"));
        ok(&mut b, &format!("BEGIN ISOLATION LEVEL {level}"));
        ok(&mut a, "INSERT INTO users VALUES (3, 'bob@example.com')");
        ok(&mut b, "INSERT INTO users VALUES (4, 'cy@example.com')");
        ok(&mut a, "COMMIT");
        ok(&mut b, "COMMIT");
    }
}
