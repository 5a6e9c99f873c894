//! A subscriber's position in the feed: it reads from the feed's memory
//! while it keeps up, and from the log when it has fallen behind what memory
//! holds ("paused from the log"), so a slow subscriber never holds memory or
//! slows writers. Past the feed's lag limit it is cut off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::Lsn;
use aqueduct_tables::TableId;

use crate::feed::Feed;
use crate::log_source::LogSource;
use crate::message::ChangeMessage;
use crate::FeedError;

/// Receives committed transactions in LSN order, each once.
pub struct Subscription {
    pub(crate) feed: Arc<Feed>,
    pub(crate) next: Lsn,
    pub(crate) tables: Option<Vec<TableId>>,
    pub(crate) source: Option<LogSource>,
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
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(name) = &self.consumer {
                self.feed.check_consumer(name)?;
            }
            let msg = match self.source.as_mut() {
                Some(source) => {
                    self.feed.check_lag(self.next)?;
                    if self.next >= self.feed.memory_start() {
                        self.source = None;
                        continue;
                    }
                    match source.next()? {
                        Some(m) => Arc::new(m),
                        // What the log has is read; memory takes over.
                        None => {
                            self.source = None;
                            continue;
                        }
                    }
                }
                None => match self.feed.read_memory(self.next, deadline)? {
                    crate::feed::FromMemory::Message(m) => m,
                    crate::feed::FromMemory::Nothing => return Ok(None),
                    crate::feed::FromMemory::Behind => {
                        self.feed.check_start(self.next)?;
                        self.source = Some(LogSource::new(
                            self.feed.log(),
                            self.next,
                            self.feed.table_infos(),
                        ));
                        continue;
                    }
                },
            };
            self.feed.log().await_committed(msg.lsn)?;
            self.next = msg.lsn + 1;
            self.feed
                .metrics
                .delivered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(Some(msg.filtered(self.tables.as_deref())));
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
