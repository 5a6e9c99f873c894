//! Raft groups (`aqueduct serve --node-id --cluster`, `docs/replication.md`)
//! of three real servers on loopback, under faults: kill -9 of the leader
//! during a write load and of every member at once; a leader cut off from
//! the others (through proxies the test controls, one per direction of
//! each pair) while a client keeps writing to it.
//!
//! Afterwards, on every member: every acknowledged write is there, the
//! log holds the same records as the leader's, and a maintained view
//! equals its query recomputed from the member's own tables. A leader in
//! the minority acknowledges nothing, and its unacknowledged writes are
//! gone once it rejoins.
//!
//! No timed sleeps: every wait is for a condition, under a deadline.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    free_port, log_records, ok, rows, serve_at, signal, sql, Proxy, Server, STEP_TIMEOUT,
};
use serde_json::Value as Json;

const MEMBERS: usize = 3;
/// Writes committed before the leader is killed, and in all.
const KILL_LEADER_AT: u64 = 120;
const RESTART_AT: u64 = 240;
const WRITES: u64 = 360;

/// Three members; member `i` reaches member `j` through proxy `(i, j)`.
/// A failing test keeps their data directories and what they said.
struct Group {
    dir: tempfile::TempDir,
    pg: Vec<u16>,
    http: Vec<u16>,
    proxies: BTreeMap<(usize, usize), Proxy>,
    running: Vec<Option<Server>>,
}

impl Group {
    fn start() -> Group {
        // The members' ports stay bound until the proxies have theirs, so
        // no proxy is given a port a member is about to listen on.
        let held: Vec<std::net::TcpListener> = (0..2 * MEMBERS)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        let (http, pg) = (ports[..MEMBERS].to_vec(), ports[MEMBERS..].to_vec());
        let mut proxies = BTreeMap::new();
        for i in 0..MEMBERS {
            for (j, port) in http.iter().enumerate() {
                if i != j {
                    proxies.insert((i, j), Proxy::start(*port));
                }
            }
        }
        drop(held);
        let mut g = Group {
            dir: tempfile::tempdir().unwrap(),
            pg,
            http,
            proxies,
            running: (0..MEMBERS).map(|_| None).collect(),
        };
        g.start_all();
        g
    }

    /// Starts member `id`, outside the group until it is added (`--join`):
    /// its server, HTTP port and address.
    fn start_joining(&self, id: u64) -> (Server, u16, String) {
        let dir = self.dir.path().join(format!("m{id}"));
        let (pg, http) = (free_port(), free_port());
        let addr = format!("127.0.0.1:{http}");
        let server = serve_at(
            &dir,
            pg,
            http,
            &[
                "--node-id",
                &id.to_string(),
                "--cluster",
                &format!("{id}={addr}"),
                "--join",
            ],
        );
        (server, http, addr)
    }

