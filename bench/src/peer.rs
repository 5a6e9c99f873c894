//! What the throwaway peer servers (MariaDB, Redis, memcached) share: finding
//! their programs, running a setup command with a deadline, and the server
//! itself as our own child process, in its own process group (a Ctrl-C at the
//! terminal reaches only the benchmark), its output in a log file, waited for
//! until it answers, and stopped by its own process id (SIGTERM, then SIGKILL
//! after a deadline) when dropped or killed at once by `kill_all`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Process ids of the servers of one kind that this process started.
pub type Registry = std::sync::Mutex<Vec<u32>>;

/// How often a wait for a child polls it.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait between two readiness probes.
const PROBE_PAUSE: Duration = Duration::from_millis(50);
/// How long a program may take to print its version.
const VERSION_DEADLINE: Duration = Duration::from_secs(30);
/// How many lines of a server's log an error quotes.
const LOG_TAIL_LINES: usize = 30;
/// Where system daemons live when `PATH` leaves them out (as it does for
/// users other than root on Debian).
const SBIN_DIRS: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// Kills every server in `registry` at once (second Ctrl-C, watchdog).
pub fn kill_all(registry: &Registry) {
    let pids = match registry.lock() {
        Ok(r) => r.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for pid in pids {
        // SAFETY: kill(2) on a child we started and have not reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}

/// Whether this process runs as root (servers then need telling which user
/// to run as).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The program `name`: the first executable file of that name on `PATH`,
/// then in the usual sbin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The last lines of the file at `path` (empty when it cannot be read).
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// Runs `cmd` to completion, its output (stdout and stderr) written to `log`,
/// and returns that output. It runs in its own process group, and the whole
/// group is killed if it has not finished within `deadline`.
pub fn run_bounded(
    cmd: &mut Command,
    what: &str,
    log: &Path,
    deadline: Duration,
) -> anyhow::Result<String> {
    let out = std::fs::File::create(log)
        .with_context(|| format!("creating {} for the output of {what}", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    let until = Instant::now() + deadline;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= until {
            // SAFETY: kill(2) on the process group of our own child, which
            // leads it (process_group(0)) and is not yet reaped.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            bail!(
                "{what} did not finish within {} s; its output:\n{}",
                deadline.as_secs(),
                log_tail(log)
            );
        }
        std::thread::sleep(POLL);
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    if !status.success() {
        bail!("{what} failed ({status}); its output:\n{}", log_tail(log));
    }
    Ok(text)
}

/// The first line `program flag` prints, such as its `--version`, with
/// `scratch` holding its output meanwhile.
pub fn version_line(program: &Path, flag: &str, scratch: &Path) -> anyhow::Result<String> {
    let what = format!("{} {flag}", program.display());
    let log = scratch.join("version.txt");
    let out = run_bounded(
        Command::new(program).arg(flag),
        &what,
        &log,
        VERSION_DEADLINE,
    )?;
    let _ = std::fs::remove_file(&log);
    Ok(out.lines().next().unwrap_or_default().trim().to_string())
}

/// A server run as our own child process.
pub struct PeerProcess {
    /// Its name in messages, such as "MariaDB".
    name: &'static str,
    child: Child,
    log_path: PathBuf,
    registry: &'static Registry,
    /// How long an orderly shutdown (SIGTERM) may take before SIGKILL.
    stop_deadline: Duration,
    /// Whether dying of the SIGTERM that stops it is its normal end.
    term_is_normal: bool,
}

impl PeerProcess {
    /// Starts `cmd` in its own process group, its output appended to
    /// `log_path`, and records its process id in `registry` until it stops.
    pub fn spawn(
        name: &'static str,
        mut cmd: Command,
        log_path: &Path,
        registry: &'static Registry,
        stop_deadline: Duration,
    ) -> anyhow::Result<PeerProcess> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .with_context(|| format!("opening the {name} log file {}", log_path.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(child.id());
        Ok(PeerProcess {
            name,
            child,
            log_path: log_path.to_path_buf(),
            registry,
            stop_deadline,
            term_is_normal: false,
        })
    }

    /// Dying of the SIGTERM that stops it is its normal end (no warning).
    pub fn term_is_normal(&mut self) {
        self.term_is_normal = true;
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Calls `probe` until it succeeds, the server exits, or `deadline`
    /// passes. The probe must bound its own wait (a connect timeout).
    pub fn wait_ready(
        &mut self,
        deadline: Duration,
        mut probe: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + deadline;
        loop {
            crate::common::check_stop()?;
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited during start-up ({status}); its log:\n{}",
                    self.name,
                    log_tail(&self.log_path)
                );
            }
            let err = match probe() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= until {
                bail!(
                    "{} did not answer within {} s (last attempt: {err:#}); its log:\n{}",
                    self.name,
                    deadline.as_secs(),
                    log_tail(&self.log_path)
                );
            }
            std::thread::sleep(PROBE_PAUSE);
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL after the stop deadline), if
    /// it runs.
    fn stop(&mut self) {
        let pid = self.child.id();
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            let until = Instant::now() + self.stop_deadline;
            loop {
                match self.child.try_wait() {
                    Ok(Some(status)) => {
                        let termed = std::os::unix::process::ExitStatusExt::signal(&status)
                            == Some(libc::SIGTERM);
                        if !(status.success() || termed && self.term_is_normal) {
                            eprintln!("warning: {} exited with {status}", self.name);
                        }
                        break;
                    }
                    Ok(None) if Instant::now() < until => std::thread::sleep(POLL),
                    _ => {
                        eprintln!(
                            "warning: {} did not stop within {} s of SIGTERM; killing it",
                            self.name,
                            self.stop_deadline.as_secs()
                        );
                        let _ = self.child.kill();
                        let _ = self.child.wait();
                        break;
                    }
                }
            }
        }
        let mut running = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|p| *p != pid);
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone(pid: u32) -> bool {
        // SAFETY: signal 0 only checks whether the process exists.
        unsafe { libc::kill(pid as libc::pid_t, 0) != 0 }
    }

    #[test]
    fn missing_program_is_not_found() {
        assert_eq!(find_program("bench-no-such-program"), None);
        assert!(find_program("sh").is_some());
    }

    #[test]
    fn a_setup_command_past_its_deadline_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let err = run_bounded(
            Command::new("sleep").arg("30"),
            "sleep 30",
            &dir.path().join("out.log"),
            Duration::from_millis(300),
        )
        .expect_err("past its deadline");
        assert!(err.to_string().contains("did not finish"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(10));
        let out = run_bounded(
            Command::new("sh").args(["-c", "echo hello; echo oops >&2"]),
            "echo",
            &dir.path().join("out.log"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out, "hello\noops\n");
        let err = run_bounded(
            Command::new("sh").args(["-c", "echo why; exit 3"]),
            "failing",
            &dir.path().join("out.log"),
            Duration::from_secs(10),
        )
        .expect_err("exit 3");
        assert!(err.to_string().contains("why"), "{err}");
    }

    #[test]
    fn stopped_on_drop_and_killed_by_kill_all() {
        static TEST_RUNNING: Registry = Registry::new(Vec::new());
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let spawn = || {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            PeerProcess::spawn("sleep", cmd, &log, &TEST_RUNNING, Duration::from_secs(5)).unwrap()
        };

        let mut p = spawn();
        p.wait_ready(Duration::from_secs(5), || Ok(())).unwrap();
        let pid = p.pid();
        assert_eq!(*TEST_RUNNING.lock().unwrap(), [pid]);
        drop(p);
        assert!(gone(pid));
        assert!(TEST_RUNNING.lock().unwrap().is_empty());

        let p = spawn();
        let pid = p.pid();
        kill_all(&TEST_RUNNING);
        drop(p); // reaps it
        assert!(gone(pid));
        assert!(TEST_RUNNING.lock().unwrap().is_empty());

        let mut p = spawn();
        let err = p
            .wait_ready(Duration::from_millis(200), || bail!("not yet"))
            .expect_err("never ready");
        assert!(err.to_string().contains("not yet"), "{err}");
    }
}
