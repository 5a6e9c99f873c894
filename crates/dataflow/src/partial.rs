//! Partial state (Noria's, `docs/partial-state.md`): a view read by key
//! holds only the keys its readers asked for, and so do the operators
//! private to it. A missing key is filled by an upquery: the base rows with
//! that key are fetched (by the caller, at the graph's LSN) and run through
//! the view's operators as if they had just been inserted. Evicting a key
//! runs the same rows through as deletions, which leaves no state derived
//! from the key anywhere, and then forgets the key.
//!
//! A view can be partial when its key *traces* to its base tables: every
//! operator between them computes the rows of one key from the input rows
//! of one key ([`Operator::trace_key`]). Its operators then form a region
//! keyed like the view. Rows a source sends into the region pass only for
//! keys the view holds. A join input that cannot carry the key (the story
//! side of a join keyed by author) is kept in full and feeds the region
//! unfiltered.
//!
//! Invariants (asserted where they are cheap):
//! 1. For a key the view holds, every region operator's state for it, and
//!    the view's rows, equal what a fully materialized dataflow has at the
//!    graph's LSN.
//! 2. For a key it does not hold, no region operator holds state derived
//!    from base rows with that key, and the view holds no rows for it.
//! 3. The view only ever receives rows of keys it holds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use aqueduct_expr::SqlError;
use indexmap::IndexMap;

use crate::graph::{Graph, Kind, NodeId, Pending, TableId};
use crate::view::{Lsn, ViewKind, ViewReader, READ_CLOCK};
use crate::{stored_bytes, Delta, Row};

/// Where base rows enter a partial view's operators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub table: TableId,
    pub source: NodeId,
    pub child: NodeId,
    pub port: usize,
    /// The table's columns that make up the view's key.
    pub columns: Vec<usize>,
    /// The operator it feeds reads no column but the key's, so a key's
    /// rows can come as one of them weighted by their count
    /// ([`Operator::input_columns`]): a fill or eviction of a key with a
    /// million rows walks an index range and touches no row.
    pub counted: bool,
}

/// A partial view and the operators private to it.
pub(crate) struct Region {
    pub(crate) entries: Vec<Entry>,
    /// Keys held, with the tick they were last read at; kept in insertion
    /// order with O(1) access by position, for sampling eviction victims.
    pub(crate) keys: IndexMap<Row, Arc<AtomicU32>>,
    /// Bytes the key map takes (keys, stamps).
    pub(crate) key_bytes: i64,
    /// The operators private to the view.
    pub(crate) nodes: Vec<NodeId>,
    /// The view's reader id, which readers ask for fills by.
    pub(crate) reader: u64,
}

/// How a view keyed on some columns would be kept partial: which nodes
/// belong to it, where base rows enter it, which join inputs stay full.
#[derive(Clone, Debug)]
pub struct PartialPlan {
    parent: NodeId,
    key: Vec<usize>,
    region: BTreeSet<NodeId>,
    entries: Vec<Entry>,
    /// Private nodes outside the region (fed in full), to fill from tables.
    full: BTreeSet<NodeId>,
    /// Inputs of region nodes that are fed in full: (node, port).
    full_ports: Vec<(NodeId, usize)>,
}

impl PartialPlan {
    /// Whether making the view reads base tables (some join input is kept
    /// in full); otherwise it starts empty and costs nothing to make.
    pub fn needs_tables(&self) -> bool {
        !self.full_ports.is_empty()
    }

    /// The base-table lookups an upquery makes: (table, columns).
    pub fn lookups(&self) -> Vec<(TableId, Vec<usize>)> {
        let mut l: Vec<(TableId, Vec<usize>)> = self
            .entries
            .iter()
            .map(|e| (e.table, e.columns.clone()))
            .collect();
        l.sort();
        l.dedup();
        l
    }

    /// How many join inputs are kept in full.
    pub fn full_inputs(&self) -> usize {
        self.full_ports.len()
    }
}

/// Bytes of a key's read stamp (an `Arc<AtomicU32>`).
const STAMP_BYTES: i64 = 24;

/// What an upquery needs from the base tables, and what it got: the rows
/// of `entry`'s table whose key columns equal the key, with weights (one
/// row weighted by the count when the entry is `counted`).
pub type Fetch<'a> = &'a dyn Fn(&Entry, &Row) -> Delta;

