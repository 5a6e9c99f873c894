//! A seeded, deterministic simulation of a Raft group of three members
//! (`docs/replication.md`, "The simulation").
//!
//! Everything the members use runs in this one process, on one thread:
//! the Raft library and this crate's storage, state machine and proposer
//! over real logs and tables; a simulated network that delays, loses and
//! cuts messages; disks that keep only what was synced and tear unsynced
//! writes at a crash (`aqueduct_log::sim::SimStorage`); and a clock that
//! moves only when every task waits (tokio's paused time). Every random
//! choice comes from the run's seed, so a failing seed replays exactly:
//!
//! ```text
//! AQUEDUCT_SIM_SEED=1234 cargo test -p aqueduct-replicate --test simulation
//! ```
//!
//! A run issues writes to whichever member leads, crashes and restarts
//! members, partitions them (a leader alone on the minority side too) and
//! fails their disks; then it heals everything, waits for the group to
//! converge and checks what the process-level fault tests check: every
//! acknowledged write is on every member, every member's log is a prefix
//! of the leader's, and every member's tables equal an oracle (the
//! committed writes, replayed by this file's own model) at its applied
//! LSN.

// The Raft library's network errors are large; its traits return them.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_log::sim::{Fault, SimStorage};
use aqueduct_log::{Log, Lsn, Options, SyncPolicy};
use aqueduct_replicate::group::types::{Group, NodeId, Raft};
use aqueduct_replicate::group::{self, GroupConfig, Member};
use aqueduct_tables::{ColumnDef, Database, SchemaChange, TableSchema, Txn};
use aqueduct_values::{DataType, Value};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Members of the simulated group.
const MEMBERS: u64 = 3;
/// Steps of one run (each a fault, a write or a pause).
const STEPS: usize = 250;
/// Seeds `scripts/test` runs (`AQUEDUCT_SIM_SEEDS` for more).
const SEEDS: u64 = 16;
/// How long (simulated) a healed group may take to converge, and how
/// often (simulated) the run looks. Every wait in this file is on the
/// simulated clock, which moves only when all tasks wait: a wait is a
/// step of the model (a message's delay, a pause between steps), not a
/// guess at how long real work takes.
const CONVERGE_WITHIN: Duration = Duration::from_secs(120);
const CONVERGE_POLL: Duration = Duration::from_millis(100);
/// Registers the writes set.
const REGISTERS: i64 = 8;
const REGISTERS_TABLE: u64 = 1;
const OPS_TABLE: u64 = 2;

// ---------------------------------------------------------------------
// The network.

/// Messages between members: delayed, sometimes lost, and cut where the
/// run partitions the group.
#[derive(Clone)]
struct Net(Arc<Mutex<NetState>>);

struct NetState {
    /// The running members' Raft handles.
    rafts: BTreeMap<NodeId, Raft>,
    /// Links that are down, both ways listed.
    cut: BTreeSet<(NodeId, NodeId)>,
    rng: StdRng,
}

/// A message's delay is drawn from `0..=MAX_DELAY_MS`; this many in a
/// thousand are lost.
const MAX_DELAY_MS: u64 = 20;
const LOSS_PER_MILLE: u32 = 20;

impl Net {
    fn new(seed: u64) -> Net {
        Net(Arc::new(Mutex::new(NetState {
            rafts: BTreeMap::new(),
            cut: BTreeSet::new(),
            rng: StdRng::seed_from_u64(seed),
        })))
    }

    /// A message's delay, and whether it is lost.
    fn draw(&self) -> (Duration, bool) {
        let mut s = self.0.lock();
        let delay = s.rng.gen_range(0..=MAX_DELAY_MS);
        let lost = s.rng.gen_range(0..1000) < LOSS_PER_MILLE;
        (Duration::from_millis(delay), lost)
    }

    /// `to`'s Raft, if `from` and `to` both run and the link between them
    /// is up.
    fn reach(&self, from: NodeId, to: NodeId) -> Option<Raft> {
        let s = self.0.lock();
        if s.cut.contains(&(from, to)) || !s.rafts.contains_key(&from) {
            return None;
        }
        s.rafts.get(&to).cloned()
    }

    fn isolate(&self, id: NodeId) {
        let mut s = self.0.lock();
        for other in 1..=MEMBERS {
            if other != id {
                s.cut.insert((id, other));
                s.cut.insert((other, id));
            }
        }
    }