    /// Starts every member at once (the first start forms the group).
    fn start_all(&mut self) {
        let handles: Vec<_> = (0..MEMBERS)
            .map(|i| {
                let (dir, pg, http, spec) = self.args(i);
                std::thread::spawn(move || serve_member(&dir, pg, http, i, &spec))
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            self.running[i] = Some(h.join().unwrap());
        }
    }

    fn args(&self, i: usize) -> (std::path::PathBuf, u16, u16, String) {
        let spec = (0..MEMBERS)
            .map(|j| {
                let port = if i == j {
                    self.http[j]
                } else {
                    self.proxies[&(i, j)].port
                };
                format!("{}=127.0.0.1:{port}", j + 1)
            })
            .collect::<Vec<_>>()
            .join(",");
        (
            self.dir.path().join(format!("m{}", i + 1)),
            self.pg[i],
            self.http[i],
            spec,
        )
    }

    fn restart(&mut self, i: usize) {
        let (dir, pg, http, spec) = self.args(i);
        self.running[i] = Some(serve_member(&dir, pg, http, i, &spec));
    }

    fn kill9(&mut self, i: usize) {
        if let Some(s) = self.running[i].take() {
            s.process.kill9();
        }
    }

    fn status(&self, i: usize) -> Option<Json> {
        let r = aqueduct_mirror::http::request(
            &common::addr(self.http[i]),
            "GET",
            "/v1/cluster",
            None,
            None,
            Duration::from_secs(2),
        )
        .ok()?;
        let mut r = r;
        let body = r.body.read_to_end(1 << 20).ok()?;
        serde_json::from_slice(&body).ok()
    }

    /// The member every running member names as leader, once they agree
    /// and it says so itself.
    fn leader(&self, among: &[usize]) -> usize {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let named: Vec<Option<u64>> = among
                .iter()
                .map(|&i| self.status(i).and_then(|s| s["leader"].as_u64()))
                .collect();
            if let Some(Some(l)) = named.first() {
                let l = *l as usize - 1;
                if named.iter().all(|n| *n == Some(l as u64 + 1))
                    && among.contains(&l)
                    && self.status(l).is_some_and(|s| s["role"] == "leader")
                {
                    return l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no leader among {among:?}: {named:?}"
            );
            std::thread::yield_now();
        }
    }

    /// Waits until every member in `among` has applied what the leader
    /// committed, and has nothing past it.
    fn converge(&self, among: &[usize]) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let l = self.leader(among);
            let target = self
                .status(l)
                .map(|s| s["commit_lsn"].as_u64().unwrap_or(0));
            let states: Vec<Option<(u64, u64)>> = among
                .iter()
                .map(|&i| {
                    self.status(i).map(|s| {
                        (
                            s["applied_lsn"].as_u64().unwrap_or(0),
                            s["log_lsn"].as_u64().unwrap_or(0),
                        )
                    })
                })
                .collect();
            if let Some(t) = target {
                if states.iter().all(|s| *s == Some((t, t))) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "members did not converge on {target:?}: {states:?}"
            );
            std::thread::yield_now();
        }
    }

    fn cut(&self, member: usize, cut: bool) {
        for ((i, j), p) in &self.proxies {
            if *i == member || *j == member {
                p.set_cut(cut);
            }
        }
    }

    /// The checks after a run, on every member.
    fn check(&self, acked: &BTreeSet<u64>, never: &BTreeSet<u64>) {
        let all: Vec<usize> = (0..MEMBERS).collect();
        self.converge(&all);
        let l = self.leader(&all);
        let leader_log = log_records(self.http[l]);
        let table = rows(self.http[l], "SELECT id FROM t");
        for i in all {
            let ids: BTreeSet<u64> = ok(self.http[i], "SELECT id FROM t")["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r[0].as_u64().unwrap())
                .collect();
            let lost: Vec<_> = acked.difference(&ids).collect();
            assert!(
                lost.is_empty(),
                "member {} lost acknowledged writes {lost:?}",
                i + 1
            );
            let back: Vec<_> = never.intersection(&ids).collect();
            assert!(
                back.is_empty(),
                "member {} holds writes the minority never committed: {back:?}",
                i + 1
            );
            assert_eq!(rows(self.http[i], "SELECT id FROM t"), table);
            let log = log_records(self.http[i]);
            assert_eq!(log.len(), leader_log.len(), "member {}'s log", i + 1);
            for (a, b) in log.iter().zip(&leader_log) {
                assert_eq!(
                    (a.lsn, a.kind, &a.key, &a.body),
                    (b.lsn, b.kind, &b.key, &b.body),
                    "member {}'s log differs from the leader's",
                    i + 1
                );
            }
            assert_eq!(
                rows(self.http[i], "SELECT n, s FROM totals"),
                rows(
                    self.http[i],
                    "SELECT count(*) AS n, sum(id) AS s FROM (SELECT id FROM t) AS base"
                ),
                "member {}'s view against its query",
                i + 1
            );
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let kept = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap()).keep();
            eprintln!("the members' data and logs are kept in {}", kept.display());
        }
    }
}