impl Graph {
    /// Plans a partial view over `parent` keyed on `key`, where `new_nodes`
    /// are the private nodes just compiled for it. The error says why the
    /// view must be kept in full instead.
    pub fn plan_partial(
        &self,
        parent: NodeId,
        key: &[usize],
        new_nodes: &[NodeId],
    ) -> Result<PartialPlan, String> {
        if key.is_empty() {
            return Err("it is read without a key".into());
        }
        let new: HashSet<NodeId> = new_nodes.iter().copied().collect();
        let mut keyed: HashMap<NodeId, Vec<usize>> = HashMap::new();
        let mut entries = Vec::new();
        let mut full_ports = Vec::new();
        let mut stack = vec![(parent, key.to_vec())];
        while let Some((n, cols)) = stack.pop() {
            if let Some(seen) = keyed.get(&n) {
                if *seen != cols {
                    return Err(format!(
                        "{} is read on two different keys",
                        self.describe_node(n)
                    ));
                }
                continue;
            }
            let node = &self.nodes[n];
            let Kind::Op(op) = &node.kind else {
                return Err(format!("{} holds the rows", self.describe_node(n)));
            };
            if !node.private || !new.contains(&n) {
                return Err(format!("{} is shared", self.describe_node(n)));
            }
            let ports = op.trace_key(&cols).ok_or_else(|| {
                format!("the key cannot be traced through {}", self.describe_node(n))
            })?;
            keyed.insert(n, cols);
            for (port, (traced, &p)) in ports.into_iter().zip(&node.parents).enumerate() {
                match (traced, &self.nodes[p].kind) {
                    (Some(c), Kind::Source { table, .. }) => entries.push(Entry {
                        table: *table,
                        source: p,
                        child: n,
                        port,
                        counted: op
                            .input_columns(port)
                            .is_some_and(|read| read.iter().all(|r| c.contains(r))),
                        columns: c,
                    }),
                    (Some(c), _) => stack.push((p, c)),
                    (None, _) => full_ports.push((n, port)),
                }
            }
        }
        let region: BTreeSet<NodeId> = keyed.keys().copied().collect();
        // A region node's rows go to region nodes (or the view) only.
        for &n in &region {
            for &(c, _) in &self.nodes[n].children {
                if !region.contains(&c) {
                    return Err(format!(
                        "{} also feeds {}",
                        self.describe_node(n),
                        self.describe_node(c)
                    ));
                }
            }
        }
        // Whatever else was compiled for the view feeds it in full.
        let full: BTreeSet<NodeId> = new_nodes
            .iter()
            .copied()
            .filter(|n| !region.contains(n) && matches!(self.nodes[*n].kind, Kind::Op(_)))
            .collect();
        Ok(PartialPlan {
            parent,
            key: key.to_vec(),
            region,
            entries,
            full,
            full_ports,
        })
    }

    /// Adds the partial view `plan` describes, named `name`, and fills what
    /// it keeps in full: from `table_rows` (tables as of `lsn`) when
    /// [`PartialPlan::needs_tables`], otherwise nothing is read.
    pub fn add_partial_view(
        &mut self,
        name: &str,
        plan: PartialPlan,
        table_rows: &dyn Fn(TableId) -> Vec<Row>,
        lsn: Lsn,
    ) -> Result<(NodeId, ViewReader), SqlError> {
        let (view, reader) = self.view_with(name, plan.parent, plan.key.clone(), ViewKind::Partial);
        for &n in &plan.region {
            self.nodes[n].region = Some(view);
            self.nodes[n].keep_output = false;
        }
        self.nodes[view].region = Some(view);
        for e in &plan.entries {
            self.entries
                .insert((e.child, e.port), (view, e.columns.clone()));
        }
        self.regions.insert(
            view,
            Region {
                entries: plan.entries.clone(),
                keys: IndexMap::new(),
                key_bytes: 0,
                nodes: plan.region.iter().copied().collect(),
                reader: reader.id(),
            },
        );
        // The full inputs: private nodes outside the region are filled from
        // the tables, then hand their rows to the region nodes they feed.
        // No key is held yet, so a region node emits nothing for them.
        for &n in &plan.full {
            self.nodes[n].keep_output = true;
        }
        let mut ids: Vec<NodeId> = plan.full.iter().copied().collect();
        ids.extend(plan.full_ports.iter().map(|(n, _)| *n));
        ids.sort_unstable();
        ids.dedup();
        let full_ports: HashSet<(NodeId, usize)> = plan.full_ports.iter().copied().collect();
        for id in ids {
            let parents = self.nodes[id].parents.clone();
            for (port, p) in parents.into_iter().enumerate() {
                let in_region = plan.region.contains(&id);
                if in_region && !full_ports.contains(&(id, port)) {
                    continue;
                }
                let input = self.contents_of(p, table_rows);
                let out = self.deliver_one(id, port, input, lsn)?;
                assert!(
                    !in_region || out.is_empty(),
                    "a partial view's operator emitted rows before holding any key"
                );
            }
        }
        // Full private nodes have no children but region nodes: their
        // output copies are no longer needed.
        for &n in &plan.full {
            let node = &mut self.nodes[n];
            node.keep_output = false;
            node.output = Default::default();
            node.output_bytes = 0;
        }
        if let Kind::View { writer, .. } = &mut self.nodes[view].kind {
            writer.publish(lsn);
        }
        Ok((view, reader))
    }

