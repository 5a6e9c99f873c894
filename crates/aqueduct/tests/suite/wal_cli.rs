//! `aqueduct wal` as an operator runs it: the built binary on log directories
//! written through the `aqueduct-log` API.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use aqueduct_log::segment::{self, data_name, SEGMENT_HEADER_LEN};
use aqueduct_log::{FsStorage, Log, NewRecord, Options, Record, RecordKind, Storage, SyncPolicy};

/// A fixed record time, so output can be compared exactly.
const T0: i64 = 1_700_000_000_123_456;
const T0_TEXT: &str = "2023-11-14T22:13:20.123456Z";

fn aqueduct(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aqueduct"))
        .args(args)
        .output()
        .expect("running aqueduct")
}

/// Runs a command that must succeed; returns its stdout.
fn ok(args: &[&str]) -> String {
    let out = aqueduct(args);
    assert!(
        out.status.success(),
        "aqueduct {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs a command that must fail with `code`; returns (stdout, stderr).
fn fails(args: &[&str], code: i32) -> (String, String) {
    let out = aqueduct(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "aqueduct {args:?}:\n{stdout}{stderr}"
    );
    (stdout, stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn small_segments() -> Options {
    Options {
        sync: SyncPolicy::Never,
        segment_bytes: 4096,
        ..Options::default()
    }
}

fn open(dir: &Path) -> Log {
    Log::open(dir, small_segments()).expect("opening the log").0
}

fn rec(kind: RecordKind, key: impl Into<Vec<u8>>, body: impl Into<Vec<u8>>) -> NewRecord {
    NewRecord {
        timestamp_micros: T0,
        ..NewRecord::new(kind, key, body)
    }
}

fn put(key: impl Into<Vec<u8>>, body: impl Into<Vec<u8>>) -> NewRecord {
    rec(RecordKind::Put, key, body)
}

fn all_records(log: &Log) -> Vec<Record> {
    log.reader(1).map(|r| r.expect("reading")).collect()
}

fn records_of(dir: &Path) -> Vec<Record> {
    all_records(&open(dir))
}

/// Last value per key, and the non-compactable records' (key, body) in order.
type State = (BTreeMap<Vec<u8>, Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>);

/// What the log replays to: last value per key, deletes applied, and the
/// non-compactable records in order.
fn state(records: &[Record]) -> State {
    let mut kv = BTreeMap::new();
    let mut others = Vec::new();
    for r in records {
        match r.kind {
            RecordKind::Put => {
                kv.insert(r.key.clone(), r.body.clone());
            }
            RecordKind::Delete => {
                kv.remove(&r.key);
            }
            _ => others.push((r.key.clone(), r.body.clone())),
        }
    }
    (kv, others)
}

/// `name: value` from `stat` output.
fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name:?} in\n{out}"))
        .trim()
}

/// (LSN, offset) of every record of segment `base`.
fn record_offsets(dir: &Path, base: u64) -> Vec<(u64, u64)> {
    let storage = FsStorage::new(dir).unwrap();
    let file = storage.open(&data_name(base)).unwrap();
    let len = file.len().unwrap();
    let mut out = Vec::new();
    segment::scan(file.as_ref(), SEGMENT_HEADER_LEN, len, |r, off| {
        out.push((r.lsn, off));
        Ok(true)
    })
    .unwrap();
    out
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

/// Overwrites of ten keys, a delete, and one batch: several sealed segments.
fn overwrite_log(dir: &Path) -> Log {
    let log = open(dir);
    for i in 0..100u32 {
        log.append(&[put(format!("k{}", i % 10), vec![b'v'; 64])])
            .unwrap();
    }
    log.append(&[rec(RecordKind::Delete, "k0", "")]).unwrap();
    log.append(&[put("u1", "a"), put("u2", "b"), put("u3", "c")])
        .unwrap();
    log
}

#[test]
fn stat_reports_segments_totals_and_reclaimable() {
    let dir = tempfile::tempdir().unwrap();
    let log = overwrite_log(dir.path());
    let segments = log.segments();
    let records = all_records(&log);
    drop(log);
    // Compaction keeps the newest put of each key; k0's delete takes k0 whole.
    let newest: BTreeMap<&[u8], u64> = records.iter().map(|r| (&r.key[..], r.lsn)).collect();
    let dropped: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind != RecordKind::Put || newest[&r.key[..]] != r.lsn)
        .collect();
    assert_eq!(dropped.len(), 104 - 12);
    let dropped_bytes: usize = dropped.iter().map(|r| r.encoded_len()).sum();

    let out = ok(&["wal", "stat", s(dir.path())]);
    assert_eq!(field(&out, "segments"), segments.len().to_string());
    assert!(segments.len() >= 3, "{segments:?}");
    for seg in &segments {
        let row = out.lines().find(|l| l.starts_with(&seg.name)).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2], seg.records.to_string(), "{row}");
        assert_eq!(cols[3], seg.bytes.to_string(), "{row}");
    }
    assert_eq!(field(&out, "records"), "104");
    let bytes: u64 = segments.iter().map(|s| s.bytes).sum();
    assert_eq!(field(&out, "bytes"), bytes.to_string());
    assert_eq!(field(&out, "first LSN"), "1");
    assert_eq!(field(&out, "last LSN"), "104");
    assert_eq!(field(&out, "next LSN"), "105");
    assert_eq!(field(&out, "distinct keys"), "13");
    assert_eq!(
        field(&out, "reclaimable"),
        format!("92 records, {dropped_bytes} bytes")
    );
}

