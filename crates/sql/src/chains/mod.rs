//! Transaction chains in SQL (`docs/chains.md`): declared with `CREATE
//! CHAIN`, analysed with Lynx's SC-graph (`aqueduct_chains::analyze`),
//! run with `CALL`.
//!
//! - `declare.rs`: the statements the SQL parser does not know, parsed
//!   once into typed declarations;
//! - `analysis.rs`: every declared chain analysed together, the verdict
//!   per chain (piecewise or distributed);
//! - `hop.rs`: one hop as one transaction, with its progress row and its
//!   server's sequencer state;
//! - `runtime.rs`: the logical servers that run hops, their sequencers,
//!   the messages between them and the distributed-transaction fallback;
//! - `placement.rs`: which node runs which logical server;
//! - `wire.rs`: hops between nodes over TCP;
//! - `shards.rs`: a hop touches a sharded table only in its own shard,
//!   checked at declaration;
//! - `latency.rs`: simulated datacenters between the logical servers, for
//!   tests and benchmarks;
//! - `state.rs`: the engine's part, the analysis kept by schema version
//!   and the runtime, started on first use or at start when chains are in
//!   flight.
//!
//! Nothing here knows the engine or the session: the runtime runs hops
//! through [`runtime::HopSession`], which the session implements
//! (`session/chains.rs`).

pub mod analysis;
pub mod declare;
pub mod hop;
pub mod latency;
pub mod placement;
pub mod runtime;
pub mod shards;
pub mod state;
pub mod wire;
