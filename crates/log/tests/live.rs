//! `LiveLogReader`: following a log that another handle writes, seals,
//! compacts and merges, without its lock and without writing anything.
//!
//! No test sleeps for a time: waits are on conditions, with a deadline.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aqueduct_log::live::LiveLogReader;
use aqueduct_log::record::FLAG_BATCH_CONTINUES;
use aqueduct_log::segment::{data_name, parse_data_name};
use aqueduct_log::{
    Error, FsStorage, Log, Lsn, NewRecord, Options, Record, RecordKind, RecordView, Storage,
    StorageFile, SyncPolicy,
};

/// No wait in these tests may take longer than this.
const DEADLINE: Duration = Duration::from_secs(60);

fn opts(segment_bytes: u64) -> Options {
    Options {
        sync: SyncPolicy::Never,
        segment_bytes,
        ..Default::default()
    }
}

/// A small deterministic generator, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A directory the reader may only read: every change panics, and files
/// come from `open_read` only.
struct ReadOnlyDir(FsStorage);

impl Storage for ReadOnlyDir {
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        panic!("the live reader opened {name} for writing")
    }
    fn open_read(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(NoWrites(self.0.open_read(name)?)))
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        panic!("the live reader created {name}")
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        panic!("the live reader renamed {from} to {to}")
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        panic!("the live reader removed {name}")
    }
    fn sync_dir(&self) -> io::Result<()> {
        panic!("the live reader synced the directory")
    }
    fn describe(&self, name: &str) -> String {
        self.0.describe(name)
    }
}

struct NoWrites(Arc<dyn StorageFile>);

impl StorageFile for NoWrites {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        panic!("the live reader wrote to a file")
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn sync(&self) -> io::Result<()> {
        panic!("the live reader synced a file")
    }
    fn truncate(&self, _: u64) -> io::Result<()> {
        panic!("the live reader truncated a file")
    }
}

fn read_only_reader(dir: &Path, from: Lsn) -> LiveLogReader {
    let storage = ReadOnlyDir(FsStorage::existing(dir).unwrap());
    LiveLogReader::with_storage(Arc::new(storage), from).unwrap()
}

/// What was written at one LSN: the batch it belongs to and the record.
#[derive(Clone, Debug)]
struct Written {
    batch: u64,
    record: NewRecord,
    ends_batch: bool,
}

type WrittenLog = BTreeMap<Lsn, Written>;

fn note_batch(log: &mut WrittenLog, batch_no: u64, first: Lsn, batch: &[NewRecord]) {
    for (i, r) in batch.iter().enumerate() {
        log.insert(
            first + i as u64,
            Written {
                batch: batch_no,
                record: r.clone(),
                ends_batch: i + 1 == batch.len(),
            },
        );
    }
}

/// The reader's side of a concurrent run: follows from LSN 1 until it has
/// passed `last` (published by the writer when done), publishing its
/// position as it goes. Returns the batches as handed out.
fn follow(
    mut reader: LiveLogReader,
    position: Arc<AtomicU64>,
    last: Arc<Mutex<Option<Lsn>>>,
) -> Vec<Vec<Record>> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    loop {
        let done = *last.lock().unwrap();
        if done.is_some_and(|l| reader.position() > l) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "the reader is stuck at LSN {} (writer done at {done:?})",
            reader.position()
        );
        let batch = reader.next_batch(64, Duration::from_millis(100)).unwrap();
        if !batch.is_empty() {
            got.push(batch);
        }
        position.store(reader.position(), Ordering::Release);
    }
}

/// Waits until the reader has read everything up to `lsn`.
fn await_reader(position: &AtomicU64, lsn: Lsn) {
    let deadline = Instant::now() + DEADLINE;
    while position.load(Ordering::Acquire) <= lsn {
        assert!(Instant::now() < deadline, "the reader never reached {lsn}");
        std::thread::yield_now();
    }
}

/// The handed-out records: each `next_batch` result ends on a batch end,
/// and LSNs strictly increase across all of them.
fn flatten_checked(got: &[Vec<Record>]) -> Vec<Record> {
    let mut all: Vec<Record> = Vec::new();
    for b in got {
        assert!(!b.is_empty());
        assert!(
            b.last().unwrap().ends_batch(),
            "a result ends inside a batch at LSN {}",
            b.last().unwrap().lsn
        );
        for r in b {
            if let Some(p) = all.last() {
                assert!(r.lsn > p.lsn, "LSN {} handed out after {}", r.lsn, p.lsn);
            }
            all.push(r.clone());
        }
    }
    all
}

fn same_content(r: &Record, w: &Written) -> bool {
    r.kind == w.record.kind && r.key == w.record.key && r.body == w.record.body
}

