//! Noria's vote benchmark against real peers (`bench vote`).
//!
//! Tables `article (id, title)` and `vote (article_id, user_id)`; a read is
//! one article with its vote count by id, a write inserts one vote. Ids
//! follow `--distribution` (Zipf 1.15 by default, article 1 hottest), the
//! same draws for every backend. Backends, each loaded with the same
//! `--articles` and `--votes` (Zipf over the articles):
//!
//! - `aqueduct`: the server over the PostgreSQL protocol, prepared
//!   statements; the count is the maintained view `ArticleWithVoteCount`
//!   read by key.
//! - `aqueduct-embedded`: the same engine in this process, through
//!   `Session::execute_prepared` (how an application embedding it reads).
//! - `postgres`: PostgreSQL 15 with the natural query (a join and a COUNT,
//!   an index on `vote (article_id)`), a write is one autocommit INSERT.
//! - `postgres-hand`: PostgreSQL with a `votes` column kept by every write
//!   (INSERT the vote and `UPDATE article SET votes = votes + 1` in one
//!   transaction), the way the Lobsters developers denormalized counts; a
//!   read is a primary-key lookup.
//! - `mariadb`, `mariadb-hand`: MariaDB 10.11 with the same two styles.
//! - `redis`, `memcached`: look-aside caches in front of PostgreSQL (natural
//!   query, its own database): a read tries the cache and on a miss runs the
//!   query and stores the answer; a write inserts the vote, then deletes the
//!   article's cache entry.
//!
//! Durability is the same for all (`--durable`, on by default): Aqueduct
//! `--fsync always`, PostgreSQL `synchronous_commit=on`, MariaDB
//! `innodb_flush_log_at_trx_commit=1`.
//!
//! Open loop (`--target-ops`, a list): each point runs every backend in
//! turn (the order rotates from point to point), `--clients` connections
//! sharing the offered load, `--warmup` then `--seconds` measured; latency
//! counts from when a request was due. Closed loop (`--closed`): every
//! client back to back. After its runs each backend is checked: the counts
//! it returns for the hottest and for random articles must equal a direct
//! count of its votes (for the caches, a stale entry is reported as such:
//! the look-aside pattern races a read's fill with a write's delete).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use aqueduct_sql::{Engine, Outcome as SqlOutcome, Prepared, Session};
use aqueduct_values::Value;

use crate::aqueduct_server::AqueductServer;
use crate::common::{self, print_table, thousands};
use crate::cpu::{self, CpuUse};
use crate::kv::{MemcachedServer, RedisServer};
use crate::load::Ids;
use crate::load::{self, Mode, Schedule};
use crate::mariadb::MariaServer;
use crate::pg::PgServer;
use crate::view_read::insert_all_with;

/// Every backend this benchmark knows, in the order results are shown.
pub const BACKENDS: &[&str] = &[
    "aqueduct",
    "aqueduct-embedded",
    "postgres",
    "postgres-hand",
    "mariadb",
    "mariadb-hand",
    "redis",
    "memcached",
];

/// Rows per INSERT while loading.
const LOAD_ROWS_PER_INSERT: usize = 1_000;
/// Articles checked after the runs: the hottest, then random ones.
const CHECK_HOTTEST: i64 = 50;
const CHECK_RANDOM: usize = 150;
/// Users of the votes written during runs start here (the loaded votes
/// use 1..=votes); each client thread has its own range.
const RUN_USERS: i64 = 1 << 40;
const USERS_PER_CLIENT: i64 = 1 << 32;
/// A point meets a latency bound when its p95 is under it and it achieved
/// this share of the offered load.
const ACHIEVED_SHARE: f64 = 0.95;

const KINDS: &[&str] = &["read", "write"];
const READ: usize = 0;
const WRITE: usize = 1;

