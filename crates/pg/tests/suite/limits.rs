//! Over the wire: statements nested past the depth limit are refused with
//! SQLSTATE 54001 and the server keeps serving; statements at the limit run.

use crate::common;

use aqueduct_pg::PgConfig;
use aqueduct_sql::limits::MAX_STATEMENT_DEPTH;
use common::{bounded, Server};

fn chain(n: usize, term: &str, op: &str) -> String {
    vec![term; n].join(op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_statements_are_refused_and_the_server_stays_up() {
    bounded(async {
        let server = Server::start(PgConfig::default()).await;
        let client = server.connect().await;
        client
            .batch_execute("CREATE TABLE t (x int PRIMARY KEY); INSERT INTO t VALUES (1)")
            .await
            .unwrap();
        let n = MAX_STATEMENT_DEPTH - 10;
        // At the limit, by the simple and the extended protocol (500 UNION
        // ALL arms crashed the process).
        let rows = client
            .simple_query(&chain(500, "SELECT x FROM t", " UNION ALL "))
            .await
            .unwrap();
        assert_eq!(rows.len(), 502);
        let rows = client
            .simple_query(&format!("SELECT {} AS s", chain(n, "1", "+")))
            .await
            .unwrap();
        let sum = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(sum, Some(n.to_string()));
        let row = client
            .query_one(
                &format!("SELECT x FROM t WHERE {}", chain(n / 2, "x = $1", " OR ")),
                &[&1i32],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), 1);
        // Past it, by both, and far past it (each crashed the process).
        for sql in [
            format!("SELECT {}", chain(1_500, "1", "+")),
            format!("SELECT x FROM t WHERE {}", chain(5_000, "x = 1", " AND ")),
            chain(1_500, "SELECT x FROM t", " UNION ALL "),
            format!(
                "CREATE VIEW v AS SELECT {} FROM t",
                chain(100_000, "x", "||")
            ),
        ] {
            let Err(e) = client.simple_query(&sql).await else {
                panic!("{}...: expected SQLSTATE 54001", &sql[..40]);
            };
            let e = e.as_db_error().expect("a database error");
            assert_eq!(e.code().code(), "54001", "{e}");
            assert!(e.hint().is_some());
            let Err(e) = client.prepare(&sql).await else {
                panic!("{}...: expected SQLSTATE 54001", &sql[..40]);
            };
            assert_eq!(e.code().unwrap().code(), "54001");
        }
        // The connection and the server go on.
        let row = client.query_one("SELECT x FROM t", &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 1);
        assert!(server.is_serving());
        server.stop().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_stops_the_running_statement() {
    bounded(async {
        let server = Server::start(PgConfig::default()).await;
        let client = server.connect().await;
        let values: Vec<String> = (0..300).map(|i| format!("({i}, 1)")).collect();
        client
            .batch_execute(&format!(
                "CREATE TABLE t (id int PRIMARY KEY, k int); INSERT INTO t VALUES {}",
                values.join(", ")
            ))
            .await
            .unwrap();
        let token = client.cancel_token();
        let engine = server.engine.clone();
        let canceller = tokio::spawn(async move {
            await_running(&engine).await;
            token.cancel_query(tokio_postgres::NoTls).await.unwrap();
        });
        // 27 M rows after three joins: hours without the cancel.
        let e = client
            .simple_query(
                "SELECT count(*) FROM t a JOIN t b ON a.k = b.k JOIN t c ON b.k = c.k JOIN t d ON c.k = d.k",
            )
            .await
            .unwrap_err();
        canceller.await.unwrap();
        let e = e.as_db_error().expect("a database error");
        assert_eq!(e.code().code(), "57014", "{e}");
        assert_eq!(e.message(), "canceling statement due to user request");
        // The connection goes on.
        let row = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 300);
        server.stop().await.unwrap();
    })
    .await;
}

/// A table of `n` rows that all join with each other.
async fn join_table(client: &tokio_postgres::Client, n: usize) {
    let values: Vec<String> = (0..n).map(|i| format!("({i}, 1)")).collect();
    client
        .batch_execute(&format!(
            "CREATE TABLE j (id int PRIMARY KEY, k int); INSERT INTO j VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
}

/// Four copies of a 300-row table joined on one value: 8.1e9 rows, hours.
const RUNAWAY: &str =
    "SELECT count(*) FROM j a JOIN j b ON a.k = b.k JOIN j c ON b.k = c.k JOIN j d ON c.k = d.k";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_client_went_away_is_stopped() {
    use std::sync::atomic::Ordering;
    bounded(async {
        let server = Server::start(PgConfig::default()).await;
        let client = server.connect().await;
        join_table(&client, 300).await;
        let errors = || server.engine.metrics.errors.load(Ordering::Relaxed);
        let before = errors();
        // By the simple protocol and by the extended one.
        for extended in [false, true] {
            let mut raw = common::Raw::connect(server.addr).await;
            // Neither the memory limit (1GB by default, reached in about
            // 17 seconds in a debug build) nor a timeout stops it first.
            let set = raw
                .query("SET aqueduct.statement_memory_limit = '4GB'; SET statement_timeout = '50s'")
                .await;
            assert!(set.iter().all(|m| m.tag != b'E'), "{set:?}");
            if extended {
                let mut bytes = common::msg(
                    b'P',
                    &[common::cstr(""), common::cstr(RUNAWAY), vec![0, 0]].concat(),
                );
                bytes.extend(common::msg(
                    b'B',
                    &[common::cstr(""), common::cstr(""), vec![0, 0, 0, 0, 0, 0]].concat(),
                ));
                bytes.extend(common::msg(
                    b'E',
                    &[common::cstr(""), vec![0, 0, 0, 0]].concat(),
                ));
                bytes.extend(common::msg(b'S', &[]));
                raw.send(&bytes).await;
            } else {
                raw.send(&common::msg(b'Q', &common::cstr(RUNAWAY))).await;
            }
            await_running(&server.engine).await;
            let expected = errors() + 1;
            drop(raw);
            let dropped = std::time::Instant::now();
            // The statement stops (it fails, unseen) soon.
            while errors() < expected {
                assert!(
                    dropped.elapsed() < std::time::Duration::from_secs(10),
                    "still running {:?} after the client went away",
                    dropped.elapsed()
                );
                tokio::task::yield_now().await;
            }
            // And is counted out before the next one starts.
            while server
                .engine
                .metrics
                .running
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
            {
                assert!(dropped.elapsed() < common::TEST_TIMEOUT, "never ended");
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(errors(), before + 2);
        // The server goes on.
        let row = client
            .query_one("SELECT count(*) FROM j", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 300);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_a_statement_runs_are_all_answered() {
    bounded(async {
        let server = Server::start(PgConfig::default()).await;
        let client = server.connect().await;
        join_table(&client, 40).await;
        let mut raw = common::Raw::connect(server.addr).await;
        // A statement that takes a while, then more behind it in one write.
        let mut bytes = common::msg(
            b'Q',
            &common::cstr("SELECT count(*) FROM j a JOIN j b ON a.k = b.k JOIN j c ON b.k = c.k"),
        );
        for i in 0..50 {
            bytes.extend(common::msg(b'Q', &common::cstr(&format!("SELECT {i}"))));
        }
        raw.send(&bytes).await;
        let first = raw.until_ready().await;
        let cells: Vec<_> = first
            .iter()
            .filter(|m| m.tag == b'D')
            .map(|m| m.columns())
            .collect();
        assert_eq!(cells, vec![vec![Some(b"64000".to_vec())]]);
        for i in 0..50 {
            let reply = raw.until_ready().await;
            let cells: Vec<_> = reply
                .iter()
                .filter(|m| m.tag == b'D')
                .map(|m| m.columns())
                .collect();
            assert_eq!(cells, vec![vec![Some(i.to_string().into_bytes())]]);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_statements_in_one_query_take_linear_time() {
    bounded(async {
        let server = Server::start(PgConfig::default()).await;
        let client = server.connect().await;
        let time = |n: usize| {
            let client = &client;
            async move {
                let sql = "SELECT 1;".repeat(n);
                let started = std::time::Instant::now();
                let messages = client.simple_query(&sql).await.unwrap();
                // A row and a CommandComplete per statement, and the
                // RowDescription.
                assert_eq!(messages.len(), 3 * n);
                started.elapsed()
            }
        };
        time(200).await;
        let small = time(2_000).await.min(time(2_000).await);
        let large = time(20_000).await;
        // Linear is 10 times; work over the whole text per statement made
        // it 100 (20,000 statements took about 15 seconds).
        assert!(
            large < small * 40,
            "2,000 statements took {small:?}, 20,000 took {large:?}"
        );
    })
    .await;
}

/// Waits (at most [`common::TEST_TIMEOUT`]) until `engine` runs a
/// statement.
async fn await_running(engine: &aqueduct_sql::Engine) {
    let started = std::time::Instant::now();
    while engine
        .metrics
        .running
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        assert!(
            started.elapsed() < common::TEST_TIMEOUT,
            "no statement started"
        );
        tokio::task::yield_now().await;
    }
}