/// Unique keys, so compaction drops nothing (it merges small segments):
/// the reader must hand out exactly what was written, batch for batch,
/// while segments roll under it and are merged behind and under it.
#[test]
fn follows_every_record_across_rolls_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), opts(2048)).unwrap();
    let position = Arc::new(AtomicU64::new(1));
    let last = Arc::new(Mutex::new(None));
    // The writer holds the directory's lock; the reader needs none.
    let reader = read_only_reader(dir.path(), 0);
    let follower = {
        let (position, last) = (position.clone(), last.clone());
        std::thread::spawn(move || follow(reader, position, last))
    };

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut written = WrittenLog::new();
    let mut merged = 0;
    for i in 0..1500u64 {
        let n = 1 + rng.below(3);
        let batch: Vec<NewRecord> = (0..n)
            .map(|j| {
                let body = format!("{i}/{j}/{}", "x".repeat(rng.below(150) as usize));
                if rng.below(10) == 0 {
                    NewRecord::new(RecordKind::Schema, format!("s{i}/{j}"), body)
                } else {
                    NewRecord::put(format!("k{i}/{j}"), body)
                }
            })
            .collect();
        let r = log.append(&batch).unwrap();
        note_batch(&mut written, i, r.first, &batch);
        if rng.below(15) == 0 {
            log.seal_active().unwrap(); // a small segment, for merges
        }
        if i % 40 == 39 {
            merged += log.compact().unwrap().segments_merged;
        }
        if i % 50 == 25 {
            // The reader reaches the end of the active segment, so the next
            // rolls happen while it waits there.
            await_reader(&position, r.last);
        }
    }
    let final_lsn = *written.keys().last().unwrap();
    *last.lock().unwrap() = Some(final_lsn);
    let got = follower.join().unwrap();
    let all = flatten_checked(&got);

    assert!(merged > 0, "compaction merged segments during the run");
    assert!(log.segments().len() > 10, "the log rolled segments");
    let lsns: Vec<Lsn> = all.iter().map(|r| r.lsn).collect();
    let expected: Vec<Lsn> = written.keys().copied().collect();
    assert_eq!(lsns, expected, "every record, in LSN order, exactly once");
    for r in &all {
        let w = &written[&r.lsn];
        assert!(same_content(r, w), "LSN {} differs", r.lsn);
        assert_eq!(r.ends_batch(), w.ends_batch, "batch flags of LSN {}", r.lsn);
    }
    // Batch boundaries are those written: every result is whole batches.
    let mut open = None;
    for b in &got {
        for r in b {
            let w = &written[&r.lsn];
            if let Some(batch) = open {
                assert_eq!(w.batch, batch, "a batch was split at LSN {}", r.lsn);
            }
            open = (!r.ends_batch()).then_some(w.batch);
        }
    }
}

