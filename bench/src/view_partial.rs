//! `bench view partial`: Noria's vote benchmark against partial state —
//! reads and writes of the vote view under memory limits, and the cost of
//! adding a new view over a large table.
//!
//! # Load
//!
//! An embedded engine (aqueduct-sql's `Engine`, partial state on, on a
//! scratch log with fsync `never`) gets
//!
//! ```sql
//! CREATE TABLE article (id bigint PRIMARY KEY, title text);
//! CREATE TABLE vote (article_id bigint, user_id bigint);
//! CREATE INDEX vote_article ON vote (article_id);
//! ```
//!
//! N articles and V votes (article ids drawn by the same Zipf law as the
//! reads; one multi-row INSERT per `--insert-rows` rows), then
//! `ArticleWithVoteCount` (the view of `bench view read`). The index makes an
//! upquery of one article two index lookups (article by primary key, its
//! votes by `article_id`) rather than a scan of `vote`.
//!
//! # Fully materialized size and the "all keys" baseline
//!
//! With no memory limit, `--threads` threads read every article once (each
//! read is a miss filled by an upquery, checked against the vote counts of
//! the generated data). The engine's total view and operator state
//! (`WorkerStats::state_bytes`) is then the fully materialized size F. Runs
//! in this state ("all keys": every read a hit, as with a fully materialized
//! view) are the 100 % baseline the limited runs are compared with.
//! `--full-baseline` also loads a second engine with partial state off
//! (`CREATE VIEW` materializes the view in full) and runs the same mixes
//! there ("partial off").
//!
//! # Runs under memory limits
//!
//! For each limit in `--limits` (percent of F; the engine evicts the least
//! recently read keys down to ~95 % of it) every article is first read
//! again with no limit (and checked against the data: this also checks
//! every key after the evictions and refills of the runs before), since the
//! runs' votes grow the fully materialized size — an article's first vote
//! adds a count — so F is measured again then and the limit is that
//! percentage of it. Then the limit is set, the bench waits until the
//! state is under it, and, for each write fraction w in
//! `--write-fractions`, `--threads` threads run a closed loop for
//! `--warmup` and then `--seconds`. Each operation is, with probability w,
//! a write — a
//! single-row autocommit `INSERT INTO vote VALUES ($1, $2)` (prepared, one
//! session per thread) of a Zipf article and a fresh user — and otherwise a
//! keyed read `ViewRegistry::lookup(view, [0], [id])` of a Zipf article,
//! checked to return exactly that article's row. So the operation mix is
//! exactly w, every thread is both reader and writer (as Noria's vote
//! clients are), and the write rate follows the read rate; writes
//! serialize on the engine's commit lock, which at w <= 5 % and 2 threads
//! is rarely contended. (A separate paced writer thread would add a third
//! busy thread on a 2-core machine and take cores from the readers.)
//! Each thread cycles through 2^24 precomputed Zipf articles (the same in
//! every run); whether an operation writes is drawn as it runs.
//!
//! Measured per run: reads/s and writes/s over the measured window, the
//! read latency of one read in 16 (hdrhistogram; misses included) and of
//! every write, the view's hits, misses, evictions and upqueries over the
//! window (`ViewRegistry::stats`, after minus before), the state bytes and
//! the view's keys at the end, and the process's resident memory (VmRSS
//! after `malloc_trim`, and the peak VmHWM; it includes the tables, which
//! grow by every vote written, and this bench's own 4 bytes per
//! precomputed article). After each run, a sample of articles (with the hottest)
//! is read and checked against the generated votes plus those the run
//! wrote: evictions and refills must not lose a vote.
//!
//! # New view
//!
//! A fresh engine (the first is dropped) gets N articles and
//! `--newview-rows` votes, then `ArticleWithVoteCount`, warmed by 10,000
//! reads of Zipf articles (the writes then have a view to maintain). One writer thread inserts votes in a closed loop
//! (the rate of each 100 ms interval is recorded), for 0.5 s of warmup and
//! `--newview-before` seconds; then the main thread runs
//! `CREATE VIEW ArticleWithVoteCountNew AS <the same query>` (counting
//! with `COUNT(*)`, or with `--newview-count user-id` `COUNT(user_id)`,
//! which makes every vote of a key run through the aggregate), reads
//! article 1 (the hottest, with the most votes: the costliest fill), then
//! `--newview-reads` other distinct Zipf articles, each a first read (at
//! 10,000,000 Zipf votes over 1,000,000 articles, article 1 has about 16 %
//! of them: its fill is the worst case; `--newview-first` picks another); the
//! writer goes on for `--newview-after` seconds more. Reported: the time of
//! `CREATE VIEW`, of the first read, the latencies of the next reads, and
//! the writes/s before (mean and slowest interval) against after (slowest
//! interval and mean, from `CREATE VIEW` to the end): the dip is
//! 1 - (slowest after / mean before). The writer, the reading main thread
//! and the dataflow worker share 2 cores, so the dip includes CPU
//! contention. Afterwards every article read is checked, in both views,
//! against the generated votes plus the writer's. With `--full-baseline` the
//! phase runs again on an engine with partial state off.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::views::{human_bytes, ViewEntry, ViewOptions};
use aqueduct_sql::{Engine, Session};
use aqueduct_values::Value;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::common::{self, check_stop, new_hist, print_table, thousands, Latency};
use crate::cpu::{self, CpuUse};
use crate::view_read::{
    exec, insert_all, votes_of, Distribution, Sampler, CREATE_VIEW, TIME_ONE_IN, VIEW,
};

const NEW_VIEW: &str = "articlewithvotecountnew";
/// The new view: the vote view again, counting with `count`.
fn create_new_view(count: NewViewCount) -> String {
    let count = match count {
        NewViewCount::Star => "COUNT(*)",
        NewViewCount::UserId => "COUNT(user_id)",
    };
    format!(
        "CREATE VIEW ArticleWithVoteCountNew AS SELECT article.id, title, votes \
         FROM article LEFT JOIN (SELECT article_id, {count} AS votes FROM vote GROUP BY article_id) \
         AS vc ON article.id = vc.article_id"
    )
}

