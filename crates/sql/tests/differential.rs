//! Differential test: random schemas, rows, queries and write batches, run
//! on Aqueduct and on SQLite (rusqlite, bundled); after every batch each
//! query's answer from Aqueduct must equal SQLite's from scratch, as a
//! multiset.
//!
//! Three suites:
//! - `direct_queries_match_sqlite` runs each query directly (the direct
//!   evaluator: one table, WHERE, GROUP BY, aggregates, HAVING, DISTINCT,
//!   ORDER BY, LIMIT/OFFSET);
//! - `dataflow_queries_match_sqlite` runs queries with joins, subqueries,
//!   WITH and UNION as plain statements: automatic views answer those with
//!   a `column = literal`, one-shot evaluation through a temporary dataflow
//!   the others;
//! - `views_match_sqlite` creates `CREATE [MATERIALIZED] VIEW v<i> AS
//!   <query>` once, before or after the initial rows, and compares
//!   `SELECT * FROM v<i>` (and lookups `... WHERE o<k> = value`) after every
//!   batch, with the features in [`view_features`].
//!
//! Before a batch, with some chance, come schema changes, each committed
//! on its own: `ALTER TABLE t ADD COLUMN extra<n> <type> [NOT NULL]
//! [DEFAULT <constant>]`, `DROP COLUMN` of such a column (no query names
//! one), `ALTER COLUMN <column> SET/DROP DEFAULT` (Aqueduct only: SQLite's
//! inserts give the default's value where Aqueduct's leave the column out)
//! and `CREATE INDEX`. Every answer is compared right after them (views over
//! a changed table are made anew) and later writes fill the new columns,
//! by value or by default.
//!
//! All suites also prepare each (non-UNION) query with `AND <column> = $1` added
//! to its WHERE and run it with a new value after every batch: direct
//! evaluation answers those it can, automatic views (keyed on the column)
//! the others.
//!
//! Environment:
//! - `AQUEDUCT_DIFF_SEEDS=N` runs seeds `0..N` (default [`DEFAULT_SEEDS`]);
//! - `AQUEDUCT_DIFF_SEED=s` runs seed `s` only;
//! - `AQUEDUCT_DIFF_KEEP_GOING=1` runs every seed and reports all failures;
//! - `AQUEDUCT_DIFF_VERBOSE=1` prints each case as it runs;
//! - `AQUEDUCT_DIFF_SCHEMA_CHANGES=p` is the chance of schema changes
//!   before each batch (default [`DEFAULT_SCHEMA_CHANGES`]; 0 leaves them
//!   out); they drop columns too unless `AQUEDUCT_DIFF_DROP_COLUMNS=0`;
//! - `AQUEDUCT_DIFF_ALTER_UNDER_READS=0` runs the schema changes of the
//!   suites under a memory limit before their reader threads start rather
//!   than while they read (which they do by default: an `ALTER TABLE`
//!   racing upqueries and readers of partial views);
//! - `AQUEDUCT_DIFF_LOOKUPS=0` leaves out the lookups on views;
//! - `AQUEDUCT_DIFF_PARAMS=0` leaves out the prepared queries with a
//!   parameter; `AQUEDUCT_DIFF_ALL_PARAMS=0` only those automatic views can
//!   serve (no ORDER BY/LIMIT, a group key pinned);
//! - `AQUEDUCT_DIFF_GROUPED_LOOKUPS=0` leaves out lookups of rows of views
//!   with GROUP BY or aggregates (and their prepared queries);
//! - `AQUEDUCT_DIFF_FEATURES=all` generates everything the generator knows,
//!   including what the engine is known to get wrong or refuse (to check a
//!   fix; see `view_features` and `Features::direct`).
//!
//! On a failure the test prints the seed, the whole case as SQL, both
//! answers, and a minimised case, then fails.

#[path = "differential/query.rs"]
mod query;
#[path = "differential/runner.rs"]
mod runner;
#[path = "differential/schema.rs"]
mod schema;
#[path = "differential/shrink.rs"]
mod shrink;
#[path = "differential/workload.rs"]
mod workload;

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use query::Features;
use runner::{Config, Stats};
use workload::{Case, SchemaChanges, Sizes};

