//! The PostgreSQL wire-protocol front end: clients (psql, drivers, ORMs)
//! talk to Aqueduct's SQL engine as they would to PostgreSQL.
//!
//! Built on `pgwire` for framing, message types, TLS negotiation and SCRAM;
//! the query protocols (simple and extended) are dispatched here so that
//! every reply reflects the engine's session: `ReadyForQuery` carries
//! [`Session::status`](aqueduct_sql::Session::status), and after a write a
//! `ParameterStatus` `aqueduct.last_lsn` tells the client the LSN of its
//! last commit.
//!
//! Each connection owns one [`Session`](aqueduct_sql::Session); its
//! synchronous calls (which may wait for an fsync) run on tokio's blocking
//! pool. A connection that ends, cleanly or not, abandons any open
//! transaction: nothing of it reaches the log.
//!
//! Untrusted bytes first pass [`frame::MessageGuard`], which bounds every
//! message's length before buffering it and refuses malformed bodies, so a
//! broken or hostile client can only close its own connection.

mod auth;
mod conn;
pub mod frame;
mod tls;
mod wire;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_sql::Engine;
use pgwire::api::{PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

pub use rustls;
pub use tls::{TlsError, TlsSetup};

/// Connections served at once unless configured otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;
/// Largest frontend message accepted unless configured otherwise. Above
/// the engine's largest query (`aqueduct_sql::MAX_SQL_BYTES`) and row
/// (`aqueduct_values::MAX_ROW_BYTES`) with room for a batch of parameters.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Time a client has from connecting to finishing authentication.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Time connections get to finish their statement at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Prepared statements one connection may hold.
pub const MAX_PREPARED_STATEMENTS: usize = 10_000;
/// Portals one connection may hold.
pub const MAX_PORTALS: usize = 10_000;

/// Bytes of messages a client sends ahead while one of its statements runs
/// that are read (and kept, to be processed next) while the connection
/// watches for the client going away; past this it stops reading until the
/// statement ends (so the bytes held are at most this and one message).
pub const MAX_PIPELINED_BYTES: usize = 1024 * 1024;
/// Connections over the limit being told so at once; beyond this they are
/// closed without a word, so a flood cannot pile up tasks.
pub const MAX_PENDING_REJECTIONS: usize = 32;
/// Time a connection over the limit gets to send its startup message and
/// read the refusal.
pub const REJECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (out of file descriptors, say) so the loop
/// does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// How the listener serves.
#[derive(Clone)]
pub struct PgConfig {
    /// Connections served at once; the next one is refused with SQLSTATE
    /// 53300 "sorry, too many clients already".
    pub max_connections: usize,
    /// User name → password. `None`: trust every client (meant for a
    /// loopback listener). `Some`: SCRAM-SHA-256 for every connection.
    pub users: Option<HashMap<String, String>>,
    /// TLS offered to clients that ask for it (SSLRequest or direct TLS).
    pub tls: Option<TlsSetup>,
    /// Refuse logins over plain TCP (SQLSTATE 28000): clients must use TLS
    /// (`sslmode=require`). Meaningful only with `tls`.
    pub tls_required: bool,
    pub startup_timeout: Duration,
    pub max_message_bytes: usize,
    pub shutdown_grace: Duration,
    /// Connection counters, shared with whoever exports metrics.
    pub metrics: Arc<PgMetrics>,
}

/// Connection counters of one listener.
#[derive(Debug, Default)]
pub struct PgMetrics {
    /// Connections being served now.
    pub open: std::sync::atomic::AtomicU64,
    /// Connections admitted since start.
    pub accepted_total: std::sync::atomic::AtomicU64,
    /// Connections refused because of the connection limit.
    pub refused_total: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Passwords stay out of logs: only the user names are shown.
        let users = self
            .users
            .as_ref()
            .map(|u| u.keys().collect::<std::collections::BTreeSet<_>>());
        f.debug_struct("PgConfig")
            .field("max_connections", &self.max_connections)
            .field("users", &users)
            .field("tls", &self.tls.is_some())
            .field("tls_required", &self.tls_required)
            .field("startup_timeout", &self.startup_timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish()
    }
}

impl Default for PgConfig {
    fn default() -> PgConfig {
        PgConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            users: None,
            tls: None,
            tls_required: false,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            metrics: Arc::new(PgMetrics::default()),
        }
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) engine: Arc<Engine>,
    pub(crate) config: PgConfig,
    pub(crate) scram: Option<auth::Scram>,
    pub(crate) tls_acceptor: Option<pgwire::tokio::TlsAcceptor>,
    pub(crate) pid_generator: Arc<dyn PidSecretKeyGenerator>,
    /// Running backends by process id: their secret key and the handle
    /// that cancels their statement (CancelRequest).
    pub(crate) backends: parking_lot::Mutex<
        std::collections::HashMap<
            i32,
            (
                pgwire::messages::startup::SecretKey,
                aqueduct_sql::limits::Interrupt,
            ),
        >,
    >,
}

