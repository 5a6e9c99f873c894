//! SQL sessions over the base tables: parse (sqlparser, PostgreSQL dialect),
//! bind against the catalog, route, execute. Front ends (PostgreSQL wire,
//! HTTP) hold one [`Session`] per connection and call it from a blocking
//! thread.
//!
//! The flow of a statement: `parse` → [`bind`] (names resolved, parameter
//! types inferred, an access path chosen, or the query marked as needing
//! the dataflow) → the session's route (`session/route.rs`, decided once)
//! → [`exec`] (rows read through the transaction so reads are validated at
//! commit; writes buffered, then committed as one log batch), a maintained
//! or automatic view ([`views`]), or one-shot evaluation.
//!
//! Parsing, binding and direct execution live in `aqueduct-plan`, the
//! maintained views and one-shot evaluation in `aqueduct-views`; this crate
//! adds the engine shared by all sessions, roles, time maps, consistency
//! levels and the sessions themselves, and re-exports what its users need
//! of the two crates below.
//!
//! This file only declares modules and re-exports: modules import each
//! other by their own paths, never through the crate root, so they form a
//! DAG (`tests/module_cycles.rs`).

pub mod backends;
pub mod chains;
mod consistency;
mod engine;
pub mod forward;
mod roles;
mod session;
mod time_maps;
mod txn_status;

pub use aqueduct_expr::{expr, SqlError};
pub use aqueduct_plan::limits::{MAX_INSERT_ROWS, MAX_PARAMS, MAX_SQL_BYTES};
pub use aqueduct_plan::param_from_text;
pub use aqueduct_plan::{bind, copy, exec, limits, pg_catalog, wire_values};
pub use aqueduct_plan::{Column, Outcome};
pub use aqueduct_releases as releases;
pub use aqueduct_views::{views, MAX_RELEASE_VIEWS};
pub use consistency::{CommitSource, Consistency, MAX_RELEASE_RESULTS};
pub use engine::{Clock, Engine, EngineMetrics, SystemClock};
pub use roles::{Principal, DEFAULT_PRINCIPAL, MAX_VIEW_DEPTH};
pub use session::{parse_duration, ForwardedBlocks, Prepared, Session};
pub use txn_status::TxnStatus;
