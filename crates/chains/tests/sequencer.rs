//! The origin-ordering sequencers (Lynx §6.2) under a deterministic
//! simulation: random paths, random delays, reordered and duplicated
//! deliveries, one hop at a time per server. The simulation's run logs are
//! the oracle: every hop runs exactly once, hops of one origin run in
//! stamp order at every server (§3, origin ordering), and everything
//! finishes.

mod common;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use aqueduct_chains::sequencer::{
    ChainId, Effect, HopArrival, Sequencer, SequencerError, SequencerState, ServerId, Stamp,
    Stamps, MAX_PATH_LEN, MAX_QUEUED_HOPS,
};
use common::Rng;

// ---------------------------------------------------------------------
// What the simulation drives: the real sequencer, or a planted bug.

trait Core {
    fn first_hop_ready(&self) -> bool;
    fn assign(&mut self, chain: ChainId, path: &[ServerId]) -> Result<Stamps, SequencerError>;
    fn arrive(&mut self, hop: HopArrival) -> Result<Vec<Effect>, SequencerError>;
    fn finished(&mut self, origin: ServerId, seq: u64) -> Result<Vec<Effect>, SequencerError>;
}

impl Core for Sequencer {
    fn first_hop_ready(&self) -> bool {
        Sequencer::first_hop_ready(self)
    }
    fn assign(&mut self, chain: ChainId, path: &[ServerId]) -> Result<Stamps, SequencerError> {
        Sequencer::assign(self, chain, path)
    }
    fn arrive(&mut self, hop: HopArrival) -> Result<Vec<Effect>, SequencerError> {
        Sequencer::arrive(self, hop)
    }
    fn finished(&mut self, origin: ServerId, seq: u64) -> Result<Vec<Effect>, SequencerError> {
        Sequencer::finished(self, origin, seq)
    }
}

/// The planted bug: stamps like the real thing, but runs every hop the
/// moment it arrives, ignoring whose turn it is.
struct Eager {
    me: ServerId,
    ctr: HashMap<ServerId, u64>,
    ran: HashSet<(ServerId, u64)>,
}

impl Eager {
    fn new(me: ServerId) -> Self {
        Eager {
            me,
            ctr: HashMap::new(),
            ran: HashSet::new(),
        }
    }
}

impl Core for Eager {
    fn first_hop_ready(&self) -> bool {
        true
    }
    fn assign(&mut self, chain: ChainId, path: &[ServerId]) -> Result<Stamps, SequencerError> {
        let hops = path
            .iter()
            .map(|&server| {
                let c = self.ctr.entry(server).or_insert(0);
                *c += 1;
                Stamp { server, seq: *c }
            })
            .collect::<Vec<_>>();
        self.ran.insert((self.me, hops[0].seq));
        Ok(Stamps {
            chain,
            origin: self.me,
            hops,
        })
    }
    fn arrive(&mut self, hop: HopArrival) -> Result<Vec<Effect>, SequencerError> {
        // Keeps duplicates out, so only the ordering is broken.
        if !self.ran.insert((hop.origin, hop.seq)) {
            return Ok(Vec::new());
        }
        Ok(vec![Effect::Run(hop)])
    }
    fn finished(&mut self, _origin: ServerId, _seq: u64) -> Result<Vec<Effect>, SequencerError> {
        Ok(Vec::new())
    }
}

// ---------------------------------------------------------------------
// The simulation.

const SERVERS: u32 = 5;
const CHAINS: usize = 2_000;
const MAX_HOPS: u64 = 5;
const SEEDS: u64 = 200;
/// Events per chain hop the simulation may take before it is declared
/// stuck; a live run needs a handful (start, delivery, completion, the
/// occasional duplicate).
const EVENTS_PER_HOP: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A chain is submitted at its origin.
    Start(ChainId),
    /// A hop message reaches its server.
    Deliver {
        server: ServerId,
        chain: ChainId,
        origin: ServerId,
        seq: u64,
        hop_index: usize,
    },
    /// The hop running on `server` completes.
    Complete(ServerId),
}

