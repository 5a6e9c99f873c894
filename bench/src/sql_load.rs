//! `bench sql load`: bulk loading, restart and memory per row, the Aqueduct
//! server against PostgreSQL over the wire, side by side in one run.
//!
//! For each server, on a fresh data directory, durable on both sides:
//! - `COPY narrow FROM STDIN` of `--rows` rows of three bigint columns
//!   (with its primary key only), a statement per million rows: rows/s,
//!   durable when the last statement returns;
//! - multi-row `INSERT INTO indexed ... VALUES (...), (...)` of the same
//!   rows into a table with a secondary index on `g` and a maintained view
//!   over it, `--insert-batch` rows per statement, autocommit: rows/s;
//! - `COPY mixed FROM STDIN` of `--rows` rows of text, numeric and timestamp;
//! - memory per row: Aqueduct is restarted after each table's load, and a
//!   table's bytes per row are the growth of resident memory from the
//!   restart before (the state rebuilt from the log, nothing left over from
//!   loading); PostgreSQL's are `pg_total_relation_size` (heap, TOAST and
//!   indexes) after VACUUM;
//! - restart (Aqueduct): each of those restarts is timed from the stop to
//!   the first answer of a keyed read through the secondary index and of
//!   the maintained view (`indexed_by_g`), so restart time is measured at
//!   one, two and three tables' rows.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Context};
use clap::Args;
use postgres::Client;
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{check_stop, print_table, thousands};
use crate::pg::PgServer;
use crate::sql_point::Backend;

#[derive(Args, Debug, Serialize)]
pub struct LoadArgs {
    /// Servers to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "aqueduct,postgres")]
    pub backends: Vec<Backend>,
    /// Rows loaded into each table.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Rows per multi-row INSERT statement.
    #[arg(long, default_value_t = 5_000)]
    pub insert_batch: u64,
    /// Aqueduct's --fsync (PostgreSQL runs with fsync=on, synchronous_commit=on).
    #[arg(long, default_value = "always")]
    pub fsync: String,
    /// The Aqueduct server binary [default: `aqueduct` next to this binary].
    #[arg(long)]
    #[serde(skip)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Directory holding PostgreSQL 15's initdb, pg_ctl and postgres.
    #[arg(
        long,
        env = "AQUEDUCT_BENCH_PG_BIN",
        default_value = "/usr/lib/postgresql/15/bin"
    )]
    #[serde(skip)]
    pub pg_bin: PathBuf,
    /// Where scratch directories go (the disk under test); default: the temp dir.
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Also write a JSON summary here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE narrow (id bigint PRIMARY KEY, g bigint, v bigint)",
    "CREATE TABLE indexed (id bigint PRIMARY KEY, g bigint, v bigint)",
    "CREATE INDEX indexed_g ON indexed (g)",
    "CREATE TABLE mixed (id bigint PRIMARY KEY, name text, amount numeric(12,2), at timestamp)",
];
/// The maintained view restart must bring back (a plain view on PostgreSQL).
const VIEW: &str = "CREATE VIEW indexed_by_g AS SELECT g, count(*) AS n FROM indexed GROUP BY g";
const FIRST_READS: &[&str] = &[
    "SELECT count(*) FROM indexed WHERE g = 7",
    "SELECT n FROM indexed_by_g WHERE g = 7",
];
/// Distinct values of `g`.
const GROUPS: u64 = 1000;
/// Rows per COPY statement, the same on both servers (one COPY is one
/// transaction; Aqueduct's is bounded by the log one commit may append,
/// `MAX_BATCH_BYTES`, about 2.5 million of the narrow rows).
const COPY_STATEMENT_ROWS: u64 = 1_000_000;
/// Rows per CopyData message the client sends.
const COPY_CHUNK_ROWS: u64 = 10_000;

fn narrow_line(i: u64, out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(out, "{i}\t{}\t{}", i % GROUPS, i.wrapping_mul(7));
}

