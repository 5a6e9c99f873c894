//! The shell around the sequencers: logical servers that run hops
//! (`docs/chains.md`, "Running a chain").
//!
//! Each logical server is a thread that runs one hop at a time, in a
//! session of its own, as a SERIALIZABLE transaction of the engine. A
//! hop's server is its shard key's hash modulo [`LOGICAL_SERVERS`]. The
//! server owns a [`Sequencer`]: a chain is stamped when its first hop
//! commits, and every later hop runs at its server only in its origin's
//! order (Lynx §6.2).
//!
//! Progress lives in the table [`PROGRESS_TABLE`], written in the same
//! transaction as each hop's effects: the first hop inserts the chain's
//! row (its slots and the next hop), each later hop checks and advances
//! it, the last deletes it. A hop that finds the row not at its own
//! number has run already and does nothing, so a hop runs exactly once;
//! after a restart [`Runtime::start`] resumes every chain the table
//! holds, in the order the chains began.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_chains::sequencer::{Effect, HopArrival, Sequencer, ServerId, Stamps};
use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_plan::plan::Outcome;
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;

use super::declare::{ChainDecl, HopKey};
use super::latency::{Datacenters, DelayLine};

/// What runs a hop's statements: a session of the engine's, as the
/// chains' own superuser (`session/chains.rs`).
pub trait HopSession: Send {
    /// Runs one statement of text (`BEGIN`, `COMMIT`, the progress
    /// table's definition).
    fn execute_one(&mut self, sql: &str) -> Result<Outcome, SqlError>;
    /// Runs a parsed statement with parameter values.
    fn run_one(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError>;
    /// The LSN of the session's last commit.
    fn last_lsn(&self) -> Lsn;
}

/// Makes a session for hops; `None` once the engine is gone.
pub type SessionFactory = Arc<dyn Fn() -> Option<Box<dyn HopSession>> + Send + Sync>;
/// Whether the engine still runs (false once it is gone or stopping).
pub type Alive = Arc<dyn Fn() -> bool + Send + Sync>;

/// Logical servers per process (Lynx §5.2: many per machine).
pub const LOGICAL_SERVERS: usize = 8;
/// The most chains started and not yet completed; a `CALL` past it is
/// refused (53400) until some complete. It bounds every queue here.
pub const MAX_CHAINS_IN_FLIGHT: usize = 10_000;
/// The table that holds the progress of every chain in flight.
pub const PROGRESS_TABLE: &str = "aqueduct_chain_runs";
/// How often a waiting logical server looks whether its engine is gone.
const IDLE_CHECK: Duration = Duration::from_millis(500);
/// A hop that meets a serialization failure runs again; the first hop
/// gives up after this many tries and the `CALL` reports the failure.
const FIRST_HOP_TRIES: usize = 50;

const _: () = assert!(MAX_CHAINS_IN_FLIGHT <= aqueduct_chains::sequencer::MAX_QUEUED_HOPS);

/// A chain's instance.
pub type ChainId = u64;

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
}

/// What a `CALL` learns when its chain has started (or ended).
#[derive(Clone, Debug)]
pub struct Started {
    pub id: ChainId,
    pub status: CallStatus,
    /// The commit LSN of the first hop (of the whole chain when it
    /// completed).
    pub lsn: Lsn,
    /// The slots as they were then.
    pub slots: Vec<Value>,
    pub ticket: Arc<Ticket>,
}

/// How a chain ended: the last hop's LSN and the final slots, or why a
/// hop after the first failed.
pub type Completion = Result<(Lsn, Vec<Value>), SqlError>;

/// A chain's completion, which a session can wait for.
#[derive(Debug, Default)]
pub struct Ticket {
    done: parking_lot::Mutex<Option<Completion>>,
    cond: parking_lot::Condvar,
    /// The called chain's final slots, when chains it links to run on
    /// after it: the completion reports these, not the last chain's.
    called_slots: parking_lot::Mutex<Option<Vec<Value>>>,
}

impl Ticket {
    fn complete(&self, outcome: Completion) {
        let outcome = match (outcome, self.called_slots.lock().take()) {
            (Ok((lsn, _)), Some(slots)) => Ok((lsn, slots)),
            (other, _) => other,
        };
        *self.done.lock() = Some(outcome);
        self.cond.notify_all();
    }