#[derive(Debug, Clone, Copy)]
enum Work {
    First(ChainId),
    Hop(HopArrival),
}

struct Server<C> {
    core: C,
    running: Option<Work>,
    /// Hops granted their turn, waiting for the CPU.
    ready: VecDeque<HopArrival>,
    /// Chains submitted here whose first hop has not run yet.
    starts: VecDeque<ChainId>,
}

/// What a run produced.
struct Outcome {
    paths: Vec<Vec<ServerId>>,
    /// `stamps[c]` once chain `c`'s first hop committed.
    stamps: Vec<Option<Stamps>>,
    /// Per server, the hops in the order they ran: (chain, hop index).
    log: Vec<Vec<(ChainId, usize)>>,
    /// Whether the event queue drained within the bound.
    drained: bool,
    /// Arrivals that got no effect: queued to wait for their turn, or a
    /// copy of a queued or granted hop.
    waited: usize,
    /// Arrivals answered with `AlreadyDone`.
    already_done: usize,
}

fn random_path(rng: &mut Rng) -> Vec<ServerId> {
    let len = rng.range(1, MAX_HOPS) as usize;
    (0..len)
        .map(|_| rng.range(0, u64::from(SERVERS) - 1) as ServerId)
        .collect()
}

fn simulate<C: Core>(seed: u64, chains: usize, make: impl Fn(ServerId) -> C) -> Outcome {
    let mut rng = Rng::new(seed);
    let paths: Vec<Vec<ServerId>> = (0..chains).map(|_| random_path(&mut rng)).collect();
    let total_hops: usize = paths.iter().map(Vec::len).sum();
    let mut servers: Vec<Server<C>> = (0..SERVERS)
        .map(|s| Server {
            core: make(s),
            running: None,
            ready: VecDeque::new(),
            starts: VecDeque::new(),
        })
        .collect();
    let mut stamps: Vec<Option<Stamps>> = vec![None; chains];
    let mut log: Vec<Vec<(ChainId, usize)>> = vec![Vec::new(); SERVERS as usize];

    // (time, tie-break, event), earliest first.
    let mut queue: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut tick = 0u64;
    let mut push = |queue: &mut BinaryHeap<Reverse<(u64, u64, Event)>>, at: u64, ev: Event| {
        tick += 1;
        queue.push(Reverse((at, tick, ev)));
    };
    let horizon = chains as u64 * 4;
    for c in 0..chains {
        let at = rng.range(0, horizon);
        push(&mut queue, at, Event::Start(c as ChainId));
    }

    let budget = total_hops * EVENTS_PER_HOP + chains;
    let mut events = 0usize;
    let mut waited = 0usize;
    let mut already_done = 0usize;
    while let Some(Reverse((now, _, ev))) = queue.pop() {
        events += 1;
        if events > budget {
            return Outcome {
                paths,
                stamps,
                log,
                drained: false,
                waited,
                already_done,
            };
        }
        let server_id = match ev {
            Event::Start(c) => {
                let origin = paths[c as usize][0];
                servers[origin as usize].starts.push_back(c);
                origin
            }
            Event::Deliver {
                server,
                chain,
                origin,
                seq,
                hop_index,
            } => {
                let hop = HopArrival {
                    chain,
                    origin,
                    seq,
                    hop_index,
                };
                let sv = &mut servers[server as usize];
                let effects = sv.core.arrive(hop).expect("arrive");
                if effects.is_empty() {
                    waited += 1;
                }
                for e in effects {
                    match e {
                        Effect::Run(h) => sv.ready.push_back(h),
                        // The first copy carried the chain on.
                        Effect::AlreadyDone { .. } => already_done += 1,
                        Effect::Busy(h) => panic!("unexpected Busy for {h:?}"),
                    }
                }
                server
            }
            Event::Complete(server) => {
                let sv = &mut servers[server as usize];
                let work = sv.running.take().expect("a hop was running");
                let (chain, hop_index) = match work {
                    Work::First(c) => {
                        let st = sv.core.assign(c, &paths[c as usize]).expect("assign");
                        stamps[c as usize] = Some(st);
                        (c, 0)
                    }
                    Work::Hop(h) => {
                        for e in sv.core.finished(h.origin, h.seq).expect("finished") {
                            match e {
                                Effect::Run(next) => sv.ready.push_back(next),
                                other => panic!("finished returned {other:?}"),
                            }
                        }
                        (h.chain, h.hop_index)
                    }
                };
                log[server as usize].push((chain, hop_index));
                // Chains are sequential: send the next hop now.
                let st = stamps[chain as usize].as_ref().expect("stamped");
                if let Some(next) = st.arrival(hop_index + 1) {
                    let to = paths[chain as usize][hop_index + 1];
                    let ev = Event::Deliver {
                        server: to,
                        chain: next.chain,
                        origin: next.origin,
                        seq: next.seq,
                        hop_index: next.hop_index,
                    };
                    push(&mut queue, now + rng.range(1, 50), ev);
                    // A coordinator resubmission, delayed arbitrarily.
                    if rng.one_in(20) {
                        push(&mut queue, now + rng.range(1, 400), ev);
                    }
                }
                server
            }
        };
        // Let the touched server pick up work if it is idle.
        let sv = &mut servers[server_id as usize];
        if sv.running.is_none() {
            let work = if let Some(h) = sv.ready.pop_front() {
                Some(Work::Hop(h))
            } else if !sv.starts.is_empty() && sv.core.first_hop_ready() {
                sv.starts.pop_front().map(Work::First)
            } else {
                None
            };
            if let Some(w) = work {
                sv.running = Some(w);
                push(
                    &mut queue,
                    now + rng.range(1, 20),
                    Event::Complete(server_id),
                );
            }
        }
    }
    Outcome {
        paths,
        stamps,
        log,
        drained: true,
        waited,
        already_done,
    }
}