#[derive(Args, Debug, Clone, Serialize)]
pub struct VoteArgs {
    /// Backends, comma-separated (see `bench vote --help`'s list).
    #[arg(
        long,
        default_value = "aqueduct,aqueduct-embedded,postgres,postgres-hand,mariadb,mariadb-hand,redis,memcached"
    )]
    pub backends: String,
    /// One backend (same as `--backends NAME`).
    #[arg(long)]
    pub backend: Option<String>,
    /// Articles loaded (ids 1..=N).
    #[arg(long, default_value_t = 100_000)]
    pub articles: u64,
    /// Votes loaded before the runs (default: as many as articles).
    #[arg(long)]
    pub votes: Option<u64>,
    /// Share of operations that are writes.
    #[arg(long, default_value_t = 0.05)]
    pub write_fraction: f64,
    /// `uniform` or `zipf:<s>`.
    #[arg(long, default_value = "zipf:1.15")]
    pub distribution: String,
    /// Offered loads (operations/s) of the open-loop sweep, comma-separated.
    #[arg(long, default_value = "1000,2000,4000,8000,16000,32000,64000")]
    pub target_ops: String,
    /// Run one closed loop per backend instead of the open-loop sweep.
    #[arg(long)]
    pub closed: bool,
    /// Client connections (threads) per backend.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Client threads of `aqueduct-embedded` (in process, one per core).
    #[arg(long, default_value_t = 2)]
    pub embedded_clients: usize,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Seconds of warm-up before each measured run.
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Durable commits everywhere (`false`: Aqueduct `--fsync never`,
    /// PostgreSQL `synchronous_commit=off`, MariaDB flush once a second).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub durable: bool,
    /// The read latency bound of the summary (ms, p95).
    #[arg(long, default_value_t = 5.0)]
    pub p95_bound_ms: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// PostgreSQL's binaries.
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin: PathBuf,
    /// The Aqueduct server binary (default: target/release/aqueduct).
    #[arg(long)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Parent of the scratch directories (default: the system's temp dir).
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Also write a JSON summary here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

/// One article as a backend returns it: title and vote count.
type Answer = (String, i64);

/// One connection (or in-process session) of a backend.
pub trait VoteClient: Send {
    fn read(&mut self, id: i64) -> anyhow::Result<Answer>;
    fn vote(&mut self, id: i64, user: i64) -> anyhow::Result<()>;
}

/// A started, loaded backend.
pub trait VoteBackend {
    fn name(&self) -> &'static str;
    /// What runs behind it: versions and settings.
    fn describe(&self) -> String;
    /// The server process whose CPU is reported (with its children).
    fn server_pid(&self) -> Option<u32>;
    fn client(&self) -> anyhow::Result<Box<dyn VoteClient>>;
    /// The votes of `id` counted directly in the base data.
    fn recount(&self, id: i64) -> anyhow::Result<i64>;
    /// A look-aside cache's process, whose CPU is reported apart.
    fn cache_pid(&self) -> Option<u32> {
        None
    }
    /// Whether a wrong count is a cache's stale entry rather than a bug.
    fn may_be_stale(&self) -> bool {
        false
    }
}

/// What `bench vote` reports.
#[derive(Serialize)]
pub struct VoteResults {
    pub workload: &'static str,
    pub articles: u64,
    pub votes_loaded: u64,
    pub backends: Vec<BackendResult>,
    /// Open loop: the highest offered load per backend whose read p95 stayed
    /// under the bound; closed loop: the achieved operations/s.
    pub summary: Vec<SummaryRow>,
}

#[derive(Serialize)]
pub struct BackendResult {
    pub backend: String,
    pub version: String,
    pub load_seconds: f64,
    pub runs: Vec<RunResult>,
    pub check: Check,
}

#[derive(Serialize, Clone)]
pub struct RunResult {
    pub offered_ops_per_sec: Option<f64>,
    pub schedule: Schedule,
    pub outcome: load::Outcome,
    pub cpu: CpuUse,
    /// A look-aside cache's CPU, in cores (the database's is in `cpu`).
    pub cache_cores: Option<f64>,
}

#[derive(Serialize, Default)]
pub struct Check {
    pub articles_checked: usize,
    /// Counts that differ from the recount (an error unless a cache).
    pub wrong: usize,
    /// Of those, cache entries left stale by the look-aside race.
    pub stale: usize,
    pub examples: Vec<String>,
}

#[derive(Serialize)]
pub struct SummaryRow {
    pub backend: String,
    pub ops_per_sec: f64,
    pub read_p95_ms: f64,
    /// Aqueduct's figure divided by this backend's (the target ratio).
    pub aqueduct_ratio: Option<f64>,
}

pub fn run(args: &VoteArgs) -> anyhow::Result<VoteResults> {
    let names = backend_names(args)?;
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.write_fraction),
        "--write-fraction must be between 0 and 1"
    );
    anyhow::ensure!(args.articles > 0, "--articles must be at least 1");
    anyhow::ensure!(
        args.clients > 0 && args.embedded_clients > 0,
        "--clients must be at least 1"
    );
    let ids = Arc::new(load::parse_distribution(&args.distribution, args.articles)?);
    let votes = args.votes.unwrap_or(args.articles);
    let data = Data::generate(args.articles, votes, &ids, args.seed);
    let schedules: Vec<Mode> = if args.closed {
        vec![Mode::Closed]
    } else {
        parse_loads(&args.target_ops)?
            .into_iter()
            .map(|ops_per_sec| Mode::Open { ops_per_sec })
            .collect()
    };

    // Start and load every backend first, then run them in turn.
    let peers = Peers::new(args);
    let mut backends: Vec<(Box<dyn VoteBackend>, f64)> = Vec::new();
    for name in &names {
        let t = Instant::now();
        let b = peers
            .start(name, &data)
            .with_context(|| format!("starting backend {name}"))?;
        let secs = t.elapsed().as_secs_f64();
        eprintln!("{name}: loaded in {secs:.1} s ({})", b.describe());
        backends.push((b, secs));
    }
    let mut clients: Vec<Vec<Box<dyn VoteClient>>> = Vec::new();
    for (b, _) in &backends {
        let n = if b.name() == "aqueduct-embedded" {
            args.embedded_clients
        } else {
            args.clients
        };
        clients.push((0..n).map(|_| b.client()).collect::<anyhow::Result<_>>()?);
    }

    let mut runs: Vec<Vec<RunResult>> = backends.iter().map(|_| Vec::new()).collect();
    let total: u64 = (schedules.len() * backends.len()) as u64;
    let bar = common::progress(
        total,
        "{spinner} runs [{elapsed_precise}] [{bar:30}] {pos}/{len} {msg}",
    );
    for (point, mode) in schedules.iter().enumerate() {
        for turn in 0..backends.len() {
            let i = (turn + point) % backends.len();
            common::check_stop()?;
            let b = &backends[i].0;
            let schedule = Schedule {
                mode: *mode,
                clients: clients[i].len(),
                warmup: Duration::from_secs_f64(args.warmup),
                measure: Duration::from_secs_f64(args.seconds),
            };
            bar.set_message(format!("{} {}", b.name(), mode_name(mode)));
            let run_bar = common::progress(
                schedule.measure.as_millis() as u64,
                "  {spinner} {prefix} [{bar:30}] {msg}",
            );
            run_bar.set_prefix(format!("{} {}", b.name(), mode_name(mode)));
            let before = cpu::sample(b.server_pid());
            let cache_before = b.cache_pid().map(|p| cpu::sample(Some(p)));
            let outcome = run_once(args, &ids, &schedule, &mut clients[i], point, &run_bar);
            let after = cpu::sample(b.server_pid());
            let cache_cores =
                cache_before.map(|c| CpuUse::between(&c, &cpu::sample(b.cache_pid())).server_cores);
            run_bar.finish_and_clear();
            let result = RunResult {
                offered_ops_per_sec: outcome.offered_ops_per_sec,
                schedule,
                outcome,
                cpu: CpuUse::between(&before, &after),
                cache_cores,
            };
            common::say(&bar, run_line(b.name(), &result));
            runs[i].push(result);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    let mut results = Vec::new();
    for (((b, load_seconds), runs), clients) in backends.iter().zip(runs).zip(&mut clients) {
        let check = check(b.as_ref(), clients[0].as_mut(), &ids, args.seed)?;
        results.push(BackendResult {
            backend: b.name().to_string(),
            version: b.describe(),
            load_seconds: *load_seconds,
            runs,
            check,
        });
    }
    drop(clients);
    let summary = summarize(&results, args);
    print_results(&results, &summary, args);
    let broken: Vec<String> = results
        .iter()
        .filter(|r| r.check.wrong > r.check.stale)
        .map(|r| format!("{}: {}", r.backend, r.check.examples.join("; ")))
        .collect();
    if !broken.is_empty() {
        bail!("wrong vote counts after the runs: {}", broken.join(" | "));
    }
    Ok(VoteResults {
        workload: "vote",
        articles: args.articles,
        votes_loaded: votes,
        backends: results,
        summary,
    })
}

fn backend_names(args: &VoteArgs) -> anyhow::Result<Vec<&'static str>> {
    let list = args.backend.as_deref().unwrap_or(&args.backends);
    let mut names = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(known) = BACKENDS.iter().find(|b| **b == name) else {
            bail!(
                "unknown backend {name:?}: choose from {}",
                BACKENDS.join(", ")
            );
        };
        if !names.contains(known) {
            names.push(*known);
        }
    }
    anyhow::ensure!(!names.is_empty(), "--backends names no backend");
    Ok(names)
}

