//! Over the wire: statements nested past the depth limit are refused with
//! SQLSTATE 54001 and the server keeps serving; statements at the limit run.

mod common;

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
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
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
