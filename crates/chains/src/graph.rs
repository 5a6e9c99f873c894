//! The SC-graph of a workload (§4.1, with the complete construction of
//! §4.2) and its construction.
//!
//! Nodes are hops of chain instances. S-edges join consecutive hops of one
//! instance; C-edges join conflicting hops of different instances.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::error::AnalysisError;
use crate::model::{InstanceRule, Workload};
use crate::{MAX_GRAPH_EDGES, MAX_GRAPH_NODES};

/// Index of a node in [`ScGraph::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

impl NodeId {
    /// The position in [`ScGraph::nodes`].
    pub fn index(self) -> usize {
        self.0
    }
}

/// Index of an edge in [`ScGraph::edges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EdgeId(pub usize);

impl EdgeId {
    /// The position in [`ScGraph::edges`].
    pub fn index(self) -> usize {
        self.0
    }
}

/// A node: one hop of one instance of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Position of the chain in the workload (and in the report).
    pub chain: usize,
    /// Which instance of the chain, from 1.
    pub instance: usize,
    /// Position of the hop in its chain, from 0.
    pub hop: usize,
    /// `chain#instance.hop`, e.g. `bid#2.hop1`.
    pub label: String,
}

/// The two kinds of edges of an SC-graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    /// Sibling: two hops of the same chain instance.
    S,
    /// Conflict: hops of different instances that access a common table,
    /// at least one of them writing it.
    C,
}

/// How two hops conflict on a base table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConflictKind {
    /// Both hops write the table.
    WriteWrite,
    /// One hop reads the table, the other writes it.
    ReadWrite,
    /// One hop reads `view`, derived from the table, the other writes the
    /// table (§4.2, condition 2).
    ViewRead { view: String },
}

/// One reason for a C-edge.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conflict {
    /// The base table both hops touch.
    pub table: String,
    /// How they touch it.
    pub kind: ConflictKind,
}

/// An undirected edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// One end (for S-edges, the earlier hop).
    pub a: NodeId,
    /// The other end.
    pub b: NodeId,
    /// S or C.
    pub kind: EdgeKind,
    /// For a C-edge, every table the two hops conflict on; empty for an
    /// S-edge.
    pub conflicts: Vec<Conflict>,
}

impl Edge {
    /// The end that is not `node` (or `a` if `node` is neither end).
    pub fn other(&self, node: NodeId) -> NodeId {
        if self.a == node {
            self.b
        } else {
            self.a
        }
    }
}

/// The SC-graph: nodes and undirected edges. Two nodes are joined by at
/// most one edge: S-edges stay within an instance, C-edges between
/// instances, and all conflicts of one pair of hops share one C-edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScGraph {
    /// The nodes, grouped by chain, then instance, then hop.
    pub nodes: Vec<Node>,
    /// The edges: first all S-edges, then all C-edges.
    pub edges: Vec<Edge>,
}

impl ScGraph {
    /// The node with this id.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.0)
    }

    /// The edge with this id.
    pub fn edge(&self, id: EdgeId) -> Option<&Edge> {
        self.edges.get(id.0)
    }

    /// For each node, its incident edges and the node at their other end.
    pub(crate) fn adjacency(&self) -> Vec<Vec<(NodeId, EdgeId)>> {
        let mut adjacency = vec![Vec::new(); self.nodes.len()];
        for (index, edge) in self.edges.iter().enumerate() {
            adjacency[edge.a.0].push((edge.b, EdgeId(index)));
            adjacency[edge.b.0].push((edge.a, EdgeId(index)));
        }
        adjacency
    }
}

/// What the construction learned about the chains besides the graph.
pub(crate) struct Built {
    pub graph: ScGraph,
    /// Instances of each chain in the graph.
    pub instances: Vec<usize>,
    /// First node of each chain (its instance 1, hop 0).
    pub first_node: Vec<usize>,
}

/// A hop's accesses with views resolved to base tables.
struct HopAccess {
    chain: usize,
    /// Base tables read directly.
    reads: BTreeSet<String>,
    /// Base tables written.
    writes: BTreeSet<String>,
    /// Base table -> the views read by the hop that derive from it.
    view_reads: BTreeMap<String, BTreeSet<String>>,
}