    fn heal(&self) {
        self.0.lock().cut.clear();
    }
}

struct Factory {
    me: NodeId,
    net: Net,
}

impl RaftNetworkFactory<Group> for Factory {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, _: &BasicNode) -> Peer {
        Peer {
            from: self.me,
            to: target,
            net: self.net.clone(),
        }
    }
}

struct Peer {
    from: NodeId,
    to: NodeId,
    net: Net,
}

type Rpc<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

fn lost<T, E: std::error::Error>(what: &str) -> Rpc<T, E> {
    // A network error, not "unreachable": the library then retries at its
    // next heartbeat rather than backing off.
    Err(RPCError::Network(NetworkError::new(
        &std::io::Error::other(what.to_string()),
    )))
}

impl Peer {
    /// Delivers a request after its delay, and its answer after another.
    async fn deliver<T, E, F, Fut>(&self, call: F) -> Rpc<T, E>
    where
        E: std::error::Error,
        F: FnOnce(Raft) -> Fut,
        Fut: Future<Output = Result<T, RaftError<NodeId, E>>>,
    {
        let (delay, lost_request) = self.net.draw();
        tokio::time::sleep(delay).await;
        let Some(raft) = self.net.reach(self.from, self.to) else {
            return lost("no route to the member");
        };
        if lost_request {
            return lost("the request was lost");
        }
        let answer = call(raft).await;
        let (delay, lost_answer) = self.net.draw();
        tokio::time::sleep(delay).await;
        if lost_answer || self.net.reach(self.to, self.from).is_none() {
            return lost("the answer was lost");
        }
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }
}

impl RaftNetwork<Group> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Group>,
        _: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        self.deliver(|raft| async move { raft.append_entries(rpc).await })
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<Group>,
        _: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.deliver(|raft| async move { raft.install_snapshot(rpc).await })
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.deliver(|raft| async move { raft.vote(rpc).await })
            .await
    }
}

// ---------------------------------------------------------------------
// The members.

struct Node {
    id: NodeId,
    log_disk: Arc<SimStorage>,
    raft_disk: Arc<SimStorage>,
    running: Option<Running>,
    /// Each start of the member is a new incarnation.
    incarnation: u64,
    /// The incarnation that found it must rebuild its tables, and why.
    diverged: Arc<Mutex<Option<(u64, String)>>>,
}

struct Running {
    member: Arc<Member>,
    db: Arc<Database>,
}

fn log_options() -> Options {
    Options {
        sync: SyncPolicy::Always,
        // Small segments, so that runs cross segment boundaries.
        segment_bytes: 16 << 10,
        ..Options::default()
    }
}

fn group_config(id: NodeId) -> GroupConfig {
    GroupConfig {
        node_id: id,
        members: (1..=MEMBERS).map(|m| (m, format!("member-{m}"))).collect(),
        join: false,
        token: None,
    }
}

impl Node {
    /// Starts the member from what its disks hold.
    async fn boot(&mut self, net: &Net) -> Result<(), String> {
        self.log_disk.restart();
        self.raft_disk.restart();
        let (log, _) = Log::open_with_storage(self.log_disk.clone(), log_options())
            .map_err(|e| format!("opening the log: {e}"))?;
        let prepared = group::prepare_on(self.raft_disk.clone(), &log)?;
        let (db, _) = Database::open_until(log, Some(prepared.replay_until), &mut |_| {})
            .map_err(|e| format!("rebuilding the tables: {e}"))?;
        let db = Arc::new(db);
        let factory = Factory {
            me: self.id,
            net: net.clone(),
        };
        let member =
            group::start_with(prepared, db.clone(), group_config(self.id), factory).await?;
        self.incarnation += 1;
        let (flag, incarnation) = (self.diverged.clone(), self.incarnation);
        member
            .shared
            .set_on_diverged(Box::new(move |why| *flag.lock() = Some((incarnation, why))));
        net.0.lock().rafts.insert(self.id, member.raft.clone());
        self.running = Some(Running { member, db });
        Ok(())
    }

    /// The machine stops: unsynced writes are lost or torn.
    async fn crash(&mut self, net: &Net) {
        let Some(running) = self.running.take() else {
            return;
        };
        self.log_disk.crash();
        self.raft_disk.crash();
        net.0.lock().rafts.remove(&self.id);
        let _ = running.member.raft.shutdown().await;
    }