    /// The partial view a reader reads, by its reader id.
    pub fn partial_of(&self, reader: u64) -> Option<NodeId> {
        self.regions
            .iter()
            .find(|(_, r)| r.reader == reader)
            .map(|(&v, _)| v)
    }

    /// The base-table lookups that fill a key of partial view `view`.
    pub fn entries_of(&self, view: NodeId) -> Vec<Entry> {
        self.regions
            .get(&view)
            .map(|r| r.entries.clone())
            .unwrap_or_default()
    }

    /// Whether partial view `view` holds `key`.
    pub fn holds(&self, view: NodeId, key: &Row) -> bool {
        self.regions
            .get(&view)
            .is_some_and(|r| r.keys.contains_key(key))
    }

    /// Fills `keys` of partial view `view` (those it does not hold yet):
    /// `fetch` gives the base rows of each key *as of the graph's LSN*,
    /// which run through the view's operators as insertions. Publishes.
    pub fn fill(&mut self, view: NodeId, keys: &[Row], fetch: Fetch) {
        let lsn = self.processed();
        let Some(region) = self.regions.get_mut(&view) else {
            return;
        };
        let now = READ_CLOCK.load(Ordering::Relaxed);
        let mut fresh = Vec::new();
        for k in keys {
            if !region.keys.contains_key(k) {
                let stamp = Arc::new(AtomicU32::new(now));
                region.key_bytes += stored_bytes(k) + STAMP_BYTES;
                region.keys.insert(k.clone(), stamp.clone());
                fresh.push((k.clone(), stamp));
            }
        }
        if fresh.is_empty() {
            return;
        }
        let entries = region.entries.clone();
        if let Kind::View { writer, .. } = &mut self.nodes[view].kind {
            for (k, stamp) in &fresh {
                writer.fill(k.clone(), stamp.clone());
            }
        }
        let keys: Vec<Row> = fresh.into_iter().map(|(k, _)| k).collect();
        self.inject(&entries, &keys, 1, fetch, lsn);
        self.publish(lsn);
    }

    /// Evicts `keys` of partial view `view`: their base rows (as of the
    /// graph's LSN, from `fetch`) run through as deletions, which leaves no
    /// state derived from them, then the view forgets them. Publishes.
    pub fn evict(&mut self, view: NodeId, keys: &[Row], fetch: Fetch) {
        let lsn = self.processed();
        let Some(region) = self.regions.get(&view) else {
            return;
        };
        let keys: Vec<Row> = keys
            .iter()
            .filter(|k| region.keys.contains_key(*k))
            .cloned()
            .collect();
        let entries = region.entries.clone();
        self.inject(&entries, &keys, -1, fetch, lsn);
        let region = self.regions.get_mut(&view).expect("checked above");
        for k in &keys {
            if region.keys.swap_remove(k).is_some() {
                region.key_bytes -= stored_bytes(k) + STAMP_BYTES;
            }
        }
        if let Kind::View { writer, .. } = &mut self.nodes[view].kind {
            for k in keys {
                writer.evict(k);
            }
        }
        self.publish(lsn);
    }

