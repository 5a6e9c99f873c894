//! Partial views under concurrent writes, upqueries and evictions, checked
//! against an oracle: every read equals the view's query computed from the
//! tables' history at some LSN between the view's watermark before and the
//! processed LSN after the read.
//!
//! Two views, over `article(id, author)` and `vote(article_id, user)`:
//! - votes per article (a LEFT JOIN keyed on the join column: both inputs
//!   are partial);
//! - votes per author (the key changes at the join: the vote side is kept
//!   in full, the article side is partial).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aqueduct_dataflow::graph::{Graph, TableId};
use aqueduct_dataflow::ops::{AggCall, Aggregate, Join, JoinKind, Project};
use aqueduct_dataflow::view::{Lsn, ViewReader};
use aqueduct_dataflow::worker::{Ask, Upstream, WeightedRows, Worker};
use aqueduct_dataflow::Row;
use aqueduct_expr::agg::AggFunc;
use aqueduct_expr::Expr;
use aqueduct_values::Value;

const ARTICLE: TableId = 1;
const VOTE: TableId = 2;
const ARTICLES: i64 = 60;
const AUTHORS: i64 = 7;
/// Vote writes at least and at most; in between, the writer goes on until
/// this many reads overlapped its writes.
const MIN_VOTE_WRITES: usize = 3000;
const MAX_VOTE_WRITES: usize = 100_000;
const OVERLAPPED_READS: u64 = 300;

/// The tables: current rows, the LSN they are at, and every change.
#[derive(Default)]
struct Tables {
    lsn: Lsn,
    rows: BTreeMap<TableId, Vec<Row>>,
    history: Vec<(Lsn, TableId, Row, i64)>,
}

struct Model(Mutex<Tables>);

impl Upstream for Model {
    fn rows_at(&self, asks: &[Ask]) -> Option<(Vec<WeightedRows>, Lsn)> {
        let t = self.0.lock().unwrap();
        let out = asks
            .iter()
            .map(|(table, cols, key, counted)| {
                let rows: Vec<(Arc<Row>, i64)> = t
                    .rows
                    .get(table)
                    .into_iter()
                    .flatten()
                    .filter(|r| cols.iter().zip(key).all(|(&c, v)| r[c] == *v))
                    .map(|r| (Arc::new(r.clone()), 1))
                    .collect();
                match rows.first() {
                    Some((first, _)) if *counted => vec![(first.clone(), rows.len() as i64)],
                    _ => rows,
                }
            })
            .collect();
        Some((out, t.lsn))
    }
}

fn int(i: i64) -> Value {
    Value::Int(i)
}

/// Votes per article and per author at `lsn`, from the history.
fn oracle(
    history: &[(Lsn, TableId, Row, i64)],
    lsn: Lsn,
) -> (BTreeMap<i64, i64>, BTreeMap<i64, i64>) {
    let mut votes: BTreeMap<i64, i64> = BTreeMap::new();
    for (l, table, row, w) in history {
        if *l <= lsn && *table == VOTE {
            let Value::Int(a) = row[0] else {
                unreachable!()
            };
            *votes.entry(a).or_default() += w;
        }
    }
    let mut per_author: BTreeMap<i64, i64> = BTreeMap::new();
    for a in 0..ARTICLES {
        let n = votes.get(&a).copied().unwrap_or(0);
        if n > 0 {
            *per_author.entry(a % AUTHORS).or_default() += n;
        }
    }
    (votes, per_author)
}

/// Reads `key` of a partial view, filling it by upquery when missing.
fn read(worker: &Worker, view: &ViewReader, key: i64) -> (Vec<Row>, Lsn, Lsn) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = view
            .read(|s, w| {
                let mut rows = Vec::new();
                s.for_each(&[int(key)], |r| rows.push(r.clone()))
                    .then_some((rows, w))
            })
            .expect("the view exists");
        if let Some((rows, low)) = got {
            return (rows, low, worker.stats().processed);
        }
        worker
            .upquery(view.id(), vec![vec![int(key)]], deadline)
            .expect("the upquery is served");
    }
}

