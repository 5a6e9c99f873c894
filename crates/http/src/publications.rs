//! Publications over HTTP (`docs/publications.md`, section 4): what a
//! subscriber agent (`aqueduct subscribe`) talks to.
//!
//! - `POST /v1/publications/{pub}/bootstrap?subscriber=NAME&mode=M`: takes
//!   a snapshot of the publication's tables at one LSN `S` (with
//!   `&objects=A,B` of those objects only, a partial bootstrap) and
//!   answers JSON: `S`, the snapshot's id, the objects' shapes and its
//!   chunks (key ranges of about `chunk_rows` rows). For a whole
//!   bootstrap the subscriber's durable consumer holds the log from
//!   `S + 1` before the answer is sent.
//! - `GET /v1/publications/{pub}/bootstrap/{id}/chunks/{n}`: one chunk,
//!   NDJSON: `row` lines, then `chunk_end`. Chunks may be fetched in any
//!   order and in parallel while the snapshot is held.
//! - `DELETE /v1/publications/{pub}/bootstrap/{id}`: releases the snapshot.
//! - `GET /v1/publications/{pub}/stream?subscriber=NAME&from_lsn=L&mode=M&epoch=E`:
//!   the stream from the subscriber's watermark `L`: an `epoch` line, then
//!   `txn`, `schema` and `progress` lines; empty lines are keep-alives; an
//!   `error` line ends a stream the server stopped. The consumer is
//!   registered on first use and `from_lsn` acknowledges what is before it.
//!   `&bootstrapped_at=S` (the first stream after a bootstrap at `S`) or
//!   `&bootstrap_until=H` (a later one, not yet in sync): transactions up
//!   to the head at open, or up to `H`, carry `bootstrap: true`, and the
//!   `epoch` line says up to where.
//! - `POST /v1/publications/{pub}/ack?subscriber=NAME&lsn=L`: everything
//!   up to `L` is durably applied; the log may drop it.
//!
//! - `GET /v1/lsn?time=T`: the first LSN committed at or after time `T`,
//!   where a replay from that time starts.
//!
//! Each stream runs on a thread of its own through a bounded channel,
//! counted with the change feed's streams.

use std::sync::Arc;

use aqueduct_feed::FeedError;
use aqueduct_publish::{ErrorMessage, Mode, WireMessage};
use aqueduct_publisher::{
    consumer_name, Bootstrap, BootstrapRequest, Counters, PublicationStream, StreamGauge,
    StreamRequest,
};
use aqueduct_sql::{Engine, SqlError};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::changes::{busy, streaming, StreamSlot, KEEPALIVE, STREAM_BUFFER_MESSAGES};
use crate::{error_response, status_of, AppState};

