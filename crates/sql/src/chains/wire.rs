//! Hops between Aqueduct servers (`docs/chains.md`, "The wire format
//! between nodes"): one TCP connection from each node to each other node,
//! carrying frames of a 4-byte big-endian length and a JSON message.
//!
//! The transport is deliberately unreliable: a message to a node that is
//! down or whose connection broke is dropped. Reliability lives above it,
//! in the logical servers: a hop or linked start stays in its sender's
//! progress table and is sent again until the receiver acknowledges it,
//! and the receiver's durable sequencer state and inbox turn every copy
//! after the first into an acknowledgement.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_chains::sequencer::ServerId;
use serde::{Deserialize, Serialize};

use super::placement::Placement;

/// The largest frame either side accepts.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Messages queued towards one node; more are dropped (and sent again by
/// their logical server).
pub const MAX_QUEUED_MESSAGES: usize = 100_000;
/// How long a connection attempt to a node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A chain instance as it travels: everything a node needs to run its
/// next hop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireRun {
    pub id: u64,
    pub chain: String,
    /// The slots, as the progress table stores them (`progress.rs`).
    pub slots: String,
    /// Started by another chain's `THEN CALL`.
    pub linked: bool,
    /// `(server, seq)` per hop, assigned at the origin; empty before the
    /// first hop.
    pub stamps: Vec<(ServerId, u64)>,
    /// The node whose session waits for the chain, and the chain id its
    /// ticket is known by there.
    pub home: usize,
    pub ticket: u64,
    /// The called chain's final slots, once a linked chain runs on.
    pub result: Option<String>,
}

/// An error as it travels: SQLSTATE and message.
pub type WireError = (String, String);

/// One message between nodes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Wire {
    /// A `CALL` at another node whose first hop is here.
    Call { run: WireRun },
    /// The first hop's outcome: status, LSN and slots, or the error.
    Called {
        id: u64,
        outcome: Result<(String, u64, String), WireError>,
    },
    /// Hop `hop` of a chain, from logical server `from`.
    Hop {
        run: WireRun,
        hop: usize,
        from: ServerId,
    },
    /// A linked chain whose first hop is here, from logical server `from`.
    Start { run: WireRun, from: ServerId },
    /// Hop `hop` of chain `id` (0 for a linked start) has committed at
    /// its node: its sender `to` may forget it.
    Ack { id: u64, hop: usize, to: ServerId },
    /// The linked start of chain `id` is acknowledged and forgotten by
    /// its sender: the receiver drops its inbox entry.
    Forget { id: u64 },
    /// A chain whose home is the receiver completed (or failed).
    Done {
        ticket: u64,
        outcome: Result<(u64, String), WireError>,
    },
}

/// Where received messages go.
pub type Deliver = Arc<dyn Fn(Wire) + Send + Sync>;
/// Told the index of a node whose connection closed: it went away, and
/// what was sent to it last may not have arrived.
pub type Lost = Arc<dyn Fn(usize) + Send + Sync>;

/// The connections of one node to the others.
pub struct Transport {
    /// Per node, the queue of its sender thread (`None` for this node).
    peers: Vec<Option<mpsc::SyncSender<Wire>>>,
}

fn write_frame(w: &mut impl Write, msg: &Wire) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    assert!(
        body.len() <= MAX_FRAME_BYTES,
        "a chain message past the frame limit"
    );
    w.write_all(&(body.len() as u32).to_be_bytes())?;
    w.write_all(&body)
}

fn read_frame(r: &mut impl Read) -> std::io::Result<Wire> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes, past the limit of {MAX_FRAME_BYTES}"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

