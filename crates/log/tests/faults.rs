//! Every failure mode of the log, one test each, on simulated storage that can
//! tear writes, flip bits, fill up and crash at any operation.

mod common;

use std::sync::Arc;

use aqueduct_log::manifest::MANIFEST_NAME;
use aqueduct_log::segment::{data_name, index_name};
use aqueduct_log::sim::{Fault, SimStorage};
use aqueduct_log::{Error, Log, NewRecord, RecordKind, Storage, SyncPolicy};
use common::*;

const SEG: u64 = 2048;

/// Appends `n` single-record batches with keys over a small keyspace.
fn fill(log: &Log, n: usize, tag: &str) -> Vec<Vec<NewRecord>> {
    (0..n)
        .map(|i| {
            let b = vec![put(&format!("k{}", i % 7), &format!("{tag}-{i}"))];
            log.append(&b).unwrap();
            b
        })
        .collect()
}

/// A new storage holding `from`'s manifest and `name` with `bytes`, durably.
fn storage_with(seed: u64, from: &SimStorage, name: &str, bytes: &[u8]) -> Arc<SimStorage> {
    let s = SimStorage::new(seed);
    for (n, b) in [
        (MANIFEST_NAME, from.contents(MANIFEST_NAME).unwrap()),
        (name, bytes.to_vec()),
    ] {
        let f = s.create(n).unwrap();
        f.write_at(&b, 0).unwrap();
        f.sync().unwrap();
    }
    s.sync_dir().unwrap();
    s
}

fn active_name(log: &Log) -> String {
    data_name(log.segments().last().unwrap().base)
}

#[test]
fn torn_tail_at_every_byte_is_truncated() {
    let storage = SimStorage::new(1);
    let opts = sim_options(SyncPolicy::Always, 1 << 20);
    let log = open_sim(&storage, &opts);
    let batches = fill(&log, 5, "a");
    let last = vec![put("last", "the record that will be torn")];
    log.append(&last).unwrap();
    let name = active_name(&log);
    drop(log);
    let full = storage.contents(&name).unwrap();
    let last_len = last[0].encoded_len();
    let expected = State::of_batches(&batches);
    for cut in full.len() - last_len..full.len() {
        let s = storage_with(2, &storage, &name, &full[..cut]);
        let (log, report) =
            Log::open_with_storage(s.clone() as Arc<dyn Storage>, opts.clone()).unwrap();
        assert_eq!(report.last_lsn, 5, "cut at {cut}");
        assert_eq!(
            report.torn_bytes_truncated,
            (cut - (full.len() - last_len)) as u64
        );
        assert_eq!(replay_state(&log), expected, "cut at {cut}");
        // The log is usable: the next append gets the next LSN.
        assert_eq!(log.append_one(put("after", "x")).unwrap(), 6);
    }
}

/// A log of five batches and a last record with `body`; returns the storage,
/// the options, the active segment's name and the last record's length.
fn log_ending_in(
    seed: u64,
    body: &[u8],
) -> (Arc<SimStorage>, aqueduct_log::Options, String, usize) {
    let storage = SimStorage::new(seed);
    let opts = sim_options(SyncPolicy::Always, 1 << 20);
    let log = open_sim(&storage, &opts);
    fill(&log, 5, "a");
    let last = NewRecord::put("last", body.to_vec());
    log.append(std::slice::from_ref(&last)).unwrap();
    let name = active_name(&log);
    drop(log);
    (storage, opts, name, last.encoded_len())
}

/// Bodies for the tail tests: one ending in text, one ending in zero bytes
/// (as a row whose last column is a small integer does).
fn tail_bodies() -> [Vec<u8>; 2] {
    [
        b"the acknowledged record".to_vec(),
        vec![7, 0, 0, 0, 0, 0, 0, 0],
    ]
}

