//! Server settings. Precedence: command-line flag, then environment variable
//! (both handled by the binary's argument parser), then the config file, then
//! the built-in default.
//!
//! The config file is TOML:
//! ```toml
//! data_dir = "/var/lib/aqueduct"
//! pg_addr = "127.0.0.1:5433"
//! http_addr = "127.0.0.1:8433"
//! fsync = "always"            # always | interval | interval:<ms> | never
//! max_connections = 100
//! tls_cert = "server.crt"
//! tls_key = "server.key"
//! tls_required = true         # refuse plaintext PostgreSQL logins
//! compaction_interval_secs = 30
//! release_interval = "5s"     # scheduled releases; off when absent
//! chain_datacenters = "82ms,153ms,102ms" # simulated datacenters for chains
//! chain_nodes = "127.0.0.1:7101,127.0.0.1:7102" # servers the chains' shards spread over
//! chain_node = 0              # this server's index in chain_nodes
//! consistency = "linearizable" # eventual | session | release | linearizable
//! statement_timeout = "30s"   # sessions' default statement_timeout; 0: none
//! feed_memory = "64MiB"       # recent change-feed messages kept in memory
//! feed_max_lag = 10000000     # LSNs a feed subscriber may fall behind; absent: no limit
//! consumer_max_bytes = "10GiB" # log a durable consumer may hold; absent: no cap
//! consumer_max_age = "7d"     # time a durable consumer behind may go without acknowledging
//! follow = ["10.0.0.1:8433", "10.0.0.2:8433"]  # a read-only follower of these members' log
//! follow_token = "secret"     # a token that maps to a superuser on them
//! node_id = 1                  # this member's id in a Raft group, with:
//! cluster = "1=10.0.0.1:8433,2=10.0.0.2:8433,3=10.0.0.3:8433"
//! join = false                 # a member added later (`aqueduct cluster add`)
//! cluster_token = "secret"     # a token that maps to a superuser on the members
//! user_file = "/etc/aqueduct/users"   # more bootstrap users, see below
//! allow_trust_on_network = false
//! [users]                     # bootstrap users: superusers
//! alice = "password"
//! [http_tokens]               # bearer token = the role its requests run as
//! "secret-token" = "alice"
//! "report-token" = "reporter" # a role created with CREATE ROLE
//! ```
//!
//! Users come from the `[users]` table, the user file and `--user`; all of
//! them are bootstrap superusers (roles made with `CREATE ROLE`/`CREATE
//! USER` live in the database instead). Passwords need never be on the
//! command line: the user file has one user per line, `name:password` or
//! `name = password` (spaces around the name and password are trimmed, a
//! password may be in double quotes, blank lines and lines starting with
//! `#` are skipped); keep it readable by the server's account only.
//!
//! `http_tokens` may also be a list (`http_tokens = ["secret-token"]`, the
//! older form, like `--http-token`): such tokens run as a bootstrap
//! superuser. With users configured and no token at all, the HTTP API
//! (`/v1/*`) is refused rather than open.
//!
//! A listener on an address other than loopback with nothing to
//! authenticate clients (no users; for HTTP, no users and no tokens) is
//! refused at start unless `allow_trust_on_network` (`--allow-trust-on-network`)
//! says so. `tls_required` needs `tls_cert` and `tls_key`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aqueduct_log::SyncPolicy;
use serde::Deserialize;

use aqueduct_sql::Consistency;

use crate::DEFAULT_COMPACTION_INTERVAL;

