//! The HTTP front end: `GET /health`, `GET /metrics` (Prometheus text),
//! `POST /v1/sql` (JSON in, JSON out). Bearer tokens guard `/v1/*` when
//! configured, each mapping to the role requests run as (`auth.rs`); TLS
//! when given a certificate.

mod auth;
mod changes;
mod cluster;
mod json;
mod log_records;
pub(crate) mod metrics;
mod publications;
mod releases;

use std::future::Future;
use std::sync::Arc;

use aqueduct_sql::{Engine, Outcome, SqlError};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;

pub use metrics::render_metrics;

/// The request header carrying a session token (an LSN from a write's
/// `Aqueduct-Last-LSN`): the read waits until views reflect it.
pub const AFTER_LSN_HEADER: &str = "aqueduct-after-lsn";
/// The response header carrying the LSN of the request's write.
pub const LAST_LSN_HEADER: &str = "aqueduct-last-lsn";

/// Largest request body accepted by `/v1/sql`.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Extra metric lines supplied by the server (connection counts and such).
pub type ExtraMetrics = Arc<dyn Fn(&mut String) + Send + Sync>;

/// A follower's replication state as JSON, supplied by the server
/// (`GET /v1/replication`).
pub type ReplicationStatus = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

#[derive(Clone, Default)]
pub struct HttpConfig {
    /// Bearer tokens of a bootstrap superuser (the older, list form).
    pub tokens: Vec<String>,
    /// Bearer token → the role its requests run as (a role created in SQL
    /// or a bootstrap user).
    pub token_roles: std::collections::BTreeMap<String, String>,
    /// Users are configured (the PostgreSQL port asks for passwords): with
    /// no token configured, `/v1/*` is then refused instead of open. With
    /// neither users nor tokens, requests are trusted (loopback default).
    pub users_configured: bool,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Set on a follower: what `GET /v1/replication` says of it.
    pub replication: Option<ReplicationStatus>,
    /// Set on a member of a Raft group (`cluster.rs`).
    pub cluster: Option<Arc<aqueduct_replicate::group::Member>>,
}

#[derive(Clone)]
struct AppState {
    engine: Arc<Engine>,
    auth: Arc<auth::HttpAuth>,
    extra: ExtraMetrics,
    /// Change streams and snapshots running (`changes.rs`).
    streams: Arc<std::sync::atomic::AtomicUsize>,
    /// Counters of publication streams (`publications.rs`).
    publications: Arc<aqueduct_publisher::PublicationMetrics>,
    /// Bootstrap snapshots held for subscribers (`publications.rs`).
    bootstraps: Arc<aqueduct_publisher::Bootstraps>,
    /// Followers copying the compacted log (`log_records.rs`).
    follower_bootstraps: log_records::BootstrapHolds,
    /// A follower's replication state (`log_records.rs`).
    replication: Option<ReplicationStatus>,
    /// This server's Raft group membership (`cluster.rs`).
    cluster: Option<Arc<aqueduct_replicate::group::Member>>,
    /// Transaction blocks held for other members' sessions (`cluster.rs`).
    forwarded: Arc<aqueduct_sql::ForwardedBlocks>,
}

/// The routes, for serving and for tests.
pub fn router(engine: Arc<Engine>, config: &HttpConfig, extra: ExtraMetrics) -> Router {
    router_and_state(engine, config, extra).0
}

