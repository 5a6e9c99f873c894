//! A sink named on a command line, and opening it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use aqueduct_subscribe::{Sink, SinkError};

use crate::jsonl::JsonLinesSink;
use crate::mariadb::MariaDbSink;
use crate::nats::{NatsSink, NatsUrl};
use crate::postgres::PostgresSink;
use crate::rabbitmq::{redact, RabbitMqSink, RabbitMqUrl};
use crate::redis::RedisSink;
use crate::sqlite::SqliteSink;
use crate::webhook::{WebhookSink, WebhookUrl};

/// The forms [`SinkSpec`] accepts, for error messages and help texts.
pub const SINK_FORMS: &str = "sqlite:/path/file.db, postgres://..., postgresql://..., \
     postgres:host=... port=..., mariadb://user@host:port/db, mysql://user@host:port/db, \
     redis://host:port[/db], stdout, jsonl:/path/file, \
     webhook:http://host:port/path[?per_change=1], nats://host:port[/subject-prefix], \
     amqp://user:pass@host:port/vhost[?exchange=..&routing_prefix=..]";

/// Where a subscriber writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkSpec {
    /// `sqlite:/path/file.db`.
    Sqlite(PathBuf),
    /// `postgres://...`, `postgresql://...` (kept whole), or
    /// `postgres:host=... port=...` (the pairs after the prefix).
    Postgres(String),
    /// `mariadb://user[:password]@host:port/db` or `mysql://...` (kept
    /// whole).
    MariaDb(String),
    /// `redis://host:port[/db]` (kept whole).
    Redis(String),
    /// `stdout`: JSON lines on standard output.
    Stdout,
    /// `jsonl:/path/file`: JSON lines appended to a file.
    JsonLines(PathBuf),
    /// `webhook:http://host:port/path[?per_change=1]`: an HTTP POST per
    /// applied item (the URL kept whole, checked when parsed).
    Webhook(String),
    /// `nats://[user:pass@]host:port[/subject-prefix]`: a NATS JetStream
    /// message per applied item (the URL kept whole, checked when parsed).
    Nats(String),
    /// `amqp://user:pass@host:port/vhost[?exchange=..&routing_prefix=..]`:
    /// RabbitMQ messages (the URL kept whole, checked when parsed).
    RabbitMq(String),
}

/// A spec that names no sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadSinkSpec(pub String);

impl fmt::Display for BadSinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown sink {:?}: expected one of {SINK_FORMS}", self.0)
    }
}

impl std::error::Error for BadSinkSpec {}

impl FromStr for SinkSpec {
    type Err = BadSinkSpec;

    fn from_str(s: &str) -> Result<SinkSpec, BadSinkSpec> {
        let bad = || BadSinkSpec(s.to_string());
        let non_empty = |rest: &str| {
            let rest = rest.trim();
            if rest.is_empty() {
                Err(bad())
            } else {
                Ok(rest.to_string())
            }
        };
        if s.trim() == "stdout" {
            Ok(SinkSpec::Stdout)
        } else if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(SinkSpec::Postgres(s.to_string()))
        } else if s.starts_with("mariadb://") || s.starts_with("mysql://") {
            Ok(SinkSpec::MariaDb(s.to_string()))
        } else if s.starts_with("redis://") {
            Ok(SinkSpec::Redis(s.to_string()))
        } else if let Some(rest) = s.strip_prefix("postgres:") {
            Ok(SinkSpec::Postgres(non_empty(rest)?))
        } else if let Some(rest) = s.strip_prefix("sqlite:") {
            Ok(SinkSpec::Sqlite(PathBuf::from(non_empty(rest)?)))
        } else if let Some(rest) = s.strip_prefix("jsonl:") {
            Ok(SinkSpec::JsonLines(PathBuf::from(non_empty(rest)?)))
        } else if let Some(rest) = s.strip_prefix("webhook:") {
            let url = non_empty(rest)?;
            WebhookUrl::parse(&url).map_err(|_| bad())?;
            Ok(SinkSpec::Webhook(url))
        } else if s.starts_with("nats://") {
            NatsUrl::parse(s).map_err(|_| bad())?;
            Ok(SinkSpec::Nats(s.to_string()))
        } else if s.starts_with("amqp://") {
            RabbitMqUrl::parse(s).map_err(|_| bad())?;
            Ok(SinkSpec::RabbitMq(s.to_string()))
        } else {
            Err(bad())
        }
    }
}

impl SinkSpec {
    /// Whether the sink keeps its position in a state directory (the
    /// message sinks) rather than in its own database.
    pub fn needs_state_dir(&self) -> bool {
        !matches!(
            self,
            SinkSpec::Sqlite(_) | SinkSpec::Postgres(_) | SinkSpec::MariaDb(_) | SinkSpec::Redis(_)
        )
    }

    /// Opens the sink for the subscription `name`; `state_dir` is required
    /// by the sinks that keep their position in files.
    pub fn open(
        &self,
        name: &str,
        state_dir: Option<&Path>,
    ) -> Result<Box<dyn Sink + Send>, SinkError> {
        let state = || {
            state_dir.ok_or_else(|| {
                SinkError::permanent(format!(
                    "the sink {self} keeps its position in files: a state directory is needed"
                ))
            })
        };
        Ok(match self {
            SinkSpec::Sqlite(path) => Box::new(SqliteSink::open(path, name)?),
            SinkSpec::Postgres(config) => Box::new(PostgresSink::connect(config, name)?),
            SinkSpec::MariaDb(url) => Box::new(MariaDbSink::connect(url, name)?),
            SinkSpec::Redis(url) => Box::new(RedisSink::connect(url, name)?),
            SinkSpec::Stdout => Box::new(JsonLinesSink::stdout(state()?)?),
            SinkSpec::JsonLines(path) => Box::new(JsonLinesSink::file(path, state()?)?),
            SinkSpec::Webhook(url) => Box::new(WebhookSink::new(url, state()?)?),
            SinkSpec::Nats(url) => Box::new(NatsSink::connect(url, name, state()?)?),
            SinkSpec::RabbitMq(url) => Box::new(RabbitMqSink::connect(url, name, state()?)?),
        })
    }
}

