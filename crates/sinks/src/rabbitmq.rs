//! RabbitMQ (the broker of Synapse): each applied transaction published to
//! a durable topic exchange (`aqueduct` unless the URL names another) with
//! routing key `{prefix}.{object}`, persistent (delivery mode 2),
//! `content_type` `application/json`, `message_id` the transaction's
//! `txid`, under publisher confirms: a batch counts as applied once the
//! broker confirmed each of its messages. At least once: the position is
//! stored apart (`docs/publications.md` §5.4), in a state directory, after
//! the confirms; a crash or a retried batch publishes again, and consumers
//! guard with `message_id` or each change's `version` and
//! `prev_version`.
//!
//! A transaction touching several objects is published as one message per
//! object, in the order the objects first appear in it, each the
//! transaction's wire line (§4) holding only that object's changes, all
//! with the same `message_id`: the pair (`message_id`, routing key) names
//! a message. A schema change goes to its object's routing key as its wire
//! line, `message_id` `schema:{lsn}:{seq}`.
//!
//! The prefix is the URL's `routing_prefix` or else the subscription's
//! name (the sink is not told the publication's: give
//! `routing_prefix={publication}` for `{publication}.{object}`). Messages
//! no queue is bound for are confirmed and dropped by the broker: bind
//! queues before the subscription starts.
//!
//! The messages of one batch are published back to back, then their
//! confirms awaited; a nack (the broker could not store one) fails the
//! batch, and its retry may put the nacked transaction after later ones.
//!
//! Errors: lost or refused connections, missed heartbeats, nacks, timeouts
//! and broker errors other than those below are transient; AMQP 311
//! (content too large), 403 (access refused), 404 (not found), 406
//! (precondition failed: the exchange exists with another type) and 530
//! (not allowed) are permanent. The sink reconnects on the next call after
//! a failure.
//!
//! The client is `lapin` on a one-thread tokio runtime owned by the sink
//! (it keeps the connection's heartbeats going between calls). Plain
//! `amqp://` only (no TLS).

use std::path::PathBuf;
use std::time::Duration;

use aqueduct_publish::{TxnMessage, WireMessage};
use aqueduct_subscribe::{Item, Record, Sink, SinkError};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::uri::AMQPUri;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};

use crate::classified;
use crate::state_dir::{message_id, state_dir_methods, wire_line, StateDir};

/// How long connecting, and each batch's publishes and confirms, may take
/// before the attempt counts as a transient failure.
pub const RABBITMQ_TIMEOUT: Duration = Duration::from_secs(30);

/// The exchange when the URL names none.
pub const DEFAULT_EXCHANGE: &str = "aqueduct";

/// A parsed `amqp://user:pass@host:port/vhost[?exchange=..&routing_prefix=..]`.
#[derive(Clone, Debug)]
pub struct RabbitMqUrl {
    /// What the client connects to (other query parameters, such as
    /// `heartbeat`, are the client's).
    pub uri: AMQPUri,
    /// The exchange.
    pub exchange: String,
    /// The routing keys' prefix, when given.
    pub routing_prefix: Option<String>,
}

impl RabbitMqUrl {
    /// Parses an `amqp://` URL with the sink's own query parameters
    /// `exchange` and `routing_prefix`.
    pub fn parse(url: &str) -> Result<RabbitMqUrl, String> {
        let rest = url
            .strip_prefix("amqp://")
            .ok_or_else(|| format!("only amqp:// URLs are supported, not {}", redact(url)))?;
        let mut uri: AMQPUri = url.parse().map_err(|e| format!("{}: {e}", redact(url)))?;
        // The URI parser takes a host only when it is a domain name: keep
        // an address as written.
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = match host_port.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => h,
            _ => host_port,
        };
        if host.is_empty() {
            return Err(format!("{}: no host", redact(url)));
        }
        uri.authority.host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let param = |name: &str| {
            query.split('&').find_map(|p| {
                p.strip_prefix(name)
                    .and_then(|v| v.strip_prefix('='))
                    .map(str::to_string)
            })
        };
        let exchange = param("exchange").unwrap_or_else(|| DEFAULT_EXCHANGE.to_string());
        if exchange.is_empty() {
            return Err(format!("{}: the exchange may not be empty", redact(url)));
        }
        Ok(RabbitMqUrl {
            uri,
            exchange,
            routing_prefix: param("routing_prefix").filter(|p| !p.is_empty()),
        })
    }
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if s < at => {
            let cred = &url[s + 3..at];
            match cred.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// An AMQP error's class (see the module's text).
fn amqp_error(what: &str, e: lapin::Error) -> SinkError {
    let transient = match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => ![311, 403, 404, 406, 530].contains(&p.get_id()),
        lapin::ErrorKind::InvalidProtocolVersion(_) | lapin::ErrorKind::AuthProviderError(_) => {
            false
        }
        _ => true,
    };
    classified(transient, format!("RabbitMQ, {what}: {e}"))
}

