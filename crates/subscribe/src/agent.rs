//! The agent: a pure state machine, `step(input) -> effects`
//! (`docs/publications.md` §5). It assembles the stream into a window,
//! decides what is applicable, packs batches for idle workers, retries and
//! dead-letters failures, keeps the watermark, and says when to store the
//! position and acknowledge.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use aqueduct_publish::{
    valid_dep_slots, EpochMessage, ErrorMessage, Lsn, Mode, SchemaMessage, TxnMessage, WireMessage,
};

use crate::batch::{BatchId, Item, Record, Resume, SchemaPos};
use crate::io::{AgentConfig, BootstrapStep, Effect, Input, Operator, StreamEnd};
use crate::limits::{DEAD_LETTER_ATTEMPTS, ORIGIN_RECHECK_MS};
use crate::retry::backoff_ms;
use crate::scheduler::Counters;
use crate::sink::{ErrorClass, PositionMode, SinkError};
use crate::watermark::Positions;
use crate::window::{Content, Entry, Key, State, Window, TXN_SUB};

/// A deliberate defect of the agent, for showing that the simulator's
/// checkers catch it. Exists only with the `planted-bugs` feature.
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentBug {
    /// The position is stored after the sink commit instead of in it
    /// (`docs/publications.md` §10 item 1).
    PositionAfterCommit,
    /// A new epoch keeps the old epoch's counters (item 6).
    EpochNotReset,
    /// Fallback debt is never paid (item 8).
    DebtNotPaid,
    /// Schema messages are not barriers (item 9).
    SchemaBarrierIgnored,
    /// A decorator's transaction does not wait for its origins (§8).
    OriginIgnored,
}

/// Where the agent is with its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not started.
    Idle,
    /// Asked to connect; waits for the `epoch` line.
    Connecting,
    /// Following the stream.
    Streaming,
    /// The stream ended; waits for batches in flight before reconnecting.
    Reconnecting,
    /// Stopped until an operator acts.
    Failed,
}

#[derive(Debug)]
struct Batch {
    worker: usize,
    keys: Vec<Key>,
    /// The watermark stored with it.
    store: Option<Lsn>,
}

/// The subscriber's core. See the module documentation.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    phase: Phase,
    epoch: u64,
    /// Where the current stream starts.
    from_lsn: Lsn,
    window: Window,
    counters: Counters,
    ready: BTreeSet<Key>,
    retries: BTreeSet<(u64, Key)>,
    waiting: BTreeSet<(u64, Key)>,
    /// Transactions waiting for their origins (§8): since when, and when
    /// the sink was last asked.
    origin_wait: BTreeMap<Key, (u64, Option<u64>)>,
    batches: BTreeMap<BatchId, Batch>,
    next_batch: BatchId,
    busy: Vec<bool>,
    positions: Positions,
    dead: BTreeMap<Lsn, u32>,
    /// Dead letters the operator released, cleared once applied.
    released: BTreeSet<Lsn>,
    /// Dead letters to skip when they arrive.
    skip_on_arrival: BTreeSet<Lsn>,
    paused: bool,
    last_key: Option<Key>,
    #[cfg(feature = "planted-bugs")]
    bug: Option<AgentBug>,
}

impl Agent {
    /// An agent resuming from what the sink holds. Refuses settings
    /// outside the limits.
    pub fn new(config: AgentConfig, resume: Resume) -> Result<Agent, String> {
        config.validate()?;
        let workers = config.effective_workers();
        // Schema messages are barriers: everything before the last one
        // applied is applied, whatever the stored watermark says.
        let start = resume
            .schema
            .map_or(resume.watermark, |s| s.lsn.max(resume.watermark));
        Ok(Agent {
            phase: Phase::Idle,
            epoch: 0,
            from_lsn: start,
            window: Window::default(),
            counters: Counters::default(),
            ready: BTreeSet::new(),
            retries: BTreeSet::new(),
            waiting: BTreeSet::new(),
            origin_wait: BTreeMap::new(),
            batches: BTreeMap::new(),
            next_batch: 0,
            busy: vec![false; workers],
            positions: Positions::new(
                start,
                resume.watermark,
                &resume.applied_above,
                resume.schema,
            ),
            dead: resume.dead_letters.iter().copied().collect(),
            released: BTreeSet::new(),
            skip_on_arrival: BTreeSet::new(),
            paused: false,
            last_key: None,
            config,
            #[cfg(feature = "planted-bugs")]
            bug: None,
        })
    }

