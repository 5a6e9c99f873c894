//! The chain examples (`examples/auction`, `examples/social`,
//! `examples/microblog`): each one's schema and chains load as a client
//! would send the files, the analysis prints what is checked in beside
//! them (`analysis.txt`; `AQUEDUCT_BLESS=1` writes it anew), and a
//! workload of concurrent calls leaves the tables and views equal to a
//! model of what the calls did.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use aqueduct_sql::{Engine, Outcome, Session};

use crate::common::{self, ok, rows, run};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// Loads the example and checks the analysis against `analysis.txt`.
fn load(name: &str) -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let mut s = engine.session();
    for file in ["schema.sql", "chains.sql"] {
        let text = std::fs::read_to_string(example(name).join(file)).unwrap();
        for r in s.execute(&text) {
            r.unwrap_or_else(|e| panic!("{name}/{file}: {e}"));
        }
    }
    let text = std::fs::read_to_string(example(name).join("chains.sql")).unwrap();
    let mut analysis = String::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("CREATE CHAIN ") else {
            continue;
        };
        let chain = rest.split_whitespace().next().unwrap();
        for r in rows(&mut s, &format!("EXPLAIN CHAIN {chain}")) {
            analysis.push_str(&r[0]);
            analysis.push('\n');
        }
        analysis.push('\n');
    }
    let path = example(name).join("analysis.txt");
    if std::env::var_os("AQUEDUCT_BLESS").is_some() {
        std::fs::write(&path, &analysis).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        analysis, expected,
        "examples/{name}: the analysis differs from analysis.txt (AQUEDUCT_BLESS=1 writes it)"
    );
    (dir, engine)
}

fn call(s: &mut Session, sql: &str) -> (String, serde_json::Value) {
    match run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}")) {
        Outcome::Rows { rows, .. } => (
            rows[0][2].to_string(),
            serde_json::from_str(&rows[0][4].to_string()).unwrap(),
        ),
        other => panic!("{sql}: {other:?}"),
    }
}

