//! The cost of one write through a maintained view, in three systems.
//!
//! The view is Noria's vote benchmark view:
//!
//! ```sql
//! SELECT article.id, title, votes
//! FROM article LEFT JOIN (SELECT article_id, COUNT(*) AS votes
//!                         FROM vote GROUP BY article_id) AS vc
//!      ON article.id = vc.article_id
//! ```
//!
//! Each system is preloaded with the same articles and votes, then takes the
//! same vote inserts one at a time (each propagated to the view's output
//! before the next starts), then the same number again in batches. Every
//! system runs on one worker thread; at the end, all three must report the
//! vote counts computed directly from the generated data, or the run fails
//! and writes nothing. See `docs/benchmarks.md`, "Maintained views: one
//! write through a join + count".

mod aqueduct;
mod dbsp_view;
mod dd;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use serde::Serialize;

use workload::{Vote, Workload};

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "ivm-bench",
    about = "One-vote writes through Noria's vote view: Aqueduct's dataflow, Differential Dataflow and DBSP"
)]
pub struct Args {
    /// Articles preloaded.
    #[arg(long, default_value_t = 100_000)]
    articles: u64,
    /// Votes preloaded.
    #[arg(long, default_value_t = 1_000_000)]
    votes: u64,
    /// Single-vote inserts timed one by one.
    #[arg(long, default_value_t = 100_000)]
    updates: u64,
    /// Votes per step in the batched phase.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Votes inserted in the batched phase (default: as many as --updates).
    #[arg(long)]
    batch_updates: Option<u64>,
    /// How the article of each vote is drawn.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    distribution: Distribution,
    /// Exponent of the Zipf distribution.
    #[arg(long, default_value_t = 1.15)]
    zipf_s: f64,
    /// Systems to run, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "aqueduct,aqueduct-keyed,dd,dbsp"
    )]
    systems: Vec<SystemKind>,
    /// Articles whose counts are compared with the truth at the end.
    #[arg(long, default_value_t = 2_000)]
    check_sample: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the results here as JSON.
    #[arg(long)]
    #[serde(skip)]
    json: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    Uniform,
    Zipf,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SystemKind {
    /// Aqueduct's dataflow graph as `CREATE VIEW` builds it (one leaf).
    Aqueduct,
    /// The same plus the leaf keyed on the article id that the first keyed
    /// read of the view adds.
    AqueductKeyed,
    /// Differential Dataflow, one timely worker on this thread.
    Dd,
    /// DBSP, a runtime with one worker.
    Dbsp,
}

impl SystemKind {
    fn label(self) -> &'static str {
        match self {
            SystemKind::Aqueduct => "aqueduct",
            SystemKind::AqueductKeyed => "aqueduct-keyed",
            SystemKind::Dd => "differential-dataflow",
            SystemKind::Dbsp => "dbsp",
        }
    }
}

/// What a system under test must do.
pub trait System {
    /// Loads the articles and votes (before anything is timed per write).
    fn preload(&mut self, w: &Workload) -> anyhow::Result<()>;
    /// Inserts `votes` in one step and returns once the view's output
    /// reflects them.
    fn insert(&mut self, votes: &[Vote]) -> anyhow::Result<()>;
    /// The `votes` column of the view's row for each id (`None` for NULL).
    /// An error when an id does not have exactly one row.
    fn votes_of(&mut self, ids: &[u64]) -> anyhow::Result<Vec<Option<i64>>>;
    /// Rows in the view.
    fn rows(&mut self) -> anyhow::Result<u64>;
    /// Threads the process has while the system is running (for the record).
    fn note(&self) -> String {
        String::new()
    }
}

