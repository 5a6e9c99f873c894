//! The integration tests of `aqueduct-sql` in one binary, so the server
//! is linked once rather than once per file. Each file here is a module; they share `../common`.

#[path = "../common/mod.rs"]
mod common;

mod chain_examples;
mod chains;
mod clock;
mod consistency;
mod constraints_concurrent;
mod copy;
mod ephemeral;
mod equal_keys;
mod interrupts;
mod isolation;
mod isolation_postgres;
mod json_arrays;
mod kept_plans;
mod limits;
mod never_panics;
mod partial;
mod postgres_semantics;
mod quick_reads;
mod roles;
mod routes;
mod savepoints;
mod sessions;
mod view_txn;
mod views;
