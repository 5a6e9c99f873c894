//! The integration tests of `aqueduct` (the server binary) in one binary, so the server
//! is linked once rather than once per file. Each file here is a module; they share `../common`.

#[path = "../common/mod.rs"]
mod common;

mod chains_crash;
mod chains_nodes;
mod cluster;
mod copy;
mod decorators;
mod follow;
mod mirror;
mod schema_restart;
mod sequences_crash;
mod serve_limits;
mod serve_security;
mod subscribe;
mod wal_cli;
mod wal_follow;
