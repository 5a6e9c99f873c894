//! Scalar expressions (bound to column positions and parameters) and the SQL
//! error type. Shared by direct evaluation (`aqueduct-sql`) and by dataflow
//! operators (`aqueduct-dataflow`), so both compute exactly the same values.

pub mod agg;
pub mod array;
mod datetime;
mod error;
pub mod expr;
pub mod interrupt;
pub mod json;
pub mod limits;
pub mod numeric;

pub use error::{static_code, SqlError};
pub use expr::{
    format_typmod, quote_ident, random_uuid, BinOp, Effects, Env, Expr, Func, Lookup, LookupMiss,
    ServerCall, ServerFunction, Subquery, SubqueryKind, SubqueryRunner, UnOp, Volatile,
};