fn serve_member(dir: &std::path::Path, pg: u16, http: u16, i: usize, spec: &str) -> Server {
    let id = (i + 1).to_string();
    serve_at(dir, pg, http, &["--node-id", &id, "--cluster", spec])
}

/// Clients writing rows with unique ids to whichever member leads,
/// recording the acknowledged ones.
struct Writers {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    acked: Arc<Mutex<BTreeSet<u64>>>,
    /// The last few errors the writers met.
    errors: Arc<Mutex<std::collections::VecDeque<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(http: Vec<u16>, clients: u64) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let next_id = Arc::new(AtomicU64::new(1));
        let errors = Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let threads = (0..clients)
            .map(|client| {
                let (stop, count, acked, next_id, http, errors) = (
                    stop.clone(),
                    count.clone(),
                    acked.clone(),
                    next_id.clone(),
                    http.clone(),
                    errors.clone(),
                );
                std::thread::spawn(move || {
                    // Each client writes to a member of its own (most do
                    // not lead: their writes run on the leader).
                    let mut to = client as usize % http.len();
                    while !stop.load(Ordering::SeqCst) {
                        let id = next_id.fetch_add(1, Ordering::SeqCst);
                        let text = format!("INSERT INTO t VALUES ({id}, 'w{id}')");
                        match sql(http[to], &text) {
                            Ok(_) => {
                                acked.lock().unwrap().insert(id);
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                            // Gone, or cut off: try the next member.
                            Err(e) => {
                                let mut errors = errors.lock().unwrap();
                                errors.push_back(format!("member {}: {e}", to + 1));
                                if errors.len() > 6 {
                                    errors.pop_front();
                                }
                                drop(errors);
                                to = (to + 1) % http.len();
                            }
                        }
                    }
                })
            })
            .collect();
        Writers {
            stop,
            count,
            acked,
            errors,
            threads,
        }
    }

    fn await_count(&self, n: u64, g: &Group) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while self.count.load(Ordering::SeqCst) < n {
            if Instant::now() >= deadline {
                let statuses: Vec<_> = (0..MEMBERS).map(|i| g.status(i)).collect();
                let logs: Vec<String> = (0..MEMBERS)
                    .map(|i| {
                        let path = g.dir.path().join(format!("m{}.log", i + 1));
                        let text = std::fs::read_to_string(path).unwrap_or_default();
                        let lines: Vec<&str> = text.lines().collect();
                        lines[lines.len().saturating_sub(15)..].join("\n")
                    })
                    .collect();
                panic!(
                    "writes stalled at {}; last errors: {:?}\nstatuses: {statuses:#?}\nlogs:\n{}",
                    self.count.load(Ordering::SeqCst),
                    self.errors.lock().unwrap(),
                    logs.join("\n----\n")
                );
            }
            std::thread::yield_now();
        }
    }

    fn stop(self) -> BTreeSet<u64> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        acked
    }
}

fn schema(http: u16) {
    ok(http, "CREATE TABLE t (id bigint PRIMARY KEY, w text)");
    ok(
        http,
        "CREATE VIEW totals AS SELECT count(*) AS n, sum(id) AS s FROM t",
    );
}

#[test]
fn a_group_keeps_every_acknowledged_write_across_kill_9_of_its_leader_and_of_all() {
    let mut g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    schema(g.http[l]);
    let writers = Writers::start(g.http.clone(), 2);
    writers.await_count(KILL_LEADER_AT, &g);
    g.kill9(l);
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != l).collect();
    let second = g.leader(&rest);
    assert_ne!(second, l);
    writers.await_count(RESTART_AT, &g);
    g.restart(l);
    writers.await_count(WRITES, &g);
    let acked = writers.stop();
    g.check(&acked, &BTreeSet::new());

    // Every member at once.
    for i in 0..MEMBERS {
        g.kill9(i);
    }
    g.start_all();
    let writers = Writers::start(g.http.clone(), 1);
    writers.await_count(20, &g);
    let mut more = writers.stop();
    more.extend(acked);
    g.check(&more, &BTreeSet::new());
}

