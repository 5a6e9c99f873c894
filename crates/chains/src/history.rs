//! A serializability checker for recorded histories, used as the oracle of
//! chain tests.
//!
//! Concurrent clients run transaction chains against a server and record
//! what each committed transaction read and wrote. This module decides
//! whether that history is *conflict-serializable*, following the graph
//! formulation of Adya's thesis (Adya, "Weak Consistency: A Generalized
//! Theory and Optimistic Implementations for Distributed Transactions",
//! MIT, 1999). It does no I/O and starts no threads.
//!
//! # Model
//!
//! A [`History`] is a list of committed transactions ([`Txn`]), each with a
//! unique id, a label for humans and its operations in program order:
//! [`Op::Read`] names the version of a key the transaction observed,
//! [`Op::Write`] the version it installed. Versions are numbers assigned by
//! the system (a log sequence number, say), unique per key; version
//! [`INITIAL_VERSION`] (0) is the value every key has before any write and
//! is never installed by a transaction. The *version order* of a key is the
//! numeric order of its versions, the initial version first.
//!
//! # The direct serialization graph
//!
//! Nodes are transactions; edges are direct dependencies (Adya, §3.1):
//!
//! * **ww** (write dependency): `T1` installs a version of `k` and `T2`
//!   installs the next version of `k` → `T1 → T2`;
//! * **wr** (read dependency): `T1` installs a version and `T2` reads it →
//!   `T1 → T2`;
//! * **rw** (anti-dependency): `T1` reads a version of `k` (possibly the
//!   initial one) and `T2` installs the next version of `k` → `T1 → T2`.
//!
//! Edges from a transaction to itself are dropped. The history is
//! serializable iff the graph is acyclic; any topological order of it is an
//! equivalent serial order. A cycle is classified as Adya does
//! ([`CycleClass`]): G0 (write cycle, ww edges only), G1c (circular
//! information flow, ww and wr edges) or G2 (at least one anti-dependency).
//! When the graph has a cycle, the checker looks for a G0 cycle first, then
//! G1c, then G2, so the class it reports names the lowest of Adya's levels
//! the history violates (G0 is proscribed from PL-1 up, G1c from PL-2, G2
//! at PL-3, serializability).
//!
//! # Validation
//!
//! Before building the graph, [`check`] rejects histories that do not
//! describe a possible execution, with a typed [`Anomaly`]:
//!
//! * two transactions with one id;
//! * a write of the initial version;
//! * two writes installing the same version of a key;
//! * a read of a version that no transaction installed (an aborted,
//!   dirty or garbage value), [`Anomaly::ReadOfUnwrittenVersion`];
//! * a read of a version that its installer later overwrote within the same
//!   transaction (Adya's G1b, intermediate read);
//! * internal inconsistency. A transaction that writes a key more than once
//!   must install increasing versions; the last one is the version it
//!   installs, the earlier ones are intermediate. A read of a key the
//!   transaction already wrote must observe its own latest write of that
//!   key; a read before the transaction's first write of the key must not
//!   observe one of its own versions (that would be reading the future).
//!
//! Two reads of one key observing different versions with no write of the
//! transaction in between (a fuzzy read) are not rejected here: they give
//! the transaction an anti-dependency and a read dependency that close a
//! cycle in the graph.
//!
//! # Cost
//!
//! Grouping versions per key and resolving reads sorts and binary-searches,
//! `O(n log n)` in the number of operations; the graph has at most one edge
//! per operation, and the acyclicity test (Kahn's algorithm) is linear. A
//! witness cycle is found by a backward walk and breadth-first searches.
//! Nothing recurses. Histories over [`MAX_HISTORY_OPERATIONS`] operations
//! or [`MAX_HISTORY_TRANSACTIONS`] transactions are refused.

use std::collections::{HashMap, VecDeque};
use std::fmt;

/// The version every key has before any transaction writes it.
pub const INITIAL_VERSION: u64 = 0;

/// The largest history, in operations (reads plus writes), [`check`]
/// accepts.
pub const MAX_HISTORY_OPERATIONS: usize = 1_000_000;

/// The largest history, in transactions, [`check`] accepts.
pub const MAX_HISTORY_TRANSACTIONS: usize = 1_000_000;

/// How many breadth-first searches, from distinct transactions of a
/// cycle, [`check`] runs to shorten the witness it reports.
pub const MAX_WITNESS_SEARCHES: usize = 32;

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// The transaction observed `version` of `key` ([`INITIAL_VERSION`]
    /// for the value before any write).
    Read { key: String, version: u64 },
    /// The transaction installed `version` of `key`.
    Write { key: String, version: u64 },
}

