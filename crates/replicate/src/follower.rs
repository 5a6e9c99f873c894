//! The follower's shell: runs the catch-up core ([`crate::catchup`]) on a
//! thread of its own, fetching ranges of the log over HTTP
//! (`GET /v1/log`), appending them at the same LSNs
//! ([`aqueduct_log::Log::append_copied`]) and applying each batch with the
//! same code as a local commit and recovery
//! ([`aqueduct_tables::Database::apply_appended`]).
//!
//! Order: a response's records are durable (as the sync policy says)
//! before any of them is applied, so nothing a follower's reader saw is
//! lost by a crash of the follower; on restart the follower replays its
//! own log and asks for the next LSN.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aqueduct_log::{wire, Lsn, Record};
use aqueduct_mirror::http;
use aqueduct_tables::{BatchBuilder, Database};
use parking_lot::Mutex;

use crate::catchup::{CatchUp, Effect, Failure, Input};

/// How often a waiting follower looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Bounds connecting to a member.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bytes of a response read at most: the records one response carries at
/// most, and one batch of the largest size besides.
const MAX_RESPONSE_BYTES: usize =
    wire::MAX_WIRE_BYTES + aqueduct_log::MAX_BATCH_BYTES + wire::WIRE_HEADER_LEN;

/// What to follow.
#[derive(Clone, Debug)]
pub struct FollowConfig {
    /// `host:port` of each member's HTTP listener.
    pub members: Vec<String>,
    /// A bearer token mapping to a superuser on the members, when they
    /// require one.
    pub token: Option<String>,
    /// Picks the members (any value).
    pub seed: u64,
}

/// Where a follower is, for `/metrics` and status.
#[derive(Default)]
pub struct FollowStatus {
    /// The last LSN appended and applied here.
    pub applied: AtomicU64,
    /// The highest LSN a member said it had committed.
    pub source_committed: AtomicU64,
    /// Records the next request asks for.
    pub window: AtomicU64,
    pub requests: AtomicU64,
    pub failures: AtomicU64,
    pub records: AtomicU64,
    /// Set when the follower stopped because no member holds what it needs.
    pub stuck: Mutex<Option<String>>,
    /// The last failure, for status.
    pub last_error: Mutex<Option<String>>,
}

impl FollowStatus {
    /// Records the follower is behind the furthest member it heard of.
    pub fn lag(&self) -> u64 {
        self.source_committed
            .load(Ordering::Relaxed)
            .saturating_sub(self.applied.load(Ordering::Relaxed))
    }

    /// The state for `GET /v1/replication`: the members followed, how far
    /// they are, the lag and whether the follower is stuck.
    pub fn to_json(&self, members: &[String]) -> serde_json::Value {
        let g = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let stuck = self.stuck.lock().clone();
        serde_json::json!({
            "follows": members,
            "source_committed_lsn": g(&self.source_committed),
            "lag_records": self.lag(),
            "window_records": g(&self.window),
            "requests": g(&self.requests),
            "failures": g(&self.failures),
            "state": if stuck.is_some() { "stuck" } else { "following" },
            "stuck": stuck,
            "last_error": self.last_error.lock().clone(),
        })
    }

    /// Prometheus lines.
    pub fn metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let g = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP aqueduct_follower_applied_lsn Last LSN this follower appended and applied.\n\
             # TYPE aqueduct_follower_applied_lsn gauge\n\
             aqueduct_follower_applied_lsn {}\n\
             # HELP aqueduct_follower_source_lsn Highest LSN a followed member reported committed.\n\
             # TYPE aqueduct_follower_source_lsn gauge\n\
             aqueduct_follower_source_lsn {}\n\
             # HELP aqueduct_follower_lag_records Records this follower is behind.\n\
             # TYPE aqueduct_follower_lag_records gauge\n\
             aqueduct_follower_lag_records {}\n\
             # HELP aqueduct_follower_window_records Records the next catch-up request asks for.\n\
             # TYPE aqueduct_follower_window_records gauge\n\
             aqueduct_follower_window_records {}\n\
             # HELP aqueduct_follower_requests_total Catch-up requests sent.\n\
             # TYPE aqueduct_follower_requests_total counter\n\
             aqueduct_follower_requests_total {}\n\
             # HELP aqueduct_follower_failures_total Catch-up requests that failed.\n\
             # TYPE aqueduct_follower_failures_total counter\n\
             aqueduct_follower_failures_total {}\n\
             # HELP aqueduct_follower_records_total Records copied from members.\n\
             # TYPE aqueduct_follower_records_total counter\n\
             aqueduct_follower_records_total {}\n\
             # HELP aqueduct_follower_stuck 1 when no member holds the records this follower needs.\n\
             # TYPE aqueduct_follower_stuck gauge\n\
             aqueduct_follower_stuck {}",
            g(&self.applied),
            g(&self.source_committed),
            self.lag(),
            g(&self.window),
            g(&self.requests),
            g(&self.failures),
            g(&self.records),
            u8::from(self.stuck.lock().is_some()),
        );
    }
}