/// Every hop of every chain ran exactly once.
fn check_exactly_once(out: &Outcome) -> Result<(), String> {
    let mut count: HashMap<(ChainId, usize), usize> = HashMap::new();
    for (server, entries) in out.log.iter().enumerate() {
        for &(chain, hop) in entries {
            if out.paths[chain as usize][hop] as usize != server {
                return Err(format!("chain {chain} hop {hop} ran at server {server}"));
            }
            *count.entry((chain, hop)).or_insert(0) += 1;
        }
    }
    for (c, path) in out.paths.iter().enumerate() {
        for h in 0..path.len() {
            let n = count.get(&(c as ChainId, h)).copied().unwrap_or(0);
            if n != 1 {
                return Err(format!("chain {c} hop {h} ran {n} times"));
            }
        }
    }
    Ok(())
}

/// Origin ordering (§3): at every server, the hops of one origin run in
/// the order their chains were stamped there (first-hop order), one
/// chain's visits never interleaved with another's. Equivalently, per
/// server and origin, the chains' first-hop stamps never decrease along
/// the run log.
fn check_origin_order(out: &Outcome) -> Result<(), String> {
    for (server, entries) in out.log.iter().enumerate() {
        let mut last: HashMap<ServerId, (u64, ChainId)> = HashMap::new();
        for &(chain, _) in entries {
            let st = out.stamps[chain as usize]
                .as_ref()
                .ok_or_else(|| format!("chain {chain} ran without stamps"))?;
            let rank = st.hops[0].seq;
            if let Some(&(prev_rank, prev_chain)) = last.get(&st.origin) {
                if rank < prev_rank {
                    return Err(format!(
                        "server {server}: chain {chain} (origin {}, rank {rank}) ran after \
                         chain {prev_chain} (rank {prev_rank})",
                        st.origin
                    ));
                }
            }
            last.insert(st.origin, (rank, chain));
        }
    }
    Ok(())
}