fn router_and_state(
    engine: Arc<Engine>,
    config: &HttpConfig,
    extra: ExtraMetrics,
) -> (Router, AppState) {
    let state = AppState {
        engine,
        auth: Arc::new(auth::HttpAuth {
            superuser_tokens: config.tokens.clone(),
            token_roles: config.token_roles.clone(),
            users_configured: config.users_configured,
        }),
        extra,
        streams: Default::default(),
        publications: Default::default(),
        bootstraps: Default::default(),
        follower_bootstraps: Default::default(),
        replication: config.replication.clone(),
        cluster: config.cluster.clone(),
        forwarded: Default::default(),
    };
    if let (Some(_), Ok(runtime)) = (&state.cluster, tokio::runtime::Handle::try_current()) {
        let blocks = Arc::downgrade(&state.forwarded);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(aqueduct_sql::forward::FORWARDED_BLOCK_IDLE / 4);
            loop {
                tick.tick().await;
                let Some(blocks) = blocks.upgrade() else {
                    return;
                };
                let _ = tokio::task::spawn_blocking(move || blocks.expire()).await;
            }
        });
    }
    let router = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_page))
        .route("/v1/sql", post(sql))
        .route("/v1/graph", get(graph))
        .route("/v1/changes", get(changes::changes))
        .route("/v1/changes/ack", post(changes::ack))
        .route("/v1/snapshot", get(changes::snapshot))
        .route("/v1/log", get(log_records::records))
        .route("/v1/log/committed", get(log_records::committed))
        .route("/v1/replication", get(log_records::replication))
        .route(
            "/v1/raft/{call}",
            post(cluster::raft_message).layer(axum::extract::DefaultBodyLimit::max(
                aqueduct_replicate::group::MAX_MESSAGE_BYTES,
            )),
        )
        .route(
            "/v1/cluster/forward",
            post(cluster::forward).layer(axum::extract::DefaultBodyLimit::max(
                aqueduct_sql::forward::MAX_FORWARD_BYTES,
            )),
        )
        .route("/v1/cluster", get(cluster::status))
        .route("/v1/cluster/members", post(cluster::add))
        .route(
            "/v1/cluster/members/{id}",
            axum::routing::delete(cluster::remove),
        )
        .route("/v1/cluster/elect", post(cluster::elect))
        .route("/v1/cluster/transfer", post(cluster::transfer))
        .route(
            "/v1/publications/{publication}/stream",
            get(publications::stream),
        )
        .route(
            "/v1/publications/{publication}/bootstrap",
            post(publications::bootstrap),
        )
        .route(
            "/v1/publications/{publication}/bootstrap/{id}",
            delete(publications::release_bootstrap),
        )
        .route(
            "/v1/publications/{publication}/bootstrap/{id}/chunks/{chunk}",
            get(publications::bootstrap_chunk),
        )
        .route(
            "/v1/publications/{publication}/ack",
            post(publications::ack),
        )
        .route("/v1/lsn", get(publications::lsn_at))
        .route("/v1/releases/current", get(releases::current))
        .route("/v1/releases/{id}", get(releases::one))
        .route("/v1/releases/{id}/changes", get(releases::changes))
        .route("/v1/timemaps/{name}", get(releases::time_map))
        .route("/v1/views/{view}", get(releases::view))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state.clone());
    (router, state)
}

/// Serves until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: HttpConfig,
    extra: ExtraMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (app, state) = router_and_state(engine, &config, extra);
    // Bootstraps of followers that went away lose their hold on the log.
    tokio::spawn(async move {
        let mut every = tokio::time::interval(log_records::BOOTSTRAP_IDLE / 6);
        loop {
            every.tick().await;
            let state = state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                log_records::sweep_bootstraps(
                    &state.follower_bootstraps,
                    state.engine.database().log(),
                )
            })
            .await;
        }
    });
    match config.tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(tls) => {
            let listener = TlsListener::new(
                listener,
                tokio_rustls::TlsAcceptor::from(tls),
                TLS_HANDSHAKE_TIMEOUT,
            )?;
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// Time a client of the HTTPS port has to complete the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// TLS handshakes under way at once; beyond this, new connections wait in
/// the kernel's backlog until one finishes or times out.
pub const MAX_PENDING_HANDSHAKES: usize = 256;
/// Pause after a failed `accept` (out of file descriptors, say).
const ACCEPT_ERROR_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

type TlsConn = (
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    std::net::SocketAddr,
);

/// A listener that hands axum connections whose TLS handshake is done.
/// Each handshake runs in its own task, bounded by
/// [`TLS_HANDSHAKE_TIMEOUT`], so a client that connects and says nothing
/// delays no one else; failed handshakes are logged and dropped.
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<TlsConn>,
    local: std::net::SocketAddr,
}

impl TlsListener {
    fn new(
        inner: TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
        timeout: std::time::Duration,
    ) -> std::io::Result<TlsListener> {
        let local = inner.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(MAX_PENDING_HANDSHAKES);
        tokio::spawn(accept_tls(inner, acceptor, tx, timeout));
        Ok(TlsListener { ready, local })
    }
}