/// Starts following on a thread of its own; it stops when `stop` is set.
/// The database takes no write of its own from now on.
pub fn spawn(
    db: Arc<Database>,
    config: FollowConfig,
    status: Arc<FollowStatus>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    db.set_read_only(Some(format!(
        "it follows {} (a read-only follower)",
        config.members.join(", ")
    )));
    std::thread::Builder::new()
        .name("aqueduct-follower".into())
        .spawn(move || {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(&db, &config, &status, &stop)
            }));
            if let Err(panic) = ran {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "the follower panicked".into());
                tracing::error!("the follower stopped: {why}");
                *status.stuck.lock() = Some(why);
            }
        })
}

fn run(db: &Database, config: &FollowConfig, status: &FollowStatus, stop: &AtomicBool) {
    let next = db.log().next_lsn();
    status.applied.store(next - 1, Ordering::Relaxed);
    let mut core = CatchUp::new(config.members.len(), next, config.seed);
    // A new follower copies the log as the members' compaction left it.
    let mut bootstrap = (next == 1).then(|| Bootstrap {
        id: format!("{:016x}", config.seed ^ 0x5DEE_CE66_D1CE_5EED),
        released: false,
    });
    let mut effects = core.step(Input::Tick, Instant::now());
    let mut healthy = true;
    let mut progress = Progress::new(status);
    while !stop.load(Ordering::Relaxed) {
        status.window.store(core.window() as u64, Ordering::Relaxed);
        let input = match effects.pop() {
            None => Input::Tick,
            Some(Effect::Wait { until }) => {
                sleep_until(until, stop);
                Input::Tick
            }
            Some(Effect::Stuck { from, why }) => {
                tracing::error!(
                    "the follower stopped at LSN {from}: {why}; start it anew from a snapshot"
                );
                *status.stuck.lock() = Some(why);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(STOP_POLL);
                }
                return;
            }
            Some(Effect::Fetch {
                id,
                member,
                from,
                max_records,
                long_poll,
                deadline,
            }) => {
                status.requests.fetch_add(1, Ordering::Relaxed);
                let addr = &config.members[member];
                let hold = bootstrap.as_ref().map(|b| b.id.clone());
                match fetch(
                    addr,
                    config,
                    from,
                    max_records,
                    long_poll,
                    deadline,
                    hold.as_deref(),
                )
                .and_then(|(records, sender)| {
                    if let Some(b) = &bootstrap {
                        b.before(db, from, &records, sender)?;
                    }
                    apply(db, &records)?;
                    if let Some(b) = &mut bootstrap {
                        b.after(&mut core, member, &records);
                    }
                    Ok((records, sender.committed))
                }) {
                    Ok((records, committed)) => {
                        if bootstrap.as_ref().is_some_and(|b| b.released) {
                            tracing::info!(
                                "the follower copied the log to its end; it follows any member now"
                            );
                            bootstrap = None;
                            core.pin(None);
                        }
                        if !healthy {
                            tracing::info!("the follower reached {addr} again");
                            healthy = true;
                        }
                        let last = records.last().map(|r| r.lsn);
                        if let Some(last) = last {
                            status.applied.store(last, Ordering::Relaxed);
                        }
                        status
                            .records
                            .fetch_add(records.len() as u64, Ordering::Relaxed);
                        progress.report(status, Instant::now());
                        status
                            .source_committed
                            .fetch_max(committed, Ordering::Relaxed);
                        Input::Fetched {
                            id,
                            records: records.len(),
                            last,
                            committed,
                        }
                    }
                    Err(failure) => {
                        // Part of a response may be in the log already (an
                        // append or a sync failed half way): apply it, and
                        // ask from where the log ends.
                        match apply_unapplied(db) {
                            Ok(()) => {
                                status.applied.store(db.applied_lsn(), Ordering::Relaxed);
                                core.resume_at(db.log().next_lsn());
                            }
                            Err(e) => {
                                tracing::error!(
                                    "the follower cannot apply what its log holds: {e:?}"
                                );
                                *status.stuck.lock() = Some(format!("{e:?}"));
                                return;
                            }
                        }
                        status.failures.fetch_add(1, Ordering::Relaxed);
                        let text = format!("{addr}: {failure:?}");
                        if healthy {
                            tracing::warn!("the follower could not catch up from {text}");
                            healthy = false;
                        }
                        *status.last_error.lock() = Some(text);
                        Input::Failed { id, failure }
                    }
                }
            }
        };
        effects = core.step(input, Instant::now());
    }
}

/// How often a follower far behind says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The follower's progress in its log while it is far behind: a line every
/// [`PROGRESS_EVERY`] with the records copied, the rate and the time left.
struct Progress {
    at: Instant,
    records: u64,
}

impl Progress {
    fn new(status: &FollowStatus) -> Progress {
        Progress {
            at: Instant::now(),
            records: status.records.load(Ordering::Relaxed),
        }
    }

