//! NATS JetStream: each applied transaction or schema change published as
//! its wire line (`docs/publications.md` §4) with the JetStream
//! deduplication header `Nats-Msg-Id` (the transaction's `txid`; a schema
//! change's `schema:{lsn}:{seq}`), waiting for the stream's
//! acknowledgement before the next. At least once: the position is stored
//! apart (§5.4), in a state directory, after the acknowledgements; a
//! resend inside the stream's duplicate window (two minutes unless the
//! stream says otherwise) is dropped by JetStream, one after it reaches
//! the consumers, who guard with `txid` or each change's `version`.
//!
//! One subject per subscription: `{prefix}.{subscription}` (prefix
//! `aqueduct` unless the URL's path names one), so a consumer reads the
//! subscription's messages in the order they were applied. They go to a
//! stream of their own, `{PREFIX}_{SUBSCRIPTION}` (upper case, characters
//! other than letters, digits, `-` and `_` as `_`), created with that one
//! subject on the first connection if missing; an existing stream of that
//! name must hold the subject. A stream per subscription keeps the
//! deduplication of one subscription from dropping another's messages for
//! the same source transaction.
//!
//! Errors: a lost or refused connection, a missing acknowledgement, no
//! stream answering (503) and JetStream errors with codes of 500 and up
//! are transient; a message above the server's `max_payload` and other
//! JetStream errors are permanent. The sink reconnects on the next call
//! after a failure.
//!
//! The NATS text protocol is spoken directly over TCP ([`NatsClient`]):
//! plain connections only (no TLS), user and password from the URL.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use aqueduct_subscribe::{Item, Record, Sink, SinkError};
use serde_json::{json, Value};

use crate::classified;
use crate::state_dir::{message_id, state_dir_methods, wire_line, StateDir};

/// How long the sink waits to connect and for each acknowledgement.
pub const NATS_TIMEOUT: Duration = Duration::from_secs(10);

/// The subject prefix when the URL names none.
pub const DEFAULT_PREFIX: &str = "aqueduct";

/// A parsed `nats://[user:pass@]host[:port][/prefix]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsUrl {
    /// `host:port` (port 4222 when not given).
    pub addr: String,
    /// User and password, when given.
    pub auth: Option<(String, String)>,
    /// The subject prefix (dots allowed: `a.b`).
    pub prefix: String,
}

impl NatsUrl {
    /// Parses `nats://[user:pass@]host[:port][/prefix]`.
    pub fn parse(url: &str) -> Result<NatsUrl, String> {
        let bad = |why: &str| format!("{url:?}: {why}; expected nats://host:port[/prefix]");
        let rest = url
            .strip_prefix("nats://")
            .ok_or_else(|| bad("not a nats:// URL"))?;
        let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let (auth, host) = match authority.rsplit_once('@') {
            Some((cred, host)) => {
                let (u, p) = cred.split_once(':').unwrap_or((cred, ""));
                (Some((u.to_string(), p.to_string())), host)
            }
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let addr = if host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']')) {
            host.to_string()
        } else {
            format!("{host}:4222")
        };
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX
        } else {
            prefix
        };
        if prefix.split('.').any(|t| !valid_token(t)) {
            return Err(bad("the prefix must be dot-separated subject tokens"));
        }
        Ok(NatsUrl {
            addr,
            auth,
            prefix: prefix.to_string(),
        })
    }
}

/// A subject token: not empty, no whitespace, dots or wildcards.
fn valid_token(t: &str) -> bool {
    !t.is_empty()
        && !t
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>'))
}

/// A name as a subject token or stream name part: letters, digits, `-`
/// and `_` kept, anything else `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A sink publishing each applied item to a JetStream stream.
pub struct NatsSink {
    url: NatsUrl,
    subject: String,
    stream: String,
    timeout: Duration,
    client: Option<NatsClient>,
    state: StateDir,
}

