//! Sirius' catch-up (section 8.1) as a step function: which member a
//! follower asks next, for which range, and how large a window. No I/O and
//! no clock of its own: the shell performs each [`Effect`], reports what
//! came of it as an [`Input`], and passes the time in.
//!
//! - A request goes to a member picked at random among those not resting
//!   after a failure, from the follower's next LSN; while its responses
//!   come back full the follower stays with it (Sirius §5.1), and after a
//!   partial one or a failure it picks again.
//! - The window (records asked for) doubles while responses come back
//!   full, up to [`WINDOW_MAX`], and halves on a timeout or a response that
//!   was bad (too large, cut, corrupt), down to [`WINDOW_MIN`]; an empty response means the follower is at the
//!   member's end, and the member holds the next request until a commit.
//! - A member that fails rests for [`REST_AFTER_FAILURE`] before it is
//!   asked again; while every member rests the follower waits.
//! - A member that no longer holds the records asked for (compacted) is
//!   asked no more from that LSN on; when none holds them, the follower
//!   stops and says so ([`Effect::Stuck`]).
//! - A new follower copies the compacted log from one member, which holds
//!   its compaction back meanwhile: the shell pins that member
//!   ([`CatchUp::pin`]) until the follower reaches its exact point.

use std::time::{Duration, Instant};

use aqueduct_log::Lsn;

/// Records the first request asks for.
pub const WINDOW_START: usize = 256;
/// The window never shrinks below this.
pub const WINDOW_MIN: usize = 16;
/// Nor grows beyond this (what one response carries at most).
pub const WINDOW_MAX: usize = aqueduct_log::wire::MAX_WIRE_RECORDS;
/// How long a member that failed is left alone.
pub const REST_AFTER_FAILURE: Duration = Duration::from_millis(500);
/// How long a member holds a request while it has nothing new.
pub const LONG_POLL: Duration = Duration::from_secs(2);
/// How long a request may take beyond its long poll before it counts as
/// timed out.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const _: () = assert!(WINDOW_MIN <= WINDOW_START && WINDOW_START <= WINDOW_MAX);

/// What the shell tells the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Start, or look again after a wait.
    Tick,
    /// Request `id` brought `records` records, ending at `last` (appended
    /// and applied by the shell); the member's log goes to `committed`.
    Fetched {
        id: u64,
        records: usize,
        last: Option<Lsn>,
        committed: Lsn,
    },
    /// Request `id` failed.
    Failed { id: u64, failure: Failure },
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the request's deadline.
    Timeout,
    /// The member could not be reached, or answered with an error.
    Unreachable(String),
    /// The member compacted the records from the LSN asked for.
    Compacted,
    /// The response did not decode, or did not start where asked.
    Bad(String),
}

/// What the core asks of the shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Ask member `member` for about `max_records` records from `from`,
    /// letting it wait up to `long_poll` for a commit; give up at
    /// `deadline`. Then report `Fetched` or `Failed` with `id`.
    Fetch {
        id: u64,
        member: usize,
        from: Lsn,
        max_records: usize,
        long_poll: Duration,
        deadline: Instant,
    },
    /// Nothing to do until `until`: then send `Tick`.
    Wait { until: Instant },
    /// No member holds the records from `from`: the follower cannot go on
    /// without being made anew from a snapshot.
    Stuck { from: Lsn, why: String },
}

/// A follower's catch-up state.
#[derive(Debug)]
pub struct CatchUp {
    members: usize,
    /// The next LSN the follower needs.
    next: Lsn,
    window: usize,
    /// The request out, if any.
    pending: Option<(u64, usize)>,
    issued: u64,
    /// Per member: resting until then.
    resting: Vec<Option<Instant>>,
    /// Per member: compacted past `next` (asked no more until `next` moves).
    compacted: Vec<bool>,
    rng: u64,
    /// The highest committed LSN a member reported.
    source_committed: Lsn,
    stuck: bool,
    /// The only member asked while set.
    pinned: Option<usize>,
    /// The member whose last response was full: asked again.
    streak: Option<usize>,
}

impl CatchUp {
    /// A follower of `members` members whose log ends before `next`;
    /// `seed` picks the members (any value; the same one replays a run).
    pub fn new(members: usize, next: Lsn, seed: u64) -> CatchUp {
        assert!(members > 0, "a follower needs a member to follow");
        CatchUp {
            members,
            next,
            window: WINDOW_START,
            pending: None,
            issued: 0,
            resting: vec![None; members],
            compacted: vec![false; members],
            rng: seed | 1,
            source_committed: 0,
            stuck: false,
            pinned: None,
            streak: None,
        }
    }

    /// The follower's log went on to `next` by itself (a response applied
    /// only in part before an error): ask from there.
    pub fn resume_at(&mut self, next: Lsn) {
        assert!(
            next >= self.next,
            "the follower's log went back from LSN {} to {next}",
            self.next
        );
        if next > self.next {
            self.next = next;
            self.compacted.iter_mut().for_each(|c| *c = false);
        }
    }