#[test]
fn simulation_oracle_many_seeds() {
    let (mut waited, mut already_done) = (0, 0);
    for seed in 1..=SEEDS {
        let out = simulate(seed, CHAINS, Sequencer::new);
        assert!(
            out.drained,
            "seed {seed}: no progress within the event bound"
        );
        check_exactly_once(&out).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        check_origin_order(&out).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        waited += out.waited;
        already_done += out.already_done;
    }
    // The runs exercised both queueing and resubmission, not only the
    // easy path.
    assert!(waited > 0, "no hop ever waited for its turn");
    assert!(
        already_done > 0,
        "no resubmission arrived after its hop ran"
    );
    eprintln!(
        "{SEEDS} seeds: {waited} arrivals queued or ignored, {already_done} answered AlreadyDone"
    );
}

#[test]
fn planted_bug_is_caught() {
    let mut caught = 0;
    let mut clean = 0;
    for seed in 1..=20 {
        let out = simulate(seed, CHAINS, Eager::new);
        assert!(out.drained, "seed {seed}: the eager variant never waits");
        check_exactly_once(&out).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        match check_origin_order(&out) {
            Err(_) => caught += 1,
            Ok(()) => clean += 1,
        }
    }
    assert!(caught > 0, "the origin-ordering check never fired");
    eprintln!("planted bug caught in {caught} of {} seeds", caught + clean);
}

#[test]
fn checker_accepts_hand_made_good_log_and_rejects_bad_one() {
    // Two chains of origin 0, both visiting server 1 twice.
    let stamps = |chain, seq| Stamps {
        chain,
        origin: 0,
        hops: vec![Stamp { server: 0, seq }],
    };
    let mut out = Outcome {
        paths: vec![vec![0, 1, 0, 1], vec![0, 1, 0, 1]],
        stamps: vec![Some(stamps(0, 1)), Some(stamps(1, 3))],
        log: vec![
            vec![(0, 0), (0, 2), (1, 0), (1, 2)],
            vec![(0, 1), (0, 3), (1, 1), (1, 3)],
        ],
        drained: true,
        waited: 0,
        already_done: 0,
    };
    assert_eq!(check_exactly_once(&out), Ok(()));
    assert_eq!(check_origin_order(&out), Ok(()));
    // Interleave the second chain between the first's two visits.
    out.log[1] = vec![(0, 1), (1, 1), (0, 3), (1, 3)];
    assert!(check_origin_order(&out).is_err());
    // A hop run twice.
    out.log[1] = vec![(0, 1), (0, 1), (0, 3), (1, 1), (1, 3)];
    assert!(check_exactly_once(&out).is_err());
}

// ---------------------------------------------------------------------
// Small worlds explored exhaustively.

#[derive(Clone)]
struct World {
    seqs: BTreeMap<ServerId, Sequencer>,
    paths: Vec<Vec<ServerId>>,
    stamps: Vec<Stamps>,
    /// Hop messages in flight.
    pending: Vec<HopArrival>,
    /// Hops granted their turn, not yet finished.
    running: Vec<HopArrival>,
    /// Per server, the order in which hops finished.
    log: BTreeMap<ServerId, Vec<(ChainId, usize)>>,
}

impl World {
    /// Stamps every chain at origin `paths[c][0]` in index order, running
    /// each first hop at once (it is always its turn when the previous
    /// chains' hops at the origin are done; the worlds here ensure that).
    fn new(paths: Vec<Vec<ServerId>>) -> World {
        let mut seqs = BTreeMap::new();
        for p in &paths {
            for &s in p {
                seqs.entry(s).or_insert_with(|| Sequencer::new(s));
            }
        }
        let mut world = World {
            seqs,
            paths: paths.clone(),
            stamps: Vec::new(),
            pending: Vec::new(),
            running: Vec::new(),
            log: BTreeMap::new(),
        };
        for (c, p) in paths.iter().enumerate() {
            let origin = p[0];
            let seq = world.seqs.get_mut(&origin).expect("origin");
            assert!(seq.first_hop_ready(), "first hop of chain {c} must wait");
            let st = seq.assign(c as ChainId, p).expect("assign");
            world.log.entry(origin).or_default().push((c as ChainId, 0));
            if let Some(a) = st.arrival(1) {
                world.pending.push(a);
            }
            world.stamps.push(st);
        }
        world
    }