    fn report(&mut self, status: &FollowStatus, now: Instant) {
        let elapsed = now.duration_since(self.at);
        if elapsed < PROGRESS_EVERY {
            return;
        }
        let records = status.records.load(Ordering::Relaxed);
        let rate = (records - self.records) as f64 / elapsed.as_secs_f64();
        let lag = status.lag();
        if lag > 0 {
            tracing::info!(
                "catching up: at LSN {} of {}, {rate:.0} records/s, about {:.0} s left",
                status.applied.load(Ordering::Relaxed),
                status.source_committed.load(Ordering::Relaxed),
                lag as f64 / rate.max(1.0)
            );
        }
        self.at = now;
        self.records = records;
    }
}

fn sleep_until(until: Instant, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(STOP_POLL));
    }
}

/// A new follower's copy of a member's log (compacted or not), until it
/// reaches the end of it.
struct Bootstrap {
    /// Names the member's hold.
    id: String,
    /// A response found no record past the follower: the member dropped
    /// its hold.
    released: bool,
}

impl Bootstrap {
    /// Before a response to a request from `from` is appended: a body with
    /// gaps (records the member's compaction dropped) is recorded as such
    /// in the follower's log first, so a crash between the two never
    /// leaves a gapped log that claims to be whole.
    fn before(
        &self,
        db: &Database,
        from: Lsn,
        records: &[Record],
        sender: wire::Sender,
    ) -> Result<(), Failure> {
        let mut expected = from;
        let gapped = records.iter().any(|r| {
            let gap = r.lsn != expected;
            expected = r.lsn + 1;
            gap
        });
        if gapped {
            db.log()
                .note_compacted_until(sender.exact_from)
                .map_err(|e| Failure::Bad(format!("noting the copied log's exact point: {e}")))?;
        }
        Ok(())
    }

    /// After the response from `member` is applied: the member holds its
    /// compaction for this follower, so only it is asked until the end.
    fn after(&mut self, core: &mut CatchUp, member: usize, records: &[Record]) {
        core.pin(Some(member));
        self.released = records.is_empty();
    }
}

/// One request: the records from `from`, decoded and checked.
#[allow(clippy::too_many_arguments)]
fn fetch(
    addr: &str,
    config: &FollowConfig,
    from: Lsn,
    max_records: usize,
    long_poll: Duration,
    deadline: Instant,
    bootstrap: Option<&str>,
) -> Result<(Vec<Record>, wire::Sender), Failure> {
    let mut path = format!(
        "/v1/log?from_lsn={from}&max_records={max_records}&wait_ms={}",
        long_poll.as_millis()
    );
    if let Some(id) = bootstrap {
        path.push_str(&format!("&bootstrap={id}"));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let mut response = http::request(
        addr,
        "GET",
        &path,
        config.token.as_deref(),
        None,
        CONNECT_TIMEOUT.min(left).max(Duration::from_millis(1)),
    )
    .map_err(|e| match e {
        aqueduct_mirror::Error::Connect { source, .. } | aqueduct_mirror::Error::Io(source) => {
            io_failure(&source)
        }
        e => Failure::Unreachable(e.to_string()),
    })?;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Failure::Timeout);
    }
    response
        .body
        .set_read_timeout(Some(left))
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    match response.status {
        200 => {}
        410 => return Err(Failure::Compacted),
        status => {
            let e = http::error_of(status, &mut response.body);
            return Err(Failure::Unreachable(e.to_string()));
        }
    }
    let body = response
        .body
        .read_all(MAX_RESPONSE_BYTES)
        .map_err(|e| io_failure(&e))?;
    wire::decode(&body, from).map_err(Failure::Bad)
}

fn io_failure(e: &std::io::Error) -> Failure {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Failure::Timeout,
        _ => Failure::Unreachable(e.to_string()),
    }
}

/// Applies the batches the log holds past what the tables show (appended
/// by a response that failed before it was applied).
fn apply_unapplied(db: &Database) -> Result<(), Failure> {
    let log = db.log();
    if db.applied_lsn() + 1 >= log.next_lsn() {
        return Ok(());
    }
    // Durable first: then every appended record is visible to the reader.
    log.sync()
        .map_err(|e| Failure::Bad(format!("syncing what was appended: {e}")))?;
    let mut reader = log.reader(db.applied_lsn() + 1);
    let mut batches = BatchBuilder::default();
    loop {
        let records = reader
            .next_batch(4096)
            .map_err(|e| Failure::Bad(format!("reading back the log: {e}")))?;
        if records.is_empty() {
            return Ok(());
        }
        for r in &records {
            if let Some(batch) = batches.push(&r.view()).map_err(Failure::Bad)? {
                db.apply_appended(batch);
            }
        }
    }
}

/// Appends `records` (whole batches, from the log's next LSN) and applies
/// each batch.
fn apply(db: &Database, records: &[Record]) -> Result<(), Failure> {
    if records.is_empty() {
        return Ok(());
    }
    let mut batches = BatchBuilder::default();
    let mut complete = Vec::new();
    for r in records {
        if let Some(batch) = batches.push(&r.view()).map_err(Failure::Bad)? {
            complete.push(batch);
        }
    }
    db.log()
        .append_copied(records)
        .map_err(|e| Failure::Bad(format!("appending the records here: {e}")))?;
    for batch in complete {
        db.apply_appended(batch);
    }
    Ok(())
}