#[test]
fn tail_prints_the_last_records_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..40u32 {
        log.append(&[put(format!("k{i}"), vec![b'x'; 100])])
            .unwrap();
    }
    let batch = [
        NewRecord {
            term: 7,
            ..put("users/1", "{\"name\":\"ada\"}")
        },
        rec(RecordKind::Schema, vec![0xff, b'\n'], vec![b'y'; 200]),
        rec(RecordKind::Delete, "users/2", ""),
    ];
    log.append(&batch).unwrap();
    assert!(log.segments().len() > 1, "the tail spans segments");
    drop(log);

    let out = ok(&["wal", "tail", s(dir.path())]);
    let lsns: Vec<u64> = out
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(lsns, (34..=43).collect::<Vec<u64>>());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[7],
        format!("41 {T0_TEXT} put term=7 +batch key=\"users/1\" body=14B \"{{\\\"name\\\":\\\"ada\\\"}}\"")
    );
    assert_eq!(
        lines[8],
        format!(
            "42 {T0_TEXT} schema +batch key=\"\u{fffd}\\n\" body=200B \"{}…\"",
            "y".repeat(80)
        )
    );
    assert_eq!(
        lines[9],
        format!("43 {T0_TEXT} delete key=\"users/2\" body=0B")
    );

    let out = ok(&["wal", "tail", s(dir.path()), "-n", "2"]);
    assert_eq!(out.lines().count(), 2);
    assert!(out.starts_with("42 "), "{out}");
    let out = ok(&["wal", "tail", s(dir.path()), "-n", "1000"]);
    assert_eq!(out.lines().count(), 43);
}

#[test]
fn tail_follow_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..5u32 {
        log.append(&[put(format!("k{i}"), "v")]).unwrap();
    }
    drop(log);
    let mut child = Command::new(env!("CARGO_BIN_EXE_aqueduct"))
        .args(["wal", "tail", s(dir.path()), "-n", "3", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for lsn in 3..=5 {
        let line = lines.next().unwrap().unwrap();
        assert!(line.starts_with(&format!("{lsn} ")), "{line}");
    }
    std::thread::sleep(Duration::from_millis(700));
    assert!(child.try_wait().unwrap().is_none(), "--follow kept going");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn export_round_trips_through_json() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&[put("plain", "text ü")]).unwrap();
    log.append(&[
        NewRecord {
            term: 3,
            ..put(vec![0u8, 0xff, 0xfe], vec![0x80u8; 7])
        },
        rec(RecordKind::TxnMarker, "", "commit"),
        rec(RecordKind::Other(42), "x", vec![1u8, 2, 3]),
    ])
    .unwrap();
    log.append(&[rec(RecordKind::Delete, "plain", "")]).unwrap();
    let records = all_records(&log);
    drop(log);

    let out = ok(&["wal", "export", s(dir.path())]);
    let exported: Vec<Record> = out.lines().map(record_from_json).collect();
    assert_eq!(exported, records);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["time"], T0_TEXT);
    assert_eq!(first["key"], "plain");
    let second: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["key"], serde_json::json!({"base64": "AP/+"}));

    let out = ok(&["wal", "export", s(dir.path()), "--from", "4"]);
    let exported: Vec<Record> = out.lines().map(record_from_json).collect();
    assert_eq!(exported, records[3..]);
}