    /// Sends the base rows of `keys` into a region's entries with `sign`.
    ///
    /// The rows go unconsolidated: sorting a hot key's million rows cost
    /// more than all the rest of a fill. They are one snapshot's rows, all
    /// of one sign, and every operator takes such a delta: filter, project
    /// and union map rows one by one; a join joins each row with the other
    /// side's state and folds it into its own, so the output sums up the
    /// same whatever the order (a LEFT join's padding follows each row's
    /// before and after); aggregate (when signs mix), distinct and topk
    /// consolidate their input. What an operator emits is consolidated
    /// (`Graph::deliver`), so the next operators and the view see net
    /// changes as before.
    fn inject(&mut self, entries: &[Entry], keys: &[Row], sign: i64, fetch: Fetch, lsn: Lsn) {
        let mut pending: Pending = BTreeMap::new();
        for e in entries {
            let mut delta: Delta = Vec::new();
            for k in keys {
                delta.extend(fetch(e, k).into_iter().map(|(r, w)| (r, w * sign)));
            }
            if !delta.is_empty() {
                pending.entry(e.child).or_default().push((e.port, delta));
            }
        }
        self.propagate(pending, lsn);
    }

    /// Up to `n` keys to evict, least recently read first, by sampling
    /// (as Redis does): each victim is the oldest of a few random keys.
    /// Keys in `keep` (just filled for a waiting reader) are spared.
    pub fn eviction_victims(
        &self,
        n: usize,
        keep: &HashSet<(NodeId, Row)>,
        rng: &mut u64,
    ) -> Vec<(NodeId, Row)> {
        const SAMPLE: usize = 8;
        let total: usize = self.regions.values().map(|r| r.keys.len()).sum();
        // Looked up by reference: sampling clones no key.
        let mut spared: HashMap<NodeId, HashSet<&Row>> = HashMap::new();
        for (v, k) in keep {
            spared.entry(*v).or_default().insert(k);
        }
        let mut chosen: HashSet<(NodeId, usize)> = HashSet::new();
        let mut out = Vec::new();
        let mut tries = 0;
        while out.len() < n && chosen.len() + keep.len() < total && tries < n * 4 + 16 {
            tries += 1;
            let mut best: Option<(u32, NodeId, usize, &Row)> = None;
            for _ in 0..SAMPLE {
                let mut i = (next_random(rng) % total as u64) as usize;
                for (&view, region) in &self.regions {
                    if i < region.keys.len() {
                        let (k, stamp) = region.keys.get_index(i).expect("in range");
                        let t = stamp.load(Ordering::Relaxed);
                        if !chosen.contains(&(view, i))
                            && !spared.get(&view).is_some_and(|s| s.contains(k))
                            && best.is_none_or(|(bt, ..)| t < bt)
                        {
                            best = Some((t, view, i, k));
                        }
                        break;
                    }
                    i -= region.keys.len();
                }
            }
            if let Some((_, view, i, k)) = best {
                chosen.insert((view, i));
                out.push((view, k.clone()));
            }
        }
        out
    }

    /// Bytes of every view's and operator's state: the views' rows, the
    /// operators' state, output copies kept to fill new views, and the
    /// keys partial views hold. What `--memory-limit` bounds.
    pub fn state_bytes(&self) -> u64 {
        let mut total: i64 = 0;
        for n in &self.nodes {
            total += n.output_bytes;
            match &n.kind {
                Kind::Op(op) => total += op.state_bytes() as i64,
                Kind::View { writer, .. } => total += writer.bytes() as i64,
                _ => {}
            }
        }
        for r in self.regions.values() {
            total += r.key_bytes;
        }
        total.max(0) as u64
    }

    /// The bytes one view's state takes: its rows, and for a partial view
    /// its private operators and keys too.
    pub fn view_bytes(&self, view: NodeId) -> u64 {
        let mut total = match &self.nodes[view].kind {
            Kind::View { writer, .. } => writer.bytes() as i64,
            _ => 0,
        };
        if let Some(r) = self.regions.get(&view) {
            for &n in &r.nodes {
                if let Kind::Op(op) = &self.nodes[n].kind {
                    total += op.state_bytes() as i64 + self.nodes[n].output_bytes;
                }
            }
            total += r.key_bytes;
        }
        total.max(0) as u64
    }

    /// Keys partial views hold, in all.
    pub fn partial_keys(&self) -> usize {
        self.regions.values().map(|r| r.keys.len()).sum()
    }

