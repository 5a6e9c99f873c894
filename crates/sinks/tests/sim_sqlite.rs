//! The subscribe crate's simulator with a SQLite sink beside its in-memory
//! one (see `common/sim.rs`), each seed in a database file of its own,
//! which each crash opens again. A failing seed replays with
//! `SIM_SEED=<seed>`.

#[macro_use]
mod common;
#[path = "common/sim.rs"]
mod sim;

use std::ops::Range;

use aqueduct_publish::Mode;
use aqueduct_sinks::SqliteSink;

sql_store!(SqliteSink);

fn check(mode: Mode, seeds: Range<u64>) {
    // The SQLite sink stores its position with the rows in every mode.
    let crashes = sim::simulate(mode, seeds, |_| {}, &mut |_| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sink.db");
        common::opener(move || {
            // The directory lives as long as the run opening the file.
            let _dir = &dir;
            SqliteSink::open(&path, "sim").expect("reopen")
        })
    });
    println!("{mode:?} on SQLite: {crashes} crashes");
}

#[test]
fn global_on_sqlite() {
    check(Mode::Global, 0..3);
}

#[test]
fn causal_on_sqlite() {
    check(Mode::Causal, 100..103);
}

#[test]
fn weak_on_sqlite() {
    check(Mode::Weak, 300..303);
}
