//! Read consistency levels, checked against oracles built from the history
//! of writes:
//!
//! - `release`: writers keep invariants that span tables and views (a
//!   counter row equals the size of a list, kept by a view; a retweet is
//!   never visible without its original) while releases are cut; readers
//!   on several threads read in `release` mode, and every read must equal
//!   the oracle's state at its release's LSN, and reads of one release
//!   must agree with each other.
//! - `session`: a token passed from a writer's connection to a reader's
//!   makes every read of a view reflect the write.
//! - change sets and time maps hold exactly the rows written per release.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aqueduct_sql::releases::Schedule;
use aqueduct_sql::{Engine, Session};
use common::{engine, ok, rows, run};

/// Lists the writers add items to (each with a counter row).
const LISTS: i64 = 4;
/// Reads the readers make together, at least.
const READS: usize = 2_000;
/// Releases cut while they read, at least.
const RELEASES: u64 = 40;
/// Items each writer adds at most (the tables stay small enough for a
/// release's first reads, evaluated over its tables, to stay quick).
const MAX_ITEMS: i64 = 1_500;
/// The whole test stops here whatever happened (then it fails).
const DEADLINE: Duration = Duration::from_secs(60);

fn schema(s: &mut Session) {
    for sql in [
        "CREATE TABLE items (id bigint PRIMARY KEY, list bigint NOT NULL)",
        "CREATE TABLE counters (list bigint PRIMARY KEY, n bigint NOT NULL)",
        "CREATE TABLE tweets (id bigint PRIMARY KEY, retweet_of bigint)",
        "CREATE VIEW list_sizes AS SELECT list, count(*) AS c FROM items GROUP BY list",
        "CREATE VIEW retweets AS SELECT r.id, o.id AS original FROM tweets r \
         LEFT JOIN tweets o ON o.id = r.retweet_of WHERE r.retweet_of IS NOT NULL",
    ] {
        ok(s, sql);
    }
    for l in 0..LISTS {
        ok(s, &format!("INSERT INTO counters VALUES ({l}, 0)"));
    }
}

/// What each commit did, with its LSN.
#[derive(Clone, Copy, Debug)]
enum Wrote {
    Item { list: i64 },
    Tweet,
    Retweet,
}

/// What one round of a reader saw, with the release each read was of.
struct Seen {
    counters: (u64, BTreeMap<i64, i64>),
    sizes: (u64, BTreeMap<i64, i64>),
    retweets: (u64, i64),
    tweets: (u64, i64),
    /// One list's size read by key: (release, list, size).
    keyed: (u64, i64, i64),
}

#[derive(Default)]
struct History {
    commits: Vec<(u64, Wrote)>,
}

impl History {
    /// Items per list, tweets and retweets as of `lsn`.
    fn at(&self, lsn: u64) -> (BTreeMap<i64, i64>, i64, i64) {
        let mut lists: BTreeMap<i64, i64> = (0..LISTS).map(|l| (l, 0)).collect();
        let (mut tweets, mut retweets) = (0, 0);
        for (at, w) in &self.commits {
            if *at > lsn {
                continue;
            }
            match w {
                Wrote::Item { list } => *lists.entry(*list).or_default() += 1,
                Wrote::Tweet => tweets += 1,
                Wrote::Retweet => retweets += 1,
            }
        }
        (lists, tweets, retweets)
    }
}

