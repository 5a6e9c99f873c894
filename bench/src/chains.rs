//! `bench chains`: Lynx' microbenchmarks (Table 1: simple-1/2/3, secondary
//! index, join) and a microblog mix (Table 2's operations) on this
//! machine, each run three ways side by side:
//!
//! - `piecewise`: Aqueduct chains the analysis lets run hop by hop
//!   (later hops annotated `COMMUTATIVE`, as their inserts of unique rows
//!   are); `CALL` returns after the first hop;
//! - `distributed`: the same chains without the annotations, which the
//!   analysis sends to the fallback (one transaction over all the
//!   chain's logical servers);
//! - `postgres`: the same statements as one `SERIALIZABLE` transaction of
//!   PostgreSQL 15, retried on serialization failures.
//!
//! Each mode has a throughput run (N clients, closed loop; for piecewise
//! the chains still in flight at the end are waited for and counted in
//! the time) and a latency run at low load (one client): first-hop
//! latency is how long `CALL` takes to return, completion latency how
//! long a call with `aqueduct.chain_return = 'completion'` takes. With
//! `--datacenters`, the Aqueduct server simulates datacenters with those
//! round trips (`--chain-datacenters`), and the keys of each chain's hops
//! are picked so that hop `i` runs in datacenter `i` (the first in the
//! caller's, the later ones in remote ones, as in the paper); PostgreSQL
//! then runs without delays and its row is for reference only.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use aqueduct_sql::chains::latency::Datacenters;
use aqueduct_sql::chains::placement::Placement;
use aqueduct_values::Value;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use postgres::{Client, SimpleQueryMessage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{check_stop, ms, new_hist, print_table, thousands, Latency};
use crate::pg::PgServer;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    #[value(name = "simple-1")]
    #[serde(rename = "simple-1")]
    Simple1,
    #[value(name = "simple-2")]
    #[serde(rename = "simple-2")]
    Simple2,
    #[value(name = "simple-3")]
    #[serde(rename = "simple-3")]
    Simple3,
    #[value(name = "secondary-index")]
    #[serde(rename = "secondary-index")]
    SecondaryIndex,
    #[value(name = "join")]
    #[serde(rename = "join")]
    Join,
    /// 80% read-timeline, 15% post-tweet, 5% follow-user.
    #[value(name = "microblog")]
    #[serde(rename = "microblog")]
    Microblog,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Simple1 => "simple-1",
            Workload::Simple2 => "simple-2",
            Workload::Simple3 => "simple-3",
            Workload::SecondaryIndex => "secondary-index",
            Workload::Join => "join",
            Workload::Microblog => "microblog",
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Piecewise,
    Distributed,
    Postgres,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Piecewise => "piecewise",
            Mode::Distributed => "distributed",
            Mode::Postgres => "postgres",
        }
    }
}

#[derive(Args, Debug, Serialize)]
pub struct ChainsArgs {
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "simple-1,simple-2,simple-3,secondary-index,join,microblog"
    )]
    pub workloads: Vec<Workload>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "piecewise,distributed,postgres"
    )]
    pub modes: Vec<Mode>,
    /// Client connections in the throughput runs, one thread each.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Measured seconds of each throughput run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Calls of each low-load latency run (one client).
    #[arg(long, default_value_t = 300)]
    pub latency_calls: usize,
    /// Simulated datacenters' round trips (Aqueduct's --chain-datacenters),
    /// such as 82ms,153ms,102ms; none by default.
    #[arg(long)]
    pub datacenters: Option<String>,
    /// Users of the microblog, each following 6 others with 6 tweets.
    #[arg(long, default_value_t = 10_000)]
    pub users: u64,
    /// Aqueduct's --fsync (PostgreSQL runs with fsync=on,
    /// synchronous_commit=on).
    #[arg(long, default_value = "always")]
    pub fsync: String,
    #[arg(long)]
    #[serde(skip)]
    pub aqueduct_bin: Option<PathBuf>,
    #[arg(
        long,
        env = "AQUEDUCT_BENCH_PG_BIN",
        default_value = "/usr/lib/postgresql/15/bin"
    )]
    #[serde(skip)]
    pub pg_bin: PathBuf,
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
pub struct RunResult {
    pub workload: Workload,
    pub mode: Mode,
    /// The mode Aqueduct's analysis chose for the chains of this run
    /// (per chain), as `CALL` reported it.
    pub aqueduct_modes: Vec<String>,
    pub clients: usize,
    pub chains: u64,
    pub retries: u64,
    pub seconds: f64,
    pub chains_per_s: f64,
    /// Under load: how long a call took to return.
    pub loaded_return: Latency,
    /// One client: how long a call took to return after its first hop
    /// (the whole transaction for distributed and PostgreSQL).
    pub first_hop: Latency,
    /// One client, every hop committed before the call returned.
    pub completion: Latency,
}

