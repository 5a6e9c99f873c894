//! `bench view partial-wire`: Noria's vote benchmark against partial state
//! under memory limits, measured over the wire — the real server, clients
//! speaking the PostgreSQL protocol — as Noria measured it through its
//! client over the network.
//!
//! `bench view partial` runs the same mix in process: a read there is a
//! call into the engine (millions of reads/s), so the ~10 µs of an upquery
//! on a miss weighs as much as hundreds of hits. Here every operation pays a
//! round trip through the protocol and the server's session, and the cost of
//! a miss is seen against that.
//!
//! # Server
//!
//! `aqueduct serve` (the release binary next to this one, or
//! `--aqueduct-bin`) on a scratch data directory in `--dir`, listening on
//! 127.0.0.1 only, with `--fsync never` (the benchmark is about reads, not
//! the disk: a vote costs no fdatasync) and `--partial-state on`. Every
//! server is stopped when the benchmark ends, and every phase runs under a
//! watchdog.
//!
//! # Load
//!
//! Over one connection:
//!
//! ```sql
//! CREATE TABLE article (id bigint PRIMARY KEY, title text);
//! CREATE TABLE vote (article_id bigint, user_id bigint);
//! CREATE INDEX vote_article ON vote (article_id);
//! ```
//!
//! then N articles and V votes (`--articles`, `--votes`, by default V = N;
//! article ids drawn by the Zipf law of the reads, users 1..=V) in
//! multi-row INSERTs of `--insert-rows` rows, then `ArticleWithVoteCount`
//! (the view of `bench view read`). The index makes an upquery of one
//! article two index lookups rather than a scan of `vote`.
//!
//! # Fully materialized size F
//!
//! `--threads` connections read every article once through the view (a
//! prepared `SELECT id, title, votes FROM articlewithvotecount WHERE id =
//! $1`; each read a miss filled by an upquery), each checked against the
//! vote counts of the generated data. The server's `aqueduct_state_bytes`
//! (`/metrics`: all view and operator state) is then F, the base of the
//! limits. F is measured once: the runs' votes grow the fully materialized
//! size a little (an article's first vote adds a count), which the state of
//! the 100 % runs shows.
//!
//! # Runs under memory limits
//!
//! For each limit p in `--limits` (percent of F) the server is stopped and
//! started again on the same data directory (it recovers the tables and
//! the view from its log; partial state starts empty) with `--memory-limit
//! F*p/100` (no flag for p >= 100: no limit; when the state is over the
//! limit, the server evicts least recently read keys, chosen by sampling).
//! Then every article is read once more, from the last (coldest) to the
//! first (hottest), each checked against the data and the votes of the
//! runs before (so every restart is checked too): with no limit the view
//! then holds every key, as a fully materialized view would; under a limit
//! the eviction of the least recently read keys leaves about the hottest
//! ones that fit. So every run starts warm, not with the misses of an
//! empty cache (which at Zipf 1.15 over 1,000,000 keys would take far
//! longer than a run to fade).
//!
//! Then, for each write fraction w in `--write-fractions`, `--threads`
//! client threads (default two per core: a client waits for a round trip
//! most of the time, so it takes more connections than cores to load the
//! server), each with its own connection and prepared statements, run a
//! closed loop for `--warmup` unmeasured seconds (the cache adapts to the
//! mix) and then `--seconds` measured. Each operation picks an article by Zipf
//! (`--zipf-s` over all articles) and is, with probability w, a write —
//! a prepared autocommit `INSERT INTO vote VALUES ($1, $2)` of the article
//! and a fresh user — and otherwise a read: the prepared keyed SELECT,
//! checked to return exactly that article's row. A read waits until the
//! view reflects every write committed before it (the server's reads are
//! consistent), so writes can slow reads down. Every thread is both reader
//! and writer, as Noria's vote clients are.
//!
//! Measured per run: reads/s and writes/s over the measured window (each
//! thread's count over its own window, summed); the latency of every read
//! and write as the client sees it (hdrhistogram; round trip included,
//! misses included); the view's hits, misses, evictions and upqueries
//! (count and mean time) over the window, from the server's `/metrics`
//! (`aqueduct_view_*{view="articlewithvotecount"}`, after minus before);
//! `aqueduct_state_bytes` at the start and end of the window and its
//! largest value sampled every 250 ms (whether the limit is honoured); the
//! tables' bytes (`aqueduct_table_bytes`, not bounded by the limit); the
//! server process's resident memory (VmRSS of /proc/<pid>/status at the
//! end, its peak VmHWM since the restart, and VmRSS just after the restart,
//! before any view state; the server's allocator keeps freed memory, so
//! RSS does not fall with evictions the way state does);
//! the CPU of the server, of this process and of everything else on the
//! machine (printed with each run: other work on a shared machine takes
//! cores from both and shows there). After each run the
//! `--check-sample` hottest articles (which get most of the votes) are
//! read and checked against the data plus every vote written so far.
//! Reads/s is also given as a ratio to the run with no limit (p = 100) and
//! the same write fraction.
//!
//! The client threads share the machine's cores with the server: on a
//! small machine the clients' own protocol work is a large part of the
//! cost of a read, which the CPU columns of the JSON show.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use aqueduct_sql::views::human_bytes;
use clap::Args;
use hdrhistogram::Histogram;
use postgres::{Client, Statement};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{self, check_stop, new_hist, print_table, thousands, Watchdog};
use crate::cpu::{self, CpuUse};
use crate::view_read::{insert_all_with, Distribution, Sampler, CREATE_VIEW, VIEW};

