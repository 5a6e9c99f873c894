//! The integration tests of `aqueduct-pg` in one binary, so the server
//! is linked once rather than once per file. Each file here is a module; they share `../common`.

#[path = "../common/mod.rs"]
mod common;

mod auth_tls;
mod garbage;
mod limits;
mod queries;
mod roles;
