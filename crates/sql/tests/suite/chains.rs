//! Transaction chains in SQL: declaration, analysis, `CALL`, and the
//! serializability checker over histories recorded from concurrent calls
//! (`docs/chains.md`).

use std::sync::Arc;

use aqueduct_chains::history::{check, History, Txn};
use aqueduct_sql::{Engine, Outcome, Session};

use crate::common::{self, ok, rows, run};

const REGISTERS: i64 = 6;

fn setup(engine: &Arc<Engine>) -> Session {
    let mut s = engine.session();
    ok(
        &mut s,
        "CREATE TABLE regs (k int PRIMARY KEY, ver bigint NOT NULL); \
         CREATE TABLE notes (id bigint PRIMARY KEY, k int NOT NULL)",
    );
    for k in 0..REGISTERS {
        ok(&mut s, &format!("INSERT INTO regs VALUES ({k}, 0)"));
    }
    // Two hops, each a read and a write of one register: two instances
    // cross on `regs`, so the analysis runs it as a distributed
    // transaction.
    ok(
        &mut s,
        "CREATE CHAIN swap2 (a int, b int) AS $$
           HOP ON $a;
             SELECT ver INTO va FROM regs WHERE k = $a;
             UPDATE regs SET ver = $va + 1 WHERE k = $a;
           HOP ON $b;
             SELECT ver INTO vb FROM regs WHERE k = $b;
             UPDATE regs SET ver = $vb + 1 WHERE k = $b;
         $$",
    );
    // The second hop only inserts a note of its own: commutative, so the
    // chain runs piecewise.
    ok(
        &mut s,
        "CREATE CHAIN bump (a int, note bigint) AS $$
           HOP ON $a;
             SELECT ver INTO va FROM regs WHERE k = $a;
             UPDATE regs SET ver = $va + 1 WHERE k = $a;
           HOP ON $note COMMUTATIVE;
             INSERT INTO notes VALUES ($note, $a);
         $$",
    );
    s
}

/// One call's result row: (chain id, mode, status, lsn, variables).
fn call(s: &mut Session, sql: &str) -> (i64, String, String, serde_json::Value) {
    match run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}")) {
        Outcome::Rows { rows, .. } => {
            let r = &rows[0];
            let text = |i: usize| r[i].to_string();
            (
                text(0).parse().unwrap(),
                text(1),
                text(2),
                serde_json::from_str(&text(4)).unwrap(),
            )
        }
        other => panic!("CALL returned {other:?}"),
    }
}