/// How the new view counts votes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NewViewCount {
    /// `COUNT(*)`: it reads only the article id of a vote, so a fill gets
    /// an article's votes as one row weighted by their number.
    Star,
    /// `COUNT(user_id)`: it reads a column besides the key, so a fill runs
    /// every vote through the aggregate.
    UserId,
}
const INSERT_VOTE: &str = "INSERT INTO vote VALUES ($1, $2)";
/// Rows generated and inserted between two progress-bar updates.
const LOAD_CHUNK: u64 = 100_000;
/// Operations precomputed per thread, cycled through: more than a thread
/// runs in a measured run, so the keys read are fresh Zipf draws. (With
/// 2^20 a thread went round its list within a run, and the articles in one
/// list — far fewer than all of them — fitted a 25% limit: hit rates
/// above what fresh draws can give.)
const OPS_PER_THREAD: usize = 1 << 24;
/// The interval of the write-rate timeline while a view is added.
const INTERVAL: Duration = Duration::from_millis(100);
/// Reads of the existing view before a new one is added.
const WARM_READS: u64 = 10_000;

#[derive(Args, Debug, Serialize)]
pub struct PartialArgs {
    /// Articles loaded (ids 1..=N).
    #[arg(long, default_value_t = 1_000_000)]
    pub articles: u64,
    /// Votes loaded, each for a Zipf article [default: --articles].
    #[arg(long)]
    pub votes: Option<u64>,
    /// Rows per INSERT statement while loading.
    #[arg(long, default_value_t = 10_000)]
    pub insert_rows: usize,
    /// Threads, each running the closed loop of reads and writes.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Exponent of the Zipf law of the articles read and voted for.
    #[arg(long, default_value_t = 1.15)]
    pub zipf_s: f64,
    /// Memory limits, percent of the fully materialized state, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,25,5")]
    pub limits: Vec<f64>,
    /// Fractions of the operations that are writes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.05")]
    pub write_fractions: Vec<f64>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Unmeasured seconds at the start of each run (the cache adapts).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Longest wait for the state to get under a new memory limit.
    #[arg(long, default_value_t = 120.0)]
    pub settle_timeout: f64,
    /// Also run the mixes on an engine with partial state off (a second
    /// load), and the new-view phase too.
    #[arg(long)]
    pub full_baseline: bool,
    /// Votes in the table a new view is added over.
    #[arg(long, default_value_t = 10_000_000)]
    pub newview_rows: u64,
    /// Seconds of writes measured before the new view is added.
    #[arg(long, default_value_t = 3.0)]
    pub newview_before: f64,
    /// Seconds of writes measured after its first reads.
    #[arg(long, default_value_t = 3.0)]
    pub newview_after: f64,
    /// First reads of other articles after the first one.
    #[arg(long, default_value_t = 100)]
    pub newview_reads: usize,
    /// The article read first from the new view.
    #[arg(long, default_value_t = 1)]
    pub newview_first: u64,
    /// How the new view counts votes.
    #[arg(long, value_enum, default_value_t = NewViewCount::Star)]
    pub newview_count: NewViewCount,
    /// Skip the new-view phase.
    #[arg(long)]
    pub skip_newview: bool,
    /// Only the new-view phase: no load, no runs under memory limits.
    #[arg(long)]
    pub skip_runs: bool,
    /// Articles checked against the data after each run.
    #[arg(long, default_value_t = 1_000)]
    pub check_sample: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Parent of the scratch directories [default: the system's temp dir].
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Write the results here as JSON.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

impl PartialArgs {
    fn votes(&self) -> u64 {
        self.votes.unwrap_or(self.articles)
    }
}

#[derive(Serialize, Debug)]
pub struct PartialResults {
    /// The load and runs under limits (absent with `--skip-runs`).
    pub load: Option<Load>,
    pub runs: Vec<Run>,
    /// The engine with partial state off (`--full-baseline`).
    pub partial_off: Option<PartialOff>,
    /// Adding a view over `--newview-rows` votes, partial state on.
    pub new_view: Option<NewView>,
    /// The same with partial state off (`--full-baseline`).
    pub new_view_partial_off: Option<NewView>,
}

#[derive(Serialize, Debug)]
pub struct Load {
    pub articles: u64,
    pub votes: u64,
    pub articles_s: f64,
    pub votes_s: f64,
    pub votes_per_s: f64,
    pub create_view_s: f64,
    /// Reading every article once, with no limit (each read an upquery).
    pub fill_s: f64,
    pub fill_keys_per_s: f64,
    /// All view and operator state with every key held: F, the base of
    /// the memory limits.
    pub full_state_bytes: u64,
    pub view_keys: usize,
    pub view_bytes: u64,
    pub rss_bytes: u64,
    pub articles_without_votes: u64,
    pub max_votes: u64,
}

#[derive(Serialize, Debug)]
pub struct PartialOff {
    pub create_view_s: f64,
    pub first_lookup_s: f64,
    pub state_bytes: u64,
    pub rss_bytes: u64,
}

#[derive(Serialize, Debug)]
pub struct Run {
    /// `all keys`, `limit N%` or `partial off`.
    pub config: String,
    pub limit_percent: Option<f64>,
    pub memory_limit_bytes: u64,
    /// The state with every key held just before (the limit's base; it
    /// grows with the votes earlier runs wrote).
    pub full_state_bytes: u64,
    /// Reading every article again to get there (0 for the first).
    pub refill_s: f64,
    pub write_fraction: f64,
    pub threads: usize,
    /// Time for the state to get under the limit before the run.
    pub settle_s: f64,
    pub settled: bool,
    pub seconds: f64,
    pub reads: u64,
    pub writes: u64,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Reads/s over the "all keys" run's with the same write fraction.
    pub vs_all_keys: Option<f64>,
    /// Percentiles of one read in 16 (hits and misses).
    pub read_p50_ns: u64,
    pub read_p90_ns: u64,
    pub read_p99_ns: u64,
    pub read_p999_ns: u64,
    pub read_max_ns: u64,
    pub write_p50_ns: u64,
    pub write_p99_ns: u64,
    /// The view's counters over the measured window.
    pub hits: u64,
    pub misses: u64,
    pub hit_rate: f64,
    pub evictions: u64,
    pub fills: u64,
    pub upqueries: u64,
    pub upquery_mean_us: f64,
    pub state_bytes_start: u64,
    pub state_bytes_end: u64,
    pub view_keys_end: usize,
    pub rss_bytes_end: u64,
    pub rss_peak_bytes: u64,
    pub checked_articles: usize,
    pub cpu: CpuUse,
    pub loadavg_end: [f64; 3],
}

#[derive(Serialize, Debug)]
pub struct NewView {
    pub partial: bool,
    pub articles: u64,
    pub votes: u64,
    pub load_s: f64,
    pub create_view_ms: f64,
    pub first_read_id: u64,
    pub first_read_votes: Option<i64>,
    pub first_read_ms: f64,
    /// From the start of CREATE VIEW to the first read's answer.
    pub first_answer_ms: f64,
    /// The next reads, each of an article not read before.
    pub next_reads: Latency,
    /// From the start of CREATE VIEW to the end of the last first read.
    pub reads_done_s: f64,
    pub interval_ms: u64,
    pub writes_before_mean_per_s: f64,
    pub writes_before_min_per_s: f64,
    pub writes_after_min_per_s: f64,
    pub writes_after_mean_per_s: f64,
    /// Mean of the intervals that overlap CREATE VIEW and the first reads.
    pub writes_during_reads_mean_per_s: f64,
    /// 1 - slowest interval after / mean before, in percent (0 if none).
    pub dip_percent: f64,
    /// `[end of the interval in s since CREATE VIEW started, writes/s]`.
    pub timeline: Vec<[f64; 2]>,
    pub writes: u64,
    pub new_view_keys: usize,
    pub new_view_bytes: u64,
    pub state_bytes_end: u64,
    pub rss_bytes_end: u64,
    pub checked_articles: usize,
}

/// Resident memory of this process and its peak, from /proc/self/status.
/// Memory the allocator holds free is handed back to the OS first (glibc's
/// `malloc_trim`), so that the figure follows the live state, evictions
/// included, rather than the allocator's high-water mark.
fn rss() -> (u64, u64) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn open_engine(dir: &Path, partial: bool) -> anyhow::Result<Arc<Engine>> {
    let (log, _) = Log::open(
        dir,
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .context("opening the scratch log")?;
    Engine::open_with(
        log,
        &mut |_| {},
        ViewOptions {
            partial,
            memory_limit: 0,
        },
    )
    .map_err(|e| anyhow!("opening the engine: {e}"))
}

/// Creates the tables and the index, and loads `articles` articles and
/// `votes` Zipf votes (users 1..=votes). Returns the votes per article
/// (index = id) and the seconds each table took.
fn load(
    s: &mut Session,
    args: &PartialArgs,
    sampler: &Sampler,
    votes: u64,
) -> anyhow::Result<(Vec<u64>, f64, f64)> {
    exec(
        s,
        "CREATE TABLE article (id bigint PRIMARY KEY, title text)",
    )?;
    exec(s, "CREATE TABLE vote (article_id bigint, user_id bigint)")?;
    exec(s, "CREATE INDEX vote_article ON vote (article_id)")?;
    let pb = common::progress(
        args.articles + votes,
        "{spinner} loading {msg} [{elapsed_precise}] [{bar:30}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
    );
    pb.set_message("articles");
    let t = Instant::now();
    let mut next = 1;
    while next <= args.articles {
        let end = (next + LOAD_CHUNK).min(args.articles + 1);
        insert_all(
            s,
            "article",
            (next..end).map(|id| format!("({id}, 'Article {id}')")),
            args.insert_rows,
        )?;
        pb.inc(end - next);
        next = end;
    }
    let articles_s = t.elapsed().as_secs_f64();
    pb.set_message("votes");
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut truth = vec![0u64; args.articles as usize + 1];
    let t = Instant::now();
    let mut next = 1;
    while next <= votes {
        let end = (next + LOAD_CHUNK).min(votes + 1);
        let chunk: Vec<(u64, u64)> = (next..end)
            .map(|user| (sampler.sample(&mut rng), user))
            .collect();
        for &(a, _) in &chunk {
            truth[a as usize] += 1;
        }
        insert_all(
            s,
            "vote",
            chunk.iter().map(|(a, u)| format!("({a}, {u})")),
            args.insert_rows,
        )?;
        pb.inc(end - next);
        next = end;
    }
    let votes_s = t.elapsed().as_secs_f64();
    pb.finish_and_clear();
    Ok((truth, articles_s, votes_s))
}

/// The statistics of view `name` (lower case).
fn view_stats(engine: &Engine, name: &str) -> anyhow::Result<aqueduct_sql::views::ViewStats> {
    engine
        .views
        .stats()
        .into_iter()
        .find(|v| v.name == name)
        .with_context(|| format!("no statistics for view {name}"))
}

/// Checks the view's row of each of `ids` against `truth`.
fn check(engine: &Engine, entry: &ViewEntry, truth: &[u64], ids: &[u64]) -> anyhow::Result<()> {
    for &id in ids {
        let want = match truth[id as usize] {
            0 => None,
            n => Some(n as i64),
        };
        let got = votes_of(engine, entry, id)?;
        if got != want {
            bail!(
                "view {}: article {id} has {got:?} votes; the data says {want:?}",
                entry.name
            );
        }
    }
    Ok(())
}

/// A sample of article ids to check: random ones, the hottest, the last.
fn check_ids(n: u64, sample: usize, rng: &mut StdRng) -> Vec<u64> {
    let mut ids: Vec<u64> = (0..sample).map(|_| rng.gen_range(1..=n)).collect();
    ids.extend([1, 2, 3, n]);
    ids
}

/// The Zipf articles each thread of a run goes through, made once (the
/// runs then allocate next to nothing, which keeps the RSS about the engine).
fn thread_ops(args: &PartialArgs, sampler: &Sampler) -> Vec<Vec<u32>> {
    (0..args.threads as u64)
        .map(|t| {
            let mut rng = StdRng::seed_from_u64(args.seed ^ ((t + 1) * 0x9e37_79b9));
            (0..OPS_PER_THREAD)
                .map(|_| sampler.sample(&mut rng) as u32)
                .collect()
        })
        .collect()
}

/// All view and operator state now. The worker counts it after each batch,
/// upquery or change of the limit, not when a view is made in full: setting
/// the same limit again has it counted.
fn state_bytes_now(engine: &Engine) -> u64 {
    let limit = engine.views.progress().memory_limit;
    engine.views.set_memory_limit(limit);
    engine.views.await_idle(Duration::from_secs(5));
    engine.views.progress().state_bytes
}

/// Sets the memory limit and waits until the state is under it. Returns the
/// seconds it took and whether it got there within `timeout`.
fn settle(engine: &Engine, limit: u64, timeout: f64) -> anyhow::Result<(f64, bool)> {
    let t = Instant::now();
    engine.views.set_memory_limit(limit);
    if limit == 0 {
        return Ok((0.0, true));
    }
    let deadline = t + Duration::from_secs_f64(timeout);
    loop {
        check_stop()?;
        // Ctrl-C is checked at least once a second.
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        let idle = engine.views.await_idle(slice);
        if engine.views.progress().state_bytes <= limit {
            return Ok((t.elapsed().as_secs_f64(), true));
        }
        if Instant::now() >= deadline {
            return Ok((t.elapsed().as_secs_f64(), false));
        }
        // Idle and still over (the keys left were just read): ask again.
        if idle {
            engine.views.set_memory_limit(limit);
        }
    }
}

/// Every article read once by `threads` threads (the keys filled by
/// upqueries), each checked against `truth`.
fn fill_all(
    engine: &Engine,
    entry: &ViewEntry,
    articles: u64,
    threads: usize,
    truth: &[u64],
) -> anyhow::Result<f64> {
    let pb = common::progress(
        articles,
        "{spinner} reading every article [{elapsed_precise}] [{bar:30}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
    );
    let failed = AtomicBool::new(false);
    let t = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (pb, failed) = (&pb, &failed);
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut done = 0;
                    for id in (t + 1..=articles).step_by(threads) {
                        if failed.load(Ordering::Relaxed) || common::stopped() {
                            break;
                        }
                        if let Err(e) = check(engine, entry, truth, &[id]) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                        done += 1;
                        if done % 1024 == 0 {
                            pb.inc(1024);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("a reader thread panicked"))??;
        }
        Ok(())
    })?;
    pb.finish_and_clear();
    check_stop()?;
    Ok(t.elapsed().as_secs_f64())
}

/// What one run is.
struct RunSpec<'a> {
    config: String,
    limit_percent: Option<f64>,
    limit_bytes: u64,
    full_state_bytes: u64,
    refill_s: f64,
    write_fraction: f64,
    settle: (f64, bool),
    round: u64,
    /// Articles each thread reads or votes for, in order (cycled through).
    ops: &'a [Vec<u32>],
}