fn record_from_json(line: &str) -> Record {
    let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
    let bytes = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        other => decode_base64(other["base64"].as_str().expect("base64 field")),
    };
    Record {
        lsn: v["lsn"].as_u64().unwrap(),
        term: v["term"].as_u64().unwrap(),
        timestamp_micros: v["timestamp"].as_i64().unwrap(),
        kind: RecordKind::parse(v["kind"].as_str().unwrap()).unwrap(),
        flags: if v["batch_end"].as_bool().unwrap() {
            0
        } else {
            aqueduct_log::record::FLAG_BATCH_CONTINUES
        },
        key: bytes(&v["key"]),
        body: bytes(&v["body"]),
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let n = data
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | u32::from(value(c)) << (18 - 6 * i));
        out.extend(&n.to_be_bytes()[1..data.len()]);
    }
    out
}

/// Batches mixing two key families, so filtering splits batches.
fn mixed_log(dir: &Path) -> Vec<Record> {
    let log = open(dir);
    for i in 0..30u32 {
        log.append(&[
            put(format!("users/{i}"), format!("user {i}")),
            put(format!("orders/{i}"), format!("order {i}")),
            put(format!("users/{i}/x"), "x"),
        ])
        .unwrap();
        log.append(&[put(format!("orders/{i}/y"), "y")]).unwrap();
    }
    all_records(&log)
}

#[test]
fn grep_keeps_matching_keys_with_their_lsns_and_batches() {
    let dir = tempfile::tempdir().unwrap();
    let source = mixed_log(dir.path());
    let tmp = tempfile::tempdir().unwrap();
    for invert in [false, true] {
        let out_dir = tmp.path().join(format!("out-{invert}"));
        let mut args = vec![
            "wal",
            "grep",
            s(dir.path()),
            "^users/",
            "--out",
            s(&out_dir),
        ];
        if invert {
            args.push("--invert");
        }
        let out = ok(&args);
        assert!(out.contains("LSNs kept"), "{out}");
        let got = records_of(&out_dir);
        let want: Vec<&Record> = source
            .iter()
            .filter(|r| r.key.starts_with(b"users/") != invert)
            .collect();
        let lsns = |rs: &mut dyn Iterator<Item = &Record>| rs.map(|r| r.lsn).collect::<Vec<_>>();
        assert_eq!(lsns(&mut got.iter()), lsns(&mut want.iter().copied()));
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.key, &g.body, g.kind), (&w.key, &w.body, w.kind));
            assert_eq!(g.timestamp_micros, w.timestamp_micros);
        }
        // The kept records of each source batch form one batch.
        let ends: Vec<bool> = got.iter().map(|r| r.ends_batch()).collect();
        let want_ends: Vec<bool> = if invert {
            [true, true].repeat(30) // orders/i alone, then orders/i/y
        } else {
            [false, true].repeat(30) // users/i + users/i/x
        };
        assert_eq!(ends, want_ends);
        let keys: BTreeSet<Vec<u8>> = got.iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys.len(), 60);
    }
    // Nothing selected: an error, and no directory left behind.
    let none = tmp.path().join("none");
    let (_, err) = fails(
        &["wal", "grep", s(dir.path()), "^nope", "--out", s(&none)],
        1,
    );
    assert!(err.contains("no record was selected"), "{err}");
    assert!(!none.exists());
    // An existing log is never written over.
    let (_, err) = fails(
        &[
            "wal",
            "grep",
            s(dir.path()),
            "^users/",
            "--out",
            s(dir.path()),
        ],
        1,
    );
    assert!(err.contains("not empty"), "{err}");
}