pub const DEFAULT_DATA_DIR: &str = "./aqueduct-data";
pub const DEFAULT_PG_ADDR: &str = "127.0.0.1:5433";
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8433";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the config file {path} is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// Everything the server needs to start.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub pg_addr: String,
    pub http_addr: String,
    pub fsync: SyncPolicy,
    pub segment_bytes: u64,
    pub max_connections: usize,
    /// PostgreSQL users and passwords; empty means trust.
    pub users: HashMap<String, String>,
    /// Bearer tokens of a bootstrap superuser for the HTTP API.
    pub http_tokens: Vec<String>,
    /// Bearer token → the role its HTTP requests run as.
    pub http_token_roles: BTreeMap<String, String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Refuse PostgreSQL logins without TLS.
    pub tls_required: bool,
    /// Serve without authentication on addresses other than loopback.
    pub allow_trust_on_network: bool,
    pub compaction_interval: Duration,
    /// Bound on the bytes of all view and operator state (0: none).
    pub memory_limit: u64,
    /// Views read by key are partial (filled by upqueries) where they can be.
    pub partial_state: bool,
    /// Releases at multiples of this interval (`None`: no releases).
    pub release_interval: Option<Duration>,
    /// Simulated datacenters between the chains' logical servers.
    pub chain_datacenters: Option<aqueduct_sql::chains::latency::Datacenters>,
    /// The servers the chains' logical servers are spread over, and which
    /// one this is.
    pub chain_placement: aqueduct_sql::chains::placement::Placement,
    /// The consistency level sessions start with.
    pub consistency: Consistency,
    /// The `statement_timeout` sessions start with (`None`: none).
    pub statement_timeout: Option<Duration>,
    /// The change feed's memory, lag limit and durable consumers' caps.
    pub feed: aqueduct_feed::FeedOptions,
    /// `host:port` of the HTTP listeners of the members whose log this
    /// server follows, read-only (empty: it takes writes of its own).
    pub follow: Vec<String>,
    /// The bearer token sent to them.
    pub follow_token: Option<String>,
    /// Set on a member of a Raft group (`--node-id`, `--cluster`,
    /// `--join`, `--cluster-token`).
    pub cluster: Option<aqueduct_replicate::group::GroupConfig>,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            pg_addr: DEFAULT_PG_ADDR.into(),
            http_addr: DEFAULT_HTTP_ADDR.into(),
            fsync: SyncPolicy::Always,
            segment_bytes: aqueduct_log::DEFAULT_SEGMENT_BYTES,
            max_connections: aqueduct_pg::DEFAULT_MAX_CONNECTIONS,
            users: HashMap::new(),
            http_tokens: Vec::new(),
            http_token_roles: BTreeMap::new(),
            tls_cert: None,
            tls_key: None,
            tls_required: false,
            allow_trust_on_network: false,
            compaction_interval: DEFAULT_COMPACTION_INTERVAL,
            memory_limit: 0,
            partial_state: true,
            release_interval: None,
            chain_datacenters: None,
            chain_placement: aqueduct_sql::chains::placement::Placement::single(),
            consistency: Consistency::Linearizable,
            statement_timeout: None,
            feed: aqueduct_feed::FeedOptions::default(),
            follow: Vec::new(),
            follow_token: None,
            cluster: None,
        }
    }
}

/// The config file's contents; every field optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub data_dir: Option<PathBuf>,
    pub pg_addr: Option<String>,
    pub http_addr: Option<String>,
    pub fsync: Option<String>,
    pub segment_bytes: Option<u64>,
    pub max_connections: Option<usize>,
    pub users: Option<HashMap<String, String>>,
    /// More users, one a line (`name:password` or `name = password`).
    pub user_file: Option<PathBuf>,
    pub http_tokens: Option<HttpTokens>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_required: Option<bool>,
    pub allow_trust_on_network: Option<bool>,
    pub compaction_interval_secs: Option<u64>,
    /// `--memory-limit`: bytes, or with a unit (`512MiB`, `2GiB`, `4GB`).
    pub memory_limit: Option<String>,
    /// `--partial-state`: `on` or `off`.
    pub partial_state: Option<String>,
    /// `--release-interval`: a duration such as `5s` or `500ms`.
    pub release_interval: Option<String>,
    /// `--chain-datacenters`: round trips such as `82ms,153ms,102ms`.
    pub chain_datacenters: Option<String>,
    /// `--chain-nodes`: every node's address for hops, in one order.
    pub chain_nodes: Option<String>,
    /// `--chain-node`: this server's index in the chain nodes.
    pub chain_node: Option<usize>,
    /// `--consistency`: the level sessions start with.
    pub consistency: Option<String>,
    /// `--statement-timeout`: a duration such as `30s` or `500ms` (a bare
    /// number is milliseconds); `0` is none.
    pub statement_timeout: Option<String>,
    /// `--feed-memory`: bytes or a size such as `64MiB`.
    pub feed_memory: Option<String>,
    /// `--feed-max-lag`: LSNs.
    pub feed_max_lag: Option<u64>,
    /// `--consumer-max-bytes`: bytes or a size.
    pub consumer_max_bytes: Option<String>,
    /// `--consumer-max-age`: a duration such as `7d`, `12h` or `30min`.
    pub consumer_max_age: Option<String>,
    /// `--follow`: members' HTTP addresses (`host:port`).
    pub follow: Option<Vec<String>>,
    /// `--follow-token`.
    pub follow_token: Option<String>,
    /// `--node-id`: this member's id in its Raft group.
    pub node_id: Option<u64>,
    /// `--cluster`: the group's first members, `ID=HOST:PORT,...` (HTTP
    /// addresses).
    pub cluster: Option<String>,
    /// `--join`: a member added later, contacted by the group.
    pub join: Option<bool>,
    /// `--cluster-token`: a token that maps to a superuser on the other
    /// members.
    pub cluster_token: Option<String>,
}

