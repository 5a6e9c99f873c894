//! The shell around the sequencers: logical servers that run hops
//! (`docs/chains.md`, "Running a chain").
//!
//! Each logical server is a thread that runs one hop at a time, in a
//! session of its own, as a SERIALIZABLE transaction of the engine
//! (`hop.rs`). A hop's server is its shard key's hash over the logical
//! servers of the whole placement (`placement.rs`); the servers of other
//! nodes are reached over the wire (`wire.rs`). Each server owns a
//! [`Sequencer`] whose durable state is written with every hop it runs:
//! a chain is stamped in its first hop's transaction, and every later hop
//! runs at its server only in its origin's order (Lynx §6.2).
//!
//! Exactly once: a hop on the same node as the one before it is checked
//! against the chain's progress row; a hop from another node is checked
//! against the sequencer's durable `done` counter, and its sender keeps
//! the chain's row and sends the hop again until the receiver
//! acknowledges it. After a restart [`Runtime::start`] restores the
//! sequencers and sends every chain the progress table holds on to its
//! next hop, with the stamps it was given.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use aqueduct_chains::sequencer::{Effect, HopArrival, Sequencer, SequencerState, ServerId};
use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_plan::plan::Outcome;
use aqueduct_values::{DataType, Value};

use super::declare::{ChainDecl, HopKey};
use super::hop::{
    decode_all, decode_order, decode_slots, decode_stamps, encode_order, encode_slots,
    error_from_wire, error_to_wire, retryable, run_hop, try_whole, ChainId, DeclSource, Entry,
    HopContext, HopOutcome, HopSession, Ids, ProgressSql, Run, Ticket, ORDER_TABLE, PROGRESS_TABLE,
};
use super::latency::{Datacenters, DelayLine};
use super::placement::{Placement, LOGICAL_SERVERS, MAX_CHAIN_NODES};
use super::wire::{Transport, Wire};

/// Makes a session for hops; `None` once the engine is gone.
pub type SessionFactory = Arc<dyn Fn() -> Option<Box<dyn HopSession>> + Send + Sync>;
/// Whether the engine still runs (false once it is gone or stopping).
pub type Alive = Arc<dyn Fn() -> bool + Send + Sync>;

/// The most chains one node holds started and not yet completed (or
/// handed to another node and not yet acknowledged); a `CALL` past it is
/// refused (53400) until some complete. It bounds every queue here.
pub const MAX_CHAINS_IN_FLIGHT: usize = 10_000;
/// How often a waiting logical server looks whether its engine is gone.
const IDLE_CHECK: Duration = Duration::from_millis(500);
/// A hop sent to another node and not acknowledged within this is sent
/// again.
const RESEND_AFTER: Duration = Duration::from_secs(1);
/// How often a server with unacknowledged hops looks at them.
const RESEND_TICK: Duration = Duration::from_millis(200);
/// How long a `CALL` waits for the node of its first hop.
const REMOTE_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A hop that meets a serialization failure runs again; the first hop
/// gives up after this many tries and the `CALL` reports the failure.
const FIRST_HOP_TRIES: usize = 50;

// Every node may send a server all its chains in flight.
const _: () =
    assert!(MAX_CHAINS_IN_FLIGHT * MAX_CHAIN_NODES <= aqueduct_chains::sequencer::MAX_QUEUED_HOPS);
const _: () = assert!(MAX_CHAINS_IN_FLIGHT <= super::wire::MAX_QUEUED_MESSAGES);

/// How a `CALL` ended, for its result row.
#[derive(Clone, Debug, PartialEq)]
pub enum CallStatus {
    /// The first hop committed; later hops run on.
    Started,
    /// Every hop committed.
    Completed,
    /// The first hop's `ABORT IF` held: nothing was written.
    Aborted,
}

impl CallStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            CallStatus::Started => "started",
            CallStatus::Completed => "completed",
            CallStatus::Aborted => "aborted",
        }
    }

    fn parse(s: &str) -> CallStatus {
        match s {
            "completed" => CallStatus::Completed,
            "aborted" => CallStatus::Aborted,
            _ => CallStatus::Started,
        }
    }
}

/// What a `CALL` learns when its chain has started (or ended).
#[derive(Clone, Debug)]
pub struct Started {
    pub id: ChainId,
    pub status: CallStatus,
    /// The commit LSN of the first hop (of the whole chain when it
    /// completed), on the node that ran it.
    pub lsn: Lsn,
    /// The slots as they were then, and their types.
    pub slots: Vec<Value>,
    pub types: Vec<Option<DataType>>,
    pub ticket: Arc<Ticket>,
}

/// Where a first hop's outcome goes.
type Reply = Box<dyn FnOnce(Result<Started, SqlError>) + Send>;

/// The simulated datacenters and the line that holds hops between them.
type Delays = (Datacenters, Arc<DelayLine<(usize, Msg)>>);

