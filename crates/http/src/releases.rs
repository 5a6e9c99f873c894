//! Reads that HTTP caches can keep: releases, their change sets, time maps,
//! and keyed view reads at any consistency level (`docs/consistency.md`).
//!
//! - `GET /v1/releases/current`, `GET /v1/releases/{id}`: a release's id,
//!   time and LSN.
//! - `GET /v1/releases/{id}/changes?table=T[&column=C&value=V]`: the rows
//!   written in that release's interval; immutable.
//! - `GET /v1/timemaps/{name}?period=5s&start_ms=S`: the values written in
//!   one bucket; immutable once complete.
//! - `GET /v1/views/{view}?col=value&...[&consistency=...]`: rows of a
//!   view; in `release` mode with `ETag`, `Last-Modified`, `Expires` and a
//!   `max-age` that ends at the next release, answering `If-None-Match`
//!   with 304.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use aqueduct_sql::releases::{BucketError, Missing, Release, Schedule};
use aqueduct_sql::{Consistency, Outcome, SqlError};
use aqueduct_values::Value;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value as Json};

use crate::{error_response, json, status_of, AppState, AFTER_LSN_HEADER};

/// `max-age` of what never changes: a year, as is customary.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// An HTTP date (RFC 9110 IMF-fixdate) for `ms` since the epoch.
pub fn http_date(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil(secs / 86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(secs / 86_400 % 7) as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][m as usize - 1];
    let t = secs % 86_400;
    format!(
        "{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} GMT",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// RFC 3339 UTC with milliseconds.
fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil(secs / 86_400);
    let t = secs % 86_400;
    format!(
        "{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60,
        ms % 1000
    )
}

/// Year, month, day of a day count since 1970-01-01 (the proleptic
/// Gregorian calendar, by eras of 400 years).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// `Cache-Control` for something valid until release `id + 1`: fresh until
/// then (rounded up to whole seconds, the unit HTTP knows), or to be
/// revalidated when that time has passed already (the next release is
/// being published).
fn until_next(schedule: &Schedule, id: u64, now: u64) -> String {
    let next = schedule.time_of(id + 1);
    if now >= next {
        "public, no-cache".into()
    } else {
        format!("public, max-age={}", (next - now).div_ceil(1000))
    }
}

fn etag(prefix: &str, body: &[u8]) -> String {
    format!("\"{prefix}-{:08x}\"", crc32c::crc32c(body))
}

/// A JSON body with caching headers, or 304 when the client has it.
fn cached(
    request: &HeaderMap,
    body: Json,
    tag_prefix: &str,
    cache_control: &str,
    last_modified_ms: u64,
    expires_ms: Option<u64>,
) -> Response {
    let bytes = serde_json::to_vec(&body).expect("JSON");
    let tag = etag(tag_prefix, &bytes);
    let last_modified = http_date(last_modified_ms);
    let matches = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut headers = HeaderMap::new();
    let mut put = |name: header::HeaderName, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            headers.insert(name, v);
        }
    };
    put(header::ETAG, &tag);
    put(header::CACHE_CONTROL, cache_control);
    put(header::LAST_MODIFIED, &last_modified);
    if let Some(e) = expires_ms {
        put(header::EXPIRES, &http_date(e));
    }
    if matches {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    put(header::CONTENT_TYPE, "application/json");
    (StatusCode::OK, headers, bytes).into_response()
}

fn refuse(headers: &HeaderMap, s: &AppState) -> Option<Response> {
    s.auth.principal(&s.engine, headers).err().map(|r| *r)
}

/// Refuses rows of `relation` the request's role may not read.
fn refuse_read(headers: &HeaderMap, s: &AppState, relation: &str) -> Option<Response> {
    let principal = match s.auth.principal(&s.engine, headers) {
        Ok(p) => p,
        Err(r) => return Some(*r),
    };
    let mut session = s.engine.session_as(principal);
    session
        .authorize_select(relation)
        .err()
        .map(|e| error_response(StatusCode::FORBIDDEN, &e))
}

/// 400 for a request's parameters, saying how to ask.
fn bad_request(msg: String, how: &str) -> Response {
    error_response(
        StatusCode::BAD_REQUEST,
        &SqlError::new("22023", msg).with_hint(how),
    )
}