impl NatsSink {
    /// Publishes for the subscription `name` to the server at `url`
    /// (`nats://[user:pass@]host[:port][/prefix]`); the position kept in
    /// `state_dir`, created if missing. Connects, and creates the stream
    /// if missing, at once; a failure there is returned.
    pub fn connect(
        url: &str,
        name: &str,
        state_dir: impl Into<PathBuf>,
    ) -> Result<NatsSink, SinkError> {
        let url = NatsUrl::parse(url).map_err(SinkError::permanent)?;
        let subject = format!("{}.{}", url.prefix, sanitize(name));
        let stream = sanitize(&format!("{}_{name}", url.prefix)).to_uppercase();
        let mut sink = NatsSink {
            url,
            subject,
            stream,
            timeout: NATS_TIMEOUT,
            client: None,
            state: StateDir::open(state_dir)?,
        };
        sink.client()?;
        Ok(sink)
    }

    /// The subject messages go to.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The JetStream stream holding them.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The connection, opened (and the stream made sure of) if there is
    /// none.
    fn client(&mut self) -> Result<&mut NatsClient, SinkError> {
        if self.client.is_none() {
            let mut c = NatsClient::connect(&self.url, self.timeout)?;
            self.ensure_stream(&mut c)?;
            self.client = Some(c);
        }
        Ok(self.client.as_mut().expect("connected"))
    }

    fn ensure_stream(&self, c: &mut NatsClient) -> Result<(), SinkError> {
        let info = c.request_json(&format!("$JS.API.STREAM.INFO.{}", self.stream), b"")?;
        match info.get("error") {
            None => {
                let holds = info["config"]["subjects"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s == self.subject.as_str() || s == ">"));
                if holds {
                    Ok(())
                } else {
                    Err(SinkError::permanent(format!(
                        "the JetStream stream {} exists without the subject {}",
                        self.stream, self.subject
                    )))
                }
            }
            Some(e) if e["code"] == 404 => {
                let config = json!({
                    "name": self.stream,
                    "subjects": [self.subject],
                    "storage": "file",
                    "retention": "limits",
                });
                let made = c.request_json(
                    &format!("$JS.API.STREAM.CREATE.{}", self.stream),
                    config.to_string().as_bytes(),
                )?;
                match made.get("error") {
                    None => Ok(()),
                    Some(e) => Err(js_error("creating the stream", e)),
                }
            }
            Some(e) => Err(js_error("looking up the stream", e)),
        }
    }

    fn publish(&mut self, id: &str, line: &str) -> Result<(), SinkError> {
        let subject = self.subject.clone();
        let c = self.client()?;
        let headers = format!("NATS/1.0\r\nNats-Msg-Id: {id}\r\n\r\n");
        let reply = c.request(&subject, Some(&headers), line.as_bytes())?;
        if reply.status == Some(503) {
            return Err(SinkError::transient(format!(
                "no JetStream stream answers on {subject}"
            )));
        }
        let ack: Value = serde_json::from_slice(&reply.payload).map_err(|e| {
            SinkError::transient(format!("a JetStream acknowledgement that is not JSON: {e}"))
        })?;
        match ack.get("error") {
            None if ack.get("seq").is_some() => Ok(()),
            None => Err(SinkError::transient(format!(
                "an unexpected JetStream acknowledgement: {ack}"
            ))),
            Some(e) => Err(js_error(&format!("publishing {id}"), e)),
        }
    }
}

/// A JetStream API error (`{"code", "err_code", "description"}`): codes
/// of 500 and up are transient.
fn js_error(what: &str, e: &Value) -> SinkError {
    let transient = e["code"].as_u64().is_some_and(|c| c >= 500);
    classified(transient, format!("{what}: JetStream error {e}"))
}

impl Sink for NatsSink {
    /// Publishes the items one at a time, in order, each waiting for its
    /// acknowledgement; the first failure drops the connection and ends
    /// the batch (the agent retries it, so what was published is
    /// published again, and deduplicated).
    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        for item in items {
            if let (Some(line), Some(id)) = (wire_line(item), message_id(item)) {
                if let Err(e) = self.publish(&id, &line) {
                    self.client = None;
                    return Err(e);
                }
            }
        }
        self.state.delivered(record)
    }

    state_dir_methods!();
}

