//! A server on 127.0.0.1 over a fresh log in a temporary directory, and a
//! raw protocol client for what drivers do not expose.

#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_pg::{serve, PgConfig};
use aqueduct_sql::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

/// No test waits longer than this for anything.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a raw client waits for one message.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Server {
    pub addr: SocketAddr,
    pub engine: Arc<Engine>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Server {
    pub async fn start(config: PgConfig) -> Server {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = Log::open(
            dir.path(),
            Options {
                sync: SyncPolicy::Never,
                ..Default::default()
            },
        )
        .unwrap();
        let engine = Engine::open(log, &mut |_| {}).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, engine.clone(), config, async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            engine,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    pub fn config(&self, user: &str) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host("127.0.0.1")
            .port(self.addr.port())
            .user(user)
            .dbname("aqueduct")
            .connect_timeout(Duration::from_secs(10));
        c
    }

    pub async fn connect(&self) -> Client {
        connect(self.config("test")).await.unwrap()
    }

    /// Stops the server and waits for `serve` to return.
    pub async fn stop(mut self) -> std::io::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap()
    }

    pub fn is_serving(&self) -> bool {
        !self.task.as_ref().unwrap().is_finished()
    }
}

pub async fn connect(config: tokio_postgres::Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Runs a test body with the overall time bound.
pub async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .expect("test took too long")
}

/// A frontend message: type byte, length, body.
pub fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub fn startup_message(user: &str) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", "aqueduct")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

pub fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// One backend message.
#[derive(Debug, Clone)]
pub struct Backend {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl Backend {
    /// The SQLSTATE of an ErrorResponse.
    pub fn sqlstate(&self) -> Option<String> {
        self.field(b'C')
    }

    pub fn field(&self, code: u8) -> Option<String> {
        if self.tag != b'E' {
            return None;
        }
        let mut rest = &self.body[..];
        while let Some((&f, tail)) = rest.split_first() {
            if f == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            if f == code {
                return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
            rest = &tail[end + 1..];
        }
        None
    }

    /// The fields of a DataRow (None for NULL).
    pub fn columns(&self) -> Vec<Option<Vec<u8>>> {
        assert_eq!(self.tag, b'D');
        let n = u16::from_be_bytes([self.body[0], self.body[1]]) as usize;
        let mut at = 2;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let len = i32::from_be_bytes(self.body[at..at + 4].try_into().unwrap());
            at += 4;
            if len < 0 {
                out.push(None);
            } else {
                out.push(Some(self.body[at..at + len as usize].to_vec()));
                at += len as usize;
            }
        }
        out
    }

    /// Name and value of a ParameterStatus.
    pub fn parameter(&self) -> Option<(String, String)> {
        if self.tag != b'S' {
            return None;
        }
        let parts: Vec<&[u8]> = self.body.split(|&b| b == 0).collect();
        Some((
            String::from_utf8_lossy(parts[0]).into_owned(),
            String::from_utf8_lossy(parts[1]).into_owned(),
        ))
    }
}

/// A client speaking the protocol byte by byte.
pub struct Raw {
    pub stream: TcpStream,
}

impl Raw {
    pub async fn open(addr: SocketAddr) -> Raw {
        Raw {
            stream: TcpStream::connect(addr).await.unwrap(),
        }
    }

    /// Connects and authenticates (trust), up to the first ReadyForQuery.
    pub async fn connect(addr: SocketAddr) -> Raw {
        let mut raw = Raw::open(addr).await;
        raw.send(&startup_message("raw")).await;
        let msgs = raw.until_ready().await;
        assert!(
            msgs.iter().any(|m| m.tag == b'R'),
            "no authentication reply: {msgs:?}"
        );
        raw
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    pub async fn read(&mut self) -> Option<Backend> {
        let mut head = [0u8; 5];
        match tokio::time::timeout(READ_TIMEOUT, self.stream.read_exact(&mut head)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return None,
            Err(_) => panic!("no message from the server in {READ_TIMEOUT:?}"),
        }
        let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0; len - 4];
        tokio::time::timeout(READ_TIMEOUT, self.stream.read_exact(&mut body))
            .await
            .expect("message body in time")
            .ok()?;
        Some(Backend { tag: head[0], body })
    }

    /// Messages up to and including ReadyForQuery.
    pub async fn until_ready(&mut self) -> Vec<Backend> {
        let mut out = Vec::new();
        loop {
            let m = self
                .read()
                .await
                .expect("connection closed before ReadyForQuery");
            let done = m.tag == b'Z';
            out.push(m);
            if done {
                return out;
            }
        }
    }

    pub async fn query(&mut self, sql: &str) -> Vec<Backend> {
        self.send(&msg(b'Q', &cstr(sql))).await;
        self.until_ready().await
    }

    /// Reads until the server closes the connection; returns what it sent.
    pub async fn until_closed(&mut self, within: Duration) -> Result<Vec<u8>, &'static str> {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await {
                Err(_) => return Err("server kept the connection open"),
                Ok(Ok(0)) | Ok(Err(_)) => return Ok(all),
                Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            }
        }
    }
}

/// The ReadyForQuery status byte in a reply.
pub fn ready_status(msgs: &[Backend]) -> u8 {
    let z = msgs.last().expect("a reply");
    assert_eq!(z.tag, b'Z');
    z.body[0]
}

pub fn tags(msgs: &[Backend]) -> String {
    msgs.iter().map(|m| m.tag as char).collect()
}

/// A self-signed certificate for `localhost`, and a client that trusts it.
pub fn tls_pair() -> (
    aqueduct_pg::TlsSetup,
    tokio_postgres_rustls::MakeRustlsConnect,
) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let setup = aqueduct_pg::TlsSetup::from_pem(
        ck.cert.pem().as_bytes(),
        ck.signing_key.serialize_pem().as_bytes(),
    )
    .unwrap();
    let mut roots = aqueduct_pg::rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let client = aqueduct_pg::rustls::ClientConfig::builder_with_provider(Arc::new(
        aqueduct_pg::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (setup, tokio_postgres_rustls::MakeRustlsConnect::new(client))
}