/// Latency percentiles of steps, in nanoseconds.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Steps {
    pub steps: u64,
    pub updates_per_step: u64,
    pub total_s: f64,
    /// Wall time per update (a step's time divided by its updates).
    pub mean_ns_per_update: f64,
    pub updates_per_s: f64,
    pub step_mean_ns: f64,
    pub step_p50_ns: u64,
    pub step_p90_ns: u64,
    pub step_p99_ns: u64,
    pub step_p999_ns: u64,
    pub step_max_ns: u64,
    /// Which step (0-based) was the slowest.
    pub step_max_index: u64,
    /// CPU time of the whole process (all its threads) per update.
    pub cpu_ns_per_update: f64,
    /// Process CPU time over wall time: above 1 means more than one core.
    pub cores_used: f64,
    /// Busy cores of the whole machine over the phase, and the part of them
    /// that was not this process (other users' work: interference).
    pub machine_busy_cores: f64,
    pub other_cores: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct SystemResult {
    pub system: &'static str,
    pub preload_s: f64,
    pub single: Steps,
    pub batched: Steps,
    pub view_rows: u64,
    pub checked_articles: usize,
    pub threads: u64,
    pub note: String,
    pub loadavg_start: String,
    pub loadavg_end: String,
}

#[derive(Serialize)]
struct Report<'a> {
    benchmark: &'static str,
    started_unix: u64,
    machine: workload::Machine,
    options: &'a Args,
    view_sql: &'static str,
    aqueduct_plan: Vec<String>,
    zero_vote_articles: u64,
    max_votes_per_article: u64,
    results: &'a [SystemResult],
    ratios_vs_aqueduct: Vec<Ratio>,
}

#[derive(Serialize)]
struct Ratio {
    system: &'static str,
    single_mean: f64,
    single_p50: f64,
    single_p99: f64,
    batched_mean: f64,
}

pub const VIEW_SQL: &str = "SELECT article.id, title, votes FROM article LEFT JOIN \
    (SELECT article_id, COUNT(*) AS votes FROM vote GROUP BY article_id) AS vc \
    ON article.id = vc.article_id";

/// The machine's busy and total time from /proc/stat, in clock ticks.
fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return (0, 0);
    }
    // user nice system idle iowait irq softirq steal ...; steal is not ours either.
    let total: u64 = v.iter().take(8).sum();
    (total - v[3] - v[4], total)
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Process CPU time (user + system, all threads).
fn process_cpu() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub fn threads_now() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `steps` (each a slice of votes) through `s`, timing each step.
fn timed_steps<'a>(
    s: &mut dyn System,
    steps: impl ExactSizeIterator<Item = &'a [Vote]>,
    label: &str,
) -> anyhow::Result<Steps> {
    let n = steps.len();
    let mut times: Vec<u64> = Vec::with_capacity(n);
    let mut updates = 0u64;
    let mut per_step = 0u64;
    let cpu0 = process_cpu();
    let m0 = machine_ticks();
    let wall0 = Instant::now();
    let mut shown = Instant::now();
    for (i, votes) in steps.enumerate() {
        let t0 = Instant::now();
        s.insert(votes)?;
        times.push(t0.elapsed().as_nanos() as u64);
        updates += votes.len() as u64;
        per_step = per_step.max(votes.len() as u64);
        if shown.elapsed() > Duration::from_secs(5) {
            eprintln!("    {label}: {}/{n} steps", i + 1);
            shown = Instant::now();
        }
    }
    let wall = wall0.elapsed();
    let cpu = process_cpu() - cpu0;
    let m1 = machine_ticks();
    let machine_busy_cores =
        (m1.0 - m0.0) as f64 / clock_ticks_per_s() / wall.as_secs_f64().max(1e-9);
    let total: u64 = times.iter().sum();
    let step_max_index = times
        .iter()
        .enumerate()
        .max_by_key(|(_, &t)| t)
        .map_or(0, |(i, _)| i as u64);
    times.sort_unstable();
    let q = |p: f64| -> u64 {
        if times.is_empty() {
            return 0;
        }
        let i = ((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1;
        times[i]
    };
    let upd = updates.max(1) as f64;
    Ok(Steps {
        steps: n as u64,
        updates_per_step: per_step,
        total_s: total as f64 / 1e9,
        mean_ns_per_update: total as f64 / upd,
        updates_per_s: upd / (total as f64 / 1e9),
        step_mean_ns: total as f64 / n.max(1) as f64,
        step_p50_ns: q(0.50),
        step_p90_ns: q(0.90),
        step_p99_ns: q(0.99),
        step_p999_ns: q(0.999),
        step_max_ns: times.last().copied().unwrap_or(0),
        step_max_index,
        cpu_ns_per_update: cpu.as_nanos() as f64 / upd,
        cores_used: cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9),
        machine_busy_cores,
        other_cores: (machine_busy_cores - cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9))
            .max(0.0),
    })
}

