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

/// Creates `t (id bigint PRIMARY KEY, a text, b bigint)` holding
/// `(1, 'one', 10)` and `(2, 'two', 20)`.
pub fn create_t(s: &mut Session) {
    ok(
        s,
        "CREATE TABLE t (id bigint PRIMARY KEY, a text, b bigint)",
    );
    ok(s, "INSERT INTO t VALUES (1, 'one', 10), (2, 'two', 20)");
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

/// A clock a test moves by hand.
pub struct HandClock(pub std::sync::atomic::AtomicI64);

impl aqueduct_sql::Clock for HandClock {
    fn now_micros(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// 2024-01-01 00:00:00 UTC.
pub const CLOCK_START: i64 = 1_704_067_200_000_000;
/// An hour of a [`HandClock`].
pub const HOUR: i64 = 3_600_000_000;

/// A session of an engine in `dir` whose clock stands at [`CLOCK_START`]
/// until the test moves it.
pub fn session_with_hand_clock(dir: &std::path::Path) -> (Session, Arc<HandClock>) {
    let e = engine(dir);
    let clock = Arc::new(HandClock(std::sync::atomic::AtomicI64::new(CLOCK_START)));
    e.set_clock(clock.clone());
    (e.session(), clock)
}
