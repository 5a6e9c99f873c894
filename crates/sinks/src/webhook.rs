//! Webhooks: each applied transaction or schema change POSTed as its wire
//! line (`docs/publications.md` §4) to a URL, with `Content-Type:
//! application/json` and `Idempotency-Key` (the transaction's `txid`; a
//! schema change's `schema:{lsn}:{seq}`). At least once: a 2xx answer is
//! success, and the position is stored apart (§5.4), in a state
//! directory, after it; a crash or a failed request resends, and the key
//! (and each change's `version` and `prev_version`) let the receiver guard
//! itself.
//!
//! Errors: HTTP 408, 429, 5xx and a failed connection are transient
//! (retried without limit); any other answer (another 4xx, or a 1xx or 3xx
//! the client does not follow) is permanent (dead-lettered after a few
//! tries).
//!
//! Per change (`?per_change=1` on the URL, the observers of Synapse): each
//! change of a transaction is POSTed alone, in order, to
//! `{path}/{object}/{created|updated|destroyed}` (insert, update, delete
//! after the row filter's transitions), its body the change's fields plus
//! `txid`, `lsn`, `commit_time` and `index` (its place in the
//! transaction), its key `{txid}:{index}`; a schema change goes to
//! `{path}/{object}/schema` as its wire line.
//!
//! Plain `http://` only, one request per connection: put TLS in front with
//! a proxy.

use std::path::PathBuf;
use std::time::Duration;

use aqueduct_mirror::http;
use aqueduct_publish::ChangeOp;
use aqueduct_subscribe::{Item, Record, Sink, SinkError};
use serde_json::{json, Value};

use crate::state_dir::{message_id, state_dir_methods, wire_line, StateDir};

/// How long one request may wait to connect, and for each read of the
/// answer, before it counts as a transient failure.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes of an error answer's body kept in the error message.
const ERROR_BODY_BYTES: usize = 500;

/// A sink POSTing each applied item to a URL.
pub struct WebhookSink {
    url: WebhookUrl,
    timeout: Duration,
    state: StateDir,
}

/// A parsed `http://host[:port][/path][?query]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookUrl {
    /// `host:port` (port 80 when not given).
    pub addr: String,
    /// The path without a trailing `/` (empty for the root), with the
    /// query except `per_change`.
    pub path: String,
    /// The query after the path, `per_change` removed (empty for none).
    pub query: String,
    /// `per_change=1`: one request per change.
    pub per_change: bool,
}

impl WebhookUrl {
    /// Parses `http://host[:port][/path][?query]`; `per_change=1` (or
    /// `true`) in the query asks for one request per change.
    pub fn parse(url: &str) -> Result<WebhookUrl, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?}: only http:// URLs are supported"))?;
        let (authority, path_query) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => match rest.find('?') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            },
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{url:?}: expected http://host[:port]/path"));
        }
        let addr = if authority.starts_with('[') {
            if authority.contains("]:") {
                authority.to_string()
            } else {
                format!("{authority}:80")
            }
        } else if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
        let mut per_change = false;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("per_change", v) => {
                    per_change = match v {
                        "1" | "true" | "" => true,
                        "0" | "false" => false,
                        _ => return Err(format!("{url:?}: per_change is 1 or 0")),
                    }
                }
                _ => kept.push(pair),
            }
        }
        Ok(WebhookUrl {
            addr,
            path: path.trim_end_matches('/').to_string(),
            query: kept.join("&"),
            per_change,
        })
    }

    /// The request target for `path` under the URL's path, with its query.
    fn target(&self, under: &[&str]) -> String {
        let mut t = self.path.clone();
        for part in under {
            t.push('/');
            t.push_str(&percent_encode(part));
        }
        if t.is_empty() {
            t.push('/');
        }
        if !self.query.is_empty() {
            t.push('?');
            t.push_str(&self.query);
        }
        t
    }
}

/// Percent-encodes a path segment (all but unreserved characters).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The callback name of a change's operation.
fn callback(op: ChangeOp) -> &'static str {
    match op {
        ChangeOp::Insert => "created",
        ChangeOp::Update => "updated",
        ChangeOp::Delete => "destroyed",
    }
}

/// The class of an HTTP status: `None` for success.
pub fn classify_status(status: u16) -> Option<ErrorKind> {
    match status {
        200..=299 => None,
        408 | 429 | 500..=599 => Some(ErrorKind::Transient),
        _ => Some(ErrorKind::Permanent),
    }
}

/// Whether a failed answer should be retried without limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 408, 429, 5xx.
    Transient,
    /// Any other non-2xx.
    Permanent,
}