enum Msg {
    /// A chain's first hop; `reply` is where its `CALL` waits (none for a
    /// linked chain), `from` the server that linked it from another node.
    Start {
        run: Box<Run>,
        entry: Entry,
        reply: Option<Reply>,
        from: Option<ServerId>,
    },
    /// A later hop, stamped, sent by server `from`.
    Arrive {
        run: Box<Run>,
        arrival: HopArrival,
        from: ServerId,
    },
    /// A chain to start once another's last hop committed.
    Linked { run: Box<Run> },
    /// The hop `hop` of chain `id` this server sent to another node has
    /// committed there.
    Acked { id: ChainId, hop: usize },
    /// A linked start from another node will not come again.
    Forget { id: ChainId },
    /// A message for another node, found in the progress table at start:
    /// send it until it is acknowledged.
    Resend {
        key: (ChainId, usize),
        node: usize,
        wire: Wire,
    },
    /// A distributed transaction takes this server: it runs nothing until
    /// `release` is dropped.
    Lock {
        locked: mpsc::SyncSender<()>,
        release: mpsc::Receiver<()>,
    },
}

/// What the logical servers of a node and its wire share.
struct Shared {
    placement: Placement,
    decls: DeclSource,
    ids: Ids,
    in_flight: AtomicUsize,
    /// This node's servers.
    servers: Vec<mpsc::Sender<Msg>>,
    transport: OnceLock<Transport>,
    delays: Option<Delays>,
    /// Tickets of chains whose session waits here and which run on
    /// another node now.
    tickets: parking_lot::Mutex<HashMap<ChainId, Arc<Ticket>>>,
    /// `CALL`s waiting for the node of their first hop.
    calls: parking_lot::Mutex<HashMap<ChainId, PendingCall>>,
}

/// A `CALL` waiting for another node: where it waits, its chain, its
/// ticket and the node.
type PendingCall = (
    mpsc::SyncSender<Result<Started, SqlError>>,
    Arc<ChainDecl>,
    Arc<Ticket>,
    usize,
);

impl Shared {
    fn send_to_node(&self, node: usize, msg: Wire) {
        if let Some(t) = self.transport.get() {
            t.send(node, msg);
        }
    }

    /// Delivers to one of this node's servers, after the simulated
    /// round trip from `from` when there is one.
    fn deliver_local(&self, from: Option<ServerId>, to: ServerId, msg: Msg) {
        let index = self.placement.local(to).expect("a server of this node");
        match (&self.delays, from) {
            (Some((d, line)), Some(from)) if !d.round_trip(from, to).is_zero() => {
                line.send_after(d.round_trip(from, to), (index, msg));
            }
            _ => {
                let _ = self.servers[index].send(msg);
            }
        }
    }

    /// The waiting session's ticket for a run that came back to its home.
    fn ticket_for(&self, home: usize, ticket: ChainId) -> Arc<Ticket> {
        if home == self.placement.node {
            if let Some(t) = self.tickets.lock().remove(&ticket) {
                return t;
            }
        }
        Arc::new(Ticket::default())
    }

    /// A run leaves this node: its ticket waits here for it.
    fn keep_ticket(&self, run: &Run) {
        if run.home == self.placement.node {
            self.tickets
                .lock()
                .insert(run.ticket_id, run.ticket.clone());
        }
    }

    /// A chain from another node whose first hop is on this one.
    fn start_here(&self, run: Run, entry: Entry, reply: Option<Reply>, from: Option<ServerId>) {
        let origin = path_of(&self.placement, &run.decl, &run.slots)[0];
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let run = Box::new(run);
        self.deliver_local(
            None,
            origin,
            Msg::Start {
                run,
                entry,
                reply,
                from,
            },
        );
    }

