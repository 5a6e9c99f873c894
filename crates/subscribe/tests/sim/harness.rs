//! One simulated run: the source, the server's stream, the real agent,
//! workers finishing in random order, an in-memory sink, and faults.
//!
//! A real sink can run beside the in-memory one ([`Shadow`], [`run_with`]):
//! it gets every call the in-memory sink gets, the agent restarts from its
//! position after a crash, and at the end its rows must be the source's.
//! The sink crates include these files to run the checkers against their
//! sinks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use aqueduct_publish::{DepTracker, Mode, WireMessage};
use aqueduct_subscribe::{
    Agent, AgentConfig, BatchId, Effect, Input, Item, MemSink, Operator, PositionMode, Record,
    SchemaPos, Sink, SinkError, StreamEnd,
};
use serde_json::{Map, Value};

use super::checkers::{Checker, Violation};
use super::prng::Rng;
use super::server;
use super::workload;

/// Present rows as `(object, key text) -> (version, attrs)`, the shape of
/// `MemRows::present`.
pub type Present = BTreeMap<(String, String), (u64, Map<String, Value>)>;

/// A real sink driven beside the in-memory one.
pub trait Shadow {
    /// The sink.
    fn sink(&mut self) -> &mut dyn Sink;
    /// A crash: drop the sink and open it again from what it stored.
    fn reopen(&mut self);
    /// Its present rows; attributes stored as NULL are left out.
    fn present(&mut self) -> Present;
}

/// Planted defects, by where they live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planted {
    #[cfg(feature = "planted-bugs")]
    Tracker(aqueduct_publish::TrackerBug),
    #[cfg(feature = "planted-bugs")]
    Agent(aqueduct_subscribe::AgentBug),
    #[cfg(feature = "planted-bugs")]
    Sink(aqueduct_subscribe::SinkBug),
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub mode: Mode,
    pub transactional: bool,
    pub workers: usize,
    pub dep_slots: u32,
    pub txns: usize,
    pub users: u64,
    pub ddl: bool,
    pub batch_txns_max: usize,
    pub window_txns_max: usize,
    pub frame_changes: usize,
    pub causal_timeout_ms: Option<u64>,
    /// Per mille, per effect handled.
    pub crash: u64,
    /// Per mille, per line delivered.
    pub drop: u64,
    /// Transactions failing transiently this many times.
    pub transient: usize,
    pub transient_times: u32,
    /// Transactions failing permanently this many times (8 or more:
    /// dead-lettered, then retried by the operator).
    pub permanent: usize,
    pub permanent_times: u32,
    pub planted: Option<Planted>,
}

impl Scenario {
    pub fn new(mode: Mode) -> Scenario {
        Scenario {
            mode,
            transactional: mode != Mode::Weak,
            workers: 4,
            dep_slots: 1024,
            txns: 160,
            users: 6,
            ddl: true,
            batch_txns_max: 3,
            window_txns_max: 48,
            frame_changes: 2,
            causal_timeout_ms: None,
            crash: 4,
            drop: 4,
            transient: 3,
            transient_times: 3,
            permanent: 2,
            permanent_times: 9,
            planted: None,
        }
    }
}

pub struct Outcome {
    pub violations: Vec<Violation>,
    pub crashes: u32,
    pub reconnects: u32,
    pub dead_lettered: u32,
    pub fallbacks: u32,
}

struct Job {
    batch: BatchId,
    items: Vec<Item>,
    record: Record,
}

struct Run<'a> {
    sc: &'a Scenario,
    shadow: Option<&'a mut (dyn Shadow + 'a)>,
    rng: Rng,
    w: workload::Workload,
    sink: MemSink,
    checker: Checker,
    now: u64,
    faults: BTreeMap<u64, (SinkError, u32)>,
    agent: Agent,
    tracker: DepTracker,
    stream: Option<VecDeque<WireMessage>>,
    reading: bool,
    jobs: Vec<Job>,
    stores: Vec<(u64, Vec<u64>, Option<SchemaPos>)>,
    timers: BTreeSet<u64>,
    out: Outcome,
    failed: Option<String>,
}

