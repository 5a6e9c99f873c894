//! `aqueduct serve`: flags and environment variables, merged with the
//! optional config file by `aqueduct_server::ServerConfig::resolve`.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use aqueduct_server::{FileConfig, ServerConfig};
use clap::Args;

/// Start the server: PostgreSQL wire protocol and HTTP, data in one directory.
///
/// Every flag can also be set by its environment variable or in a TOML
/// config file (`--config`); flags win over the environment, which wins
/// over the file, which wins over the defaults shown here.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file with any of the settings below (snake_case keys,
    /// `[users]` table of name = "password", `[http_tokens]` table of
    /// "token" = "role").
    #[arg(long, env = "AQUEDUCT_CONFIG")]
    config: Option<PathBuf>,
    /// Data directory (the log lives here) [default: ./aqueduct-data]
    #[arg(long, env = "AQUEDUCT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Address for the PostgreSQL wire protocol [default: 127.0.0.1:5433]
    #[arg(long, env = "AQUEDUCT_PG_ADDR")]
    pg_addr: Option<String>,
    /// Address for HTTP (/health, /metrics, /v1/sql) [default: 127.0.0.1:8433]
    #[arg(long, env = "AQUEDUCT_HTTP_ADDR")]
    http_addr: Option<String>,
    /// When writes are made durable: `always` (acknowledged after fdatasync,
    /// survives power loss), `interval` or `interval:<ms>` (synced
    /// periodically, survives a process crash), `never` (tests and benchmarks)
    /// [default: always]
    #[arg(long, env = "AQUEDUCT_FSYNC")]
    fsync: Option<String>,
    /// Size at which a log segment is sealed, in bytes [default: 67108864]
    #[arg(long, env = "AQUEDUCT_SEGMENT_BYTES")]
    segment_bytes: Option<u64>,
    /// Most PostgreSQL connections served at once [default: 100]
    #[arg(long, env = "AQUEDUCT_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// A bootstrap user (a superuser) as NAME:PASSWORD (repeatable). With
    /// any user configured, clients authenticate with SCRAM-SHA-256, as
    /// these users or as roles made with CREATE ROLE / CREATE USER; with
    /// none, every client is trusted as a superuser (loopback only, see
    /// --allow-trust-on-network). A password given here shows in the
    /// process list: prefer --user-file or the config file's [users] table.
    #[arg(long = "user", env = "AQUEDUCT_USERS", value_delimiter = ',')]
    users: Vec<String>,
    /// File of bootstrap users, one per line as `name:password` or
    /// `name = password` (blank lines and lines starting with # skipped):
    /// keeps passwords off the command line. Make it readable by the
    /// server's account only.
    #[arg(long, env = "AQUEDUCT_USER_FILE")]
    user_file: Option<PathBuf>,
    /// A bearer token of the HTTP API that runs as a bootstrap superuser
    /// (repeatable). To map tokens to roles, use the config file's
    /// [http_tokens] table ("token" = "role"). With users configured and no
    /// token, the HTTP API is refused; with neither, it is open (loopback).
    #[arg(
        long = "http-token",
        env = "AQUEDUCT_HTTP_TOKENS",
        value_delimiter = ','
    )]
    http_tokens: Vec<String>,
    /// PEM certificate chain: enables TLS on both listeners (with --tls-key)
    #[arg(long, env = "AQUEDUCT_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert
    #[arg(long, env = "AQUEDUCT_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Refuse PostgreSQL logins without TLS (SQLSTATE 28000; clients connect
    /// with sslmode=require). Needs --tls-cert and --tls-key.
    #[arg(long, env = "AQUEDUCT_TLS_REQUIRED")]
    tls_required: bool,
    /// Serve without authentication (no users; for HTTP, no users and no
    /// tokens) on an address other than loopback. Without this flag such a
    /// start is refused, since every client would be a superuser.
    #[arg(long, env = "AQUEDUCT_ALLOW_TRUST_ON_NETWORK")]
    allow_trust_on_network: bool,
    /// Seconds between background log compaction passes [default: 30]
    #[arg(long, env = "AQUEDUCT_COMPACTION_INTERVAL_SECS")]
    compaction_interval_secs: Option<u64>,
    /// Bound on the memory all view and operator state takes, as bytes or a
    /// size such as 512MiB or 2GiB; least recently read keys of partial
    /// views are evicted to stay under it [default: no bound]
    #[arg(long, env = "AQUEDUCT_MEMORY_LIMIT")]
    memory_limit: Option<String>,
    /// `on`: views read by key hold only the keys asked for, filled on
    /// demand by upqueries; `off`: every view is materialized in full when
    /// it is created [default: on]
    #[arg(long, env = "AQUEDUCT_PARTIAL_STATE")]
    partial_state: Option<String>,
    /// Publish a release at every multiple of this interval of wall-clock
    /// time (such as 5s or 500ms): `release` reads see the last one, and
    /// its change set and time maps are served over HTTP [default: off]
    #[arg(long, env = "AQUEDUCT_RELEASE_INTERVAL")]
    release_interval: Option<String>,
    /// For tests and benchmarks of transaction chains: spread the logical
    /// servers over simulated datacenters with these round trips between
    /// each pair, such as 82ms,153ms,102ms for three (docs/chains.md)
    /// [default: none]
    #[arg(long, env = "AQUEDUCT_CHAIN_DATACENTERS")]
    chain_datacenters: Option<String>,
    /// Spread the chains' shards over these servers: every node's address
    /// for hops, in the same order on each, such as
    /// 127.0.0.1:7101,127.0.0.1:7102 (docs/chains.md) [default: none]
    #[arg(long, env = "AQUEDUCT_CHAIN_NODES")]
    chain_nodes: Option<String>,
    /// This server's index in --chain-nodes [default: 0]
    #[arg(long, env = "AQUEDUCT_CHAIN_NODE")]
    chain_node: Option<usize>,
    /// The consistency level sessions start with: eventual, session,
    /// release or linearizable [default: linearizable]
    #[arg(long, env = "AQUEDUCT_CONSISTENCY")]
    consistency: Option<String>,
    /// The statement_timeout sessions start with: a statement running
    /// longer is cancelled (SQLSTATE 57014). A duration such as 30s, 500ms
    /// or 5min, a bare number being milliseconds; a session may change its
    /// own with SET statement_timeout [default: 0, none]
    #[arg(long, env = "AQUEDUCT_STATEMENT_TIMEOUT")]
    statement_timeout: Option<String>,
    /// Bytes of recent change-feed messages kept in memory for subscribers
    /// that keep up (others read the log), as bytes or a size such as
    /// 64MiB [default: 64MiB]
    #[arg(long, env = "AQUEDUCT_FEED_MEMORY")]
    feed_memory: Option<String>,
    /// A change-feed subscriber more than this many LSNs behind is cut off
    /// and told to bootstrap again [default: no limit]
    #[arg(long, env = "AQUEDUCT_FEED_MAX_LAG")]
    feed_max_lag: Option<u64>,
    /// A durable change-feed consumer holding more log than this (bytes or
    /// a size such as 10GiB) is dropped [default: no cap]
    #[arg(long, env = "AQUEDUCT_CONSUMER_MAX_BYTES")]
    consumer_max_bytes: Option<String>,
    /// A durable change-feed consumer that is behind and acknowledged
    /// nothing for this long (such as 7d or 12h) is dropped [default: no cap]
    #[arg(long, env = "AQUEDUCT_CONSUMER_MAX_AGE")]
    consumer_max_age: Option<String>,
    /// Follow the log of these servers (the HTTP address of each, as
    /// host:port, comma-separated): this server then takes no write of its
    /// own, copies their log by catch-up and serves reads of it
    /// (docs/replication.md)
    #[arg(long, env = "AQUEDUCT_FOLLOW", value_delimiter = ',')]
    follow: Vec<String>,
    /// A bearer token that maps to a superuser on the servers followed
    #[arg(long, env = "AQUEDUCT_FOLLOW_TOKEN")]
    follow_token: Option<String>,
    /// This server's id in its Raft group (a positive integer; with
    /// --cluster)
    #[arg(long, env = "AQUEDUCT_NODE_ID")]
    node_id: Option<u64>,
    /// Run as a member of a Raft group replicating the log: the group's
    /// first members as ID=HOST:PORT of each one's HTTP listener,
    /// comma-separated, this server among them (docs/replication.md)
    #[arg(long, env = "AQUEDUCT_CLUSTER")]
    cluster: Option<String>,
    /// A member added to a running group (`aqueduct cluster add`): it
    /// waits to be contacted rather than forming the group
    #[arg(long, env = "AQUEDUCT_JOIN")]
    join: bool,
    /// A bearer token that maps to a superuser on the other members
    #[arg(long, env = "AQUEDUCT_CLUSTER_TOKEN")]
    cluster_token: Option<String>,
}

