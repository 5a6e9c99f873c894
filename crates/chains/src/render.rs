//! Renderings of a [`Report`]: text for `EXPLAIN CHAIN`, and the SC-graph
//! in Graphviz DOT.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::graph::{Conflict, ConflictKind, Edge, EdgeId, EdgeKind, NodeId};
use crate::report::{ChainReport, Report, Verdict};

impl Report {
    /// The explanation of one chain, for `EXPLAIN CHAIN name`: its hops,
    /// its verdict and, if it must run as a distributed transaction, the
    /// witness SC-cycles with the conflicts behind each C-edge. `None` for
    /// an unknown chain.
    pub fn explain_chain(&self, name: &str) -> Option<String> {
        self.chain(name).map(|chain| self.explain_one(chain))
    }

    /// The explanation of every chain, one after another.
    pub fn explain(&self) -> String {
        let mut text = String::new();
        for (position, chain) in self.chains.iter().enumerate() {
            if position > 0 {
                text.push('\n');
            }
            text.push_str(&self.explain_one(chain));
        }
        text
    }

    fn explain_one(&self, chain: &ChainReport) -> String {
        let mut text = String::new();
        let hops = chain.hops.len();
        let _ = writeln!(
            text,
            "chain {}: {} hop{}, {}, {} instance{} in the SC-graph",
            chain.name,
            hops,
            plural(hops),
            if chain.updating {
                "updating"
            } else {
                "read-only"
            },
            chain.instances,
            plural(chain.instances),
        );
        for (position, hop) in chain.hops.iter().enumerate() {
            let mut parts = Vec::new();
            if !hop.reads.is_empty() {
                parts.push(format!("reads {}", join(hop.reads.iter())));
            }
            if !hop.writes.is_empty() {
                parts.push(format!("writes {}", join(hop.writes.iter())));
            }
            if parts.is_empty() {
                parts.push("accesses nothing".to_string());
            }
            if hop.commutes_with_self {
                parts.push("commutes with itself".to_string());
            }
            let _ = writeln!(
                text,
                "  {}. {}: {}",
                position + 1,
                hop.label(position),
                parts.join("; ")
            );
        }
        match chain.verdict {
            Verdict::Piecewise if hops <= 1 => {
                text.push_str("verdict: piecewise (a single hop has no S-edge)\n");
            }
            Verdict::Piecewise => {
                text.push_str("verdict: piecewise (no SC-cycle passes through its S-edges)\n");
            }
            Verdict::Distributed => {
                let total = (hops - 1) * chain.instances;
                let _ = writeln!(
                    text,
                    "verdict: distributed transaction ({} of its {} S-edge{} lie on SC-cycles)",
                    chain.cyclic_s_edges,
                    total,
                    plural(total),
                );
                let _ = writeln!(text, "SC-cycles ({} shown):", chain.witnesses.len());
                for (number, cycle) in chain.witnesses.iter().enumerate() {
                    let _ = writeln!(text, "  {}. {}", number + 1, self.cycle_path(cycle));
                    // The conflicts behind each C-edge, in cycle order.
                    for (position, edge_id) in cycle.edges.iter().enumerate() {
                        let Some(edge) = self.graph.edge(*edge_id) else {
                            continue;
                        };
                        if edge.kind != EdgeKind::C {
                            continue;
                        }
                        let next = (position + 1) % cycle.nodes.len().max(1);
                        let (Some(&from), Some(&to)) =
                            (cycle.nodes.get(position), cycle.nodes.get(next))
                        else {
                            continue;
                        };
                        let reasons: Vec<String> =
                            edge.conflicts.iter().map(describe_conflict).collect();
                        let _ = writeln!(
                            text,
                            "     {} -C- {}: {}",
                            self.node_label(from),
                            self.node_label(to),
                            reasons.join("; ")
                        );
                    }
                }
            }
        }
        text
    }