/// Accepts TCP connections and starts their handshakes until the listener
/// is dropped (its receiver closes).
async fn accept_tls(
    inner: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    tx: tokio::sync::mpsc::Sender<TlsConn>,
    timeout: std::time::Duration,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        let permit = tokio::select! {
            _ = tx.closed() => return,
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let (stream, addr) = tokio::select! {
            _ = tx.closed() => return,
            accepted = inner.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("HTTP accept failed: {e}");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = tx.send((tls, addr)).await;
                }
                Ok(Err(e)) => tracing::debug!(%addr, "TLS handshake failed: {e}"),
                Err(_) => {
                    tracing::debug!(%addr, "TLS handshake not finished in {timeout:?}: closing")
                }
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task is gone (it only ends with this listener):
            // nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

async fn health(State(s): State<AppState>) -> impl IntoResponse {
    let log = s.engine.database().log();
    let lsn = log.committed_lsn();
    Json(serde_json::json!({ "status": "ok", "lsn": lsn, "server_id": log.server_id() }))
}

async fn metrics_page(State(s): State<AppState>) -> impl IntoResponse {
    let mut out = render_metrics(&s.engine);
    metrics::publication_metrics(&mut out, &s.engine, &s.publications);
    (s.extra)(&mut out);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
}

#[derive(Deserialize)]
struct GraphQuery {
    format: Option<String>,
}

/// The whole dataflow graph: Graphviz DOT by default, SVG with
/// `?format=svg` (rendered by the `dot` tool when it is installed).
async fn graph(
    State(s): State<AppState>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<GraphQuery>,
) -> Response {
    if let Err(r) = s.auth.principal(&s.engine, &headers) {
        return *r;
    }
    let dot = s.engine.views.dot();
    match q.format.as_deref().unwrap_or("dot") {
        "dot" => (
            [(header::CONTENT_TYPE, "text/vnd.graphviz; charset=utf-8")],
            dot,
        )
            .into_response(),
        "svg" => match tokio::task::spawn_blocking(move || render_svg(&dot)).await {
            Ok(Ok(svg)) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
            Ok(Err(why)) => error_response(
                StatusCode::NOT_IMPLEMENTED,
                &SqlError::new("0A000", format!("cannot render SVG: {why}"))
                    .with_hint("install Graphviz (the `dot` tool), or ask for ?format=dot"),
            ),
            Err(e) => error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &SqlError::new("XX000", e.to_string()),
            ),
        },
        other => error_response(
            StatusCode::BAD_REQUEST,
            &SqlError::new("22023", format!("unknown format '{other}': use dot or svg")),
        ),
    }
}

fn render_svg(dot: &str) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let mut child = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run dot: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(dot.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(out.stdout)
}

#[derive(Deserialize)]
struct SqlQuery {
    consistency: Option<String>,
}

#[derive(Deserialize)]
struct SqlRequest {
    sql: String,
    #[serde(default)]
    params: Vec<serde_json::Value>,
}

fn error_response(status: StatusCode, e: &SqlError) -> Response {
    let body = serde_json::json!({
        "error": {
            "code": e.code,
            "message": e.message,
            "detail": e.detail,
            "hint": e.hint,
        }
    });
    (status, Json(body)).into_response()
}

/// The HTTP status for a statement's error.
fn status_of(e: &SqlError) -> StatusCode {
    match e.code {
        "40001" => StatusCode::CONFLICT,
        "42501" => StatusCode::FORBIDDEN,
        "28000" | "28P01" => StatusCode::UNAUTHORIZED,
        "55000" => StatusCode::SERVICE_UNAVAILABLE,
        "57014" => StatusCode::GATEWAY_TIMEOUT,
        c if c.starts_with("58") || c.starts_with("XX") || c.starts_with("53") => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::BAD_REQUEST,
    }
}

/// Stops a statement when dropped armed: the request's future was dropped
/// because its client went away.
struct StopOnDrop(Option<aqueduct_expr::interrupt::Interrupt>);

impl StopOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(i) = self.0.take() {
            i.close();
        }
    }
}

async fn sql(
    State(s): State<AppState>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<SqlQuery>,
    body: Result<Json<SqlRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let principal = match s.auth.principal(&s.engine, &headers) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            let err = SqlError::new(
                "08P01",
                format!("the request body is not valid JSON of the form {{\"sql\": ..., \"params\": [...]}}: {e}"),
            );
            return error_response(StatusCode::BAD_REQUEST, &err);
        }
    };
    let request = headers.clone();
    let mut session = s.engine.session_as(principal);
    // A client that goes away drops this future (the connection closes
    // under it): the guard then stops the statement it started.
    let client_gone = StopOnDrop(Some(session.interrupt_handle()));
    let result = tokio::task::spawn_blocking(move || {
        if let Err(e) = releases::configure(&mut session, q.consistency.as_deref(), &request) {
            return (Err(e), 0, None);
        }
        let outcome = if req.params.is_empty() {
            session
                .execute(&req.sql)
                .into_iter()
                .last()
                .unwrap_or(Ok(Outcome::Empty))
        } else {
            let params = req.params.iter().map(json::param).collect::<Vec<_>>();
            session.execute_with_params(&req.sql, &params)
        };
        // COPY's data travels in the PostgreSQL protocol's own messages.
        let outcome = match outcome {
            Ok(Outcome::CopyIn { .. }) | Ok(Outcome::CopyOut { .. }) => {
                if session.copy_in_active() {
                    session.copy_in_fail("COPY over HTTP");
                }
                Err(SqlError::new(
                    "0A000",
                    "COPY FROM STDIN and COPY TO STDOUT need the PostgreSQL protocol",
                )
                .with_hint("use psql's \\copy, or a driver's COPY support"))
            }
            other => other,
        };
        (outcome, session.last_lsn(), session.release_read_id())
    })
    .await;
    client_gone.disarm();
    match result {
        Ok((Ok(outcome), lsn, release)) => {
            let mut body = json::outcome(&outcome, lsn);
            if let Some(id) = release {
                body["release"] = serde_json::json!(id);
            }
            let mut r = Json(body).into_response();
            if lsn > 0 {
                r.headers_mut().insert(
                    LAST_LSN_HEADER,
                    header::HeaderValue::from_str(&lsn.to_string()).expect("digits"),
                );
            }
            r
        }
        Ok((Err(e), _, _)) => error_response(status_of(&e), &e),
        Err(join) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &SqlError::new("XX000", format!("the statement failed: {join}")),
        ),
    }
}