#[test]
fn a_leader_cut_off_from_the_group_acknowledges_nothing_and_loses_nothing_acknowledged() {
    let g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    schema(g.http[l]);
    let writers = Writers::start(g.http.clone(), 2);
    writers.await_count(60, &g);

    g.cut(l, true);
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != l).collect();
    let second = g.leader(&rest);
    assert_ne!(second, l);
    // Clients of the cut-off leader keep writing to it: it acknowledges
    // none of their writes.
    let minority: Vec<_> = (0..2u64)
        .map(|k| {
            let http = g.http[l];
            std::thread::spawn(move || {
                let id = 1_000_000 + k;
                let r = sql(http, &format!("INSERT INTO t VALUES ({id}, 'minority')"));
                (id, r.map(|_| ()).map_err(|e| e.to_string()))
            })
        })
        .collect();
    let mut never = BTreeSet::new();
    for m in minority {
        let (id, r) = m.join().unwrap();
        assert!(r.is_err(), "the cut-off leader acknowledged write {id}");
        never.insert(id);
    }
    // A linearizable read there fails rather than answer from a minority.
    let read = sql(
        g.http[l],
        "SET aqueduct.consistency_timeout = '2s'; SELECT count(*) FROM t",
    );
    assert!(
        read.is_err(),
        "a linearizable read on the cut-off leader answered: {read:?}"
    );
    writers.await_count(120, &g);
    g.cut(l, false);
    writers.await_count(180, &g);
    let acked = writers.stop();
    g.check(&acked, &never);
}

/// Sends `signal` (`-STOP`, `-CONT`) to the process `pid`.
#[test]
fn a_paused_leader_is_replaced_and_rejoins_when_resumed() {
    let g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    schema(g.http[l]);
    let writers = Writers::start(g.http.clone(), 2);
    writers.await_count(60, &g);
    let pid = g.running[l].as_ref().unwrap().process.0.id();
    signal(pid, "-STOP");
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != l).collect();
    assert_ne!(g.leader(&rest), l);
    writers.await_count(150, &g);
    signal(pid, "-CONT");
    writers.await_count(220, &g);
    let acked = writers.stop();
    g.check(&acked, &BTreeSet::new());
}