/// A message received on the client's inbox.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// The status of a header block (`NATS/1.0 503`), if any.
    pub status: Option<u16>,
    /// The header block as sent, if any.
    pub headers: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// A minimal NATS client: CONNECT, publish with headers, request and
/// reply through an inbox subscription, PING/PONG. What the sink needs;
/// public for tests and tools.
pub struct NatsClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    inbox: String,
    next_reply: u64,
    max_payload: usize,
    timeout: Duration,
}

fn lost(e: impl std::fmt::Display) -> SinkError {
    SinkError::transient(format!("NATS connection: {e}"))
}

impl NatsClient {
    /// Connects, says CONNECT (headers on, no-responders on), and
    /// subscribes its inbox; `timeout` bounds the connect and each wait for
    /// an answer.
    pub fn connect(url: &NatsUrl, timeout: Duration) -> Result<NatsClient, SinkError> {
        let mut last = None;
        let mut stream = None;
        for a in url.addr.to_socket_addrs().map_err(lost)? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            lost(format!(
                "{}: {}",
                url.addr,
                last.map_or("resolves to nothing".into(), |e| e.to_string())
            ))
        })?;
        stream.set_nodelay(true).ok();
        stream.set_write_timeout(Some(timeout)).map_err(lost)?;
        let writer = stream.try_clone().map_err(lost)?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut c = NatsClient {
            reader: BufReader::new(stream),
            writer,
            inbox: format!("_INBOX.aq{}x{nonce}", std::process::id()),
            next_reply: 0,
            max_payload: 1 << 20,
            timeout,
        };
        let deadline = Instant::now() + timeout;
        let info = c.read_line(deadline)?;
        let info = info
            .strip_prefix("INFO ")
            .ok_or_else(|| lost(format!("expected INFO, got {info:?}")))?;
        let info: Value = serde_json::from_str(info).map_err(lost)?;
        if let Some(m) = info["max_payload"].as_u64() {
            c.max_payload = m as usize;
        }
        if info["headers"] == false {
            return Err(SinkError::permanent(
                "the NATS server does not support headers (2.2 or later needed)",
            ));
        }
        let mut connect = json!({
            "verbose": false, "pedantic": false, "lang": "rust",
            "version": env!("CARGO_PKG_VERSION"), "protocol": 1,
            "headers": true, "no_responders": true,
        });
        if let Some((user, pass)) = &url.auth {
            connect["user"] = json!(user);
            connect["pass"] = json!(pass);
        }
        let hello = format!("CONNECT {connect}\r\nSUB {}.* 1\r\nPING\r\n", c.inbox);
        c.writer.write_all(hello.as_bytes()).map_err(lost)?;
        loop {
            match c.read_line(deadline)?.as_str() {
                "PONG" => return Ok(c),
                "PING" => c.writer.write_all(b"PONG\r\n").map_err(lost)?,
                l if l.starts_with("-ERR") => {
                    return Err(lost(format!("the server refused: {l}")));
                }
                _ => {}
            }
        }
    }

    /// Publishes to `subject` (with a header block starting `NATS/1.0`
    /// when given) and waits for the one reply on the inbox (an answer,
    /// or a message a JetStream consumer delivers for the request).
    pub fn request(
        &mut self,
        subject: &str,
        headers: Option<&str>,
        payload: &[u8],
    ) -> Result<Reply, SinkError> {
        self.next_reply += 1;
        let reply = format!("{}.{}", self.inbox, self.next_reply);
        let hlen = headers.map_or(0, str::len);
        if hlen + payload.len() > self.max_payload {
            return Err(SinkError::permanent(format!(
                "a message of {} bytes is above the NATS server's max_payload {}",
                hlen + payload.len(),
                self.max_payload
            )));
        }
        let mut out = match headers {
            Some(h) => format!(
                "HPUB {subject} {reply} {hlen} {}\r\n{h}",
                hlen + payload.len()
            ),
            None => format!("PUB {subject} {reply} {}\r\n", payload.len()),
        }
        .into_bytes();
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\r\n");
        self.writer.write_all(&out).map_err(lost)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let (subject, msg) = self.next_message(deadline)?;
            // A late answer to an earlier request that timed out is not
            // ours. A message JetStream delivers to a pull request arrives
            // under its own subject, not the inbox's.
            let stale = subject != reply && subject.starts_with(&format!("{}.", self.inbox));
            if !stale {
                return Ok(msg);
            }
        }
    }

    /// [`NatsClient::request`] without headers, its reply parsed as JSON
    /// (the JetStream API).
    pub fn request_json(&mut self, subject: &str, payload: &[u8]) -> Result<Value, SinkError> {
        let reply = self.request(subject, None, payload)?;
        if reply.status == Some(503) {
            return Err(SinkError::transient(format!(
                "nothing answers on {subject}: is JetStream on?"
            )));
        }
        serde_json::from_slice(&reply.payload)
            .map_err(|e| lost(format!("an answer on {subject} that is not JSON: {e}")))
    }

    /// The next MSG or HMSG, answering PINGs; `-ERR` ends the connection.
    fn next_message(&mut self, deadline: Instant) -> Result<(String, Reply), SinkError> {
        loop {
            let line = self.read_line(deadline)?;
            let mut parts = line.split_ascii_whitespace();
            let (headers_len, total) = match parts.next() {
                Some("MSG") => {
                    let args: Vec<&str> = parts.collect();
                    (0, args.last().and_then(|n| n.parse().ok()))
                }
                Some("HMSG") => {
                    let args: Vec<&str> = parts.collect();
                    let n = args.len();
                    let h = n.checked_sub(2).and_then(|i| args[i].parse().ok());
                    (h.unwrap_or(0), args.last().and_then(|n| n.parse().ok()))
                }
                Some("PING") => {
                    self.writer.write_all(b"PONG\r\n").map_err(lost)?;
                    continue;
                }
                Some(l) if l.starts_with("-ERR") => {
                    return Err(lost(format!("the server said {line}")));
                }
                _ => continue,
            };
            let total: usize = total.ok_or_else(|| lost(format!("a bad message line {line:?}")))?;
            let subject = line.split_ascii_whitespace().nth(1).unwrap_or_default();
            let subject = subject.to_string();
            let mut body = vec![0; total + 2];
            self.set_deadline(deadline)?;
            self.reader.read_exact(&mut body).map_err(lost)?;
            body.truncate(total);
            let payload = body.split_off(headers_len.min(total));
            let headers = (headers_len > 0).then(|| String::from_utf8_lossy(&body).into_owned());
            let status = headers.as_deref().and_then(|h| {
                h.lines()
                    .next()?
                    .strip_prefix("NATS/1.0")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            });
            return Ok((
                subject,
                Reply {
                    status,
                    headers,
                    payload,
                },
            ));
        }
    }

    fn set_deadline(&mut self, deadline: Instant) -> Result<(), SinkError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(lost("no answer in time"));
        }
        self.reader
            .get_ref()
            .set_read_timeout(Some(left))
            .map_err(lost)
    }

    fn read_line(&mut self, deadline: Instant) -> Result<String, SinkError> {
        self.set_deadline(deadline)?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(lost("closed by the server")),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(lost("no answer in time"))
            }
            Err(e) => Err(lost(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = NatsUrl::parse("nats://127.0.0.1:4333/app.events").unwrap();
        assert_eq!(
            u,
            NatsUrl {
                addr: "127.0.0.1:4333".into(),
                auth: None,
                prefix: "app.events".into()
            }
        );
        let u = NatsUrl::parse("nats://me:pw@host").unwrap();
        assert_eq!(u.addr, "host:4222");
        assert_eq!(u.auth, Some(("me".into(), "pw".into())));
        assert_eq!(u.prefix, DEFAULT_PREFIX);
        for bad in ["nats://", "http://h", "nats://h/a..b", "nats://h/a.*"] {
            assert!(NatsUrl::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(sanitize("a.b c"), "a_b_c");
    }
}
