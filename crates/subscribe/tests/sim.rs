//! The seeded simulator and its checkers (`docs/publications.md` §10): a
//! Fig. 8-shaped workload through the real `DepTracker` and the real
//! `Agent`, workers finishing in random order, in-memory sinks, crashes,
//! dropped streams and sink errors. A failing seed is printed and replays
//! exactly: `SIM_SEED=<seed> cargo test -p aqueduct-subscribe --test sim`.

mod sim {
    pub mod checkers;
    pub mod harness;
    pub mod prng;
    pub mod server;
    pub mod workload;
}

use aqueduct_publish::Mode;
use sim::harness::{run, Scenario};

fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SIM_SEED is a number")],
        Err(_) => default.collect(),
    }
}

fn check(name: &str, sc: &Scenario, seeds: Vec<u64>) {
    let mut totals = (0, 0, 0, 0);
    for seed in seeds {
        let out = run(seed, sc);
        assert!(
            out.violations.is_empty(),
            "{name}: seed {seed} fails (replay with SIM_SEED={seed}): {:#?}",
            out.violations
        );
        totals.0 += out.crashes;
        totals.1 += out.reconnects;
        totals.2 += out.dead_lettered;
        totals.3 += out.fallbacks;
    }
    println!(
        "{name}: {} crashes, {} reconnects, {} dead letters, {} fallbacks",
        totals.0, totals.1, totals.2, totals.3
    );
}

#[test]
fn global_transactional() {
    check("global", &Scenario::new(Mode::Global), seeds(0..12));
}

#[test]
fn causal_transactional() {
    check("causal", &Scenario::new(Mode::Causal), seeds(100..115));
}

#[test]
fn causal_small_slot_space() {
    let mut sc = Scenario::new(Mode::Causal);
    sc.dep_slots = 8;
    check("causal, 8 slots", &sc, seeds(200..208));
    sc.dep_slots = 1;
    check("causal, 1 slot", &sc, seeds(250..254));
}

#[test]
fn weak_guarded() {
    check("weak", &Scenario::new(Mode::Weak), seeds(300..315));
}

#[test]
fn causal_with_timeout() {
    let mut sc = Scenario::new(Mode::Causal);
    sc.causal_timeout_ms = Some(60_000);
    sc.transient = 4;
    sc.transient_times = 14;
    check("causal + timeout", &sc, seeds(400..410));
}
