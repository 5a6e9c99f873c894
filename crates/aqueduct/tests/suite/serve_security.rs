//! `aqueduct serve` refuses to start open to the network or with TLS
//! required but no certificate, and says how to fix it; `--help` tells
//! how to keep passwords off the command line.

use crate::common::free_port;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// No refusal may take longer than this.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `aqueduct` with `args` (no AQUEDUCT_* variables from outside),
/// killing it if it has not exited within [`REFUSAL_TIMEOUT`].
fn aqueduct(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aqueduct"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AQUEDUCT_") {
            command.env_remove(name);
        }
    }
    let child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output().unwrap());
    });
    match exited.recv_timeout(REFUSAL_TIMEOUT) {
        Ok(out) => out,
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let out = exited.recv().unwrap();
            panic!(
                "aqueduct {args:?} did not exit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn refused(args: &[&str]) -> String {
    let out = aqueduct(args);
    assert!(!out.status.success(), "aqueduct {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn no_authentication_on_the_network_is_refused_before_anything_opens() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    // 192.0.2.1 (TEST-NET-1) is not loopback; the refusal comes before any
    // attempt to listen on it.
    let err = refused(&[
        "serve",
        "--data-dir",
        data,
        "--pg-addr",
        "192.0.2.1:5433",
        "--http-addr",
        "127.0.0.1:0",
    ]);
    assert!(err.contains("without authentication"), "{err}");
    assert!(err.contains("--user-file"), "{err}");
    assert!(err.contains("--allow-trust-on-network"), "{err}");
    let err = refused(&[
        "serve",
        "--data-dir",
        data,
        "--pg-addr",
        "127.0.0.1:0",
        "--http-addr",
        "192.0.2.1:8433",
    ]);
    assert!(err.contains("refusing to serve HTTP"), "{err}");
    assert!(
        !std::path::Path::new(data).exists(),
        "nothing is created before the refusal"
    );
}

#[test]
fn tls_required_without_a_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let err = refused(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--pg-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--tls-required",
    ]);
    assert!(err.contains("--tls-required needs TLS"), "{err}");
}

#[test]
fn help_says_how_to_keep_passwords_off_the_command_line() {
    let out = aqueduct(&["serve", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--user-file",
        "name:password",
        "--tls-required",
        "--allow-trust-on-network",
        "[http_tokens]",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

/// A server process that is killed when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn users_from_a_file_log_in_and_so_do_roles_they_create() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "# bootstrap users\nadmin = \"file pw\"\n").unwrap();
    let data = dir.path().join("data");
    let (pg, http) = (free_port(), free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_aqueduct"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AQUEDUCT_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .env("RUST_LOG", "info")
        .args(["serve", "--fsync", "never", "--user-file"])
        .arg(&users)
        .arg("--data-dir")
        .arg(&data)
        .args(["--pg-addr", &format!("127.0.0.1:{pg}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Running(child);
    let (up_tx, up) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("PostgreSQL listener serving") {
                let _ = up_tx.send(());
            }
        }
    });
    up.recv_timeout(REFUSAL_TIMEOUT)
        .expect("the server starts listening");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::timeout(REFUSAL_TIMEOUT, async {
            let connect = |user: &str, password: &str| {
                let mut c = tokio_postgres::Config::new();
                c.host("127.0.0.1")
                    .port(pg)
                    .user(user)
                    .password(password)
                    .dbname("aqueduct")
                    .connect_timeout(Duration::from_secs(10));
                async move {
                    let (client, conn) = c.connect(tokio_postgres::NoTls).await?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    Ok::<_, tokio_postgres::Error>(client)
                }
            };
            let admin = connect("admin", "file pw").await.unwrap();
            admin
                .batch_execute("CREATE USER bob WITH PASSWORD 'bob pw'")
                .await
                .unwrap();
            let bob = connect("bob", "bob pw").await.unwrap();
            let row = bob.query_one("SELECT current_user", &[]).await.unwrap();
            assert_eq!(row.get::<_, String>(0), "bob");
            assert!(connect("admin", "wrong").await.is_err());

            // Users but no HTTP token: the SQL endpoint is closed.
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", http))
                .await
                .unwrap();
            let body = r#"{"sql": "SELECT 1"}"#;
            s.write_all(
                format!(
                    "POST /v1/sql HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 401"), "{out}");
        })
        .await
        .expect("in time");
    });
    drop(server);
    let mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    for entry in std::fs::read_dir(&data).unwrap() {
        let p = entry.unwrap().path();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
    }
}
