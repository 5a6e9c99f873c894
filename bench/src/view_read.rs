//! `bench view read`: keyed reads of a maintained view inside the process,
//! through the lowest-level embedded read API.
//!
//! An embedded engine (aqueduct-sql's `Engine` on a scratch log with fsync
//! `never`) gets Noria's vote schema, N articles and M votes loaded with
//! multi-row INSERTs, and the view
//!
//! ```sql
//! CREATE VIEW ArticleWithVoteCount AS SELECT article.id, title, votes
//! FROM article LEFT JOIN (SELECT article_id, COUNT(*) AS votes FROM vote
//!                         GROUP BY article_id) AS vc ON article.id = vc.article_id
//! ```
//!
//! Then T threads call `engine.views.lookup(&entry, &[0], &[Value::Int(id)])`
//! back to back for a fixed time, with ids drawn uniformly or by a Zipf law.
//! Every read is checked to return exactly one row with the right id; before
//! the timed runs, a sample of articles is checked against the vote counts
//! computed from the generated data.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::views::ViewEntry;
use aqueduct_sql::{Engine, Outcome, Prepared, Session};
use aqueduct_values::Value;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::common::{self, check_stop, new_hist, print_table, thousands};
use crate::cpu::{self, CpuUse};

/// The view's name as the engine stores it (identifiers fold to lower case).
pub(crate) const VIEW: &str = "articlewithvotecount";
pub(crate) const CREATE_VIEW: &str =
    "CREATE VIEW ArticleWithVoteCount AS SELECT article.id, title, votes \
     FROM article LEFT JOIN (SELECT article_id, COUNT(*) AS votes FROM vote GROUP BY article_id) \
     AS vc ON article.id = vc.article_id";
/// One read in this many is timed on its own (the clock reads would
/// otherwise be a visible part of a read this short).
pub(crate) const TIME_ONE_IN: u64 = 16;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every article equally likely.
    Uniform,
    /// Article k with probability proportional to k^-s (article 1 hottest).
    Zipf,
}

impl Distribution {
    pub(crate) fn name(self, s: f64) -> String {
        match self {
            Distribution::Uniform => "uniform".into(),
            Distribution::Zipf => format!("zipf {s}"),
        }
    }
}

/// Which read API a run calls.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `ViewRegistry::lookup`: the view reader, rows copied out.
    Lookup,
    /// `Session::execute_prepared` of the keyed SELECT: the SQL API.
    Session,
    /// `Session::execute_prepared_each`: the SQL API, rows read in place.
    SessionEach,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Lookup => "lookup",
            Api::Session => "session",
            Api::SessionEach => "session-each",
        }
    }
}

/// The prepared read of the `session` APIs.
const SESSION_READ: &str = "SELECT id, title, votes FROM ArticleWithVoteCount WHERE id = $1";

#[derive(Args, Debug, Serialize)]
pub struct ReadArgs {
    /// Articles loaded (ids 1..=N).
    #[arg(long, default_value_t = 100_000)]
    pub articles: u64,
    /// Votes loaded, each for a random article (same distribution as the reads).
    #[arg(long, default_value_t = 1_000_000)]
    pub votes: u64,
    /// Rows per INSERT statement while loading.
    #[arg(long, default_value_t = 10_000)]
    pub insert_rows: usize,
    /// Reader thread counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Read APIs to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lookup,session,session-each"
    )]
    pub apis: Vec<Api>,
    /// Distributions of the ids read (and voted for), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipf")]
    pub distributions: Vec<Distribution>,
    /// Exponent of the Zipf distribution.
    #[arg(long, default_value_t = 1.15)]
    pub zipf_s: f64,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Unmeasured seconds at the start of each run.
    #[arg(long, default_value_t = 0.5)]
    pub warmup: f64,
    /// Articles whose counts are checked before the timed runs.
    #[arg(long, default_value_t = 2_000)]
    pub check_sample: usize,
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
pub struct ReadResults {
    pub load: Load,
    pub runs: Vec<Run>,
}

