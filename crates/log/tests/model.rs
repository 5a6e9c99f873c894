//! Model-based test: random appends, batches, syncs, seals, compactions,
//! crashes (also in the middle of an append or a compaction) and reopens,
//! checked against an in-memory model. After every reopen the log replays to
//! exactly the state of the acknowledged batches (under `always`), or of a
//! prefix of them no shorter than what was durable (under `never`).

mod common;

use std::sync::Arc;

use aqueduct_log::sim::{Fault, SimStorage};
use aqueduct_log::{Log, Lsn, NewRecord, Options, SyncPolicy};
use common::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<(u8, Option<u8>)>),
    Sync,
    Seal,
    Compact,
    Reopen,
    Crash,
    CrashDuringAppend(u64, Vec<(u8, Option<u8>)>),
    CrashDuringCompact(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let batch = prop::collection::vec((0u8..12, prop::option::weighted(0.8, any::<u8>())), 1..5);
    prop_oneof![
        12 => batch.clone().prop_map(Op::Append),
        1 => Just(Op::Sync),
        2 => Just(Op::Seal),
        2 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => (1u64..4, batch).prop_map(|(n, b)| Op::CrashDuringAppend(n, b)),
        1 => (1u64..40).prop_map(Op::CrashDuringCompact),
    ]
}

fn records(spec: &[(u8, Option<u8>)]) -> Vec<NewRecord> {
    spec.iter()
        .map(|&(k, v)| match v {
            Some(v) => NewRecord::put(vec![b'k', k], vec![v; 1 + (v as usize % 90)]),
            None => NewRecord::delete(vec![b'k', k]),
        })
        .collect()
}

struct Harness {
    storage: Arc<SimStorage>,
    opts: Options,
    log: Option<Log>,
    /// Acknowledged batches with their last LSN.
    acked: Vec<(Lsn, Vec<NewRecord>)>,
    /// A batch whose append failed: it may or may not survive.
    maybe: Option<(Lsn, Vec<NewRecord>)>,
}

impl Harness {
    fn log(&self) -> &Log {
        self.log.as_ref().unwrap()
    }

    fn append(&mut self, batch: Vec<NewRecord>) -> bool {
        let next = self.log().next_lsn();
        match self.log().append(&batch) {
            Ok(r) => {
                assert_eq!(r.first, next, "LSNs are dense");
                self.acked.push((r.last, batch));
                true
            }
            Err(_) => {
                self.maybe = Some((next + batch.len() as u64 - 1, batch));
                false
            }
        }
    }

    /// Drops the log (optionally crashing the machine first), reopens, and
    /// checks the recovered state against the model.
    fn reopen(&mut self, crash: bool) {
        let durable = self.log().durable_lsn();
        self.log = None;
        if crash {
            self.storage.crash();
        }
        self.storage.restart();
        let log = open_sim(&self.storage, &self.opts);
        let recovered_last = log.next_lsn() - 1;
        if let Some((last, batch)) = self.maybe.take() {
            if recovered_last == last {
                self.acked.push((last, batch));
            }
        }
        let keep = self
            .acked
            .iter()
            .take_while(|(last, _)| *last <= recovered_last)
            .count();
        if self.opts.sync == SyncPolicy::Always {
            assert_eq!(keep, self.acked.len(), "an acknowledged batch was lost");
        } else {
            let durable_batches = self.acked.iter().filter(|(l, _)| *l <= durable).count();
            assert!(keep >= durable_batches, "a durable batch was lost");
        }
        self.acked.truncate(keep);
        let expected_last = self.acked.last().map(|(l, _)| *l).unwrap_or(0);
        assert_eq!(recovered_last, expected_last, "recovered LSN");
        let expected = State::of_batches(self.acked.iter().map(|(_, b)| b));
        assert_eq!(replay_state(&log), expected, "replayed state");
        self.log = Some(log);
    }
}

fn run(ops: Vec<Op>, sync: SyncPolicy, seed: u64) {
    let storage = SimStorage::new(seed);
    let opts = sim_options(sync, 1024);
    let log = open_sim(&storage, &opts);
    let mut h = Harness {
        storage,
        opts,
        log: Some(log),
        acked: Vec::new(),
        maybe: None,
    };
    for op in ops {
        match op {
            Op::Append(spec) => {
                assert!(h.append(records(&spec)), "append failed without a fault");
            }
            Op::Sync => {
                h.log().sync().unwrap();
            }
            Op::Seal => h.log().seal_active().unwrap(),
            Op::Compact => {
                h.log().compact().unwrap();
                let expected = State::of_batches(h.acked.iter().map(|(_, b)| b));
                assert_eq!(replay_state(h.log()), expected, "state after compaction");
            }
            Op::Reopen => h.reopen(false),
            Op::Crash => h.reopen(true),
            Op::CrashDuringAppend(n, spec) => {
                h.storage.fail_in(n, Fault::Crash);
                let ok = h.append(records(&spec));
                let fired = h.storage.fault_fired();
                h.storage.clear_fault();
                if ok && !fired {
                    continue;
                }
                h.reopen(true);
            }
            Op::CrashDuringCompact(n) => {
                h.storage.fail_in(n, Fault::Crash);
                let result = h.log().compact();
                let fired = h.storage.fault_fired();
                h.storage.clear_fault();
                if result.is_ok() && !fired {
                    continue;
                }
                h.reopen(true);
            }
        }
    }
    h.reopen(true);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn always_keeps_every_acknowledged_batch(
        ops in prop::collection::vec(op(), 1..120),
        seed in any::<u64>(),
    ) {
        run(ops, SyncPolicy::Always, seed);
    }

    #[test]
    fn never_keeps_a_durable_prefix(
        ops in prop::collection::vec(op(), 1..120),
        seed in any::<u64>(),
    ) {
        run(ops, SyncPolicy::Never, seed);
    }
}
