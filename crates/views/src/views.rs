//! Maintained views: their dataflow, kept current by every commit.
//!
//! A view's definition is a schema record in the log. When a commit carries
//! one (or at start-up, for every view in the catalog), the view is
//! registered. Its state is made when reads need it (with partial state on,
//! the default; `docs/partial-state.md`):
//! - a read by key (`WHERE col = ...`) gets a reader keyed on those columns,
//!   partial when the key traces to the base tables: it starts empty, at
//!   once, and a key it does not hold is filled by an upquery;
//! - any other read (a scan) gets the view materialized in full, filled from
//!   the tables with commits paused.
//!
//! With partial state off, a view is filled in full when it is created, and
//! keyed readers hang off it.
//!
//! Each commit hands its row changes to the dataflow worker (on its own
//! thread) and returns; the worker brings the views up to date and
//! publishes their watermarks. A read that must reflect every committed
//! write first waits for the worker to reach that write's LSN (`await_lsn`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, Weak};

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aqueduct_dataflow::graph::{Graph, NodeId};
use aqueduct_dataflow::ops::SortColumn;
use aqueduct_dataflow::partial::PartialPlan;
pub use aqueduct_dataflow::stats::{ReadStatsSnapshot, LATENCY_BUCKETS_US};
use aqueduct_dataflow::tap::{Tap, TapRead};
use aqueduct_dataflow::view::{Lsn, ViewFailure, ViewKind, ViewReader, ViewState};
use aqueduct_dataflow::worker::{Ask, Upstream, WaitError, WeightedRows, Worker, WorkerStats};
use aqueduct_dataflow::{Delta, Row};
use aqueduct_tables::{Catalog, RowChange, SchemaChange, TableId};
use aqueduct_values::Value;
use parking_lot::{Mutex, RwLock};
use sqlparser::ast;

use aqueduct_expr::SqlError;
use aqueduct_tables::Database;

use crate::compile::Compiler;
pub use crate::view_entry::{InstallOptions, ViewEntry};
use aqueduct_plan::parse::view_query;
use aqueduct_plan::plan::Column;

/// What compiling a view in a scratch graph found out.
struct Checked {
    columns: Vec<Column>,
    order: Vec<SortColumn>,
    tables: Vec<TableId>,
}

/// What `SHOW VIEWS` reports.
#[derive(Clone, Debug)]
pub struct ViewStats {
    pub name: String,
    pub watermark: Lsn,
    /// Rows of the view held in full (0 when it is not).
    pub rows: u64,
    /// Keys held: of the view in full and of its keyed readers.
    pub keys: usize,
    pub bytes: u64,
    pub failed: Option<String>,
    /// How its state is kept: `full`, `partial`, both, or `none` yet.
    pub state: String,
    /// Hits, misses, upquery latencies and evictions over all its readers.
    pub reads: ReadStatsSnapshot,
}

/// What a read does when the upquery for a missing key takes too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTimeout {
    /// Fail the read, saying so.
    Error,
    /// Compute the answer from the base tables without filling the key.
    Compute,
}

/// Options fixed when the engine opens.
#[derive(Clone, Copy, Debug)]
pub struct ViewOptions {
    /// Keep views read by key partial (filled by upqueries) where they can be.
    pub partial: bool,
    /// Bound on the bytes of all view and operator state (0: none).
    pub memory_limit: u64,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            partial: true,
            memory_limit: 0,
        }
    }
}

/// Default wait of a read for the upquery that fills its key.
pub const DEFAULT_UPQUERY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct ViewRegistry {
    worker: Worker,
    views: RwLock<BTreeMap<String, Arc<ViewEntry>>>,
    /// Views materialized in full, by name.
    full: RwLock<HashMap<String, Arc<ViewReader>>>,
    /// Why a keyed reader is kept in full rather than partial, by its name.
    not_partial: RwLock<HashMap<String, String>>,
    partial: AtomicBool,
    /// The tables, to pause commits and read them (set once they exist).
    engine: OnceLock<Weak<Database>>,
    /// Extra readers of a view keyed on some of its columns, made on first
    /// use by a query that looks rows up by those columns: view name, then
    /// key columns.
    keyed: RwLock<HashMap<String, KeyedReaders>>,
    /// Automatic views by the SQL text of the prepared query they serve.
    auto: RwLock<HashMap<String, crate::auto_views::AutoView>>,
    /// Bumped whenever automatic views are dropped, so that a prepared
    /// statement holding one knows to look again.
    auto_generation: AtomicU64,
    /// Numbers automatic views.
    auto_made: AtomicU64,
    /// The views a commit is making anew over an altered table, from
    /// dropping them until their new versions are registered: a read that
    /// found one of them gone waits for the new one rather than failing.
    remaking: Mutex<std::collections::HashSet<String>>,
    /// Signalled when the views being made anew are registered.
    remade: parking_lot::Condvar,
}

impl Default for ViewRegistry {
    fn default() -> Self {
        ViewRegistry {
            worker: Worker::start(Graph::new()),
            views: RwLock::default(),
            full: RwLock::default(),
            not_partial: RwLock::default(),
            partial: AtomicBool::new(true),
            engine: OnceLock::new(),
            keyed: RwLock::default(),
            auto: RwLock::default(),
            auto_generation: AtomicU64::new(0),
            auto_made: AtomicU64::new(0),
            remaking: Mutex::default(),
            remade: parking_lot::Condvar::new(),
        }
    }
}

/// Numbers view entries across all engines in the process (each thread's
/// cache of keyed readers is keyed by it).
static NEXT_VIEW_UID: AtomicU64 = AtomicU64::new(1);

/// Views whose keyed readers one thread keeps at most (then it starts over).
const LOCAL_KEYED_VIEWS: usize = 4096;

/// How many times one keyed read tries a view that ALTER TABLE keeps
/// making again under it before it reports the failure.
const READS_OF_A_REMADE_VIEW: usize = 8;

/// One thread's copies of the keyed readers it used, by view id.
type LocalKeyed = aqueduct_dataflow::FastMap<u64, Vec<(Vec<usize>, bool, ViewReader)>>;

thread_local! {
    static LOCAL_KEYED: std::cell::RefCell<LocalKeyed> = std::cell::RefCell::new(LocalKeyed::default());
}

/// A view's keyed readers: key columns, whether keys are ordered, the
/// reader. A view has a few; a scan finds one without allocating.
type KeyedReaders = Vec<(Vec<usize>, bool, Arc<ViewReader>)>;

/// Ids of automatic views count down from here (table ids count up from 1).
const AUTO_VIEW_IDS: TableId = u64::MAX / 2;