    /// The called chain's last hop committed and a linked chain goes on.
    fn note_called_slots(&self, slots: &[Value]) {
        let mut s = self.called_slots.lock();
        if s.is_none() {
            *s = Some(slots.to_vec());
        }
    }

    /// The chain's outcome once every hop committed: the last hop's LSN
    /// and the final slots; `None` if `timeout` passed first.
    pub fn wait(&self, timeout: Duration) -> Option<Completion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut done = self.done.lock();
        while done.is_none() {
            if self.cond.wait_until(&mut done, deadline).timed_out() {
                break;
            }
        }
        done.clone()
    }

    pub fn is_done(&self) -> bool {
        self.done.lock().is_some()
    }
}

/// One chain instance on its way.
struct Run {
    id: ChainId,
    decl: Arc<ChainDecl>,
    slots: Vec<Value>,
    types: Vec<Option<DataType>>,
    /// The chain's hop that the path's first entry stands for (0, or on
    /// resumption the hop the chain stopped at, minus one).
    offset: usize,
    /// Started by another chain's `THEN CALL`: its row exists before its
    /// first hop.
    linked: bool,
    stamps: Option<Stamps>,
    ticket: Arc<Ticket>,
}

impl Run {
    fn hop_of(&self, path_index: usize) -> usize {
        self.offset + path_index
    }
}

/// The simulated datacenters and the line that holds hops between them.
type Delays = (Datacenters, Arc<DelayLine<(ServerId, Msg)>>);

/// Where a `CALL` waits for its first hop.
type Reply = mpsc::SyncSender<Result<Started, SqlError>>;

enum Msg {
    /// A new chain's first hop; `reply` is where its `CALL` waits (none
    /// for a linked chain).
    Start { run: Box<Run>, reply: Option<Reply> },
    /// A later hop, stamped.
    Arrive { run: Box<Run>, arrival: HopArrival },
    /// A chain found in the progress table at start: stamp its remaining
    /// hops here, its origin, and send the next one.
    Resume { run: Box<Run>, next_hop: usize },
    /// A distributed transaction takes this server: it runs nothing until
    /// `release` is dropped.
    Lock {
        locked: mpsc::SyncSender<()>,
        release: mpsc::Receiver<()>,
    },
}

/// The logical servers of one engine.
pub struct Runtime {
    sessions: SessionFactory,
    datacenters: Option<Datacenters>,
    servers: Vec<mpsc::Sender<Msg>>,
    in_flight: Arc<AtomicUsize>,
    next_id: Arc<AtomicU64>,
    decls: DeclSource,
}

/// The logical server a shard key's value belongs to.
pub fn server_of(key: &Value) -> ServerId {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.to_string().hash(&mut h);
    (h.finish() % LOGICAL_SERVERS as u64) as ServerId
}

/// The servers of a chain's hops for these slots.
pub fn path_of(decl: &ChainDecl, slots: &[Value]) -> Vec<ServerId> {
    decl.hops
        .iter()
        .map(|h| match &h.key {
            HopKey::Param(i) => server_of(&slots[*i]),
            HopKey::Constant(v) => server_of(v),
        })
        .collect()
}

fn parse_one(sql: &str) -> Statement {
    aqueduct_plan::parse::parse(sql)
        .expect("the runtime's own statements parse")
        .remove(0)
}

/// Whether an error means "run the transaction again".
fn retryable(e: &SqlError) -> bool {
    matches!(e.code, "40001" | "40P01" | "55P03")
}

/// The progress table's statements, parsed once per server.
struct ProgressSql {
    begin: Statement,
    commit: Statement,
    rollback: Statement,
    insert: Statement,
    advance: Statement,
    delete: Statement,
    at: Statement,
    fail: Statement,
}

impl ProgressSql {
    fn new() -> ProgressSql {
        ProgressSql {
            begin: parse_one("BEGIN ISOLATION LEVEL SERIALIZABLE"),
            commit: parse_one("COMMIT"),
            rollback: parse_one("ROLLBACK"),
            insert: parse_one(&format!(
                "INSERT INTO {PROGRESS_TABLE} (id, chain, next_hop, slots) VALUES ($1, $2, $3, $4)"
            )),
            advance: parse_one(&format!(
                "UPDATE {PROGRESS_TABLE} SET next_hop = $2, slots = $3 WHERE id = $1"
            )),
            delete: parse_one(&format!("DELETE FROM {PROGRESS_TABLE} WHERE id = $1")),
            at: parse_one(&format!(
                "SELECT next_hop FROM {PROGRESS_TABLE} WHERE id = $1"
            )),
            fail: parse_one(&format!(
                "UPDATE {PROGRESS_TABLE} SET next_hop = -1, error = $2 WHERE id = $1"
            )),
        }
    }
}

