//! The checkers (`docs/publications.md` §10). Dependencies come from the
//! unhashed read and write sets of the source, never from slot code.

use std::collections::{BTreeMap, BTreeSet};

use aqueduct_publish::{ChangeOp, Mode};
use aqueduct_subscribe::{key_text, Item, MemRows, MemSink, RowState};
use serde_json::{json, Map, Value};

use super::workload::{published, table_name, SrcTxn, Tables, Workload};

/// A checker's complaint: which checker, and what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub checker: &'static str,
    pub detail: String,
}

type RowKey = (String, String);

fn row_key(table: u64, id: u64) -> RowKey {
    (table_name(table).to_string(), key_text(&[json!(id)]))
}

pub struct Checker {
    mode: Mode,
    exactly_once: bool,
    txns: BTreeMap<u64, SrcTxn>,
    /// Per publishing transaction, the earlier ones it depends on.
    deps: BTreeMap<u64, BTreeSet<u64>>,
    /// Per object, the LSNs of its schema changes.
    ddl: BTreeMap<String, Vec<u64>>,
    applied: BTreeSet<u64>,
    /// Transactions a causal fallback jumped over, not yet applied.
    late: BTreeSet<u64>,
    /// Per row, the highest-versioned change applied: (version, deleted).
    high: BTreeMap<RowKey, (u64, bool)>,
    /// Global: the source replayed up to the last commit.
    replica: Tables,
    replica_lsn: u64,
    last_global: Option<u64>,
    pub violations: Vec<Violation>,
}

impl Checker {
    pub fn new(w: &Workload, mode: Mode, exactly_once: bool) -> Checker {
        let mut deps = BTreeMap::new();
        let mut writers: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
        let mut table_writers: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut by_user: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut by_session: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut ddl: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for t in &w.txns {
            if let Some((table, _)) = &t.schema {
                ddl.entry(table_name(*table).to_string())
                    .or_default()
                    .push(t.lsn);
                continue;
            }
            if !t.publishes() {
                continue;
            }
            let mut d = BTreeSet::new();
            for wr in t.writes.iter().filter(|w| published(w.table)) {
                d.extend(writers.get(&(wr.table, wr.id)).into_iter().flatten());
            }
            for r in t.reads.iter().filter(|r| published(r.0)) {
                d.extend(writers.get(&(r.0, r.1)).into_iter().flatten());
            }
            for s in &t.scans {
                d.extend(table_writers.get(s).into_iter().flatten());
            }
            d.extend(by_user.get(&t.user).into_iter().flatten());
            d.extend(by_session.get(&t.session).into_iter().flatten());
            deps.insert(t.lsn, d);
            for wr in t.writes.iter().filter(|w| published(w.table)) {
                writers.entry((wr.table, wr.id)).or_default().push(t.lsn);
                table_writers.entry(wr.table).or_default().push(t.lsn);
            }
            by_user.entry(t.user.clone()).or_default().push(t.lsn);
            by_session.entry(t.session).or_default().push(t.lsn);
        }
        Checker {
            mode,
            exactly_once,
            txns: w.txns.iter().map(|t| (t.lsn, t.clone())).collect(),
            deps,
            ddl,
            applied: BTreeSet::new(),
            late: BTreeSet::new(),
            high: BTreeMap::new(),
            replica: Tables::new(),
            replica_lsn: 0,
            last_global: None,
            violations: Vec::new(),
        }
    }

    fn fail(&mut self, checker: &'static str, detail: String) {
        if self.violations.len() < 20 {
            self.violations.push(Violation { checker, detail });
        }
    }

    /// The agent applied `lsn` after waiting past the causal timeout: the
    /// transactions before it not applied yet are late.
    pub fn on_fallback(&mut self, lsn: u64) {
        for (&l, t) in self.txns.range(..lsn) {
            if t.publishes() && t.schema.is_none() && !self.applied.contains(&l) {
                self.late.insert(l);
            }
        }
    }