/// Overwrites and deletes, so compaction drops records, possibly before
/// the reader reaches them. What must still hold, and why:
/// - order and no duplicates (the reader's position is an LSN);
/// - each record handed out is the one written at its LSN (compaction
///   keeps LSNs and contents; it may only clear BATCH_CONTINUES on the new
///   last record of a batch whose later records it dropped);
/// - a batch is never split over two results, nor mixed with another;
/// - every record of a kind compaction keeps (schema here) is seen;
/// - the last put of each key is seen (nothing newer exists, so no pass
///   drops it), hence the reader's last value of a key whose final write
///   is a put is the final value. A key whose final write is a delete has
///   no such promise: a lagging reader may have seen an older put whose
///   tombstone compaction dropped together with it.
#[test]
fn follows_with_overwrites_under_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), opts(2048)).unwrap();
    let position = Arc::new(AtomicU64::new(1));
    let last = Arc::new(Mutex::new(None));
    let reader = read_only_reader(dir.path(), 0);
    let follower = {
        let (position, last) = (position.clone(), last.clone());
        std::thread::spawn(move || follow(reader, position, last))
    };

    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut written = WrittenLog::new();
    let mut dropped = 0;
    for i in 0..800u64 {
        let n = 1 + rng.below(3);
        let batch: Vec<NewRecord> = (0..n)
            .map(|j| {
                let key = format!("k{}", rng.below(25));
                match rng.below(12) {
                    0 => NewRecord::delete(key),
                    1 => NewRecord::new(RecordKind::Schema, format!("s{i}/{j}"), "ddl"),
                    _ => NewRecord::put(
                        key,
                        format!("{i}/{j}/{}", "y".repeat(rng.below(100) as usize)),
                    ),
                }
            })
            .collect();
        let r = log.append(&batch).unwrap();
        note_batch(&mut written, i, r.first, &batch);
        if rng.below(15) == 0 {
            log.seal_active().unwrap();
        }
        if i % 60 == 59 {
            let report = log.compact().unwrap();
            dropped += report.records_before - report.records_after;
        }
        if i % 80 == 40 {
            await_reader(&position, r.last);
        }
    }
    let final_lsn = *written.keys().last().unwrap();
    *last.lock().unwrap() = Some(final_lsn);
    let got = follower.join().unwrap();
    let all = flatten_checked(&got);
    assert!(dropped > 0, "compaction dropped records during the run");

    for r in &all {
        let w = written.get(&r.lsn).expect("a written LSN");
        assert!(same_content(r, w), "LSN {} differs", r.lsn);
        assert!(
            r.ends_batch() || !w.ends_batch,
            "LSN {} continues a batch that ended there",
            r.lsn
        );
    }
    let mut open = None;
    for b in &got {
        for r in b {
            let w = &written[&r.lsn];
            if let Some(batch) = open {
                assert_eq!(w.batch, batch, "a batch was split at LSN {}", r.lsn);
            }
            open = (!r.ends_batch()).then_some(w.batch);
        }
    }
    let seen: HashMap<Lsn, &Record> = all.iter().map(|r| (r.lsn, r)).collect();
    for (lsn, w) in &written {
        if w.record.kind == RecordKind::Schema {
            assert!(seen.contains_key(lsn), "schema record {lsn} missed");
        }
    }
    let mut final_op: BTreeMap<Vec<u8>, (Lsn, RecordKind)> = BTreeMap::new();
    for (lsn, w) in &written {
        if w.record.kind.is_compactable() {
            final_op.insert(w.record.key.clone(), (*lsn, w.record.kind));
        }
    }
    let mut last_seen: HashMap<&[u8], &Record> = HashMap::new();
    for r in &all {
        if r.kind.is_compactable() {
            last_seen.insert(&r.key, r);
        }
    }
    for (key, (lsn, kind)) in &final_op {
        if *kind == RecordKind::Put {
            assert!(
                seen.contains_key(lsn),
                "the last put of a key, {lsn}, missed"
            );
            assert_eq!(last_seen[key.as_slice()].lsn, *lsn);
        }
    }
}

/// Deterministic versions of the races above: the reader stops in the
/// middle of a sealed segment, compaction merges or rewrites that segment
/// (renaming a new file over it, removing the absorbed one), and the
/// reader goes on. Then a reader starting at every LSN of the compacted
/// log reads what the log itself reads from there.
#[test]
fn a_segment_compacted_under_the_reader_is_read_on() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), opts(64 * 1024)).unwrap();
    let mut written = WrittenLog::new();
    for i in 0..60u64 {
        let batch = vec![
            NewRecord::put(format!("k{}", i % 7), format!("v{i}")),
            NewRecord::put(format!("u{i}"), format!("w{i}")),
        ];
        let r = log.append(&batch).unwrap();
        note_batch(&mut written, i, r.first, &batch);
        if i % 6 == 5 {
            log.seal_active().unwrap();
        }
    }
    // Taken while the writer holds the lock: the reader needs none.
    let mut reader = LiveLogReader::open(dir.path(), 0).unwrap();
    let mut all = reader.poll(3).unwrap();
    assert_eq!(all.len(), 4, "whole batches: two of two records");
    let report = log.compact().unwrap();
    assert!(report.segments_rewritten + report.segments_merged > 0);
    loop {
        let got = reader.poll(5).unwrap();
        if got.is_empty() {
            break;
        }
        all.extend(got);
    }
    let all = flatten_checked(&[all]);
    assert_eq!(all.first().unwrap().lsn, 1);
    for r in &all {
        assert!(same_content(r, &written[&r.lsn]), "LSN {}", r.lsn);
    }
    // The first segment was read from the file opened before compaction:
    // all of it (12 records), dropped ones included.
    assert!(all.iter().take(12).map(|r| r.lsn).eq(1..=12));
    assert_eq!(all.last().unwrap().lsn, *written.keys().last().unwrap());

    // From any LSN: what the log reads from there.
    let last = *written.keys().last().unwrap();
    for from in 1..=last + 1 {
        let want: Vec<Record> = log.reader(from).map(|r| r.unwrap()).collect();
        let mut reader = LiveLogReader::open(dir.path(), from).unwrap();
        let mut got = Vec::new();
        loop {
            let b = reader.poll(1000).unwrap();
            if b.is_empty() {
                break;
            }
            got.extend(b);
        }
        assert_eq!(got, want, "from LSN {from}");
    }
}

/// The active segment's file, by hand.
fn active_file(dir: &Path) -> PathBuf {
    let base = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| parse_data_name(e.unwrap().file_name().to_str()?))
        .max()
        .unwrap();
    dir.join(data_name(base))
}

