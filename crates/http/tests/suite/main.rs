//! The integration tests of `aqueduct-http` in one binary, so the server
//! is linked once rather than once per file. Each file here is a module; they share `../common`.

#[path = "../common/mod.rs"]
mod common;

mod changes;
mod http_api;
mod limits;
mod roles;
mod tls;
