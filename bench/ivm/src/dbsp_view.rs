//! DBSP: the vote view in a runtime with one worker thread.
//!
//! `counts = votes indexed by article id, weighted_count()`, then
//! `articles.left_join(counts)`, the LEFT JOIN operator DBSP's SQL compiler
//! uses. DBSP traces need its runtime (they merge batches on its merger
//! thread), so the circuit runs on the runtime's worker thread and this
//! thread drives it: one `transaction()` per step. After each step the
//! view's changes (`accumulate_output`: everything the transaction
//! produced, however many circuit steps it took) go into a map on this
//! thread (the readable copy of the view).

use std::collections::HashMap;

use anyhow::{bail, Context};
use dbsp::typed_batch::SpineSnapshot;
use dbsp::utils::{Tup2, Tup3};
use dbsp::{
    DBSPHandle, IndexedZSetHandle, IndexedZSetReader, OrdZSet, OutputHandle, Runtime, ZSetHandle,
};

use crate::workload::{Vote, Workload};
use crate::System;

type ViewRow = Tup3<u64, String, Option<i64>>;

pub struct DbspSystem {
    handle: Option<DBSPHandle>,
    articles: IndexedZSetHandle<u64, String>,
    votes: ZSetHandle<Tup2<u64, u64>>,
    /// The view's changes, accumulated over each transaction.
    output: OutputHandle<SpineSnapshot<OrdZSet<ViewRow>>>,
    /// (id, votes) → multiplicity of the view's rows.
    view: HashMap<(u64, Option<i64>), i64>,
}

impl DbspSystem {
    pub fn new() -> anyhow::Result<DbspSystem> {
        let (handle, (articles, votes, output)) = Runtime::init_circuit(1, |circuit| {
            let (articles, articles_in) = circuit.add_input_indexed_zset::<u64, String>();
            let (votes, votes_in) = circuit.add_input_zset::<Tup2<u64, u64>>();
            let counts = votes
                .map_index(|Tup2(article, _user)| (*article, ()))
                .weighted_count()
                .map_index(|(article, c)| (*article, Some(*c)));
            let view = articles.left_join(&counts, |id, title, c: &Option<i64>| {
                Tup3(*id, title.clone(), *c)
            });
            Ok((articles_in, votes_in, view.accumulate_output()))
        })
        .map_err(|e| anyhow::anyhow!("building the DBSP circuit: {e}"))?;
        Ok(DbspSystem {
            handle: Some(handle),
            articles,
            votes,
            output,
            view: HashMap::new(),
        })
    }

    fn step(&mut self) -> anyhow::Result<()> {
        self.handle
            .as_mut()
            .context("the runtime was stopped")?
            .transaction()
            .map_err(|e| anyhow::anyhow!("DBSP step: {e}"))?;
        // A transaction may take several steps; the accumulated output
        // holds all of them.
        let delta = self.output.concat();
        for (Tup3(id, _title, votes), (), w) in delta.iter() {
            let key = (id, votes);
            let n = self.view.entry(key).or_insert(0);
            *n += w;
            if *n == 0 {
                self.view.remove(&key);
            }
        }
        Ok(())
    }

    pub fn shutdown(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.kill();
        }
    }
}

impl System for DbspSystem {
    fn preload(&mut self, w: &Workload) -> anyhow::Result<()> {
        let mut articles: Vec<_> = w
            .articles
            .iter()
            .map(|(id, title)| Tup2(*id, Tup2(title.clone(), 1)))
            .collect();
        self.articles.append(&mut articles);
        let mut votes: Vec<_> = w
            .preload
            .iter()
            .map(|(a, u)| Tup2(Tup2(*a, *u), 1))
            .collect();
        self.votes.append(&mut votes);
        self.step()
    }

    fn insert(&mut self, votes: &[Vote]) -> anyhow::Result<()> {
        for (a, u) in votes {
            self.votes.push(Tup2(*a, *u), 1);
        }
        self.step()
    }

    fn votes_of(&mut self, ids: &[u64]) -> anyhow::Result<Vec<Option<i64>>> {
        let mut by_id: HashMap<u64, Vec<(Option<i64>, i64)>> = HashMap::new();
        for (&(id, votes), &n) in &self.view {
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
        if let Some((k, n)) = self.view.iter().find(|(_, &n)| n < 0) {
            bail!("the view holds {k:?} {n} times");
        }
        Ok(self.view.values().map(|&n| n as u64).sum())
    }

    fn note(&self) -> String {
        "Runtime::init_circuit(1): one worker thread plus DBSP's merger thread; \
         transaction() per step from the calling thread"
            .into()
    }
}

impl Drop for DbspSystem {
    fn drop(&mut self) {
        self.shutdown();
    }
}