    /// Why the running member must rebuild its tables, once it must.
    fn must_rebuild(&self) -> Option<String> {
        let diverged = self.diverged.lock();
        match &*diverged {
            Some((i, why)) if self.running.is_some() && *i == self.incarnation => Some(why.clone()),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------
// The workload and its oracle.

/// One write the run issued: a transaction that sets some registers to
/// its id and records the id in the ops table.
#[derive(Clone, Debug)]
struct Op {
    id: i64,
    registers: Vec<i64>,
    member: NodeId,
    incarnation: u64,
    lsn: Lsn,
    acknowledged: bool,
}

fn schema() -> Vec<SchemaChange> {
    let col = |name: &str| ColumnDef::new(name, DataType::Int8);
    let table = |id, name: &str, columns| {
        SchemaChange::CreateTable(TableSchema {
            id,
            name: name.into(),
            columns,
            primary_key: vec![0],
            indexes: Vec::new(),
            checks: vec![],
            foreign_keys: vec![],
            ephemeral: false,
            shard_key: None,
        })
    };
    vec![
        table(REGISTERS_TABLE, "registers", vec![col("k"), col("v")]),
        table(OPS_TABLE, "ops", vec![col("id")]),
    ]
}

/// A member's tables: registers and the ids of the ops applied.
#[derive(Debug, PartialEq, Eq, Default)]
struct State {
    registers: BTreeMap<i64, i64>,
    ops: BTreeSet<i64>,
}

fn state_of(db: &Database) -> State {
    let catalog = db.read();
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    };
    let mut out = State::default();
    if let Some(t) = catalog.table_by_id(REGISTERS_TABLE) {
        for (_, rv) in t.scan() {
            out.registers.insert(int(&rv.row[0]), int(&rv.row[1]));
        }
    }
    if let Some(t) = catalog.table_by_id(OPS_TABLE) {
        for (_, rv) in t.scan() {
            out.ops.insert(int(&rv.row[0]));
        }
    }
    out
}

// ---------------------------------------------------------------------
// A run.

/// What a run may get wrong on purpose, to show that its checks catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plant {
    None,
    /// Acknowledge a write once the leader applied it, without waiting
    /// for the group to commit it.
    AcknowledgeEarly,
}

struct Sim {
    rng: StdRng,
    net: Net,
    nodes: Vec<Node>,
    ops: Vec<Op>,
    next_op: i64,
    /// Crashed members and when they come back.
    restart_at: BTreeMap<usize, tokio::time::Instant>,
    heal_at: Option<tokio::time::Instant>,
    trace: Vec<String>,
    started: tokio::time::Instant,
    plant: Plant,
}

impl Sim {
    fn new(seed: u64, plant: Plant) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = (1..=MEMBERS)
            .map(|id| Node {
                id,
                log_disk: SimStorage::new(rng.gen()),
                raft_disk: SimStorage::new(rng.gen()),
                running: None,
                incarnation: 0,
                diverged: Default::default(),
            })
            .collect();
        Sim {
            net: Net::new(rng.gen()),
            rng,
            nodes,
            ops: Vec::new(),
            next_op: 1,
            restart_at: BTreeMap::new(),
            heal_at: None,
            trace: Vec::new(),
            started: tokio::time::Instant::now(),
            plant,
        }
    }

    fn note(&mut self, what: String) {
        let at = self.started.elapsed().as_millis();
        self.trace.push(format!("{at:>8} ms  {what}"));
    }

