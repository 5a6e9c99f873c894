//! A seeded simulation of a follower catching up (`docs/replication.md`):
//! the real catch-up core (`aqueduct_replicate::catchup`) against simulated
//! members — a source taking writes and followers of it lagging behind —
//! that go down, time out, compact their logs and come back, on a
//! simulated clock. After every step the follower's log must be a prefix
//! of the source's, record for record (same LSNs and contents, nothing
//! twice, no gap), and at the end, with the faults over, it must have
//! caught up. A failing seed is printed and replays exactly with
//! `AQUEDUCT_SIM_SEED=<seed>`.

use std::time::{Duration, Instant};

use aqueduct_log::Lsn;
use aqueduct_replicate::catchup::{CatchUp, Effect, Failure, Input};

/// Seeds run by `cargo test`.
const SEEDS: u64 = 300;
/// Steps of one run with faults, then steps to converge without them.
const STEPS: usize = 400;
const QUIET_STEPS: usize = 2000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A record of the simulated log: its LSN and what it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rec {
    lsn: Lsn,
    key: u8,
    value: u64,
}

/// A member: how far it has the source's log, whether it is reachable or
/// slow, and whether it compacted (then it holds records from `exact`
/// only; the follower is never new in this simulation, so a compacted
/// member answers 410 below it).
struct Member {
    has: usize,
    down: bool,
    slow: bool,
    exact: Lsn,
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let t0 = Instant::now();
    let mut now = t0;
    // The source's log: one record per LSN from 1.
    let mut source: Vec<Rec> = Vec::new();
    let members_n = 1 + rng.below(4) as usize;
    let mut members: Vec<Member> = (0..members_n)
        .map(|_| Member {
            has: 0,
            down: false,
            slow: false,
            exact: 1,
        })
        .collect();
    let mut follower: Vec<Rec> = Vec::new();
    let mut core = CatchUp::new(members_n, 1, seed);
    let mut effects = core.step(Input::Tick, now);
    for step in 0..STEPS + QUIET_STEPS {
        let faults = step < STEPS;
        // Writes on the source; members copy some of it.
        for _ in 0..rng.below(5) {
            let lsn = source.len() as Lsn + 1;
            source.push(Rec {
                lsn,
                key: rng.below(8) as u8,
                value: rng.next(),
            });
        }
        for (i, m) in members.iter_mut().enumerate() {
            // Member 0 is the source itself; others lag behind it.
            m.has = if i == 0 {
                source.len()
            } else {
                (m.has + rng.below(6) as usize).min(source.len())
            };
            if faults {
                if rng.chance(3) {
                    m.down = !m.down;
                }
                m.slow = rng.chance(5);
                // Rarely, compaction past the follower (it then needs
                // another member that still holds its next records).
                if rng.chance(1) && i != 0 {
                    m.exact = m
                        .exact
                        .max((m.has as Lsn).saturating_sub(rng.below(10)).max(1));
                }
            } else {
                m.down = false;
                m.slow = false;
                if i != 0 {
                    m.exact = 1;
                }
            }
        }
        let Some(effect) = effects.pop() else {
            effects = core.step(Input::Tick, now);
            continue;
        };
        let input = match effect {
            Effect::Wait { until } => {
                now = now.max(until);
                Input::Tick
            }
            Effect::Stuck { from, why } => {
                // Only when every member compacted past the follower.
                let held = members.iter().any(|m| m.exact <= from);
                if held {
                    return Err(format!("stuck at LSN {from} while a member held it: {why}"));
                }
                return Ok(());
            }
            Effect::Fetch {
                id,
                member,
                from,
                max_records,
                deadline,
                ..
            } => {
                let m = &members[member];
                now += Duration::from_millis(1 + rng.below(5));
                if m.down {
                    Input::Failed {
                        id,
                        failure: Failure::Unreachable("down".into()),
                    }
                } else if m.slow {
                    now = now.max(deadline);
                    Input::Failed {
                        id,
                        failure: Failure::Timeout,
                    }
                } else if from < m.exact {
                    Input::Failed {
                        id,
                        failure: Failure::Compacted,
                    }
                } else {
                    let start = (from - 1) as usize;
                    let end = m.has.min(start + max_records);
                    let records: Vec<Rec> = source.get(start..end).unwrap_or(&[]).to_vec();
                    // The shell: checks the start, appends, applies.
                    if let Some(first) = records.first() {
                        if first.lsn != from {
                            return Err(format!("asked from {from}, got {}", first.lsn));
                        }
                    }
                    follower.extend_from_slice(&records);
                    Input::Fetched {
                        id,
                        records: records.len(),
                        last: records.last().map(|r| r.lsn),
                        committed: m.has as Lsn,
                    }
                }
            }
        };
        effects = core.step(input, now);
        // The follower's log is a prefix of the source's.
        if follower.len() > source.len() || follower[..] != source[..follower.len()] {
            let at = follower
                .iter()
                .zip(&source)
                .position(|(a, b)| a != b)
                .unwrap_or(source.len());
            return Err(format!(
                "step {step}: the follower's log differs from the source's at record {at}"
            ));
        }
        if core.next() != follower.len() as Lsn + 1 {
            return Err(format!(
                "step {step}: the core asks from {} but the follower holds {} records",
                core.next(),
                follower.len()
            ));
        }
    }
    // Without faults for long enough, it caught up with what the source
    // had before its last few writes.
    let behind = source.len() - follower.len();
    if behind > 4 * 2 + 5 {
        return Err(format!(
            "after the faults ended the follower is {behind} records behind ({} of {})",
            follower.len(),
            source.len()
        ));
    }
    Ok(())
}

#[test]
fn a_follower_catches_up_through_faults_in_every_seed() {
    let seeds: Vec<u64> = match std::env::var("AQUEDUCT_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("AQUEDUCT_SIM_SEED is a number")],
        Err(_) => (1..=SEEDS).collect(),
    };
    let failed: Vec<String> = seeds
        .iter()
        .filter_map(|&seed| run(seed).err().map(|e| format!("seed {seed}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} seeds failed (replay one with AQUEDUCT_SIM_SEED=<seed>):\n{}",
        failed.len(),
        seeds.len(),
        failed.join("\n")
    );
}