#[test]
fn chains_are_declared_explained_and_called() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let mut s = setup(&engine);
    let explain = rows(&mut s, "EXPLAIN CHAIN swap2").concat().join("\n");
    assert!(explain.contains("distributed"), "{explain}");
    let explain = rows(&mut s, "EXPLAIN CHAIN bump").concat().join("\n");
    assert!(explain.contains("piecewise"), "{explain}");
    let dot = rows(&mut s, "EXPLAIN (FORMAT DOT) CHAIN swap2")
        .concat()
        .join("\n");
    assert!(
        dot.starts_with("graph") || dot.contains("digraph") || dot.contains("graph"),
        "{dot}"
    );

    // Piecewise: the call returns after the first hop; WAIT FOR CHAINS
    // waits for the rest, and nothing is left in the progress table.
    let (_, mode, status, vars) = call(&mut s, "CALL bump(1, 100)");
    assert_eq!((mode.as_str(), status.as_str()), ("piecewise", "started"));
    assert_eq!(vars["va"], 0);
    ok(&mut s, "WAIT FOR CHAINS");
    assert_eq!(
        rows(&mut s, "SELECT id, k FROM notes"),
        vec![vec!["100", "1"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT ver FROM regs WHERE k = 1"),
        vec![vec!["1"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM aqueduct_chain_runs"),
        vec![vec!["0"]]
    );

    // A `session` read after CALL sees every hop's effects.
    ok(&mut s, "SET aqueduct.consistency = 'session'");
    call(&mut s, "CALL bump(2, 101)");
    assert_eq!(
        rows(&mut s, "SELECT k FROM notes WHERE id = 101"),
        vec![vec!["2"]]
    );

    // Distributed: one transaction, complete when CALL returns.
    let (_, mode, status, vars) = call(&mut s, "CALL swap2(3, 4)");
    assert_eq!(
        (mode.as_str(), status.as_str()),
        ("distributed", "completed")
    );
    assert_eq!(
        (vars["va"].clone(), vars["vb"].clone()),
        (0.into(), 0.into())
    );

    // Completion on request.
    ok(&mut s, "SET aqueduct.chain_return = 'completion'");
    let (_, _, status, _) = call(&mut s, "CALL bump(1, 102)");
    assert_eq!(status, "completed");
    assert_eq!(
        rows(&mut s, "SELECT ver FROM regs WHERE k = 1"),
        vec![vec!["2"]]
    );

    // Errors name what is wrong.
    let e = run(&mut s, "CALL bump(1)").unwrap_err();
    assert_eq!(e.code, "42883", "{e}");
    let e = run(
        &mut s,
        "CREATE CHAIN bad (a int) AS $$ HOP ON $a; UPDATE nowhere SET x = 1 $$",
    )
    .unwrap_err();
    assert_eq!(e.code, "42P01", "{e}");
    let e = run(
        &mut s,
        "CREATE CHAIN bad (a int) AS $$ HOP ON $a; SELECT 1; HOP ON $a; ABORT IF true; SELECT 2 $$",
    )
    .unwrap_err();
    assert_eq!(e.code, "42P13", "{e}");
    let e = run(
        &mut s,
        "CREATE CHAIN bad (a int) AS $$ HOP ON $a; UPDATE regs SET ver = $nope $$",
    )
    .unwrap_err();
    assert_eq!(e.code, "42703", "{e}");
    let e = run(
        &mut s,
        "CREATE CHAIN bad (a int) AS $$ HOP ON $a; DROP TABLE regs $$",
    )
    .unwrap_err();
    assert_eq!(e.code, "0A000", "{e}");
    ok(&mut s, "BEGIN");
    assert_eq!(run(&mut s, "CALL bump(1, 103)").unwrap_err().code, "25001");
    ok(&mut s, "ROLLBACK");
    ok(&mut s, "DROP CHAIN swap2");
    assert_eq!(run(&mut s, "CALL swap2(1, 2)").unwrap_err().code, "42883");
}

#[test]
fn an_abort_condition_leaves_nothing_and_variables_flow_between_hops() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let mut s = setup(&engine);
    ok(
        &mut s,
        "CREATE CHAIN give (a int, b int, note bigint) AS $$
           HOP ON $a;
             ABORT IF (SELECT ver < 1 FROM regs WHERE k = $a);
             SELECT ver INTO va FROM regs WHERE k = $a;
             UPDATE regs SET ver = ver - 1 WHERE k = $a;
           HOP ON $b;
             INSERT INTO notes VALUES ($note, $va);
         $$",
    );
    let (_, _, status, _) = call(&mut s, "CALL give(0, 1, 7)");
    assert_eq!(status, "aborted");
    ok(&mut s, "WAIT FOR CHAINS");
    assert!(rows(&mut s, "SELECT * FROM notes").is_empty());
    ok(&mut s, "UPDATE regs SET ver = 5 WHERE k = 0");
    ok(&mut s, "SET aqueduct.chain_return = 'completion'");
    let (_, _, status, vars) = call(&mut s, "CALL give(0, 1, 8)");
    assert_eq!(
        (status.as_str(), vars["va"].clone()),
        ("completed", 5.into())
    );
    assert_eq!(
        rows(&mut s, "SELECT id, k FROM notes"),
        vec![vec!["8", "5"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT ver FROM regs WHERE k = 0"),
        vec![vec!["4"]]
    );
}

/// Concurrent clients call `swap2` and `bump` with random registers,
/// each waiting for completion; the history of every call (the versions
/// its hops read and wrote) goes to the checker.
fn record(engine: &Arc<Engine>, clients: usize, calls: usize, seed: u64) -> History {
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut s = engine.session();
                ok(&mut s, "SET aqueduct.chain_return = 'completion'");
                let mut rng = seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut next = move |n: i64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % n as u64) as i64
                };
                let mut txns = Vec::new();
                for i in 0..calls {
                    let a = next(REGISTERS);
                    if next(4) == 0 {
                        let note = (c * calls + i) as i64 + 1_000_000;
                        let (id, _, _, v) = call(&mut s, &format!("CALL bump({a}, {note})"));
                        let va = v["va"].as_u64().unwrap();
                        txns.push(
                            Txn::new(id as u64, format!("bump({a}, {note})"))
                                .read(format!("r{a}"), va)
                                .write(format!("r{a}"), va + 1)
                                .write(format!("n{note}"), 1),
                        );
                    } else {
                        let b = next(REGISTERS);
                        let (id, _, _, v) = call(&mut s, &format!("CALL swap2({a}, {b})"));
                        let (va, vb) = (v["va"].as_u64().unwrap(), v["vb"].as_u64().unwrap());
                        txns.push(
                            Txn::new(id as u64, format!("swap2({a}, {b})"))
                                .read(format!("r{a}"), va)
                                .write(format!("r{a}"), va + 1)
                                .read(format!("r{b}"), vb)
                                .write(format!("r{b}"), vb + 1),
                        );
                    }
                }
                txns
            })
        })
        .collect();
    let mut history = History::new();
    for t in threads {
        for txn in t.join().unwrap() {
            history.push(txn);
        }
    }
    history
}

