//! SC-cycle detection: biconnected components of the SC-graph, the
//! per-chain verdict, and witness cycles. Every traversal keeps its own
//! stack or queue on the heap, so deep graphs cannot overflow the thread's
//! stack.

use std::collections::{HashSet, VecDeque};

use crate::error::AnalysisError;
use crate::graph::{self, EdgeId, EdgeKind, NodeId, ScGraph};
use crate::model::Workload;
use crate::report::{ChainReport, Report, ScCycle, Verdict};
use crate::MAX_WITNESS_CYCLES_PER_CHAIN;

/// Builds the SC-graph of `workload` and decides, for every chain, whether
/// it may run piecewise (see the crate documentation for the criterion).
pub fn analyze(workload: &Workload) -> Result<Report, AnalysisError> {
    let built = graph::build(workload)?;
    let graph = built.graph;
    let adjacency = graph.adjacency();
    let blocks = edge_blocks(&graph, &adjacency);

    // A block is cyclic in the SC sense iff it holds both kinds of edges.
    // (A block of two or more edges is 2-connected, so any two of its edges
    // lie on a common simple cycle.)
    let mut has_s = vec![false; blocks.count];
    let mut has_c = vec![false; blocks.count];
    for (index, edge) in graph.edges.iter().enumerate() {
        let block = blocks.of_edge[index];
        match edge.kind {
            EdgeKind::S => has_s[block] = true,
            EdgeKind::C => has_c[block] = true,
        }
    }

    // S-edges of each chain (they join nodes of one chain).
    let mut s_edges: Vec<Vec<EdgeId>> = vec![Vec::new(); workload.chains.len()];
    for (index, edge) in graph.edges.iter().enumerate() {
        if edge.kind == EdgeKind::S {
            s_edges[graph.nodes[edge.a.0].chain].push(EdgeId(index));
        }
    }

    let mut search = PathSearch::new(graph.nodes.len());
    let mut chains = Vec::with_capacity(workload.chains.len());
    for (position, chain) in workload.chains.iter().enumerate() {
        let cyclic: Vec<EdgeId> = s_edges[position]
            .iter()
            .copied()
            .filter(|edge| {
                let block = blocks.of_edge[edge.0];
                has_s[block] && has_c[block]
            })
            .collect();
        // Each witness explains a cyclic S-edge no earlier witness passes
        // through, so every search yields a new cycle and at most
        // MAX_WITNESS_CYCLES_PER_CHAIN searches run per chain.
        let mut witnesses: Vec<ScCycle> = Vec::new();
        let mut covered: HashSet<EdgeId> = HashSet::new();
        for &edge in &cyclic {
            if witnesses.len() >= MAX_WITNESS_CYCLES_PER_CHAIN {
                break;
            }
            if covered.contains(&edge) {
                continue;
            }
            if let Some(cycle) = search.cycle_through(&graph, &adjacency, &blocks.of_edge, edge) {
                covered.extend(cycle.edges.iter().copied());
                witnesses.push(cycle);
            }
        }
        chains.push(ChainReport {
            name: chain.name.clone(),
            hops: chain.hops.clone(),
            updating: chain.is_updating(),
            instances: built.instances[position],
            first_node: NodeId(built.first_node[position]),
            verdict: if cyclic.is_empty() {
                Verdict::Piecewise
            } else {
                Verdict::Distributed
            },
            cyclic_s_edges: cyclic.len(),
            witnesses,
        });
    }

    Ok(Report { chains, graph })
}

/// The biconnected component ("block") of every edge.
pub(crate) struct Blocks {
    /// Block number of each edge, indexed like [`ScGraph::edges`].
    pub of_edge: Vec<usize>,
    /// Number of blocks.
    pub count: usize,
}

