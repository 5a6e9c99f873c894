//! Following a running server over HTTP: bootstrap from `GET /v1/snapshot`
//! at LSN S, then apply `GET /v1/changes?from_lsn=S+1`; after any break,
//! reconnect from the last applied LSN + 1 with bounded backoff; when the
//! server answers that the position is gone (SQLSTATE 55000), reset the
//! mirror and bootstrap again.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::Lsn;
use aqueduct_tables::SchemaChange;
use serde_json::Value as Json;

use crate::http::{self, Body};
use crate::{json, Error, Mirror, MirrorChange, Op, Position, RowChange, TableInfo};

/// How a [`Follower`] reaches its server.
#[derive(Clone, Debug)]
pub struct FollowerConfig {
    /// `host:port` of the server's HTTP listener.
    pub addr: String,
    /// More servers holding the same log (the server's followers, or the
    /// members of its cluster: `docs/replication.md`), `host:port` each:
    /// after a failure the follower goes on from the next one in turn,
    /// from the same LSN, so it misses nothing and sees nothing twice.
    pub other_members: Vec<String>,
    /// Mirror only these tables (all when `None`).
    pub tables: Option<Vec<String>>,
    /// A bearer token, when the server requires one.
    pub token: Option<String>,
    /// Follow as this durable consumer: the server then keeps the log from
    /// the mirror's position (up to its caps), so a mirror that was away
    /// resumes instead of bootstrapping again.
    pub consumer: Option<String>,
    /// Bounds a connect and the wait for a response head.
    pub connect_timeout: Duration,
    /// The first pause after a failure; it doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// A stream silent this long (the server sends a keep-alive every 10 s)
    /// is taken as broken and reopened.
    pub idle_timeout: Duration,
}

impl FollowerConfig {
    pub fn new(addr: impl Into<String>) -> FollowerConfig {
        FollowerConfig {
            addr: addr.into(),
            other_members: Vec::new(),
            tables: None,
            token: None,
            consumer: None,
            connect_timeout: Duration::from_secs(5),
            min_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(35),
        }
    }
}

/// What a follower has been doing, for the application's health checks.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// The last LSN applied (`None` before the first bootstrap ends).
    pub lsn: Option<Lsn>,
    /// Whether a change stream is open.
    pub connected: bool,
    /// Bootstraps done (the first one counts).
    pub bootstraps: u64,
    /// Change streams opened.
    pub streams_opened: u64,
    /// Messages applied.
    pub messages: u64,
    /// The last failure, if any since the last message applied.
    pub last_error: Option<String>,
}

/// Keeps a [`Mirror`] up to date from a server; run it on one thread with
/// [`Follower::run_until`] or by calling [`Follower::poll_once`].
pub struct Follower<M: Mirror> {
    cfg: FollowerConfig,
    mirror: M,
    /// The last LSN applied; `None`: bootstrap next.
    lsn: Option<Lsn>,
    tables: HashMap<String, Arc<TableInfo>>,
    stream: Option<Body>,
    /// When the stream last delivered a byte (a message or a keep-alive).
    last_heard: Instant,
    retry_at: Option<Instant>,
    backoff: Duration,
    status: Status,
    /// Which of `addr` (0) and `other_members` is asked now.
    member: usize,
}

/// What one message asks of the follower.
enum Applied {
    Done,
    /// The mirror cannot follow this change exactly (a table it cannot
    /// name): bootstrap again.
    Rebootstrap(String),
}

impl<M: Mirror> Follower<M> {
    /// A follower that bootstraps `mirror` on its first poll.
    pub fn new(cfg: FollowerConfig, mirror: M) -> Follower<M> {
        Follower {
            backoff: cfg.min_backoff,
            cfg,
            mirror,
            lsn: None,
            tables: HashMap::new(),
            stream: None,
            last_heard: Instant::now(),
            retry_at: None,
            status: Status::default(),
            member: 0,
        }
    }

    /// A follower for a mirror that already holds everything up to
    /// `position` (restored by the application with the position it saved):
    /// it continues from `position.lsn + 1`, or bootstraps again if the
    /// server no longer has that.
    pub fn resume(cfg: FollowerConfig, mirror: M, position: Position) -> Follower<M> {
        let mut f = Follower::new(cfg, mirror);
        f.lsn = Some(position.lsn);
        f.status.lsn = Some(position.lsn);
        f.tables = position
            .tables
            .into_iter()
            .map(|t| (t.name.clone(), Arc::new(t)))
            .collect();
        f
    }

    /// Where the mirror is; `None` before its first bootstrap ends. Save
    /// it together with the mirror's data, both taken between two changes
    /// (e.g. in [`Mirror::committed`] or with the follower stopped).
    pub fn position(&self) -> Option<Position> {
        let lsn = self.lsn?;
        let mut tables: Vec<TableInfo> = self.tables.values().map(|t| (**t).clone()).collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Some(Position { lsn, tables })
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    pub fn mirror(&self) -> &M {
        &self.mirror
    }

    pub fn mirror_mut(&mut self) -> &mut M {
        &mut self.mirror
    }

    pub fn into_mirror(self) -> M {
        self.mirror
    }

    /// Polls until `stop` is set, logging failures (the follower retries
    /// them itself with backoff).
    pub fn run_until(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.poll_once(Duration::from_millis(200)) {
                tracing::warn!(error = %e, addr = %self.member_addr(), "mirror: following the server failed; retrying");
            }
        }
    }

