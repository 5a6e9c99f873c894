//! Logins as roles created in SQL (SCRAM against the catalog's verifier),
//! what such a session may do, and `tls_required`.

use crate::common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use aqueduct_pg::PgConfig;
use common::*;
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;

fn admin_users() -> Option<HashMap<String, String>> {
    Some(HashMap::from([(
        "admin".to_string(),
        "bootstrap pw".to_string(),
    )]))
}

fn login(server: &Server, user: &str, password: &str) -> tokio_postgres::Config {
    let mut c = server.config(user);
    c.password(password);
    c
}

async fn one_value(client: &tokio_postgres::Client, sql: &str) -> String {
    let row = client.query_one(sql, &[]).await.unwrap();
    row.get::<_, String>(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_created_in_sql_log_in_with_scram_and_are_held_to_their_privileges() {
    let server = Server::start(PgConfig {
        users: admin_users(),
        ..Default::default()
    })
    .await;
    bounded(async {
        let admin = connect(login(&server, "admin", "bootstrap pw"))
            .await
            .unwrap();
        assert_eq!(one_value(&admin, "SELECT current_user").await, "admin");
        assert_eq!(one_value(&admin, "SHOW is_superuser").await, "on");
        admin
            .batch_execute(
                "CREATE TABLE t (id bigint PRIMARY KEY, v text);
                 INSERT INTO t VALUES (1, 'one');
                 CREATE USER alice WITH PASSWORD 'alice pw';
                 CREATE ROLE nologin PASSWORD 'x';",
            )
            .await
            .unwrap();

        // The role logs in with its password, over SCRAM, and nothing else does.
        let alice = connect(login(&server, "alice", "alice pw")).await.unwrap();
        assert_eq!(one_value(&alice, "SELECT current_user").await, "alice");
        assert_eq!(one_value(&alice, "SELECT session_user").await, "alice");
        assert_eq!(one_value(&alice, "SHOW is_superuser").await, "off");
        for (user, password) in [("alice", "wrong"), ("nologin", "x"), ("admin", "alice pw")] {
            let err = connect(login(&server, user, password)).await.unwrap_err();
            let db = err.as_db_error().unwrap_or_else(|| panic!("{user}: {err}"));
            assert_eq!(db.code(), &SqlState::INVALID_PASSWORD, "{user}");
        }

        // What it may do is what it was granted.
        let err = alice.simple_query("SELECT * FROM t").await.unwrap_err();
        let db = err.as_db_error().unwrap();
        assert_eq!(db.code(), &SqlState::INSUFFICIENT_PRIVILEGE);
        assert_eq!(db.message(), "permission denied for table t");
        let err = alice
            .execute("INSERT INTO t VALUES ($1, 'x')", &[&2i64])
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
        admin
            .batch_execute("GRANT SELECT ON t TO alice")
            .await
            .unwrap();
        let row = alice
            .query_one("SELECT v FROM t WHERE id = $1", &[&1i64])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "one");
        let err = alice.simple_query("CREATE ROLE mallory").await.unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));

        // A changed password takes effect at the next login; the old one fails.
        alice
            .batch_execute("ALTER ROLE alice PASSWORD 'new pw'")
            .await
            .unwrap();
        connect(login(&server, "alice", "new pw")).await.unwrap();
        let err = connect(login(&server, "alice", "alice pw"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD));
        // A dropped role no longer logs in.
        admin.batch_execute("DROP ROLE alice").await.unwrap();
        let err = connect(login(&server, "alice", "new pw"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD));
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_clients_stay_superusers() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = connect(server.config("whoever")).await.unwrap();
        assert_eq!(one_value(&client, "SELECT current_user").await, "whoever");
        assert_eq!(one_value(&client, "SHOW is_superuser").await, "on");
        client
            .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY); SELECT * FROM t")
            .await
            .unwrap();
    })
    .await;
    server.stop().await.unwrap();
}

#[test]
fn catalog_verifiers_are_the_ones_scram_expects() {
    // The catalog's verifier derivation agrees with the SCRAM library's.
    use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramSecret};
    let salt = b"0123456789abcdef";
    let ours = aqueduct_tables::ScramVerifier::derive("pässword", salt, 4096);
    let ScramSecret::Verifier {
        stored_key,
        server_key,
        ..
    } = ScramSecret::verifier_from_salted_password(
        salt.to_vec(),
        gen_salted_password("pässword", salt, 4096),
        4096,
    )
    else {
        panic!("not a verifier")
    };
    assert_eq!(ours.stored_key, stored_key);
    assert_eq!(ours.server_key, server_key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_required_refuses_plaintext_logins_with_28000() {
    let (setup, tls) = tls_pair();
    let server = Server::start(PgConfig {
        tls: Some(setup),
        tls_required: true,
        users: admin_users(),
        ..Default::default()
    })
    .await;
    bounded(async {
        let mut plain = login(&server, "admin", "bootstrap pw");
        plain.ssl_mode(SslMode::Disable);
        let err = connect(plain).await.unwrap_err();
        let db = err.as_db_error().unwrap_or_else(|| panic!("{err}"));
        assert_eq!(db.code(), &SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
        assert!(db.message().contains("sslmode=require"), "{}", db.message());
        assert_eq!(db.severity(), "FATAL");

        let mut secure = tokio_postgres::Config::new();
        secure
            .host("localhost")
            .hostaddr(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .port(server.addr.port())
            .user("admin")
            .password("bootstrap pw")
            .dbname("aqueduct")
            .connect_timeout(Duration::from_secs(10))
            .ssl_mode(SslMode::Require);
        let (client, conn) = secure.connect(tls).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client.simple_query("SELECT 1").await.unwrap();
    })
    .await;
    server.stop().await.unwrap();
}