/// Checks the workload and builds its SC-graph.
pub(crate) fn build(workload: &Workload) -> Result<Built, AnalysisError> {
    let views = resolve_views(workload)?;

    let mut chain_index: HashMap<&str, usize> = HashMap::new();
    for (index, chain) in workload.chains.iter().enumerate() {
        if chain.hops.is_empty() {
            return Err(AnalysisError::EmptyChain {
                chain: chain.name.clone(),
            });
        }
        if chain_index.insert(chain.name.as_str(), index).is_some() {
            return Err(AnalysisError::DuplicateChain {
                chain: chain.name.clone(),
            });
        }
        let mut labels = HashSet::new();
        for (position, hop) in chain.hops.iter().enumerate() {
            let label = hop.label(position);
            if let Some(view) = hop.writes.iter().find(|name| views.contains_key(*name)) {
                return Err(AnalysisError::WriteToView {
                    chain: chain.name.clone(),
                    hop: label,
                    view: view.clone(),
                });
            }
            if !labels.insert(label.clone()) {
                return Err(AnalysisError::DuplicateHop {
                    chain: chain.name.clone(),
                    hop: label,
                });
            }
        }
    }

    // Global hop numbering: chain by chain, hop by hop.
    let mut hop_offset = Vec::with_capacity(workload.chains.len());
    let mut accesses = Vec::new();
    for (chain_position, chain) in workload.chains.iter().enumerate() {
        hop_offset.push(accesses.len());
        for hop in &chain.hops {
            let mut access = HopAccess {
                chain: chain_position,
                reads: BTreeSet::new(),
                writes: hop.writes.clone(),
                view_reads: BTreeMap::new(),
            };
            for name in &hop.reads {
                match views.get(name) {
                    Some(bases) => {
                        for base in bases {
                            access
                                .view_reads
                                .entry(base.clone())
                                .or_default()
                                .insert(name.clone());
                        }
                    }
                    None => {
                        access.reads.insert(name.clone());
                    }
                }
            }
            accesses.push(access);
        }
    }

    let instances: Vec<usize> = workload
        .chains
        .iter()
        .map(|chain| match workload.instance_rule {
            InstanceRule::TwoPerUpdatingChain if chain.is_updating() => 2,
            _ => 1,
        })
        .collect();

    // Commuting pairs of global hop numbers, smaller first.
    let mut commuting: HashSet<(usize, usize)> = HashSet::new();
    for (chain_position, chain) in workload.chains.iter().enumerate() {
        for (position, hop) in chain.hops.iter().enumerate() {
            if hop.commutes_with_self {
                let global = hop_offset[chain_position] + position;
                commuting.insert((global, global));
            }
        }
    }
    for (a, b) in &workload.commuting {
        let mut global = [0usize; 2];
        for (slot, hop_ref) in global.iter_mut().zip([a, b]) {
            let Some(&chain_position) = chain_index.get(hop_ref.chain.as_str()) else {
                return Err(AnalysisError::UnknownChain {
                    chain: hop_ref.chain.clone(),
                });
            };
            if hop_ref.hop >= workload.chains[chain_position].hops.len() {
                return Err(AnalysisError::UnknownHop {
                    chain: hop_ref.chain.clone(),
                    hop: hop_ref.hop,
                });
            }
            *slot = hop_offset[chain_position] + hop_ref.hop;
        }
        commuting.insert((global[0].min(global[1]), global[0].max(global[1])));
    }

    // Nodes.
    let total_nodes: usize = workload
        .chains
        .iter()
        .zip(&instances)
        .map(|(chain, count)| chain.hops.len().saturating_mul(*count))
        .fold(0usize, usize::saturating_add);
    if total_nodes > MAX_GRAPH_NODES {
        return Err(AnalysisError::TooManyNodes {
            nodes: total_nodes,
            limit: MAX_GRAPH_NODES,
        });
    }
    let mut graph = ScGraph::default();
    let mut first_node = Vec::with_capacity(workload.chains.len());
    for (chain_position, chain) in workload.chains.iter().enumerate() {
        first_node.push(graph.nodes.len());
        for instance in 1..=instances[chain_position] {
            for (position, hop) in chain.hops.iter().enumerate() {
                graph.nodes.push(Node {
                    chain: chain_position,
                    instance,
                    hop: position,
                    label: format!("{}#{}.{}", chain.name, instance, hop.label(position)),
                });
            }
        }
    }
    let node_of = |chain: usize, instance: usize, hop: usize| -> NodeId {
        let length = workload.chains[chain].hops.len();
        NodeId(first_node[chain] + (instance - 1) * length + hop)
    };

    // S-edges: consecutive hops of each instance.
    for (chain_position, chain) in workload.chains.iter().enumerate() {
        for instance in 1..=instances[chain_position] {
            for position in 1..chain.hops.len() {
                graph.edges.push(Edge {
                    a: node_of(chain_position, instance, position - 1),
                    b: node_of(chain_position, instance, position),
                    kind: EdgeKind::S,
                    conflicts: Vec::new(),
                });
            }
        }
    }

    // Conflicting pairs of hops, found through an index by base table so
    // that only hops sharing a table are compared.
    let mut writers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut readers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (global, access) in accesses.iter().enumerate() {
        for table in &access.writes {
            writers.entry(table.as_str()).or_default().push(global);
        }
        for table in access.reads.iter().chain(access.view_reads.keys()) {
            readers.entry(table.as_str()).or_default().push(global);
        }
    }
    // How many C-edges a pair of hops yields between their instances: none
    // if annotated as commuting; one between the two instances of a hop;
    // two between different hops of one chain (1 with 2, 2 with 1); every
    // combination for hops of different chains.
    let edges_for_pair = |p: usize, q: usize| -> usize {
        if commuting.contains(&(p.min(q), p.max(q))) {
            return 0;
        }
        let (cp, cq) = (accesses[p].chain, accesses[q].chain);
        let (ip, iq) = (instances[cp], instances[cq]);
        if cp != cq {
            ip * iq
        } else if p == q {
            ip - 1
        } else {
            ip * (ip - 1)
        }
    };
    let mut pairs: BTreeMap<(usize, usize), BTreeSet<Conflict>> = BTreeMap::new();
    let mut edge_count = graph.edges.len();
    let mut add_pair = |p: usize, q: usize, conflict: Conflict| -> Result<(), AnalysisError> {
        let key = (p.min(q), p.max(q));
        if let Some(conflicts) = pairs.get_mut(&key) {
            conflicts.insert(conflict);
            return Ok(());
        }
        let count = edges_for_pair(p, q);
        if count == 0 {
            return Ok(());
        }
        edge_count += count;
        if edge_count > MAX_GRAPH_EDGES {
            return Err(AnalysisError::TooManyEdges {
                limit: MAX_GRAPH_EDGES,
            });
        }
        pairs.insert(key, BTreeSet::from([conflict]));
        Ok(())
    };
    for (table, table_writers) in &writers {
        for (i, &w) in table_writers.iter().enumerate() {
            for &w2 in &table_writers[i..] {
                add_pair(
                    w,
                    w2,
                    Conflict {
                        table: table.to_string(),
                        kind: ConflictKind::WriteWrite,
                    },
                )?;
            }
            for &r in readers.get(table).map(Vec::as_slice).unwrap_or(&[]) {
                let reader = &accesses[r];
                if reader.writes.contains(*table) {
                    // Already a write/write conflict.
                    continue;
                }
                if reader.reads.contains(*table) {
                    add_pair(
                        w,
                        r,
                        Conflict {
                            table: table.to_string(),
                            kind: ConflictKind::ReadWrite,
                        },
                    )?;
                }
                for view in reader.view_reads.get(*table).into_iter().flatten() {
                    add_pair(
                        w,
                        r,
                        Conflict {
                            table: table.to_string(),
                            kind: ConflictKind::ViewRead { view: view.clone() },
                        },
                    )?;
                }
            }
        }
    }

    // C-edges: every pair of hops expanded to their instances.
    for ((p, q), conflicts) in pairs {
        let (cp, cq) = (accesses[p].chain, accesses[q].chain);
        let (hp, hq) = (p - hop_offset[cp], q - hop_offset[cq]);
        for ip in 1..=instances[cp] {
            for iq in 1..=instances[cq] {
                if cp == cq && ip == iq {
                    continue; // the same instance: S-edges already join them
                }
                if p == q && ip > iq {
                    continue; // the same hop: one edge joins its two instances
                }
                graph.edges.push(Edge {
                    a: node_of(cp, ip, hp),
                    b: node_of(cq, iq, hq),
                    kind: EdgeKind::C,
                    conflicts: conflicts.iter().cloned().collect(),
                });
            }
        }
    }

    Ok(Built {
        graph,
        instances,
        first_node,
    })
}

