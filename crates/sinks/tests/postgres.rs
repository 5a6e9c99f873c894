//! The PostgreSQL sink through the shared cases and the simulator. Runs
//! only when `AQ_SINK_POSTGRES_URL` names a database (`scripts/sink-tests`
//! starts a throwaway one); each case uses a subscription name and a data
//! schema of its own, dropped first.

#[macro_use]
mod common;
#[path = "common/sim.rs"]
mod sim;

use aqueduct_publish::Mode;
use aqueduct_sinks::{PostgresSink, SinkSpec};
use aqueduct_subscribe::ErrorClass;
use common::opener;

sql_store!(PostgresSink);

fn url() -> Option<String> {
    common::env_url("AQ_SINK_POSTGRES_URL", "PostgreSQL sink")
}

/// Opens the subscription `name` with its data tables in the schema
/// `name`, again on each call.
fn open(url: &str, name: &str) -> common::Opener {
    let (url, name) = (url.to_string(), name.to_string());
    opener(move || PostgresSink::connect_in(&url, &name, &name).expect("connect"))
}

/// Forgets what an earlier run left under `name`.
fn fresh(url: &str, name: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
        .unwrap();
    for table in ["subscription", "applied", "tombstones", "dead_letters"] {
        // Missing on a new database; that is fine.
        let _ = c.batch_execute(&format!(
            "DELETE FROM aqueduct.{table} WHERE name = '{name}'"
        ));
    }
    let _ = c.batch_execute(&format!(
        "DELETE FROM aqueduct.objects WHERE schema = '{name}'"
    ));
}

#[test]
fn postgres_cases() {
    let Some(url) = url() else { return };
    common::all(&mut |case| {
        let name = format!("sinktest_{case}");
        fresh(&url, &name);
        open(&url, &name)
    });
}

#[test]
fn errors_classified() {
    let Some(url) = url() else { return };
    // A refused connection is transient.
    let err = PostgresSink::connect("host=127.0.0.1 port=1 user=nobody connect_timeout=5", "x")
        .err()
        .expect("no server there");
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    // A spec opens the sink.
    let name = "sinktest_spec";
    fresh(&url, name);
    let spec: SinkSpec = format!("postgres:{url}").parse().unwrap();
    let sink = spec.open(name, None).unwrap();
    assert_eq!(sink.resume().unwrap(), Default::default());
}

#[test]
fn simulator_on_postgres() {
    let Some(url) = url() else { return };
    for (mode, seed) in [(Mode::Global, 0), (Mode::Causal, 100), (Mode::Weak, 300)] {
        sim::simulate(mode, seed..seed + 1, |_| {}, &mut |seed| {
            let name = format!("sinktest_sim_{seed}");
            fresh(&url, &name);
            open(&url, &name)
        });
    }
}

#[test]
fn postgres_parallel_batches() {
    let Some(url) = url() else { return };
    let name = "sinktest_parallel";
    fresh(&url, name);
    common::parallel_batches(move || PostgresSink::connect_in(&url, name, name).expect("connect"));
}