/// Seeds each suite runs by default (`0..DEFAULT_SEEDS`).
const DEFAULT_SEEDS: u64 = 200;

/// The chance of schema changes before a batch, by default.
const DEFAULT_SCHEMA_CHANGES: f64 = 0.2;

/// A seed that takes longer than this is reported as a hang.
const HANG: Duration = Duration::from_secs(60);

/// What maintained views are tested with. Grows as views learn features.
fn view_features() -> Features {
    Features {
        // The generator puts quoted dates where PostgreSQL reads them as
        // text (`min('2024-01-02')`, a subquery's output column) and then
        // compares them with dates, which PostgreSQL refuses (42883) and
        // SQLite answers; Aqueduct refuses those as PostgreSQL does.
        dates: false,
        ..Features::all()
    }
}

/// `default`, or everything with `AQUEDUCT_DIFF_FEATURES=all` (one table
/// only for direct evaluation, which has no joins, subqueries or UNION).
fn features(default: Features) -> Features {
    if env("AQUEDUCT_DIFF_FEATURES").as_deref() != Some("all") {
        return default;
    }
    let all = Features::all();
    Features {
        joins: default.joins,
        left_joins: default.left_joins,
        multi_column_joins: default.multi_column_joins,
        join_chains: default.join_chains,
        subqueries: default.subqueries,
        with_cte: default.with_cte,
        union: default.union,
        union_all: default.union_all,
        ..all
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The schema changes a suite makes.
fn schema_changes() -> SchemaChanges {
    let chance = env("AQUEDUCT_DIFF_SCHEMA_CHANGES")
        .map(|s| {
            s.parse()
                .expect("AQUEDUCT_DIFF_SCHEMA_CHANGES is a number from 0 to 1")
        })
        .unwrap_or(DEFAULT_SCHEMA_CHANGES);
    let drop_columns = env("AQUEDUCT_DIFF_DROP_COLUMNS").as_deref() != Some("0");
    SchemaChanges {
        chance,
        drop_columns,
    }
}

fn seeds() -> Vec<u64> {
    if let Some(s) = env("AQUEDUCT_DIFF_SEED") {
        return vec![s.parse().expect("AQUEDUCT_DIFF_SEED is a number")];
    }
    let n = env("AQUEDUCT_DIFF_SEEDS")
        .map(|s| s.parse().expect("AQUEDUCT_DIFF_SEEDS is a number"))
        .unwrap_or(DEFAULT_SEEDS);
    (0..n).collect()
}

fn suite(name: &str, cfg: &Config) {
    let started = Instant::now();
    let keep_going = env("AQUEDUCT_DIFF_KEEP_GOING").is_some();
    let verbose = env("AQUEDUCT_DIFF_VERBOSE").is_some();
    let mut total = Stats::default();
    let mut failed = Vec::new();
    let seeds = seeds();
    for &seed in &seeds {
        let case = Case::generate(seed, &cfg.features, &cfg.sizes);
        if verbose {
            eprintln!("-- {name} seed {seed}\n{}", shrink::script(&case, cfg));
        }
        // On its own thread, so a deadlock is reported rather than waited on.
        let trace = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        {
            let (case, cfg, trace) = (case.clone(), cfg.clone(), trace.clone());
            std::thread::spawn(move || {
                let _ = tx.send(runner::run_traced(&case, &cfg, Some(trace)));
            });
        }
        let Ok(outcome) = rx.recv_timeout(HANG) else {
            eprintln!(
                "\n===== differential {name}: seed {seed} HANGS =====\n\
                 rerun: AQUEDUCT_DIFF_SEED={seed} cargo test -p aqueduct-sql --test differential {name}\n\
                 ----- the case -----\n{}\
                 ----- no answer after {}s to -----\n{}\n",
                shrink::script(&case, cfg),
                HANG.as_secs(),
                trace.lock().unwrap()
            );
            panic!("differential {name}: seed {seed} hangs (details above)");
        };
        match outcome {
            Ok(s) => {
                total.comparisons += s.comparisons;
                total.nonempty += s.nonempty;
                total.rows += s.rows;
                total.lookups += s.lookups;
                total.params += s.params;
                total.writes += s.writes;
                total.fills += s.fills;
                total.evictions += s.evictions;
                total.churn_reads += s.churn_reads;
            }
            Err(failure) => {
                report(name, &case, cfg, &failure);
                failed.push(seed);
                if !keep_going {
                    break;
                }
            }
        }
    }
    eprintln!(
        "differential {name}: {} seeds, {} comparisons ({} non-empty, {} rows), {} lookups, {} with parameters, {} writes, {} keys filled by upqueries, {} evicted, {} concurrent reads, {:.1}s",
        seeds.len(),
        total.comparisons,
        total.nonempty,
        total.rows,
        total.lookups,
        total.params,
        total.writes,
        total.fills,
        total.evictions,
        total.churn_reads,
        started.elapsed().as_secs_f64()
    );
    if cfg.memory_limit > 0 && failed.is_empty() && seeds.len() >= 20 {
        assert!(
            total.evictions > 0 && total.churn_reads > 0,
            "differential {name}: the memory limit evicted nothing or no read ran concurrently: the suite tests less than it says"
        );
    }
    assert!(
        failed.is_empty(),
        "differential {name}: Aqueduct disagrees with SQLite for seeds {failed:?} (details above; \
         rerun one with AQUEDUCT_DIFF_SEED=<seed>)"
    );
}

fn report(name: &str, case: &Case, cfg: &Config, failure: &runner::Failure) {
    eprintln!(
        "\n===== differential {name}: seed {} FAILED =====\n\
         rerun: AQUEDUCT_DIFF_SEED={} cargo test -p aqueduct-sql --test differential {name}\n\
         ----- the case -----\n{}\
         ----- what went wrong -----\n{failure}",
        case.seed,
        case.seed,
        shrink::script(case, cfg)
    );
    let (min, min_failure, runs) = shrink::minimize(case, cfg, failure);
    eprintln!(
        "----- minimised ({runs} runs) -----\n{}\
         ----- what goes wrong -----\n{min_failure}\
         ==========\n",
        shrink::script(&min, cfg)
    );
}

#[test]
fn direct_queries_match_sqlite() {
    suite(
        "direct",
        &Config {
            use_views: false,
            lookups: false,
            grouped_lookups: false,
            params: env("AQUEDUCT_DIFF_PARAMS").as_deref() != Some("0"),
            all_params: env("AQUEDUCT_DIFF_ALL_PARAMS").as_deref() != Some("0"),
            features: features(Features::direct()),
            sizes: Sizes {
                views: 3,
                batches: 10,
                schema_changes: schema_changes(),
            },
            sabotage: false,
            memory_limit: 0,
            churn: 0,
            alter_under_churn: false,
        },
    );
}

/// Joins, subqueries, UNION and the rest run as plain queries: answered by
/// automatic views (where a `column = literal` keys them) or by one-shot
/// evaluation through a temporary dataflow.
#[test]
fn dataflow_queries_match_sqlite() {
    suite(
        "dataflow",
        &Config {
            use_views: false,
            lookups: false,
            grouped_lookups: false,
            params: env("AQUEDUCT_DIFF_PARAMS").as_deref() != Some("0"),
            all_params: env("AQUEDUCT_DIFF_ALL_PARAMS").as_deref() != Some("0"),
            features: features(view_features()),
            sizes: Sizes {
                views: 3,
                batches: 10,
                schema_changes: schema_changes(),
            },
            sabotage: false,
            memory_limit: 0,
            churn: 0,
            alter_under_churn: false,
        },
    );
}

#[test]
fn views_match_sqlite() {
    suite(
        "views",
        &Config {
            use_views: true,
            lookups: env("AQUEDUCT_DIFF_LOOKUPS").as_deref() != Some("0"),
            grouped_lookups: env("AQUEDUCT_DIFF_GROUPED_LOOKUPS").as_deref() != Some("0"),
            params: env("AQUEDUCT_DIFF_PARAMS").as_deref() != Some("0"),
            all_params: env("AQUEDUCT_DIFF_ALL_PARAMS").as_deref() != Some("0"),
            features: features(view_features()),
            sizes: Sizes {
                views: 3,
                batches: 10,
                schema_changes: schema_changes(),
            },
            sabotage: false,
            memory_limit: 0,
            churn: 0,
            alter_under_churn: false,
        },
    );
}

/// Partial state under pressure: views read by key and automatic views
/// hold only the keys asked for, under a memory limit just above what must
/// be kept in full, so keys are evicted and filled again by upqueries all
/// the time; meanwhile two threads repeat earlier keyed reads while each
/// batch of writes runs, so upqueries race with the writes they may
/// already contain.
#[test]
fn partial_views_under_a_memory_limit_match_sqlite() {
    suite(
        "partial-views",
        &Config {
            use_views: true,
            lookups: true,
            grouped_lookups: true,
            params: true,
            all_params: true,
            features: features(view_features()),
            sizes: Sizes {
                views: 3,
                batches: 10,
                schema_changes: schema_changes(),
            },
            sabotage: false,
            memory_limit: PARTIAL_MEMORY_LIMIT,
            churn: 2,
            alter_under_churn: env("AQUEDUCT_DIFF_ALTER_UNDER_READS").as_deref() != Some("0"),
        },
    );
}

/// The same with plain queries: automatic views (partial) and one-shot
/// evaluation.
#[test]
fn partial_automatic_views_under_a_memory_limit_match_sqlite() {
    suite(
        "partial-dataflow",
        &Config {
            use_views: false,
            lookups: false,
            grouped_lookups: false,
            params: true,
            all_params: true,
            features: features(view_features()),
            sizes: Sizes {
                views: 3,
                batches: 10,
                schema_changes: schema_changes(),
            },
            sabotage: false,
            memory_limit: PARTIAL_MEMORY_LIMIT,
            churn: 2,
            alter_under_churn: env("AQUEDUCT_DIFF_ALTER_UNDER_READS").as_deref() != Some("0"),
        },
    );
}

/// A memory limit a few keys fill (raised by the runner only as far as
/// state kept in full needs).
const PARTIAL_MEMORY_LIMIT: u64 = 2048;

/// The tester itself: a wrong answer is caught and minimised to one query
/// and a few rows.
#[test]
fn a_wrong_answer_is_caught_and_minimised() {
    let cfg = Config {
        use_views: false,
        lookups: false,
        grouped_lookups: false,
        params: false,
        all_params: false,
        features: Features::direct(),
        sizes: Sizes {
            views: 3,
            batches: 6,
            schema_changes: SchemaChanges {
                chance: 0.0,
                drop_columns: false,
            },
        },
        sabotage: true,
        memory_limit: 0,
        churn: 0,
        alter_under_churn: false,
    };
    let case = Case::generate(7, &cfg.features, &cfg.sizes);
    let failure = runner::run(&case, &cfg).expect_err("the sabotage is noticed");
    assert_eq!(failure.kind, runner::FailKind::Mismatch);
    let (min, min_failure, _) = shrink::minimize(&case, &cfg, &failure);
    assert_eq!(min_failure.kind, runner::FailKind::Mismatch);
    assert_eq!(min.views.len(), 1);
    let rows: usize = min.initial.iter().map(|t| t.len()).sum();
    let writes: usize = min.batches.iter().map(|b| b.stmts.len()).sum();
    // Two rows in the answer after one batch are all it takes (a few more
    // if the query needs them to produce two rows).
    assert!(
        rows + writes <= 6,
        "{}{min_failure}",
        shrink::script(&min, &cfg)
    );
    assert!(min.batches.len() <= 1, "{}", shrink::script(&min, &cfg));
    eprintln!("{}{min_failure}", shrink::script(&min, &cfg));
}
