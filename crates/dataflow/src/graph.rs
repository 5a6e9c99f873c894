//! The dataflow graph: an arena of nodes (sources, operators, views) in
//! topological order, with reuse of identical sub-plans and in-order batch
//! propagation.
//!
//! Node ids grow as nodes are added and a node is only ever added after its
//! parents, so ascending id order is a topological order: processing pending
//! deltas smallest id first delivers every input before a node runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aqueduct_expr::SqlError;

use crate::partial::Region;
use crate::tap::Tap;
pub use crate::view::ViewFailure;
use crate::view::{new_view_with, Lsn, ViewKind, ViewReader, ViewWriter};
use crate::FastMap;
use crate::{consolidate, stored_bytes, Delta, Operator, Row};

pub type NodeId = usize;
pub type TableId = u64;

/// Inputs waiting for each node: (port, delta).
pub(crate) type Pending = BTreeMap<NodeId, Vec<(usize, Delta)>>;

pub(crate) enum Kind {
    Source {
        table: TableId,
        name: String,
    },
    Op(Box<dyn Operator>),
    View {
        name: String,
        writer: ViewWriter,
    },
    /// A node no view needs any more.
    Removed,
}

pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) parents: Vec<NodeId>,
    pub(crate) children: Vec<(NodeId, usize)>,
    /// Everything the node has emitted so far, to start new children with
    /// (empty for sources, whose children start from the table, and for
    /// nodes private to one view, which get no new children).
    pub(crate) output: FastMap<Row, i64>,
    pub(crate) output_bytes: i64,
    pub(crate) keep_output: bool,
    /// Made for one view only: never shared with another.
    pub(crate) private: bool,
    /// The partial view whose keys this node's state is limited to.
    pub(crate) region: Option<NodeId>,
}

#[derive(Default)]
pub struct Graph {
    pub(crate) nodes: Vec<Node>,
    reuse: HashMap<(String, Vec<NodeId>), NodeId>,
    sources: HashMap<TableId, NodeId>,
    views: HashMap<String, NodeId>,
    /// Views already marked failed (their readers see the failure).
    failed: HashMap<NodeId, ViewFailure>,
    /// The LSN up to which every batch has been processed and published.
    processed: Arc<AtomicU64>,
    /// Operators added now are private to the view being compiled.
    private: bool,
    /// Partial views, by their view node.
    pub(crate) regions: BTreeMap<NodeId, Region>,
    /// Edges from a source into a partial view's operators: (child, port)
    /// → (the partial view, the source columns its key is made of). Rows
    /// of keys the view does not hold do not pass.
    pub(crate) entries: HashMap<(NodeId, usize), (NodeId, Vec<usize>)>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    fn push(&mut self, kind: Kind, parents: Vec<NodeId>) -> NodeId {
        let id = self.nodes.len();
        for (port, &p) in parents.iter().enumerate() {
            self.nodes[p].children.push((id, port));
        }
        self.nodes.push(Node {
            kind,
            parents,
            children: Vec::new(),
            output: FastMap::default(),
            output_bytes: 0,
            keep_output: !self.private,
            private: self.private,
            region: None,
        });
        id
    }

    /// While on, operators added are private to the view being compiled:
    /// not shared with other views (their state may be partial).
    pub fn set_private(&mut self, on: bool) {
        self.private = on;
    }

