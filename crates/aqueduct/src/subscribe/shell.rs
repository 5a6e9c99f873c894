//! `aqueduct subscribe`'s following: the subscriber agent's shell
//! (`docs/publications.md`, section 5). The agent's core
//! (`aqueduct_subscribe::Agent`) decides; this shell does what it says:
//! it reads the server's stream on a thread of its own, applies batches
//! on worker threads (each with its own sink connection), stores
//! positions and dead letters, acknowledges to the server, and passes
//! time in. A new subscriber is bootstrapped first: the publication's
//! tables at one LSN, then the stream from the next.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aqueduct_mirror::http;
use aqueduct_publish::{parse_line, Change, ChangeOp, ErrorMessage, Mode, TxnMessage, WireMessage};
use aqueduct_sinks::SinkSpec;

use super::metrics::AgentStats;
use super::FollowArgs;
use aqueduct_subscribe::{
    Agent, AgentConfig, BatchId, BootstrapStep, Effect, Input, Item, PositionMode, Record, Sink,
    SinkError, StreamEnd,
};

/// Longest the event loop waits without a `Tick`.
const TICK: Duration = Duration::from_millis(200);
/// How long a read of the stream may wait (the server sends a keep-alive
/// every 10 s).
const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait before connecting again after a stream failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// Timeout of the short requests (acknowledgements, connecting).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines queued between the stream's reader and the agent.
const EVENT_QUEUE: usize = 1024;

/// What happened, for the event loop.
enum Event {
    Line(WireMessage, usize),
    End(StreamEnd),
    Applied(BatchId),
    Failed(BatchId, SinkError),
}

/// One batch for a worker.
struct Job {
    batch: BatchId,
    items: Vec<Item>,
    record: Record,
}

/// The server and the subscription, as requests see them.
struct Server {
    addr: String,
    token: Option<String>,
    publication: String,
    name: String,
    mode: Mode,
}

impl Server {
    fn request(&self, method: &str, path: &str, timeout: Duration) -> Result<http::Response> {
        let r = http::request(
            &self.addr,
            method,
            path,
            self.token.as_deref(),
            None,
            timeout,
        )?;
        if r.status != 200 {
            let mut body = r.body;
            return Err(http::error_of(r.status, &mut body).into());
        }
        Ok(r)
    }

    fn ack(&self, lsn: u64) -> Result<()> {
        let path = format!(
            "/v1/publications/{}/ack?subscriber={}&lsn={lsn}",
            self.publication, self.name
        );
        self.request("POST", &path, REQUEST_TIMEOUT).map(|_| ())
    }
}

/// Gate the reader waits at while the agent's window is full.
type Gate = Arc<(Mutex<bool>, Condvar)>;