#[test]
fn flipped_byte_in_the_last_record_is_damage_not_a_torn_tail() {
    for body in tail_bodies() {
        let (storage, opts, name, last_len) = log_ending_in(20, &body);
        let full = storage.contents(&name).unwrap();
        let start = full.len() - last_len;
        for at in 0..last_len {
            for mask in [0x10u8, 0xff] {
                let mut bytes = full.clone();
                bytes[start + at] ^= mask;
                let s = storage_with(21, &storage, &name, &bytes);
                for read_only in [false, true] {
                    let opts = aqueduct_log::Options {
                        read_only,
                        ..opts.clone()
                    };
                    let err = match Log::open_with_storage(s.clone() as Arc<dyn Storage>, opts) {
                        Err(e) => e,
                        Ok((log, report)) => panic!(
                            "byte {at} ^ {mask:#x} of the last record ({body:?}): opened, \
                             last LSN {}, {} torn bytes dropped",
                            log.next_lsn() - 1,
                            report.torn_bytes_truncated
                        ),
                    };
                    match &err {
                        Error::Corrupt {
                            location,
                            offset,
                            lsn,
                            reason,
                        } => {
                            assert!(location.contains(&name), "{location}");
                            assert_eq!(*offset, start as u64, "byte {at}");
                            let header_damaged = (4..48).contains(&at);
                            assert_eq!(*lsn, (!header_damaged).then_some(6), "byte {at}");
                            assert!(reason.contains("not a write torn by a crash"), "{reason}");
                        }
                        other => panic!("expected corruption, got {other}"),
                    }
                    assert!(err.to_string().contains("aqueduct wal truncate"), "{err}");
                }
                // Nothing was cut: the damaged record is still there to inspect.
                assert_eq!(s.contents(&name).unwrap(), bytes);
            }
        }
    }
}

#[test]
fn zeroes_over_the_end_of_the_last_record_are_a_torn_tail() {
    for body in tail_bodies() {
        let (storage, opts, name, last_len) = log_ending_in(22, &body);
        let full = storage.contents(&name).unwrap();
        let start = full.len() - last_len;
        // The file grew by the record (and maybe more), but its data landed
        // only up to `from`: the rest reads as zeroes.
        for from in start..full.len() {
            for extra in [0usize, 7] {
                let mut bytes = full[..from].to_vec();
                bytes.resize(full.len() + extra, 0);
                if bytes[..full.len()] == full[..] && extra == 0 {
                    continue; // zeroes over zeroes: the record is intact
                }
                let s = storage_with(23, &storage, &name, &bytes);
                let (log, report) =
                    Log::open_with_storage(s.clone() as Arc<dyn Storage>, opts.clone())
                        .unwrap_or_else(|e| panic!("zeroes from {from} (+{extra}): {e}"));
                let intact = bytes[start..full.len()] == full[start..];
                if intact {
                    assert_eq!(log.next_lsn(), 7, "zeroes only after the record");
                } else {
                    assert_eq!(log.next_lsn(), 6, "zeroes from {from}");
                    assert_eq!(report.torn_bytes_truncated, (bytes.len() - start) as u64);
                }
            }
        }
    }
}

#[test]
fn incomplete_batch_at_the_tail_is_removed_whole() {
    let storage = SimStorage::new(3);
    let opts = sim_options(SyncPolicy::Always, 1 << 20);
    let log = open_sim(&storage, &opts);
    let batches = fill(&log, 3, "a");
    let batch = vec![put("x", "1"), put("y", "2"), put("z", "3")];
    log.append(&batch).unwrap();
    let name = active_name(&log);
    drop(log);
    let full = storage.contents(&name).unwrap();
    // Cut inside the third record of the batch: two whole records remain.
    storage.cut(&name, full.len() - 10);
    let (log, report) = Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts).unwrap();
    assert_eq!(report.incomplete_batch_records_dropped, 2);
    assert_eq!(report.last_lsn, 3);
    assert_eq!(replay_state(&log), State::of_batches(&batches));
}

