use aqueduct_log::{Log, NewRecord, Options};

#[test]
fn truncate_into_merged_segment_then_seal_loses_records() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { segment_bytes: 4096, ..Default::default() };
    {
        let (log, _) = Log::open(dir.path(), opts.clone()).unwrap();
        // Every 10th record has a key of its own and survives compaction;
        // the rest overwrite one key. Compaction leaves small segments to merge.
        for i in 0..200 {
            let key = if i % 10 == 0 { format!("u{i}") } else { "hot".to_string() };
            log.append(&[NewRecord::put(key, vec![b'x'; 100])]).unwrap();
        }
        log.seal_active().unwrap();
        let rep = log.compact().unwrap();
        eprintln!("{rep:?}");
        eprintln!("{:?}", log.segments());
        // Cut inside the merged segment: it becomes the active segment.
        log.truncate_after(31).unwrap();
        eprintln!("{:?}", log.segments());
        // Large records seal it long before the next LSN reaches its covers_until.
        for i in 0..3 {
            let r = log.append(&[NewRecord::put(format!("big{i}"), vec![b'y'; 3000])]).unwrap();
            eprintln!("appended {r:?}");
        }
        eprintln!("{:?}", log.segments());
    }
    let (log, rep) = Log::open(dir.path(), opts).unwrap();
    eprintln!("{rep:?}");
    let lsns: Vec<u64> = log.reader(0).map(|r| r.unwrap().lsn).collect();
    eprintln!("{lsns:?}");
    assert_eq!(rep.last_lsn, 34, "acknowledged LSNs vanished");
}
