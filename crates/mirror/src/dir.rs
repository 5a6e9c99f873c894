//! Mirroring a data directory in process, without a server or alongside a
//! running one: replay the log into tables (the same decoding and
//! [`Catalog::apply_batch`] the server uses at start-up), load the mirror
//! from them, then hand it each later batch as changes.
//!
//! The log is read with [`LiveLogReader`]: no lock, nothing written, so the
//! directory may belong to a running server that appends to it, seals,
//! compacts and merges segments meanwhile. The reader hands out whole
//! batches in LSN order. Two things it does not guarantee are dealt with
//! here, using the log's exact point (the lowest LSN from which the log
//! holds every record: `compacted_until` and `purged_lsn + 1` of its `meta`
//! file, which a compaction pass raises *before* it drops anything):
//!
//! - Following from LSN `from`, the records read are exactly the log's only
//!   if no compaction pass could have dropped one at or above `from`: the
//!   exact point, read after the records, must not be above `from`.
//!   Otherwise the batches just read are not handed over, and the mirror is
//!   reset and bootstrapped again. A resume below the exact point does the
//!   same at once.
//! - The replay from LSN 1 (a bootstrap, or a resume's catch-up to its
//!   position) reads below the exact point by design: compaction never
//!   changes the state the log replays to, provided each segment is read in
//!   a version that one moment of the log holds. A pass rewrites segments
//!   oldest first, each renamed in and then listed in the manifest, after
//!   raising the exact point. So if neither the exact point nor the listing
//!   of the segments that were sealed when the replay began has changed by
//!   its end, no pass rewrote a segment between two of the replay's reads,
//!   and the state is exact. Otherwise the replay is done again.
//!
//! What is not dealt with: the reader shows records as written, not as
//! acknowledged (see `docs/mirrors.md`).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aqueduct_log::live::ListedSegment;
use aqueduct_log::meta::META_NAME;
use aqueduct_log::{FsStorage, LiveLogReader, Lsn, Meta, Record, Storage};
use aqueduct_tables::{AppliedBatch, Batch, BatchBuilder, Catalog, SchemaChange, TableId};

use crate::{Error, Mirror, MirrorChange, Op, Position, RowChange, TableInfo};

/// Records asked of the reader at a time (whole batches: a larger batch
/// comes whole).
const READ_MAX: usize = 4096;
/// Replays started again within one [`DirFollower::poll_once`] before it
/// gives up for this poll.
const MAX_STARTS: usize = 4;

/// The lowest LSN from which the log in `storage` holds every record, read
/// from its `meta` file without writing anything (a missing file: 1).
fn exact_point(storage: &dyn Storage) -> Result<Lsn, Error> {
    let f = match storage.open_read(META_NAME) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(1),
        Err(e) => return Err(aqueduct_log::Error::io("opening the log metadata", e).into()),
    };
    let bytes = f
        .len()
        .and_then(|len| f.read_vec(0, len as usize))
        .map_err(|e| aqueduct_log::Error::io("reading the log metadata", e))?;
    let meta = Meta::decode(&bytes).map_err(|reason| aqueduct_log::Error::Corrupt {
        location: storage.describe(META_NAME),
        offset: 0,
        lsn: None,
        reason,
    })?;
    Ok(meta.compacted_until.max(meta.purged_lsn + 1))
}

/// The log's state when a replay from LSN 1 began.
struct Replay {
    exact: Lsn,
    sealed: Vec<ListedSegment>,
}

/// Why a read stopped early.
enum ReadError {
    /// The log no longer holds every record from the LSN asked for
    /// (compaction went past it), or not the mirror's position: start over
    /// from the beginning.
    Gone {
        from: Lsn,
        exact_from: Lsn,
    },
    /// A compaction pass rewrote segments while the replay from LSN 1 read
    /// them: replay again.
    Overlapped,
    Other(Error),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> ReadError {
        ReadError::Other(e)
    }
}

impl From<aqueduct_log::Error> for ReadError {
    fn from(e: aqueduct_log::Error) -> ReadError {
        ReadError::Other(e.into())
    }
}

/// Keeps a [`Mirror`] up to date from a data directory, of a stopped server
/// or a running one (see the module documentation). It keeps its own copy
/// of the tables (persistent trees, as the server's), from which it loads
/// the mirror and takes each change's old row.
pub struct DirFollower<M: Mirror> {
    dir: PathBuf,
    storage: Option<Arc<dyn Storage>>,
    /// `None`: open one at the next read, after what the tables hold.
    reader: Option<LiveLogReader>,
    /// Records read and not yet applied.
    pending: VecDeque<Record>,
    /// Set while the tables are being rebuilt from LSN 1.
    replay: Option<Replay>,
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
            dir: dir.as_ref().to_path_buf(),
            storage: None,
            reader: None,
            pending: VecDeque::new(),
            replay: None,
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
    /// as one). Does not wait for new records.
    pub fn poll_once(&mut self) -> Result<usize, Error> {
        let mut handed = 0;
        for _ in 0..MAX_STARTS {
            match self.read(&mut handed) {
                Ok(()) => return Ok(handed),
                Err(ReadError::Gone { from, exact_from }) => {
                    tracing::info!(
                        from,
                        exact_from,
                        "mirror: the log no longer holds every record after the mirror's \
                         position; bootstrapping again"
                    );
                    self.start_over();
                }
                Err(ReadError::Overlapped) => {
                    tracing::info!(
                        "mirror: a log compaction pass ran during the replay; replaying again"
                    );
                    self.replay_again();
                }
                Err(ReadError::Other(e)) => {
                    // The reader's place after a failure is not known: the
                    // next read reopens it after what is applied.
                    self.reader = None;
                    self.pending.clear();
                    self.batches = BatchBuilder::default();
                    return Err(e);
                }
            }
        }
        Err(aqueduct_log::Error::Invalid(format!(
            "the replay of {} from LSN 1 was started {MAX_STARTS} times without a consistent \
             result (compaction kept rewriting the log during it); trying again at the next poll",
            self.dir.display()
        ))
        .into())
    }