impl Op {
    /// The key the operation touches.
    pub fn key(&self) -> &str {
        match self {
            Op::Read { key, .. } | Op::Write { key, .. } => key,
        }
    }

    /// The version the operation observed or installed.
    pub fn version(&self) -> u64 {
        match self {
            Op::Read { version, .. } | Op::Write { version, .. } => *version,
        }
    }
}

/// A committed transaction: an id unique in its history, a label for
/// humans (such as `bid(7, 3)`) and its operations in program order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub id: u64,
    pub label: String,
    pub ops: Vec<Op>,
}

impl Txn {
    /// A transaction without operations.
    pub fn new(id: u64, label: impl Into<String>) -> Self {
        Txn {
            id,
            label: label.into(),
            ops: Vec::new(),
        }
    }

    /// Appends a read of `version` of `key`.
    pub fn read(mut self, key: impl Into<String>, version: u64) -> Self {
        self.ops.push(Op::Read {
            key: key.into(),
            version,
        });
        self
    }

    /// Appends a write installing `version` of `key`.
    pub fn write(mut self, key: impl Into<String>, version: u64) -> Self {
        self.ops.push(Op::Write {
            key: key.into(),
            version,
        });
        self
    }
}

/// A recorded history: the committed transactions, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    txns: Vec<Txn>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// Adds a committed transaction.
    pub fn push(&mut self, txn: Txn) {
        self.txns.push(txn);
    }

    /// The transactions, in the order they were pushed.
    pub fn txns(&self) -> &[Txn] {
        &self.txns
    }

    /// The transactions, mutably (to edit a recorded history).
    pub fn txns_mut(&mut self) -> &mut [Txn] {
        &mut self.txns
    }

    /// The number of transactions.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// Whether the history has no transactions.
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// The number of operations over all transactions.
    pub fn operations(&self) -> usize {
        self.txns.iter().map(|t| t.ops.len()).sum()
    }
}

impl FromIterator<Txn> for History {
    fn from_iter<I: IntoIterator<Item = Txn>>(iter: I) -> Self {
        History {
            txns: iter.into_iter().collect(),
        }
    }
}

/// The kind of a direct dependency between two transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dependency {
    /// Write dependency: the target installed the next version.
    Ww,
    /// Read dependency: the target read the version the source installed.
    Wr,
    /// Anti-dependency: the target installed the version after the one the
    /// source read.
    Rw,
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dependency::Ww => "ww",
            Dependency::Wr => "wr",
            Dependency::Rw => "rw",
        })
    }
}

/// Adya's classes of dependency cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CycleClass {
    /// Write cycle: ww edges only.
    G0,
    /// Circular information flow: ww and wr edges, at least one wr.
    G1c,
    /// A cycle with at least one anti-dependency (rw).
    G2,
}

impl CycleClass {
    /// The class of a cycle made of edges of these kinds.
    pub fn of<I: IntoIterator<Item = Dependency>>(kinds: I) -> Self {
        let mut class = CycleClass::G0;
        for kind in kinds {
            let c = match kind {
                Dependency::Ww => CycleClass::G0,
                Dependency::Wr => CycleClass::G1c,
                Dependency::Rw => CycleClass::G2,
            };
            class = class.max(c);
        }
        class
    }
}

impl fmt::Display for CycleClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CycleClass::G0 => "G0",
            CycleClass::G1c => "G1c",
            CycleClass::G2 => "G2",
        })
    }
}

/// One edge of a witness cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleEdge {
    pub from: u64,
    pub from_label: String,
    pub to: u64,
    pub to_label: String,
    pub kind: Dependency,
    pub key: String,
    /// For ww and wr the version `from` installed; for rw the version
    /// `from` read.
    pub version: u64,
}

/// A simple cycle of the serialization graph: the witness that a history
/// is not serializable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub class: CycleClass,
    /// The edges in order; each edge's `to` is the next edge's `from`, and
    /// the last edge's `to` is the first edge's `from`.
    pub edges: Vec<CycleEdge>,
}

impl Cycle {
    /// The transaction ids on the cycle, in order, each once.
    pub fn txns(&self) -> Vec<u64> {
        self.edges.iter().map(|e| e.from).collect()
    }