#[test]
fn range_prints_and_copies_keeping_lsns_across_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    // Every 10th record survives compaction; the rest overwrite one key,
    // so the compacted log is full of LSN gaps.
    for i in 0..200u32 {
        let key = if i % 10 == 0 {
            format!("u{i}")
        } else {
            "hot".into()
        };
        log.append(&[put(key, vec![b'x'; 100])]).unwrap();
    }
    log.append(&[put("a", "1"), put("b", "2"), put("c", "3")])
        .unwrap();
    log.seal_active().unwrap();
    log.compact().unwrap();
    let source = all_records(&log);
    drop(log);
    assert!(source.len() < 100, "compaction made gaps");

    let out = ok(&["wal", "range", s(dir.path()), "30", "202"]);
    let printed: Vec<u64> = out
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let want: Vec<&Record> = source
        .iter()
        .filter(|r| (30..=202).contains(&r.lsn))
        .collect();
    assert_eq!(printed, want.iter().map(|r| r.lsn).collect::<Vec<_>>());
    assert!(out.lines().last().unwrap().contains("+batch"), "{out}");

    let copy = tempfile::tempdir().unwrap();
    let new_dir = copy.path().join("copy");
    ok(&[
        "wal",
        "range",
        s(dir.path()),
        "30",
        "202",
        "--out",
        s(&new_dir),
    ]);
    let log = open(&new_dir);
    let got = all_records(&log);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.lsn, w.lsn);
        assert_eq!(
            (&g.key, &g.body, g.kind, g.term),
            (&w.key, &w.body, w.kind, w.term)
        );
    }
    // The batch cut by TO ends where the range ends.
    assert!(got.last().unwrap().ends_batch());
    assert_eq!(log.next_lsn(), 203);
    assert_eq!(log.append(&[put("new", "v")]).unwrap().first, 203);

    let (_, err) = fails(&["wal", "range", s(dir.path()), "9", "3"], 1);
    assert!(err.contains("error: FROM (9) is after TO (3)"), "{err}");
}

#[test]
fn verify_passes_a_healthy_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = overwrite_log(dir.path());
    let sealed = log.segments().iter().filter(|s| s.sealed).count();
    drop(log);
    let out = ok(&["wal", "verify", s(dir.path())]);
    assert!(
        out.starts_with(&format!(
            "OK: {} segments, 104 records (LSN 1 to 104), {sealed} indexes",
            sealed + 1
        )),
        "{out}"
    );
}

#[test]
fn verify_names_a_flipped_byte_and_truncate_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..200u32 {
        log.append(&[put(format!("k{i}"), vec![b'x'; 100])])
            .unwrap();
    }
    let segments = log.segments();
    drop(log);
    // A record in the middle of the second (sealed) segment.
    let seg = &segments[1];
    assert!(seg.sealed);
    let offsets = record_offsets(dir.path(), seg.base);
    let (bad_lsn, bad_offset) = offsets[offsets.len() / 2];
    let seg_path = dir.path().join(&seg.name);
    flip_byte(&seg_path, bad_offset + 60);

    let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
    assert!(err.starts_with("error: the log is damaged"), "{err}");
    assert!(err.contains(&seg.name), "names the segment: {err}");
    assert!(err.contains(&format!("offset:  {bad_offset}\n")), "{err}");
    assert!(err.contains(&format!("LSN:     {bad_lsn}\n")), "{err}");
    let repair = format!("aqueduct wal truncate {} --at {bad_lsn}", s(dir.path()));
    assert!(err.contains(&repair), "gives the repair command: {err}");

    // Without --yes: a dry run that changes nothing.
    let before = std::fs::read(&seg_path).unwrap();
    let files_before = std::fs::read_dir(dir.path()).unwrap().count();
    let (out, err) = fails(
        &[
            "wal",
            "truncate",
            s(dir.path()),
            "--at",
            &bad_lsn.to_string(),
        ],
        1,
    );
    assert!(
        out.contains(&format!(
            "removing {} from byte offset {bad_offset}",
            seg.name
        )),
        "{out}"
    );
    assert!(err.contains("rerun with --yes"), "{err}");
    assert_eq!(std::fs::read(&seg_path).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), files_before);

    let out = ok(&[
        "wal",
        "truncate",
        s(dir.path()),
        "--at",
        &bad_lsn.to_string(),
        "--yes",
    ]);
    assert!(
        out.contains(&format!("the log now ends at LSN {}", bad_lsn - 1)),
        "{out}"
    );
    ok(&["wal", "verify", s(dir.path())]);
    let records = records_of(dir.path());
    assert_eq!(records.len() as u64, bad_lsn - 1);
    assert!(records
        .iter()
        .enumerate()
        .all(|(i, r)| r.lsn == i as u64 + 1 && r.key == format!("k{i}").as_bytes()));
}

