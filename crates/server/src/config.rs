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
//! http_tokens = ["secret-token"]
//! tls_cert = "server.crt"
//! tls_key = "server.key"
//! compaction_interval_secs = 30
//! release_interval = "5s"     # scheduled releases; off when absent
//! consistency = "linearizable" # eventual | session | release | linearizable
//! [users]
//! alice = "password"
//! ```

use std::collections::HashMap;
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
    /// Bearer tokens for the HTTP API; empty means open.
    pub http_tokens: Vec<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub compaction_interval: Duration,
    /// Bound on the bytes of all view and operator state (0: none).
    pub memory_limit: u64,
    /// Views read by key are partial (filled by upqueries) where they can be.
    pub partial_state: bool,
    /// Releases at multiples of this interval (`None`: no releases).
    pub release_interval: Option<Duration>,
    /// The consistency level sessions start with.
    pub consistency: Consistency,
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
            tls_cert: None,
            tls_key: None,
            compaction_interval: DEFAULT_COMPACTION_INTERVAL,
            memory_limit: 0,
            partial_state: true,
            release_interval: None,
            consistency: Consistency::Linearizable,
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
    pub http_tokens: Option<Vec<String>>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub compaction_interval_secs: Option<u64>,
    /// `--memory-limit`: bytes, or with a unit (`512MiB`, `2GiB`, `4GB`).
    pub memory_limit: Option<String>,
    /// `--partial-state`: `on` or `off`.
    pub partial_state: Option<String>,
    /// `--release-interval`: a duration such as `5s` or `500ms`.
    pub release_interval: Option<String>,
    /// `--consistency`: the level sessions start with.
    pub consistency: Option<String>,
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
        users.extend(flags.users.unwrap_or_default());
        let mut tokens = file.http_tokens.unwrap_or_default();
        tokens.extend(flags.http_tokens.unwrap_or_default());
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
        let config = ServerConfig {
            memory_limit,
            partial_state,
            release_interval,
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
            tls_cert: flags.tls_cert.or(file.tls_cert),
            tls_key: flags.tls_key.or(file.tls_key),
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
        Ok(config)
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
}