#[derive(Deserialize)]
pub(crate) struct StreamQuery {
    subscriber: String,
    from_lsn: Option<u64>,
    mode: Option<String>,
    epoch: Option<u64>,
    /// The subscriber was bootstrapped at this LSN and opens its first
    /// stream since: transactions up to the server's head now carry
    /// `bootstrap: true`.
    bootstrapped_at: Option<u64>,
    /// A later stream of a subscriber not yet in sync: transactions up to
    /// this LSN (the `bootstrap_until` its first stream was given) carry
    /// `bootstrap: true`.
    bootstrap_until: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct SubscriberQuery {
    subscriber: String,
    mode: Option<String>,
    /// A partial bootstrap: these objects only (published names, comma
    /// separated).
    objects: Option<String>,
    /// Rows per chunk, within the server's limits.
    chunk_rows: Option<u64>,
}

fn mode_of(mode: Option<&str>) -> Result<Mode, Box<Response>> {
    mode.unwrap_or("causal")
        .parse::<Mode>()
        .map_err(|e| Box::new(bad_request(SqlError::new("22023", e.to_string()))))
}

#[derive(Deserialize)]
pub(crate) struct TimeQuery {
    time: String,
}

/// `GET /v1/lsn?time=T`: the first LSN committed at or after `T` (a
/// timestamp with time zone, or microseconds since the Unix epoch), for
/// replaying a publication from a point in time; the next LSN to commit
/// when nothing was committed since.
pub(crate) async fn lsn_at(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<TimeQuery>,
) -> Response {
    if let Err(r) = authorize(&s, &headers) {
        return *r;
    }
    let micros = match q.time.trim().parse::<i64>() {
        Ok(m) => m,
        Err(_) => match aqueduct_values::Value::Text(q.time.clone())
            .coerce(&aqueduct_values::DataType::TimestampTz)
        {
            Ok(aqueduct_values::Value::TimestampTz(m)) => m,
            _ => {
                return bad_request(SqlError::new(
                    "22007",
                    format!("invalid time \"{}\": give a timestamp with time zone or microseconds since the epoch", q.time),
                ))
            }
        },
    };
    let feed = s.engine.feed().clone();
    let found = blocking(move || {
        let head = feed.head();
        feed.first_lsn_at(micros)
            .map(|l| l.unwrap_or(head + 1))
            .map_err(feed_error)
    })
    .await;
    match found {
        Ok(lsn) => axum::Json(json!({ "lsn": lsn })).into_response(),
        Err(r) => *r,
    }
}

#[derive(Deserialize)]
pub(crate) struct AckQuery {
    subscriber: String,
    lsn: u64,
}

/// The server's id as subscribers record it: the log's random id, drawn
/// when its data directory was created (`docs/log-format.md`). A
/// subscriber that finds another id behind the same address is following
/// another log (a wiped or different server).
pub fn server_id(engine: &Engine) -> String {
    engine.database().log().server_id()
}

fn bad_request(e: SqlError) -> Response {
    error_response(status_of(&e), &e)
}

fn feed_error(e: FeedError) -> SqlError {
    let err = SqlError::new(e.sqlstate(), e.to_string());
    if e.sqlstate() == "55000" {
        return err
            .with_hint("bootstrap the subscriber again (aqueduct subscribe does so by itself)");
    }
    err
}

/// Who may follow publications: those who may follow every table.
fn authorize(s: &AppState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let principal = s.auth.principal(&s.engine, headers)?;
    s.engine
        .feed_tables(&principal, None)
        .map(|_| ())
        .map_err(|e| Box::new(error_response(status_of(&e), &e)))
}

fn line(m: &WireMessage) -> Bytes {
    let mut s = m.to_line();
    s.push('\n');
    Bytes::from(s)
}

/// Sends `m` and counts it; `false` once the client has gone.
fn send(tx: &mpsc::Sender<Bytes>, counters: &Counters, m: &WireMessage) -> bool {
    let bytes = line(m);
    counters.sent(m, bytes.len());
    tx.blocking_send(bytes).is_ok()
}

fn error_line(e: &SqlError) -> Bytes {
    line(&WireMessage::Error(ErrorMessage {
        code: e.code.to_string(),
        message: e.message.clone(),
    }))
}

/// Who may follow, and in which mode: the preamble of every stream.
fn admit(s: &AppState, headers: &HeaderMap, mode: Option<&str>) -> Result<Mode, Box<Response>> {
    authorize(s, headers)?;
    mode_of(mode)
}

/// Runs `f` on a blocking thread; its error as the response.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SqlError> + Send + 'static,
) -> Result<T, Box<Response>> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(x)) => Ok(x),
        Ok(Err(e)) => Err(Box::new(bad_request(e))),
        Err(e) => Err(Box::new(bad_request(SqlError::new("XX000", e.to_string())))),
    }
}

/// Runs `work` on a thread of its own, its lines sent through a bounded
/// channel as the response body.
fn spawn_stream(
    s: &AppState,
    name: &str,
    work: impl FnOnce(&mpsc::Sender<Bytes>) + Send + 'static,
) -> Response {
    let Some(slot) = StreamSlot::take(&s.streams) else {
        return busy();
    };
    let (tx, rx) = mpsc::channel(STREAM_BUFFER_MESSAGES);
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _slot = slot;
            work(&tx);
        });
    if spawned.is_err() {
        return busy();
    }
    streaming("application/x-ndjson", rx)
}

pub(crate) async fn stream(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(publication): Path<String>,
    Query(q): Query<StreamQuery>,
) -> Response {
    let mode = match admit(&s, &headers, q.mode.as_deref()) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let engine = s.engine.clone();
    let counters = s.publications.of(&publication);
    let consumer = consumer_name(&publication, &q.subscriber);
    let request = StreamRequest {
        publication,
        mode,
        epoch: q.epoch.unwrap_or(0),
        from_lsn: q.from_lsn.unwrap_or(0).max(1),
        server_id: server_id(&engine),
        bootstrap_until: q.bootstrap_until,
    };
    let bootstrapped_at = q.bootstrapped_at;
    let opened = blocking(move || {
        let feed = engine.feed().clone();
        let mut request = request;
        if let Some(s) = bootstrapped_at {
            request.bootstrap_until = Some(feed.head().max(s));
        }
        // The consumer's hold follows the subscriber's watermark.
        feed.register(&consumer, Some(request.from_lsn))
            .and_then(|_| feed.ack(&consumer, request.from_lsn - 1))
            .map_err(feed_error)?;
        let (stream, first) = PublicationStream::open(
            engine.shared_database(),
            engine.views.clone(),
            &feed,
            request,
        )?;
        Ok::<_, SqlError>((engine, stream, first))
    })
    .await;
    let (engine, mut stream, first) = match opened {
        Ok(x) => x,
        Err(r) => return *r,
    };
    spawn_stream(&s, "publication-stream", move |tx| {
        let _open = StreamGauge::new(counters.clone());
        if !send(tx, &counters, &first) {
            return;
        }
        pump(&engine, &mut stream, &counters, tx);
    })
}