fn parse_loads(text: &str) -> anyhow::Result<Vec<f64>> {
    text.split(',')
        .map(|s| {
            let v: f64 = s
                .trim()
                .parse()
                .map_err(|_| anyhow!("--target-ops: {s:?} is not a number"))?;
            anyhow::ensure!(v > 0.0, "--target-ops: {v} is not above 0");
            Ok(v)
        })
        .collect()
}

fn mode_name(mode: &Mode) -> String {
    match mode {
        Mode::Open { ops_per_sec } => format!("{} ops/s offered", thousands(*ops_per_sec as u64)),
        Mode::Closed => "closed loop".into(),
    }
}

/// One measured run: reads and writes drawn with the same seed for every
/// backend at this point.
fn run_once(
    args: &VoteArgs,
    ids: &Ids,
    schedule: &Schedule,
    clients: &mut [Box<dyn VoteClient>],
    point: usize,
    pb: &indicatif::ProgressBar,
) -> load::Outcome {
    // Each client votes as users of its own range, fresh at every point.
    let mut slots: Vec<(i64, &mut Box<dyn VoteClient>)> = clients
        .iter_mut()
        .enumerate()
        .map(|(t, c)| {
            let first =
                RUN_USERS + t as i64 * USERS_PER_CLIENT + point as i64 * (USERS_PER_CLIENT >> 8);
            (first, c)
        })
        .collect();
    let write_fraction = args.write_fraction;
    load::run(
        KINDS,
        schedule,
        &mut slots,
        args.seed ^ ((point as u64) << 20),
        |rng| {
            let id = ids.draw(rng);
            let kind = if rng.gen::<f64>() < write_fraction {
                WRITE
            } else {
                READ
            };
            (kind, (kind, id))
        },
        |(user, client), &(kind, id)| {
            if kind == WRITE {
                *user += 1;
                client.vote(id, *user)
            } else {
                let (title, _) = client.read(id)?;
                anyhow::ensure!(title == title_of(id), "article {id}: title {title:?}");
                Ok(())
            }
        },
        pb,
    )
}

fn title_of(id: i64) -> String {
    format!("article {id}")
}

/// The data every backend is loaded with.
pub struct Data {
    pub articles: u64,
    /// `(article_id, user_id)`, users 1..=votes.
    pub votes: Vec<(i64, i64)>,
}

impl Data {
    fn generate(articles: u64, votes: u64, ids: &Ids, seed: u64) -> Data {
        let mut rng = StdRng::seed_from_u64(seed);
        Data {
            articles,
            votes: (1..=votes as i64)
                .map(|u| (ids.draw(&mut rng), u))
                .collect(),
        }
    }

    /// The votes of each article (index = id).
    fn counts(&self) -> Vec<i64> {
        let mut counts = vec![0; self.articles as usize + 1];
        for (a, _) in &self.votes {
            counts[*a as usize] += 1;
        }
        counts
    }

