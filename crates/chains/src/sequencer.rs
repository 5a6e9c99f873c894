//! Origin ordering with pairwise sequencers (Lynx §3, §6.2), as a pure
//! step core: inputs in, effects out, no I/O, no threads, no clock.
//!
//! # The property (§3)
//!
//! If two chains start at the same server and the first hop of one
//! executes before the first hop of the other, then at every server where
//! both execute, every hop of the first executes before every hop of the
//! second.
//!
//! # The mechanism (§6.2, "Origin ordering")
//!
//! Every server `i` keeps a counter `ctr[i→j]` for every server `j` and
//! the last sequence number it has run from every server `j`,
//! `done[j→i]`. A chain with hops at `s1, …, sk` is stamped at its origin
//! `s1`: hop `h` gets `seq = ++ctr[s1→s_h]`, so a server the chain visits
//! several times gets consecutive numbers, one per visit. Server `s_h`
//! runs the hop only when `done[s1→s_h] == seq − 1`, and sets
//! `done[s1→s_h] = seq` when it has finished.
//!
//! One [`Sequencer`] holds both roles of one server: the origin side
//! ([`Sequencer::assign`]) and the executor side ([`Sequencer::arrive`],
//! [`Sequencer::finished`]).
//!
//! # When stamps are assigned
//!
//! Application aborts are allowed only in a chain's first hop (§3,
//! "Restrictions"). The stamps are therefore assigned atomically with the
//! *commit* of the first hop: [`Sequencer::assign`] is called inside the
//! first hop's local transaction, and its new state is written with that
//! hop's batch. An aborted first hop never calls it, so it consumes no
//! numbers, and every number handed out belongs to a chain whose later
//! hops will commit (retried until they do, §3). No gap is ever left, so
//! no server ever waits for a number that will not come.
//!
//! The first hop itself carries a stamp at the origin
//! (`ctr[origin→origin]`) like any other hop; `assign` records it as done
//! at once, because the hop is committing. For this to respect origin
//! ordering the first hop may only run when every hop stamped earlier by
//! this origin *at this server* has finished — otherwise a chain that
//! returns to its origin (`1→2→1`) could have its second visit overtaken
//! by a later chain's first hop. [`Sequencer::first_hop_ready`] tells the
//! shell when a first hop may start; `assign` refuses with
//! [`SequencerError::FirstHopOutOfTurn`] otherwise. Between the check and
//! the commit nothing can change it, as long as the shell runs one first
//! hop at a time per server: only `assign` stamps hops of this origin.
//!
//! # Duplicates
//!
//! A coordinator that restarts replays its outstanding chains (§6.1 (2)),
//! so a hop can arrive more than once. For an arrival with stamp
//! `(origin, seq)` at this server:
//!
//! * `seq ≤ done[origin→me]`: the hop has run and committed;
//!   [`Effect::AlreadyDone`] tells the shell to answer from its history
//!   instead of running it again.
//! * `seq` is the hop currently granted its turn (an [`Effect::Run`] was
//!   returned and [`Sequencer::finished`] not yet called) or already
//!   queued: the arrival is ignored (no effects). The first copy will run
//!   and its completion is reported once, through the first copy.
//! * the same stamp arriving with a different chain or hop index is a
//!   bug in the caller and yields [`SequencerError::ConflictingStamp`].
//!
//! # Why it cannot deadlock
//!
//! A hop waits only for hops *of the same origin at the same server* with
//! smaller stamps (`done[o→s] = seq − 1` needs exactly the hops stamped
//! `1..seq` by `o` for `s`). Order the chains of one origin `o` by the
//! order in which `o` stamped them (the commit order of their first
//! hops); stamping is sequential at `o`, so this is a total order, and
//! for every server `s` the numbers `ctr[o→s]` grow along it. Hence every
//! hop a hop of chain `C` waits for belongs either to a chain stamped
//! before `C`, or to `C` itself at an earlier visit of the same server
//! (consecutive numbers, smaller for the earlier visit).
//!
//! Now take, among the unfinished chains of origin `o`, the earliest
//! stamped one, `C`, and its next hop `h` at server `s`. Every hop of `o`
//! at `s` with a smaller number belongs to an earlier chain (all finished)
//! or to an earlier hop of `C` (finished, because chains are sequential
//! and `h` is `C`'s next hop). So `done[o→s] = seq − 1` and `h` runs. By
//! induction on the hops of `C` and then on the chains of `o`, every chain
//! of `o` completes; origins are independent of each other, because no
//! hop ever waits for a hop of another origin.
//!
//! Paths that cross do not change this. With `C1: i→j→k` stamped before
//! `C2: i→k→j`, `C2`'s hop at `k` waits for `C1`'s hop at `k`, and `C1`'s
//! hop at `j` never waits for anything of `C2` (it has the smaller number
//! at `j`); so `C1` completes and then `C2` does. A cycle of waits would
//! need some hop to wait for a later-stamped chain, which the numbering
//! excludes. A chain that visits a server twice (`i→j→i→j`) holds
//! consecutive numbers there, and its second visit waits only for its own
//! first visit, which has finished before the second hop is sent.
//!
//! A first hop held back by [`Sequencer::first_hop_ready`] waits only for
//! hops already stamped by its origin at the origin, i.e. for chains
//! stamped before it, so it fits the same order. The shell's own
//! resources (one hop running per server) add no waits either: a queued
//! hop holds nothing, it only sits in the queue here.
//!
//! # Durable state and restart
//!
//! Only `ctr` and `done` must survive a restart ([`SequencerState`], from
//! [`Sequencer::snapshot`], stored with each hop's batch, and read back
//! with [`Sequencer::restore`]). Queued hops and the hop granted its turn
//! are not durable: after a restart their coordinators resubmit them, and
//! a granted hop that had not committed is simply granted again.
//!
//! # Bounds
//!
//! A chain has at most [`MAX_PATH_LEN`] hops, checked by `assign`; a
//! server queues at most [`MAX_QUEUED_HOPS`] hops, beyond which `arrive`
//! answers [`Effect::Busy`] and the shell retries later. A hop whose turn
//! it is never needs a queue slot and is never refused, so a full queue
//! cannot block the hop that would drain it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// A logical server.
pub type ServerId = u32;

