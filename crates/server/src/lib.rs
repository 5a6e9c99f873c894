//! The server process: settings (flags, environment, config file), start-up
//! (log recovery, replay into tables with a progress bar), the PostgreSQL and
//! HTTP listeners, background compaction, and an orderly shutdown.

mod config;
mod releaser;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::{Log, Options};
use aqueduct_sql::Engine;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use aqueduct_sql::limits::SERVER_THREAD_STACK_BYTES;
pub use config::{
    is_loopback_addr, load_user_file, parse_user_file, ConfigError, FileConfig, HttpTokens,
    ServerConfig,
};

/// Replays longer than this many records show a progress bar.
const PROGRESS_BAR_MIN_RECORDS: u64 = 200_000;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("cannot open the data directory: {0}")]
    Log(#[from] aqueduct_log::Error),
    #[error("cannot rebuild the tables from the log: {0}")]
    Replay(aqueduct_sql::SqlError),
    #[error("cannot listen on {addr} ({what}): {source}; is another server running? choose another address with {flag}")]
    Bind {
        addr: String,
        what: &'static str,
        flag: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] aqueduct_pg::TlsError),
    #[error("the Raft group: {0}")]
    Cluster(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Addresses actually bound (useful when a port 0 was asked for).
#[derive(Clone, Debug)]
pub struct Bound {
    pub pg: std::net::SocketAddr,
    pub http: std::net::SocketAddr,
}

/// The servers a follower follows, as the source of its linearizable
/// reads' commit LSN: each question starts at the next member.
struct Members {
    config: aqueduct_replicate::FollowConfig,
    next: std::sync::atomic::AtomicUsize,
}

/// A member of a Raft group, as the source of its linearizable reads'
/// commit LSN: the leader's read index.
struct GroupReads(Arc<aqueduct_replicate::group::Member>);

impl aqueduct_sql::CommitSource for GroupReads {
    fn committed_lsn_via(&self, _hops: u32, timeout: Duration) -> Result<u64, String> {
        self.0.read_index_lsn(timeout)
    }
}

/// A member of a Raft group, as where its sessions' writes go while it
/// does not lead (`aqueduct_sql::forward`).
struct ToLeader {
    member: Arc<aqueduct_replicate::group::Member>,
    /// The server's runtime, for the group's calls from sessions (which
    /// run on blocking threads).
    runtime: tokio::runtime::Handle,
}

impl ToLeader {
    fn member_state(&self, id: u64, addr: &str, voter: bool) -> aqueduct_sql::forward::MemberState {
        use aqueduct_replicate::group::MEMBER_STATUS_TIMEOUT;
        let status = if id == self.member.id() {
            Ok(self.member.status())
        } else {
            self.call(addr, "GET", "/v1/cluster", None, MEMBER_STATUS_TIMEOUT)
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        };
        let base = aqueduct_sql::forward::MemberState {
            id,
            addr: addr.to_string(),
            voter,
            ..Default::default()
        };
        match status {
            Ok(s) => {
                let n = |k: &str| s[k].as_u64();
                aqueduct_sql::forward::MemberState {
                    role: s["role"].as_str().unwrap_or("unknown").to_string(),
                    term: n("term"),
                    commit_lsn: n("commit_lsn"),
                    applied_lsn: n("applied_lsn"),
                    lag: n("lag"),
                    ..base
                }
            }
            Err(why) => aqueduct_sql::forward::MemberState {
                role: "unreachable".into(),
                error: Some(why),
                ..base
            },
        }
    }

    /// An HTTP call to another member, with the group's token: the body
    /// of a 200 answer, or why there was none.
    fn call(
        &self,
        to: &str,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        use aqueduct_sql::forward::MAX_FORWARD_BYTES;
        let auth = self.member.token().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        let mut response =
            aqueduct_mirror::http::request_with_headers(to, method, path, &headers, body, timeout)
                .map_err(|e| e.to_string())?;
        let bytes = response
            .body
            .read_to_end(MAX_FORWARD_BYTES)
            .map_err(|e| e.to_string())?;
        if response.status != 200 {
            return Err(format!(
                "it answered {}: {}",
                response.status,
                String::from_utf8_lossy(&bytes[..bytes.len().min(500)])
            ));
        }
        Ok(bytes)
    }
}

impl aqueduct_sql::forward::GroupLink for ToLeader {
    fn leader(&self) -> Option<Result<String, aqueduct_sql::SqlError>> {
        if self.member.is_leader() {
            return None;
        }
        Some(self.member.leader().map(|(_, addr)| addr).ok_or_else(|| {
            aqueduct_sql::SqlError::new(
                "57P03",
                format!(
                    "member {} does not lead the group, and no leader is known yet (an \
                     election is under way)",
                    self.member.id()
                ),
            )
            .with_hint("retry in a moment")
        }))
    }

    fn send(
        &self,
        to: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, aqueduct_sql::SqlError> {
        self.call(to, "POST", "/v1/cluster/forward", Some(body), timeout)
            .map_err(|why| {
                aqueduct_sql::SqlError::new(
                    "08006",
                    format!(
                        "member {} could not reach the leader at {to}: {why}",
                        self.member.id()
                    ),
                )
                .with_hint("the write's outcome is not known; check before retrying it")
            })
    }

    fn change(&self, change: &aqueduct_sql::forward::MembershipChange) -> Result<(), String> {
        use aqueduct_sql::forward::MembershipChange as C;
        let m = &self.member;
        self.runtime.block_on(async {
            match change {
                C::Add { id, addr, voter } => {
                    m.add_learner(*id, addr.clone()).await?;
                    if *voter {
                        m.add_voter(*id).await?;
                    }
                    Ok(())
                }
                C::Remove { id } => m.remove(*id).await,
                C::Transfer { id } => {
                    m.transfer_to(*id, aqueduct_replicate::group::TRANSFER_TIMEOUT)
                        .await
                }
            }
        })
    }

    fn members(&self) -> Vec<aqueduct_sql::forward::MemberState> {
        let status = self.member.status();
        let listed: Vec<(u64, String, bool)> = status["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some((
                    m["id"].as_u64()?,
                    m["addr"].as_str()?.to_string(),
                    m["voter"].as_bool().unwrap_or(false),
                ))
            })
            .collect();
        // Each asked at once, so the statement waits for the slowest only.
        std::thread::scope(|scope| {
            let asks: Vec<_> = listed
                .iter()
                .map(|(id, addr, voter)| scope.spawn(move || self.member_state(*id, addr, *voter)))
                .collect();
            asks.into_iter()
                .map(|a| a.join().expect("a member's state"))
                .collect()
        })
    }
}

