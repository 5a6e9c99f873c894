//! `aqueduct subscribe`'s following: the subscriber agent's shell
//! (`docs/publications.md`, section 5). The agent's core
//! (`aqueduct_subscribe::Agent`) decides; this shell does what it says:
//! it reads the server's stream on a thread of its own, applies batches
//! on worker threads (each with its own sink connection), stores
//! positions and dead letters, acknowledges to the server, and passes
//! time in. A new subscriber is bootstrapped first: the publication's
//! tables at one LSN, then the stream from the next.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aqueduct_mirror::http;
use aqueduct_publish::{
    parse_line, BootstrapAnswer, Change, ChangeOp, ErrorMessage, Mode, SchemaChange, TxnMessage,
    WireMessage,
};
use aqueduct_sinks::SinkSpec;

use super::metrics::AgentStats;
use super::FollowArgs;
use aqueduct_subscribe::{
    Agent, AgentConfig, BatchId, BootstrapStep, Effect, Input, Item, Origin, PositionMode, Record,
    Sink, SinkError, StreamEnd,
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
    /// What the next stream request adds about a bootstrap just done
    /// (`&bootstrapped_at=S` or `&bootstrap_until=H`), or nothing.
    boot_mark: Mutex<String>,
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
        boot_mark: Mutex::new(String::new()),
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
    let boot = Boot {
        server: &server,
        spec: &spec,
        args,
        stats: &stats,
    };
    // Forgets the copy and bootstraps it whole: a crash part way through
    // a bootstrap leaves a copy that is reset and bootstrapped again.
    let fresh = |control: &mut dyn Sink| -> Result<()> {
        control
            .reset()
            .map_err(|e| anyhow!("clearing the sink before bootstrapping: {e}"))?;
        bootstrap(&boot, control, None).map(drop)
    };
    let mut rebootstrap = args.rebootstrap;
    let mut reload = args.rebootstrap_table.clone();
    let mut skips: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let mut control = open(&spec)?;
        config.position = control.position_mode();
        config.validate().map_err(|e| anyhow!("{e}"))?;
        if rebootstrap {
            rebootstrap = false;
            fresh(control.as_mut())?;
        }
        let mut resume = control
            .resume()
            .map_err(|e| anyhow!("reading the sink's position: {e}"))?;
        if resume.watermark > 0 {
            check_server(&server, control.as_mut(), None)?;
        }
        if resume.watermark == 0 && resume.applied_above.is_empty() && replay_from.is_none() {
            fresh(control.as_mut())?;
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
        for table in std::mem::take(&mut reload) {
            // Re-bootstrap of one object: its rows (or those matching the
            // condition) go, and it is loaded alone from a new snapshot
            // at S'. Cleared whole, its changes up to S' are in the
            // snapshot and the stream skips them; cleared by a condition,
            // rows outside it still need the stream's deletes up to S'
            // (the guard skips the older versions of the rest).
            let filter = args.rebootstrap_where.as_deref();
            control
                .clear_object(&table, filter)
                .map_err(|e| anyhow!("clearing {table} in the sink: {e}"))?;
            let at = bootstrap(&boot, control.as_mut(), Some(std::slice::from_ref(&table)))?;
            eprintln!(
                "subscriber {}: {table} bootstrapped again at LSN {at}",
                args.name
            );
            if filter.is_none() {
                skips.insert(table, at);
            }
        }
        let agent = Agent::new(config.clone(), resume).map_err(|e| anyhow!("{e}"))?;
        match follow(&server, &spec, args, agent, control, &stats, &skips)? {
            Followed::CaughtUp => return Ok(()),
            Followed::Added(objects) => {
                let mut control = open(&spec)?;
                let at = bootstrap(&boot, control.as_mut(), Some(&objects))?;
                eprintln!(
                    "subscriber {}: {} added to the publication, bootstrapped at LSN {at}",
                    args.name,
                    objects.join(", ")
                );
                for o in objects {
                    skips.insert(o, at);
                }
            }
            Followed::Rebootstrap => {
                eprintln!(
                    "subscriber {}: the server no longer has the stream from its position; bootstrapping again",
                    args.name
                );
                let mut control = open(&spec)?;
                check_server(&server, control.as_mut(), None)?;
                fresh(control.as_mut())?;
            }
        }
    }
}