    /// One step, taking about `timeout` at most (a bootstrap takes as long
    /// as its snapshot): bootstraps if needed, opens the change stream if
    /// needed, and applies the messages that arrive. Returns how many were
    /// applied. An error is also handled (the next poll retries after a
    /// backoff, or bootstraps again when the position is gone); it is
    /// returned for the application to log.
    pub fn poll_once(&mut self, timeout: Duration) -> Result<usize, Error> {
        let deadline = Instant::now() + timeout;
        if let Some(at) = self.retry_at {
            let now = Instant::now();
            if at > now {
                std::thread::sleep((at - now).min(timeout));
                if Instant::now() < at {
                    return Ok(0);
                }
            }
            self.retry_at = None;
        }
        if self.lsn.is_none() {
            if let Err(e) = self.bootstrap() {
                return self.failed(e);
            }
        }
        if self.stream.is_none() {
            match self.open_stream() {
                Ok(body) => {
                    self.stream = Some(body);
                    self.last_heard = Instant::now();
                    self.status.connected = true;
                    self.status.streams_opened += 1;
                }
                Err(e) => return self.failed(e),
            }
        }
        let mut applied = 0;
        loop {
            let now = Instant::now();
            if now >= deadline && applied > 0 {
                return Ok(applied);
            }
            let wait = deadline
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            let body = self.stream.as_mut().expect("a stream is open");
            let line = body
                .set_read_timeout(Some(wait))
                .and_then(|_| body.next_line());
            match line {
                Ok(Some(line)) => {
                    self.last_heard = Instant::now();
                    if line.iter().all(|b| b.is_ascii_whitespace()) {
                        continue; // a keep-alive
                    }
                    let msg: Json = match serde_json::from_slice(&line) {
                        Ok(m) => m,
                        Err(e) => return self.failed(Error::Protocol(format!("bad message: {e}"))),
                    };
                    if msg.get("error").is_some() {
                        return self.failed(http::server_error(&msg["error"]));
                    }
                    match self.apply_message(&msg) {
                        Ok(Applied::Done) => {
                            applied += 1;
                            self.backoff = self.cfg.min_backoff;
                            self.status.last_error = None;
                        }
                        Ok(Applied::Rebootstrap(why)) => {
                            tracing::info!(reason = %why, "mirror: bootstrapping again");
                            self.stream = None;
                            self.status.connected = false;
                            self.lsn = None;
                            return Ok(applied);
                        }
                        Err(e) => return self.failed(e),
                    }
                }
                Ok(None) => {
                    return self.failed(Error::Protocol("the server ended the stream".into()))
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self.last_heard.elapsed() > self.cfg.idle_timeout {
                        return self.failed(Error::Protocol(format!(
                            "nothing from the server for {:?}",
                            self.cfg.idle_timeout
                        )));
                    }
                    return Ok(applied);
                }
                Err(e) => return self.failed(e.into()),
            }
        }
    }

    /// Drops the stream and schedules the retry: at once with a new
    /// bootstrap when the position is gone, else after the backoff.
    fn failed(&mut self, e: Error) -> Result<usize, Error> {
        // The next attempt goes to the next member holding the same log.
        self.member = (self.member + 1) % (1 + self.cfg.other_members.len());
        self.stream = None;
        self.status.connected = false;
        self.status.last_error = Some(e.to_string());
        if e.is_gone() {
            self.lsn = None;
        }
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(self.cfg.max_backoff);
        Err(e)
    }

