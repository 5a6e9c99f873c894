//! `bench log compaction`: append latency (SyncPolicy::Always) with and
//! without a compaction running back to back in the background, in
//! alternating phases.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use aqueduct_log::{CompactionReport, Log, NewRecord, Options, Retention, SyncPolicy};
use clap::Args;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::common::{
    self, check_stop, key_of, ms, nap, new_hist, print_table, random_value, run_writers, thousands,
    Latency, WriterOutcome, WriterSpec,
};

#[derive(Args, Debug, Serialize)]
pub struct CompactionArgs {
    /// Concurrent writer threads.
    #[arg(long, default_value_t = 256)]
    pub writers: usize,
    /// Measured seconds per phase per round.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Rounds; each runs both phases, the order alternating.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Unmeasured seconds at the start of each phase.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Segment size, MiB (small, so segments seal often and compaction has work).
    #[arg(long, default_value_t = 4)]
    pub segment_mib: u64,
    /// Keys are obj/<n> with n uniform in [0, keyspace): a small keyspace means
    /// many overwrites for compaction to drop.
    #[arg(long, default_value_t = 10_000)]
    pub keyspace: u64,
    /// Records written (SyncPolicy::Never) before each phase, so compaction has
    /// work from the start.
    #[arg(long, default_value_t = 200_000)]
    pub prefill: u64,
    /// In both phases the active segment is sealed this often (ms), so the
    /// phases differ only in compaction.
    #[arg(long, default_value_t = 250)]
    pub seal_ms: u64,
    /// Retention::min_age of the log (ms): sealed segments younger than this
    /// are not compacted. Nonzero by default to keep compaction off the newest
    /// sealed segment: merging it while a segment is sealed deadlocks the log
    /// (compaction::merge takes the writer lock while holding the segment
    /// list's read lock; seal holds the writer lock and wants the list's write
    /// lock). 0 reproduces that.
    #[arg(long, default_value_t = 1000)]
    pub min_age_ms: u64,
    /// Pause between compaction passes (ms); 0: back to back.
    #[arg(long, default_value_t = 0)]
    pub compact_pause_ms: u64,
    /// Bytes per value (179: Sirius' average object).
    #[arg(long, default_value_t = 179)]
    pub value_bytes: usize,
    /// Where scratch logs go (the disk under test); default: the temp dir.
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

#[derive(Serialize, Debug, Default, Clone)]
pub struct CompactionWork {
    pub passes: u64,
    /// Passes that found nothing to do (followed by a 10 ms pause).
    pub idle_passes: u64,
    pub busy_seconds: f64,
    pub segments_rewritten: u64,
    pub segments_removed: u64,
    pub segments_merged: u64,
    pub records_dropped: u64,
    pub bytes_reclaimed: u64,
}

impl CompactionWork {
    fn add(&mut self, r: &CompactionReport) {
        self.passes += 1;
        self.segments_rewritten += r.segments_rewritten as u64;
        self.segments_removed += r.segments_removed as u64;
        self.segments_merged += r.segments_merged as u64;
        self.records_dropped += r.records_before.saturating_sub(r.records_after);
        self.bytes_reclaimed += r.bytes_before.saturating_sub(r.bytes_after);
    }
}

#[derive(Serialize, Debug)]
pub struct PhaseRound {
    pub round: usize,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub latency: Latency,
    pub seals: u64,
    pub compaction: CompactionWork,
    pub bytes_on_disk_at_end: u64,
}

#[derive(Serialize, Debug)]
pub struct Phase {
    pub compaction: bool,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub latency: Latency,
    pub rounds: Vec<PhaseRound>,
}

#[derive(Serialize, Debug)]
pub struct CompactionResults {
    /// One writer's append + fdatasync of 256 bytes, before the phases.
    pub fdatasync_probe: Latency,
    pub without: Phase,
    pub with: Phase,
    /// p99 with compaction / p99 without (target: <= 1.10).
    pub p99_ratio: f64,
    pub p50_ratio: f64,
    pub records_per_s_ratio: f64,
    pub meets_target: bool,
}

fn prefill(dir: &Path, args: &CompactionArgs, seed: u64) -> anyhow::Result<()> {
    let (log, _) = Log::open(
        dir,
        Options {
            sync: SyncPolicy::Never,
            segment_bytes: args.segment_mib << 20,
            ..Options::default()
        },
    )?;
    let mut rng = StdRng::seed_from_u64(seed);
    let template = random_value(&mut rng, args.value_bytes);
    let mut done = 0;
    while done < args.prefill {
        let n = (args.prefill - done).min(1000);
        let batch: Vec<NewRecord> = (0..n)
            .map(|_| {
                NewRecord::put(
                    key_of(rng.gen_range(0..args.keyspace.max(1))),
                    template.clone(),
                )
            })
            .collect();
        log.append(&batch)?;
        done += n;
    }
    log.sync()?;
    Ok(())
}

fn run_phase(
    args: &CompactionArgs,
    with: bool,
    round: usize,
    pb: &ProgressBar,
) -> anyhow::Result<(WriterOutcome, u64, CompactionWork, u64)> {
    let dir = common::scratch_dir(&args.dir, "bench-compaction-")?;
    let seed = args.seed.wrapping_add(round as u64);
    prefill(dir.path(), args, seed)?;
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    let (log, _) = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Always,
            segment_bytes: args.segment_mib << 20,
            retention: Retention {
                protect_from: None,
                min_age: Duration::from_millis(args.min_age_ms),
            },
            ..Options::default()
        },
    )?;
    let spec = WriterSpec {
        label: format!(
            "round {}/{} {} compaction",
            round + 1,
            args.rounds,
            if with { "with" } else { "without" }
        ),
        writers: args.writers,
        warmup: Duration::from_secs_f64(args.warmup),
        seconds: Duration::from_secs_f64(args.seconds),
        records: None,
        keyspace: args.keyspace,
        value_bytes: args.value_bytes,
        seed,
    };
    let _watchdog = common::Watchdog::new(
        Duration::from_secs_f64(args.warmup + args.seconds) + Duration::from_secs(120),
        spec.label.clone(),
    );
    let done = AtomicBool::new(false);
    let sealed = AtomicU64::new(0);
    let (out, seals, work) = std::thread::scope(|s| -> anyhow::Result<_> {
        let sealer = s.spawn(|| -> anyhow::Result<u64> {
            let mut seals = 0;
            while !done.load(Ordering::Relaxed) && !common::stopped() {
                nap(Duration::from_millis(args.seal_ms));
                log.seal_active()?;
                seals += 1;
                sealed.store(seals, Ordering::Relaxed);
            }
            Ok(seals)
        });
        let compactor = with.then(|| {
            s.spawn(|| -> anyhow::Result<CompactionWork> {
                aqueduct_log::compaction::lower_thread_priority();
                let mut work = CompactionWork::default();
                // Start once the writers' first segment is sealed, so the
                // newest sealed segment is young (see --min-age-ms).
                while sealed.load(Ordering::Relaxed) == 0
                    && !done.load(Ordering::Relaxed)
                    && !common::stopped()
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                while !done.load(Ordering::Relaxed) && !common::stopped() {
                    let t = Instant::now();
                    let r = log.compact()?;
                    work.busy_seconds += t.elapsed().as_secs_f64();
                    work.add(&r);
                    if r.segments_rewritten + r.segments_removed + r.segments_merged == 0 {
                        // Nothing was old enough yet: do not spin.
                        work.idle_passes += 1;
                        nap(Duration::from_millis(10));
                    } else if args.compact_pause_ms > 0 {
                        nap(Duration::from_millis(args.compact_pause_ms));
                    }
                }
                Ok(work)
            })
        });
        let out = run_writers(&spec, pb, |k, v| {
            log.append(&[NewRecord::put(k, v)])?;
            Ok(())
        });
        done.store(true, Ordering::Relaxed);
        let seals = sealer
            .join()
            .map_err(|_| anyhow::anyhow!("the sealer panicked"))?
            .context("sealing")?;
        let work = match compactor {
            Some(c) => c
                .join()
                .map_err(|_| anyhow::anyhow!("the compactor panicked"))?
                .context("compacting")?,
            None => CompactionWork::default(),
        };
        Ok((out?, seals, work))
    })?;
    drop(log);
    let bytes = common::dir_bytes(dir.path())?;
    Ok((out, seals, work, bytes))
}

