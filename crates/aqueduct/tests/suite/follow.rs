//! Followers (`aqueduct serve --follow`, `docs/replication.md`) against
//! real servers on loopback: a follower of a server and a follower of that
//! follower (a chain) copy its log while writes run; the first follower is
//! killed with SIGKILL half way and restarted. Afterwards every
//! acknowledged write is on both, each follower's log is record for record
//! the source's log (same LSNs, terms, keys and bodies), and their tables
//! and a maintained view answer as the source does. A follower refuses
//! writes with SQLSTATE 25006.
//!
//! No timed sleeps: every wait is for a condition, under a deadline.

use crate::common;
#[path = "../common/linearizable.rs"]
mod linearizable;

use std::time::{Duration, Instant};

use aqueduct_mirror::http;
use common::{
    addr, log_records, metric, ok, rows, serve, serve_at, signal, sql, Proxy, HTTP_TIMEOUT,
    STEP_TIMEOUT,
};
use serde_json::Value as Json;

/// Transactions the writer commits on the source.
const WRITES: usize = 400;
/// The first follower is killed after this many.
const KILL_AT: usize = 150;
/// Compaction would make the logs differ (each server compacts its own):
/// the comparison of logs runs with it out of the way.
const NO_COMPACTION: &[&str] = &["--compaction-interval-secs", "3600", "--fsync", "interval"];

/// Waits until the follower at `http` has applied `lsn`.
fn await_applied(http: u16, lsn: u64) {
    // The follower itself waits (for its applied LSN to reach the token),
    // under the deadline given as its consistency timeout.
    let wait = format!(
        "SET aqueduct.consistency = 'session'; SET aqueduct.consistency_timeout = '{}s'; \
         SET aqueduct.after_lsn = '{lsn}'; SELECT 1",
        STEP_TIMEOUT.as_secs()
    );
    if let Err(e) = http::sql(&addr(http), None, &wait, &[], STEP_TIMEOUT + HTTP_TIMEOUT) {
        panic!(
            "the follower on {http} did not apply LSN {lsn}: {e} (it is at {:?})",
            metric(http, "aqueduct_follower_applied_lsn")
        );
    }
    // The gauge is set just after the apply a reader sees.
    let deadline = Instant::now() + HTTP_TIMEOUT;
    while metric(http, "aqueduct_follower_applied_lsn").is_none_or(|a| a < lsn) {
        assert!(
            Instant::now() < deadline,
            "the follower's applied LSN gauge stays below {lsn}"
        );
        std::thread::yield_now();
    }
}

