//! A real process killed with SIGKILL, 50 times over the same directory.
//!
//! Each round runs `log-crash-writer` (several threads appending under
//! `SyncPolicy::Always`, background compaction on), kills it after a random
//! 20 to 150 ms drawn from a seeded RNG, reopens the log here and checks:
//! - the log opens (a torn tail is cut, never reported as corruption) and a
//!   full replay verifies every record;
//! - every acknowledged batch is there with the acknowledged contents; only
//!   records compaction may drop (puts and deletes of hot keys) may be gone;
//! - every other record belongs to a batch that is there whole (an
//!   unacknowledged batch may survive, all or nothing), and such a batch is
//!   required from then on like an acknowledged one;
//! - the hot keys' final values equal what those batches, in LSN order,
//!   give: compaction changed no state.
//!
//! The next round appends after what the previous one left. This tests
//! process crashes only: data written to the OS survives kill -9 whatever the
//! sync policy, so the test passes with `SyncPolicy::Never` too. Power loss is
//! the simulated storage's job (`sim.rs`).

#[allow(dead_code)] // the writer's `main` and anything else the test does not use
#[path = "../src/bin/log-crash-writer.rs"]
mod writer;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use aqueduct_log::{Log, Lsn, NewRecord, Record, RecordKind};
use rand::{rngs::StdRng, Rng, SeedableRng};

use writer::{batch, checksum, parse_tag, BatchId};

const ROUNDS: u64 = 50;
const THREADS: u64 = 3;
const SEED: u64 = 0x6b69_6c6c_2d39;

/// One `ack` line of the writer.
#[derive(Debug)]
struct Ack {
    first: Lsn,
    last: Lsn,
    checksum: u64,
    thread: u64,
    seq: u64,
}

/// A batch that must be in the log: acknowledged, or found whole after a crash.
struct KnownBatch {
    id: BatchId,
    records: Vec<NewRecord>,
}

/// Every batch that must be in the log, by first LSN.
#[derive(Default)]
struct Known {
    by_first: BTreeMap<Lsn, KnownBatch>,
    ids: HashSet<BatchId>,
}

impl Known {
    fn add(&mut self, id: BatchId, first: Lsn, records: Vec<NewRecord>) {
        let last = first + records.len() as u64 - 1;
        if let Some((&f, b)) = self.by_first.range(..=last).next_back() {
            let end = f + b.records.len() as u64 - 1;
            assert!(
                end < first,
                "batches {:?} ({f}..={end}) and {id:?} ({first}..={last}) overlap",
                b.id
            );
        }
        assert!(self.ids.insert(id), "batch {id:?} placed twice");
        self.by_first.insert(first, KnownBatch { id, records });
    }

    fn covers(&self, lsn: Lsn) -> bool {
        self.by_first
            .range(..=lsn)
            .next_back()
            .is_some_and(|(&f, b)| lsn < f + b.records.len() as u64)
    }
}

#[derive(Debug, Default)]
struct Stats {
    acked_batches: u64,
    rounds_with_acks: u64,
    unacked_batches_found: u64,
    rounds_with_torn_tail: u64,
    incomplete_batch_records_dropped: u64,
    records_at_end: usize,
}

#[test]
fn kill9_never_loses_an_acknowledged_batch() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut known = Known::default();
    let mut stats = Stats::default();
    for round in 0..ROUNDS {
        let kill_after = Duration::from_millis(rng.gen_range(20..=150));
        let acks = run_and_kill(dir.path(), round, kill_after);
        stats.acked_batches += acks.len() as u64;
        stats.rounds_with_acks += u64::from(!acks.is_empty());
        for ack in acks {
            add_ack(&mut known, round, &ack);
        }
        check_log(dir.path(), &mut known, &mut stats);
    }
    eprintln!("{stats:?} in {:?}", started.elapsed());
    // Guards against a test that passes because nothing happened.
    assert!(stats.acked_batches >= ROUNDS * 20, "{stats:?}");
    assert!(stats.rounds_with_acks >= ROUNDS * 8 / 10, "{stats:?}");
}

/// Runs one writer, kills it with SIGKILL after `after`, returns its acks.
fn run_and_kill(dir: &Path, round: u64, after: Duration) -> Vec<Ack> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_log-crash-writer"))
        .arg(dir)
        .arg(round.to_string())
        .arg(THREADS.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting log-crash-writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || read_acks(stdout));
    std::thread::sleep(after);
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("waiting for the writer");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the writer must die by the kill, not on its own: {status}"
    );
    reader.join().expect("ack reader")
}

/// Every complete `ack` line; a line cut by the kill acknowledged nothing
/// anyone saw, so it is ignored.
fn read_acks(out: ChildStdout) -> Vec<Ack> {
    let mut reader = BufReader::new(out);
    let mut acks = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return acks,
            Ok(_) if !line.ends_with(b"\n") => return acks,
            Ok(_) => acks.push(parse_ack(&line)),
        }
    }
}

