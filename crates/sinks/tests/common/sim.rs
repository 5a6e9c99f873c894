//! The subscribe crate's simulator, its files shared with the subscribe
//! crate's own test rather than copied, with a real sink beside its
//! in-memory one: the real agent, a Fig. 8-shaped workload, crashes (each
//! opens the sink again from what it stored), dropped streams and sink
//! errors, every checker, and at the end the sink's rows must be the
//! source's. A failing seed replays with `SIM_SEED=<seed>`.
//!
//! Included by the test files that run it, beside `common`.

// The simulator's planted defects build only in the subscribe crate.
#![allow(dead_code, unexpected_cfgs)]

#[path = "../../../subscribe/tests/sim/checkers.rs"]
pub mod checkers;
#[path = "../../../subscribe/tests/sim/harness.rs"]
pub mod harness;
#[path = "../../../subscribe/tests/sim/prng.rs"]
pub mod prng;
#[path = "../../../subscribe/tests/sim/server.rs"]
pub mod server;
#[path = "../../../subscribe/tests/sim/workload.rs"]
pub mod workload;

use std::ops::Range;

use aqueduct_publish::Mode;
use aqueduct_subscribe::Sink;
use harness::{run_with, Present, Scenario, Shadow};

use crate::common::{Opener, Store};

/// A store beside the in-memory sink, opened again at each crash.
struct Beside {
    open: Opener,
    sink: Option<Box<dyn Store>>,
}

impl Shadow for Beside {
    fn sink(&mut self) -> &mut dyn Sink {
        self.sink.as_deref_mut().expect("open")
    }

    fn reopen(&mut self) {
        self.sink = None;
        self.sink = Some((self.open)());
    }

    fn present(&mut self) -> Present {
        let sink = self.sink.as_deref().expect("open");
        let mut out = Present::new();
        for object in sink.objects_of() {
            for (key, row) in sink.rows_of(&object) {
                out.insert((object.clone(), key), row);
            }
        }
        out
    }
}

/// The seeds to run: `default`, or only `SIM_SEED` when set.
fn seeds(default: Range<u64>) -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SIM_SEED is a number")],
        Err(_) => default.collect(),
    }
}

/// Runs the simulator in `mode` from each of `default_seeds` (see
/// [`seeds`]) with a store beside its in-memory one, in a scenario that
/// stores positions with the rows, changed by `tweak`: `open(seed)` makes
/// a fresh store for the seed and returns how to open it. Fails on the
/// first seed with violations; returns the crashes of all runs.
pub fn simulate(
    mode: Mode,
    default_seeds: Range<u64>,
    tweak: impl Fn(&mut Scenario),
    open: &mut dyn FnMut(u64) -> Opener,
) -> u32 {
    let mut sc = Scenario::new(mode);
    sc.transactional = true;
    tweak(&mut sc);
    let mut crashes = 0;
    for seed in seeds(default_seeds) {
        let mut shadow = Beside {
            open: open(seed),
            sink: None,
        };
        let out = run_with(seed, &sc, Some(&mut shadow));
        assert!(
            out.violations.is_empty(),
            "{mode:?}: seed {seed} fails (replay with SIM_SEED={seed}): {:#?}",
            out.violations
        );
        crashes += out.crashes;
    }
    crashes
}