    /// The views fed by `table`'s source, directly or through operators.
    pub fn views_reading(&self, table: TableId) -> Vec<String> {
        let Some(&source) = self.sources.get(&table) else {
            return Vec::new();
        };
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![source];
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n], true) {
                continue;
            }
            stack.extend(self.nodes[n].children.iter().map(|(c, _)| *c));
        }
        let mut out: Vec<String> = self
            .views
            .iter()
            .filter(|(_, &id)| seen[id])
            .map(|(name, _)| name.clone())
            .collect();
        out.sort();
        out
    }

    /// The source node of a table (created on first use).
    pub fn source(&mut self, table: TableId, name: &str) -> NodeId {
        if let Some(&id) = self.sources.get(&table) {
            return id;
        }
        let id = self.push(
            Kind::Source {
                table,
                name: name.to_string(),
            },
            vec![],
        );
        self.sources.insert(table, id);
        id
    }

    /// Adds `op` over `parents`, or returns the existing identical node.
    /// The flag is true when the node is new (it must be initialised).
    pub fn operator(&mut self, op: Box<dyn Operator>, parents: Vec<NodeId>) -> (NodeId, bool) {
        assert_eq!(op.inputs(), parents.len(), "operator arity");
        if self.private {
            return (self.push(Kind::Op(op), parents), true);
        }
        let key = (op.signature(), parents.clone());
        if let Some(&id) = self.reuse.get(&key) {
            return (id, false);
        }
        let id = self.push(Kind::Op(op), parents);
        self.reuse.insert(key, id);
        (id, true)
    }

    /// Adds a view named `name` over `parent`, keyed by `key` columns.
    pub fn view(&mut self, name: &str, parent: NodeId, key: Vec<usize>) -> (NodeId, ViewReader) {
        self.view_with(name, parent, key, ViewKind::Full)
    }

    /// [`Graph::view`], keeping its rows as `kind` says.
    pub fn view_with(
        &mut self,
        name: &str,
        parent: NodeId,
        key: Vec<usize>,
        kind: ViewKind,
    ) -> (NodeId, ViewReader) {
        let (writer, reader) = new_view_with(key, self.processed.clone(), kind);
        let id = self.push(
            Kind::View {
                name: name.to_string(),
                writer,
            },
            vec![parent],
        );
        self.views.insert(name.to_string(), id);
        (id, reader)
    }

    /// The tables the graph reads (its sources).
    pub fn source_tables(&self) -> Vec<TableId> {
        let mut t: Vec<TableId> = self.sources.keys().copied().collect();
        t.sort_unstable();
        t
    }

    /// The node a view reads from (to hang another reader on it).
    pub fn view_parent(&self, name: &str) -> Option<NodeId> {
        self.views
            .get(name)
            .and_then(|&id| self.nodes[id].parents.first().copied())
    }

    /// The tap on view `name` (made now if it has none): its changes from
    /// the LSN the graph is at. `None` for no such view or a partial one.
    pub fn tap(&mut self, name: &str) -> Option<Arc<Tap>> {
        let id = *self.views.get(name)?;
        let at = self.processed();
        match &mut self.nodes[id].kind {
            Kind::View { writer, .. } if !writer.is_partial() => Some(writer.tap(at)),
            _ => None,
        }
    }

    /// Whether any view has a tap: then batches are processed one by one.
    pub fn has_taps(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(&n.kind, Kind::View { writer, .. } if writer.is_tapped()))
    }

    pub fn has_view(&self, name: &str) -> bool {
        self.views.contains_key(name)
    }

    /// Sets the LSN the graph is at, when nothing was processed yet: the
    /// tables it was filled from were recovered up to it.
    pub fn set_processed(&mut self, lsn: Lsn) {
        self.processed.store(lsn, Ordering::Release);
    }

    /// The LSN up to which every batch has been processed and published.
    pub fn processed(&self) -> Lsn {
        self.processed.load(Ordering::Acquire)
    }

    /// Why a view cannot be read, if it failed.
    pub fn failure(&self, name: &str) -> Option<&ViewFailure> {
        self.views.get(name).and_then(|id| self.failed.get(id))
    }

    /// Fills freshly added nodes from their parents' current contents: a
    /// source's table rows (from `table_rows`), or an existing node's output.
    pub fn initialize(
        &mut self,
        new_nodes: &[NodeId],
        table_rows: &dyn Fn(TableId) -> Vec<Row>,
        lsn: Lsn,
    ) -> Result<(), SqlError> {
        let mut ids = new_nodes.to_vec();
        ids.sort_unstable();
        for id in ids {
            // A statement filling a one-shot dataflow stops here when it
            // is interrupted (no-op elsewhere).
            aqueduct_expr::interrupt::check()?;
            let parents = self.nodes[id].parents.clone();
            for (port, p) in parents.into_iter().enumerate() {
                let input = self.contents_of(p, table_rows);
                self.deliver(id, port, input, lsn)?;
            }
            if let Kind::View { writer, .. } = &mut self.nodes[id].kind {
                writer.publish(lsn);
            }
        }
        Ok(())
    }

    /// Everything node `p` holds, to fill a new child with: a source's
    /// table rows (from `table_rows`), or an operator's output copy. In a
    /// fixed order, whatever order the bag is kept in, so a new node ends
    /// in the same state on every replica.
    pub(crate) fn contents_of(&self, p: NodeId, table_rows: &dyn Fn(TableId) -> Vec<Row>) -> Delta {
        let mut input: Delta = match &self.nodes[p].kind {
            Kind::Source { table, .. } => table_rows(*table).into_iter().map(|r| (r, 1)).collect(),
            _ => self.nodes[p]
                .output
                .iter()
                .map(|(r, w)| (r.clone(), *w))
                .collect(),
        };
        consolidate(&mut input);
        input
    }

    /// Runs one node on one input and records what it emits.
    pub(crate) fn deliver_one(
        &mut self,
        id: NodeId,
        port: usize,
        delta: Delta,
        lsn: Lsn,
    ) -> Result<Delta, SqlError> {
        self.deliver(id, port, delta, lsn)
    }

    fn deliver(
        &mut self,
        id: NodeId,
        port: usize,
        delta: Delta,
        lsn: Lsn,
    ) -> Result<Delta, SqlError> {
        let node = &mut self.nodes[id];
        let mut out = match &mut node.kind {
            Kind::Op(op) => op.process(port, delta)?,
            Kind::View { writer, .. } => {
                if let Some(region) = node.region {
                    // A partial view only ever gets rows of keys it holds.
                    let held = &self.regions[&region].keys;
                    for (row, _) in &delta {
                        assert!(
                            held.contains_key(&writer.key_of(row)),
                            "a partial view got rows of a key it does not hold"
                        );
                    }
                }
                writer.apply(&delta);
                return Ok(Vec::new());
            }
            // A source passes its table's changes on without keeping them:
            // new children of a source are filled from the table itself.
            Kind::Source { .. } => {
                let mut delta = delta;
                consolidate(&mut delta);
                return Ok(delta);
            }
            Kind::Removed => return Ok(Vec::new()),
        };
        let _ = lsn;
        consolidate(&mut out);
        if node.keep_output {
            for (r, w) in &out {
                let n = node.output.entry(r.clone()).or_insert(0);
                if *n == 0 {
                    node.output_bytes += stored_bytes(r);
                }
                *n += w;
                if *n == 0 {
                    node.output.remove(r);
                    node.output_bytes -= stored_bytes(r);
                }
            }
        }
        Ok(out)
    }

    /// Propagates one committed batch (per-table deltas) through the graph
    /// and publishes every view at `lsn`. A failing operator marks the views
    /// below it failed; the rest of the graph stays correct.
    pub fn process(&mut self, lsn: Lsn, changes: Vec<(TableId, Delta)>) {
        let mut pending: Pending = BTreeMap::new();
        for (table, delta) in changes {
            if let Some(&src) = self.sources.get(&table) {
                pending.entry(src).or_default().push((0, delta));
            }
        }
        self.propagate(pending, lsn);
        debug_assert!(lsn >= self.processed(), "batches arrive in LSN order");
        self.publish(lsn);
        self.processed.store(lsn, Ordering::Release);
    }

    /// Runs pending inputs through the graph, smallest node first. Rows a
    /// source sends into a partial view's operators pass only for keys the
    /// view holds.
    pub(crate) fn propagate(&mut self, mut pending: Pending, lsn: Lsn) {
        while let Some((id, inputs)) = pending.pop_first() {
            for (port, delta) in inputs {
                match self.deliver(id, port, delta, lsn) {
                    Ok(mut out) if !out.is_empty() => {
                        let children = self.nodes[id].children.len();
                        for i in 0..children {
                            let (child, child_port) = self.nodes[id].children[i];
                            let d = match self.entries.get(&(child, child_port)) {
                                Some((region, cols)) => {
                                    let held = &self.regions[region].keys;
                                    out.iter()
                                        .filter(|(r, _)| {
                                            held.contains_key(&crate::ops::columns(r, cols))
                                        })
                                        .cloned()
                                        .collect()
                                }
                                // The last child takes the rows: no copy
                                // for a node's only child.
                                None if i + 1 == children => std::mem::take(&mut out),
                                None => out.clone(),
                            };
                            if !d.is_empty() {
                                pending.entry(child).or_default().push((child_port, d));
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(error) => self.fail_below(id, &ViewFailure { lsn, error }),
                }
            }
        }
    }

    /// Publishes the views changed since the last publish, as of `lsn`;
    /// the processed LSN carries the others' watermarks forward.
    pub(crate) fn publish(&mut self, lsn: Lsn) {
        for node in &mut self.nodes {
            if let Kind::View { writer, .. } = &mut node.kind {
                if writer.is_dirty() {
                    writer.publish(lsn);
                }
            }
        }
    }

    fn fail_below(&mut self, id: NodeId, failure: &ViewFailure) {
        let mut stack = vec![id];
        let mut seen = HashSet::new();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            if let Kind::View { writer, .. } = &mut self.nodes[n].kind {
                if let std::collections::hash_map::Entry::Vacant(e) = self.failed.entry(n) {
                    e.insert(failure.clone());
                    writer.fail(failure.clone());
                }
            }
            stack.extend(self.nodes[n].children.iter().map(|(c, _)| *c));
        }
    }

    /// Removes freshly compiled nodes no view reads (a compilation that was
    /// given up), children first.
    pub fn discard(&mut self, nodes: &[NodeId]) {
        let mut ids = nodes.to_vec();
        ids.sort_unstable();
        for &n in ids.iter().rev() {
            assert!(
                self.nodes[n].children.is_empty(),
                "a discarded node has a child"
            );
            let parents = std::mem::take(&mut self.nodes[n].parents);
            for p in &parents {
                self.nodes[*p].children.retain(|(c, _)| *c != n);
            }
            self.reuse.retain(|_, v| *v != n);
            self.nodes[n].kind = Kind::Removed;
            self.nodes[n].output.clear();
            self.nodes[n].output_bytes = 0;
        }
    }

    /// Removes a view and every node only it needed.
    pub fn drop_view(&mut self, name: &str) -> bool {
        let Some(id) = self.views.remove(name) else {
            return false;
        };
        self.failed.remove(&id);
        if self.regions.remove(&id).is_some() {
            self.entries.retain(|_, (region, _)| *region != id);
        }
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            if !self.nodes[n].children.is_empty() || matches!(self.nodes[n].kind, Kind::Removed) {
                continue;
            }
            let parents = std::mem::take(&mut self.nodes[n].parents);
            for p in &parents {
                self.nodes[*p].children.retain(|(c, _)| *c != n);
            }
            self.reuse.retain(|_, v| *v != n);
            self.sources.retain(|_, v| *v != n);
            self.nodes[n].kind = Kind::Removed;
            self.nodes[n].output.clear();
            self.nodes[n].output_bytes = 0;
            stack.extend(parents);
        }
        true
    }

    /// The ancestors of a view, as text lines (for `EXPLAIN`).
    pub fn explain(&self, name: &str) -> Vec<String> {
        let Some(&id) = self.views.get(name) else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        self.explain_node(id, 0, &mut lines);
        lines
    }

    pub(crate) fn describe_node(&self, id: NodeId) -> String {
        self.describe(id)
    }

    fn describe(&self, id: NodeId) -> String {
        let n = &self.nodes[id];
        match &n.kind {
            Kind::Source { name, .. } => format!("table {name}"),
            Kind::Op(op) => op.signature(),
            Kind::View { name, writer } => format!(
                "{}view {name} keyed on {:?}",
                if writer.is_partial() { "partial " } else { "" },
                writer_key(writer)
            ),
            Kind::Removed => "removed".into(),
        }
    }

    fn explain_node(&self, id: NodeId, depth: usize, lines: &mut Vec<String>) {
        let shared = self.nodes[id].children.len() > 1;
        lines.push(format!(
            "{}{} (node {id}{})",
            "  ".repeat(depth),
            self.describe(id),
            if shared { ", shared" } else { "" }
        ));
        for &p in &self.nodes[id].parents {
            self.explain_node(p, depth + 1, lines);
        }
    }

    /// The whole graph in Graphviz DOT.
    pub fn dot(&self) -> String {
        self.dot_where(|_| true)
    }

    /// A view and everything it reads from, in Graphviz DOT.
    pub fn dot_of(&self, name: &str) -> String {
        let mut keep = HashSet::new();
        let mut stack: Vec<NodeId> = self.views.get(name).copied().into_iter().collect();
        while let Some(n) = stack.pop() {
            if keep.insert(n) {
                stack.extend(self.nodes[n].parents.iter().copied());
            }
        }
        self.dot_where(|id| keep.contains(&id))
    }

    fn dot_where(&self, keep: impl Fn(NodeId) -> bool) -> String {
        let mut out = String::from(
            "digraph aqueduct {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
        );
        for (id, n) in self.nodes.iter().enumerate() {
            if matches!(n.kind, Kind::Removed) || !keep(id) {
                continue;
            }
            let shape = match n.kind {
                Kind::Source { .. } => "cylinder",
                Kind::View { .. } => "ellipse",
                _ => "box",
            };
            let label = self.describe(id).replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!("  n{id} [label=\"{label}\", shape={shape}];\n"));
            for (port, p) in n.parents.iter().enumerate() {
                out.push_str(&format!("  n{p} -> n{id} [label=\"{port}\"];\n"));
            }
        }
        out.push_str("}\n");
        out
    }

    /// Nodes in use (not removed).
    pub fn node_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| !matches!(n.kind, Kind::Removed))
            .count()
    }
}

