//! Starting the built server for integration tests: on free loopback
//! ports, in a data directory of the test's, killed by its pid when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// No step of a test may take longer than this.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process, killed (by its pid, with SIGKILL) when dropped.
pub struct Running(pub Child);

impl Running {
    /// kill -9, and waits for the process to be gone.
    pub fn kill9(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The built `aqueduct` binary, without settings from the environment.
pub fn aqueduct() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aqueduct"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AQUEDUCT_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs `aqueduct subscribe` with `args` until it has applied what was
/// committed when it started (`--until-caught-up`), failing the test if it
/// fails; returns what the agent said on stderr.
pub fn subscribe_until_caught_up(args: &[String]) -> String {
    let out = aqueduct()
        .args(args)
        .arg("--until-caught-up")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "subscribe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A started server and its ports.
pub struct Server {
    pub process: Running,
    pub pg: u16,
    pub http: u16,
}

/// Starts `aqueduct serve` on `data` with `args`; returns once both
/// listeners accept connections.
pub fn serve(data: &std::path::Path, args: &[&str]) -> Server {
    serve_at(data, free_port(), free_port(), args)
}

/// Starts `aqueduct serve` on `data` with `args` at the ports `pg` and
/// `http` (a server restarted at the same address).
pub fn serve_at(data: &std::path::Path, pg: u16, http: u16, args: &[&str]) -> Server {
    let mut child = aqueduct()
        .env("RUST_LOG", "info")
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--pg-addr", &format!("127.0.0.1:{pg}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (up_tx, up) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("PostgreSQL listener serving") {
                let _ = up_tx.send(());
            }
        }
    });
    let process = Running(child);
    up.recv_timeout(STEP_TIMEOUT)
        .expect("the server starts listening");
    // The HTTP listener may come up a moment after the PostgreSQL one.
    let deadline = Instant::now() + STEP_TIMEOUT;
    while TcpStream::connect(("127.0.0.1", http)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP listener never came up");
        std::thread::yield_now();
    }
    Server { process, pg, http }
}

/// A client of the server listening on `pg` (user `test`), its
/// connection driven on the runtime.
pub async fn connect(pg: u16) -> tokio_postgres::Client {
    let mut c = tokio_postgres::Config::new();
    c.host("127.0.0.1")
        .port(pg)
        .user("test")
        .dbname("aqueduct")
        .connect_timeout(STEP_TIMEOUT);
    let (client, conn) = c.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}
