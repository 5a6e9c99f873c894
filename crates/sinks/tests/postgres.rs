//! The PostgreSQL sink through the shared cases and the simulator. Runs
//! only when `AQ_SINK_POSTGRES_URL` names a database (`scripts/sink-tests`
//! starts a throwaway one); each case uses a subscription name and a data
//! schema of its own, dropped first.

// The simulator's planted defects build only in the subscribe crate.
#![allow(unexpected_cfgs)]

mod common;

#[allow(dead_code)]
#[path = "../../subscribe/tests/sim"]
mod sim {
    pub mod checkers;
    pub mod harness;
    pub mod prng;
    pub mod server;
    pub mod workload;
}

use aqueduct_publish::Mode;
use aqueduct_sinks::{PostgresSink, Rows, SinkSpec};
use aqueduct_subscribe::{ErrorClass, Sink};
use common::Store;
use sim::harness::{run_with, Present, Scenario, Shadow};

impl Store for PostgresSink {
    fn rows_of(&self, object: &str) -> Rows {
        self.rows(object).expect("rows")
    }
}

fn url() -> Option<String> {
    let url = std::env::var("AQ_SINK_POSTGRES_URL").ok();
    if url.is_none() {
        println!("AQ_SINK_POSTGRES_URL is not set: PostgreSQL sink tests skipped");
    }
    url
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
        let url = url.clone();
        Box::new(move || {
            Box::new(PostgresSink::connect_in(&url, &name, &name).expect("connect"))
                as Box<dyn Store>
        })
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

struct PgShadow {
    url: String,
    name: String,
    sink: Option<PostgresSink>,
}

impl Shadow for PgShadow {
    fn sink(&mut self) -> &mut dyn Sink {
        self.sink.as_mut().expect("open")
    }

    fn reopen(&mut self) {
        self.sink = None;
        let s = PostgresSink::connect_in(&self.url, &self.name, &self.name).expect("reopen");
        self.sink = Some(s);
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

#[test]
fn simulator_on_postgres() {
    let Some(url) = url() else { return };
    for (mode, seed) in [(Mode::Global, 0), (Mode::Causal, 100), (Mode::Weak, 300)] {
        let mut sc = Scenario::new(mode);
        sc.transactional = true;
        let name = format!("sinktest_sim_{seed}");
        fresh(&url, &name);
        let mut shadow = PgShadow {
            url: url.clone(),
            name,
            sink: None,
        };
        let out = run_with(seed, &sc, Some(&mut shadow));
        assert!(
            out.violations.is_empty(),
            "{mode:?}: seed {seed} fails: {:#?}",
            out.violations
        );
    }
}