/// Longest a read waits for the views to reflect the writes committed
/// before it, before it fails saying the dataflow is overloaded.
pub const VIEW_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The name of the graph view behind a keyed reader (`ordered`: its keys
/// are kept in order for range reads).
pub(crate) fn keyed_name(view: &str, key: &[usize], ordered: bool) -> String {
    format!("{view}#{key:?}{}", if ordered { "<>" } else { "" })
}

/// The tables, as upqueries read them: one consistent state and its LSN.
struct Tables(Weak<Database>);

impl Upstream for Tables {
    fn rows_at(&self, asks: &[Ask]) -> Option<(Vec<WeightedRows>, Lsn)> {
        let engine = self.0.upgrade()?;
        // From clones of the tables: commits go on while a key with a
        // million rows is read.
        Some(engine.rows_at(asks))
    }
}

fn dropped(name: &str) -> SqlError {
    SqlError::new("42P01", format!("view \"{name}\" was dropped"))
}

/// The error a read of a failed view gets.
fn failed(name: &str, f: &ViewFailure) -> SqlError {
    let mut e = f.error.clone();
    e.message = format!("view \"{name}\" stopped at LSN {}: {}", f.lsn, e.message);
    e
}

/// Reads `reader`'s current copy: the rows `f` picks and the watermark, or
/// the view's failure.
fn read_view<T>(
    name: &str,
    reader: &ViewReader,
    f: impl FnOnce(&ViewState) -> T,
) -> Result<(T, Lsn), SqlError> {
    match reader.read(|state, watermark| match state.failure() {
        Some(fail) => Err(failed(name, fail)),
        None => Ok((f(state), watermark)),
    }) {
        Some(r) => r,
        None => Err(dropped(name)),
    }
}

impl ViewRegistry {
    /// A registry with `options`.
    pub fn new(options: ViewOptions) -> ViewRegistry {
        let r = ViewRegistry::default();
        r.partial.store(options.partial, Ordering::Relaxed);
        r.worker.set_memory_limit(options.memory_limit);
        r
    }

    /// Connects the registry to its engine, once that exists: upqueries
    /// read its tables, and views materialized on demand pause its commits.
    pub fn attach(&self, engine: &Arc<Database>) {
        let _ = self.engine.set(Arc::downgrade(engine));
        self.worker
            .set_upstream(Arc::new(Tables(Arc::downgrade(engine))));
    }

    /// Says the tables were recovered up to `lsn` before any commit.
    pub fn start_at(&self, lsn: Lsn) {
        self.worker.start_at(lsn);
    }

    fn engine(&self) -> Result<Arc<Database>, SqlError> {
        self.engine
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| SqlError::new("57P01", "the engine is shutting down"))
    }

    /// Bounds the bytes of all view and operator state (0: no bound); the
    /// worker evicts down to it after its next batch or upquery.
    pub fn set_memory_limit(&self, bytes: u64) {
        self.worker.set_memory_limit(bytes);
    }

    /// Waits, for at most `timeout`, until the dataflow has nothing left to
    /// do (batches, upqueries, eviction rounds); false if it is still busy.
    pub fn await_idle(&self, timeout: Duration) -> bool {
        self.worker.wait_idle(timeout)
    }

    /// Whether views read by key are kept partial where they can be.
    pub fn partial_on(&self) -> bool {
        self.partial.load(Ordering::Relaxed)
    }

    /// Checks that `query` can be maintained, without changing anything.
    pub fn check(catalog: &Catalog, query: &ast::Query) -> Result<Vec<Column>, SqlError> {
        Ok(Self::check_with(catalog, query, InstallOptions::default())?.columns)
    }

    fn check_with(
        catalog: &Catalog,
        query: &ast::Query,
        options: InstallOptions,
    ) -> Result<Checked, SqlError> {
        let mut scratch = Graph::new();
        let mut c = Compiler::new(catalog, &mut scratch);
        c.keep_order = options.keep_order;
        c.partition_last = options.partition_last;
        let compiled = c.query(query)?;
        Ok(Checked {
            columns: compiled.columns,
            order: compiled.order,
            tables: scratch.source_tables(),
        })
    }

    /// Registers a view. The caller holds the commit lock, so with partial
    /// state off the drained graph and `catalog` are both exactly at `lsn`
    /// and the view is filled in full from them at once.
    pub fn install(
        &self,
        catalog: &Catalog,
        lsn: Lsn,
        id: TableId,
        name: &str,
        sql: &str,
    ) -> Result<(), SqlError> {
        self.install_with(catalog, lsn, id, name, sql, InstallOptions::default())
    }

    fn install_with(
        &self,
        catalog: &Catalog,
        lsn: Lsn,
        id: TableId,
        name: &str,
        sql: &str,
        options: InstallOptions,
    ) -> Result<(), SqlError> {
        let query = view_query(sql)?;
        // Compile into a scratch graph first: a query that fails half way
        // must not leave operators behind in the real one.
        let checked = Self::check_with(catalog, &query, options)?;
        let entry = ViewEntry {
            id,
            name: name.to_string(),
            sql: sql.to_string(),
            columns: checked.columns,
            order: checked.order,
            options,
            tables: checked.tables,
            uid: NEXT_VIEW_UID.fetch_add(1, Ordering::Relaxed),
        };
        if !self.partial_on() {
            self.materialize_full(catalog, lsn, &entry)?;
        }
        self.views.write().insert(name.to_string(), Arc::new(entry));
        Ok(())
    }

    /// Compiles `entry` (operators shared with other views) and fills it
    /// in full from `catalog` as of `lsn`; the caller holds the commit lock.
    /// Refused when state that cannot be evicted would then pass the
    /// memory limit.
    fn materialize_full(
        &self,
        catalog: &Catalog,
        lsn: Lsn,
        entry: &ViewEntry,
    ) -> Result<Arc<ViewReader>, SqlError> {
        let query = view_query(&entry.sql)?;
        let mut graph = self.worker.drain();
        assert!(
            graph.processed() <= lsn,
            "the dataflow is at LSN {} but the tables at {lsn}",
            graph.processed()
        );
        let mut c = Compiler::new(catalog, &mut graph);
        c.keep_order = entry.options.keep_order;
        c.partition_last = entry.options.partition_last;
        let compiled = c.query(&query)?;
        let mut new_nodes = std::mem::take(&mut c.new_nodes);
        let (view_node, reader) = graph.view(&entry.name, compiled.node, vec![]);
        new_nodes.push(view_node);
        graph.initialize(&new_nodes, &table_rows(catalog), lsn)?;
        if let Err(e) = self.check_memory(&graph, &entry.name, "in full") {
            graph.drop_view(&entry.name);
            return Err(e);
        }
        self.worker.note_state_bytes(&graph);
        let reader = Arc::new(reader);
        self.full.write().insert(entry.name.clone(), reader.clone());
        Ok(reader)
    }

    /// Refuses state that would keep the graph over the memory limit even
    /// with every partial key evicted.
    fn check_memory(&self, graph: &Graph, name: &str, how: &str) -> Result<(), SqlError> {
        let limit = self.worker.memory_limit();
        if limit == 0 {
            return Ok(());
        }
        let total = graph.state_bytes();
        let evictable: u64 = graph
            .partial_views()
            .iter()
            .map(|(v, _, _)| graph.view_bytes(*v))
            .sum();
        let fixed = total.saturating_sub(evictable);
        if fixed <= limit {
            return Ok(());
        }
        Err(SqlError::new(
            "53200",
            format!(
                "view \"{name}\" kept {how} would hold state that cannot be evicted: {} in all with the other views kept in full, over the memory limit of {}",
                human_bytes(fixed),
                human_bytes(limit)
            ),
        )
        .with_hint(
            "read the view by key (WHERE col = ...) so that it can be partial, drop views kept in full, or raise --memory-limit",
        ))
    }

    /// The view in full, materialized now if it is not yet (with commits
    /// paused, so it starts exactly at the tables' state).
    fn full_reader(&self, entry: &ViewEntry) -> Result<Arc<ViewReader>, SqlError> {
        if let Some(r) = self.full.read().get(&entry.name) {
            return Ok(r.clone());
        }
        let engine = self.engine()?;
        engine.with_commits_paused(|catalog, lsn| {
            if let Some(r) = self.full.read().get(&entry.name) {
                return Ok(r.clone());
            }
            if self.entry(&entry.name).is_none_or(|e| e.uid != entry.uid) {
                return Err(dropped(&entry.name));
            }
            let started = Instant::now();
            let r = self.materialize_full(catalog, lsn, entry)?;
            tracing::info!(
                view = %entry.name,
                "materialized in full for a read without a key in {:.2} s",
                started.elapsed().as_secs_f64()
            );
            Ok(r)
        })
    }

    /// Called under the commit lock after every commit: queues the commit's
    /// row changes for the dataflow worker, and adds or removes views.
    pub fn on_commit(
        &self,
        lsn: Lsn,
        catalog: &Catalog,
        changes: &[RowChange],
        schema: &[SchemaChange],
    ) {
        // A table whose columns changed: the views over it are made anew
        // from the tables as of this commit (their dataflow reads columns
        // by position), so its row changes here go to no old view.
        let altered: Vec<&aqueduct_tables::TableSchema> = schema
            .iter()
            .filter_map(|s| match s {
                SchemaChange::AlterTable { schema, .. } => Some(schema),
                _ => None,
            })
            .collect();
        let mut remake = Vec::new();
        if !altered.is_empty() {
            let names: Vec<String> = altered.iter().map(|t| t.name.clone()).collect();
            remake = aqueduct_plan::bind::dependent_views(catalog, &names);
            self.remaking
                .lock()
                .extend(remake.iter().map(|(_, name, _)| name.clone()));
            for (_, name, _) in remake.iter().rev() {
                self.drop_view(name);
            }
            self.drop_auto_views();
            // No view over the table is left but those this commit drops
            // itself (DROP COLUMN ... CASCADE) further down.
            debug_assert!(
                {
                    let graph = self.worker.graph();
                    let views = self.views.read();
                    let dropping: Vec<&str> = schema
                        .iter()
                        .filter_map(|s| match s {
                            SchemaChange::DropView { id } => views
                                .values()
                                .find(|v| v.id == *id)
                                .map(|v| v.name.as_str()),
                            _ => None,
                        })
                        .collect();
                    altered.iter().all(|t| {
                        graph.views_reading(t.id).iter().all(|v| {
                            let base = v.split('#').next().unwrap_or(v);
                            dropping.contains(&base)
                        })
                    })
                },
                "a view over an altered table outlived it"
            );
        }
        let mut per_table: HashMap<TableId, Delta> = HashMap::new();
        for c in changes {
            if altered.iter().any(|t| t.id == c.table) {
                continue;
            }
            let d = per_table.entry(c.table).or_default();
            if let Some(old) = &c.old {
                d.push(((**old).clone(), -1));
            }
            if let Some(new) = &c.new {
                d.push(((**new).clone(), 1));
            }
        }
        let mut deltas: Vec<(TableId, Delta)> = per_table.into_iter().collect();
        deltas.sort_by_key(|(t, _)| *t);
        // Every commit is queued, even one without row changes, so that the
        // processed LSN follows the log.
        self.worker.submit(lsn, deltas);
        for (id, name, sql) in &remake {
            if let Err(e) = self.install(catalog, lsn, *id, name, sql) {
                tracing::error!(view = %name, "cannot maintain the view after ALTER TABLE: {e}");
            }
        }
        if !remake.is_empty() {
            self.remaking.lock().clear();
            self.remade.notify_all();
        }
        for s in schema {
            match s {
                SchemaChange::CreateView { id, name, sql } => {
                    if let Err(e) = self.install(catalog, lsn, *id, name, sql) {
                        tracing::error!(view = %name, "cannot maintain the view: {e}");
                    }
                }
                SchemaChange::DropView { id } => {
                    let name = self
                        .views
                        .read()
                        .values()
                        .find(|v| v.id == *id)
                        .map(|v| v.name.clone());
                    if let Some(name) = name {
                        self.drop_view(&name);
                        self.drop_auto_views_reading(&name);
                    }
                }
                // An automatic view reads tables by id: once one is gone,
                // the queries are made again against what exists now.
                SchemaChange::DropTable { .. } => self.drop_auto_views(),
                _ => {}
            }
        }
    }

    /// Removes a view, its keyed readers and whatever only they needed.
    fn drop_view(&self, name: &str) {
        let mut graph = self.worker.drain();
        self.views.write().remove(name);
        if let Some(keyed) = self.keyed.write().remove(name) {
            for (k, ordered, _) in &keyed {
                let kn = keyed_name(name, k, *ordered);
                self.not_partial.write().remove(&kn);
                graph.drop_view(&kn);
            }
        }
        self.full.write().remove(name);
        graph.drop_view(name);
    }

    /// Drops the automatic views that read the view `name` (they are made
    /// again on next use).
    fn drop_auto_views_reading(&self, name: &str) {
        let reads = |view: &str| {
            self.entry(view).is_some_and(|v| {
                aqueduct_plan::parse::parse(&v.sql).map_or(true, |sts| {
                    sts.iter()
                        .any(|st| aqueduct_plan::bind::relations(st).iter().any(|r| r == name))
                })
            })
        };
        let gone: Vec<String> = {
            let mut auto = self.auto.write();
            let names: Vec<String> = auto
                .values()
                .map(|a| a.view.clone())
                .filter(|v| reads(v))
                .collect();
            auto.retain(|_, a| !names.contains(&a.view));
            names
        };
        self.forget_auto_views(gone);
    }

    /// Drops every automatic view (they are made again on next use).
    fn drop_auto_views(&self) {
        let autos: Vec<String> = self.auto.write().drain().map(|(_, a)| a.view).collect();
        self.forget_auto_views(autos);
    }

    fn forget_auto_views(&self, mut autos: Vec<String>) {
        autos.sort();
        autos.dedup();
        if autos.is_empty() {
            return;
        }
        self.auto_generation.fetch_add(1, Ordering::AcqRel);
        for name in autos {
            self.drop_view(&name);
        }
    }

    /// Changes whenever automatic views are dropped.
    pub fn auto_generation(&self) -> u64 {
        self.auto_generation.load(Ordering::Acquire)
    }

    /// Waits (up to [`VIEW_WAIT_TIMEOUT`]) until the views reflect every
    /// write up to `lsn`.
    pub fn await_lsn(&self, lsn: Lsn) -> Result<(), SqlError> {
        Ok(self.worker.wait_processed(lsn, VIEW_WAIT_TIMEOUT)?)
    }

    /// [`ViewRegistry::await_lsn`] with a deadline of the caller's:
    /// [`WaitError::Late`] (SQLSTATE 57014) when it passes.
    pub fn await_lsn_within(&self, lsn: Lsn, timeout: Duration) -> Result<(), WaitError> {
        self.worker.wait_processed(lsn, timeout)
    }

    /// Whether the views reflect every write up to `lsn` now.
    pub fn reflects(&self, lsn: Lsn) -> bool {
        self.worker.reflects(lsn)
    }

    /// From now on the views apply a commit only once it is acknowledged
    /// (`docs/consistency.md`, "Reads do not wait for other writers"):
    /// they show no write a crash could undo, so a read of them waits
    /// for no other transaction's fsync.
    pub fn apply_acknowledged_only(&self, from: Lsn) {
        self.worker.gate_at(from);
    }

    /// The commits up to `lsn` are acknowledged: the views may apply them.
    pub fn open_to(&self, lsn: Lsn) {
        self.worker.open_to(lsn);
    }

    /// The LSN up to which the views' state may reflect writes now, which
    /// is past the acknowledged commits only when a view was made or a key
    /// filled from the tables meanwhile: what a reader of them waits to
    /// be acknowledged.
    pub fn reflected_now(&self) -> Lsn {
        self.worker.processed_now()
    }

    /// The LSN up to which the views reflect every write, and how many
    /// committed batches wait for the dataflow.
    pub fn progress(&self) -> WorkerStats {
        self.worker.stats()
    }

    /// The automatic view serving `sql`, if one was made.
    pub fn auto_view(&self, sql: &str) -> Option<crate::auto_views::AutoView> {
        self.auto.read().get(sql).cloned()
    }

    /// Makes (or finds) the automatic view for the prepared query `q`,
    /// whose text is `sql`. `None` when the query is not of a shape that a
    /// keyed view can serve.
    pub fn make_auto_view(
        &self,
        db: &aqueduct_tables::Database,
        sql: &str,
        q: &ast::Query,
    ) -> Result<Option<crate::auto_views::AutoView>, SqlError> {
        if let Some(a) = self.auto_view(sql) {
            return Ok(Some(a));
        }
        let Some(p) = crate::auto_views::parameterize(q) else {
            return Ok(None);
        };
        let text = p.query.to_string();
        let options = InstallOptions {
            keep_order: true,
            partition_last: p.keys.len(),
        };
        let made = db.with_commits_paused(|catalog, lsn| {
            // Made by another session meanwhile?
            if let Some(a) = self.auto_view(sql) {
                return Ok(Some(a));
            }
            // Another query with the same rewritten form (an IN list of
            // another length, say) already has the view: share it.
            let existing = self
                .auto
                .read()
                .values()
                .find(|a| self.entry(&a.view).is_some_and(|v| v.sql == text))
                .map(|a| a.view.clone());
            let name = match existing {
                Some(name) => name,
                None => {
                    let n = self.auto_made.fetch_add(1, Ordering::Relaxed) + 1;
                    let name = format!("auto_{n}");
                    self.install_with(catalog, lsn, AUTO_VIEW_IDS - n, &name, &text, options)?;
                    name
                }
            };
            let entry = self.entry(&name).expect("installed");
            let global = p.global;
            match crate::auto_views::AutoView::describe(&entry, p) {
                Ok(mut auto) => {
                    if global && crate::auto_views::empty_answer_is_fixed(q) {
                        let nulls = vec![Value::Null; auto.param_types.len()];
                        auto.empty_row = crate::oneshot::evaluate_empty(catalog, q, &nulls)
                            .ok()
                            .filter(|rows| rows.len() == 1)
                            .and_then(|mut rows| rows.pop());
                    }
                    self.auto.write().insert(sql.to_string(), auto.clone());
                    Ok(Some(auto))
                }
                Err(e) => {
                    if !self.auto.read().values().any(|a| a.view == name) {
                        self.drop_view(&name);
                    }
                    Err(e)
                }
            }
        })?;
        Ok(made)
    }

    pub fn names(&self) -> Vec<String> {
        self.views.read().keys().cloned().collect()
    }

    /// The view registered as `name`. While a commit makes the views over
    /// an altered table anew, a view it dropped is waited for rather than
    /// missed. Never called by the registry itself, which may hold what
    /// that commit waits for.
    pub fn get(&self, name: &str) -> Option<Arc<ViewEntry>> {
        if let Some(found) = self.entry(name) {
            return Some(found);
        }
        self.await_remade(name);
        self.entry(name)
    }

    /// Waits while a commit makes view `name` anew (from dropping the old
    /// version until the new one is registered); at once for any other
    /// name.
    fn await_remade(&self, name: &str) {
        let mut remaking = self.remaking.lock();
        while remaking.contains(name) {
            self.remade.wait(&mut remaking);
        }
    }

    /// The view registered as `name` now, without waiting.
    fn entry(&self, name: &str) -> Option<Arc<ViewEntry>> {
        self.views.read().get(name).cloned()
    }

    /// The tap on view `name` in full (materialized now if it is not):
    /// its changes by LSN from here on, for a publication of it
    /// (`docs/publications.md`, section 8).
    pub fn tap(&self, name: &str) -> Result<Arc<Tap>, SqlError> {
        let entry = self
            .get(name)
            .ok_or_else(|| SqlError::new("42P01", format!("view \"{name}\" does not exist")))?;
        self.full_reader(&entry)?;
        self.worker.graph().tap(name).ok_or_else(|| dropped(name))
    }

    /// View `name`'s rows as of `lsn` (every copy of a row), read once the
    /// views reflect `lsn` (waiting up to `timeout`): its rows now, with
    /// the changes since `lsn` undone from its tap. 55000 when the tap no
    /// longer holds them (the view was made anew, or too much changed).
    pub fn rows_as_of(
        &self,
        name: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<(Vec<Row>, Arc<Tap>), SqlError> {
        let tap = self.tap(name)?;
        self.await_lsn_within(lsn, timeout)?;
        let entry = self.entry(name).ok_or_else(|| dropped(name))?;
        let reader = self.full_reader(&entry)?;
        let (rows, now) = read_view(name, &reader, |s| s.all())?;
        let rows = tap.rows_before(rows, now, lsn).ok_or_else(|| {
            SqlError::new(
                "55000",
                format!("the changes of view \"{name}\" since LSN {lsn} are no longer kept"),
            )
            .with_hint("start again: a new snapshot is at a later LSN")
        })?;
        Ok((rows, tap))
    }

    /// The changes `tap` holds at `lsn`, once the views reflect it
    /// (waiting up to `timeout`).
    pub fn tap_changes(&self, tap: &Tap, lsn: Lsn, timeout: Duration) -> Result<TapRead, SqlError> {
        self.await_lsn_within(lsn, timeout)?;
        Ok(tap.at(lsn))
    }

    /// All rows of a view, and its watermark. An error if the view failed.
    pub fn rows(&self, entry: &ViewEntry) -> Result<(Vec<Row>, Lsn), SqlError> {
        self.once_more_if_remade(entry, |entry| {
            let reader = self.full_reader(entry)?;
            read_view(&entry.name, &reader, |s| s.all())
        })
    }

    pub fn stats(&self) -> Vec<ViewStats> {
        let views = self.views.read().clone();
        let full = self.full.read().clone();
        let keyed = self.keyed.read().clone();
        // Bytes of partial readers include their private operators, which
        // only the graph knows.
        let partial_bytes: HashMap<u64, u64> = {
            let graph = self.worker.graph();
            graph
                .partial_views()
                .into_iter()
                .map(|(node, reader, _)| (reader, graph.view_bytes(node)))
                .collect()
        };
        let processed = self.worker.stats().processed;
        views
            .values()
            .map(|v| {
                let mut out = ViewStats {
                    name: v.name.clone(),
                    watermark: processed,
                    rows: 0,
                    keys: 0,
                    bytes: 0,
                    failed: None,
                    state: String::new(),
                    reads: ReadStatsSnapshot::default(),
                };
                let mut kinds = Vec::new();
                let readers = full.get(&v.name).into_iter().map(|r| (true, r)).chain(
                    keyed
                        .get(&v.name)
                        .into_iter()
                        .flatten()
                        .map(|(_, _, r)| (false, r)),
                );
                for (is_full, r) in readers {
                    let (watermark, rows, keys, bytes, failed) = r
                        .read(|s, w| {
                            (
                                w,
                                s.row_count(),
                                s.key_count(),
                                s.bytes(),
                                s.failure().map(|f| f.error.message.clone()),
                            )
                        })
                        .unwrap_or((0, 0, 0, 0, None));
                    if is_full {
                        out.rows = rows;
                        out.watermark = watermark;
                    }
                    out.keys += keys;
                    out.bytes += partial_bytes.get(&r.id()).copied().unwrap_or(bytes);
                    out.failed = out.failed.or(failed);
                    out.reads.add(&r.stats().snapshot());
                    kinds.push(if r.is_partial() { "partial" } else { "full" });
                }
                kinds.sort_unstable();
                kinds.dedup();
                out.state = if kinds.is_empty() {
                    "none yet".into()
                } else {
                    kinds.join(", ")
                };
                out
            })
            .collect()
    }

    /// The keyed reader of view `entry` on columns `key` (built on first
    /// use), with its keys in order when `ordered`: partial when partial
    /// state is on and the key traces to the base tables, otherwise kept in
    /// full (and the view with it).
    fn keyed_reader(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        ordered: bool,
    ) -> Result<Arc<ViewReader>, SqlError> {
        if let Some(r) = self.find_keyed(entry, key, ordered) {
            return Ok(r);
        }
        if self.partial_on() && !ordered {
            if let Some(r) = self.make_partial(entry, key)? {
                return Ok(r);
            }
        } else if ordered {
            self.not_partial.write().insert(
                keyed_name(&entry.name, key, ordered),
                "it is read by ranges, which an upquery of one key cannot fill".into(),
            );
        }
        self.full_reader(entry)?;
        let mut graph = self.worker.graph();
        // Re-check under the graph lock: another session may have made it,
        // or the view may have gone (a reader added now would outlive it).
        if let Some(r) = self.find_keyed(entry, key, ordered) {
            return Ok(r);
        }
        if !self.registered(entry) {
            return Err(dropped(&entry.name));
        }
        let parent = graph
            .view_parent(&entry.name)
            .ok_or_else(|| dropped(&entry.name))?;
        // The parent's output is as of the last processed batch; the worker
        // cannot run while the graph lock is held.
        let lsn = graph.processed();
        let name = keyed_name(&entry.name, key, ordered);
        let kind = if ordered {
            ViewKind::Ordered
        } else {
            ViewKind::Full
        };
        let (id, reader) = graph.view_with(&name, parent, key.to_vec(), kind);
        graph.initialize(&[id], &|_| Vec::new(), lsn)?;
        Ok(self.add_keyed(entry, key, ordered, reader))
    }

    /// The view registered under `entry`'s name now, when it is another
    /// one: the view was made again (ALTER TABLE re-makes the views over
    /// the table) since `entry` was looked up.
    pub fn remade(&self, entry: &ViewEntry) -> Option<Arc<ViewEntry>> {
        self.entry(&entry.name).filter(|e| e.uid != entry.uid)
    }

    /// Whether `entry` is still the view registered under its name (a
    /// view dropped, or dropped and made again by ALTER TABLE, is not);
    /// asked with the graph locked, which dropping a view takes first.
    fn registered(&self, entry: &ViewEntry) -> bool {
        self.entry(&entry.name).is_some_and(|e| e.uid == entry.uid)
    }

    fn find_keyed(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        ordered: bool,
    ) -> Option<Arc<ViewReader>> {
        self.keyed.read().get(&entry.name).and_then(|readers| {
            readers
                .iter()
                .find(|(k, o, _)| k == key && *o == ordered)
                .map(|(_, _, r)| r.clone())
        })
    }

    fn add_keyed(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        ordered: bool,
        reader: ViewReader,
    ) -> Arc<ViewReader> {
        let reader = Arc::new(reader);
        self.keyed
            .write()
            .entry(entry.name.clone())
            .or_default()
            .push((key.to_vec(), ordered, reader.clone()));
        reader
    }

    /// Makes a partial keyed reader of `entry` on `key`: the view's query
    /// compiled again into operators of its own, keyed like the reader.
    /// Without a join input kept in full it starts empty and costs nothing;
    /// with one, that input is filled from the tables with commits paused.
    /// `None` (and the reason noted for `EXPLAIN`) when the key does not
    /// trace to the base tables.
    fn make_partial(
        &self,
        entry: &ViewEntry,
        key: &[usize],
    ) -> Result<Option<Arc<ViewReader>>, SqlError> {
        let engine = self.engine()?;
        let name = keyed_name(&entry.name, key, false);
        let query = view_query(&entry.sql)?;
        let compile =
            |catalog: &Catalog, graph: &mut Graph| -> Result<(NodeId, Vec<NodeId>), SqlError> {
                graph.set_private(true);
                let mut c = Compiler::new(catalog, graph);
                c.keep_order = entry.options.keep_order;
                c.partition_last = entry.options.partition_last;
                let compiled = c.query(&query);
                let nodes = std::mem::take(&mut c.new_nodes);
                drop(c);
                graph.set_private(false);
                match compiled {
                    Ok(compiled) => Ok((compiled.node, nodes)),
                    Err(e) => {
                        graph.discard(&nodes);
                        Err(e)
                    }
                }
            };
        // Without commits paused first: most keyed readers start empty.
        {
            let catalog = engine.read_recursive();
            let mut graph = self.worker.graph();
            if let Some(r) = self.find_keyed(entry, key, false) {
                return Ok(Some(r));
            }
            if !self.registered(entry) {
                return Err(dropped(&entry.name));
            }
            let (top, nodes) = compile(&catalog, &mut graph)?;
            let plan = graph
                .plan_partial(top, key, &nodes)
                .and_then(|plan| upqueries_can_look_up(&catalog, &plan).map(|()| plan));
            match plan {
                Err(why) => {
                    graph.discard(&nodes);
                    self.not_partial.write().insert(name, why);
                    return Ok(None);
                }
                // The reader starts empty at the graph's LSN, compiled
                // against the catalog now: only if the graph is there too
                // (a batch still queued may be of a table as it was before
                // an ALTER TABLE, with other columns).
                Ok(plan) if !plan.needs_tables() && graph.processed() >= catalog.lsn() => {
                    let lsn = graph.processed();
                    let (_, reader) = graph.add_partial_view(&name, plan, &|_| Vec::new(), lsn)?;
                    return Ok(Some(self.add_keyed(entry, key, false, reader)));
                }
                Ok(_) => graph.discard(&nodes),
            }
        }
        engine.with_commits_paused(|catalog, lsn| {
            let mut graph = self.worker.drain();
            if let Some(r) = self.find_keyed(entry, key, false) {
                return Ok(Some(r));
            }
            if !self.registered(entry) {
                return Err(dropped(&entry.name));
            }
            let (top, nodes) = compile(catalog, &mut graph)?;
            let plan = graph
                .plan_partial(top, key, &nodes)
                .and_then(|plan| upqueries_can_look_up(catalog, &plan).map(|()| plan));
            let plan = match plan {
                Ok(plan) => plan,
                Err(why) => {
                    graph.discard(&nodes);
                    self.not_partial.write().insert(name, why);
                    return Ok(None);
                }
            };
            let (_, reader) = graph.add_partial_view(&name, plan, &table_rows(catalog), lsn)?;
            if let Err(e) =
                self.check_memory(&graph, &entry.name, "partial with a join input in full")
            {
                graph.drop_view(&name);
                return Err(e);
            }
            self.worker.note_state_bytes(&graph);
            Ok(Some(self.add_keyed(entry, key, false, reader)))
        })
    }

    /// The rows of view `entry` whose `key` columns equal `values`, found
    /// by a keyed lookup (the keyed reader is built on first use; a key a
    /// partial reader does not hold is filled by an upquery first).
    pub fn lookup(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[Value],
    ) -> Result<(Vec<Row>, Lsn), SqlError> {
        Ok(self.lookup_timed(entry, key, values, DEFAULT_UPQUERY_TIMEOUT)?)
    }

    /// [`ViewRegistry::lookup`], waiting at most `timeout` for an upquery
    /// (then failing with [`WaitError::Late`]).
    pub fn lookup_timed(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[Value],
        timeout: Duration,
    ) -> Result<(Vec<Row>, Lsn), WaitError> {
        self.once_more_if_remade(entry, |entry| {
            let mut rows = Vec::new();
            let lsn = self.with_keyed(entry, key, false, |r| {
                self.read_key(&entry.name, r, values, timeout, |row| {
                    rows.push(row.clone())
                })
            })??;
            Ok((rows, lsn))
        })
    }

    /// The rows under each of `keys` (in order), looked up on `key`
    /// columns; keys a partial reader misses are filled by one upquery
    /// together. Returns the rows per key and the lowest watermark read.
    pub fn lookup_many(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        keys: &[Vec<Value>],
        timeout: Duration,
    ) -> Result<(Vec<Vec<Row>>, Lsn), WaitError> {
        self.once_more_if_remade(entry, |e| self.lookup_many_of(e, key, keys, timeout))
    }

    /// Runs `read` on `entry`; when it fails because the view was made
    /// again meanwhile (ALTER TABLE re-makes the views over the table),
    /// runs it again on the view there is now, up to
    /// [`READS_OF_A_REMADE_VIEW`] times in all.
    fn once_more_if_remade<T, E>(
        &self,
        entry: &ViewEntry,
        mut read: impl FnMut(&ViewEntry) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut outcome = read(entry);
        let mut current: Option<Arc<ViewEntry>> = None;
        for _ in 1..READS_OF_A_REMADE_VIEW {
            if outcome.is_ok() {
                break;
            }
            let seen = current.as_deref().unwrap_or(entry);
            // A commit making the view anew holds this from dropping the
            // old version until the new one is registered.
            self.await_remade(&seen.name);
            match self.remade(seen) {
                Some(now) => {
                    outcome = read(&now);
                    current = Some(now);
                }
                None => break,
            }
        }
        outcome
    }

    fn lookup_many_of(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        keys: &[Vec<Value>],
        timeout: Duration,
    ) -> Result<(Vec<Vec<Row>>, Lsn), WaitError> {
        self.with_keyed(entry, key, false, |reader| {
            let stats = reader.stats();
            let mut out: Vec<Option<Vec<Row>>> = vec![None; keys.len()];
            let mut watermark = Lsn::MAX;
            let mut missed: Option<Instant> = None;
            loop {
                let mut missing = Vec::new();
                for (i, k) in keys.iter().enumerate() {
                    if out[i].is_some() {
                        continue;
                    }
                    let read = reader
                        .read(|s, w| match s.failure() {
                            Some(fail) => Err(failed(&entry.name, fail)),
                            None => {
                                let mut rows = Vec::new();
                                Ok(s.for_each(k, |r| rows.push(r.clone())).then_some((rows, w)))
                            }
                        })
                        .ok_or_else(|| dropped(&entry.name))??;
                    match read {
                        Some((rows, w)) => {
                            watermark = watermark.min(w);
                            out[i] = Some(rows);
                            match missed {
                                None => stats.hits.add(1),
                                Some(at) => stats.upquery.record(at.elapsed()),
                            }
                        }
                        None => missing.push(k.clone()),
                    }
                }
                if missing.is_empty() {
                    let rows = out.into_iter().map(Option::unwrap_or_default).collect();
                    return Ok((rows, if watermark == Lsn::MAX { 0 } else { watermark }));
                }
                let at = *missed.get_or_insert_with(|| {
                    stats
                        .misses
                        .fetch_add(missing.len() as u64, Ordering::Relaxed);
                    Instant::now()
                });
                self.worker.upquery(reader.id(), missing, at + timeout)?;
            }
        })?
    }

    /// Reads the rows under `values` from `reader`, filling the key by an
    /// upquery when the reader is partial and does not hold it. Counts the
    /// hit or the miss and the upquery's latency.
    fn read_key(
        &self,
        name: &str,
        reader: &ViewReader,
        values: &[Value],
        timeout: Duration,
        mut f: impl FnMut(&Row),
    ) -> Result<Lsn, WaitError> {
        let mut missed: Option<Instant> = None;
        loop {
            let read = reader
                .read(|s, watermark| match s.failure() {
                    Some(fail) => Err(failed(name, fail)),
                    None => Ok(s.for_each(values, &mut f).then_some(watermark)),
                })
                .ok_or_else(|| dropped(name))??;
            let stats = reader.stats();
            if let Some(watermark) = read {
                match missed {
                    None => stats.hits.add(1),
                    Some(at) => stats.upquery.record(at.elapsed()),
                }
                return Ok(watermark);
            }
            let at = *missed.get_or_insert_with(|| {
                stats.misses.fetch_add(1, Ordering::Relaxed);
                Instant::now()
            });
            self.worker
                .upquery(reader.id(), vec![values.to_vec()], at + timeout)?;
        }
    }

    /// The rows of view `entry` whose `key` columns equal `values`,
    /// computed once from the base tables in `catalog` (a scratch dataflow
    /// over the whole query), without filling anything: what a read does
    /// when its upquery takes too long and the session says so.
    pub fn compute_lookup(
        &self,
        catalog: &Catalog,
        entry: &ViewEntry,
        key: &[usize],
        values: &[Value],
    ) -> Result<Vec<Row>, SqlError> {
        self.compute_lookup_in(
            catalog,
            &mut aqueduct_tables::Txn::default(),
            entry,
            key,
            values,
        )
    }

    /// [`ViewRegistry::compute_lookup`] over the tables as `txn` sees them
    /// (its own writes included), each table it scans noted in `txn`.
    pub fn compute_lookup_in(
        &self,
        catalog: &Catalog,
        txn: &mut aqueduct_tables::Txn,
        entry: &ViewEntry,
        key: &[usize],
        values: &[Value],
    ) -> Result<Vec<Row>, SqlError> {
        let query = view_query(&entry.sql)?;
        let conds: Vec<String> = key
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let name = entry.columns[c].name.replace('"', "\"\"");
                format!("aqueduct_v.\"{name}\" = ${}", i + 1)
            })
            .collect();
        let sql = if conds.is_empty() {
            format!("SELECT * FROM ({query}) AS aqueduct_v")
        } else {
            format!(
                "SELECT * FROM ({query}) AS aqueduct_v WHERE {}",
                conds.join(" AND ")
            )
        };
        let q = view_query(&sql)?;
        let (_, rows) = crate::oneshot::evaluate(catalog, txn, &q, values, None)?;
        Ok(rows)
    }

    /// Runs `f` with the keyed reader of `entry` on `key`, from this
    /// thread's cache when it has it: a repeated read then writes nothing
    /// another thread reads (no lock word, no reference count), so reads
    /// scale with cores.
    fn with_keyed<T>(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        ordered: bool,
        f: impl FnOnce(&ViewReader) -> T,
    ) -> Result<T, SqlError> {
        self.with_keyed_from(entry, key, ordered, f, || {
            self.keyed_reader(entry, key, ordered)
        })
    }

    /// [`ViewRegistry::with_keyed`] with the reader, when this thread has
    /// no copy of it, from `find` (which may make it, or fail).
    fn with_keyed_from<T>(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        ordered: bool,
        f: impl FnOnce(&ViewReader) -> T,
        find: impl FnOnce() -> Result<Arc<ViewReader>, SqlError>,
    ) -> Result<T, SqlError> {
        let id = entry.uid;
        let mut f = Some(f);
        let hit = LOCAL_KEYED.with(|cell| {
            let cache = cell.borrow();
            let found = cache
                .get(&id)?
                .iter()
                .find(|(k, o, _)| k == key && *o == ordered)
                .map(|(_, _, r)| r)?;
            Some((f.take().expect("called once"))(found))
        });
        if let Some(out) = hit {
            return Ok(out);
        }
        let reader = (*find()?).clone();
        let out = (f.take().expect("called once"))(&reader);
        LOCAL_KEYED.with(|cell| {
            let mut cache = cell.borrow_mut();
            if cache.len() >= LOCAL_KEYED_VIEWS {
                cache.clear();
            }
            cache
                .entry(id)
                .or_default()
                .push((key.to_vec(), ordered, reader));
        });
        Ok(out)
    }

    /// Like [`ViewRegistry::lookup`], calling `f` on each row in place
    /// instead of copying them out (the embedded API's fastest read), and
    /// waiting up to `timeout` for the upquery of a missing key. Returns
    /// the watermark. A read that fails has called `f` on no row.
    pub fn lookup_with(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[Value],
        timeout: Duration,
        mut f: impl FnMut(&Row),
    ) -> Result<Lsn, WaitError> {
        // A failed read calls `f` on no row, so it may read again.
        self.once_more_if_remade(entry, |entry| {
            self.with_keyed(entry, key, false, |r| {
                self.read_key(&entry.name, r, values, timeout, &mut f)
            })?
        })
    }

    /// A keyed read that waits for nothing and makes nothing: calls `f` on
    /// each row of view `entry` whose `key` columns equal `values` and
    /// returns the watermark, when a keyed reader on `key` exists and
    /// holds the key. `None` (with `f` called on no row) when it would
    /// have to make the reader, fill the key by an upquery, or report a
    /// failure: [`ViewRegistry::lookup_with`] does those.
    pub fn lookup_held(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[Value],
        mut f: impl FnMut(&Row),
    ) -> Option<Lsn> {
        let found = || {
            self.find_keyed(entry, key, false)
                .ok_or_else(|| dropped(&entry.name))
        };
        let read = self.with_keyed_from(
            entry,
            key,
            false,
            |r| {
                let watermark = r.read(|s, watermark| {
                    (s.failure().is_none() && s.for_each(values, &mut f)).then_some(watermark)
                })??;
                r.stats().hits.add(1);
                Some(watermark)
            },
            found,
        );
        read.ok().flatten()
    }

    /// The rows of view `entry` whose first `key` columns equal `prefix`
    /// and whose last key column lies between `low` and `high`.
    pub fn lookup_range(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        prefix: &[Value],
        low: Bound<&Value>,
        high: Bound<&Value>,
    ) -> Result<(Vec<Row>, Lsn), SqlError> {
        self.once_more_if_remade(entry, |entry| {
            self.with_keyed(entry, key, true, |r| {
                let (rows, lsn) = read_view(&entry.name, r, |s| {
                    let mut out = Vec::new();
                    s.for_each_in_range(prefix, low, high, |r| out.push(r.clone()));
                    out
                })?;
                r.stats().hits.add(1);
                Ok((rows, lsn))
            })?
        })
    }

    /// The dataflow behind a view, as text lines: the view in full (if it
    /// is materialized) and each keyed reader, saying whether it is partial
    /// and, if not, why.
    pub fn explain(&self, name: &str) -> Vec<String> {
        let graph = self.worker.graph();
        let mut lines = Vec::new();
        if graph.has_view(name) {
            lines.push("kept in full (read without a key):".to_string());
            lines.extend(graph.explain(name).into_iter().map(|l| format!("  {l}")));
        }
        let keyed = self.keyed.read().get(name).cloned().unwrap_or_default();
        for (key, ordered, reader) in keyed {
            let kn = keyed_name(name, &key, ordered);
            if reader.is_partial() {
                lines.push(format!(
                    "keyed on columns {key:?}, partial: keys are filled by upqueries and evicted under the memory limit"
                ));
            } else {
                let why = self
                    .not_partial
                    .read()
                    .get(&kn)
                    .cloned()
                    .unwrap_or_else(|| "partial state is off".into());
                lines.push(format!("keyed on columns {key:?}, kept in full: {why}"));
            }
            lines.extend(graph.explain(&kn).into_iter().map(|l| format!("  {l}")));
        }
        if lines.is_empty() {
            lines.push(if self.partial_on() {
                "no state yet: made on first read (partial when read by a key that traces to the tables)".into()
            } else {
                "no state".into()
            });
        }
        lines
    }

    /// The whole graph in Graphviz DOT; views with no state yet (none of
    /// their reads came) are shown dashed, on their own.
    pub fn dot(&self) -> String {
        let mut dot = self.worker.graph().dot();
        let keyed = self.keyed.read();
        let full = self.full.read();
        let idle: Vec<String> = self
            .names()
            .into_iter()
            .filter(|n| !full.contains_key(n) && keyed.get(n).is_none_or(Vec::is_empty))
            .collect();
        if !idle.is_empty() && dot.ends_with("}\n") {
            dot.truncate(dot.len() - 2);
            for (i, name) in idle.iter().enumerate() {
                let label = name.replace('\\', "\\\\").replace('"', "\\\"");
                dot.push_str(&format!(
                    "  idle{i} [label=\"view {label} (no state yet)\", shape=ellipse, style=dashed];\n"
                ));
            }
            dot.push_str("}\n");
        }
        dot
    }

    /// A view's part of the graph in Graphviz DOT.
    pub fn dot_of(&self, name: &str) -> String {
        let graph = self.worker.graph();
        if graph.has_view(name) {
            return graph.dot_of(name);
        }
        let keyed = self.keyed.read().get(name).cloned().unwrap_or_default();
        match keyed.first() {
            Some((key, ordered, _)) => graph.dot_of(&keyed_name(name, key, *ordered)),
            None => graph.dot_of(name),
        }
    }
}