/// `aqueduct cluster ...` against `node`; its stderr, failing the test
/// if it fails.
fn cluster_cli(args: &[&str]) -> String {
    let out = common::aqueduct()
        .arg("cluster")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn members_are_added_removed_and_handed_the_leadership_without_a_restart() {
    let mut g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    schema(g.http[l]);
    for id in 1..=50 {
        ok(g.http[l], &format!("INSERT INTO t VALUES ({id}, 'before')"));
    }
    // A fourth member joins: it copies the log, then votes.
    let (fourth, http4, addr4) = g.start_joining(4);
    let any = common::addr(g.http[(l + 1) % MEMBERS]);
    cluster_cli(&["add", "--node", &any, "--id", "4", "--addr", &addr4]);
    // The new member leads once handed the leadership.
    cluster_cli(&["transfer-leader", "--node", &any, "--id", "4"]);
    for id in 51..=80 {
        ok(http4, &format!("INSERT INTO t VALUES ({id}, 'after')"));
    }
    // The first leader leaves the group; the rest go on.
    cluster_cli(&["remove", "--node", &addr4, "--id", &(l + 1).to_string()]);
    g.kill9(l);
    for id in 81..=100 {
        ok(http4, &format!("INSERT INTO t VALUES ({id}, 'after')"));
    }
    let status = cluster_cli(&["status", "--node", &addr4, "--node", &any, "--json"]);
    let leaders = status
        .lines()
        .filter(|l| l.contains("\"role\":\"leader\""))
        .count();
    assert_eq!(leaders, 1, "{status}");
    for http in [http4, g.http[(l + 1) % MEMBERS], g.http[(l + 2) % MEMBERS]] {
        let wait = format!(
            "SET aqueduct.consistency_timeout = '{}s'; SELECT count(*) FROM t",
            STEP_TIMEOUT.as_secs()
        );
        assert_eq!(ok(http, &wait)["rows"][0][0], 100, "member at {http}");
    }
    drop(fourth);
}

#[test]
fn a_follower_of_the_group_copies_what_it_committed_across_the_loss_of_its_leader() {
    let mut g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    schema(g.http[l]);
    // A follower (Sirius catch-up) of every member of the group.
    let members = g
        .http
        .iter()
        .map(|p| common::addr(*p))
        .collect::<Vec<_>>()
        .join(",");
    let follower_dir = g.dir.path().join("follower");
    let follower = common::serve(&follower_dir, &["--follow", &members]);
    let writers = Writers::start(g.http.clone(), 2);
    writers.await_count(60, &g);
    g.kill9(l);
    writers.await_count(140, &g);
    let acked = writers.stop();
    g.restart(l);
    g.check(&acked, &BTreeSet::new());
    // The follower reaches what the group committed, and holds the same.
    let leader = g.leader(&all);
    let committed = g.status(leader).unwrap()["commit_lsn"].as_u64().unwrap();
    let wait = format!(
        "SET aqueduct.consistency = 'session'; SET aqueduct.consistency_timeout = '{}s'; \
         SET aqueduct.after_lsn = '{committed}'; SELECT id FROM t",
        STEP_TIMEOUT.as_secs()
    );
    let mut got: Vec<String> = ok(follower.http, &wait)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.to_string())
        .collect();
    got.sort();
    assert_eq!(got, rows(g.http[leader], "SELECT id FROM t"));
}

/// Makes every file under `dir` immutable (`chattr +i`, which even root
/// cannot write through) or writable again: a disk gone read-only.
fn read_only(dir: &std::path::Path, on: bool) {
    let status = std::process::Command::new("chattr")
        .arg("-R")
        .arg(if on { "+i" } else { "-i" })
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success(), "chattr on {}", dir.display());
}

#[test]
fn a_leader_whose_disk_turns_read_only_leaves_and_the_group_goes_on() {
    let mut g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    schema(g.http[l]);
    let writers = Writers::start(g.http.clone(), 2);
    writers.await_count(60, &g);
    let dir = g.args(l).0;
    read_only(&dir, true);
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != l).collect();
    let second = g.leader(&rest);
    assert_ne!(second, l);
    writers.await_count(160, &g);
    read_only(&dir, false);
    // It stopped by itself (its restart found the disk read-only), or it
    // rejoined; either way it is started again on a sound disk.
    g.kill9(l);
    g.restart(l);
    writers.await_count(220, &g);
    let acked = writers.stop();
    g.check(&acked, &BTreeSet::new());
}

/// One fault of a seeded schedule.
#[derive(Clone, Copy, Debug)]
enum Fault {
    KillAndRestart(usize),
    Pause(usize),
    Cut(usize),
    KillAll,
}

/// A schedule of faults drawn from `seed` (a small xorshift: the same
/// seed gives the same schedule).
fn schedule(seed: u64, steps: usize) -> Vec<(Fault, u64)> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    (0..steps)
        .map(|_| {
            let member = next(MEMBERS as u64) as usize;
            let fault = match next(7) {
                0..=1 => Fault::KillAndRestart(member),
                2..=3 => Fault::Pause(member),
                4..=5 => Fault::Cut(member),
                _ => Fault::KillAll,
            };
            (fault, 20 + next(40))
        })
        .collect()
}

/// Seeds run by default; `AQUEDUCT_CLUSTER_SEED=N` runs (and replays) one.
const DEFAULT_SEEDS: &[u64] = &[2];
const STEPS_PER_SEED: usize = 5;

