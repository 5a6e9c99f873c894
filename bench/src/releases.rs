//! `bench releases`: what scheduled releases cost and give, in process.
//!
//! 1. Write cost: writer threads update random rows of a large table (with
//!    a secondary index) while releases are off, then cut at each interval
//!    asked for. Every release makes the next write of each B-tree node copy
//!    it (the tables are persistent maps), so the cost grows with how many
//!    distinct nodes an interval writes.
//! 2. Staleness: a ticker commits a new sequence number every millisecond;
//!    a reader in `release` mode polls it and records, for every number, how
//!    long after its commit a release read first showed it.
//! 3. Reads: keyed reads of a maintained view (a count per group), Zipf
//!    keys, in `release` mode against `eventual`.
//!
//! Releases are cut by a thread of the benchmark exactly as the server's
//! releaser does (`Engine::cut_release` at wall-clock multiples).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail};
use aqueduct_sql::releases::Schedule;
use aqueduct_sql::{Engine, Outcome};
use aqueduct_values::Value;
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::common::{self, new_hist, print_table, thousands, Latency};
use crate::view_read::{exec, insert_all, scratch_engine, Distribution, Sampler};

#[derive(Args, Debug, Serialize)]
pub struct ReleasesArgs {
    /// Rows in the table the writers update.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Groups of the counted view (the `g` column takes 1..=groups).
    #[arg(long, default_value_t = 10_000)]
    pub groups: u64,
    /// Release intervals to measure, in ms (0: releases off), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1000,100")]
    pub intervals_ms: Vec<u64>,
    /// Writer threads.
    #[arg(long, default_value_t = 2)]
    pub writers: usize,
    /// Reader threads for the read runs.
    #[arg(long, default_value_t = 2)]
    pub readers: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 1.15)]
    pub zipf_s: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Parent of the scratch directory [default: the system's temp dir].
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Write the results here as JSON.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
pub struct WriteRun {
    pub interval_ms: u64,
    pub writes_per_s: f64,
    /// Against releases off.
    pub ratio: f64,
    pub releases: u64,
    /// The largest delay from a release's due time to its publication.
    pub max_publish_delay_ms: u64,
    /// Visibility delay of a write to `release` reads (none with releases off).
    pub staleness: Option<Latency>,
}

#[derive(Serialize, Debug)]
pub struct ReadRun {
    pub consistency: String,
    pub interval_ms: u64,
    pub reads_per_s: f64,
    pub latency: Latency,
}

#[derive(Serialize, Debug)]
pub struct ReleasesResults {
    pub writes: Vec<WriteRun>,
    pub reads: Vec<ReadRun>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Cuts releases on `schedule` until `stop`, as the server's releaser does.
fn releaser(engine: &Engine, schedule: Schedule, stop: &AtomicBool) -> anyhow::Result<u64> {
    let mut next = schedule.due_at(now_ms()) + 1;
    let mut cut = 0;
    while !stop.load(Ordering::Relaxed) {
        let wait = schedule.time_of(next).saturating_sub(now_ms());
        // The releaser's own clock: it sleeps until the next due time.
        std::thread::sleep(Duration::from_millis(wait.min(20)));
        if now_ms() < schedule.time_of(next) {
            continue;
        }
        engine
            .cut_release(next, now_ms())
            .map_err(|e| anyhow!("release {next}: {e}"))?;
        cut += 1;
        next += 1;
    }
    Ok(cut)
}

/// Lets a run go on for `seconds` from `started`, then stops its threads
/// and joins them (the first error wins).
fn end_window(
    started: Instant,
    seconds: f64,
    stop: &AtomicBool,
    handles: Vec<std::thread::ScopedJoinHandle<'_, anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    let deadline = started + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        // The measured window's clock.
        std::thread::sleep(Duration::from_millis(50));
        if let Err(e) = common::check_stop() {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join()
            .map_err(|_| anyhow!("a thread of the run panicked"))??;
    }
    Ok(())
}

fn rows_of(out: Outcome) -> Vec<Vec<Value>> {
    match out {
        Outcome::Rows { rows, .. } => rows,
        _ => Vec::new(),
    }
}

pub fn run(args: &ReleasesArgs) -> anyhow::Result<ReleasesResults> {
    if args.rows == 0 || args.groups == 0 || args.writers == 0 || args.readers == 0 {
        bail!("--rows, --groups, --writers and --readers must be at least 1");
    }
    let (_scratch, engine) = scratch_engine(&args.dir, "aqueduct-releases-")?;
    let mut s = engine.session();
    exec(
        &mut s,
        "CREATE TABLE item (id bigint PRIMARY KEY, g bigint, v bigint)",
    )?;
    exec(&mut s, "CREATE INDEX item_g ON item (g)")?;
    exec(
        &mut s,
        "CREATE TABLE tick (id bigint PRIMARY KEY, seq bigint)",
    )?;
    exec(&mut s, "INSERT INTO tick VALUES (1, 0)")?;
    let pb = common::progress(args.rows, "loading {bar:40} {pos}/{len} rows");
    let mut rng = StdRng::seed_from_u64(args.seed);
    let groups = args.groups;
    let rows: Vec<String> = (1..=args.rows)
        .map(|i| format!("({i}, {}, 0)", rng.gen_range(1..=groups)))
        .collect();
    insert_all(
        &mut s,
        "item",
        rows.into_iter().inspect(|_| pb.inc(1)),
        10_000,
    )?;
    pb.finish_and_clear();
    exec(
        &mut s,
        "CREATE VIEW per_group AS SELECT g, count(*) AS n, sum(v) AS total FROM item GROUP BY g",
    )?;
    // The schedule is set once per run below; releases start off.
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    let mut base = None;
    for &interval in &args.intervals_ms {
        if interval > 0 {
            let schedule = Schedule::new(Duration::from_millis(interval))
                .map_err(|e| anyhow!("--intervals-ms: {e}"))?;
            engine.enable_releases(schedule);
        }
        let w = write_run(&engine, args, interval)?;
        let base_rate = *base.get_or_insert(w.writes_per_s);
        writes.push(WriteRun {
            ratio: w.writes_per_s / base_rate,
            ..w
        });
        if interval > 0 {
            for level in ["eventual", "release"] {
                reads.push(read_run(&engine, args, interval, level)?);
            }
        }
    }
    println!(
        "writes while releases are cut ({} rows, {} writers, durability off):",
        thousands(args.rows),
        args.writers
    );
    print_table(
        &[
            "interval",
            "writes/s",
            "vs off",
            "releases",
            "max publish delay",
            "staleness p50",
            "p99",
            "max",
        ],
        &writes
            .iter()
            .map(|w| {
                let st = |f: fn(&Latency) -> f64| {
                    w.staleness
                        .as_ref()
                        .map_or("—".into(), |l| format!("{:.1} ms", f(l)))
                };
                vec![
                    if w.interval_ms == 0 {
                        "off".into()
                    } else {
                        format!("{} ms", w.interval_ms)
                    },
                    thousands(w.writes_per_s as u64),
                    format!("{:.2}x", w.ratio),
                    w.releases.to_string(),
                    format!("{} ms", w.max_publish_delay_ms),
                    st(|l| l.p50_ms),
                    st(|l| l.p99_ms),
                    st(|l| l.max_ms),
                ]
            })
            .collect::<Vec<_>>(),
    );
    println!(
        "\nkeyed reads of a view ({} groups, zipf {}, {} readers):",
        thousands(groups),
        args.zipf_s,
        args.readers
    );
    print_table(
        &["consistency", "interval", "reads/s", "p50", "p99"],
        &reads
            .iter()
            .map(|r| {
                vec![
                    r.consistency.clone(),
                    format!("{} ms", r.interval_ms),
                    thousands(r.reads_per_s as u64),
                    format!("{:.3} ms", r.latency.p50_ms),
                    format!("{:.3} ms", r.latency.p99_ms),
                ]
            })
            .collect::<Vec<_>>(),
    );
    Ok(ReleasesResults { writes, reads })
}

/// Writers update random rows for `args.seconds` while a ticker commits a
/// number every millisecond and a reader polls it; with releases on, a
/// releaser cuts them and the reader, in `release` mode, measures staleness.
fn write_run(engine: &Arc<Engine>, args: &ReleasesArgs, interval: u64) -> anyhow::Result<WriteRun> {
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let commit_times: Mutex<BTreeMap<i64, Instant>> = Mutex::default();
    let mut hist = new_hist();
    let before = engine.releases.stats();
    let started = Instant::now();
    let mut cut = 0;
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let mut handles = Vec::new();
        for w in 0..args.writers {
            let (engine, stop, writes) = (engine.clone(), &stop, &writes);
            let (rows, groups, seed) = (args.rows, args.groups, args.seed);
            handles.push(scope.spawn(move || -> anyhow::Result<()> {
                let mut s = engine.session();
                let p = s
                    .prepare(
                        "UPDATE item SET g = $1, v = v + 1 WHERE id = $2",
                        &[None, None],
                    )
                    .map_err(|e| anyhow!("{e}"))?;
                let mut rng = StdRng::seed_from_u64(seed + w as u64 + interval);
                while !stop.load(Ordering::Relaxed) {
                    let params = [
                        Value::Int(rng.gen_range(1..=groups) as i64),
                        Value::Int(rng.gen_range(1..=rows) as i64),
                    ];
                    s.execute_prepared(&p, &params)
                        .map_err(|e| anyhow!("{e}"))?;
                    writes.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        let releaser = (interval > 0).then(|| {
            let (engine, stop) = (engine.clone(), &stop);
            let schedule = Schedule::new(Duration::from_millis(interval)).expect("checked");
            scope.spawn(move || releaser(&engine, schedule, stop))
        });
        // The ticker and its reader run with releases off too (reading
        // `eventual`), so every run shares the cores the same way.
        {
            let (ticker, ticking, times) = (engine.clone(), &stop, &commit_times);
            handles.push(scope.spawn(move || -> anyhow::Result<()> {
                let mut s = ticker.session();
                let mut seq = 0i64;
                while !ticking.load(Ordering::Relaxed) {
                    seq += 1;
                    exec(&mut s, &format!("UPDATE tick SET seq = {seq} WHERE id = 1"))?;
                    times.lock().expect("times").insert(seq, Instant::now());
                    // The ticker's own clock: one number a millisecond.
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            }));
            let (engine, stop, times, hist) = (engine.clone(), &stop, &commit_times, &mut hist);
            handles.push(scope.spawn(move || -> anyhow::Result<()> {
                let mut s = engine.session();
                let level = if interval > 0 { "release" } else { "eventual" };
                exec(&mut s, &format!("SET aqueduct.consistency = '{level}'"))?;
                let mut shown = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let seq = match exec(&mut s, "SELECT seq FROM tick WHERE id = 1") {
                        Ok(out) => match rows_of(out).first().map(|r| r[0].clone()) {
                            Some(Value::Int(n)) => n,
                            _ => 0,
                        },
                        // Before the first release of the run.
                        Err(_) => shown,
                    };
                    if seq > shown {
                        let now = Instant::now();
                        let times = times.lock().expect("times");
                        for (_, at) in times.range(shown + 1..=seq) {
                            hist.saturating_record(
                                now.duration_since(*at).as_micros() as u64 * 1000,
                            );
                        }
                        shown = seq;
                    }
                    // The reader polls every half millisecond.
                    std::thread::sleep(Duration::from_micros(500));
                }
                Ok(())
            }));
        }
        end_window(started, args.seconds, &stop, handles)?;
        if let Some(r) = releaser {
            cut = r.join().map_err(|_| anyhow!("the releaser panicked"))??;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let after = engine.releases.stats();
    Ok(WriteRun {
        interval_ms: interval,
        writes_per_s: writes.load(Ordering::Relaxed) as f64 / elapsed,
        ratio: 1.0,
        releases: cut,
        max_publish_delay_ms: if interval > 0 {
            after.max_publish_delay_ms.max(before.max_publish_delay_ms)
        } else {
            0
        },
        // With releases off the reader sees each number at once; only
        // release reads are reported.
        staleness: (interval > 0 && !hist.is_empty()).then(|| Latency::of(&hist)),
    })
}

/// Keyed reads of `per_group` at `level` for `args.seconds`, with a
/// releaser cutting releases at `interval` (and no writers).
fn read_run(
    engine: &Arc<Engine>,
    args: &ReleasesArgs,
    interval: u64,
    level: &str,
) -> anyhow::Result<ReadRun> {
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let hist = Mutex::new(new_hist());
    let sampler = Sampler::new(args.groups, Distribution::Zipf, args.zipf_s);
    let started = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let schedule = Schedule::new(Duration::from_millis(interval)).expect("checked");
        let rel = {
            let (engine, stop) = (engine.clone(), &stop);
            scope.spawn(move || releaser(&engine, schedule, stop))
        };
        let mut handles = Vec::new();
        for r in 0..args.readers {
            let (engine, stop, reads, hist, sampler) =
                (engine.clone(), &stop, &reads, &hist, &sampler);
            let seed = args.seed + 100 + r as u64;
            handles.push(scope.spawn(move || -> anyhow::Result<()> {
                let mut s = engine.session();
                exec(&mut s, &format!("SET aqueduct.consistency = '{level}'"))?;
                let p = s
                    .prepare("SELECT n, total FROM per_group WHERE g = $1", &[None])
                    .map_err(|e| anyhow!("{e}"))?;
                let mut rng = StdRng::seed_from_u64(seed);
                let mut local = new_hist();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let g = sampler.sample(&mut rng) as i64;
                    let t = Instant::now();
                    match s.execute_prepared(&p, &[Value::Int(g)]) {
                        Ok(_) => {}
                        // Before the first release of the run.
                        Err(e) if e.code == "55000" => continue,
                        Err(e) => bail!("{e}"),
                    }
                    i += 1;
                    if i.is_multiple_of(16) {
                        local.saturating_record(t.elapsed().as_nanos() as u64);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                hist.lock()
                    .expect("hist")
                    .add(&local)
                    .map_err(|e| anyhow!("{e}"))?;
                Ok(())
            }));
        }
        end_window(started, args.seconds, &stop, handles)?;
        rel.join().map_err(|_| anyhow!("the releaser panicked"))??;
        Ok(())
    })?;
    let hist = hist.into_inner().expect("hist");
    Ok(ReadRun {
        consistency: level.into(),
        interval_ms: interval,
        reads_per_s: reads.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64(),
        latency: Latency::of(&hist),
    })
}
