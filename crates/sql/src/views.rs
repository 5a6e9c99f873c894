//! Maintained views: their dataflow, kept current by every commit.
//!
//! A view's definition is a schema record in the log. When a commit carries
//! one (or at start-up, for every view in the catalog), the view's query is
//! compiled into the dataflow and filled from the tables as they are at that
//! commit; from then on each commit's row changes flow through the graph
//! before the commit lock is released, so a view always reflects every
//! committed write (its watermark is the commit's LSN).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aqueduct_dataflow::graph::Graph;
use aqueduct_dataflow::view::{Lsn, ViewReader};
use aqueduct_dataflow::{Delta, Row};
use aqueduct_tables::{Catalog, RowChange, SchemaChange, TableId};
use parking_lot::{Mutex, RwLock};
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
    reader: ViewReader,
}

/// What `SHOW VIEWS` reports.
#[derive(Clone, Debug)]
pub struct ViewStats {
    pub name: String,
    pub watermark: Lsn,
    pub rows: u64,
    pub keys: usize,
    pub failed: Option<String>,
}

#[derive(Default)]
pub struct ViewRegistry {
    graph: Mutex<Graph>,
    views: RwLock<BTreeMap<String, ViewEntry>>,
    /// Extra readers of a view keyed on some of its columns, made on first
    /// use by a query that looks rows up by those columns.
    keyed: RwLock<HashMap<(String, Vec<usize>), ViewReader>>,
    /// Automatic views by the SQL text of the prepared query they serve.
    auto: RwLock<HashMap<String, crate::auto_views::AutoView>>,
}

/// Ids of automatic views count down from here (table ids count up from 1).
const AUTO_VIEW_IDS: TableId = u64::MAX / 2;