#[test]
fn a_flipped_byte_in_the_last_record_is_damage_that_verify_names() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..5u32 {
        log.append(&[put(format!("k{i}"), "value")]).unwrap();
    }
    let active = log.segments().last().unwrap().clone();
    drop(log);
    let offsets = record_offsets(dir.path(), active.base);
    let (last_lsn, last_offset) = *offsets.last().unwrap();
    assert_eq!(last_lsn, 5);
    // The body's last byte: the record is complete, only its checksum fails.
    let path = dir.path().join(&active.name);
    let len = std::fs::metadata(&path).unwrap().len();
    flip_byte(&path, len - 1);

    let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
    assert!(err.contains(&format!("offset:  {last_offset}\n")), "{err}");
    assert!(err.contains("LSN:     5\n"), "{err}");
    assert!(err.contains("not a write torn by a crash"), "{err}");
    let repair = format!("aqueduct wal truncate {} --at 5", s(dir.path()));
    assert!(err.contains(&repair), "{err}");
    // Nothing was cut by the check.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    // A server would refuse too.
    assert!(Log::open(dir.path(), small_segments()).is_err());

    let (out, _) = fails(&["wal", "truncate", s(dir.path()), "--at", "5"], 1);
    assert!(out.contains("LSN 5"), "names what would go: {out}");
    ok(&["wal", "truncate", s(dir.path()), "--at", "5", "--yes"]);
    ok(&["wal", "verify", s(dir.path())]);
    assert_eq!(records_of(dir.path()).len(), 4);
}

/// A log of 200 records over several sealed segments; returns its segments.
fn several_segments(dir: &Path) -> Vec<aqueduct_log::SegmentStat> {
    let log = open(dir);
    for i in 0..200u32 {
        log.append(&[put(format!("k{i}"), vec![b'x'; 100])])
            .unwrap();
    }
    let segs = log.segments();
    assert!(segs.len() >= 5, "{} segments", segs.len());
    segs
}

#[test]
fn a_deleted_segment_is_named_by_verify_and_truncate_repairs_it() {
    for victim in [0usize, 2] {
        let dir = tempfile::tempdir().unwrap();
        let segs = several_segments(dir.path());
        let gone = &segs[victim];
        std::fs::remove_file(dir.path().join(&gone.name)).unwrap();
        let _ = std::fs::remove_file(dir.path().join(segment::index_name(gone.base)));

        let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
        assert!(err.contains("the log is not whole"), "{err}");
        assert!(err.contains(&gone.name), "names the segment: {err}");
        assert!(err.contains("is missing"), "{err}");
        let range = format!("LSN {} to {}", gone.first_lsn, gone.last_lsn);
        assert!(err.contains(&range), "names the lost range: {err}");
        let repair = format!(
            "aqueduct wal truncate {} --at {}",
            s(dir.path()),
            gone.first_lsn
        );
        assert!(err.contains(&repair), "gives the repair: {err}");
        // The server would refuse too, and so do the reading commands.
        assert!(Log::open(dir.path(), small_segments()).is_err());
        fails(&["wal", "stat", s(dir.path())], 1);

        let at = gone.first_lsn.to_string();
        ok(&["wal", "truncate", s(dir.path()), "--at", &at, "--yes"]);
        ok(&["wal", "verify", s(dir.path())]);
        let records = records_of(dir.path());
        assert_eq!(records.len() as u64, gone.first_lsn - 1, "victim {victim}");
        // And the log goes on, its manifest kept up to date.
        let log = open(dir.path());
        log.append(&[put("after", "repair")]).unwrap();
        drop(log);
        ok(&["wal", "verify", s(dir.path())]);
    }
}