    /// Loads the data through `run` (one SQL statement at a time): the
    /// natural schema, or with `hand` the `votes` column as well.
    fn load_sql(
        &self,
        dialect: Dialect,
        hand: bool,
        run: &mut dyn FnMut(&str) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (bigint_pk, text) = match dialect {
            Dialect::Postgres => ("bigint PRIMARY KEY", "text"),
            Dialect::MariaDb => ("bigint PRIMARY KEY", "varchar(64)"),
        };
        if hand {
            run(&format!(
                "CREATE TABLE article (id {bigint_pk}, title {text} NOT NULL, votes bigint NOT NULL)"
            ))?;
        } else {
            run(&format!(
                "CREATE TABLE article (id {bigint_pk}, title {text} NOT NULL)"
            ))?;
        }
        run("CREATE TABLE vote (article_id bigint NOT NULL, user_id bigint NOT NULL)")?;
        run("CREATE INDEX vote_article ON vote (article_id)")?;
        let pb = common::progress(
            self.articles + self.votes.len() as u64,
            "  {spinner} loading [{bar:30}] {human_pos}/{human_len} ({per_sec})",
        );
        let counts = self.counts();
        insert_all_with(
            "article",
            (1..=self.articles as i64).map(|id| {
                pb.inc(1);
                if hand {
                    format!("({id}, '{}', {})", title_of(id), counts[id as usize])
                } else {
                    format!("({id}, '{}')", title_of(id))
                }
            }),
            LOAD_ROWS_PER_INSERT,
            &mut *run,
        )?;
        insert_all_with(
            "vote",
            self.votes.iter().map(|(a, u)| {
                pb.inc(1);
                format!("({a}, {u})")
            }),
            LOAD_ROWS_PER_INSERT,
            &mut *run,
        )?;
        pb.finish_and_clear();
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Postgres,
    MariaDb,
}

/// The natural read: a join and a count, no hand tuning.
const NATURAL_READ: &str = "SELECT a.id, a.title, count(v.article_id) AS votes FROM article a \
     LEFT JOIN vote v ON v.article_id = a.id WHERE a.id = $1 GROUP BY a.id, a.title";
const HAND_READ: &str = "SELECT id, title, votes FROM article WHERE id = $1";
const INSERT_VOTE: &str = "INSERT INTO vote (article_id, user_id) VALUES ($1, $2)";
const HAND_BUMP: &str = "UPDATE article SET votes = votes + 1 WHERE id = $1";
const RECOUNT: &str = "SELECT count(*) FROM vote WHERE article_id = $1";
/// Aqueduct's maintained view (Noria's `ArticleWithVoteCount`) and its read.
const AQ_VIEW: &str = "CREATE VIEW ArticleWithVoteCount AS SELECT a.id, a.title, \
     count(v.article_id) AS votes FROM article a LEFT JOIN vote v ON v.article_id = a.id \
     GROUP BY a.id, a.title";
const AQ_READ: &str = "SELECT id, title, votes FROM ArticleWithVoteCount WHERE id = $1";

/// MariaDB spells parameters `?`.
fn mariadb_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

/// Starts backends, sharing one PostgreSQL (a database per backend) and
/// one MariaDB between the backends that use them.
struct Peers<'a> {
    args: &'a VoteArgs,
    pg: std::cell::OnceCell<Arc<PgServer>>,
    maria: std::cell::OnceCell<Arc<MariaServer>>,
}

impl<'a> Peers<'a> {
    fn new(args: &'a VoteArgs) -> Peers<'a> {
        Peers {
            args,
            pg: std::cell::OnceCell::new(),
            maria: std::cell::OnceCell::new(),
        }
    }

    /// Connections each server must accept: every client, the loader and
    /// the checker, for every backend it serves.
    fn max_connections(&self) -> usize {
        4 * (self.args.clients + 4)
    }

    fn pg(&self) -> anyhow::Result<Arc<PgServer>> {
        if let Some(pg) = self.pg.get() {
            return Ok(pg.clone());
        }
        if let Some(why) = PgServer::unavailable(&self.args.pg_bin) {
            bail!("PostgreSQL: {why}");
        }
        let pg = Arc::new(PgServer::start(
            &self.args.pg_bin,
            &self.args.dir,
            self.max_connections(),
        )?);
        Ok(self.pg.get_or_init(|| pg).clone())
    }

    /// A fresh PostgreSQL database `db` loaded with `data`.
    fn pg_database(&self, db: &str, data: &Data, hand: bool) -> anyhow::Result<Arc<PgServer>> {
        let pg = self.pg()?;
        let mut admin = pg.connect()?;
        admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
        if !self.args.durable {
            admin.batch_execute(&format!("ALTER DATABASE {db} SET synchronous_commit = off"))?;
        }
        let mut c = pg.connect_to(db)?;
        data.load_sql(Dialect::Postgres, hand, &mut |sql| {
            c.batch_execute(sql)
                .with_context(|| sql[..sql.len().min(60)].to_string())
        })?;
        c.batch_execute("ANALYZE")?;
        Ok(pg)
    }

    /// A fresh MariaDB database `db` loaded with `data`.
    fn maria_database(
        &self,
        db: &str,
        data: &Data,
        hand: bool,
    ) -> anyhow::Result<Arc<MariaServer>> {
        let maria = match self.maria.get() {
            Some(m) => m.clone(),
            None => {
                if let Some(why) = MariaServer::unavailable() {
                    bail!("MariaDB: {why}");
                }
                let m = Arc::new(MariaServer::start(&self.args.dir, self.max_connections())?);
                if !self.args.durable {
                    m.connect()?
                        .query_drop("SET GLOBAL innodb_flush_log_at_trx_commit = 2")?;
                }
                self.maria.get_or_init(|| m).clone()
            }
        };
        use mysql::prelude::Queryable;
        maria
            .connect()?
            .query_drop(format!("CREATE DATABASE {db}"))?;
        let mut c = maria.connect_to(db)?;
        data.load_sql(Dialect::MariaDb, hand, &mut |sql| {
            c.query_drop(sql)
                .with_context(|| sql[..sql.len().min(60)].to_string())
        })?;
        c.query_drop("ANALYZE TABLE article, vote")?;
        Ok(maria)
    }

    fn start(&self, name: &str, data: &Data) -> anyhow::Result<Box<dyn VoteBackend>> {
        let args = self.args;
        Ok(match name {
            "aqueduct" => {
                let bin = AqueductServer::binary(&args.aqueduct_bin)?;
                let fsync = if args.durable { "always" } else { "never" };
                let server = AqueductServer::start(&bin, &args.dir, fsync, self.max_connections())?;
                let mut c = server.connect()?;
                data.load_sql(Dialect::Postgres, false, &mut |sql| {
                    c.batch_execute(sql)
                        .with_context(|| sql[..sql.len().min(60)].to_string())
                })?;
                c.batch_execute(AQ_VIEW)?;
                Box::new(AqueductWire { server })
            }
            "aqueduct-embedded" => Box::new(Embedded::start(args, data)?),
            "postgres" | "postgres-hand" | "redis" | "memcached" => {
                let hand = name == "postgres-hand";
                let db = format!("vote_{}", name.replace('-', "_"));
                let pg = self.pg_database(&db, data, hand)?;
                let sql = SqlBackend {
                    name: if hand { "postgres-hand" } else { "postgres" },
                    pg,
                    db,
                    hand,
                };
                match name {
                    "redis" => {
                        if let Some(why) = RedisServer::unavailable() {
                            bail!("Redis: {why}");
                        }
                        Box::new(LookAside {
                            name: "redis",
                            cache: Cache::Redis(RedisServer::start(&args.dir)?),
                            sql,
                        })
                    }
                    "memcached" => {
                        if let Some(why) = MemcachedServer::unavailable() {
                            bail!("memcached: {why}");
                        }
                        Box::new(LookAside {
                            name: "memcached",
                            cache: Cache::Memcached(MemcachedServer::start(&args.dir)?),
                            sql,
                        })
                    }
                    _ => Box::new(sql),
                }
            }
            "mariadb" | "mariadb-hand" => {
                let hand = name == "mariadb-hand";
                let db = format!("vote_{}", name.replace('-', "_"));
                let maria = self.maria_database(&db, data, hand)?;
                Box::new(MariaBackend {
                    name: if hand { "mariadb-hand" } else { "mariadb" },
                    maria,
                    db,
                    hand,
                })
            }
            other => bail!("unknown backend {other}"),
        })
    }
}

/// `aqueduct`: the server over the PostgreSQL protocol.
struct AqueductWire {
    server: AqueductServer,
}

impl VoteBackend for AqueductWire {
    fn name(&self) -> &'static str {
        "aqueduct"
    }
    fn describe(&self) -> String {
        format!(
            "aqueduct {} (server, PostgreSQL protocol)",
            env!("CARGO_PKG_VERSION")
        )
    }
    fn server_pid(&self) -> Option<u32> {
        Some(self.server.pid())
    }
    fn client(&self) -> anyhow::Result<Box<dyn VoteClient>> {
        Ok(Box::new(PgClient::new(
            self.server.connect()?,
            AQ_READ,
            false,
        )?))
    }
    fn recount(&self, id: i64) -> anyhow::Result<i64> {
        Ok(self.server.connect()?.query_one(RECOUNT, &[&id])?.get(0))
    }
}