    /// The connection to `node` closed: the `CALL`s waiting for it may
    /// never hear, and are told so.
    fn lost(&self, node: usize) {
        let gone: Vec<(ChainId, PendingCall)> = {
            let mut calls = self.calls.lock();
            let ids: Vec<ChainId> = calls
                .iter()
                .filter(|(_, c)| c.3 == node)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| calls.remove(&id).map(|c| (id, c)))
                .collect()
        };
        for (id, (reply, ..)) in gone {
            self.tickets.lock().remove(&id);
            let _ = reply.send(Err(SqlError::new(
                "08006",
                format!(
                    "node {node} ({}), which holds the chain's first hop, went away; the chain may have started there",
                    self.placement.nodes[node]
                ),
            )));
        }
    }

    /// A message from another node.
    fn receive(self: &Arc<Shared>, msg: Wire) {
        match msg {
            Wire::Call { run } => {
                let home = run.home;
                let id = run.id;
                match Run::from_wire(run, &self.decls, Arc::new(Ticket::default())) {
                    Ok(run) => {
                        // The reply goes back over the wire from the
                        // logical server's thread.
                        let shared = self.clone();
                        let reply: Reply = Box::new(move |r: Result<Started, SqlError>| {
                            let outcome = r
                                .map(|s| {
                                    (
                                        s.status.as_str().to_string(),
                                        s.lsn,
                                        encode_slots(&s.slots, &s.types),
                                    )
                                })
                                .map_err(|e| error_to_wire(&e));
                            shared.send_to_node(home, Wire::Called { id, outcome });
                        });
                        self.start_here(run, Entry::Called, Some(reply), None);
                    }
                    Err(e) => self.send_to_node(
                        home,
                        Wire::Called {
                            id,
                            outcome: Err(error_to_wire(&e)),
                        },
                    ),
                }
            }
            Wire::Called { id, outcome } => {
                let Some((reply, decl, ticket, _)) = self.calls.lock().remove(&id) else {
                    return;
                };
                let answer = match outcome {
                    Ok((status, lsn, slots)) => match decode_slots(&slots, decl.slots.len()) {
                        Ok((slots, types)) => Ok(Started {
                            id,
                            status: CallStatus::parse(&status),
                            lsn,
                            slots,
                            types,
                            ticket,
                        }),
                        Err(why) => Err(SqlError::new("XX001", why)),
                    },
                    Err(e) => {
                        self.tickets.lock().remove(&id);
                        Err(error_from_wire(e))
                    }
                };
                let _ = reply.send(answer);
            }
            Wire::Hop { run, hop, from } => {
                let ticket = self.ticket_for(run.home, run.ticket);
                let run = match Run::from_wire(run, &self.decls, ticket) {
                    Ok(r) => r,
                    Err(e) => {
                        // Sent again until the chain is declared here.
                        tracing::error!("a hop from another node cannot run here: {e}");
                        return;
                    }
                };
                let Some(arrival) = run.stamps.as_ref().and_then(|s| s.arrival(hop)) else {
                    tracing::error!(id = run.id, hop, "a hop from another node without stamps");
                    return;
                };
                let to = run.stamps.as_ref().expect("checked above").hops[hop].server;
                if self.placement.local(to).is_none() {
                    tracing::error!(id = run.id, hop, to, "a hop sent to the wrong node");
                    return;
                }
                self.in_flight.fetch_add(1, Ordering::SeqCst);
                self.deliver_local(
                    None,
                    to,
                    Msg::Arrive {
                        run: Box::new(run),
                        arrival,
                        from,
                    },
                );
            }
            Wire::Start { run, from } => {
                let ticket = self.ticket_for(run.home, run.ticket);
                match Run::from_wire(run, &self.decls, ticket) {
                    Ok(run) => self.start_here(run, Entry::LinkedFrom, None, Some(from)),
                    Err(e) => {
                        tracing::error!("a linked chain from another node cannot start here: {e}")
                    }
                }
            }
            Wire::Ack { id, hop, to } => {
                if self.placement.local(to).is_some() {
                    self.deliver_local(None, to, Msg::Acked { id, hop });
                }
            }
            Wire::Forget { id } => {
                let _ = self.servers[0].send(Msg::Forget { id });
            }
            Wire::Done { ticket, outcome } => {
                let Some(t) = self.tickets.lock().remove(&ticket) else {
                    return;
                };
                t.complete(match outcome {
                    Ok((lsn, slots)) => decode_all(&slots)
                        .map(|(s, _)| (lsn, s))
                        .map_err(|why| SqlError::new("XX001", why)),
                    Err(e) => Err(error_from_wire(e)),
                });
            }
        }
    }
}

/// The logical servers of one engine.
pub struct Runtime {
    sessions: SessionFactory,
    datacenters: Option<Datacenters>,
    shared: Arc<Shared>,
}

/// The servers of a chain's hops for these slots.
pub fn path_of(placement: &Placement, decl: &ChainDecl, slots: &[Value]) -> Vec<ServerId> {
    decl.hops
        .iter()
        .map(|h| match &h.key {
            HopKey::Param(i) => placement.server_of(&slots[*i]),
            HopKey::Constant(v) => placement.server_of(v),
        })
        .collect()
}

fn stopped() -> SqlError {
    SqlError::new("57P01", "the server is stopping; the chain did not start")
}

fn rows(out: Outcome) -> Vec<Vec<Value>> {
    match out {
        Outcome::Rows { rows, .. } => rows,
        _ => Vec::new(),
    }
}

