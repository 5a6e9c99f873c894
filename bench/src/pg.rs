//! A throwaway PostgreSQL server for one benchmark run: initdb in a scratch
//! directory, listening on 127.0.0.1 only, stopped when dropped (and by the
//! second Ctrl-C), plus a small blocking connection pool.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use parking_lot::{Condvar, Mutex};
use postgres::{Client, NoTls, Statement};

/// Servers started by this process: (pg_ctl command prefix, data directory).
static RUNNING: std::sync::Mutex<Vec<(Vec<String>, PathBuf)>> = std::sync::Mutex::new(Vec::new());

/// Stops every server this process started, immediately (second Ctrl-C).
pub fn emergency_stop() {
    let running = match RUNNING.lock() {
        Ok(r) => r.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for (prefix, data) in running {
        let _ = Command::new(&prefix[0])
            .args(&prefix[1..])
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub struct PgServer {
    bin: PathBuf,
    as_postgres: bool,
    data: PathBuf,
    pub port: u16,
    pub version: String,
    /// Removed after the server stops (field order: dropped after `Drop::drop`).
    _dir: tempfile::TempDir,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of user `postgres`.
fn postgres_ids() -> anyhow::Result<(u32, u32)> {
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam returns a pointer to static storage or NULL; read at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        bail!("there is no user 'postgres' (PostgreSQL refuses to run as root)");
    }
    // SAFETY: non-null result of getpwnam.
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn free_port() -> anyhow::Result<u16> {
    Ok(free_ports(1)?[0])
}

/// `n` distinct free ports on 127.0.0.1 (all listeners are held until every
/// port is known, so none is returned twice).
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..n {
        listeners
            .push(TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1")?);
    }
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl PgServer {
    /// Why PostgreSQL cannot be run here, if it cannot.
    pub fn unavailable(bin: &Path) -> Option<String> {
        for prog in ["initdb", "pg_ctl", "postgres"] {
            if !bin.join(prog).is_file() {
                return Some(format!(
                    "{} not found (install PostgreSQL 15: apt-get install postgresql-15, or set --pg-bin)",
                    bin.join(prog).display()
                ));
            }
        }
        if is_root() {
            if let Err(e) = postgres_ids() {
                return Some(e.to_string());
            }
        }
        None
    }

    fn prefix(&self, prog: &str) -> Vec<String> {
        let path = self.bin.join(prog).to_string_lossy().into_owned();
        if self.as_postgres {
            vec![
                "runuser".into(),
                "-u".into(),
                "postgres".into(),
                "--".into(),
                path,
            ]
        } else {
            vec![path]
        }
    }

    fn command(&self, prog: &str) -> Command {
        let p = self.prefix(prog);
        let mut c = Command::new(&p[0]);
        c.args(&p[1..]);
        c
    }

    /// initdb + start, durable settings: fsync=on, synchronous_commit=on.
    pub fn start(
        bin: &Path,
        parent: &Option<PathBuf>,
        max_connections: usize,
    ) -> anyhow::Result<PgServer> {
        Self::start_with(bin, parent, max_connections, "")
    }

    /// [`PgServer::start`] with `extra` server options after the ones it
    /// sets (such as `-c wal_level=logical`; a later `-c` wins).
    pub fn start_with(
        bin: &Path,
        parent: &Option<PathBuf>,
        max_connections: usize,
        extra: &str,
    ) -> anyhow::Result<PgServer> {
        let dir = crate::common::scratch_dir(parent, "bench-pg-")?;
        let as_postgres = is_root();
        if as_postgres {
            let (uid, gid) = postgres_ids()?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .context("handing the scratch directory to user postgres")?;
        }
        let mut server = PgServer {
            bin: bin.to_path_buf(),
            as_postgres,
            data: dir.path().join("data"),
            port: free_port()?,
            version: String::new(),
            _dir: dir,
        };
        server.version = run(
            Command::new(bin.join("postgres")).arg("--version"),
            "postgres --version",
        )?
        .trim()
        .to_string();
        // --no-sync: only initdb's own files; the server runs with fsync=on.
        run(
            server.command("initdb").arg("-D").arg(&server.data).args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]),
            "initdb",
        )?;
        let socket_dir = server._dir.path().to_string_lossy().into_owned();
        let opts = format!(
            "-p {} -k {socket_dir} -c listen_addresses=127.0.0.1 -c synchronous_commit=on \
             -c fsync=on -c max_connections={} {extra}",
            server.port,
            max_connections + 10
        );
        {
            let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
            running.push((server.prefix("pg_ctl"), server.data.clone()));
        }
        let log = server._dir.path().join("server.log");
        let mut start = server.command("pg_ctl");
        start
            .arg("-D")
            .arg(&server.data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "-o", &opts, "start"]);
        // Its own process group: a Ctrl-C at the terminal reaches only us, and
        // we stop the server in order.
        std::os::unix::process::CommandExt::process_group(&mut start, 0);
        if let Err(e) = run(&mut start, "pg_ctl start") {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(e.context(format!("server log:\n{tail}")));
        }
        Ok(server)
    }

    /// The postmaster's process id (the first line of postmaster.pid).
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    pub fn connect(&self) -> anyhow::Result<Client> {
        self.connect_to("postgres")
    }

    /// A connection to database `db`.
    pub fn connect_to(&self, db: &str) -> anyhow::Result<Client> {
        postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname(db)
            .connect(NoTls)
            .with_context(|| format!("connecting to PostgreSQL database {db} on 127.0.0.1"))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("warning: pg_ctl stop failed ({status:?}); stopping it immediately");
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "immediate", "-w", "stop"])
                .status();
        }
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|(_, d)| d != &self.data);
    }
}

/// A fixed set of connections, each with its prepared statement; callers
/// wait for a free one.
pub struct Pool {
    conns: Mutex<Vec<(Client, Statement)>>,
    cv: Condvar,
}

impl Pool {
    pub fn new(server: &PgServer, size: usize, sql: &str) -> anyhow::Result<Pool> {
        let mut conns = Vec::with_capacity(size);
        for _ in 0..size.max(1) {
            let mut c = server.connect()?;
            let st = c.prepare(sql).with_context(|| format!("preparing {sql}"))?;
            conns.push((c, st));
        }
        Ok(Pool {
            conns: Mutex::new(conns),
            cv: Condvar::new(),
        })
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Client, &Statement) -> R) -> R {
        let mut conn = {
            let mut g = self.conns.lock();
            while g.is_empty() {
                self.cv.wait(&mut g);
            }
            g.pop().expect("not empty")
        };
        let r = f(&mut conn.0, &conn.1);
        self.conns.lock().push(conn);
        self.cv.notify_one();
        r
    }
}