#[test]
fn flipped_bit_in_a_middle_record_refuses_to_open_and_names_it() {
    for sealed in [true, false] {
        let storage = SimStorage::new(4);
        let opts = sim_options(SyncPolicy::Always, if sealed { SEG } else { 1 << 20 });
        let log = open_sim(&storage, &opts);
        fill(&log, 60, "a");
        let target = data_name(log.segments()[0].base);
        drop(log);
        // Second record of the first segment: header is 48 bytes, records vary.
        let bytes = storage.contents(&target).unwrap();
        let (first, len) = aqueduct_log::record::decode(&bytes[48..]).unwrap();
        assert_eq!(first.lsn, 1);
        // The last byte of the second record (same length as the first): its body.
        let offset = 48 + len + len - 1;
        storage.corrupt(&target, offset, 0x04);
        // Start-up is open + replay; a sealed segment's records are checked
        // by the replay, the active segment's already by the open.
        let err = match Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts) {
            Err(e) => e,
            Ok((log, _)) => {
                assert!(sealed, "the active segment is verified at open");
                log.replay(0, |_| Ok(())).unwrap_err()
            }
        };
        match &err {
            Error::Corrupt {
                location,
                offset: at,
                lsn,
                ..
            } => {
                assert!(location.contains(&target), "{location}");
                assert_eq!(*at, 48 + len as u64, "offset of the bad record");
                assert_eq!(*lsn, Some(2));
            }
            other => panic!("expected corruption, got {other}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("aqueduct wal truncate"), "{msg}");
    }
}

#[test]
fn missing_or_damaged_index_is_rebuilt() {
    let storage = SimStorage::new(5);
    let opts = sim_options(SyncPolicy::Always, SEG);
    let log = open_sim(&storage, &opts);
    let batches = fill(&log, 80, "a");
    let segs = log.segments();
    assert!(segs.len() >= 3);
    drop(log);
    storage.delete(&index_name(segs[0].base));
    storage.corrupt(&index_name(segs[1].base), 80, 0xff);
    let (log, report) =
        Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts.clone()).unwrap();
    assert_eq!(report.indexes_rebuilt, 2);
    assert_eq!(replay_state(&log), State::of_batches(&batches));
    // Reading from the middle uses the rebuilt index.
    let from = segs[1].first_lsn + 1;
    assert_eq!(log.reader(from).next().unwrap().unwrap().lsn, from);
    drop(log);
    let (_, report) = Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts).unwrap();
    assert_eq!(
        report.indexes_rebuilt, 0,
        "rebuilt indexes were written back"
    );
}

#[test]
fn full_disk_fails_the_write_and_loses_nothing() {
    let storage = SimStorage::new(6);
    let opts = sim_options(SyncPolicy::Always, SEG);
    let log = open_sim(&storage, &opts);
    let mut acked = fill(&log, 20, "a");
    storage.set_capacity(Some(0));
    let err = log.append(&[put("big", "no room")]).unwrap_err();
    assert!(matches!(err, Error::DiskFull { .. }), "{err}");
    assert!(err.to_string().contains("free space"), "{err}");
    // Still usable, nothing half-written, and works again once space returns.
    assert_eq!(replay_state(&log), State::of_batches(&acked));
    storage.set_capacity(None);
    let b = vec![put("after", "space returned")];
    assert_eq!(log.append(&b).unwrap().first, 21);
    acked.push(b);
    storage.crash();
    storage.restart();
    let log = open_sim(&storage, &opts);
    assert_eq!(replay_state(&log), State::of_batches(&acked));
}

#[test]
fn failed_sync_stops_writes_until_restart() {
    let storage = SimStorage::new(7);
    let opts = sim_options(SyncPolicy::Always, 1 << 20);
    let log = open_sim(&storage, &opts);
    let acked = fill(&log, 5, "a");
    // Op 1 is the write, op 2 the sync.
    storage.fail_in(2, Fault::Error);
    assert!(log.append(&[put("x", "unacknowledged")]).is_err());
    let err = log.append(&[put("y", "refused")]).unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "{err}");
    drop(log);
    let log = open_sim(&storage, &opts);
    let state = replay_state(&log);
    // The unacknowledged record may or may not be there; acknowledged ones are.
    let mut with = State::of_batches(&acked);
    with.apply(RecordKind::Put, b"x", b"unacknowledged");
    assert!(state == State::of_batches(&acked) || state == with);
}

