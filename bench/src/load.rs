//! The load generator the workload benchmarks (`vote`, `news`) share:
//! client threads that each own a connection and run operations a workload
//! draws, either on a schedule (open loop: the offered load is fixed and a
//! latency counts from when the operation was due, so queueing shows) or
//! back to back (closed loop: peak throughput).
//!
//! One [`Schedule`] run: `clients` threads, `warmup` then `measure`; only
//! operations due inside the measured window count. Each operation has a
//! kind (read, write, a page type) with its own latency histogram.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::common::{self, Latency};
use crate::view_read::{Distribution, Sampler};

/// How requests arrive.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `ops_per_sec` in all, spread evenly over the clients, each on a
    /// fixed schedule whether or not earlier requests finished.
    Open { ops_per_sec: f64 },
    /// Each client sends its next request when the last one is answered.
    Closed,
}

#[derive(Clone, Debug, Serialize)]
pub struct Schedule {
    pub mode: Mode,
    pub clients: usize,
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    #[serde(serialize_with = "secs")]
    pub measure: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Most errors one run keeps the text of (the rest are only counted).
const MAX_ERROR_TEXTS: usize = 5;

/// Latency and errors of one kind of operation.
#[derive(Serialize, Clone, Debug, Default)]
pub struct KindOutcome {
    pub kind: String,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub errors: u64,
    pub latency: Latency,
}

/// What one run measured.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Outcome {
    /// The open loop's offered load; `None` in a closed loop.
    pub offered_ops_per_sec: Option<f64>,
    /// Operations due in the measured window and completed, per second.
    pub achieved_ops_per_sec: f64,
    /// Operations due in the window that were not even started by its end
    /// (the clients had fallen that far behind).
    pub not_started: u64,
    pub errors: u64,
    /// The first few errors' texts.
    pub error_samples: Vec<String>,
    /// Every operation, then each kind.
    pub all: KindOutcome,
    pub kinds: Vec<KindOutcome>,
}

impl Outcome {
    pub fn kind(&self, name: &str) -> Option<&KindOutcome> {
        self.kinds.iter().find(|k| k.kind == name)
    }
}