fn phase(with: bool, rounds: Vec<(PhaseRound, Histogram<u64>)>) -> Phase {
    let mut hist = new_hist();
    let (mut records, mut seconds) = (0, 0.0);
    let mut out = Vec::new();
    for (r, h) in rounds {
        hist.add(&h).expect("same bounds");
        records += r.records;
        seconds += r.seconds;
        out.push(r);
    }
    Phase {
        compaction: with,
        records,
        seconds,
        records_per_s: if seconds > 0.0 {
            records as f64 / seconds
        } else {
            0.0
        },
        latency: Latency::of(&hist),
        rounds: out,
    }
}

pub fn run(args: &CompactionArgs) -> anyhow::Result<CompactionResults> {
    anyhow::ensure!(
        args.writers > 0 && args.rounds > 0,
        "--writers and --rounds must be > 0"
    );
    let fdatasync_probe = {
        let d = common::scratch_dir(&args.dir, "bench-probe-")?;
        common::fdatasync_probe(d.path(), 500)?
    };
    eprintln!(
        "fdatasync probe: p50 {} ms, p99 {} ms",
        ms(fdatasync_probe.p50_ms),
        ms(fdatasync_probe.p99_ms)
    );
    let pb = common::progress(
        (args.rounds * 2) as u64,
        "{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} phases  {msg}",
    );
    let mut without = Vec::new();
    let mut with = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for w in order {
            check_stop()?;
            let (out, seals, work, bytes) = run_phase(args, w, round, &pb)?;
            let lat = Latency::of(&out.hist);
            common::say(&pb, format!(
                "round {}/{} {:18} {:>9} rec/s  p50 {} ms  p99 {} ms  seals {}  compaction passes {} ({} idle; rewrote {} segments, reclaimed {} MiB)",
                round + 1,
                args.rounds,
                if w { "with compaction" } else { "without compaction" },
                thousands(out.rate() as u64),
                ms(lat.p50_ms),
                ms(lat.p99_ms),
                seals,
                work.passes,
                work.idle_passes,
                work.segments_rewritten,
                work.bytes_reclaimed >> 20,
            ));
            let r = PhaseRound {
                round,
                records: out.records,
                seconds: out.seconds,
                records_per_s: out.rate(),
                latency: lat,
                seals,
                compaction: work,
                bytes_on_disk_at_end: bytes,
            };
            if w {
                with.push((r, out.hist));
            } else {
                without.push((r, out.hist));
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let without = phase(false, without);
    let with = phase(true, with);
    let p99_ratio = with.latency.p99_ms / without.latency.p99_ms;
    let results = CompactionResults {
        fdatasync_probe,
        p99_ratio,
        p50_ratio: with.latency.p50_ms / without.latency.p50_ms,
        records_per_s_ratio: with.records_per_s / without.records_per_s,
        meets_target: p99_ratio <= 1.10,
        without,
        with,
    };

    println!();
    println!(
        "log compaction: aqueduct-always, {} writers, {}-byte values, keyspace {}, {} MiB segments sealed every {} ms, {} round(s) x {} s per phase",
        args.writers,
        args.value_bytes,
        thousands(args.keyspace),
        args.segment_mib,
        args.seal_ms,
        args.rounds,
        args.seconds
    );
    let row = |name: &str, p: &Phase| {
        let passes: u64 = p.rounds.iter().map(|r| r.compaction.passes).sum();
        let reclaimed: u64 = p.rounds.iter().map(|r| r.compaction.bytes_reclaimed).sum();
        vec![
            name.to_string(),
            thousands(p.records_per_s as u64),
            ms(p.latency.p50_ms),
            ms(p.latency.p99_ms),
            ms(p.latency.p999_ms),
            ms(p.latency.max_ms),
            passes.to_string(),
            (reclaimed >> 20).to_string(),
        ]
    };
    print_table(
        &[
            "phase",
            "records/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "compaction passes",
            "MiB reclaimed",
        ],
        &[
            row("without compaction", &results.without),
            row("with compaction", &results.with),
        ],
    );
    println!(
        "p99 with/without: {:.2}x (target <= 1.10x: {}); p50 {:.2}x; records/s {:.2}x",
        results.p99_ratio,
        if results.meets_target {
            "met"
        } else {
            "NOT met"
        },
        results.p50_ratio,
        results.records_per_s_ratio
    );
    println!("note: numbers from a shared machine are noisy.");
    Ok(results)
}