/// What one thread of a run did.
struct ThreadOutcome {
    reads: u64,
    writes: u64,
    seconds: f64,
    read_hist: Histogram<u64>,
    write_hist: Histogram<u64>,
    /// The article of every write, measured or not.
    written: Vec<u32>,
    last_lsn: u64,
}

/// One timed run of the read/write mix; `truth` gets the run's votes.
fn measure(
    args: &PartialArgs,
    engine: &Arc<Engine>,
    entry: &ViewEntry,
    spec: &RunSpec,
    truth: &mut [u64],
) -> anyhow::Result<Run> {
    let threads = args.threads;
    let warmup = Duration::from_secs_f64(args.warmup);
    let seconds = Duration::from_secs_f64(args.seconds);
    let _watchdog = common::Watchdog::new(
        warmup + seconds + Duration::from_secs(120),
        format!("the run {} w={}", spec.config, spec.write_fraction),
    );
    let state_bytes_start = engine.views.progress().state_bytes;
    let start = Barrier::new(threads + 1);
    let failed = AtomicBool::new(false);
    let began = Instant::now();
    let (outcomes, cpu, s0, s1) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let mut handles = Vec::new();
        for t in 0..threads {
            // Which operations are writes: xorshift64, seeded per run and thread.
            let mut coin = (args.seed ^ spec.round.wrapping_mul(0x5851_f42d))
                .wrapping_add((t as u64 + 1) * 0x9e37_79b9)
                | 1;
            // A write when the top 32 bits of the coin fall below this.
            let below = (spec.write_fraction * 4_294_967_296.0) as u64;
            let ops = &spec.ops[t % spec.ops.len()];
            let (start, failed) = (&start, &failed);
            handles.push(scope.spawn(move || -> anyhow::Result<ThreadOutcome> {
                let mut s = engine.session();
                let insert = s
                    .prepare(INSERT_VOTE, &[])
                    .map_err(|e| anyhow!("preparing {INSERT_VOTE}: {e}"))?;
                let user_base = (spec.round << 48) | ((t as u64 + 1) << 40);
                let mut read_hist = new_hist();
                let mut write_hist = new_hist();
                let mut written = Vec::new();
                start.wait();
                let began = Instant::now();
                let (measure_from, end) = (began + warmup, began + warmup + seconds);
                let (mut reads, mut writes) = (0u64, 0u64);
                let mut counting = false;
                let mut t0 = began;
                let mut i = 0usize;
                loop {
                    if i.is_multiple_of(256) {
                        let now = Instant::now();
                        if !counting && now >= measure_from {
                            counting = true;
                            t0 = now;
                            reads = 0;
                            writes = 0;
                        }
                        if now >= end || failed.load(Ordering::Relaxed) || common::stopped() {
                            return Ok(ThreadOutcome {
                                reads,
                                writes,
                                seconds: (now - t0).as_secs_f64(),
                                read_hist,
                                write_hist,
                                written,
                                last_lsn: s.last_lsn(),
                            });
                        }
                    }
                    let article = ops[i % ops.len()] as u64;
                    coin ^= coin << 13;
                    coin ^= coin >> 7;
                    coin ^= coin << 17;
                    if (coin >> 32) < below {
                        let user = user_base + written.len() as u64;
                        let w0 = Instant::now();
                        let r = s.execute_prepared(
                            &insert,
                            &[Value::Int(article as i64), Value::Int(user as i64)],
                        );
                        if counting {
                            write_hist.saturating_record(w0.elapsed().as_nanos() as u64);
                        }
                        if let Err(e) = r {
                            failed.store(true, Ordering::Relaxed);
                            bail!("vote for article {article}: {e}");
                        }
                        written.push(article as u32);
                        writes += 1;
                    } else {
                        let key = [Value::Int(article as i64)];
                        let timed = counting && reads.is_multiple_of(TIME_ONE_IN);
                        let r0 = timed.then(Instant::now);
                        let result = engine.views.lookup(entry, &[0], &key);
                        if let Some(r0) = r0 {
                            read_hist.saturating_record(r0.elapsed().as_nanos() as u64);
                        }
                        match result {
                            Ok((rows, _)) if rows.len() == 1 && rows[0][0] == key[0] => {}
                            Ok((rows, _)) => {
                                failed.store(true, Ordering::Relaxed);
                                bail!("lookup of {:?} returned {} rows", key[0], rows.len());
                            }
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                bail!("lookup of {:?}: {e}", key[0]);
                            }
                        }
                        reads += 1;
                    }
                    i += 1;
                }
            }));
        }
        start.wait();
        // The threads start counting at the end of the warmup: so do the
        // view's counters and the CPU window.
        common::nap((began + warmup).saturating_duration_since(Instant::now()));
        let s0 = view_stats(engine, VIEW)?;
        let c0 = cpu::sample(None);
        let mut outcomes = Vec::new();
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(o)) => outcomes.push(o),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow!("a thread panicked"));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let c1 = cpu::sample(None);
        let s1 = view_stats(engine, VIEW)?;
        Ok((outcomes, CpuUse::between(&c0, &c1), s0, s1))
    })?;
    check_stop()?;
    let (rss_bytes_end, rss_peak_bytes) = rss();
    let state_bytes_end = engine.views.progress().state_bytes;

    // The votes written, measured or not, join the data; the views must agree.
    let mut last_lsn = 0;
    for o in &outcomes {
        for &a in &o.written {
            truth[a as usize] += 1;
        }
        last_lsn = last_lsn.max(o.last_lsn);
    }
    engine
        .views
        .await_lsn(last_lsn)
        .map_err(|e| anyhow!("waiting for the views: {e}"))?;
    let mut rng = StdRng::seed_from_u64(args.seed ^ spec.round);
    let ids = check_ids(args.articles, args.check_sample, &mut rng);
    check(engine, entry, truth, &ids)?;

    let mut read_hist = new_hist();
    let mut write_hist = new_hist();
    let (mut reads, mut writes) = (0, 0);
    let (mut reads_per_s, mut writes_per_s) = (0.0, 0.0);
    let mut window: f64 = 0.0;
    for o in &outcomes {
        reads += o.reads;
        writes += o.writes;
        reads_per_s += o.reads as f64 / o.seconds.max(1e-9);
        writes_per_s += o.writes as f64 / o.seconds.max(1e-9);
        window = window.max(o.seconds);
        read_hist.add(&o.read_hist).context("merging histograms")?;
        write_hist
            .add(&o.write_hist)
            .context("merging histograms")?;
    }
    let (r0, r1) = (&s0.reads, &s1.reads);
    let hits = r1.hits - r0.hits;
    let misses = r1.misses - r0.misses;
    let upqueries = r1.upquery.count - r0.upquery.count;
    let upquery_us = r1.upquery.sum_us - r0.upquery.sum_us;
    Ok(Run {
        config: spec.config.clone(),
        limit_percent: spec.limit_percent,
        memory_limit_bytes: spec.limit_bytes,
        full_state_bytes: spec.full_state_bytes,
        refill_s: spec.refill_s,
        write_fraction: spec.write_fraction,
        threads,
        settle_s: spec.settle.0,
        settled: spec.settle.1,
        seconds: window,
        reads,
        writes,
        reads_per_s,
        writes_per_s,
        vs_all_keys: None,
        read_p50_ns: read_hist.value_at_quantile(0.50),
        read_p90_ns: read_hist.value_at_quantile(0.90),
        read_p99_ns: read_hist.value_at_quantile(0.99),
        read_p999_ns: read_hist.value_at_quantile(0.999),
        read_max_ns: read_hist.max(),
        write_p50_ns: write_hist.value_at_quantile(0.50),
        write_p99_ns: write_hist.value_at_quantile(0.99),
        hits,
        misses,
        hit_rate: if hits + misses == 0 {
            1.0
        } else {
            hits as f64 / (hits + misses) as f64
        },
        evictions: r1.evictions - r0.evictions,
        fills: r1.fills - r0.fills,
        upqueries,
        upquery_mean_us: upquery_us as f64 / upqueries.max(1) as f64,
        state_bytes_start,
        state_bytes_end,
        view_keys_end: s1.keys,
        rss_bytes_end,
        rss_peak_bytes,
        checked_articles: ids.len(),
        cpu,
        loadavg_end: cpu::loadavg(),
    })
}

