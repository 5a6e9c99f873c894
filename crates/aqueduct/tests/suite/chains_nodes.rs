//! Transaction chains whose shards are spread over three server
//! processes on loopback (`--chain-nodes`), with kill -9 of each in turn.
//!
//! Clients call `transfer` at every node (half the calls prepared, with
//! bind parameters): its first hop (a read-modify-
//! write of `debit[a]`, recorded in `hist`) runs on the node of `a`'s
//! logical server, its second and third hops on the nodes of `b` and `a`,
//! and it links to `confirm` on `b`'s node. So hops and linked starts
//! cross the wire in every direction while one node is down and after it
//! comes back.
//!
//! Oracles: what the clients were told and the chain's shape (every
//! acknowledged chain has all its effects exactly once over the union of
//! the nodes, and every chain with some effect has all of them; the
//! counters add up), and the serializability checker over the history
//! the chains recorded durably themselves, crashes included. The checker
//! is shown to catch a first hop run twice, planted in that history.

use crate::common;

use aqueduct_chains::history::{check, History, Txn};
use aqueduct_sql::chains::placement::Placement;
use aqueduct_values::Value;
use common::{connect, free_port, serve_at, Server, STEP_TIMEOUT};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const NODES: usize = 3;
const KEYS: i32 = 48;
/// Acknowledged calls before a node is killed, and again while it is down.
const ACKS_PER_PHASE: usize = 40;

struct Node {
    dir: tempfile::TempDir,
    pg: u16,
    http: u16,
    server: Option<Server>,
}

#[derive(Default)]
struct Shared {
    acked: Mutex<HashSet<i64>>,
    count: AtomicUsize,
    /// Calls refused because their first hop's node was down.
    refused: AtomicUsize,
    stop: AtomicBool,
    progress: tokio::sync::Notify,
}

fn start(node: &mut Node, index: usize, nodes: &str) {
    node.server = Some(serve_at(
        node.dir.path(),
        node.pg,
        node.http,
        &["--chain-nodes", nodes, "--chain-node", &index.to_string()],
    ));
}

/// Calls `transfer` at one node until told to stop or the node is gone.
async fn client(pg: u16, shared: Arc<Shared>, first_id: i64) {
    let c = connect(pg).await;
    let mut id = first_id;
    let mut rng = first_id as u64 | 1;
    while !shared.stop.load(Ordering::SeqCst) {
        id += 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let (a, b) = (
            (rng % KEYS as u64) as i32,
            ((rng >> 20) % KEYS as u64) as i32,
        );
        // Half the calls go through the extended protocol with bind
        // parameters, as a driver's prepared statements do.
        let called = if id % 2 == 0 {
            c.simple_query(&format!("CALL transfer({id}, {a}, {b})"))
                .await
                .map(|_| ())
        } else {
            c.query("CALL transfer($1, $2, $3)", &[&id, &a, &b])
                .await
                .map(|_| ())
        };
        match called {
            Ok(_) => {
                shared.acked.lock().unwrap().insert(id);
                shared.count.fetch_add(1, Ordering::SeqCst);
                shared.progress.notify_waiters();
            }
            Err(e) if c.is_closed() => {
                let _ = e;
                return;
            }
            // The first hop's node is down: the call was not acknowledged.
            Err(e) => {
                assert_eq!(
                    e.as_db_error().map(|d| d.code().code()),
                    Some("08006"),
                    "{e}"
                );
                shared.refused.fetch_add(1, Ordering::SeqCst);
                shared.progress.notify_waiters();
            }
        }
    }
}

/// A key whose logical server is on `node`.
fn key_on(placement: &Placement, node: usize) -> i32 {
    (0..KEYS)
        .find(|&k| placement.node_of(placement.server_of(&Value::Int(k as i64))) == node)
        .expect("every node holds some key")
}

async fn wait_for_acks(shared: &Shared, n: usize, what: &str) {
    let target = shared.count.load(Ordering::SeqCst) + n;
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    while shared.count.load(Ordering::SeqCst) < target {
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            shared.progress.notified(),
        )
        .await;
        assert!(tokio::time::Instant::now() < deadline, "no progress {what}");
    }
}

async fn query(c: &tokio_postgres::Client, sql: &str) -> Vec<Vec<i64>> {
    c.query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| (0..r.len()).map(|i| r.get::<_, i64>(i)).collect())
        .collect()
}

