//! Maintained views as of a release: a `release` read of a view by key is
//! answered by a partial view of the view's own, private to the release
//! and built over the release's tables. A key is filled once, by an
//! upquery through the view's operators with index lookups in the frozen
//! tables — the same path as a partial view's miss — and then read from
//! memory until the release is replaced. Nothing needs maintaining: the
//! tables under it never change. A view whose key does not trace to
//! indexed columns of the base tables is kept in full instead, compiled
//! and filled once per release.
//!
//! The views of one release are dropped when the next release is first
//! read; [`MAX_RELEASE_VIEWS`] bounds how many one release builds.

use std::collections::HashMap;
use std::sync::Arc;

use aqueduct_dataflow::graph::{Graph, NodeId};
use aqueduct_dataflow::partial::Entry;
use aqueduct_dataflow::view::{ViewKind, ViewReader};
use aqueduct_dataflow::worker::owned_delta;
use aqueduct_dataflow::{Delta, Row};
use aqueduct_releases::Snapshot;
use aqueduct_values::Value;
use parking_lot::Mutex;

use aqueduct_expr::SqlError;

use crate::compile::Compiler;
use crate::view_entry::ViewEntry;
use crate::views::{keyed_name, table_rows, upqueries_can_look_up, ViewRegistry};
use aqueduct_plan::parse::view_query;

/// Most views (per view and key) one release builds; beyond it, reads
/// evaluate the view's query directly.
pub const MAX_RELEASE_VIEWS: usize = 1_024;
/// Most keys one release's view holds; a fill beyond it empties the view
/// first (what it held is derived from tables that never change, so it is
/// filled again on demand), bounding memory however long a release lasts.
pub const MAX_RELEASE_VIEW_KEYS: usize = 100_000;

/// One view of one release, on one key.
enum Scratch {
    /// Filled key by key by upqueries into the release's tables.
    Partial {
        graph: Box<Graph>,
        view: NodeId,
        reader: ViewReader,
    },
    /// Kept in full, by key: for a key that does not trace to indexed
    /// columns of the base tables. Compiled like the view, with its options
    /// (an automatic view's top-k per key), and filled from the release's
    /// tables once.
    Full {
        _graph: Box<Graph>,
        reader: ViewReader,
    },
}

/// The views built for the current release.
#[derive(Default)]
pub struct ReleaseViews {
    release: u64,
    views: HashMap<(u64, Vec<usize>), Arc<Mutex<Scratch>>>,
}

/// The rows of view `entry` whose `key` columns equal `values`, as of
/// the release `snap`: from `cache`, the views built for the current
/// release (built now if it has none), else computed by `views`.
pub fn lookup(
    cache: &Mutex<ReleaseViews>,
    views: &ViewRegistry,
    snap: &Snapshot,
    entry: &ViewEntry,
    key: &[usize],
    values: &[Value],
) -> Result<Vec<Row>, SqlError> {
    let id = snap.release.id;
    let slot: (u64, Vec<usize>) = (entry.uid(), key.to_vec());
    let found = {
        let mut rv = cache.lock();
        if rv.release != id {
            if rv.release > id {
                // A read of a release being replaced: not kept.
                drop(rv);
                return views.compute_lookup(&snap.catalog, entry, key, values);
            }
            rv.release = id;
            rv.views.clear();
        }
        match rv.views.get(&slot) {
            Some(s) => Some(s.clone()),
            None if rv.views.len() >= MAX_RELEASE_VIEWS => None,
            None => {
                // Built outside the lock; a racing reader builds its
                // own and one of them is kept.
                drop(rv);
                let built = Arc::new(Mutex::new(build_scratch(snap, entry, key)?));
                let mut rv = cache.lock();
                if rv.release == id {
                    Some(rv.views.entry(slot.clone()).or_insert(built).clone())
                } else {
                    Some(built)
                }
            }
        }
    };
    let Some(scratch) = found else {
        return views.compute_lookup(&snap.catalog, entry, key, values);
    };
    let mut scratch = scratch.lock();
    match &mut *scratch {
        Scratch::Full { reader, .. } => Ok(reader
            .read(|state, _| state.lookup(values))
            .unwrap_or_default()),
        Scratch::Partial {
            graph,
            view,
            reader,
        } => {
            let catalog = &snap.catalog;
            let fetch = |e: &Entry, k: &Row| -> Delta {
                catalog.table_by_id(e.table).map_or_else(Vec::new, |t| {
                    owned_delta(&t.weighted_matching(&e.columns, k, e.counted))
                })
            };
            let key_row: Row = values.to_vec();
            if !graph.holds(*view, &key_row) {
                if graph.partial_keys() >= MAX_RELEASE_VIEW_KEYS {
                    drop(scratch);
                    cache.lock().views.remove(&slot);
                    return lookup(cache, views, snap, entry, key, values);
                }
                graph.fill(*view, std::slice::from_ref(&key_row), &fetch);
            }
            let rows = reader
                .read(|state, _| state.lookup(values))
                .unwrap_or_default();
            Ok(rows)
        }
    }
}

fn build_scratch(snap: &Snapshot, entry: &ViewEntry, key: &[usize]) -> Result<Scratch, SqlError> {
    let catalog = &snap.catalog;
    let lsn = snap.release.lsn;
    let query = view_query(&entry.sql)?;
    let mut graph = Graph::new();
    graph.set_private(true);
    let mut c = Compiler::new(catalog, &mut graph);
    c.keep_order = entry.options.keep_order;
    c.partition_last = entry.options.partition_last;
    let compiled = c.query(&query)?;
    let nodes = std::mem::take(&mut c.new_nodes);
    drop(c);
    graph.set_private(false);
    graph.set_processed(lsn);
    let plan = graph
        .plan_partial(compiled.node, key, &nodes)
        .and_then(|plan| upqueries_can_look_up(catalog, &plan).map(|()| plan));
    match plan {
        Ok(plan) => {
            let name = keyed_name(&entry.name, key, false);
            let (view, reader) = graph.add_partial_view(&name, plan, &table_rows(catalog), lsn)?;
            Ok(Scratch::Partial {
                graph: Box::new(graph),
                view,
                reader,
            })
        }
        Err(_) => {
            let name = keyed_name(&entry.name, key, false);
            let (view, reader) =
                graph.view_with(&name, compiled.node, key.to_vec(), ViewKind::Full);
            let mut fresh = nodes;
            fresh.push(view);
            graph.initialize(&fresh, &table_rows(catalog), lsn)?;
            Ok(Scratch::Full {
                _graph: Box::new(graph),
                reader,
            })
        }
    }
}