impl Runtime {
    /// Starts the logical servers of this node, restores their
    /// sequencers and sends on every chain the progress table holds.
    pub fn start(
        sessions: SessionFactory,
        alive: Alive,
        decls: DeclSource,
        datacenters: Option<Datacenters>,
        placement: Placement,
    ) -> Result<Arc<Runtime>, SqlError> {
        let mut s = sessions().ok_or_else(stopped)?;
        ProgressSql::create_tables(s.as_mut())?;
        // Each server's sequencer, as its last hop left it.
        let mut orders: HashMap<ServerId, SequencerState> = HashMap::new();
        for row in rows(s.execute_one(&format!("SELECT server, state FROM {ORDER_TABLE}"))?) {
            if let (Some(Value::Int(server)), Some(Value::Text(state))) = (row.first(), row.get(1))
            {
                let server = *server as ServerId;
                let state =
                    decode_order(server, state).map_err(|why| SqlError::new("XX001", why))?;
                orders.insert(server, state);
            }
        }
        let mut sequencers = Vec::with_capacity(LOGICAL_SERVERS);
        for i in 0..LOGICAL_SERVERS {
            let me = placement.global(i);
            let seq = match orders.remove(&me) {
                Some(state) => Sequencer::restore(state),
                None => {
                    let fresh = Sequencer::new(me);
                    s.execute_one(&format!(
                        "INSERT INTO {ORDER_TABLE} (server, state) VALUES ({me}, '{}')",
                        encode_order(&fresh.snapshot())
                    ))?;
                    fresh
                }
            };
            sequencers.push(seq);
        }
        // Chains in flight, oldest first.
        let in_flight_rows = rows(s.execute_one(&format!(
            "SELECT id, chain, next_hop, slots, stamps FROM {PROGRESS_TABLE} WHERE next_hop >= 0 ORDER BY id"
        ))?);
        let max_id = match rows(s.execute_one(&format!(
            "SELECT coalesce(max(id), 0) FROM {PROGRESS_TABLE}"
        ))?)
        .first()
        .and_then(|r| r.first())
        {
            Some(Value::Int(n)) => *n as u64,
            _ => 0,
        };
        let mut senders = Vec::with_capacity(LOGICAL_SERVERS);
        let mut receivers = Vec::with_capacity(LOGICAL_SERVERS);
        for _ in 0..LOGICAL_SERVERS {
            let (tx, rx) = mpsc::channel();
            senders.push(tx);
            receivers.push(rx);
        }
        // Hops between simulated datacenters go through one delay line.
        let delays = match &datacenters {
            Some(d) => {
                let servers = senders.clone();
                let line = DelayLine::start(move |(to, msg): (usize, Msg)| {
                    let _ = servers[to].send(msg);
                })
                .map_err(|e| SqlError::new("53000", format!("cannot start the delay line: {e}")))?;
                Some((d.clone(), Arc::new(line)))
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            ids: Ids::new(max_id, placement.node, placement.node_count()),
            placement: placement.clone(),
            decls: decls.clone(),
            in_flight: AtomicUsize::new(0),
            servers: senders,
            transport: OnceLock::new(),
            delays,
            tickets: parking_lot::Mutex::new(HashMap::new()),
            calls: parking_lot::Mutex::new(HashMap::new()),
        });
        if placement.is_spread() {
            let receiver = shared.clone();
            let watcher = shared.clone();
            let transport = Transport::start(
                &placement,
                Arc::new(move |m| receiver.receive(m)),
                Arc::new(move |node| watcher.lost(node)),
            )
            .map_err(|e| {
                SqlError::new(
                    "53000",
                    format!(
                        "cannot listen for hops on {}: {e}",
                        placement.nodes[placement.node]
                    ),
                )
            })?;
            let _ = shared.transport.set(transport);
        }
        let runtime = Arc::new(Runtime {
            datacenters,
            sessions: sessions.clone(),
            shared: shared.clone(),
        });
        for (i, (rx, seq)) in receivers.into_iter().zip(sequencers).enumerate() {
            let shared = shared.clone();
            let sessions = sessions.clone();
            let alive = alive.clone();
            std::thread::Builder::new()
                .name(format!("chain-server-{i}"))
                // Room for a whole statement, as the server's own threads
                // have: a smaller stack would map a new one per statement.
                .stack_size(aqueduct_expr::limits::SERVER_THREAD_STACK_BYTES)
                .spawn(move || serve(seq, sessions, alive, rx, shared))
                .map_err(|e| {
                    SqlError::new("53000", format!("cannot start a logical server: {e}"))
                })?;
        }
        for row in in_flight_rows {
            if let Err(e) = runtime.resume(&row) {
                tracing::error!("a chain in flight cannot go on: {e}");
            }
        }
        Ok(runtime)
    }

    /// Sends on a chain found in the progress table at start.
    fn resume(&self, row: &[Value]) -> Result<(), SqlError> {
        let shared = &self.shared;
        let (
            Some(Value::Int(id)),
            Some(Value::Text(name)),
            Some(Value::Int(next)),
            Some(Value::Text(slots)),
        ) = (row.first(), row.get(1), row.get(2), row.get(3))
        else {
            return Ok(());
        };
        let id = *id as ChainId;
        let Some(decl) = (shared.decls)(name) else {
            return Err(SqlError::new(
                "42883",
                format!("chain {name} (instance {id}) was dropped; its remaining hops do not run"),
            ));
        };
        let (slot_values, types) =
            decode_slots(slots, decl.slots.len()).map_err(|why| SqlError::new("XX001", why))?;
        let stamps = match row.get(4) {
            Some(Value::Text(t)) => {
                decode_stamps(id, t).map_err(|why| SqlError::new("XX001", why))?
            }
            _ => None,
        };
        let next = *next as usize;
        if next >= decl.hops.len() {
            return Ok(());
        }
        let mut run = Box::new(Run::new(id, decl, slot_values, shared.placement.node));
        run.types = types;
        run.stamps = stamps;
        let path = path_of(&shared.placement, &run.decl, &run.slots);
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        if next == 0 {
            // A linked chain that had not started: it starts now.
            run.linked = true;
            self.send_linked(run);
            return Ok(());
        }
        let Some(stamps) = run.stamps.clone() else {
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(SqlError::new(
                "XX001",
                format!("chain {name} (instance {id}) is in flight without stamps"),
            ));
        };
        let from = stamps.hops[next - 1].server;
        let to = stamps.hops[next].server;
        debug_assert_eq!(to, path[next]);
        if shared.placement.local(to).is_some() {
            let arrival = stamps.arrival(next).expect("inside the path");
            shared.deliver_local(None, to, Msg::Arrive { run, arrival, from });
        } else {
            let node = shared.placement.node_of(to);
            let wire = Wire::Hop {
                run: run.to_wire(),
                hop: next,
                from,
            };
            shared.deliver_local(
                None,
                from,
                Msg::Resend {
                    key: (id, next),
                    node,
                    wire,
                },
            );
        }
        Ok(())
    }

