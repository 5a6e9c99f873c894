//! Opening a Raft member's state over its log
//! (`aqueduct_replicate::group::prepare`): the records no entry holds are
//! removed, the tables are rebuilt only to what the group committed, and a
//! log written outside a group is refused.

use aqueduct_log::{Log, NewRecord, Options};
use aqueduct_replicate::group::entries::{EntryIndex, Kind, Meta};
use aqueduct_replicate::group::prepare;

fn batch(index: u64, first: u64, last: u64) -> Meta {
    Meta {
        index,
        term: 1,
        leader: 1,
        kind: Kind::Batch,
        first,
        last,
        membership: None,
    }
}

#[test]
fn a_log_written_outside_a_group_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path().join("log"), Options::default()).unwrap();
    log.append(&[NewRecord::put("k", "v")]).unwrap();
    let e = prepare(&dir.path().join("raft"), &log).err().unwrap();
    assert!(e.contains("outside a Raft group"), "{e}");
}

#[test]
fn records_no_entry_holds_are_removed_and_replay_stops_at_the_committed_entry() {
    let dir = tempfile::tempdir().unwrap();
    let raft = dir.path().join("raft");
    let (log, _) = Log::open(dir.path().join("log"), Options::default()).unwrap();
    for i in 0..5 {
        log.append(&[NewRecord::put(format!("k{i}"), "v")]).unwrap();
    }
    // Entries 1..=3 hold LSNs 1..=3; LSNs 4 and 5 were appended by a
    // leader that never proposed them. Entry 2 is the last known committed.
    let storage = aqueduct_log::FsStorage::new(&raft).unwrap();
    let mut index = EntryIndex::open(&storage, "entries", None).unwrap();
    index
        .append(&[batch(1, 1, 1), batch(2, 2, 2), batch(3, 3, 3)], true)
        .unwrap();
    drop(index);
    std::fs::write(
        raft.join("state.json"),
        r#"{"vote":null,"committed":{"leader_id":{"term":1,"node_id":1},"index":2},"purged":null}"#,
    )
    .unwrap();
    let prepared = prepare(&raft, &log).unwrap();
    assert_eq!(log.next_lsn(), 4, "LSNs 4 and 5 removed");
    drop(prepared);
    // An index frame past the log (its records lost in a crash) goes.
    let mut index = EntryIndex::open(&storage, "entries", None).unwrap();
    index.append(&[batch(4, 4, 6)], true).unwrap();
    drop(index);
    let prepared = prepare(&raft, &log).unwrap();
    assert_eq!(log.next_lsn(), 4);
    let index = EntryIndex::open(&storage, "entries", None).unwrap();
    assert_eq!(index.last().unwrap().index, 3, "entry 4 removed");
    drop(index);
    assert_eq!(prepared.replay_until, 2);
    // A committed id the index does not hold: replay from the start.
    std::fs::write(
        raft.join("state.json"),
        r#"{"vote":null,"committed":{"leader_id":{"term":1,"node_id":1},"index":9},"purged":null}"#,
    )
    .unwrap();
    assert_eq!(prepare(&raft, &log).unwrap().replay_until, 0);
}