/// Serves PostgreSQL clients on `listener` until `shutdown` completes.
///
/// At shutdown it stops accepting, tells idle connections the server is
/// going away (FATAL 57P01), lets busy ones finish their statement for up
/// to [`PgConfig::shutdown_grace`], then drops the rest (their open
/// transactions are abandoned). Errors of single connections are logged,
/// never returned.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: PgConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    if let Some(users) = &config.users {
        engine.set_bootstrap_users(users.keys().cloned());
    }
    let scram = config.users.as_ref().map(|users| {
        auth::Scram::new(
            Arc::new(auth::Users::new(users, engine.clone())),
            config
                .tls
                .as_ref()
                .and_then(|t| t.cert_chain_pem.as_deref()),
        )
    });
    let tls_acceptor = config
        .tls
        .as_ref()
        .map(|t| pgwire::tokio::TlsAcceptor::from(t.server_config.clone()));
    let shared = Arc::new(Shared {
        engine,
        scram,
        tls_acceptor,
        pid_generator: Arc::new(RandomPidSecretKeyGenerator::default()),
        backends: Default::default(),
        config,
    });
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    let rejections = Arc::new(Semaphore::new(MAX_PENDING_REJECTIONS));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    info!(
        addr = ?listener.local_addr().ok(),
        max_connections = shared.config.max_connections,
        auth = if shared.scram.is_some() { "scram-sha-256" } else { "trust" },
        tls = shared.tls_acceptor.is_some(),
        "PostgreSQL listener serving"
    );

    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        error!(error = %e, "a connection task panicked; its connection is closed");
                    }
                }
            }
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        warn!(error = %e, "accept failed; retrying");
                        tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                        continue;
                    }
                };
                let admission = match slots.clone().try_acquire_owned() {
                    Ok(permit) => conn::Admission { permit, refused: false },
                    Err(_) => match rejections.clone().try_acquire_owned() {
                        Ok(permit) => conn::Admission { permit, refused: true },
                        Err(_) => {
                            warn!(%peer, "too many connections, and too many being refused: closing at once");
                            continue;
                        }
                    },
                };
                debug!(%peer, "connection accepted");
                let metrics = shared.config.metrics.clone();
                if admission.refused {
                    metrics.refused_total.fetch_add(1, Ordering::Relaxed);
                } else {
                    metrics.accepted_total.fetch_add(1, Ordering::Relaxed);
                    metrics.open.fetch_add(1, Ordering::Relaxed);
                }
                let refused = admission.refused;
                let run = conn::run(socket, peer, shared.clone(), admission, stop_rx.clone());
                tasks.spawn(async move {
                    let out = run.await;
                    if !refused {
                        metrics.open.fetch_sub(1, Ordering::Relaxed);
                    }
                    out
                });
            }
        }
    }

    drop(listener);
    let _ = stop_tx.send(true);
    let open = tasks.len();
    if open > 0 {
        info!(
            connections = open,
            "shutting down: waiting for connections to close"
        );
    }
    let drained = tokio::time::timeout(shared.config.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            connections = tasks.len(),
            "connections still busy after the shutdown grace period: dropping them"
        );
        tasks.shutdown().await;
    }
    Ok(())
}