    /// A linked chain goes to a server of this node, which starts it here
    /// or sends it to its origin's node.
    fn send_linked(&self, run: Box<Run>) {
        let _ = self.shared.servers[0].send(Msg::Linked { run });
    }

    /// Runs a chain piecewise: returns once its first hop committed (or
    /// the chain aborted).
    pub fn call(&self, decl: Arc<ChainDecl>, slots: Vec<Value>) -> Result<Started, SqlError> {
        let shared = &self.shared;
        let path = path_of(&shared.placement, &decl, &slots);
        let run = Box::new(Run::new(
            shared.ids.next(),
            decl,
            slots,
            shared.placement.node,
        ));
        if shared.placement.local(path[0]).is_none() {
            return self.call_remote(*run, shared.placement.node_of(path[0]));
        }
        if shared.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_CHAINS_IN_FLIGHT {
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(SqlError::new(
                "53400",
                format!("{MAX_CHAINS_IN_FLIGHT} chains are in flight, the most this server runs"),
            )
            .with_hint("call again once some have completed (WAIT FOR CHAINS)"));
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let index = shared.placement.local(path[0]).expect("checked above");
        if shared.servers[index]
            .send(Msg::Start {
                run,
                entry: Entry::Called,
                reply: Some(Box::new(move |r| {
                    let _ = reply.send(r);
                })),
                from: None,
            })
            .is_err()
        {
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(stopped());
        }
        answer.recv().unwrap_or_else(|_| Err(stopped()))
    }

    /// A chain whose first hop's shard lives on another node: that node
    /// runs it and answers.
    fn call_remote(&self, run: Run, node: usize) -> Result<Started, SqlError> {
        let shared = &self.shared;
        let (reply, answer) = mpsc::sync_channel(1);
        let id = run.id;
        shared.tickets.lock().insert(id, run.ticket.clone());
        shared
            .calls
            .lock()
            .insert(id, (reply, run.decl.clone(), run.ticket.clone(), node));
        shared.send_to_node(node, Wire::Call { run: run.to_wire() });
        match answer.recv_timeout(REMOTE_CALL_TIMEOUT) {
            Ok(r) => r,
            Err(_) => {
                shared.calls.lock().remove(&id);
                shared.tickets.lock().remove(&id);
                Err(SqlError::new(
                    "08006",
                    format!(
                        "node {node} ({}), which holds the chain's first hop, did not answer within {REMOTE_CALL_TIMEOUT:?}; the chain may have started there",
                        shared.placement.nodes[node]
                    ),
                ))
            }
        }
    }

    /// Runs a chain as one distributed transaction: every logical server
    /// its hops touch is taken, in ascending order, then all hops run in
    /// one transaction, committed atomically through the log.
    pub fn call_distributed(
        &self,
        decl: Arc<ChainDecl>,
        slots: Vec<Value>,
    ) -> Result<Started, SqlError> {
        let shared = &self.shared;
        let path = path_of(&shared.placement, &decl, &slots);
        let mut servers = path.clone();
        servers.sort_unstable();
        servers.dedup();
        if let Some(&far) = servers
            .iter()
            .find(|&&s| shared.placement.local(s).is_none())
        {
            return Err(SqlError::new(
                "0A000",
                format!(
                    "chain {} runs as a distributed transaction (EXPLAIN CHAIN {} shows why), \
                     and these arguments put one of its hops on node {}: a distributed \
                     transaction spans the logical servers of one node only",
                    decl.name,
                    decl.name,
                    shared.placement.node_of(far)
                ),
            )
            .with_hint(
                "annotate the hops that commute (COMMUTATIVE, COMMUTES WITH) so the chain runs \
                 piecewise, or keep the shards this chain touches on one node",
            ));
        }
        let mut held = Vec::with_capacity(servers.len());
        for &server in &servers {
            let (locked_tx, locked_rx) = mpsc::sync_channel(1);
            let (release_tx, release_rx) = mpsc::sync_channel::<()>(1);
            let index = shared.placement.local(server).expect("checked above");
            shared.servers[index]
                .send(Msg::Lock {
                    locked: locked_tx,
                    release: release_rx,
                })
                .map_err(|_| stopped())?;
            locked_rx.recv().map_err(|_| stopped())?;
            held.push(release_tx);
        }
        if let Some(d) = &self.datacenters {
            // The simulated network: taking the remote servers and the
            // commit round (`latency.rs`).
            std::thread::sleep(d.distributed_wait(path[0], &servers));
        }
        let mut s = (self.sessions)().ok_or_else(stopped)?;
        let mut run = Run::new(shared.ids.next(), decl, slots, shared.placement.node);
        let sql = ProgressSql::new();
        let cx = HopContext {
            sql: &sql,
            decls: &shared.decls,
            ids: &shared.ids,
            node: shared.placement.node,
        };
        let result = (|| {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let before = (run.slots.clone(), run.types.clone());
                match try_whole(s.as_mut(), &cx, &mut run) {
                    Ok(o) => return Ok(o),
                    Err(e) => {
                        let _ = s.execute_one("ROLLBACK");
                        (run.slots, run.types) = before;
                        if !retryable(&e) || attempt >= FIRST_HOP_TRIES {
                            return Err(e);
                        }
                    }
                }
            }
        })();
        drop(held);
        let (status, linked) = match result? {
            HopOutcome::Aborted => (CallStatus::Aborted, None),
            HopOutcome::Committed(_, linked) => (CallStatus::Completed, linked),
            HopOutcome::AlreadyDone => (CallStatus::Completed, None),
        };
        let lsn = s.last_lsn();
        match linked {
            // The linked chain completes the ticket.
            Some(next) => {
                shared.in_flight.fetch_add(1, Ordering::SeqCst);
                self.send_linked(next)
            }
            None => run.ticket.complete(Ok((lsn, run.slots.clone()))),
        }
        Ok(Started {
            id: run.id,
            status,
            lsn,
            slots: run.slots.clone(),
            types: run.types.clone(),
            ticket: run.ticket.clone(),
        })
    }
}

