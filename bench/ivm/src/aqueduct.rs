//! Aqueduct: its dataflow graph (crate aqueduct-dataflow), built with the
//! operators that aqueduct-sql's compiler builds for the vote view, driven
//! the way the engine's commit hook drives it: one `Graph::process` per
//! commit.
//!
//! The compiler itself is private to aqueduct-sql, so the graph is built by
//! hand here, and [`check_against_engine`] makes sure it is the same graph:
//! it compiles the view with the real engine and compares the plans line for
//! line, then feeds both the same small data set and compares every row.

use std::collections::HashMap;

use anyhow::{bail, Context};
use aqueduct_dataflow::graph::{Graph, NodeId, TableId};
use aqueduct_dataflow::ops::{AggCall, Aggregate, Join, JoinKind, Project};
use aqueduct_dataflow::view::ViewReader;
use aqueduct_dataflow::{Delta, Row};
use aqueduct_expr::Expr;
use aqueduct_values::Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::workload::{Vote, Workload};
use crate::{System, VIEW_SQL};

const ARTICLE: TableId = 1;
const VOTE: TableId = 2;
/// The view's name as the engine stores it (identifiers are folded to lower case).
const VIEW: &str = "articlewithvotecount";

/// The graph of the vote view, as `CREATE VIEW` leaves it.
struct VoteGraph {
    graph: Graph,
    /// Nodes to fill from the tables (everything but the sources).
    new_nodes: Vec<NodeId>,
    last_op: NodeId,
    reader: ViewReader,
}

impl VoteGraph {
    /// Source article, source vote, then in the order the compiler adds
    /// them: the subquery's projection of the group key, the count, its
    /// select list, the left join, the outer select list, the view (keyed
    /// on nothing).
    fn build() -> VoteGraph {
        let mut g = Graph::new();
        let article = g.source(ARTICLE, "article");
        let vote = g.source(VOTE, "vote");
        let mut new_nodes = Vec::new();
        let mut op = |g: &mut Graph, op: Box<dyn aqueduct_dataflow::Operator>, parents| {
            let (id, fresh) = g.operator(op, parents);
            assert!(fresh, "every operator of the vote view is distinct");
            new_nodes.push(id);
            id
        };
        let keys = op(
            &mut g,
            Box::new(Project::new(vec![Expr::Column(0)])),
            vec![vote],
        );
        let count = op(
            &mut g,
            Box::new(Aggregate::new(vec![0], vec![AggCall::count_star()])),
            vec![keys],
        );
        let vc = op(
            &mut g,
            Box::new(Project::new(vec![Expr::Column(0), Expr::Column(1)])),
            vec![count],
        );
        let join = op(
            &mut g,
            Box::new(Join::new(JoinKind::Left, vec![0], vec![0], 2)),
            vec![article, vc],
        );
        let out = op(
            &mut g,
            Box::new(Project::new(vec![
                Expr::Column(0),
                Expr::Column(1),
                Expr::Column(3),
            ])),
            vec![join],
        );
        let (view, reader) = g.view(VIEW, out, vec![]);
        new_nodes.push(view);
        VoteGraph {
            graph: g,
            new_nodes,
            last_op: out,
            reader,
        }
    }

    /// Fills the graph from the tables' rows, as `ViewRegistry::install`
    /// does after `CREATE VIEW`.
    fn fill(&mut self, articles: &[Row], votes: &[Row], lsn: u64) -> anyhow::Result<()> {
        let rows = |t: TableId| -> Vec<Row> {
            match t {
                ARTICLE => articles.to_vec(),
                VOTE => votes.to_vec(),
                _ => Vec::new(),
            }
        };
        self.graph
            .initialize(&self.new_nodes, &rows, lsn)
            .map_err(|e| anyhow::anyhow!("filling the graph: {e}"))
    }

    /// Adds the reader keyed on the article id, as the first
    /// `ViewRegistry::lookup(entry, &[0], ..)` does.
    fn add_keyed_reader(&mut self, lsn: u64) -> anyhow::Result<ViewReader> {
        let name = format!("{VIEW}#{:?}", [0usize]);
        let (id, reader) = self.graph.view(&name, self.last_op, vec![0]);
        self.graph
            .initialize(&[id], &|_| Vec::new(), lsn)
            .map_err(|e| anyhow::anyhow!("filling the keyed reader: {e}"))?;
        Ok(reader)
    }

