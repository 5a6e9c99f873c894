//! `bench log replay`: build a log of N records, then time `Log::open` plus a
//! full `replay`, with the files in the page cache (warm) and evicted from it
//! (cold).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use aqueduct_log::{Log, NewRecord, Options, SyncPolicy};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::common::{self, check_stop, key_of, print_table, random_value, thousands};

#[derive(Args, Debug, Serialize)]
pub struct ReplayArgs {
    /// Records in the log.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Bytes per value (179: Sirius' average object).
    #[arg(long, default_value_t = 179)]
    pub value_bytes: usize,
    /// Keys are obj/<n> with n uniform in [0, keyspace).
    #[arg(long, default_value_t = 1_000_000)]
    pub keyspace: u64,
    /// Records per append while loading (SyncPolicy::Never).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Segment size, MiB.
    #[arg(long, default_value_t = 64)]
    pub segment_mib: u64,
    /// Skip the second pass with the log's files evicted from the page cache.
    #[arg(long)]
    pub skip_cold: bool,
    /// Where the scratch log goes (the disk under test); default: the temp dir.
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write a JSON summary here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
pub struct Load {
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub bytes_on_disk: u64,
    pub segments: usize,
}

#[derive(Serialize, Debug)]
pub struct Pass {
    /// "warm": just written, in the page cache; "cold": evicted with
    /// posix_fadvise(DONTNEED) after a sync.
    pub cache: &'static str,
    /// Fraction of the log's bytes in the page cache before the open (mincore).
    pub resident_before: f64,
    pub open_seconds: f64,
    pub replay_seconds: f64,
    pub total_seconds: f64,
    pub records: u64,
    pub records_per_s: f64,
    pub mib_per_s: f64,
    pub segments: usize,
    pub indexes_rebuilt: usize,
    /// Targets: >= 1,000,000 records/s, and 10M records opened+replayed < 10 s.
    pub meets_rate_target: bool,
    pub meets_10m_in_10s_target: bool,
}

#[derive(Serialize, Debug)]
pub struct ReplayResults {
    pub load: Load,
    pub passes: Vec<Pass>,
}

fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs writes into the zeroed struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        bail!("statvfs: {}", std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

fn replay_pass(dir: &Path, records: u64, cache: &'static str) -> anyhow::Result<Pass> {
    let (resident, total) = common::resident_bytes(dir)?;
    let t0 = Instant::now();
    let (log, report) = Log::open(dir, Options::default())?;
    let open_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut bytes = 0u64;
    let mut mix = 0u8;
    let n = log.replay(1, |r| {
        bytes += (r.key.len() + r.body.len()) as u64;
        mix ^= r.body.first().copied().unwrap_or(0) ^ r.key.last().copied().unwrap_or(0);
        Ok(())
    })?;
    std::hint::black_box((bytes, mix));
    let replay_seconds = t1.elapsed().as_secs_f64();
    let total_seconds = t0.elapsed().as_secs_f64();
    drop(log);
    if n != records {
        bail!("replay saw {n} records, expected {records}");
    }
    let rate = n as f64 / total_seconds;
    Ok(Pass {
        cache,
        resident_before: if total > 0 {
            resident as f64 / total as f64
        } else {
            0.0
        },
        open_seconds,
        replay_seconds,
        total_seconds,
        records: n,
        records_per_s: rate,
        mib_per_s: total as f64 / (1024.0 * 1024.0) / total_seconds,
        segments: report.segments,
        indexes_rebuilt: report.indexes_rebuilt,
        meets_rate_target: rate >= 1_000_000.0,
        meets_10m_in_10s_target: (10_000_000.0 / rate) < 10.0,
    })
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<ReplayResults> {
    anyhow::ensure!(
        args.records > 0 && args.batch > 0,
        "--records and --batch must be > 0"
    );
    let dir = common::scratch_dir(&args.dir, "bench-replay-")?;
    let est = args.records
        * (aqueduct_log::record::RECORD_HEADER_LEN as u64 + 12 + args.value_bytes as u64);
    let free = free_bytes(dir.path())?;
    if free < est + est / 5 {
        bail!(
            "the log needs about {} MiB but only {} MiB are free there (see --dir)",
            est >> 20,
            free >> 20
        );
    }

    // Load.
    let pb = common::progress(
        args.records,
        "{spinner} loading [{elapsed_precise}] [{bar:30}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
    );
    let t0 = Instant::now();
    {
        let (log, _) = Log::open(
            dir.path(),
            Options {
                sync: SyncPolicy::Never,
                segment_bytes: args.segment_mib << 20,
                ..Options::default()
            },
        )
        .context("creating the log")?;
        let mut rng = StdRng::seed_from_u64(args.seed);
        let template = random_value(&mut rng, args.value_bytes);
        let mut done = 0u64;
        let mut batch = Vec::with_capacity(args.batch);
        while done < args.records {
            check_stop()?;
            let n = (args.records - done).min(args.batch as u64);
            batch.clear();
            for i in 0..n {
                let mut v = template.clone();
                let stamp = (done + i).to_le_bytes();
                let k = stamp.len().min(v.len());
                v[..k].copy_from_slice(&stamp[..k]);
                batch.push(NewRecord::put(
                    key_of(rng.gen_range(0..args.keyspace.max(1))),
                    v,
                ));
            }
            log.append(&batch)?;
            done += n;
            pb.set_position(done);
        }
        log.sync()?;
    }
    let load_seconds = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let bytes_on_disk = common::dir_bytes(dir.path())?;
    let segments = std::fs::read_dir(dir.path())?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .count();
    let load = Load {
        records: args.records,
        seconds: load_seconds,
        records_per_s: args.records as f64 / load_seconds,
        bytes_on_disk,
        segments,
    };
    eprintln!(
        "loaded {} records in {:.1} s ({} MiB on disk, {} segments)",
        thousands(args.records),
        load_seconds,
        bytes_on_disk >> 20,
        segments
    );

    let mut passes = Vec::new();
    eprintln!("open + replay, files in the page cache...");
    passes.push(replay_pass(dir.path(), args.records, "warm")?);
    if !args.skip_cold {
        check_stop()?;
        common::evict_from_page_cache(dir.path())?;
        eprintln!("open + replay, files evicted from the page cache...");
        passes.push(replay_pass(dir.path(), args.records, "cold")?);
    }

    println!();
    println!(
        "log replay: {} records of {}-byte values, {} MiB on disk in {} segments; load (SyncPolicy::Never, batches of {}) {:.1} s = {} rec/s",
        thousands(args.records),
        args.value_bytes,
        bytes_on_disk >> 20,
        segments,
        args.batch,
        load_seconds,
        thousands(load.records_per_s as u64)
    );
    let rows: Vec<Vec<String>> = passes
        .iter()
        .map(|p| {
            vec![
                p.cache.to_string(),
                format!("{:.0}%", p.resident_before * 100.0),
                format!("{:.2}", p.open_seconds),
                format!("{:.2}", p.replay_seconds),
                format!("{:.2}", p.total_seconds),
                thousands(p.records_per_s as u64),
                format!("{:.0}", p.mib_per_s),
                if p.meets_rate_target && p.meets_10m_in_10s_target {
                    "met".into()
                } else {
                    "NOT met".into()
                },
            ]
        })
        .collect();
    print_table(
        &[
            "page cache",
            "resident",
            "open s",
            "replay s",
            "total s",
            "records/s",
            "MiB/s",
            "target (>=1M rec/s, 10M < 10 s)",
        ],
        &rows,
    );
    Ok(ReplayResults { load, passes })
}
