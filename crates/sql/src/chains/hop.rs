//! One hop as one transaction (`docs/chains.md`, "Running a chain"): the
//! hop's statements, the change to the chain's progress row and the
//! logical server's sequencer state, committed together.
//!
//! The progress row of a chain lives on the node that ran its latest hop:
//! the first hop inserts it, a hop after one on the same node checks and
//! advances it, a hop after one on another node replaces whatever stale
//! row it finds (its sequencer stamp already said it has not run), and
//! the last hop deletes it. The sender of a hop to another node deletes
//! its row once the receiver acknowledges.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aqueduct_chains::sequencer::{SequencerState, ServerId, Stamp, Stamps};
use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_plan::plan::Outcome;
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;

use super::declare::ChainDecl;
use super::wire::{WireError, WireRun};

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

pub(crate) type S = dyn HopSession;

/// The table that holds the progress of every chain in flight.
pub const PROGRESS_TABLE: &str = "aqueduct_chain_runs";
/// The durable part of each logical server's sequencer.
pub const ORDER_TABLE: &str = "aqueduct_chain_sequencers";
/// The linked chains started here by another node, so each starts once.
pub const INBOX_TABLE: &str = "aqueduct_chain_inbox";

/// A chain's instance.
pub type ChainId = u64;

/// Finds a chain's declaration by name, as the catalog has it now.
pub type DeclSource = Arc<dyn Fn(&str) -> Option<Arc<ChainDecl>> + Send + Sync>;

/// How a chain ended: the last hop's LSN and the final slots, or why a
/// hop after the first failed.
pub type Completion = Result<(Lsn, Vec<Value>), SqlError>;

/// A chain's completion, which a session can wait for.
#[derive(Debug, Default)]
pub struct Ticket {
    done: parking_lot::Mutex<Option<Completion>>,
    cond: parking_lot::Condvar,
}

impl Ticket {
    pub(crate) fn complete(&self, outcome: Completion) {
        *self.done.lock() = Some(outcome);
        self.cond.notify_all();
    }