fn say_run(r: &Run) {
    eprintln!(
        "{} w={}: {} reads/s, {} writes/s, hit rate {:.2} %, p50 {} ns, p99 {} ns, {} evictions, state {}",
        r.config,
        r.write_fraction,
        thousands(r.reads_per_s as u64),
        thousands(r.writes_per_s as u64),
        r.hit_rate * 100.0,
        r.read_p50_ns,
        r.read_p99_ns,
        thousands(r.evictions),
        human_bytes(r.state_bytes_end)
    );
}

pub fn run(args: &PartialArgs) -> anyhow::Result<PartialResults> {
    if args.articles < 4 || args.threads == 0 {
        bail!("--articles must be at least 4 and --threads at least 1");
    }
    if args.write_fractions.iter().any(|w| !(0.0..1.0).contains(w)) {
        bail!("every --write-fractions must be in [0, 1)");
    }
    if args.limits.iter().any(|l| *l <= 0.0) {
        bail!("every --limits must be above 0 percent");
    }
    if !(1..=args.articles).contains(&args.newview_first) {
        bail!("--newview-first must be an article id, 1 to --articles");
    }
    if args.articles > u32::MAX as u64 {
        bail!("--articles must fit in 32 bits");
    }
    let sampler = Sampler::new(args.articles, Distribution::Zipf, args.zipf_s);
    let (load, runs, partial_off) = if args.skip_runs {
        (None, Vec::new(), None)
    } else {
        let (load, runs, partial_off) = limited_runs(args, &sampler)?;
        (Some(load), runs, partial_off)
    };
    let (new_view, new_view_partial_off) = if args.skip_newview {
        (None, None)
    } else {
        let on = new_view(args, &sampler, true)?;
        let off = if args.full_baseline {
            Some(new_view(args, &sampler, false)?)
        } else {
            None
        };
        (Some(on), off)
    };

    print_runs(&runs);
    let views: Vec<&NewView> = new_view.iter().chain(&new_view_partial_off).collect();
    if !views.is_empty() {
        println!();
        print_new_views(&views);
    }
    println!();
    print_targets(&runs, new_view.as_ref());
    Ok(PartialResults {
        load,
        runs,
        partial_off,
        new_view,
        new_view_partial_off,
    })
}