/// A sink publishing each applied item to a RabbitMQ exchange.
pub struct RabbitMqSink {
    url: RabbitMqUrl,
    prefix: String,
    timeout: Duration,
    runtime: tokio::runtime::Runtime,
    /// The connection and its channel in confirm mode, once opened.
    open: Option<(Connection, Channel)>,
    state: StateDir,
}

/// One message: routing key, message id, body.
type Message = (String, String, String);

impl RabbitMqSink {
    /// Publishes for the subscription `name` through the broker at `url`
    /// (`amqp://user:pass@host:port/vhost[?exchange=..&routing_prefix=..]`);
    /// the position kept in `state_dir`, created if missing. Connects and
    /// declares the exchange at once; a failure there is returned.
    pub fn connect(
        url: &str,
        name: &str,
        state_dir: impl Into<PathBuf>,
    ) -> Result<RabbitMqSink, SinkError> {
        let url = RabbitMqUrl::parse(url).map_err(SinkError::permanent)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("aq-rabbitmq")
            .enable_all()
            .build()
            .map_err(|e| SinkError::permanent(format!("a runtime for RabbitMQ: {e}")))?;
        let mut sink = RabbitMqSink {
            prefix: url
                .routing_prefix
                .clone()
                .unwrap_or_else(|| name.to_string()),
            url,
            timeout: RABBITMQ_TIMEOUT,
            runtime,
            open: None,
            state: StateDir::open(state_dir)?,
        };
        sink.channel()?;
        Ok(sink)
    }

    /// The exchange messages go to.
    pub fn exchange(&self) -> &str {
        &self.url.exchange
    }

    /// The routing keys' prefix.
    pub fn routing_prefix(&self) -> &str {
        &self.prefix
    }