#[test]
fn concurrent_chains_are_serializable() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    setup(&engine);
    let history = record(&engine, 4, 60, 7);
    assert_eq!(history.len(), 240);
    if let Err(anomaly) = check(&history) {
        panic!("chains ran as analysed, yet the history is not serializable: {anomaly:?}");
    }
}

/// Shows the checker catching what the analysis prevents: with every
/// chain forced to run piecewise, `swap2`'s crossing instances interleave
/// and the recorded history has a cycle.
#[test]
fn the_checker_finds_the_anomaly_when_a_rejected_chain_runs_piecewise() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    setup(&engine);
    engine
        .chains
        .force_piecewise
        .store(true, std::sync::atomic::Ordering::SeqCst);
    for round in 0..10 {
        let history = record(&engine, 4, 60, 100 + round);
        if check(&history).is_err() {
            return;
        }
    }
    panic!("ten rounds of crossing swaps ran piecewise and the checker found no cycle");
}

/// With simulated datacenters, a hop sent to another datacenter arrives a
/// round trip later: the chain completes no sooner than that, while the
/// call returns after the first hop.
#[test]
fn hops_between_simulated_datacenters_wait_their_round_trip() {
    use aqueduct_sql::chains::latency::Datacenters;
    use aqueduct_sql::chains::placement::Placement;
    use aqueduct_values::Value;
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let dcs = Datacenters::parse("300ms").unwrap();
    *engine.chains.datacenters.lock() = Some(dcs.clone());
    let mut s = setup(&engine);
    // A register and a note id whose logical servers are in different
    // datacenters.
    let a = 0;
    let home = dcs.of(Placement::single().server_of(&Value::Int(a)));
    let note = (1..1000)
        .find(|n| dcs.of(Placement::single().server_of(&Value::Int(*n))) != home)
        .unwrap();
    let started = std::time::Instant::now();
    let (_, mode, status, _) = call(&mut s, &format!("CALL bump({a}, {note})"));
    assert_eq!((mode.as_str(), status.as_str()), ("piecewise", "started"));
    ok(&mut s, "WAIT FOR CHAINS");
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_millis(300),
        "completed in {took:?}, under the 300 ms round trip"
    );
    assert_eq!(
        rows(&mut s, &format!("SELECT k FROM notes WHERE id = {note}")),
        vec![vec!["0"]]
    );
}

/// `THEN CALL`: the linked chain starts once the first has committed; a
/// session waiting for completion waits for both, and sees the called
/// chain's variables.
#[test]
fn a_linked_chain_starts_once_the_first_commits() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let mut s = setup(&engine);
    ok(
        &mut s,
        "CREATE TABLE friends (a int, b int, PRIMARY KEY (a, b))",
    );
    ok(
        &mut s,
        "CREATE CHAIN befriend_back (a int, b int) AS $$
           HOP ON $a COMMUTATIVE;
             INSERT INTO friends VALUES ($a, $b);
         $$",
    );
    let e = run(
        &mut s,
        "CREATE CHAIN bad (a int) AS $$ HOP ON $a; SELECT 1; THEN CALL nowhere($a) $$",
    )
    .unwrap_err();
    assert_eq!(e.code, "42883", "{e}");
    ok(
        &mut s,
        "CREATE CHAIN befriend (a int, b int) AS $$
           HOP ON $a COMMUTATIVE;
             SELECT count(*) INTO before FROM friends WHERE a = $a;
             INSERT INTO friends VALUES ($a, $b);
           THEN CALL befriend_back($b, $a);
         $$",
    );
    ok(&mut s, "SET aqueduct.chain_return = 'completion'");
    let (_, _, status, vars) = call(&mut s, "CALL befriend(1, 2)");
    assert_eq!(
        (status.as_str(), vars["before"].clone()),
        ("completed", 0.into())
    );
    assert_eq!(
        rows(&mut s, "SELECT a, b FROM friends ORDER BY a"),
        vec![vec!["1", "2"], vec!["2", "1"]]
    );
    ok(&mut s, "SET aqueduct.chain_return = 'first_hop'");
    call(&mut s, "CALL befriend(3, 4)");
    ok(&mut s, "WAIT FOR CHAINS");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM friends"),
        vec![vec!["4"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM aqueduct_chain_runs"),
        vec![vec!["0"]]
    );
}