/// Loads the data, fills every key, and measures the mixes under each
/// memory limit (and with partial state off, with `--full-baseline`).
fn limited_runs(
    args: &PartialArgs,
    sampler: &Sampler,
) -> anyhow::Result<(Load, Vec<Run>, Option<PartialOff>)> {
    let ops = thread_ops(args, sampler);
    let votes = args.votes();
    eprintln!(
        "loading {} articles and {} votes (zipf {}) in INSERTs of {} rows, partial state on",
        thousands(args.articles),
        thousands(votes),
        args.zipf_s,
        thousands(args.insert_rows as u64)
    );
    let scratch = common::scratch_dir(&args.dir, "aqueduct-view-partial-")?;
    let engine = open_engine(scratch.path(), true)?;
    let mut s = engine.session();
    let (mut truth, articles_s, votes_s) = load(&mut s, args, sampler, votes)?;
    let t = Instant::now();
    exec(&mut s, CREATE_VIEW)?;
    let create_view_s = t.elapsed().as_secs_f64();
    engine
        .views
        .await_lsn(s.last_lsn())
        .map_err(|e| anyhow!("waiting for the views: {e}"))?;
    let entry = engine
        .views
        .get(VIEW)
        .with_context(|| format!("no view {VIEW} after CREATE VIEW"))?;
    let fill_s = fill_all(&engine, &entry, args.articles, args.threads, &truth)?;
    let full_state_bytes = state_bytes_now(&engine);
    let vs = view_stats(&engine, VIEW)?;
    let load = Load {
        articles: args.articles,
        votes,
        articles_s,
        votes_s,
        votes_per_s: votes as f64 / votes_s.max(1e-9),
        create_view_s,
        fill_s,
        fill_keys_per_s: args.articles as f64 / fill_s.max(1e-9),
        full_state_bytes,
        view_keys: vs.keys,
        view_bytes: vs.bytes,
        rss_bytes: rss().0,
        articles_without_votes: truth[1..].iter().filter(|&&c| c == 0).count() as u64,
        max_votes: truth.iter().copied().max().unwrap_or(0),
    };
    eprintln!(
        "loaded: articles {articles_s:.2} s, votes {votes_s:.2} s, CREATE VIEW {:.1} ms; \
         every article read in {fill_s:.2} s ({} keys/s, all checked); \
         fully materialized state F = {} ({} keys, view {}), RSS {}",
        create_view_s * 1e3,
        thousands(load.fill_keys_per_s as u64),
        human_bytes(full_state_bytes),
        thousands(vs.keys as u64),
        human_bytes(vs.bytes),
        human_bytes(load.rss_bytes)
    );
    if full_state_bytes == 0 {
        bail!("the engine reports no view state after reading every article");
    }

    let mut runs = Vec::new();
    let mut round = 0u64;
    let mut configs: Vec<(String, Option<f64>)> = vec![("all keys".into(), None)];
    for &pct in &args.limits {
        configs.push((format!("limit {pct}%"), Some(pct)));
    }
    for (i, (config, pct)) in configs.into_iter().enumerate() {
        check_stop()?;
        // Writes grow the fully materialized size (an article's first vote
        // adds a count): every configuration starts from every key held
        // again, each checked, and takes its limit from the size then.
        let (full, refill_s) = if i == 0 {
            (full_state_bytes, 0.0)
        } else {
            settle(&engine, 0, args.settle_timeout)?;
            let t = fill_all(&engine, &entry, args.articles, args.threads, &truth)?;
            (state_bytes_now(&engine), t)
        };
        let limit = pct.map_or(0, |p| ((full as f64 * p / 100.0) as u64).max(1));
        let settled = settle(&engine, limit, args.settle_timeout)?;
        eprintln!(
            "{config}: every key held {}, limit {}, state {} after {:.2} s{}",
            human_bytes(full),
            if limit == 0 {
                "none".into()
            } else {
                human_bytes(limit)
            },
            human_bytes(engine.views.progress().state_bytes),
            settled.0,
            if settled.1 { "" } else { " (NOT settled)" }
        );
        for &w in &args.write_fractions {
            round += 1;
            let spec = RunSpec {
                config: config.clone(),
                limit_percent: pct,
                limit_bytes: limit,
                full_state_bytes: full,
                refill_s,
                write_fraction: w,
                settle: settled,
                round,
                ops: &ops,
            };
            let r = measure(args, &engine, &entry, &spec, &mut truth)?;
            say_run(&r);
            runs.push(r);
        }
    }
    engine.views.set_memory_limit(0);
    drop(s);
    drop(engine);
    drop(scratch);

    let partial_off = if args.full_baseline {
        Some(partial_off_runs(args, sampler, &ops, &mut runs)?)
    } else {
        None
    };
    // The ratios to the "all keys" runs of the same write fraction.
    let base: Vec<(f64, f64)> = runs
        .iter()
        .filter(|r| r.config == "all keys")
        .map(|r| (r.write_fraction, r.reads_per_s))
        .collect();
    for r in &mut runs {
        r.vs_all_keys = base
            .iter()
            .find(|(w, _)| *w == r.write_fraction)
            .map(|(_, b)| r.reads_per_s / b.max(1e-9));
    }

    Ok((load, runs, partial_off))
}

