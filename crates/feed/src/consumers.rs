//! Named, durable consumers: each has a position (the LSN it needs next),
//! kept in the file `consumers` beside the log, and a retention hold on the
//! log at that position, so compaction keeps everything it still needs.
//! A consumer holding more than the configured cap (bytes of log, or time
//! since it last acknowledged) is dropped, its hold released, and told so
//! the next time it reads or acknowledges.
//!
//! The file (`docs/change-feed.md`): JSON, written whole through a temporary
//! file and a rename: `{"v": 1, "consumers": [{"name", "next_lsn",
//! "registered_micros", "acked_micros", "dropped"}]}` where `dropped` is
//! `null` or the reason.

use std::collections::BTreeMap;

use aqueduct_log::segment::write_atomically;
use aqueduct_log::{now_micros, Log, Lsn};
use parking_lot::Mutex;
use serde_json::{json, Value as Json};

use crate::{FeedError, FeedOptions};

const FILE: &str = "consumers";
const HOLD_PREFIX: &str = "consumer:";
/// Longest consumer name.
pub const MAX_CONSUMER_NAME_BYTES: usize = 128;

/// A durable consumer as `SHOW CONSUMERS` and `/metrics` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerInfo {
    pub name: String,
    /// The LSN it needs next: everything below is acknowledged.
    pub next_lsn: Lsn,
    /// LSNs committed past its position.
    pub lag: u64,
    pub registered_micros: i64,
    pub acked_micros: i64,
    /// Why it was dropped, if it was.
    pub dropped: Option<String>,
}

pub(crate) struct Consumers {
    all: Mutex<BTreeMap<String, ConsumerInfo>>,
}

