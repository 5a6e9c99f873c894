//! Maintained views: their dataflow, kept current by every commit.
//!
//! A view's definition is a schema record in the log. When a commit carries
//! one (or at start-up, for every view in the catalog), the view's query is
//! compiled into the dataflow and filled from the tables as they are at that
//! commit. From then on each commit hands its row changes to the dataflow
//! worker (on its own thread) and returns; the worker brings the views up to
//! date and publishes their watermarks. A read that must reflect every
//! committed write first waits for the worker to reach that write's LSN
//! (`await_lsn`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aqueduct_dataflow::graph::Graph;
use aqueduct_dataflow::ops::SortColumn;
use aqueduct_dataflow::view::{Lsn, ViewFailure, ViewReader, ViewState};
use aqueduct_dataflow::worker::{Worker, WorkerStats};
use aqueduct_dataflow::{Delta, Row};
use aqueduct_tables::{Catalog, RowChange, SchemaChange, TableId};
use parking_lot::RwLock;
use sqlparser::ast;

use crate::compile::Compiler;
use crate::session::parse;
use crate::{Column, SqlError};

/// One maintained view, as readers see it.
#[derive(Clone)]
pub struct ViewEntry {
    pub id: TableId,
    pub name: String,
    pub sql: String,
    pub columns: Vec<Column>,
    /// For an automatic view with ORDER BY: the order of its rows, which
    /// then carry hidden sort columns after `columns`.
    pub order: Vec<SortColumn>,
    reader: ViewReader,
}

/// How a view is compiled.
#[derive(Clone, Copy, Debug, Default)]
pub struct InstallOptions {
    /// Keep the ORDER BY (and its hidden sort columns) for reads to sort by.
    pub keep_order: bool,
    /// The last this-many columns are automatic-view keys (top-k per key).
    pub partition_last: usize,
}

/// What `SHOW VIEWS` reports.
#[derive(Clone, Debug)]
pub struct ViewStats {
    pub name: String,
    pub watermark: Lsn,
    pub rows: u64,
    pub keys: usize,
    pub bytes: u64,
    pub failed: Option<String>,
}

pub struct ViewRegistry {
    worker: Worker,
    views: RwLock<BTreeMap<String, ViewEntry>>,
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
}

impl Default for ViewRegistry {
    fn default() -> Self {
        ViewRegistry {
            worker: Worker::start(Graph::new()),
            views: RwLock::default(),
            keyed: RwLock::default(),
            auto: RwLock::default(),
            auto_generation: AtomicU64::new(0),
            auto_made: AtomicU64::new(0),
        }
    }
}

/// Views whose keyed readers one thread keeps at most (then it starts over).
const LOCAL_KEYED_VIEWS: usize = 4096;

/// One thread's copies of the keyed readers it used, by view id.
type LocalKeyed = HashMap<u64, Vec<(Vec<usize>, bool, ViewReader)>>;

thread_local! {
    static LOCAL_KEYED: std::cell::RefCell<LocalKeyed> = std::cell::RefCell::new(HashMap::new());
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
fn keyed_name(view: &str, key: &[usize], ordered: bool) -> String {
    format!("{view}#{key:?}{}", if ordered { "<>" } else { "" })
}

/// The SELECT inside `CREATE [MATERIALIZED] VIEW name AS SELECT ...`.
pub(crate) fn view_query(sql: &str) -> Result<Box<ast::Query>, SqlError> {
    let mut statements = parse(sql)?;
    match statements.pop() {
        Some(ast::Statement::CreateView(cv)) => Ok(cv.query),
        Some(ast::Statement::Query(q)) => Ok(q),
        _ => Err(SqlError::syntax("a view is defined by one SELECT")),
    }
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
        None => Err(SqlError::new(
            "42P01",
            format!("view \"{name}\" was dropped"),
        )),
    }
}

impl ViewRegistry {
    /// Checks that `query` can be maintained, without changing anything.
    pub fn check(catalog: &Catalog, query: &ast::Query) -> Result<Vec<Column>, SqlError> {
        Self::check_with(catalog, query, InstallOptions::default())
    }

    fn check_with(
        catalog: &Catalog,
        query: &ast::Query,
        options: InstallOptions,
    ) -> Result<Vec<Column>, SqlError> {
        let mut scratch = Graph::new();
        let mut c = Compiler::new(catalog, &mut scratch);
        c.keep_order = options.keep_order;
        c.partition_last = options.partition_last;
        Ok(c.query(query)?.columns)
    }