    /// Before each item of a commit is applied, with the sink as it is.
    pub fn before_item(&mut self, item: &Item, rows: &MemRows) {
        let lsn = item.lsn();
        if self.mode == Mode::Global {
            if self.last_global.is_some_and(|l| l >= lsn) {
                self.fail(
                    "global",
                    format!("{lsn} committed after {:?}", self.last_global),
                );
            }
            self.last_global = Some(lsn);
        }
        let Item::Txn(msg) = item else {
            return;
        };
        // Schema: every change under the schema it was written for.
        for c in &msg.changes {
            let want = self
                .ddl
                .get(&c.object)
                .and_then(|v| v.iter().rev().find(|&&d| d < lsn).copied());
            let have = rows.schema.get(&c.object).map(|s| s.0);
            if want != have {
                self.fail(
                    "schema",
                    format!(
                        "{lsn} on {} written under schema {want:?}, applied under {have:?}",
                        c.object
                    ),
                );
            }
        }
        if self.mode == Mode::Causal {
            let excused = !self.late.is_empty();
            let missing: Vec<u64> = self.deps[&lsn]
                .iter()
                .filter(|d| !self.applied.contains(d))
                .copied()
                .collect();
            if !missing.is_empty() && !excused {
                self.fail("causal", format!("{lsn} applied before {missing:?}"));
            }
            if !excused {
                let reads = self.txns[&lsn].reads.clone();
                for &(table, id, version) in reads.iter().filter(|r| published(r.0)) {
                    let (o, k) = row_key(table, id);
                    let seen = match rows.get(&o, &k) {
                        Some(RowState::Present { version, .. }) => Some(*version),
                        _ => None,
                    };
                    if seen != version {
                        self.fail(
                            "causal",
                            format!("{lsn} read {o} {k} at {version:?}, the sink has {seen:?}"),
                        );
                    }
                }
            }
        }
        self.applied.insert(lsn);
        self.late.remove(&lsn);
        for c in &msg.changes {
            let key = (c.object.clone(), key_text(&c.key));
            let e = self.high.entry(key).or_insert((0, false));
            if c.version > e.0 {
                *e = (c.version, c.op == ChangeOp::Delete);
            }
        }
    }

    /// After a commit.
    pub fn after_commit(&mut self, items: &[Item], sink: &MemSink) {
        // Weak's guard checks, in every mode: each row is the change with
        // the highest version applied (never older, never resurrected).
        for item in items {
            let Item::Txn(msg) = item else { continue };
            for c in &msg.changes {
                let key = (c.object.clone(), key_text(&c.key));
                let (v, deleted) = self.high[&key];
                let state = sink.rows.get(&key.0, &key.1);
                let ok = match state {
                    Some(RowState::Present { version, .. }) => !deleted && *version == v,
                    Some(RowState::Tombstone { .. }) | None => deleted,
                };
                if !ok {
                    self.fail(
                        "weak",
                        format!("{} {} is {state:?}, the newest change applied is {v} (deleted: {deleted})", key.0, key.1),
                    );
                }
            }
        }
        if self.exactly_once {
            for item in items {
                if sink.apply_count.get(&item.lsn()).copied().unwrap_or(0) > 1 {
                    self.fail("exactly-once", format!("{} applied twice", item.lsn()));
                }
            }
        }
        if self.mode == Mode::Global {
            let upto = items.iter().map(Item::lsn).max().unwrap_or(0);
            for (&l, t) in self.txns.range(self.replica_lsn + 1..=upto) {
                apply_source(&mut self.replica, t);
                self.replica_lsn = l;
            }
            let want = project(&self.replica);
            if sink.rows.present() != want {
                self.fail(
                    "global",
                    format!("the sink after {upto} is not the source at {upto}"),
                );
            }
        }
    }

    /// At the end: convergence and liveness.
    pub fn finish(&mut self, w: &Workload, sink: &MemSink, dead: &[u64]) {
        if !dead.is_empty() {
            self.fail("liveness", format!("dead letters left: {dead:?}"));
        }
        let missing: Vec<u64> = self
            .txns
            .values()
            .filter(|t| t.publishes() && t.schema.is_none() && !self.applied.contains(&t.lsn))
            .map(|t| t.lsn)
            .collect();
        if !missing.is_empty() {
            let n = missing.len();
            self.fail(
                "liveness",
                format!("{n} never applied, from {:?}", &missing[..n.min(8)]),
            );
        }
        if sink.rows.present() != project(&w.last) {
            self.fail(
                "convergence",
                "the sink differs from the source at the last LSN".into(),
            );
        }
    }
}

fn apply_source(tables: &mut Tables, t: &SrcTxn) {
    for w in &t.writes {
        match w.op {
            ChangeOp::Delete => {
                tables.remove(&(w.table, w.id));
            }
            _ => {
                tables.insert(
                    (w.table, w.id),
                    super::workload::Row {
                        version: t.lsn,
                        attrs: w.attrs.clone().expect("attrs"),
                    },
                );
            }
        }
    }
    if let Some((table, aqueduct_publish::SchemaChange::AddAttribute { name, existing, .. })) =
        &t.schema
    {
        for ((tb, _), row) in tables.iter_mut() {
            if tb == table {
                row.attrs.insert(name.clone(), existing.clone());
            }
        }
    }
}

/// The source as the publication shows it.
pub fn project(tables: &Tables) -> BTreeMap<(String, String), (u64, Map<String, Value>)> {
    tables
        .iter()
        .filter(|((t, _), _)| published(*t))
        .map(|(&(t, id), row)| (row_key(t, id), (row.version, row.attrs.clone())))
        .collect()
}
