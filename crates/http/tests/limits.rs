//! Over HTTP: a statement nested past the depth limit is refused with
//! SQLSTATE 54001 (status 400) and the server keeps serving.

mod common;

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