/// A PostgreSQL-protocol connection with the read and the write prepared.
struct PgClient {
    client: postgres::Client,
    read: postgres::Statement,
    insert: postgres::Statement,
    bump: Option<postgres::Statement>,
}

impl PgClient {
    fn new(mut client: postgres::Client, read: &str, hand: bool) -> anyhow::Result<PgClient> {
        let read = client.prepare(read)?;
        let insert = client.prepare(INSERT_VOTE)?;
        let bump = if hand {
            Some(client.prepare(HAND_BUMP)?)
        } else {
            None
        };
        Ok(PgClient {
            client,
            read,
            insert,
            bump,
        })
    }
}

impl VoteClient for PgClient {
    fn read(&mut self, id: i64) -> anyhow::Result<Answer> {
        let row = self.client.query_one(&self.read, &[&id])?;
        let votes: Option<i64> = row.get(2);
        Ok((row.get(1), votes.unwrap_or(0)))
    }

    fn vote(&mut self, id: i64, user: i64) -> anyhow::Result<()> {
        match &self.bump {
            None => {
                self.client.execute(&self.insert, &[&id, &user])?;
            }
            Some(bump) => {
                let mut tx = self.client.transaction()?;
                tx.execute(&self.insert, &[&id, &user])?;
                tx.execute(bump, &[&id])?;
                tx.commit()?;
            }
        }
        Ok(())
    }
}

/// How a SQL peer's queries are written.
fn style(hand: bool) -> &'static str {
    if hand {
        "hand-optimized"
    } else {
        "natural query"
    }
}

/// `postgres` and `postgres-hand`.
struct SqlBackend {
    name: &'static str,
    pg: Arc<PgServer>,
    db: String,
    hand: bool,
}

impl VoteBackend for SqlBackend {
    fn name(&self) -> &'static str {
        self.name
    }
    fn describe(&self) -> String {
        format!("{} ({})", self.pg.version, style(self.hand))
    }
    fn server_pid(&self) -> Option<u32> {
        self.pg.postmaster_pid()
    }
    fn client(&self) -> anyhow::Result<Box<dyn VoteClient>> {
        let read = if self.hand { HAND_READ } else { NATURAL_READ };
        Ok(Box::new(PgClient::new(
            self.pg.connect_to(&self.db)?,
            read,
            self.hand,
        )?))
    }
    fn recount(&self, id: i64) -> anyhow::Result<i64> {
        Ok(self
            .pg
            .connect_to(&self.db)?
            .query_one(RECOUNT, &[&id])?
            .get(0))
    }
}

/// `mariadb` and `mariadb-hand`.
struct MariaBackend {
    name: &'static str,
    maria: Arc<MariaServer>,
    db: String,
    hand: bool,
}

