//! The change feed over HTTP (`docs/change-feed.md`):
//!
//! - `GET /v1/changes?from_lsn=N[&table=a,b][&consumer=NAME][&format=ndjson|sse]`
//!   streams every committed transaction from the first one that begins at
//!   or after LSN `N`, one JSON message per line (NDJSON, the default;
//!   empty lines are keep-alives) or as Server-Sent Events (`id:` the
//!   message's LSN, so `Last-Event-ID` resumes). Without `from_lsn`, from
//!   the next commit. With `consumer`, as that durable consumer: registered
//!   on first use, and `from_lsn` acknowledges everything before it.
//! - `POST /v1/changes/ack?consumer=NAME&lsn=L`: durable consumer NAME
//!   is done with everything up to LSN L (a long-lived stream acknowledges
//!   this way without reconnecting), so the log may drop it.
//! - `GET /v1/snapshot[?table=a,b]`: the tables at one LSN, NDJSON: a
//!   header line `{"lsn", "tables"}` and a line per row; follow the feed
//!   from `lsn + 1` to miss nothing and see nothing twice.
//!
//! Each stream is served by a thread of its own through a bounded channel,
//! and at most [`MAX_CHANGE_STREAMS`] run at once.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use aqueduct_feed::{value_json, ChangeMessage, Feed, FeedError, Subscription};
use aqueduct_sql::{Engine, SqlError};
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::{error_response, status_of, AppState};

/// Change streams and snapshots served at once; more are refused (503).
pub const MAX_CHANGE_STREAMS: usize = 256;
/// Messages queued between a stream's thread and its connection.
pub(crate) const STREAM_BUFFER_MESSAGES: usize = 64;
/// A keep-alive is sent after this long without a message (which is also
/// how a stream notices its client has gone).
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(10);

