//! SQL statements to plans, and plans executed directly: parse (sqlparser,
//! PostgreSQL dialect) within the limits on size and nesting ([`parse`],
//! [`limits`]), bind against the catalog ([`bind`]: names resolved,
//! parameter types inferred, an access path chosen, or the query marked as
//! needing the dataflow) into the plan types ([`plan`]), the catalog as
//! clients ask for it ([`catalog_queries`]), and [`exec`]: rows read
//! through the transaction so reads are validated at commit, writes
//! buffered and committed as one log batch.
//!
//! The layer under the maintained views (`aqueduct-views`, whose compiler
//! uses the binder) and the sessions (`aqueduct-sql`). It knows nothing of
//! either.
//!
//! This file only declares modules and re-exports: modules import each
//! other by their own paths, never through the crate root, so they form a
//! DAG (`crates/sql/tests/module_cycles.rs`). From the bottom: `plan.rs`
//! and `limits.rs` (leaves), `parse.rs`, `catalog_queries.rs`, `bind.rs`
//! (with `windows.rs`, window functions, part of the binder),
//! `alter.rs`, `alter_sequence.rs` and
//! `enum_types.rs`, `exec.rs`; `ephemeral.rs` (what a statement may do
//! with an ephemeral table) after `bind.rs`; `wire_values.rs` (values in PostgreSQL's
//! text and binary formats) and `copy.rs` (`COPY`'s options and formats)
//! after `parse.rs`.

mod alter;
mod alter_sequence;
pub mod bind;
mod catalog_functions;
pub mod catalog_queries;
mod constraints;
pub mod copy;
mod effects;
mod enum_types;
pub mod ephemeral;
pub mod exec;
pub mod limits;
pub mod parse;
pub mod pg_catalog;
pub mod plan;
pub mod publications;
mod rows;
mod session_functions;
pub mod subqueries;
mod windows;
pub mod wire_values;

pub use parse::param_from_text;
pub use plan::{Column, Outcome};