    fn wanted(&self, table: &str) -> bool {
        self.cfg
            .tables
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == table))
    }

    fn table_query(&self) -> String {
        match &self.cfg.tables {
            Some(t) => format!("table={}", encode(&t.join(","))),
            None => String::new(),
        }
    }

    /// The member asked now.
    fn member_addr(&self) -> &str {
        match self.member {
            0 => &self.cfg.addr,
            n => &self.cfg.other_members[n - 1],
        }
    }

    fn get(&self, path: &str) -> Result<Body, Error> {
        let mut r = http::request(
            self.member_addr(),
            "GET",
            path,
            self.cfg.token.as_deref(),
            None,
            self.cfg.connect_timeout,
        )?;
        if r.status != 200 {
            return Err(http::error_of(r.status, &mut r.body));
        }
        r.body.set_read_timeout(Some(self.cfg.idle_timeout))?;
        Ok(r.body)
    }

    /// Loads the snapshot into a reset mirror.
    fn bootstrap(&mut self) -> Result<(), Error> {
        let q = self.table_query();
        let mut body = self.get(&format!(
            "/v1/snapshot{}{q}",
            if q.is_empty() { "" } else { "?" }
        ))?;
        let header = loop {
            match body.next_line()? {
                Some(l) if l.iter().all(|b| b.is_ascii_whitespace()) => continue,
                Some(l) => break l,
                None => return Err(Error::Protocol("an empty snapshot".into())),
            }
        };
        let header: Json = serde_json::from_slice(&header)
            .map_err(|e| Error::Protocol(format!("bad snapshot header: {e}")))?;
        if header.get("error").is_some() {
            return Err(http::server_error(&header["error"]));
        }
        let lsn = header["lsn"]
            .as_u64()
            .ok_or_else(|| Error::Protocol("snapshot header without lsn".into()))?;
        let mut tables = HashMap::new();
        for t in header["tables"].as_array().into_iter().flatten() {
            let t = json::table_info(t)?;
            if self.wanted(&t.name) {
                tables.insert(t.name.clone(), Arc::new(t));
            }
        }
        self.mirror.reset();
        self.tables = tables;
        while let Some(line) = body.next_line()? {
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let r: Json = serde_json::from_slice(&line)
                .map_err(|e| Error::Protocol(format!("bad snapshot row: {e}")))?;
            if r.get("error").is_some() {
                return Err(http::server_error(&r["error"]));
            }
            let name = r["table"].as_str().unwrap_or_default();
            let Some(t) = self.tables.get(name) else {
                continue;
            };
            let key = json::key(&r["key"], t)?;
            let row = json::row(&r["row"], t)?;
            self.mirror.load(t, &key, &row);
        }
        self.lsn = Some(lsn);
        self.status.lsn = Some(lsn);
        self.status.bootstraps += 1;
        self.mirror.committed(lsn);
        Ok(())
    }

    fn open_stream(&mut self) -> Result<Body, Error> {
        let from = self.lsn.expect("bootstrapped") + 1;
        let mut path = format!("/v1/changes?from_lsn={from}");
        let q = self.table_query();
        if !q.is_empty() {
            path.push('&');
            path.push_str(&q);
        }
        if let Some(c) = &self.cfg.consumer {
            path.push_str(&format!("&consumer={}", encode(c)));
        }
        self.get(&path)
    }

    fn apply_message(&mut self, msg: &Json) -> Result<Applied, Error> {
        let lsn = msg["lsn"]
            .as_u64()
            .ok_or_else(|| Error::Protocol("a message without lsn".into()))?;
        let first = msg["first_lsn"].as_u64().unwrap_or(lsn);
        let pos = self.lsn.expect("bootstrapped");
        if lsn <= pos {
            // Already applied (a server never sends it; kept exact anyway).
            return Ok(Applied::Done);
        }
        if first <= pos {
            return Err(Error::Protocol(format!(
                "a transaction from LSN {first} to {lsn} overlaps what is applied (up to {pos})"
            )));
        }
        // The whole message is decoded before any of it is applied, so a
        // message that fails to decode is retried whole, never half.
        let mut tables = self.tables.clone();
        let mut changes = Vec::new();
        for c in msg["changes"].as_array().into_iter().flatten() {
            let clsn = c["lsn"].as_u64().unwrap_or(lsn);
            let op = c["op"].as_str().unwrap_or_default();
            let change = match op {
                "schema" => {
                    let change = SchemaChange::decode(c["schema"].to_string().as_bytes())
                        .map_err(Error::Protocol)?;
                    match change {
                        SchemaChange::CreateTable(s) if self.wanted(&s.name) => {
                            let t = Arc::new(TableInfo::of(&s));
                            tables.insert(s.name.clone(), t.clone());
                            MirrorChange::CreateTable(t)
                        }
                        SchemaChange::DropTable { id } => {
                            let known = tables.values().find(|t| t.id == Some(id)).cloned();
                            match known {
                                Some(t) => {
                                    tables.remove(&t.name);
                                    MirrorChange::DropTable(t)
                                }
                                // A table of ours without a known id may be
                                // the one dropped.
                                None if tables.values().any(|t| t.id.is_none()) => {
                                    return Ok(Applied::Rebootstrap(format!(
                                        "table {id} was dropped"
                                    )))
                                }
                                None => continue,
                            }
                        }
                        _ => continue,
                    }
                }
                "insert" | "update" | "delete" => {
                    let name = c["table"].as_str().unwrap_or_default();
                    let Some(t) = tables.get(name).cloned() else {
                        if self.wanted(name) {
                            return Ok(Applied::Rebootstrap(format!("unknown table {name}")));
                        }
                        continue;
                    };
                    MirrorChange::Row(RowChange {
                        key: json::key(&c["key"], &t)?,
                        op: match op {
                            "insert" => Op::Insert,
                            "update" => Op::Update,
                            _ => Op::Delete,
                        },
                        old: json::opt_row(&c["old"], &t)?,
                        new: json::opt_row(&c["new"], &t)?,
                        table: t,
                    })
                }
                other => return Err(Error::Protocol(format!("unknown change op {other:?}"))),
            };
            changes.push((clsn, change));
        }
        self.tables = tables;
        for (clsn, change) in &changes {
            self.mirror.apply(*clsn, change);
        }
        self.lsn = Some(lsn);
        self.status.lsn = Some(lsn);
        self.status.messages += 1;
        self.mirror.committed(lsn);
        Ok(Applied::Done)
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b',') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