    /// Plants a defect (tests of the checkers only).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: AgentBug) {
        self.bug = Some(bug);
        self.counters.keep_debts = bug == AgentBug::DebtNotPaid;
        self.counters.keep_on_epoch = bug == AgentBug::EpochNotReset;
    }

    fn planted(&self, _bug: &str) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            let name = match self.bug {
                Some(AgentBug::PositionAfterCommit) => "position-after-commit",
                Some(AgentBug::SchemaBarrierIgnored) => "schema-barrier-ignored",
                Some(AgentBug::OriginIgnored) => "origin-ignored",
                _ => "",
            };
            name == _bug
        }
        #[cfg(not(feature = "planted-bugs"))]
        false
    }

    /// Where positions go: the sink's way, unless the planted defect moves
    /// them after the commit.
    fn position_mode(&self) -> PositionMode {
        if self.planted("position-after-commit") {
            PositionMode::Separate
        } else {
            self.config.position
        }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The lowest LSN not known applied.
    pub fn watermark(&self) -> Lsn {
        self.positions
            .watermark(self.window.first().map(|(_, e)| e.first_lsn))
    }

    /// The watermark durable in the sink.
    pub fn durable_watermark(&self) -> Lsn {
        self.positions.durable
    }

    /// Items received and not applied.
    pub fn window_len(&self) -> usize {
        self.window.len()
    }

    /// Batches being applied.
    pub fn batches_in_flight(&self) -> usize {
        self.batches.len()
    }

    /// Dead letters held, by LSN.
    pub fn dead_letters(&self) -> Vec<Lsn> {
        self.dead.keys().copied().collect()
    }

    /// Slots owing fallback debt.
    pub fn debt_slots(&self) -> usize {
        self.counters.debt_slots()
    }

    /// Transactions waiting for their origins (§8).
    pub fn origins_waiting(&self) -> usize {
        self.origin_wait.len()
    }

    /// Items ready and items waiting on a slot.
    pub fn ready_and_waiting(&self) -> (usize, usize) {
        (self.ready.len(), self.waiting.len())
    }

    /// Handles one input; returns what the shell must do.
    pub fn step(&mut self, input: Input) -> Vec<Effect> {
        let mut fx = Vec::new();
        if self.phase == Phase::Failed {
            return fx;
        }
        let now = match input {
            Input::Start { now_ms } => {
                assert_eq!(self.phase, Phase::Idle, "started twice");
                self.connect(&mut fx);
                now_ms
            }
            Input::Received {
                now_ms,
                line,
                bytes,
            } => {
                self.on_line(now_ms, line, bytes, &mut fx);
                now_ms
            }
            Input::Applied { now_ms, batch } => {
                self.on_applied(batch, &mut fx);
                now_ms
            }
            Input::OriginsApplied { now_ms, lsn } => {
                let key = (lsn, TXN_SUB);
                if self.origin_wait.remove(&key).is_some() {
                    self.evaluate(now_ms, key);
                }
                now_ms
            }
            Input::SinkFailed {
                now_ms,
                batch,
                error,
            } => {
                self.on_failed(now_ms, batch, error, &mut fx);
                now_ms
            }
            Input::PositionStored { now_ms, watermark } => {
                if let Some(lsn) = self.positions.stored(watermark) {
                    fx.push(Effect::Ack { lsn });
                }
                now_ms
            }
            Input::Tick { now_ms } => {
                self.on_tick(now_ms);
                now_ms
            }
            Input::Disconnected { now_ms, reason } => {
                self.on_disconnect(reason, &mut fx);
                now_ms
            }
            Input::Command { now_ms, cmd } => {
                self.on_command(now_ms, cmd, &mut fx);
                now_ms
            }
        };
        if self.phase != Phase::Failed {
            self.origins_due(now, &mut fx);
            self.fallback_due(now, &mut fx);
            self.dispatch(now, &mut fx);
            self.maybe_store(now, &mut fx);
            self.maybe_reconnect(&mut fx);
            self.update_pause(&mut fx);
        }
        fx
    }

    fn fail(&mut self, reason: String, fx: &mut Vec<Effect>) {
        self.phase = Phase::Failed;
        fx.push(Effect::Fail { reason });
    }

    fn connect(&mut self, fx: &mut Vec<Effect>) {
        self.phase = Phase::Connecting;
        self.last_key = None;
        fx.push(Effect::Connect {
            from_lsn: self.from_lsn,
            epoch: self.epoch,
        });
    }

    // ---- the stream ----

    fn on_line(&mut self, now: u64, line: WireMessage, bytes: usize, fx: &mut Vec<Effect>) {
        match line {
            WireMessage::Epoch(e) => self.on_epoch(e, fx),
            WireMessage::Error(e) if self.phase == Phase::Streaming => {
                self.on_disconnect(StreamEnd::Error(e), fx)
            }
            _ if self.phase != Phase::Streaming => {}
            WireMessage::Txn(t) if t.epoch == self.epoch => self.on_txn(now, t, bytes, fx),
            WireMessage::Schema(s) if s.epoch == self.epoch => self.on_schema(s, bytes, fx),
            WireMessage::Progress(p) => {
                self.positions.stream_pos = self.positions.stream_pos.max(p.lsn + 1);
            }
            WireMessage::Txn(_) | WireMessage::Schema(_) | WireMessage::Error(_) => {}
            WireMessage::Row(_) | WireMessage::ChunkEnd(_) | WireMessage::BootstrapEnd(_) => {
                self.fail("bootstrap lines in a stream".into(), fx)
            }
        }
    }

    fn on_epoch(&mut self, e: EpochMessage, fx: &mut Vec<Effect>) {
        if self.phase != Phase::Connecting || e.epoch != self.epoch {
            return;
        }
        if e.from_lsn != self.from_lsn {
            return self.fail(
                format!(
                    "the server started the stream at {}, not at {}",
                    e.from_lsn, self.from_lsn
                ),
                fx,
            );
        }
        if let Some(id) = &self.config.server_id {
            if *id != e.server_id {
                return self.fail(
                    format!(
                        "the server is {} but the sink follows {id}: bootstrap again",
                        e.server_id
                    ),
                    fx,
                );
            }
        }
        if !valid_dep_slots(e.dep_slots) {
            return self.fail(format!("dep_slots {} is not valid", e.dep_slots), fx);
        }
        let slots = match self.config.mode {
            Mode::Weak => 0,
            _ => e.dep_slots as usize + 1,
        };
        self.counters.start_epoch(slots);
        self.phase = Phase::Streaming;
    }

    fn check_order(&mut self, key: Key, fx: &mut Vec<Effect>) -> bool {
        if key.0 < self.from_lsn || self.last_key.is_some_and(|k| k >= key) {
            self.fail(
                format!("stream item at {key:?} out of order or before the stream's start"),
                fx,
            );
            return false;
        }
        self.last_key = Some(key);
        true
    }

    fn on_txn(&mut self, now: u64, t: TxnMessage, bytes: usize, fx: &mut Vec<Effect>) {
        let key = (t.lsn, TXN_SUB);
        let last = t.last;
        if t.frame == 0 {
            if !self.check_order(key, fx) {
                return;
            }
            let pairs: Vec<(u32, u64)> = match (&t.deps, self.config.mode) {
                (_, Mode::Weak) | (None, _) => Vec::new(),
                (Some(d), _) => d.pairs().collect(),
            };
            if let Some(&(s, _)) = pairs
                .iter()
                .find(|(s, _)| *s as usize >= self.counters.slots())
            {
                return self.fail(format!("slot {s} out of range at {}", t.lsn), fx);
            }
            if self.config.mode != Mode::Weak && t.deps.is_none() {
                return self.fail(format!("transaction {} carries no deps", t.lsn), fx);
            }
            self.positions.stream_pos = self.positions.stream_pos.max(t.lsn + 1);
            self.window.insert(
                key,
                Entry {
                    first_lsn: t.first_lsn,
                    content: Content::Partial(t),
                    pairs,
                    bytes,
                    state: State::Assembling,
                    attempts: 0,
                    solo: false,
                    since_ms: now,
                },
            );
        } else {
            let ok = match self.window.get_mut(&key) {
                Some(Entry {
                    content: Content::Partial(p),
                    ..
                }) if p.frame + 1 == t.frame => {
                    p.frame = t.frame;
                    p.changes.extend(t.changes);
                    true
                }
                _ => false,
            };
            if !ok {
                return self.fail(format!("frame {} of {} out of order", t.frame, t.lsn), fx);
            }
            self.window.grow(&key, bytes);
        }
        if last {
            self.complete(now, key);
        }
    }

    fn on_schema(&mut self, s: SchemaMessage, bytes: usize, fx: &mut Vec<Effect>) {
        let seq = match self.last_key {
            Some((lsn, sub)) if lsn == s.lsn && sub != TXN_SUB => sub + 1,
            _ => 0,
        };
        let key = (s.lsn, seq);
        if !self.check_order(key, fx) {
            return;
        }
        self.positions.stream_pos = self.positions.stream_pos.max(s.lsn);
        let pos = SchemaPos { lsn: s.lsn, seq };
        if self.positions.schema_applied.is_some_and(|a| pos <= a) {
            return;
        }
        self.window.insert(
            key,
            Entry {
                first_lsn: s.lsn,
                content: Content::Done(Item::Schema(Arc::new(s), pos)),
                pairs: Vec::new(),
                bytes,
                state: State::Ready,
                attempts: 0,
                solo: true,
                since_ms: 0,
            },
        );
        self.ready.insert(key);
    }

    /// A transaction's last frame arrived.
    fn complete(&mut self, now: u64, key: Key) {
        let lsn = key.0;
        let entry = self.window.get_mut(&key).expect("assembling entry");
        let Content::Partial(mut msg) =
            std::mem::replace(&mut entry.content, Content::Partial(empty_txn()))
        else {
            unreachable!("completed twice");
        };
        msg.last = true;
        entry.content = Content::Done(Item::Txn(Arc::new(msg)));
        if lsn < self.from_lsn || self.positions.applied_above.contains(&lsn) {
            // Applied in an earlier epoch: counted, not applied again.
            let entry = self.window.remove(&key).expect("entry");
            let woken = self.counters.complete(&entry.pairs);
            self.wake(woken);
            return;
        }
        if self.skip_on_arrival.remove(&lsn) {
            self.window.replace_item(&key, Item::Skip { lsn });
        }
        if self.dead.contains_key(&lsn) {
            self.window.get_mut(&key).expect("entry").state = State::Dead;
            return;
        }
        let ignore_origins = self.planted("origin-ignored");
        let entry = self.window.get_mut(&key).expect("entry");
        let has_origins = matches!(
            entry.item(),
            Some(Item::Txn(t)) if t.origin.as_ref().is_some_and(|o| !o.is_empty())
        );
        // A decorator's transaction waits until the sink holds what it
        // decorates (§8), unless the timeout is zero (weak) or the planted
        // defect skips the wait.
        if has_origins && self.config.causal_timeout_ms != Some(0) && !ignore_origins {
            entry.state = State::Origins;
            self.origin_wait.insert(key, (now, None));
            return;
        }
        self.evaluate(now, key);
    }

    /// Transactions waiting for their origins (§8): asks the sink again
    /// every `ORIGIN_RECHECK_MS`; past the causal timeout, applies them
    /// anyway and says so.
    fn origins_due(&mut self, now: u64, fx: &mut Vec<Effect>) {
        if self.phase != Phase::Streaming || self.origin_wait.is_empty() {
            return;
        }
        let timeout = self.config.causal_timeout_ms;
        let mut released = Vec::new();
        for (key, (since, asked)) in self.origin_wait.iter_mut() {
            let origins = match self.window.get(key).and_then(Entry::item) {
                Some(Item::Txn(t)) => t.origin.clone().unwrap_or_default(),
                _ => Vec::new(),
            };
            if timeout.is_some_and(|t| since.saturating_add(t) <= now) {
                fx.push(Effect::OriginFallback {
                    lsn: key.0,
                    origins,
                });
                released.push(*key);
            } else if asked.is_none_or(|a| a.saturating_add(ORIGIN_RECHECK_MS) <= now) {
                *asked = Some(now);
                fx.push(Effect::CheckOrigins {
                    lsn: key.0,
                    origins,
                });
            }
        }
        for key in released {
            self.origin_wait.remove(&key);
            self.evaluate(now, key);
        }
    }

    /// Puts a complete entry in the ready queue or on a slot's waiters.
    fn evaluate(&mut self, now: u64, key: Key) {
        let entry = self.window.get_mut(&key).expect("entry");
        match self.counters.first_unsatisfied(&entry.pairs) {
            None => {
                entry.state = State::Ready;
                self.ready.insert(key);
            }
            Some((slot, need)) => {
                entry.state = State::Waiting;
                entry.since_ms = now;
                self.waiting.insert((now, key));
                self.counters.wait(slot, need, key);
            }
        }
    }

    /// Re-checks items that waited on bumped slots.
    fn wake(&mut self, keys: Vec<Key>) {
        for key in keys {
            let Some(entry) = self.window.get_mut(&key) else {
                continue;
            };
            if entry.state != State::Waiting {
                continue;
            }
            match self.counters.first_unsatisfied(&entry.pairs) {
                None => {
                    entry.state = State::Ready;
                    self.waiting.remove(&(entry.since_ms, key));
                    self.ready.insert(key);
                }
                Some((slot, need)) => self.counters.wait(slot, need, key),
            }
        }
    }

    // ---- batches ----

    fn dispatch(&mut self, now: u64, fx: &mut Vec<Effect>) {
        if self.phase != Phase::Streaming {
            return;
        }
        while let Some(worker) = self.busy.iter().position(|b| !b) {
            // Ready transactions are shared out among all the workers, so
            // that a backlog is applied in parallel as workers come free,
            // rather than all in the first free worker's batch.
            let share = self.ready.len().div_ceil(self.busy.len()).max(1);
            let keys = self.next_batch_keys(share);
            if keys.is_empty() {
                return;
            }
            self.start_batch(now, worker, keys, fx);
        }
    }

    /// The keys of the next batch for an idle worker (§5.2): in causal and
    /// weak mode at most `share` transactions (the ready ones over the
    /// workers).
    fn next_batch_keys(&self, share: usize) -> Vec<Key> {
        let barriers = !self.planted("schema-barrier-ignored");
        let first_schema = if barriers {
            self.window.first_schema()
        } else {
            None
        };
        if let Some(s) = first_schema {
            // A barrier: alone, once everything before it is applied;
            // nothing after it starts before it is applied.
            let (first, entry) = self.window.first().expect("window holds the barrier");
            if *first == s && entry.state == State::Ready {
                return vec![s];
            }
        }
        let before_barrier = |k: &Key| first_schema.is_none_or(|s| *k < s);
        let max_txns = if self.config.mode == Mode::Global {
            self.config.batch_txns_max
        } else {
            self.config.batch_txns_max.min(share)
        };
        let max_rows = self.config.batch_rows_max;
        let mut keys = Vec::new();
        let mut rows = 0;
        let mut fits = |e: &Entry, keys: &Vec<Key>| -> bool {
            let r = e.item().map_or(0, Item::rows);
            if !keys.is_empty() && (keys.len() >= max_txns || rows + r > max_rows) {
                return false;
            }
            rows += r;
            true
        };
        if self.config.mode == Mode::Global {
            // Consecutive transactions, each applicable once the ones
            // before it in the batch are.
            let mut extra: HashMap<u32, u64> = HashMap::new();
            for (k, e) in self.window.iter() {
                let eligible = matches!(e.state, State::Ready | State::Waiting)
                    && before_barrier(k)
                    && (!e.solo || keys.is_empty())
                    && e.item().is_some()
                    && self.counters.satisfied_with(&e.pairs, &extra);
                if !eligible || !fits(e, &keys) {
                    break;
                }
                keys.push(*k);
                if e.solo {
                    break;
                }
                for &(s, _) in &e.pairs {
                    *extra.entry(s).or_default() += 1;
                }
            }
            return keys;
        }
        // Causal and weak: transactions ready together (none depends on
        // another: each is applicable without the others).
        for k in &self.ready {
            if !before_barrier(k) {
                break;
            }
            let e = self.window.get(k).expect("ready entry");
            if e.is_schema() && barriers {
                continue;
            }
            if e.solo || e.is_schema() {
                if keys.is_empty() {
                    return vec![*k];
                }
                continue;
            }
            if !fits(e, &keys) {
                break;
            }
            keys.push(*k);
        }
        keys
    }

    fn start_batch(&mut self, now: u64, worker: usize, keys: Vec<Key>, fx: &mut Vec<Effect>) {
        let batch = self.next_batch;
        self.next_batch += 1;
        let in_apply = self.position_mode() == PositionMode::InApply;
        let mut items = Vec::with_capacity(keys.len());
        let mut record = Record::default();
        for key in &keys {
            self.ready.remove(key);
            let entry = self.window.get_mut(key).expect("batch entry");
            if entry.state == State::Waiting {
                self.waiting.remove(&(entry.since_ms, *key));
            }
            entry.state = State::InFlight(batch);
            let item = entry.item().expect("complete item").clone();
            match &item {
                Item::Schema(_, pos) => record.schema = Some(*pos),
                Item::Txn(_) | Item::Skip { .. } if in_apply => record.applied.push(item.lsn()),
                _ => {}
            }
            items.push(item);
        }
        let mut store = None;
        if in_apply {
            let w = self.watermark();
            if self
                .positions
                .store_due(now, w, self.config.store_interval_ms)
            {
                self.positions.begin_store(now, w);
                record.watermark = Some(w);
                store = Some(w);
            }
        }
        self.busy[worker] = true;
        self.batches.insert(
            batch,
            Batch {
                worker,
                keys,
                store,
            },
        );
        fx.push(Effect::Apply {
            batch,
            worker,
            items,
            record,
        });
    }

    fn on_applied(&mut self, batch: BatchId, fx: &mut Vec<Effect>) {
        let Some(b) = self.batches.remove(&batch) else {
            return;
        };
        self.busy[b.worker] = false;
        let mut woken = Vec::new();
        for key in &b.keys {
            let entry = self.window.remove(key).expect("applied entry");
            match entry.item().expect("complete item") {
                Item::Schema(_, pos) => {
                    self.positions.schema_applied = self.positions.schema_applied.max(Some(*pos));
                }
                item => {
                    let lsn = item.lsn();
                    self.positions.applied_above.insert(lsn);
                    if self.released.remove(&lsn) {
                        fx.push(Effect::DeadLetterCleared { lsn });
                    }
                }
            }
            woken.extend(self.counters.complete(&entry.pairs));
        }
        if let Some(w) = b.store {
            if let Some(lsn) = self.positions.stored(w) {
                fx.push(Effect::Ack { lsn });
            }
        }
        if self.phase == Phase::Streaming {
            self.wake(woken);
        }
    }

    fn on_failed(&mut self, now: u64, batch: BatchId, error: SinkError, fx: &mut Vec<Effect>) {
        let Some(b) = self.batches.remove(&batch) else {
            return;
        };
        self.busy[b.worker] = false;
        if b.store.is_some() {
            self.positions.store_failed();
        }
        if self.phase != Phase::Streaming {
            // The stream ended; these come again in the next epoch.
            for key in &b.keys {
                self.window.remove(key);
            }
            return;
        }
        if b.keys.len() > 1 {
            // Split: one transaction at a time, so one bad one holds no
            // other.
            for key in b.keys {
                self.window.get_mut(&key).expect("entry").solo = true;
                self.evaluate(now, key);
            }
            return;
        }
        let key = b.keys[0];
        let entry = self.window.get_mut(&key).expect("failed entry");
        entry.attempts += 1;
        entry.solo = true;
        let attempts = entry.attempts;
        let lsn = key.0;
        let is_schema = entry.is_schema();
        if error.class == ErrorClass::Permanent && is_schema {
            return self.fail(
                format!(
                    "the schema change at {lsn} cannot be applied: {}",
                    error.message
                ),
                fx,
            );
        }
        if error.class == ErrorClass::Permanent && attempts >= DEAD_LETTER_ATTEMPTS {
            entry.state = State::Dead;
            self.dead.insert(lsn, attempts);
            self.released.remove(&lsn);
            fx.push(Effect::DeadLetter {
                lsn,
                error,
                attempts,
            });
            if self.dead.len() > self.config.dead_letters_max {
                self.fail(
                    format!("more than {} dead letters", self.config.dead_letters_max),
                    fx,
                );
            }
            return;
        }
        let at_ms = now + backoff_ms(attempts, lsn);
        entry.state = State::Retry(at_ms);
        self.retries.insert((at_ms, key));
        fx.push(Effect::RetryAt { lsn, at_ms });
    }

    fn on_tick(&mut self, now: u64) {
        while let Some(&(at, key)) = self.retries.first() {
            if at > now {
                break;
            }
            self.retries.pop_first();
            if self
                .window
                .get(&key)
                .is_some_and(|e| e.state == State::Retry(at))
            {
                self.evaluate(now, key);
            }
        }
    }

    /// Causal timeout (§5.5): items waiting too long are applied anyway.
    fn fallback_due(&mut self, now: u64, fx: &mut Vec<Effect>) {
        let (Mode::Causal, Some(timeout)) = (self.config.mode, self.config.causal_timeout_ms)
        else {
            return;
        };
        if self.phase != Phase::Streaming {
            return;
        }
        while let Some(&(since, key)) = self.waiting.first() {
            if since.saturating_add(timeout) > now {
                break;
            }
            self.waiting.pop_first();
            let entry = self.window.get_mut(&key).expect("waiting entry");
            debug_assert_eq!(entry.state, State::Waiting);
            let (slots, woken) = self.counters.fallback(&entry.pairs);
            entry.state = State::Ready;
            self.ready.insert(key);
            fx.push(Effect::CausalFallback { lsn: key.0, slots });
            self.wake(woken);
        }
    }

    // ---- position ----

    fn maybe_store(&mut self, now: u64, fx: &mut Vec<Effect>) {
        let w = self.watermark();
        self.positions.prune(w);
        if !self
            .positions
            .store_due(now, w, self.config.store_interval_ms)
        {
            return;
        }
        // In-apply sinks store with the next batch; only an idle agent
        // (progress lines, quiet publication) stores on its own.
        if self.position_mode() == PositionMode::InApply && !self.batches.is_empty() {
            return;
        }
        self.positions.begin_store(now, w);
        fx.push(Effect::StorePosition {
            watermark: w,
            applied_above: self.positions.applied_above.iter().copied().collect(),
            schema: self.positions.schema_applied,
        });
    }

    // ---- reconnection ----

    fn on_disconnect(&mut self, reason: StreamEnd, fx: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Connecting | Phase::Streaming) {
            return;
        }
        if let StreamEnd::Error(ErrorMessage { code, message }) = &reason {
            if code == "55000" {
                fx.push(Effect::Bootstrap(BootstrapStep::Request));
                return self.fail(
                    format!("the server refused the position ({message}); bootstrap is needed and not built yet"),
                    fx,
                );
            }
        }
        // Everything not being applied comes again in the next epoch.
        self.positions.stream_pos = self.watermark();
        self.window
            .retain(|_, e| matches!(e.state, State::InFlight(_)));
        self.ready.clear();
        self.retries.clear();
        self.waiting.clear();
        self.origin_wait.clear();
        self.counters.clear_waiters();
        self.paused = false;
        self.phase = Phase::Reconnecting;
    }

    /// Once no batch is in flight, a new epoch from the watermark (§3.4).
    fn maybe_reconnect(&mut self, fx: &mut Vec<Effect>) {
        if self.phase != Phase::Reconnecting || !self.batches.is_empty() {
            return;
        }
        debug_assert_eq!(self.window.len(), 0);
        self.from_lsn = self.watermark();
        self.epoch += 1;
        self.connect(fx);
    }

    fn update_pause(&mut self, fx: &mut Vec<Effect>) {
        if self.phase != Phase::Streaming {
            return;
        }
        let (len, bytes) = (self.window.len(), self.window.bytes());
        let full = len >= self.config.window_txns_max || bytes >= self.config.window_bytes_max;
        // A transaction still arriving is read to its end first.
        let assembling = self
            .window
            .last()
            .is_some_and(|(_, e)| e.state == State::Assembling);
        if !self.paused && full && !assembling {
            self.paused = true;
            fx.push(Effect::Pause { reading: false });
        } else if self.paused
            && len <= self.config.window_txns_max / 2
            && bytes <= self.config.window_bytes_max / 2
        {
            self.paused = false;
            fx.push(Effect::Pause { reading: true });
        }
    }

    // ---- the operator ----

    fn on_command(&mut self, now: u64, cmd: Operator, fx: &mut Vec<Effect>) {
        match cmd {
            Operator::RetryDeadLetter(lsn) | Operator::SkipDeadLetter(lsn) => {
                if self.dead.remove(&lsn).is_none() {
                    return;
                }
                self.released.insert(lsn);
                let skip = matches!(cmd, Operator::SkipDeadLetter(_));
                let key = (lsn, TXN_SUB);
                match self.window.get_mut(&key) {
                    Some(e) if e.state == State::Dead => {
                        e.attempts = 0;
                        e.solo = true;
                        if skip {
                            self.window.replace_item(&key, Item::Skip { lsn });
                        }
                        self.evaluate(now, key);
                    }
                    _ if skip => {
                        self.skip_on_arrival.insert(lsn);
                    }
                    _ => {}
                }
            }
            Operator::Rebootstrap => {
                fx.push(Effect::Bootstrap(BootstrapStep::Request));
                self.fail("rebootstrap is not built yet".into(), fx);
            }
        }
    }
}

fn empty_txn() -> TxnMessage {
    TxnMessage {
        lsn: 0,
        first_lsn: 0,
        txid: String::new(),
        commit_time: String::new(),
        epoch: 0,
        frame: 0,
        last: false,
        deps: None,
        bootstrap: false,
        changes: Vec::new(),
        origin: None,
    }
}