    fn server_of(&self, hop: &HopArrival) -> ServerId {
        self.paths[hop.chain as usize][hop.hop_index]
    }

    /// Number of possible next steps: deliveries, then completions.
    fn choices(&self) -> usize {
        self.pending.len() + self.running.len()
    }

    fn step(&mut self, choice: usize) {
        if choice < self.pending.len() {
            let hop = self.pending.remove(choice);
            let s = self.server_of(&hop);
            let effects = self.seqs.get_mut(&s).expect("server").arrive(hop);
            for e in effects.expect("arrive") {
                match e {
                    Effect::Run(h) => self.running.push(h),
                    other => panic!("unexpected {other:?}"),
                }
            }
        } else {
            let hop = self.running.remove(choice - self.pending.len());
            let s = self.server_of(&hop);
            let effects = self
                .seqs
                .get_mut(&s)
                .expect("server")
                .finished(hop.origin, hop.seq);
            for e in effects.expect("finished") {
                match e {
                    Effect::Run(h) => self.running.push(h),
                    other => panic!("unexpected {other:?}"),
                }
            }
            self.log
                .entry(s)
                .or_default()
                .push((hop.chain, hop.hop_index));
            if let Some(a) = self.stamps[hop.chain as usize].arrival(hop.hop_index + 1) {
                self.pending.push(a);
            }
        }
    }

    fn complete(&self) -> bool {
        let ran: usize = self.log.values().map(Vec::len).sum();
        ran == self.paths.iter().map(Vec::len).sum::<usize>()
    }
}

/// Explores every interleaving of deliveries and completions (explicit
/// stack, no recursion); returns the number of terminal states, all of
/// which must be complete and in origin order.
fn explore(paths: Vec<Vec<ServerId>>) -> usize {
    const MAX_STATES: usize = 1_000_000;
    let start = World::new(paths);
    let mut stack = vec![start];
    let mut terminals = 0;
    let mut visited = 0;
    while let Some(world) = stack.pop() {
        visited += 1;
        assert!(visited <= MAX_STATES, "state space larger than expected");
        let n = world.choices();
        if n == 0 {
            assert!(world.complete(), "stuck: {:?}", world.log);
            // Origin order: within one origin, chain index = stamp order.
            for (s, entries) in &world.log {
                let mut last: HashMap<ServerId, ChainId> = HashMap::new();
                for &(chain, _) in entries {
                    let origin = world.paths[chain as usize][0];
                    let prev = last.insert(origin, chain).unwrap_or(chain);
                    assert!(prev <= chain, "server {s} out of origin order: {entries:?}");
                }
            }
            terminals += 1;
            continue;
        }
        for choice in 0..n {
            let mut next = world.clone();
            next.step(choice);
            stack.push(next);
        }
    }
    terminals
}

#[test]
fn crossing_paths_complete_in_every_order() {
    // C1: 1→2→3 and C2: 1→3→2, both from origin 1.
    let terminals = explore(vec![vec![1, 2, 3], vec![1, 3, 2]]);
    assert!(terminals > 1);
    // And three chains crossing in all directions.
    let terminals = explore(vec![vec![1, 2, 3], vec![1, 3, 2], vec![1, 2, 3, 2]]);
    assert!(terminals > 1);
}

