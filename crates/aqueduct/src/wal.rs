//! `aqueduct wal`: the operator's tool for a log directory (after Sirius'
//! waltool).
//!
//! Every command but `tail` opens the directory with `Log::open`, which
//! takes its lock, so the tool never works on a log a server (or another
//! tool) is using. Commands that only read open it read-only: they change
//! nothing on disk, not even a torn tail that a writable open would cut.
//! `tail` reads through `LiveLogReader`, which takes no lock and writes
//! nothing, so it can show and follow the log of a running server.
//!
//! Two commands work below the `Log` API, on segment files:
//! - `range --out` and `grep --out` write the new log's segments directly,
//!   because `Log::append` numbers records densely and the copy must keep
//!   every record's LSN (compaction and filtering leave gaps);
//! - `truncate` cuts the files itself when the log is too damaged to open, or
//!   when the cut falls in merged history, which `Log::truncate_after` refuses.
//!
//! Both check their result by opening it with `Log::open` afterwards.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use aqueduct_log::compaction;
use aqueduct_log::live::{self, LiveLogReader};
use aqueduct_log::lock::DirLock;
use aqueduct_log::manifest::Manifest;
use aqueduct_log::record::FLAG_BATCH_CONTINUES;
use aqueduct_log::segment::{
    self, data_name, index_name, parse_data_name, tmp_name, ScanEnd, SegmentHeader, SegmentSummary,
    TailDamage, SEGMENT_HEADER_LEN,
};
use aqueduct_log::{
    Error as LogError, FsStorage, Log, Lsn, Options, Record, RecordView, SegmentStat, Storage,
    StorageFile, DEFAULT_SEGMENT_BYTES,
};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use regex::Regex;
use serde::Serialize;

/// Exit status of `verify` when it finds damage (1 is any other failure).
pub const EXIT_DAMAGED: u8 = 2;

/// Characters of a key and of a body shown by `tail` and `range`.
const KEY_PREVIEW_CHARS: usize = 120;
const BODY_PREVIEW_CHARS: usize = 80;
/// How long `tail --follow` waits for new records before looking again.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// Segment size of logs written by `range --out` and `grep --out`.
const OUT_SEGMENT_BYTES: u64 = DEFAULT_SEGMENT_BYTES;
/// Bytes copied at a time when a segment is rewritten by `truncate`.
const COPY_CHUNK_BYTES: usize = 1024 * 1024;

#[derive(Debug, Subcommand)]
pub enum WalCommand {
    /// Segments and totals: records, bytes, LSNs, distinct keys, and the
    /// records and bytes compaction could reclaim.
    Stat {
        /// The log directory.
        dir: PathBuf,
    },
    /// The last records, one per line: LSN, time (UTC), kind, `term=T` when
    /// not 0, `+batch` when the next record belongs to the same atomic batch,
    /// key, body length and a preview of the body. Takes no lock and writes
    /// nothing, so it works on the log of a running server.
    Tail {
        /// The log directory.
        dir: PathBuf,
        /// How many records to show.
        #[arg(short = 'n', long = "lines", default_value_t = 10)]
        lines: usize,
        /// Show every record from this LSN on instead of the last ones.
        #[arg(long, value_name = "LSN")]
        from_lsn: Option<Lsn>,
        /// Then keep printing records as they are written, whole atomic
        /// batches at a time, until interrupted; across segment rolls and
        /// compaction of a server writing the log. A record compaction drops
        /// before the follower reaches it is not shown.
        #[arg(short, long)]
        follow: bool,
    },
    /// Records with FROM <= LSN <= TO, printed like `tail`; with --out, copied
    /// into a new log instead, keeping every record's LSN, term and timestamp.
    /// An atomic batch cut by either end of the range keeps its part inside.
    Range {
        /// The log directory.
        dir: PathBuf,
        /// First LSN.
        from: Lsn,
        /// Last LSN (inclusive).
        to: Lsn,
        /// Write the records to a new log in this directory (it must not exist
        /// or be empty).
        #[arg(long, value_name = "NEWDIR")]
        out: Option<PathBuf>,
    },
    /// Sirius' key filter: writes a new log holding only the records whose key
    /// (as lossy UTF-8) matches REGEX, or with --invert does not match. The
    /// filter applies to records of every kind: a record with an empty key
    /// (such as a schema change) is kept only if REGEX matches the empty
    /// string. Records keep their LSN, term and timestamp; the kept records of
    /// one atomic batch stay one atomic batch. Exits with 1 and writes nothing
    /// when no record is selected.
    Grep {
        /// The log directory.
        dir: PathBuf,
        /// A regular expression (Rust `regex` syntax), unanchored: use ^ and $.
        regex: String,
        /// Keep the records whose key does NOT match.
        #[arg(short = 'v', long)]
        invert: bool,
        /// Directory of the new log (it must not exist or be empty).
        #[arg(long, value_name = "NEWDIR")]
        out: PathBuf,
    },
    /// Checks every record's checksum and LSN order, and every index file
    /// against its segment. Changes nothing. Exit status: 0 healthy, 2 damage
    /// found (the first bad record is named, with the repair command), 1 the
    /// check could not run.
    Verify {
        /// The log directory.
        dir: PathBuf,
    },
    /// Removes the record at LSN and everything after it. Works on a damaged
    /// log too. If LSN falls inside an atomic batch, the whole batch goes.
    /// Without --yes, only shows what would be removed (and exits with 1).
    Truncate {
        /// The log directory.
        dir: PathBuf,
        /// The first LSN to remove.
        #[arg(long, value_name = "LSN")]
        at: Lsn,
        /// Really remove the records.
        #[arg(long)]
        yes: bool,
    },
    /// Rewrites the manifest (the list of segments the log is made of) to
    /// name the segment files present, for a log that refuses to open
    /// because its manifest is missing or damaged, or after an operator has
    /// decided to accept the files as they are. Records of segments that are
    /// gone are then lost for good. Without --yes, only shows what the open
    /// check reports and which files would be taken (and exits with 1).
    RebuildManifest {
        /// The log directory.
        dir: PathBuf,
        /// Really rewrite the manifest.
        #[arg(long)]
        yes: bool,
    },
    /// Offline compaction of the whole log (the active segment is sealed
    /// first), with a progress bar; prints records and bytes before and after.
    Compact {
        /// The log directory.
        dir: PathBuf,
    },
    /// JSON lines, one record per line: lsn, term, timestamp (microseconds
    /// since the epoch), time (RFC 3339), kind, batch_end, key, body. Key and
    /// body are strings when they are valid UTF-8, else {"base64": "..."}.
    Export {
        /// The log directory.
        dir: PathBuf,
        /// First LSN to export.
        #[arg(long, value_name = "LSN", default_value_t = 1)]
        from: Lsn,
    },
}

/// Damage found by `verify`; the binary exits with [`EXIT_DAMAGED`] for it,
/// so a script can tell a damaged log from a check that could not run.
#[derive(Debug)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