fn parse_ack(line: &[u8]) -> Ack {
    let text = std::str::from_utf8(line).expect("ASCII line");
    let f: Vec<&str> = text.split_whitespace().collect();
    let n = |i: usize| -> u64 { f[i].parse().unwrap_or_else(|_| panic!("bad line {text:?}")) };
    assert!(f.len() == 6 && f[0] == "ack", "bad line {text:?}");
    Ack {
        first: n(1),
        last: n(2),
        checksum: n(3),
        thread: n(4),
        seq: n(5),
    }
}

fn add_ack(known: &mut Known, round: u64, ack: &Ack) {
    let id = BatchId {
        round,
        thread: ack.thread,
        seq: ack.seq,
    };
    let records = batch(id);
    assert_eq!(
        checksum(&records),
        ack.checksum,
        "{ack:?} is not batch {id:?}"
    );
    assert_eq!(ack.last - ack.first + 1, records.len() as u64, "{ack:?}");
    known.add(id, ack.first, records);
}

fn check_log(dir: &Path, known: &mut Known, stats: &mut Stats) {
    let (log, report) = Log::open(dir, writer::options())
        .unwrap_or_else(|e| panic!("the log must open after kill -9: {e}"));
    stats.rounds_with_torn_tail += u64::from(report.torn_bytes_truncated > 0);
    stats.incomplete_batch_records_dropped += report.incomplete_batch_records_dropped;
    let present = replay(&log);
    stats.records_at_end = present.len();
    check_known(known, &present);
    adopt_unacknowledged(known, &present, stats);
    check_hot_state(known, &present);
}

/// Every record, in LSN order; the replay verifies every checksum.
fn replay(log: &Log) -> BTreeMap<Lsn, Record> {
    let mut present = BTreeMap::new();
    let mut prev = 0;
    log.replay(1, |r| {
        assert!(r.lsn > prev, "LSN {} after {prev}", r.lsn);
        prev = r.lsn;
        present.insert(r.lsn, r.to_owned());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("a full replay must succeed: {e}"));
    present
}

fn is_hot(r: &NewRecord) -> bool {
    r.key.starts_with(b"h/")
}

fn assert_same(got: &Record, want: &NewRecord, id: BatchId) {
    assert_eq!(
        (got.kind, &got.key, &got.body),
        (want.kind, &want.key, &want.body),
        "LSN {} does not hold what batch {id:?} wrote there",
        got.lsn
    );
}

/// Acknowledged (and adopted) batches: unique records all there, hot ones
/// there unless compacted away.
fn check_known(known: &Known, present: &BTreeMap<Lsn, Record>) {
    for (&first, b) in &known.by_first {
        for (i, want) in b.records.iter().enumerate() {
            let lsn = first + i as u64;
            match present.get(&lsn) {
                Some(got) => assert_same(got, want, b.id),
                None => assert!(
                    is_hot(want),
                    "record {i} of acknowledged batch {:?} (LSN {lsn}) is lost",
                    b.id
                ),
            }
        }
    }
}

/// Records outside known batches belong to batches written but not
/// acknowledged before the kill: each must be there whole, and is then
/// required in later rounds.
fn adopt_unacknowledged(known: &mut Known, present: &BTreeMap<Lsn, Record>, stats: &mut Stats) {
    let mut found: BTreeMap<BatchId, Lsn> = BTreeMap::new();
    for (&lsn, r) in present {
        if known.covers(lsn) {
            continue;
        }
        let (id, index) = parse_tag(&r.body)
            .unwrap_or_else(|| panic!("LSN {lsn} holds a record no batch wrote: {r:?}"));
        assert!(
            !known.ids.contains(&id),
            "LSN {lsn} holds a record of batch {id:?} outside where it was acknowledged"
        );
        let first = lsn - index as u64;
        let placed = *found.entry(id).or_insert(first);
        assert_eq!(placed, first, "batch {id:?} is scattered");
    }
    for (id, first) in found {
        let records = batch(id);
        for (i, want) in records.iter().enumerate() {
            let lsn = first + i as u64;
            match present.get(&lsn) {
                Some(got) => assert_same(got, want, id),
                None => assert!(
                    is_hot(want),
                    "unacknowledged batch {id:?} survived only in part: LSN {lsn} is missing"
                ),
            }
        }
        known.add(id, first, records);
        stats.unacked_batches_found += 1;
    }
}

/// The hot keys' values after replaying the known batches in LSN order
/// equal the values the log replays to.
fn check_hot_state(known: &Known, present: &BTreeMap<Lsn, Record>) {
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for b in known.by_first.values() {
        for r in b.records.iter().filter(|r| is_hot(r)) {
            apply(&mut want, r.kind, &r.key, &r.body);
        }
    }
    let mut got = BTreeMap::new();
    for r in present.values().filter(|r| r.key.starts_with(b"h/")) {
        apply(&mut got, r.kind, &r.key, &r.body);
    }
    assert_eq!(got, want, "the hot keys' state differs");
}

fn apply(state: &mut BTreeMap<Vec<u8>, Vec<u8>>, kind: RecordKind, key: &[u8], body: &[u8]) {
    match kind {
        RecordKind::Put => {
            state.insert(key.to_vec(), body.to_vec());
        }
        RecordKind::Delete => {
            state.remove(key);
        }
        other => panic!("the writer writes puts and deletes only, not {other:?}"),
    }
}
