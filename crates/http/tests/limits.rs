//! Over HTTP: a statement nested past the depth limit is refused with
//! SQLSTATE 54001 (status 400) and the server keeps serving.

use std::sync::Arc;

use aqueduct_http::{serve, HttpConfig};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
        let (log, _) = Log::open(
            dir.path(),
            Options {
                sync: SyncPolicy::Never,
                ..Default::default()
            },
        )
        .unwrap();
        let engine = Engine::open(log, &mut |_| {}).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = HttpConfig::default();
        tokio::spawn(serve(
            listener,
            engine,
            config,
            Arc::new(|_: &mut String| {}),
            std::future::pending(),
        ));
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