/// The same data on an engine with partial state off, and the mixes on it.
fn partial_off_runs(
    args: &PartialArgs,
    sampler: &Sampler,
    ops: &[Vec<u32>],
    runs: &mut Vec<Run>,
) -> anyhow::Result<PartialOff> {
    eprintln!("partial state off: loading the same data again");
    let scratch = common::scratch_dir(&args.dir, "aqueduct-view-partial-off-")?;
    let engine = open_engine(scratch.path(), false)?;
    let mut s = engine.session();
    let (mut truth, _, _) = load(&mut s, args, sampler, args.votes())?;
    let t = Instant::now();
    exec(&mut s, CREATE_VIEW)?;
    let create_view_s = t.elapsed().as_secs_f64();
    engine
        .views
        .await_lsn(s.last_lsn())
        .map_err(|e| anyhow!("waiting for the views: {e}"))?;
    let entry = engine
        .views
        .get(VIEW)
        .with_context(|| format!("no view {VIEW} after CREATE VIEW"))?;
    let t = Instant::now();
    check(&engine, &entry, &truth, &[1])?;
    let first_lookup_s = t.elapsed().as_secs_f64();
    let off = PartialOff {
        create_view_s,
        first_lookup_s,
        state_bytes: state_bytes_now(&engine),
        rss_bytes: rss().0,
    };
    eprintln!(
        "partial off: CREATE VIEW {create_view_s:.2} s, first lookup {:.1} ms, state {}",
        first_lookup_s * 1e3,
        human_bytes(off.state_bytes)
    );
    for (i, &w) in args.write_fractions.iter().enumerate() {
        let spec = RunSpec {
            config: "partial off".into(),
            limit_percent: None,
            limit_bytes: 0,
            full_state_bytes: off.state_bytes,
            refill_s: 0.0,
            write_fraction: w,
            settle: (0.0, true),
            round: 1000 + i as u64,
            ops,
        };
        let r = measure(args, &engine, &entry, &spec, &mut truth)?;
        say_run(&r);
        runs.push(r);
    }
    Ok(off)
}