fn config(sc: &Scenario) -> AgentConfig {
    let position = if sc.transactional {
        PositionMode::InApply
    } else {
        PositionMode::Separate
    };
    let mut c = AgentConfig::new(sc.mode, position);
    c.workers = sc.workers;
    c.causal_timeout_ms = sc.causal_timeout_ms;
    c.server_id = Some(server::SERVER_ID.into());
    c.batch_txns_max = sc.batch_txns_max;
    c.window_txns_max = sc.window_txns_max;
    c
}

impl Run<'_> {
    fn new_agent(&mut self) {
        let mut resume = self.sink.resume().expect("resume");
        if let Some(shadow) = self.shadow.as_deref_mut() {
            shadow.reopen();
            let real = shadow.sink().resume().expect("shadow resume");
            if real != resume {
                self.checker.violations.push(Violation {
                    checker: "shadow",
                    detail: format!("the sink resumes from {real:?}, the model from {resume:?}"),
                });
            }
            resume = real;
        }
        self.agent = Agent::new(config(self.sc), resume).expect("config");
        #[cfg(feature = "planted-bugs")]
        if let Some(Planted::Agent(bug)) = self.sc.planted {
            self.agent.plant(bug);
        }
        self.stream = None;
        self.jobs.clear();
        self.stores.clear();
        self.timers.clear();
        self.reading = true;
        self.step(Input::Start { now_ms: self.now });
    }

    /// Feeds an input and carries out its effects, maybe crashing between
    /// two of them.
    fn step(&mut self, input: Input) {
        let fx = self.agent.step(input);
        for e in fx {
            if self.rng.chance(self.sc.crash) {
                return self.crash();
            }
            self.effect(e);
            if self.failed.is_some() {
                return;
            }
        }
    }

    fn crash(&mut self) {
        self.out.crashes += 1;
        self.new_agent();
    }

    fn effect(&mut self, e: Effect) {
        match e {
            Effect::Apply {
                batch,
                items,
                record,
                ..
            } => self.jobs.push(Job {
                batch,
                items,
                record,
            }),
            Effect::StorePosition {
                watermark,
                applied_above,
                schema,
            } => self.stores.push((watermark, applied_above, schema)),
            Effect::Ack { lsn } => {
                if lsn >= self.sink.watermark {
                    self.checker.violations.push(Violation {
                        checker: "ack",
                        detail: format!("ack {lsn} with {} durable", self.sink.watermark),
                    });
                }
            }
            Effect::Connect { from_lsn, epoch } => {
                self.stream = Some(server::stream(
                    &self.w.txns,
                    from_lsn,
                    epoch,
                    &mut self.tracker,
                    self.sc.frame_changes,
                ));
                self.reading = true;
            }
            Effect::Pause { reading } => self.reading = reading,
            Effect::RetryAt { at_ms, .. } => {
                self.timers.insert(at_ms);
            }
            Effect::DeadLetter {
                lsn,
                error,
                attempts,
            } => {
                self.out.dead_lettered += 1;
                self.sink.store_dead_letter(lsn, &error, attempts).unwrap();
                if let Some(shadow) = self.shadow.as_deref_mut() {
                    shadow
                        .sink()
                        .store_dead_letter(lsn, &error, attempts)
                        .expect("shadow dead letter");
                }
            }
            Effect::DeadLetterCleared { lsn } => {
                self.sink.clear_dead_letter(lsn).unwrap();
                if let Some(shadow) = self.shadow.as_deref_mut() {
                    shadow
                        .sink()
                        .clear_dead_letter(lsn)
                        .expect("shadow dead letter cleared");
                }
            }
            Effect::CausalFallback { lsn, .. } => {
                self.out.fallbacks += 1;
                self.checker.on_fallback(lsn);
            }
            // The simulated workload has no decorators (origins are
            // tested in tests/origins.rs).
            Effect::CheckOrigins { .. } | Effect::OriginFallback { .. } => {}
            Effect::Bootstrap(_) => {}
            Effect::Fail { reason } => self.failed = Some(reason),
        }
    }

    fn finish_job(&mut self) {
        let i = self.rng.below(self.jobs.len() as u64) as usize;
        let job = self.jobs.swap_remove(i);
        let fault = job
            .items
            .iter()
            .map(Item::lsn)
            .find(|l| self.faults.get(l).is_some_and(|f| f.1 > 0));
        if let Some(l) = fault {
            let f = self.faults.get_mut(&l).expect("fault");
            f.1 -= 1;
            let error = f.0.clone();
            return self.step(Input::SinkFailed {
                now_ms: self.now,
                batch: job.batch,
                error,
            });
        }
        let checker = &mut self.checker;
        self.sink
            .apply_observed(&job.items, &job.record, |item, rows| {
                checker.before_item(item, rows)
            });
        self.checker.after_commit(&job.items, &self.sink);
        if let Some(shadow) = self.shadow.as_deref_mut() {
            if let Err(e) = shadow.sink().apply(&job.items, &job.record) {
                self.checker.violations.push(Violation {
                    checker: "shadow",
                    detail: format!("the sink refused {:?}: {e}", job.record.applied),
                });
            }
        }
        if self.rng.chance(self.sc.crash * 3) {
            return self.crash();
        }
        self.step(Input::Applied {
            now_ms: self.now,
            batch: job.batch,
        });
    }

    fn finish_store(&mut self) {
        let (watermark, applied_above, schema) = self.stores.remove(0);
        self.sink
            .store_position(watermark, &applied_above, schema)
            .expect("store");
        if let Some(shadow) = self.shadow.as_deref_mut() {
            shadow
                .sink()
                .store_position(watermark, &applied_above, schema)
                .expect("shadow store");
        }
        if self.rng.chance(self.sc.crash * 3) {
            return self.crash();
        }
        self.step(Input::PositionStored {
            now_ms: self.now,
            watermark,
        });
    }

    fn deliver(&mut self) {
        if self.rng.chance(self.sc.drop) {
            self.out.reconnects += 1;
            self.stream = None;
            return self.step(Input::Disconnected {
                now_ms: self.now,
                reason: StreamEnd::Closed("dropped".into()),
            });
        }
        let line = self.stream.as_mut().unwrap().pop_front().unwrap();
        // Through the wire and back.
        let text = line.to_line();
        let line = aqueduct_publish::parse_line(&text).expect("own line");
        if let WireMessage::Epoch(e) = &line {
            // The shell's duty on each stream's first line.
            self.sink
                .ensure_objects(&e.objects)
                .expect("ensure objects");
            if let Some(shadow) = self.shadow.as_deref_mut() {
                shadow
                    .sink()
                    .ensure_objects(&e.objects)
                    .expect("shadow ensure objects");
            }
        }
        self.step(Input::Received {
            now_ms: self.now,
            line,
            bytes: text.len(),
        });
    }
}

