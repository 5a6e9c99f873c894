//! Mirroring a data directory in process, without a server: replay the log
//! into tables (the same decoding and [`Catalog::apply_batch`] the server
//! uses at start-up), load the mirror from them, then hand it each later
//! batch as changes.
//!
//! All log reading goes through [`LogTail::read`]. Today it opens the log
//! read-only for each read, which takes the directory's lock: it works on
//! the directory of a stopped server (a running one holds the lock and the
//! read fails with [`aqueduct_log::Error::Locked`], retried on the next
//! poll). A reader that follows a directory a server is writing, without
//! the lock, replaces that one function.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aqueduct_log::{Log, Lsn, Options, RecordView};
use aqueduct_tables::{AppliedBatch, Batch, BatchBuilder, Catalog, SchemaChange, TableId};

use crate::{Error, Mirror, MirrorChange, Op, Position, RowChange, TableInfo};

/// Where the log in a directory is read from.
struct LogTail {
    dir: PathBuf,
}

/// Why a read stopped early.
enum ReadError {
    /// The log no longer holds every record from the LSN asked for
    /// (compaction went past it): start over from the beginning.
    Gone {
        from: Lsn,
        exact_from: Lsn,
    },
    Other(Error),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> ReadError {
        ReadError::Other(e)
    }
}

impl LogTail {
    /// Calls `f` with every committed record from LSN `from` on, in order.
    /// Fails with [`ReadError::Gone`] when records from `from` on may be
    /// missing (a read from 1 never is: a compacted log still rebuilds the
    /// tables exactly).
    fn read(
        &mut self,
        from: Lsn,
        f: &mut dyn FnMut(&RecordView<'_>) -> Result<(), Error>,
    ) -> Result<(), ReadError> {
        let opts = Options {
            read_only: true,
            ..Options::default()
        };
        let (log, _) = Log::open(&self.dir, opts).map_err(Error::from)?;
        let exact_from = log.exact_from();
        if from > 1 && from < exact_from {
            return Err(ReadError::Gone { from, exact_from });
        }
        let mut failed = None;
        let read = log.replay(from, |r| {
            f(&r).map_err(|e| {
                failed = Some(e);
                aqueduct_log::Error::Invalid("stopped".into())
            })
        });
        match (read, failed) {
            (_, Some(e)) => Err(e.into()),
            (Err(e), None) => Err(Error::from(e).into()),
            (Ok(_), None) => Ok(()),
        }
    }
}

/// Keeps a [`Mirror`] up to date from a data directory (see the module
/// documentation for what it can read today). It keeps its own copy of the
/// tables (persistent trees, as the server's), from which it loads the
/// mirror and takes each change's old row.
pub struct DirFollower<M: Mirror> {
    tail: LogTail,
    mirror: M,
    tables_wanted: Option<Vec<String>>,
    catalog: Catalog,
    batches: BatchBuilder,
    /// Tables by id as of what is applied.
    infos: HashMap<TableId, Arc<TableInfo>>,
    /// The last LSN handed to the mirror; `None`: bootstrap next.
    lsn: Option<Lsn>,
    /// A position to resume at: batches up to it are replayed into the
    /// tables only.
    resume_at: Option<Lsn>,
}

impl<M: Mirror> DirFollower<M> {
    /// A follower of the log in `dir` that bootstraps `mirror` on its first
    /// poll.
    pub fn new(dir: impl AsRef<Path>, mirror: M) -> DirFollower<M> {
        DirFollower {
            tail: LogTail {
                dir: dir.as_ref().to_path_buf(),
            },
            mirror,
            tables_wanted: None,
            catalog: Catalog::default(),
            batches: BatchBuilder::default(),
            infos: HashMap::new(),
            lsn: None,
            resume_at: None,
        }
    }

    /// A follower for a mirror that holds everything up to `position`: the
    /// log is replayed into the follower's tables up to it, and the mirror
    /// gets what follows (or is reset and bootstrapped again when the log
    /// no longer holds every record after it, or does not reach it).
    pub fn resume(dir: impl AsRef<Path>, mirror: M, position: Position) -> DirFollower<M> {
        let mut f = DirFollower::new(dir, mirror);
        if position.lsn == 0 {
            // Bootstrapped from an empty log: everything is to be handed over.
            f.lsn = Some(0);
        } else {
            f.resume_at = Some(position.lsn);
        }
        f
    }

    /// Mirror only these tables.
    pub fn with_tables(mut self, names: Vec<String>) -> DirFollower<M> {
        self.tables_wanted = Some(names);
        self
    }

    pub fn position(&self) -> Option<Position> {
        let lsn = self.lsn?;
        let mut tables: Vec<TableInfo> = self
            .infos
            .values()
            .filter(|t| self.wanted(&t.name))
            .map(|t| (**t).clone())
            .collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Some(Position { lsn, tables })
    }

    pub fn mirror(&self) -> &M {
        &self.mirror
    }

    pub fn mirror_mut(&mut self) -> &mut M {
        &mut self.mirror
    }

    pub fn into_mirror(self) -> M {
        self.mirror
    }