#[derive(Serialize, Debug)]
pub struct Results {
    pub machine: crate::common::Machine,
    pub datacenters: Option<String>,
    pub runs: Vec<RunResult>,
    /// piecewise / distributed and piecewise / postgres, chains/s.
    pub ratios: Vec<(String, f64, f64)>,
}

/// One operation of a workload, by mode: the SQL a client sends.
struct Op {
    /// Aqueduct: `CALL ...`; PostgreSQL: the transaction's statements.
    sql: String,
    /// Which chain it calls, for the report.
    chain: &'static str,
}

/// The tables of every workload. `{v}` is replaced by a suffix per
/// variant (`_pw`, `_dt`; none for PostgreSQL), so the piecewise and the
/// distributed chains, analysed together on one server, share no table;
/// each chain of the microbenchmarks has tables of its own for the same
/// reason (the analysis is over all declared chains).
const SCHEMA: &str = "
CREATE TABLE s1_1{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE s2_1{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE s2_2{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE s3_1{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE s3_2{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE s3_3{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE lt{v} (id bigint PRIMARY KEY, skey int NOT NULL);
CREATE TABLE lt_by_skey{v} (skey int NOT NULL, id bigint NOT NULL, PRIMARY KEY (skey, id));
CREATE TABLE lt2{v} (id bigint PRIMARY KEY, k int NOT NULL);
CREATE TABLE rt{v} (k int NOT NULL, x int NOT NULL, PRIMARY KEY (k, x));
CREATE TABLE jt{v} (id bigint NOT NULL, x int NOT NULL, PRIMARY KEY (id, x));
CREATE TABLE follows{v} (follower bigint NOT NULL, followee bigint NOT NULL, PRIMARY KEY (follower, followee));
CREATE TABLE tweets{v} (id bigint PRIMARY KEY, author bigint NOT NULL, body text NOT NULL);
CREATE INDEX tweets_author{v} ON tweets{v} (author);
CREATE INDEX follows_followee{v} ON follows{v} (followee);
CREATE TABLE timeline{v} (owner bigint NOT NULL, tweet bigint NOT NULL, PRIMARY KEY (owner, tweet));
";

/// A chain's hops: (key parameter, the piecewise variant's annotations,
/// statements). `{v}` is the variant's table suffix, `{c}` its chain
/// suffix.
struct ChainSpec {
    name: &'static str,
    params: &'static str,
    hops: &'static [(&'static str, &'static str, &'static str)],
}

const CHAINS: &[ChainSpec] = &[
    ChainSpec {
        name: "simple1",
        params: "id bigint, k1 int",
        hops: &[("$k1", "", "INSERT INTO s1_1{v} VALUES ($id, $k1);")],
    },
    ChainSpec {
        name: "simple2",
        params: "id bigint, k1 int, k2 int",
        hops: &[
            ("$k1", "", "INSERT INTO s2_1{v} VALUES ($id, $k1);"),
            ("$k2", "COMMUTATIVE", "INSERT INTO s2_2{v} VALUES ($id, $k2);"),
        ],
    },
    ChainSpec {
        name: "simple3",
        params: "id bigint, k1 int, k2 int, k3 int",
        hops: &[
            ("$k1", "", "INSERT INTO s3_1{v} VALUES ($id, $k1);"),
            ("$k2", "COMMUTATIVE", "INSERT INTO s3_2{v} VALUES ($id, $k2);"),
            ("$k3", "COMMUTATIVE", "INSERT INTO s3_3{v} VALUES ($id, $k3);"),
        ],
    },
    ChainSpec {
        name: "secondary",
        params: "id bigint, skey int",
        hops: &[
            ("$id", "", "INSERT INTO lt{v} VALUES ($id, $skey);"),
            ("$skey", "COMMUTATIVE", "INSERT INTO lt_by_skey{v} VALUES ($skey, $id);"),
        ],
    },
    ChainSpec {
        name: "joined",
        params: "id bigint, k int",
        hops: &[
            ("$id", "", "INSERT INTO lt2{v} VALUES ($id, $k);"),
            ("$k", "COMMUTATIVE", "INSERT INTO jt{v} SELECT $id, x FROM rt{v} WHERE k = $k;"),
        ],
    },
    // L-Twitter's operations: a tweet and a follow each fan out into
    // timelines; inserting distinct tweets commutes, and a fan-out
    // commutes with a follow (either order leaves the same timelines).
    ChainSpec {
        name: "post_tweet",
        params: "id bigint, author bigint",
        hops: &[
            ("$author", "COMMUTATIVE", "INSERT INTO tweets{v} VALUES ($id, $author, 'hello');"),
            (
                "$author",
                "COMMUTATIVE COMMUTES WITH follow_user{c}.1, follow_user{c}.2",
                "INSERT INTO timeline{v} SELECT follower, $id FROM follows{v} WHERE followee = $author;",
            ),
        ],
    },
    ChainSpec {
        name: "follow_user",
        params: "a bigint, b bigint",
        hops: &[
            (
                "$a",
                "COMMUTATIVE",
                "INSERT INTO follows{v} VALUES ($a, $b) ON CONFLICT DO NOTHING;",
            ),
            (
                "$a",
                "COMMUTATIVE COMMUTES WITH post_tweet{c}.1",
                "INSERT INTO timeline{v} SELECT $a, id FROM tweets{v} WHERE author = $b ON CONFLICT DO NOTHING;",
            ),
        ],
    },
    ChainSpec {
        name: "read_timeline",
        params: "u bigint",
        hops: &[("$u", "", "SELECT count(*) INTO n FROM timeline{v} WHERE owner = $u;")],
    },
];

/// A variant's table suffix.
fn variant(mode: Mode) -> &'static str {
    match mode {
        Mode::Piecewise => "_pw",
        Mode::Distributed => "_dt",
        Mode::Postgres => "",
    }
}

fn declaration(spec: &ChainSpec, mode: Mode) -> String {
    let v = variant(mode);
    let mut body = String::new();
    for (key, annotations, statements) in spec.hops {
        let annotations = if mode == Mode::Piecewise {
            format!(" {}", annotations.replace("{c}", v))
        } else {
            String::new()
        };
        body.push_str(&format!(
            "HOP ON {key}{annotations}; {} ",
            statements.replace("{v}", v)
        ));
    }
    format!(
        "CREATE CHAIN {}{v} ({}) AS $$ {body} $$",
        spec.name, spec.params
    )
}

/// The same statements for PostgreSQL, with the arguments in place.
fn postgres_statements(spec: &ChainSpec, args: &[(&str, String)]) -> String {
    let mut out = String::from("BEGIN ISOLATION LEVEL SERIALIZABLE; ");
    // Longest names first, so $k1 is not taken for $k.
    let mut sorted: Vec<&(&str, String)> = args.iter().collect();
    sorted.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    for (_, _, statements) in spec.hops {
        let mut s = statements.replace(" INTO n ", " ").replace("{v}", "");
        for (name, value) in &sorted {
            s = s.replace(&format!("${name}"), value);
        }
        out.push_str(&s);
        out.push(' ');
    }
    out.push_str("COMMIT;");
    out
}

fn spec(name: &str) -> &'static ChainSpec {
    CHAINS
        .iter()
        .find(|c| c.name == name)
        .expect("a declared chain")
}

/// Picks shard keys: with datacenters, key `i` lands in datacenter
/// `(home + i) mod n` (hop 1 local, the rest remote); without, any.
struct Keys {
    dcs: Option<Datacenters>,
}

impl Keys {
    fn pick(&self, rng: &mut StdRng, hop: usize, home: Option<usize>, range: i64) -> i64 {
        loop {
            let k = rng.gen_range(0..range);
            let Some(d) = &self.dcs else { return k };
            let dc = d.of(Placement::single().server_of(&Value::Int(k)));
            match home {
                None => return k,
                Some(h) if dc == (h + hop) % d.count() => return k,
                _ => {}
            }
        }
    }

    fn dc_of(&self, k: i64) -> Option<usize> {
        self.dcs
            .as_ref()
            .map(|d| d.of(Placement::single().server_of(&Value::Int(k))))
    }
}

/// The next operation of `workload` for `mode`.
fn next_op(
    workload: Workload,
    mode: Mode,
    rng: &mut StdRng,
    ids: &AtomicU64,
    keys: &Keys,
    users: u64,
) -> Op {
    let id = ids.fetch_add(1, Ordering::Relaxed) as i64;
    let (chain, args): (&'static str, Vec<(&str, String)>) = match workload {
        Workload::Simple1 | Workload::Simple2 | Workload::Simple3 => {
            let n = match workload {
                Workload::Simple1 => 1,
                Workload::Simple2 => 2,
                _ => 3,
            };
            let k1 = keys.pick(rng, 0, None, 1_000_000);
            let home = keys.dc_of(k1);
            let mut args = vec![("id", id.to_string()), ("k1", k1.to_string())];
            if n >= 2 {
                args.push(("k2", keys.pick(rng, 1, home, 1_000_000).to_string()));
            }
            if n >= 3 {
                args.push(("k3", keys.pick(rng, 2, home, 1_000_000).to_string()));
            }
            (["simple1", "simple2", "simple3"][n - 1], args)
        }
        Workload::SecondaryIndex => {
            let home = keys.dc_of(id);
            let skey = keys.pick(rng, 1, home, 1000);
            (
                "secondary",
                vec![("id", id.to_string()), ("skey", skey.to_string())],
            )
        }
        Workload::Join => {
            let home = keys.dc_of(id);
            let k = keys.pick(rng, 1, home, 1000);
            ("joined", vec![("id", id.to_string()), ("k", k.to_string())])
        }
        Workload::Microblog => {
            let u = rng.gen_range(0..users) as i64;
            match rng.gen_range(0..100) {
                0..80 => ("read_timeline", vec![("u", u.to_string())]),
                80..95 => (
                    "post_tweet",
                    vec![
                        ("id", (id + 10_000_000).to_string()),
                        ("author", u.to_string()),
                    ],
                ),
                _ => {
                    let b = rng.gen_range(0..users) as i64;
                    (
                        "follow_user",
                        vec![("a", u.to_string()), ("b", b.to_string())],
                    )
                }
            }
        }
    };
    let sql = match mode {
        Mode::Postgres => postgres_statements(spec(chain), &args),
        Mode::Piecewise | Mode::Distributed => {
            let values: Vec<&str> = args.iter().map(|(_, v)| v.as_str()).collect();
            format!("CALL {chain}{}({})", variant(mode), values.join(", "))
        }
    };
    Op { sql, chain }
}

/// Sends one operation; retries serialization failures and the chains'
/// back-pressure. Returns the mode `CALL` reported (Aqueduct) and retries.
fn send(c: &mut Client, op: &Op) -> anyhow::Result<(Option<String>, u64)> {
    let mut retries = 0;
    loop {
        match c.simple_query(&op.sql) {
            Ok(messages) => {
                let mode = messages.iter().find_map(|m| match m {
                    // CALL's row: (chain_id, mode, status, lsn, variables).
                    SimpleQueryMessage::Row(r) if r.len() == 5 => r.get(1).map(str::to_string),
                    _ => None,
                });
                return Ok((mode, retries));
            }
            Err(e) => {
                let code = e.code().map(|c| c.code().to_string());
                match code.as_deref() {
                    Some("40001" | "40P01" | "53400") if retries < 10_000 => {
                        retries += 1;
                        if c.is_closed() {
                            return Err(anyhow!("connection closed: {e}"));
                        }
                        let _ = c.simple_query("ROLLBACK");
                        std::thread::yield_now();
                    }
                    _ => return Err(anyhow!("{}: {e}", op.chain)),
                }
            }
        }
    }
}

struct Target<'a> {
    aqueduct: Option<&'a AqueductServer>,
    postgres: Option<&'a PgServer>,
}

impl Target<'_> {
    fn connect(&self, mode: Mode) -> anyhow::Result<Client> {
        match mode {
            Mode::Postgres => self.postgres.expect("started").connect_to("chains"),
            _ => self.aqueduct.expect("started").connect(),
        }
    }
}