#[test]
fn crash_at_every_step_of_compaction_leaves_a_valid_log() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    // Count the operations of one full compaction pass.
    let ops = {
        let storage = SimStorage::new(8);
        let log = open_sim(&storage, &opts);
        build_compactable(&log);
        let before = storage.ops();
        log.compact().unwrap();
        storage.ops() - before
    };
    assert!(ops > 10, "compaction did real work ({ops} operations)");
    for n in 1..=ops + 1 {
        let storage = SimStorage::new(100 + n);
        let log = open_sim(&storage, &opts);
        let batches = build_compactable(&log);
        let expected = State::of_batches(&batches);
        storage.fail_in(n, Fault::Crash);
        let _ = log.compact();
        drop(log);
        storage.restart();
        let log = open_sim(&storage, &opts);
        assert_eq!(replay_state(&log), expected, "crash at operation {n}");
        // Compaction can be restarted and finishes the job.
        log.compact().unwrap();
        assert_eq!(
            replay_state(&log),
            expected,
            "after resumed compaction, {n}"
        );
        drop(log);
        let log = open_sim(&storage, &opts);
        assert_eq!(replay_state(&log), expected, "after reopen, {n}");
    }
}

#[test]
fn compaction_keeps_pinned_records_and_drops_dead_tombstones() {
    let storage = SimStorage::new(9);
    let opts = sim_options(SyncPolicy::Always, SEG);
    let log = open_sim(&storage, &opts);
    let batches = build_compactable(&log);
    log.seal_active().unwrap();
    let report = log.compact().unwrap();
    assert!(report.records_after < report.records_before);
    assert!(report.segments_merged > 0, "{report:?}");
    let mut kinds = Vec::new();
    log.replay(0, |r| {
        kinds.push((r.kind, r.key.to_vec()));
        Ok(())
    })
    .unwrap();
    assert!(!kinds.iter().any(|(k, _)| *k == RecordKind::Delete));
    let schema = kinds
        .iter()
        .filter(|(k, _)| *k == RecordKind::Schema)
        .count();
    assert_eq!(schema, 3, "schema records are never compacted");
    assert_eq!(replay_state(&log), State::of_batches(&batches));
}

#[test]
fn retention_protects_recent_records() {
    let storage = SimStorage::new(10);
    let mut opts = sim_options(SyncPolicy::Always, SEG);
    let log = open_sim(&storage, &opts);
    build_compactable(&log);
    log.seal_active().unwrap();
    let protect = log.segments()[2].first_lsn;
    drop(log);
    opts.retention.protect_from = Some(protect);
    let log = open_sim(&storage, &opts);
    let mut before = Vec::new();
    log.replay(protect, |r| {
        before.push(r.to_owned());
        Ok(())
    })
    .unwrap();
    log.compact().unwrap();
    let mut after = Vec::new();
    log.replay(protect, |r| {
        after.push(r.to_owned());
        Ok(())
    })
    .unwrap();
    assert_eq!(
        before, after,
        "records at or above the retention LSN are untouched"
    );
}

#[test]
fn directory_held_by_another_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, _) = Log::open(dir.path(), Default::default()).unwrap();
    let err = match Log::open(dir.path(), Default::default()) {
        Err(e) => e,
        Ok(_) => panic!("opened a directory twice"),
    };
    assert!(matches!(err, Error::Locked(_)));
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
}

#[test]
fn oversized_values_are_refused_clearly() {
    let storage = SimStorage::new(11);
    let log = open_sim(&storage, &sim_options(SyncPolicy::Always, SEG));
    let err = log
        .append(&[NewRecord::put(
            "k",
            vec![0u8; aqueduct_log::MAX_BODY_BYTES + 1],
        )])
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
    assert_eq!(log.append_one(put("k", "v")).unwrap(), 1);
}