/// Restarts this process in place (same id, same arguments): a member
/// whose tables show writes its group did not commit rebuilds them from
/// the log, as after a crash.
fn restart_in_place(why: &str) {
    use std::os::unix::process::CommandExt;
    tracing::error!("restarting to rebuild the tables from the log: {why}");
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("cannot find this program to restart it ({e}); exiting");
            std::process::exit(75);
        }
    };
    let e = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .exec();
    tracing::error!("cannot restart ({e}); exiting");
    std::process::exit(75);
}

impl aqueduct_sql::CommitSource for Members {
    fn committed_lsn_via(&self, hops: u32, timeout: Duration) -> Result<u64, String> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        aqueduct_replicate::read_index::committed_lsn(&self.config, start, hops, timeout)
    }
}

/// Runs the server until `shutdown` resolves (or Ctrl-C / SIGTERM).
/// `on_ready` is called once both listeners are bound.
pub async fn run(
    config: ServerConfig,
    on_ready: impl FnOnce(&Bound) + Send,
) -> Result<(), ServerError> {
    // Before anything is opened or bound: refuse to serve unauthenticated
    // on the network, or to require TLS without a certificate.
    config.check_security()?;
    tracing::info!(data_dir = %config.data_dir.display(), fsync = ?config.fsync, "starting Aqueduct");
    let started = Instant::now();
    let data_dir = config.data_dir.clone();
    let log_options = Options {
        sync: config.fsync,
        segment_bytes: config.segment_bytes,
        ..Default::default()
    };
    let (log, report) = tokio::task::spawn_blocking(move || Log::open(&data_dir, log_options))
        .await
        .expect("log open task")?;
    // A member of a Raft group rebuilds its tables only up to what its
    // group committed; the rest is applied when the group commits it.
    let prepared = match &config.cluster {
        None => None,
        Some(_) => {
            let dir = config.data_dir.join("raft");
            let log = log.clone();
            Some(
                tokio::task::spawn_blocking(move || aqueduct_replicate::group::prepare(&dir, &log))
                    .await
                    .expect("Raft state task")
                    .map_err(ServerError::Cluster)?,
            )
        }
    };
    let replay_until = prepared.as_ref().map(|p| p.replay_until);
    tracing::info!(
        segments = report.segments,
        last_lsn = report.last_lsn,
        indexes_rebuilt = report.indexes_rebuilt,
        "log recovered in {:.1?}",
        report.elapsed
    );
    let view_options = aqueduct_sql::views::ViewOptions {
        partial: config.partial_state,
        memory_limit: config.memory_limit,
    };
    let feed_options = config.feed.clone();
    let engine = tokio::task::spawn_blocking(move || {
        replay(
            log,
            replay_until,
            report.records,
            view_options,
            feed_options,
        )
    })
    .await
    .expect("replay task")?;
    tracing::info!(
        tables = engine.replay.tables,
        rows = engine.replay.rows,
        records = engine.replay.records,
        lsn = engine.replay.last_lsn,
        "recovered to LSN {} in {:.1?}",
        engine.replay.last_lsn,
        started.elapsed()
    );
    engine
        .database()
        .log()
        .start_background_compaction(config.compaction_interval);
    // Durable change-feed consumers past their caps are dropped even when
    // they never come back to read.
    let feed = engine.feed().clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(FEED_CAP_CHECK_INTERVAL);
        loop {
            every.tick().await;
            let feed = feed.clone();
            let _ = tokio::task::spawn_blocking(move || feed.enforce_caps_now()).await;
        }
    });
    let member = match (prepared, &config.cluster) {
        (Some(prepared), Some(group)) => {
            let member =
                aqueduct_replicate::group::start(prepared, engine.shared_database(), group.clone())
                    .await
                    .map_err(ServerError::Cluster)?;
            member
                .shared
                .set_on_diverged(Box::new(|why| restart_in_place(&why)));
            engine.set_commit_source(Arc::new(GroupReads(member.clone())));
            engine.set_group_link(Arc::new(ToLeader {
                member: member.clone(),
                runtime: tokio::runtime::Handle::current(),
            }));
            engine.feed().set_replicator(member.clone());
            tracing::info!(
                "member {} of a Raft group of {}",
                group.node_id,
                group
                    .members
                    .iter()
                    .map(|(id, addr)| format!("{id}={addr}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Some(member)
        }
        _ => None,
    };
    engine.set_default_consistency(config.consistency);
    if let Some(timeout) = config.statement_timeout {
        engine.set_default_statement_timeout(timeout);
    }
    engine.set_bootstrap_users(config.users.keys().cloned());

    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(c), Some(k)) => Some(aqueduct_pg::TlsSetup::from_pem_files(c, k)?),
        _ => None,
    };
    let pg_listener =
        TcpListener::bind(&config.pg_addr)
            .await
            .map_err(|source| ServerError::Bind {
                addr: config.pg_addr.clone(),
                what: "PostgreSQL protocol",
                flag: "--pg-addr",
                source,
            })?;
    let http_listener = TcpListener::bind(&config.http_addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.http_addr.clone(),
            what: "HTTP",
            flag: "--http-addr",
            source,
        })?;
    let bound = Bound {
        pg: pg_listener.local_addr()?,
        http: http_listener.local_addr()?,
    };
    tracing::info!(
        "PostgreSQL protocol on {}{}; HTTP on {}{}",
        bound.pg,
        if tls.is_some() {
            " (TLS available)"
        } else {
            ""
        },
        bound.http,
        if tls.is_some() { " (HTTPS)" } else { "" },
    );
    if config.users.is_empty() {
        tracing::info!(
            "no users configured: PostgreSQL clients are trusted (keep the listener on loopback)"
        );
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let pg_metrics = Arc::new(aqueduct_pg::PgMetrics::default());
    let pg_config = aqueduct_pg::PgConfig {
        max_connections: config.max_connections,
        users: if config.users.is_empty() {
            None
        } else {
            Some(config.users.clone())
        },
        tls: tls.clone(),
        tls_required: config.tls_required,
        metrics: pg_metrics.clone(),
        ..aqueduct_pg::PgConfig::default()
    };
    let pg_task = tokio::spawn(aqueduct_pg::serve(
        pg_listener,
        engine.clone(),
        pg_config,
        stopped(stop_rx.clone()),
    ));
    let http_tls = tls.as_ref().map(|t| {
        let mut c = (*t.server_config).clone();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(c)
    });
    let follow_status = Arc::new(aqueduct_replicate::FollowStatus::default());
    let http_config = aqueduct_http::HttpConfig {
        tokens: config.http_tokens.clone(),
        token_roles: config.http_token_roles.clone(),
        users_configured: !config.users.is_empty(),
        tls: http_tls,
        replication: (!config.follow.is_empty()).then(|| {
            let status = follow_status.clone();
            let members = config.follow.clone();
            let status: aqueduct_http::ReplicationStatus =
                Arc::new(move || status.to_json(&members));
            status
        }),
        cluster: member.clone(),
    };
    let follow_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let follower = if config.follow.is_empty() {
        None
    } else {
        tracing::info!(
            "following {} read-only from LSN {}",
            config.follow.join(", "),
            engine.database().log().next_lsn()
        );
        let follow = aqueduct_replicate::FollowConfig {
            members: config.follow.clone(),
            token: config.follow_token.clone(),
            seed: std::process::id() as u64 ^ aqueduct_log::now_micros() as u64,
        };
        engine.set_commit_source(Arc::new(Members {
            config: follow.clone(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }));
        Some(aqueduct_replicate::spawn(
            engine.shared_database(),
            follow,
            follow_status.clone(),
            follow_stop.clone(),
        )?)
    };
    // Chains a crash or stop left in flight complete now, on a server
    // that takes its own writes (docs/chains.md).
    if member.is_none() && follower.is_none() {
        *engine.chains.datacenters.lock() = config.chain_datacenters.clone();
        *engine.chains.placement.lock() = config.chain_placement.clone();
        if let Err(e) = engine.resume_chains() {
            tracing::error!("the chains in flight could not be resumed: {e}");
        }
    }
    let following = follower.is_some().then(|| follow_status.clone());
    let in_group = member.clone();
    let extra: aqueduct_http::ExtraMetrics = Arc::new(move |out: &mut String| {
        if let Some(status) = &following {
            status.metrics(out);
        }
        if let Some(m) = &in_group {
            m.metrics(out);
        }
        let m = &pg_metrics;
        for (name, kind, help, v) in [
            (
                "aqueduct_pg_connections",
                "gauge",
                "Open PostgreSQL protocol connections.",
                &m.open,
            ),
            (
                "aqueduct_pg_connections_accepted_total",
                "counter",
                "PostgreSQL protocol connections admitted.",
                &m.accepted_total,
            ),
            (
                "aqueduct_pg_connections_refused_total",
                "counter",
                "PostgreSQL protocol connections refused at the connection limit.",
                &m.refused_total,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n",
                v.load(Ordering::Relaxed)
            ));
        }
    });
    let http_task = tokio::spawn(aqueduct_http::serve(
        http_listener,
        engine.clone(),
        http_config,
        extra,
        stopped(stop_rx.clone()),
    ));
    let releaser = config.release_interval.map(|interval| {
        let schedule =
            aqueduct_sql::releases::Schedule::new(interval).expect("checked by the config");
        tokio::spawn(releaser::run(
            engine.clone(),
            schedule,
            stopped(stop_rx.clone()),
        ))
    });
    on_ready(&bound);

    shutdown_signal().await;
    tracing::info!("shutting down");
    // Running statements stop at their next check (57P01), so none holds
    // the shutdown up; a commit already appending completes.
    engine.interrupt_all();
    let _ = stop_tx.send(true);
    // The follower stops at its next step; it is not waited for, as it may
    // be in a member's long poll, and whatever it appended is crash-safe.
    follow_stop.store(true, Ordering::Relaxed);
    drop(follower);
    let _ = pg_task.await;
    let _ = http_task.await;
    if let Some(m) = &member {
        let _ = m.raft.shutdown().await;
    }
    if let Some(r) = releaser {
        let _ = r.await;
    }
    let log = engine.database().log().clone();
    tokio::task::spawn_blocking(move || log.sync())
        .await
        .expect("final sync task")?;
    tracing::info!("stopped");
    // The process ends next and gives its memory back at once; freeing the
    // tables row by row first would take about a microsecond a row
    // (seconds for millions of rows) and save nothing.
    std::mem::forget(engine);
    Ok(())
}

/// Replays the log into tables, with a progress bar when it is long.
fn replay(
    log: Log,
    until: Option<aqueduct_log::Lsn>,
    records: u64,
    view_options: aqueduct_sql::views::ViewOptions,
    feed_options: aqueduct_feed::FeedOptions,
) -> Result<Arc<Engine>, ServerError> {
    let last = log.committed_lsn();
    let bar = if records >= PROGRESS_BAR_MIN_RECORDS {
        let bar = indicatif::ProgressBar::new(last);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "replaying the log {bar:40} LSN {pos}/{len} ({per_sec}, {eta} left)",
            )
            .expect("progress template"),
        );
        Some(bar)
    } else {
        None
    };
    let engine = Engine::open_replaying_until(
        log,
        until,
        &mut |lsn| {
            if let Some(b) = &bar {
                b.set_position(lsn);
            }
        },
        view_options,
        feed_options,
    )
    .map_err(ServerError::Replay)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(engine)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// How often durable change-feed consumers are checked against their caps.
pub const FEED_CAP_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// How long a background compaction waits between passes unless configured.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(30);
