//! A client session: everything `impl Session` does, one part per file.
//!
//! - `state.rs`: the session's state, settings (`SET`, `SHOW`) and the
//!   frame every statement runs in (stack, interrupt handle, clock);
//! - `route.rs`: **which path answers a statement** — the [`Route`]
//!   decided once per statement, and `EXPLAIN`, which prints it;
//! - `run.rs`: running a query string, and each statement by its route;
//! - `prepare.rs`: the extended protocol (prepare once, execute often);
//! - `view_rows.rs`: reads of maintained views as tables, keyed reads;
//! - `consumers.rs`: `SHOW CONSUMERS`, the change feed's durable consumers;
//! - `dataflow.rs`: automatic views and one-shot evaluation;
//! - `consistency.rs`: waiting for the views, reads as of a release;
//! - `txn_view_reads.rs`: reads of views inside a transaction block;
//! - `copy.rs`: `COPY ... FROM STDIN` fed chunk by chunk, `COPY ... TO
//!   STDOUT`;
//! - `roles.rs`: the principal, privilege checks, role statements;
//! - `custom.rs`: statements the SQL parser does not know, recognised
//!   once by their first words;
//! - `time_maps.rs`: `CREATE TIME MAP` and its kin;
//! - `publications.rs`: `CREATE`, `ALTER` and `DROP PUBLICATION`;
//! - `cluster.rs`: `ALTER CLUSTER` and `SHOW CLUSTER`, a Raft group's
//!   membership in SQL;
//! - `chains.rs`: `CREATE`, `DROP` and `EXPLAIN CHAIN`, `CALL` of a
//!   chain, `WAIT FOR CHAINS`;
//! - `forward.rs`: on a member of a Raft group that does not lead, the
//!   writes that run on the leader; `forwarded.rs`: the leader's side.
//!
//! [`Route`]: route::Route

mod chains;
mod cluster;
mod consistency;
mod consumers;
mod copy;
mod custom;
mod dataflow;
mod forward;
mod forwarded;
mod join_locking;
mod prepare;
mod publications;
mod roles;
mod route;
mod run;
mod state;
mod time_maps;
mod txn_view_reads;
mod view_rows;

pub use forwarded::ForwardedBlocks;
pub use prepare::Prepared;
pub use state::{parse_duration, Session};
