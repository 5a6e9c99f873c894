//! The HTTP API over a real socket: health, metrics, SQL, tokens, bad input.

use crate::common;

use std::sync::Arc;

use aqueduct_http::HttpConfig;
use aqueduct_sql::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(tokens: Vec<String>) -> (std::net::SocketAddr, tempfile::TempDir) {
    let (addr, dir, _) = start_engine(tokens).await;
    (addr, dir)
}

async fn start_engine(
    tokens: Vec<String>,
) -> (std::net::SocketAddr, tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let config = HttpConfig {
        tokens,
        ..Default::default()
    };
    let (addr, _) = common::listen_with(
        engine.clone(),
        config,
        |out: &mut String| out.push_str("aqueduct_test_extra 1\n"),
        std::future::pending(),
    )
    .await;
    (addr, dir, engine)
}

/// A minimal HTTP/1.1 exchange; returns (status, body).
async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let (status, _, body) = exchange(addr, method, path, headers, body).await;
    (status, body)
}

/// [`request`], with the response's headers (names in lower case).
async fn exchange(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, std::collections::BTreeMap<String, String>, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
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

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Release reads carry what an HTTP cache needs and answer revalidation
/// with 304; they change only at the next release. Change sets and time
/// maps are served as immutable; session tokens travel in headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_reads_are_cacheable_and_change_only_at_releases() {
    let (addr, _dir, engine) = start_engine(vec![]).await;
    let sql = |body: &'static str| async move {
        let (status, headers, body) = exchange(addr, "POST", "/v1/sql", "", body).await;
        assert_eq!(status, 200, "{body}");
        (headers, json(&body))
    };
    sql(r#"{"sql": "CREATE TABLE posts (id bigint PRIMARY KEY, author bigint, body text)"}"#).await;
    sql(r#"{"sql": "CREATE VIEW per_author AS SELECT author, count(*) AS n FROM posts GROUP BY author"}"#).await;
    let (status, body) = request(addr, "GET", "/v1/releases/current", "", "").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--release-interval"), "{body}");

    let schedule =
        aqueduct_sql::releases::Schedule::new(std::time::Duration::from_secs(60)).unwrap();
    engine.enable_releases(schedule);
    sql(r#"{"sql": "CREATE TIME MAP by_author ON posts (author) EVERY '1min', '5min'"}"#).await;
    let (headers, _) = sql(r#"{"sql": "INSERT INTO posts VALUES (1, 7, 'a'), (2, 8, 'b')"}"#).await;
    let token: u64 = headers["aqueduct-last-lsn"].parse().unwrap();
    let id = schedule.due_at(now_ms());
    engine.cut_release(id, now_ms()).unwrap();

    // The current release, cacheable until the next one.
    let (status, headers, body) = exchange(addr, "GET", "/v1/releases/current", "", "").await;
    assert_eq!(status, 200, "{body}");
    let current = json(&body);
    assert_eq!(current["id"], id);
    assert_eq!(current["lsn"], token);
    assert!(
        headers["cache-control"].starts_with("public, max-age=")
            || now_ms() >= schedule.time_of(id + 1),
        "{headers:?}"
    );

    // A release read of the view: cache headers, then 304 on revalidation.
    let path = "/v1/views/per_author?author=7&consistency=release";
    let (status, headers, body) = exchange(addr, "GET", path, "", "").await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["rows"], serde_json::json!([{"author": 7, "n": 1}]));
    assert_eq!(v["release"], id);
    // Fresh until the next release (unless its time passed meanwhile).
    let next = schedule.time_of(id + 1);
    if now_ms() < next {
        let age: u64 = headers["cache-control"]
            .strip_prefix("public, max-age=")
            .unwrap_or_else(|| panic!("{headers:?}"))
            .parse()
            .unwrap();
        assert!(
            age >= 1 && age * 1000 <= next - schedule.time_of(id) + 999,
            "max-age {age}"
        );
    }
    assert!(headers.contains_key("last-modified") && headers.contains_key("expires"));
    let tag = headers["etag"].clone();
    let (status, _, body) =
        exchange(addr, "GET", path, &format!("If-None-Match: {tag}\r\n"), "").await;
    assert_eq!(status, 304, "{body}");
    assert!(body.is_empty());

    // A later write: release reads do not see it, eventual ones do.
    let (headers, _) = sql(r#"{"sql": "INSERT INTO posts VALUES (3, 7, 'c')"}"#).await;
    let later: u64 = headers["aqueduct-last-lsn"].parse().unwrap();
    let (_, headers2, body) = exchange(addr, "GET", path, "", "").await;
    assert_eq!(json(&body)["rows"], v["rows"]);
    assert_eq!(headers2["etag"], tag);
    let (status, headers, body) = exchange(
        addr,
        "GET",
        "/v1/views/per_author?author=7&consistency=session",
        &format!("Aqueduct-After-LSN: {later}\r\n"),
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body)["rows"],
        serde_json::json!([{"author": 7, "n": 2}])
    );
    assert_eq!(headers["cache-control"], "no-store");
    // The next release shows it, under a new tag.
    engine.cut_release(id + 1, now_ms()).unwrap();
    let (_, headers, body) = exchange(addr, "GET", path, "", "").await;
    assert_eq!(
        json(&body)["rows"],
        serde_json::json!([{"author": 7, "n": 2}])
    );
    assert_ne!(headers["etag"], tag);

    // Change sets: the rows of each interval, immutable.
    let (status, headers, body) = exchange(
        addr,
        "GET",
        &format!("/v1/releases/{}/changes?table=posts", id + 1),
        "",
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(headers["cache-control"].contains("immutable"));
    let c = json(&body);
    assert_eq!(c["changes"].as_array().unwrap().len(), 1);
    assert_eq!(c["changes"][0]["op"], "insert");
    assert_eq!(
        c["changes"][0]["row"],
        serde_json::json!({"id": 3, "author": 7, "body": "c"})
    );
    let (_, _, body) = exchange(
        addr,
        "GET",
        &format!("/v1/releases/{id}/changes?table=posts&column=author&value=8"),
        "",
        "",
    )
    .await;
    let c = json(&body);
    assert_eq!(c["changes"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(c["changes"][0]["row"]["id"], 2);
    let (status, _, body) = exchange(
        addr,
        "GET",
        &format!("/v1/releases/{}/changes?table=posts", id + 9),
        "",
        "",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("not out yet"), "{body}");
    let (status, _, _) = exchange(
        addr,
        "GET",
        &format!("/v1/releases/{}/changes?table=nope", id),
        "",
        "",
    )
    .await;
    assert_eq!(status, 400);

    // Time maps: release id+1's interval starts at time_of(id).
    let start = schedule.time_of(id);
    let (status, headers, body) = exchange(
        addr,
        "GET",
        &format!("/v1/timemaps/by_author?period=1min&start_ms={start}"),
        "",
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let b = json(&body);
    assert_eq!(b["values"], serde_json::json!([7]));
    assert_eq!(b["complete"], true);
    assert!(headers["cache-control"].contains("immutable"));
    let (status, _, body) = exchange(
        addr,
        "GET",
        &format!("/v1/timemaps/by_author?period=90s&start_ms={start}"),
        "",
        "",
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // A token from the future is refused with the reason.
    let (status, _, body) = exchange(
        addr,
        "GET",
        "/v1/views/per_author?author=7&consistency=session",
        "Aqueduct-After-LSN: 99999999\r\n",
        "",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("last write"), "{body}");
    let (status, _, body) = exchange(addr, "GET", "/v1/views/per_author?nobody=1", "", "").await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) =
        exchange(addr, "GET", "/v1/views/per_author?consistency=soon", "", "").await;
    assert_eq!(status, 400, "{body}");
    let (_, body) = request(addr, "GET", "/metrics", "", "").await;
    assert!(
        body.contains(&format!("aqueduct_release_current {}", id + 1)),
        "{body}"
    );
    assert!(
        body.contains("aqueduct_releases_published_total 2"),
        "{body}"
    );
}
