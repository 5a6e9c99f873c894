//! The subscribe crate's simulator with a SQLite sink beside its in-memory
//! one: the real agent, a Fig. 8-shaped workload, crashes (each reopens the
//! database file), dropped streams and sink errors, every checker, and at
//! the end the sink's rows must be the source's. The simulator's files are
//! shared with the subscribe crate's own test, not copied. A failing seed
//! replays with `SIM_SEED=<seed>`.

// The simulator's planted defects build only in the subscribe crate.
#![allow(unexpected_cfgs)]

#[allow(dead_code)]
#[path = "../../subscribe/tests/sim"]
mod sim {
    pub mod checkers;
    pub mod harness;
    pub mod prng;
    pub mod server;
    pub mod workload;
}

use std::path::PathBuf;

use aqueduct_publish::Mode;
use aqueduct_sinks::SqliteSink;
use aqueduct_subscribe::Sink;
use sim::harness::{run_with, Present, Scenario, Shadow};

struct SqliteShadow {
    path: PathBuf,
    sink: Option<SqliteSink>,
}

impl Shadow for SqliteShadow {
    fn sink(&mut self) -> &mut dyn Sink {
        self.sink.as_mut().expect("open")
    }

    fn reopen(&mut self) {
        self.sink = None;
        self.sink = Some(SqliteSink::open(&self.path, "sim").expect("reopen"));
    }

    fn present(&mut self) -> Present {
        let sink = self.sink.as_ref().expect("open");
        let mut out = Present::new();
        for object in sink.objects().expect("objects").keys() {
            for (key, row) in sink.rows(object).expect("rows") {
                out.insert((object.clone(), key), row);
            }
        }
        out
    }
}

fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SIM_SEED is a number")],
        Err(_) => default.collect(),
    }
}

fn check(name: &str, mode: Mode, seeds: Vec<u64>) {
    let mut sc = Scenario::new(mode);
    // The SQLite sink stores its position with the rows in every mode.
    sc.transactional = true;
    let mut crashes = 0;
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        let mut shadow = SqliteShadow {
            path: dir.path().join("sink.db"),
            sink: None,
        };
        let out = run_with(seed, &sc, Some(&mut shadow));
        assert!(
            out.violations.is_empty(),
            "{name}: seed {seed} fails (replay with SIM_SEED={seed}): {:#?}",
            out.violations
        );
        crashes += out.crashes;
    }
    println!("{name} on SQLite: {crashes} crashes");
}

#[test]
fn global_on_sqlite() {
    check("global", Mode::Global, seeds(0..3));
}

#[test]
fn causal_on_sqlite() {
    check("causal", Mode::Causal, seeds(100..103));
}

#[test]
fn weak_on_sqlite() {
    check("weak", Mode::Weak, seeds(300..303));
}