#[test]
fn a_duplicated_or_older_segment_is_named_by_verify() {
    // A copy under another name.
    let dir = tempfile::tempdir().unwrap();
    let segs = several_segments(dir.path());
    let copy = data_name(segs[1].base + 1);
    std::fs::copy(dir.path().join(&segs[1].name), dir.path().join(&copy)).unwrap();
    let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
    assert!(
        err.contains(&copy) && err.contains("renamed or copied"),
        "{err}"
    );
    std::fs::remove_file(dir.path().join(&copy)).unwrap();
    ok(&["wal", "verify", s(dir.path())]);

    // The active segment copied while it was active, restored after sealing.
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&[put("a", "1")]).unwrap();
    let active = log.segments().last().unwrap().clone();
    let path = dir.path().join(&active.name);
    let old = std::fs::read(&path).unwrap();
    log.append(&[put("b", "2")]).unwrap();
    log.seal_active().unwrap();
    drop(log);
    std::fs::write(&path, &old).unwrap();
    let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
    assert!(err.contains("but the log sealed it at"), "{err}");
}

#[test]
fn rebuild_manifest_accepts_the_segments_present() {
    let dir = tempfile::tempdir().unwrap();
    several_segments(dir.path());
    std::fs::remove_file(dir.path().join("manifest")).unwrap();
    let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
    assert!(
        err.contains("manifest") && err.contains("is missing"),
        "{err}"
    );
    assert!(err.contains("aqueduct wal rebuild-manifest"), "{err}");
    let (out, _) = fails(&["wal", "rebuild-manifest", s(dir.path())], 1);
    assert!(out.contains("the log does not open now"), "{out}");
    let out = ok(&["wal", "rebuild-manifest", s(dir.path()), "--yes"]);
    assert!(out.contains("200 records (LSN 1 to 200)"), "{out}");
    ok(&["wal", "verify", s(dir.path())]);
}

#[test]
fn a_damaged_batch_is_cut_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..40u32 {
        let batch: Vec<NewRecord> = (0..4)
            .map(|j| put(format!("k{i}.{j}"), vec![b'x'; 60]))
            .collect();
        log.append(&batch).unwrap();
    }
    let seg = log.segments()[0].clone();
    drop(log);
    // Damage the third record of the sixth batch (LSNs 21..=24).
    let offsets = record_offsets(dir.path(), seg.base);
    let (lsn, offset) = offsets[22];
    assert_eq!(lsn, 23);
    flip_byte(&dir.path().join(&seg.name), offset + 8); // the header: LSN unreadable

    let (_, err) = fails(&["wal", "verify", s(dir.path())], 2);
    assert!(err.contains("LSN:     unknown"), "{err}");
    assert!(err.contains("--at 21\n"), "the batch's first LSN: {err}");
    ok(&["wal", "truncate", s(dir.path()), "--at", "21", "--yes"]);
    ok(&["wal", "verify", s(dir.path())]);
    assert_eq!(records_of(dir.path()).last().unwrap().lsn, 20);

    // Damage before --at is refused: cutting later would keep it.
    let log = open(dir.path());
    log.append(&[put("z", "z")]).unwrap();
    drop(log);
    flip_byte(&dir.path().join(&seg.name), offsets[5].1 + 60);
    let (_, err) = fails(
        &["wal", "truncate", s(dir.path()), "--at", "21", "--yes"],
        1,
    );
    assert!(err.contains("lies before LSN 21"), "{err}");
    assert!(err.contains("--at 5"), "{err}");
}