    /// The channel, connecting and declaring the exchange if there is
    /// none.
    fn channel(&mut self) -> Result<Channel, SinkError> {
        if let Some((_, ch)) = &self.open {
            if ch.status().connected() {
                return Ok(ch.clone());
            }
        }
        self.open = None;
        let (uri, exchange, timeout) = (
            self.url.uri.clone(),
            self.url.exchange.clone(),
            self.timeout,
        );
        let opened = self.runtime.block_on(async move {
            let work = async {
                let conn = Connection::connect_uri(uri, ConnectionProperties::default())
                    .await
                    .map_err(|e| amqp_error("connecting", e))?;
                let ch = conn
                    .create_channel()
                    .await
                    .map_err(|e| amqp_error("opening a channel", e))?;
                ch.confirm_select(ConfirmSelectOptions::default())
                    .await
                    .map_err(|e| amqp_error("turning on publisher confirms", e))?;
                let options = ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                };
                ch.exchange_declare(
                    exchange.as_str().into(),
                    ExchangeKind::Topic,
                    options,
                    FieldTable::default(),
                )
                .await
                .map_err(|e| amqp_error(&format!("declaring the exchange {exchange}"), e))?;
                Ok::<_, SinkError>((conn, ch))
            };
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or_else(|_| Err(SinkError::transient("RabbitMQ: connecting timed out")))
        })?;
        let ch = opened.1.clone();
        self.open = Some(opened);
        Ok(ch)
    }

    /// The messages of an item, in order.
    fn messages(&self, item: &Item) -> Vec<Message> {
        let Some(id) = message_id(item) else {
            return Vec::new();
        };
        match item {
            Item::Txn(t) => split_by_object(t)
                .into_iter()
                .map(|(object, part)| {
                    let body = WireMessage::Txn(part).to_line();
                    (format!("{}.{object}", self.prefix), id.clone(), body)
                })
                .collect(),
            Item::Schema(s, _) => {
                let body = wire_line(item).expect("a schema change has a line");
                vec![(format!("{}.{}", self.prefix, s.object), id, body)]
            }
            Item::Skip { .. } => Vec::new(),
        }
    }

    fn publish(&mut self, messages: Vec<Message>) -> Result<(), SinkError> {
        let ch = self.channel()?;
        let exchange = self.url.exchange.clone();
        let timeout = self.timeout;
        self.runtime.block_on(async move {
            let work = async {
                let mut confirms = Vec::with_capacity(messages.len());
                for (key, id, body) in messages {
                    let properties = BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_content_type("application/json".into())
                        .with_message_id(id.as_str().into());
                    let confirm = ch
                        .basic_publish(
                            exchange.as_str().into(),
                            key.as_str().into(),
                            BasicPublishOptions::default(),
                            body.as_bytes(),
                            properties,
                        )
                        .await
                        .map_err(|e| amqp_error(&format!("publishing {id}"), e))?;
                    confirms.push((id, confirm));
                }
                for (id, confirm) in confirms {
                    match confirm
                        .await
                        .map_err(|e| amqp_error(&format!("confirming {id}"), e))?
                    {
                        Confirmation::Ack(_) => {}
                        Confirmation::Nack(_) => {
                            return Err(SinkError::transient(format!(
                                "RabbitMQ could not take {id} (nack)"
                            )))
                        }
                        Confirmation::NotRequested => {
                            return Err(SinkError::transient(format!(
                                "RabbitMQ did not confirm {id}"
                            )))
                        }
                    }
                }
                Ok(())
            };
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or_else(|_| Err(SinkError::transient("RabbitMQ: no confirm in time")))
        })
    }
}

/// A transaction as one part per object, in the order the objects first
/// appear, each with only that object's changes.
fn split_by_object(t: &TxnMessage) -> Vec<(String, TxnMessage)> {
    let mut parts: Vec<(String, TxnMessage)> = Vec::new();
    for c in &t.changes {
        match parts.iter_mut().find(|(o, _)| *o == c.object) {
            Some((_, part)) => part.changes.push(c.clone()),
            None => {
                let mut part = TxnMessage {
                    changes: Vec::new(),
                    ..t.clone()
                };
                part.changes.push(c.clone());
                parts.push((c.object.clone(), part));
            }
        }
    }
    parts
}

impl Sink for RabbitMqSink {
    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        let messages: Vec<Message> = items.iter().flat_map(|i| self.messages(i)).collect();
        if !messages.is_empty() {
            if let Err(e) = self.publish(messages) {
                self.open = None;
                return Err(e);
            }
        }
        self.state.delivered(record)
    }

    state_dir_methods!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = RabbitMqUrl::parse("amqp://u:p@127.0.0.1:5673/%2f?exchange=ex&routing_prefix=pub")
            .unwrap();
        assert_eq!(u.uri.authority.host, "127.0.0.1");
        assert_eq!(u.uri.authority.port, 5673);
        assert_eq!(u.uri.authority.userinfo.username, "u");
        assert_eq!(u.uri.vhost, "/");
        assert_eq!(u.exchange, "ex");
        assert_eq!(u.routing_prefix.as_deref(), Some("pub"));
        let u = RabbitMqUrl::parse("amqp://h").unwrap();
        assert_eq!(
            (u.uri.authority.host.as_str(), u.uri.authority.port),
            ("h", 5672)
        );
        assert_eq!(u.exchange, DEFAULT_EXCHANGE);
        assert_eq!(u.routing_prefix, None);
        for bad in ["amqps://h", "http://h", "amqp://", "amqp://h?exchange="] {
            assert!(RabbitMqUrl::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(redact("amqp://u:secret@h/v"), "amqp://u:***@h/v");
    }
}