#[test]
fn seeded_fault_schedules_keep_every_acknowledged_write() {
    let seeds: Vec<u64> = match std::env::var("AQUEDUCT_CLUSTER_SEED") {
        Ok(s) => vec![s.parse().expect("AQUEDUCT_CLUSTER_SEED is a number")],
        Err(_) => DEFAULT_SEEDS.to_vec(),
    };
    for seed in seeds {
        let plan = schedule(seed, STEPS_PER_SEED);
        eprintln!("seed {seed} (replay with AQUEDUCT_CLUSTER_SEED={seed}): {plan:?}");
        let mut g = Group::start();
        let all: Vec<usize> = (0..MEMBERS).collect();
        schema(g.http[g.leader(&all)]);
        let writers = Writers::start(g.http.clone(), 2);
        let mut target = 0;
        for (fault, writes) in plan {
            target += writes;
            writers.await_count(target, &g);
            let others =
                |i: usize| -> Vec<usize> { all.iter().copied().filter(|&j| j != i).collect() };
            match fault {
                Fault::KillAndRestart(i) => {
                    g.kill9(i);
                    g.leader(&others(i));
                    target += writes / 2;
                    writers.await_count(target, &g);
                    g.restart(i);
                }
                Fault::Pause(i) => {
                    let pid = g.running[i].as_ref().unwrap().process.0.id();
                    signal(pid, "-STOP");
                    g.leader(&others(i));
                    target += writes / 2;
                    writers.await_count(target, &g);
                    signal(pid, "-CONT");
                }
                Fault::Cut(i) => {
                    g.cut(i, true);
                    g.leader(&others(i));
                    target += writes / 2;
                    writers.await_count(target, &g);
                    g.cut(i, false);
                }
                Fault::KillAll => {
                    for i in 0..MEMBERS {
                        g.kill9(i);
                    }
                    for i in 0..MEMBERS {
                        g.restart(i);
                    }
                }
            }
        }
        target += 20;
        writers.await_count(target, &g);
        let acked = writers.stop();
        g.check(&acked, &BTreeSet::new());
    }
}