/// A hop of this server's, waiting or ready: the run, its stamp and the
/// server that sent it.
type Queued = (Box<Run>, HopArrival, ServerId);

/// A first hop waiting for its turn: the run, how it came, where its
/// `CALL` waits and the server that linked it from another node.
type FirstHop = (Box<Run>, Entry, Option<Reply>, Option<ServerId>);

/// One logical server: its sequencer, its session and what waits for it.
struct Server {
    me: ServerId,
    seq: Sequencer,
    session: Box<dyn HopSession>,
    sql: ProgressSql,
    shared: Arc<Shared>,
    first_hops: VecDeque<FirstHop>,
    /// Hops that arrived, by (origin, seq), until their turn.
    waiting: HashMap<(ServerId, u64), (Box<Run>, ServerId)>,
    ready: VecDeque<Queued>,
    /// Messages sent to other nodes and not yet acknowledged: when last
    /// sent, to which node.
    unacked: HashMap<(ChainId, usize), (Instant, usize, Wire)>,
}

impl Server {
    fn node(&self) -> usize {
        self.shared.placement.node
    }

    /// A run leaves this node's care.
    fn leave(&self) {
        self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// The chain ended (completed, aborted or failed): its session hears.
    fn finish(&self, run: &Run, outcome: Result<Lsn, SqlError>) {
        let outcome = outcome.map(|lsn| (lsn, run.final_slots()));
        if run.home == self.node() {
            run.ticket
                .complete(outcome.map(|(lsn, (slots, _))| (lsn, slots)));
        } else {
            let outcome = outcome
                .map(|(lsn, (slots, types))| (lsn, encode_slots(&slots, &types)))
                .map_err(|e| error_to_wire(&e));
            self.shared.send_to_node(
                run.home,
                Wire::Done {
                    ticket: run.ticket_id,
                    outcome,
                },
            );
        }
        self.leave();
    }

    /// Sends a message to another node until it is acknowledged.
    fn send_reliably(&mut self, key: (ChainId, usize), node: usize, wire: Wire) {
        self.shared.send_to_node(node, wire.clone());
        self.unacked.insert(key, (Instant::now(), node, wire));
    }

    /// A linked chain starts: here, or at its origin's node.
    fn start_linked(&mut self, run: Box<Run>) {
        let origin = path_of(&self.shared.placement, &run.decl, &run.slots)[0];
        if self.shared.placement.local(origin).is_some() {
            self.shared.deliver_local(
                Some(self.me),
                origin,
                Msg::Start {
                    run,
                    entry: Entry::LinkedHere,
                    reply: None,
                    from: None,
                },
            );
        } else {
            self.shared.keep_ticket(&run);
            let node = self.shared.placement.node_of(origin);
            let wire = Wire::Start {
                run: run.to_wire(),
                from: self.me,
            };
            self.send_reliably((run.id, 0), node, wire);
        }
    }

    /// A chain's last hop committed: it completes, or hands its place in
    /// flight to the chain it links to.
    fn complete(&mut self, run: Box<Run>, lsn: Lsn, linked: Option<Box<Run>>) {
        match linked {
            Some(next) => self.start_linked(next),
            None => self.finish(&run, Ok(lsn)),
        }
    }

    /// Sends the chain on to its hop at `path_index`.
    fn forward(&mut self, run: Box<Run>, path_index: usize) {
        let stamps = run.stamps.as_ref().expect("stamped at the origin");
        let arrival = stamps.arrival(path_index).expect("inside the path");
        let to = stamps.hops[path_index].server;
        if self.shared.placement.local(to).is_some() {
            self.shared.deliver_local(
                Some(self.me),
                to,
                Msg::Arrive {
                    run,
                    arrival,
                    from: self.me,
                },
            );
        } else {
            self.shared.keep_ticket(&run);
            let node = self.shared.placement.node_of(to);
            let wire = Wire::Hop {
                run: run.to_wire(),
                hop: path_index,
                from: self.me,
            };
            self.send_reliably((run.id, path_index), node, wire);
        }
    }

    /// Tells the server on another node that sent a hop it has committed.
    fn acknowledge(&self, id: ChainId, hop: usize, from: ServerId) {
        let node = self.shared.placement.node_of(from);
        if node != self.node() {
            self.shared
                .send_to_node(node, Wire::Ack { id, hop, to: from });
        }
    }

    /// Grants the turn to hops the sequencer says may run.
    fn granted(&mut self, effects: Vec<Effect>, arrived: HopArrival) {
        for effect in effects {
            match effect {
                Effect::Run(next) => {
                    if let Some((r, from)) = self.waiting.remove(&(next.origin, next.seq)) {
                        self.ready.push_back((r, next, from));
                    }
                }
                Effect::AlreadyDone { .. } => {
                    // A copy of a hop that ran: its sender hears again.
                    if let Some((r, from)) = self.waiting.remove(&(arrived.origin, arrived.seq)) {
                        self.acknowledge(r.id, arrived.hop_index, from);
                        self.leave();
                    }
                }
                // The in-flight bound keeps the queue under its limit
                // (checked at compile time).
                Effect::Busy(_) => unreachable!("queue bounded by MAX_CHAINS_IN_FLIGHT"),
            }
        }
    }

    /// Runs a later hop whose turn it is.
    fn run_ready(
        &mut self,
        mut run: Box<Run>,
        arrival: HopArrival,
        from: ServerId,
        stop: &dyn Fn() -> bool,
    ) {
        let hop = arrival.hop_index;
        let entry = if self.shared.placement.local(from).is_some() {
            Entry::Local
        } else {
            Entry::Remote
        };
        let order = (self.me, self.seq.state_after(arrival.origin, arrival.seq));
        let cx = HopContext {
            sql: &self.sql,
            decls: &self.shared.decls,
            ids: &self.shared.ids,
            node: self.shared.placement.node,
        };
        let outcome = run_hop(
            self.session.as_mut(),
            &cx,
            &mut run,
            hop,
            entry,
            Some(&order),
            usize::MAX,
            stop,
        );
        if stop() {
            return;
        }
        if let Err(e) = &outcome {
            // Only the first hop may fail; a later hop that does is
            // recorded as the chain's failure, with its turn.
            tracing::error!(chain = %run.decl.name, id = run.id, hop = hop + 1, "a chain's hop failed after its first hop committed: {e}");
            let _ = self.session.execute_one("ROLLBACK");
            self.sql
                .record_failure(self.session.as_mut(), run.id, e, &order);
        }
        let effects = self
            .seq
            .finished(arrival.origin, arrival.seq)
            .unwrap_or_default();
        self.granted(effects, arrival);
        if entry == Entry::Remote {
            self.acknowledge(run.id, hop, from);
        }
        match outcome {
            Ok(HopOutcome::Committed(lsn, linked)) if hop + 1 == run.decl.hops.len() => {
                self.complete(run, lsn, linked)
            }
            Ok(HopOutcome::Committed(..)) => self.forward(run, hop + 1),
            Ok(HopOutcome::AlreadyDone) | Ok(HopOutcome::Aborted) => self.leave(),
            Err(e) => self.finish(&run, Err(e)),
        }
    }

    /// Runs a chain's first hop here.
    fn run_first(
        &mut self,
        mut run: Box<Run>,
        entry: Entry,
        reply: Option<Reply>,
        from: Option<ServerId>,
        stop: &dyn Fn() -> bool,
    ) {
        let path = path_of(&self.shared.placement, &run.decl, &run.slots);
        let outcome = match self.seq.preview(run.id, &path) {
            Ok((stamps, state)) => {
                run.stamps = Some(stamps);
                let order = (self.me, state);
                let cx = HopContext {
                    sql: &self.sql,
                    decls: &self.shared.decls,
                    ids: &self.shared.ids,
                    node: self.shared.placement.node,
                };
                // A chain of one hop stamps only itself, here: after a
                // crash `ctr` and `done` are both back by the same amount.
                let order = (run.decl.hops.len() > 1).then_some(&order);
                run_hop(
                    self.session.as_mut(),
                    &cx,
                    &mut run,
                    0,
                    entry,
                    order,
                    FIRST_HOP_TRIES,
                    stop,
                )
            }
            Err(e) => Err(SqlError::new(
                "54000",
                format!("chain {}: {e}", run.decl.name),
            )),
        };
        let answer = |status: CallStatus, lsn: Lsn, run: &Run, reply: Option<Reply>| {
            if let Some(reply) = reply {
                reply(Ok(Started {
                    id: run.id,
                    status,
                    lsn,
                    slots: run.slots.clone(),
                    types: run.types.clone(),
                    ticket: run.ticket.clone(),
                }));
            }
        };
        if let Some(from) = from {
            // The linking node keeps the chain's row until it hears.
            self.acknowledge(run.id, 0, from);
        }
        match outcome {
            Ok(HopOutcome::Committed(lsn, linked)) => {
                let stamps = self.seq.assign(run.id, &path);
                debug_assert_eq!(stamps.as_ref().ok(), run.stamps.as_ref());
                if run.decl.hops.len() == 1 {
                    let status = if linked.is_some() {
                        CallStatus::Started
                    } else {
                        CallStatus::Completed
                    };
                    answer(status, lsn, &run, reply);
                    self.complete(run, lsn, linked);
                } else {
                    answer(CallStatus::Started, lsn, &run, reply);
                    self.forward(run, 1);
                }
            }
            Ok(HopOutcome::Aborted) => {
                let lsn = self.session.last_lsn();
                answer(CallStatus::Aborted, lsn, &run, reply);
                self.finish(&run, Ok(lsn));
            }
            Ok(HopOutcome::AlreadyDone) => {
                let lsn = self.session.last_lsn();
                answer(CallStatus::Completed, lsn, &run, reply);
                self.leave();
            }
            Err(e) => {
                match reply {
                    Some(reply) => reply(Err(e.clone())),
                    None => {
                        tracing::error!(chain = %run.decl.name, id = run.id, "a linked chain's first hop failed: {e}")
                    }
                }
                self.finish(&run, Err(e));
            }
        }
    }

    /// Sends again what another node has not acknowledged in time.
    fn resend_due(&mut self) {
        let now = Instant::now();
        for (sent, node, wire) in self.unacked.values_mut() {
            if now.duration_since(*sent) >= RESEND_AFTER {
                *sent = now;
                self.shared.send_to_node(*node, wire.clone());
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Start {
                run,
                entry,
                reply,
                from,
            } => self.first_hops.push_back((run, entry, reply, from)),
            Msg::Arrive { run, arrival, from } => {
                self.waiting
                    .insert((arrival.origin, arrival.seq), (run, from));
                match self.seq.arrive(arrival) {
                    Ok(effects) => self.granted(effects, arrival),
                    Err(e) => tracing::error!("a hop arrived out of order: {e}"),
                }
            }
            Msg::Linked { run } => self.start_linked(run),
            Msg::Acked { id, hop } => {
                if let Err(e) = self.sql.forget_sent(self.session.as_mut(), id, hop) {
                    tracing::error!(
                        id,
                        hop,
                        "a chain's row could not be dropped after its hop was acknowledged: {e}"
                    );
                    return;
                }
                if let Some((_, node, _)) = self.unacked.remove(&(id, hop)) {
                    if hop == 0 {
                        self.shared.send_to_node(node, Wire::Forget { id });
                    }
                    self.leave();
                }
            }
            Msg::Forget { id } => {
                if let Err(e) = self.sql.forget_inbox(self.session.as_mut(), id) {
                    tracing::warn!(id, "an inbox entry stays: {e}");
                }
            }
            Msg::Resend { key, node, wire } => self.send_reliably(key, node, wire),
            Msg::Lock { locked, release } => {
                if locked.send(()).is_ok() {
                    // Held until the distributed transaction drops it.
                    let _ = release.recv();
                }
            }
        }
    }
}

/// One logical server's loop.
fn serve(
    seq: Sequencer,
    sessions: SessionFactory,
    alive: Alive,
    rx: mpsc::Receiver<Msg>,
    shared: Arc<Shared>,
) {
    let Some(session) = sessions() else {
        return;
    };
    drop(sessions);
    let mut server = Server {
        me: seq.server(),
        seq,
        session,
        sql: ProgressSql::new(),
        shared,
        first_hops: VecDeque::new(),
        waiting: HashMap::new(),
        ready: VecDeque::new(),
        unacked: HashMap::new(),
    };
    let stopping = || !alive();
    let mut last_resend = Instant::now();
    loop {
        if !server.unacked.is_empty() && last_resend.elapsed() >= RESEND_TICK {
            server.resend_due();
            last_resend = Instant::now();
        }
        // Hops whose turn it is run first, then new chains' first hops.
        if let Some((run, arrival, from)) = server.ready.pop_front() {
            server.run_ready(run, arrival, from, &stopping);
            if stopping() {
                return;
            }
            continue;
        }
        if server.seq.first_hop_ready() {
            if let Some((run, entry, reply, from)) = server.first_hops.pop_front() {
                server.run_first(run, entry, reply, from, &stopping);
                continue;
            }
        }
        let wait = if server.unacked.is_empty() {
            IDLE_CHECK
        } else {
            RESEND_TICK
        };
        match rx.recv_timeout(wait) {
            Ok(m) => server.handle(m),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stopping() {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}