#[test]
fn revisited_server_gets_consecutive_stamps_and_completes() {
    let mut one = Sequencer::new(1);
    let st = one.assign(7, &[1, 2, 1, 2]).expect("assign");
    let seqs: Vec<(ServerId, u64)> = st.hops.iter().map(|h| (h.server, h.seq)).collect();
    assert_eq!(seqs, vec![(1, 1), (2, 1), (1, 2), (2, 2)]);
    // The next chain's first hop at 1 must wait for the second visit.
    assert!(!one.first_hop_ready());
    assert!(matches!(
        one.assign(8, &[1]),
        Err(SequencerError::FirstHopOutOfTurn { .. })
    ));
    let st2 = {
        let mut w = World::new(vec![vec![1, 2, 1, 2]]);
        while w.choices() > 0 {
            w.step(0);
        }
        assert!(w.complete());
        w.stamps[0].clone()
    };
    assert_eq!(st2.hops, st.hops);
    // Two such chains, every interleaving.
    assert!(explore(vec![vec![1, 2, 1, 2], vec![2, 1, 2, 1]]) > 1);
}

#[test]
fn first_hop_ready_again_after_the_revisit_finishes() {
    let mut one = Sequencer::new(1);
    let st = one.assign(7, &[1, 2, 1]).expect("assign");
    let back = st.arrival(2).expect("third hop");
    assert_eq!(one.arrive(back), Ok(vec![Effect::Run(back)]));
    assert!(!one.first_hop_ready());
    assert_eq!(one.finished(1, back.seq), Ok(vec![]));
    assert!(one.first_hop_ready());
    let next = one.assign(8, &[1, 2]).expect("assign");
    assert_eq!(
        next.hops,
        vec![Stamp { server: 1, seq: 3 }, Stamp { server: 2, seq: 2 }]
    );
}

fn hop(chain: ChainId, origin: ServerId, seq: u64, hop_index: usize) -> HopArrival {
    HopArrival {
        chain,
        origin,
        seq,
        hop_index,
    }
}

#[test]
fn queued_hops_run_in_stamp_order() {
    let mut s = Sequencer::new(2);
    let h3 = hop(30, 1, 3, 1);
    let h2 = hop(20, 1, 2, 1);
    let h1 = hop(10, 1, 1, 1);
    assert_eq!(s.arrive(h3), Ok(vec![]));
    assert_eq!(s.arrive(h2), Ok(vec![]));
    assert_eq!(s.queued(), 2);
    assert_eq!(s.arrive(h1), Ok(vec![Effect::Run(h1)]));
    // Another origin is independent.
    let other = hop(99, 4, 1, 2);
    assert_eq!(s.arrive(other), Ok(vec![Effect::Run(other)]));
    assert_eq!(s.finished(1, 1), Ok(vec![Effect::Run(h2)]));
    assert_eq!(s.finished(1, 2), Ok(vec![Effect::Run(h3)]));
    assert_eq!(s.finished(1, 3), Ok(vec![]));
    assert_eq!(s.queued(), 0);
    assert_eq!(s.done(1), 3);
    assert_eq!(s.done(4), 0);
}

#[test]
fn duplicates_are_answered_or_ignored() {
    let mut s = Sequencer::new(2);
    let h1 = hop(10, 1, 1, 1);
    let h2 = hop(20, 1, 2, 3);
    assert_eq!(s.arrive(h1), Ok(vec![Effect::Run(h1)]));
    // Copy of the running hop: ignored.
    assert_eq!(s.arrive(h1), Ok(vec![]));
    assert_eq!(s.arrive(h2), Ok(vec![]));
    // Copy of a queued hop: ignored, not queued twice.
    assert_eq!(s.arrive(h2), Ok(vec![]));
    assert_eq!(s.queued(), 1);
    // Same stamp, different hop: a caller bug.
    assert!(matches!(
        s.arrive(hop(21, 1, 2, 1)),
        Err(SequencerError::ConflictingStamp { .. })
    ));
    assert!(matches!(
        s.arrive(hop(11, 1, 1, 1)),
        Err(SequencerError::ConflictingStamp { .. })
    ));
    assert_eq!(s.finished(1, 1), Ok(vec![Effect::Run(h2)]));
    // Resubmission of a finished hop.
    assert_eq!(
        s.arrive(h1),
        Ok(vec![Effect::AlreadyDone {
            chain: 10,
            hop_index: 1
        }])
    );
    assert_eq!(s.finished(1, 2), Ok(vec![]));
    assert_eq!(
        s.arrive(h2),
        Ok(vec![Effect::AlreadyDone {
            chain: 20,
            hop_index: 3
        }])
    );
    // A resubmitted first hop at its origin is also already done.
    let mut o = Sequencer::new(5);
    let st = o.assign(1, &[5, 2]).expect("assign");
    let first = st.arrival(0).expect("first hop");
    assert_eq!(
        o.arrive(first),
        Ok(vec![Effect::AlreadyDone {
            chain: 1,
            hop_index: 0
        }])
    );
}