    /// Forgets the follower's tables and the mirror's position: the next
    /// read starts from LSN 1 and bootstraps the mirror.
    fn start_over(&mut self) {
        self.replay_again();
        self.lsn = None;
        self.resume_at = None;
    }

    /// Forgets the follower's tables: the next read replays from LSN 1
    /// again (to the position to resume at, if any).
    fn replay_again(&mut self) {
        self.reader = None;
        self.pending.clear();
        self.replay = None;
        self.catalog = Catalog::default();
        self.batches = BatchBuilder::default();
        self.infos.clear();
    }

    fn storage(&mut self) -> Result<Arc<dyn Storage>, Error> {
        if self.storage.is_none() {
            let s = FsStorage::existing(&self.dir).map_err(|e| {
                aqueduct_log::Error::io(format!("opening {}", self.dir.display()), e)
            })?;
            self.storage = Some(Arc::new(s));
        }
        Ok(self.storage.clone().expect("just set"))
    }

    /// Opens the reader after what the tables hold. From LSN 1 (not a resume
    /// from an empty log) this starts a replay, noting the log's state first.
    fn open_reader(&mut self, storage: &Arc<dyn Storage>) -> Result<(), ReadError> {
        let from = self.catalog.lsn() + 1;
        if from > 1 {
            // Reopened after a failure: what the tables hold was read
            // exactly, and a replay under way goes on.
            self.reader = Some(LiveLogReader::with_storage(storage.clone(), from)?);
            return Ok(());
        }
        let exact = exact_point(storage.as_ref())?;
        if let Some(p) = self.resume_at {
            if p + 1 < exact {
                return Err(ReadError::Gone {
                    from: p + 1,
                    exact_from: exact,
                });
            }
        }
        if self.lsn == Some(0) && exact > 1 {
            return Err(ReadError::Gone {
                from: 1,
                exact_from: exact,
            });
        }
        let reader = LiveLogReader::with_storage(storage.clone(), 1)?;
        self.replay = match self.lsn {
            // Resumed from an empty log: followed exactly from LSN 1.
            Some(_) => None,
            None => Some(Replay {
                exact,
                sealed: reader
                    .segments()?
                    .into_iter()
                    .filter(|s| !s.active)
                    .collect(),
            }),
        };
        self.reader = Some(reader);
        Ok(())
    }

    /// Ends the replay from LSN 1: fails with [`ReadError::Overlapped`] if a
    /// compaction pass may have rewritten segments between its reads.
    fn finish_replay(&mut self, storage: &Arc<dyn Storage>) -> Result<(), ReadError> {
        let replay = self.replay.take().expect("a replay under way");
        let now = self.reader.as_ref().expect("a reader").segments()?;
        let unchanged = replay.sealed.iter().all(|s| now.contains(s));
        // Read last: a pass raises it before it rewrites anything.
        if !unchanged || exact_point(storage.as_ref())? != replay.exact {
            return Err(ReadError::Overlapped);
        }
        Ok(())
    }

    /// Reads and applies everything the log holds now past what is applied,
    /// adding the transactions handed over to `handed`.
    fn read(&mut self, handed: &mut usize) -> Result<(), ReadError> {
        let storage = self.storage()?;
        if self.reader.is_none() {
            self.open_reader(&storage)?;
        }
        loop {
            if self.pending.is_empty() {
                let reader = self.reader.as_mut().expect("a reader");
                let from = reader.position();
                let got = reader.poll(READ_MAX)?;
                if got.is_empty() {
                    break;
                }
                if self.replay.is_none() {
                    let exact = exact_point(storage.as_ref())?;
                    if exact > from {
                        return Err(ReadError::Gone {
                            from,
                            exact_from: exact,
                        });
                    }
                }
                self.pending.extend(got);
            }
            while let Some(r) = self.pending.pop_front() {
                let b = match self.batches.push(&r.view()) {
                    Ok(Some(b)) => b,
                    Ok(None) => continue,
                    Err(reason) => {
                        return Err(Error::BadRecord { lsn: r.lsn, reason }.into());
                    }
                };
                if let Some(p) = self.resume_at.filter(|&p| b.first > p) {
                    // The position ends a batch compaction emptied.
                    self.resume_at = None;
                    self.lsn = Some(p);
                }
                if self.replay.is_some() && self.lsn.is_some() {
                    // Resumed: what follows goes to the mirror, so the
                    // replay must be exact first.
                    self.finish_replay(&storage)?;
                }
                *handed += self.batch(&b)?;
                if self.replay.is_some() && self.lsn.is_some() {
                    self.finish_replay(&storage)?;
                }
            }
        }
        if let Some(p) = self.resume_at {
            // The log ends before the mirror's position: it is not the log
            // the mirror came from (or it lost its tail). Start over.
            tracing::warn!(
                position = p,
                log_end = self.catalog.lsn(),
                "mirror: the log ends before the mirror's position; bootstrapping again"
            );
            return Err(ReadError::Gone {
                from: p + 1,
                exact_from: self.catalog.lsn() + 1,
            });
        }
        if self.replay.is_some() {
            self.finish_replay(&storage)?;
        }
        if self.lsn.is_none() {
            self.load();
            *handed += 1;
        }
        Ok(())
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