    /// Whether transaction `id` lies on the cycle.
    pub fn contains(&self, id: u64) -> bool {
        self.edges.iter().any(|e| e.from == id)
    }

    /// The number of edges (and transactions) on the cycle.
    pub fn len(&self) -> usize {
        self.edges.len()
    }

    /// Whether the cycle has no edges (never true for a reported cycle).
    pub fn is_empty(&self) -> bool {
        self.edges.is_empty()
    }
}

impl fmt::Display for Cycle {
    /// Written as `G2: T3 bid(7,3) -rw(items/7)-> T5 bid(7,4) -ww(items/7)-> T3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.class)?;
        for e in &self.edges {
            write!(f, " T{} {} -{}({})->", e.from, e.from_label, e.kind, e.key)?;
        }
        if let Some(first) = self.edges.first() {
            write!(f, " T{}", first.from)?;
        }
        Ok(())
    }
}

/// A serializable history: an equivalent serial order and the size of the
/// serialization graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serializable {
    /// Transaction ids in an order consistent with every dependency.
    pub order: Vec<u64>,
    pub ww_edges: usize,
    pub wr_edges: usize,
    pub rw_edges: usize,
}

/// Why a history is not serializable, or not a possible history at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// The serialization graph has a cycle; this is a witness.
    Cycle(Cycle),
    /// More than [`MAX_HISTORY_OPERATIONS`] operations.
    TooManyOperations { operations: usize, limit: usize },
    /// More than [`MAX_HISTORY_TRANSACTIONS`] transactions.
    TooManyTransactions { transactions: usize, limit: usize },
    /// Two transactions with the same id.
    DuplicateTxnId { txn: u64 },
    /// A write of [`INITIAL_VERSION`].
    WriteOfInitialVersion { txn: u64, key: String },
    /// Two writes installing the same version of a key.
    DuplicateVersion {
        key: String,
        version: u64,
        first: u64,
        second: u64,
    },
    /// A read of a version nobody installed.
    ReadOfUnwrittenVersion { txn: u64, key: String, version: u64 },
    /// A read of a version its installer overwrote within the same
    /// transaction (G1b).
    IntermediateRead {
        txn: u64,
        writer: u64,
        key: String,
        version: u64,
    },
    /// A transaction wrote a key twice, the later write with a version not
    /// after the earlier one.
    WritesOutOfOrder {
        txn: u64,
        key: String,
        earlier: u64,
        later: u64,
    },
    /// A read inconsistent with the transaction's own writes: after writing
    /// the key it observed another version than its latest write
    /// (`own_write` is `Some`), or before writing it observed a version it
    /// installs later (`own_write` is `None`).
    InconsistentOwnRead {
        txn: u64,
        key: String,
        own_write: Option<u64>,
        observed: u64,
    },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Cycle(c) => write!(f, "dependency cycle {c}"),
            Anomaly::TooManyOperations { operations, limit } => {
                write!(
                    f,
                    "history has {operations} operations, over the limit {limit}"
                )
            }
            Anomaly::TooManyTransactions {
                transactions,
                limit,
            } => write!(
                f,
                "history has {transactions} transactions, over the limit {limit}"
            ),
            Anomaly::DuplicateTxnId { txn } => write!(f, "transaction id T{txn} occurs twice"),
            Anomaly::WriteOfInitialVersion { txn, key } => {
                write!(f, "T{txn} writes the initial version of {key}")
            }
            Anomaly::DuplicateVersion {
                key,
                version,
                first,
                second,
            } => write!(
                f,
                "T{first} and T{second} both install version {version} of {key}"
            ),
            Anomaly::ReadOfUnwrittenVersion { txn, key, version } => {
                write!(
                    f,
                    "T{txn} reads version {version} of {key}, which nobody wrote"
                )
            }
            Anomaly::IntermediateRead {
                txn,
                writer,
                key,
                version,
            } => write!(
                f,
                "T{txn} reads version {version} of {key}, an intermediate write of T{writer}"
            ),
            Anomaly::WritesOutOfOrder {
                txn,
                key,
                earlier,
                later,
            } => write!(
                f,
                "T{txn} writes version {earlier} of {key} and then the earlier version {later}"
            ),
            Anomaly::InconsistentOwnRead {
                txn,
                key,
                own_write: Some(own),
                observed,
            } => write!(
                f,
                "T{txn} wrote version {own} of {key} but then read version {observed}"
            ),
            Anomaly::InconsistentOwnRead {
                txn,
                key,
                own_write: None,
                observed,
            } => write!(
                f,
                "T{txn} reads version {observed} of {key} before writing it"
            ),
        }
    }
}