/// What every node holds, put together.
struct Union {
    sent: Vec<i64>,
    received: Vec<i64>,
    done: Vec<i64>,
    confirmed: Vec<i64>,
    debits: i64,
    credits: i64,
    hist: Vec<(i64, i64, i64)>,
    /// Chains whose second hop ran on another node than their first.
    crossed: usize,
    /// First hops run per node.
    first_hops: Vec<usize>,
}

/// Waits until no node holds a chain in flight, then reads every node.
async fn settle(nodes: &[Node]) -> Union {
    let mut clients = Vec::new();
    for n in nodes {
        clients.push(connect(n.pg).await);
    }
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let mut left = 0;
        for c in &clients {
            left += query(c, "SELECT count(*) FROM aqueduct_chain_runs").await[0][0];
        }
        if left == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} chains still in flight over the nodes"
        );
        tokio::task::yield_now().await;
    }
    let mut u = Union {
        sent: Vec::new(),
        received: Vec::new(),
        done: Vec::new(),
        confirmed: Vec::new(),
        debits: 0,
        credits: 0,
        hist: Vec::new(),
        crossed: 0,
        first_hops: Vec::new(),
    };
    let mut sent_at: HashMap<i64, usize> = HashMap::new();
    let mut received_at: HashMap<i64, usize> = HashMap::new();
    for (node, c) in clients.iter().enumerate() {
        let ids = |rows: Vec<Vec<i64>>| rows.into_iter().map(|r| r[0]).collect::<Vec<_>>();
        let sent = ids(query(c, "SELECT id FROM sent").await);
        u.first_hops.push(sent.len());
        sent_at.extend(sent.iter().map(|&id| (id, node)));
        u.sent.extend(sent);
        let received = ids(query(c, "SELECT id FROM received").await);
        received_at.extend(received.iter().map(|&id| (id, node)));
        u.received.extend(received);
        u.done.extend(ids(query(c, "SELECT id FROM done").await));
        u.confirmed
            .extend(ids(query(c, "SELECT id FROM confirmed").await));
        u.debits += query(c, "SELECT coalesce(sum(n), 0)::bigint FROM debit").await[0][0];
        u.credits += query(c, "SELECT coalesce(sum(n), 0)::bigint FROM credit").await[0][0];
        for r in query(c, "SELECT id, k::bigint, v FROM hist").await {
            u.hist.push((r[0], r[1], r[2]));
        }
    }
    u.crossed = sent_at
        .iter()
        .filter(|(id, node)| received_at.get(id).is_some_and(|r| r != *node))
        .count();
    u
}

fn exactly_once(ids: &[i64], sent: &HashSet<i64>, what: &str) {
    let set: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(set.len(), ids.len(), "a chain's {what} ran twice");
    assert_eq!(&set, sent, "chains with some effects but not all ({what})");
}

