//! Helpers shared by the log's integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_log::sim::SimStorage;
use aqueduct_log::{Log, NewRecord, Options, RecordKind, Storage, SyncPolicy};

/// The state a log replays to: last value per key (deletes remove), plus the
/// non-compactable records in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub kv: BTreeMap<Vec<u8>, Vec<u8>>,
    pub pinned: Vec<(Vec<u8>, Vec<u8>)>,
}

impl State {
    pub fn apply(&mut self, kind: RecordKind, key: &[u8], body: &[u8]) {
        match kind {
            RecordKind::Put => {
                self.kv.insert(key.to_vec(), body.to_vec());
            }
            RecordKind::Delete => {
                self.kv.remove(key);
            }
            _ => self.pinned.push((key.to_vec(), body.to_vec())),
        }
    }

    pub fn apply_batch(&mut self, batch: &[NewRecord]) {
        for r in batch {
            self.apply(r.kind, &r.key, &r.body);
        }
    }

    pub fn of_batches<'a>(batches: impl IntoIterator<Item = &'a Vec<NewRecord>>) -> State {
        let mut s = State::default();
        for b in batches {
            s.apply_batch(b);
        }
        s
    }
}

/// Replays the whole log into a [`State`], checking LSNs increase and that
/// the log ends on a batch boundary.
pub fn replay_state(log: &Log) -> State {
    let mut s = State::default();
    let mut prev = 0;
    let mut open_batch = false;
    log.replay(0, |r| {
        assert!(r.lsn > prev, "LSN {} after {prev}", r.lsn);
        prev = r.lsn;
        open_batch = !r.ends_batch();
        s.apply(r.kind, r.key, r.body);
        Ok(())
    })
    .expect("replay");
    assert!(!open_batch, "the log ends inside a batch");
    s
}

pub fn sim_options(sync: SyncPolicy, segment_bytes: u64) -> Options {
    Options {
        sync,
        segment_bytes,
        ..Default::default()
    }
}

pub fn open_sim(storage: &Arc<SimStorage>, opts: &Options) -> Log {
    let s: Arc<dyn Storage> = storage.clone();
    Log::open_with_storage(s, opts.clone()).expect("open").0
}

pub fn put(key: &str, value: &str) -> NewRecord {
    NewRecord::put(key.as_bytes().to_vec(), value.as_bytes().to_vec())
}