pub fn run(cmd: WalCommand) -> Result<()> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match cmd {
        WalCommand::Stat { dir } => stat(&mut out, &dir),
        WalCommand::Tail {
            dir,
            lines,
            from_lsn,
            follow,
        } => tail(&mut out, &dir, lines, from_lsn, follow),
        WalCommand::Range {
            dir,
            from,
            to,
            out: None,
        } => range_print(&mut out, &dir, from, to),
        WalCommand::Range {
            dir,
            from,
            to,
            out: Some(new_dir),
        } => range_copy(&mut out, &dir, from, to, &new_dir),
        WalCommand::Grep {
            dir,
            regex,
            invert,
            out: new_dir,
        } => grep(&mut out, &dir, &regex, invert, &new_dir),
        WalCommand::Verify { dir } => verify(&mut out, &dir),
        WalCommand::Truncate { dir, at, yes } => truncate(&mut out, &dir, at, yes),
        WalCommand::Compact { dir } => compact(&mut out, &dir),
        WalCommand::RebuildManifest { dir, yes } => rebuild_manifest(&mut out, &dir, yes),
        WalCommand::Export { dir, from } => export(&mut out, &dir, from),
    }?;
    out.flush()?;
    Ok(())
}

// ---------------------------------------------------------------- opening

/// Refuses a directory that holds no log, before `Log::open` could create
/// one (a writable open of an empty directory starts a new log; even a
/// read-only open creates the directory to put its lock file in).
fn require_log(dir: &Path) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!("{} does not exist; give the log directory", dir.display())
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let name = entry?.file_name();
        if name.to_str().and_then(parse_data_name).is_some() {
            return Ok(());
        }
    }
    bail!(
        "{} holds no log (no segment files named <20 digits>.seg); give the log directory",
        dir.display()
    )
}

fn open_read_only(dir: &Path) -> Result<Log> {
    require_log(dir)?;
    let opts = Options {
        read_only: true,
        ..Options::default()
    };
    Ok(Log::open(dir, opts)?.0)
}

fn open_writable(dir: &Path) -> Result<Log> {
    require_log(dir)?;
    Ok(Log::open(dir, Options::default())?.0)
}

// ---------------------------------------------------------------- formatting

/// One record as `tail` and `range` print it.
fn record_line(r: &Record) -> String {
    let mut line = format!(
        "{} {} {}",
        r.lsn,
        rfc3339(r.timestamp_micros),
        r.kind.name()
    );
    if r.term != 0 {
        let _ = write!(line, " term={}", r.term);
    }
    if !r.ends_batch() {
        line.push_str(" +batch");
    }
    let _ = write!(
        line,
        " key=\"{}\" body={}B",
        preview(&r.key, KEY_PREVIEW_CHARS),
        r.body.len()
    );
    if !r.body.is_empty() {
        let _ = write!(line, " \"{}\"", preview(&r.body, BODY_PREVIEW_CHARS));
    }
    line
}

