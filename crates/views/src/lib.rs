//! Maintained views: SQL compiled into dataflow operators ([`compile`]),
//! the registry every commit feeds ([`views`], a commit consumer of the
//! tables), automatic views made from prepared SELECTs whose parameters pin
//! columns ([`auto_views`]), prepared keyed reads of a view ([`view_read`]),
//! views as of a release ([`release_views`]) and one-shot evaluation of a
//! query no view serves ([`oneshot`]).
//!
//! Above the binder (`aqueduct-plan`), below the sessions and the engine
//! (`aqueduct-sql`), which it never reaches up to.
//!
//! This file only declares modules and re-exports: modules import each
//! other by their own paths, never through the crate root, so they form a
//! DAG (`crates/sql/tests/module_cycles.rs`). From the bottom:
//! `table_functions.rs`, `compile.rs`, `recursive.rs`,
//! `oneshot.rs`, `view_entry.rs`, `auto_views.rs`, `views.rs`,
//! `view_read.rs`, `release_views.rs`.

pub mod auto_views;
pub mod compile;
pub mod oneshot;
pub mod recursive;
pub mod release_views;
pub mod table_functions;
pub mod view_entry;
pub mod view_read;
pub mod views;

pub use release_views::MAX_RELEASE_VIEWS;