/// Runs `schedule` with one thread per element of `clients`. `draw` picks
/// an operation (its kind, an index into `kinds`, and the operation) with
/// the thread's random generator; `run` carries it out on the thread's
/// client. `seed` makes each thread's draws reproducible.
pub fn run<C, O, D, R>(
    kinds: &[&str],
    schedule: &Schedule,
    clients: &mut [C],
    seed: u64,
    draw: D,
    run_op: R,
    pb: &indicatif::ProgressBar,
) -> Outcome
where
    C: Send,
    D: Fn(&mut SmallRng) -> (usize, O) + Sync,
    R: Fn(&mut C, &O) -> anyhow::Result<()> + Sync,
{
    assert_eq!(clients.len(), schedule.clients, "one client per thread");
    assert!(schedule.clients > 0, "at least one client");
    let n = schedule.clients;
    let start = Instant::now() + Duration::from_millis(20);
    let window_start = start + schedule.warmup;
    let window_end = window_start + schedule.measure;
    let errors = AtomicU64::new(0);
    let error_texts = Mutex::new(Vec::new());
    let done = AtomicU64::new(0);
    // Per thread: a histogram per kind, and the count not started.
    let per_thread: Vec<(Vec<Histogram<u64>>, Vec<u64>, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(t, client)| {
                let (draw, run_op, errors, error_texts, done) =
                    (&draw, &run_op, &errors, &error_texts, &done);
                // As large as the server's threads: a statement run in
                // process on a smaller stack gets a new stack of its own
                // each time (`aqueduct_sql::limits`).
                let thread = std::thread::Builder::new()
                    .stack_size(aqueduct_sql::limits::SERVER_THREAD_STACK_BYTES);
                thread
                    .spawn_scoped(scope, move || {
                        fine_timer_slack();
                        let mut rng =
                            SmallRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37_79b9));
                        let mut hists: Vec<Histogram<u64>> =
                            kinds.iter().map(|_| common::new_hist()).collect();
                        let mut kind_errors = vec![0u64; kinds.len()];
                        let interval = match schedule.mode {
                            Mode::Open { ops_per_sec } => {
                                Some(Duration::from_secs_f64(n as f64 / ops_per_sec.max(1e-3)))
                            }
                            Mode::Closed => None,
                        };
                        // Open loop: thread t's requests are due at start +
                        // (t/n + i) intervals, so the clients interleave.
                        let mut due = match interval {
                            Some(iv) => start + iv.mul_f64(t as f64 / n as f64),
                            None => start,
                        };
                        let mut not_started = 0u64;
                        while !common::stopped() {
                            let now = Instant::now();
                            if due >= window_end || (interval.is_none() && now >= window_end) {
                                break;
                            }
                            if now >= window_end {
                                // Fell behind: what is still due was never sent.
                                let iv = interval.expect("open loop");
                                let left = (window_end - due).as_secs_f64() / iv.as_secs_f64();
                                not_started += left.ceil() as u64;
                                break;
                            }
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                            let began = match interval {
                                Some(_) => due,
                                None => Instant::now(),
                            };
                            let (kind, op) = draw(&mut rng);
                            let result = run_op(client, &op);
                            let end = Instant::now();
                            if began >= window_start {
                                match result {
                                    Ok(()) => {
                                        let ns = (end - began).as_nanos().max(1) as u64;
                                        let h = &mut hists[kind];
                                        let _ = h.record(ns.min(h.high()));
                                        done.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => {
                                        kind_errors[kind] += 1;
                                        errors.fetch_add(1, Ordering::Relaxed);
                                        let mut texts = error_texts.lock().expect("not poisoned");
                                        if texts.len() < MAX_ERROR_TEXTS {
                                            texts.push(format!("{}: {e:#}", kinds[kind]));
                                        }
                                    }
                                }
                            }
                            due = match interval {
                                Some(iv) => due + iv,
                                None => end,
                            };
                        }
                        (hists, kind_errors, not_started)
                    })
                    .expect("spawning a load thread")
            })
            .collect();
        // The progress bar follows the measured window.
        while handles.iter().any(|h| !h.is_finished()) {
            let now = Instant::now();
            let pos = if now < window_start {
                0
            } else {
                (now.min(window_end) - window_start).as_millis() as u64
            };
            pb.set_position(pos);
            pb.set_message(format!(
                "{} ops",
                common::thousands(done.load(Ordering::Relaxed))
            ));
            std::thread::sleep(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a client thread panicked"))
            .collect()
    });
    let seconds = schedule.measure.as_secs_f64();
    let mut total = common::new_hist();
    let mut kinds_out = Vec::new();
    let mut not_started = 0;
    for (k, name) in kinds.iter().enumerate() {
        let mut h = common::new_hist();
        let mut errs = 0;
        for (hists, kind_errors, _) in &per_thread {
            h.add(&hists[k]).expect("same bounds");
            errs += kind_errors[k];
        }
        total.add(&h).expect("same bounds");
        kinds_out.push(KindOutcome {
            kind: name.to_string(),
            ops: h.len(),
            ops_per_sec: h.len() as f64 / seconds,
            errors: errs,
            latency: Latency::of(&h),
        });
    }
    for (_, _, n) in &per_thread {
        not_started += n;
    }
    let errors = errors.into_inner();
    Outcome {
        offered_ops_per_sec: match schedule.mode {
            Mode::Open { ops_per_sec } => Some(ops_per_sec),
            Mode::Closed => None,
        },
        achieved_ops_per_sec: total.len() as f64 / seconds,
        not_started,
        errors,
        error_samples: error_texts.into_inner().expect("not poisoned"),
        all: KindOutcome {
            kind: "all".into(),
            ops: total.len(),
            ops_per_sec: total.len() as f64 / seconds,
            errors,
            latency: Latency::of(&total),
        },
        kinds: kinds_out,
    }
}

/// Asks the kernel to wake this thread within a microsecond of a sleep's
/// end rather than the default 50 µs, which an open loop would otherwise
/// count as latency of the request due then.
fn fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and only
    // affects the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Ids `1..=n`, Zipf-distributed with exponent `s` (1 the most often),
/// uniform when `s` is 0.
pub struct Ids(Sampler);

impl Ids {
    pub fn new(n: u64, s: f64) -> Ids {
        let d = if s > 0.0 {
            Distribution::Zipf
        } else {
            Distribution::Uniform
        };
        Ids(Sampler::new(n, d, s))
    }

    pub fn draw(&self, rng: &mut impl rand::Rng) -> i64 {
        self.0.sample(rng) as i64
    }
}