    fn wanted(&self, name: &str) -> bool {
        self.tables_wanted
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == name))
    }

    /// Polls every `period` until `stop` is set, logging failures.
    pub fn run_until(&mut self, stop: &AtomicBool, period: Duration) {
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.poll_once() {
                tracing::warn!(error = %e, "mirror: reading the log directory failed; retrying");
            }
            std::thread::sleep(period);
        }
    }

    /// Reads what the log holds past what is applied: the first poll
    /// bootstraps the mirror; later ones hand it each new transaction.
    /// Returns the number of transactions handed over (a bootstrap counts
    /// as one).
    pub fn poll_once(&mut self) -> Result<usize, Error> {
        match self.read() {
            Ok(n) => Ok(n),
            Err(ReadError::Gone { from, exact_from }) => {
                tracing::info!(
                    from,
                    exact_from,
                    "mirror: the log no longer holds every record after the mirror's position; \
                     bootstrapping again"
                );
                self.start_over();
                self.read().map_err(|e| match e {
                    ReadError::Other(e) => e,
                    ReadError::Gone { .. } => unreachable!("a read from LSN 1 is never gone"),
                })
            }
            Err(ReadError::Other(e)) => Err(e),
        }
    }

    /// Forgets the follower's tables: the next read starts from LSN 1 and
    /// bootstraps the mirror.
    fn start_over(&mut self) {
        self.catalog = Catalog::default();
        self.batches = BatchBuilder::default();
        self.infos.clear();
        self.lsn = None;
        self.resume_at = None;
    }

    fn read(&mut self) -> Result<usize, ReadError> {
        let from = self.catalog.lsn() + 1;
        let mut batches = Vec::new();
        let mut handed = 0;
        // Batches are applied as they are read, so memory holds one at a time.
        let mut tail = LogTail {
            dir: self.tail.dir.clone(),
        };
        let mut err = None;
        tail.read(from, &mut |r| {
            match self.batches.push(r) {
                Ok(Some(b)) => batches.push(b),
                Ok(None) => {}
                Err(reason) => {
                    return Err(Error::BadRecord { lsn: r.lsn, reason });
                }
            }
            for b in batches.drain(..) {
                match self.batch(&b) {
                    Ok(n) => handed += n,
                    Err(e) => err = Some(e),
                }
            }
            Ok(())
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        if let Some(p) = self.resume_at {
            // The log ends before the mirror's position: it is not the log
            // the mirror came from (or it lost its tail). Start over.
            if self.catalog.lsn() < p {
                tracing::warn!(
                    position = p,
                    log_end = self.catalog.lsn(),
                    "mirror: the log ends before the mirror's position; bootstrapping again"
                );
                self.start_over();
                return self.read();
            }
        }
        if self.lsn.is_none() && self.resume_at.is_none() {
            self.load();
            handed += 1;
        }
        Ok(handed)
    }

    /// Applies one batch to the follower's tables, and hands its changes to
    /// the mirror once bootstrapped.
    fn batch(&mut self, b: &Batch) -> Result<usize, ReadError> {
        let applied = self.catalog.apply_batch(b);
        if let Some(p) = self.resume_at {
            if b.last <= p {
                self.learn(&applied, false);
                if b.last == p {
                    self.resume_at = None;
                    self.lsn = Some(p);
                }
                return Ok(0);
            }
            // The position is inside this batch: not a position of this log.
            return Err(ReadError::Gone {
                from: p + 1,
                exact_from: b.first,
            });
        }
        if self.lsn.is_none() {
            self.learn(&applied, false);
            return Ok(0);
        }
        self.learn(&applied, true);
        self.lsn = Some(b.last);
        self.mirror.committed(b.last);
        Ok(1)
    }

    /// Follows a batch's schema changes in `infos`, and hands its changes
    /// to the mirror in LSN order when `hand` is set.
    fn learn(&mut self, applied: &AppliedBatch, hand: bool) {
        let mut schema = applied.schema.iter().peekable();
        let mut rows = applied.changes.iter().peekable();
        loop {
            let next_schema = schema.peek().map(|(l, _)| *l);
            let next_row = rows.peek().map(|c| c.lsn);
            let change = match (next_schema, next_row) {
                (None, None) => return,
                (Some(s), r) if r.is_none_or(|r| s < r) => {
                    let (lsn, c) = schema.next().expect("peeked");
                    match c {
                        SchemaChange::CreateTable(s) => {
                            let t = Arc::new(TableInfo::of(s));
                            self.infos.insert(s.id, t.clone());
                            (*lsn, MirrorChange::CreateTable(t))
                        }
                        SchemaChange::DropTable { id } => match self.infos.remove(id) {
                            Some(t) => (*lsn, MirrorChange::DropTable(t)),
                            None => continue,
                        },
                        _ => continue,
                    }
                }
                _ => {
                    let c = rows.next().expect("peeked");
                    let Some(t) = self.infos.get(&c.table).cloned() else {
                        continue;
                    };
                    let op = match (&c.old, &c.new) {
                        (_, None) => Op::Delete,
                        (None, Some(_)) => Op::Insert,
                        (Some(_), Some(_)) => Op::Update,
                    };
                    (
                        c.lsn,
                        MirrorChange::Row(RowChange {
                            table: t,
                            key: c.key.clone(),
                            op,
                            old: c.old.as_ref().map(|r| (**r).clone()),
                            new: c.new.as_ref().map(|r| (**r).clone()),
                        }),
                    )
                }
            };
            let name = match &change.1 {
                MirrorChange::Row(r) => &r.table.name,
                MirrorChange::CreateTable(t) | MirrorChange::DropTable(t) => &t.name,
            };
            if hand && self.wanted(name) {
                self.mirror.apply(change.0, &change.1);
            }
        }
    }

    /// Resets the mirror and loads every row of the follower's tables.
    fn load(&mut self) {
        let lsn = self.catalog.lsn();
        self.mirror.reset();
        for t in self.catalog.tables.values() {
            let Some(info) = self.infos.get(&t.schema.id) else {
                continue;
            };
            if !self.wanted(&info.name) {
                continue;
            }
            for (key, v) in t.scan() {
                self.mirror.load(info, key, &v.row);
            }
        }
        self.lsn = Some(lsn);
        self.mirror.committed(lsn);
    }
}