/// `http_tokens`: a table of token → role, or (the older form) a list of
/// tokens of a bootstrap superuser.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum HttpTokens {
    Roles(BTreeMap<String, String>),
    Superuser(Vec<String>),
}

/// Reads a user file: one `name:password` or `name = password` a line.
pub fn load_user_file(path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_user_file(&text).map_err(|message| ConfigError::Parse {
        path: path.display().to_string(),
        message,
    })
}

/// The users of a user file's text.
pub fn parse_user_file(text: &str) -> Result<HashMap<String, String>, String> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = line
            .find([':', '='])
            .ok_or_else(|| format!("line {}: expected name:password or name = password", i + 1))?;
        let name = line[..at].trim();
        let mut password = line[at + 1..].trim();
        if password.len() >= 2 && password.starts_with('"') && password.ends_with('"') {
            password = &password[1..password.len() - 1];
        }
        if name.is_empty() || password.is_empty() {
            return Err(format!(
                "line {}: neither the name nor the password may be empty",
                i + 1
            ));
        }
        if users
            .insert(name.to_string(), password.to_string())
            .is_some()
        {
            return Err(format!("line {}: user \"{name}\" appears twice", i + 1));
        }
    }
    Ok(users)
}

/// Whether a listen address is on loopback only (`127.0.0.0/8`, `::1`,
/// `localhost`); any other address, or a host name, may be reached from
/// the network.
pub fn is_loopback_addr(addr: &str) -> bool {
    if let Ok(a) = addr.parse::<std::net::SocketAddr>() {
        return a.ip().is_loopback();
    }
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    host.eq_ignore_ascii_case("localhost")
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }
}

