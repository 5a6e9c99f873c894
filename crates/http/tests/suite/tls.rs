//! HTTPS: a client that opens a connection and never starts its TLS
//! handshake must not hold up anyone else.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use aqueduct_http::HttpConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Well under the server's handshake timeout: a request held up behind a
/// silent client would miss it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_does_not_block_other_https_clients() {
    assert!(REQUEST_TIMEOUT < aqueduct_http::TLS_HANDSHAKE_TIMEOUT);
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
    server_tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_tls));

    let dir = tempfile::tempdir().unwrap();
    let engine = common::engine(dir.path());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = common::listen_with(
        engine,
        HttpConfig {
            tls: Some(Arc::new(server_tls)),
            ..Default::default()
        },
        |_| {},
        async {
            let _ = stopped.await;
        },
    )
    .await;

    // Connects and says nothing. Its connection is complete, so it is
    // first in the listener's queue: the server accepts it before the
    // request below.
    let silent = TcpStream::connect(addr).await.unwrap();

    let request = async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    let response = tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .expect("an HTTPS request is answered while another connection is silent");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    drop(silent);
    let _ = stop.send(());
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, server).await;
}