impl VoteBackend for MariaBackend {
    fn name(&self) -> &'static str {
        self.name
    }
    fn describe(&self) -> String {
        format!("{} ({})", self.maria.version, style(self.hand))
    }
    fn server_pid(&self) -> Option<u32> {
        Some(self.maria.pid())
    }
    fn client(&self) -> anyhow::Result<Box<dyn VoteClient>> {
        use mysql::prelude::Queryable;
        let mut conn = self.maria.connect_to(&self.db)?;
        let read = conn.prep(mariadb_sql(if self.hand {
            HAND_READ
        } else {
            NATURAL_READ
        }))?;
        let insert = conn.prep(mariadb_sql(INSERT_VOTE))?;
        let bump = if self.hand {
            Some(conn.prep(mariadb_sql(HAND_BUMP))?)
        } else {
            None
        };
        Ok(Box::new(MariaClient {
            conn,
            read,
            insert,
            bump,
        }))
    }
    fn recount(&self, id: i64) -> anyhow::Result<i64> {
        use mysql::prelude::Queryable;
        let n: Option<i64> = self
            .maria
            .connect_to(&self.db)?
            .exec_first(mariadb_sql(RECOUNT), (id,))?;
        n.context("no count")
    }
}

struct MariaClient {
    conn: mysql::Conn,
    read: mysql::Statement,
    insert: mysql::Statement,
    bump: Option<mysql::Statement>,
}

impl VoteClient for MariaClient {
    fn read(&mut self, id: i64) -> anyhow::Result<Answer> {
        use mysql::prelude::Queryable;
        let row: Option<(i64, String, Option<i64>)> = self.conn.exec_first(&self.read, (id,))?;
        let (_, title, votes) = row.with_context(|| format!("article {id} not found"))?;
        Ok((title, votes.unwrap_or(0)))
    }

    fn vote(&mut self, id: i64, user: i64) -> anyhow::Result<()> {
        use mysql::prelude::Queryable;
        match &self.bump {
            None => self.conn.exec_drop(&self.insert, (id, user))?,
            Some(bump) => {
                let mut tx = self.conn.start_transaction(mysql::TxOpts::default())?;
                tx.exec_drop(&self.insert, (id, user))?;
                tx.exec_drop(bump, (id,))?;
                tx.commit()?;
            }
        }
        Ok(())
    }
}

/// The cache of a look-aside backend.
enum Cache {
    Redis(RedisServer),
    Memcached(MemcachedServer),
}

/// `redis` and `memcached`: a cache in front of PostgreSQL's natural query.
struct LookAside {
    name: &'static str,
    cache: Cache,
    sql: SqlBackend,
}

impl VoteBackend for LookAside {
    fn name(&self) -> &'static str {
        self.name
    }
    fn describe(&self) -> String {
        let cache = match &self.cache {
            Cache::Redis(r) => &r.version,
            Cache::Memcached(m) => &m.version,
        };
        format!("{cache} in front of {}", self.sql.describe())
    }
    fn server_pid(&self) -> Option<u32> {
        // The database does the work a miss or a write costs; the cache's
        // own CPU is small beside it.
        self.sql.server_pid()
    }
    fn client(&self) -> anyhow::Result<Box<dyn VoteClient>> {
        let conn = match &self.cache {
            Cache::Redis(r) => CacheConn::Redis(r.connect()?),
            Cache::Memcached(m) => CacheConn::Memcached(m.connect()?),
        };
        Ok(Box::new(LookAsideClient {
            cache: conn,
            db: self.sql.client()?,
        }))
    }
    fn recount(&self, id: i64) -> anyhow::Result<i64> {
        self.sql.recount(id)
    }
    fn cache_pid(&self) -> Option<u32> {
        Some(match &self.cache {
            Cache::Redis(r) => r.pid(),
            Cache::Memcached(m) => m.pid(),
        })
    }
    fn may_be_stale(&self) -> bool {
        true
    }
}

enum CacheConn {
    Redis(redis::Connection),
    Memcached(crate::kv::Memcache),
}

struct LookAsideClient {
    cache: CacheConn,
    db: Box<dyn VoteClient>,
}

/// A cached article: `<votes> <title>`.
fn cache_key(id: i64) -> String {
    format!("article:{id}")
}

impl VoteClient for LookAsideClient {
    fn read(&mut self, id: i64) -> anyhow::Result<Answer> {
        let key = cache_key(id);
        let hit: Option<Vec<u8>> = match &mut self.cache {
            CacheConn::Redis(c) => redis::cmd("GET").arg(&key).query(c)?,
            CacheConn::Memcached(c) => c.get(key.as_bytes())?,
        };
        if let Some(bytes) = hit {
            let text = String::from_utf8(bytes).context("cached entry is not UTF-8")?;
            let (votes, title) = text
                .split_once(' ')
                .with_context(|| format!("cached entry {text:?} is malformed"))?;
            return Ok((title.to_string(), votes.parse()?));
        }
        let (title, votes) = self.db.read(id)?;
        let value = format!("{votes} {title}");
        match &mut self.cache {
            CacheConn::Redis(c) => redis::cmd("SET").arg(&key).arg(&value).query::<()>(c)?,
            CacheConn::Memcached(c) => c.set(key.as_bytes(), value.as_bytes())?,
        }
        Ok((title, votes))
    }

    fn vote(&mut self, id: i64, user: i64) -> anyhow::Result<()> {
        self.db.vote(id, user)?;
        let key = cache_key(id);
        match &mut self.cache {
            CacheConn::Redis(c) => redis::cmd("DEL").arg(&key).query::<()>(c)?,
            CacheConn::Memcached(c) => {
                c.delete(key.as_bytes())?;
            }
        }
        Ok(())
    }
}

/// `aqueduct-embedded`: the engine in this process.
struct Embedded {
    engine: Arc<Engine>,
    _dir: tempfile::TempDir,
}