/// A chain instance, unique within the system.
pub type ChainId = u64;

/// The most hops a chain may have; longer paths are refused by
/// [`Sequencer::assign`].
pub const MAX_PATH_LEN: usize = 64;

/// The most hops one server keeps waiting for their turn, over all
/// origins; further arrivals get [`Effect::Busy`], except the hop whose
/// turn it is, which is granted without queueing.
pub const MAX_QUEUED_HOPS: usize = 100_000;

/// One hop's place in its origin's order at one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    /// The server that runs the hop.
    pub server: ServerId,
    /// The hop's number in `ctr[origin→server]`, starting at 1.
    pub seq: u64,
}

/// The stamps of a chain's hops, in path order, assigned at its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamps {
    /// The chain stamped.
    pub chain: ChainId,
    /// The server the chain started at (its first hop's server).
    pub origin: ServerId,
    /// One stamp per hop, in path order; `hops[0]` is the first hop.
    pub hops: Vec<Stamp>,
}

impl Stamps {
    /// The message that delivers hop `hop_index` to its server, or `None`
    /// past the end of the path.
    pub fn arrival(&self, hop_index: usize) -> Option<HopArrival> {
        self.hops.get(hop_index).map(|stamp| HopArrival {
            chain: self.chain,
            origin: self.origin,
            seq: stamp.seq,
            hop_index,
        })
    }
}

/// A hop delivered to the server that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HopArrival {
    /// The chain the hop belongs to.
    pub chain: ChainId,
    /// The server where the chain started.
    pub origin: ServerId,
    /// The hop's stamp in `ctr[origin→this server]`.
    pub seq: u64,
    /// The hop's position in the chain's path.
    pub hop_index: usize,
}

/// What the shell must do after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// It is this hop's turn: run it, then call [`Sequencer::finished`].
    Run(HopArrival),
    /// The hop has already run here: answer from the history, do not run
    /// it again.
    AlreadyDone { chain: ChainId, hop_index: usize },
    /// The queue is full ([`MAX_QUEUED_HOPS`]); the hop was not accepted
    /// and must be resubmitted later.
    Busy(HopArrival),
}

/// A step the sequencer refuses; each is a bug or a misuse in the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequencerError {
    /// `assign` with an empty path.
    EmptyPath,
    /// `assign` with more than [`MAX_PATH_LEN`] hops.
    PathTooLong { len: usize, limit: usize },
    /// `assign` at a server that is not the path's first server.
    NotOrigin {
        server: ServerId,
        path_start: ServerId,
    },
    /// `assign` while hops stamped earlier by this origin at this server
    /// have not finished (see [`Sequencer::first_hop_ready`]).
    FirstHopOutOfTurn { done: u64, assigned: u64 },
    /// A counter would overflow.
    CounterExhausted { server: ServerId },
    /// An arrival with sequence number 0; stamps start at 1.
    ZeroSeq { chain: ChainId },
    /// A stamp already known here for a different hop.
    ConflictingStamp {
        origin: ServerId,
        seq: u64,
        known: (ChainId, usize),
        arrived: (ChainId, usize),
    },
    /// `finished` for a hop that was not granted its turn.
    NotRunning {
        origin: ServerId,
        seq: u64,
        running: Option<u64>,
    },
}