/// Stops every thread of a test when one of them panics.
struct StopOnPanic(Arc<AtomicBool>);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn as_pairs(rows: Vec<Vec<String>>) -> BTreeMap<i64, i64> {
    rows.into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

#[test]
fn release_reads_see_each_release_whole_and_as_of_its_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let mut admin = engine.session();
    schema(&mut admin);
    engine.enable_releases(Schedule::new(Duration::from_millis(10)).unwrap());
    let first = now_ms() / 10;
    engine.cut_release(first, now_ms()).unwrap();

    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let cut = Arc::new(AtomicU64::new(first));
    let started = Instant::now();
    std::thread::scope(|scope| {
        // Writers: an item and its list's counter in one transaction
        // (retried on conflicts), and tweets followed by retweets of them.
        // The first writer also cuts a release after every other round
        // of its writes, so releases fall between commits of both.
        for w in 0..2i64 {
            let (engine, history, stop, cut) =
                (engine.clone(), history.clone(), stop.clone(), cut.clone());
            scope.spawn(move || {
                let _guard = StopOnPanic(stop.clone());
                let mut s = engine.session();
                let mut i = 0i64;
                while !stop.load(Ordering::Relaxed) && started.elapsed() < DEADLINE && i < MAX_ITEMS
                {
                    i += 1;
                    let id = w * 1_000_000 + i;
                    let list = (i * 7 + w) % LISTS;
                    loop {
                        ok(&mut s, "BEGIN");
                        ok(&mut s, &format!("INSERT INTO items VALUES ({id}, {list})"));
                        ok(
                            &mut s,
                            &format!("UPDATE counters SET n = n + 1 WHERE list = {list}"),
                        );
                        match run(&mut s, "COMMIT") {
                            Ok(_) => break,
                            Err(e) if e.code == "40001" => continue,
                            Err(e) => panic!("COMMIT: {e}"),
                        }
                    }
                    let mut h = history.lock().unwrap();
                    h.commits.push((s.last_lsn(), Wrote::Item { list }));
                    drop(h);
                    if i % 3 == 0 {
                        ok(&mut s, &format!("INSERT INTO tweets VALUES ({id}, NULL)"));
                        history
                            .lock()
                            .unwrap()
                            .commits
                            .push((s.last_lsn(), Wrote::Tweet));
                        ok(
                            &mut s,
                            &format!("INSERT INTO tweets VALUES ({}, {id})", id + 500_000),
                        );
                        history
                            .lock()
                            .unwrap()
                            .commits
                            .push((s.last_lsn(), Wrote::Retweet));
                    }
                    if w == 0 && i % 2 == 0 {
                        let id = cut.load(Ordering::Relaxed) + 1;
                        engine.cut_release(id, now_ms()).unwrap();
                        cut.store(id, Ordering::Relaxed);
                    }
                }
            });
        }
        // Readers in release mode.
        for _ in 0..2 {
            let (engine, seen, stop, reads, cut) = (
                engine.clone(),
                seen.clone(),
                stop.clone(),
                reads.clone(),
                cut.clone(),
            );
            scope.spawn(move || {
                let _guard = StopOnPanic(stop.clone());
                let mut s = engine.session();
                ok(&mut s, "SET aqueduct.consistency = 'release'");
                while !stop.load(Ordering::Relaxed) && started.elapsed() < DEADLINE {
                    let counters = as_pairs(rows(&mut s, "SELECT list, n FROM counters"));
                    let r1 = s.release_read_id().unwrap();
                    let sizes = as_pairs(rows(&mut s, "SELECT list, c FROM list_sizes"));
                    let r2 = s.release_read_id().unwrap();
                    let orphans = rows(
                        &mut s,
                        "SELECT count(*) FROM retweets WHERE original IS NULL",
                    );
                    let retweets = rows(&mut s, "SELECT count(*) FROM retweets");
                    let r3 = s.release_read_id().unwrap();
                    let tweets = rows(&mut s, "SELECT count(*) FROM tweets");
                    let r4 = s.release_read_id().unwrap();
                    // By key: a view of the release's own, filled by
                    // upqueries into the release's tables.
                    let list = (reads.load(Ordering::Relaxed) as i64) % LISTS;
                    let keyed = rows(
                        &mut s,
                        &format!("SELECT c FROM list_sizes WHERE list = {list}"),
                    );
                    let r5 = s.release_read_id().unwrap();
                    let keyed: i64 = keyed.first().map_or(0, |r| r[0].parse().unwrap());
                    assert_eq!(
                        orphans,
                        vec![vec!["0".to_string()]],
                        "a retweet without its original"
                    );
                    // Checked against the history once every commit in it
                    // is recorded (a writer records after COMMIT returns).
                    seen.lock().unwrap().push(Seen {
                        counters: (r1, counters.clone()),
                        sizes: (r2, sizes.clone()),
                        retweets: (r3, retweets[0][0].parse().unwrap()),
                        tweets: (r4, tweets[0][0].parse().unwrap()),
                        keyed: (r5, list, keyed),
                    });
                    if r1 == r2 {
                        // One release: the counters agree with the view.
                        let nonzero: BTreeMap<i64, i64> =
                            counters.into_iter().filter(|(_, n)| *n > 0).collect();
                        assert_eq!(nonzero, sizes, "counters and list sizes of release {r1}");
                    }
                    let n = reads.fetch_add(5, Ordering::Relaxed) + 5;
                    if n >= READS && cut.load(Ordering::Relaxed) >= first + RELEASES {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert!(
        reads.load(Ordering::Relaxed) >= READS,
        "only {} reads in {DEADLINE:?}",
        reads.load(Ordering::Relaxed)
    );
    assert!(cut.load(Ordering::Relaxed) >= first + RELEASES);
    let h = history.lock().unwrap();
    let lsn = |id: u64| engine.releases.release(id).unwrap().lsn;
    for s in seen.lock().unwrap().iter() {
        let (r, counters) = &s.counters;
        assert_eq!(counters, &h.at(lsn(*r)).0, "counters as of release {r}");
        let (r, sizes) = &s.sizes;
        let expected: BTreeMap<i64, i64> = h
            .at(lsn(*r))
            .0
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert_eq!(sizes, &expected, "the list-size view as of release {r}");
        let (r, retweets) = s.retweets;
        assert_eq!(retweets, h.at(lsn(r)).2, "retweets as of release {r}");
        let (r, tweets) = s.tweets;
        let (_, t, rt) = h.at(lsn(r));
        assert_eq!(tweets, t + rt, "tweets as of release {r}");
        let (r, list, size) = s.keyed;
        assert_eq!(
            size,
            h.at(lsn(r)).0[&list],
            "list {list} by key as of release {r}"
        );
    }
    eprintln!(
        "{} release reads over {} releases, {} commits, in {:.1?}",
        reads.load(Ordering::Relaxed),
        cut.load(Ordering::Relaxed) - first,
        h.commits.len(),
        started.elapsed()
    );
    // Writes did land between releases (else the test proved nothing).
    let distinct: std::collections::BTreeSet<u64> = (first..=cut.load(Ordering::Relaxed))
        .filter_map(|id| engine.releases.release(id).ok().map(|r| r.lsn))
        .collect();
    assert!(
        distinct.len() > 10,
        "releases at {} distinct LSNs",
        distinct.len()
    );
    assert!(h.commits.len() > 100, "{} commits", h.commits.len());
}

#[test]
fn release_reads_do_not_see_later_writes_until_the_next_release() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let mut w = engine.session();
    schema(&mut w);
    let mut r = engine.session();
    ok(&mut r, "SET aqueduct.consistency = 'release'");
    let e = run(&mut r, "SELECT n FROM counters WHERE list = 0").unwrap_err();
    assert_eq!(e.code, "55000", "{e}");
    assert!(e.message.contains("--release-interval"), "{e}");
    engine.enable_releases(Schedule::new(Duration::from_secs(1)).unwrap());
    let e = run(&mut r, "SELECT n FROM counters WHERE list = 0").unwrap_err();
    assert!(e.message.contains("no release is out yet"), "{e}");
    engine.cut_release(1, now_ms()).unwrap();
    ok(&mut w, "UPDATE counters SET n = 5 WHERE list = 0");
    assert_eq!(rows(&mut r, "SHOW aqueduct.release"), vec![vec!["0"]]);
    ok(&mut w, "INSERT INTO items VALUES (1, 0)");
    assert_eq!(
        rows(&mut r, "SELECT n FROM counters WHERE list = 0"),
        vec![vec!["0"]]
    );
    assert!(rows(&mut r, "SELECT c FROM list_sizes WHERE list = 0").is_empty());
    assert_eq!(rows(&mut r, "SHOW aqueduct.release"), vec![vec!["1"]]);
    // A prepared read (an automatic view in other modes) too.
    let p = r
        .prepare("SELECT count(*) FROM items WHERE list = $1", &[None])
        .unwrap();
    assert_eq!(
        common::prepared_rows(&mut r, &p, &[aqueduct_values::Value::Int(0)]),
        vec![vec!["0"]]
    );
    // A prepared join with a parameter (an automatic view in other modes)
    // is read through the release's own view too.
    let join = r
        .prepare(
            "SELECT c.n, count(i.id) FROM counters c LEFT JOIN items i ON i.list = c.list \
             WHERE c.list = $1 GROUP BY c.n",
            &[None],
        )
        .unwrap();
    assert_eq!(
        common::prepared_rows(&mut r, &join, &[aqueduct_values::Value::Int(0)]),
        vec![vec!["0", "0"]]
    );
    // Other levels see the write at once.
    ok(&mut r, "SET aqueduct.consistency = 'eventual'");
    assert_eq!(
        rows(&mut r, "SELECT n FROM counters WHERE list = 0"),
        vec![vec!["5"]]
    );
    ok(&mut r, "SET aqueduct.consistency = 'release'");
    engine.cut_release(2, now_ms()).unwrap();
    assert_eq!(
        rows(&mut r, "SELECT n FROM counters WHERE list = 0"),
        vec![vec!["5"]]
    );
    assert_eq!(
        rows(&mut r, "SELECT c FROM list_sizes WHERE list = 0"),
        vec![vec!["1"]]
    );
    assert_eq!(
        common::prepared_rows(&mut r, &p, &[aqueduct_values::Value::Int(0)]),
        vec![vec!["1"]]
    );
    assert_eq!(
        common::prepared_rows(&mut r, &join, &[aqueduct_values::Value::Int(0)]),
        vec![vec!["5", "1"]]
    );
    // Transaction blocks read the newest state, whatever the level.
    ok(&mut w, "INSERT INTO items VALUES (2, 0)");
    ok(&mut r, "BEGIN");
    assert_eq!(rows(&mut r, "SELECT count(*) FROM items"), vec![vec!["2"]]);
    ok(&mut r, "COMMIT");
    let e = run(&mut r, "SET aqueduct.consistency = 'sometimes'").unwrap_err();
    assert_eq!(e.code, "22023");
    // New sessions start at the server's default, and DEFAULT returns to it.
    engine.set_default_consistency(aqueduct_sql::Consistency::Eventual);
    let mut fresh = engine.session();
    assert_eq!(
        rows(&mut fresh, "SHOW aqueduct.consistency"),
        vec![vec!["eventual"]]
    );
    ok(&mut fresh, "SET aqueduct.consistency = 'Release'");
    assert_eq!(fresh.consistency(), aqueduct_sql::Consistency::Release);
    ok(&mut fresh, "SET aqueduct.consistency = DEFAULT");
    assert_eq!(
        rows(&mut fresh, "SHOW aqueduct.consistency"),
        vec![vec!["eventual"]]
    );
    assert_eq!(fresh.consistency(), aqueduct_sql::Consistency::Eventual);
}

#[test]
fn change_sets_and_time_maps_hold_each_release_writes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let mut s = engine.session();
    ok(
        &mut s,
        "CREATE TABLE posts (id bigint PRIMARY KEY, author bigint, body text)",
    );
    let interval = 100u64;
    engine.enable_releases(Schedule::new(Duration::from_millis(interval)).unwrap());
    let e = run(
        &mut s,
        "CREATE TIME MAP bad ON posts (author) EVERY '150ms'",
    )
    .unwrap_err();
    assert!(e.message.contains("not a multiple"), "{e}");
    let e = run(&mut s, "CREATE TIME MAP m ON posts (nobody) EVERY '1s'").unwrap_err();
    assert_eq!(e.code, "42703", "{e}");
    ok(
        &mut s,
        "CREATE TIME MAP by_author ON posts (author) EVERY '100ms', '400ms'",
    );
    let e = run(
        &mut s,
        "CREATE TIME MAP by_author ON posts (author) EVERY '1s'",
    )
    .unwrap_err();
    assert_eq!(e.code, "42710", "{e}");
    // Release ids from 40 on (interval 100 ms: release 40 at 4 s after
    // the epoch; the ids and times are what the test gives).
    engine.cut_release(40, 4_000).unwrap();
    // Releases 41..=48, post k by author k % 3 in release 41 + k / 2.
    let mut expected: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for k in 0..16i64 {
        let release = 41 + (k / 2) as u64;
        ok(
            &mut s,
            &format!("INSERT INTO posts VALUES ({k}, {}, 'p{k}')", k % 3),
        );
        expected.entry(release).or_default().push(k);
        if k % 2 == 1 {
            engine.cut_release(release, release * interval).unwrap();
        }
    }
    ok(&mut s, "UPDATE posts SET body = 'edited' WHERE id = 0");
    ok(&mut s, "DELETE FROM posts WHERE id = 1");
    engine.cut_release(49, 4_900).unwrap();
    let r40 = engine.releases.release(40).unwrap();
    assert!(
        !r40.complete,
        "the first release's interval began before releases did"
    );
    for (id, ks) in &expected {
        let r = engine.releases.release(*id).unwrap();
        assert!(r.complete);
        let got: Vec<i64> = r
            .changes_of("posts")
            .unwrap()
            .changes
            .iter()
            .map(|c| match &c.row[0] {
                aqueduct_values::Value::Int(i) => *i,
                v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(&got, ks, "release {id}");
    }
    let r49 = engine.releases.release(49).unwrap();
    let ops: Vec<&str> = r49
        .changes_of("posts")
        .unwrap()
        .changes
        .iter()
        .map(|c| c.op.as_str())
        .collect();
    assert_eq!(ops, ["update", "delete"]);
    assert!(matches!(
        engine.releases.release(50),
        Err(aqueduct_sql::releases::Missing::NotYet { current: Some(49) })
    ));
    // Time maps: release r's writes fall in the bucket holding (r-1)*100.
    let authors = |r: &[i64]| {
        let mut a: Vec<i64> = r.iter().map(|k| k % 3).collect();
        a.sort();
        a.dedup();
        a
    };
    let ints = |b: aqueduct_sql::releases::Bucket| -> Vec<i64> {
        b.values
            .iter()
            .map(|v| match v {
                aqueduct_values::Value::Int(i) => *i,
                v => panic!("{v:?}"),
            })
            .collect()
    };
    let b = engine
        .releases
        .time_map_bucket("by_author", 100, 4_100)
        .unwrap();
    assert!(b.complete && !b.partial);
    assert_eq!(ints(b), authors(&expected[&42]));
    // 400 ms bucket at 4400: releases 45..=48.
    let b = engine
        .releases
        .time_map_bucket("by_author", 400, 4_400)
        .unwrap();
    assert_eq!((b.first_release, b.last_release), (45, 48));
    assert!(b.complete);
    let all: Vec<i64> = (45..=48).flat_map(|r| expected[&r].clone()).collect();
    assert_eq!(ints(b), authors(&all));
    // The bucket at 4800 holds release 49 only so far: not complete.
    let b = engine
        .releases
        .time_map_bucket("by_author", 400, 4_800)
        .unwrap();
    assert!(!b.complete);
    // The map's first release (40) had not all its writes: partial.
    let b = engine
        .releases
        .time_map_bucket("by_author", 400, 3_600)
        .unwrap();
    assert!(b.partial);
    assert!(engine
        .releases
        .time_map_bucket("by_author", 300, 0)
        .is_err());
    assert!(engine
        .releases
        .time_map_bucket("by_author", 400, 4_500)
        .is_err());
    assert!(engine.releases.time_map_bucket("nope", 400, 4_400).is_err());
    // Declarations survive a restart (they are in the log); dropping works.
    drop(s);
    drop(engine);
    let engine = common::engine(dir.path());
    let mut s = engine.session();
    let e = run(
        &mut s,
        "CREATE TIME MAP by_author ON posts (author) EVERY '1s'",
    )
    .unwrap_err();
    assert_eq!(e.code, "42710", "{e}");
    ok(&mut s, "DROP TIME MAP by_author");
    ok(&mut s, "DROP TIME MAP IF EXISTS by_author");
    assert_eq!(
        run(&mut s, "DROP TIME MAP by_author").unwrap_err().code,
        "42704"
    );
}

#[test]
fn session_tokens_carry_read_your_writes_across_connections() {
    let dir = tempfile::tempdir().unwrap();
    let engine: Arc<Engine> = engine(dir.path());
    let mut writer = engine.session();
    schema(&mut writer);
    let mut reader = engine.session();
    ok(&mut reader, "SET aqueduct.consistency = 'session'");
    // Each write is a batch of items, so the dataflow has work to lag with.
    for i in 1..=200i64 {
        let values: Vec<String> = (0..20).map(|j| format!("({}, 1)", i * 100 + j)).collect();
        ok(
            &mut writer,
            &format!("INSERT INTO items VALUES {}", values.join(", ")),
        );
        let token = rows(&mut writer, "SHOW aqueduct.last_lsn")[0][0].clone();
        ok(&mut reader, &format!("SET aqueduct.after_lsn = '{token}'"));
        assert_eq!(
            rows(&mut reader, "SELECT c FROM list_sizes WHERE list = 1"),
            vec![vec![(i * 20).to_string()]],
            "read after token {token}"
        );
    }
    // A token from nowhere is refused, saying why.
    ok(&mut reader, "SET aqueduct.after_lsn = '999999999'");
    let e = run(&mut reader, "SELECT c FROM list_sizes WHERE list = 1").unwrap_err();
    assert_eq!(e.code, "22023", "{e}");
    assert!(e.message.contains("last write"), "{e}");
    // With a deadline too short to wait for, 'compute' answers from the
    // base tables: still the reader's own writes.
    ok(&mut reader, "SET aqueduct.after_lsn = '0'");
    ok(&mut reader, "SET aqueduct.consistency_timeout = '1ms'");
    ok(
        &mut reader,
        "SET aqueduct.consistency_timeout_action = 'compute'",
    );
    for i in 0..50i64 {
        let values: Vec<String> = (0..200)
            .map(|j| format!("({}, 2)", 1_000_000 + i * 1000 + j))
            .collect();
        ok(
            &mut reader,
            &format!("INSERT INTO items VALUES {}", values.join(", ")),
        );
        assert_eq!(
            rows(&mut reader, "SELECT c FROM list_sizes WHERE list = 2"),
            vec![vec![((i + 1) * 200).to_string()]]
        );
    }
}

/// A prepared top-k per key (a timeline: the newest tweets of whom a user
/// follows) read in release mode equals the newest state's answer when no
/// write came after the release: through the release's partial view (keys
/// found by a primary-key prefix and an index prefix) and, for a table
/// too large to scan and without an index, through a view kept in full.
#[test]
fn release_reads_of_top_k_per_key_equal_the_state_they_were_cut_from() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let mut s = engine.session();
    for sql in [
        "CREATE TABLE follows (follower bigint, followee bigint, PRIMARY KEY (follower, followee))",
        "CREATE TABLE tweets (id bigint PRIMARY KEY, author bigint NOT NULL)",
        "CREATE INDEX tweets_author_id ON tweets (author, id)",
        // The same tweets, with no index on the author.
        "CREATE TABLE posts (id bigint PRIMARY KEY, author bigint NOT NULL)",
    ] {
        ok(&mut s, sql);
    }
    let users = 40i64;
    let mut follows = Vec::new();
    for u in 0..users {
        for k in 1..=(u % 7 + 1) {
            follows.push(format!("({u}, {})", (u * 13 + k * 7) % users));
        }
    }
    ok(
        &mut s,
        &format!("INSERT INTO follows VALUES {}", follows.join(", ")),
    );
    // More rows than a partial view may scan for want of an index.
    let tweets: Vec<String> = (1..=12_000i64)
        .map(|i| format!("({i}, {})", (i * 31) % users))
        .collect();
    for chunk in tweets.chunks(4_000) {
        ok(
            &mut s,
            &format!("INSERT INTO tweets VALUES {}", chunk.join(", ")),
        );
        ok(
            &mut s,
            &format!("INSERT INTO posts VALUES {}", chunk.join(", ")),
        );
    }
    engine.enable_releases(Schedule::new(Duration::from_secs(1)).unwrap());
    engine.cut_release(7, now_ms()).unwrap();
    let mut r = engine.session();
    for table in ["tweets", "posts"] {
        let timeline = format!(
            "SELECT t.id, t.author FROM follows f JOIN {table} t ON t.author = f.followee \
             WHERE f.follower = $1 ORDER BY t.id DESC LIMIT 5"
        );
        let p = r.prepare(&timeline, &[None]).unwrap();
        for u in 0..users {
            let key = [aqueduct_values::Value::Int(u)];
            ok(&mut r, "SET aqueduct.consistency = 'linearizable'");
            let newest = common::prepared_rows(&mut r, &p, &key);
            assert_eq!(newest.len(), 5, "user {u} of {table}: {newest:?}");
            ok(&mut r, "SET aqueduct.consistency = 'release'");
            let released = common::prepared_rows(&mut r, &p, &key);
            assert_eq!(
                released, newest,
                "user {u}'s timeline of {table} in release 7"
            );
        }
    }
}

/// The views apply a commit only once it is acknowledged. While another
/// writer's commit waits for its fsync, a view does not show it, and a
/// prepared keyed read of the view runs at once: it waits for no other
/// transaction's fsync. Once that commit is acknowledged, the next
/// linearizable read shows it. (Before, the view showed the commit at
/// once and its readers waited for, or ran, the fsync themselves.)
#[test]
fn views_show_only_acknowledged_commits_so_reads_wait_for_no_other_fsync() {
    use aqueduct_log::{Log, Options, SyncPolicy};
    use aqueduct_sql::Outcome;
    use aqueduct_values::Value;
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Always,
            ..Default::default()
        },
    )
    .unwrap();
    let engine = Engine::open_with(log, &mut |_| {}, Default::default()).unwrap();
    let mut s = engine.session();
    ok(&mut s, "CREATE TABLE t (id int PRIMARY KEY, n int)");
    ok(
        &mut s,
        "CREATE VIEW per_n AS SELECT n, count(*) AS k FROM t GROUP BY n",
    );
    ok(&mut s, "INSERT INTO t VALUES (1, 7)");
    let read = s.prepare("SELECT k FROM per_n WHERE n = $1", &[]).unwrap();
    let count = |s: &mut Session| match s.execute_prepared(&read, &[Value::Int(7)]).unwrap() {
        Outcome::Rows { rows, .. } => rows[0][0].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(count(&mut s), Value::Int(1));
    // Another writer's commit, applied to the tables, its fsync not done.
    let db = engine.database();
    let table = db.read().table("t").unwrap().schema.id;
    let mut txn = aqueduct_tables::Txn::default();
    txn.put(
        table,
        vec![Value::Int(2)],
        vec![Value::Int(2), Value::Int(7)],
    );
    let lsn = db
        .commit_unacknowledged(&mut txn, &|_, _| Ok(()))
        .unwrap()
        .unwrap();
    assert!(!db.is_visible(lsn), "the commit is not durable yet");
    assert!(
        s.runs_without_waiting(&read),
        "a view read would wait for another transaction's fsync"
    );
    assert_eq!(
        count(&mut s),
        Value::Int(1),
        "a view showed an unacknowledged write"
    );
    assert!(!db.is_visible(lsn), "the read ran the other commit's fsync");
    // Acknowledged (its committer waited for the fsync): now it shows.
    db.await_visible(lsn).unwrap();
    assert_eq!(count(&mut s), Value::Int(2));
}
