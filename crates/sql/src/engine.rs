//! The database as the SQL layer sees it, shared by all sessions: the
//! tables, the maintained views fed by every commit, scheduled releases,
//! the clock and the statement counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use aqueduct_expr::SqlError;
use aqueduct_log::{Log, Lsn};
use aqueduct_tables::{Database, ReplayReport, ScramVerifier};
use aqueduct_values::Value;

use crate::consistency::{self, Consistency};
use aqueduct_plan::limits;
use aqueduct_views::{release_views, views};

/// Where time enters the engine: the session reads it once per statement
/// (and keeps the reading at `BEGIN` for the transaction), and binds the
/// readings into the statement as constants; expression evaluation and the
/// dataflow never read a clock.
pub trait Clock: Send + Sync {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> i64;
}

/// The system's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        aqueduct_log::now_micros()
    }
}

/// Statement counters for `/metrics`.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    pub select: AtomicU64,
    pub insert: AtomicU64,
    pub update: AtomicU64,
    pub delete: AtomicU64,
    pub ddl: AtomicU64,
    pub other: AtomicU64,
    pub errors: AtomicU64,
    /// Statements running now (a gauge).
    pub running: AtomicU64,
    /// Reads of views answered from the base tables because an upquery
    /// or the wait for the views ran out of time and the session's
    /// `aqueduct.*_timeout_action` said `compute`.
    pub computed_after_timeout: AtomicU64,
}

