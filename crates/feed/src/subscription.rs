//! A subscriber's position in the feed: it reads from the feed's memory
//! while it keeps up, and from the log when it has fallen behind what memory
//! holds ("paused from the log"), so a slow subscriber never holds memory or
//! slows writers. Past the feed's lag limit it is cut off.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::Lsn;
use aqueduct_tables::TableId;

use crate::feed::{Feed, FromMemory};
use crate::log_source::LogSource;
use crate::message::ChangeMessage;
use crate::FeedError;

/// Messages a subscription takes from memory at once: a subscriber woken
/// by a commit takes every message since, not one per wake-up.
pub const RECV_BATCH: usize = 256;

/// Receives committed transactions in LSN order, each once.
pub struct Subscription {
    pub(crate) feed: Arc<Feed>,
    pub(crate) next: Lsn,
    pub(crate) tables: Option<Vec<TableId>>,
    pub(crate) source: Option<LogSource>,
    /// Fetched and not yet handed out (at most [`RECV_BATCH`]).
    pub(crate) buffered: VecDeque<Arc<ChangeMessage>>,
    /// Where fetching goes on: past `buffered`.
    pub(crate) fetch_from: Lsn,
    /// The named consumer this subscription reads for, if any.
    pub(crate) consumer: Option<String>,
    pub(crate) _active: crate::feed::ActiveGuard,
}

impl Subscription {
    /// The LSN from which the next message's transaction begins (at least).
    pub fn next_lsn(&self) -> Lsn {
        self.next
    }

    /// Whether the subscription reads the log rather than memory.
    pub fn reading_log(&self) -> bool {
        self.source.is_some()
    }

    /// The next message, waiting up to `timeout` for one; `None` when none
    /// came. A message is handed out once its transaction is durable.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Arc<ChangeMessage>>, FeedError> {
        if let Some(name) = &self.consumer {
            self.feed.check_consumer(name)?;
        }
        if self.buffered.is_empty() {
            self.fill(timeout)?;
        }
        let Some(msg) = self.buffered.pop_front() else {
            return Ok(None);
        };
        self.feed.await_visible(msg.lsn)?;
        self.next = msg.lsn + 1;
        self.feed
            .metrics
            .delivered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(msg.filtered(self.tables.as_deref())))
    }

    /// Fetches the next messages into `buffered`: up to [`RECV_BATCH`]
    /// from memory under one lock, or one from the log; waits up to
    /// `timeout` when there are none yet.
    fn fill(&mut self, timeout: Duration) -> Result<(), FeedError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.source.as_mut() {
                Some(source) => {
                    self.feed.check_lag(self.fetch_from)?;
                    if self.fetch_from >= self.feed.memory_start() {
                        self.source = None;
                        continue;
                    }
                    match source.next()? {
                        Some(m) => {
                            self.fetch_from = m.lsn + 1;
                            self.buffered.push_back(Arc::new(m));
                            return Ok(());
                        }
                        // What the log has is read; memory takes over.
                        None => self.source = None,
                    }
                }
                None => match self
                    .feed
                    .read_memory(self.fetch_from, RECV_BATCH, deadline)?
                {
                    FromMemory::Messages(ms) => {
                        self.fetch_from = ms.last().map_or(self.fetch_from, |m| m.lsn + 1);
                        self.buffered.extend(ms);
                        return Ok(());
                    }
                    FromMemory::Nothing => return Ok(()),
                    FromMemory::Behind => {
                        self.feed.check_start(self.fetch_from)?;
                        self.source = Some(LogSource::new(
                            self.feed.log(),
                            self.fetch_from,
                            self.feed.table_infos(),
                        ));
                    }
                },
            }
        }
    }

    /// Tells the feed that everything up to and including `lsn` is done
    /// with, for a named consumer: the log may then drop it.
    pub fn ack(&self, lsn: Lsn) -> Result<(), FeedError> {
        match &self.consumer {
            Some(name) => self.feed.ack(name, lsn),
            None => Ok(()),
        }
    }
}