#[derive(Serialize, Debug)]
pub struct Load {
    pub articles: u64,
    pub votes: u64,
    pub articles_s: f64,
    pub votes_s: f64,
    pub votes_per_s: f64,
    pub create_view_s: f64,
    /// The first keyed lookup, which adds and fills the keyed reader.
    pub first_lookup_s: f64,
    pub articles_without_votes: u64,
    pub max_votes: u64,
    pub checked_articles: usize,
}

#[derive(Serialize, Debug)]
pub struct Run {
    pub api: String,
    pub distribution: String,
    pub threads: usize,
    pub seconds: f64,
    pub reads: u64,
    pub reads_per_s: f64,
    pub reads_per_s_per_thread: Vec<f64>,
    /// Mean wall time per read in one thread (threads / reads per second).
    pub mean_ns: f64,
    /// Percentiles of the reads timed one by one (one in 16).
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub cpu: CpuUse,
    pub loadavg_end: [f64; 3],
}

/// Draws ids 1..=n.
pub(crate) struct Sampler {
    n: u64,
    /// Cumulative probabilities of ids 1..=n (Zipf only).
    cdf: Option<Vec<f64>>,
}

impl Sampler {
    pub(crate) fn new(n: u64, d: Distribution, s: f64) -> Sampler {
        let cdf = (d == Distribution::Zipf).then(|| {
            let mut acc = 0.0;
            let mut cdf: Vec<f64> = (1..=n)
                .map(|k| {
                    acc += (k as f64).powf(-s);
                    acc
                })
                .collect();
            cdf.iter_mut().for_each(|c| *c /= acc);
            cdf
        });
        Sampler { n, cdf }
    }

    pub(crate) fn sample(&self, rng: &mut impl Rng) -> u64 {
        match &self.cdf {
            None => rng.gen_range(1..=self.n),
            Some(cdf) => {
                // One uniform draw, inverted through the CDF (drawing inside
                // the predicate would draw anew at every step of the search).
                let u = rng.gen::<f64>();
                (cdf.partition_point(|&c| c < u) as u64).min(self.n - 1) + 1
            }
        }
    }
}