fn releases_off() -> Response {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &SqlError::new("55000", "releases are off")
            .with_hint("start the server with --release-interval (such as 5s)"),
    )
}

fn release_json(schedule: &Schedule, r: &Release) -> Json {
    json!({
        "id": r.id,
        "time_ms": r.time_ms,
        "time": rfc3339(r.time_ms),
        "cut_ms": r.cut_ms,
        "lsn": r.lsn,
        "from_lsn": r.from_lsn,
        "complete": r.complete,
        "interval_ms": schedule.interval_ms(),
        "next_time_ms": schedule.time_of(r.id + 1),
    })
}

/// `GET /v1/releases/current`.
pub(crate) async fn current(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(r) = refuse(&headers, &s) {
        return r;
    }
    let releases = &s.engine.releases;
    let Some(schedule) = releases.schedule() else {
        return releases_off();
    };
    let Some(snap) = releases.current() else {
        let mut r = error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &SqlError::new(
                "55000",
                format!(
                    "no release is out yet; the next is due at {}",
                    rfc3339(schedule.time_of(schedule.due_at(now_ms()) + 1))
                ),
            ),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let r = &snap.release;
    cached(
        &headers,
        release_json(&schedule, r),
        &format!("r{}", r.id),
        &until_next(&schedule, r.id, now_ms()),
        r.time_ms,
        Some(schedule.time_of(r.id + 1)),
    )
}

fn missing(m: Missing, id: u64) -> Response {
    match m {
        Missing::Off => releases_off(),
        Missing::NotYet { current } => error_response(
            StatusCode::NOT_FOUND,
            &SqlError::new(
                "55000",
                match current {
                    Some(c) => format!("release {id} is not out yet; the current release is {c}"),
                    None => format!("release {id} is not out yet; no release is out yet"),
                },
            ),
        ),
        Missing::Gone { oldest } => error_response(
            StatusCode::GONE,
            &SqlError::new(
                "55000",
                format!("release {id} is no longer kept; the oldest kept is {oldest}"),
            )
            .with_hint("releases are kept in memory, for a bounded number of intervals"),
        ),
    }
}

/// `GET /v1/releases/{id}`.
pub(crate) async fn one(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    if let Some(r) = refuse(&headers, &s) {
        return r;
    }
    let releases = &s.engine.releases;
    let Some(schedule) = releases.schedule() else {
        return releases_off();
    };
    match releases.release(id) {
        Ok(r) => cached(
            &headers,
            release_json(&schedule, &r),
            &format!("r{id}"),
            IMMUTABLE,
            r.time_ms,
            None,
        ),
        Err(m) => missing(m, id),
    }
}

/// `GET /v1/releases/{id}/changes?table=T[&column=C&value=V]`.
pub(crate) async fn changes(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Some(r) = refuse(&headers, &s) {
        return r;
    }
    let bad = |msg: String| {
        bad_request(
            msg,
            "ask for /v1/releases/{id}/changes?table=T, optionally with &column=C&value=V",
        )
    };
    let Some(table) = q.get("table") else {
        return bad("the table parameter is required".into());
    };
    if let Some(r) = refuse_read(&headers, &s, table) {
        return r;
    }
    let r = match s.engine.releases.release(id) {
        Ok(r) => r,
        Err(m) => return missing(m, id),
    };
    // The table's columns as of the release (none written: look them up
    // in the current catalog only to tell an unknown table apart).
    let (columns, changes) = match r.changes_of(table) {
        Some(t) => (t.columns.clone(), t.changes.as_slice()),
        None => match s.engine.database().read().table(table) {
            Some(t) => (
                t.schema.columns.iter().map(|c| c.name.clone()).collect(),
                &[][..],
            ),
            None => return bad(format!("relation \"{table}\" does not exist")),
        },
    };
    let filter = match (q.get("column"), q.get("value")) {
        (None, None) => None,
        (Some(c), Some(v)) => match columns.iter().position(|n| n == c) {
            Some(i) => Some((i, v.clone())),
            None => {
                return bad(format!(
                    "column \"{c}\" of relation \"{table}\" does not exist"
                ))
            }
        },
        _ => return bad("column and value go together".into()),
    };
    let rows: Vec<Json> = changes
        .iter()
        .filter(|c| match &filter {
            None => true,
            Some((i, v)) => c.row[*i].to_text().as_deref() == Some(v.as_str()),
        })
        .map(|c| {
            json!({
                "lsn": c.lsn,
                "op": c.op.as_str(),
                "row": row_object(&columns, &c.row),
            })
        })
        .collect();
    let body = json!({
        "release": r.id,
        "from_lsn": r.from_lsn,
        "to_lsn": r.lsn,
        "complete": r.complete,
        "table": table,
        "columns": columns,
        "changes": rows,
    });
    cached(
        &headers,
        body,
        &format!("c{id}"),
        IMMUTABLE,
        r.time_ms,
        None,
    )
}

fn row_object(columns: &[String], row: &[Value]) -> Json {
    let mut m = Map::new();
    for (c, v) in columns.iter().zip(row) {
        m.insert(c.clone(), json::value(v));
    }
    Json::Object(m)
}

/// `GET /v1/timemaps/{name}?period=5s&start_ms=S`.
pub(crate) async fn time_map(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Some(r) = refuse(&headers, &s) {
        return r;
    }
    // A time map shows values of its table's column: reading it needs
    // SELECT on that table.
    let table = {
        let catalog = s.engine.database().read();
        catalog
            .time_map(&name)
            .and_then(|d| catalog.table_by_id(d.table))
            .map(|t| t.schema.name.clone())
    };
    if let Some(table) = table {
        if let Some(r) = refuse_read(&headers, &s, &table) {
            return r;
        }
    }
    let releases = &s.engine.releases;
    let Some(schedule) = releases.schedule() else {
        return releases_off();
    };
    let bad = |msg: String| {
        bad_request(
            msg,
            "ask for /v1/timemaps/{name}?period=5s&start_ms=S, S a multiple of the period",
        )
    };
    let period = match q.get("period").map(|p| aqueduct_sql::parse_duration(p)) {
        Some(Some(d)) if !d.is_zero() => d.as_millis() as u64,
        _ => return bad("period must be a duration such as 5s or 3min".into()),
    };
    let Some(start) = q.get("start_ms").and_then(|v| v.parse::<u64>().ok()) else {
        return bad("start_ms must be milliseconds since the epoch".into());
    };
    match releases.time_map_bucket(&name, period, start) {
        Ok(b) => {
            let body = json!({
                "timemap": name,
                "period_ms": period,
                "start_ms": start,
                "end_ms": start + period,
                "complete": b.complete,
                "partial": b.partial,
                "first_release": b.first_release,
                "last_release": b.last_release,
                "values": b.values.iter().map(json::value).collect::<Vec<_>>(),
            });
            let current = releases.current().map_or(0, |c| c.release.id);
            let (control, expires) = if b.complete {
                (IMMUTABLE.to_string(), None)
            } else {
                (
                    until_next(&schedule, current, now_ms()),
                    Some(schedule.time_of(current + 1)),
                )
            };
            let last_modified = schedule.time_of(current.min(b.last_release));
            cached(
                &headers,
                body,
                &format!("t{start}-{current}"),
                &control,
                last_modified,
                expires,
            )
        }
        Err(e) => {
            let status = match e {
                BucketError::NoSuchMap(_) => StatusCode::NOT_FOUND,
                BucketError::NotYet { .. } => StatusCode::NOT_FOUND,
                BucketError::Gone { .. } => StatusCode::GONE,
                _ => StatusCode::BAD_REQUEST,
            };
            error_response(status, &SqlError::new("22023", e.to_string()))
        }
    }
}

/// Applies `?consistency=` and the after-LSN header to a session.
pub(crate) fn configure(
    session: &mut aqueduct_sql::Session,
    consistency: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), SqlError> {
    if let Some(c) = consistency {
        session.configure("aqueduct.consistency", c)?;
    }
    if let Some(v) = headers.get(AFTER_LSN_HEADER) {
        let v = v.to_str().map_err(|_| {
            SqlError::new(
                "22023",
                format!("the {AFTER_LSN_HEADER} header is not text"),
            )
        })?;
        session.configure("aqueduct.after_lsn", v)?;
    }
    // The application's user behind the request, for publications'
    // causal order (`docs/publications.md`, section 2).
    if let Some(v) = headers.get(ACTING_USER_HEADER) {
        let v = v.to_str().map_err(|_| {
            SqlError::new(
                "22023",
                format!("the {ACTING_USER_HEADER} header is not text"),
            )
        })?;
        session.configure("aqueduct.acting_user", v)?;
    }
    // The source transactions a decorator's writes derive from
    // (`docs/publications.md`, section 8).
    if let Some(v) = headers.get(ORIGIN_HEADER) {
        let v = v.to_str().map_err(|_| {
            SqlError::new("22023", format!("the {ORIGIN_HEADER} header is not text"))
        })?;
        session.configure("aqueduct.origin", v)?;
    }
    Ok(())
}

/// The request header listing the source transactions a request's writes
/// derive from, `"<server_id>:<lsn>, ..."` (the session setting
/// `aqueduct.origin`).
pub(crate) const ORIGIN_HEADER: &str = "aqueduct-origin";

/// The request header naming the application's user a statement acts for
/// (the session setting `aqueduct.acting_user`).
pub(crate) const ACTING_USER_HEADER: &str = "aqueduct-acting-user";

/// `GET /v1/views/{view}?col=value&...[&consistency=...]` (eventual by
/// default).
pub(crate) async fn view(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(view): Path<String>,
    Query(mut q): Query<BTreeMap<String, String>>,
) -> Response {
    let principal = match s.auth.principal(&s.engine, &headers) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let consistency = q
        .remove("consistency")
        .unwrap_or_else(|| Consistency::Eventual.as_str().to_string());
    let Some(entry) = s.engine.views.get(&view) else {
        return error_response(
            StatusCode::NOT_FOUND,
            &SqlError::new("42P01", format!("view \"{view}\" does not exist")),
        );
    };
    let mut conds = Vec::new();
    let mut params = Vec::new();
    for (col, v) in &q {
        if !entry.columns.iter().any(|c| &c.name == col) {
            return error_response(
                StatusCode::BAD_REQUEST,
                &SqlError::new(
                    "42703",
                    format!("column \"{col}\" of view \"{view}\" does not exist"),
                ),
            );
        }
        params.push(Value::Text(v.clone()));
        conds.push(format!(
            "\"{}\" = ${}",
            col.replace('"', "\"\""),
            params.len()
        ));
    }
    let mut sql = format!("SELECT * FROM \"{}\"", view.replace('"', "\"\""));
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    let engine = s.engine.clone();
    let request = headers.clone();
    let result = tokio::task::spawn_blocking(move || {
        let mut session = engine.session_as(principal);
        configure(&mut session, Some(&consistency), &request)?;
        let out = session.execute_with_params(&sql, &params)?;
        Ok::<_, SqlError>((out, session.consistency(), session.release_read_id()))
    })
    .await;
    let (out, level, release) = match result {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return error_response(status_of(&e), &e),
        Err(join) => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &SqlError::new("XX000", format!("the read failed: {join}")),
            )
        }
    };
    let Outcome::Rows { columns, rows, .. } = out else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &SqlError::new("XX000", "a view read returned no rows"),
        );
    };
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let mut body = json!({
        "view": view,
        "columns": names,
        "rows": rows.iter().map(|r| row_object(&names, r)).collect::<Vec<_>>(),
        "consistency": level.as_str(),
    });
    match (level, release, s.engine.releases.schedule()) {
        (Consistency::Release, Some(id), Some(schedule)) => {
            let time = schedule.time_of(id);
            body["release"] = json!(id);
            if let Ok(r) = s.engine.releases.release(id) {
                body["lsn"] = json!(r.lsn);
            }
            cached(
                &headers,
                body,
                &format!("v{id}"),
                &until_next(&schedule, id, now_ms()),
                time,
                Some(schedule.time_of(id + 1)),
            )
        }
        _ => {
            let mut r = axum::Json(body).into_response();
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_formatted_as_http_and_rfc3339() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777_000), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(rfc3339(1_795_363_205_123), "2026-11-22T16:00:05.123Z");
        assert_eq!(http_date(951_782_400_000), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn freshness_ends_at_the_next_release() {
        let s = Schedule::new(std::time::Duration::from_secs(5)).unwrap();
        assert_eq!(until_next(&s, 3, 15_000), "public, max-age=5");
        assert_eq!(until_next(&s, 3, 19_001), "public, max-age=1");
        assert_eq!(until_next(&s, 3, 20_000), "public, no-cache");
    }
}