/// Splits the edges into biconnected components with the Hopcroft–Tarjan
/// depth-first search, run on an explicit stack: discovery times, low
/// points, and a stack of edges that is cut into a block whenever a child's
/// low point does not reach above its parent.
pub(crate) fn edge_blocks(graph: &ScGraph, adjacency: &[Vec<(NodeId, EdgeId)>]) -> Blocks {
    const UNVISITED: usize = usize::MAX;
    struct Frame {
        node: usize,
        parent_edge: Option<EdgeId>,
        next: usize,
    }

    let nodes = graph.nodes.len();
    let mut discovered = vec![UNVISITED; nodes];
    let mut low = vec![0usize; nodes];
    let mut of_edge = vec![UNVISITED; graph.edges.len()];
    let mut count = 0usize;
    let mut clock = 0usize;
    let mut frames: Vec<Frame> = Vec::new();
    let mut edge_stack: Vec<EdgeId> = Vec::new();

    for root in 0..nodes {
        if discovered[root] != UNVISITED {
            continue;
        }
        discovered[root] = clock;
        low[root] = clock;
        clock += 1;
        frames.push(Frame {
            node: root,
            parent_edge: None,
            next: 0,
        });
        while let Some(frame) = frames.last_mut() {
            let v = frame.node;
            if let Some(&(w, edge)) = adjacency[v].get(frame.next) {
                frame.next += 1;
                if Some(edge) == frame.parent_edge {
                    continue;
                }
                let w = w.0;
                if discovered[w] == UNVISITED {
                    edge_stack.push(edge);
                    discovered[w] = clock;
                    low[w] = clock;
                    clock += 1;
                    frames.push(Frame {
                        node: w,
                        parent_edge: Some(edge),
                        next: 0,
                    });
                } else if discovered[w] < discovered[v] {
                    // A back edge to an ancestor. (Seen from the ancestor,
                    // the same edge has `discovered[w] > discovered[v]` and
                    // was already pushed.)
                    low[v] = low[v].min(discovered[w]);
                    edge_stack.push(edge);
                }
                continue;
            }
            // All neighbours of `v` are done: return to the parent.
            let parent_edge = frame.parent_edge;
            frames.pop();
            if let (Some(parent), Some(tree_edge)) = (frames.last(), parent_edge) {
                let u = parent.node;
                low[u] = low[u].min(low[v]);
                if low[v] >= discovered[u] {
                    // `u` separates the subtree of `v`: the edges pushed
                    // since `tree_edge` form one block.
                    while let Some(edge) = edge_stack.pop() {
                        of_edge[edge.0] = count;
                        if edge == tree_edge {
                            break;
                        }
                    }
                    count += 1;
                }
            }
        }
    }
    // Every edge is a tree edge or a back edge, so every edge got a block;
    // keep the invariant total anyway.
    for block in of_edge.iter_mut().filter(|block| **block == UNVISITED) {
        *block = count;
        count += 1;
    }
    Blocks { of_edge, count }
}

/// Breadth-first searches for witness cycles, reusing one visited array
/// across searches (stamped with a search number instead of cleared).
struct PathSearch {
    stamp: Vec<u32>,
    current: u32,
    came_from: Vec<(NodeId, EdgeId)>,
    queue: VecDeque<NodeId>,
}

impl PathSearch {
    fn new(nodes: usize) -> PathSearch {
        PathSearch {
            stamp: vec![0; nodes],
            current: 0,
            came_from: vec![(NodeId(0), EdgeId(0)); nodes],
            queue: VecDeque::new(),
        }
    }

