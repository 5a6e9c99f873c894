//! Differential Dataflow: the vote view on one timely worker, on this thread.
//!
//! `counts = votes.map(article_id).count_total()`; both inputs of the join
//! are arranged by article id once and shared by the two joins that make the
//! LEFT JOIN: the matched rows, plus every article with a NULL count minus
//! those that have a count. The view's changes go into a map on this thread
//! (the readable copy of the view). A step advances both inputs to the next
//! epoch and runs the worker until the probe has passed it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::bail;
use differential_dataflow::input::{Input, InputSession};
use differential_dataflow::operators::count::CountTotal;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::worker::Worker;

use crate::workload::{Vote, Workload};
use crate::{run_system, System, SystemKind, SystemResult};

/// (id, votes) → multiplicity of the view's rows (the title is left out of
/// the readable copy: it never changes here).
type Output = Rc<RefCell<HashMap<(u64, Option<i64>), isize>>>;

struct DdSystem<'w> {
    worker: &'w mut Worker,
    articles: InputSession<u64, (u64, String), isize>,
    votes: InputSession<u64, (u64, u64), isize>,
    probe: ProbeHandle<u64>,
    output: Output,
    epoch: u64,
}

impl<'w> DdSystem<'w> {
    fn new(worker: &'w mut Worker) -> DdSystem<'w> {
        let output: Output = Rc::new(RefCell::new(HashMap::new()));
        let out = output.clone();
        let (articles, votes, probe) = worker.dataflow::<u64, _, _>(move |scope| {
            let (articles_in, articles) = scope.new_collection::<(u64, String), isize>();
            let (votes_in, votes) = scope.new_collection::<(u64, u64), isize>();
            let counts = votes.map(|(article, _user)| article).count_total();
            let articles_by_id = articles.arrange_by_key();
            let counts_by_id = counts.arrange_by_key();
            let matched = articles_by_id.clone().join_core(
                counts_by_id.clone(),
                |id: &u64, title: &String, c: &isize| Some((*id, title.clone(), Some(*c as i64))),
            );
            let with_count = articles_by_id
                .clone()
                .join_core(counts_by_id, |id: &u64, title: &String, _c: &isize| {
                    Some((*id, title.clone(), None::<i64>))
                });
            let unmatched = articles_by_id
                .as_collection(|id: &u64, title: &String| (*id, title.clone(), None::<i64>))
                .concat(with_count.negate());
            let (probe, _) = matched
                .concat(unmatched)
                .inspect(move |((id, _title, votes), _time, diff)| {
                    let mut map = out.borrow_mut();
                    let key = (*id, *votes);
                    let n = map.entry(key).or_insert(0);
                    *n += *diff;
                    if *n == 0 {
                        map.remove(&key);
                    }
                })
                .probe();
            (articles_in, votes_in, probe)
        });
        DdSystem {
            worker,
            articles,
            votes,
            probe,
            output,
            epoch: 0,
        }
    }

    /// Closes the current epoch and runs until the view reflects it.
    fn settle(&mut self) {
        self.epoch += 1;
        self.articles.advance_to(self.epoch);
        self.votes.advance_to(self.epoch);
        self.articles.flush();
        self.votes.flush();
        let (probe, worker, time) = (&self.probe, &mut *self.worker, self.epoch);
        worker.step_while(|| probe.less_than(&time));
    }
}

impl System for DdSystem<'_> {
    fn preload(&mut self, w: &Workload) -> anyhow::Result<()> {
        for a in &w.articles {
            self.articles.insert(a.clone());
        }
        for v in &w.preload {
            self.votes.insert(*v);
        }
        self.settle();
        Ok(())
    }

    fn insert(&mut self, votes: &[Vote]) -> anyhow::Result<()> {
        for v in votes {
            self.votes.insert(*v);
        }
        self.settle();
        Ok(())
    }

    fn votes_of(&mut self, ids: &[u64]) -> anyhow::Result<Vec<Option<i64>>> {
        let map = self.output.borrow();
        let mut by_id: HashMap<u64, Vec<(Option<i64>, isize)>> = HashMap::new();
        for (&(id, votes), &n) in map.iter() {
            by_id.entry(id).or_default().push((votes, n));
        }
        ids.iter()
            .map(|id| match by_id.get(id).map(Vec::as_slice) {
                Some([(votes, 1)]) => Ok(*votes),
                other => bail!("article {id} has rows {other:?} in the view"),
            })
            .collect()
    }

    fn rows(&mut self) -> anyhow::Result<u64> {
        let map = self.output.borrow();
        if let Some((k, n)) = map.iter().find(|(_, &n)| n < 0) {
            bail!("the view holds {k:?} {n} times");
        }
        Ok(map.values().map(|&n| n as u64).sum())
    }

    fn note(&self) -> String {
        "timely::execute_directly (one worker on the calling thread); epoch per step".into()
    }
}

/// Runs the benchmark inside a single-threaded timely worker.
pub fn run(w: Arc<Workload>) -> anyhow::Result<SystemResult> {
    timely::execute_directly(move |worker| {
        let mut s = DdSystem::new(worker);
        let r = run_system(SystemKind::Dd, &mut s, &w);
        // Dropping the inputs closes them, so the dataflow can finish.
        drop(s);
        r.map_err(|e| e.to_string())
    })
    .map_err(|e| anyhow::anyhow!(e))
}