#[test]
fn truncate_after_and_purge_before_for_replication() {
    let storage = SimStorage::new(12);
    let opts = sim_options(SyncPolicy::Always, SEG);
    let log = open_sim(&storage, &opts);
    fill(&log, 100, "a");
    let segs = log.segments();
    let cut = segs[2].first_lsn + 3;
    log.truncate_after(cut).unwrap();
    assert_eq!(log.next_lsn(), cut + 1);
    let all: Vec<_> = log.reader(0).map(|r| r.unwrap().lsn).collect();
    assert_eq!(all, (1..=cut).collect::<Vec<_>>());
    assert_eq!(
        log.append_one(put("new", "after truncate")).unwrap(),
        cut + 1
    );
    log.purge_before(segs[1].first_lsn, 7).unwrap();
    assert_eq!(log.first_lsn(), segs[1].first_lsn);
    log.save_vote(b"vote-bytes").unwrap();
    drop(log);
    let log = open_sim(&storage, &opts);
    assert_eq!(log.next_lsn(), cut + 2);
    assert_eq!(log.meta().vote, b"vote-bytes");
    assert_eq!(log.meta().purged_term, 7);
    assert_eq!(log.first_lsn(), segs[1].first_lsn);
}

/// A log with overwrites, deletes and schema records over several segments.
fn build_compactable(log: &Log) -> Vec<Vec<NewRecord>> {
    let mut batches = Vec::new();
    for round in 0..3 {
        let b = vec![NewRecord::new(
            RecordKind::Schema,
            format!("schema{round}"),
            "create table",
        )];
        log.append(&b).unwrap();
        batches.push(b);
        for i in 0..25 {
            let b = if i % 5 == 4 {
                vec![NewRecord::delete(format!("k{}", i % 6))]
            } else {
                vec![
                    put(&format!("k{}", i % 6), &format!("v{round}-{i}")),
                    put(&format!("k{}", (i + 1) % 6), &format!("w{round}-{i}")),
                ]
            };
            log.append(&b).unwrap();
            batches.push(b);
        }
    }
    batches
}

/// The refusal of a log that is not whole: the problem and the LSN at which
/// `aqueduct wal truncate` would cut.
fn refusal(storage: &Arc<SimStorage>, opts: &aqueduct_log::Options) -> (String, Option<u64>) {
    for read_only in [true, false] {
        let opts = aqueduct_log::Options {
            read_only,
            ..opts.clone()
        };
        match Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts) {
            Ok((log, _)) => panic!(
                "opened (read-only: {read_only}) with {} records",
                log.replay(0, |_| Ok(())).unwrap()
            ),
            Err(Error::Inconsistent {
                problem, cut_at, ..
            }) if !read_only => return (problem, cut_at),
            Err(Error::Inconsistent { .. }) => {}
            Err(other) => panic!("expected a refusal of an incomplete log, got {other}"),
        }
    }
    unreachable!()
}

/// Copies a file durably under another name.
fn copy_file(storage: &SimStorage, from: &str, to: &str) {
    let bytes = storage.contents(from).unwrap();
    let f = storage.create(to).unwrap();
    f.write_at(&bytes, 0).unwrap();
    f.sync().unwrap();
    storage.sync_dir().unwrap();
}

#[test]
fn a_missing_segment_refuses_to_open_and_names_the_range() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    // Which segment goes: the oldest, one in the middle, the active one.
    for victim in ["oldest", "middle", "active"] {
        let storage = SimStorage::new(30);
        let log = open_sim(&storage, &opts);
        fill(&log, 200, "a");
        let segs = log.segments();
        assert!(segs.len() >= 4);
        drop(log);
        let s = match victim {
            "oldest" => &segs[0],
            "middle" => &segs[2],
            _ => segs.last().unwrap(),
        };
        storage.delete(&data_name(s.base));
        storage.delete(&index_name(s.base));
        let (problem, cut_at) = refusal(&storage, &opts);
        assert!(problem.contains(&data_name(s.base)), "{victim}: {problem}");
        assert!(problem.contains("is missing"), "{victim}: {problem}");
        if victim != "active" {
            assert!(
                problem.contains(&format!("LSN {} to {}", s.first_lsn, s.last_lsn)),
                "{victim}: {problem}"
            );
        }
        if victim == "oldest" {
            assert!(problem.contains("nothing was purged up to it"), "{problem}");
        }
        assert_eq!(cut_at, Some(s.first_lsn.max(s.base)), "{victim}");
        let err = refusal_message(&storage, &opts);
        assert!(err.contains("restore the file"), "{err}");
        assert!(
            err.contains(&format!(
                "aqueduct wal truncate <dir> --at {}",
                s.first_lsn.max(s.base)
            )),
            "{err}"
        );
    }
}