    /// The whole SC-graph in Graphviz DOT: one cluster per chain instance,
    /// S-edges solid, C-edges dashed and labelled with the tables they
    /// conflict on, and the edges and nodes of every witness cycle in red.
    pub fn to_dot(&self) -> String {
        self.dot_with(self.chains.iter().collect())
    }

    /// Like [`Report::to_dot`], but highlights only the witness cycles of
    /// the named chain. `None` for an unknown chain.
    pub fn to_dot_for_chain(&self, name: &str) -> Option<String> {
        self.chain(name).map(|chain| self.dot_with(vec![chain]))
    }

    fn dot_with(&self, highlighted: Vec<&ChainReport>) -> String {
        let mut red_edges: HashSet<EdgeId> = HashSet::new();
        let mut red_nodes: HashSet<NodeId> = HashSet::new();
        for chain in highlighted {
            for cycle in &chain.witnesses {
                red_edges.extend(cycle.edges.iter().copied());
                red_nodes.extend(cycle.nodes.iter().copied());
            }
        }

        let mut dot = String::new();
        dot.push_str("graph sc_graph {\n");
        dot.push_str("  node [shape=box];\n");
        let mut cluster = 0usize;
        let mut position = 0usize;
        let nodes = &self.graph.nodes;
        while position < nodes.len() {
            let (chain, instance) = (nodes[position].chain, nodes[position].instance);
            let name = self
                .chains
                .get(chain)
                .map(|report| report.name.as_str())
                .unwrap_or("?");
            let _ = writeln!(dot, "  subgraph cluster_{cluster} {{");
            let _ = writeln!(
                dot,
                "    label=\"{}\";",
                escape(&format!("{name}#{instance}"))
            );
            while position < nodes.len()
                && nodes[position].chain == chain
                && nodes[position].instance == instance
            {
                let node = &nodes[position];
                let colour = if red_nodes.contains(&NodeId(position)) {
                    ", color=red"
                } else {
                    ""
                };
                let _ = writeln!(
                    dot,
                    "    n{position} [label=\"{}\"{colour}];",
                    escape(&node.label)
                );
                position += 1;
            }
            dot.push_str("  }\n");
            cluster += 1;
        }
        for (index, edge) in self.graph.edges.iter().enumerate() {
            let mut attributes = vec![match edge.kind {
                EdgeKind::S => "style=solid".to_string(),
                EdgeKind::C => "style=dashed".to_string(),
            }];
            if edge.kind == EdgeKind::C {
                attributes.push(format!("label=\"{}\"", escape(&conflict_tables(edge))));
            }
            if red_edges.contains(&EdgeId(index)) {
                attributes.push("color=red".to_string());
                attributes.push("penwidth=2".to_string());
            }
            let _ = writeln!(
                dot,
                "  n{} -- n{} [{}];",
                edge.a.0,
                edge.b.0,
                attributes.join(", ")
            );
        }
        dot.push_str("}\n");
        dot
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

fn join<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(String::as_str).collect::<Vec<_>>().join(", ")
}

fn describe_conflict(conflict: &Conflict) -> String {
    match &conflict.kind {
        ConflictKind::WriteWrite => format!("both write {}", conflict.table),
        ConflictKind::ReadWrite => format!("{} read by one, written by the other", conflict.table),
        ConflictKind::ViewRead { view } => format!(
            "view {view} read by one, its base table {} written by the other",
            conflict.table
        ),
    }
}

/// The distinct tables a C-edge conflicts on, for its DOT label.
fn conflict_tables(edge: &Edge) -> String {
    let mut tables: Vec<&str> = edge
        .conflicts
        .iter()
        .map(|conflict| conflict.table.as_str())
        .collect();
    tables.dedup();
    tables.join(", ")
}

/// Escapes text for a double-quoted DOT string.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            '\n' => escaped.push_str("\\n"),
            '\r' => {}
            other => escaped.push(other),
        }
    }
    escaped
}
