//! Generated keys and foreign keys across kill -9: clients insert parents
//! and children with `serial` keys and delete parents (cascading to their
//! children) while the server is killed and restarted on the same data
//! directory. The oracle is what the clients were told: every
//! acknowledged parent is there unless a delete of it was sent, no key is
//! ever handed out twice (a restarted sequence goes on after every value
//! acknowledged before the crash), and no child is without its parent.

use crate::common;

use common::{connect, serve, STEP_TIMEOUT};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

const CLIENTS: usize = 3;
/// Acknowledged inserts per round before the kill.
const ACKS_PER_ROUND: usize = 150;
const ROUNDS: usize = 3;

/// What clients were told, across rounds.
#[derive(Clone, Default)]
struct Acked {
    parents: HashSet<i32>,
    children: HashSet<i64>,
    /// Parents a delete was sent for (acknowledged or not).
    deleting: HashSet<i32>,
    /// Acknowledged inserts this round.
    inserts: usize,
}

/// The acknowledgements and a wake-up for whoever waits on their count.
#[derive(Default)]
struct Shared {
    acked: Mutex<Acked>,
    progress: tokio::sync::Notify,
}

impl Shared {
    fn inserted(&self, a: &mut Acked) {
        a.inserts += 1;
        self.progress.notify_one();
    }
}

/// One client: inserts parents and children and deletes parents until the
/// round has its acknowledgements or the server is gone.
async fn client(pg: u16, shared: Arc<Shared>, seed: u64) {
    let acked = &shared.acked;
    let c = connect(pg).await;
    let mut n = seed;
    loop {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let op = (n >> 33) % 8;
        let parent = {
            let a = acked.lock().unwrap();
            let live: Vec<i32> = a.parents.difference(&a.deleting).copied().collect();
            (!live.is_empty()).then(|| live[(n >> 40) as usize % live.len()])
        };
        let result = match (op, parent) {
            (0, Some(p)) => {
                acked.lock().unwrap().deleting.insert(p);
                c.execute("DELETE FROM parent WHERE id = $1", &[&p])
                    .await
                    .map(|_| ())
            }
            (1..=3, Some(p)) => {
                match c
                    .query_one("INSERT INTO child (parent) VALUES ($1) RETURNING id", &[&p])
                    .await
                {
                    Ok(row) => {
                        let id: i64 = row.get(0);
                        let mut a = acked.lock().unwrap();
                        assert!(a.children.insert(id), "child id {id} handed out twice");
                        shared.inserted(&mut a);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            _ => match c
                .query_one("INSERT INTO parent (name) VALUES ('p') RETURNING id", &[])
                .await
            {
                Ok(row) => {
                    let id: i32 = row.get(0);
                    let mut a = acked.lock().unwrap();
                    assert!(a.parents.insert(id), "parent id {id} handed out twice");
                    shared.inserted(&mut a);
                    Ok(())
                }
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            // A child of a parent deleted meanwhile: the constraint at work.
            if e.code() == Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION) {
                continue;
            }
            // Anything else: the server went away.
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_never_reused_and_children_keep_their_parents_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Arc::new(Shared::default());
    let acked = &shared.acked;
    for round in 0..ROUNDS {
        let server = serve(dir.path(), &[]);
        let c = connect(server.pg).await;
        if round == 0 {
            c.batch_execute(
                "CREATE TABLE parent (id serial PRIMARY KEY, name text); \
                 CREATE TABLE child (id bigserial PRIMARY KEY, \
                   parent int NOT NULL REFERENCES parent ON DELETE CASCADE)",
            )
            .await
            .unwrap();
        } else {
            let told = acked.lock().unwrap().clone();
            check(&c, &told).await;
        }
        acked.lock().unwrap().inserts = 0;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                tokio::spawn(client(
                    server.pg,
                    shared.clone(),
                    (round * CLIENTS + i) as u64 + 1,
                ))
            })
            .collect();
        // Kill while the clients are writing.
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        while acked.lock().unwrap().inserts < ACKS_PER_ROUND {
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
    let told = acked.lock().unwrap().clone();
    check(&c, &told).await;
}

/// After a restart: the acknowledged state is there, the constraint holds,
/// and the sequences go on after every acknowledged value.
async fn check(c: &tokio_postgres::Client, a: &Acked) {
    let parents: HashSet<i32> = c
        .query("SELECT id FROM parent", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for p in a.parents.difference(&a.deleting) {
        assert!(parents.contains(p), "acknowledged parent {p} lost");
    }
    let orphans = c
        .query(
            "SELECT c.id FROM child c LEFT JOIN parent p ON p.id = c.parent WHERE p.id IS NULL",
            &[],
        )
        .await
        .unwrap();
    assert!(
        orphans.is_empty(),
        "{} children without a parent",
        orphans.len()
    );
    let next_parent: i32 = c
        .query_one("SELECT nextval('parent_id_seq')::int", &[])
        .await
        .unwrap()
        .get(0);
    let next_child: i64 = c
        .query_one("SELECT nextval('child_id_seq')", &[])
        .await
        .unwrap()
        .get(0);
    let max_parent = a.parents.iter().max().copied().unwrap_or(0);
    let max_child = a.children.iter().max().copied().unwrap_or(0);
    assert!(
        next_parent > max_parent,
        "parent_id_seq restarted at {next_parent}, at or before acknowledged id {max_parent}"
    );
    assert!(
        next_child > max_child,
        "child_id_seq restarted at {next_child}, at or before acknowledged id {max_child}"
    );
}