impl Transport {
    /// Listens on this node's address and starts a sender per other node;
    /// `deliver` gets every message received, on the connection's thread.
    pub fn start(
        placement: &Placement,
        deliver: Deliver,
        lost: Lost,
    ) -> std::io::Result<Transport> {
        let listener = TcpListener::bind(placement.nodes[placement.node])?;
        let accept = deliver.clone();
        std::thread::Builder::new()
            .name("chain-listen".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let deliver = accept.clone();
                    let _ = std::thread::Builder::new()
                        .name("chain-peer-in".into())
                        .spawn(move || receive(conn, deliver));
                }
            })?;
        let mut peers = Vec::with_capacity(placement.nodes.len());
        for (i, addr) in placement.nodes.iter().enumerate() {
            if i == placement.node {
                peers.push(None);
                continue;
            }
            let (tx, rx) = mpsc::sync_channel(MAX_QUEUED_MESSAGES);
            let addr = *addr;
            let deliver = deliver.clone();
            let lost = lost.clone();
            std::thread::Builder::new()
                .name(format!("chain-peer-out-{i}"))
                .spawn(move || send_loop(addr, rx, deliver, move || lost(i)))?;
            peers.push(Some(tx));
        }
        Ok(Transport { peers })
    }

    /// Queues a message for `node`; dropped when its queue is full.
    pub fn send(&self, node: usize, msg: Wire) {
        if let Some(Some(tx)) = self.peers.get(node) {
            if let Err(mpsc::TrySendError::Full(msg)) = tx.try_send(msg) {
                refuse(&msg, "the queue towards the node is full", &|_| {});
            }
        }
    }
}

fn receive(conn: TcpStream, deliver: Deliver) {
    let _ = conn.set_nodelay(true);
    let mut r = BufReader::new(conn);
    while let Ok(msg) = read_frame(&mut r) {
        deliver(msg);
    }
}

/// A message that could not be sent: a `CALL` waiting for it is answered
/// with the failure (the others are sent again by their servers).
fn refuse(msg: &Wire, why: &str, deliver: &dyn Fn(Wire)) {
    if let Wire::Call { run } = msg {
        deliver(Wire::Called {
            id: run.id,
            outcome: Err((
                "08006".into(),
                format!("the node that holds the chain's first hop is unreachable: {why}"),
            )),
        });
    }
}

/// Watches a connection to another node: that node never writes on it,
/// so a read returns only when it closed (the process went away), which
/// marks the connection dead and tells `lost` at once, rather than at the
/// next write, which the kernel may still accept.
fn watch(conn: &TcpStream, lost: Arc<dyn Fn() + Send + Sync>) -> Option<Arc<AtomicBool>> {
    let mut reader = conn.try_clone().ok()?;
    let dead = Arc::new(AtomicBool::new(false));
    let flag = dead.clone();
    std::thread::Builder::new()
        .name("chain-peer-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
            flag.store(true, Ordering::SeqCst);
            lost();
        })
        .ok()?;
    Some(dead)
}

fn send_loop(
    addr: SocketAddr,
    rx: mpsc::Receiver<Wire>,
    deliver: Deliver,
    lost: impl Fn() + Send + Sync + 'static,
) {
    let lost: Arc<dyn Fn() + Send + Sync> = Arc::new(lost);
    let mut conn: Option<(BufWriter<TcpStream>, Arc<AtomicBool>)> = None;
    while let Ok(msg) = rx.recv() {
        if conn
            .as_ref()
            .is_some_and(|(_, dead)| dead.load(Ordering::SeqCst))
        {
            conn = None;
        }
        if conn.is_none() {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(c) => {
                    let _ = c.set_nodelay(true);
                    match watch(&c, lost.clone()) {
                        Some(dead) => conn = Some((BufWriter::new(c), dead)),
                        None => {
                            refuse(&msg, "cannot watch the connection", &*deliver);
                            continue;
                        }
                    }
                }
                Err(e) => {
                    refuse(&msg, &e.to_string(), &*deliver);
                    continue;
                }
            }
        }
        let w = &mut conn.as_mut().expect("connected above").0;
        // Everything queued goes out in one write.
        let mut sent = write_frame(w, &msg);
        let mut failed = Vec::new();
        if sent.is_err() {
            failed.push(msg);
        }
        while sent.is_ok() {
            match rx.try_recv() {
                Ok(more) => {
                    sent = write_frame(w, &more);
                    if sent.is_err() {
                        failed.push(more);
                    }
                }
                Err(_) => break,
            }
        }
        if sent.is_ok() {
            sent = w.flush();
        }
        if let Err(e) = sent {
            conn = None;
            for m in &failed {
                refuse(m, &e.to_string(), &*deliver);
            }
        }
    }
}