/// Writes sent to a member that does not lead run on the leader: schema
/// changes and autocommit writes over HTTP, prepared writes with
/// `RETURNING` over the PostgreSQL protocol, and a transaction block that
/// moves to the leader at its first write (its reads run again there and
/// must answer the same, else 40001).
#[test]
fn writes_on_a_member_that_does_not_lead_run_on_the_leader() {
    let g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    let f = (l + 1) % MEMBERS;
    // DDL and an autocommit write, both through the member that follows.
    ok(
        g.http[f],
        "CREATE TABLE accounts (id bigserial PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL)",
    );
    let inserted = ok(
        g.http[f],
        "INSERT INTO accounts (owner, balance) VALUES ('ann', 100), ('bob', 50) RETURNING id, owner",
    );
    assert_eq!(
        inserted["rows"],
        serde_json::json!([[1, "ann"], [2, "bob"]])
    );
    ok(
        g.http[f],
        "CREATE VIEW by_owner AS SELECT owner, sum(balance)::bigint AS total FROM accounts GROUP BY owner",
    );
    let want = vec!["[1,\"ann\",100]".to_string(), "[2,\"bob\",50]".to_string()];
    assert_eq!(rows(g.http[f], "SELECT * FROM accounts"), want);
    assert_eq!(rows(g.http[l], "SELECT * FROM accounts"), want);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = common::connect(g.pg[f]).await;
        // A prepared write with parameters and RETURNING.
        let row = c
            .query_one(
                "INSERT INTO accounts (owner, balance) VALUES ($1, $2) RETURNING id",
                &[&"cy", &7i64],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 3);

        // A block that reads here, then writes: it moves to the leader,
        // and reads its own write there.
        c.batch_execute("BEGIN").await.unwrap();
        let before: i64 = c
            .query_one("SELECT balance FROM accounts WHERE id = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(before, 100);
        c.execute(
            "UPDATE accounts SET balance = balance - 30 WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
        c.execute(
            "UPDATE accounts SET balance = balance + 30 WHERE id = 2",
            &[],
        )
        .await
        .unwrap();
        let mid: i64 = c
            .query_one("SELECT balance FROM accounts WHERE id = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(mid, 70, "the moved block reads its own write");
        // Through a maintained view and an automatic one, prepared: read
        // on the leader too, over the block's writes.
        let total: i64 = c
            .query_one("SELECT total FROM by_owner WHERE owner = $1", &[&"ann"])
            .await
            .unwrap()
            .get(0);
        assert_eq!(total, 70, "a maintained view's read in the moved block");
        let ann: i64 = c
            .query_one("SELECT balance FROM accounts WHERE owner = $1", &[&"ann"])
            .await
            .unwrap()
            .get(0);
        assert_eq!(ann, 70, "an automatic view's read in the moved block");
        // Not committed yet: the leader's other sessions do not see it.
        assert_eq!(
            rows(g.http[l], "SELECT balance FROM accounts WHERE id = 1"),
            vec!["[100]"]
        );
        c.batch_execute("COMMIT").await.unwrap();
        assert_eq!(
            rows(g.http[l], "SELECT * FROM accounts"),
            vec!["[1,\"ann\",70]", "[2,\"bob\",80]", "[3,\"cy\",7]"]
        );

        // A block whose read changed on the leader before its first write
        // cannot move: 40001, and the client rolls back.
        c.batch_execute("BEGIN").await.unwrap();
        let seen: i64 = c
            .query_one("SELECT balance FROM accounts WHERE id = 2", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(seen, 80);
        ok(g.http[l], "UPDATE accounts SET balance = 0 WHERE id = 2");
        let e = c
            .execute(
                "UPDATE accounts SET balance = balance + 1 WHERE id = 2",
                &[],
            )
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE),
            "{e:?}"
        );
        c.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(
            rows(g.http[l], "SELECT balance FROM accounts WHERE id = 2"),
            vec!["[0]"]
        );

        // An error inside a moved block fails the block, as anywhere.
        c.batch_execute("BEGIN; UPDATE accounts SET balance = 1 WHERE id = 3")
            .await
            .unwrap();
        let e = c
            .execute(
                "INSERT INTO accounts (id, owner, balance) VALUES (1, 'dup', 0)",
                &[],
            )
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
        );
        let e = c.execute("SELECT 1", &[]).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION)
        );
        c.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(
            rows(g.http[l], "SELECT balance FROM accounts WHERE id = 3"),
            vec!["[7]"]
        );
        // The session goes on as usual after it.
        c.execute("UPDATE accounts SET owner = 'cyd' WHERE id = 3", &[])
            .await
            .unwrap();
        // SHOW CLUSTER described and run in the extended protocol.
        let members = c.query("SHOW CLUSTER", &[]).await.unwrap();
        assert_eq!(members.len(), MEMBERS);
        let leaders: Vec<i64> = members
            .iter()
            .filter(|r| r.get::<_, String>("role") == "leader")
            .map(|r| r.get::<_, i64>("id"))
            .collect();
        assert_eq!(leaders, vec![l as i64 + 1]);
    });
    assert_eq!(
        rows(g.http[f], "SELECT owner FROM accounts WHERE id = 3"),
        vec!["[\"cyd\"]"]
    );
    // A request that ends inside a moved block rolls it back on the
    // leader: its row lock goes (a writer there would else wait for the
    // leader's idle expiry, a minute).
    ok(
        g.http[f],
        "BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE accounts SET balance = 999 WHERE id = 3",
    );
    ok(
        g.http[l],
        "SET lock_timeout = '5s'; UPDATE accounts SET balance = balance + 1 WHERE id = 3",
    );
    assert_eq!(
        rows(g.http[l], "SELECT balance FROM accounts WHERE id = 3"),
        vec!["[8]"]
    );
}