/// `uniform` (0) or `zipf:<s>` (s above 0): the Zipf exponent.
pub fn parse_exponent(text: &str) -> anyhow::Result<f64> {
    match text.split_once(':') {
        None if text == "uniform" => Ok(0.0),
        Some(("zipf", s)) => {
            let s: f64 = s
                .parse()
                .map_err(|_| anyhow::anyhow!("--distribution zipf:<s>: {s:?} is not a number"))?;
            anyhow::ensure!(
                s > 0.0 && s.is_finite(),
                "--distribution zipf:<s>: s must be above 0"
            );
            Ok(s)
        }
        _ => anyhow::bail!(
            "--distribution must be `uniform` or `zipf:<s>` (e.g. zipf:1.15), not {text:?}"
        ),
    }
}

/// `uniform` or `zipf:<s>`, as ids `1..=n`.
pub fn parse_distribution(text: &str, n: u64) -> anyhow::Result<Ids> {
    Ok(Ids::new(n, parse_exponent(text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_loop_runs_on_schedule_and_counts_only_the_window() {
        let schedule = Schedule {
            mode: Mode::Open { ops_per_sec: 400.0 },
            clients: 2,
            warmup: Duration::from_millis(100),
            measure: Duration::from_millis(500),
        };
        let pb = indicatif::ProgressBar::hidden();
        let out = run(
            &["read", "write"],
            &schedule,
            &mut [(), ()],
            1,
            |rng| (rand::Rng::gen_range(rng, 0..2usize), ()),
            |_, _| Ok(()),
            &pb,
        );
        // 400/s for 0.5 s: 200 due in the window, all done quickly.
        assert!((190..=210).contains(&out.all.ops), "{} ops", out.all.ops);
        assert_eq!(out.errors, 0);
        assert_eq!(out.kinds[0].ops + out.kinds[1].ops, out.all.ops);
        assert!(out.kinds[0].ops > 50 && out.kinds[1].ops > 50);
    }

    #[test]
    fn an_overloaded_open_loop_shows_queueing_in_its_latency() {
        // Each operation takes 2 ms; one client offered 1000/s falls behind
        // at once, so latencies grow far past the 2 ms of service time.
        let schedule = Schedule {
            mode: Mode::Open {
                ops_per_sec: 1000.0,
            },
            clients: 1,
            warmup: Duration::ZERO,
            measure: Duration::from_millis(300),
        };
        let pb = indicatif::ProgressBar::hidden();
        let out = run(
            &["op"],
            &schedule,
            &mut [()],
            1,
            |_| (0, ()),
            |_, _| {
                std::thread::sleep(Duration::from_millis(2));
                Ok(())
            },
            &pb,
        );
        assert!(out.all.ops < 200, "{} ops", out.all.ops);
        assert!(out.not_started > 100, "{} not started", out.not_started);
        assert!(
            out.all.latency.p99_ms > 50.0,
            "p99 {} ms",
            out.all.latency.p99_ms
        );
    }

    #[test]
    fn closed_loop_counts_errors_by_kind() {
        let schedule = Schedule {
            mode: Mode::Closed,
            clients: 1,
            warmup: Duration::ZERO,
            measure: Duration::from_millis(100),
        };
        let pb = indicatif::ProgressBar::hidden();
        let out = run(
            &["ok", "bad"],
            &schedule,
            &mut [0u64],
            1,
            |rng| (rand::Rng::gen_range(rng, 0..2usize), ()),
            |calls: &mut u64, _| {
                *calls += 1;
                Ok(())
            },
            &pb,
        );
        assert_eq!(out.errors, 0);
        let failing = run(
            &["ok", "bad"],
            &schedule,
            &mut [()],
            1,
            |rng| (rand::Rng::gen_range(rng, 0..2usize), ()),
            |_, _| anyhow::bail!("refused"),
            &pb,
        );
        assert!(out.all.ops > 100);
        assert_eq!(failing.all.ops, 0);
        assert!(failing.kind("bad").unwrap().errors > 0);
        assert_eq!(failing.error_samples.len(), MAX_ERROR_TEXTS);
    }

    #[test]
    fn distributions_parse() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let zipf = parse_distribution("zipf:1.15", 1000).unwrap();
        let ones = (0..10_000).filter(|_| zipf.draw(&mut rng) == 1).count();
        assert!(ones > 1500, "{ones} of 10,000 draws are id 1");
        let uniform = parse_distribution("uniform", 1000).unwrap();
        assert!((0..10_000).all(|_| (1..=1000).contains(&uniform.draw(&mut rng))));
        assert!(parse_distribution("zipf", 10).is_err());
        assert!(parse_distribution("zipf:x", 10).is_err());
    }
}