/// Moves the stream's lines to the connection until the client goes, the
/// server stops, or the stream ends (its error is the last line).
fn pump(
    engine: &Arc<Engine>,
    stream: &mut PublicationStream,
    counters: &Counters,
    tx: &mpsc::Sender<Bytes>,
) {
    loop {
        if engine.is_shutting_down() {
            return;
        }
        match stream.next(KEEPALIVE) {
            Ok(lines) if lines.is_empty() => {
                if tx.blocking_send(Bytes::from_static(b"\n")).is_err() {
                    return;
                }
            }
            Ok(lines) => {
                for l in &lines {
                    if !send(tx, counters, l) {
                        return;
                    }
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(error_line(&e));
                return;
            }
        }
    }
}

/// `POST /v1/publications/{pub}/bootstrap?subscriber=NAME&mode=M[&objects=A,B][&chunk_rows=N]`:
/// takes the snapshot and answers its LSN, id, the objects' shapes and
/// its chunks (JSON, `BootstrapAnswer`).
pub(crate) async fn bootstrap(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(publication): Path<String>,
    Query(q): Query<SubscriberQuery>,
) -> Response {
    let mode = match admit(&s, &headers, q.mode.as_deref()) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let engine = s.engine.clone();
    let counters = s.publications.of(&publication);
    let held = s.bootstraps.clone();
    let started = blocking(move || {
        let db = engine.shared_database();
        let id = server_id(&engine);
        let consumer = consumer_name(&publication, &q.subscriber);
        let objects = q.objects.as_deref().map(|o| {
            o.split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
        let b = Bootstrap::start(
            &db,
            &engine.views,
            engine.feed(),
            &BootstrapRequest {
                publication: &publication,
                mode,
                consumer: &consumer,
                server_id: &id,
                objects,
                chunk_rows: q.chunk_rows,
            },
        )?;
        held.insert(b)
    })
    .await;
    match started {
        Ok(b) => {
            counters
                .bootstraps
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            axum::Json(b.answer().clone()).into_response()
        }
        Err(r) => *r,
    }
}

/// `GET /v1/publications/{pub}/bootstrap/{id}/chunks/{n}`: one chunk's
/// `row` lines and its `chunk_end`, NDJSON.
pub(crate) async fn bootstrap_chunk(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((publication, id, chunk)): Path<(String, String, u32)>,
) -> Response {
    if let Err(r) = authorize(&s, &headers) {
        return *r;
    }
    let boot = match s.bootstraps.get(&id) {
        Ok(b) => b,
        Err(e) => return bad_request(e),
    };
    let counters = s.publications.of(&publication);
    spawn_stream(&s, "publication-bootstrap", move |tx| {
        let _open = StreamGauge::new(counters.clone());
        if let Err(e) = boot.send_chunk(chunk, |l| send(tx, &counters, l)) {
            let _ = tx.blocking_send(error_line(&e));
        }
    })
}

/// `DELETE /v1/publications/{pub}/bootstrap/{id}`: releases the snapshot.
pub(crate) async fn release_bootstrap(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((_publication, id)): Path<(String, String)>,
) -> Response {
    if let Err(r) = authorize(&s, &headers) {
        return *r;
    }
    axum::Json(json!({ "released": s.bootstraps.release(&id) })).into_response()
}

pub(crate) async fn ack(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(publication): Path<String>,
    Query(q): Query<AckQuery>,
) -> Response {
    if let Err(r) = authorize(&s, &headers) {
        return *r;
    }
    let feed = s.engine.feed().clone();
    let consumer = consumer_name(&publication, &q.subscriber);
    match blocking(move || feed.ack(&consumer, q.lsn).map_err(feed_error)).await {
        Ok(()) => axum::Json(json!({ "lsn": q.lsn })).into_response(),
        Err(r) => *r,
    }
}
