//! Simulated datacenters for tests and benchmarks (`docs/chains.md`,
//! "Latency injection"): the logical servers are spread over `n`
//! datacenters (server `i` in datacenter `i mod n`) with a round-trip time
//! between each pair, so the benefit of answering after the first hop can
//! be measured on one machine.
//!
//! A hop sent to a server in another datacenter arrives one round trip
//! later (the message and the acknowledgement that frees the sender's
//! turn, as Lynx' completion latencies count them). A distributed
//! transaction pays a round trip for each server it takes in another
//! datacenter than its origin's, one after the other, then one more round
//! trip to the farthest of them to commit (two-phase commit's second
//! round).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use aqueduct_chains::sequencer::ServerId;
use aqueduct_expr::SqlError;

/// The most datacenters one may simulate.
pub const MAX_DATACENTERS: usize = 8;
/// The longest round trip one may configure.
pub const MAX_ROUND_TRIP: Duration = Duration::from_secs(10);

/// Datacenters and the round-trip times between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Datacenters {
    /// `rtt[a][b]`, symmetric, zero on the diagonal.
    rtt: Vec<Vec<Duration>>,
}

impl Datacenters {
    /// Parses `"82ms,153ms,102ms"`: the round trips between each pair of
    /// datacenters in order (0–1, 0–2, 1–2 for three; `n(n-1)/2` values
    /// for `n`).
    pub fn parse(text: &str) -> Result<Datacenters, SqlError> {
        let bad = |why: String| {
            SqlError::new("22023", format!("invalid datacenter round trips {text:?}: {why}"))
                .with_hint("give the round trips between each pair of datacenters, e.g. '82ms,153ms,102ms' for three")
        };
        let values: Vec<Duration> = text
            .split(',')
            .map(|v| {
                aqueduct_plan::limits::parse_duration(v.trim())
                    .filter(|d| *d <= MAX_ROUND_TRIP)
                    .ok_or_else(|| bad(format!("{v:?} is not a duration up to {MAX_ROUND_TRIP:?}")))
            })
            .collect::<Result<_, _>>()?;
        let n = (2..=MAX_DATACENTERS)
            .find(|n| n * (n - 1) / 2 == values.len())
            .ok_or_else(|| {
                bad(format!(
                    "{} values do not pair up 2 to {MAX_DATACENTERS} datacenters",
                    values.len()
                ))
            })?;
        // The pairs in order: (0, 1), (0, 2), ..., (1, 2), ...
        let pairs = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b)));
        let mut rtt = vec![vec![Duration::ZERO; n]; n];
        for ((a, b), d) in pairs.zip(values) {
            rtt[a][b] = d;
            rtt[b][a] = d;
        }
        Ok(Datacenters { rtt })
    }

    pub fn count(&self) -> usize {
        self.rtt.len()
    }

    /// The datacenter a logical server is in.
    pub fn of(&self, server: ServerId) -> usize {
        server as usize % self.rtt.len()
    }

    /// The round trip between two logical servers' datacenters.
    pub fn round_trip(&self, from: ServerId, to: ServerId) -> Duration {
        self.rtt[self.of(from)][self.of(to)]
    }

    /// What a distributed transaction from `origin` taking `servers`
    /// waits, in all (see the module documentation).
    pub fn distributed_wait(&self, origin: ServerId, servers: &[ServerId]) -> Duration {
        let takes: Duration = servers.iter().map(|&s| self.round_trip(origin, s)).sum();
        let commit = servers
            .iter()
            .map(|&s| self.round_trip(origin, s))
            .max()
            .unwrap_or_default();
        takes + commit
    }
}

/// Messages held back until their time, then handed to `deliver`: one
/// thread, a heap by due time. The runtime's bound on chains in flight
/// bounds it.
pub struct DelayLine<T: Send + 'static> {
    tx: mpsc::Sender<(Instant, T)>,
}

impl<T: Send + 'static> DelayLine<T> {
    pub fn start(mut deliver: impl FnMut(T) + Send + 'static) -> std::io::Result<DelayLine<T>> {
        let (tx, rx) = mpsc::channel::<(Instant, T)>();
        std::thread::Builder::new()
            .name("chain-delay-line".into())
            .spawn(move || {
                let mut heap: BinaryHeap<Reverse<Due<T>>> = BinaryHeap::new();
                let mut n = 0u64;
                loop {
                    let now = Instant::now();
                    while heap.peek().is_some_and(|Reverse(d)| d.at <= now) {
                        let Reverse(d) = heap.pop().expect("peeked");
                        deliver(d.item);
                    }
                    let next = match heap.peek() {
                        Some(Reverse(d)) => rx.recv_timeout(d.at.saturating_duration_since(now)),
                        None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    };
                    match next {
                        Ok((at, item)) => {
                            n += 1;
                            heap.push(Reverse(Due { at, n, item }));
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(DelayLine { tx })
    }

    /// Hands `item` over once `delay` has passed.
    pub fn send_after(&self, delay: Duration, item: T) {
        let _ = self.tx.send((Instant::now() + delay, item));
    }
}

struct Due<T> {
    at: Instant,
    /// Arrival order, so equal due times keep it.
    n: u64,
    item: T,
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.n) == (other.at, other.n)
    }
}
impl<T> Eq for Due<T> {}
impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Due<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.n).cmp(&(other.at, other.n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_pair_up_datacenters() {
        let d = Datacenters::parse("82ms, 153ms, 102ms").unwrap();
        assert_eq!(d.count(), 3);
        assert_eq!(d.round_trip(0, 1), Duration::from_millis(82));
        assert_eq!(d.round_trip(2, 1), Duration::from_millis(102));
        assert_eq!(d.round_trip(0, 2), Duration::from_millis(153));
        assert_eq!(d.round_trip(3, 0), Duration::ZERO);
        assert_eq!(
            d.distributed_wait(0, &[0, 1, 2]),
            Duration::from_millis(82 + 153 + 153)
        );
        assert_eq!(Datacenters::parse("1ms,2ms").unwrap_err().code, "22023");
        assert_eq!(Datacenters::parse("1h").unwrap_err().code, "22023");
    }

    #[test]
    fn the_delay_line_delivers_in_due_order() {
        let (tx, rx) = mpsc::channel();
        let line = DelayLine::start(move |i: u32| {
            let _ = tx.send(i);
        })
        .unwrap();
        line.send_after(Duration::from_millis(30), 3);
        line.send_after(Duration::from_millis(10), 1);
        line.send_after(Duration::from_millis(10), 2);
        let got: Vec<u32> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, vec![1, 2, 3]);
    }
}
