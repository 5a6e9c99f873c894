//! The real Aqueduct server as a child process for one benchmark run: the
//! release binary built next to this one (`aqueduct serve`), a scratch data
//! directory, 127.0.0.1 only on free ports, stopped (SIGTERM, then wait) when
//! dropped, and killed by the second Ctrl-C. Extra `serve` flags may be
//! passed, and the server restarted on the same data directory with others
//! (`restart`).

use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use postgres::{Client, NoTls};

/// Process ids of the servers this process started.
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// How long the server may take to accept connections after it starts.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long an orderly shutdown (SIGTERM) may take before SIGKILL.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// Kills every server this process started, at once (second Ctrl-C, watchdog).
pub fn emergency_stop() {
    let running = match RUNNING.lock() {
        Ok(r) => r.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for pid in running {
        // SAFETY: kill(2) on a child we started and have not reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}

pub struct AqueductServer {
    child: Child,
    pub pg_port: u16,
    http_port: u16,
    binary: PathBuf,
    /// `serve` and the flags every start passes but the addresses (new
    /// ports each start) and the caller's extra ones.
    args: Vec<OsString>,
    /// Every start's output, appended.
    log_path: PathBuf,
    /// Removed after the server stops (field order: dropped after `Drop::drop`).
    _dir: tempfile::TempDir,
}

/// Starts `binary` with `args`, the addresses (127.0.0.1, two free ports)
/// and `extra_args`, its output appended to `log_path`. Returns the child
/// and its PostgreSQL and HTTP ports.
fn spawn(
    binary: &Path,
    args: &[OsString],
    extra_args: &[String],
    log_path: &Path,
) -> anyhow::Result<(Child, u16, u16)> {
    let ports = crate::pg::free_ports(2)?;
    let (pg_port, http_port) = (ports[0], ports[1]);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .context("opening the server log file")?;
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .arg("--pg-addr")
        .arg(format!("127.0.0.1:{pg_port}"))
        .arg("--http-addr")
        .arg(format!("127.0.0.1:{http_port}"))
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // Its own process group: a Ctrl-C at the terminal reaches only us, and
    // we stop the server in order.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    RUNNING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(child.id());
    Ok((child, pg_port, http_port))
}

impl AqueductServer {
    /// The server binary: `explicit`, or `aqueduct` next to this benchmark's
    /// binary (both are built into target/release by cargo).
    pub fn binary(explicit: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
        let path = match explicit {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .context("locating the bench binary")?
                .with_file_name("aqueduct"),
        };
        if !path.is_file() {
            bail!(
                "the Aqueduct server binary {} does not exist: build it first with \
                 `cargo build --release -p aqueduct` (or pass --aqueduct-bin)",
                path.display()
            );
        }
        Ok(path)
    }

    /// Starts `binary serve` on a fresh data directory in `parent`, accepting
    /// `max_connections` clients, and waits until its PostgreSQL port accepts
    /// connections.
    pub fn start(
        binary: &Path,
        parent: &Option<PathBuf>,
        fsync: &str,
        max_connections: usize,
    ) -> anyhow::Result<AqueductServer> {
        Self::start_with(binary, parent, fsync, max_connections, &[])
    }

    /// [`AqueductServer::start`] with `extra_args` after the flags it sets
    /// (such as `--memory-limit <bytes>`).
    pub fn start_with(
        binary: &Path,
        parent: &Option<PathBuf>,
        fsync: &str,
        max_connections: usize,
        extra_args: &[String],
    ) -> anyhow::Result<AqueductServer> {
        let dir = crate::common::scratch_dir(parent, "bench-aqueduct-")?;
        let data = dir.path().join("data");
        let log_path = dir.path().join("server.log");
        let args: Vec<OsString> = vec![
            "serve".into(),
            "--data-dir".into(),
            data.into(),
            "--fsync".into(),
            fsync.into(),
            "--max-connections".into(),
            max_connections.to_string().into(),
        ];
        let (child, pg_port, http_port) = spawn(binary, &args, extra_args, &log_path)?;
        let mut server = AqueductServer {
            child,
            pg_port,
            http_port,
            binary: binary.to_path_buf(),
            args,
            log_path,
            _dir: dir,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Stops the server and starts it again on the same data directory (it
    /// recovers everything committed from its log) with `extra_args` in
    /// place of the last start's, on new ports.
    pub fn restart(&mut self, extra_args: &[String]) -> anyhow::Result<()> {
        self.stop();
        let (child, pg_port, http_port) =
            spawn(&self.binary, &self.args, extra_args, &self.log_path)?;
        (self.child, self.pg_port, self.http_port) = (child, pg_port, http_port);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.pg_port));
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            crate::common::check_stop()?;
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the Aqueduct server exited during start-up ({status}); its log:\n{}",
                    self.log_tail()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the Aqueduct server did not accept connections on {addr} within {} s; its log:\n{}",
                    START_DEADLINE.as_secs(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the server's own log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The HTTP port of the current start.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A counter from the server's Prometheus page (`GET /metrics` on its
    /// HTTP port), such as `aqueduct_log_syncs_total`.
    pub fn metric(&self, name: &str) -> anyhow::Result<u64> {
        Ok(self.metrics(&[name])?[0] as u64)
    }

    /// Values from one read of the server's Prometheus page, in the order of
    /// `names`; a labelled one is named in full, such as
    /// `aqueduct_view_hits_total{view="v"}`.
    pub fn metrics(&self, names: &[&str]) -> anyhow::Result<Vec<f64>> {
        use std::io::{Read, Write};
        let addr = SocketAddr::from(([127, 0, 0, 1], self.http_port));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .context("connecting to Aqueduct's HTTP port")?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )?;
        let mut page = String::new();
        s.read_to_string(&mut page)
            .context("reading Aqueduct's /metrics")?;
        names
            .iter()
            .map(|name| {
                page.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .with_context(|| format!("no {name} in Aqueduct's /metrics"))
            })
            .collect()
    }

    /// The server process's resident memory and its peak since it started
    /// (VmRSS and VmHWM of /proc/<pid>/status), in bytes.
    pub fn memory(&self) -> (u64, u64) {
        let text =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    pub fn connect(&self) -> anyhow::Result<Client> {
        postgres::Config::new()
            .host("127.0.0.1")
            .port(self.pg_port)
            .user("aqueduct")
            .dbname("aqueduct")
            .connect(NoTls)
            .context("connecting to Aqueduct on 127.0.0.1")
    }

    /// Stops the server (SIGTERM, then SIGKILL after `STOP_DEADLINE`), if
    /// it runs.
    /// Stops the server (SIGTERM, then a kill past the deadline).
    pub fn stop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_DEADLINE;
            loop {
                match self.child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            eprintln!("warning: the Aqueduct server exited with {status}");
                        }
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        eprintln!(
                            "warning: the Aqueduct server did not stop within {} s of SIGTERM; killing it",
                            STOP_DEADLINE.as_secs()
                        );
                        let _ = self.child.kill();
                        let _ = self.child.wait();
                        break;
                    }
                }
            }
        }
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|p| *p as libc::pid_t != pid);
    }
}

impl Drop for AqueductServer {
    fn drop(&mut self) {
        self.stop();
    }
}