pub fn run(args: &FollowArgs) -> Result<()> {
    let mode: Mode = args.mode.parse().map_err(|e| anyhow!("--mode: {e}"))?;
    let addr = args
        .from
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let server = Arc::new(Server {
        addr,
        token: args.token.clone(),
        publication: args.publication.clone(),
        name: args.name.clone(),
        mode,
    });
    let spec: SinkSpec = args.into.parse().map_err(|e| anyhow!("--into: {e}"))?;
    let open = |spec: &SinkSpec| {
        spec.open(&args.name, args.state_dir.as_deref())
            .map_err(|e| anyhow!("opening the sink {spec}: {e}"))
    };
    let mut config = AgentConfig::new(mode, PositionMode::InApply);
    config.workers = args.workers;
    config.causal_timeout_ms = match &args.causal_timeout {
        None => None,
        Some(t) => Some(
            aqueduct_plan::limits::parse_duration(t)
                .ok_or_else(|| anyhow!("--causal-timeout: not a duration: {t}"))?
                .as_millis() as u64,
        ),
    };
    let replay_from = match (&args.from_lsn, &args.from_time) {
        (Some(l), _) => Some(*l),
        (None, Some(t)) => Some(lsn_at(&server, t)?),
        (None, None) => None,
    };
    let stats = Arc::new(AgentStats::default());
    if let Some(addr) = &args.metrics_addr {
        super::metrics::serve(addr, &args.name, stats.clone())?;
    }
    loop {
        let mut control = open(&spec)?;
        config.position = control.position_mode();
        config.validate().map_err(|e| anyhow!("{e}"))?;
        let mut resume = control
            .resume()
            .map_err(|e| anyhow!("reading the sink's position: {e}"))?;
        if resume.watermark == 0 && resume.applied_above.is_empty() && replay_from.is_none() {
            bootstrap(&server, control.as_mut())?;
            resume = control
                .resume()
                .map_err(|e| anyhow!("reading the sink's position: {e}"))?;
        }
        if let Some(from) = replay_from {
            // Replay: from an earlier point; rows a storing sink already
            // has newer versions of are skipped by its guard.
            resume.watermark = from.max(1);
            resume.applied_above.retain(|l| *l >= from);
        }
        let agent = Agent::new(config.clone(), resume).map_err(|e| anyhow!("{e}"))?;
        match follow(&server, &spec, args, agent, control, &stats)? {
            Followed::CaughtUp => return Ok(()),
            Followed::Rebootstrap => {
                eprintln!(
                    "subscriber {}: the server no longer has the stream from its position; bootstrapping again",
                    args.name
                );
                let mut control = open(&spec)?;
                control
                    .reset()
                    .map_err(|e| anyhow!("clearing the sink before bootstrapping again: {e}"))?;
                bootstrap(&server, control.as_mut())?;
            }
        }
    }
}

/// Copies the publication's tables at one LSN `S` into the sink and sets
/// its position to `S + 1`.
fn bootstrap(server: &Server, sink: &mut dyn Sink) -> Result<()> {
    let path = format!(
        "/v1/publications/{}/bootstrap?subscriber={}&mode={}",
        server.publication, server.name, server.mode
    );
    let r = server.request("POST", &path, REQUEST_TIMEOUT)?;
    let mut body = r.body;
    body.set_read_timeout(Some(STREAM_READ_TIMEOUT))?;
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} bootstrap: {pos} rows ({per_sec}) {msg}",
        )
        .expect("a valid template"),
    );
    let mut rows: Vec<Change> = Vec::new();
    let flush = |sink: &mut dyn Sink, rows: &mut Vec<Change>| -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let txn = TxnMessage {
            lsn: rows.iter().map(|c| c.version).max().unwrap_or(0),
            first_lsn: 0,
            txid: String::new(),
            commit_time: String::new(),
            epoch: 0,
            frame: 0,
            last: true,
            deps: None,
            bootstrap: true,
            changes: std::mem::take(rows),
            origin: None,
        };
        sink.apply(&[Item::Txn(Arc::new(txn))], &Record::default())
            .map_err(|e| anyhow!("applying a bootstrap chunk: {e}"))
    };
    while let Some(line) = body.next_line()? {
        if line.is_empty() {
            continue;
        }
        let text = std::str::from_utf8(&line).context("a bootstrap line is not UTF-8")?;
        match parse_line(text).map_err(|e| anyhow!("{e}"))? {
            WireMessage::Epoch(e) => {
                sink.ensure_objects(&e.objects)
                    .map_err(|e| anyhow!("creating the sink's tables: {e}"))?;
                sink.note_server(&e.server_id)
                    .map_err(|e| anyhow!("recording the server: {e}"))?;
            }
            WireMessage::Row(r) => {
                rows.push(Change {
                    object: r.object,
                    op: ChangeOp::Insert,
                    key: r.key,
                    attrs: Some(r.attrs),
                    version: r.version,
                    prev_version: None,
                });
                bar.inc(1);
            }
            WireMessage::ChunkEnd(_) => flush(sink, &mut rows)?,
            WireMessage::BootstrapEnd(end) => {
                flush(sink, &mut rows)?;
                let next = end.lsn + 1;
                match sink.position_mode() {
                    PositionMode::InApply => sink.apply(
                        &[],
                        &Record {
                            watermark: Some(next),
                            ..Record::default()
                        },
                    ),
                    PositionMode::Separate => sink.store_position(next, &[], None),
                }
                .map_err(|e| anyhow!("storing the position after bootstrap: {e}"))?;
                bar.finish_with_message(format!("at LSN {}", end.lsn));
                return Ok(());
            }
            WireMessage::Error(e) => {
                bail!("the server ended the bootstrap: {}: {}", e.code, e.message)
            }
            other => bail!("unexpected line during bootstrap: {}", other.to_line()),
        }
    }
    bail!("the bootstrap ended before its last line")
}