/// The votes of article `id` in a new view, waiting as long as its fill
/// takes (a hot article's upquery over millions of votes may outlast the
/// default wait of `lookup`).
fn first_read(engine: &Engine, entry: &ViewEntry, id: u64) -> anyhow::Result<Option<i64>> {
    let (rows, _) = engine
        .views
        .lookup_timed(
            entry,
            &[0],
            &[Value::Int(id as i64)],
            Duration::from_secs(600),
        )
        .map_err(|e| anyhow!("first read of article {id}: {e}"))?;
    match rows.as_slice() {
        [r] if r[0] == Value::Int(id as i64) => match &r[2] {
            Value::Null => Ok(None),
            Value::Int(n) => Ok(Some(*n)),
            other => bail!("article {id}: votes is {other:?}"),
        },
        other => bail!("article {id}: the new view has {other:?}"),
    }
}

/// Adds a view over `--newview-rows` votes while a writer runs.
fn new_view(args: &PartialArgs, sampler: &Sampler, partial: bool) -> anyhow::Result<NewView> {
    let votes = args.newview_rows;
    eprintln!(
        "new view (partial {}): loading {} articles and {} votes",
        if partial { "on" } else { "off" },
        thousands(args.articles),
        thousands(votes)
    );
    let scratch = common::scratch_dir(&args.dir, "aqueduct-view-partial-new-")?;
    let engine = open_engine(scratch.path(), partial)?;
    let mut s = engine.session();
    let t = Instant::now();
    let (mut truth, _, _) = load(&mut s, args, sampler, votes)?;
    let load_s = t.elapsed().as_secs_f64();
    exec(&mut s, CREATE_VIEW)?;
    engine
        .views
        .await_lsn(s.last_lsn())
        .map_err(|e| anyhow!("waiting for the views: {e}"))?;
    let base = engine
        .views
        .get(VIEW)
        .with_context(|| format!("no view {VIEW} after CREATE VIEW"))?;
    let mut rng = StdRng::seed_from_u64(args.seed ^ 0xa11ce);
    for _ in 0..WARM_READS {
        let id = sampler.sample(&mut rng);
        votes_of(&engine, &base, id)?;
    }
    let before = Duration::from_secs_f64(args.newview_before);
    let after = Duration::from_secs_f64(args.newview_after);
    let _watchdog = common::Watchdog::new(
        before + after + Duration::from_secs(600),
        "the new-view phase".into(),
    );
    // The articles read first: --newview-first, then distinct Zipf ones.
    let first = args.newview_first;
    let mut ids = vec![first];
    let mut seen = std::collections::HashSet::from([first]);
    let distinct = (args.newview_reads as u64).min(args.articles - 1) as usize;
    while ids.len() < distinct + 1 {
        let id = sampler.sample(&mut rng);
        if seen.insert(id) {
            ids.push(id);
        }
    }
    let writer_ids: Vec<u64> = (0..OPS_PER_THREAD)
        .map(|_| sampler.sample(&mut rng))
        .collect();

    let count = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    struct Phase {
        create_at: Instant,
        create_view_ms: f64,
        first_read_votes: Option<i64>,
        first_read_ms: f64,
        first_answer_ms: f64,
        next: Histogram<u64>,
        reads_done: Instant,
        new_entry: Arc<ViewEntry>,
    }
    let (phase, ticks, written, last_lsn) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let (count, stop, engine) = (&count, &stop, &engine);
        let writer_ids = &writer_ids;
        let writer = scope.spawn(move || -> anyhow::Result<(Vec<u64>, u64)> {
            let mut s = engine.session();
            let insert = s
                .prepare(INSERT_VOTE, &[])
                .map_err(|e| anyhow!("preparing {INSERT_VOTE}: {e}"))?;
            let mut written = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && !common::stopped() {
                let article = writer_ids[i % writer_ids.len()];
                let user = votes + 1 + i as u64;
                s.execute_prepared(
                    &insert,
                    &[Value::Int(article as i64), Value::Int(user as i64)],
                )
                .map_err(|e| anyhow!("vote for article {article}: {e}"))?;
                written.push(article);
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            Ok((written, s.last_lsn()))
        });
        let monitor = scope.spawn(move || -> Vec<(Instant, u64)> {
            let t0 = Instant::now();
            let mut ticks = vec![(t0, count.load(Ordering::Relaxed))];
            let mut k = 1u32;
            while !stop.load(Ordering::Relaxed) && !common::stopped() {
                let at = t0 + INTERVAL * k;
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                // The interval the writer stopped in is not a full one.
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                ticks.push((Instant::now(), count.load(Ordering::Relaxed)));
                k += 1;
            }
            ticks
        });
        let phase = (|| -> anyhow::Result<Phase> {
            eprintln!(
                "new view (partial {}): writing for {:.1} s, then adding the view",
                if partial { "on" } else { "off" },
                (Duration::from_millis(500) + before).as_secs_f64()
            );
            common::nap(Duration::from_millis(500) + before);
            check_stop()?;
            let mut s = engine.session();
            let create_at = Instant::now();
            exec(&mut s, &create_new_view(args.newview_count))?;
            let create_view_ms = create_at.elapsed().as_secs_f64() * 1e3;
            let new_entry = engine
                .views
                .get(NEW_VIEW)
                .with_context(|| format!("no view {NEW_VIEW} after CREATE VIEW"))?;
            let t = Instant::now();
            let first_read_votes = first_read(engine, &new_entry, ids[0])?;
            let first_read_ms = t.elapsed().as_secs_f64() * 1e3;
            let first_answer_ms = create_at.elapsed().as_secs_f64() * 1e3;
            let mut next = new_hist();
            for &id in &ids[1..] {
                let t = Instant::now();
                first_read(engine, &new_entry, id)?;
                next.saturating_record(t.elapsed().as_nanos() as u64);
            }
            let reads_done = Instant::now();
            common::nap(after);
            Ok(Phase {
                create_at,
                create_view_ms,
                first_read_votes,
                first_read_ms,
                first_answer_ms,
                next,
                reads_done,
                new_entry,
            })
        })();
        stop.store(true, Ordering::Relaxed);
        let w = writer.join().map_err(|_| anyhow!("the writer panicked"));
        let ticks = monitor
            .join()
            .map_err(|_| anyhow!("the monitor panicked"))?;
        let phase = phase?;
        let (written, last_lsn) = w??;
        Ok((phase, ticks, written, last_lsn))
    })?;
    check_stop()?;
    let (rss_bytes_end, _) = rss();
    let state_bytes_end = engine.views.progress().state_bytes;
    let ns = view_stats(&engine, NEW_VIEW)?;

    // Both views against the data plus the writer's votes.
    for &a in &written {
        truth[a as usize] += 1;
    }
    engine
        .views
        .await_lsn(last_lsn)
        .map_err(|e| anyhow!("waiting for the views: {e}"))?;
    check(&engine, &phase.new_entry, &truth, &ids)?;
    check(&engine, &base, &truth, &ids)?;

    // Writes per interval, by where the interval lies.
    let create_at = phase.create_at;
    let (before_from, after_to) = (create_at - before, phase.reads_done + after);
    let mut timeline = Vec::new();
    let (mut before_rates, mut after_rates, mut during) = (Vec::new(), Vec::new(), Vec::new());
    for pair in ticks.windows(2) {
        let ((t0, c0), (t1, c1)) = (pair[0], pair[1]);
        let rate = (c1 - c0) as f64 / (t1 - t0).as_secs_f64().max(1e-9);
        let end_s = if t1 >= create_at {
            (t1 - create_at).as_secs_f64()
        } else {
            -(create_at - t1).as_secs_f64()
        };
        timeline.push([end_s, rate]);
        if t1 > create_at && t0 < phase.reads_done {
            during.push(rate);
        }
        if t0 >= before_from && t1 <= create_at {
            before_rates.push(rate);
        } else if t0 >= create_at && t1 <= after_to {
            after_rates.push(rate);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let before_mean = mean(&before_rates);
    let after_min = if after_rates.is_empty() {
        0.0
    } else {
        min(&after_rates)
    };
    let nv = NewView {
        partial,
        articles: args.articles,
        votes,
        load_s,
        create_view_ms: phase.create_view_ms,
        first_read_id: ids[0],
        first_read_votes: phase.first_read_votes,
        first_read_ms: phase.first_read_ms,
        first_answer_ms: phase.first_answer_ms,
        next_reads: Latency::of(&phase.next),
        reads_done_s: (phase.reads_done - create_at).as_secs_f64(),
        interval_ms: INTERVAL.as_millis() as u64,
        writes_before_mean_per_s: before_mean,
        writes_before_min_per_s: if before_rates.is_empty() {
            0.0
        } else {
            min(&before_rates)
        },
        writes_after_min_per_s: after_min,
        writes_after_mean_per_s: mean(&after_rates),
        writes_during_reads_mean_per_s: mean(&during),
        dip_percent: if before_mean > 0.0 {
            ((1.0 - after_min / before_mean) * 100.0).max(0.0)
        } else {
            0.0
        },
        timeline,
        writes: written.len() as u64,
        new_view_keys: ns.keys,
        new_view_bytes: ns.bytes,
        state_bytes_end,
        rss_bytes_end,
        checked_articles: ids.len(),
    };
    eprintln!(
        "new view (partial {}): CREATE VIEW {:.2} ms, first read (article {}, {:?} votes) {:.2} ms, \
         next {} first reads p50 {:.2} ms p99 {:.2} ms; writes/s before {} (slowest {}), \
         after: slowest {} mean {} (dip {:.1} %)",
        if partial { "on" } else { "off" },
        nv.create_view_ms,
        nv.first_read_id,
        nv.first_read_votes,
        nv.first_read_ms,
        nv.next_reads.count,
        nv.next_reads.p50_ms,
        nv.next_reads.p99_ms,
        thousands(nv.writes_before_mean_per_s as u64),
        thousands(nv.writes_before_min_per_s as u64),
        thousands(nv.writes_after_min_per_s as u64),
        thousands(nv.writes_after_mean_per_s as u64),
        nv.dip_percent
    );
    Ok(nv)
}

fn print_runs(runs: &[Run]) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                match r.limit_percent {
                    Some(_) => format!("{} ({})", r.config, human_bytes(r.memory_limit_bytes)),
                    None => r.config.clone(),
                },
                format!("{}%", r.write_fraction * 100.0),
                thousands(r.reads_per_s as u64),
                r.vs_all_keys
                    .map_or("-".into(), |v| format!("{:.0}%", v * 100.0)),
                thousands(r.writes_per_s as u64),
                format!("{:.2}%", r.hit_rate * 100.0),
                r.read_p50_ns.to_string(),
                r.read_p99_ns.to_string(),
                format!("{:.0}", r.upquery_mean_us),
                thousands(r.evictions),
                human_bytes(r.state_bytes_end),
                human_bytes(r.rss_bytes_end),
            ]
        })
        .collect();
    print_table(
        &[
            "memory",
            "writes",
            "reads/s",
            "vs all keys",
            "writes/s",
            "hit rate",
            "p50 ns",
            "p99 ns",
            "upquery us",
            "evictions",
            "state",
            "RSS",
        ],
        &rows,
    );
}