impl fmt::Display for SequencerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SequencerError::EmptyPath => write!(f, "chain path is empty"),
            SequencerError::PathTooLong { len, limit } => {
                write!(f, "chain path has {len} hops, more than {limit}")
            }
            SequencerError::NotOrigin { server, path_start } => write!(
                f,
                "server {server} cannot stamp a chain starting at server {path_start}"
            ),
            SequencerError::FirstHopOutOfTurn { done, assigned } => write!(
                f,
                "first hop out of turn: {done} of {assigned} local hops of this origin finished"
            ),
            SequencerError::CounterExhausted { server } => {
                write!(f, "sequence counter towards server {server} exhausted")
            }
            SequencerError::ZeroSeq { chain } => {
                write!(f, "hop of chain {chain} has sequence number 0")
            }
            SequencerError::ConflictingStamp {
                origin,
                seq,
                known,
                arrived,
            } => write!(
                f,
                "stamp {seq} from server {origin} held by chain {} hop {}, arrived for chain {} hop {}",
                known.0, known.1, arrived.0, arrived.1
            ),
            SequencerError::NotRunning {
                origin,
                seq,
                running,
            } => match running {
                Some(r) => write!(
                    f,
                    "hop {seq} from server {origin} finished, but hop {r} holds the turn"
                ),
                None => write!(
                    f,
                    "hop {seq} from server {origin} finished, but no hop holds the turn"
                ),
            },
        }
    }
}

impl std::error::Error for SequencerError {}

/// The durable part of a [`Sequencer`]: plain data to be written with
/// each hop's batch. Counters absent from a map are 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencerState {
    /// The server this state belongs to.
    pub server: ServerId,
    /// `ctr[server→j]`: the last number stamped towards `j`.
    pub ctr: BTreeMap<ServerId, u64>,
    /// `done[j→server]`: the last number from origin `j` run here.
    pub done: BTreeMap<ServerId, u64>,
}

/// Per-origin executor state that is not durable.
#[derive(Debug, Clone, Default)]
struct Lane {
    /// The hop granted its turn and not yet finished (always `done + 1`).
    running: Option<HopArrival>,
    /// Hops waiting for their turn, by stamp.
    waiting: BTreeMap<u64, HopArrival>,
}

/// The pairwise sequencer of one server (origin and executor roles).
#[derive(Debug, Clone)]
pub struct Sequencer {
    state: SequencerState,
    lanes: HashMap<ServerId, Lane>,
    queued: usize,
}

impl Sequencer {
    /// A fresh sequencer for `server`: every counter 0.
    pub fn new(server: ServerId) -> Self {
        Sequencer::restore(SequencerState {
            server,
            ctr: BTreeMap::new(),
            done: BTreeMap::new(),
        })
    }

    /// A sequencer continuing from durable state; nothing queued, nothing
    /// granted.
    pub fn restore(state: SequencerState) -> Self {
        Sequencer {
            state,
            lanes: HashMap::new(),
            queued: 0,
        }
    }

    /// The durable state, to be stored with the current hop's batch.
    pub fn snapshot(&self) -> SequencerState {
        self.state.clone()
    }

    /// The server this sequencer belongs to.
    pub fn server(&self) -> ServerId {
        self.state.server
    }

    /// `ctr[me→to]`.
    pub fn counter(&self, to: ServerId) -> u64 {
        self.state.ctr.get(&to).copied().unwrap_or(0)
    }

    /// `done[from→me]`.
    pub fn done(&self, from: ServerId) -> u64 {
        self.state.done.get(&from).copied().unwrap_or(0)
    }

    /// Hops waiting for their turn, over all origins.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Whether a new chain's first hop may run here now: every hop this
    /// server has stamped for itself has finished.
    pub fn first_hop_ready(&self) -> bool {
        let me = self.state.server;
        self.done(me) == self.counter(me)
    }

    /// Stamps a chain whose first hop, at this server, is committing.
    ///
    /// Must be called atomically with that commit (see the module
    /// documentation); records the first hop as done here. Nothing changes
    /// on error.
    pub fn assign(&mut self, chain: ChainId, path: &[ServerId]) -> Result<Stamps, SequencerError> {
        let (stamps, state) = self.preview(chain, path)?;
        self.state = state;
        Ok(stamps)
    }

