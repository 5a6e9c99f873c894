//! A source database in the shape of Synapse's Fig. 8: users, posts and
//! comments (published) and an audit table (not published); transactions
//! that write rows, read others, scan tables, run as a user in a session;
//! and a schema change or two. Row versions are commit LSNs.

use std::collections::BTreeMap;

use aqueduct_publish::{ChangeOp, SchemaChange};
use serde_json::{json, Map, Value};

use super::prng::Rng;

pub const USERS: u64 = 1;
pub const POSTS: u64 = 2;
pub const COMMENTS: u64 = 3;
pub const AUDIT: u64 = 4;

pub fn table_name(t: u64) -> &'static str {
    match t {
        USERS => "users",
        POSTS => "posts",
        COMMENTS => "comments",
        _ => "audit",
    }
}

pub fn published(t: u64) -> bool {
    t != AUDIT
}

/// A row of the source.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub version: u64,
    pub attrs: Map<String, Value>,
}

/// One row written.
#[derive(Clone, Debug)]
pub struct Write {
    pub table: u64,
    pub id: u64,
    pub op: ChangeOp,
    pub attrs: Option<Map<String, Value>>,
    pub prev_version: Option<u64>,
}

/// One committed source transaction (or a schema change).
#[derive(Clone, Debug)]
pub struct SrcTxn {
    pub first_lsn: u64,
    pub lsn: u64,
    pub user: String,
    pub session: u64,
    pub writes: Vec<Write>,
    /// Rows read and not written, with the version read (`None`: absent).
    pub reads: Vec<(u64, u64, Option<u64>)>,
    pub scans: Vec<u64>,
    pub schema: Option<(u64, SchemaChange)>,
}

impl SrcTxn {
    /// Whether the stream carries a message for it.
    pub fn publishes(&self) -> bool {
        self.schema.is_some() || self.writes.iter().any(|w| published(w.table))
    }
}

/// Source tables.
pub type Tables = BTreeMap<(u64, u64), Row>;

pub struct Workload {
    pub txns: Vec<SrcTxn>,
    /// The tables after the last transaction.
    pub last: Tables,
}

struct Gen<'a> {
    rng: &'a mut Rng,
    tables: Tables,
    next_id: u64,
    extra_post_attrs: Vec<(String, Value)>,
    lsn: u64,
}

impl Gen<'_> {
    fn ids(&self, table: u64) -> Vec<u64> {
        self.tables
            .keys()
            .filter(|(t, _)| *t == table)
            .map(|(_, id)| *id)
            .collect()
    }

    fn attrs(&mut self, table: u64, id: u64, author: u64, parent: u64) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), json!(id));
        m.insert("n".into(), json!(self.rng.below(1000)));
        match table {
            USERS => {
                m.insert("name".into(), json!(format!("user{id}")));
            }
            POSTS => {
                m.insert("author".into(), json!(author));
                for (k, _) in &self.extra_post_attrs {
                    m.insert(k.clone(), json!(self.rng.below(50)));
                }
            }
            COMMENTS => {
                m.insert("author".into(), json!(author));
                m.insert("post".into(), json!(parent));
            }
            _ => {}
        }
        m
    }

    fn write(
        &mut self,
        txn: &mut SrcTxn,
        table: u64,
        id: u64,
        op: ChangeOp,
        attrs: Option<Map<String, Value>>,
    ) {
        if txn.writes.iter().any(|w| w.table == table && w.id == id) {
            return;
        }
        let prev = self.tables.get(&(table, id)).map(|r| r.version);
        let op = match (op, prev) {
            (ChangeOp::Delete, None) => return,
            (ChangeOp::Delete, Some(_)) => ChangeOp::Delete,
            (_, None) => ChangeOp::Insert,
            (_, Some(_)) => ChangeOp::Update,
        };
        txn.reads.retain(|&(t, i, _)| (t, i) != (table, id));
        txn.writes.push(Write {
            table,
            id,
            op,
            attrs: if op == ChangeOp::Delete { None } else { attrs },
            prev_version: prev,
        });
    }

    fn read(&mut self, txn: &mut SrcTxn, table: u64, id: u64) {
        if txn.writes.iter().any(|w| w.table == table && w.id == id)
            || txn.reads.iter().any(|&(t, i, _)| (t, i) == (table, id))
        {
            return;
        }
        let v = self.tables.get(&(table, id)).map(|r| r.version);
        txn.reads.push((table, id, v));
    }

    fn commit(&mut self, mut txn: SrcTxn, records: u64) -> SrcTxn {
        txn.first_lsn = self.lsn + 1;
        txn.lsn = self.lsn + records.max(1);
        self.lsn = txn.lsn;
        for w in &txn.writes {
            match w.op {
                ChangeOp::Delete => {
                    self.tables.remove(&(w.table, w.id));
                }
                _ => {
                    self.tables.insert(
                        (w.table, w.id),
                        Row {
                            version: txn.lsn,
                            attrs: w.attrs.clone().expect("attrs"),
                        },
                    );
                }
            }
        }
        if let Some((table, SchemaChange::AddAttribute { name, existing, .. })) = &txn.schema {
            for ((t, _), row) in self.tables.iter_mut() {
                if t == table {
                    row.attrs.insert(name.clone(), existing.clone());
                }
            }
            self.extra_post_attrs.push((name.clone(), existing.clone()));
        }
        txn
    }
}

