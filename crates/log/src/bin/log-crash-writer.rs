//! A log writer to be killed: `tests/crash_kill9.rs` runs it, sends it
//! SIGKILL at a random moment, and checks that the log kept every batch it
//! acknowledged.
//!
//! ```text
//! log-crash-writer DIR ROUND [THREADS]
//! ```
//!
//! Opens DIR with `SyncPolicy::Always`, 256 KiB segments and background
//! compaction every 50 ms (default retention), then appends from THREADS
//! threads (default 3), each up to [`MAX_BATCHES_PER_THREAD`] batches, and
//! waits to be killed. After each acknowledged batch it prints, and flushes,
//!
//! ```text
//! ack <first_lsn> <last_lsn> <checksum> <thread> <seq>
//! ```
//!
//! where `<checksum>` covers the batch's contents and `<thread> <seq>` name
//! it: the contents are a pure function of (ROUND, thread, seq), see
//! [`batch`], so the test recomputes exactly what each line acknowledges. The
//! test compiles this file as a module to share that function.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aqueduct_log::{Log, NewRecord, Options, RecordKind, Retention, SyncPolicy};

pub const SEGMENT_BYTES: u64 = 256 * 1024;
/// Keys shared by every thread and round, overwritten and deleted, so
/// compaction has work and the final state of each depends on LSN order.
pub const HOT_KEYS: u64 = 8;
pub const COMPACTION_PERIOD: Duration = Duration::from_millis(50);
/// Bounds one run's work where syncs are nearly free (tmpfs), so the test's
/// time stays bounded; with real syncs a thread rarely gets this far before
/// the kill. A writer that stopped still compacts in the background.
pub const MAX_BATCHES_PER_THREAD: u64 = 600;

pub fn options() -> Options {
    Options {
        sync: SyncPolicy::Always,
        segment_bytes: SEGMENT_BYTES,
        retention: Retention::default(),
        read_only: false,
    }
}

/// Which batch a record belongs to, and its place in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId {
    pub round: u64,
    pub thread: u64,
    pub seq: u64,
}

/// Batch `id`: 1 to 4 records. The first record always has a key of its own
/// (`u/...`), a put that compaction never drops, so whether the batch is in
/// the log is always visible. The others are unique puts too, or puts and
/// deletes of the hot keys (`h/<n>`). Every body starts with
/// `<round>/<thread>/<seq>/<index>/`, so any record found names its batch.
pub fn batch(id: BatchId) -> Vec<NewRecord> {
    let h = mix(mix(mix(id.round) ^ id.thread) ^ id.seq);
    let len = 1 + (h % 4) as usize;
    (0..len).map(|i| record(id, i, mix(h ^ i as u64))).collect()
}

fn record(id: BatchId, index: usize, h: u64) -> NewRecord {
    let tag = format!("{}/{}/{}/{index}/", id.round, id.thread, id.seq);
    let body = format!("{tag}{}", "x".repeat((h >> 32) as usize % 300));
    let hot = format!("h/{}", (h >> 16) % HOT_KEYS);
    match h % 8 {
        _ if index == 0 => NewRecord::put(format!("u/{tag}"), body),
        0 | 1 => NewRecord::put(hot, body),
        // A delete carries its tag too, so it can be traced to its batch.
        2 => NewRecord::new(RecordKind::Delete, hot, tag),
        _ => NewRecord::put(format!("u/{tag}"), body),
    }
}

/// The batch a record's body names, and the record's index in it.
pub fn parse_tag(body: &[u8]) -> Option<(BatchId, usize)> {
    let text = std::str::from_utf8(body).ok()?;
    let mut parts = text.splitn(5, '/');
    let mut next = || parts.next()?.parse::<u64>().ok();
    let id = BatchId {
        round: next()?,
        thread: next()?,
        seq: next()?,
    };
    Some((id, next()? as usize))
}

/// FNV-1a over every record's kind, key and body, with lengths, so no two
/// different batches share a checksum by concatenation.
pub fn checksum(batch: &[NewRecord]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for r in batch {
        eat(&[r.kind.to_byte()]);
        eat(&(r.key.len() as u64).to_le_bytes());
        eat(&r.key);
        eat(&(r.body.len() as u64).to_le_bytes());
        eat(&r.body);
    }
    h
}

/// SplitMix64's finaliser: a cheap, well-mixed deterministic hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, round, threads) = match args.as_slice() {
        [dir, round] => (dir.clone(), round.parse().ok(), Some(3)),
        [dir, round, threads] => (dir.clone(), round.parse().ok(), threads.parse().ok()),
        _ => (String::new(), None, None),
    };
    let (Some(round), Some(threads)) = (round, threads) else {
        eprintln!("usage: log-crash-writer DIR ROUND [THREADS]");
        std::process::exit(2);
    };
    let log = match Log::open(&dir, options()) {
        Ok((log, _)) => log,
        Err(e) => {
            eprintln!("log-crash-writer: {e}");
            std::process::exit(1);
        }
    };
    log.start_background_compaction(COMPACTION_PERIOD);
    let stdout = Arc::new(Mutex::new(std::io::stdout()));
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let log = log.clone();
            let stdout = stdout.clone();
            std::thread::spawn(move || write_batches(&log, round, thread, &stdout))
        })
        .collect();
    for w in workers {
        if w.join().is_err() {
            std::process::exit(1);
        }
    }
    // The test expects to kill us: wait for it.
    loop {
        std::thread::park();
    }
}

/// Appends this thread's batches; a line is printed only after `append`
/// returned, i.e. after the batch was synced.
fn write_batches(log: &Log, round: u64, thread: u64, stdout: &Mutex<std::io::Stdout>) {
    for seq in 0..MAX_BATCHES_PER_THREAD {
        let records = batch(BatchId { round, thread, seq });
        let range = match log.append(&records) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("log-crash-writer: append failed: {e}");
                std::process::exit(1);
            }
        };
        let line = format!(
            "ack {} {} {} {thread} {seq}\n",
            range.first,
            range.last,
            checksum(&records)
        );
        let mut out = stdout.lock().expect("stdout lock");
        if out
            .write_all(line.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            std::process::exit(1); // the test stopped reading
        }
    }
}
