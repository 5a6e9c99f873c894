//! A Raft group of voting members replicating the log
//! (`docs/replication.md`, "The Raft group").
//!
//! Consensus comes from openraft (pinned to one version); this module is
//! the thin layer between it and the server: the log storage and state
//! machine over the log and tables ([`store`]), messages over HTTP
//! ([`network`]), and [`Member`], through which the server proposes
//! commits, asks for read indexes, changes membership and reads status.

pub mod entries;
pub mod network;
pub mod runtime;
pub mod store;
pub mod types;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_expr::SqlError;
use aqueduct_log::{wire, Lsn, Record};
use aqueduct_tables::{Database, Replicator, TableError};
use openraft::{BasicNode, ChangeMembers, RaftNetworkFactory, ServerState};

pub use network::MAX_MESSAGE_BYTES;
pub use store::{prepare, prepare_on, Prepared};
use types::{Group, NodeId, Proposal, Raft};

/// Proposals a leader has in flight at most; a commit waits (under the
/// commit lock, so every commit waits) while there are more.
pub const MAX_PROPOSALS_IN_FLIGHT: u64 = 4096;
/// How long a commit waits for the group to commit it before its outcome
/// is reported unknown.
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);
/// How long a new leader's first write waits for it to apply what earlier
/// leaders committed.
pub const LEADER_READY_WAIT: Duration = Duration::from_secs(5);
/// Entries one Raft message carries at most.
pub const MAX_MESSAGE_ENTRIES: u64 = 256;
/// How often a member taking over the leadership calls an election.
pub const TRANSFER_STEP: Duration = Duration::from_millis(500);
/// How long a transfer of leadership may take.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `SHOW CLUSTER` waits for each other member's state.
pub const MEMBER_STATUS_TIMEOUT: Duration = Duration::from_secs(1);
const _: () = assert!(TRANSFER_STEP.as_millis() * 4 <= TRANSFER_TIMEOUT.as_millis());
/// How often the leader moves its compaction hold to what the members
/// still need.
pub const HOLD_EVERY: Duration = Duration::from_secs(1);
/// The name of that hold in the log.
pub const MEMBERS_HOLD: &str = "raft-members";
/// Raft's heartbeat and election timeouts, in milliseconds.
/// A member that heard nothing from its leader for the election timeout
/// (a random time in the range) calls an election: long enough that a
/// busy machine's late heartbeat does not start one.
pub const HEARTBEAT_MS: u64 = 150;
pub const ELECTION_TIMEOUT_MS: (u64, u64) = (1000, 2000);
const _: () = assert!(HEARTBEAT_MS * 3 <= ELECTION_TIMEOUT_MS.0);
const _: () = assert!(ELECTION_TIMEOUT_MS.0 < ELECTION_TIMEOUT_MS.1);

/// How a member joins its group (`serve --node-id --cluster [--join]`).
#[derive(Clone, Debug)]
pub struct GroupConfig {
    pub node_id: NodeId,
    /// The group's first members: id → HTTP address.
    pub members: BTreeMap<NodeId, String>,
    /// A new member added later (`cluster add`): waits to be contacted
    /// rather than forming the group.
    pub join: bool,
    /// A bearer token for the other members' HTTP listeners.
    pub token: Option<String>,
}

impl GroupConfig {
    /// Parses `1=host:port,2=host:port,...`.
    pub fn parse_members(spec: &str) -> Result<BTreeMap<NodeId, String>, String> {
        let mut out = BTreeMap::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addr) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not ID=HOST:PORT"))?;
            let id: NodeId = id
                .trim()
                .parse()
                .map_err(|_| format!("{id:?} is not a member id (a positive integer)"))?;
            if id == 0 {
                return Err("member ids start at 1".into());
            }
            if out.insert(id, addr.trim().to_string()).is_some() {
                return Err(format!("member {id} is named twice"));
            }
        }
        if out.is_empty() {
            return Err("no member named".into());
        }
        Ok(out)
    }
}

/// One member of a running group.
pub struct Member {
    pub raft: Raft,
    pub shared: Arc<store::Shared>,
    config: GroupConfig,
    runtime: tokio::runtime::Handle,
    in_flight: Arc<AtomicU64>,
    /// Records committed here and not yet proposed, in LSN order
    /// (`Replicator::propose`), and the proposer's wake-up.
    pending: Arc<parking_lot::Mutex<Vec<Record>>>,
    pending_ready: Arc<tokio::sync::Notify>,
}