impl Embedded {
    fn start(args: &VoteArgs, data: &Data) -> anyhow::Result<Embedded> {
        let dir = common::scratch_dir(&args.dir, "bench-embedded-")?;
        let sync = if args.durable {
            aqueduct_log::SyncPolicy::Always
        } else {
            aqueduct_log::SyncPolicy::Never
        };
        let (log, _) = aqueduct_log::Log::open(
            dir.path(),
            aqueduct_log::Options {
                sync,
                ..Default::default()
            },
        )
        .context("opening the embedded engine's log")?;
        let engine = Engine::open_with(log, &mut |_| {}, Default::default())
            .map_err(|e| anyhow!("opening the embedded engine: {e}"))?;
        let mut s = engine.session();
        data.load_sql(Dialect::Postgres, false, &mut |sql| exec(&mut s, sql))?;
        exec(&mut s, AQ_VIEW)?;
        Ok(Embedded { engine, _dir: dir })
    }
}

fn exec(s: &mut Session, sql: &str) -> anyhow::Result<()> {
    crate::view_read::exec(s, sql).map(drop)
}

impl VoteBackend for Embedded {
    fn name(&self) -> &'static str {
        "aqueduct-embedded"
    }
    fn describe(&self) -> String {
        format!("aqueduct {} (in process)", env!("CARGO_PKG_VERSION"))
    }
    fn server_pid(&self) -> Option<u32> {
        None
    }
    fn client(&self) -> anyhow::Result<Box<dyn VoteClient>> {
        let mut session = self.engine.session();
        let read = session
            .prepare(AQ_READ, &[])
            .map_err(|e| anyhow!("{AQ_READ}: {e}"))?;
        let insert = session
            .prepare(INSERT_VOTE, &[])
            .map_err(|e| anyhow!("{INSERT_VOTE}: {e}"))?;
        Ok(Box::new(EmbeddedClient {
            session,
            read,
            insert,
        }))
    }
    fn recount(&self, id: i64) -> anyhow::Result<i64> {
        let mut s = self.engine.session();
        let p = s
            .prepare(RECOUNT, &[])
            .map_err(|e| anyhow!("{RECOUNT}: {e}"))?;
        match s.execute_prepared(&p, &[Value::Int(id)]) {
            Ok(SqlOutcome::Rows { rows, .. }) => match rows.first().and_then(|r| r.first()) {
                Some(Value::Int(n)) => Ok(*n),
                other => bail!("{RECOUNT}: unexpected {other:?}"),
            },
            Ok(other) => bail!("{RECOUNT}: unexpected {other:?}"),
            Err(e) => bail!("{RECOUNT}: {e}"),
        }
    }
}

struct EmbeddedClient {
    session: Session,
    read: Prepared,
    insert: Prepared,
}

impl VoteClient for EmbeddedClient {
    fn read(&mut self, id: i64) -> anyhow::Result<Answer> {
        // The rows are read in place (`execute_prepared_each`), as an
        // application embedding the engine reads them.
        let mut answer = None;
        let n = self
            .session
            .execute_prepared_each(&self.read, &[Value::Int(id)], |row| {
                answer = Some(match row {
                    [_, Value::Text(title), Value::Int(n)] => Ok((title.clone(), *n)),
                    [_, Value::Text(title), Value::Null] => Ok((title.clone(), 0)),
                    other => Err(anyhow!("article {id}: row {other:?}")),
                });
            })
            .map_err(|e| anyhow!("article {id}: {e}"))?;
        match answer {
            Some(answer) if n == 1 => answer,
            _ => bail!("article {id}: {n} rows"),
        }
    }

    fn vote(&mut self, id: i64, user: i64) -> anyhow::Result<()> {
        self.session
            .execute_prepared(&self.insert, &[Value::Int(id), Value::Int(user)])
            .map(drop)
            .map_err(|e| anyhow!("vote for {id}: {e}"))
    }
}

/// Compares the counts a backend returns with a direct count of its votes.
fn check(
    b: &dyn VoteBackend,
    client: &mut dyn VoteClient,
    ids: &Ids,
    seed: u64,
) -> anyhow::Result<Check> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc4ec);
    let mut sample: Vec<i64> = (1..=CHECK_HOTTEST).collect();
    sample.extend((0..CHECK_RANDOM).map(|_| ids.draw(&mut rng)));
    sample.sort_unstable();
    sample.dedup();
    let mut out = Check {
        articles_checked: sample.len(),
        ..Check::default()
    };
    for id in sample {
        let (_, got) = client.read(id)?;
        let want = b.recount(id)?;
        if got != want {
            out.wrong += 1;
            if b.may_be_stale() {
                out.stale += 1;
            }
            if out.examples.len() < 5 {
                out.examples
                    .push(format!("article {id}: read {got} votes, counted {want}"));
            }
        }
    }
    Ok(out)
}

fn run_line(name: &str, r: &RunResult) -> String {
    let o = &r.outcome;
    let lat = |k: &str| {
        o.kind(k)
            .map(|k| {
                format!(
                    "p50 {:.2} p95 {:.2} p99 {:.2} ms",
                    k.latency.p50_ms, k.latency.p95_ms, k.latency.p99_ms
                )
            })
            .unwrap_or_default()
    };
    format!(
        "{name}: {} achieved {} ops/s; reads {}; writes {}; errors {}; server {:.2} cores, bench {:.2}",
        match o.offered_ops_per_sec {
            Some(x) => format!("offered {},", thousands(x as u64)),
            None => "closed loop,".into(),
        },
        thousands(o.achieved_ops_per_sec as u64),
        lat("read"),
        lat("write"),
        o.errors,
        r.cpu.server_cores,
        r.cpu.bench_cores,
    )
}