impl ServerConfig {
    /// Defaults overridden by the file, overridden by `flags` (which the
    /// binary fills from its command line and environment).
    pub fn resolve(file: FileConfig, flags: FileConfig) -> Result<ServerConfig, ConfigError> {
        let d = ServerConfig::default();
        let fsync = match flags.fsync.or(file.fsync) {
            Some(s) => s.parse().map_err(ConfigError::Invalid)?,
            None => d.fsync,
        };
        let mut users = file.users.unwrap_or_default();
        if let Some(path) = flags.user_file.as_ref().or(file.user_file.as_ref()) {
            users.extend(load_user_file(path)?);
        }
        users.extend(flags.users.unwrap_or_default());
        let mut tokens = Vec::new();
        let mut token_roles = BTreeMap::new();
        for t in [file.http_tokens, flags.http_tokens].into_iter().flatten() {
            match t {
                HttpTokens::Superuser(list) => tokens.extend(list),
                HttpTokens::Roles(map) => token_roles.extend(map),
            }
        }
        let memory_limit = match flags.memory_limit.or(file.memory_limit) {
            Some(s) => parse_bytes(&s).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "--memory-limit takes bytes or a size such as 512MiB or 2GiB, got '{s}'"
                ))
            })?,
            None => d.memory_limit,
        };
        let partial_state = match flags.partial_state.or(file.partial_state).as_deref() {
            None => d.partial_state,
            Some("on") => true,
            Some("off") => false,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "--partial-state takes on or off, got '{other}'"
                )))
            }
        };
        let release_interval = match flags.release_interval.or(file.release_interval) {
            None => None,
            Some(s) => {
                let d = aqueduct_sql::parse_duration(&s).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "--release-interval takes a duration such as 5s, 500ms or 1min, got '{s}'"
                    ))
                })?;
                aqueduct_sql::releases::Schedule::new(d)
                    .map_err(|e| ConfigError::Invalid(format!("--release-interval: {e}")))?;
                Some(d)
            }
        };
        let chain_datacenters = flags
            .chain_datacenters
            .or(file.chain_datacenters)
            .map(|s| {
                aqueduct_sql::chains::latency::Datacenters::parse(&s).map_err(|e| {
                    ConfigError::Invalid(format!("--chain-datacenters: {}", e.message))
                })
            })
            .transpose()?;
        let chain_placement = match flags.chain_nodes.or(file.chain_nodes) {
            None => aqueduct_sql::chains::placement::Placement::single(),
            Some(nodes) => aqueduct_sql::chains::placement::Placement::parse(
                &nodes,
                flags.chain_node.or(file.chain_node).unwrap_or(0),
            )
            .map_err(|e| ConfigError::Invalid(format!("--chain-nodes: {}", e.message)))?,
        };
        let consistency = match flags.consistency.or(file.consistency) {
            None => d.consistency,
            Some(s) => Consistency::parse(&s).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "--consistency takes eventual, session, release or linearizable, got '{s}'"
                ))
            })?,
        };
        if consistency == Consistency::Release && release_interval.is_none() {
            return Err(ConfigError::Invalid(
                "--consistency release needs releases: give --release-interval too".into(),
            ));
        }
        let statement_timeout = match flags.statement_timeout.or(file.statement_timeout) {
            None => d.statement_timeout,
            Some(s) => {
                let t = aqueduct_sql::parse_duration(&s).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "--statement-timeout takes a duration such as 30s, 500ms or 5min (0: none), got '{s}'"
                    ))
                })?;
                (!t.is_zero()).then_some(t)
            }
        };
        let size = |flag: &str, s: Option<String>| -> Result<Option<u64>, ConfigError> {
            s.map(|s| {
                parse_bytes(&s).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "--{flag} takes bytes or a size such as 512MiB or 2GiB, got '{s}'"
                    ))
                })
            })
            .transpose()
        };
        let feed = aqueduct_feed::FeedOptions {
            memory_bytes: size("feed-memory", flags.feed_memory.or(file.feed_memory))?
                .map_or(d.feed.memory_bytes, |b| b as usize),
            max_lag: flags.feed_max_lag.or(file.feed_max_lag).or(d.feed.max_lag),
            consumer_max_bytes: size(
                "consumer-max-bytes",
                flags.consumer_max_bytes.or(file.consumer_max_bytes),
            )?
            .or(d.feed.consumer_max_bytes),
            consumer_max_age: match flags.consumer_max_age.or(file.consumer_max_age) {
                None => d.feed.consumer_max_age,
                Some(s) => Some(aqueduct_sql::parse_duration(&s).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "--consumer-max-age takes a duration such as 7d, 12h or 30min, got '{s}'"
                    ))
                })?),
            },
        };
        let follow = flags.follow.or(file.follow).unwrap_or_default();
        for m in &follow {
            let host_port = m
                .rsplit_once(':')
                .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if host_port.is_none() || m.contains('/') {
                return Err(ConfigError::Invalid(format!(
                    "--follow takes the HTTP address of each member as host:port, got '{m}'"
                )));
            }
        }
        let cluster = match (
            flags.node_id.or(file.node_id),
            flags.cluster.or(file.cluster),
        ) {
            (None, None) => None,
            (Some(node_id), Some(spec)) => {
                let members = aqueduct_replicate::group::GroupConfig::parse_members(&spec)
                    .map_err(|e| ConfigError::Invalid(format!("--cluster: {e}")))?;
                if !follow.is_empty() {
                    return Err(ConfigError::Invalid(
                        "--follow and --cluster exclude each other: a member of a group \
                         takes writes through its leader"
                            .into(),
                    ));
                }
                Some(aqueduct_replicate::group::GroupConfig {
                    node_id,
                    members,
                    join: flags.join.or(file.join).unwrap_or(false),
                    token: flags.cluster_token.or(file.cluster_token),
                })
            }
            _ => {
                return Err(ConfigError::Invalid(
                    "--node-id and --cluster go together: this member's id, and the group's \
                     first members as ID=HOST:PORT,..."
                        .into(),
                ))
            }
        };
        let config = ServerConfig {
            cluster,
            follow,
            follow_token: flags.follow_token.or(file.follow_token),
            feed,
            memory_limit,
            statement_timeout,
            partial_state,
            release_interval,
            chain_datacenters,
            chain_placement,
            consistency,
            data_dir: flags.data_dir.or(file.data_dir).unwrap_or(d.data_dir),
            pg_addr: flags.pg_addr.or(file.pg_addr).unwrap_or(d.pg_addr),
            http_addr: flags.http_addr.or(file.http_addr).unwrap_or(d.http_addr),
            fsync,
            segment_bytes: flags
                .segment_bytes
                .or(file.segment_bytes)
                .unwrap_or(d.segment_bytes),
            max_connections: flags
                .max_connections
                .or(file.max_connections)
                .unwrap_or(d.max_connections),
            users,
            http_tokens: tokens,
            http_token_roles: token_roles,
            tls_cert: flags.tls_cert.or(file.tls_cert),
            tls_key: flags.tls_key.or(file.tls_key),
            tls_required: flags.tls_required.or(file.tls_required).unwrap_or(false),
            allow_trust_on_network: flags
                .allow_trust_on_network
                .or(file.allow_trust_on_network)
                .unwrap_or(false),
            compaction_interval: flags
                .compaction_interval_secs
                .or(file.compaction_interval_secs)
                .map(Duration::from_secs)
                .unwrap_or(d.compaction_interval),
        };
        if config.tls_cert.is_some() != config.tls_key.is_some() {
            return Err(ConfigError::Invalid(
                "TLS needs both a certificate (--tls-cert) and a key (--tls-key)".into(),
            ));
        }
        if config.max_connections == 0 {
            return Err(ConfigError::Invalid(
                "--max-connections must be at least 1".into(),
            ));
        }
        if config.segment_bytes < 64 * 1024 {
            return Err(ConfigError::Invalid(
                "segment size must be at least 65536 bytes".into(),
            ));
        }
        config.check_security()?;
        Ok(config)
    }

    /// Refuses settings that would leave the server open or unusable:
    /// TLS required without a certificate, and listeners reachable from the
    /// network with nothing to authenticate clients.
    pub fn check_security(&self) -> Result<(), ConfigError> {
        if self.tls_required && (self.tls_cert.is_none() || self.tls_key.is_none()) {
            return Err(ConfigError::Invalid(
                "--tls-required needs TLS: give a certificate and key (--tls-cert, --tls-key)"
                    .into(),
            ));
        }
        if self.allow_trust_on_network || !self.users.is_empty() {
            return Ok(());
        }
        let how = "add a user (--user-file PATH with lines name:password, a [users] table in the config file, or --user NAME:PASSWORD), listen on 127.0.0.1, or pass --allow-trust-on-network to serve without authentication on purpose";
        if !is_loopback_addr(&self.pg_addr) {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve PostgreSQL clients on {} without authentication: no users are configured, so every client would be trusted as a superuser; {how}",
                self.pg_addr
            )));
        }
        let http_guarded = !self.http_tokens.is_empty() || !self.http_token_roles.is_empty();
        if !http_guarded && !is_loopback_addr(&self.http_addr) {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve HTTP on {} without authentication: no users or HTTP tokens are configured, so /v1/sql would run anyone's SQL as a superuser; {how}, or configure [http_tokens]",
                self.http_addr
            )));
        }
        Ok(())
    }
}

