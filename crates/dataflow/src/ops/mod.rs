//! The operators, one per file.

mod filter;
mod project;

pub use filter::Filter;
pub use project::Project;

#[cfg(test)]
pub(crate) mod testing;