/// Sharded tables: a table names its shard key, and a hop may touch it
/// only in the hop's own shard.
#[test]
fn hops_stay_in_the_shard_of_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let mut s = engine.session();
    ok(
        &mut s,
        "CREATE TABLE accounts (owner int PRIMARY KEY, balance int NOT NULL) WITH (shard_key = 'owner'); \
         CREATE TABLE ledger (id bigint PRIMARY KEY, owner int NOT NULL, amount int NOT NULL) WITH (shard_key = owner); \
         CREATE TABLE totals (k int PRIMARY KEY, n bigint NOT NULL)",
    );
    let e = run(&mut s, "CREATE TABLE bad (a int) WITH (shard_key = 'b')").unwrap_err();
    assert_eq!(e.code, "42703", "{e}");
    ok(
        &mut s,
        "CREATE CHAIN pay (id bigint, a int, b int, amount int) AS $$
           HOP ON $a;
             ABORT IF (SELECT balance < $amount FROM accounts WHERE owner = $a);
             UPDATE accounts SET balance = balance - $amount WHERE owner = $a;
             INSERT INTO ledger VALUES ($id, $a, -$amount);
           HOP ON $b COMMUTATIVE;
             UPDATE accounts SET balance = balance + $amount WHERE owner = $b AND balance >= 0;
             INSERT INTO ledger (owner, id, amount) VALUES ($b, $id + 1, $amount);
             UPDATE totals SET n = n + 1 WHERE k = 0;
         $$",
    );
    for (bad, what) in [
        ("UPDATE accounts SET balance = 0 WHERE owner = $b", "UPDATE accounts"),
        ("UPDATE accounts SET balance = 0", "UPDATE accounts"),
        ("DELETE FROM ledger WHERE owner = $a OR owner = $b", "DELETE FROM ledger"),
        ("INSERT INTO ledger VALUES ($id, $b, 1)", "INSERT INTO ledger"),
        ("SELECT sum(balance) INTO x FROM accounts", "reads accounts"),
        ("SELECT count(*) INTO x FROM ledger l JOIN accounts c ON c.owner = l.owner WHERE l.owner = $a", "reads accounts"),
    ] {
        let e = run(
            &mut s,
            &format!("CREATE CHAIN bad (id bigint, a int, b int) AS $$ HOP ON $a; {bad} $$"),
        )
        .unwrap_err();
        assert_eq!(e.code, "42P13", "{bad}: {e}");
        assert!(e.message.contains(what), "{bad}: {e}");
    }
    ok(
        &mut s,
        "INSERT INTO accounts VALUES (1, 10), (2, 0); INSERT INTO totals VALUES (0, 0)",
    );
    ok(&mut s, "SET aqueduct.chain_return = 'completion'");
    let (_, _, status, _) = call(&mut s, "CALL pay(100, 1, 2, 4)");
    assert_eq!(status, "completed");
    let (_, _, status, _) = call(&mut s, "CALL pay(200, 2, 1, 5)");
    assert_eq!(status, "aborted");
    assert_eq!(
        rows(&mut s, "SELECT owner, balance FROM accounts ORDER BY owner"),
        vec![vec!["1", "6"], vec!["2", "4"]]
    );
}

/// `CALL` prepared with parameters (the extended protocol): each `$n`
/// argument takes the chain parameter's type, and an expression over
/// parameters is evaluated.
#[test]
fn a_prepared_call_takes_bind_parameters() {
    use aqueduct_values::{DataType, Value};
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let mut s = setup(&engine);
    ok(&mut s, "SET aqueduct.chain_return = 'completion'");
    let p = s.prepare("CALL bump($1, $2)", &[]).unwrap();
    assert_eq!(p.params, vec![DataType::Int4, DataType::Int8]);
    match s
        .execute_prepared(&p, &[Value::Int(3), Value::Int(9001)])
        .unwrap()
    {
        Outcome::Rows { rows, .. } => assert_eq!(rows[0][2].to_string(), "completed"),
        other => panic!("CALL returned {other:?}"),
    }
    let p = s.prepare("CALL bump($1 + 1, $2)", &[None, None]).unwrap();
    assert_eq!(p.params, vec![DataType::Text, DataType::Int8]);
    s.execute_prepared(&p, &[Value::Text("3".into()), Value::Int(9002)])
        .unwrap();
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, k FROM notes WHERE id > 9000 ORDER BY id"
        ),
        vec![vec!["9001", "3"], vec!["9002", "4"]]
    );
    let p = s.prepare("CALL bump($1, $2)", &[]).unwrap();
    let e = s.execute_prepared(&p, &[Value::Int(1)]).unwrap_err();
    assert_eq!(e.code, "08P01", "{e}");
}