fn refusal_message(storage: &Arc<SimStorage>, opts: &aqueduct_log::Options) -> String {
    match Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts.clone()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn a_renamed_or_duplicated_segment_is_refused() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    for how in ["renamed", "duplicated", "duplicated below"] {
        let storage = SimStorage::new(31);
        let log = open_sim(&storage, &opts);
        fill(&log, 200, "a");
        let segs = log.segments();
        drop(log);
        let from = data_name(segs[1].base);
        let to = match how {
            "duplicated below" => data_name(segs[1].base - 1),
            _ => data_name(segs[1].base + 1),
        };
        match how {
            "renamed" => {
                storage.rename(&from, &to).unwrap();
                storage.sync_dir().unwrap();
            }
            _ => copy_file(&storage, &from, &to),
        }
        let (problem, _) = refusal(&storage, &opts);
        assert!(problem.contains(&to), "{how}: {problem}");
        assert!(problem.contains("renamed or copied"), "{how}: {problem}");
    }
}

#[test]
fn a_segment_restored_from_an_older_copy_is_refused() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    // "rewritten": an older generation of a segment compaction rewrote;
    // "merged": the first segment as it was before a merge absorbed the next;
    // "sealed": a copy of the then active segment, taken before it was sealed.
    for case in ["rewritten", "merged", "sealed"] {
        let storage = SimStorage::new(32);
        let log = open_sim(&storage, &opts);
        let batches = build_compactable(&log);
        let segs = log.segments();
        let (victim, old) = match case {
            "sealed" => {
                let active = segs.last().unwrap().clone();
                let copy = storage.contents(&data_name(active.base)).unwrap();
                log.append(&[put("more", "after the copy")]).unwrap();
                log.seal_active().unwrap();
                (active, copy)
            }
            _ => {
                log.seal_active().unwrap();
                let copies: Vec<_> = log
                    .segments()
                    .iter()
                    .map(|s| (s.clone(), storage.contents(&data_name(s.base)).unwrap()))
                    .collect();
                let report = log.compact().unwrap();
                assert!(report.segments_merged > 0 && report.segments_rewritten > 0);
                let after = log.segments();
                let present = |base| after.iter().any(|a| a.base == base);
                let pick = (0..copies.len() - 1)
                    .find(|&i| {
                        let (s, next) = (&copies[i].0, &copies[i + 1].0);
                        let changed = after
                            .iter()
                            .any(|a| a.base == s.base && a.records != s.records);
                        match case {
                            "merged" => present(s.base) && !present(next.base),
                            _ => changed,
                        }
                    })
                    .map(|i| copies[i].clone());
                pick.unwrap_or_else(|| panic!("no segment was {case}"))
            }
        };
        drop(log);
        let _ = batches;
        let name = data_name(victim.base);
        storage.delete(&name);
        let f = storage.create(&name).unwrap();
        f.write_at(&old, 0).unwrap();
        f.sync().unwrap();
        storage.sync_dir().unwrap();
        let (problem, cut_at) = refusal(&storage, &opts);
        assert!(problem.contains(&name), "{case}: {problem}");
        let expected = match case {
            "sealed" => "but the log sealed it at",
            _ => "is an older version of that segment",
        };
        assert!(problem.contains(expected), "{case}: {problem}");
        assert!(cut_at.is_some(), "{case}");
    }
}

#[test]
fn purged_merged_and_empty_logs_open() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    // An empty log, reopened.
    let storage = SimStorage::new(33);
    drop(open_sim(&storage, &opts));
    let log = open_sim(&storage, &opts);
    assert_eq!(log.next_lsn(), 1);
    // Compacted and merged, then the oldest segments purged.
    let mut batches = build_compactable(&log);
    log.seal_active().unwrap();
    log.compact().unwrap();
    batches.extend(fill(&log, 200, "b"));
    drop(log);
    let log = open_sim(&storage, &opts);
    assert_eq!(replay_state(&log), State::of_batches(&batches));
    let segs = log.segments();
    assert!(segs.len() >= 3);
    log.purge_before(segs[1].first_lsn, 1).unwrap();
    drop(log);
    let log = open_sim(&storage, &opts);
    assert_eq!(log.first_lsn(), segs[1].first_lsn);
    // Every sealed segment purged.
    let next = log.next_lsn();
    log.purge_before(next, 1).unwrap();
    drop(log);
    let log = open_sim(&storage, &opts);
    assert_eq!(log.next_lsn(), next);
    assert_eq!(log.append_one(put("k", "v")).unwrap(), next);
}

