//! The HTTP API over a real socket: health, metrics, SQL, tokens, bad input.

use std::sync::Arc;

use aqueduct_http::{serve, HttpConfig};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn start(tokens: Vec<String>) -> (std::net::SocketAddr, tempfile::TempDir) {
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
    let config = HttpConfig { tokens, tls: None };
    tokio::spawn(serve(
        listener,
        engine,
        config,
        Arc::new(|out: &mut String| out.push_str("aqueduct_test_extra 1\n")),
        std::future::pending(),
    ));
    (addr, dir)
}

/// A minimal HTTP/1.1 exchange; returns (status, body).
async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_health_and_metrics() {
    let (addr, _dir) = start(vec![]).await;
    let (status, body) = request(addr, "GET", "/health", "", "").await;
    assert_eq!(status, 200);
    assert_eq!(json(&body)["status"], "ok");

    let (status, body) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "CREATE TABLE t (id bigint PRIMARY KEY, name text, price numeric, meta jsonb)"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "INSERT INTO t VALUES ($1, $2, $3, $4)", "params": [1, "ada", "1.50", {"k": [1, 2]}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["command"], "INSERT 0 1");
    assert!(v["lsn"].as_u64().unwrap() > 0);
    let (status, body) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "SELECT id, name, price, meta FROM t WHERE id = $1", "params": [1]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["columns"][0]["name"], "id");
    assert_eq!(v["columns"][0]["type"], "bigint");
    assert_eq!(
        v["rows"],
        serde_json::json!([[1, "ada", "1.50", {"k": [1, 2]}]])
    );

    // A real keeps its own digits as a JSON number.
    let (status, body) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "SELECT 0.1::real, 0.1::real::float8"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body)["rows"],
        serde_json::json!([[0.1, 0.10000000149011612]])
    );

    // Errors are JSON with the SQLSTATE.
    let (status, body) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "SELECT * FROM nope"}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(json(&body)["error"]["code"], "42P01");
    let (status, body) = request(addr, "POST", "/v1/sql", "", r#"{"sql": 5"#).await;
    assert_eq!(status, 400);
    assert_eq!(json(&body)["error"]["code"], "08P01");

    let (status, _) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "CREATE VIEW named AS SELECT name, count(*) AS n FROM t GROUP BY name"}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = request(addr, "GET", "/v1/graph", "", "").await;
    assert_eq!(status, 200);
    assert!(body.starts_with("digraph"), "{body}");
    assert!(body.contains("view named"), "{body}");
    let (status, _) = request(addr, "GET", "/v1/graph?format=png", "", "").await;
    assert_eq!(status, 400);

    // A view holds rows once a read needs them: this scan has it
    // materialized in full.
    let (status, _) = request(
        addr,
        "POST",
        "/v1/sql",
        "",
        r#"{"sql": "SELECT * FROM named"}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = request(addr, "GET", "/metrics", "", "").await;
    assert_eq!(status, 200);
    for needle in [
        "aqueduct_statements_total{kind=\"insert\"} 1",
        "aqueduct_log_sync_seconds_bucket{le=\"+Inf\"}",
        "aqueduct_table_rows{table=\"t\"} 1",
        "aqueduct_recovery_seconds",
        "aqueduct_test_extra 1",
        "aqueduct_view_rows{view=\"named\"} 1",
        "aqueduct_dataflow_queued_batches",
    ] {
        assert!(body.contains(needle), "missing {needle} in\n{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_guard_sql() {
    let (addr, _dir) = start(vec!["s3cret".into()]).await;
    let sql = r#"{"sql": "SELECT 1"}"#;
    let (status, body) = request(addr, "POST", "/v1/sql", "", sql).await;
    assert_eq!(status, 401);
    assert_eq!(json(&body)["error"]["code"], "28000");
    let (status, _) = request(
        addr,
        "POST",
        "/v1/sql",
        "Authorization: Bearer wrong\r\n",
        sql,
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = request(
        addr,
        "POST",
        "/v1/sql",
        "Authorization: Bearer s3cret\r\n",
        sql,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["rows"], serde_json::json!([[1]]));
    // Health stays open for load balancers.
    assert_eq!(request(addr, "GET", "/health", "", "").await.0, 200);
}