    /// Asks only `member` from now on (`None`: any member again). A pinned
    /// member that no longer holds the records leaves the follower stuck.
    pub fn pin(&mut self, member: Option<usize>) {
        self.pinned = member;
    }

    /// The next LSN the follower needs.
    pub fn next(&self) -> Lsn {
        self.next
    }

    /// The records the next request asks for.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The highest LSN a member said it had committed.
    pub fn source_committed(&self) -> Lsn {
        self.source_committed
    }

    /// Takes one input at time `now`; returns what to do.
    pub fn step(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        match input {
            Input::Tick => {}
            Input::Fetched {
                id,
                records,
                last,
                committed,
            } => {
                let Some((pending, member)) = self.pending else {
                    return Vec::new();
                };
                if pending != id {
                    return Vec::new();
                }
                self.pending = None;
                self.streak = (records >= self.window).then_some(member);
                self.source_committed = self.source_committed.max(committed);
                if let Some(last) = last {
                    assert!(
                        last + 1 >= self.next,
                        "a response went back: it ended at LSN {last}, the follower needs {}",
                        self.next
                    );
                    if last >= self.next {
                        self.next = last + 1;
                        self.compacted.iter_mut().for_each(|c| *c = false);
                    }
                }
                if records >= self.window {
                    self.window = (self.window * 2).min(WINDOW_MAX);
                }
            }
            Input::Failed { id, failure } => {
                let Some((pending, member)) = self.pending else {
                    return Vec::new();
                };
                if pending != id {
                    return Vec::new();
                }
                self.pending = None;
                self.streak = None;
                match failure {
                    Failure::Timeout => {
                        self.window = (self.window / 2).max(WINDOW_MIN);
                        self.resting[member] = Some(now + REST_AFTER_FAILURE);
                    }
                    Failure::Unreachable(_) => {
                        self.resting[member] = Some(now + REST_AFTER_FAILURE);
                    }
                    // Too large a response is one way to be bad: ask for
                    // less next time.
                    Failure::Bad(_) => {
                        self.window = (self.window / 2).max(WINDOW_MIN);
                        self.resting[member] = Some(now + REST_AFTER_FAILURE);
                    }
                    Failure::Compacted => self.compacted[member] = true,
                }
            }
        }
        self.next_effects(now)
    }

    fn next_effects(&mut self, now: Instant) -> Vec<Effect> {
        if self.pending.is_some() || self.stuck {
            return Vec::new();
        }
        let pinned_gone = self.pinned.is_some_and(|m| self.compacted[m]);
        if pinned_gone || self.compacted.iter().all(|c| *c) {
            self.stuck = true;
            let why = if pinned_gone {
                format!(
                    "the member this follower was bootstrapping from no longer holds the records from LSN {}",
                    self.next
                )
            } else {
                format!(
                    "every member compacted the records from LSN {} away",
                    self.next
                )
            };
            return vec![Effect::Stuck {
                from: self.next,
                why,
            }];
        }
        let ready: Vec<usize> = (0..self.members)
            .filter(|&m| self.pinned.is_none_or(|p| p == m))
            .filter(|&m| !self.compacted[m] && self.resting[m].is_none_or(|t| t <= now))
            .collect();
        if ready.is_empty() {
            let until = (0..self.members)
                .filter(|&m| self.pinned.is_none_or(|p| p == m))
                .filter(|&m| !self.compacted[m])
                .filter_map(|m| self.resting[m])
                .min()
                .expect("a member not compacted is resting");
            return vec![Effect::Wait { until }];
        }
        let member = match self.streak.filter(|m| ready.contains(m)) {
            Some(m) => m,
            None => ready[(self.random() % ready.len() as u64) as usize],
        };
        self.resting[member] = None;
        self.issued += 1;
        self.pending = Some((self.issued, member));
        vec![Effect::Fetch {
            id: self.issued,
            member,
            from: self.next,
            max_records: self.window,
            long_poll: LONG_POLL,
            deadline: now + LONG_POLL + REQUEST_TIMEOUT,
        }]
    }

    /// xorshift64*: enough to spread requests over members.
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(effects: &[Effect]) -> (u64, usize, Lsn, usize) {
        match effects {
            [Effect::Fetch {
                id,
                member,
                from,
                max_records,
                ..
            }] => (*id, *member, *from, *max_records),
            other => panic!("expected one fetch, got {other:?}"),
        }
    }