    fn all_rows(&self) -> Vec<Row> {
        let handle = self.reader.handle();
        let guard = handle.enter();
        guard.map(|s| s.all()).unwrap_or_default()
    }
}

fn article_row(id: u64, title: &str) -> Row {
    vec![Value::Int(id as i64), Value::Text(title.to_string())]
}

fn vote_row(v: &Vote) -> Row {
    vec![Value::Int(v.0 as i64), Value::Int(v.1 as i64)]
}

/// Compiles the view with aqueduct-sql's engine and checks that its plan is
/// the hand-built one, node for node, and that both give the same rows for
/// a small data set written through SQL. Returns the plan.
pub fn check_against_engine() -> anyhow::Result<Vec<String>> {
    use aqueduct_log::{Log, Options, SyncPolicy};
    use aqueduct_sql::{Engine, Outcome};

    let dir = tempfile::tempdir().context("creating a scratch directory")?;
    let (log, _) = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .context("opening a scratch log")?;
    let engine = Engine::open(log, &mut |_| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut s = engine.session();
    fn exec(s: &mut aqueduct_sql::Session, sql: &str) -> anyhow::Result<Outcome> {
        s.execute(sql)
            .pop()
            .context("no result")?
            .map_err(|e| anyhow::anyhow!("{sql}: {e}"))
    }
    exec(
        &mut s,
        "CREATE TABLE article (id int PRIMARY KEY, title text)",
    )?;
    exec(&mut s, "CREATE TABLE vote (article_id int, \"user\" int)")?;
    // A small data set, with articles that get no votes.
    let mut rng = StdRng::seed_from_u64(7);
    let articles: Vec<Row> = (1..=50)
        .map(|id| article_row(id, &format!("Article {id}")))
        .collect();
    let votes: Vec<Vote> = (0..400).map(|u| (rng.gen_range(1..=40), u)).collect();
    let (first, later) = votes.split_at(300);
    let values = |rows: &mut dyn Iterator<Item = String>| rows.collect::<Vec<_>>().join(", ");
    exec(
        &mut s,
        &format!(
            "INSERT INTO article VALUES {}",
            values(&mut (1..=50).map(|id| format!("({id}, 'Article {id}')")))
        ),
    )?;
    exec(
        &mut s,
        &format!(
            "INSERT INTO vote VALUES {}",
            values(&mut first.iter().map(|(a, u)| format!("({a}, {u})")))
        ),
    )?;
    exec(
        &mut s,
        &format!("CREATE VIEW ArticleWithVoteCount AS {VIEW_SQL}"),
    )?;
    for (a, u) in later {
        exec(&mut s, &format!("INSERT INTO vote VALUES ({a}, {u})"))?;
    }
    // The engine runs the dataflow on its own thread: wait for the last write.
    engine
        .views
        .await_lsn(s.last_lsn())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let names = engine.views.names();
    if names != [VIEW] {
        bail!("the engine named its views {names:?}, expected [{VIEW:?}]");
    }
    let entry = engine
        .views
        .get(VIEW)
        .context("the view is not installed")?;
    // The first keyed read adds the keyed reader.
    let (one, _) = engine
        .views
        .lookup(&entry, &[0], &[Value::Int(1)])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if one.len() != 1 {
        bail!("the engine's view has {} rows for article 1", one.len());
    }
    let engine_plan = engine.views.explain(VIEW);
    let keyed_name = format!("{VIEW}#{:?}", [0usize]);
    let engine_keyed_plan = engine.views.explain(&keyed_name);
    let (engine_rows, _) = engine
        .views
        .rows(&entry)
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let mut g = VoteGraph::build();
    let first_rows: Vec<Row> = first.iter().map(vote_row).collect();
    g.fill(&articles, &first_rows, 1)?;
    g.add_keyed_reader(1)?;
    for (i, v) in later.iter().enumerate() {
        g.graph
            .process(2 + i as u64, vec![(VOTE, vec![(vote_row(v), 1)])]);
    }
    let ours = g.graph.explain(VIEW);
    let ours_keyed = g.graph.explain(&keyed_name);
    if ours != engine_plan || ours_keyed != engine_keyed_plan {
        bail!(
            "the hand-built graph differs from the engine's plan:\nengine:\n  {}\nhere:\n  {}",
            [engine_plan, engine_keyed_plan].concat().join("\n  "),
            [ours, ours_keyed].concat().join("\n  ")
        );
    }
    let mut a = engine_rows;
    let mut b = g.all_rows();
    a.sort();
    b.sort();
    if a != b || a.len() != 50 {
        bail!("the hand-built graph and the engine give different rows for the same writes");
    }
    Ok([ours, ours_keyed].concat())
}

pub struct AqueductSystem {
    g: VoteGraph,
    keyed: Option<ViewReader>,
    want_keyed: bool,
    lsn: u64,
}

impl AqueductSystem {
    pub fn new(keyed_reader: bool) -> AqueductSystem {
        AqueductSystem {
            g: VoteGraph::build(),
            keyed: None,
            want_keyed: keyed_reader,
            lsn: 0,
        }
    }
}

impl System for AqueductSystem {
    fn preload(&mut self, w: &Workload) -> anyhow::Result<()> {
        let articles: Vec<Row> = w
            .articles
            .iter()
            .map(|(id, t)| article_row(*id, t))
            .collect();
        let votes: Vec<Row> = w.preload.iter().map(vote_row).collect();
        self.lsn = 1;
        self.g.fill(&articles, &votes, self.lsn)?;
        if self.want_keyed {
            self.keyed = Some(self.g.add_keyed_reader(self.lsn)?);
        }
        Ok(())
    }

    fn insert(&mut self, votes: &[Vote]) -> anyhow::Result<()> {
        self.lsn += 1;
        let delta: Delta = votes.iter().map(|v| (vote_row(v), 1)).collect();
        self.g.graph.process(self.lsn, vec![(VOTE, delta)]);
        Ok(())
    }

    fn votes_of(&mut self, ids: &[u64]) -> anyhow::Result<Vec<Option<i64>>> {
        if let Some(f) = self.g.graph.failure(VIEW) {
            bail!("the view failed at LSN {}: {}", f.lsn, f.error);
        }
        let to_votes = |id: u64, rows: &[&Row]| -> anyhow::Result<Option<i64>> {
            match rows {
                [r] => match &r[2] {
                    Value::Null => Ok(None),
                    Value::Int(n) => Ok(Some(*n)),
                    other => bail!("article {id}: votes is {other:?}"),
                },
                _ => bail!("article {id} has {} rows in the view", rows.len()),
            }
        };
        let all = self.g.all_rows();
        let mut by_id: HashMap<i64, Vec<&Row>> = HashMap::new();
        for r in &all {
            if let Value::Int(id) = r[0] {
                by_id.entry(id).or_default().push(r);
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let rows = by_id.get(&(id as i64)).cloned().unwrap_or_default();
            let v = to_votes(id, &rows)?;
            if let Some(keyed) = &self.keyed {
                // The keyed reader must agree with the view.
                let handle = keyed.handle();
                let found = handle
                    .enter()
                    .map(|s| s.lookup(&[Value::Int(id as i64)]))
                    .unwrap_or_default();
                let found: Vec<&Row> = found.iter().collect();
                let k = to_votes(id, &found)?;
                if k != v {
                    bail!("article {id}: the keyed reader says {k:?}, the view {v:?}");
                }
            }
            out.push(v);
        }
        Ok(out)
    }

    fn rows(&mut self) -> anyhow::Result<u64> {
        let handle = self.g.reader.handle();
        let guard = handle.enter();
        Ok(guard.map(|s| s.row_count()).unwrap_or(0))
    }

    fn note(&self) -> String {
        if self.want_keyed {
            "Graph::process per step; leaves: the view (keyed on nothing) and the reader keyed on id".into()
        } else {
            "Graph::process per step; leaf: the view as CREATE VIEW installs it (keyed on nothing)"
                .into()
        }
    }
}