impl std::error::Error for Anomaly {}

/// A graph edge: source and target transaction indexes, kind, key index,
/// version (as in [`CycleEdge::version`]).
#[derive(Debug, Clone, Copy)]
struct Edge {
    from: usize,
    to: usize,
    kind: Dependency,
    key: usize,
    version: u64,
}

/// A version in a key's version order: the version, the index of its
/// installer, and whether it is the installer's last write of the key.
#[derive(Debug, Clone, Copy)]
struct Installed {
    version: u64,
    txn: usize,
    last: bool,
}

/// Checks that `history` is a possible history and that it is
/// conflict-serializable; see the module documentation.
pub fn check(history: &History) -> Result<Serializable, Anomaly> {
    let txns = history.txns();
    if txns.len() > MAX_HISTORY_TRANSACTIONS {
        return Err(Anomaly::TooManyTransactions {
            transactions: txns.len(),
            limit: MAX_HISTORY_TRANSACTIONS,
        });
    }
    let operations = history.operations();
    if operations > MAX_HISTORY_OPERATIONS {
        return Err(Anomaly::TooManyOperations {
            operations,
            limit: MAX_HISTORY_OPERATIONS,
        });
    }

    // Pass 1: per transaction — ids, internal consistency; intern keys and
    // collect the installed versions and the reads.
    let mut ids: HashMap<u64, usize> = HashMap::with_capacity(txns.len());
    let mut key_ids: HashMap<&str, usize> = HashMap::new();
    let mut keys: Vec<&str> = Vec::new();
    let mut installed: Vec<Vec<Installed>> = Vec::new();
    // (reader, key, version) in history order.
    let mut reads: Vec<(usize, usize, u64)> = Vec::new();
    // Per transaction: key -> (its latest write so far, index in `installed`).
    let mut own: HashMap<usize, (u64, usize)> = HashMap::new();
    // Per transaction: reads of keys it had not written yet (to check they
    // do not observe a version it installs later).
    let mut early_reads: Vec<(usize, u64)> = Vec::new();
    for (t, txn) in txns.iter().enumerate() {
        if ids.insert(txn.id, t).is_some() {
            return Err(Anomaly::DuplicateTxnId { txn: txn.id });
        }
        own.clear();
        early_reads.clear();
        for op in &txn.ops {
            let key = op.key();
            let k = match key_ids.get(key) {
                Some(&k) => k,
                None => {
                    let k = keys.len();
                    keys.push(key);
                    installed.push(Vec::new());
                    key_ids.insert(key, k);
                    k
                }
            };
            match *op {
                Op::Read { version, .. } => {
                    match own.get(&k) {
                        Some(&(latest, _)) if latest != version => {
                            return Err(Anomaly::InconsistentOwnRead {
                                txn: txn.id,
                                key: key.to_string(),
                                own_write: Some(latest),
                                observed: version,
                            });
                        }
                        Some(_) => {}
                        None => early_reads.push((k, version)),
                    }
                    reads.push((t, k, version));
                }
                Op::Write { version, .. } => {
                    if version == INITIAL_VERSION {
                        return Err(Anomaly::WriteOfInitialVersion {
                            txn: txn.id,
                            key: key.to_string(),
                        });
                    }
                    let slot = installed[k].len();
                    if let Some(&(latest, prev)) = own.get(&k) {
                        if version <= latest {
                            return Err(Anomaly::WritesOutOfOrder {
                                txn: txn.id,
                                key: key.to_string(),
                                earlier: latest,
                                later: version,
                            });
                        }
                        installed[k][prev].last = false;
                    }
                    installed[k].push(Installed {
                        version,
                        txn: t,
                        last: true,
                    });
                    own.insert(k, (version, slot));
                }
            }
        }
        // A read before the transaction's first write of a key must not
        // observe one of the versions it installs.
        for &(k, version) in &early_reads {
            if own.contains_key(&k)
                && installed[k]
                    .iter()
                    .rev()
                    .take_while(|i| i.txn == t)
                    .any(|i| i.version == version)
            {
                return Err(Anomaly::InconsistentOwnRead {
                    txn: txn.id,
                    key: keys[k].to_string(),
                    own_write: None,
                    observed: version,
                });
            }
        }
    }

    // Pass 2: version orders.
    for (k, versions) in installed.iter_mut().enumerate() {
        versions.sort_by_key(|i| i.version);
        if let Some(w) = versions.windows(2).find(|w| w[0].version == w[1].version) {
            return Err(Anomaly::DuplicateVersion {
                key: keys[k].to_string(),
                version: w[0].version,
                first: txns[w[0].txn].id,
                second: txns[w[1].txn].id,
            });
        }
    }

    // Pass 3: edges.
    let mut edges: Vec<Edge> = Vec::with_capacity(operations);
    for (k, versions) in installed.iter().enumerate() {
        for w in versions.windows(2) {
            if w[0].txn != w[1].txn {
                edges.push(Edge {
                    from: w[0].txn,
                    to: w[1].txn,
                    kind: Dependency::Ww,
                    key: k,
                    version: w[0].version,
                });
            }
        }
    }
    for &(t, k, version) in &reads {
        let versions = &installed[k];
        let next = if version == INITIAL_VERSION {
            0
        } else {
            let pos = match versions.binary_search_by_key(&version, |i| i.version) {
                Ok(pos) => pos,
                Err(_) => {
                    return Err(Anomaly::ReadOfUnwrittenVersion {
                        txn: txns[t].id,
                        key: keys[k].to_string(),
                        version,
                    })
                }
            };
            let writer = versions[pos];
            if writer.txn != t {
                if !writer.last {
                    return Err(Anomaly::IntermediateRead {
                        txn: txns[t].id,
                        writer: txns[writer.txn].id,
                        key: keys[k].to_string(),
                        version,
                    });
                }
                edges.push(Edge {
                    from: writer.txn,
                    to: t,
                    kind: Dependency::Wr,
                    key: k,
                    version,
                });
            }
            pos + 1
        };
        if let Some(n) = versions.get(next) {
            if n.txn != t {
                edges.push(Edge {
                    from: t,
                    to: n.txn,
                    kind: Dependency::Rw,
                    key: k,
                    version,
                });
            }
        }
    }

    let n = txns.len();
    let graph = Graph::new(n, &edges, |_| true);
    let order = match graph.topological_order() {
        Ok(order) => order,
        Err(rest) => {
            // Report the weakest class of cycle present: a G0 cycle if the
            // ww edges alone have one, else G1c if ww and wr edges do.
            for class in [CycleClass::G0, CycleClass::G1c] {
                let sub = Graph::new(n, &edges, |e| CycleClass::of([e.kind]) <= class);
                if let Err(sub_rest) = sub.topological_order() {
                    let cycle = sub.witness(&sub_rest);
                    return Err(Anomaly::Cycle(make_cycle(txns, &keys, &edges, &cycle)));
                }
            }
            let cycle = graph.witness(&rest);
            return Err(Anomaly::Cycle(make_cycle(txns, &keys, &edges, &cycle)));
        }
    };
    let count = |kind| edges.iter().filter(|e| e.kind == kind).count();
    Ok(Serializable {
        order: order.into_iter().map(|t| txns[t].id).collect(),
        ww_edges: count(Dependency::Ww),
        wr_edges: count(Dependency::Wr),
        rw_edges: count(Dependency::Rw),
    })
}