/// The name of the graph view behind a keyed reader.
fn keyed_name(view: &str, key: &[usize]) -> String {
    format!("{view}#{key:?}")
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

impl ViewRegistry {
    /// Checks that `query` can be maintained, without changing anything.
    pub fn check(catalog: &Catalog, query: &ast::Query) -> Result<Vec<Column>, SqlError> {
        let mut scratch = Graph::new();
        let mut c = Compiler::new(catalog, &mut scratch);
        Ok(c.query(query)?.columns)
    }

    /// Compiles and fills a view from `catalog` as of `lsn`.
    pub fn install(
        &self,
        catalog: &Catalog,
        lsn: Lsn,
        id: TableId,
        name: &str,
        sql: &str,
    ) -> Result<(), SqlError> {
        let query = view_query(sql)?;
        let mut graph = self.graph.lock();
        let mut c = Compiler::new(catalog, &mut graph);
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
                reader,
            },
        );
        Ok(())
    }

    /// Called under the commit lock after every commit.
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
        if !per_table.is_empty() {
            let mut deltas: Vec<(TableId, Delta)> = per_table.into_iter().collect();
            deltas.sort_by_key(|(t, _)| *t);
            self.graph.lock().process(lsn, deltas);
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
                        self.views.write().remove(&name);
                        let mut graph = self.graph.lock();
                        let keyed: Vec<Vec<usize>> = self
                            .keyed
                            .read()
                            .keys()
                            .filter(|(v, _)| *v == name)
                            .map(|(_, k)| k.clone())
                            .collect();
                        for k in keyed {
                            graph.drop_view(&keyed_name(&name, &k));
                            self.keyed.write().remove(&(name.clone(), k));
                        }
                        graph.drop_view(&name);
                    }
                }
                _ => {}
            }
        }
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
        let Some((rewritten, params)) = crate::auto_views::parameterize(q) else {
            return Ok(None);
        };
        let text = rewritten.to_string();
        let id = AUTO_VIEW_IDS - self.auto.read().len() as u64;
        let name = format!("auto_{}", AUTO_VIEW_IDS - id);
        db.with_commits_paused(|catalog, lsn| self.install(catalog, lsn, id, &name, &text))?;
        let entry = self.get(&name).expect("just installed");
        let auto = crate::auto_views::AutoView::describe(&entry, params)?;
        self.auto.write().insert(sql.to_string(), auto.clone());
        Ok(Some(auto))
    }

    pub fn names(&self) -> Vec<String> {
        self.views.read().keys().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Option<ViewEntry> {
        self.views.read().get(name).cloned()
    }

    /// All rows of a view, and its watermark. An error if the view failed.
    pub fn rows(&self, entry: &ViewEntry) -> Result<(Vec<Row>, Lsn), SqlError> {
        let failure = self.graph.lock().failure(&entry.name).cloned();
        if let Some(f) = failure {
            let mut e = f.error;
            e.message = format!(
                "view \"{}\" stopped at LSN {}: {}",
                entry.name, f.lsn, e.message
            );
            return Err(e);
        }
        let handle = entry.reader.handle();
        let guard = handle.enter();
        Ok(match guard {
            Some(state) => (state.all(), state.watermark()),
            None => (Vec::new(), 0),
        })
    }

    pub fn stats(&self) -> Vec<ViewStats> {
        let views = self.views.read();
        let graph = self.graph.lock();
        views
            .values()
            .map(|v| {
                let handle = v.reader.handle();
                let (watermark, rows, keys) = handle
                    .enter()
                    .map(|s| (s.watermark(), s.row_count(), s.key_count()))
                    .unwrap_or((0, 0, 0));
                ViewStats {
                    name: v.name.clone(),
                    watermark,
                    rows,
                    keys,
                    failed: graph.failure(&v.name).map(|f| f.error.message.clone()),
                }
            })
            .collect()
    }

    /// The rows of view `entry` whose `key` columns equal `values`, found
    /// by a keyed lookup (the keyed reader is built on first use).
    pub fn lookup(
        &self,
        entry: &ViewEntry,
        key: &[usize],
        values: &[aqueduct_values::Value],
    ) -> Result<(Vec<Row>, Lsn), SqlError> {
        let failure = self.graph.lock().failure(&entry.name).cloned();
        if let Some(f) = failure {
            let mut e = f.error;
            e.message = format!(
                "view \"{}\" stopped at LSN {}: {}",
                entry.name, f.lsn, e.message
            );
            return Err(e);
        }
        let cache_key = (entry.name.clone(), key.to_vec());
        let existing = self.keyed.read().get(&cache_key).cloned();
        let reader = match existing {
            Some(r) => r,
            None => {
                let mut graph = self.graph.lock();
                // Re-check under the graph lock: another session may have made it.
                let again = self.keyed.read().get(&cache_key).cloned();
                if let Some(r) = again {
                    r
                } else {
                    let parent = graph.view_parent(&entry.name).ok_or_else(|| {
                        SqlError::new("XX000", format!("view \"{}\" has no dataflow", entry.name))
                    })?;
                    let lsn = entry
                        .reader
                        .handle()
                        .enter()
                        .map(|s| s.watermark())
                        .unwrap_or(0);
                    let (id, reader) =
                        graph.view(&keyed_name(&entry.name, key), parent, key.to_vec());
                    graph.initialize(&[id], &|_| Vec::new(), lsn)?;
                    self.keyed.write().insert(cache_key, reader.clone());
                    reader
                }
            }
        };
        let handle = reader.handle();
        let guard = handle.enter();
        Ok(match guard {
            Some(state) => (state.lookup(values), state.watermark()),
            None => (Vec::new(), 0),
        })
    }

    /// The dataflow behind a view, as text lines.
    pub fn explain(&self, name: &str) -> Vec<String> {
        self.graph.lock().explain(name)
    }

    /// The whole graph in Graphviz DOT.
    pub fn dot(&self) -> String {
        self.graph.lock().dot()
    }
}

/// Shared handle.
pub type Views = Arc<ViewRegistry>;