fn mixed_line(i: u64, out: &mut String) {
    use std::fmt::Write;
    // Names of 12-13 characters, amounts with cents, a second apart.
    let secs = 1_700_000_000 + i;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    let _ = writeln!(
        out,
        "{i}\tcustomer-{i:06}\t{}.{:02}\t{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        i % 100_000,
        i % 100,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[derive(Serialize, Debug)]
pub struct Restart {
    /// Rows in all tables.
    pub rows: u64,
    /// From the stop to the first answer of both first reads.
    pub seconds: f64,
    pub rows_per_s: f64,
}

#[derive(Serialize, Debug)]
pub struct BackendResult {
    pub backend: Backend,
    pub copy_narrow_seconds: f64,
    pub copy_narrow_rows_per_s: f64,
    pub copy_mixed_seconds: f64,
    pub copy_mixed_rows_per_s: f64,
    /// Multi-row INSERTs into `indexed` (secondary index, maintained view).
    pub insert_indexed_seconds: f64,
    pub insert_indexed_rows_per_s: f64,
    /// Per row of each table. Aqueduct: resident memory after a restart
    /// that follows the table's load, over the resident memory after the
    /// restart before it (the state rebuilt from the log, nothing left
    /// over from loading); PostgreSQL: `pg_total_relation_size` (heap,
    /// TOAST and indexes) after VACUUM.
    pub narrow_bytes_per_row: f64,
    pub mixed_bytes_per_row: f64,
    pub indexed_bytes_per_row: f64,
    /// Aqueduct: the peak resident memory during the narrow COPY over the
    /// memory before it, per row (what loading holds at once).
    pub copy_narrow_peak_bytes_per_row: Option<f64>,
    /// Aqueduct: a restart after each load.
    pub restarts: Vec<Restart>,
}

#[derive(Serialize, Debug)]
pub struct LoadResults {
    pub schema: Vec<&'static str>,
    pub view: &'static str,
    pub results: Vec<BackendResult>,
    /// aqueduct / postgres for rows/s (above 1: Aqueduct is faster) and for
    /// bytes per row (above 1: Aqueduct takes more).
    pub ratios: Vec<(String, f64)>,
}

fn copy_in(
    c: &mut Client,
    table: &str,
    rows: u64,
    line: fn(u64, &mut String),
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut buf = String::new();
    let mut first = 1;
    while first <= rows {
        let end = (first + COPY_STATEMENT_ROWS - 1).min(rows);
        let mut w = c
            .copy_in(&format!("COPY {table} FROM STDIN"))
            .with_context(|| format!("COPY {table}"))?;
        let mut i = first;
        while i <= end {
            check_stop()?;
            buf.clear();
            let last = (i + COPY_CHUNK_ROWS - 1).min(end);
            for n in i..=last {
                line(n, &mut buf);
            }
            w.write_all(buf.as_bytes())?;
            i = last + 1;
        }
        let n = w.finish().with_context(|| format!("COPY {table}"))?;
        anyhow::ensure!(
            n == end + 1 - first,
            "COPY {table} loaded {n} rows of {}",
            end + 1 - first
        );
        first = end + 1;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn insert_rows(c: &mut Client, rows: u64, batch: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut i = 1;
    while i <= rows {
        check_stop()?;
        let last = (i + batch - 1).min(rows);
        let values: Vec<String> = (i..=last)
            .map(|n| format!("({n},{},{})", n % GROUPS, n.wrapping_mul(7)))
            .collect();
        c.batch_execute(&format!(
            "INSERT INTO indexed (id, g, v) VALUES {}",
            values.join(",")
        ))
        .with_context(|| format!("inserting rows {i}..={last}"))?;
        i = last + 1;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn first_reads(c: &mut Client) -> anyhow::Result<()> {
    for q in FIRST_READS {
        c.query(*q, &[]).with_context(|| q.to_string())?;
    }
    Ok(())
}

fn create_schema(c: &mut Client) -> anyhow::Result<()> {
    for ddl in SCHEMA.iter().chain([&VIEW]) {
        c.batch_execute(ddl).with_context(|| ddl.to_string())?;
    }
    Ok(())
}

/// Restarts the server on its data directory; returns the seconds from
/// the stop to the first answer of both first reads, and the resident
/// memory then.
fn restart(s: &mut AqueductServer, rows: u64) -> anyhow::Result<(Restart, u64)> {
    eprintln!("aqueduct: restarting on {} rows...", thousands(rows));
    let started = Instant::now();
    // The server listens once its replay is done: the first reads are
    // answered as soon as it accepts connections.
    s.restart(&[])?;
    first_reads(&mut s.connect()?).context("the first reads after the restart")?;
    let seconds = started.elapsed().as_secs_f64();
    let restart = Restart {
        rows,
        seconds,
        rows_per_s: rows as f64 / seconds,
    };
    Ok((restart, s.memory().0))
}

fn run_aqueduct(args: &LoadArgs) -> anyhow::Result<BackendResult> {
    let bin = AqueductServer::binary(&args.aqueduct_bin)?;
    let mut s = AqueductServer::start(&bin, &args.dir, &args.fsync, 20)?;
    create_schema(&mut s.connect()?)?;
    let n = args.rows;
    let (_, empty) = restart(&mut s, 0)?;
    let copy_narrow = copy_in(&mut s.connect()?, "narrow", n, narrow_line)?;
    let peak = s.memory().1;
    let (after_narrow, narrow) = restart(&mut s, n)?;
    let copy_mixed = copy_in(&mut s.connect()?, "mixed", n, mixed_line)?;
    let (after_mixed, mixed) = restart(&mut s, 2 * n)?;
    let insert = insert_rows(&mut s.connect()?, n, args.insert_batch)?;
    let (after_indexed, indexed) = restart(&mut s, 3 * n)?;
    let per_row = |from: u64, to: u64| (to as f64 - from as f64) / n as f64;
    Ok(BackendResult::of(
        Backend::Aqueduct,
        n,
        [copy_narrow, copy_mixed, insert],
        [
            per_row(empty, narrow),
            per_row(narrow, mixed),
            per_row(mixed, indexed),
        ],
        Some(per_row(empty, peak)),
        vec![after_narrow, after_mixed, after_indexed],
    ))
}

fn run_postgres(args: &LoadArgs) -> anyhow::Result<BackendResult> {
    let s = PgServer::start(&args.pg_bin, &args.dir, 20)?;
    let mut c = s.connect()?;
    create_schema(&mut c)?;
    let n = args.rows;
    let copy_narrow = copy_in(&mut c, "narrow", n, narrow_line)?;
    let copy_mixed = copy_in(&mut c, "mixed", n, mixed_line)?;
    let insert = insert_rows(&mut c, n, args.insert_batch)?;
    first_reads(&mut c)?;
    c.batch_execute("VACUUM narrow, mixed, indexed")?;
    let mut size = |t: &str| -> anyhow::Result<f64> {
        let bytes: i64 = c
            .query_one(&format!("SELECT pg_total_relation_size('{t}')"), &[])?
            .get(0);
        Ok(bytes as f64 / n as f64)
    };
    let sizes = [size("narrow")?, size("mixed")?, size("indexed")?];
    Ok(BackendResult::of(
        Backend::Postgres,
        n,
        [copy_narrow, copy_mixed, insert],
        sizes,
        None,
        Vec::new(),
    ))
}

impl BackendResult {
    /// From the seconds of the three loads (COPY narrow, COPY mixed,
    /// INSERT indexed) of `n` rows each and the three tables' bytes per row.
    fn of(
        backend: Backend,
        n: u64,
        [copy_narrow, copy_mixed, insert]: [f64; 3],
        [narrow, mixed, indexed]: [f64; 3],
        peak: Option<f64>,
        restarts: Vec<Restart>,
    ) -> BackendResult {
        let rate = |seconds: f64| n as f64 / seconds;
        BackendResult {
            backend,
            copy_narrow_seconds: copy_narrow,
            copy_narrow_rows_per_s: rate(copy_narrow),
            copy_mixed_seconds: copy_mixed,
            copy_mixed_rows_per_s: rate(copy_mixed),
            insert_indexed_seconds: insert,
            insert_indexed_rows_per_s: rate(insert),
            narrow_bytes_per_row: narrow,
            mixed_bytes_per_row: mixed,
            indexed_bytes_per_row: indexed,
            copy_narrow_peak_bytes_per_row: peak,
            restarts,
        }
    }
}

pub fn run(args: &LoadArgs) -> anyhow::Result<LoadResults> {
    anyhow::ensure!(
        args.rows > 0 && args.insert_batch > 0,
        "--rows and --insert-batch must be > 0"
    );
    let mut results = Vec::new();
    for b in &args.backends {
        eprintln!(
            "{}: loading {} rows per table...",
            b.name(),
            thousands(args.rows)
        );
        let r = match b {
            Backend::Aqueduct => run_aqueduct(args),
            Backend::Postgres => run_postgres(args),
        }
        .map_err(|e| anyhow!("{}: {e:#}", b.name()))?;
        results.push(r);
    }
    let mut ratios = Vec::new();
    let find = |b: Backend| results.iter().find(|r| r.backend == b);
    if let (Some(a), Some(p)) = (find(Backend::Aqueduct), find(Backend::Postgres)) {
        let pairs = [
            (
                "COPY narrow rows/s",
                a.copy_narrow_rows_per_s,
                p.copy_narrow_rows_per_s,
            ),
            (
                "COPY mixed rows/s",
                a.copy_mixed_rows_per_s,
                p.copy_mixed_rows_per_s,
            ),
            (
                "multi-row INSERT rows/s",
                a.insert_indexed_rows_per_s,
                p.insert_indexed_rows_per_s,
            ),
            (
                "narrow bytes/row",
                a.narrow_bytes_per_row,
                p.narrow_bytes_per_row,
            ),
            (
                "mixed bytes/row",
                a.mixed_bytes_per_row,
                p.mixed_bytes_per_row,
            ),
            (
                "indexed bytes/row",
                a.indexed_bytes_per_row,
                p.indexed_bytes_per_row,
            ),
        ];
        ratios = pairs
            .iter()
            .map(|(what, a, p)| (what.to_string(), a / p))
            .collect();
    }
    let f = |x: f64| format!("{x:.0}");
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.backend.name().to_string(),
                thousands(r.copy_narrow_rows_per_s as u64),
                thousands(r.copy_mixed_rows_per_s as u64),
                thousands(r.insert_indexed_rows_per_s as u64),
                f(r.narrow_bytes_per_row),
                f(r.mixed_bytes_per_row),
                f(r.indexed_bytes_per_row),
                r.restarts
                    .iter()
                    .map(|x| format!("{:.1}", x.seconds))
                    .collect::<Vec<_>>()
                    .join(" / "),
            ]
        })
        .collect();
    print_table(
        &[
            "server",
            "COPY narrow rows/s",
            "COPY mixed rows/s",
            "INSERT rows/s",
            "narrow B/row",
            "mixed B/row",
            "indexed B/row",
            "restart s (1, 2, 3 tables)",
        ],
        &rows,
    );
    for (what, r) in &ratios {
        println!("aqueduct/postgres {what}: {r:.2}");
    }
    Ok(LoadResults {
        schema: SCHEMA.to_vec(),
        view: VIEW,
        results,
        ratios,
    })
}