#[test]
fn followers_and_a_chain_of_them_copy_the_log_across_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let source = serve(&dir.path().join("source"), NO_COMPACTION);
    ok(
        source.http,
        "CREATE TABLE account (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL)",
    );
    ok(
        source.http,
        "CREATE VIEW per_owner AS SELECT owner, count(*) AS n, sum(balance) AS total FROM account GROUP BY owner",
    );
    let follow_source = addr(source.http);
    let mut follow_args: Vec<&str> = NO_COMPACTION.to_vec();
    follow_args.extend(["--follow", &follow_source]);
    let first_dir = dir.path().join("first");
    let first = serve(&first_dir, &follow_args);
    let follow_first = addr(first.http);
    let mut chain_args: Vec<&str> = NO_COMPACTION.to_vec();
    chain_args.extend(["--follow", &follow_first]);
    let chained = serve(&dir.path().join("chained"), &chain_args);

    // A follower takes no write of its own.
    let refused = sql(first.http, "INSERT INTO account VALUES (1, 'x', 1)").unwrap_err();
    assert!(
        matches!(&refused, aqueduct_mirror::Error::Server { code, .. } if code == "25006"),
        "{refused}"
    );

    let mut first = Some(first);
    let mut last_lsn = 0;
    for i in 0..WRITES {
        let id = (i % 97) as i64;
        let statement = match i % 5 {
            0 | 1 => format!(
                "INSERT INTO account VALUES ({id}, 'o{}', {i}) ON CONFLICT (id) DO UPDATE SET balance = account.balance + {i}",
                id % 7
            ),
            2 => format!("UPDATE account SET owner = 'o{}' WHERE id = {id}", i % 7),
            3 => format!("DELETE FROM account WHERE id = {}", (i * 31) % 97),
            _ => format!(
                "INSERT INTO account VALUES ({}, 'o1', 1), ({}, 'o2', 2) ON CONFLICT (id) DO NOTHING",
                (i * 7) % 97,
                (i * 11) % 97
            ),
        };
        let out = ok(source.http, &statement);
        last_lsn = last_lsn.max(out["lsn"].as_u64().unwrap_or(0));
        if i == KILL_AT {
            first.take().unwrap().process.kill9();
        }
        if i == KILL_AT + 100 {
            // Back at the same address, so the chained follower finds it.
            let port = follow_first.rsplit_once(':').unwrap().1.parse().unwrap();
            first = Some(serve_at(
                &first_dir,
                common::free_port(),
                port,
                &follow_args,
            ));
        }
    }
    let first = first.unwrap();
    assert!(last_lsn > 0);
    await_applied(first.http, last_lsn);
    await_applied(chained.http, last_lsn);

    // The same log, record for record.
    let expected = log_records(source.http);
    assert_eq!(expected.last().map(|r| r.lsn), Some(last_lsn));
    for (name, http) in [("first", first.http), ("chained", chained.http)] {
        let got = log_records(http);
        assert_eq!(got.len(), expected.len(), "{name}: records");
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g, e, "{name}: the record at LSN {}", e.lsn);
        }
    }
    // The same tables and views.
    for query in [
        "SELECT * FROM account",
        "SELECT * FROM per_owner",
        "SELECT owner, n FROM per_owner WHERE owner = 'o3'",
    ] {
        let want = rows(source.http, query);
        assert!(!want.is_empty(), "{query}");
        assert_eq!(rows(first.http, query), want, "first: {query}");
        assert_eq!(rows(chained.http, query), want, "chained: {query}");
    }
    assert_eq!(metric(first.http, "aqueduct_follower_stuck"), Some(0));

    // What `aqueduct cluster status` says of the three.
    let out = common::aqueduct()
        .args(["cluster", "status", "--json"])
        .args(["--node", &addr(source.http)])
        .args(["--node", &follow_first])
        .args(["--node", &addr(chained.http)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Json> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let roles: Vec<&str> = lines
        .iter()
        .map(|l| l["status"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["primary", "follower", "follower"]);
    for l in &lines {
        assert_eq!(l["status"]["applied_lsn"], last_lsn, "{l}");
    }
    assert_eq!(lines[1]["status"]["follows"][0], follow_source);
    assert_eq!(lines[2]["status"]["lag_records"], 0);
    assert_eq!(lines[2]["status"]["state"], "following");
}

/// The status of `GET /v1/log` from `from` on the server at `http`.
fn log_status(http: u16, from: u64) -> u16 {
    let path = format!("/v1/log?from_lsn={from}&max_records=1");
    let mut r = http::request(&addr(http), "GET", &path, None, None, HTTP_TIMEOUT).unwrap();
    let _ = r.body.read_to_end(1 << 20);
    r.status
}

#[test]
fn a_new_follower_of_a_compacted_log_bootstraps_from_it_while_writes_and_compaction_go_on() {
    const COMPACTING: &[&str] = &[
        "--segment-bytes",
        "65536",
        "--compaction-interval-secs",
        "1",
        "--fsync",
        "interval",
    ];
    let dir = tempfile::tempdir().unwrap();
    let source = serve(&dir.path().join("source"), COMPACTING);
    ok(
        source.http,
        "CREATE TABLE item (id bigint PRIMARY KEY, grp bigint NOT NULL, payload text NOT NULL)",
    );
    ok(
        source.http,
        "CREATE VIEW per_grp AS SELECT grp, count(*) AS n, max(payload) AS top FROM item GROUP BY grp",
    );
    let pad = "x".repeat(200);
    let mut i = 0u64;
    let write = |i: u64| -> u64 {
        let id = i % 53;
        let statement = if i % 6 == 5 {
            format!("DELETE FROM item WHERE id = {}", (i * 7) % 53)
        } else {
            format!(
                "INSERT INTO item VALUES ({id}, {}, '{pad}{i}') ON CONFLICT (id) DO UPDATE SET grp = {}, payload = '{pad}{i}'",
                i % 5,
                i % 5
            )
        };
        ok(source.http, &statement)["lsn"].as_u64().unwrap_or(0)
    };
    // Until compaction dropped records from the start of the log.
    let deadline = Instant::now() + STEP_TIMEOUT;
    while log_status(source.http, 1) != 410 {
        assert!(Instant::now() < deadline, "the source never compacted");
        for _ in 0..50 {
            write(i);
            i += 1;
        }
    }
    let follow_source = addr(source.http);
    let mut follow_args: Vec<&str> = COMPACTING.to_vec();
    follow_args.extend(["--follow", &follow_source]);
    let follower = serve(&dir.path().join("follower"), &follow_args);
    let follow_follower = addr(follower.http);
    let mut chain_args: Vec<&str> = COMPACTING.to_vec();
    chain_args.extend(["--follow", &follow_follower]);
    let mut last_lsn = 0;
    let mut chained = None;
    for n in 0..600 {
        last_lsn = last_lsn.max(write(i));
        i += 1;
        if n == 300 {
            chained = Some(serve(&dir.path().join("chained"), &chain_args));
        }
    }
    let chained = chained.unwrap();
    await_applied(follower.http, last_lsn);
    await_applied(chained.http, last_lsn);
    for query in [
        "SELECT * FROM item",
        "SELECT * FROM per_grp",
        "SELECT grp, n FROM per_grp WHERE grp = 3",
    ] {
        let want = rows(source.http, query);
        assert!(!want.is_empty(), "{query}");
        assert_eq!(rows(follower.http, query), want, "follower: {query}");
        assert_eq!(rows(chained.http, query), want, "chained: {query}");
    }
    // The follower's own log says it starts compacted.
    assert_eq!(log_status(follower.http, 1), 410);
    assert_eq!(metric(follower.http, "aqueduct_follower_stuck"), Some(0));
}

/// A server with a table of registers, a follower of it and a follower of
/// that follower, each in a directory under `dir`.
fn registers_and_a_chain(
    dir: &std::path::Path,
) -> (common::Server, common::Server, common::Server) {
    let source = serve(&dir.join("source"), &["--fsync", "interval"]);
    ok(
        source.http,
        "CREATE TABLE register (id bigint PRIMARY KEY, v bigint NOT NULL)",
    );
    let follower = serve(
        &dir.join("follower"),
        &["--fsync", "interval", "--follow", &addr(source.http)],
    );
    let chained = serve(
        &dir.join("chained"),
        &["--fsync", "interval", "--follow", &addr(follower.http)],
    );
    (source, follower, chained)
}

/// A linearizable read on a follower (the default level) sees every write
/// the source acknowledged before it began: the follower asks the source's
/// commit LSN and waits for its tables to reach it (a read index). The
/// same through a chained follower, whose question goes up the chain.
/// Each read comes right after the write's acknowledgement, so a follower
/// that answered from what it holds would be caught stale.
#[test]
fn linearizable_reads_on_followers_see_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (source, follower, chained) = registers_and_a_chain(dir.path());
    for i in 0..150i64 {
        let id = i % 5;
        ok(
            source.http,
            &format!(
                "INSERT INTO register VALUES ({id}, {i}) ON CONFLICT (id) DO UPDATE SET v = {i}"
            ),
        );
        for (name, http) in [("follower", follower.http), ("chained", chained.http)] {
            let got = rows(http, &format!("SELECT v FROM register WHERE id = {id}"));
            assert_eq!(
                got,
                vec![format!("[{i}]")],
                "{name}: a stale read after write {i}"
            );
        }
    }
    // The read index is asked of the source: with it gone, a linearizable
    // read says so, and an eventual one answers what the follower holds.
    drop(source);
    let e = sql(follower.http, "SELECT v FROM register WHERE id = 0").unwrap_err();
    assert!(
        matches!(&e, aqueduct_mirror::Error::Server { code, .. } if code == "57014"),
        "{e}"
    );
    let eventual = http::sql(
        &addr(follower.http),
        None,
        "SET aqueduct.consistency = 'eventual'; SELECT v FROM register WHERE id = 0",
        &[],
        HTTP_TIMEOUT,
    )
    .unwrap();
    assert_eq!(eventual["rows"][0][0], 145);
}

/// Faults between a follower and its source: the follower follows through
/// a proxy that partitions them for a while (a linearizable read on the
/// follower then fails with 57014 rather than answer stale, an eventual one
/// answers what it holds), then the source is paused (SIGSTOP) and resumed,
/// then the follower is; writes go on throughout, and afterwards the
/// follower holds every acknowledged write and the source's log.
#[test]
fn a_follower_rides_out_a_partition_and_pauses() {
    let dir = tempfile::tempdir().unwrap();
    let source = serve(&dir.path().join("source"), NO_COMPACTION);
    ok(
        source.http,
        "CREATE TABLE register (id bigint PRIMARY KEY, v bigint NOT NULL)",
    );
    let proxy = Proxy::start(source.http);
    let through = addr(proxy.port);
    let mut args: Vec<&str> = NO_COMPACTION.to_vec();
    args.extend(["--follow", &through]);
    let follower = serve(&dir.path().join("follower"), &args);
    let write = |i: i64| -> u64 {
        ok(
            source.http,
            &format!(
                "INSERT INTO register VALUES ({}, {i}) ON CONFLICT (id) DO UPDATE SET v = {i}",
                i % 7
            ),
        )["lsn"]
            .as_u64()
            .unwrap()
    };
    let mut last = 0;
    for i in 0..50 {
        last = write(i);
    }
    await_applied(follower.http, last);

    proxy.set_cut(true);
    for i in 50..100 {
        last = write(i);
    }
    let e = sql(follower.http, "SELECT v FROM register WHERE id = 1").unwrap_err();
    assert!(
        matches!(&e, aqueduct_mirror::Error::Server { code, .. } if code == "57014"),
        "a linearizable read across the partition: {e}"
    );
    let eventual = http::sql(
        &addr(follower.http),
        None,
        "SET aqueduct.consistency = 'eventual'; SELECT count(*) FROM register",
        &[],
        HTTP_TIMEOUT,
    )
    .unwrap();
    assert_eq!(eventual["rows"][0][0], 7);
    proxy.set_cut(false);
    await_applied(follower.http, last);

    // The source paused, then the follower.
    signal(source.process.0.id(), "-STOP");
    // Paused: it accepts no request now (the wait is the request's own
    // timeout), while the follower still answers what it holds.
    assert!(
        http::request(
            &addr(source.http),
            "GET",
            "/health",
            None,
            None,
            Duration::from_millis(300)
        )
        .and_then(|mut r| r.body.read_to_end(4096).map_err(Into::into))
        .is_err(),
        "a paused source answered"
    );
    let held = http::sql(
        &addr(follower.http),
        None,
        "SET aqueduct.consistency = 'eventual'; SELECT count(*) FROM register",
        &[],
        HTTP_TIMEOUT,
    )
    .unwrap();
    assert_eq!(held["rows"][0][0], 7);
    signal(source.process.0.id(), "-CONT");
    for i in 100..150 {
        last = write(i);
    }
    signal(follower.process.0.id(), "-STOP");
    for i in 150..200 {
        last = write(i);
    }
    signal(follower.process.0.id(), "-CONT");
    await_applied(follower.http, last);
    let want = rows(source.http, "SELECT * FROM register");
    assert_eq!(rows(follower.http, "SELECT * FROM register"), want);
    assert_eq!(log_records(follower.http), log_records(source.http));
}

/// Concurrent clients write registers on the source and read them on the
/// source, a follower and a chained follower (linearizable, the default);
/// the history of every register is checked for linearizability
/// (`common/linearizable.rs`, shown catching stale reads by its own tests
/// and here when followers do not wait).
#[test]
fn concurrent_reads_on_followers_are_linearizable() {
    const CLIENTS: usize = 4;
    const OPS_PER_CLIENT: usize = 60;
    const REGISTERS: i64 = 3;
    let dir = tempfile::tempdir().unwrap();
    let (source, follower, chained) = registers_and_a_chain(dir.path());
    let readers = [source.http, follower.http, chained.http];
    let history: Vec<(i64, linearizable::Op)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                scope.spawn(move || {
                    let mut ops = Vec::new();
                    let mut rng = 0x9E37_79B9u64 ^ (c as u64 + 1).wrapping_mul(0x2545_F491);
                    for n in 0..OPS_PER_CLIENT {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let id = (rng % REGISTERS as u64) as i64;
                        if rng.is_multiple_of(3) {
                            let invoked = Instant::now();
                            let v = (c * OPS_PER_CLIENT + n) as i64;
                            ok(
                                source.http,
                                &format!("INSERT INTO register VALUES ({id}, {v}) ON CONFLICT (id) DO UPDATE SET v = {v}"),
                            );
                            let kind = linearizable::Kind::Write(v);
                            ops.push((id, linearizable::Op { invoked, answered: Instant::now(), kind }));
                        }
                        // A read of a register, often one just written:
                        // where a follower that did not wait would be
                        // caught stale.
                        let invoked = Instant::now();
                        let at = readers[(rng / 3 % 3) as usize];
                        let got = ok(at, &format!("SELECT v FROM register WHERE id = {id}"));
                        let kind = linearizable::Kind::Read(got["rows"][0][0].as_i64());
                        ops.push((id, linearizable::Op { invoked, answered: Instant::now(), kind }));
                    }
                    ops
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut reads = 0;
    for id in 0..REGISTERS {
        let ops: Vec<linearizable::Op> = history
            .iter()
            .filter(|(r, _)| *r == id)
            .map(|(_, o)| o.clone())
            .collect();
        reads += ops
            .iter()
            .filter(|o| matches!(o.kind, linearizable::Kind::Read(_)))
            .count();
        if let Err(e) = linearizable::check(&ops) {
            panic!("register {id}: {e}\n{ops:#?}");
        }
    }
    assert_eq!(reads, CLIENTS * OPS_PER_CLIENT);
}
