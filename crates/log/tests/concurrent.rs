//! Many writers, a following reader and background compaction at once, on a
//! real directory: LSNs stay dense and ordered, every acknowledged batch is
//! replayed, and compaction never changes the replayed state.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aqueduct_log::{Log, NewRecord, Options, SyncPolicy};
use common::*;

fn run(sync: SyncPolicy, writers: usize, per_writer: usize) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync,
        segment_bytes: 16 * 1024,
        ..Default::default()
    };
    let (log, _) = Log::open(dir.path(), opts.clone()).unwrap();
    log.start_background_compaction(Duration::from_millis(5));
    let acked: Arc<Mutex<BTreeMap<u64, Vec<NewRecord>>>> = Default::default();

    // A reader follows the log while it is written and compacted.
    let follower = {
        let log = log.clone();
        let total = (writers * per_writer) as u64;
        std::thread::spawn(move || {
            let mut reader = log.reader(1);
            let mut last = 0;
            while last < total {
                for r in reader.follow(256, Duration::from_millis(200)).unwrap() {
                    assert!(r.lsn > last, "reader went back from {last} to {}", r.lsn);
                    last = r.lsn;
                }
            }
            last
        })
    };

    std::thread::scope(|s| {
        for w in 0..writers {
            let log = log.clone();
            let acked = acked.clone();
            s.spawn(move || {
                for i in 0..per_writer {
                    let batch = if i % 3 == 0 {
                        vec![
                            put(&format!("w{w}/{}", i % 10), &format!("{i}")),
                            put(&format!("shared/{}", i % 4), &format!("{w}-{i}")),
                        ]
                    } else {
                        vec![put(&format!("w{w}/{}", i % 10), &format!("{i}"))]
                    };
                    let r = log.append(&batch).unwrap();
                    assert_eq!(r.last - r.first + 1, batch.len() as u64);
                    acked.lock().unwrap().insert(r.first, batch);
                }
            });
        }
    });
    log.sync().unwrap();
    assert!(follower.join().unwrap() >= (writers * per_writer) as u64);

    // LSNs handed out are dense: batches tile 1..=last without gaps.
    let acked = acked.lock().unwrap();
    let mut next = 1;
    for (first, batch) in acked.iter() {
        assert_eq!(*first, next, "LSN gap or overlap");
        next += batch.len() as u64;
    }
    assert_eq!(log.next_lsn(), next);
    let expected = State::of_batches(acked.values());
    log.seal_active().unwrap();
    log.compact().unwrap();
    assert_eq!(replay_state(&log), expected);
    drop(log);
    let (log, report) = Log::open(dir.path(), opts).unwrap();
    assert_eq!(report.last_lsn, next - 1);
    assert_eq!(replay_state(&log), expected);
}

#[test]
fn writers_reader_and_compaction_with_group_commit() {
    run(SyncPolicy::Always, 16, 60);
}

#[test]
fn writers_reader_and_compaction_without_sync() {
    run(SyncPolicy::Never, 4, 2000);
}