/// Starts this member's Raft over `db` (rebuilt to `prepared`'s replay
/// point), forms the group if this is its first start and this member has
/// the lowest id, and makes `db` propose its commits through it.
pub async fn start(
    prepared: Prepared,
    db: Arc<Database>,
    config: GroupConfig,
) -> Result<Arc<Member>, String> {
    let network = network::Network {
        token: config.token.clone(),
        routes: config.members.clone(),
    };
    start_with(prepared, db, config, network).await
}

/// [`start`] with the members reached through `network` (the
/// simulation's delivers messages in one process).
pub async fn start_with<N: RaftNetworkFactory<Group>>(
    prepared: Prepared,
    db: Arc<Database>,
    config: GroupConfig,
    network: N,
) -> Result<Arc<Member>, String> {
    if !config.members.contains_key(&config.node_id) {
        return Err(format!(
            "--node-id {} is not among the --cluster members ({})",
            config.node_id,
            config
                .members
                .keys()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let shared = prepared.shared.attach(config.node_id, db.clone());
    let raft_config = openraft::Config {
        cluster_name: "aqueduct".into(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MS.0,
        election_timeout_max: ELECTION_TIMEOUT_MS.1,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_payload_entries: MAX_MESSAGE_ENTRIES,
        ..Default::default()
    }
    .validate()
    .map_err(|e| format!("the Raft settings: {e}"))?;
    let raft = Raft::new(
        config.node_id,
        Arc::new(raft_config),
        network,
        store::LogStore(shared.clone()),
        store::StateMachine(shared.clone()),
    )
    .await
    .map_err(|e| format!("starting Raft: {e}"))?;
    let fresh = raft
        .is_initialized()
        .await
        .map(|i| !i)
        .map_err(|e| e.to_string())?;
    let lowest = config.members.keys().next().copied();
    if fresh && !config.join && lowest == Some(config.node_id) {
        let nodes: BTreeMap<NodeId, BasicNode> = config
            .members
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        match raft.initialize(nodes).await {
            Ok(()) => tracing::info!("formed a Raft group of {} members", config.members.len()),
            Err(e) => tracing::info!("the group is formed already ({e})"),
        }
    }
    let member = Arc::new(Member {
        raft,
        shared,
        config,
        runtime: tokio::runtime::Handle::current(),
        in_flight: Arc::new(AtomicU64::new(0)),
        pending: Default::default(),
        pending_ready: Default::default(),
    });
    tokio::spawn(proposer(Arc::downgrade(&member)));
    tokio::spawn(watch_core(
        member.raft.clone(),
        Arc::downgrade(&member.shared),
    ));
    db.set_replicator(member.clone());
    let weak = Arc::downgrade(&member);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(HOLD_EVERY);
        loop {
            every.tick().await;
            let Some(member) = weak.upgrade() else { return };
            member.hold_for_members();
        }
    });
    Ok(member)
}

fn refused(code: &'static str, message: String, hint: &'static str) -> TableError {
    TableError::Refused(SqlError::new(code, message).with_hint(hint))
}

impl Member {
    pub fn id(&self) -> NodeId {
        self.config.node_id
    }

    /// The current leader and its HTTP address, as this member knows.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let m = self.raft.metrics().borrow().clone();
        let id = m.current_leader?;
        let addr = self.config.members.get(&id).cloned().or_else(|| {
            m.membership_config
                .membership()
                .get_node(&id)
                .map(|n| n.addr.clone())
        })?;
        Some((id, addr))
    }

    /// The group's token, which members present to each other.
    pub fn token(&self) -> Option<&str> {
        self.config.token.as_deref()
    }

    pub fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.config.node_id)
    }

    /// Whether a write here would be taken now: this member leads, has
    /// applied what earlier leaders committed, and has room for another
    /// proposal. (A commit waits for that; the simulation, which cannot
    /// wait on its one thread, asks first.)
    pub fn takes_writes(&self) -> bool {
        self.is_leader() && self.shared.diverged().is_none() && self.writable_under_lock()
    }

    fn current_term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// On the leader: keeps compaction off every record some member has
    /// not copied yet (a member that never answered holds the whole log,
    /// until it is removed from the group).
    fn hold_for_members(&self) {
        let m = self.raft.metrics().borrow().clone();
        let (ServerState::Leader, Some(replication)) = (m.state, m.replication.as_ref()) else {
            return;
        };
        let low = replication
            .iter()
            .filter(|(id, _)| **id != self.config.node_id)
            .map(|(_, matched)| {
                matched
                    .and_then(|l| self.shared.lsn_of(l.index))
                    .unwrap_or(0)
            })
            .min()
            .unwrap_or_else(|| self.shared.committed_lsn());
        let log = self.shared.log();
        if let Err(e) = log.set_hold(MEMBERS_HOLD, Some((low + 1).max(log.exact_from()))) {
            tracing::warn!("holding the log for the group's members: {e}");
        }
    }

    /// The LSN a linearizable read must see: on the leader, its read index
    /// (confirmed by a quorum) as an LSN; elsewhere asked of the leader.
    pub fn read_index_lsn(&self, timeout: Duration) -> Result<Lsn, String> {
        if self.is_leader() {
            let raft = self.raft.clone();
            let read = self
                .runtime
                .block_on(
                    async move { tokio::time::timeout(timeout, raft.ensure_linearizable()).await },
                )
                .map_err(|_| "the leader's read index took too long".to_string())?
                .map_err(|e| format!("the leader's read index: {e}"))?;
            let lsn = match read {
                Some(id) => self
                    .shared
                    .lsn_of(id.index)
                    .ok_or_else(|| format!("entry {} is not in the index", id.index))?,
                None => 0,
            };
            return Ok(lsn);
        }
        let (id, addr) = self
            .leader()
            .ok_or_else(|| "the group has no leader now".to_string())?;
        let config = crate::FollowConfig {
            members: vec![addr],
            token: self.config.token.clone(),
            seed: id,
        };
        crate::read_index::committed_lsn(&config, 0, 1, timeout)
    }

    /// Adds `id` at `addr` as a learner (it copies the log but does not
    /// vote), waiting until it caught up.
    pub async fn add_learner(&self, id: NodeId, addr: String) -> Result<(), String> {
        self.raft
            .add_learner(id, BasicNode::new(addr), true)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Makes learner or new member `id` a voter.
    pub async fn add_voter(&self, id: NodeId) -> Result<(), String> {
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// On the leader: hands the leadership to member `to`. The leader stops
    /// its heartbeats (and its own elections), so the members' leases on
    /// it run out, while `to` calls elections until it wins; then the
    /// heartbeats resume, whoever leads.
    pub async fn transfer_to(&self, to: NodeId, timeout: Duration) -> Result<(), String> {
        if to == self.config.node_id && self.is_leader() {
            return Ok(());
        }
        if !self.is_leader() {
            return Err(format!(
                "member {} does not lead the group",
                self.config.node_id
            ));
        }
        let m = self.raft.metrics().borrow().clone();
        if !m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == to)
        {
            return Err(format!("member {to} is not a voter of the group"));
        }
        let addr = self
            .config
            .members
            .get(&to)
            .cloned()
            .or_else(|| {
                m.membership_config
                    .membership()
                    .get_node(&to)
                    .map(|n| n.addr.clone())
            })
            .ok_or_else(|| format!("no address for member {to}"))?;
        let handle = self.raft.runtime_config();
        handle.heartbeat(false);
        handle.elect(false);
        let deadline = Instant::now() + timeout;
        let result = loop {
            let (addr, token) = (addr.clone(), self.config.token.clone());
            let called = tokio::task::spawn_blocking(move || {
                aqueduct_mirror::http::request(
                    &addr,
                    "POST",
                    "/v1/cluster/elect",
                    token.as_deref(),
                    None,
                    TRANSFER_STEP,
                )
                .map(|r| r.status)
            })
            .await;
            let won = self
                .raft
                .wait(Some(TRANSFER_STEP))
                .metrics(|m| m.current_leader == Some(to), "the new leader")
                .await
                .is_ok();
            if won {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err(format!(
                    "member {to} did not win an election within {timeout:?} (last call: {called:?})"
                ));
            }
        };
        handle.heartbeat(true);
        handle.elect(true);
        result
    }

    /// Removes `id` from the group (voter or learner).
    pub async fn remove(&self, id: NodeId) -> Result<(), String> {
        let m = self.raft.metrics().borrow().membership_config.clone();
        let voters: BTreeSet<NodeId> = m.membership().voter_ids().collect();
        if voters.contains(&id) {
            self.raft
                .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
                .await
                .map_err(|e| e.to_string())?;
        }
        self.raft
            .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// This member's view of the group, as JSON (`GET /v1/cluster`).
    pub fn status(&self) -> serde_json::Value {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let db = &self.shared.db;
        let committed = self.shared.committed_lsn();
        let members: Vec<serde_json::Value> = membership
            .nodes()
            .map(|(id, node)| {
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id).cloned().flatten())
                    .map(|l| l.index);
                serde_json::json!({
                    "id": id,
                    "addr": node.addr,
                    "voter": voters.contains(id),
                    "leader": m.current_leader == Some(*id),
                    "matched_index": matched,
                })
            })
            .collect();
        serde_json::json!({
            "node_id": self.config.node_id,
            "role": match m.state {
                // Not (yet, or any more) in the membership it holds: a
                // member joining, or one removed.
                _ if membership.get_node(&self.config.node_id).is_none() => "outside",
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            },
            "term": m.current_term,
            "leader": m.current_leader,
            "last_log_index": m.last_log_index,
            "applied_index": m.last_applied.map(|l| l.index),
            "commit_lsn": committed,
            "applied_lsn": db.applied_lsn(),
            "log_lsn": db.log().next_lsn().saturating_sub(1),
            "lag": db.log().next_lsn().saturating_sub(1).saturating_sub(committed),
            "diverged": self.shared.diverged(),
            "members": members,
        })
    }

    /// Prometheus lines for this member.
    pub fn metrics(&self, out: &mut String) {
        let m = self.raft.metrics().borrow().clone();
        let leader = u64::from(m.state == ServerState::Leader);
        for (name, help, v) in [
            (
                "aqueduct_raft_term",
                "The Raft term this member is in.",
                m.current_term,
            ),
            (
                "aqueduct_raft_leader",
                "1 while this member leads its group.",
                leader,
            ),
            (
                "aqueduct_raft_last_log_index",
                "The last Raft entry in this member's log.",
                m.last_log_index.unwrap_or(0),
            ),
            (
                "aqueduct_raft_applied_index",
                "The last Raft entry applied to this member's tables.",
                m.last_applied.map_or(0, |l| l.index),
            ),
            (
                "aqueduct_raft_commit_lsn",
                "The last LSN the group committed, as this member knows.",
                self.shared.committed_lsn(),
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n"
            ));
        }
    }
}