/// An embedded engine on a fresh log in a scratch directory under `parent`
/// (durability off: these benchmarks measure what happens in memory).
pub(crate) fn scratch_engine(
    parent: &Option<PathBuf>,
    prefix: &str,
) -> anyhow::Result<(tempfile::TempDir, Arc<Engine>)> {
    let scratch = common::scratch_dir(parent, prefix)?;
    let (log, _) = Log::open(
        scratch.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .context("opening the scratch log")?;
    let engine = Engine::open(log, &mut |_| {}).map_err(|e| anyhow!("opening the engine: {e}"))?;
    Ok((scratch, engine))
}

pub(crate) fn exec(s: &mut aqueduct_sql::Session, sql: &str) -> anyhow::Result<Outcome> {
    s.execute(sql)
        .pop()
        .context("no result")?
        .map_err(|e| anyhow!("{}: {e}", &sql[..sql.len().min(80)]))
}

/// Inserts `rows` (already formatted as `(a, b)`) into `table`, `per` at a time.
pub(crate) fn insert_all(
    s: &mut aqueduct_sql::Session,
    table: &str,
    rows: impl Iterator<Item = String>,
    per: usize,
) -> anyhow::Result<()> {
    insert_all_with(table, rows, per, |sql| exec(s, sql).map(drop))
}

/// [`insert_all`] through `run`, which executes one multi-row INSERT (in
/// process or over the wire).
pub(crate) fn insert_all_with(
    table: &str,
    rows: impl Iterator<Item = String>,
    per: usize,
    mut run: impl FnMut(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut batch: Vec<String> = Vec::with_capacity(per);
    let mut flush = |batch: &mut Vec<String>| -> anyhow::Result<()> {
        if !batch.is_empty() {
            run(&format!("INSERT INTO {table} VALUES {}", batch.join(", ")))?;
            batch.clear();
        }
        check_stop()
    };
    for r in rows {
        batch.push(r);
        if batch.len() >= per {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)
}

/// The `votes` column of the view's row for `id` (`None` for NULL).
pub(crate) fn votes_of(engine: &Engine, entry: &ViewEntry, id: u64) -> anyhow::Result<Option<i64>> {
    let (rows, _) = engine
        .views
        .lookup(entry, &[0], &[Value::Int(id as i64)])
        .map_err(|e| anyhow!("lookup of article {id}: {e}"))?;
    match rows.as_slice() {
        [r] if r[0] == Value::Int(id as i64) => match &r[2] {
            Value::Null => Ok(None),
            Value::Int(n) => Ok(Some(*n)),
            other => bail!("article {id}: votes is {other:?}"),
        },
        other => bail!("article {id}: the view has {other:?}"),
    }
}

pub fn run(args: &ReadArgs) -> anyhow::Result<ReadResults> {
    if args.articles == 0 || args.threads.is_empty() || args.threads.contains(&0) {
        bail!("--articles and every --threads must be at least 1");
    }
    let first = *args.distributions.first().context("no --distributions")?;
    let (_scratch, engine) = scratch_engine(&args.dir, "aqueduct-view-read-")?;
    let mut s = engine.session();
    exec(
        &mut s,
        "CREATE TABLE article (id int PRIMARY KEY, title text)",
    )?;
    exec(&mut s, "CREATE TABLE vote (article_id int, \"user\" int)")?;

    // The votes follow the first distribution asked for.
    eprintln!(
        "loading {} articles and {} votes ({}) in INSERTs of {} rows",
        thousands(args.articles),
        thousands(args.votes),
        first.name(args.zipf_s),
        thousands(args.insert_rows as u64)
    );
    let t = Instant::now();
    insert_all(
        &mut s,
        "article",
        (1..=args.articles).map(|id| format!("({id}, 'Article {id}')")),
        args.insert_rows,
    )?;
    let articles_s = t.elapsed().as_secs_f64();
    let sampler = Sampler::new(args.articles, first, args.zipf_s);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let votes: Vec<u64> = (0..args.votes).map(|_| sampler.sample(&mut rng)).collect();
    let mut truth = vec![0u64; args.articles as usize + 1];
    for &a in &votes {
        truth[a as usize] += 1;
    }
    let t = Instant::now();
    insert_all(
        &mut s,
        "vote",
        votes.iter().enumerate().map(|(u, a)| format!("({a}, {u})")),
        args.insert_rows,
    )?;
    let votes_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    exec(&mut s, CREATE_VIEW)?;
    let create_view_s = t.elapsed().as_secs_f64();
    // The engine maintains views on its own thread: wait until they reflect
    // every write (CREATE VIEW itself fills the view from the tables).
    engine
        .views
        .await_lsn(s.last_lsn())
        .map_err(|e| anyhow!("waiting for the views: {e}"))?;
    let entry = engine
        .views
        .get(VIEW)
        .with_context(|| format!("no view {VIEW} after CREATE VIEW"))?;
    let t = Instant::now();
    votes_of(&engine, &entry, 1)?;
    let first_lookup_s = t.elapsed().as_secs_f64();
    eprintln!(
        "loaded: articles {articles_s:.2} s, votes {votes_s:.2} s, CREATE VIEW {create_view_s:.2} s, \
         first keyed lookup {first_lookup_s:.2} s"
    );

    // Check a sample (with the hottest and some vote-less articles) against the truth.
    let mut ids: Vec<u64> = (0..args.check_sample)
        .map(|_| rng.gen_range(1..=args.articles))
        .collect();
    ids.extend(
        (1..=args.articles)
            .filter(|&i| truth[i as usize] == 0)
            .take(10),
    );
    ids.extend([1, 2, 3, args.articles]);
    for &id in &ids {
        let want = match truth[id as usize] {
            0 => None,
            n => Some(n as i64),
        };
        let got = votes_of(&engine, &entry, id)?;
        if got != want {
            bail!("the view says article {id} has {got:?} votes; the data says {want:?}");
        }
    }
    eprintln!("the counts of {} articles match the data", ids.len());
    let load = Load {
        articles: args.articles,
        votes: args.votes,
        articles_s,
        votes_s,
        votes_per_s: args.votes as f64 / votes_s.max(1e-9),
        create_view_s,
        first_lookup_s,
        articles_without_votes: truth[1..].iter().filter(|&&c| c == 0).count() as u64,
        max_votes: truth.iter().copied().max().unwrap_or(0),
        checked_articles: ids.len(),
    };

    let mut runs = Vec::new();
    for &d in &args.distributions {
        for &threads in &args.threads {
            for &api in &args.apis {
                check_stop()?;
                let r = measure(args, &engine, &entry, api, d, threads)?;
                eprintln!(
                    "{} {} x{}: {} reads/s ({} per thread), p50 {} ns, p99 {} ns",
                    r.api,
                    r.distribution,
                    r.threads,
                    thousands(r.reads_per_s as u64),
                    thousands((r.reads_per_s / threads as f64) as u64),
                    r.p50_ns,
                    r.p99_ns
                );
                runs.push(r);
            }
        }
    }
    drop(s);
    print_runs(&runs);
    Ok(ReadResults { load, runs })
}

/// One timed run: `threads` readers, each with its own precomputed ids.
fn measure(
    args: &ReadArgs,
    engine: &Arc<Engine>,
    entry: &ViewEntry,
    api: Api,
    d: Distribution,
    threads: usize,
) -> anyhow::Result<Run> {
    const IDS_PER_THREAD: usize = 1 << 20;
    let sampler = Sampler::new(args.articles, d, args.zipf_s);
    let warmup = Duration::from_secs_f64(args.warmup);
    let seconds = Duration::from_secs_f64(args.seconds);
    let start = Arc::new(Barrier::new(threads + 1));
    let failed = Arc::new(AtomicBool::new(false));
    let outcomes = std::thread::scope(|scope| -> anyhow::Result<_> {
        let mut handles = Vec::new();
        for t in 0..threads {
            let mut rng = StdRng::seed_from_u64(args.seed ^ ((t as u64 + 1) * 0x9e37_79b9));
            let ids: Vec<u64> = (0..IDS_PER_THREAD)
                .map(|_| sampler.sample(&mut rng))
                .collect();
            let (start, failed) = (start.clone(), failed.clone());
            handles.push(
                scope.spawn(move || -> anyhow::Result<(u64, f64, Histogram<u64>)> {
                    let keys: Vec<[Value; 1]> =
                        ids.iter().map(|&i| [Value::Int(i as i64)]).collect();
                    let mut reader = Reader::new(engine, entry, api)?;
                    let mut hist = new_hist();
                    start.wait();
                    let began = Instant::now();
                    let (measure_from, end) = (began + warmup, began + warmup + seconds);
                    let mut i = 0usize;
                    let mut n = 0u64;
                    let mut counting = false;
                    let mut t0 = began;
                    loop {
                        // Check the clock and the flags every 256 reads.
                        if i.is_multiple_of(256) {
                            let now = Instant::now();
                            if !counting && now >= measure_from {
                                counting = true;
                                t0 = now;
                                n = 0;
                            }
                            if now >= end || failed.load(Ordering::Relaxed) || common::stopped() {
                                let elapsed = (now - t0).as_secs_f64();
                                return Ok((n, elapsed, hist));
                            }
                        }
                        let key = &keys[i % keys.len()];
                        let timed = counting && (i as u64).is_multiple_of(TIME_ONE_IN);
                        let r0 = timed.then(Instant::now);
                        let result = reader.read(&key[0]);
                        if let Some(r0) = r0 {
                            hist.saturating_record(r0.elapsed().as_nanos() as u64);
                        }
                        if let Err(e) = result {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                        i += 1;
                        n += 1;
                    }
                }),
            );
        }
        start.wait();
        let c0 = cpu::sample(None);
        let mut outcomes = Vec::new();
        for h in handles {
            outcomes.push(
                h.join()
                    .map_err(|_| anyhow!("a reader thread panicked"))??,
            );
        }
        let c1 = cpu::sample(None);
        Ok((outcomes, CpuUse::between(&c0, &c1)))
    })?;
    let (outcomes, cpu) = outcomes;
    check_stop()?;
    let mut hist = new_hist();
    let mut reads = 0;
    let mut per_thread = Vec::new();
    let mut window: f64 = 0.0;
    for (n, secs, h) in &outcomes {
        reads += n;
        per_thread.push(*n as f64 / secs.max(1e-9));
        window = window.max(*secs);
        hist.add(h).context("merging histograms")?;
    }
    let reads_per_s: f64 = per_thread.iter().sum();
    Ok(Run {
        api: api.name().to_string(),
        distribution: d.name(args.zipf_s),
        threads,
        seconds: window,
        reads,
        reads_per_s,
        reads_per_s_per_thread: per_thread,
        mean_ns: threads as f64 * 1e9 / reads_per_s.max(1e-9),
        p50_ns: hist.value_at_quantile(0.50),
        p90_ns: hist.value_at_quantile(0.90),
        p99_ns: hist.value_at_quantile(0.99),
        p999_ns: hist.value_at_quantile(0.999),
        max_ns: hist.max(),
        cpu,
        loadavg_end: cpu::loadavg(),
    })
}

/// One thread's way of reading the view by id.
enum Reader<'a> {
    Lookup(&'a Engine, &'a ViewEntry),
    Session(Box<Session>, Box<Prepared>, bool),
}

impl<'a> Reader<'a> {
    fn new(engine: &'a Arc<Engine>, entry: &'a ViewEntry, api: Api) -> anyhow::Result<Self> {
        if api == Api::Lookup {
            return Ok(Reader::Lookup(engine, entry));
        }
        let mut session = engine.session();
        let read = session
            .prepare(SESSION_READ, &[])
            .map_err(|e| anyhow!("{SESSION_READ}: {e}"))?;
        Ok(Reader::Session(
            Box::new(session),
            Box::new(read),
            api == Api::SessionEach,
        ))
    }

    /// Reads article `id`, which must give exactly one row with that id.
    fn read(&mut self, id: &Value) -> anyhow::Result<()> {
        let (n, first) = match self {
            Reader::Lookup(engine, entry) => {
                let (rows, _) = engine
                    .views
                    .lookup(entry, &[0], std::slice::from_ref(id))
                    .map_err(|e| anyhow!("lookup of {id:?}: {e}"))?;
                (rows.len(), rows.first().map(|r| r[0] == *id))
            }
            Reader::Session(s, p, false) => match s.execute_prepared(p, std::slice::from_ref(id)) {
                Ok(Outcome::Rows { rows, .. }) => (rows.len(), rows.first().map(|r| r[0] == *id)),
                Ok(other) => bail!("read of {id:?}: {other:?}"),
                Err(e) => bail!("read of {id:?}: {e}"),
            },
            Reader::Session(s, p, true) => {
                let mut first = None;
                let n = s
                    .execute_prepared_each(p, std::slice::from_ref(id), |r| {
                        first.get_or_insert(r[0] == *id);
                    })
                    .map_err(|e| anyhow!("read of {id:?}: {e}"))?;
                (n as usize, first)
            }
        };
        if n != 1 || first != Some(true) {
            bail!("the read of {id:?} returned {n} rows");
        }
        Ok(())
    }
}

fn print_runs(runs: &[Run]) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.api.clone(),
                r.distribution.clone(),
                r.threads.to_string(),
                thousands(r.reads_per_s as u64),
                thousands((r.reads_per_s / r.threads as f64) as u64),
                format!("{:.0}", r.mean_ns),
                r.p50_ns.to_string(),
                r.p99_ns.to_string(),
                r.p999_ns.to_string(),
                format!("{:.2}", r.cpu.bench_cores),
                format!("{:.2}", r.cpu.other_cores),
            ]
        })
        .collect();
    print_table(
        &[
            "api",
            "ids",
            "threads",
            "reads/s",
            "per thread",
            "mean ns",
            "p50 ns",
            "p99 ns",
            "p99.9 ns",
            "bench cores",
            "other cores",
        ],
        &rows,
    );
}