#[derive(Deserialize)]
pub(crate) struct ChangesQuery {
    from_lsn: Option<u64>,
    table: Option<String>,
    consumer: Option<String>,
    format: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct AckQuery {
    consumer: String,
    lsn: u64,
}

#[derive(Deserialize)]
pub(crate) struct SnapshotQuery {
    table: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    NdJson,
    Sse,
}

/// Counts a running stream; dropped when its thread ends.
pub(crate) struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    pub(crate) fn take(count: &Arc<AtomicUsize>) -> Option<StreamSlot> {
        let n = count.fetch_add(1, Ordering::SeqCst);
        if n >= MAX_CHANGE_STREAMS {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(StreamSlot(count.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The receiving end of a stream's channel as a body.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl futures_core::Stream for ChannelBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|m| m.map(Ok))
    }
}

fn feed_error(e: FeedError) -> SqlError {
    let hint = match &e {
        FeedError::NoSuchConsumer(_) => None,
        _ => Some("GET /v1/snapshot gives the tables at one LSN; follow from the LSN after it"),
    };
    let err = SqlError::new(e.sqlstate(), e.to_string());
    match hint {
        Some(h) if e.sqlstate() == "55000" => err.with_hint(h),
        _ => err,
    }
}

fn table_list(table: &Option<String>) -> Option<Vec<String>> {
    table.as_ref().map(|t| {
        t.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

pub(crate) fn busy() -> Response {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &SqlError::new(
            "53300",
            format!("too many change streams (at most {MAX_CHANGE_STREAMS} at once)"),
        )
        .with_hint("close a stream, or retry later"),
    )
}

pub(crate) fn streaming(content_type: &'static str, rx: mpsc::Receiver<Bytes>) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(ChannelBody(rx)),
    )
        .into_response()
}

pub(crate) async fn changes(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<ChangesQuery>,
) -> Response {
    let principal = match s.auth.principal(&s.engine, &headers) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let format = match q.format.as_deref().unwrap_or("ndjson") {
        "ndjson" => Format::NdJson,
        "sse" => Format::Sse,
        other => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &SqlError::new(
                    "22023",
                    format!("unknown format '{other}': use ndjson or sse"),
                ),
            )
        }
    };
    // Server-Sent Events resume from the last event's id.
    let last_event = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let from = q.from_lsn.or(last_event.map(|l| l + 1));
    let names = table_list(&q.table);
    let tables = match s.engine.feed_tables(&principal, names.as_deref()) {
        Ok(t) => t,
        Err(e) => return error_response(status_of(&e), &e),
    };
    let Some(slot) = StreamSlot::take(&s.streams) else {
        return busy();
    };
    let feed = s.engine.feed().clone();
    let sub = match subscribe(&feed, q.consumer.as_deref(), from, tables) {
        Ok(sub) => sub,
        Err(e) => {
            let e = feed_error(e);
            return error_response(status_of(&e), &e);
        }
    };
    let (tx, rx) = mpsc::channel(STREAM_BUFFER_MESSAGES);
    let engine = s.engine.clone();
    let spawned = std::thread::Builder::new()
        .name("change-stream".into())
        .spawn(move || {
            let _slot = slot;
            pump(&engine, sub, format, &tx);
        });
    if spawned.is_err() {
        return busy();
    }
    let ct = match format {
        Format::NdJson => "application/x-ndjson",
        Format::Sse => "text/event-stream",
    };
    streaming(ct, rx)
}

/// `POST /v1/changes/ack`: moves a durable consumer's position. Needs the
/// same rights as following every table the server has.
pub(crate) async fn ack(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<AckQuery>,
) -> Response {
    let principal = match s.auth.principal(&s.engine, &headers) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    if let Err(e) = s.engine.feed_tables(&principal, None) {
        return error_response(status_of(&e), &e);
    }
    let feed = s.engine.feed().clone();
    let done = tokio::task::spawn_blocking(move || {
        feed.ack(&q.consumer, q.lsn)?;
        Ok::<_, FeedError>(feed.consumers().into_iter().find(|c| c.name == q.consumer))
    })
    .await;
    match done {
        Ok(Ok(info)) => axum::Json(json!({
            "consumer": info.as_ref().map(|c| c.name.clone()),
            "next_lsn": info.as_ref().map(|c| c.next_lsn),
            "lag": info.as_ref().map(|c| c.lag),
        }))
        .into_response(),
        Ok(Err(e)) => {
            let e = feed_error(e);
            error_response(status_of(&e), &e)
        }
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &SqlError::new("XX000", e.to_string()),
        ),
    }
}

fn subscribe(
    feed: &Arc<Feed>,
    consumer: Option<&str>,
    from: Option<u64>,
    tables: Option<Vec<aqueduct_tables::TableId>>,
) -> Result<Subscription, FeedError> {
    match consumer {
        Some(name) => {
            feed.register(name, from)?;
            if let Some(from) = from {
                // The client has everything before `from`.
                feed.ack(name, from.saturating_sub(1))?;
            }
            feed.subscribe_as(name, tables)
        }
        None => feed.subscribe(from.unwrap_or_else(|| feed.head() + 1), tables),
    }
}

fn encode(format: Format, msg: &ChangeMessage) -> Bytes {
    let body = msg.to_json().to_string();
    Bytes::from(match format {
        Format::NdJson => format!("{body}\n"),
        Format::Sse => format!("id: {}\nevent: change\ndata: {body}\n\n", msg.lsn),
    })
}

fn keepalive(format: Format) -> Bytes {
    Bytes::from_static(match format {
        Format::NdJson => b"\n",
        Format::Sse => b": keep-alive\n\n",
    })
}

/// Moves messages from the subscription to the connection until the
/// client goes, the server stops, or the feed ends the subscription (its
/// error is the stream's last line).
fn pump(engine: &Engine, mut sub: Subscription, format: Format, tx: &mpsc::Sender<Bytes>) {
    loop {
        if engine.is_shutting_down() {
            return;
        }
        let out = match sub.recv(KEEPALIVE) {
            Ok(Some(msg)) => encode(format, &msg),
            Ok(None) => keepalive(format),
            Err(e) => {
                let e = feed_error(e);
                let body = json!({
                    "error": { "code": e.code, "message": e.message, "hint": e.hint }
                })
                .to_string();
                let line = match format {
                    Format::NdJson => format!("{body}\n"),
                    Format::Sse => format!("event: error\ndata: {body}\n\n"),
                };
                let _ = tx.blocking_send(Bytes::from(line));
                return;
            }
        };
        if tx.blocking_send(out).is_err() {
            return;
        }
    }
}

pub(crate) async fn snapshot(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SnapshotQuery>,
) -> Response {
    let principal = match s.auth.principal(&s.engine, &headers) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let names = table_list(&q.table);
    let allowed = match s.engine.feed_tables(&principal, names.as_deref()) {
        Ok(t) => t,
        Err(e) => return error_response(status_of(&e), &e),
    };
    let Some(slot) = StreamSlot::take(&s.streams) else {
        return busy();
    };
    let snap = match Feed::snapshot(s.engine.database(), names.as_deref()) {
        Ok(snap) => snap,
        Err(e) => {
            let e = feed_error(e);
            return error_response(status_of(&e), &e);
        }
    };
    let (tx, rx) = mpsc::channel(STREAM_BUFFER_MESSAGES);
    let spawned = std::thread::Builder::new()
        .name("snapshot-stream".into())
        .spawn(move || {
            let _slot = slot;
            let tables: Vec<_> = snap
                .tables
                .iter()
                .filter(|t| allowed.as_ref().is_none_or(|a| a.contains(&t.info.id)))
                .collect();
            let header = json!({
                "lsn": snap.lsn,
                "tables": tables.iter().map(|t| json!({
                    "id": t.info.id,
                    "name": t.info.name,
                    "columns": t.table.schema.columns.iter().map(|c| json!({
                        "name": c.name,
                        "type": c.ty.portable().to_string(),
                    })).collect::<Vec<_>>(),
                    "primary_key": t.table.schema.primary_key,
                })).collect::<Vec<_>>(),
            });
            if tx
                .blocking_send(Bytes::from(format!("{header}\n")))
                .is_err()
            {
                return;
            }
            let mut buf = String::new();
            for t in tables {
                for (key, v) in t.table.scan() {
                    let row: serde_json::Map<String, serde_json::Value> = t
                        .info
                        .columns
                        .iter()
                        .zip(v.row.iter())
                        .map(|(c, v)| (c.clone(), value_json(v)))
                        .collect();
                    let line = json!({
                        "table": t.info.name,
                        "key": key.iter().map(value_json).collect::<Vec<_>>(),
                        "row": row,
                    });
                    buf.push_str(&line.to_string());
                    buf.push('\n');
                    if buf.len() >= 64 << 10
                        && tx
                            .blocking_send(Bytes::from(std::mem::take(&mut buf)))
                            .is_err()
                    {
                        return;
                    }
                }
            }
            if !buf.is_empty() {
                let _ = tx.blocking_send(Bytes::from(buf));
            }
        });
    if spawned.is_err() {
        return busy();
    }
    streaming("application/x-ndjson", rx)
}