    /// Compiles and fills a view from `catalog` as of `lsn`. The caller
    /// holds the commit lock, so the drained graph and `catalog` are both
    /// exactly at `lsn`.
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
        Self::check_with(catalog, &query, options)?;
        let mut graph = self.worker.drain();
        assert!(
            graph.processed() <= lsn,
            "the dataflow is at LSN {} but the tables at {lsn}",
            graph.processed()
        );
        let mut c = Compiler::new(catalog, &mut graph);
        c.keep_order = options.keep_order;
        c.partition_last = options.partition_last;
        let compiled = c.query(&query)?;
        let mut new_nodes = std::mem::take(&mut c.new_nodes);
        let (view_node, reader) = graph.view(name, compiled.node, vec![]);
        new_nodes.push(view_node);
        let rows = |table: TableId| -> Vec<Row> {
            catalog
                .table_by_id(table)
                .map(|t| t.scan().map(|(_, rv)| (*rv.row).clone()).collect())
                .unwrap_or_default()
        };
        graph.initialize(&new_nodes, &rows, lsn)?;
        self.views.write().insert(
            name.to_string(),
            ViewEntry {
                id,
                name: name.to_string(),
                sql: sql.to_string(),
                columns: compiled.columns,
                order: compiled.order,
                reader,
            },
        );
        Ok(())
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
        let mut per_table: HashMap<TableId, Delta> = HashMap::new();
        for c in changes {
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
                graph.drop_view(&keyed_name(name, k, *ordered));
            }
        }
        graph.drop_view(name);
    }

    /// Drops the automatic views that read the view `name` (they are made
    /// again on next use).
    fn drop_auto_views_reading(&self, name: &str) {
        let reads = |view: &str| {
            self.get(view).is_some_and(|v| {
                crate::session::parse(&v.sql).map_or(true, |sts| {
                    sts.iter()
                        .any(|st| crate::bind::relations(st).iter().any(|r| r == name))
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
        self.worker.wait_processed(lsn, VIEW_WAIT_TIMEOUT)
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
                .find(|a| self.get(&a.view).is_some_and(|v| v.sql == text))
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
            let entry = self.get(&name).expect("installed");
            match crate::auto_views::AutoView::describe(&entry, p) {
                Ok(auto) => {
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

    pub fn get(&self, name: &str) -> Option<ViewEntry> {
        self.views.read().get(name).cloned()
    }

    /// All rows of a view, and its watermark. An error if the view failed.
    pub fn rows(&self, entry: &ViewEntry) -> Result<(Vec<Row>, Lsn), SqlError> {
        read_view(&entry.name, &entry.reader, |s| s.all())
    }

    pub fn stats(&self) -> Vec<ViewStats> {
        let views = self.views.read();
        let keyed = self.keyed.read();
        views
            .values()
            .map(|v| {
                let (watermark, rows, keys, mut bytes, failed) = v
                    .reader
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
                for (_, _, r) in keyed.get(&v.name).into_iter().flatten() {
                    bytes += r.read(|s, _| s.bytes()).unwrap_or(0);
                }
                ViewStats {
                    name: v.name.clone(),
                    watermark,
                    rows,
                    keys,
                    bytes,
                    failed,
                }
            })
            .collect()
    }

    /// The keyed reader of view `entry` on columns `key` (built on first
    /// use), with its keys in order when `ordered`.
    fn keyed_reader(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        ordered: bool,
    ) -> Result<Arc<ViewReader>, SqlError> {
        let find = || {
            self.keyed.read().get(&entry.name).and_then(|readers| {
                readers
                    .iter()
                    .find(|(k, o, _)| k == key && *o == ordered)
                    .map(|(_, _, r)| r.clone())
            })
        };
        if let Some(r) = find() {
            return Ok(r);
        }
        let mut graph = self.worker.graph();
        // Re-check under the graph lock: another session may have made it.
        if let Some(r) = find() {
            return Ok(r);
        }
        let parent = graph.view_parent(&entry.name).ok_or_else(|| {
            SqlError::new("42P01", format!("view \"{}\" was dropped", entry.name))
        })?;
        // The parent's output is as of the last processed batch; the worker
        // cannot run while the graph lock is held.
        let lsn = graph.processed();
        let name = keyed_name(&entry.name, key, ordered);
        let (id, reader) = graph.view_with(&name, parent, key.to_vec(), ordered);
        graph.initialize(&[id], &|_| Vec::new(), lsn)?;
        let reader = Arc::new(reader);
        self.keyed
            .write()
            .entry(entry.name.clone())
            .or_default()
            .push((key.to_vec(), ordered, reader.clone()));
        Ok(reader)
    }

    /// The rows of view `entry` whose `key` columns equal `values`, found
    /// by a keyed lookup (the keyed reader is built on first use).
    pub fn lookup(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[aqueduct_values::Value],
    ) -> Result<(Vec<Row>, Lsn), SqlError> {
        self.with_keyed(entry, key, false, |r| {
            read_view(&entry.name, r, |s| s.lookup(values))
        })?
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
        let id = entry.reader.id();
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
        let reader = (*self.keyed_reader(entry, key, ordered)?).clone();
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
    /// instead of copying them out (the embedded API's fastest read).
    /// Returns the watermark.
    pub fn lookup_with(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[aqueduct_values::Value],
        f: impl FnMut(&Row),
    ) -> Result<Lsn, SqlError> {
        Ok(self
            .with_keyed(entry, key, false, |r| {
                read_view(&entry.name, r, |s| s.for_each(values, f))
            })??
            .1)
    }

    /// The rows of view `entry` whose first `key` columns equal `prefix`
    /// and whose last key column lies between `low` and `high`.
    pub fn lookup_range(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        prefix: &[aqueduct_values::Value],
        low: Bound<&aqueduct_values::Value>,
        high: Bound<&aqueduct_values::Value>,
    ) -> Result<(Vec<Row>, Lsn), SqlError> {
        self.with_keyed(entry, key, true, |r| {
            read_view(&entry.name, r, |s| {
                let mut out = Vec::new();
                s.for_each_in_range(prefix, low, high, |r| out.push(r.clone()));
                out
            })
        })?
    }

    /// The dataflow behind a view, as text lines.
    pub fn explain(&self, name: &str) -> Vec<String> {
        self.worker.graph().explain(name)
    }

    /// The whole graph in Graphviz DOT.
    pub fn dot(&self) -> String {
        self.worker.graph().dot()
    }

    /// A view's part of the graph in Graphviz DOT.
    pub fn dot_of(&self, name: &str) -> String {
        self.worker.graph().dot_of(name)
    }
}

/// Shared handle.
pub type Views = Arc<ViewRegistry>;