fn make_cycle(txns: &[Txn], keys: &[&str], edges: &[Edge], cycle: &[usize]) -> Cycle {
    let edges: Vec<CycleEdge> = cycle
        .iter()
        .map(|&e| {
            let e = edges[e];
            CycleEdge {
                from: txns[e.from].id,
                from_label: txns[e.from].label.clone(),
                to: txns[e.to].id,
                to_label: txns[e.to].label.clone(),
                kind: e.kind,
                key: keys[e.key].to_string(),
                version: e.version,
            }
        })
        .collect();
    Cycle {
        class: CycleClass::of(edges.iter().map(|e| e.kind)),
        edges,
    }
}

/// A subgraph of the serialization graph in compressed adjacency form, in
/// both directions; adjacency lists hold indexes into the edge list.
struct Graph<'a> {
    edges: &'a [Edge],
    out_start: Vec<usize>,
    out: Vec<usize>,
    in_start: Vec<usize>,
    inc: Vec<usize>,
}

impl<'a> Graph<'a> {
    fn new(n: usize, edges: &'a [Edge], keep: impl Fn(&Edge) -> bool) -> Self {
        let mut out_start = vec![0usize; n + 1];
        let mut in_start = vec![0usize; n + 1];
        for e in edges.iter().filter(|e| keep(e)) {
            out_start[e.from + 1] += 1;
            in_start[e.to + 1] += 1;
        }
        for i in 0..n {
            out_start[i + 1] += out_start[i];
            in_start[i + 1] += in_start[i];
        }
        let mut out = vec![0usize; out_start[n]];
        let mut inc = vec![0usize; in_start[n]];
        let mut out_fill = out_start.clone();
        let mut in_fill = in_start.clone();
        for (i, e) in edges.iter().enumerate().filter(|(_, e)| keep(e)) {
            out[out_fill[e.from]] = i;
            out_fill[e.from] += 1;
            inc[in_fill[e.to]] = i;
            in_fill[e.to] += 1;
        }
        Graph {
            edges,
            out_start,
            out,
            in_start,
            inc,
        }
    }