#[test]
fn crash_at_every_step_of_seal_purge_and_truncate_leaves_a_log_that_opens() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    type Step = fn(&Log, &[aqueduct_log::SegmentStat]);
    let steps: [(&str, Step); 4] = [
        ("seal", |log, _| log.seal_active().unwrap_or(())),
        ("purge", |log, segs| {
            let _ = log.purge_before(segs[2].first_lsn, 1);
        }),
        ("truncate", |log, segs| {
            let _ = log.truncate_after(segs[1].first_lsn + 2);
        }),
        ("truncate everything", |log, _| {
            let _ = log.truncate_after(0);
        }),
    ];
    for (what, step) in steps {
        let ops = {
            let storage = SimStorage::new(40);
            let log = open_sim(&storage, &opts);
            fill(&log, 200, "a");
            let segs = log.segments();
            let before = storage.ops();
            step(&log, &segs);
            storage.ops() - before
        };
        assert!(ops > 3, "{what} did real work ({ops} operations)");
        for n in 1..=ops + 1 {
            let storage = SimStorage::new(200 + n);
            let log = open_sim(&storage, &opts);
            fill(&log, 200, "a");
            let segs = log.segments();
            storage.fail_in(n, Fault::Crash);
            step(&log, &segs);
            drop(log);
            storage.restart();
            let log = Log::open_with_storage(storage.clone() as Arc<dyn Storage>, opts.clone())
                .unwrap_or_else(|e| panic!("{what}, crash at operation {n}: {e}"))
                .0;
            // The records left are a prefix of the log from some LSN on.
            let lsns: Vec<u64> = log.reader(0).map(|r| r.unwrap().lsn).collect();
            if let (Some(&first), Some(&last)) = (lsns.first(), lsns.last()) {
                assert_eq!(lsns, (first..=last).collect::<Vec<_>>(), "{what}, {n}");
            }
            // And it goes on working, across another reopen.
            log.append_one(put("after", "crash")).unwrap();
            log.seal_active().unwrap();
            drop(log);
            open_sim(&storage, &opts);
        }
    }
}

#[test]
fn a_log_of_format_version_1_opens_and_gets_a_manifest() {
    let opts = sim_options(SyncPolicy::Always, SEG);
    let storage = SimStorage::new(34);
    let log = open_sim(&storage, &opts);
    let batches = fill(&log, 200, "a");
    let segs = log.segments();
    drop(log);
    // What a build of format version 1 left: no manifest, version 1 headers.
    storage.delete(MANIFEST_NAME);
    for s in &segs {
        let name = data_name(s.base);
        let mut bytes = storage.contents(&name).unwrap();
        bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[0..44]);
        bytes[44..48].copy_from_slice(&crc.to_le_bytes());
        storage.delete(&name);
        let f = storage.create(&name).unwrap();
        f.write_at(&bytes, 0).unwrap();
        f.sync().unwrap();
    }
    storage.sync_dir().unwrap();
    // A read-only open leaves it as it is.
    let ro = aqueduct_log::Options {
        read_only: true,
        ..opts.clone()
    };
    let (log, _) = Log::open_with_storage(storage.clone() as Arc<dyn Storage>, ro).unwrap();
    assert_eq!(replay_state(&log), State::of_batches(&batches));
    drop(log);
    assert!(storage.contents(MANIFEST_NAME).is_none());
    // A writable open upgrades it: from now on a missing segment is caught.
    let log = open_sim(&storage, &opts);
    assert_eq!(replay_state(&log), State::of_batches(&batches));
    drop(log);
    assert!(storage.contents(MANIFEST_NAME).is_some());
    storage.delete(&data_name(segs[1].base));
    let (problem, _) = refusal(&storage, &opts);
    assert!(problem.contains("is missing"), "{problem}");
}