/// Resolves every view to the base tables it ultimately derives from,
/// following views over views with an explicit stack.
fn resolve_views(workload: &Workload) -> Result<HashMap<String, BTreeSet<String>>, AnalysisError> {
    let mut sources: HashMap<&str, Vec<&str>> = HashMap::new();
    for view in &workload.views {
        let list = view.sources.iter().map(String::as_str).collect();
        if sources.insert(view.name.as_str(), list).is_some() {
            return Err(AnalysisError::DuplicateView {
                view: view.name.clone(),
            });
        }
    }

    let mut resolved: HashMap<String, BTreeSet<String>> = HashMap::new();
    for view in &workload.views {
        if resolved.contains_key(&view.name) {
            continue;
        }
        // Depth-first: a frame is a view whose sources are being resolved,
        // with the position of the next source to look at. `open` holds the
        // views on the stack, to detect derivation cycles.
        let mut stack: Vec<(&str, usize)> = vec![(view.name.as_str(), 0)];
        let mut open: HashSet<&str> = HashSet::from([view.name.as_str()]);
        while let Some(frame) = stack.last_mut() {
            let (name, position) = *frame;
            frame.1 += 1;
            let own_sources = sources.get(name).map(Vec::as_slice).unwrap_or(&[]);
            match own_sources.get(position) {
                Some(&source) => {
                    if sources.contains_key(source) && !resolved.contains_key(source) {
                        if !open.insert(source) {
                            return Err(AnalysisError::ViewCycle {
                                view: source.to_string(),
                            });
                        }
                        stack.push((source, 0));
                    }
                }
                None => {
                    stack.pop();
                    open.remove(name);
                    let mut bases = BTreeSet::new();
                    for &source in own_sources {
                        match resolved.get(source) {
                            Some(inner) => bases.extend(inner.iter().cloned()),
                            None => {
                                bases.insert(source.to_string());
                            }
                        }
                    }
                    resolved.insert(name.to_string(), bases);
                }
            }
        }
    }
    Ok(resolved)
}