/// A size in bytes: a number, optionally followed by a unit (`KiB`, `MiB`,
/// `GiB`, `TiB`, or the decimal `KB`, `MB`, `GB`, `TB`).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_bytes("1024"), Some(1024));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("2 GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("4GB"), Some(4_000_000_000));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("5 parsecs"), None);
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let file: FileConfig = toml::from_str(
            "pg_addr = \"127.0.0.1:6000\"\nfsync = \"never\"\nmax_connections = 7\n[users]\nalice = \"pw\"\n",
        )
        .unwrap();
        let flags = FileConfig {
            pg_addr: Some("127.0.0.1:7000".into()),
            ..Default::default()
        };
        let c = ServerConfig::resolve(file, flags).unwrap();
        assert_eq!(c.pg_addr, "127.0.0.1:7000");
        assert_eq!(c.fsync, SyncPolicy::Never);
        assert_eq!(c.max_connections, 7);
        assert_eq!(c.http_addr, DEFAULT_HTTP_ADDR);
        assert_eq!(c.users["alice"], "pw");
    }

    #[test]
    fn a_group_member_is_configured_with_its_id_and_the_members() {
        let resolve = |file: &str, flags: FileConfig| {
            ServerConfig::resolve(toml::from_str(file).unwrap(), flags)
        };
        let flags = |node_id: Option<u64>, cluster: Option<&str>| FileConfig {
            node_id,
            cluster: cluster.map(str::to_string),
            ..Default::default()
        };
        let c = resolve("", flags(Some(2), Some("1=a:1, 2=b:2,3=c:3"))).unwrap();
        let group = c.cluster.expect("a group member");
        assert_eq!(group.node_id, 2);
        assert_eq!(group.members.len(), 3);
        assert_eq!(group.members[&2], "b:2");
        assert!(!group.join);
        // From the file, with --join and the token.
        let c = resolve(
            "node_id = 4\ncluster = \"4=d:4\"\njoin = true\ncluster_token = \"t\"\n",
            FileConfig::default(),
        )
        .unwrap();
        let group = c.cluster.unwrap();
        assert!(group.join);
        assert_eq!(group.token.as_deref(), Some("t"));

        let error = |file: &str, f: FileConfig| match resolve(file, f) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        for (f, says) in [
            (flags(Some(1), None), "--node-id and --cluster go together"),
            (
                flags(None, Some("1=a:1")),
                "--node-id and --cluster go together",
            ),
            (
                flags(Some(1), Some("1=a:1,1=b:2")),
                "member 1 is named twice",
            ),
            (flags(Some(1), Some("0=a:1")), "member ids start at 1"),
            (flags(Some(1), Some("x=a:1")), "is not a member id"),
            (flags(Some(1), Some("a:1")), "is not ID=HOST:PORT"),
            (flags(Some(1), Some(" , ")), "no member named"),
        ] {
            let e = error("", f);
            assert!(e.contains(says), "{e}");
        }
        let e = error(
            "follow = [\"127.0.0.1:9\"]\n",
            flags(Some(1), Some("1=a:1")),
        );
        assert!(
            e.contains("--follow and --cluster exclude each other"),
            "{e}"
        );
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let flags = FileConfig {
            fsync: Some("sometimes".into()),
            ..Default::default()
        };
        let e = ServerConfig::resolve(FileConfig::default(), flags).unwrap_err();
        assert!(e.to_string().contains("always, interval"), "{e}");
        assert!(toml::from_str::<FileConfig>("colour = 1").is_err());
    }

    #[test]
    fn user_files_and_token_tables_are_read() {
        let users = parse_user_file(
            "# bootstrap users\nalice:s3cret:with colon\n\n bob = \"two words\" \ncarol=x=y\n",
        )
        .unwrap();
        assert_eq!(users["alice"], "s3cret:with colon");
        assert_eq!(users["bob"], "two words");
        assert_eq!(users["carol"], "x=y");
        assert!(parse_user_file("nobody\n").unwrap_err().contains("line 1"));
        assert!(parse_user_file("a:\n").is_err());
        assert!(parse_user_file("a:1\na:2\n").unwrap_err().contains("twice"));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        std::fs::write(&path, "dave:pw\n").unwrap();
        let file: FileConfig = toml::from_str(&format!(
            "user_file = {:?}\n[users]\nerin = \"e\"\n[http_tokens]\n\"tok\" = \"dave\"\n",
            path.display().to_string()
        ))
        .unwrap();
        let c = ServerConfig::resolve(file, FileConfig::default()).unwrap();
        assert_eq!(c.users["dave"], "pw");
        assert_eq!(c.users["erin"], "e");
        assert_eq!(c.http_token_roles["tok"], "dave");
        assert!(c.http_tokens.is_empty());
        // The list form still works, as tokens of a superuser.
        let file: FileConfig = toml::from_str("http_tokens = [\"old\"]\n").unwrap();
        let c = ServerConfig::resolve(file, FileConfig::default()).unwrap();
        assert_eq!(c.http_tokens, vec!["old".to_string()]);
    }

    #[test]
    fn unauthenticated_network_listeners_and_tls_required_without_tls_are_refused() {
        let resolve = |toml_text: &str| {
            ServerConfig::resolve(toml::from_str(toml_text).unwrap(), FileConfig::default())
        };
        for loopback in [
            "127.0.0.1:5433",
            "[::1]:5433",
            "localhost:5433",
            "127.0.0.2:1",
        ] {
            assert!(is_loopback_addr(loopback), "{loopback}");
        }
        for network in [
            "0.0.0.0:5433",
            "[::]:5433",
            "10.0.0.1:5433",
            "db.example:5433",
        ] {
            assert!(!is_loopback_addr(network), "{network}");
        }
        let e = resolve("pg_addr = \"0.0.0.0:5433\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("without authentication") && e.contains("--user-file"),
            "{e}"
        );
        let e = resolve("http_addr = \"0.0.0.0:8433\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTTP"), "{e}");
        resolve("pg_addr = \"0.0.0.0:5433\"\nallow_trust_on_network = true").unwrap();
        resolve("pg_addr = \"0.0.0.0:5433\"\n[users]\na = \"b\"").unwrap();
        resolve("http_addr = \"0.0.0.0:8433\"\nhttp_tokens = [\"t\"]").unwrap();
        let e = resolve("tls_required = true").unwrap_err().to_string();
        assert!(e.contains("--tls-cert"), "{e}");
    }

    #[test]
    fn releases_and_consistency_are_checked() {
        let file: FileConfig =
            toml::from_str("release_interval = \"5s\"\nconsistency = \"release\"\n").unwrap();
        let c = ServerConfig::resolve(file, FileConfig::default()).unwrap();
        assert_eq!(c.release_interval, Some(Duration::from_secs(5)));
        assert_eq!(c.consistency, Consistency::Release);
        assert_eq!(
            ServerConfig::resolve(FileConfig::default(), FileConfig::default())
                .unwrap()
                .consistency,
            Consistency::Linearizable
        );
        let bad = |flags: FileConfig| {
            ServerConfig::resolve(FileConfig::default(), flags)
                .unwrap_err()
                .to_string()
        };
        let e = bad(FileConfig {
            release_interval: Some("soon".into()),
            ..Default::default()
        });
        assert!(e.contains("--release-interval"), "{e}");
        let e = bad(FileConfig {
            release_interval: Some("5ms".into()),
            ..Default::default()
        });
        assert!(e.contains("at least 10 ms"), "{e}");
        let e = bad(FileConfig {
            consistency: Some("strong".into()),
            ..Default::default()
        });
        assert!(
            e.contains("eventual, session, release or linearizable"),
            "{e}"
        );
        let e = bad(FileConfig {
            consistency: Some("release".into()),
            ..Default::default()
        });
        assert!(e.contains("needs releases"), "{e}");
    }

    #[test]
    fn statement_timeout_is_read_and_checked() {
        let file: FileConfig = toml::from_str("statement_timeout = \"30s\"\n").unwrap();
        let c = ServerConfig::resolve(file.clone(), FileConfig::default()).unwrap();
        assert_eq!(c.statement_timeout, Some(Duration::from_secs(30)));
        // The flag wins over the file; 0 is none; a bare number is ms.
        let flags = |v: &str| FileConfig {
            statement_timeout: Some(v.into()),
            ..Default::default()
        };
        let c = ServerConfig::resolve(file.clone(), flags("250")).unwrap();
        assert_eq!(c.statement_timeout, Some(Duration::from_millis(250)));
        let c = ServerConfig::resolve(file, flags("0")).unwrap();
        assert_eq!(c.statement_timeout, None);
        let c = ServerConfig::resolve(FileConfig::default(), FileConfig::default()).unwrap();
        assert_eq!(c.statement_timeout, None);
        let e = ServerConfig::resolve(FileConfig::default(), flags("soon"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--statement-timeout"), "{e}");
    }
}
