//! The real server: `--statement-timeout` gives sessions their default
//! `statement_timeout`, and SIGTERM stops it in bounded time even while a
//! statement runs for hours, with acknowledged writes kept.

use crate::common;
use crate::common::free_port;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{connect, STEP_TIMEOUT};

/// Four copies of a 300-row table joined on one value: 8.1e9 rows, hours.
const RUNAWAY: &str =
    "SELECT count(*) FROM j a JOIN j b ON a.k = b.k JOIN j c ON b.k = c.k JOIN j d ON c.k = d.k";

/// A server process, killed when dropped if it is still running.
struct Running {
    child: Option<Child>,
    pg: u16,
    http: u16,
}

impl Running {
    /// Waits at most `timeout` for the process to exit; `None` if it
    /// did not (it is then killed).
    fn exit_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = child.id();
        let (done, exited) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(child.wait().unwrap());
        });
        match exited.recv_timeout(timeout) {
            Ok(status) => Some(status),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                let _ = exited.recv();
                None
            }
        }
    }

    /// Statements the server runs now, from its `/metrics`.
    async fn statements_running(&self) -> u64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.http))
            .await
            .unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out.lines()
            .find_map(|l| l.strip_prefix("aqueduct_statements_running "))
            .and_then(|n| n.trim().parse().ok())
            .expect("aqueduct_statements_running in /metrics")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `aqueduct serve` on `data` with `extra` flags (no AQUEDUCT_*
/// variables from outside) and waits until it listens.
fn start(data: &std::path::Path, extra: &[&str]) -> Running {
    let (pg, http) = (free_port(), free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_aqueduct"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AQUEDUCT_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .env("RUST_LOG", "info")
        .args(["serve", "--fsync", "always", "--data-dir"])
        .arg(data)
        .args(["--pg-addr", &format!("127.0.0.1:{pg}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let running = Running {
        child: Some(child),
        pg,
        http,
    };
    let (up_tx, up) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("PostgreSQL listener serving") {
                let _ = up_tx.send(());
            }
        }
    });
    up.recv_timeout(STEP_TIMEOUT)
        .expect("the server starts listening");
    running
}

async fn join_table(client: &tokio_postgres::Client) {
    let values: Vec<String> = (0..300).map(|i| format!("({i}, 1)")).collect();
    client
        .batch_execute(&format!(
            "CREATE TABLE j (id int PRIMARY KEY, k int); INSERT INTO j VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_statement_timeout_flag_times_statements_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"), &["--statement-timeout", "500ms"]);
    runtime().block_on(async {
        tokio::time::timeout(STEP_TIMEOUT, async {
            let client = connect(server.pg).await;
            let row = client
                .query_one("SHOW statement_timeout", &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), "500");
            join_table(&client).await;
            let e = client.simple_query(RUNAWAY).await.unwrap_err();
            let e = e.as_db_error().expect("an error from the server");
            assert_eq!(e.code().code(), "57014", "{e}");
            assert!(e.message().contains("statement timeout"), "{e}");
            // A session may change its own.
            client
                .batch_execute("SET statement_timeout = 0")
                .await
                .unwrap();
            let row = client
                .query_one("SHOW statement_timeout", &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), "0");
        })
        .await
        .expect("in time");
    });
}

#[test]
fn sigterm_stops_the_server_while_a_statement_runs_and_keeps_acknowledged_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = start(&data, &[]);
    let rt = runtime();
    rt.block_on(async {
        tokio::time::timeout(STEP_TIMEOUT, async {
            let client = connect(server.pg).await;
            join_table(&client).await;
            client
                .batch_execute(
                    "CREATE TABLE kept (id int PRIMARY KEY); INSERT INTO kept VALUES (1), (2), (3)",
                )
                .await
                .unwrap();
            // Neither the memory limit nor a timeout stops it by itself.
            let runner = connect(server.pg).await;
            runner
                .batch_execute("SET aqueduct.statement_memory_limit = '4GB'")
                .await
                .unwrap();
            let running = tokio::spawn(async move { runner.simple_query(RUNAWAY).await });
            while server.statements_running().await == 0 {
                tokio::task::yield_now().await;
            }
            assert!(!running.is_finished(), "the statement still runs");
        })
        .await
        .expect("in time");
    });
    let pid = server.child.as_ref().unwrap().id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = server
        .exit_within(Duration::from_secs(10))
        .expect("the server exits within 10 s of SIGTERM");
    assert!(status.success(), "{status:?}");
    drop(server);
    // What was acknowledged is there after a restart.
    let server = start(&data, &[]);
    rt.block_on(async {
        tokio::time::timeout(STEP_TIMEOUT, async {
            let client = connect(server.pg).await;
            let rows = client
                .query("SELECT id FROM kept ORDER BY id", &[])
                .await
                .unwrap();
            let ids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
            assert_eq!(ids, vec![1, 2, 3]);
            let row = client
                .query_one("SELECT count(*) FROM j", &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), 300);
        })
        .await
        .expect("in time");
    });
}
