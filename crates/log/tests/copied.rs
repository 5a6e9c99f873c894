//! A follower's log: records copied from another log at their LSNs
//! (`Log::append_copied`), gaps below the copied log's exact point
//! included, survive a reopen and read back the same, with batches as they
//! were and the exact point noted.

use aqueduct_log::{Log, NewRecord, Options, Record, SyncPolicy};

fn open(dir: &std::path::Path) -> Log {
    Log::open(
        dir,
        Options {
            sync: SyncPolicy::Always,
            segment_bytes: 4096,
            ..Default::default()
        },
    )
    .unwrap()
    .0
}

fn all(log: &Log) -> Vec<Record> {
    log.reader(1).next_batch(usize::MAX).unwrap()
}

#[test]
fn copied_records_keep_their_lsns_batches_and_gaps_across_a_reopen() {
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    for i in 0..200u32 {
        let batch: Vec<NewRecord> = (0..(i % 3 + 1))
            .map(|j| NewRecord::put(format!("k{}", (i + j) % 17), vec![i as u8; 40]))
            .collect();
        source.append(&batch).unwrap();
    }
    let records = all(&source);
    // What a member's compaction might leave: some records gone below
    // LSN 150, whole batches kept above.
    let kept: Vec<Record> = records
        .iter()
        .filter(|r| r.lsn >= 150 || r.lsn % 4 != 1 || !r.ends_batch())
        .cloned()
        .map(|mut r| {
            // The last record of a batch whose end was dropped ends it now.
            if r.lsn < 150
                && records
                    .iter()
                    .any(|n| n.lsn == r.lsn + 1 && n.lsn % 4 == 1 && n.ends_batch())
            {
                r.flags &= !aqueduct_log::record::FLAG_BATCH_CONTINUES;
            }
            r
        })
        .collect();
    assert!(kept.len() < records.len());
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path());
        for chunk in kept.chunk_by(|a, _| !a.ends_batch()) {
            log.append_copied(chunk).unwrap();
        }
        log.note_compacted_until(150).unwrap();
        assert_eq!(all(&log), kept);
        // Out of order, or before the end, is refused.
        assert!(log.append_copied(&kept[..1]).is_err());
    }
    let log = open(dir.path());
    assert_eq!(all(&log), kept);
    assert_eq!(log.exact_from(), 150);
    assert_eq!(log.next_lsn(), records.last().unwrap().lsn + 1);
}

/// A reader of the compacted log (a new follower) holds compaction back
/// from its position, below the exact point too: a second pass changes
/// no record at or above it, so a tombstone it has not reached stays
/// while the put it already read is gone from nowhere.
#[test]
fn a_hold_below_the_exact_point_keeps_compaction_off_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            segment_bytes: 4096,
            ..Default::default()
        },
    )
    .unwrap()
    .0;
    let round = |tag: u8| {
        for i in 0..300u32 {
            log.append(&[NewRecord::put(format!("k{}", i % 20), vec![tag; 40])])
                .unwrap();
        }
    };
    round(1);
    log.seal_active().unwrap();
    log.compact().unwrap();
    let exact = log.exact_from();
    assert!(exact > 1, "the first pass compacted");
    // The reader has read up to the middle of what is left.
    let before = all(&log);
    let position = before[before.len() / 2].lsn;
    log.hold_as_compacted("follower", position);
    for i in 0..20u32 {
        log.append(&[NewRecord::delete(format!("k{i}"))]).unwrap();
    }
    round(2);
    log.seal_active().unwrap();
    log.compact().unwrap();
    let after = all(&log);
    let kept = |records: &[Record]| -> Vec<Record> {
        records
            .iter()
            .filter(|r| r.lsn >= position)
            .cloned()
            .collect()
    };
    let held: Vec<Record> = kept(&after)
        .into_iter()
        .filter(|r| r.lsn <= before.last().unwrap().lsn)
        .collect();
    assert_eq!(held, kept(&before), "records at or above the hold changed");
    // Released, a pass may compact them.
    log.set_hold("follower", None).unwrap();
    log.compact().unwrap();
    assert!(all(&log).len() < after.len());
}

/// A response for a follower is bounded in bytes, counted record by
/// record, not only in records: large records make it stop early, at a
/// batch boundary.
#[test]
fn a_response_is_bounded_in_bytes() {
    use aqueduct_log::wire::{read_batches, MAX_WIRE_BYTES, MAX_WIRE_RECORDS};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap()
    .0;
    let big = vec![7u8; 1 << 20];
    for i in 0..48u32 {
        log.append(&[
            NewRecord::put(format!("a{i}"), big.clone()),
            NewRecord::put(format!("b{i}"), big.clone()),
        ])
        .unwrap();
    }
    let got = read_batches(&log, 1, MAX_WIRE_RECORDS, std::time::Duration::ZERO).unwrap();
    let bytes: usize = got.iter().map(|r| r.encoded_len()).sum();
    assert!(got.len() < 96, "{} records", got.len());
    assert!(
        (MAX_WIRE_BYTES..MAX_WIRE_BYTES + (3 << 20)).contains(&bytes),
        "{bytes} bytes"
    );
    assert!(got.last().unwrap().ends_batch());
    // The next responses go on from there, to every record.
    let mut total = got.len();
    let mut from = got.last().unwrap().lsn + 1;
    loop {
        let more = read_batches(&log, from, MAX_WIRE_RECORDS, std::time::Duration::ZERO).unwrap();
        let Some(last) = more.last() else { break };
        from = last.lsn + 1;
        total += more.len();
    }
    assert_eq!(total, 96);
}