/// A throughput run's outcome.
struct Measured {
    chains: u64,
    retries: u64,
    seconds: f64,
    /// How long each call took to return, under load.
    returns: Histogram<u64>,
    /// "chain: mode" as `CALL` reported them.
    modes: Vec<String>,
}

fn throughput(
    args: &ChainsArgs,
    target: &Target,
    workload: Workload,
    mode: Mode,
    ids: &Arc<AtomicU64>,
    keys: &Arc<Keys>,
) -> anyhow::Result<Measured> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.clients)
            .map(|c| {
                let ids = ids.clone();
                let keys = keys.clone();
                scope.spawn(
                    move || -> anyhow::Result<(u64, u64, Histogram<u64>, Vec<String>)> {
                        let mut client = target.connect(mode)?;
                        let mut rng = StdRng::seed_from_u64(args.seed ^ ((c as u64 + 1) * 7919));
                        let mut hist = new_hist();
                        let (mut n, mut retries) = (0u64, 0u64);
                        let mut modes = Vec::new();
                        while Instant::now() < deadline {
                            check_stop()?;
                            let op = next_op(workload, mode, &mut rng, &ids, &keys, args.users);
                            let t = Instant::now();
                            let (m, r) = send(&mut client, &op)?;
                            hist.record(t.elapsed().as_nanos() as u64).ok();
                            n += 1;
                            retries += r;
                            if let Some(m) = m {
                                let label = format!("{}: {m}", op.chain);
                                if !modes.contains(&label) {
                                    modes.push(label);
                                }
                            }
                        }
                        if mode != Mode::Postgres {
                            client.simple_query("WAIT FOR CHAINS")?;
                        }
                        Ok((n, retries, hist, modes))
                    },
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect::<Vec<_>>()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (mut n, mut retries, mut hist, mut modes) = (0, 0, new_hist(), Vec::new());
    for r in results {
        let (cn, cr, ch, cm) = r?;
        n += cn;
        retries += cr;
        hist.add(&ch).ok();
        for m in cm {
            if !modes.contains(&m) {
                modes.push(m);
            }
        }
    }
    modes.sort();
    Ok(Measured {
        chains: n,
        retries,
        seconds: elapsed,
        returns: hist,
        modes,
    })
}

fn low_load(
    args: &ChainsArgs,
    target: &Target,
    workload: Workload,
    mode: Mode,
    ids: &AtomicU64,
    keys: &Keys,
    completion: bool,
) -> anyhow::Result<Histogram<u64>> {
    let mut client = target.connect(mode)?;
    if mode != Mode::Postgres {
        let setting = if completion {
            "completion"
        } else {
            "first_hop"
        };
        client.simple_query(&format!("SET aqueduct.chain_return = '{setting}'"))?;
    }
    let mut rng = StdRng::seed_from_u64(args.seed ^ 0xfeed);
    let mut hist = new_hist();
    for _ in 0..args.latency_calls {
        check_stop()?;
        let op = next_op(workload, mode, &mut rng, ids, keys, args.users);
        let t = Instant::now();
        send(&mut client, &op)?;
        hist.record(t.elapsed().as_nanos() as u64).ok();
    }
    if mode != Mode::Postgres {
        client.simple_query("WAIT FOR CHAINS")?;
    }
    Ok(hist)
}

/// The microblog's users, follows and tweets, and the join's right side,
/// in the tables of variant `v`.
fn preload(c: &mut Client, users: u64, v: &str) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    let flush = |c: &mut Client, batch: &mut Vec<String>, table: &str| -> anyhow::Result<()> {
        if !batch.is_empty() {
            c.batch_execute(&format!(
                "INSERT INTO {table}{v} VALUES {}",
                batch.join(",")
            ))?;
            batch.clear();
        }
        Ok(())
    };
    for k in 0..1000 {
        for x in 0..6 {
            batch.push(format!("({k}, {x})"));
        }
        if batch.len() >= 3000 {
            flush(c, &mut batch, "rt")?;
        }
    }
    flush(c, &mut batch, "rt")?;
    let mut rng = StdRng::seed_from_u64(99);
    for u in 0..users {
        let mut seen = Vec::new();
        while seen.len() < 6 {
            let f = rng.gen_range(0..users);
            if f != u && !seen.contains(&f) {
                seen.push(f);
                batch.push(format!("({u}, {f})"));
            }
        }
        if batch.len() >= 3000 {
            flush(c, &mut batch, "follows")?;
        }
    }
    flush(c, &mut batch, "follows")?;
    for u in 0..users {
        for t in 0..6 {
            batch.push(format!("({}, {u}, 'hello')", u * 6 + t));
        }
        if batch.len() >= 3000 {
            flush(c, &mut batch, "tweets")?;
        }
    }
    flush(c, &mut batch, "tweets")?;
    c.batch_execute(&format!(
        "INSERT INTO timeline{v} SELECT f.follower, t.id FROM follows{v} f JOIN tweets{v} t ON t.author = f.followee"
    ))?;
    Ok(())
}

pub fn run(args: &ChainsArgs) -> anyhow::Result<Results> {
    let dcs = args
        .datacenters
        .as_deref()
        .map(Datacenters::parse)
        .transpose()
        .map_err(|e| anyhow!("--datacenters: {}", e.message))?;
    let keys = Arc::new(Keys { dcs: dcs.clone() });
    let wants = |m: Mode| args.modes.contains(&m);
    let aqueduct = if wants(Mode::Piecewise) || wants(Mode::Distributed) {
        let bin = AqueductServer::binary(&args.aqueduct_bin)?;
        let mut extra = Vec::new();
        if let Some(d) = &args.datacenters {
            extra.push("--chain-datacenters".to_string());
            extra.push(d.clone());
        }
        let server =
            AqueductServer::start_with(&bin, &args.dir, &args.fsync, args.clients + 8, &extra)?;
        let mut c = server.connect()?;
        for mode in [Mode::Piecewise, Mode::Distributed] {
            if !wants(mode) {
                continue;
            }
            let v = variant(mode);
            c.batch_execute(&SCHEMA.replace("{v}", v))?;
            eprintln!(
                "preloading {} users into Aqueduct ({})",
                args.users,
                mode.name()
            );
            preload(&mut c, args.users, v)?;
            for spec in CHAINS {
                c.batch_execute(&declaration(spec, mode))?;
            }
        }
        Some(server)
    } else {
        None
    };
    let postgres = if wants(Mode::Postgres) {
        let server = PgServer::start(&args.pg_bin, &args.dir, args.clients + 8)?;
        let mut admin = server.connect()?;
        admin.batch_execute("CREATE DATABASE chains")?;
        let mut c = server.connect_to("chains")?;
        c.batch_execute(&SCHEMA.replace("{v}", ""))?;
        eprintln!("preloading {} users into PostgreSQL", args.users);
        preload(&mut c, args.users, "")?;
        c.batch_execute("VACUUM ANALYZE")?;
        Some(server)
    } else {
        None
    };
    let target = Target {
        aqueduct: aqueduct.as_ref(),
        postgres: postgres.as_ref(),
    };
    let ids = Arc::new(AtomicU64::new(1_000_000_000));
    let mut runs = Vec::new();
    for &workload in &args.workloads {
        for &mode in &args.modes {
            eprintln!("{} {}: throughput", workload.name(), mode.name());
            let m = throughput(args, &target, workload, mode, &ids, &keys)
                .with_context(|| format!("{} {}", workload.name(), mode.name()))?;
            eprintln!("{} {}: latency", workload.name(), mode.name());
            let first = low_load(args, &target, workload, mode, &ids, &keys, false)?;
            let completion = if mode == Mode::Piecewise {
                low_load(args, &target, workload, mode, &ids, &keys, true)?
            } else {
                first.clone()
            };
            runs.push(RunResult {
                workload,
                mode,
                aqueduct_modes: m.modes,
                clients: args.clients,
                chains: m.chains,
                retries: m.retries,
                seconds: m.seconds,
                chains_per_s: m.chains as f64 / m.seconds,
                loaded_return: Latency::of(&m.returns),
                first_hop: Latency::of(&first),
                completion: Latency::of(&completion),
            });
        }
    }
    let rate = |w: Workload, m: Mode| {
        runs.iter()
            .find(|r| r.workload == w && r.mode == m)
            .map(|r| r.chains_per_s)
    };
    let mut ratios = Vec::new();
    for &w in &args.workloads {
        if let Some(p) = rate(w, Mode::Piecewise) {
            ratios.push((
                w.name().to_string(),
                rate(w, Mode::Distributed).map_or(f64::NAN, |d| p / d),
                rate(w, Mode::Postgres).map_or(f64::NAN, |g| p / g),
            ));
        }
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.workload.name().to_string(),
                r.mode.name().to_string(),
                thousands(r.chains_per_s as u64),
                format!("{}; {}", ms(r.first_hop.p50_ms), ms(r.first_hop.p99_ms)),
                format!("{}; {}", ms(r.completion.p50_ms), ms(r.completion.p99_ms)),
                thousands(r.retries),
                r.aqueduct_modes.join(", "),
            ]
        })
        .collect();
    print_table(
        &[
            "workload",
            "mode",
            "chains/s",
            "first hop ms (p50; p99)",
            "completion ms (p50; p99)",
            "retries",
            "analysis",
        ],
        &rows,
    );
    for (w, d, g) in &ratios {
        println!("{w}: piecewise {d:.2}x the fallback, {g:.2}x PostgreSQL SERIALIZABLE");
    }
    Ok(Results {
        machine: crate::common::machine(),
        datacenters: args.datacenters.clone(),
        runs,
        ratios,
    })
}
