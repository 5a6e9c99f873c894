//! The running agent's metrics (`docs/publications.md`, section 9), as
//! Prometheus text on `--metrics-addr`: a thread of its own answering each
//! connection with the current values.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

/// What the shell counts and the page shows.
#[derive(Debug, Default)]
pub struct AgentStats {
    pub received_txns: AtomicU64,
    pub applied_txns: AtomicU64,
    pub applied_rows: AtomicU64,
    pub watermark: AtomicU64,
    pub head: AtomicU64,
    pub window: AtomicU64,
    pub dead_letters: AtomicU64,
    pub fallbacks: AtomicU64,
    pub origin_fallbacks: AtomicU64,
    pub origins_waiting: AtomicU64,
    pub sink_errors: AtomicU64,
    pub epoch: AtomicU64,
    pub debt_slots: AtomicU64,
    /// 1 from a bootstrap until the copy is in sync (§5.6), else 0.
    pub bootstrapping: AtomicU64,
    /// Rows a bootstrap has loaded so far.
    pub bootstrap_rows: AtomicU64,
}

impl AgentStats {
    fn render(&self, subscriber: &str) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let lag = get(&self.head).saturating_sub(get(&self.watermark).saturating_sub(1));
        let mut out = String::new();
        for (name, kind, help, value) in [
            (
                "aqueduct_subscribe_received_txns_total",
                "counter",
                "Transactions received from the stream.",
                get(&self.received_txns),
            ),
            (
                "aqueduct_subscribe_applied_txns_total",
                "counter",
                "Transactions applied to the sink.",
                get(&self.applied_txns),
            ),
            (
                "aqueduct_subscribe_applied_rows_total",
                "counter",
                "Row changes applied to the sink.",
                get(&self.applied_rows),
            ),
            (
                "aqueduct_subscribe_watermark_lsn",
                "gauge",
                "Everything below this LSN is applied.",
                get(&self.watermark),
            ),
            (
                "aqueduct_subscribe_head_lsn",
                "gauge",
                "The last LSN the stream delivered.",
                get(&self.head),
            ),
            (
                "aqueduct_subscribe_lag_lsns",
                "gauge",
                "Delivered LSNs not yet applied.",
                lag,
            ),
            (
                "aqueduct_subscribe_window_txns",
                "gauge",
                "Received transactions not yet applied.",
                get(&self.window),
            ),
            (
                "aqueduct_subscribe_dead_letters",
                "gauge",
                "Transactions the sink refused, waiting for an operator.",
                get(&self.dead_letters),
            ),
            (
                "aqueduct_subscribe_causal_fallbacks_total",
                "counter",
                "Transactions applied out of order after the causal timeout.",
                get(&self.fallbacks),
            ),
            (
                "aqueduct_subscribe_origin_fallbacks_total",
                "counter",
                "Decorator transactions applied after the causal timeout without their origins in the sink.",
                get(&self.origin_fallbacks),
            ),
            (
                "aqueduct_subscribe_origins_waiting_txns",
                "gauge",
                "Decorator transactions waiting for their origins to be applied in the sink.",
                get(&self.origins_waiting),
            ),
            (
                "aqueduct_subscribe_debt_slots",
                "gauge",
                "Dependency slots whose order is lost until late transactions land.",
                get(&self.debt_slots),
            ),
            (
                "aqueduct_subscribe_sink_errors_total",
                "counter",
                "Sink batches that failed.",
                get(&self.sink_errors),
            ),
            (
                "aqueduct_subscribe_bootstrapping",
                "gauge",
                "1 while the copy is bootstrapping or catching up after a bootstrap, 0 once in sync.",
                get(&self.bootstrapping),
            ),
            (
                "aqueduct_subscribe_bootstrap_rows_total",
                "counter",
                "Rows loaded by bootstraps.",
                get(&self.bootstrap_rows),
            ),
            (
                "aqueduct_subscribe_epoch",
                "gauge",
                "The stream's epoch (one per connection).",
                get(&self.epoch),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            let _ = writeln!(out, "{name}{{subscriber=\"{subscriber}\"}} {value}");
        }
        out
    }
}

/// Serves `stats` on `addr` until the process ends.
pub fn serve(addr: &str, subscriber: &str, stats: Arc<AgentStats>) -> Result<()> {
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}"))?;
    let subscriber = subscriber.replace(['"', '\\', '\n'], "_");
    std::thread::Builder::new()
        .name("subscribe-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request);
                let body = stats.render(&subscriber);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })?;
    Ok(())
}