    /// What [`Sequencer::assign`] would return and the durable state it
    /// would leave, without changing anything: the shell writes that state
    /// in the first hop's transaction and calls `assign` once it commits.
    pub fn preview(
        &self,
        chain: ChainId,
        path: &[ServerId],
    ) -> Result<(Stamps, SequencerState), SequencerError> {
        let me = self.state.server;
        let Some(&start) = path.first() else {
            return Err(SequencerError::EmptyPath);
        };
        if path.len() > MAX_PATH_LEN {
            return Err(SequencerError::PathTooLong {
                len: path.len(),
                limit: MAX_PATH_LEN,
            });
        }
        if start != me {
            return Err(SequencerError::NotOrigin {
                server: me,
                path_start: start,
            });
        }
        if !self.first_hop_ready() {
            return Err(SequencerError::FirstHopOutOfTurn {
                done: self.done(me),
                assigned: self.counter(me),
            });
        }
        let mut next: BTreeMap<ServerId, u64> = BTreeMap::new();
        let mut hops = Vec::with_capacity(path.len());
        for &server in path {
            let last = match next.get(&server) {
                Some(&n) => n,
                None => self.counter(server),
            };
            let seq = last
                .checked_add(1)
                .ok_or(SequencerError::CounterExhausted { server })?;
            next.insert(server, seq);
            hops.push(Stamp { server, seq });
        }
        let mut state = self.state.clone();
        for (server, seq) in next {
            state.ctr.insert(server, seq);
        }
        // The first hop is committing now; it held the next local number.
        state.done.insert(me, hops[0].seq);
        Ok((
            Stamps {
                chain,
                origin: me,
                hops,
            },
            state,
        ))
    }

    /// The durable state once the hop `(origin, seq)`, granted its turn,
    /// has finished: what the shell writes in that hop's transaction.
    pub fn state_after(&self, origin: ServerId, seq: u64) -> SequencerState {
        let mut state = self.state.clone();
        state.done.insert(origin, seq);
        state
    }

    /// A hop arrives here. Returns [`Effect::Run`] if it is its turn,
    /// nothing if it must wait (it is queued) or is a copy of a queued or
    /// granted hop, [`Effect::AlreadyDone`] if it has run, and
    /// [`Effect::Busy`] if the queue is full.
    pub fn arrive(&mut self, hop: HopArrival) -> Result<Vec<Effect>, SequencerError> {
        if hop.seq == 0 {
            return Err(SequencerError::ZeroSeq { chain: hop.chain });
        }
        let done = self.done(hop.origin);
        if hop.seq <= done {
            return Ok(vec![Effect::AlreadyDone {
                chain: hop.chain,
                hop_index: hop.hop_index,
            }]);
        }
        let lane = self.lanes.entry(hop.origin).or_default();
        let known = match lane.running {
            Some(r) if r.seq == hop.seq => Some(r),
            _ => lane.waiting.get(&hop.seq).copied(),
        };
        if let Some(known) = known {
            if known.chain == hop.chain && known.hop_index == hop.hop_index {
                return Ok(Vec::new());
            }
            return Err(SequencerError::ConflictingStamp {
                origin: hop.origin,
                seq: hop.seq,
                known: (known.chain, known.hop_index),
                arrived: (hop.chain, hop.hop_index),
            });
        }
        if hop.seq == done + 1 {
            // `running` is always `done + 1`, handled above, so it is free.
            lane.running = Some(hop);
            return Ok(vec![Effect::Run(hop)]);
        }
        if self.queued >= MAX_QUEUED_HOPS {
            return Ok(vec![Effect::Busy(hop)]);
        }
        lane.waiting.insert(hop.seq, hop);
        self.queued += 1;
        Ok(Vec::new())
    }

    /// The hop `(origin, seq)`, granted its turn by [`Effect::Run`], has
    /// committed here. Records it as done and grants the turn to the next
    /// queued hop of `origin`, if it has arrived.
    pub fn finished(&mut self, origin: ServerId, seq: u64) -> Result<Vec<Effect>, SequencerError> {
        let Some(lane) = self.lanes.get_mut(&origin) else {
            return Err(SequencerError::NotRunning {
                origin,
                seq,
                running: None,
            });
        };
        match lane.running {
            Some(r) if r.seq == seq => {}
            other => {
                return Err(SequencerError::NotRunning {
                    origin,
                    seq,
                    running: other.map(|r| r.seq),
                })
            }
        }
        lane.running = None;
        self.state.done.insert(origin, seq);
        let mut effects = Vec::new();
        let next = seq.checked_add(1).and_then(|n| lane.waiting.remove(&n));
        if let Some(hop) = next {
            self.queued -= 1;
            lane.running = Some(hop);
            effects.push(Effect::Run(hop));
        }
        if lane.running.is_none() && lane.waiting.is_empty() {
            self.lanes.remove(&origin);
        }
        Ok(effects)
    }
}
