//! Static analysis of transaction chains, after Lynx (Zhang et al.,
//! "Transaction chains: achieving serializability with low latency in
//! geo-distributed storage systems", SOSP 2013).
//!
//! A *chain* is a sequence of *hops*, each a local transaction on one
//! server (§3). Running a chain *piecewise* — one hop after the other, each
//! committed on its own, the caller released after the first — is fast,
//! but lets hops of different chains interleave. This crate decides, from
//! the tables each hop reads and writes alone, which chains may run
//! piecewise and still be serializable as whole transactions, and which
//! must fall back to distributed transactions. It is the analysis behind
//! `CREATE CHAIN` / `EXPLAIN CHAIN`; it parses nothing and does no I/O.
//!
//! # Input
//!
//! A [`Workload`]: the declared [`Chain`]s with their [`Hop`]s (tables
//! read, tables written, an optional "commutes with itself" flag), the
//! maintained [`View`]s hops may read (each with the tables it derives
//! from, possibly other views), and pairwise commutativity annotations
//! between hops ([`HopRef`] pairs). A chain is *updating* if any hop
//! writes. Hops may read views but not write them: views are maintained
//! by the system (§4.2).
//!
//! # The SC-graph (§4.1, §4.2)
//!
//! The analysis applies the theory of transaction chopping (Shasha et al.,
//! TODS 1995) with chains as chopped transactions and hops as pieces:
//!
//! * **Nodes** are hops of chain *instances*. Under
//!   [`InstanceRule::TwoPerUpdatingChain`] (the default, Lynx' rule) every
//!   updating chain appears twice, because two concurrent runs of it may
//!   conflict with each other, and every read-only chain once (§4.1; two
//!   instances suffice, footnote 3). [`InstanceRule::OnePerChain`] gives
//!   the classical chopping setting of Figure 2, where each listed
//!   transaction runs once.
//! * **S-edges** join the hops of one instance. The paper's S-edges join
//!   every pair of pieces of a transaction; this crate joins consecutive
//!   hops only. The verdicts are the same: an S-edge of an instance lies
//!   on a simple cycle with a C-edge exactly when some path outside the
//!   instance joins two distinct hops of it, whichever of the two edge
//!   sets connects the hops; and every cycle reported here, using
//!   consecutive S-edges, is also a cycle of the paper's graph.
//! * **C-edges** join hops of *different* instances (including the two
//!   instances of one chain) that conflict, following the complete
//!   construction of §4.2: both access a common base table and one of
//!   them writes it, or one reads a view and the other writes a base table
//!   the view derives from (transitively, through views over views). Hops
//!   annotated as commuting get no C-edge: a hop marked
//!   [`Hop::commutes_with_self`] has none to the other instance of itself,
//!   and an annotated pair none between any of their instances.
//! * System chains that maintain views are left out of the graph: §4.2
//!   shows that origin ordering serializes them with the chain that
//!   caused them, and accounts for them through condition (2) above.
//!   Linked chains are simply separate chains (§4.2, last paragraph).
//!
//! An *SC-cycle* is "a simple cycle containing a C-edge and an S-edge"
//! (§4.1); an SC-graph without one guarantees serializability of the
//! piecewise execution (§4.1, citing the chopping theory).
//!
//! # The verdict
//!
//! A chain may run piecewise iff **no SC-cycle passes through an S-edge
//! of any of its instances**; otherwise it runs as a distributed
//! transaction ([`Verdict`]). This is how §4.1 reads Figure 3 ("an
//! SC-cycle involving two instances of T_bid, so this chain cannot safely
//! execute piecewise"), while the one-hop chains on the same cycles stay
//! local: a chain with one hop has no S-edge, is never chopped, and is
//! always [`Verdict::Piecewise`]. The criterion is closed: running every
//! flagged chain as one transaction merges its hops into one node, and any
//! SC-cycle left in the merged graph would expand, by re-inserting the
//! S-edges of the merged chains, into an SC-cycle of the original graph
//! through an S-edge of a chain that was not flagged — which cannot exist.
//!
//! # The algorithm
//!
//! Any two edges of one biconnected component (block) of a graph lie on a
//! common simple cycle, and no simple cycle leaves its block. S-edges
//! alone form a forest (a path per instance), so an S-edge lies on an
//! SC-cycle iff its block holds a C-edge too. The analysis therefore
//!
//! 1. builds the graph, comparing only hops that share a base table (an
//!    index from tables to their readers and writers);
//! 2. splits the edges into blocks with the Hopcroft–Tarjan depth-first
//!    search, driven by an explicit stack;
//! 3. flags the chains with an S-edge in a block that also holds a C-edge;
//! 4. for each flagged chain, finds witnesses: for a cyclic S-edge that no
//!    earlier witness passes through, a shortest path between the edge's
//!    ends inside its block that avoids the edge (breadth-first), which
//!    closes into a shortest SC-cycle through it; at most
//!    [`MAX_WITNESS_CYCLES_PER_CHAIN`] of them.
//!
//! Step 1 costs the number of conflicting pairs of hops, which the
//! construction caps through [`MAX_GRAPH_EDGES`]; steps 2–3 are linear in
//! the size of the graph; each witness costs one breadth-first search of a
//! block. No step recurses, so neither long chains nor large graphs can
//! exhaust the thread's stack.
//!
//! # Output
//!
//! [`analyze`] returns a [`Report`]: a [`ChainReport`] per chain (verdict,
//! number of S-edges on SC-cycles, witness [`ScCycle`]s) and the
//! [`ScGraph`]. [`Report::distributed_chains`] lists the chains that must
//! fall back to distributed transactions. [`Report::explain_chain`]
//! renders one chain as text, with cycles written as paths such as
//! `bid#1.hop1 -S- bid#1.hop2 -C- bid#2.hop2 -S- bid#2.hop1 -C- bid#1.hop1`
//! (chain, instance, hop); [`Report::to_dot`] renders the SC-graph in
//! Graphviz DOT.
//!
//! # What the analysis cannot see
//!
//! Conflicts are decided per table, never per row, so some cycles are
//! spurious: §8 reports two (L-Social's friend list read against
//! befriending, L-RUBiS' username registration) that its authors dismissed
//! by reasoning about rows. The analysis reports such cycles; a developer
//! who knows better states it with a commutativity annotation.
//!
//! # Checking recorded histories
//!
//! The crate also holds the serializability checker used as the oracle of
//! chain tests ([`history`]): given the transactions of a recorded run with
//! the versions each read and wrote, it builds the direct serialization
//! graph and returns an equivalent serial order or a dependency cycle.
//!
//! # Origin ordering
//!
//! The crate also holds the core of the origin-ordering sequencers
//! ([`sequencer`]): the pairwise counters of §6.2 that stamp a chain's
//! hops at its origin and hold each hop back at its server until the
//! earlier-stamped hops of the same origin have run there.

mod analysis;
mod error;
mod graph;
pub mod history;
mod model;
mod render;
mod report;
pub mod sequencer;

/// At most this many witness SC-cycles are reported per chain; the count
/// of S-edges on SC-cycles ([`ChainReport::cyclic_s_edges`]) is always
/// complete.
pub const MAX_WITNESS_CYCLES_PER_CHAIN: usize = 3;

/// The largest SC-graph, in nodes (hop instances), the analysis builds.
pub const MAX_GRAPH_NODES: usize = 50_000;

/// The largest SC-graph, in edges, the analysis builds. C-edges grow with
/// the square of the number of hops sharing a table.
pub const MAX_GRAPH_EDGES: usize = 2_000_000;

pub use analysis::analyze;
pub use error::AnalysisError;
pub use graph::{Conflict, ConflictKind, Edge, EdgeId, EdgeKind, Node, NodeId, ScGraph};
pub use model::{Chain, Hop, HopRef, InstanceRule, View, Workload};
pub use report::{ChainReport, Report, ScCycle, Verdict};