impl WebhookSink {
    /// POSTs to `url` (`http://host[:port][/path][?per_change=1]`); the
    /// position kept in `state_dir`, created if missing. Nothing is sent
    /// until the first batch.
    pub fn new(url: &str, state_dir: impl Into<PathBuf>) -> Result<WebhookSink, SinkError> {
        Ok(WebhookSink {
            url: WebhookUrl::parse(url).map_err(SinkError::permanent)?,
            timeout: WEBHOOK_TIMEOUT,
            state: StateDir::open(state_dir)?,
        })
    }

    /// Bounds each request's connect and reads (default
    /// [`WEBHOOK_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> WebhookSink {
        self.timeout = timeout;
        self
    }

    /// The URL as parsed.
    pub fn url(&self) -> &WebhookUrl {
        &self.url
    }

    fn post(&self, target: &str, key: &str, body: &str) -> Result<(), SinkError> {
        let headers = [("Idempotency-Key", key)];
        let what = |e: &dyn std::fmt::Display| {
            SinkError::transient(format!("POST http://{}{target}: {e}", self.url.addr))
        };
        let mut r = http::request_with_headers(
            &self.url.addr,
            "POST",
            target,
            &headers,
            Some(body.as_bytes()),
            self.timeout,
        )
        .map_err(|e| what(&e))?;
        let Some(kind) = classify_status(r.status) else {
            return Ok(());
        };
        let answer = r.body.read_to_end(ERROR_BODY_BYTES).unwrap_or_default();
        let message = format!(
            "POST http://{}{target}: HTTP {}: {}",
            self.url.addr,
            r.status,
            String::from_utf8_lossy(&answer)
        );
        Err(match kind {
            ErrorKind::Transient => SinkError::transient(message),
            ErrorKind::Permanent => SinkError::permanent(message),
        })
    }

    fn post_per_change(&self, item: &Item) -> Result<(), SinkError> {
        match item {
            Item::Txn(t) => {
                for (index, change) in t.changes.iter().enumerate() {
                    let mut body = serde_json::to_value(change).expect("changes serialize");
                    let extra = json!({
                        "txid": t.txid,
                        "lsn": t.lsn,
                        "commit_time": t.commit_time,
                        "index": index,
                        "bootstrap": t.bootstrap,
                    });
                    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
                        b.extend(e);
                        // A decorator's origins (§8), as the whole
                        // transaction's line carries them.
                        if let Some(origin) = &t.origin {
                            b.insert(
                                "origin".into(),
                                serde_json::to_value(origin).expect("origins serialize"),
                            );
                        }
                    }
                    let target = self.url.target(&[&change.object, callback(change.op)]);
                    self.post(&target, &format!("{}:{index}", t.txid), &body.to_string())?;
                }
                Ok(())
            }
            Item::Schema(s, _) => {
                let line = wire_line(item).expect("a schema change has a line");
                let key = message_id(item).expect("a schema change has a key");
                self.post(&self.url.target(&[&s.object, "schema"]), &key, &line)
            }
            Item::Skip { .. } => Ok(()),
        }
    }
}

impl Sink for WebhookSink {
    /// Sends the items one request at a time, in order; the first failure
    /// ends the batch (the agent retries it, so what was sent is sent
    /// again).
    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        for item in items {
            if self.url.per_change {
                self.post_per_change(item)?;
            } else if let (Some(line), Some(key)) = (wire_line(item), message_id(item)) {
                self.post(&self.url.target(&[]), &key, &line)?;
            }
        }
        self.state.delivered(record)
    }

    state_dir_methods!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = WebhookUrl::parse("http://127.0.0.1:8080/hooks/aq?per_change=1&x=y").unwrap();
        assert_eq!(u.addr, "127.0.0.1:8080");
        assert_eq!(u.path, "/hooks/aq");
        assert_eq!(u.query, "x=y");
        assert!(u.per_change);
        assert_eq!(
            u.target(&["my posts", "created"]),
            "/hooks/aq/my%20posts/created?x=y"
        );
        let u = WebhookUrl::parse("http://example/").unwrap();
        assert_eq!(
            (u.addr.as_str(), u.target(&[]).as_str(), u.per_change),
            ("example:80", "/", false)
        );
        let u = WebhookUrl::parse("http://h:1?per_change=0").unwrap();
        assert_eq!((u.target(&[]).as_str(), u.per_change), ("/", false));
        assert_eq!(WebhookUrl::parse("http://[::1]/").unwrap().addr, "[::1]:80");
        for bad in [
            "https://h/",
            "h:80/x",
            "http:///x",
            "http://h/?per_change=2",
        ] {
            assert!(WebhookUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn classifies_statuses() {
        assert_eq!(classify_status(200), None);
        assert_eq!(classify_status(204), None);
        for s in [408, 429, 500, 503] {
            assert_eq!(classify_status(s), Some(ErrorKind::Transient), "{s}");
        }
        for s in [301, 400, 404, 422] {
            assert_eq!(classify_status(s), Some(ErrorKind::Permanent), "{s}");
        }
    }
}