impl Member {
    /// A leader writes only after applying what earlier leaders committed
    /// (its own first entry commits them), so its writes are applied in
    /// log order; and with room for another proposal.
    fn writable(&self) -> bool {
        self.shared.ready_term() >= self.current_term()
            && self.in_flight.load(Ordering::Acquire) < MAX_PROPOSALS_IN_FLIGHT
    }

    /// [`Member::writable`], and nothing in the log left unapplied: exact
    /// only under the commit lock. (Outside it another commit may be
    /// between its append and its apply; waiting on that would wait for
    /// the group's next apply, one commit round for nothing.)
    fn writable_under_lock(&self) -> bool {
        let db = &self.shared.db;
        self.writable() && db.applied_lsn() + 1 == db.log().next_lsn()
    }
}

/// Makes the member rebuild (restart) once its Raft core stopped on an
/// error: a storage call that failed (a vote or purge not saved, an entry
/// not read back) stops the core, and a member whose core stopped would
/// otherwise serve ever staler reads and never vote again. A stop the
/// server asked for (its orderly shutdown) is not an error.
async fn watch_core(raft: Raft, shared: std::sync::Weak<store::Shared>) {
    let mut metrics = raft.metrics();
    loop {
        let stopped = metrics.borrow().running_state.clone().err();
        match stopped {
            Some(openraft::error::Fatal::Stopped) => return,
            Some(fatal) => {
                if let Some(shared) = shared.upgrade() {
                    shared.diverge(format!("its Raft core stopped: {fatal}"));
                }
                return;
            }
            None => {}
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// The leader's proposer: takes the commits queued since its last
/// proposal, proposes them as one entry (in commit order, as queued under
/// the commit lock), and waits until the Raft core appended that entry
/// before the next. A proposal the group refuses makes the member rebuild
/// its tables (it applied those commits).
async fn proposer(member: std::sync::Weak<Member>) {
    loop {
        let Some(ready) = member.upgrade().map(|m| m.pending_ready.clone()) else {
            return;
        };
        ready.notified().await;
        let Some(m) = member.upgrade() else { return };
        loop {
            let records = std::mem::take(&mut *m.pending.lock());
            let (Some(first), Some(last)) = (records.first(), records.last()) else {
                break;
            };
            let lsns = (first.lsn, last.lsn);
            let proposal = Proposal {
                first: lsns.0,
                last: lsns.1,
                records: wire::encode(
                    &records,
                    wire::Sender {
                        committed: m.shared.committed_lsn(),
                        exact_from: m.shared.log().exact_from(),
                    },
                ),
            };
            let rx = match m.raft.client_write_ff(proposal).await {
                Ok(rx) => rx,
                Err(e) => {
                    m.shared.diverge(format!(
                        "the batch at LSNs {}..={} was applied here but could not be proposed \
                         ({e})",
                        lsns.0, lsns.1
                    ));
                    continue;
                }
            };
            m.in_flight.fetch_add(1, Ordering::AcqRel);
            let (shared, in_flight) = (m.shared.clone(), m.in_flight.clone());
            tokio::spawn(async move {
                let outcome = rx.await;
                in_flight.fetch_sub(1, Ordering::AcqRel);
                shared.notify();
                let failed = match outcome {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(e) = failed {
                    shared.diverge(format!(
                        "the batch at LSNs {}..={} was applied here but not committed by the \
                         group ({e})",
                        lsns.0, lsns.1
                    ));
                }
            });
            // The next entry goes once this one is appended, carrying
            // every commit made meanwhile; a member that stopped leading
            // never appends it, and its response says so (above).
            let mut appended = m.shared.appended.subscribe();
            let _ = tokio::time::timeout(COMMIT_WAIT, appended.wait_for(|&a| a >= lsns.1)).await;
        }
    }
}

impl Replicator for Member {
    fn await_writable(&self) {
        if self.is_leader() && self.shared.diverged().is_none() {
            let deadline = Instant::now() + LEADER_READY_WAIT;
            self.shared.wait_until(deadline, || self.writable());
        }
    }

    fn may_write(&self) -> Result<(), TableError> {
        if let Some(why) = self.shared.diverged() {
            return Err(refused(
                "57P03",
                format!("this member is rebuilding its tables: {why}"),
                "retry in a moment, or on another member",
            ));
        }
        if !self.is_leader() {
            let leader = match self.leader() {
                Some((id, addr)) => format!("member {id} (HTTP {addr})"),
                None => "not known yet (an election is under way)".into(),
            };
            return Err(refused(
                "25006",
                format!(
                    "cannot execute a write on member {}: it follows the group's leader, {leader}",
                    self.config.node_id
                ),
                "send writes to the leader; `aqueduct cluster status` names it",
            ));
        }
        if !self.writable_under_lock() {
            return Err(refused(
                "57P03",
                format!(
                    "member {} leads the group but has not yet applied what earlier leaders \
                     committed",
                    self.config.node_id
                ),
                "retry in a moment",
            ));
        }
        Ok(())
    }

    /// Queues `records` for the proposer, which proposes every queued
    /// commit as one entry once the previous entry is appended here: the
    /// Raft core appends (and syncs) entry by entry, so commits that wait
    /// for one sync share the next.
    fn propose(&self, records: Vec<Record>) -> Result<(), TableError> {
        if records.is_empty() {
            return Ok(());
        }
        if let Some(why) = self.shared.diverged() {
            return Err(refused(
                "57P03",
                format!("this member is rebuilding its tables: {why}"),
                "retry in a moment, or on another member",
            ));
        }
        self.pending.lock().extend(records);
        self.pending_ready.notify_one();
        Ok(())
    }

    fn await_committed(&self, lsn: Lsn) -> Result<(), TableError> {
        let deadline = Instant::now() + COMMIT_WAIT;
        let shared = &self.shared;
        if shared.await_committed_lsn(lsn, deadline) && shared.committed_lsn() >= lsn {
            return Ok(());
        }
        let why = shared
            .diverged()
            .unwrap_or_else(|| format!("not committed by the group within {COMMIT_WAIT:?}"));
        Err(refused(
            "40003",
            format!("the outcome of the write at LSN {lsn} is unknown: {why}"),
            "check whether it took effect before retrying it",
        ))
    }

    fn is_committed(&self, lsn: Lsn) -> bool {
        self.shared.committed_lsn() >= lsn
    }

    fn committed_lsn(&self) -> Lsn {
        self.shared.committed_lsn()
    }

    fn log_failed(&self, why: &str) {
        // Restarting in place rebuilds from the log if the disk came back;
        // if it did not, the start fails and the others elect a leader.
        self.shared
            .diverge(format!("the log refused a write on this member: {why}"));
    }
}
