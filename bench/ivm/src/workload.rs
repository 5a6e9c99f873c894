//! The generated data: articles, preloaded votes, the votes inserted while
//! timing, and the truth they add up to.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::{Args, Distribution};

/// A vote: (article_id, user).
pub type Vote = (u64, u64);

pub struct Workload {
    /// (id, title), ids 1..=N.
    pub articles: Vec<(u64, String)>,
    pub preload: Vec<Vote>,
    /// Inserted one per step.
    pub single: Vec<Vote>,
    /// Inserted `batch` per step.
    pub batched: Vec<Vote>,
    pub batch: usize,
    check_sample: usize,
    seed: u64,
}

/// Draws article ids 1..=n, uniformly or by a Zipf law (id 1 the most
/// popular), from a precomputed cumulative distribution.
struct Sampler {
    n: u64,
    cdf: Option<Vec<f64>>,
}

impl Sampler {
    fn new(n: u64, dist: Distribution, s: f64) -> Sampler {
        let cdf = match dist {
            Distribution::Uniform => None,
            Distribution::Zipf => {
                let mut acc = 0.0;
                let mut cdf: Vec<f64> = (1..=n)
                    .map(|k| {
                        acc += (k as f64).powf(-s);
                        acc
                    })
                    .collect();
                for c in &mut cdf {
                    *c /= acc;
                }
                Some(cdf)
            }
        };
        Sampler { n, cdf }
    }

    fn sample(&self, rng: &mut StdRng) -> u64 {
        match &self.cdf {
            None => rng.gen_range(1..=self.n),
            Some(cdf) => {
                let u: f64 = rng.gen();
                let i = cdf.partition_point(|&c| c < u);
                (i as u64).min(self.n - 1) + 1
            }
        }
    }
}

impl Workload {
    pub fn generate(args: &Args) -> Workload {
        let mut rng = StdRng::seed_from_u64(args.seed);
        let sampler = Sampler::new(args.articles, args.distribution, args.zipf_s);
        let articles = (1..=args.articles)
            .map(|id| (id, format!("Article {id}")))
            .collect();
        let mut user = 0u64;
        let mut votes = |count: u64, rng: &mut StdRng| -> Vec<Vote> {
            (0..count)
                .map(|_| {
                    user += 1;
                    (sampler.sample(rng), user)
                })
                .collect()
        };
        let preload = votes(args.votes, &mut rng);
        let single = votes(args.updates, &mut rng);
        let batched = votes(args.batch_updates.unwrap_or(args.updates), &mut rng);
        Workload {
            articles,
            preload,
            single,
            batched,
            batch: args.batch as usize,
            check_sample: args.check_sample,
            seed: args.seed,
        }
    }

    /// Votes per article id (index 0 unused) after every phase.
    pub fn truth(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.articles.len() + 1];
        for (a, _) in self.preload.iter().chain(&self.single).chain(&self.batched) {
            counts[*a as usize] += 1;
        }
        counts
    }

    /// The articles checked at the end: a random sample, the ten most voted,
    /// up to ten without votes (their row has a NULL count), the first and
    /// the last, and every article a timed insert touched last.
    pub fn check_ids(&self) -> Vec<u64> {
        let n = self.articles.len() as u64;
        let truth = self.truth();
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5eed);
        let mut ids: Vec<u64> = (0..self.check_sample)
            .map(|_| rng.gen_range(1..=n))
            .collect();
        let mut by_votes: Vec<u64> = (1..=n).collect();
        by_votes.sort_by_key(|&id| std::cmp::Reverse(truth[id as usize]));
        ids.extend(by_votes.iter().take(10));
        ids.extend((1..=n).filter(|&id| truth[id as usize] == 0).take(10));
        ids.extend([1, n]);
        ids.extend(self.single.iter().rev().take(100).map(|v| v.0));
        ids.extend(self.batched.iter().rev().take(100).map(|v| v.0));
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub memory_total_bytes: u64,
    pub kernel: String,
}

pub fn machine() -> Machine {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Machine {
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        cpu_model: std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
            .unwrap_or_default(),
        memory_total_bytes: meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}