enum Followed {
    CaughtUp,
    Rebootstrap,
}

/// Runs the agent until it fails, asks for a bootstrap, or (with
/// `--until-caught-up`) has applied everything committed when it started.
fn follow(
    server: &Arc<Server>,
    spec: &SinkSpec,
    args: &FollowArgs,
    mut agent: Agent,
    mut control: Box<dyn Sink + Send>,
    stats: &AgentStats,
) -> Result<Followed> {
    use std::sync::atomic::Ordering::Relaxed;
    // What each batch in flight holds: transactions and rows.
    let mut in_flight: std::collections::HashMap<BatchId, (u64, u64)> = Default::default();
    let started = Instant::now();
    let now = || started.elapsed().as_millis() as u64;
    let (events_tx, events) = mpsc::sync_channel::<Event>(EVENT_QUEUE);
    let mut workers: Vec<SyncSender<Job>> = Vec::new();
    let workers_n = if server.mode == Mode::Global {
        1
    } else {
        args.workers
    };
    for _ in 0..workers_n {
        let mut sink = spec
            .open(&args.name, args.state_dir.as_deref())
            .map_err(|e| anyhow!("opening the sink {spec}: {e}"))?;
        let (tx, rx) = mpsc::sync_channel::<Job>(1);
        let done = events_tx.clone();
        std::thread::Builder::new()
            .name("subscribe-worker".into())
            .spawn(move || {
                for job in rx {
                    let event = match sink.apply(&job.items, &job.record) {
                        Ok(()) => Event::Applied(job.batch),
                        Err(e) => Event::Failed(job.batch, e),
                    };
                    if done.send(event).is_err() {
                        return;
                    }
                }
            })?;
        workers.push(tx);
    }
    let caught_up_at = if args.until_caught_up {
        Some(head_lsn(server)?)
    } else {
        None
    };
    let gate: Gate = Arc::new((Mutex::new(true), Condvar::new()));
    let mut reader: Option<(Arc<AtomicBool>, JoinHandle<()>)> = None;
    let mut retry_at: Option<u64> = None;
    let mut connect_after: Option<(u64, u64, u64)> = None;
    let mut last_connect: Option<Instant> = None;
    // Whether the log already said the sink cannot tell origins apart.
    let mut told_cannot = false;
    let mut pending = agent.step(Input::Start { now_ms: now() });
    loop {
        // Effects in order, acknowledgements last.
        let mut acks = Vec::new();
        let mut more: Vec<Input> = Vec::new();
        for effect in pending.drain(..) {
            match effect {
                Effect::Apply {
                    batch,
                    worker,
                    items,
                    record,
                } => {
                    let txns = items.iter().filter(|i| matches!(i, Item::Txn(_))).count();
                    let rows: usize = items.iter().map(Item::rows).sum();
                    in_flight.insert(batch, (txns as u64, rows as u64));
                    workers[worker]
                        .send(Job {
                            batch,
                            items,
                            record,
                        })
                        .map_err(|_| anyhow!("a worker stopped"))?
                }
                Effect::StorePosition {
                    watermark,
                    applied_above,
                    schema,
                } => {
                    control
                        .store_position(watermark, &applied_above, schema)
                        .map_err(|e| anyhow!("storing the position: {e}"))?;
                    more.push(Input::PositionStored {
                        now_ms: now(),
                        watermark,
                    });
                }
                Effect::Ack { lsn } => acks.push(lsn),
                Effect::Connect { from_lsn, epoch } => {
                    if let Some((stop, handle)) = reader.take() {
                        stop.store(true, Ordering::Release);
                        drop(handle);
                    }
                    let wait = last_connect
                        .map(|t| RECONNECT_DELAY.saturating_sub(t.elapsed()))
                        .unwrap_or_default();
                    if wait.is_zero() {
                        last_connect = Some(Instant::now());
                        reader = Some(spawn_reader(server, from_lsn, epoch, &events_tx, &gate)?);
                    } else {
                        connect_after = Some((now() + wait.as_millis() as u64, from_lsn, epoch));
                    }
                }
                Effect::Pause { reading } => {
                    let (lock, cv) = &*gate;
                    *lock.lock().expect("gate") = reading;
                    cv.notify_all();
                }
                Effect::RetryAt { at_ms, .. } => {
                    retry_at = Some(retry_at.map_or(at_ms, |r| r.min(at_ms)));
                }
                Effect::DeadLetter {
                    lsn,
                    error,
                    attempts,
                } => {
                    eprintln!("subscriber {}: transaction at LSN {lsn} is dead-lettered after {attempts} attempts: {error}", args.name);
                    control
                        .store_dead_letter(lsn, &error, attempts)
                        .map_err(|e| anyhow!("storing a dead letter: {e}"))?;
                }
                Effect::DeadLetterCleared { lsn } => control
                    .clear_dead_letter(lsn)
                    .map_err(|e| anyhow!("clearing a dead letter: {e}"))?,
                Effect::CausalFallback { lsn, slots } => {
                    stats.fallbacks.fetch_add(1, Relaxed);
                    eprintln!(
                    "subscriber {}: transaction at LSN {lsn} waited past the causal timeout; applied in weak order for {} dependency slots",
                    args.name,
                    slots.len()
                )
                }
                Effect::CheckOrigins { lsn, origins } => {
                    if origins_applied(&*control, &args.name, lsn, &origins, &mut told_cannot) {
                        more.push(Input::OriginsApplied { now_ms: now(), lsn });
                    }
                }
                Effect::OriginFallback { lsn, origins } => {
                    stats.origin_fallbacks.fetch_add(1, Relaxed);
                    let list: Vec<String> = origins
                        .iter()
                        .map(|o| format!("{}:{}", o.server_id, o.lsn))
                        .collect();
                    eprintln!(
                        "subscriber {}: transaction at LSN {lsn} waited past the causal timeout for its origins ({}) and is applied without them",
                        args.name,
                        list.join(", ")
                    );
                }
                Effect::Bootstrap(BootstrapStep::Request) => return Ok(Followed::Rebootstrap),
                Effect::Fail { reason } => bail!("subscriber {} stopped: {reason}", args.name),
            }
        }
        for lsn in acks {
            if let Err(e) = server.ack(lsn) {
                eprintln!("subscriber {}: acknowledging LSN {lsn}: {e}", args.name);
            }
        }
        for input in more {
            pending.extend(agent.step(input));
        }
        if !pending.is_empty() {
            continue;
        }
        stats.watermark.store(agent.watermark(), Relaxed);
        stats.window.store(agent.window_len() as u64, Relaxed);
        stats
            .dead_letters
            .store(agent.dead_letters().len() as u64, Relaxed);
        stats.epoch.store(agent.epoch(), Relaxed);
        stats.debt_slots.store(agent.debt_slots() as u64, Relaxed);
        stats
            .origins_waiting
            .store(agent.origins_waiting() as u64, Relaxed);
        if let Some(target) = caught_up_at {
            if agent.durable_watermark() > target {
                return Ok(Followed::CaughtUp);
            }
        }
        let t = now();
        if let Some((at, from_lsn, epoch)) = connect_after {
            if t >= at {
                connect_after = None;
                last_connect = Some(Instant::now());
                reader = Some(spawn_reader(server, from_lsn, epoch, &events_tx, &gate)?);
            }
        }
        let wait = retry_at
            .map(|r| Duration::from_millis(r.saturating_sub(t)))
            .unwrap_or(TICK)
            .min(TICK);
        let input = match events.recv_timeout(wait) {
            Ok(Event::Line(line, bytes)) => {
                match &line {
                    WireMessage::Txn(t) if t.frame == 0 => {
                        stats.received_txns.fetch_add(1, Relaxed);
                        stats.head.fetch_max(t.lsn, Relaxed);
                    }
                    WireMessage::Progress(p) => {
                        stats.head.fetch_max(p.lsn, Relaxed);
                    }
                    _ => {}
                }
                if let WireMessage::Epoch(e) = &line {
                    control
                        .ensure_objects(&e.objects)
                        .map_err(|e| anyhow!("creating the sink's tables: {e}"))?;
                    control
                        .note_server(&e.server_id)
                        .map_err(|e| anyhow!("recording the server: {e}"))?;
                }
                Input::Received {
                    now_ms: now(),
                    line,
                    bytes,
                }
            }
            Ok(Event::End(reason)) => {
                // A request the server refuses as such (a mode stronger
                // than the publication's, a publication that does not
                // exist) will be refused again: stop and say why.
                if let StreamEnd::Error(e) = &reason {
                    if e.code.starts_with("22") || e.code.starts_with("42") {
                        bail!("the server refused the stream: {} ({})", e.message, e.code);
                    }
                }
                Input::Disconnected {
                    now_ms: now(),
                    reason,
                }
            }
            Ok(Event::Applied(batch)) => {
                if let Some((txns, rows)) = in_flight.remove(&batch) {
                    stats.applied_txns.fetch_add(txns, Relaxed);
                    stats.applied_rows.fetch_add(rows, Relaxed);
                }
                Input::Applied {
                    now_ms: now(),
                    batch,
                }
            }
            Ok(Event::Failed(batch, error)) => {
                in_flight.remove(&batch);
                stats.sink_errors.fetch_add(1, Relaxed);
                Input::SinkFailed {
                    now_ms: now(),
                    batch,
                    error,
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if retry_at.is_some_and(|r| r <= now()) {
                    retry_at = None;
                }
                Input::Tick { now_ms: now() }
            }
            Err(RecvTimeoutError::Disconnected) => bail!("the subscriber's threads stopped"),
        };
        pending = agent.step(input);
    }
}

/// Whether the sink holds every origin of the decorator's transaction at
/// `lsn` (§8), or cannot tell (then the agent does not wait, and says so
/// once). A failed check counts as not yet: the agent asks again.
fn origins_applied(
    sink: &dyn Sink,
    name: &str,
    lsn: u64,
    origins: &[aqueduct_publish::Origin],
    told_cannot: &mut bool,
) -> bool {
    for o in origins {
        match sink.origin_applied(&o.server_id, o.lsn) {
            Ok(Some(true)) => {}
            Ok(Some(false)) => return false,
            Ok(None) => {
                if !*told_cannot {
                    *told_cannot = true;
                    eprintln!(
                        "subscriber {name}: the sink cannot tell whether a decorator's origins are applied; transactions with origins are applied without waiting"
                    );
                }
                return true;
            }
            Err(e) => {
                eprintln!(
                    "subscriber {name}: checking the origins of the transaction at LSN {lsn}: {e}"
                );
                return false;
            }
        }
    }
    true
}

/// The first LSN the server committed at or after time `t`.
fn lsn_at(server: &Server, t: &str) -> Result<u64> {
    let mut query = String::new();
    for b in t.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            query.push(b as char);
        } else {
            query.push_str(&format!("%{b:02X}"));
        }
    }
    let r = server.request("GET", &format!("/v1/lsn?time={query}"), REQUEST_TIMEOUT)?;
    let mut body = r.body;
    let bytes = body.read_to_end(1 << 20)?;
    let j: serde_json::Value = serde_json::from_slice(&bytes).context("the server's answer")?;
    j.get("lsn")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| anyhow!("the server did not say which LSN"))
}