/// The group's membership in SQL, sent to a member that does not lead:
/// `ALTER CLUSTER ADD MEMBER ... AS LEARNER`, `TRANSFER LEADERSHIP`,
/// `REMOVE MEMBER`, each shown by `SHOW CLUSTER`.
#[test]
fn membership_changes_in_sql_on_any_member() {
    let g = Group::start();
    let all: Vec<usize> = (0..MEMBERS).collect();
    let l = g.leader(&all);
    let f = (l + 1) % MEMBERS;
    schema(g.http[f]);
    let show =
        |http: u16| -> Vec<Json> { ok(http, "SHOW CLUSTER")["rows"].as_array().unwrap().clone() };
    let roles = |http: u16| -> Vec<(u64, String)> {
        show(http)
            .iter()
            .map(|r| (r[0].as_u64().unwrap(), r[3].as_str().unwrap().to_string()))
            .collect()
    };
    let listed = roles(g.http[f]);
    assert_eq!(listed.len(), MEMBERS, "{listed:?}");
    assert_eq!(
        listed.iter().filter(|(_, r)| r == "leader").count(),
        1,
        "{listed:?}"
    );
    assert!(
        listed.contains(&(l as u64 + 1, "leader".into())),
        "{listed:?}"
    );

    // A learner joins through the member that follows.
    let (fourth, http4, addr4) = g.start_joining(4);
    ok(
        g.http[f],
        &format!("ALTER CLUSTER ADD MEMBER 4 AT '{addr4}' AS LEARNER"),
    );
    // It says it is a learner once it holds the membership that names it.
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let rows = show(g.http[l]);
        let fourth_row = rows.iter().find(|r| r[0] == 4).expect("member 4 listed");
        assert_eq!(
            fourth_row[2], false,
            "a learner does not vote: {fourth_row}"
        );
        if fourth_row[3] == "learner" {
            break;
        }
        assert!(Instant::now() < deadline, "{fourth_row}");
        std::thread::yield_now();
    }
    ok(g.http[l], "INSERT INTO t VALUES (1, 'seen by the learner')");
    let wait = format!(
        "SET aqueduct.consistency_timeout = '{}s'; SELECT count(*) FROM t",
        STEP_TIMEOUT.as_secs()
    );
    assert_eq!(ok(http4, &wait)["rows"][0][0], 1);

    // The leadership moves to the member the statement was sent to.
    ok(
        g.http[f],
        &format!("ALTER CLUSTER TRANSFER LEADERSHIP TO {}", f + 1),
    );
    assert!(roles(g.http[f]).contains(&(f as u64 + 1, "leader".into())));

    // The learner leaves, through the former leader (which forwards).
    ok(g.http[l], "ALTER CLUSTER REMOVE MEMBER 4");
    assert_eq!(show(g.http[f]).len(), MEMBERS);
    drop(fourth);

    // What is refused, and how.
    let e = sql(g.http[f], "BEGIN; SHOW CLUSTER").unwrap_err();
    assert!(e.to_string().contains("25001"), "{e}");
    let e = sql(g.http[f], "ALTER CLUSTER ADD MEMBER 0 AT 'h:1'").unwrap_err();
    assert!(e.to_string().contains("22023"), "{e}");
    let e = sql(g.http[f], "ALTER CLUSTER REMOVE 2").unwrap_err();
    assert!(e.to_string().contains("42601"), "{e}");

    // An orderly stop of a member (SIGTERM) ends its process: its Raft
    // core stops on request, which is no failure to restart from.
    let mut g = g;
    let member = g.running[l].as_mut().expect("running");
    let status = member
        .process
        .terminate_within(Duration::from_secs(15))
        .expect("the member exits within 15 s of SIGTERM");
    assert!(status.success(), "{status:?}");
}
