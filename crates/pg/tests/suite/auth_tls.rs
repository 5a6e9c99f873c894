//! Authentication (trust, SCRAM-SHA-256 with and without channel binding),
//! TLS, the connection limit and the startup timeout.

use crate::common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use aqueduct_pg::{PgConfig, TlsSetup};
use common::*;
use tokio_postgres::config::{ChannelBinding, SslMode};
use tokio_postgres::error::SqlState;

fn users() -> Option<HashMap<String, String>> {
    Some(HashMap::from([
        ("alice".to_string(), "s3cret pässword".to_string()),
        ("bob".to_string(), "hunter2".to_string()),
    ]))
}

fn tls_config(server: &Server, user: &str) -> tokio_postgres::Config {
    let mut c = tokio_postgres::Config::new();
    // The certificate names localhost; connect to 127.0.0.1 all the same.
    c.host("localhost")
        .hostaddr(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .port(server.addr.port())
        .user(user)
        .dbname("aqueduct")
        .connect_timeout(Duration::from_secs(10))
        .ssl_mode(SslMode::Require);
    c
}

async fn connect_tls(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = config.connect(tls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_accepts_the_right_password_only() {
    let server = Server::start(PgConfig {
        users: users(),
        ..Default::default()
    })
    .await;
    bounded(async {
        let mut ok = server.config("alice");
        ok.password("s3cret pässword");
        let client = connect(ok).await.unwrap();
        client.simple_query("SELECT 1").await.unwrap();

        for (user, password) in [
            ("alice", "wrong"),
            ("bob", "s3cret pässword"),
            ("mallory", "x"),
        ] {
            let mut bad = server.config(user);
            bad.password(password);
            let err = connect(bad).await.unwrap_err();
            let db = err.as_db_error().unwrap_or_else(|| panic!("{user}: {err}"));
            assert_eq!(db.code(), &SqlState::INVALID_PASSWORD, "{user}");
            assert_eq!(
                db.message(),
                format!("password authentication failed for user \"{user}\"")
            );
            assert_eq!(db.severity(), "FATAL");
        }
        // No password at all: the driver cannot answer SCRAM.
        assert!(connect(server.config("bob")).await.is_err());
        // The server is still fine.
        client.simple_query("SELECT 1").await.unwrap();
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_and_without_scram() {
    let (setup, tls) = tls_pair();
    let server = Server::start(PgConfig {
        tls: Some(setup.clone()),
        ..Default::default()
    })
    .await;
    bounded(async {
        let client = connect_tls(tls_config(&server, "t"), tls.clone())
            .await
            .unwrap();
        let rows = client.simple_query("SELECT 40 + 2").await.unwrap();
        assert!(rows.len() >= 2);
        // Plain connections stay possible when TLS is offered.
        let plain = connect(server.config("t")).await.unwrap();
        plain.simple_query("SELECT 1").await.unwrap();
    })
    .await;
    server.stop().await.unwrap();

    // SCRAM over TLS binds to the channel (SCRAM-SHA-256-PLUS).
    let server = Server::start(PgConfig {
        tls: Some(setup),
        users: users(),
        ..Default::default()
    })
    .await;
    bounded(async {
        let mut c = tls_config(&server, "bob");
        c.password("hunter2")
            .channel_binding(ChannelBinding::Require);
        let client = connect_tls(c, tls.clone()).await.unwrap();
        client.simple_query("SELECT 1").await.unwrap();
        let mut bad = tls_config(&server, "bob");
        bad.password("hunter3")
            .channel_binding(ChannelBinding::Require);
        let err = connect_tls(bad, tls.clone()).await.unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD), "{err}");
        // Without TLS, SCRAM goes on unbound.
        let mut plain = server.config("bob");
        plain.password("hunter2");
        connect(plain)
            .await
            .unwrap()
            .simple_query("SELECT 1")
            .await
            .unwrap();
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_load_and_bad_ones_are_explained() {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("server.crt");
    let key = dir.path().join("server.key");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    TlsSetup::from_pem_files(&cert, &key).unwrap();
    let err = TlsSetup::from_pem_files(&key, &key).unwrap_err();
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    let err = TlsSetup::from_pem_files(&cert, &cert).unwrap_err();
    assert!(err.to_string().contains("no PEM private key"), "{err}");
    let err = TlsSetup::from_pem_files(&dir.path().join("missing"), &key).unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_refuses_with_53300() {
    let server = Server::start(PgConfig {
        max_connections: 2,
        ..Default::default()
    })
    .await;
    bounded(async {
        let a = server.connect().await;
        let b = server.connect().await;
        let err = connect(server.config("c")).await.unwrap_err();
        let db = err.as_db_error().unwrap_or_else(|| panic!("{err}"));
        assert_eq!(db.code(), &SqlState::TOO_MANY_CONNECTIONS);
        assert_eq!(db.message(), "sorry, too many clients already");
        a.simple_query("SELECT 1").await.unwrap();
        drop(a);
        // The slot frees once the server has seen the client go.
        let mut attempts = 0;
        let c = loop {
            match connect(server.config("c")).await {
                Ok(c) => break c,
                Err(e) if e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS) && attempts < 100 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        c.simple_query("SELECT 1").await.unwrap();
        b.simple_query("SELECT 1").await.unwrap();
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_are_dropped_after_the_startup_timeout() {
    let server = Server::start(PgConfig {
        startup_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    bounded(async {
        let mut silent = Raw::open(server.addr).await;
        let sent = silent.until_closed(Duration::from_secs(10)).await.unwrap();
        assert!(sent.is_empty() || sent[0] == b'E');
        // Half a startup message is no better.
        let mut slow = Raw::open(server.addr).await;
        slow.send(&startup_message("slow")[..6]).await;
        slow.until_closed(Duration::from_secs(10)).await.unwrap();
        // Authenticated connections may idle as long as they like.
        let client = server.connect().await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        client.simple_query("SELECT 1").await.unwrap();
    })
    .await;
    server.stop().await.unwrap();
}