impl Consumers {
    pub(crate) fn load(log: &Log) -> Result<Consumers, FeedError> {
        let storage = log.storage();
        let bytes = match storage.open(FILE) {
            Ok(f) => {
                let len = f.len().map_err(|e| FeedError::io("reading", e))?;
                f.read_vec(0, len as usize)
                    .map_err(|e| FeedError::io("reading", e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(FeedError::io("opening", e)),
        };
        let mut all = BTreeMap::new();
        if !bytes.is_empty() {
            let bad = |why: &str| FeedError::BadConsumerFile(why.to_string());
            let doc: Json = serde_json::from_slice(&bytes).map_err(|e| bad(&e.to_string()))?;
            if doc["v"] != 1 {
                return Err(bad("unknown version"));
            }
            for c in doc["consumers"].as_array().ok_or_else(|| bad("no list"))? {
                let info = ConsumerInfo {
                    name: c["name"].as_str().ok_or_else(|| bad("a name"))?.into(),
                    next_lsn: c["next_lsn"].as_u64().ok_or_else(|| bad("a position"))?,
                    lag: 0,
                    registered_micros: c["registered_micros"].as_i64().unwrap_or(0),
                    acked_micros: c["acked_micros"].as_i64().unwrap_or(0),
                    dropped: c["dropped"].as_str().map(str::to_string),
                };
                all.insert(info.name.clone(), info);
            }
        }
        Ok(Consumers {
            all: Mutex::new(all),
        })
    }

    /// Puts the holds of live consumers back on a freshly opened log.
    pub(crate) fn restore_holds(&self, log: &Log) -> Result<(), FeedError> {
        for c in self.all.lock().values().filter(|c| c.dropped.is_none()) {
            log.set_hold(&hold_name(&c.name), Some(c.next_lsn))?;
        }
        Ok(())
    }

    fn store(&self, log: &Log, all: &BTreeMap<String, ConsumerInfo>) -> Result<(), FeedError> {
        if log.options().read_only {
            return Ok(());
        }
        let list: Vec<Json> = all
            .values()
            .map(|c| {
                json!({
                    "name": c.name,
                    "next_lsn": c.next_lsn,
                    "registered_micros": c.registered_micros,
                    "acked_micros": c.acked_micros,
                    "dropped": c.dropped,
                })
            })
            .collect();
        let doc = json!({ "v": 1, "consumers": list });
        write_atomically(log.storage().as_ref(), FILE, doc.to_string().as_bytes())
            .map_err(|e| FeedError::io("writing", e))
    }

    pub(crate) fn register(
        &self,
        log: &Log,
        name: &str,
        from: Lsn,
    ) -> Result<ConsumerInfo, FeedError> {
        if name.is_empty()
            || name.len() > MAX_CONSUMER_NAME_BYTES
            || name.chars().any(|c| c.is_control())
        {
            return Err(FeedError::BadName(name.to_string()));
        }
        let mut all = self.all.lock();
        if let Some(c) = all.get(name) {
            if c.dropped.is_none() {
                return Ok(c.clone());
            }
        }
        log.set_hold(&hold_name(name), Some(from.max(1)))?;
        let now = now_micros();
        let info = ConsumerInfo {
            name: name.to_string(),
            next_lsn: from.max(1),
            lag: 0,
            registered_micros: now,
            acked_micros: now,
            dropped: None,
        };
        all.insert(name.to_string(), info.clone());
        self.store(log, &all)?;
        Ok(info)
    }

    pub(crate) fn unregister(&self, log: &Log, name: &str) -> Result<(), FeedError> {
        let mut all = self.all.lock();
        if all.remove(name).is_none() {
            return Err(FeedError::NoSuchConsumer(name.to_string()));
        }
        log.set_hold(&hold_name(name), None)?;
        self.store(log, &all)
    }

    pub(crate) fn get(&self, name: &str) -> Result<ConsumerInfo, FeedError> {
        let all = self.all.lock();
        let c = all
            .get(name)
            .ok_or_else(|| FeedError::NoSuchConsumer(name.to_string()))?;
        match &c.dropped {
            Some(reason) => Err(FeedError::ConsumerDropped {
                name: name.to_string(),
                reason: reason.clone(),
            }),
            None => Ok(c.clone()),
        }
    }

    pub(crate) fn ack(&self, log: &Log, name: &str, lsn: Lsn) -> Result<(), FeedError> {
        self.get(name)?;
        let mut all = self.all.lock();
        let c = all.get_mut(name).expect("checked above");
        if lsn < c.next_lsn {
            return Ok(());
        }
        c.next_lsn = lsn + 1;
        c.acked_micros = now_micros();
        log.set_hold(&hold_name(name), Some(c.next_lsn))?;
        self.store(log, &all)
    }

    pub(crate) fn list(&self) -> Vec<ConsumerInfo> {
        self.all.lock().values().cloned().collect()
    }

    /// Drops every live consumer past a cap.
    pub(crate) fn enforce(
        &self,
        log: &Log,
        options: &FeedOptions,
        caps_of: Option<&crate::CapsOf>,
    ) -> Result<(), FeedError> {
        if options.consumer_max_bytes.is_none()
            && options.consumer_max_age.is_none()
            && caps_of.is_none()
        {
            return Ok(());
        }
        let segments = log.segments();
        let now = now_micros();
        let mut all = self.all.lock();
        let mut changed = false;
        for c in all.values_mut().filter(|c| c.dropped.is_none()) {
            let held: u64 = segments
                .iter()
                .filter(|s| s.records > 0 && s.last_lsn >= c.next_lsn)
                .map(|s| s.bytes)
                .sum();
            let behind = log.committed_lsn() >= c.next_lsn;
            let idle = std::time::Duration::from_micros(now.saturating_sub(c.acked_micros) as u64);
            let own = caps_of.and_then(|f| f(&c.name)).unwrap_or_default();
            let max_bytes = own.max_bytes.or(options.consumer_max_bytes);
            let max_age = own.max_age.or(options.consumer_max_age);
            let reason = match (max_bytes, max_age) {
                (Some(max), _) if held > max => Some(format!(
                    "it held {held} bytes of log from LSN {} (the cap is {max} bytes)",
                    c.next_lsn
                )),
                (_, Some(max)) if behind && idle > max => Some(format!(
                    "it acknowledged nothing for {} s while behind (the cap is {} s)",
                    idle.as_secs(),
                    max.as_secs()
                )),
                _ => None,
            };
            if let Some(reason) = reason {
                tracing::warn!(consumer = %c.name, "dropping the change-feed consumer: {reason}");
                log.set_hold(&hold_name(&c.name), None)?;
                c.dropped = Some(reason);
                changed = true;
            }
        }
        if changed {
            self.store(log, &all)?;
        }
        Ok(())
    }
}

fn hold_name(consumer: &str) -> String {
    format!("{HOLD_PREFIX}{consumer}")
}
