//! Over HTTP: a statement nested past the depth limit is refused with
//! SQLSTATE 54001 (status 400) and the server keeps serving.

use crate::common;

use aqueduct_http::HttpConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn post_sql(addr: std::net::SocketAddr, sql: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/sql HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = &out[out.find("\r\n\r\n").unwrap() + 4..];
    (status, serde_json::from_str(body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_statements_are_refused_over_http() {
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let dir = tempfile::tempdir().unwrap();
        let addr = common::listen(common::engine(dir.path()), HttpConfig::default()).await;
        let n = aqueduct_sql::limits::MAX_STATEMENT_DEPTH - 10;
        let (status, body) = post_sql(addr, &format!("SELECT {}", vec!["1"; n].join("+"))).await;
        assert_eq!(status, 200, "{body}");
        for sql in [
            format!("SELECT {}", vec!["1"; 1_500].join("+")),
            format!("SELECT {}", vec!["'a'"; 100_000].join("||")),
        ] {
            let (status, body) = post_sql(addr, &sql).await;
            assert_eq!(status, 400, "{body}");
            assert_eq!(body["error"]["code"], "54001", "{body}");
        }
        let (status, body) = post_sql(addr, "SELECT 1").await;
        assert_eq!(status, 200, "{body}");
    })
    .await
    .expect("test took too long");
}

/// A statement whose client closes the connection is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_http_client_went_away_is_stopped() {
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let dir = tempfile::tempdir().unwrap();
        let engine = common::engine(dir.path());
        let mut s = engine.session();
        let values: Vec<String> = (0..300).map(|i| format!("({i}, 1)")).collect();
        for sql in [
            "CREATE TABLE t (id int PRIMARY KEY, k int)".to_string(),
            format!("INSERT INTO t VALUES {}", values.join(", ")),
        ] {
            s.execute(&sql).pop().unwrap().unwrap();
        }
        let running = || {
            engine
                .metrics
                .running
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let errors = || {
            engine
                .metrics
                .errors
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let addr = common::listen(engine.clone(), HttpConfig::default()).await;
        // Four copies joined on one value: hours; its memory limit (1GB)
        // would stop it only after many seconds.
        let body = serde_json::json!({"sql": "SELECT count(*) FROM t a JOIN t b ON a.k = b.k JOIN t c ON b.k = c.k JOIN t d ON c.k = d.k"}).to_string();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                format!(
                    "POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        while running() == 0 {
            tokio::task::yield_now().await;
        }
        let before = errors();
        drop(stream);
        let dropped = std::time::Instant::now();
        while running() > 0 {
            assert!(
                dropped.elapsed() < std::time::Duration::from_secs(5),
                "still running {:?} after the client went away",
                dropped.elapsed()
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(errors(), before + 1);
    })
    .await
    .expect("in time");
}