fn encoded(lsn: Lsn, key: &str, body: &str, continues: bool) -> Vec<u8> {
    let mut out = Vec::new();
    RecordView {
        lsn,
        term: 0,
        timestamp_micros: 1,
        kind: RecordKind::Put,
        flags: if continues { FLAG_BATCH_CONTINUES } else { 0 },
        key: key.as_bytes(),
        body: body.as_bytes(),
    }
    .encode_into(&mut out);
    out
}

/// Polls a few times and checks nothing comes and nothing fails.
fn assert_waits(reader: &mut LiveLogReader) {
    for _ in 0..5 {
        assert_eq!(reader.poll(100).unwrap(), vec![]);
    }
    assert!(reader
        .next_batch(100, Duration::from_millis(20))
        .unwrap()
        .is_empty());
}

/// A record or batch still being written at the end of the active segment
/// is "not yet there": the reader waits, reports nothing wrong, and hands
/// it out once complete. Bytes that stay damaged are reported.
#[test]
fn a_partly_written_tail_is_waited_for_not_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), opts(1 << 20)).unwrap();
    log.append(&[NewRecord::put("a", "1")]).unwrap();
    drop(log);
    // This test is the writer from here on.
    let path = active_file(dir.path());
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    let mut end = file.metadata().unwrap().len();
    let mut reader = LiveLogReader::open(dir.path(), 0).unwrap();
    assert_eq!(reader.poll(100).unwrap().len(), 1);

    // Half a record: the file ends inside it.
    let rec2 = encoded(2, "b", "second", false);
    let half = rec2.len() / 2;
    file.write_all_at(&rec2[..half], end).unwrap();
    assert_waits(&mut reader);
    // One byte more: still short.
    file.write_all_at(&rec2[half..half + 1], end + half as u64)
        .unwrap();
    assert_waits(&mut reader);
    file.write_all_at(&rec2[half + 1..], end + half as u64 + 1)
        .unwrap();
    let got = reader.poll(100).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].lsn, got[0].body.as_slice()), (2, &b"second"[..]));
    end += rec2.len() as u64;

    // The file grew by zeroes that the data has not filled yet.
    let rec3 = encoded(3, "c", "third", false);
    file.write_all_at(&vec![0u8; rec3.len()], end).unwrap();
    assert_waits(&mut reader);
    file.write_all_at(&rec3[..20], end).unwrap();
    assert_waits(&mut reader);
    file.write_all_at(&rec3, end).unwrap();
    assert_eq!(reader.poll(100).unwrap()[0].lsn, 3);
    end += rec3.len() as u64;

    // A batch whose last record is not there yet is not handed out.
    let rec4 = encoded(4, "d", "fourth", true);
    let rec5 = encoded(5, "e", "fifth", false);
    file.write_all_at(&rec4, end).unwrap();
    assert_waits(&mut reader);
    file.write_all_at(&rec5[..30], end + rec4.len() as u64)
        .unwrap();
    assert_waits(&mut reader);
    file.write_all_at(&rec5, end + rec4.len() as u64).unwrap();
    let got = reader.poll(100).unwrap();
    assert_eq!(got.iter().map(|r| r.lsn).collect::<Vec<_>>(), [4, 5]);
    end += (rec4.len() + rec5.len()) as u64;

    // A complete record, every byte written, one of them wrong: damage.
    // It is reported once it has stayed so for the grace period.
    let mut rec6 = encoded(6, "f", "sixth", false);
    let at = rec6.len() - 3;
    rec6[at] ^= 0x40;
    file.write_all_at(&rec6, end).unwrap();
    let deadline = Instant::now() + DEADLINE;
    let err = loop {
        assert!(Instant::now() < deadline, "damage never reported");
        match reader.next_batch(100, Duration::from_millis(200)) {
            Ok(got) => assert!(got.is_empty()),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::Corrupt { lsn: Some(6), .. }), "{err}");
}

/// A reader at the end of the active segment moves on when it is sealed
/// and a new one started, and the log's lock is not needed for any of it.
#[test]
fn the_reader_follows_a_roll() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), opts(1 << 20)).unwrap();
    log.append(&[NewRecord::put("a", "1")]).unwrap();
    let mut reader = LiveLogReader::open(dir.path(), 0).unwrap();
    assert_eq!(reader.poll(10).unwrap().len(), 1);
    assert!(reader.poll(10).unwrap().is_empty());
    log.seal_active().unwrap();
    assert!(reader.poll(10).unwrap().is_empty());
    log.append(&[NewRecord::put("b", "2"), NewRecord::put("c", "3")])
        .unwrap();
    log.seal_active().unwrap();
    log.append(&[NewRecord::put("d", "4")]).unwrap();
    let got = reader.next_batch(10, DEADLINE).unwrap();
    assert_eq!(got.iter().map(|r| r.lsn).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(reader.position(), 5);
}
