//! Starting the built server for integration tests: on free loopback
//! ports, in a data directory of the test's, killed by its pid when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use aqueduct_log::wire;
use aqueduct_mirror::http;
use serde_json::Value as Json;

/// No step of a test may take longer than this.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Ports handed out below Linux's ephemeral range (32768 and up): a port
/// the kernel chose for `bind(0)` and that was released could be taken as
/// the source port of any outgoing connection of a test running alongside
/// before the server binds it ("Address already in use"). Each test
/// process walks its own stretch of the range, chosen by its pid, and
/// hands out each port once.
const PORTS_FROM: u16 = 10_000;
const PORTS_TO: u16 = 32_000;

pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = u32::from(PORTS_TO - PORTS_FROM);
    let start = (u64::from(std::process::id()) * 997 % u64::from(span)) as u32;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < span, "every test port was handed out");
        let port = PORTS_FROM + ((start + n) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Sends `signal` (`-STOP` or `-CONT`, as `kill` spells it) to the child
/// process `pid`, and for those two waits until it has taken it: the
/// kernel stops a process's threads one by one, and on a loaded machine a
/// thread may still run for a while after `kill` returned. `waitpid`
/// reports the child stopped once all its threads are (and resumed),
/// without reaping it.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
    let flags = match signal {
        "-STOP" => libc::WUNTRACED,
        "-CONT" => libc::WCONTINUED,
        _ => return,
    };
    let mut state = 0;
    // SAFETY: waitpid writes only the status it is given.
    let waited = unsafe { libc::waitpid(pid as libc::pid_t, &mut state, flags) };
    assert_eq!(
        waited,
        pid as libc::pid_t,
        "waiting for process {pid} to take kill {signal}: {}",
        std::io::Error::last_os_error()
    );
}

/// A child process, killed (by its pid, with SIGKILL) when dropped.
pub struct Running(pub Child);

impl Running {
    /// kill -9, and waits for the process to be gone.
    pub fn kill9(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Sends SIGTERM and waits at most `timeout` for the process to exit:
    /// its exit status, or `None` if it still runs.
    pub fn terminate_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        signal(self.0.id(), "-TERM");
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::yield_now();
        }
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
    // What the server says goes to a file beside its data directory, for
    // a failing test's reader.
    let mut said = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.with_extension("log"))
        .ok();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(f) = said.as_mut() {
                let _ = writeln!(f, "{line}");
            }
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

/// No HTTP request of a test may take longer than this.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

pub fn addr(http: u16) -> String {
    format!("127.0.0.1:{http}")
}

pub fn sql(http: u16, text: &str) -> Result<Json, aqueduct_mirror::Error> {
    http::sql(&addr(http), None, text, &[], HTTP_TIMEOUT)
}

pub fn ok(http: u16, text: &str) -> Json {
    sql(http, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The rows of `text`, sorted, as JSON text.
pub fn rows(http: u16, text: &str) -> Vec<String> {
    let mut out: Vec<String> = ok(http, text)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.to_string())
        .collect();
    out.sort();
    out
}

/// The metric `name` on the server at `http`.
pub fn metric(http: u16, name: &str) -> Option<u64> {
    let mut r = http::request(&addr(http), "GET", "/metrics", None, None, HTTP_TIMEOUT).ok()?;
    let text = String::from_utf8(r.body.read_to_end(16 << 20).ok()?).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Every record of the log of the server at `http`, as sent to followers
/// (without the header, whose committed LSN may differ).
pub fn log_records(http: u16) -> Vec<aqueduct_log::Record> {
    let mut out = Vec::new();
    loop {
        let from = out.last().map_or(1, |r: &aqueduct_log::Record| r.lsn + 1);
        let path = format!("/v1/log?from_lsn={from}&max_records=65536");
        let mut r = http::request(&addr(http), "GET", &path, None, None, HTTP_TIMEOUT).unwrap();
        assert_eq!(r.status, 200, "{path}");
        let body = r.body.read_to_end(1 << 30).unwrap();
        let (records, _) = wire::decode(&body, from).unwrap();
        if records.is_empty() {
            return out;
        }
        out.extend(records);
    }
}

/// A TCP proxy on loopback between a follower and the server it follows,
/// which the test can cut (every connection closed, new ones closed at
/// once) and restore: a network partition between the two.
pub struct Proxy {
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if flag.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = flag.clone();
                    from.set_read_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        loop {
                            if flag.load(Ordering::SeqCst) {
                                break;
                            }
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = from.shutdown(Shutdown::Both);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, cut }
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}