/// Refuses to go on when the server's id (`seen`, from an `epoch` line,
/// or else asked of the server) is not the one the sink's copy came from:
/// the server's data was wiped or another server answers at its address,
/// and the copy's position means nothing there. A sink with no id stored
/// (bootstrapped by an older agent) takes the server's.
fn check_server(server: &Server, sink: &mut dyn Sink, seen: Option<&str>) -> Result<()> {
    let mut origin = sink
        .origin()
        .map_err(|e| anyhow!("reading the sink's origin: {e}"))?;
    let now = match seen {
        Some(id) => id.to_string(),
        None => health(server)?.1,
    };
    match &origin.server_id {
        Some(id) if *id == now => Ok(()),
        Some(id) => bail!(
            "subscriber {}: the sink's copy was bootstrapped from server {id}, but the server at {} is now server {now}: \
             its data directory was wiped or replaced, or another server answers at that address, so the copy's \
             position means nothing there and following it would mix two histories. Nothing was changed. To clear the \
             copy and bootstrap it from this server, run the agent again with --rebootstrap; to keep following the \
             original server, point --from at it.",
            server.name,
            server.addr
        ),
        None => {
            origin.server_id = Some(now);
            sink.set_origin(&origin)
                .map_err(|e| anyhow!("recording the server's id in the sink: {e}"))
        }
    }
}

/// Attempts at fetching and applying one bootstrap chunk.
const CHUNK_ATTEMPTS: u32 = 3;

/// What a bootstrap loads and where.
struct Boot<'a> {
    server: &'a Server,
    spec: &'a SinkSpec,
    args: &'a FollowArgs,
    stats: &'a AgentStats,
}