/// The history the chains recorded: each first hop read `debit[k]` at
/// version `v` and wrote `v + 1`.
fn history(hist: &[(i64, i64, i64)]) -> History {
    let mut h = History::new();
    for &(id, k, v) in hist {
        h.push(
            Txn::new(id as u64, format!("transfer {id}"))
                .read(format!("debit{k}"), v as u64)
                .write(format!("debit{k}"), v as u64 + 1),
        );
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chains_spread_over_three_processes_survive_kill_9_of_each() {
    let chain_ports: Vec<u16> = (0..NODES).map(|_| free_port()).collect();
    let addrs = chain_ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let placement = Placement::parse(&addrs, 0).unwrap();
    let mut nodes: Vec<Node> = (0..NODES)
        .map(|_| Node {
            dir: tempfile::tempdir().unwrap(),
            pg: free_port(),
            http: free_port(),
            server: None,
        })
        .collect();
    for (i, n) in nodes.iter_mut().enumerate() {
        start(n, i, &addrs);
        let c = connect(n.pg).await;
        let mut setup = String::from(
            "CREATE TABLE sent (id bigint PRIMARY KEY, k int); \
             CREATE TABLE received (id bigint PRIMARY KEY, k int); \
             CREATE TABLE done (id bigint PRIMARY KEY); \
             CREATE TABLE confirmed (id bigint PRIMARY KEY); \
             CREATE TABLE hist (id bigint PRIMARY KEY, k int, v bigint); \
             CREATE TABLE debit (k int PRIMARY KEY, n bigint NOT NULL) WITH (shard_key = 'k'); \
             CREATE TABLE credit (k int PRIMARY KEY, n bigint NOT NULL) WITH (shard_key = 'k');",
        );
        for k in 0..KEYS {
            setup.push_str(&format!(
                "INSERT INTO debit VALUES ({k}, 0); INSERT INTO credit VALUES ({k}, 0);"
            ));
        }
        c.batch_execute(&setup).await.unwrap();
        c.batch_execute(
            "CREATE CHAIN confirm (id bigint, b int) AS $$
               HOP ON $b COMMUTATIVE;
                 INSERT INTO confirmed VALUES ($id);
             $$;
             CREATE CHAIN transfer (id bigint, a int, b int) AS $$
               HOP ON $a;
                 SELECT n INTO da FROM debit WHERE k = $a;
                 INSERT INTO sent VALUES ($id, $a);
                 INSERT INTO hist VALUES ($id, $a, $da);
                 UPDATE debit SET n = n + 1 WHERE k = $a;
               HOP ON $b COMMUTATIVE;
                 INSERT INTO received VALUES ($id, $b);
                 UPDATE credit SET n = n + 1 WHERE k = $b;
               HOP ON $a COMMUTATIVE;
                 INSERT INTO done VALUES ($id);
               THEN CALL confirm($id, $b);
             $$",
        )
        .await
        .unwrap();
    }
    let shared = Arc::new(Shared::default());
    for round in 0..NODES {
        let victim = (round + 1) % NODES;
        shared.stop.store(false, Ordering::SeqCst);
        let clients: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let first = ((round * NODES + i) as i64 + 1) * 1_000_000;
                tokio::spawn(client(n.pg, shared.clone(), first))
            })
            .collect();
        wait_for_acks(&shared, ACKS_PER_PHASE, "before the kill").await;
        nodes[victim].server.take().unwrap().process.kill9();
        // A call whose first hop is on the dead node is refused at once;
        // hops to it wait for it, and so, by origin ordering, may the
        // later first hops at their origins.
        let live = nodes[(victim + 1) % NODES].pg;
        let c = connect(live).await;
        let a = key_on(&placement, victim);
        let probe = tokio::time::timeout(
            STEP_TIMEOUT,
            c.query(
                "CALL transfer($1, $2, $3)",
                &[&(-(round as i64) - 1), &a, &a],
            ),
        )
        .await
        .expect("a call to a dead node's shard is answered");
        let e = probe.expect_err("a call whose first hop is on a dead node");
        assert_eq!(
            e.as_db_error().map(|d| d.code().code()),
            Some("08006"),
            "{e}"
        );
        start(&mut nodes[victim], victim, &addrs);
        wait_for_acks(&shared, ACKS_PER_PHASE, "after the restart").await;
        shared.stop.store(true, Ordering::SeqCst);
        for c in clients {
            tokio::time::timeout(STEP_TIMEOUT, c)
                .await
                .expect("a client stops")
                .unwrap();
        }
    }
    let u = settle(&nodes).await;
    let acked = shared.acked.lock().unwrap().clone();
    assert!(acked.len() >= NODES * ACKS_PER_PHASE * 2);
    let sent: HashSet<i64> = u.sent.iter().copied().collect();
    for id in &acked {
        assert!(
            sent.contains(id),
            "acknowledged chain {id} lost its first hop"
        );
    }
    exactly_once(&u.sent, &sent, "first hop");
    exactly_once(&u.received, &sent, "second hop");
    exactly_once(&u.done, &sent, "third hop");
    exactly_once(&u.confirmed, &sent, "linked chain");
    assert_eq!(u.debits, sent.len() as i64, "the first hops' counters");
    assert_eq!(u.credits, sent.len() as i64, "the second hops' counters");
    // Every node ran first hops, and hops crossed between nodes.
    assert!(
        u.first_hops.iter().all(|&n| n > 0),
        "first hops per node: {:?}",
        u.first_hops
    );
    assert!(
        u.crossed > sent.len() / 3,
        "only {} of {} chains crossed nodes",
        u.crossed,
        sent.len()
    );
    let h = history(&u.hist);
    if let Err(anomaly) = check(&h) {
        panic!("chains over three nodes, crashes included, are not serializable: {anomaly:?}");
    }
    // The checker catches a first hop run twice: a copy that read the
    // same version of its register.
    let mut planted = u.hist.clone();
    let (id, k, v) = planted[planted.len() / 2];
    planted.push((id + 1_000_000_000, k, v));
    assert!(
        check(&history(&planted)).is_err(),
        "the checker missed a first hop that ran twice"
    );
}