    /// The reader id and keys held of every partial view.
    pub fn partial_views(&self) -> Vec<(NodeId, u64, usize)> {
        self.regions
            .iter()
            .map(|(&v, r)| (v, r.reader, r.keys.len()))
            .collect()
    }
}

/// xorshift64: victims are sampled, not chosen by hash order.
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{AggCall, Aggregate, Join, JoinKind, Project};
    use aqueduct_expr::agg::AggFunc;
    use aqueduct_expr::Expr;
    use aqueduct_values::Value;

    const ARTICLE: TableId = 1;
    const VOTE: TableId = 2;

    /// `article LEFT JOIN (SELECT article_id, <agg> AS votes FROM vote
    /// GROUP BY article_id)` keyed on the article, compiled as aqueduct-sql
    /// does: `agg` is `COUNT(*)`, or an aggregate of `user_id`.
    fn votes_per_article(agg: Option<AggFunc>) -> (Graph, NodeId, ViewReader) {
        let mut g = Graph::new();
        let article = g.source(ARTICLE, "article");
        let vote = g.source(VOTE, "vote");
        g.set_private(true);
        let col = Expr::Column;
        let (pre, call) = match agg {
            None => (vec![col(0)], AggCall::count_star()),
            Some(f) => (vec![col(0), col(1)], AggCall::of(f, 1)),
        };
        let (pre, _) = g.operator(Box::new(Project::new(pre)), vec![vote]);
        let (agg, _) = g.operator(Box::new(Aggregate::new(vec![0], vec![call])), vec![pre]);
        let (vc, _) = g.operator(Box::new(Project::new(vec![col(0), col(1)])), vec![agg]);
        let (j, _) = g.operator(
            Box::new(Join::new(JoinKind::Left, vec![0], vec![0], 2).with_left_width(2)),
            vec![article, vc],
        );
        let (out, _) = g.operator(
            Box::new(Project::new(vec![col(0), col(1), col(3)])),
            vec![j],
        );
        let nodes = [pre, agg, vc, j, out];
        let plan = g.plan_partial(out, &[0], &nodes).unwrap();
        let (view, reader) = g
            .add_partial_view("votes", plan, &|_| unreachable!(), 0)
            .unwrap();
        g.set_private(false);
        (g, view, reader)
    }

    /// Fills `key`, checks that the view has `expected` for it, then
    /// evicts it and checks that no state is left.
    fn fill_and_evict(
        g: &mut Graph,
        (view, reader): (NodeId, &ViewReader),
        key: &Row,
        fetch: Fetch,
        expected: Row,
    ) {
        let keys = std::slice::from_ref(key);
        g.fill(view, keys, fetch);
        assert_eq!(reader.read(|s, _| s.lookup(key)).unwrap(), vec![expected]);
        g.evict(view, keys, fetch);
        assert_eq!(g.state_bytes(), 0, "eviction leaves no state");
    }

    fn article() -> Row {
        vec![Value::Int(1), Value::Text("a".into())]
    }

    /// Base rows go in as fetched: unsorted, with duplicates.
    #[test]
    fn a_fill_takes_base_rows_as_they_come() {
        let votes: Vec<Row> = [3, 1, 3, 2]
            .map(|u| vec![Value::Int(1), Value::Int(u)])
            .into();
        let fetch = |e: &Entry, _: &Row| -> Delta {
            if e.table == ARTICLE {
                vec![(article(), 1)]
            } else if e.counted {
                vec![(votes[0].clone(), votes.len() as i64)]
            } else {
                votes.iter().map(|v| (v.clone(), 1)).collect()
            }
        };
        let key = vec![Value::Int(1)];
        for (agg, n) in [
            (None, 4),
            (Some(AggFunc::Count), 4),
            (Some(AggFunc::Max), 3),
        ] {
            let (mut g, view, reader) = votes_per_article(agg);
            // COUNT(*) reads only the key: its votes may come counted.
            let counted: Vec<bool> = g.entries_of(view).iter().map(|e| e.counted).collect();
            assert_eq!(counted, [false, agg.is_none()], "{agg:?}");
            let mut expected = article();
            expected.push(Value::Int(n));
            for _ in 0..2 {
                fill_and_evict(&mut g, (view, &reader), &key, &fetch, expected.clone());
            }
        }
    }
}