/// Copies the publication's tables at one LSN `S` into the sink (or,
/// with `objects`, those objects only: a partial bootstrap that leaves
/// the position alone) and, for a whole bootstrap, sets its position to
/// `S + 1` and records the origin. The server answers with the snapshot's
/// chunks; up to `--workers` are fetched and applied in parallel, each
/// as one sink transaction, each worker on its own sink connection.
/// Returns `S`.
fn bootstrap(boot: &Boot<'_>, sink: &mut dyn Sink, objects: Option<&[String]>) -> Result<u64> {
    use std::sync::atomic::AtomicUsize;
    let server = boot.server;
    let mut path = format!(
        "/v1/publications/{}/bootstrap?subscriber={}&mode={}",
        server.publication, server.name, server.mode
    );
    if let Some(o) = objects {
        path.push_str(&format!("&objects={}", o.join(",")));
    }
    if let Some(n) = boot.args.bootstrap_chunk_rows {
        path.push_str(&format!("&chunk_rows={n}"));
    }
    let r = server.request("POST", &path, REQUEST_TIMEOUT)?;
    let mut body = r.body;
    let answer: BootstrapAnswer = serde_json::from_slice(&body.read_to_end(64 << 20)?)
        .context("the server's answer to a bootstrap request")?;
    sink.ensure_objects(&answer.objects)
        .map_err(|e| anyhow!("creating the sink's tables: {e}"))?;
    // Other subscriptions in the sink find this one by its server
    // (decorations waiting for their origins, `Sink::origin_applied`).
    sink.note_server(&answer.server_id)
        .map_err(|e| anyhow!("recording the server: {e}"))?;
    boot.stats.bootstrapping.store(1, Ordering::Relaxed);
    let total: u64 = answer.chunks.iter().map(|c| c.rows).sum();
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "bootstrap at LSN {msg}: [{bar:30}] {pos}/{len} rows ({per_sec}, {eta} left)",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(answer.lsn.to_string());
    // Message sinks hand rows on in order, so they take chunks one at a
    // time; storing sinks in parallel.
    let workers = match sink.position_mode() {
        PositionMode::Separate => 1,
        PositionMode::InApply => boot.args.workers.max(1),
    }
    .min(answer.chunks.len().max(1));
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let work = || -> Result<()> {
                    let mut sink = boot
                        .spec
                        .open(&boot.args.name, boot.args.state_dir.as_deref())
                        .map_err(|e| anyhow!("opening the sink {}: {e}", boot.spec))?;
                    loop {
                        if failed.lock().expect("failed").is_some() {
                            return Ok(());
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(chunk) = answer.chunks.get(i) else {
                            return Ok(());
                        };
                        let mut attempt = 1;
                        let rows = loop {
                            match load_chunk(server, &answer.boot_id, chunk.chunk, sink.as_mut()) {
                                Ok(rows) => break rows,
                                Err(e) if attempt >= CHUNK_ATTEMPTS => {
                                    return Err(e.context(format!(
                                        "bootstrap chunk {} ({})",
                                        chunk.chunk, chunk.object
                                    )))
                                }
                                Err(_) => attempt += 1,
                            }
                        };
                        boot.stats.bootstrap_rows.fetch_add(rows, Ordering::Relaxed);
                        bar.inc(chunk.rows);
                    }
                };
                if let Err(e) = work() {
                    failed.lock().expect("failed").get_or_insert(e);
                }
            });
        }
    });
    let release = format!(
        "/v1/publications/{}/bootstrap/{}",
        server.publication, answer.boot_id
    );
    let _ = server.request("DELETE", &release, REQUEST_TIMEOUT);
    if let Some(e) = failed.into_inner().expect("failed") {
        bar.abandon();
        return Err(e);
    }
    if objects.is_none() {
        let next = answer.lsn + 1;
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
        sink.set_origin(&Origin {
            server_id: Some(answer.server_id.clone()),
            boot_lsn: Some(answer.lsn),
            sync_lsn: None,
        })
        .map_err(|e| anyhow!("recording the bootstrap in the sink: {e}"))?;
    }
    bar.finish();
    Ok(answer.lsn)
}

/// Fetches chunk `n` of bootstrap `id` and applies it as one sink
/// transaction; returns its rows.
fn load_chunk(server: &Server, id: &str, n: u32, sink: &mut dyn Sink) -> Result<u64> {
    let path = format!(
        "/v1/publications/{}/bootstrap/{id}/chunks/{n}",
        server.publication
    );
    let r = server.request("GET", &path, REQUEST_TIMEOUT)?;
    let mut body = r.body;
    body.set_read_timeout(Some(STREAM_READ_TIMEOUT))?;
    let mut rows: Vec<Change> = Vec::new();
    while let Some(line) = body.next_line()? {
        if line.is_empty() {
            continue;
        }
        let text = std::str::from_utf8(&line).context("a bootstrap line is not UTF-8")?;
        match parse_line(text).map_err(|e| anyhow!("{e}"))? {
            WireMessage::Row(r) => rows.push(Change {
                object: r.object,
                op: ChangeOp::Insert,
                key: r.key,
                attrs: Some(r.attrs),
                version: r.version,
                prev_version: None,
            }),
            WireMessage::ChunkEnd(end) => {
                if end.rows != rows.len() as u64 {
                    bail!(
                        "chunk {n} ended after {} rows, saying {}",
                        rows.len(),
                        end.rows
                    );
                }
                let count = rows.len() as u64;
                if rows.is_empty() {
                    return Ok(0);
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
                    changes: rows,
                    origin: None,
                };
                sink.apply(&[Item::Txn(Arc::new(txn))], &Record::default())
                    .map_err(|e| anyhow!("applying bootstrap chunk {n}: {e}"))?;
                return Ok(count);
            }
            WireMessage::Error(e) => {
                bail!(
                    "the server ended bootstrap chunk {n}: {}: {}",
                    e.code,
                    e.message
                )
            }
            other => bail!("unexpected line in a bootstrap chunk: {}", other.to_line()),
        }
    }
    bail!("bootstrap chunk {n} ended before its last line")
}