const SCHEMA: [&str; 3] = [
    "CREATE TABLE article (id bigint PRIMARY KEY, title text)",
    "CREATE TABLE vote (article_id bigint, user_id bigint)",
    "CREATE INDEX vote_article ON vote (article_id)",
];
const INSERT_VOTE: &str = "INSERT INTO vote VALUES ($1, $2)";
/// Every server gets these flags (partial state is the default; said
/// explicitly so that an `AQUEDUCT_PARTIAL_STATE` in the environment
/// cannot change what is measured).
const SERVER_FLAGS: [&str; 2] = ["--partial-state", "on"];
/// How often the state is sampled during a run.
const STATE_SAMPLE: Duration = Duration::from_millis(250);
/// Slowest rate assumed of the load and of reading every article (rows or
/// reads per second) when bounding them in time.
const SLOWEST_RATE: u64 = 1_000;

#[derive(Args, Debug, Serialize)]
pub struct PartialWireArgs {
    /// Articles loaded (ids 1..=N).
    #[arg(long, default_value_t = 1_000_000)]
    pub articles: u64,
    /// Votes loaded, each for a Zipf article [default: --articles].
    #[arg(long)]
    pub votes: Option<u64>,
    /// Rows per INSERT statement while loading.
    #[arg(long, default_value_t = 10_000)]
    pub insert_rows: usize,
    /// Client threads (one connection each), running the closed loop of
    /// reads and writes [default: 2 per core].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Exponent of the Zipf law of the articles read and voted for.
    #[arg(long, default_value_t = 1.15)]
    pub zipf_s: f64,
    /// Memory limits, percent of the fully materialized state (100 or more:
    /// no limit), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,25,5")]
    pub limits: Vec<f64>,
    /// Fractions of the operations that are writes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.05")]
    pub write_fractions: Vec<f64>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Unmeasured seconds at the start of each run (the cache adapts).
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// The hottest articles checked against the data after each run.
    #[arg(long, default_value_t = 1_000)]
    pub check_sample: u64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// The `aqueduct` binary [default: next to this one].
    #[arg(long)]
    #[serde(skip)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Parent of the server's scratch data directory [default: the
    /// system's temp dir].
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Write the results here as JSON.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
pub struct WireResults {
    /// Client threads (connections) of the runs.
    pub threads: usize,
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
    /// Reading every article once, with no limit (each read an upquery).
    pub fill_s: f64,
    pub fill_keys_per_s: f64,
    /// All view and operator state with every key held: F, the base of
    /// the memory limits.
    pub full_state_bytes: u64,
    pub view_keys: u64,
    pub table_bytes: u64,
    pub rss_bytes: u64,
    pub articles_without_votes: u64,
    pub max_votes: u64,
}

#[derive(Serialize, Debug)]
pub struct Run {
    pub limit_percent: f64,
    /// `--memory-limit` of the server (0: none).
    pub memory_limit_bytes: u64,
    pub write_fraction: f64,
    pub threads: usize,
    /// Stopping the server and starting it again on the same data
    /// directory (log replay included), before this limit's runs.
    pub restart_s: f64,
    /// The server's VmRSS just after the restart: the tables, their
    /// indexes and the process, no view state yet.
    pub rss_after_restart_bytes: u64,
    /// Reading every article after the restart, and the state then.
    pub prefill_s: f64,
    pub prefill_state_bytes: u64,
    pub seconds: f64,
    pub reads: u64,
    pub writes: u64,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Reads/s over the no-limit run's with the same write fraction.
    pub vs_no_limit: Option<f64>,
    /// Every read and write, as the client sees it.
    pub read_p50_ns: u64,
    pub read_p90_ns: u64,
    pub read_p99_ns: u64,
    pub read_p999_ns: u64,
    pub read_max_ns: u64,
    pub write_p50_ns: u64,
    pub write_p99_ns: u64,
    /// The view's counters over the measured window (server side).
    pub hits: u64,
    pub misses: u64,
    pub hit_rate: f64,
    pub evictions: u64,
    pub upqueries: u64,
    pub upquery_mean_us: f64,
    pub state_bytes_start: u64,
    pub state_bytes_end: u64,
    /// The largest state sampled during the measured window.
    pub state_bytes_max: u64,
    pub view_keys_end: u64,
    pub table_bytes_end: u64,
    /// The server process's VmRSS at the end, and VmHWM since its start.
    pub rss_bytes_end: u64,
    pub rss_peak_bytes: u64,
    pub checked_articles: u64,
    pub cpu: CpuUse,
    pub loadavg_end: [f64; 3],
}

impl PartialWireArgs {
    fn votes(&self) -> u64 {
        self.votes.unwrap_or(self.articles)
    }

    fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| 2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// The server's counters that a run reads before and after.
struct Snapshot {
    state_bytes: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    keys: u64,
    upqueries: u64,
    upquery_s: f64,
    table_bytes: u64,
}

fn snapshot(server: &AqueductServer) -> anyhow::Result<Snapshot> {
    let of_view = |name: &str| format!("{name}{{view=\"{VIEW}\"}}");
    let names = [
        "aqueduct_state_bytes".to_string(),
        of_view("aqueduct_view_hits_total"),
        of_view("aqueduct_view_misses_total"),
        of_view("aqueduct_view_evictions_total"),
        of_view("aqueduct_view_keys"),
        of_view("aqueduct_view_upquery_seconds_count"),
        of_view("aqueduct_view_upquery_seconds_sum"),
        "aqueduct_table_bytes{table=\"article\"}".to_string(),
        "aqueduct_table_bytes{table=\"vote\"}".to_string(),
    ];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let v = server.metrics(&names)?;
    Ok(Snapshot {
        state_bytes: v[0] as u64,
        hits: v[1] as u64,
        misses: v[2] as u64,
        evictions: v[3] as u64,
        keys: v[4] as u64,
        upqueries: v[5] as u64,
        upquery_s: v[6],
        table_bytes: (v[7] + v[8]) as u64,
    })
}

/// The keyed read of one article through the view.
fn read_sql() -> String {
    format!("SELECT id, title, votes FROM {VIEW} WHERE id = $1")
}

/// The votes of article `id` read through the view (`None` for NULL),
/// checked to be exactly that article's row.
fn read_votes(c: &mut Client, read: &Statement, id: u64) -> anyhow::Result<Option<i64>> {
    let rows = c
        .query(read, &[&(id as i64)])
        .map_err(|e| anyhow!("read of article {id}: {e}"))?;
    match rows.as_slice() {
        [r] if r.try_get::<_, i64>(0).ok() == Some(id as i64) => r
            .try_get(2)
            .map_err(|e| anyhow!("article {id}: its votes: {e}")),
        other => bail!("article {id}: the view returned {} rows", other.len()),
    }
}

/// Checks the votes of article `id` read through the view against `truth`.
fn check(c: &mut Client, read: &Statement, truth: &[u64], id: u64) -> anyhow::Result<()> {
    let want = match truth[id as usize] {
        0 => None,
        n => Some(n as i64),
    };
    let got = read_votes(c, read, id)?;
    if got != want {
        bail!("article {id} has {got:?} votes in the view; the data says {want:?}");
    }
    Ok(())
}

/// A connection with the keyed read prepared.
fn reader(server: &AqueductServer) -> anyhow::Result<(Client, Statement)> {
    let mut c = server.connect()?;
    let sql = read_sql();
    let read = c
        .prepare(&sql)
        .map_err(|e| anyhow!("preparing {sql}: {e}"))?;
    Ok((c, read))
}

/// Creates the tables and loads the articles and the Zipf votes, then the
/// view. Returns the votes per article (index = id) and the seconds the
/// articles, the votes and CREATE VIEW took.
fn load(
    server: &AqueductServer,
    args: &PartialWireArgs,
    sampler: &Sampler,
) -> anyhow::Result<(Vec<u64>, [f64; 3])> {
    let votes = args.votes();
    let _watchdog = Watchdog::new(
        Duration::from_secs(600 + (args.articles + votes) / SLOWEST_RATE),
        "the load".into(),
    );
    let mut c = server.connect()?;
    let mut run = |sql: &str| {
        c.batch_execute(sql)
            .map_err(|e| anyhow!("{}: {e}", &sql[..sql.len().min(80)]))
    };
    for sql in SCHEMA {
        run(sql)?;
    }
    let pb = common::progress(
        args.articles + votes,
        "{spinner} loading {msg} [{elapsed_precise}] [{bar:30}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
    );
    pb.set_message("articles");
    let t = Instant::now();
    let articles = (1..=args.articles).map(|id| {
        pb.inc(1);
        format!("({id}, 'Article {id}')")
    });
    insert_all_with("article", articles, args.insert_rows, &mut run)?;
    let articles_s = t.elapsed().as_secs_f64();
    pb.set_message("votes");
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut truth = vec![0u64; args.articles as usize + 1];
    let t = Instant::now();
    let rows = (1..=votes).map(|user| {
        let a = sampler.sample(&mut rng);
        truth[a as usize] += 1;
        pb.inc(1);
        format!("({a}, {user})")
    });
    insert_all_with("vote", rows, args.insert_rows, &mut run)?;
    let votes_s = t.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let t = Instant::now();
    run(CREATE_VIEW)?;
    Ok((truth, [articles_s, votes_s, t.elapsed().as_secs_f64()]))
}

/// Reads every article once through the view, from the last to the first,
/// `threads` connections each taking every `threads`-th id, and checks each
/// against `truth`. Returns the seconds it took.
fn read_every_article(
    server: &AqueductServer,
    threads: usize,
    truth: &[u64],
    what: &str,
) -> anyhow::Result<f64> {
    let articles = truth.len() as u64 - 1;
    let _watchdog = Watchdog::new(
        Duration::from_secs(600 + articles / SLOWEST_RATE),
        format!("reading every article ({what})"),
    );
    let pb = common::progress(
        articles,
        &format!("{{spinner}} {what}: reading every article [{{elapsed_precise}}] [{{bar:30}}] {{human_pos}}/{{human_len}} ({{per_sec}}, eta {{eta}})"),
    );
    let failed = AtomicBool::new(false);
    let t = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (pb, failed) = (&pb, &failed);
                scope.spawn(move || -> anyhow::Result<()> {
                    let result = (|| {
                        let (mut c, read) = reader(server)?;
                        // Coldest first: under a limit, the keys read last
                        // (the hottest) are the ones left.
                        for id in (1..=articles.saturating_sub(t)).rev().step_by(threads) {
                            if failed.load(Ordering::Relaxed) {
                                break;
                            }
                            check_stop()?;
                            check(&mut c, &read, truth, id)?;
                            pb.inc(1);
                        }
                        Ok(())
                    })();
                    if result.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    result
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
    Ok(t.elapsed().as_secs_f64())
}

/// What one run is.
struct RunSpec {
    limit_percent: f64,
    limit_bytes: u64,
    restart_s: f64,
    rss_after_restart_bytes: u64,
    prefill_s: f64,
    prefill_state_bytes: u64,
    write_fraction: f64,
    round: u64,
}

/// What one client thread did in the measured window.
struct ThreadOutcome {
    reads: u64,
    writes: u64,
    seconds: f64,
    read_hist: Histogram<u64>,
    write_hist: Histogram<u64>,
    /// The article of every write, measured or not.
    written: Vec<u32>,
}

/// One client thread's closed loop from now: `--warmup` seconds, then
/// `--seconds` counted.
fn client_loop(
    args: &PartialWireArgs,
    spec: &RunSpec,
    sampler: &Sampler,
    t: usize,
    c: &mut Client,
    statements: &(Statement, Statement),
    failed: &AtomicBool,
) -> anyhow::Result<ThreadOutcome> {
    let (read, insert) = statements;
    let began = Instant::now();
    let mut rng = StdRng::seed_from_u64(
        args.seed ^ spec.round.wrapping_mul(0x5851_f42d) ^ ((t as u64 + 1) * 0x9e37_79b9),
    );
    // Users above the loaded ones, distinct per run and thread.
    let user_base = args.votes() + ((spec.round << 40) | ((t as u64 + 1) << 32));
    let measure_from = began + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.seconds);
    let mut out = ThreadOutcome {
        reads: 0,
        writes: 0,
        seconds: 0.0,
        read_hist: new_hist(),
        write_hist: new_hist(),
        written: Vec::new(),
    };
    let mut counting = false;
    let mut t0 = began;
    loop {
        // A clock read is nothing next to a round trip: every operation
        // checks the time and is timed.
        let now = Instant::now();
        if !counting && now >= measure_from {
            counting = true;
            t0 = now;
            (out.reads, out.writes) = (0, 0);
        }
        if now >= end || failed.load(Ordering::Relaxed) || common::stopped() {
            out.seconds = (now - t0).as_secs_f64();
            return Ok(out);
        }
        let article = sampler.sample(&mut rng);
        if rng.gen::<f64>() < spec.write_fraction {
            let user = user_base + out.written.len() as u64;
            c.execute(insert, &[&(article as i64), &(user as i64)])
                .map_err(|e| anyhow!("vote for article {article}: {e}"))?;
            if counting {
                out.write_hist
                    .saturating_record(now.elapsed().as_nanos() as u64);
            }
            out.written.push(article as u32);
            out.writes += 1;
        } else {
            read_votes(c, read, article)?;
            if counting {
                out.read_hist
                    .saturating_record(now.elapsed().as_nanos() as u64);
            }
            out.reads += 1;
        }
    }
}

/// One timed run of the read/write mix; `truth` gets the run's votes.
fn measure(
    args: &PartialWireArgs,
    threads: usize,
    server: &AqueductServer,
    sampler: &Sampler,
    spec: &RunSpec,
    truth: &mut [u64],
) -> anyhow::Result<Run> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let _watchdog = Watchdog::new(
        warmup + Duration::from_secs_f64(args.seconds) + Duration::from_secs(120),
        format!(
            "the run at limit {}% w={}",
            spec.limit_percent, spec.write_fraction
        ),
    );
    let start = Barrier::new(threads + 1);
    let failed = AtomicBool::new(false);
    let (outcomes, cpu, s0, s1, state_max) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let (start, failed) = (&start, &failed);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> anyhow::Result<ThreadOutcome> {
                    // Every thread reaches the barrier, set up or not.
                    let setup = reader(server).and_then(|(mut c, read)| {
                        let insert = c
                            .prepare(INSERT_VOTE)
                            .map_err(|e| anyhow!("preparing {INSERT_VOTE}: {e}"))?;
                        Ok((c, (read, insert)))
                    });
                    if setup.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    start.wait();
                    let (mut c, statements) = setup?;
                    let r = client_loop(args, spec, sampler, t, &mut c, &statements, failed);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        // The server's counters and the CPU window start where the threads
        // start counting; the state is sampled until they are all done.
        let watched = (|| -> anyhow::Result<_> {
            common::nap(warmup.saturating_sub(began.elapsed()));
            let s0 = snapshot(server)?;
            let c0 = cpu::sample(Some(server.pid()));
            let mut state_max = s0.state_bytes;
            while !handles.iter().all(|h| h.is_finished()) {
                common::nap(STATE_SAMPLE);
                state_max = state_max.max(server.metric("aqueduct_state_bytes")?);
            }
            let c1 = cpu::sample(Some(server.pid()));
            Ok((s0, CpuUse::between(&c0, &c1), state_max))
        })();
        if watched.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        let mut outcomes = Vec::new();
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(o)) => outcomes.push(o),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow!("a client thread panicked"));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let (s0, cpu, state_max) = watched?;
        let s1 = snapshot(server)?;
        Ok((outcomes, cpu, s0, s1, state_max))
    })?;
    check_stop()?;
    let (rss_bytes_end, rss_peak_bytes) = server.memory();

    // The votes written, measured or not, join the data; the hottest
    // articles (which got most of them) must agree. Every write was
    // committed, and a read waits for the view to reflect it.
    for o in &outcomes {
        for &a in &o.written {
            truth[a as usize] += 1;
        }
    }
    let checked = args.check_sample.min(truth.len() as u64 - 1);
    let (mut c, read) = reader(server)?;
    for id in 1..=checked {
        check(&mut c, &read, truth, id)?;
    }

    let mut read_hist = new_hist();
    let mut write_hist = new_hist();
    let (mut reads, mut writes, mut reads_per_s, mut writes_per_s) = (0, 0, 0.0, 0.0);
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
    let hits = s1.hits.saturating_sub(s0.hits);
    let misses = s1.misses.saturating_sub(s0.misses);
    let upqueries = s1.upqueries.saturating_sub(s0.upqueries);
    Ok(Run {
        limit_percent: spec.limit_percent,
        memory_limit_bytes: spec.limit_bytes,
        write_fraction: spec.write_fraction,
        threads,
        restart_s: spec.restart_s,
        rss_after_restart_bytes: spec.rss_after_restart_bytes,
        prefill_s: spec.prefill_s,
        prefill_state_bytes: spec.prefill_state_bytes,
        seconds: window,
        reads,
        writes,
        reads_per_s,
        writes_per_s,
        vs_no_limit: None,
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
        evictions: s1.evictions.saturating_sub(s0.evictions),
        upqueries,
        upquery_mean_us: (s1.upquery_s - s0.upquery_s) * 1e6 / upqueries.max(1) as f64,
        state_bytes_start: s0.state_bytes,
        state_bytes_end: s1.state_bytes,
        state_bytes_max: state_max.max(s1.state_bytes),
        view_keys_end: s1.keys,
        table_bytes_end: s1.table_bytes,
        rss_bytes_end,
        rss_peak_bytes,
        checked_articles: checked,
        cpu,
        loadavg_end: cpu::loadavg(),
    })
}