#[test]
fn truncate_removes_whole_batches_and_tells_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..50u32 {
        log.append(&[
            put(format!("a{i}"), "1"),
            put(format!("b{i}"), "2"),
            put(format!("c{i}"), "3"),
        ])
        .unwrap();
    }
    drop(log);
    // LSN 62 is the second record of the batch 61..=63.
    let (out, _) = fails(&["wal", "truncate", s(dir.path()), "--at", "62"], 1);
    assert!(out.contains("starts at LSN 61"), "{out}");
    assert!(out.contains("removing 90 records, LSN 61 to 150"), "{out}");
    let out = ok(&["wal", "truncate", s(dir.path()), "--at", "62", "--yes"]);
    assert!(
        out.contains("the log now ends at LSN 60; the next record gets LSN 61"),
        "{out}"
    );
    assert_eq!(records_of(dir.path()).len(), 60);
    let out = ok(&["wal", "truncate", s(dir.path()), "--at", "61"]);
    assert!(out.contains("nothing to remove"), "{out}");
}

#[test]
fn truncate_into_merged_history_leaves_a_log_that_keeps_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 0..200u32 {
        let key = if i % 10 == 0 {
            format!("u{i}")
        } else {
            "hot".into()
        };
        log.append(&[put(key, vec![b'x'; 100])]).unwrap();
    }
    log.seal_active().unwrap();
    assert!(log.compact().unwrap().segments_merged > 0);
    drop(log);
    // The log refuses this cut (merged history); the tool cuts the files.
    let out = ok(&["wal", "truncate", s(dir.path()), "--at", "32", "--yes"]);
    assert!(
        out.contains("warning: the kept records were compacted"),
        "{out}"
    );
    assert!(out.contains("the log now ends at LSN 31"), "{out}");
    // Records big enough to seal the cut segment get LSNs below its old
    // covers_until: they must survive a reopen.
    let log = open(dir.path());
    for i in 0..3u32 {
        log.append(&[put(format!("big{i}"), vec![b'y'; 3000])])
            .unwrap();
    }
    assert!(log.segments().len() > 1);
    drop(log);
    let lsns: Vec<u64> = records_of(dir.path()).iter().map(|r| r.lsn).collect();
    assert_eq!(lsns, [1, 11, 21, 31, 32, 33, 34]);
}

#[test]
fn compact_drops_superseded_records_and_keeps_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = overwrite_log(dir.path());
    log.append(&[rec(RecordKind::Schema, "", "create table t")])
        .unwrap();
    let before = all_records(&log);
    drop(log);

    let out = ok(&["wal", "compact", s(dir.path())]);
    assert!(out.contains("before: 105 records"), "{out}");
    assert!(out.contains("after:  13 records"), "{out}");
    let after = records_of(dir.path());
    assert_eq!(after.len(), 13);
    assert_eq!(state(&after), state(&before));
    ok(&["wal", "verify", s(dir.path())]);
}

#[test]
fn a_locked_directory_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let log = overwrite_log(dir.path());
    for args in [
        vec!["wal", "stat", s(dir.path())],
        vec!["wal", "verify", s(dir.path())],
        vec!["wal", "compact", s(dir.path())],
        vec!["wal", "truncate", s(dir.path()), "--at", "5", "--yes"],
    ] {
        let (_, err) = fails(&args, 1);
        assert!(
            err.starts_with("error: the log directory")
                && err.contains("is in use by another process"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!("(pid {})", std::process::id())),
            "{err}"
        );
        assert!(err.contains("stop it first"), "{err}");
    }
    assert_eq!(all_records(&log).len(), 104);
}

#[test]
fn a_path_without_a_log_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let (_, err) = fails(&["wal", "stat", s(&missing)], 1);
    assert!(err.contains("does not exist"), "{err}");
    assert!(!missing.exists());
    let (_, err) = fails(&["wal", "compact", s(tmp.path())], 1);
    assert!(err.contains("holds no log"), "{err}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}