    fn nodes(&self) -> usize {
        self.out_start.len() - 1
    }

    fn successors(&self, v: usize) -> &[usize] {
        &self.out[self.out_start[v]..self.out_start[v + 1]]
    }

    fn predecessors(&self, v: usize) -> &[usize] {
        &self.inc[self.in_start[v]..self.in_start[v + 1]]
    }

    /// Kahn's algorithm, taking ready nodes in index order. On a cycle,
    /// returns the nodes never made ready: each has a predecessor among
    /// them, and every cycle lies among them.
    fn topological_order(&self) -> Result<Vec<usize>, Vec<bool>> {
        let n = self.nodes();
        let mut indegree: Vec<usize> = (0..n).map(|v| self.predecessors(v).len()).collect();
        let mut ready: VecDeque<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(v) = ready.pop_front() {
            order.push(v);
            for &e in self.successors(v) {
                let w = self.edges[e].to;
                indegree[w] -= 1;
                if indegree[w] == 0 {
                    ready.push_back(w);
                }
            }
        }
        if order.len() == n {
            Ok(order)
        } else {
            Err(indegree.into_iter().map(|d| d > 0).collect())
        }
    }

    /// A simple cycle among the nodes `rest` left by
    /// [`Graph::topological_order`], as edge indexes: the shortest cycle
    /// through any of up to [`MAX_WITNESS_SEARCHES`] nodes of a first cycle
    /// found by walking predecessors.
    fn witness(&self, rest: &[bool]) -> Vec<usize> {
        let n = self.nodes();
        // Walk backwards inside `rest` until a node repeats; it lies on a
        // cycle.
        let Some(mut v) = rest.iter().position(|&r| r) else {
            return Vec::new();
        };
        let mut seen = vec![false; n];
        while !seen[v] {
            seen[v] = true;
            match self
                .predecessors(v)
                .iter()
                .map(|&e| self.edges[e].from)
                .find(|&u| rest[u])
            {
                Some(u) => v = u,
                None => return Vec::new(),
            }
        }
        let mut best = self.shortest_cycle_through(v, rest);
        let starts: Vec<usize> = best
            .iter()
            .map(|&e| self.edges[e].from)
            .filter(|&u| u != v)
            .take(MAX_WITNESS_SEARCHES.saturating_sub(1))
            .collect();
        for s in starts {
            if best.len() <= 2 {
                break;
            }
            let c = self.shortest_cycle_through(s, rest);
            if !c.is_empty() && c.len() < best.len() {
                best = c;
            }
        }
        best
    }

    /// The shortest cycle through `s` inside `rest`, as edge indexes
    /// starting at `s` (breadth-first search); empty if there is none.
    fn shortest_cycle_through(&self, s: usize, rest: &[bool]) -> Vec<usize> {
        let n = self.nodes();
        let mut parent: Vec<Option<usize>> = vec![None; n];
        let mut visited = vec![false; n];
        visited[s] = true;
        let mut queue = VecDeque::from([s]);
        while let Some(v) = queue.pop_front() {
            for &e in self.successors(v) {
                let w = self.edges[e].to;
                if w == s {
                    let mut path = vec![e];
                    let mut x = v;
                    while x != s {
                        match parent[x] {
                            Some(pe) => {
                                path.push(pe);
                                x = self.edges[pe].from;
                            }
                            None => return Vec::new(),
                        }
                    }
                    path.reverse();
                    return path;
                }
                if rest[w] && !visited[w] {
                    visited[w] = true;
                    parent[w] = Some(e);
                    queue.push_back(w);
                }
            }
        }
        Vec::new()
    }
}