type S = dyn HopSession;

fn exec(
    s: &mut S,
    st: &Statement,
    hints: &[Option<DataType>],
    params: &[Value],
) -> Result<Outcome, SqlError> {
    s.run_one(st, hints, params)
}

fn exec_plain(s: &mut S, st: &Statement, params: &[Value]) -> Result<Outcome, SqlError> {
    let hints: Vec<Option<DataType>> = params.iter().map(|_| None).collect();
    s.run_one(st, &hints, params)
}

/// The slots as stored in the progress table: per slot `null` or
/// `[type, text]`.
pub fn encode_slots(slots: &[Value], types: &[Option<DataType>]) -> String {
    let items: Vec<serde_json::Value> = slots
        .iter()
        .zip(types)
        .map(|(v, t)| match (v, t) {
            (Value::Null, _) | (_, None) => serde_json::Value::Null,
            (v, Some(t)) => serde_json::json!([t.to_string(), v.to_string()]),
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}

fn decode_slots(text: &str, n: usize) -> Result<(Vec<Value>, Vec<Option<DataType>>), String> {
    let items: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("slots of a chain run: {e}"))?;
    let mut slots = vec![Value::Null; n];
    let mut types = vec![None; n];
    for (i, item) in items.into_iter().enumerate().take(n) {
        if let serde_json::Value::Array(pair) = item {
            let (Some(t), Some(v)) = (
                pair.first().and_then(|t| t.as_str()),
                pair.get(1).and_then(|v| v.as_str()),
            ) else {
                return Err(format!("slot {i} of a chain run is not [type, text]"));
            };
            let ty = aqueduct_tables::parse_type(t)?;
            slots[i] = Value::Text(v.to_string())
                .coerce(&ty)
                .map_err(|e| format!("slot {i}: {e}"))?;
            types[i] = Some(ty);
        }
    }
    Ok((slots, types))
}

/// How one attempt at a hop ended.
enum HopOutcome {
    /// Committed at this LSN; the chain linked to this one, when this was
    /// the last hop and the chain has `THEN CALL`.
    Committed(Lsn, Option<Box<Run>>),
    /// The first hop's `ABORT IF` held.
    Aborted,
    /// The progress table says the hop has run.
    AlreadyDone,
}

/// What a hop needs besides its run: the declarations (for `THEN CALL`)
/// and the chain ids.
struct HopContext<'a> {
    sql: &'a ProgressSql,
    decls: &'a DeclSource,
    next_id: &'a AtomicU64,
}

/// Finds a chain's declaration by name, as the catalog has it now.
pub type DeclSource = Arc<dyn Fn(&str) -> Option<Arc<ChainDecl>> + Send + Sync>;

/// Runs hop `hop` of `run` as one transaction in `s`, with the progress
/// row's change; retries serialization failures (`tries` times at most).
fn run_hop(
    s: &mut S,
    cx: &HopContext,
    run: &mut Run,
    hop: usize,
    tries: usize,
    stop: &dyn Fn() -> bool,
) -> Result<HopOutcome, SqlError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let before = (run.slots.clone(), run.types.clone());
        match try_hop(s, cx, run, hop) {
            Ok(o) => return Ok(o),
            Err(e) => {
                let _ = s.execute_one("ROLLBACK");
                (run.slots, run.types) = before;
                if !retryable(&e) || attempt >= tries || stop() {
                    return Err(e);
                }
                std::thread::yield_now();
            }
        }
    }
}