    /// The chain's outcome once every hop committed: the last hop's LSN
    /// and the final slots; `None` if `timeout` passed first.
    pub fn wait(&self, timeout: std::time::Duration) -> Option<Completion> {
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

/// Chain ids, unique over the placement: node `n` of `N` hands out the
/// numbers `n mod N`.
pub struct Ids {
    next: AtomicU64,
    nodes: u64,
    node: u64,
}

impl Ids {
    /// Ids above `above`, and above the clock, so the ids of chains that
    /// completed (and left no row) are not given again after a restart.
    pub fn new(above: u64, node: usize, nodes: usize) -> Ids {
        let clock = aqueduct_log::now_micros() as u64;
        let nodes = nodes as u64;
        Ids {
            next: AtomicU64::new(above.max(clock) / nodes + 1),
            nodes,
            node: node as u64,
        }
    }

    pub fn next(&self) -> ChainId {
        self.next.fetch_add(1, Ordering::SeqCst) * self.nodes + self.node
    }
}

/// One chain instance on its way.
pub struct Run {
    pub id: ChainId,
    pub decl: Arc<ChainDecl>,
    pub slots: Vec<Value>,
    pub types: Vec<Option<DataType>>,
    /// Started by another chain's `THEN CALL`.
    pub linked: bool,
    /// Assigned when the first hop commits, one stamp per hop.
    pub stamps: Option<Stamps>,
    /// What the waiting session learns; a stand-in away from `home`.
    pub ticket: Arc<Ticket>,
    /// The node whose session waits, and the id its ticket has there.
    pub home: usize,
    pub ticket_id: ChainId,
    /// The called chain's final slots and their types, once chains it
    /// links to run on.
    pub result: Option<Slots>,
}

/// Slot values and their types (`None` for a variable not yet set).
pub type Slots = (Vec<Value>, Vec<Option<DataType>>);

impl Run {
    /// A chain called (or linked) with these slots.
    pub fn new(id: ChainId, decl: Arc<ChainDecl>, slots: Vec<Value>, home: usize) -> Run {
        Run {
            id,
            types: types_of(&decl),
            decl,
            slots,
            linked: false,
            stamps: None,
            ticket: Arc::new(Ticket::default()),
            home,
            ticket_id: id,
            result: None,
        }
    }

    /// The run as it travels to another node.
    pub fn to_wire(&self) -> WireRun {
        WireRun {
            id: self.id,
            chain: self.decl.name.clone(),
            slots: encode_slots(&self.slots, &self.types),
            linked: self.linked,
            stamps: self
                .stamps
                .as_ref()
                .map(|s| s.hops.iter().map(|h| (h.server, h.seq)).collect())
                .unwrap_or_default(),
            home: self.home,
            ticket: self.ticket_id,
            result: self.result.as_ref().map(|(v, t)| encode_slots(v, t)),
        }
    }

    /// A run received from another node; `ticket` is the waiting session's
    /// when this is its home.
    pub fn from_wire(w: WireRun, decls: &DeclSource, ticket: Arc<Ticket>) -> Result<Run, SqlError> {
        let decl = decls(&w.chain).ok_or_else(|| {
            SqlError::new(
                "42883",
                format!("chain \"{}\" is not declared on this node", w.chain),
            )
            .with_hint("declare every chain, with the same text, on every node of the placement")
        })?;
        let n = decl.slots.len();
        let (slots, types) =
            decode_slots(&w.slots, n).map_err(|why| SqlError::new("XX001", why))?;
        let result = match &w.result {
            Some(r) => Some(decode_all(r).map_err(|why| SqlError::new("XX001", why))?),
            None => None,
        };
        Ok(Run {
            id: w.id,
            decl,
            slots,
            types,
            linked: w.linked,
            stamps: stamps_from(w.id, &w.stamps),
            ticket,
            home: w.home,
            ticket_id: w.ticket,
            result,
        })
    }

    /// The slots the waiting session gets when the chain completes.
    pub fn final_slots(&self) -> Slots {
        self.result
            .clone()
            .unwrap_or_else(|| (self.slots.clone(), self.types.clone()))
    }
}

/// A chain's stamps from their stored pairs; `None` when there are none.
pub fn stamps_from(chain: ChainId, pairs: &[(ServerId, u64)]) -> Option<Stamps> {
    let origin = pairs.first()?.0;
    Some(Stamps {
        chain,
        origin,
        hops: pairs
            .iter()
            .map(|&(server, seq)| Stamp { server, seq })
            .collect(),
    })
}

pub fn encode_stamps(stamps: &Option<Stamps>) -> Value {
    match stamps {
        None => Value::Null,
        Some(s) => Value::Text(
            serde_json::to_string(&s.hops.iter().map(|h| (h.server, h.seq)).collect::<Vec<_>>())
                .expect("pairs of numbers serialize"),
        ),
    }
}

pub fn decode_stamps(chain: ChainId, text: &str) -> Result<Option<Stamps>, String> {
    let pairs: Vec<(ServerId, u64)> =
        serde_json::from_str(text).map_err(|e| format!("stamps of a chain run: {e}"))?;
    Ok(stamps_from(chain, &pairs))
}

/// A sequencer's durable state as its row stores it.
pub fn encode_order(state: &SequencerState) -> String {
    serde_json::json!({ "ctr": state.ctr, "done": state.done }).to_string()
}

pub fn decode_order(server: ServerId, text: &str) -> Result<SequencerState, String> {
    #[derive(serde::Deserialize)]
    struct Stored {
        ctr: std::collections::BTreeMap<ServerId, u64>,
        done: std::collections::BTreeMap<ServerId, u64>,
    }
    let s: Stored = serde_json::from_str(text)
        .map_err(|e| format!("sequencer state of server {server}: {e}"))?;
    Ok(SequencerState {
        server,
        ctr: s.ctr,
        done: s.done,
    })
}

/// An error as it travels between nodes, and back.
pub fn error_to_wire(e: &SqlError) -> WireError {
    (e.code.to_string(), e.message.to_string())
}

pub fn error_from_wire((code, message): WireError) -> SqlError {
    SqlError::new(aqueduct_expr::static_code(&code), message)
}

fn parse_one(sql: &str) -> Statement {
    aqueduct_plan::parse::parse(sql)
        .expect("the runtime's own statements parse")
        .remove(0)
}

/// Whether an error means "run the transaction again".
pub fn retryable(e: &SqlError) -> bool {
    matches!(e.code, "40001" | "40P01" | "55P03")
}

/// The runtime's own statements, parsed once per logical server.
pub struct ProgressSql {
    begin: Statement,
    commit: Statement,
    rollback: Statement,
    insert: Statement,
    advance: Statement,
    delete: Statement,
    delete_at: Statement,
    at: Statement,
    fail: Statement,
    order: Statement,
    inbox_has: Statement,
    inbox_add: Statement,
    inbox_forget: Statement,
}

impl Default for ProgressSql {
    fn default() -> ProgressSql {
        ProgressSql::new()
    }
}

impl ProgressSql {
    pub fn new() -> ProgressSql {
        ProgressSql {
            begin: parse_one("BEGIN ISOLATION LEVEL SERIALIZABLE"),
            commit: parse_one("COMMIT"),
            rollback: parse_one("ROLLBACK"),
            insert: parse_one(&format!(
                "INSERT INTO {PROGRESS_TABLE} (id, chain, next_hop, slots, stamps) VALUES ($1, $2, $3, $4, $5)"
            )),
            advance: parse_one(&format!(
                "UPDATE {PROGRESS_TABLE} SET next_hop = $2, slots = $3, stamps = $4 WHERE id = $1"
            )),
            delete: parse_one(&format!("DELETE FROM {PROGRESS_TABLE} WHERE id = $1")),
            delete_at: parse_one(&format!(
                "DELETE FROM {PROGRESS_TABLE} WHERE id = $1 AND next_hop = $2"
            )),
            at: parse_one(&format!(
                "SELECT next_hop FROM {PROGRESS_TABLE} WHERE id = $1"
            )),
            fail: parse_one(&format!(
                "UPDATE {PROGRESS_TABLE} SET next_hop = -1, error = $2 WHERE id = $1"
            )),
            order: parse_one(&format!(
                "UPDATE {ORDER_TABLE} SET state = $2 WHERE server = $1"
            )),
            inbox_has: parse_one(&format!("SELECT id FROM {INBOX_TABLE} WHERE id = $1")),
            inbox_add: parse_one(&format!("INSERT INTO {INBOX_TABLE} (id) VALUES ($1)")),
            inbox_forget: parse_one(&format!("DELETE FROM {INBOX_TABLE} WHERE id = $1")),
        }
    }

    /// The runtime's tables, created when missing.
    pub fn create_tables(s: &mut S) -> Result<(), SqlError> {
        s.execute_one(&format!(
            "CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (id bigint PRIMARY KEY, chain text NOT NULL, \
             next_hop integer NOT NULL, slots text NOT NULL, error text, stamps text)"
        ))?;
        s.execute_one(&format!(
            "ALTER TABLE {PROGRESS_TABLE} ADD COLUMN IF NOT EXISTS stamps text"
        ))?;
        s.execute_one(&format!(
            "CREATE TABLE IF NOT EXISTS {ORDER_TABLE} (server integer PRIMARY KEY, state text NOT NULL)"
        ))?;
        s.execute_one(&format!(
            "CREATE TABLE IF NOT EXISTS {INBOX_TABLE} (id bigint PRIMARY KEY)"
        ))?;
        Ok(())
    }

    /// The sender of hop `hop` of chain `id` to another node heard it
    /// committed there: its row here goes, unless the chain moved on.
    pub fn forget_sent(&self, s: &mut S, id: ChainId, hop: usize) -> Result<(), SqlError> {
        exec_plain(
            s,
            &self.delete_at,
            &[Value::Int(id as i64), Value::Int(hop as i64)],
        )
        .map(|_| ())
    }

    /// The linked start of chain `id` will not come again.
    pub fn forget_inbox(&self, s: &mut S, id: ChainId) -> Result<(), SqlError> {
        exec_plain(s, &self.inbox_forget, &[Value::Int(id as i64)]).map(|_| ())
    }

    /// Records a hop's failure on the chain's row, with the hop's turn
    /// in `order`, so later hops of its origin are not held back.
    pub fn record_failure(&self, s: &mut S, id: ChainId, e: &SqlError, order: &OrderWrite) {
        let result = (|| {
            exec_plain(s, &self.begin, &[])?;
            exec_plain(
                s,
                &self.fail,
                &[Value::Int(id as i64), Value::Text(e.to_string())],
            )?;
            exec_plain(
                s,
                &self.order,
                &[
                    Value::Int(order.0 as i64),
                    Value::Text(encode_order(&order.1)),
                ],
            )?;
            exec_plain(s, &self.commit, &[])
        })();
        if let Err(e) = result {
            let _ = s.execute_one("ROLLBACK");
            tracing::error!(id, "a chain's failure could not be recorded: {e}");
        }
    }
}

pub(crate) fn exec(
    s: &mut S,
    st: &Statement,
    hints: &[Option<DataType>],
    params: &[Value],
) -> Result<Outcome, SqlError> {
    s.run_one(st, hints, params)
}

pub(crate) fn exec_plain(s: &mut S, st: &Statement, params: &[Value]) -> Result<Outcome, SqlError> {
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

/// Every slot `encode_slots` wrote, however many.
pub fn decode_all(text: &str) -> Result<Slots, String> {
    let n = serde_json::from_str::<Vec<serde_json::Value>>(text)
        .map_err(|e| format!("slots of a chain run: {e}"))?
        .len();
    decode_slots(text, n)
}

pub fn decode_slots(text: &str, n: usize) -> Result<(Vec<Value>, Vec<Option<DataType>>), String> {
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

pub fn types_of(decl: &ChainDecl) -> Vec<Option<DataType>> {
    let mut t: Vec<Option<DataType>> = decl.params.iter().map(|(_, ty)| Some(ty.clone())).collect();
    t.resize(decl.slots.len(), None);
    t
}

/// How a hop came to run here, which says where its progress row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A called chain's first hop: no row yet.
    Called,
    /// A linked chain's first hop, its row (`next_hop = 0`) on this node.
    LinkedHere,
    /// A linked chain's first hop, its row on the node that linked it:
    /// the inbox here makes it run once.
    LinkedFrom,
    /// A later hop after a hop on this node: the row here says whether it
    /// has run.
    Local,
    /// A later hop after a hop on another node, which this node's
    /// sequencer said has not run: a row found here is stale.
    Remote,
}

impl Entry {
    fn row_here(self) -> bool {
        matches!(self, Entry::LinkedHere | Entry::Local | Entry::Remote)
    }
}

/// How one attempt at a hop ended.
pub enum HopOutcome {
    /// Committed at this LSN; the chain linked to this one, when this was
    /// the last hop and the chain has `THEN CALL`.
    Committed(Lsn, Option<Box<Run>>),
    /// The first hop's `ABORT IF` held.
    Aborted,
    /// The progress table or the inbox says the hop has run.
    AlreadyDone,
}

/// What a hop needs besides its run.
pub struct HopContext<'a> {
    pub sql: &'a ProgressSql,
    pub decls: &'a DeclSource,
    pub ids: &'a Ids,
    /// This node, the home of chains linked here.
    pub node: usize,
}

/// The sequencer state a hop commits with: its server and the state.
pub type OrderWrite = (ServerId, SequencerState);

/// Runs hop `hop` of `run` as one transaction in `s`, with the progress
/// row's change and `order` (none for a chain of one hop: nothing durable
/// refers to its stamp, so a read-only chain of one hop writes nothing);
/// retries serialization failures (`tries` times at most).
#[allow(clippy::too_many_arguments)]
pub fn run_hop(
    s: &mut S,
    cx: &HopContext,
    run: &mut Run,
    hop: usize,
    entry: Entry,
    order: Option<&OrderWrite>,
    tries: usize,
    stop: &dyn Fn() -> bool,
) -> Result<HopOutcome, SqlError> {
    let order =
        order.map(|(server, state)| (Value::Int(*server as i64), Value::Text(encode_order(state))));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let before = (run.slots.clone(), run.types.clone());
        match try_hop(s, cx, run, hop, entry, order.as_ref()) {
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
    let mut next = Box::new(Run::new(cx.ids.next(), linked, slots, run.home));
    next.linked = true;
    next.ticket = run.ticket.clone();
    next.ticket_id = run.ticket_id;
    next.result = Some(run.final_slots());
    exec_plain(
        s,
        &cx.sql.insert,
        &[
            Value::Int(next.id as i64),
            Value::Text(next.decl.name.clone()),
            Value::Int(0),
            Value::Text(encode_slots(&next.slots, &next.types)),
            Value::Null,
        ],
    )?;
    Ok(Some(next))
}

fn try_hop(
    s: &mut S,
    cx: &HopContext,
    run: &mut Run,
    hop: usize,
    entry: Entry,
    order: Option<&(Value, Value)>,
) -> Result<HopOutcome, SqlError> {
    let sql = cx.sql;
    let decl = run.decl.clone();
    let last = hop + 1 == decl.hops.len();
    let id = Value::Int(run.id as i64);
    exec_plain(s, &sql.begin, &[])?;
    match entry {
        Entry::LinkedHere | Entry::Local => {
            let at = exec_plain(s, &sql.at, std::slice::from_ref(&id))?;
            let next = match at {
                Outcome::Rows { rows, .. } => rows.first().and_then(|r| r.first()).cloned(),
                _ => None,
            };
            if next != Some(Value::Int(hop as i64)) {
                exec_plain(s, &sql.rollback, &[])?;
                return Ok(HopOutcome::AlreadyDone);
            }
        }
        Entry::LinkedFrom => {
            let seen = exec_plain(s, &sql.inbox_has, std::slice::from_ref(&id))?;
            if matches!(seen, Outcome::Rows { rows, .. } if !rows.is_empty()) {
                exec_plain(s, &sql.rollback, &[])?;
                return Ok(HopOutcome::AlreadyDone);
            }
            exec_plain(s, &sql.inbox_add, std::slice::from_ref(&id))?;
        }
        Entry::Called | Entry::Remote => {}
    }
    if hop_statements(s, &decl, hop, run)? {
        match entry {
            // An aborted linked chain leaves no row behind; its inbox
            // entry stays, so a copy of its start does not run.
            Entry::LinkedHere => {
                exec_plain(s, &sql.delete, &[id])?;
                exec_plain(s, &sql.commit, &[])?;
            }
            Entry::LinkedFrom => exec_plain(s, &sql.commit, &[]).map(|_| ())?,
            _ => exec_plain(s, &sql.rollback, &[]).map(|_| ())?,
        }
        return Ok(HopOutcome::Aborted);
    }
    let mut linked = None;
    let stamps = encode_stamps(&run.stamps);
    let slots = Value::Text(encode_slots(&run.slots, &run.types));
    let next_hop = Value::Int(hop as i64 + 1);
    if last {
        linked = link(s, cx, &decl, run)?;
        if entry.row_here() {
            exec_plain(s, &sql.delete, &[id])?;
        }
    } else {
        match entry {
            Entry::LinkedHere | Entry::Local => {
                exec_plain(s, &sql.advance, &[id, next_hop, slots, stamps])?;
            }
            Entry::Remote => {
                exec_plain(s, &sql.delete, std::slice::from_ref(&id))?;
                let name = Value::Text(decl.name.clone());
                exec_plain(s, &sql.insert, &[id, name, next_hop, slots, stamps])?;
            }
            Entry::Called | Entry::LinkedFrom => {
                let name = Value::Text(decl.name.clone());
                exec_plain(s, &sql.insert, &[id, name, next_hop, slots, stamps])?;
            }
        }
    }
    if let Some((server, state)) = order {
        exec_plain(s, &sql.order, &[server.clone(), state.clone()])?;
    }
    exec_plain(s, &sql.commit, &[])?;
    Ok(HopOutcome::Committed(s.last_lsn(), linked))
}

/// A chain the analysis rejected, as one transaction of `s`: every hop,
/// then the linked chain's row.
pub fn try_whole(s: &mut S, cx: &HopContext, run: &mut Run) -> Result<HopOutcome, SqlError> {
    let decl = run.decl.clone();
    s.execute_one("BEGIN ISOLATION LEVEL SERIALIZABLE")?;
    for hop in 0..decl.hops.len() {
        if hop_statements(s, &decl, hop, run)? {
            s.execute_one("ROLLBACK")?;
            return Ok(HopOutcome::Aborted);
        }
    }
    let linked = link(s, cx, &decl, run)?;
    s.execute_one("COMMIT")?;
    Ok(HopOutcome::Committed(s.last_lsn(), linked))
}