    fn leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.running.as_ref().is_some_and(|r| r.member.takes_writes()))
    }

    /// A write on the leader, if some member takes writes now.
    fn write(&mut self) {
        let Some(i) = self.leader() else { return };
        let node = &self.nodes[i];
        let running = node.running.as_ref().expect("running");
        let mut txn = Txn::default();
        let id = self.next_op;
        let mut registers = Vec::new();
        if running.db.read().tables.is_empty() {
            for change in schema() {
                txn.schema(change);
            }
        } else {
            for _ in 0..self.rng.gen_range(1..=3) {
                let k = self.rng.gen_range(0..REGISTERS);
                if !registers.contains(&k) {
                    registers.push(k);
                }
            }
            for &k in &registers {
                txn.put(
                    REGISTERS_TABLE,
                    vec![Value::Int(k)],
                    vec![Value::Int(k), Value::Int(id)],
                );
            }
            txn.put(OPS_TABLE, vec![Value::Int(id)], vec![Value::Int(id)]);
        }
        match running.db.commit_unacknowledged(&mut txn, &|_, _| Ok(())) {
            Ok(Some(lsn)) => {
                self.next_op += 1;
                self.ops.push(Op {
                    id,
                    registers,
                    member: node.id,
                    incarnation: node.incarnation,
                    lsn,
                    acknowledged: false,
                });
                let member = node.id;
                self.note(format!("op {id} on member {member} at LSN {lsn}"));
            }
            Ok(None) => {}
            Err(e) => {
                let member = node.id;
                self.note(format!("op {id} refused on member {member}: {e}"));
            }
        }
    }

    /// Marks the writes whose member says they are committed.
    fn acknowledge(&mut self) {
        let mut acked = Vec::new();
        for op in self.ops.iter_mut().filter(|o| !o.acknowledged) {
            let node = &self.nodes[(op.member - 1) as usize];
            if node.incarnation != op.incarnation {
                continue;
            }
            let Some(running) = &node.running else {
                continue;
            };
            if node.must_rebuild().is_some() {
                continue;
            }
            let done = match self.plant {
                Plant::None => running.db.is_visible(op.lsn),
                Plant::AcknowledgeEarly => running.db.applied_lsn() >= op.lsn,
            };
            if done {
                op.acknowledged = true;
                acked.push(op.id);
            }
        }
        for id in acked {
            self.note(format!("op {id} acknowledged"));
        }
    }

    async fn step(&mut self) {
        let now = tokio::time::Instant::now();
        // Members that crashed come back when their time comes; members
        // that must rebuild their tables restart (as a server does).
        let due: Vec<usize> = self
            .restart_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            self.restart_at.remove(&i);
            self.boot(i).await;
        }
        for i in 0..self.nodes.len() {
            if let Some(why) = self.nodes[i].must_rebuild() {
                self.note(format!("member {} rebuilds its tables: {why}", i + 1));
                self.nodes[i].crash(&self.net).await;
                self.boot(i).await;
            }
        }
        if self.heal_at.is_some_and(|at| at <= now) {
            self.heal_at = None;
            self.net.heal();
            self.note("the network heals".into());
        }
        let roll = self.rng.gen_range(0..100);
        match roll {
            0..=59 => {
                for _ in 0..self.rng.gen_range(1..=4) {
                    self.write();
                }
            }
            60..=63 => {
                let i = self.rng.gen_range(0..self.nodes.len());
                if self.nodes[i].running.is_some() && self.restart_at.len() < 2 {
                    self.note(format!("member {} crashes", i + 1));
                    self.nodes[i].crash(&self.net).await;
                    let back = Duration::from_millis(self.rng.gen_range(100..3000));
                    self.restart_at.insert(i, now + back);
                }
            }
            64..=67 if self.heal_at.is_none() => {
                // The leader alone on the minority side, as often as not.
                let i = match self.leader() {
                    Some(l) if self.rng.gen_bool(0.5) => l,
                    _ => self.rng.gen_range(0..self.nodes.len()),
                };
                self.net.isolate(i as u64 + 1);
                let heal = Duration::from_millis(self.rng.gen_range(200..5000));
                self.heal_at = Some(now + heal);
                self.note(format!("member {} is cut off", i + 1));
            }
            68..=69 => {
                let i = self.rng.gen_range(0..self.nodes.len());
                if self.nodes[i].running.is_some() {
                    let n = self.rng.gen_range(1..20);
                    let disk = if self.rng.gen_bool(0.5) {
                        &self.nodes[i].log_disk
                    } else {
                        &self.nodes[i].raft_disk
                    };
                    disk.fail_in(n, Fault::Error);
                    self.note(format!("member {}'s disk fails in {n} writes", i + 1));
                }
            }
            _ => {}
        }
        let pause = Duration::from_millis(self.rng.gen_range(1..200));
        tokio::time::sleep(pause).await;
        self.acknowledge();
    }

    async fn boot(&mut self, i: usize) {
        match self.nodes[i].boot(&self.net).await {
            Ok(()) => self.note(format!("member {} starts", i + 1)),
            Err(e) => {
                // A disk that failed at the start: tried again later.
                self.note(format!("member {} could not start: {e}", i + 1));
                self.nodes[i].log_disk.clear_fault();
                self.nodes[i].raft_disk.clear_fault();
                let later = tokio::time::Instant::now() + Duration::from_millis(500);
                self.restart_at.insert(i, later);
            }
        }
    }

    /// Heals everything and waits until one member leads, a last write is
    /// acknowledged, and every member applied it.
    async fn converge(&mut self) -> Result<usize, String> {
        self.net.heal();
        self.heal_at = None;
        for node in &self.nodes {
            node.log_disk.clear_fault();
            node.raft_disk.clear_fault();
        }
        let deadline = tokio::time::Instant::now() + CONVERGE_WITHIN;
        let mut barrier: Option<usize> = None;
        loop {
            if tokio::time::Instant::now() > deadline {
                let status: Vec<String> = self
                    .nodes
                    .iter()
                    .filter_map(|n| n.running.as_ref())
                    .map(|r| r.member.status().to_string())
                    .collect();
                return Err(format!(
                    "the healed group did not converge within {CONVERGE_WITHIN:?}:\n{}",
                    status.join("\n")
                ));
            }
            for i in 0..self.nodes.len() {
                if self.nodes[i].running.is_none() || self.nodes[i].must_rebuild().is_some() {
                    self.nodes[i].crash(&self.net).await;
                    self.restart_at.remove(&i);
                    self.boot(i).await;
                }
            }
            self.acknowledge();
            match barrier {
                None => {
                    let before = self.ops.len();
                    self.write();
                    if self.ops.len() > before {
                        barrier = Some(before);
                    }
                }
                Some(b) => {
                    let op = self.ops[b].clone();
                    let leader = (op.member - 1) as usize;
                    let lost = self.nodes[leader].incarnation != op.incarnation
                        || self.leader() != Some(leader);
                    if op.acknowledged
                        && self.nodes.iter().all(|n| {
                            n.running
                                .as_ref()
                                .is_some_and(|r| r.db.applied_lsn() >= op.lsn)
                        })
                    {
                        return Ok(leader);
                    }
                    if lost && !op.acknowledged {
                        barrier = None;
                    }
                }
            }
            tokio::time::sleep(CONVERGE_POLL).await;
        }
    }

    /// The checks, on the converged group led by member `leader`.
    fn check(&self, leader: usize) -> Result<(), String> {
        let lead = self.nodes[leader].running.as_ref().expect("running");
        let leader_log = records(&lead.db)?;
        let committed: BTreeSet<i64> = state_of(&lead.db).ops;
        // Every acknowledged write is in the group's history.
        for op in self
            .ops
            .iter()
            .filter(|o| o.acknowledged && !o.registers.is_empty())
        {
            if !committed.contains(&op.id) {
                return Err(format!(
                    "op {} was acknowledged at LSN {} by member {} and is lost",
                    op.id, op.lsn, op.member
                ));
            }
        }
        // The committed writes by LSN: the oracle's history. Each LSN holds
        // at most one of them.
        let mut history: BTreeMap<Lsn, &Op> = BTreeMap::new();
        for op in self.ops.iter().filter(|o| committed.contains(&o.id)) {
            if let Some(other) = history.insert(op.lsn, op) {
                return Err(format!(
                    "ops {} and {} are both committed at LSN {}",
                    other.id, op.id, op.lsn
                ));
            }
        }
        for node in &self.nodes {
            let running = node.running.as_ref().expect("running");
            // The member's log is a prefix of the leader's.
            let log = records(&running.db)?;
            if log.len() > leader_log.len() || leader_log[..log.len()] != log[..] {
                let at = log
                    .iter()
                    .zip(&leader_log)
                    .position(|(a, b)| a != b)
                    .unwrap_or(log.len().min(leader_log.len()));
                return Err(format!(
                    "member {}'s log ({} records) is not a prefix of the leader's ({} records): \
                     they differ at record {at}",
                    node.id,
                    log.len(),
                    leader_log.len()
                ));
            }
            // Its tables equal the oracle at its applied LSN.
            let applied = running.db.applied_lsn();
            let mut expected = State::default();
            // The schema's op (no registers) is not a row.
            for op in history.range(..=applied).map(|(_, op)| op) {
                if op.registers.is_empty() {
                    continue;
                }
                expected.ops.insert(op.id);
                for &k in &op.registers {
                    expected.registers.insert(k, op.id);
                }
            }
            let found = state_of(&running.db);
            if found != expected {
                return Err(format!(
                    "member {}'s tables at LSN {applied} differ from the oracle:\n  found    \
                     {found:?}\n  expected {expected:?}",
                    node.id
                ));
            }
        }
        Ok(())
    }

    /// A digest of the run, which a replay must reproduce.
    fn digest(&self) -> String {
        let mut out = self.trace.join("\n");
        for node in &self.nodes {
            if let Some(r) = &node.running {
                out.push_str(&format!(
                    "\nmember {}: applied {} state {:?}",
                    node.id,
                    r.db.applied_lsn(),
                    state_of(&r.db)
                ));
            }
        }
        out
    }
}