fn writer_key(w: &ViewWriter) -> Vec<usize> {
    w.key_columns().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Filter, Project};
    use aqueduct_expr::{BinOp, Expr};
    use aqueduct_values::Value;

    fn row(v: &[i64]) -> Row {
        v.iter().map(|&i| Value::Int(i)).collect()
    }

    #[test]
    fn batches_flow_to_views_and_identical_plans_are_shared() {
        let mut g = Graph::new();
        let src = g.source(1, "t");
        let pred = Expr::Binary(
            BinOp::Gt,
            Box::new(Expr::Column(1)),
            Box::new(Expr::Literal(Value::Int(5))),
        );
        let (f1, new1) = g.operator(Box::new(Filter::new(pred.clone())), vec![src]);
        let (v1, r1) = g.view("a", f1, vec![0]);
        g.initialize(&[f1, v1], &|_| vec![row(&[1, 10]), row(&[2, 3])], 5)
            .unwrap();
        assert!(new1);
        let h1 = r1.handle();
        assert_eq!(h1.enter().unwrap().all(), vec![row(&[1, 10])]);

        // A second view over the same filter reuses it and starts from its output.
        let (f2, new2) = g.operator(Box::new(Filter::new(pred)), vec![src]);
        assert_eq!((f2, new2), (f1, false));
        let (p, _) = g.operator(Box::new(Project::new(vec![Expr::Column(1)])), vec![f1]);
        let (v2, r2) = g.view("b", p, vec![0]);
        g.initialize(&[p, v2], &|_| unreachable!("the filter is already full"), 5)
            .unwrap();
        let h2 = r2.handle();
        assert_eq!(h2.enter().unwrap().all(), vec![row(&[10])]);

        g.process(6, vec![(1, vec![(row(&[3, 7]), 1), (row(&[1, 10]), -1)])]);
        assert_eq!(h1.enter().unwrap().all(), vec![row(&[3, 7])]);
        assert_eq!(h2.enter().unwrap().all(), vec![row(&[7])]);
        assert_eq!(h2.enter().unwrap().watermark(), 6);
        assert!(g.explain("b")[0].starts_with("view b"));
        assert!(g.dot().contains("n0 -> n1"));

        assert!(g.drop_view("b"));
        assert_eq!(g.node_count(), 3, "the projection went with its only view");
    }

    #[test]
    fn a_failing_operator_fails_only_the_views_below_it() {
        let mut g = Graph::new();
        let src = g.source(1, "t");
        let div = Expr::Binary(
            BinOp::Div,
            Box::new(Expr::Literal(Value::Int(10))),
            Box::new(Expr::Column(0)),
        );
        let (p, _) = g.operator(Box::new(Project::new(vec![div])), vec![src]);
        let (_, _) = g.view("quotients", p, vec![0]);
        let (_, ok) = g.view("plain", src, vec![0]);
        g.process(1, vec![(1, vec![(row(&[0]), 1)])]);
        assert_eq!(g.failure("quotients").unwrap().error.code, "22012");
        assert!(g.failure("plain").is_none());
        assert_eq!(ok.handle().enter().unwrap().all(), vec![row(&[0])]);
    }
}
