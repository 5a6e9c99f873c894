//! Bearer tokens mapped to roles: `/v1/sql` and view reads run as the
//! token's role, the scheme's name is case-insensitive, and a server with
//! users but no token refuses the API instead of leaving it open.

use crate::common;

use std::collections::BTreeMap;

use aqueduct_http::HttpConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(config: HttpConfig, setup: &[&str]) -> (std::net::SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    engine.set_bootstrap_users(["admin".to_string()]);
    let mut s = engine.session();
    for sql in setup {
        for r in s.execute(sql) {
            r.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
    let addr = common::listen(engine, config).await;
    (addr, dir)
}

/// One request; (status, JSON body).
async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (u16, serde_json::Value) {
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{auth}\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    })
    .await
    .expect("the server answers in time");
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

async fn sql(
    addr: std::net::SocketAddr,
    auth: Option<&str>,
    sql: &str,
) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "sql": sql }).to_string();
    call(addr, "POST", "/v1/sql", auth, &body).await
}

const SETUP: &[&str] = &[
    "CREATE TABLE t (id bigint PRIMARY KEY, v text)",
    "INSERT INTO t VALUES (1, 'one')",
    "CREATE VIEW counts AS SELECT v, count(*) AS n FROM t GROUP BY v",
    "CREATE USER alice PASSWORD 'pw'",
    "GRANT SELECT ON t TO alice",
];

fn token_config() -> HttpConfig {
    HttpConfig {
        token_roles: BTreeMap::from([
            ("alice-token".to_string(), "alice".to_string()),
            ("admin-token".to_string(), "admin".to_string()),
            ("ghost-token".to_string(), "ghost".to_string()),
        ]),
        users_configured: true,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_run_as_their_roles() {
    let (addr, _dir) = start(token_config(), SETUP).await;

    let (status, body) = sql(addr, None, "SELECT * FROM t").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "28000");
    let (status, _) = sql(addr, Some("Bearer wrong"), "SELECT * FROM t").await;
    assert_eq!(status, 401);

    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} alice-token");
        let (status, body) = sql(addr, Some(&auth), "SELECT current_user, v FROM t").await;
        assert_eq!(status, 200, "{scheme}: {body}");
        assert_eq!(body["rows"], serde_json::json!([["alice", "one"]]));
    }
    let alice = Some("Bearer alice-token");
    let (status, body) = sql(addr, alice, "INSERT INTO t VALUES (2, 'two')").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "42501");
    assert_eq!(body["error"]["message"], "permission denied for table t");
    let (status, body) = sql(addr, alice, "CREATE ROLE mallory").await;
    assert_eq!(status, 403, "{body}");

    // View reads over HTTP run as the role too.
    let (status, body) = call(addr, "GET", "/v1/views/counts?v=one", alice, "").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "permission denied for view counts"
    );

    // A token of a bootstrap user is a superuser.
    let admin = Some("bearer admin-token");
    let (status, body) = sql(addr, admin, "GRANT SELECT ON counts TO alice").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(addr, admin, "SELECT current_user").await;
    assert_eq!(
        (status, &body["rows"]),
        (200, &serde_json::json!([["admin"]]))
    );
    let (status, body) = call(addr, "GET", "/v1/views/counts?v=one", alice, "").await;
    assert_eq!(status, 200, "{body}");

    // A token whose role does not exist is refused, saying so.
    let (status, body) = sql(addr, Some("Bearer ghost-token"), "SELECT 1").await;
    assert_eq!(status, 401, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"ghost\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_without_tokens_close_the_api() {
    let (addr, _dir) = start(
        HttpConfig {
            users_configured: true,
            ..Default::default()
        },
        SETUP,
    )
    .await;
    let (status, body) = sql(addr, None, "SELECT * FROM t").await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("http_tokens"),
        "{body}"
    );
    let (status, _) = call(addr, "GET", "/v1/views/counts", None, "").await;
    assert_eq!(status, 401);
    // Health stays open.
    let (status, _) = call(addr, "GET", "/health", None, "").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_tokens_still_act_as_a_superuser() {
    let (addr, _dir) = start(
        HttpConfig {
            tokens: vec!["old-style".into()],
            users_configured: true,
            ..Default::default()
        },
        SETUP,
    )
    .await;
    let (status, body) = sql(
        addr,
        Some("Bearer old-style"),
        "INSERT INTO t VALUES (3, 'x')",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = sql(addr, None, "SELECT 1").await;
    assert_eq!(status, 401);
}