/// Generates `n` transactions.
pub fn generate(rng: &mut Rng, n: usize, users: u64, ddl: bool) -> Workload {
    let mut g = Gen {
        rng,
        tables: Tables::new(),
        next_id: 100,
        extra_post_attrs: Vec::new(),
        lsn: 0,
    };
    let mut txns = Vec::new();
    let ddl_at: Vec<usize> = if ddl { vec![n / 3, 2 * n / 3] } else { vec![] };
    for i in 0..n {
        let u = 1 + g.rng.below(users);
        let mut txn = SrcTxn {
            first_lsn: 0,
            lsn: 0,
            user: format!("u{u}"),
            session: u * 10 + g.rng.below(2),
            writes: Vec::new(),
            reads: Vec::new(),
            scans: Vec::new(),
            schema: None,
        };
        if ddl_at.contains(&i) {
            let name = format!("extra{i}");
            txn.schema = Some((
                POSTS,
                SchemaChange::AddAttribute {
                    name,
                    ty: "bigint".into(),
                    existing: json!(0),
                },
            ));
            txns.push(g.commit(txn, 1));
            continue;
        }
        let posts = g.ids(POSTS);
        let comments = g.ids(COMMENTS);
        let kind = g.rng.below(100);
        match kind {
            // A user creates or edits their profile.
            0..=9 => {
                let a = g.attrs(USERS, u, u, 0);
                g.write(&mut txn, USERS, u, ChangeOp::Update, Some(a));
            }
            // A post.
            10..=29 => {
                let id = g.next_id;
                g.next_id += 1;
                g.read(&mut txn, USERS, u);
                let a = g.attrs(POSTS, id, u, 0);
                g.write(&mut txn, POSTS, id, ChangeOp::Insert, Some(a));
            }
            // A comment on a post read (maybe one just deleted: absent).
            30..=59 if !posts.is_empty() => {
                let p = *g.rng.pick(&posts);
                let p = if g.rng.chance(100) { p + 1 } else { p };
                g.read(&mut txn, POSTS, p);
                let id = g.next_id;
                g.next_id += 1;
                let a = g.attrs(COMMENTS, id, u, p);
                g.write(&mut txn, COMMENTS, id, ChangeOp::Insert, Some(a));
            }
            // A post edited.
            60..=69 if !posts.is_empty() => {
                let p = *g.rng.pick(&posts);
                let a = g.attrs(POSTS, p, u, 0);
                g.write(&mut txn, POSTS, p, ChangeOp::Update, Some(a));
            }
            // Comments deleted or edited together, reading their post.
            70..=79 if !comments.is_empty() => {
                for _ in 0..1 + g.rng.below(3) {
                    let c = *g.rng.pick(&comments);
                    if g.rng.chance(500) {
                        g.write(&mut txn, COMMENTS, c, ChangeOp::Delete, None);
                    } else {
                        let a = g.attrs(COMMENTS, c, u, 0);
                        g.write(&mut txn, COMMENTS, c, ChangeOp::Update, Some(a));
                    }
                }
                if let Some(&p) = posts.first() {
                    g.read(&mut txn, POSTS, p);
                }
            }
            // A post deleted (sometimes recreated later under its id).
            80..=84 if !posts.is_empty() => {
                let p = *g.rng.pick(&posts);
                g.write(&mut txn, POSTS, p, ChangeOp::Delete, None);
            }
            85..=87 if !posts.is_empty() => {
                let p = *g.rng.pick(&posts) + 1;
                let a = g.attrs(POSTS, p, u, 0);
                g.write(&mut txn, POSTS, p, ChangeOp::Insert, Some(a));
            }
            // A scan: the user's post count from all posts.
            88..=93 => {
                txn.scans.push(POSTS);
                let mut a = g.attrs(USERS, u, u, 0);
                a.insert("posts".into(), json!(posts.len()));
                g.write(&mut txn, USERS, u, ChangeOp::Update, Some(a));
            }
            // Only the unpublished audit table.
            _ => {
                let id = g.next_id;
                g.next_id += 1;
                let a = g.attrs(AUDIT, id, u, 0);
                g.write(&mut txn, AUDIT, id, ChangeOp::Insert, Some(a));
            }
        }
        if txn.writes.is_empty() {
            let a = g.attrs(USERS, u, u, 0);
            g.write(&mut txn, USERS, u, ChangeOp::Update, Some(a));
        }
        // Some transactions also write the audit table.
        if g.rng.chance(200) {
            let id = g.next_id;
            g.next_id += 1;
            let a = g.attrs(AUDIT, id, u, 0);
            g.write(&mut txn, AUDIT, id, ChangeOp::Insert, Some(a));
        }
        let records = 1 + g.rng.below(3);
        txns.push(g.commit(txn, records));
    }
    Workload {
        txns,
        last: g.tables,
    }
}