/// Runs `per_client` on `clients` threads, each with its own session.
fn clients<T: Send + 'static>(
    engine: &Arc<Engine>,
    clients: usize,
    per_client: impl Fn(usize, &mut Session) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(per_client);
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let engine = engine.clone();
            let f = f.clone();
            std::thread::spawn(move || {
                let mut s = engine.session();
                let out = f(c, &mut s);
                ok(&mut s, "WAIT FOR CHAINS");
                out
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn count_by(s: &mut Session, sql: &str) -> BTreeMap<i64, i64> {
    rows(s, sql)
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

#[test]
fn auction() {
    let (_dir, engine) = load("auction");
    let mut s = engine.session();
    for i in 0..10 {
        ok(
            &mut s,
            &format!("INSERT INTO items (id, title) VALUES ({i}, 'item {i}')"),
        );
    }
    // 4 clients register 15 users each from a pool of 20 names: a taken
    // name aborts.
    let registered: Vec<Vec<(i64, String)>> = clients(&engine, 4, |c, s| {
        let mut mine = Vec::new();
        for i in 0..15 {
            let id = (c * 100 + i) as i64;
            let name = format!("user{}", (c * 7 + i * 3) % 20);
            let (status, _) = call(s, &format!("CALL register_user({id}, '{name}')"));
            match status.as_str() {
                "started" | "completed" => mine.push((id, name)),
                "aborted" => {}
                other => panic!("register_user: {other}"),
            }
        }
        mine
    });
    let users: Vec<(i64, String)> = registered.into_iter().flatten().collect();
    let names: BTreeSet<&String> = users.iter().map(|(_, n)| n).collect();
    assert_eq!(names.len(), users.len(), "a username was given twice");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM users")[0][0],
        users.len().to_string()
    );
    // Bids from the registered users.
    let ids: Arc<Vec<i64>> = Arc::new(users.iter().map(|(id, _)| *id).collect());
    let placed: Vec<Vec<(i64, i64, i64)>> = clients(&engine, 4, move |c, s| {
        let mut mine = Vec::new();
        for i in 0..40 {
            let bid = (c * 1000 + i) as i64;
            let bidder = ids[(c * 13 + i * 7) % ids.len()];
            let item = ((c + i * 3) % 10) as i64;
            let amount = (i * 5 + c) as i64;
            call(
                s,
                &format!("CALL place_bid({bid}, {bidder}, {item}, {amount})"),
            );
            mine.push((bidder, item, amount));
        }
        mine
    });
    let placed: Vec<(i64, i64, i64)> = placed.into_iter().flatten().collect();
    let mut per_item: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut per_bidder: BTreeMap<i64, i64> = BTreeMap::new();
    for (bidder, item, amount) in &placed {
        let e = per_item.entry(*item).or_default();
        e.0 += 1;
        e.1 = e.1.max(*amount);
        *per_bidder.entry(*bidder).or_default() += 1;
    }
    let items: BTreeMap<i64, (i64, i64)> =
        rows(&mut s, "SELECT id, bids, max_bid FROM items WHERE bids > 0")
            .into_iter()
            .map(|r| {
                (
                    r[0].parse().unwrap(),
                    (r[1].parse().unwrap(), r[2].parse().unwrap()),
                )
            })
            .collect();
    assert_eq!(items, per_item);
    assert_eq!(
        count_by(&mut s, "SELECT id, bids FROM users WHERE bids > 0"),
        per_bidder
    );
    let view: BTreeMap<i64, (i64, i64)> = rows(&mut s, "SELECT item, n, top FROM item_bids")
        .into_iter()
        .map(|r| {
            (
                r[0].parse().unwrap(),
                (r[1].parse().unwrap(), r[2].parse().unwrap()),
            )
        })
        .collect();
    assert_eq!(view, per_item);
    let (_, vars) = call(&mut s, "CALL view_item(3)");
    assert_eq!(vars["n"], per_item[&3].0);
}

#[test]
fn social() {
    let (_dir, engine) = load("social");
    let mut s = engine.session();
    for u in 0..30 {
        ok(
            &mut s,
            &format!("INSERT INTO users (id, name) VALUES ({u}, 'u{u}')"),
        );
    }
    // Distinct pairs a < b, split among 3 clients; statuses by everyone.
    let pairs: Vec<(i64, i64)> = (0..30i64)
        .flat_map(|a| (a + 1..30).map(move |b| (a, b)))
        .filter(|(a, b)| (a * 7 + b * 3) % 5 == 0)
        .collect();
    let shared = Arc::new(pairs.clone());
    clients(&engine, 3, move |c, s| {
        for (i, (a, b)) in shared.iter().enumerate() {
            if i % 3 == c {
                call(s, &format!("CALL befriend({a}, {b})"));
            }
        }
        for i in 0..20 {
            let id = c * 100 + i;
            call(
                s,
                &format!(
                    "CALL post_status({id}, {}, 'status {id}')",
                    (c * 11 + i * 7) % 30
                ),
            );
        }
    });
    let mut degree: BTreeMap<i64, i64> = BTreeMap::new();
    let mut friends: BTreeSet<(i64, i64)> = BTreeSet::new();
    for (a, b) in &pairs {
        *degree.entry(*a).or_default() += 1;
        *degree.entry(*b).or_default() += 1;
        friends.insert((*a, *b));
        friends.insert((*b, *a));
    }
    let stored: BTreeSet<(i64, i64)> = rows(&mut s, "SELECT a, b FROM friendships")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect();
    assert_eq!(stored, friends, "friendships are not symmetric");
    assert_eq!(
        count_by(&mut s, "SELECT id, friends FROM users WHERE friends > 0"),
        degree
    );
    let authors: BTreeMap<i64, i64> = count_by(
        &mut s,
        "SELECT author, count(*) FROM statuses GROUP BY author",
    );
    let mut seen: BTreeMap<i64, i64> = BTreeMap::new();
    for (a, b) in &friends {
        if let Some(n) = authors.get(b) {
            *seen.entry(*a).or_default() += n;
        }
    }
    assert_eq!(
        count_by(
            &mut s,
            "SELECT viewer, count(*) FROM friends_activity GROUP BY viewer"
        ),
        seen
    );
    let (viewer, n) = seen.iter().next().unwrap();
    let (_, vars) = call(&mut s, &format!("CALL activity({viewer})"));
    assert_eq!(vars["seen"], *n);
}

#[test]
fn microblog() {
    let (_dir, engine) = load("microblog");
    let mut s = engine.session();
    for u in 0..20 {
        ok(
            &mut s,
            &format!("INSERT INTO users (id, name) VALUES ({u}, 'u{u}')"),
        );
    }
    let follows: Vec<(i64, i64)> = (0..20i64)
        .flat_map(|a| (0..20).map(move |b| (a, b)))
        .filter(|(a, b)| a != b && (a * 5 + b * 7) % 4 == 0)
        .collect();
    let shared = Arc::new(follows.clone());
    clients(&engine, 3, move |c, s| {
        for (i, (a, b)) in shared.iter().enumerate() {
            if i % 3 == c {
                call(s, &format!("CALL follow({a}, {b})"));
            }
        }
        for i in 0..30 {
            let id = c * 100 + i;
            call(
                s,
                &format!(
                    "CALL post_tweet({id}, {}, 'tweet {id}')",
                    (c * 5 + i * 3) % 20
                ),
            );
        }
    });
    let (mut following, mut followers): (BTreeMap<i64, i64>, BTreeMap<i64, i64>) =
        Default::default();
    for (a, b) in &follows {
        *following.entry(*a).or_default() += 1;
        *followers.entry(*b).or_default() += 1;
    }
    assert_eq!(
        count_by(
            &mut s,
            "SELECT id, following FROM users WHERE following > 0"
        ),
        following
    );
    assert_eq!(
        count_by(
            &mut s,
            "SELECT id, followers FROM users WHERE followers > 0"
        ),
        followers
    );
    let authors = count_by(
        &mut s,
        "SELECT author, count(*) FROM tweets GROUP BY author",
    );
    let mut timeline: BTreeMap<i64, i64> = BTreeMap::new();
    for (a, b) in &follows {
        if let Some(n) = authors.get(b) {
            *timeline.entry(*a).or_default() += n;
        }
    }
    assert_eq!(
        count_by(
            &mut s,
            "SELECT reader, count(*) FROM timeline GROUP BY reader"
        ),
        timeline
    );
    let (reader, n) = timeline.iter().next().unwrap();
    let (_, vars) = call(&mut s, &format!("CALL read_timeline({reader})"));
    assert_eq!(vars["tweets"], *n);
}