#[test]
fn finished_out_of_turn_or_unknown_is_an_error() {
    let mut s = Sequencer::new(2);
    assert_eq!(
        s.finished(1, 1),
        Err(SequencerError::NotRunning {
            origin: 1,
            seq: 1,
            running: None
        })
    );
    let h1 = hop(10, 1, 1, 1);
    s.arrive(h1).expect("arrive");
    s.arrive(hop(20, 1, 2, 1)).expect("arrive");
    assert_eq!(
        s.finished(1, 2),
        Err(SequencerError::NotRunning {
            origin: 1,
            seq: 2,
            running: Some(1)
        })
    );
    // Nothing changed: the right completion still works.
    assert_eq!(s.finished(1, 1), Ok(vec![Effect::Run(hop(20, 1, 2, 1))]));
    // Finishing twice is an error too.
    assert!(s.finished(1, 1).is_err());
    assert!(matches!(
        s.arrive(hop(1, 1, 0, 0)),
        Err(SequencerError::ZeroSeq { .. })
    ));
}

#[test]
fn snapshot_restore_round_trips_and_numbering_continues() {
    let mut s = Sequencer::new(1);
    let a = s.assign(1, &[1, 2, 3]).expect("assign");
    // A hop from origin 3 runs here and finishes.
    let h = hop(50, 3, 1, 2);
    assert_eq!(s.arrive(h), Ok(vec![Effect::Run(h)]));
    s.finished(3, 1).expect("finished");
    // A queued hop is not durable.
    s.arrive(hop(51, 3, 3, 1)).expect("arrive");
    let snap: SequencerState = s.snapshot();
    assert_eq!(snap.server, 1);
    assert_eq!(snap.ctr.get(&2), Some(&1));
    assert_eq!(snap.done.get(&3), Some(&1));
    let mut r = Sequencer::restore(snap.clone());
    assert_eq!(r.snapshot(), snap);
    assert_eq!(r.queued(), 0);
    // Numbering continues after restart: no stamp reused.
    let b = r.assign(2, &[1, 2, 3, 1]).expect("assign");
    for (x, y) in a.hops.iter().zip(&b.hops) {
        if x.server == y.server {
            assert!(y.seq > x.seq, "stamp reused: {x:?} then {y:?}");
        }
    }
    assert_eq!(
        b.hops,
        vec![
            Stamp { server: 1, seq: 2 },
            Stamp { server: 2, seq: 2 },
            Stamp { server: 3, seq: 2 },
            Stamp { server: 1, seq: 3 },
        ]
    );
    // Resubmissions after the restart: finished ones are answered,
    // the rest queue again.
    assert_eq!(
        r.arrive(h),
        Ok(vec![Effect::AlreadyDone {
            chain: 50,
            hop_index: 2
        }])
    );
    let h2 = hop(52, 3, 2, 1);
    assert_eq!(r.arrive(h2), Ok(vec![Effect::Run(h2)]));
}