impl ServeArgs {
    fn flags(&self) -> Result<FileConfig> {
        let mut users = HashMap::new();
        for u in &self.users {
            let Some((name, password)) = u.split_once(':') else {
                bail!("--user takes NAME:PASSWORD, got '{u}'");
            };
            if name.is_empty() || password.is_empty() {
                bail!("--user takes NAME:PASSWORD with neither part empty");
            }
            users.insert(name.to_string(), password.to_string());
        }
        Ok(FileConfig {
            data_dir: self.data_dir.clone(),
            pg_addr: self.pg_addr.clone(),
            http_addr: self.http_addr.clone(),
            fsync: self.fsync.clone(),
            segment_bytes: self.segment_bytes,
            max_connections: self.max_connections,
            users: (!users.is_empty()).then_some(users),
            user_file: self.user_file.clone(),
            http_tokens: (!self.http_tokens.is_empty())
                .then(|| aqueduct_server::HttpTokens::Superuser(self.http_tokens.clone())),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_required: self.tls_required.then_some(true),
            allow_trust_on_network: self.allow_trust_on_network.then_some(true),
            compaction_interval_secs: self.compaction_interval_secs,
            memory_limit: self.memory_limit.clone(),
            partial_state: self.partial_state.clone(),
            release_interval: self.release_interval.clone(),
            chain_datacenters: self.chain_datacenters.clone(),
            chain_nodes: self.chain_nodes.clone(),
            chain_node: self.chain_node,
            consistency: self.consistency.clone(),
            statement_timeout: self.statement_timeout.clone(),
            feed_memory: self.feed_memory.clone(),
            feed_max_lag: self.feed_max_lag,
            consumer_max_bytes: self.consumer_max_bytes.clone(),
            consumer_max_age: self.consumer_max_age.clone(),
            follow: (!self.follow.is_empty()).then(|| self.follow.clone()),
            follow_token: self.follow_token.clone(),
            node_id: self.node_id,
            cluster: self.cluster.clone(),
            join: self.join.then_some(true),
            cluster_token: self.cluster_token.clone(),
        })
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    let file = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let config = ServerConfig::resolve(file, args.flags()?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("aqueduct")
        // Statements run on these threads (the blocking pool, and quick
        // reads on the workers) with the stack the depth limit assumes.
        .thread_stack_size(aqueduct_server::SERVER_THREAD_STACK_BYTES)
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(aqueduct_server::run(config, |_| {}))?;
    Ok(())
}