fn print_new_views(views: &[&NewView]) {
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                format!(
                    "{} votes, partial {}",
                    thousands(v.votes),
                    if v.partial { "on" } else { "off" }
                ),
                common::ms(v.create_view_ms),
                common::ms(v.first_read_ms),
                common::ms(v.next_reads.p50_ms),
                common::ms(v.next_reads.p99_ms),
                thousands(v.writes_before_mean_per_s as u64),
                thousands(v.writes_before_min_per_s as u64),
                thousands(v.writes_after_min_per_s as u64),
                thousands(v.writes_after_mean_per_s as u64),
                format!("{:.1}%", v.dip_percent),
            ]
        })
        .collect();
    print_table(
        &[
            "new view",
            "CREATE ms",
            "1st read ms",
            "next p50 ms",
            "next p99 ms",
            "writes/s before",
            "slowest before",
            "slowest after",
            "mean after",
            "dip",
        ],
        &rows,
    );
}

/// The issue's targets, met or not.
fn print_targets(runs: &[Run], nv: Option<&NewView>) {
    for r in runs {
        if r.limit_percent == Some(25.0) {
            if let Some(v) = r.vs_all_keys {
                println!(
                    "25% memory, {}% writes: {:.0}% of the all-keys read throughput (target >= 80%): {}",
                    r.write_fraction * 100.0,
                    v * 100.0,
                    if v >= 0.8 { "met" } else { "NOT met" }
                );
            }
        }
    }
    if let Some(v) = nv {
        println!(
            "new view over {} votes: CREATE VIEW + first read {} ms (target < 100 ms): {}",
            thousands(v.votes),
            common::ms(v.first_answer_ms),
            if v.first_answer_ms < 100.0 {
                "met"
            } else {
                "NOT met"
            }
        );
        println!(
            "write dip while it is added: {:.1}% (target <= 10%): {}",
            v.dip_percent,
            if v.dip_percent <= 10.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
}