/// The server's last committed LSN, from its health page.
fn head_lsn(server: &Server) -> Result<u64> {
    let r = server.request("GET", "/health", REQUEST_TIMEOUT)?;
    let mut body = r.body;
    let bytes = body.read_to_end(1 << 20)?;
    let j: serde_json::Value = serde_json::from_slice(&bytes).context("the health page")?;
    j.get("lsn")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| anyhow!("the health page has no lsn"))
}

/// Reads the stream from `from_lsn` on a thread of its own.
fn spawn_reader(
    server: &Arc<Server>,
    from_lsn: u64,
    epoch: u64,
    events: &SyncSender<Event>,
    gate: &Gate,
) -> Result<(Arc<AtomicBool>, JoinHandle<()>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (server, events, gate, stopped) =
        (server.clone(), events.clone(), gate.clone(), stop.clone());
    let handle = std::thread::Builder::new()
        .name("subscribe-stream".into())
        .spawn(move || {
            let end = read_stream(&server, from_lsn, epoch, &events, &gate, &stopped);
            if !stopped.load(Ordering::Acquire) {
                let _ = events.send(Event::End(end));
            }
        })?;
    Ok((stop, handle))
}

fn read_stream(
    server: &Server,
    from_lsn: u64,
    epoch: u64,
    events: &SyncSender<Event>,
    gate: &Gate,
    stop: &AtomicBool,
) -> StreamEnd {
    let path = format!(
        "/v1/publications/{}/stream?subscriber={}&from_lsn={from_lsn}&mode={}&epoch={epoch}",
        server.publication, server.name, server.mode
    );
    let response = match server.request("GET", &path, REQUEST_TIMEOUT) {
        Ok(r) => r,
        Err(e) => {
            return match e.downcast_ref::<aqueduct_mirror::Error>() {
                Some(aqueduct_mirror::Error::Server { code, message }) => {
                    StreamEnd::Error(ErrorMessage {
                        code: code.clone(),
                        message: message.clone(),
                    })
                }
                _ => StreamEnd::Closed(e.to_string()),
            }
        }
    };
    let mut body = response.body;
    if let Err(e) = body.set_read_timeout(Some(STREAM_READ_TIMEOUT)) {
        return StreamEnd::Closed(e.to_string());
    }
    loop {
        if stop.load(Ordering::Acquire) {
            return StreamEnd::Closed("replaced by a new stream".into());
        }
        {
            let (lock, cv) = &**gate;
            let mut open = lock.lock().expect("gate");
            while !*open && !stop.load(Ordering::Acquire) {
                open = cv.wait_timeout(open, TICK).expect("gate").0;
            }
        }
        let line = match body.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => return StreamEnd::Closed("the server closed the stream".into()),
            Err(e) => return StreamEnd::Closed(e.to_string()),
        };
        if line.is_empty() {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            return StreamEnd::Closed("a line of the stream is not UTF-8".into());
        };
        match parse_line(text) {
            Ok(WireMessage::Error(e)) => return StreamEnd::Error(e),
            Ok(m) => {
                if events.send(Event::Line(m, line.len())).is_err() {
                    return StreamEnd::Closed("the agent stopped".into());
                }
            }
            Err(e) => return StreamEnd::Closed(e.to_string()),
        }
    }
}