pub fn run(seed: u64, sc: &Scenario) -> Outcome {
    run_with(seed, sc, None)
}

/// [`run`] with a real sink beside the in-memory one.
pub fn run_with<'a>(
    seed: u64,
    sc: &'a Scenario,
    shadow: Option<&'a mut (dyn Shadow + 'a)>,
) -> Outcome {
    let mut rng = Rng::new(seed);
    let w = workload::generate(&mut rng, sc.txns, sc.users, sc.ddl);
    let mut faults = BTreeMap::new();
    let publishing: Vec<u64> = w
        .txns
        .iter()
        .filter(|t| t.publishes() && t.schema.is_none())
        .map(|t| t.lsn)
        .collect();
    for _ in 0..sc.transient {
        let l = *rng.pick(&publishing);
        faults.insert(
            l,
            (SinkError::transient("connection reset"), sc.transient_times),
        );
    }
    for _ in 0..sc.permanent {
        let l = *rng.pick(&publishing);
        faults.insert(
            l,
            (
                SinkError::permanent("23505 duplicate key"),
                sc.permanent_times,
            ),
        );
    }
    #[allow(unused_mut)]
    let mut sink = if sc.transactional {
        MemSink::transactional()
    } else {
        MemSink::guarded()
    };
    #[cfg(feature = "planted-bugs")]
    if let Some(Planted::Sink(bug)) = sc.planted {
        sink.plant(bug);
    }
    #[allow(unused_mut)]
    let mut tracker = DepTracker::new(sc.mode, sc.dep_slots);
    #[cfg(feature = "planted-bugs")]
    if let Some(Planted::Tracker(bug)) = sc.planted {
        tracker.plant(bug);
    }
    let checker = Checker::new(&w, sc.mode, sc.transactional);
    let agent = Agent::new(config(sc), sink.resume().unwrap()).expect("config");
    let mut r = Run {
        sc,
        shadow,
        rng,
        w,
        sink,
        checker,
        now: 0,
        faults,
        agent,
        tracker,
        stream: None,
        reading: true,
        jobs: Vec::new(),
        stores: Vec::new(),
        timers: BTreeSet::new(),
        out: Outcome {
            violations: Vec::new(),
            crashes: 0,
            reconnects: 0,
            dead_lettered: 0,
            fallbacks: 0,
        },
        failed: None,
    };
    r.new_agent();
    let mut idle_rounds = 0;
    for _ in 0..200_000 {
        if r.failed.is_some() {
            break;
        }
        let can_read = r.reading && r.stream.as_ref().is_some_and(|s| !s.is_empty());
        if !r.stores.is_empty() && r.rng.chance(300) {
            r.finish_store();
            continue;
        }
        let can_apply = !r.jobs.is_empty();
        let roll = r.rng.below(100);
        if can_read && (roll < 45 || !can_apply) {
            idle_rounds = 0;
            r.deliver();
        } else if can_apply && roll < 90 {
            idle_rounds = 0;
            r.finish_job();
        } else if can_read || can_apply {
            r.now += r.rng.below(400);
            r.step(Input::Tick { now_ms: r.now });
        } else {
            // Nothing to do but wait: the next timer, a timeout, the
            // operator, or the end.
            if !r.stores.is_empty() {
                r.finish_store();
                continue;
            }
            idle_rounds += 1;
            if let Some(&at) = r.timers.iter().next() {
                r.timers.remove(&at);
                r.now = r.now.max(at);
                r.step(Input::Tick { now_ms: r.now });
                continue;
            }
            let dead = r.agent.dead_letters();
            if !dead.is_empty() {
                for lsn in dead {
                    r.faults.remove(&lsn);
                    r.step(Input::Command {
                        now_ms: r.now,
                        cmd: Operator::RetryDeadLetter(lsn),
                    });
                }
                continue;
            }
            if idle_rounds > 3 {
                break;
            }
            // Let time pass: position stores, causal timeouts.
            r.now += sc.causal_timeout_ms.unwrap_or(0) + 2_000;
            r.step(Input::Tick { now_ms: r.now });
        }
    }
    if let Some(reason) = &r.failed {
        r.checker.violations.push(Violation {
            checker: "fail",
            detail: reason.clone(),
        });
    }
    let dead = r.agent.dead_letters();
    r.checker.finish(&r.w, &r.sink, &dead);
    if let Some(shadow) = r.shadow.as_deref_mut() {
        let real = shadow.present();
        if real != r.sink.rows.present() {
            r.checker.violations.push(Violation {
                checker: "shadow",
                detail: "the sink's rows differ from the model's".into(),
            });
        }
        if real != super::checkers::project(&r.w.last) {
            r.checker.violations.push(Violation {
                checker: "shadow",
                detail: "the sink's rows differ from the source at the last LSN".into(),
            });
        }
    }
    r.out.violations = std::mem::take(&mut r.checker.violations);
    r.out
}