/// The hop's `ABORT IF` and statements, in the open transaction; `true`
/// when the condition held (nothing ran).
fn hop_statements(
    s: &mut S,
    decl: &ChainDecl,
    hop: usize,
    run: &mut Run,
) -> Result<bool, SqlError> {
    let h = &decl.hops[hop];
    if let Some(cond) = &h.abort_if {
        if let Outcome::Rows { rows, .. } = exec(s, cond, &run.types, &run.slots)? {
            if rows.first().and_then(|r| r.first()) == Some(&Value::Bool(true)) {
                return Ok(true);
            }
        }
    }
    for st in &h.statements {
        let out = exec(s, &st.statement, &run.types, &run.slots)?;
        if st.into.is_empty() {
            continue;
        }
        if let Outcome::Rows { columns, rows, .. } = out {
            let row = rows.into_iter().next();
            for (i, &slot) in st.into.iter().enumerate() {
                run.types[slot] = columns.get(i).map(|c| c.ty.clone());
                run.slots[slot] = row
                    .as_ref()
                    .and_then(|r| r.get(i).cloned())
                    .unwrap_or(Value::Null);
            }
        }
    }
    Ok(false)
}

/// `THEN CALL`: in the last hop's transaction, the linked chain's row
/// (not started: `next_hop = 0`), so it starts exactly once even across
/// a crash; its run, to start once this commits.
fn link(
    s: &mut S,
    cx: &HopContext,
    decl: &ChainDecl,
    run: &Run,
) -> Result<Option<Box<Run>>, SqlError> {
    let Some(then) = &decl.then else {
        return Ok(None);
    };
    let linked = (cx.decls)(&then.chain).ok_or_else(|| {
        SqlError::new(
            "42883",
            format!(
                "chain {} links to chain \"{}\", which does not exist",
                decl.name, then.chain
            ),
        )
    })?;
    let args: Vec<Value> = match &then.args {
        None => Vec::new(),
        Some(select) => match exec(s, select, &run.types, &run.slots)? {
            Outcome::Rows { mut rows, .. } if !rows.is_empty() => rows.swap_remove(0),
            _ => Vec::new(),
        },
    };
    if args.len() != linked.params.len() {
        return Err(SqlError::new(
            "42883",
            format!(
                "chain {} takes {} arguments, not {} (THEN CALL in chain {})",
                linked.name,
                linked.params.len(),
                args.len(),
                decl.name
            ),
        ));
    }
    let mut slots = args
        .into_iter()
        .zip(&linked.params)
        .map(|(v, (_, ty))| {
            v.coerce(ty)
                .map_err(|e| SqlError::new(e.sqlstate(), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    slots.resize(linked.slots.len(), Value::Null);
    let next = Box::new(Run {
        id: cx.next_id.fetch_add(1, Ordering::SeqCst),
        types: types_of(&linked),
        decl: linked,
        slots,
        offset: 0,
        linked: true,
        stamps: None,
        ticket: run.ticket.clone(),
    });
    exec_plain(
        s,
        &cx.sql.insert,
        &[
            Value::Int(next.id as i64),
            Value::Text(next.decl.name.clone()),
            Value::Int(0),
            Value::Text(encode_slots(&next.slots, &next.types)),
        ],
    )?;
    Ok(Some(next))
}

fn try_hop(s: &mut S, cx: &HopContext, run: &mut Run, hop: usize) -> Result<HopOutcome, SqlError> {
    let sql = cx.sql;
    let decl = run.decl.clone();
    let last = hop + 1 == decl.hops.len();
    // A row for this chain exists from its first hop on, or before it for
    // a linked chain.
    let has_row = hop > 0 || run.linked;
    exec_plain(s, &sql.begin, &[])?;
    if has_row {
        let at = exec_plain(s, &sql.at, &[Value::Int(run.id as i64)])?;
        let next = match at {
            Outcome::Rows { rows, .. } => rows.first().and_then(|r| r.first()).cloned(),
            _ => None,
        };
        if next != Some(Value::Int(hop as i64)) {
            exec_plain(s, &sql.rollback, &[])?;
            return Ok(HopOutcome::AlreadyDone);
        }
    }
    if hop_statements(s, &decl, hop, run)? {
        if has_row {
            // An aborted linked chain leaves no row behind.
            exec_plain(s, &sql.delete, &[Value::Int(run.id as i64)])?;
            exec_plain(s, &sql.commit, &[])?;
        } else {
            exec_plain(s, &sql.rollback, &[])?;
        }
        return Ok(HopOutcome::Aborted);
    }
    let id = Value::Int(run.id as i64);
    let mut linked = None;
    if last {
        linked = link(s, cx, &decl, run)?;
        if has_row {
            exec_plain(s, &sql.delete, &[id])?;
        }
    } else if has_row {
        exec_plain(
            s,
            &sql.advance,
            &[
                id,
                Value::Int(hop as i64 + 1),
                Value::Text(encode_slots(&run.slots, &run.types)),
            ],
        )?;
    } else {
        exec_plain(
            s,
            &sql.insert,
            &[
                id,
                Value::Text(decl.name.clone()),
                Value::Int(1),
                Value::Text(encode_slots(&run.slots, &run.types)),
            ],
        )?;
    }
    exec_plain(s, &sql.commit, &[])?;
    Ok(HopOutcome::Committed(s.last_lsn(), linked))
}

impl Runtime {
    /// Starts the logical servers and resumes the chains the progress
    /// table holds; `chains` are the declarations by name.
    pub fn start(
        sessions: SessionFactory,
        alive: Alive,
        decls: DeclSource,
        datacenters: Option<Datacenters>,
    ) -> Result<Arc<Runtime>, SqlError> {
        let mut s = sessions().ok_or_else(stopped)?;
        s.execute_one(&format!(
            "CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (id bigint PRIMARY KEY, chain text NOT NULL, \
             next_hop integer NOT NULL, slots text NOT NULL, error text)"
        ))?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut servers = Vec::with_capacity(LOGICAL_SERVERS);
        let mut receivers = Vec::with_capacity(LOGICAL_SERVERS);
        for _ in 0..LOGICAL_SERVERS {
            let (tx, rx) = mpsc::channel();
            servers.push(tx);
            receivers.push(rx);
        }
        // Chains in flight, oldest first.
        let rows = match s.execute_one(&format!(
            "SELECT id, chain, next_hop, slots FROM {PROGRESS_TABLE} WHERE next_hop >= 0 ORDER BY id"
        ))? {
            Outcome::Rows { rows, .. } => rows,
            _ => Vec::new(),
        };
        let max_id = match s.execute_one(&format!(
            "SELECT coalesce(max(id), 0) FROM {PROGRESS_TABLE}"
        ))? {
            Outcome::Rows { rows, .. } => match rows.first().and_then(|r| r.first()) {
                Some(Value::Int(n)) => *n as u64,
                _ => 0,
            },
            _ => 0,
        };
        // Ids also go on from the clock, so ids of chains that completed
        // (and left no row) are not given again after a restart.
        let clock_id = aqueduct_log::now_micros() as u64;
        let runtime = Arc::new(Runtime {
            datacenters: datacenters.clone(),
            sessions: sessions.clone(),
            servers,
            in_flight: in_flight.clone(),
            next_id: Arc::new(AtomicU64::new(max_id.max(clock_id) + 1)),
            decls: decls.clone(),
        });
        // Hops between simulated datacenters go through one delay line.
        let delays = match &datacenters {
            Some(d) => {
                let peers = runtime.servers.clone();
                let line = DelayLine::start(move |(to, msg): (ServerId, Msg)| {
                    let _ = peers[to as usize].send(msg);
                })
                .map_err(|e| SqlError::new("53000", format!("cannot start the delay line: {e}")))?;
                Some((d.clone(), Arc::new(line)))
            }
            None => None,
        };
        for (i, rx) in receivers.into_iter().enumerate() {
            let peers = runtime.servers.clone();
            let delays = delays.clone();
            let shared = Shared {
                decls: decls.clone(),
                next_id: runtime.next_id.clone(),
                in_flight: in_flight.clone(),
            };
            let sessions = sessions.clone();
            let alive = alive.clone();
            std::thread::Builder::new()
                .name(format!("chain-server-{i}"))
                // Room for a whole statement, as the server's own threads
                // have: a smaller stack would map a new one per statement.
                .stack_size(aqueduct_expr::limits::SERVER_THREAD_STACK_BYTES)
                .spawn(move || serve(i as ServerId, sessions, alive, rx, peers, delays, shared))
                .map_err(|e| {
                    SqlError::new("53000", format!("cannot start a logical server: {e}"))
                })?;
        }
        for row in rows {
            let (
                Some(Value::Int(id)),
                Some(Value::Text(name)),
                Some(Value::Int(next)),
                Some(Value::Text(slots)),
            ) = (row.first(), row.get(1), row.get(2), row.get(3))
            else {
                continue;
            };
            let Some(decl) = decls(name) else {
                tracing::error!(chain = %name, id, "a chain in flight was dropped; its remaining hops do not run");
                continue;
            };
            let (slot_values, types) =
                decode_slots(slots, decl.slots.len()).map_err(|why| SqlError::new("XX001", why))?;
            let next = *next as usize;
            if next >= decl.hops.len() {
                continue;
            }
            let run = Box::new(Run {
                id: *id as u64,
                decl: decl.clone(),
                slots: slot_values,
                types,
                offset: next.saturating_sub(1),
                linked: next == 0,
                stamps: None,
                ticket: Arc::new(Ticket::default()),
            });
            let origin = path_of(&decl, &run.slots)[0];
            in_flight.fetch_add(1, Ordering::SeqCst);
            let msg = if next == 0 {
                // A linked chain that had not started: it starts now.
                Msg::Start { run, reply: None }
            } else {
                Msg::Resume {
                    run,
                    next_hop: next,
                }
            };
            let _ = runtime.servers[origin as usize].send(msg);
        }
        Ok(runtime)
    }

    /// Runs a chain piecewise: returns once its first hop committed (or
    /// the chain aborted).
    pub fn call(&self, decl: Arc<ChainDecl>, slots: Vec<Value>) -> Result<Started, SqlError> {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_CHAINS_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(SqlError::new(
                "53400",
                format!("{MAX_CHAINS_IN_FLIGHT} chains are in flight, the most this server runs"),
            )
            .with_hint("call again once some have completed (WAIT FOR CHAINS)"));
        }
        let types = types_of(&decl);
        let path = path_of(&decl, &slots);
        let run = Box::new(Run {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            decl,
            slots,
            types,
            offset: 0,
            linked: false,
            stamps: None,
            ticket: Arc::new(Ticket::default()),
        });
        let (reply, answer) = mpsc::sync_channel(1);
        if self.servers[path[0] as usize]
            .send(Msg::Start {
                run,
                reply: Some(reply),
            })
            .is_err()
        {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(stopped());
        }
        answer.recv().unwrap_or_else(|_| Err(stopped()))
    }

    /// Runs a chain as one distributed transaction: every logical server
    /// its hops touch is taken, in ascending order, then all hops run in
    /// one transaction of `s`, committed atomically through the log.
    pub fn call_distributed(
        &self,
        decl: Arc<ChainDecl>,
        slots: Vec<Value>,
    ) -> Result<Started, SqlError> {
        let path = path_of(&decl, &slots);
        let mut servers = path.clone();
        servers.sort_unstable();
        servers.dedup();
        let mut held = Vec::with_capacity(servers.len());
        for &server in &servers {
            let (locked_tx, locked_rx) = mpsc::sync_channel(1);
            let (release_tx, release_rx) = mpsc::sync_channel::<()>(1);
            self.servers[server as usize]
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
        let mut run = Run {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            types: types_of(&decl),
            decl: decl.clone(),
            slots,
            offset: 0,
            linked: false,
            stamps: None,
            ticket: Arc::new(Ticket::default()),
        };
        let sql = ProgressSql::new();
        let cx = HopContext {
            sql: &sql,
            decls: &self.decls,
            next_id: &self.next_id,
        };
        let result = (|| {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let before = (run.slots.clone(), run.types.clone());
                match try_whole(s.as_mut(), &cx, &decl, &mut run) {
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
                run.ticket.note_called_slots(&run.slots);
                self.start_linked(next)
            }
            None => run.ticket.complete(Ok((lsn, run.slots.clone()))),
        }
        Ok(Started {
            id: run.id,
            status,
            lsn,
            slots: run.slots.clone(),
            ticket: run.ticket.clone(),
        })
    }
}

impl Runtime {
    /// Starts a chain another linked to, its row already written.
    fn start_linked(&self, run: Box<Run>) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let origin = path_of(&run.decl, &run.slots)[0];
        let _ = self.servers[origin as usize].send(Msg::Start { run, reply: None });
    }
}

fn try_whole(
    s: &mut S,
    cx: &HopContext,
    decl: &ChainDecl,
    run: &mut Run,
) -> Result<HopOutcome, SqlError> {
    s.execute_one("BEGIN ISOLATION LEVEL SERIALIZABLE")?;
    for hop in 0..decl.hops.len() {
        if hop_statements(s, decl, hop, run)? {
            s.execute_one("ROLLBACK")?;
            return Ok(HopOutcome::Aborted);
        }
    }
    let linked = link(s, cx, decl, run)?;
    s.execute_one("COMMIT")?;
    Ok(HopOutcome::Committed(s.last_lsn(), linked))
}

fn types_of(decl: &ChainDecl) -> Vec<Option<DataType>> {
    let mut t: Vec<Option<DataType>> = decl.params.iter().map(|(_, ty)| Some(ty.clone())).collect();
    t.resize(decl.slots.len(), None);
    t
}

fn stopped() -> SqlError {
    SqlError::new("57P01", "the server is stopping; the chain did not start")
}

/// What every logical server shares.
struct Shared {
    decls: DeclSource,
    next_id: Arc<AtomicU64>,
    in_flight: Arc<AtomicUsize>,
}

/// One logical server's loop.
fn serve(
    me: ServerId,
    sessions: SessionFactory,
    alive: Alive,
    rx: mpsc::Receiver<Msg>,
    peers: Vec<mpsc::Sender<Msg>>,
    delays: Option<Delays>,
    shared: Shared,
) {
    let Some(mut session) = sessions() else {
        return;
    };
    drop(sessions);
    let sql = ProgressSql::new();
    let cx = HopContext {
        sql: &sql,
        decls: &shared.decls,
        next_id: &shared.next_id,
    };
    let in_flight = &shared.in_flight;
    let mut seq = Sequencer::new(me);
    let mut first_hops: VecDeque<(Box<Run>, Option<Reply>)> = VecDeque::new();
    // Chains resumed at start whose origin this is, oldest first: stamped
    // like first hops, before any new chain's.
    let mut resumes: VecDeque<(Box<Run>, usize)> = VecDeque::new();
    // Hops that arrived, by (origin, seq), until their turn.
    let mut waiting: HashMap<(ServerId, u64), Box<Run>> = HashMap::new();
    let mut ready: VecDeque<(Box<Run>, HopArrival)> = VecDeque::new();
    let stopping = || !alive();
    let finish = |run: Box<Run>, outcome: Completion| {
        run.ticket.complete(outcome);
        in_flight.fetch_sub(1, Ordering::SeqCst);
    };
    // A chain's last hop committed: it completes, or hands its place in
    // flight and its ticket to the chain it links to.
    let complete = |run: Box<Run>, lsn: Lsn, linked: Option<Box<Run>>| match linked {
        Some(next) => {
            run.ticket.note_called_slots(&run.slots);
            let origin = path_of(&next.decl, &next.slots)[0];
            let _ = peers[origin as usize].send(Msg::Start {
                run: next,
                reply: None,
            });
        }
        None => {
            let slots = run.slots.clone();
            finish(run, Ok((lsn, slots)));
        }
    };
    let forward = |run: Box<Run>, path_index: usize| {
        let stamps = run.stamps.as_ref().expect("stamped at the origin");
        let arrival = stamps.arrival(path_index).expect("inside the path");
        let server = stamps.hops[path_index].server;
        let msg = Msg::Arrive { run, arrival };
        match &delays {
            Some((d, line)) if !d.round_trip(me, server).is_zero() => {
                line.send_after(d.round_trip(me, server), (server, msg));
            }
            _ => {
                let _ = peers[server as usize].send(msg);
            }
        }
    };
    loop {
        // Hops whose turn it is run first, then new chains' first hops.
        if let Some((mut run, arrival)) = ready.pop_front() {
            let hop = run.hop_of(arrival.hop_index);
            let outcome = run_hop(session.as_mut(), &cx, &mut run, hop, usize::MAX, &stopping);
            if stopping() {
                return;
            }
            for effect in seq
                .finished(arrival.origin, arrival.seq)
                .unwrap_or_default()
            {
                if let Effect::Run(next) = effect {
                    if let Some(r) = waiting.remove(&(next.origin, next.seq)) {
                        ready.push_back((r, next));
                    }
                }
            }
            match outcome {
                Ok(HopOutcome::Committed(lsn, linked)) if hop + 1 == run.decl.hops.len() => {
                    complete(run, lsn, linked)
                }
                Ok(HopOutcome::Committed(..)) => forward(run, arrival.hop_index + 1),
                Ok(HopOutcome::AlreadyDone) | Ok(HopOutcome::Aborted) => {
                    let lsn = session.last_lsn();
                    let slots = run.slots.clone();
                    finish(run, Ok((lsn, slots)));
                }
                Err(e) => {
                    // Only the first hop may fail; a later hop that does
                    // is recorded as the chain's failure.
                    tracing::error!(chain = %run.decl.name, id = run.id, hop = hop + 1, "a chain's hop failed after its first hop committed: {e}");
                    let _ = session.execute_one("ROLLBACK");
                    let _ = exec_plain(
                        session.as_mut(),
                        &sql.fail,
                        &[Value::Int(run.id as i64), Value::Text(e.to_string())],
                    );
                    finish(run, Err(e));
                }
            }
            continue;
        }
        if seq.first_hop_ready() {
            if let Some((mut run, next_hop)) = resumes.pop_front() {
                // Stamp the remaining hops from here, as if the chain's
                // first hop had just committed: path[0] is this server.
                let full = path_of(&run.decl, &run.slots);
                let mut path = vec![me];
                path.extend_from_slice(&full[next_hop..]);
                match seq.assign(run.id, &path) {
                    Ok(stamps) => {
                        run.stamps = Some(stamps);
                        forward(run, 1);
                    }
                    Err(e) => tracing::error!("a resumed chain could not be stamped: {e}"),
                }
                continue;
            }
            if let Some((mut run, reply)) = first_hops.pop_front() {
                let outcome = run_hop(
                    session.as_mut(),
                    &cx,
                    &mut run,
                    0,
                    FIRST_HOP_TRIES,
                    &stopping,
                );
                let answer = |status: CallStatus, lsn: Lsn, run: &Run| {
                    if let Some(reply) = &reply {
                        let _ = reply.send(Ok(Started {
                            id: run.id,
                            status,
                            lsn,
                            slots: run.slots.clone(),
                            ticket: run.ticket.clone(),
                        }));
                    }
                };
                match outcome {
                    Ok(HopOutcome::Committed(lsn, linked)) => {
                        let path = path_of(&run.decl, &run.slots);
                        match seq.assign(run.id, &path) {
                            Ok(stamps) => run.stamps = Some(stamps),
                            Err(e) => {
                                tracing::error!("a chain could not be stamped: {e}");
                            }
                        }
                        if run.decl.hops.len() == 1 {
                            let status = if linked.is_some() {
                                CallStatus::Started
                            } else {
                                CallStatus::Completed
                            };
                            answer(status, lsn, &run);
                            complete(run, lsn, linked);
                        } else {
                            answer(CallStatus::Started, lsn, &run);
                            forward(run, 1);
                        }
                    }
                    Ok(_) => {
                        let lsn = session.last_lsn();
                        answer(CallStatus::Aborted, lsn, &run);
                        let slots = run.slots.clone();
                        finish(run, Ok((lsn, slots)));
                    }
                    Err(e) => {
                        if let Some(reply) = &reply {
                            let _ = reply.send(Err(e.clone()));
                        } else {
                            tracing::error!(chain = %run.decl.name, id = run.id, "a linked chain's first hop failed: {e}");
                        }
                        finish(run, Err(e));
                    }
                }
                continue;
            }
        }
        let msg = match rx.recv_timeout(IDLE_CHECK) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stopping() {
                    return;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        match msg {
            Msg::Start { run, reply } => first_hops.push_back((run, reply)),
            Msg::Arrive { run, arrival } => {
                waiting.insert((arrival.origin, arrival.seq), run);
                match seq.arrive(arrival) {
                    Ok(effects) => {
                        for effect in effects {
                            match effect {
                                Effect::Run(next) => {
                                    if let Some(r) = waiting.remove(&(next.origin, next.seq)) {
                                        ready.push_back((r, next));
                                    }
                                }
                                Effect::AlreadyDone { .. } => {
                                    if let Some(r) = waiting.remove(&(arrival.origin, arrival.seq))
                                    {
                                        let lsn = session.last_lsn();
                                        let slots = r.slots.clone();
                                        finish(r, Ok((lsn, slots)));
                                    }
                                }
                                // The in-flight bound keeps the queue under
                                // its limit (checked at compile time).
                                Effect::Busy(_) => {
                                    unreachable!("queue bounded by MAX_CHAINS_IN_FLIGHT")
                                }
                            }
                        }
                    }
                    Err(e) => tracing::error!("a hop arrived out of order: {e}"),
                }
            }
            Msg::Resume { run, next_hop } => resumes.push_back((run, next_hop)),
            Msg::Lock { locked, release } => {
                if locked.send(()).is_ok() {
                    // Held until the distributed transaction drops it.
                    let _ = release.recv();
                }
            }
        }
    }
}