    /// A shortest simple cycle through `through`: the edge itself closed by
    /// a shortest path between its ends that stays inside its block and
    /// does not use it. Starts at the edge's first end. For an S-edge in a
    /// block that also holds C-edges the cycle is an SC-cycle: S-edges
    /// alone form a forest (paths within instances), so the closing path
    /// must cross a C-edge.
    fn cycle_through(
        &mut self,
        graph: &ScGraph,
        adjacency: &[Vec<(NodeId, EdgeId)>],
        of_edge: &[usize],
        through: EdgeId,
    ) -> Option<ScCycle> {
        let edge = graph.edge(through)?;
        let block = of_edge[through.0];
        let (start, target) = (edge.b, edge.a);

        if self.current == u32::MAX {
            self.stamp.iter_mut().for_each(|stamp| *stamp = 0);
            self.current = 0;
        }
        self.current += 1;
        self.queue.clear();
        self.stamp[start.0] = self.current;
        self.queue.push_back(start);
        let mut found = false;
        while let Some(node) = self.queue.pop_front() {
            if node == target {
                found = true;
                break;
            }
            for &(next, via) in &adjacency[node.0] {
                if via == through || of_edge[via.0] != block || self.stamp[next.0] == self.current {
                    continue;
                }
                self.stamp[next.0] = self.current;
                self.came_from[next.0] = (node, via);
                self.queue.push_back(next);
            }
        }
        if !found {
            return None;
        }

        // The path found is start = y0 -f1- y1 -f2- ... -fm- ym = target.
        // Walk it backwards from the target, then turn it around to get
        // the cycle target -through- start -f1- y1 ... y(m-1) -fm- target.
        let mut inner_nodes = Vec::new();
        let mut path_edges = Vec::new();
        let mut node = target;
        while node != start {
            let (previous, via) = self.came_from[node.0];
            path_edges.push(via);
            if previous != start {
                inner_nodes.push(previous);
            }
            node = previous;
        }
        let mut cycle_nodes = vec![target, start];
        cycle_nodes.extend(inner_nodes.into_iter().rev());
        let mut cycle_edges = vec![through];
        cycle_edges.extend(path_edges.into_iter().rev());
        Some(ScCycle {
            nodes: cycle_nodes,
            edges: cycle_edges,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Edge, Node};

    fn graph(nodes: usize, edges: &[(usize, usize, EdgeKind)]) -> ScGraph {
        ScGraph {
            nodes: (0..nodes)
                .map(|index| Node {
                    chain: 0,
                    instance: 1,
                    hop: index,
                    label: format!("n{index}"),
                })
                .collect(),
            edges: edges
                .iter()
                .map(|&(a, b, kind)| Edge {
                    a: NodeId(a),
                    b: NodeId(b),
                    kind,
                    conflicts: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn blocks_split_at_cut_vertices_and_bridges() {
        use EdgeKind::{C, S};
        // Triangle 0-1-2, bridge 2-3, triangle 3-4-5 sharing nothing else,
        // and an isolated edge 6-7.
        let graph = graph(
            8,
            &[
                (0, 1, S),
                (1, 2, C),
                (2, 0, C),
                (2, 3, S),
                (3, 4, C),
                (4, 5, S),
                (5, 3, C),
                (6, 7, S),
            ],
        );
        let blocks = edge_blocks(&graph, &graph.adjacency());
        let of = &blocks.of_edge;
        assert_eq!(blocks.count, 4);
        assert!(of[0] == of[1] && of[1] == of[2]);
        assert!(of[4] == of[5] && of[5] == of[6]);
        let distinct: HashSet<usize> = [of[0], of[3], of[4], of[7]].into_iter().collect();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn witness_is_a_shortest_cycle_through_the_edge() {
        use EdgeKind::{C, S};
        // A square 0-1-2-3 with a chord 1-3: the shortest cycle through
        // 0-1 uses the chord.
        let graph = graph(4, &[(0, 1, S), (1, 2, C), (2, 3, C), (3, 0, C), (1, 3, C)]);
        let adjacency = graph.adjacency();
        let blocks = edge_blocks(&graph, &adjacency);
        assert_eq!(blocks.count, 1);
        let mut search = PathSearch::new(graph.nodes.len());
        let cycle = search
            .cycle_through(&graph, &adjacency, &blocks.of_edge, EdgeId(0))
            .unwrap();
        assert_eq!(cycle.nodes, [NodeId(0), NodeId(1), NodeId(3)]);
        assert_eq!(cycle.edges, [EdgeId(0), EdgeId(4), EdgeId(3)]);
    }
}