/// Per backend: the best load meeting the read bound (open loop), or the
/// throughput (closed loop), and Aqueduct's ratio to it.
fn summarize(results: &[BackendResult], args: &VoteArgs) -> Vec<SummaryRow> {
    let mut rows: Vec<SummaryRow> = results
        .iter()
        .map(|r| {
            let best = r
                .runs
                .iter()
                .filter(|run| {
                    let read = run
                        .outcome
                        .kind("read")
                        .map(|k| k.latency.p95_ms)
                        .unwrap_or(f64::MAX);
                    match run.offered_ops_per_sec {
                        Some(offered) => {
                            read < args.p95_bound_ms
                                && run.outcome.achieved_ops_per_sec >= ACHIEVED_SHARE * offered
                                && run.outcome.errors == 0
                        }
                        None => run.outcome.errors == 0,
                    }
                })
                .max_by(|a, b| {
                    a.outcome
                        .achieved_ops_per_sec
                        .total_cmp(&b.outcome.achieved_ops_per_sec)
                });
            SummaryRow {
                backend: r.backend.clone(),
                ops_per_sec: best.map(|b| b.outcome.achieved_ops_per_sec).unwrap_or(0.0),
                read_p95_ms: best
                    .and_then(|b| b.outcome.kind("read"))
                    .map(|k| k.latency.p95_ms)
                    .unwrap_or(f64::NAN),
                aqueduct_ratio: None,
            }
        })
        .collect();
    let aq = rows
        .iter()
        .find(|r| r.backend == "aqueduct")
        .map(|r| r.ops_per_sec);
    for r in &mut rows {
        r.aqueduct_ratio = aq
            .filter(|_| r.ops_per_sec > 0.0)
            .map(|a| a / r.ops_per_sec);
    }
    rows
}

fn print_results(results: &[BackendResult], summary: &[SummaryRow], args: &VoteArgs) {
    let mut rows = Vec::new();
    for r in results {
        for run in &r.runs {
            let o = &run.outcome;
            let k = |name: &str, f: fn(&common::Latency) -> f64| {
                o.kind(name)
                    .map(|k| format!("{:.2}", f(&k.latency)))
                    .unwrap_or_default()
            };
            rows.push(vec![
                r.backend.clone(),
                o.offered_ops_per_sec
                    .map(|x| thousands(x as u64))
                    .unwrap_or("closed".into()),
                thousands(o.achieved_ops_per_sec as u64),
                k("read", |l| l.p50_ms),
                k("read", |l| l.p95_ms),
                k("read", |l| l.p99_ms),
                k("write", |l| l.p50_ms),
                k("write", |l| l.p95_ms),
                k("write", |l| l.p99_ms),
                o.errors.to_string(),
                format!("{:.2}", run.cpu.server_cores),
            ]);
        }
    }
    println!();
    print_table(
        &[
            "backend",
            "offered",
            "achieved",
            "read p50",
            "p95",
            "p99",
            "write p50",
            "p95",
            "p99",
            "errors",
            "server cores",
        ],
        &rows,
    );
    println!();
    let bound = if args.closed {
        "closed loop, ops/s".to_string()
    } else {
        format!(
            "highest load with read p95 < {} ms, ops/s",
            args.p95_bound_ms
        )
    };
    let rows: Vec<Vec<String>> = summary
        .iter()
        .map(|s| {
            let check = results
                .iter()
                .find(|r| r.backend == s.backend)
                .map(|r| match (r.check.wrong, r.check.stale) {
                    (0, _) => format!("{} ok", r.check.articles_checked),
                    (w, st) if w == st => format!("{st} stale"),
                    (w, _) => format!("{w} WRONG"),
                })
                .unwrap_or_default();
            vec![
                s.backend.clone(),
                thousands(s.ops_per_sec as u64),
                format!("{:.2}", s.read_p95_ms),
                s.aqueduct_ratio
                    .map(|r| format!("{r:.1}x"))
                    .unwrap_or("-".into()),
                check,
            ]
        })
        .collect();
    print_table(
        &["backend", &bound, "read p95 ms", "aqueduct / it", "check"],
        &rows,
    );
}

#[cfg(test)]
impl VoteArgs {
    fn parse_for_test(args: &[&str]) -> VoteArgs {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: VoteArgs,
        }
        <Wrap as clap::Parser>::parse_from(std::iter::once("vote").chain(args.iter().copied())).args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_parameters() {
        assert_eq!(
            mariadb_sql(HAND_BUMP),
            "UPDATE article SET votes = votes + 1 WHERE id = ?"
        );
        assert_eq!(mariadb_sql("VALUES ($1, $12)"), "VALUES (?, ?)");
    }

    #[test]
    fn generated_votes_follow_the_distribution_and_the_seed() {
        let ids = load::parse_distribution("zipf:1.15", 100).unwrap();
        let a = Data::generate(100, 1000, &ids, 7);
        let b = Data::generate(100, 1000, &ids, 7);
        assert_eq!(a.votes, b.votes);
        let counts = a.counts();
        assert_eq!(counts.iter().sum::<i64>(), 1000);
        assert!(
            counts[1] > counts[50] * 5,
            "article 1: {}, 50: {}",
            counts[1],
            counts[50]
        );
    }

    /// The embedded backend end to end: its reads equal the votes loaded
    /// and written, checked the way the benchmark checks every backend.
    #[test]
    fn embedded_backend_counts_every_vote() {
        let args = VoteArgs {
            durable: false,
            ..VoteArgs::parse_for_test(&["--articles", "50", "--votes", "300"])
        };
        let ids = load::parse_distribution(&args.distribution, args.articles).unwrap();
        let data = Data::generate(50, 300, &ids, 1);
        let b = Embedded::start(&args, &data).unwrap();
        let mut c = b.client().unwrap();
        let counts = data.counts();
        for id in 1..=50 {
            assert_eq!(c.read(id).unwrap(), (title_of(id), counts[id as usize]));
        }
        c.vote(3, 1 << 41).unwrap();
        assert_eq!(c.read(3).unwrap().1, counts[3] + 1);
        let checked = check(&b, c.as_mut(), &ids, 1).unwrap();
        assert_eq!(checked.wrong, 0, "{:?}", checked.examples);
        assert!(checked.articles_checked >= 50);
    }
}