enum Followed {
    CaughtUp,
    Rebootstrap,
    /// The publication gained these objects: bootstrap them alone.
    Added(Vec<String>),
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
    skips: &BTreeMap<String, u64>,
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
    // A copy just bootstrapped reports "in sync" once it has applied past
    // the head its first stream after the bootstrap was given.
    let mut origin = control
        .origin()
        .map_err(|e| anyhow!("reading the sink's origin: {e}"))?;
    let replaying = args.from_lsn.is_some() || args.from_time.is_some();
    let mut in_sync = replaying || !origin.bootstrapping(agent.watermark());
    *server.boot_mark.lock().expect("mark") = match (in_sync, origin.boot_lsn, origin.sync_lsn) {
        (false, _, Some(h)) => format!("&bootstrap_until={h}"),
        (false, Some(s), None) => format!("&bootstrapped_at={s}"),
        _ => String::new(),
    };
    stats.bootstrapping.store(u64::from(!in_sync), Relaxed);
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
        if !in_sync && origin.sync_lsn.is_some() && !origin.bootstrapping(agent.durable_watermark())
        {
            in_sync = true;
            server.boot_mark.lock().expect("mark").clear();
            stats.bootstrapping.store(0, Relaxed);
            eprintln!(
                "subscriber {}: in sync (applied past LSN {} after the bootstrap at LSN {})",
                args.name,
                origin.sync_lsn.unwrap_or(0),
                origin.boot_lsn.unwrap_or(0)
            );
        }
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
            Ok(Event::Line(mut line, bytes)) => {
                match &mut line {
                    // An object bootstrapped alone at S' has its changes
                    // up to S' in the snapshot already.
                    WireMessage::Txn(t) if !skips.is_empty() => t
                        .changes
                        .retain(|c| skips.get(&c.object).is_none_or(|s| c.version > *s)),
                    // An object added to the publication: before the
                    // addition is applied (so before it can be durable),
                    // the object is bootstrapped alone at S' >= its LSN;
                    // the stream after that passes the addition on.
                    WireMessage::Schema(m) => {
                        if let SchemaChange::AddObject { object, .. } = &m.change {
                            if skips.get(object).is_none_or(|s| *s < m.lsn) {
                                return Ok(Followed::Added(vec![object.clone()]));
                            }
                        }
                    }
                    _ => {}
                }
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
                    check_server(server, control.as_mut(), Some(&e.server_id))?;
                    origin.server_id = Some(e.server_id.clone());
                    control
                        .ensure_objects(&e.objects)
                        .map_err(|e| anyhow!("creating the sink's tables: {e}"))?;
                    if let (false, None, Some(h)) = (in_sync, origin.sync_lsn, e.bootstrap_until) {
                        origin.sync_lsn = Some(h);
                        control
                            .set_origin(&origin)
                            .map_err(|e| anyhow!("recording the bootstrap in the sink: {e}"))?;
                        *server.boot_mark.lock().expect("mark") = format!("&bootstrap_until={h}");
                    }
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
    health(server).map(|h| h.0)
}

/// The server's last committed LSN and its id, from its health page.
fn health(server: &Server) -> Result<(u64, String)> {
    let r = server.request("GET", "/health", REQUEST_TIMEOUT)?;
    let mut body = r.body;
    let bytes = body.read_to_end(1 << 20)?;
    let j: serde_json::Value = serde_json::from_slice(&bytes).context("the health page")?;
    let lsn = j
        .get("lsn")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| anyhow!("the health page has no lsn"))?;
    let id = j.get("server_id").and_then(|v| v.as_str()).ok_or_else(|| {
        anyhow!("the health page has no server_id (a server older than this agent)")
    })?;
    Ok((lsn, id.to_string()))
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
        "/v1/publications/{}/stream?subscriber={}&from_lsn={from_lsn}&mode={}&epoch={epoch}{}",
        server.publication,
        server.name,
        server.mode,
        server.boot_mark.lock().expect("mark")
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
