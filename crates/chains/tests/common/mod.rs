//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::collections::HashSet;

use aqueduct_chains::{ChainReport, EdgeKind, Report, ScCycle, Verdict};

/// Checks that `cycle` is a simple cycle of the report's graph with at
/// least one S-edge and one C-edge, that consecutive nodes are joined by
/// the listed edges, and that it passes through an S-edge of `chain`.
pub fn assert_sc_cycle(report: &Report, chain: &ChainReport, cycle: &ScCycle) {
    assert!(cycle.len() >= 3, "a simple cycle has at least 3 edges");
    assert_eq!(cycle.nodes.len(), cycle.edges.len());
    let distinct: HashSet<_> = cycle.nodes.iter().collect();
    assert_eq!(distinct.len(), cycle.nodes.len(), "a node repeats");
    let distinct_edges: HashSet<_> = cycle.edges.iter().collect();
    assert_eq!(distinct_edges.len(), cycle.edges.len(), "an edge repeats");
    for (position, edge_id) in cycle.edges.iter().enumerate() {
        let edge = report.graph.edge(*edge_id).expect("edge exists");
        let from = cycle.nodes[position];
        let to = cycle.nodes[(position + 1) % cycle.nodes.len()];
        assert!(
            (edge.a == from && edge.b == to) || (edge.a == to && edge.b == from),
            "edge {position} does not join consecutive nodes"
        );
    }
    assert!(cycle.count(&report.graph, EdgeKind::S) >= 1, "no S-edge");
    assert!(cycle.count(&report.graph, EdgeKind::C) >= 1, "no C-edge");
    let chain_index = report
        .chains
        .iter()
        .position(|candidate| candidate.name == chain.name)
        .expect("chain in report");
    let through_own_s_edge = cycle.edges.iter().any(|edge_id| {
        let edge = &report.graph.edges[edge_id.index()];
        edge.kind == EdgeKind::S && report.graph.nodes[edge.a.index()].chain == chain_index
    });
    assert!(through_own_s_edge, "witness misses the chain's S-edges");
}

/// Checks the report's internal consistency: verdicts agree with the
/// cyclic S-edge counts and every witness is a valid SC-cycle.
pub fn assert_consistent(report: &Report) {
    for chain in &report.chains {
        match chain.verdict {
            Verdict::Piecewise => {
                assert_eq!(chain.cyclic_s_edges, 0, "{}", chain.name);
                assert!(chain.witnesses.is_empty(), "{}", chain.name);
            }
            Verdict::Distributed => {
                assert!(chain.cyclic_s_edges > 0, "{}", chain.name);
                assert!(!chain.witnesses.is_empty(), "{}", chain.name);
                assert!(chain.witnesses.len() <= aqueduct_chains::MAX_WITNESS_CYCLES_PER_CHAIN);
            }
        }
        for cycle in &chain.witnesses {
            assert_sc_cycle(report, chain, cycle);
        }
    }
}

/// The names of the chains that must run as distributed transactions.
pub fn distributed(report: &Report) -> Vec<&str> {
    report
        .distributed_chains()
        .map(|chain| chain.name.as_str())
        .collect()
}

/// The witness cycles of a chain as paths.
pub fn witness_paths(report: &Report, chain: &str) -> Vec<String> {
    report
        .chain(chain)
        .expect("chain in report")
        .witnesses
        .iter()
        .map(|cycle| report.cycle_path(cycle))
        .collect()
}

/// The chain names of a cycle's nodes.
pub fn chains_on_cycle<'a>(report: &'a Report, cycle: &ScCycle) -> Vec<&'a str> {
    cycle
        .nodes
        .iter()
        .map(|node| {
            report.chains[report.graph.nodes[node.index()].chain]
                .name
                .as_str()
        })
        .collect()
}

/// A small deterministic generator (xorshift64*), so tests need no crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..bound` (bound > 0).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True once in `n` draws, on average.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}