/// A member's log records as (LSN, term, kind, key, body), timestamps
/// aside (they are the machine's clock).
type LogRecord = (Lsn, u64, String, Vec<u8>, Vec<u8>);

fn records(db: &Database) -> Result<Vec<LogRecord>, String> {
    let mut out = Vec::new();
    let mut reader = db.log().reader(1);
    loop {
        let batch = reader
            .next_batch(4096)
            .map_err(|e| format!("reading a log: {e}"))?;
        if batch.is_empty() {
            return Ok(out);
        }
        out.extend(
            batch
                .into_iter()
                .map(|r| (r.lsn, r.term, format!("{:?}", r.kind), r.key, r.body)),
        );
    }
}

/// The outcome of one seed: the digest, or what failed.
struct Outcome {
    digest: String,
    failure: Option<String>,
    acknowledged: usize,
}

fn run(seed: u64, plant: Plant) -> Outcome {
    group::runtime::seed_thread_rng(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let mut sim = Sim::new(seed, plant);
        for i in 0..sim.nodes.len() {
            sim.boot(i).await;
        }
        for _ in 0..STEPS {
            sim.step().await;
        }
        let failure = match sim.converge().await {
            Ok(leader) => sim.check(leader).err(),
            Err(e) => Some(e),
        };
        let acknowledged = sim.ops.iter().filter(|o| o.acknowledged).count();
        let digest = sim.digest();
        for node in &mut sim.nodes {
            node.crash(&sim.net).await;
        }
        Outcome {
            digest,
            failure,
            acknowledged,
        }
    })
}