#[test]
fn partial_views_equal_the_oracle_under_writes_upqueries_and_evictions() {
    let mut g = Graph::new();
    let article = g.source(ARTICLE, "article");
    let vote = g.source(VOTE, "vote");
    g.set_private(true);
    let mut nodes = Vec::new();
    // Votes per article: LEFT JOIN article/vote, COUNT(user) by article.
    let (j, _) = g.operator(
        Box::new(Join::new(JoinKind::Left, vec![0], vec![0], 2).with_left_width(2)),
        vec![article, vote],
    );
    let (p, _) = g.operator(
        Box::new(Project::new(vec![Expr::Column(0), Expr::Column(3)])),
        vec![j],
    );
    let count = AggCall {
        func: AggFunc::Count,
        column: Some(1),
        distinct: false,
    };
    let (a, _) = g.operator(
        Box::new(Aggregate::new(vec![0], vec![count.clone()])),
        vec![p],
    );
    nodes.extend([j, p, a]);
    let plan = g
        .plan_partial(a, &[0], &nodes)
        .expect("keyed on the join column");
    assert!(!plan.needs_tables(), "both join inputs carry the key");
    let (_, per_article) = g
        .add_partial_view("per_article", plan, &|_| unreachable!(), 0)
        .unwrap();
    // Votes per author: the key (author) is on the article side only.
    let (j2, _) = g.operator(
        Box::new(Join::new(JoinKind::Inner, vec![0], vec![0], 2).with_left_width(2)),
        vec![article, vote],
    );
    let (p2, _) = g.operator(
        Box::new(Project::new(vec![Expr::Column(1), Expr::Column(3)])),
        vec![j2],
    );
    let (a2, _) = g.operator(Box::new(Aggregate::new(vec![0], vec![count])), vec![p2]);
    let plan = g
        .plan_partial(a2, &[0], &[j2, p2, a2])
        .expect("keyed on the article side");
    assert!(plan.needs_tables(), "the vote side is kept in full");
    assert!(
        g.plan_partial(a2, &[1], &[j2, p2, a2]).is_err(),
        "a count is no key"
    );
    let (_, per_author) = g
        .add_partial_view("per_author", plan, &|_| Vec::new(), 0)
        .unwrap();
    g.set_private(false);

    let model = Arc::new(Model(Mutex::new(Tables::default())));
    let worker = Arc::new(Worker::start(g));
    worker.set_upstream(model.clone());
    // Small: a few dozen keys fit, so evictions happen all the time.
    worker.set_memory_limit(12_000);

    let stop = AtomicBool::new(false);
    let checked = std::sync::atomic::AtomicU64::new(0);
    // Reads made while the writer was still writing.
    let during = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        // The writer: articles first, then votes added and removed. The
        // batch is submitted after the tables change, as commits do, so
        // upqueries race with batches they already contain.
        s.spawn(|| {
            let mut rng = 7u64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut live: Vec<Row> = Vec::new();
            // Writes go on until enough reads overlapped them (bounded).
            for i in 0..(ARTICLES as usize + MAX_VOTE_WRITES) {
                if i >= ARTICLES as usize + MIN_VOTE_WRITES
                    && during.load(Ordering::Relaxed) >= OVERLAPPED_READS
                {
                    break;
                }
                let (table, row, w) = if i < ARTICLES as usize {
                    (ARTICLE, vec![int(i as i64), int(i as i64 % AUTHORS)], 1)
                } else if live.len() > 20 && next() % 3 == 0 {
                    let r = live.swap_remove(next() as usize % live.len());
                    (VOTE, r, -1)
                } else {
                    let r = vec![int((next() % ARTICLES as u64) as i64), int(i as i64)];
                    live.push(r.clone());
                    (VOTE, r, 1)
                };
                let lsn = {
                    let mut t = model.0.lock().unwrap();
                    t.lsn += 1;
                    let lsn = t.lsn;
                    let rows = t.rows.entry(table).or_default();
                    if w > 0 {
                        rows.push(row.clone());
                    } else {
                        let at = rows.iter().position(|r| *r == row).unwrap();
                        rows.swap_remove(at);
                    }
                    t.history.push((lsn, table, row.clone(), w));
                    lsn
                };
                worker.submit(lsn, vec![(table, vec![(row, w)])]);
            }
            stop.store(true, Ordering::Release);
        });
        for reader in 0..2u64 {
            let (worker, model, checked, during) = (&worker, &model, &checked, &during);
            let (per_article, per_author, stop) = (&per_article, &per_author, &stop);
            s.spawn(move || {
                let mut rng = 11 + reader;
                let mut rounds = 0;
                while !stop.load(Ordering::Acquire) || rounds < 200 {
                    rounds += 1;
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let by_author = rng % 4 == 0;
                    let (view, key) = if by_author {
                        (per_author, (rng >> 8) as i64 % AUTHORS)
                    } else {
                        (per_article, (rng >> 8) as i64 % ARTICLES)
                    };
                    let (rows, low, high) = read(worker, view, key);
                    let history = model.0.lock().unwrap().history.clone();
                    let ok = (low..=high.max(low)).any(|lsn| {
                        let (votes, authors) = oracle(&history, lsn);
                        let article_exists = history
                            .iter()
                            .any(|(l, t, r, _)| *l <= lsn && *t == ARTICLE && r[0] == int(key));
                        let expected: Vec<Row> = if by_author {
                            authors
                                .get(&key)
                                .map(|n| vec![vec![int(key), int(*n)]])
                                .unwrap_or_default()
                        } else if article_exists {
                            vec![vec![int(key), int(votes.get(&key).copied().unwrap_or(0))]]
                        } else {
                            vec![]
                        };
                        expected == rows
                    });
                    assert!(
                        ok,
                        "{} {key} read {rows:?} between LSN {low} and {high}",
                        if by_author { "author" } else { "article" }
                    );
                    checked.fetch_add(1, Ordering::Relaxed);
                    if !stop.load(Ordering::Acquire) {
                        during.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let stats = per_article.stats().snapshot();
    eprintln!(
        "checked {} reads; per article {stats:?}; per author {:?}",
        checked.load(Ordering::Relaxed),
        per_author.stats().snapshot()
    );
    assert!(checked.load(Ordering::Relaxed) >= 400);
    assert!(
        during.load(Ordering::Relaxed) >= OVERLAPPED_READS,
        "too few reads overlapped the writes"
    );
    assert!(stats.misses == 0 || stats.fills > 0);
    assert!(stats.fills > 0, "keys were filled by upqueries");
    assert!(
        stats.evictions + per_author.stats().snapshot().evictions > 0,
        "the memory limit evicted keys"
    );
}