/// Tables up to this many rows may be scanned by an upquery (no index on
/// the key's columns); a larger one without such an index keeps the view
/// in full, since every miss would scan it.
pub const PARTIAL_SCAN_ROWS: usize = 10_000;

/// Whether every upquery of `plan` finds its base rows by a lookup (the
/// primary key, or an index, whose columns are or begin with the key's), or in a table
/// small enough to scan. The error names the index to create.
pub(crate) fn upqueries_can_look_up(catalog: &Catalog, plan: &PartialPlan) -> Result<(), String> {
    for (table, columns) in plan.lookups() {
        let Some(t) = catalog.table_by_id(table) else {
            continue;
        };
        if catalog.has_lookup(table, &columns) || t.len() <= PARTIAL_SCAN_ROWS {
            continue;
        }
        let names: Vec<&str> = columns
            .iter()
            .map(|&c| t.schema.columns[c].name.as_str())
            .collect();
        return Err(format!(
            "an upquery would scan table {} ({} rows) for want of an index; CREATE INDEX ON {} ({}) makes the view partial",
            t.schema.name,
            t.len(),
            t.schema.name,
            names.join(", ")
        ));
    }
    Ok(())
}

/// Reads a table's rows from `catalog`, to fill operators kept in full.
pub(crate) fn table_rows(catalog: &Catalog) -> impl Fn(TableId) -> Vec<Row> + '_ {
    move |table: TableId| -> Vec<Row> {
        catalog
            .table_by_id(table)
            .map(|t| t.scan().map(|(_, rv)| (*rv.row).clone()).collect())
            .unwrap_or_default()
    }
}

/// Bytes for people: `1.5 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Shared handle.
pub type Views = Arc<ViewRegistry>;

/// Views follow the tables as a consumer of committed batches.
impl aqueduct_tables::CommitConsumer for ViewRegistry {
    fn committed(&self, batch: &aqueduct_tables::AppliedBatch, catalog: &aqueduct_tables::Catalog) {
        let schema: Vec<_> = batch.schema.iter().map(|(_, c)| c.clone()).collect();
        self.on_commit(batch.last, catalog, &batch.changes, &schema);
    }

    fn visible(&self, lsn: Lsn) {
        self.worker.open_to(lsn);
    }
}