impl fmt::Display for SinkSpec {
    /// The spec as parsed back; connection strings and URLs are not shown,
    /// as they may hold a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkSpec::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            SinkSpec::Postgres(_) => write!(f, "postgres"),
            SinkSpec::MariaDb(_) => write!(f, "mariadb"),
            SinkSpec::Redis(_) => write!(f, "redis"),
            SinkSpec::Stdout => write!(f, "stdout"),
            SinkSpec::JsonLines(p) => write!(f, "jsonl:{}", p.display()),
            SinkSpec::Webhook(url) => write!(f, "webhook:{url}"),
            SinkSpec::Nats(url) => match NatsUrl::parse(url) {
                Ok(u) => write!(f, "nats://{}/{}", u.addr, u.prefix),
                Err(_) => write!(f, "nats"),
            },
            SinkSpec::RabbitMq(url) => write!(f, "{}", redact(url)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let p = |s: &str| s.parse::<SinkSpec>();
        assert_eq!(
            p("sqlite:/tmp/a.db"),
            Ok(SinkSpec::Sqlite("/tmp/a.db".into()))
        );
        assert_eq!(
            p("postgres://u@h/db"),
            Ok(SinkSpec::Postgres("postgres://u@h/db".into()))
        );
        assert_eq!(
            p("postgresql://h/db"),
            Ok(SinkSpec::Postgres("postgresql://h/db".into()))
        );
        assert_eq!(
            p("postgres:host=127.0.0.1 port=5432"),
            Ok(SinkSpec::Postgres("host=127.0.0.1 port=5432".into()))
        );
        assert_eq!(
            p("mariadb://u:pw@127.0.0.1:3306/db"),
            Ok(SinkSpec::MariaDb("mariadb://u:pw@127.0.0.1:3306/db".into()))
        );
        assert_eq!(
            p("mysql://u@h/db"),
            Ok(SinkSpec::MariaDb("mysql://u@h/db".into()))
        );
        assert_eq!(
            p("redis://127.0.0.1:6379/2"),
            Ok(SinkSpec::Redis("redis://127.0.0.1:6379/2".into()))
        );
        assert_eq!(
            p("redis://h:6379"),
            Ok(SinkSpec::Redis("redis://h:6379".into()))
        );
        assert_eq!(p("mysql://u:pw@h/db").unwrap().to_string(), "mariadb");
        assert_eq!(p("redis://h:1").unwrap().to_string(), "redis");
        assert_eq!(p("stdout"), Ok(SinkSpec::Stdout));
        assert_eq!(
            p("jsonl:out.jsonl"),
            Ok(SinkSpec::JsonLines("out.jsonl".into()))
        );
        assert_eq!(
            p("webhook:http://127.0.0.1:9/hook?per_change=1"),
            Ok(SinkSpec::Webhook(
                "http://127.0.0.1:9/hook?per_change=1".into()
            ))
        );
        assert_eq!(
            p("nats://127.0.0.1:4222/app.events"),
            Ok(SinkSpec::Nats("nats://127.0.0.1:4222/app.events".into()))
        );
        assert_eq!(
            p("nats://u:secret@h").unwrap().to_string(),
            "nats://h:4222/aqueduct"
        );
        assert_eq!(
            p("amqp://u:pw@127.0.0.1:5672/%2f?exchange=x"),
            Ok(SinkSpec::RabbitMq(
                "amqp://u:pw@127.0.0.1:5672/%2f?exchange=x".into()
            ))
        );
        assert_eq!(
            p("amqp://u:pw@h/v").unwrap().to_string(),
            "amqp://u:***@h/v"
        );
        for bad in [
            "",
            "amqp://",
            "amqps://h/v",
            "nats://",
            "nats://h/a b",
            "webhook:",
            "webhook:https://h/x",
            "sqlite:",
            "jsonl:",
            "postgres:",
            "redis:x",
            "mysql:db",
            "mariadb:db",
            "rediss://x",
        ] {
            let err = p(bad).unwrap_err().to_string();
            assert!(
                err.contains("sqlite:/path/file.db")
                    && err.contains("mariadb://")
                    && err.contains("redis://")
                    && err.contains("stdout"),
                "{err}"
            );
        }
    }

    #[test]
    fn opens() {
        let dir = std::env::temp_dir().join(format!("aq-sinkspec-{}", std::process::id()));
        let db = dir.join("x.db");
        std::fs::create_dir_all(&dir).unwrap();
        let spec: SinkSpec = format!("sqlite:{}", db.display()).parse().unwrap();
        let sink = spec.open("s", None).unwrap();
        assert_eq!(sink.resume().unwrap(), Default::default());
        let spec: SinkSpec = "stdout".parse().unwrap();
        assert!(spec.needs_state_dir());
        assert!(spec.open("s", None).is_err());
        let jsonl: SinkSpec = format!("jsonl:{}", dir.join("o.jsonl").display())
            .parse()
            .unwrap();
        assert!(jsonl.open("s", Some(&dir.join("state"))).is_ok());
        let hook: SinkSpec = "webhook:http://127.0.0.1:9/h".parse().unwrap();
        assert!(hook.needs_state_dir());
        assert!(hook.open("s", None).is_err());
        assert!(hook.open("s", Some(&dir.join("hook"))).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