#[test]
fn busy_when_the_queue_is_full() {
    let mut s = Sequencer::new(0);
    // Seq 1 never arrives, so everything from 2 on waits.
    for i in 0..MAX_QUEUED_HOPS {
        let seq = i as u64 + 2;
        assert_eq!(s.arrive(hop(seq, 1, seq, 1)), Ok(vec![]));
    }
    assert_eq!(s.queued(), MAX_QUEUED_HOPS);
    let extra = hop(0, 1, MAX_QUEUED_HOPS as u64 + 2, 1);
    assert_eq!(s.arrive(extra), Ok(vec![Effect::Busy(extra)]));
    assert_eq!(s.queued(), MAX_QUEUED_HOPS);
    // The hop whose turn it is needs no queue slot and still runs.
    let first = hop(1, 1, 1, 1);
    assert_eq!(s.arrive(first), Ok(vec![Effect::Run(first)]));
    assert_eq!(s.finished(1, 1), Ok(vec![Effect::Run(hop(2, 1, 2, 1))]));
    assert_eq!(s.queued(), MAX_QUEUED_HOPS - 1);
    assert_eq!(s.arrive(extra), Ok(vec![]));
}

#[test]
fn bad_paths_are_refused_without_effect() {
    let mut s = Sequencer::new(3);
    assert_eq!(s.assign(1, &[]), Err(SequencerError::EmptyPath));
    let long = vec![3; MAX_PATH_LEN + 1];
    assert_eq!(
        s.assign(1, &long),
        Err(SequencerError::PathTooLong {
            len: MAX_PATH_LEN + 1,
            limit: MAX_PATH_LEN
        })
    );
    assert_eq!(
        s.assign(1, &[4, 3]),
        Err(SequencerError::NotOrigin {
            server: 3,
            path_start: 4
        })
    );
    assert_eq!(s.snapshot(), Sequencer::new(3).snapshot());
    // The longest allowed path is fine; a server visited every hop gets
    // 1..=MAX_PATH_LEN.
    let max = vec![3; MAX_PATH_LEN];
    let st = s.assign(2, &max).expect("assign");
    assert_eq!(st.hops.last().map(|h| h.seq), Some(MAX_PATH_LEN as u64));
    // A counter at its end: refused, nothing changed. The local hops
    // stamped above are marked done so the first hop is in turn.
    let mut worn = s.snapshot();
    worn.ctr.insert(5, u64::MAX);
    worn.done.insert(3, MAX_PATH_LEN as u64);
    let mut full = Sequencer::restore(worn);
    let before = full.snapshot();
    assert_eq!(
        full.assign(3, &[3, 5]),
        Err(SequencerError::CounterExhausted { server: 5 })
    );
    assert_eq!(full.snapshot(), before);
}

/// The shell writes the state `preview` and `state_after` return in the
/// hop's transaction, before the sequencer itself changes: a sequencer
/// restored from that state after a crash is the one that would have
/// gone on.
#[test]
fn preview_and_state_after_are_what_assign_and_finished_leave() {
    let mut a = Sequencer::new(1);
    let before = a.snapshot();
    let (stamps, state) = a.preview(7, &[1, 2, 1]).unwrap();
    assert_eq!(a.snapshot(), before, "preview changes nothing");
    assert_eq!(a.assign(7, &[1, 2, 1]).unwrap(), stamps);
    assert_eq!(a.snapshot(), state);
    let mut b = Sequencer::new(2);
    let arrival = stamps.arrival(1).unwrap();
    assert_eq!(b.arrive(arrival).unwrap(), vec![Effect::Run(arrival)]);
    let after = b.state_after(arrival.origin, arrival.seq);
    b.finished(arrival.origin, arrival.seq).unwrap();
    assert_eq!(b.snapshot(), after);
    // Restored from it, a copy of the hop is known to have run.
    let mut restored = Sequencer::restore(after);
    assert!(matches!(
        restored.arrive(arrival).unwrap().as_slice(),
        [Effect::AlreadyDone { .. }]
    ));
    // A first hop out of turn is refused by preview as by assign.
    assert!(matches!(
        a.preview(8, &[1]),
        Err(SequencerError::FirstHopOutOfTurn { .. })
    ));
}