/// Bytes as lossy UTF-8 with quotes, backslashes and control characters
/// escaped (so one record stays one line), cut at `max_chars` with `…`.
fn preview(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// Microseconds since the Unix epoch as RFC 3339 UTC, to the microsecond.
fn rfc3339(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let day_secs = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), after
/// Howard Hinnant's `civil_from_days`: shift to eras of 400 years starting
/// on 0000-03-01, so leap days fall at the end of each year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year from March 1
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (b(0) << 16) | (b(1) << 8) | b(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

// ---------------------------------------------------------------- stat

fn stat(out: &mut dyn Write, dir: &Path) -> Result<()> {
    require_log(dir)?;
    let opts = Options {
        read_only: true,
        ..Options::default()
    };
    let (log, report) = Log::open(dir, opts)?;
    let segs = log.segments();
    writeln!(
        out,
        "{:<26} {:>6} {:>10} {:>12} {:>12} {:>12}",
        "SEGMENT", "SEALED", "RECORDS", "BYTES", "FIRST LSN", "LAST LSN"
    )?;
    for s in &segs {
        writeln!(
            out,
            "{:<26} {:>6} {:>10} {:>12} {:>12} {:>12}",
            s.name,
            if s.sealed { "yes" } else { "no" },
            s.records,
            s.bytes,
            lsn_or_dash(s.first_lsn),
            lsn_or_dash(s.last_lsn)
        )?;
    }
    let reclaim = compaction::reclaimable(&log)?;
    writeln!(out)?;
    writeln!(out, "segments:       {}", segs.len())?;
    writeln!(out, "records:        {}", total_records(&segs))?;
    writeln!(
        out,
        "bytes:          {}",
        segs.iter().map(|s| s.bytes).sum::<u64>()
    )?;
    writeln!(out, "first LSN:      {}", lsn_or_dash(log.first_lsn()))?;
    writeln!(out, "last LSN:       {}", lsn_or_dash(last_lsn(&segs)))?;
    writeln!(out, "next LSN:       {}", log.next_lsn())?;
    writeln!(out, "distinct keys:  {}", reclaim.keys)?;
    writeln!(
        out,
        "reclaimable:    {} records, {} bytes",
        reclaim.records, reclaim.bytes
    )?;
    if report.torn_bytes_truncated > 0 || report.incomplete_batch_records_dropped > 0 {
        writeln!(
            out,
            "torn tail:      {} bytes and {} records of an incomplete batch, left by a crash; \
             not shown above, removed at the next writable open",
            report.torn_bytes_truncated, report.incomplete_batch_records_dropped
        )?;
    }
    if report.leftovers_removed > 0 {
        writeln!(
            out,
            "leftovers:      {} of interrupted compactions, removed at the next writable open",
            count(report.leftovers_removed as u64, "file")
        )?;
    }
    Ok(())
}

/// "1 segment", "2 segments".
fn count(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn lsn_or_dash(lsn: Lsn) -> String {
    if lsn == 0 {
        "-".into()
    } else {
        lsn.to_string()
    }
}

fn total_records(segs: &[SegmentStat]) -> u64 {
    segs.iter().map(|s| s.records).sum()
}

/// The LSN of the last record present (0 when the log is empty).
fn last_lsn(segs: &[SegmentStat]) -> Lsn {
    segs.iter().map(|s| s.last_lsn).max().unwrap_or(0)
}

// ---------------------------------------------------------------- tail

fn tail(
    out: &mut dyn Write,
    dir: &Path,
    lines: usize,
    from: Option<Lsn>,
    follow: bool,
) -> Result<()> {
    require_log(dir)?;
    let (mut reader, mut tables) = match from {
        Some(from) => {
            let mut tables = TableNames::before(dir, from)?;
            let mut reader = LiveLogReader::open(dir, from)?;
            print_available(out, &mut reader, &mut tables)?;
            (reader, tables)
        }
        None => last_records(out, dir, lines)?,
    };
    out.flush()?;
    if !follow {
        return Ok(());
    }
    loop {
        for r in reader.next_batch(1024, FOLLOW_POLL)? {
            print_record(out, &r, &mut tables)?;
        }
        out.flush()?;
    }
}

/// One record as `tail` prints it: a table record decoded (table, change,
/// key, previous version, the row by column), any other as `record_line`.
/// Every record `tail` shows goes through here.
fn print_record(out: &mut dyn Write, r: &Record, tables: &mut TableNames) -> io::Result<()> {
    match tables.describe(r) {
        Some(text) => writeln!(out, "{text}"),
        None => writeln!(out, "{}", record_line(r)),
    }
}

/// Table names and column names, learned from the log's schema records,
/// so `tail` can print rows as table changes.
#[derive(Default)]
struct TableNames(
    std::collections::HashMap<aqueduct_tables::TableId, aqueduct_tables::TableSchema>,
);

impl TableNames {
    /// The tables as of `lsn`: every schema record below it (a pass over
    /// the log before it; schema records are never compacted).
    fn before(dir: &Path, lsn: Lsn) -> Result<TableNames> {
        let mut names = TableNames::default();
        if lsn <= 1 {
            return Ok(names);
        }
        let mut reader = LiveLogReader::open(dir, 1)?;
        'read: loop {
            let got = reader.poll(4096)?;
            if got.is_empty() {
                break;
            }
            for r in &got {
                if r.lsn >= lsn {
                    break 'read;
                }
                names.learn(r);
            }
        }
        Ok(names)
    }

    fn learn(&mut self, r: &Record) {
        if r.kind != aqueduct_log::RecordKind::Schema {
            return;
        }
        if let Ok(Some(e)) = aqueduct_tables::decode_record(&r.view()) {
            match e.write {
                aqueduct_tables::Write::Schema(aqueduct_tables::SchemaChange::CreateTable(t)) => {
                    self.0.insert(t.id, t);
                }
                aqueduct_tables::Write::Schema(aqueduct_tables::SchemaChange::DropTable { id }) => {
                    self.0.remove(&id);
                }
                _ => {}
            }
        }
    }

    fn describe(&mut self, r: &Record) -> Option<String> {
        use aqueduct_tables::Write as W;
        let entry = aqueduct_tables::decode_record(&r.view()).ok()??;
        let mut line = format!(
            "{} {} {}",
            r.lsn,
            rfc3339(r.timestamp_micros),
            r.kind.name()
        );
        if !r.ends_batch() {
            line.push_str(" +batch");
        }
        let values = |vals: &[aqueduct_values::Value]| {
            vals.iter()
                .map(|v| v.to_text().map_or("NULL".to_string(), |t| format!("{t:?}")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &entry.write {
            W::Schema(change) => {
                let body = String::from_utf8_lossy(&change.encode()).into_owned();
                self.learn(r);
                let _ = write!(line, " {body}");
            }
            W::Put { table, key, .. } | W::Delete { table, key } => {
                let schema = self.0.get(table)?;
                let op = match (&entry.write, entry.prev_lsn) {
                    (W::Delete { .. }, _) => "delete",
                    (_, Some(_)) => "update",
                    (_, None) if entry.prev_known => "insert",
                    _ => "upsert",
                };
                let _ = write!(line, " table={} {op} key=({})", schema.name, values(key));
                if let Some(p) = entry.prev_lsn {
                    let _ = write!(line, " prev={p}");
                }
                if let W::Put { row, .. } = &entry.write {
                    let cols: Vec<String> = schema
                        .columns
                        .iter()
                        .zip(row.iter())
                        .map(|(c, v)| format!("{}={}", c.name, values(std::slice::from_ref(v))))
                        .collect();
                    let _ = write!(line, " {}", cols.join(" "));
                }
            }
        }
        Some(line)
    }
}

/// Prints every record present now.
fn print_available(
    out: &mut dyn Write,
    reader: &mut LiveLogReader,
    tables: &mut TableNames,
) -> Result<()> {
    loop {
        let got = reader.poll(1024)?;
        if got.is_empty() {
            return Ok(());
        }
        for r in &got {
            print_record(out, r, tables)?;
        }
    }
}

/// Prints the last `n` records present now and returns a reader past them.
/// It starts where the manifest's counts say the last `n` begin; those
/// counts include records a compaction may since have dropped, so if fewer
/// come it reads again from the start.
fn last_records(out: &mut dyn Write, dir: &Path, n: usize) -> Result<(LiveLogReader, TableNames)> {
    let probe = LiveLogReader::open(dir, 1)?;
    let estimate = live::start_of_last(&probe.segments()?, n as u64);
    for start in [estimate, 1] {
        let mut reader = LiveLogReader::open(dir, start)?;
        let mut last: VecDeque<Record> = VecDeque::with_capacity(n);
        loop {
            let got = reader.poll(1024)?;
            if got.is_empty() {
                break;
            }
            for r in got {
                if n > 0 && last.len() == n {
                    last.pop_front();
                }
                if n > 0 {
                    last.push_back(r);
                }
            }
        }
        if last.len() == n || start <= 1 || n == 0 {
            let from = last.front().map_or(reader.position(), |r| r.lsn);
            let mut tables = TableNames::before(dir, from)?;
            for r in &last {
                print_record(out, r, &mut tables)?;
            }
            return Ok((reader, tables));
        }
    }
    unreachable!("the second pass starts at LSN 1")
}

// ---------------------------------------------------------------- range, grep

fn range_print(out: &mut dyn Write, dir: &Path, from: Lsn, to: Lsn) -> Result<()> {
    check_range(from, to)?;
    let log = open_read_only(dir)?;
    for r in log.reader(from) {
        let r = r?;
        if r.lsn > to {
            break;
        }
        writeln!(out, "{}", record_line(&r))?;
    }
    Ok(())
}

fn check_range(from: Lsn, to: Lsn) -> Result<()> {
    if from > to {
        bail!("FROM ({from}) is after TO ({to}); give FROM <= TO");
    }
    Ok(())
}

fn range_copy(out: &mut dyn Write, dir: &Path, from: Lsn, to: Lsn, new_dir: &Path) -> Result<()> {
    check_range(from, to)?;
    let log = open_read_only(dir)?;
    let mut builder = LogBuilder::new(new_dir)?;
    for_each_batch(&log, from, to, |batch| builder.write_batch(batch))?;
    match builder.finish()? {
        Some(w) => report_written(out, &w, new_dir),
        None => bail!("no record has an LSN from {from} to {to}; nothing was written"),
    }
}

fn grep(
    out: &mut dyn Write,
    dir: &Path,
    pattern: &str,
    invert: bool,
    new_dir: &Path,
) -> Result<()> {
    let regex = Regex::new(pattern).with_context(|| format!("invalid REGEX {pattern:?}"))?;
    let log = open_read_only(dir)?;
    let mut builder = LogBuilder::new(new_dir)?;
    for_each_batch(&log, 1, Lsn::MAX, |batch| {
        let kept: Vec<Record> = batch
            .iter()
            .filter(|r| regex.is_match(&String::from_utf8_lossy(&r.key)) != invert)
            .cloned()
            .collect();
        builder.write_batch(&kept)
    })?;
    match builder.finish()? {
        Some(w) => report_written(out, &w, new_dir),
        None => bail!("no record was selected by {pattern:?}; nothing was written"),
    }
}

fn report_written(out: &mut dyn Write, w: &Written, new_dir: &Path) -> Result<()> {
    writeln!(
        out,
        "wrote {} records, LSN {} to {} (LSNs kept), in {} to {}",
        w.records,
        w.first_lsn,
        w.last_lsn,
        count(w.segments as u64, "segment"),
        new_dir.display()
    )?;
    Ok(())
}

/// Calls `f` with each atomic batch of the records with `from <= LSN <= to`;
/// a batch cut by either end of the range is passed as far as it lies inside.
fn for_each_batch(
    log: &Log,
    from: Lsn,
    to: Lsn,
    mut f: impl FnMut(&[Record]) -> Result<()>,
) -> Result<()> {
    let mut batch = Vec::new();
    for r in log.reader(from) {
        let r = r?;
        if r.lsn > to {
            break;
        }
        let ends = r.ends_batch();
        batch.push(r);
        if ends {
            f(&batch)?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        f(&batch)?;
    }
    Ok(())
}

/// What a [`LogBuilder`] wrote.
struct Written {
    records: u64,
    segments: usize,
    first_lsn: Lsn,
    last_lsn: Lsn,
}

/// The segment a [`LogBuilder`] is filling.
struct OpenSegment {
    header: SegmentHeader,
    file: Arc<dyn StorageFile>,
    summary: SegmentSummary,
}

/// Writes a new log directory segment by segment, keeping every record's
/// LSN, term and timestamp, in the layout the log writes itself: batches
/// never span segments, each segment is named by its first LSN, sealed
/// segments get an index, the last segment is the active one. Nothing is
/// created until the first batch, so an empty selection leaves no directory.
struct LogBuilder {
    dir: PathBuf,
    /// The new directory's storage and lock, from the first batch on.
    target: Option<(FsStorage, DirLock)>,
    active: Option<OpenSegment>,
    generation: u64,
    written: Written,
    buf: Vec<u8>,
}

impl LogBuilder {
    fn new(dir: &Path) -> Result<LogBuilder> {
        if let Ok(mut entries) = fs::read_dir(dir) {
            if entries.next().is_some() {
                bail!(
                    "{} exists and is not empty; give a new directory for the new log",
                    dir.display()
                );
            }
        }
        Ok(LogBuilder {
            dir: dir.to_path_buf(),
            target: None,
            active: None,
            generation: 0,
            written: Written {
                records: 0,
                segments: 0,
                first_lsn: 0,
                last_lsn: 0,
            },
            buf: Vec::new(),
        })
    }

    /// Appends `batch` (LSNs increasing past everything written) as one
    /// atomic batch. An empty batch writes nothing.
    fn write_batch(&mut self, batch: &[Record]) -> Result<()> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        if first.lsn <= self.written.last_lsn {
            bail!(
                "records out of order: LSN {} after {}",
                first.lsn,
                self.written.last_lsn
            );
        }
        self.roll_if_full(first.lsn)?;
        let seg = self.active.as_mut().expect("a segment is open");
        let start = seg.summary.data_len;
        self.buf.clear();
        let mut placed = Vec::with_capacity(batch.len());
        for (i, r) in batch.iter().enumerate() {
            let flags = if i + 1 < batch.len() {
                FLAG_BATCH_CONTINUES
            } else {
                0
            };
            placed.push((r.lsn, start + self.buf.len() as u64, r.encoded_len() as u64));
            RecordView { flags, ..r.view() }.encode_into(&mut self.buf);
        }
        seg.file
            .write_at(&self.buf, start)
            .with_context(|| format!("writing to {}", self.dir.display()))?;
        for (lsn, offset, len) in placed {
            seg.summary.add(lsn, offset, len);
        }
        let w = &mut self.written;
        if w.records == 0 {
            w.first_lsn = first.lsn;
        }
        w.records += batch.len() as u64;
        w.last_lsn = batch[batch.len() - 1].lsn;
        Ok(())
    }

    /// Starts a segment at `base` when none is open or the open one is full
    /// (only between batches, as the log does).
    fn roll_if_full(&mut self, base: Lsn) -> Result<()> {
        if let Some(seg) = &self.active {
            if seg.summary.data_len < OUT_SEGMENT_BYTES {
                return Ok(());
            }
        }
        if self.target.is_none() {
            let lock = DirLock::acquire(&self.dir)?;
            let storage = FsStorage::new(&self.dir)
                .with_context(|| format!("creating {}", self.dir.display()))?;
            self.target = Some((storage, lock));
        }
        let (storage, _) = self.target.as_ref().expect("just set");
        if let Some(seg) = self.active.take() {
            seal(storage, &seg)?;
        }
        self.generation += 1;
        let header = SegmentHeader {
            base,
            covers_until: 0,
            generation: self.generation,
        };
        let file = storage
            .create(&data_name(base))
            .and_then(|f| f.write_at(&header.encode(), 0).map(|_| f))
            .with_context(|| format!("creating {}", storage.describe(&data_name(base))))?;
        self.active = Some(OpenSegment {
            header,
            file,
            summary: SegmentSummary::empty(),
        });
        self.written.segments += 1;
        Ok(())
    }

    /// Makes everything durable, then checks the new log by opening it and
    /// reading every record. Returns `None` when nothing was written.
    fn finish(mut self) -> Result<Option<Written>> {
        let Some((storage, lock)) = self.target.take() else {
            return Ok(None);
        };
        if let Some(seg) = self.active.take() {
            seg.file.sync().context("syncing the new log")?;
        }
        storage.sync_dir().context("syncing the new log")?;
        drop(lock);
        let w = self.written;
        // The new log's manifest names the segments just written.
        require_log(&self.dir)?;
        let log = Log::open_adopting(&self.dir, Options::default())?.0;
        let mut count = 0u64;
        log.replay(1, |_| {
            count += 1;
            Ok(())
        })?;
        if count != w.records || log.next_lsn() != w.last_lsn + 1 {
            bail!(
                "the new log in {} reads back {count} records ending before LSN {}, \
                 but {} records up to LSN {} were written",
                self.dir.display(),
                log.next_lsn(),
                w.records,
                w.last_lsn
            );
        }
        Ok(Some(w))
    }
}

/// Seals a segment the way the log does: data synced, then its index.
fn seal(storage: &FsStorage, seg: &OpenSegment) -> Result<()> {
    let base = seg.header.base;
    seg.file.sync().context("syncing the new log")?;
    segment::write_atomically(
        storage,
        &index_name(base),
        &seg.summary.encode_index(seg.header.generation),
    )
    .context("writing an index of the new log")
}

// ---------------------------------------------------------------- export

/// One line of `export`; field order is the output's.
#[derive(Serialize)]
struct ExportRecord<'a> {
    lsn: Lsn,
    term: u64,
    timestamp: i64,
    time: String,
    kind: String,
    batch_end: bool,
    key: ExportBytes<'a>,
    body: ExportBytes<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ExportBytes<'a> {
    Text(&'a str),
    Binary { base64: String },
}

impl<'a> ExportBytes<'a> {
    fn new(bytes: &'a [u8]) -> ExportBytes<'a> {
        match std::str::from_utf8(bytes) {
            Ok(s) => ExportBytes::Text(s),
            Err(_) => ExportBytes::Binary {
                base64: base64(bytes),
            },
        }
    }
}

fn export(out: &mut dyn Write, dir: &Path, from: Lsn) -> Result<()> {
    let log = open_read_only(dir)?;
    // The replay callback can only return the log's error type; keep ours here.
    let mut failed: Option<anyhow::Error> = None;
    let result = log.replay(from, |r| {
        let line = ExportRecord {
            lsn: r.lsn,
            term: r.term,
            timestamp: r.timestamp_micros,
            time: rfc3339(r.timestamp_micros),
            kind: r.kind.name(),
            batch_end: r.ends_batch(),
            key: ExportBytes::new(r.key),
            body: ExportBytes::new(r.body),
        };
        // As an io::Error, a closed pipe is recognised (and is not a failure).
        let written = serde_json::to_writer(&mut *out, &line)
            .map_err(io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .map_err(anyhow::Error::from);
        written.map_err(|e| {
            failed = Some(e);
            LogError::Invalid("export stopped".into())
        })
    });
    match (result, failed) {
        (_, Some(e)) => Err(e),
        (r, None) => r.map(|_| ()).map_err(Into::into),
    }
}

// ---------------------------------------------------------------- compact

fn compact(out: &mut dyn Write, dir: &Path) -> Result<()> {
    let log = open_writable(dir)?;
    let before = log.segments();
    // The active segment is never compacted; seal it so the whole log is.
    log.seal_active()?;
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("compacting {bar:40} {pos}/{len} steps ({elapsed})")
            .expect("a valid template"),
    );
    let result = log.compact_with_progress(&mut |done, planned| {
        bar.set_length(planned as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    result?;
    let after = log.segments();
    let (rb, bb) = (total_records(&before), total_bytes(&before));
    let (ra, ba) = (total_records(&after), total_bytes(&after));
    writeln!(
        out,
        "before: {rb} records, {bb} bytes in {}",
        count(before.len() as u64, "segment")
    )?;
    writeln!(
        out,
        "after:  {ra} records, {ba} bytes in {}",
        count(after.len() as u64, "segment")
    )?;
    writeln!(
        out,
        "removed {} records, {} bytes",
        rb.saturating_sub(ra),
        bb.saturating_sub(ba)
    )?;
    Ok(())
}

fn total_bytes(segs: &[SegmentStat]) -> u64 {
    segs.iter().map(|s| s.bytes).sum()
}

// ---------------------------------------------------------------- rebuild-manifest

fn rebuild_manifest(out: &mut dyn Write, dir: &Path, yes: bool) -> Result<()> {
    require_log(dir)?;
    let opts = Options {
        read_only: true,
        ..Options::default()
    };
    match Log::open(dir, opts) {
        Ok(_) => writeln!(
            out,
            "the log opens as it is; its manifest matches its segments"
        )?,
        Err(e) => writeln!(out, "the log does not open now: {e}")?,
    }
    let segs = list_segments(dir)?;
    writeln!(
        out,
        "the manifest would name the {} present: {}",
        count(segs.len() as u64, "segment file"),
        segs.iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    writeln!(
        out,
        "records of any segment not among them are lost for good; restore missing files \
         first if you have them"
    )?;
    if !yes {
        bail!("dry run, nothing was changed: rerun with --yes to rewrite the manifest");
    }
    let (log, _) = Log::open_adopting(dir, Options::default())?;
    let segs = log.segments();
    writeln!(
        out,
        "done: the manifest names {}, {} records (LSN {} to {})",
        count(segs.len() as u64, "segment"),
        total_records(&segs),
        lsn_or_dash(log.first_lsn()),
        lsn_or_dash(last_lsn(&segs))
    )?;
    Ok(())
}

// ---------------------------------------------------------------- verify

fn verify(out: &mut dyn Write, dir: &Path) -> Result<()> {
    require_log(dir)?;
    let opts = Options {
        read_only: true,
        ..Options::default()
    };
    // A read-only open already reads every record; corruption stops it.
    let log = match Log::open(dir, opts) {
        Ok((log, _)) => log,
        Err(e @ LogError::Corrupt { .. }) => return Err(damage_report(dir, &e)?.into()),
        Err(e @ LogError::Inconsistent { .. }) => return Err(incomplete_report(dir, &e).into()),
        Err(e) => return Err(e.into()),
    };
    let records = match replay_all(&log) {
        Ok(n) => n,
        Err(e @ LogError::Corrupt { .. }) => return Err(damage_report(dir, &e)?.into()),
        Err(e) => return Err(e.into()),
    };
    let segs = log.segments();
    let indexes = check_indexes(dir, &segs)?;
    if let Some(bad) = indexes.bad {
        return Err(Damaged(bad).into());
    }
    writeln!(
        out,
        "OK: {} segments, {records} records (LSN {} to {}), {} indexes match their segments",
        segs.len(),
        lsn_or_dash(log.first_lsn()),
        lsn_or_dash(last_lsn(&segs)),
        indexes.checked
    )?;
    for note in &indexes.notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}

/// Reads every record (checking its checksum) and the LSN order.
fn replay_all(log: &Log) -> Result<u64, LogError> {
    let mut prev = 0;
    log.replay(1, |r| {
        if r.lsn <= prev {
            return Err(LogError::Invalid(format!(
                "LSN {} follows LSN {prev}: LSNs do not increase",
                r.lsn
            )));
        }
        prev = r.lsn;
        Ok(())
    })
}

/// The message for damage `Log::open` (or a replay) reported, with the
/// repair command: the LSN to cut at comes from a scan of the segment files.
fn damage_report(dir: &Path, e: &LogError) -> Result<Damaged> {
    let LogError::Corrupt {
        location,
        offset,
        lsn,
        reason,
    } = e
    else {
        unreachable!("called for corruption only");
    };
    let mut msg = format!("the log is damaged\n  file:    {location}\n  offset:  {offset}\n");
    match lsn {
        Some(l) => writeln!(msg, "  LSN:     {l}")?,
        None => writeln!(msg, "  LSN:     unknown (the record header is unreadable)")?,
    }
    writeln!(msg, "  reason:  {reason}")?;
    let segs = list_segments(dir)?;
    match plan_cut(dir, &segs, Lsn::MAX)? {
        Some(cut) if cut.damage.is_some() => {
            let at = cut.repair_lsn();
            write!(
                msg,
                "to repair, remove the damaged record and everything after it (recover those \
                 records from a replica if there is one); see what would go with\n  \
                 aqueduct wal truncate {} --at {at}\nthen add --yes to do it",
                dir.display()
            )?;
        }
        _ => write!(
            msg,
            "no damaged record was found in the segment files, so `aqueduct wal truncate` \
             cannot repair this"
        )?,
    }
    Ok(Damaged(msg))
}

/// The message for a log that is not whole (a segment missing, unknown or
/// an older copy), with the repairs.
fn incomplete_report(dir: &Path, e: &LogError) -> Damaged {
    let LogError::Inconsistent {
        problem,
        repair,
        cut_at,
    } = e
    else {
        unreachable!("called for an incomplete log only");
    };
    let dir = dir.display();
    let mut msg = format!(
        "the log is not whole: opening it would silently lose or change committed records\n  \
         problem: {problem}\n  repair:  {}\n",
        repair.replace("<dir>", &dir.to_string())
    );
    if let Some(at) = cut_at {
        let _ = write!(
            msg,
            "to cut the log before the damage instead, see what would go with\n  \
             aqueduct wal truncate {dir} --at {at}\nthen add --yes to do it"
        );
    }
    Damaged(msg.trim_end().to_string())
}

/// What the index check found.
struct IndexCheck {
    checked: usize,
    /// Indexes missing or stale: harmless, rebuilt at the next writable open.
    notes: Vec<String>,
    /// An index that is well-formed but disagrees with its segment: the log
    /// would trust it.
    bad: Option<String>,
}

fn check_indexes(dir: &Path, segs: &[SegmentStat]) -> Result<IndexCheck> {
    let mut check = IndexCheck {
        checked: 0,
        notes: Vec::new(),
        bad: None,
    };
    for s in segs {
        let idx_path = dir.join(index_name(s.base));
        let bytes = match fs::read(&idx_path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if s.sealed {
                    check.notes.push(format!(
                        "{}: no index; it is rebuilt at the next writable open",
                        s.name
                    ));
                }
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", idx_path.display())),
        };
        if !s.sealed {
            check.notes.push(format!(
                "{}: a stale index of the active segment; removed at the next writable open",
                idx_path.display()
            ));
            continue;
        }
        let file = ReadOnlyFile::open(&dir.join(data_name(s.base)))?;
        let len = file.len()?;
        let header = SegmentHeader::read(&file).map_err(anyhow::Error::msg)?;
        let indexed = match SegmentSummary::decode_index(&bytes, header.generation, len) {
            Ok(i) => i,
            Err(problem) => {
                check.notes.push(format!(
                    "{}: {problem}; it is rebuilt at the next writable open",
                    idx_path.display()
                ));
                continue;
            }
        };
        let (scanned, _) = segment::summarize(&file, len)?;
        if indexed != scanned {
            check.bad = Some(format!(
                "the index {} does not match its segment (it says {} records, LSN {} to {}; \
                 the segment holds {}, LSN {} to {}); remove the index file: the next open \
                 rebuilds it",
                idx_path.display(),
                indexed.record_count,
                indexed.first_lsn,
                indexed.last_lsn,
                scanned.record_count,
                scanned.first_lsn,
                scanned.last_lsn
            ));
            return Ok(check);
        }
        check.checked += 1;
    }
    Ok(check)
}

// ---------------------------------------------------------------- truncate

fn truncate(out: &mut dyn Write, dir: &Path, at: Lsn, yes: bool) -> Result<()> {
    if at == 0 {
        bail!("LSN 0 is never used (the first record has LSN 1); give --at 1 or more");
    }
    require_log(dir)?;
    let opts = Options {
        read_only: true,
        ..Options::default()
    };
    // Opening checks only the active segment; a full replay checks the rest.
    let opened = Log::open(dir, opts).and_then(|(log, _)| {
        log.replay(0, |_| Ok(()))?;
        Ok(log)
    });
    match opened {
        Ok(log) => truncate_healthy(out, dir, log, at, yes),
        Err(e @ (LogError::Corrupt { .. } | LogError::Inconsistent { .. })) => {
            writeln!(out, "the log does not open: {e}")?;
            writeln!(out, "cutting the segment files directly")?;
            truncate_damaged(out, dir, at, yes)
        }
        Err(e) => Err(e.into()),
    }
}

/// Truncation of a log that opens: planned on the files (for the batch
/// boundary), done by `Log::truncate_after`.
fn truncate_healthy(out: &mut dyn Write, dir: &Path, log: Log, at: Lsn, yes: bool) -> Result<()> {
    let segs = list_segments(dir)?;
    let Some(cut) = plan_cut(dir, &segs, at)? else {
        writeln!(
            out,
            "nothing to remove: no record has LSN {at} or more (the last LSN is {})",
            lsn_or_dash(last_lsn(&log.segments()))
        )?;
        return Ok(());
    };
    let first = cut
        .first_removed
        .expect("a healthy log's records are readable");
    let stats = log.segments();
    let removed = total_records(&stats) - cut.kept_records;
    if first < at {
        writeln!(
            out,
            "LSN {at} lies inside an atomic batch that starts at LSN {first}: \
             the whole batch goes, so the log stays atomic"
        )?;
    }
    writeln!(
        out,
        "removing {removed} records, LSN {first} to {}; the log will end at LSN {}",
        last_lsn(&stats),
        lsn_or_dash(cut.kept_last)
    )?;
    warn_if_compacted(out, &cut, stats.first().map_or(1, |s| s.base))?;
    if !yes {
        bail!("dry run, nothing was changed: rerun with --yes to remove these {removed} records");
    }
    drop(log);
    let log = open_writable(dir)?;
    match log.truncate_after(first - 1) {
        Ok(()) => drop(log),
        Err(LogError::Invalid(why)) => {
            // The cut falls in a merged segment, which the log refuses for
            // replication's sake; for an operator the file-level cut is safe.
            drop(log);
            writeln!(out, "{why}; cutting the segment files directly")?;
            let _lock = DirLock::acquire(dir)?;
            let segs = list_segments(dir)?;
            let cut = plan_cut(dir, &segs, at)?.expect("planned above");
            apply_cut(dir, &segs, &cut)?;
            drop(_lock);
            adopt_after_cut(dir)?;
        }
        Err(e) => return Err(e.into()),
    }
    report_after_truncate(out, dir)
}

/// Truncation of a log too damaged to open: on the segment files, under the
/// directory's lock.
fn truncate_damaged(out: &mut dyn Write, dir: &Path, at: Lsn, yes: bool) -> Result<()> {
    let lock = DirLock::acquire(dir)?;
    let segs = list_segments(dir)?;
    let Some(cut) = plan_cut(dir, &segs, at)? else {
        bail!(
            "no damaged record was found in the segment files and no record has LSN {at} or \
             more, so truncating cannot repair this log"
        );
    };
    if let Some(d) = &cut.damage {
        if cut.first_removed.is_none_or(|l| l < at) {
            bail!(
                "the first damage ({} at byte offset {}: {}) lies before LSN {at}; cutting at \
                 LSN {at} would keep it. Cut at the damaged batch instead: \
                 aqueduct wal truncate {} --at {}",
                d.file,
                d.offset,
                d.reason,
                dir.display(),
                cut.repair_lsn()
            );
        }
    }
    let later = segs.iter().filter(|s| s.base > cut.base).count();
    writeln!(
        out,
        "removing {} from byte offset {} on{}, and {later} later segment files; \
         the log will end at LSN {}",
        cut.name,
        cut.offset,
        cut.first_removed
            .map(|l| format!(" (LSN {l})"))
            .unwrap_or_default(),
        lsn_or_dash(cut.kept_last)
    )?;
    warn_if_compacted(out, &cut, segs.first().map_or(1, |s| s.base))?;
    if !yes {
        bail!("dry run, nothing was changed: rerun with --yes to remove these records");
    }
    apply_cut(dir, &segs, &cut)?;
    drop(lock);
    adopt_after_cut(dir)?;
    report_after_truncate(out, dir)
}

/// After a cut of the files, the manifest names the segments that remain.
fn adopt_after_cut(dir: &Path) -> Result<()> {
    Log::open_adopting(dir, Options::default())
        .with_context(|| format!("recording the truncated log in {}", dir.display()))?;
    Ok(())
}

/// Truncating below compacted history does not give the state as of the
/// cut: a key whose newest value is removed loses the older values too,
/// because compaction dropped them. Gaps in the kept LSNs show compaction.
fn warn_if_compacted(out: &mut dyn Write, cut: &Cut, first_base: Lsn) -> Result<()> {
    let span = (cut.kept_last + 1).saturating_sub(first_base);
    if cut.kept_records < span {
        writeln!(
            out,
            "warning: the kept records were compacted ({} of the LSNs below {} are gone), so \
             a key whose newest record is removed does not fall back to an older value",
            span - cut.kept_records,
            cut.kept_last + 1
        )?;
    }
    Ok(())
}

fn report_after_truncate(out: &mut dyn Write, dir: &Path) -> Result<()> {
    let log = open_writable(dir)?;
    writeln!(
        out,
        "done: the log now ends at LSN {}; the next record gets LSN {}",
        lsn_or_dash(last_lsn(&log.segments())),
        log.next_lsn()
    )?;
    Ok(())
}

/// A segment data file in the directory.
struct SegFile {
    base: Lsn,
    name: String,
}

fn list_segments(dir: &Path) -> Result<Vec<SegFile>> {
    let mut segs = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(base) = parse_data_name(&name) {
            segs.push(SegFile { base, name });
        }
    }
    segs.sort_by_key(|s| s.base);
    Ok(segs)
}

/// Damage found by a file-level scan.
struct Damage {
    file: String,
    offset: u64,
    reason: String,
}

/// Where a file-level truncation cuts.
struct Cut {
    base: Lsn,
    name: String,
    /// First byte removed from the segment (at least the header length).
    offset: u64,
    /// The header to keep; `None` when it is damaged and must be rewritten.
    header: Option<SegmentHeader>,
    /// LSN of the first removed record, when its header is readable.
    first_removed: Option<Lsn>,
    /// The last LSN that stays, and how many records stay.
    kept_last: Lsn,
    kept_records: u64,
    /// Highest segment generation seen, for a rewritten header.
    max_generation: u64,
    /// Why the cut is here, when it is for damage rather than for `at`.
    damage: Option<Damage>,
}

impl Cut {
    /// The `--at` that removes exactly from the cut on.
    fn repair_lsn(&self) -> Lsn {
        self.first_removed
            .unwrap_or_else(|| (self.kept_last + 1).max(self.base))
    }
}

/// How far a scan of one segment got.
struct SegmentScan {
    /// The batch in progress: LSN and offset of its first record.
    batch_start: Option<(Lsn, u64)>,
    /// Records of the batch in progress.
    pending: u64,
    /// Last LSN read, and the last LSN (and count) that ended a batch.
    last: Lsn,
    committed_last: Lsn,
    committed_records: u64,
}

/// Finds where a truncation at `at` cuts, reading the segment files the way
/// recovery does: the first record with LSN >= `at`, or the first damage if
/// it comes earlier, moved back to the start of its atomic batch. A torn
/// tail of the last segment is not damage (opening cuts it); a complete
/// record there whose checksum fails is (`segment::classify_tail`). `None`: nothing
/// to cut.
fn plan_cut(dir: &Path, segs: &[SegFile], at: Lsn) -> Result<Option<Cut>> {
    let mut covered_until = 0;
    let mut max_generation = 0;
    let mut scan = SegmentScan {
        batch_start: None,
        pending: 0,
        last: 0,
        committed_last: 0,
        committed_records: 0,
    };
    for (i, seg) in segs.iter().enumerate() {
        if seg.base < covered_until {
            continue; // absorbed by a merge; opening removes it
        }
        let path = dir.join(&seg.name);
        let file = ReadOnlyFile::open(&path)?;
        let len = file.len()?;
        let is_last = i + 1 == segs.len();
        let header = match SegmentHeader::read(&file) {
            Ok(h) if h.base == seg.base => h,
            Err(_) if is_last && len <= SEGMENT_HEADER_LEN => continue, // creation cut short
            Ok(h) => {
                let reason = format!(
                    "header says base LSN {} but the name says {}",
                    h.base, seg.base
                );
                return Ok(Some(header_cut(seg, &path, reason, &scan, max_generation)));
            }
            Err(reason) => return Ok(Some(header_cut(seg, &path, reason, &scan, max_generation))),
        };
        max_generation = max_generation.max(header.generation);
        covered_until = covered_until.max(header.covers_until);
        scan.batch_start = None;
        scan.pending = 0;
        let mut stop: Option<(u64, Option<Lsn>, Option<String>)> = None;
        let end = segment::scan(&file, SEGMENT_HEADER_LEN, len, |r, off| {
            if r.lsn >= at {
                stop = Some((off, Some(r.lsn), None));
                return Ok(false);
            }
            let disorder = if r.lsn <= scan.last {
                Some(format!("LSN {} does not follow LSN {}", r.lsn, scan.last))
            } else if r.lsn < header.base {
                Some(format!(
                    "LSN {} is below the segment's base LSN {}",
                    r.lsn, header.base
                ))
            } else {
                None
            };
            if disorder.is_some() {
                stop = Some((off, Some(r.lsn), disorder));
                return Ok(false);
            }
            scan.last = r.lsn;
            if r.ends_batch() {
                scan.batch_start = None;
                scan.committed_last = r.lsn;
                scan.committed_records += scan.pending + 1;
                scan.pending = 0;
            } else {
                scan.batch_start.get_or_insert((r.lsn, off));
                scan.pending += 1;
            }
            Ok(true)
        })?;
        if stop.is_none() {
            if let ScanEnd::Bad { offset, error } = end {
                let damage = if is_last {
                    segment::classify_tail(&file, offset, len, &error, scan.last)?
                } else {
                    TailDamage::Corrupt {
                        lsn: segment::bad_lsn(&error),
                        reason: error.to_string(),
                    }
                };
                if let TailDamage::Corrupt { lsn, reason } = damage {
                    stop = Some((offset, lsn, Some(reason)));
                }
            }
        }
        if let Some((at_offset, lsn, damage)) = stop {
            // Back to the start of the batch, so no partial batch stays.
            let (offset, first_removed) = match scan.batch_start {
                Some((l, o)) => (o, Some(l)),
                None => (at_offset, lsn),
            };
            return Ok(Some(Cut {
                base: seg.base,
                name: seg.name.clone(),
                offset,
                header: Some(header),
                first_removed,
                kept_last: scan.committed_last,
                kept_records: scan.committed_records,
                max_generation,
                damage: damage.map(|reason| Damage {
                    file: path.display().to_string(),
                    offset: at_offset,
                    reason,
                }),
            }));
        }
    }
    Ok(None)
}

/// A cut at a segment whose header is damaged: its records cannot be trusted,
/// so the segment is emptied and given a fresh header.
fn header_cut(
    seg: &SegFile,
    path: &Path,
    reason: String,
    scan: &SegmentScan,
    max_generation: u64,
) -> Cut {
    Cut {
        base: seg.base,
        name: seg.name.clone(),
        offset: SEGMENT_HEADER_LEN,
        header: None,
        first_removed: None,
        kept_last: scan.committed_last,
        kept_records: scan.committed_records,
        max_generation,
        damage: Some(Damage {
            file: path.display().to_string(),
            offset: 0,
            reason,
        }),
    }
}

/// Carries out a cut: later segments go newest first (so every step leaves
/// a prefix of the log), then the cut segment loses its tail and its stale
/// index. A segment whose header must change (damaged, or a merged segment's
/// `covers_until`, which would make segments created after the cut look like
/// merge leftovers) is rewritten whole through a temporary file and a rename.
fn apply_cut(dir: &Path, segs: &[SegFile], cut: &Cut) -> Result<()> {
    let storage = FsStorage::new(dir).with_context(|| format!("opening {}", dir.display()))?;
    let io_ctx = |what: &str| format!("truncating the log in {}: {what}", dir.display());
    // The manifest says a truncation is under way, so a crash in the steps
    // below leaves a log that opens (`adopt_after_cut` then rewrites it).
    if let Ok(Some(mut m)) = Manifest::load(&storage) {
        m.truncating_after = Some(cut.repair_lsn().saturating_sub(1));
        m.store(&storage)
            .map_err(|e| e.error)
            .with_context(|| io_ctx("writing the log manifest"))?;
    }
    for s in segs.iter().rev().filter(|s| s.base > cut.base) {
        remove_if_present(&storage, &index_name(s.base))?;
        storage
            .remove(&s.name)
            .with_context(|| io_ctx("removing a segment"))?;
        storage.sync_dir().with_context(|| io_ctx("syncing"))?;
    }
    for name in storage.list()? {
        if index_base(&name).is_some_and(|b| b > cut.base) {
            remove_if_present(&storage, &name)?; // an index without its segment
        }
    }
    remove_if_present(&storage, &index_name(cut.base))?;
    match cut.header {
        Some(h) if h.covers_until == 0 => {
            let file = storage
                .open(&cut.name)
                .with_context(|| io_ctx("opening the segment to cut"))?;
            file.truncate(cut.offset)
                .and_then(|()| file.sync())
                .with_context(|| io_ctx("cutting the segment"))?;
        }
        _ => rewrite_segment(&storage, cut).with_context(|| io_ctx("rewriting the segment"))?,
    }
    storage.sync_dir().with_context(|| io_ctx("syncing"))?;
    Ok(())
}

/// Writes the kept part of the cut segment under a fresh header (no
/// `covers_until`, a new generation) to a temporary file, then renames it
/// over the segment. A crash leaves either version; the `.tmp` is removed
/// at open.
fn rewrite_segment(storage: &FsStorage, cut: &Cut) -> io::Result<()> {
    let header = SegmentHeader {
        base: cut.base,
        covers_until: 0,
        generation: cut.max_generation + 1,
    };
    let old = storage.open(&cut.name)?;
    let tmp = tmp_name(&cut.name);
    let new = storage.create(&tmp)?;
    new.write_at(&header.encode(), 0)?;
    let mut pos = SEGMENT_HEADER_LEN;
    while pos < cut.offset {
        let n = COPY_CHUNK_BYTES.min((cut.offset - pos) as usize);
        new.write_at(&old.read_vec(pos, n)?, pos)?;
        pos += n as u64;
    }
    new.sync()?;
    storage.rename(&tmp, &cut.name)?;
    storage.sync_dir()
}

fn remove_if_present(storage: &FsStorage, name: &str) -> Result<()> {
    match storage.remove(name) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", storage.describe(name))),
    }
}

/// Base LSN of an index file name (`<20 digits>.idx`).
fn index_base(name: &str) -> Option<Lsn> {
    parse_data_name(&format!("{}.seg", name.strip_suffix(".idx")?))
}

/// A segment file opened for reading only, so `verify` and the planning of
/// a truncation cannot change anything (`FsStorage` opens files writable).
struct ReadOnlyFile(File);

impl ReadOnlyFile {
    fn open(path: &Path) -> Result<ReadOnlyFile> {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(ReadOnlyFile(f))
    }
}

impl StorageFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(read_only())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn sync(&self) -> io::Result<()> {
        Err(read_only())
    }
    fn truncate(&self, _: u64) -> io::Result<()> {
        Err(read_only())
    }
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "opened for reading only")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(
            rfc3339(1_700_000_000_123_456),
            "2023-11-14T22:13:20.123456Z"
        );
        // A leap day, and the day after a century that is not a leap year.
        assert_eq!(rfc3339(951_782_400_000_000), "2000-02-29T00:00:00.000000Z");
        assert_eq!(
            rfc3339(4_107_542_400_000_000),
            "2100-03-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn civil_from_days_walks_every_day() {
        // Every day from 1900 to 2200 follows the previous one.
        let mut prev = civil_from_days(-25_567); // 1900-01-01
        assert_eq!(prev, (1900, 1, 1));
        for days in -25_566..84_000 {
            let (y, m, d) = civil_from_days(days);
            let next_day = (y, m, d) == (prev.0, prev.1, prev.2 + 1);
            let next_month = (y, m, d) == (prev.0, prev.1 + 1, 1);
            let next_year = (y, m, d) == (prev.0 + 1, 1, 1) && prev.1 == 12 && prev.2 == 31;
            assert!(
                next_day || next_month || next_year,
                "{prev:?} then {:?}",
                (y, m, d)
            );
            prev = (y, m, d);
        }
    }

    #[test]
    fn base64_rfc4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn preview_escapes_and_cuts() {
        assert_eq!(preview(b"a\"b\\c\nd\x01", 80), "a\\\"b\\\\c\\nd\\u{1}");
        assert_eq!(preview(b"abcdef", 3), "abc…");
        assert_eq!(preview(&[b'a', 0xff, b'b'], 80), "a\u{fffd}b");
        assert_eq!(preview("é漢".as_bytes(), 80), "é漢");
    }
}