impl EngineMetrics {
    pub(crate) fn count(&self, c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The database as the SQL layer sees it; shared by all sessions.
pub struct Engine {
    db: Arc<Database>,
    feed: Arc<aqueduct_feed::Feed>,
    pub views: views::Views,
    /// Scheduled releases: snapshots, change sets, time maps.
    pub releases: Arc<aqueduct_releases::Releases>,
    /// Results of `release` reads of the current release.
    pub(crate) release_results: parking_lot::Mutex<consistency::ReleaseResults>,
    /// Views as of the current release, filled as they are read.
    pub(crate) release_views: parking_lot::Mutex<release_views::ReleaseViews>,
    /// The consistency level new sessions start with.
    default_consistency: parking_lot::RwLock<Consistency>,
    /// Set on a follower: where reads learn the commit LSN of the servers
    /// it follows.
    commit_source: parking_lot::RwLock<Option<Arc<dyn crate::consistency::CommitSource>>>,
    /// Where writes go while this member of a Raft group does not lead.
    group_link: parking_lot::RwLock<Option<Arc<dyn crate::forward::GroupLink>>>,
    /// `statement_timeout` new sessions start with (`--statement-timeout`).
    default_statement_timeout: parking_lot::RwLock<Option<String>>,
    /// Set at shutdown: every running statement stops.
    shutdown: Arc<std::sync::atomic::AtomicBool>,
    pub metrics: EngineMetrics,
    pub started: Instant,
    pub replay: ReplayReport,
    /// The clock sessions read their statements' time from.
    clock: parking_lot::RwLock<Arc<dyn Clock>>,
    /// Users from the server's configuration: superusers outside the catalog.
    pub(crate) bootstrap_users: parking_lot::RwLock<std::collections::BTreeSet<String>>,
    /// Sessions clients hold through a connection, by process id.
    pub backends: Arc<crate::backends::Backends>,
    /// The next transaction number `txid_current()` gives: from the wall
    /// clock's microseconds at start, so numbers keep growing across
    /// restarts.
    pub(crate) next_xid: std::sync::atomic::AtomicI64,
    /// Transaction chains: their declarations analysed, and the logical
    /// servers that run them (`chains/`).
    pub chains: crate::chains::state::Chains,
}

impl Engine {
    /// Rebuilds the tables from `log` and returns the engine (views with
    /// partial state, no memory limit).
    pub fn open(log: Log, progress: &mut dyn FnMut(Lsn)) -> Result<Arc<Engine>, SqlError> {
        Engine::open_with(log, progress, views::ViewOptions::default())
    }

    /// [`Engine::open`] with `options` for the views.
    pub fn open_with(
        log: Log,
        progress: &mut dyn FnMut(Lsn),
        options: views::ViewOptions,
    ) -> Result<Arc<Engine>, SqlError> {
        Engine::open_with_feed(
            log,
            progress,
            options,
            aqueduct_feed::FeedOptions::default(),
        )
    }

    /// [`Engine::open_with`] with `feed_options` for the change feed.
    pub fn open_with_feed(
        log: Log,
        progress: &mut dyn FnMut(Lsn),
        options: views::ViewOptions,
        feed_options: aqueduct_feed::FeedOptions,
    ) -> Result<Arc<Engine>, SqlError> {
        Engine::open_replaying_until(log, None, progress, options, feed_options)
    }

    /// [`Engine::open_with_feed`] with the tables rebuilt only from the
    /// records up to `until` ([`Database::open_until`]).
    pub fn open_replaying_until(
        log: Log,
        until: Option<Lsn>,
        progress: &mut dyn FnMut(Lsn),
        options: views::ViewOptions,
        feed_options: aqueduct_feed::FeedOptions,
    ) -> Result<Arc<Engine>, SqlError> {
        let (db, replay) = Database::open_until(log, until, progress)?;
        let db = Arc::new(db);
        db.expire_ephemeral_rows();
        let registry = Arc::new(views::ViewRegistry::new(options));
        // Views are functions of the tables: registered (and, with partial
        // state off, rebuilt) from the recovered state, in creation order,
        // before any new commit.
        db.with_commits_paused(|catalog, lsn| {
            limits::with_statement_stack(|| {
                registry.start_at(lsn);
                let count = catalog.views.len();
                for (i, (id, (name, sql))) in catalog.views.iter().enumerate() {
                    let started = Instant::now();
                    match registry.install(catalog, lsn, *id, name, sql) {
                        Ok(()) => tracing::info!(
                            view = %name,
                            "rebuilt view {} of {count} in {:.2} s",
                            i + 1,
                            started.elapsed().as_secs_f64()
                        ),
                        Err(e) => tracing::error!(view = %name, "cannot rebuild the view: {e}"),
                    }
                }
            })
        });
        let releases = Arc::new(aqueduct_releases::Releases::new());
        db.add_consumer(releases.clone());
        db.add_consumer(registry.clone());
        // The views apply only acknowledged commits, so their readers wait
        // for no other transaction's fsync (`docs/consistency.md`).
        registry.apply_acknowledged_only(db.committed_lsn());
        let feed = aqueduct_feed::Feed::attach(&db, feed_options)
            .map_err(|e| SqlError::new(e.sqlstate(), e.to_string()))?;
        // A publication's subscribers are cut off past its own caps
        // (`max_lag`, `max_lag_age`), else past the server's.
        let tables = Arc::downgrade(&db);
        feed.set_caps_of(Arc::new(move |consumer: &str| {
            let db = tables.upgrade()?;
            let catalog = db.read();
            let p = catalog
                .publications
                .values()
                .find(|p| consumer.starts_with(&aqueduct_publish::consumer_prefix(&p.name)))?;
            Some(aqueduct_feed::ConsumerCaps {
                max_bytes: p.max_lag_bytes,
                max_age: p.max_lag_age_s.map(std::time::Duration::from_secs),
            })
        }));
        let engine = Arc::new(Engine {
            db,
            feed,
            views: registry,
            releases,
            release_results: Default::default(),
            release_views: Default::default(),
            default_consistency: parking_lot::RwLock::new(Consistency::Linearizable),
            commit_source: parking_lot::RwLock::new(None),
            group_link: parking_lot::RwLock::new(None),
            default_statement_timeout: parking_lot::RwLock::new(None),
            shutdown: Default::default(),
            metrics: EngineMetrics::default(),
            started: Instant::now(),
            replay,
            clock: parking_lot::RwLock::new(Arc::new(SystemClock)),
            bootstrap_users: Default::default(),
            backends: Default::default(),
            next_xid: std::sync::atomic::AtomicI64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2)),
            ),
            chains: Default::default(),
        });
        engine.views.attach(&engine.db);
        // Published views keep their changes from the recovered state on,
        // so a subscriber that was caught up goes on after a restart.
        engine.tap_published_views();
        Ok(engine)
    }

    /// Puts a tap on every view a publication publishes (a view has one
    /// from when it is first published until it is dropped or made anew).
    pub fn tap_published_views(&self) {
        let names: Vec<String> = {
            let catalog = self.db.read();
            catalog
                .publications
                .values()
                .flat_map(|p| &p.objects)
                .filter(|o| o.kind == aqueduct_tables::ObjectKind::View)
                .filter_map(|o| catalog.views.get(&o.relation).map(|(n, _)| n.clone()))
                .collect()
        };
        for name in names {
            if let Err(e) = self.views.tap(&name) {
                tracing::error!(view = %name, "cannot keep the changes of a published view: {e}");
            }
        }
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Makes this engine a follower's: reads wait for the tables to reach
    /// the LSN their consistency level asks, learning the commit LSN of
    /// the servers followed from `source`.
    /// Sends the writes of sessions here to the group's leader while
    /// this member does not lead (`forward.rs`).
    pub fn set_group_link(&self, forwarder: Arc<dyn crate::forward::GroupLink>) {
        *self.group_link.write() = Some(forwarder);
    }

    pub fn group_link(&self) -> Option<Arc<dyn crate::forward::GroupLink>> {
        self.group_link.read().clone()
    }

    pub fn set_commit_source(&self, source: Arc<dyn crate::consistency::CommitSource>) {
        *self.commit_source.write() = Some(source);
    }

    /// Whether this server follows others (it has a commit source).
    pub fn follows(&self) -> bool {
        self.commit_source.read().is_some()
    }

    /// The commit source of a follower's engine; `None` on a server that
    /// takes its own writes.
    pub fn commit_source(&self) -> Option<Arc<dyn crate::consistency::CommitSource>> {
        self.commit_source.read().clone()
    }

    /// The database, shared: for readers that outlive a call (publication
    /// streams).
    pub fn shared_database(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// The change feed: every committed transaction, in LSN order.
    pub fn feed(&self) -> &Arc<aqueduct_feed::Feed> {
        &self.feed
    }

    /// The tables `principal` may follow on the change feed or copy in a
    /// snapshot: those named (each must exist and be readable by it), or
    /// when none are named every table for a superuser and the readable
    /// ones for anyone else. `None` means every table, present and future.
    pub fn feed_tables(
        &self,
        principal: &crate::roles::Principal,
        names: Option<&[String]>,
    ) -> Result<Option<Vec<aqueduct_tables::TableId>>, SqlError> {
        let catalog = self.db.read();
        let superuser = principal.is_superuser(&catalog);
        let readable = |id| {
            superuser
                || catalog.has_privilege(&principal.name, id, aqueduct_tables::Privilege::Select)
        };
        match names {
            None if superuser => Ok(None),
            None => Ok(Some(
                catalog
                    .tables
                    .keys()
                    .copied()
                    .filter(|id| readable(*id))
                    .collect(),
            )),
            Some(names) => names
                .iter()
                .map(|n| {
                    let t = catalog.table(n).ok_or_else(|| {
                        SqlError::new("42P01", format!("relation \"{n}\" does not exist"))
                    })?;
                    if !readable(t.schema.id) {
                        return Err(SqlError::new(
                            "42501",
                            format!("permission denied for table {n}"),
                        )
                        .with_hint("the change feed needs SELECT on every table it follows"));
                    }
                    Ok(t.schema.id)
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    /// The clock statements read their time from.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.read().clone()
    }

    /// Replaces the clock for sessions made from now on (tests drive time
    /// by hand).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.write() = clock;
    }

    /// The consistency level new sessions start with (`--consistency`).
    pub fn default_consistency(&self) -> Consistency {
        *self.default_consistency.read()
    }

    pub fn set_default_consistency(&self, c: Consistency) {
        *self.default_consistency.write() = c;
    }

    /// The `statement_timeout` new sessions start with, as text (`None`:
    /// PostgreSQL's default, 0, no timeout).
    pub fn default_statement_timeout(&self) -> Option<String> {
        self.default_statement_timeout.read().clone()
    }

    /// Sets the `statement_timeout` new sessions start with (`--statement-timeout`).
    pub fn set_default_statement_timeout(&self, timeout: std::time::Duration) {
        *self.default_statement_timeout.write() = Some(timeout.as_millis().to_string());
    }

    /// Whether [`Engine::interrupt_all`] was called: the server is stopping.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A new interrupt handle, stopped by [`Engine::interrupt_all`] too.
    pub(crate) fn new_interrupt(&self) -> aqueduct_expr::interrupt::Interrupt {
        aqueduct_expr::interrupt::Interrupt::new(self.shutdown.clone())
    }

    /// Stops every running statement, and every later one, of every
    /// session (SQLSTATE 57P01): for shutdown. A commit already appending
    /// finishes; nothing checks once a write reached its commit.
    pub fn interrupt_all(&self) {
        self.shutdown
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Turns releases on: from now on every commit's changes are kept for
    /// the next release. The server's releaser then cuts and publishes
    /// them ([`Engine::cut_release`]).
    pub fn enable_releases(&self, schedule: aqueduct_releases::Schedule) {
        self.db
            .with_commits_paused(|_, lsn| self.releases.enable(schedule, lsn));
    }

    /// Cuts release `id` under the commit lock (the tables exactly as of
    /// the last commit), waits until its LSN is durable, and publishes it.
    pub fn cut_release(&self, id: u64, now_ms: u64) -> Result<(), SqlError> {
        let started = std::time::Instant::now();
        let snap = self
            .db
            .with_commits_paused(|catalog, lsn| self.releases.cut(id, catalog, lsn, now_ms));
        self.db.await_visible(snap.release.lsn)?;
        let published = now_ms + started.elapsed().as_millis() as u64;
        self.releases.publish(snap, published);
        Ok(())
    }

    /// Approximate bytes of row data per table, for `/metrics`.
    pub fn table_bytes(&self) -> Vec<(String, usize)> {
        self.db
            .read()
            .tables
            .values()
            .map(|t| (t.schema.name.clone(), t.bytes))
            .collect()
    }

    /// Row counts per table, for `/metrics`.
    pub fn table_rows(&self) -> Vec<(String, usize)> {
        self.db
            .read()
            .tables
            .values()
            .map(|t| (t.schema.name.clone(), t.len()))
            .collect()
    }

    /// Declares the bootstrap users (from the server's configuration):
    /// superusers that log in with their configured password and that no
    /// `CREATE ROLE` may shadow.
    pub fn set_bootstrap_users<I: IntoIterator<Item = String>>(&self, names: I) {
        *self.bootstrap_users.write() = names.into_iter().collect();
    }

    /// Whether `name` is a bootstrap user.
    pub fn is_bootstrap_user(&self, name: &str) -> bool {
        self.bootstrap_users.read().contains(name)
    }

    /// The SCRAM verifier a login as `name` is checked against: a role of
    /// the catalog that may log in and has a password.
    pub fn login_verifier(&self, name: &str) -> Option<ScramVerifier> {
        let catalog = self.database().read();
        let role = catalog.role(name)?;
        if !role.login {
            return None;
        }
        role.password.clone()
    }

    /// Whether a role of the catalog called `name` exists.
    pub fn role_exists(&self, name: &str) -> bool {
        self.database().read().role(name).is_some()
    }

    /// The rows of view `entry` whose `key` columns equal `values`, as of
    /// the release `snap` (`release_views.rs`).
    pub(crate) fn release_lookup(
        &self,
        snap: &aqueduct_releases::Snapshot,
        entry: &aqueduct_views::view_entry::ViewEntry,
        key: &[usize],
        values: &[Value],
    ) -> Result<Vec<aqueduct_dataflow::Row>, SqlError> {
        release_views::lookup(&self.release_views, &self.views, snap, entry, key, values)
    }
}
