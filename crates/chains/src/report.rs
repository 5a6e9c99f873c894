//! The result of the analysis: per-chain verdicts with witness cycles,
//! and the SC-graph they were read from.

use crate::graph::{EdgeId, EdgeKind, NodeId, ScGraph};
use crate::model::Hop;

/// How a chain must be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Hop by hop, each hop a local transaction, returning after the first
    /// hop if the caller wishes: no SC-cycle passes through an S-edge of
    /// the chain (or it has a single hop and no S-edge at all).
    Piecewise,
    /// As one distributed transaction: some SC-cycle passes through an
    /// S-edge of the chain, so a piecewise run could interleave with other
    /// chains into a non-serializable execution (§4).
    Distributed,
}

/// A simple cycle of the SC-graph, closed: `edges[i]` joins `nodes[i]`
/// and `nodes[(i + 1) % nodes.len()]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScCycle {
    /// The nodes in cycle order; no node repeats.
    pub nodes: Vec<NodeId>,
    /// The edges in cycle order, as many as nodes.
    pub edges: Vec<EdgeId>,
}

impl ScCycle {
    /// Number of edges (equal to the number of nodes).
    pub fn len(&self) -> usize {
        self.edges.len()
    }

    /// Whether the cycle has no edges (never the case for a witness).
    pub fn is_empty(&self) -> bool {
        self.edges.is_empty()
    }

    /// How many of the cycle's edges are of `kind`.
    pub fn count(&self, graph: &ScGraph, kind: EdgeKind) -> usize {
        self.edges
            .iter()
            .filter_map(|edge| graph.edge(*edge))
            .filter(|edge| edge.kind == kind)
            .count()
    }
}

/// The analysis of one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// The chain's name.
    pub name: String,
    /// Its hops as declared.
    pub hops: Vec<Hop>,
    /// Whether some hop writes.
    pub updating: bool,
    /// How many instances of the chain the SC-graph holds (1 or 2).
    pub instances: usize,
    /// The chain's first node in the SC-graph (instance 1, first hop); the
    /// other nodes of the chain follow it, instance by instance.
    pub first_node: NodeId,
    /// Piecewise or distributed.
    pub verdict: Verdict,
    /// How many S-edges of the chain, over all its instances, lie on some
    /// SC-cycle; zero iff the verdict is [`Verdict::Piecewise`].
    pub cyclic_s_edges: usize,
    /// Up to [`crate::MAX_WITNESS_CYCLES_PER_CHAIN`] SC-cycles, each a
    /// shortest one through an S-edge of this chain that no earlier witness
    /// passes through, starting at that edge's earlier hop; empty iff the
    /// verdict is [`Verdict::Piecewise`].
    pub witnesses: Vec<ScCycle>,
}

impl ChainReport {
    /// Whether the chain may run piecewise.
    pub fn is_piecewise(&self) -> bool {
        self.verdict == Verdict::Piecewise
    }
}

/// The analysis of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// One entry per chain, in declaration order.
    pub chains: Vec<ChainReport>,
    /// The SC-graph the verdicts were read from.
    pub graph: ScGraph,
}

impl Report {
    /// The report of the chain with this name.
    pub fn chain(&self, name: &str) -> Option<&ChainReport> {
        self.chains.iter().find(|chain| chain.name == name)
    }

    /// Whether the named chain may run piecewise; `None` for an unknown
    /// chain.
    pub fn is_piecewise(&self, name: &str) -> Option<bool> {
        self.chain(name).map(ChainReport::is_piecewise)
    }

    /// The chains that must fall back to distributed transactions, in
    /// declaration order.
    pub fn distributed_chains(&self) -> impl Iterator<Item = &ChainReport> + '_ {
        self.chains
            .iter()
            .filter(|chain| chain.verdict == Verdict::Distributed)
    }

    /// The chains that may run piecewise, in declaration order.
    pub fn piecewise_chains(&self) -> impl Iterator<Item = &ChainReport> + '_ {
        self.chains.iter().filter(|chain| chain.is_piecewise())
    }

    /// The label of a node, e.g. `bid#2.hop1`.
    pub fn node_label(&self, node: NodeId) -> &str {
        self.graph
            .node(node)
            .map(|node| node.label.as_str())
            .unwrap_or("?")
    }

    /// A cycle as a readable path that returns to its first node, e.g.
    /// `bid#1.hop1 -S- bid#1.hop2 -C- bid#2.hop2 -S- bid#2.hop1 -C- bid#1.hop1`.
    pub fn cycle_path(&self, cycle: &ScCycle) -> String {
        let mut path = String::new();
        for (position, node) in cycle.nodes.iter().enumerate() {
            if position > 0 {
                path.push(' ');
            }
            path.push_str(self.node_label(*node));
            let kind = cycle
                .edges
                .get(position)
                .and_then(|edge| self.graph.edge(*edge))
                .map(|edge| edge.kind);
            path.push_str(match kind {
                Some(EdgeKind::S) => " -S-",
                Some(EdgeKind::C) => " -C-",
                None => " -?-",
            });
        }
        if let Some(first) = cycle.nodes.first() {
            path.push(' ');
            path.push_str(self.node_label(*first));
        }
        path
    }
}