fn seeds() -> Vec<u64> {
    if let Ok(one) = std::env::var("AQUEDUCT_SIM_SEED") {
        return vec![one.parse().expect("AQUEDUCT_SIM_SEED is a number")];
    }
    let n = std::env::var("AQUEDUCT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS);
    (1..=n).collect()
}

#[test]
fn the_group_keeps_every_acknowledged_write_under_faults() {
    let mut acknowledged = 0;
    let seeds = seeds();
    for &seed in &seeds {
        let outcome = run(seed, Plant::None);
        if let Some(why) = outcome.failure {
            panic!(
                "seed {seed}: {why}\nreplay it with AQUEDUCT_SIM_SEED={seed} cargo test -p \
                 aqueduct-replicate --test simulation\nlast events:\n{}",
                tail(&outcome.digest, 40)
            );
        }
        acknowledged += outcome.acknowledged;
        if std::env::var_os("AQUEDUCT_SIM_TRACE").is_some() {
            println!("seed {seed}:\n{}", outcome.digest);
        }
    }
    // The runs did write: a simulation that acknowledges nothing checks
    // nothing.
    assert!(
        acknowledged >= 20 * seeds.len(),
        "only {acknowledged} writes were acknowledged in {} runs",
        seeds.len()
    );
}

#[test]
fn a_seed_replays_exactly() {
    let seed = seeds()[0] + 1000;
    let a = run(seed, Plant::None);
    let b = run(seed, Plant::None);
    assert!(a.acknowledged > 0);
    if a.digest != b.digest {
        let at = a
            .digest
            .lines()
            .zip(b.digest.lines())
            .position(|(x, y)| x != y);
        panic!("seed {seed} ran differently twice (first difference at event {at:?})");
    }
}

#[test]
fn the_checks_catch_a_write_acknowledged_before_the_group_committed_it() {
    // A leader cut off with writes it applied but could not commit loses
    // them to the majority's new leader: acknowledging them early is
    // caught within a few seeds.
    let caught = (1..=40).find_map(|seed| run(seed, Plant::AcknowledgeEarly).failure);
    let why = caught.expect("no seed caught writes acknowledged before the group committed them");
    assert!(why.contains("is lost"), "{why}");
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
