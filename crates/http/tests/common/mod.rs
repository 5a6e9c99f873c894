//! Helpers shared by the HTTP integration tests: an engine on a fresh log
//! and the HTTP front end serving it on a free loopback port.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use aqueduct_http::{serve, HttpConfig};
use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::Engine;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// An engine on a fresh log in `dir` (no fsync: these tests are not about
/// durability).
pub fn engine(dir: &std::path::Path) -> Arc<Engine> {
    let (log, _) = Log::open(
        dir,
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap();
    Engine::open(log, &mut |_| {}).unwrap()
}

/// Serves `engine` with `config` on a free loopback port until the test
/// ends.
pub async fn listen(engine: Arc<Engine>, config: HttpConfig) -> SocketAddr {
    listen_with(engine, config, |_| {}, std::future::pending())
        .await
        .0
}

/// [`listen`] with extra `/metrics` lines and a shutdown signal.
pub async fn listen_with(
    engine: Arc<Engine>,
    config: HttpConfig,
    extra: impl Fn(&mut String) + Send + Sync + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (SocketAddr, JoinHandle<std::io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener, engine, config, Arc::new(extra), shutdown));
    (addr, server)
}