    #[test]
    fn the_window_grows_on_full_responses_and_shrinks_on_timeouts() {
        let now = Instant::now();
        let mut c = CatchUp::new(3, 1, 7);
        let (id, _, from, max) = fetch(&c.step(Input::Tick, now));
        assert_eq!((from, max), (1, WINDOW_START));
        let e = c.step(
            Input::Fetched {
                id,
                records: max,
                last: Some(max as Lsn),
                committed: 10_000,
            },
            now,
        );
        let (id, _, from, max) = fetch(&e);
        assert_eq!((from, max), (WINDOW_START as Lsn + 1, 2 * WINDOW_START));
        let e = c.step(
            Input::Failed {
                id,
                failure: Failure::Timeout,
            },
            now,
        );
        let (id, _, from, max) = fetch(&e);
        assert_eq!((from, max), (WINDOW_START as Lsn + 1, WINDOW_START));
        // Not full: the window stays.
        let e = c.step(
            Input::Fetched {
                id,
                records: 3,
                last: Some(WINDOW_START as Lsn + 3),
                committed: 10_000,
            },
            now,
        );
        let (_, _, from, max) = fetch(&e);
        assert_eq!((from, max), (WINDOW_START as Lsn + 4, WINDOW_START));
        assert_eq!(c.source_committed(), 10_000);
    }

    #[test]
    fn members_are_picked_at_random_and_failed_ones_rest() {
        let now = Instant::now();
        let mut c = CatchUp::new(3, 1, 11);
        let mut seen = [0usize; 3];
        let mut effects = c.step(Input::Tick, now);
        for _ in 0..300 {
            let (id, member, _, _) = fetch(&effects);
            seen[member] += 1;
            effects = c.step(
                Input::Fetched {
                    id,
                    records: 0,
                    last: None,
                    committed: 0,
                },
                now,
            );
        }
        assert!(seen.iter().all(|n| *n > 50), "{seen:?}");
        // Every member fails: the follower waits, then asks again.
        for _ in 0..3 {
            let (id, _, _, _) = fetch(&effects);
            effects = c.step(
                Input::Failed {
                    id,
                    failure: Failure::Unreachable("refused".into()),
                },
                now,
            );
        }
        assert_eq!(
            effects,
            vec![Effect::Wait {
                until: now + REST_AFTER_FAILURE
            }]
        );
        fetch(&c.step(Input::Tick, now + REST_AFTER_FAILURE));
    }

    #[test]
    fn compacted_members_are_skipped_until_none_is_left() {
        let now = Instant::now();
        let mut c = CatchUp::new(2, 5, 3);
        let (id, first, _, _) = fetch(&c.step(Input::Tick, now));
        let e = c.step(
            Input::Failed {
                id,
                failure: Failure::Compacted,
            },
            now,
        );
        let (id, second, from, _) = fetch(&e);
        assert_ne!(first, second);
        assert_eq!(from, 5);
        let e = c.step(
            Input::Failed {
                id,
                failure: Failure::Compacted,
            },
            now,
        );
        assert!(matches!(&e[..], [Effect::Stuck { from: 5, .. }]), "{e:?}");
        assert!(c.step(Input::Tick, now).is_empty());
    }

    #[test]
    fn a_member_is_asked_again_while_its_responses_are_full() {
        let now = Instant::now();
        let mut c = CatchUp::new(5, 1, 9);
        let (mut id, first, mut from, mut max) = fetch(&c.step(Input::Tick, now));
        for _ in 0..6 {
            let e = c.step(
                Input::Fetched {
                    id,
                    records: max,
                    last: Some(from + max as Lsn - 1),
                    committed: 1 << 40,
                },
                now,
            );
            let member;
            (id, member, from, max) = fetch(&e);
            assert_eq!(member, first, "a full response keeps the member");
        }
        // Partial responses: a new random pick each time.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let e = c.step(
                Input::Fetched {
                    id,
                    records: 1,
                    last: Some(from),
                    committed: 1 << 40,
                },
                now,
            );
            let member;
            (id, member, from, _) = fetch(&e);
            seen.insert(member);
        }
        assert!(seen.len() > 2, "{seen:?}");
    }

    #[test]
    fn a_pinned_member_is_the_only_one_asked() {
        let now = Instant::now();
        let mut c = CatchUp::new(3, 1, 5);
        c.pin(Some(2));
        let mut effects = c.step(Input::Tick, now);
        for _ in 0..20 {
            let (id, member, _, _) = fetch(&effects);
            assert_eq!(member, 2);
            effects = c.step(
                Input::Fetched {
                    id,
                    records: 0,
                    last: None,
                    committed: 0,
                },
                now,
            );
        }
        let (id, _, _, _) = fetch(&effects);
        let e = c.step(
            Input::Failed {
                id,
                failure: Failure::Compacted,
            },
            now,
        );
        assert!(matches!(&e[..], [Effect::Stuck { .. }]), "{e:?}");
    }

    #[test]
    fn a_stale_report_is_ignored() {
        let now = Instant::now();
        let mut c = CatchUp::new(1, 1, 1);
        let (id, _, _, _) = fetch(&c.step(Input::Tick, now));
        assert!(c
            .step(
                Input::Fetched {
                    id: id + 5,
                    records: 1,
                    last: Some(1),
                    committed: 1
                },
                now
            )
            .is_empty());
        assert_eq!(c.next(), 1);
    }
}
