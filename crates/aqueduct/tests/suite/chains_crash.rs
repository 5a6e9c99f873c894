//! Transaction chains across kill -9: clients call a three-hop chain that
//! runs piecewise (`sent` at the origin, `received` elsewhere, `done` back
//! at the origin) while the server is killed and restarted on the same
//! data directory. The oracle is what the clients were told and the
//! chain's own shape: after the restart has finished the chains in
//! flight, every chain whose first hop was acknowledged has all three
//! effects exactly once, and every chain with any effect has all of them
//! (a chain whose first hop never committed left nothing); and the chain
//! it links to (`THEN CALL confirm`) has run exactly once for each.

use crate::common;

use common::{connect, serve, STEP_TIMEOUT};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

const CLIENTS: usize = 3;
/// Acknowledged calls per round before the kill.
const ACKS_PER_ROUND: usize = 60;
const ROUNDS: usize = 3;
const ACCOUNTS: i32 = 16;

#[derive(Default)]
struct Shared {
    acked: Mutex<(HashSet<i64>, usize)>,
    progress: tokio::sync::Notify,
}

async fn client(pg: u16, shared: Arc<Shared>, first_id: i64) {
    let c = connect(pg).await;
    let mut id = first_id;
    loop {
        id += 1;
        let (a, b) = ((id * 7) as i32 % ACCOUNTS, (id * 13 + 5) as i32 % ACCOUNTS);
        match c
            .simple_query(&format!("CALL transfer({id}, {a}, {b})"))
            .await
        {
            Ok(_) => {
                let mut acked = shared.acked.lock().unwrap();
                acked.0.insert(id);
                acked.1 += 1;
                shared.progress.notify_one();
            }
            // The server went away.
            Err(_) => return,
        }
    }
}

async fn ids(c: &tokio_postgres::Client, table: &str) -> Vec<i64> {
    c.query(&format!("SELECT id FROM {table}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits until the restarted server has finished every chain in flight,
/// then checks the effects against the acknowledgements.
async fn check(c: &tokio_postgres::Client, acked: &HashSet<i64>) {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM aqueduct_chain_runs WHERE next_hop >= 0",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} chains still in flight after the restart"
        );
        tokio::task::yield_now().await;
    }
    let failed: i64 = c
        .query_one("SELECT count(*) FROM aqueduct_chain_runs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(failed, 0, "chains failed after their first hop");
    let sent: Vec<i64> = ids(c, "sent").await;
    let received: HashSet<i64> = ids(c, "received").await.into_iter().collect();
    let done: HashSet<i64> = ids(c, "done").await.into_iter().collect();
    let sent_set: HashSet<i64> = sent.iter().copied().collect();
    assert_eq!(sent.len(), sent_set.len());
    for id in acked {
        assert!(
            sent_set.contains(id),
            "acknowledged chain {id} lost its first hop"
        );
    }
    assert_eq!(
        sent_set, received,
        "chains with some effects but not all (received)"
    );
    assert_eq!(
        sent_set, done,
        "chains with some effects but not all (done)"
    );
    let confirmed: HashSet<i64> = ids(c, "confirmed").await.into_iter().collect();
    assert_eq!(
        sent_set, confirmed,
        "a linked chain did not start exactly once"
    );
    let (debits, credits): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT (SELECT coalesce(sum(n), 0) FROM debit)::bigint, \
                        (SELECT coalesce(sum(n), 0) FROM credit)::bigint",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        debits,
        sent.len() as i64,
        "a first hop's counter ran twice or not at all"
    );
    assert_eq!(
        credits,
        sent.len() as i64,
        "a second hop's counter ran twice or not at all"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_chain_completes_exactly_once_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Arc::new(Shared::default());
    for round in 0..ROUNDS {
        let server = serve(dir.path(), &[]);
        let c = connect(server.pg).await;
        if round == 0 {
            let mut setup = String::from(
                "CREATE TABLE sent (id bigint PRIMARY KEY, k int); \
                 CREATE TABLE received (id bigint PRIMARY KEY, k int); \
                 CREATE TABLE done (id bigint PRIMARY KEY); \
                 CREATE TABLE confirmed (id bigint PRIMARY KEY); \
                 CREATE TABLE debit (k int PRIMARY KEY, n bigint NOT NULL); \
                 CREATE TABLE credit (k int PRIMARY KEY, n bigint NOT NULL);",
            );
            for k in 0..ACCOUNTS {
                setup.push_str(&format!(
                    "INSERT INTO debit VALUES ({k}, 0); INSERT INTO credit VALUES ({k}, 0);"
                ));
            }
            c.batch_execute(&setup).await.unwrap();
            c.batch_execute(
                "CREATE CHAIN confirm (id bigint, b int) AS $$
                   HOP ON $b COMMUTATIVE;
                     INSERT INTO confirmed VALUES ($id);
                 $$",
            )
            .await
            .unwrap();
            c.batch_execute(
                "CREATE CHAIN transfer (id bigint, a int, b int) AS $$
                   HOP ON $a;
                     INSERT INTO sent VALUES ($id, $a);
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
            let plan: Vec<String> = c
                .simple_query("EXPLAIN CHAIN transfer")
                .await
                .unwrap()
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                    _ => None,
                })
                .collect();
            assert!(plan.join("\n").contains("piecewise"), "{plan:?}");
        } else {
            let told = shared.acked.lock().unwrap().0.clone();
            check(&c, &told).await;
        }
        shared.acked.lock().unwrap().1 = 0;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let first = ((round * CLIENTS + i) as i64) * 1_000_000;
                tokio::spawn(client(server.pg, shared.clone(), first))
            })
            .collect();
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        while shared.acked.lock().unwrap().1 < ACKS_PER_ROUND {
            tokio::time::timeout_at(deadline, shared.progress.notified())
                .await
                .unwrap_or_else(|_| panic!("round {round} stalled"));
        }
        server.process.kill9();
        for c in clients {
            tokio::time::timeout(STEP_TIMEOUT, c)
                .await
                .expect("a client notices the server is gone")
                .unwrap();
        }
    }
    let server = serve(dir.path(), &[]);
    let c = connect(server.pg).await;
    let told = shared.acked.lock().unwrap().0.clone();
    assert!(told.len() >= ROUNDS * ACKS_PER_ROUND);
    check(&c, &told).await;
}