fn limit_name(percent: f64, bytes: u64) -> String {
    if bytes == 0 {
        format!("{percent}% (no limit)")
    } else {
        format!("{percent}% ({})", human_bytes(bytes))
    }
}

fn say_run(r: &Run) {
    eprintln!(
        "limit {} w={}: {} reads/s, {} writes/s, hit rate {:.2} %, read p50 {:.1} us p99 {:.1} us, \
         {} evictions, state {} (max {}), server RSS {}; CPU cores: server {:.2}, clients {:.2}, \
         others {:.2}",
        limit_name(r.limit_percent, r.memory_limit_bytes),
        r.write_fraction,
        thousands(r.reads_per_s as u64),
        thousands(r.writes_per_s as u64),
        r.hit_rate * 100.0,
        r.read_p50_ns as f64 / 1e3,
        r.read_p99_ns as f64 / 1e3,
        thousands(r.evictions),
        human_bytes(r.state_bytes_end),
        human_bytes(r.state_bytes_max),
        human_bytes(r.rss_bytes_end),
        r.cpu.server_cores,
        r.cpu.bench_cores,
        r.cpu.other_cores
    );
}

pub fn run(args: &PartialWireArgs) -> anyhow::Result<WireResults> {
    let threads = args.threads();
    if args.articles < 2 || threads == 0 || args.insert_rows == 0 {
        bail!("--articles must be at least 2, --threads and --insert-rows at least 1");
    }
    if args.articles > u32::MAX as u64 {
        bail!("--articles must fit in 32 bits");
    }
    if args.write_fractions.iter().any(|w| !(0.0..1.0).contains(w)) {
        bail!("every --write-fractions must be in [0, 1)");
    }
    if args.limits.iter().any(|l| *l <= 0.0) {
        bail!("every --limits must be above 0 percent");
    }
    let binary = AqueductServer::binary(&args.aqueduct_bin)?;
    let sampler = Sampler::new(args.articles, Distribution::Zipf, args.zipf_s);
    let flags: Vec<String> = SERVER_FLAGS.iter().map(|s| s.to_string()).collect();
    // The clients, the checker and a spare.
    let max_connections = threads + 4;
    let mut server =
        AqueductServer::start_with(&binary, &args.dir, "never", max_connections, &flags)?;

    let votes = args.votes();
    eprintln!(
        "loading {} articles and {} votes (zipf {}) over the wire in INSERTs of {} rows; \
         {threads} client threads",
        thousands(args.articles),
        thousands(votes),
        args.zipf_s,
        thousands(args.insert_rows as u64)
    );
    let (mut truth, [articles_s, votes_s, create_view_s]) = load(&server, args, &sampler)?;
    let fill_s = read_every_article(&server, threads, &truth, "after the load")?;
    let s = snapshot(&server)?;
    let full_state_bytes = s.state_bytes;
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
        view_keys: s.keys,
        table_bytes: s.table_bytes,
        rss_bytes: server.memory().0,
        articles_without_votes: truth[1..].iter().filter(|&&c| c == 0).count() as u64,
        max_votes: truth.iter().copied().max().unwrap_or(0),
    };
    eprintln!(
        "loaded: articles {articles_s:.2} s, votes {votes_s:.2} s, CREATE VIEW {:.1} ms; \
         every article read in {fill_s:.2} s ({} reads/s, all checked); fully materialized \
         state F = {} ({} keys), tables {}, server RSS {}",
        create_view_s * 1e3,
        thousands(load.fill_keys_per_s as u64),
        human_bytes(full_state_bytes),
        thousands(s.keys),
        human_bytes(s.table_bytes),
        human_bytes(load.rss_bytes)
    );
    if full_state_bytes == 0 {
        bail!("the server reports no view state after reading every article");
    }

    let mut runs = Vec::new();
    let mut round = 0;
    for &pct in &args.limits {
        check_stop()?;
        let limit_bytes = if pct >= 100.0 {
            0
        } else {
            ((full_state_bytes as f64 * pct / 100.0) as u64).max(1)
        };
        let mut extra = flags.clone();
        if limit_bytes > 0 {
            extra.extend(["--memory-limit".to_string(), limit_bytes.to_string()]);
        }
        let t = Instant::now();
        server.restart(&extra)?;
        let restart_s = t.elapsed().as_secs_f64();
        let rss_after_restart_bytes = server.memory().0;
        let name = limit_name(pct, limit_bytes);
        let prefill_s = read_every_article(&server, threads, &truth, &format!("limit {name}"))?;
        let prefill_state_bytes = server.metric("aqueduct_state_bytes")?;
        eprintln!(
            "limit {name}: restarted in {restart_s:.2} s (server RSS {}); every article read \
             (all checked) in {prefill_s:.2} s, state {}",
            human_bytes(rss_after_restart_bytes),
            human_bytes(prefill_state_bytes)
        );
        for &w in &args.write_fractions {
            round += 1;
            let spec = RunSpec {
                limit_percent: pct,
                limit_bytes,
                restart_s,
                rss_after_restart_bytes,
                prefill_s,
                prefill_state_bytes,
                write_fraction: w,
                round,
            };
            let r = measure(args, threads, &server, &sampler, &spec, &mut truth)?;
            say_run(&r);
            runs.push(r);
        }
    }
    drop(server);

    // The ratios to the no-limit runs of the same write fraction.
    let base: Vec<(f64, f64)> = runs
        .iter()
        .filter(|r| r.memory_limit_bytes == 0)
        .map(|r| (r.write_fraction, r.reads_per_s))
        .collect();
    for r in &mut runs {
        r.vs_no_limit = base
            .iter()
            .find(|(w, _)| *w == r.write_fraction)
            .map(|(_, b)| r.reads_per_s / b.max(1e-9));
    }
    print_runs(&runs);
    Ok(WireResults {
        threads,
        load,
        runs,
    })
}

fn print_runs(runs: &[Run]) {
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                limit_name(r.limit_percent, r.memory_limit_bytes),
                format!("{}%", r.write_fraction * 100.0),
                thousands(r.reads_per_s as u64),
                r.vs_no_limit
                    .map_or("-".into(), |v| format!("{:.0}%", v * 100.0)),
                thousands(r.writes_per_s as u64),
                format!("{:.2}%", r.hit_rate * 100.0),
                us(r.read_p50_ns),
                us(r.read_p99_ns),
                format!("{:.0}", r.upquery_mean_us),
                thousands(r.evictions),
                human_bytes(r.state_bytes_end),
                human_bytes(r.state_bytes_max),
                human_bytes(r.rss_bytes_end),
            ]
        })
        .collect();
    print_table(
        &[
            "memory",
            "writes",
            "reads/s",
            "vs no limit",
            "writes/s",
            "hit rate",
            "p50 us",
            "p99 us",
            "upquery us",
            "evictions",
            "state",
            "state max",
            "server RSS",
        ],
        &rows,
    );
}