/// Preload, single-vote phase, batched phase, then the check against the
/// truth. Shared by every system.
pub fn run_system(
    kind: SystemKind,
    s: &mut dyn System,
    w: &Workload,
) -> anyhow::Result<SystemResult> {
    let label = kind.label();
    let loadavg_start = loadavg();
    eprintln!(
        "{label}: preloading {} articles and {} votes",
        w.articles.len(),
        w.preload.len()
    );
    let t0 = Instant::now();
    s.preload(w)?;
    let preload_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "{label}: preloaded in {preload_s:.2} s; {} single-vote steps",
        w.single.len()
    );
    let single = timed_steps(s, w.single.chunks(1), label)?;
    eprintln!(
        "{label}: {:.0} ns/update (p50 {} ns, p99 {} ns); {} steps of {}",
        single.mean_ns_per_update,
        single.step_p50_ns,
        single.step_p99_ns,
        w.batched.len() / w.batch.max(1),
        w.batch
    );
    let batched = timed_steps(s, w.batched.chunks(w.batch.max(1)), label)?;
    eprintln!(
        "{label}: batches of {}: {:.0} ns/update (step p50 {} ns, p99 {} ns)",
        w.batch, batched.mean_ns_per_update, batched.step_p50_ns, batched.step_p99_ns
    );
    let threads = threads_now();
    // The check: every sampled article's count, and the number of rows.
    let truth = w.truth();
    let ids = w.check_ids();
    let got = s.votes_of(&ids)?;
    let mut wrong = Vec::new();
    for (id, g) in ids.iter().zip(&got) {
        let want = match truth[*id as usize] {
            0 => None,
            n => Some(n as i64),
        };
        if *g != want {
            wrong.push(format!("article {id}: got {g:?}, want {want:?}"));
        }
    }
    if !wrong.is_empty() {
        bail!(
            "{label} computed wrong vote counts for {} of {} articles checked, e.g. {}",
            wrong.len(),
            ids.len(),
            wrong[..wrong.len().min(5)].join("; ")
        );
    }
    let view_rows = s.rows()?;
    if view_rows != w.articles.len() as u64 {
        bail!(
            "{label}'s view has {view_rows} rows, want one per article ({})",
            w.articles.len()
        );
    }
    eprintln!(
        "{label}: the counts of {} articles match the truth",
        ids.len()
    );
    Ok(SystemResult {
        system: label,
        preload_s,
        single,
        batched,
        view_rows,
        checked_articles: ids.len(),
        threads,
        note: s.note(),
        loadavg_start,
        loadavg_end: loadavg(),
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if args.articles == 0 || args.batch == 0 {
        bail!("--articles and --batch must be at least 1");
    }
    // The plan Aqueduct's SQL compiler builds for the view, and a small
    // end-to-end comparison with the hand-built graph measured below.
    let aqueduct_plan = aqueduct::check_against_engine()?;
    eprintln!("aqueduct-sql compiles the view to the graph measured here:");
    for l in &aqueduct_plan {
        eprintln!("  {l}");
    }

    let w = std::sync::Arc::new(Workload::generate(&args));
    let truth = w.truth();
    let zero_vote_articles = truth[1..].iter().filter(|&&c| c == 0).count() as u64;
    let max_votes_per_article = truth.iter().copied().max().unwrap_or(0);
    eprintln!(
        "workload: {} articles, {} preloaded votes ({:?}), {} single + {} batched inserts; \
         {zero_vote_articles} articles end with no votes, the most voted has {max_votes_per_article}",
        w.articles.len(),
        w.preload.len(),
        args.distribution,
        w.single.len(),
        w.batched.len()
    );

    let mut results = Vec::new();
    for kind in args.systems.clone() {
        let r = match kind {
            SystemKind::Aqueduct | SystemKind::AqueductKeyed => {
                let mut s = aqueduct::AqueductSystem::new(kind == SystemKind::AqueductKeyed);
                run_system(kind, &mut s, &w)?
            }
            SystemKind::Dd => dd::run(w.clone())?,
            SystemKind::Dbsp => {
                let mut s = dbsp_view::DbspSystem::new()?;
                let r = run_system(kind, &mut s, &w);
                s.shutdown();
                r?
            }
        };
        results.push(r);
    }

    print_table(&results);
    let base = results.iter().find(|r| r.system == "aqueduct").cloned();
    let ratios = match &base {
        Some(b) => results
            .iter()
            .map(|r| Ratio {
                system: r.system,
                single_mean: r.single.mean_ns_per_update / b.single.mean_ns_per_update,
                single_p50: r.single.step_p50_ns as f64 / b.single.step_p50_ns.max(1) as f64,
                single_p99: r.single.step_p99_ns as f64 / b.single.step_p99_ns.max(1) as f64,
                batched_mean: r.batched.mean_ns_per_update / b.batched.mean_ns_per_update,
            })
            .collect(),
        None => Vec::new(),
    };
    if !ratios.is_empty() {
        println!("\nns per update relative to aqueduct (above 1: slower than aqueduct)");
        println!(
            "{:<22} {:>12} {:>10} {:>10} {:>14}",
            "system", "single mean", "p50", "p99", "batched mean"
        );
        for r in &ratios {
            println!(
                "{:<22} {:>11.2}x {:>9.2}x {:>9.2}x {:>13.2}x",
                r.system, r.single_mean, r.single_p50, r.single_p99, r.batched_mean
            );
        }
    }
    if let Some(path) = &args.json {
        let report = Report {
            benchmark: "ivm write",
            started_unix,
            machine: workload::machine(),
            options: &args,
            view_sql: VIEW_SQL,
            aqueduct_plan,
            zero_vote_articles,
            max_votes_per_article,
            results: &results,
            ratios_vs_aqueduct: ratios,
        };
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
        }
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn print_table(results: &[SystemResult]) {
    println!(
        "\n{:<22} {:>9} | {:>10} {:>9} {:>9} {:>9} {:>10} {:>6} | {:>12} {:>10} {:>10} {:>6} {:>6}",
        "system",
        "preload s",
        "single ns",
        "p50 ns",
        "p99 ns",
        "p99.9 ns",
        "updates/s",
        "cores",
        "batch ns/upd",
        "step p50",
        "step p99",
        "cores",
        "other"
    );
    for r in results {
        println!(
            "{:<22} {:>9.2} | {:>10.0} {:>9} {:>9} {:>9} {:>10.0} {:>6.2} | {:>12.0} {:>10} {:>10} {:>6.2} {:>6.2}",
            r.system,
            r.preload_s,
            r.single.mean_ns_per_update,
            r.single.step_p50_ns,
            r.single.step_p99_ns,
            r.single.step_p999_ns,
            r.single.updates_per_s,
            r.single.cores_used,
            r.batched.mean_ns_per_update,
            r.batched.step_p50_ns,
            r.batched.step_p99_ns,
            r.batched.cores_used,
            r.single.other_cores,
        );
    }
}
