//! Helpers shared by the SQL integration tests.
#![allow(dead_code)]

pub mod postgres;

use std::sync::Arc;

use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::views::ViewOptions;
use aqueduct_sql::{Engine, Outcome, Session, SqlError};

/// An engine on a fresh log in `dir` (no fsync: these tests are not about durability).
pub fn engine(dir: &std::path::Path) -> Arc<Engine> {
    engine_with(dir, ViewOptions::default())
}

/// [`engine`] with `options` for the views (partial state, memory limit).
pub fn engine_with(dir: &std::path::Path, options: ViewOptions) -> Arc<Engine> {
    let (log, _) = Log::open(
        dir,
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap();
    Engine::open_with(log, &mut |_| {}, options).unwrap()
}

/// The result of the last statement of `sql`.
pub fn run(s: &mut Session, sql: &str) -> Result<Outcome, SqlError> {
    s.execute(sql).pop().unwrap()
}

/// Like [`run`], failing the test on an error.
pub fn ok(s: &mut Session, sql: &str) -> Outcome {
    run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The rows of `sql` as text, in the order they came.
pub fn rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    match ok(s, sql) {
        Outcome::Rows { rows, .. } => rows
            .into_iter()
            .map(|r| r.iter().map(|v| v.to_string()).collect())
            .collect(),
        other => panic!("{sql}: expected rows, got {other:?}"),
    }
}

/// The rows of `sql` as text, sorted (for comparing bags).
pub fn sorted_rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    let mut out = rows(s, sql);
    out.sort();
    out
}

/// The rows of a prepared statement run with `params`, as text.
pub fn prepared_rows(
    s: &mut Session,
    p: &aqueduct_sql::Prepared,
    params: &[aqueduct_values::Value],
) -> Vec<Vec<String>> {
    match s
        .execute_prepared(p, params)
        .unwrap_or_else(|e| panic!("{}: {e}", p.sql))
    {
        Outcome::Rows { rows, .. } => rows
            .into_iter()
            .map(|r| r.iter().map(|v| v.to_string()).collect())
            .collect(),
        other => panic!("{}: expected rows, got {other:?}", p.sql),
    }
}
