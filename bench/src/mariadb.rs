//! A throwaway MariaDB server for one benchmark run: a fresh data directory
//! made by `mariadb-install-db` in a scratch directory, `mariadbd` run as our
//! own child process on 127.0.0.1 only with durable settings (the redo log
//! flushed and synced at every commit, as PostgreSQL with
//! synchronous_commit=on), a database `bench`, stopped by its process id when
//! dropped and killed by the second Ctrl-C. Clients use the pure-Rust `mysql`
//! crate over TCP, without TLS.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use mysql::prelude::Queryable;

use crate::peer::{self, PeerProcess, Registry};

/// Process ids of the MariaDB servers this process started.
static RUNNING: Registry = Registry::new(Vec::new());

/// How long `mariadb-install-db` may take.
const INSTALL_DEADLINE: Duration = Duration::from_secs(120);
/// How long the server may take to accept connections after it starts.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long an orderly shutdown (SIGTERM) may take before SIGKILL: InnoDB
/// writes its dirty pages out first.
const STOP_DEADLINE: Duration = Duration::from_secs(60);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections allowed beyond the benchmark's own (setup, probes).
const SPARE_CONNECTIONS: usize = 10;
/// InnoDB's page cache: ample for the benchmarks' tables on a 24 GiB machine.
const BUFFER_POOL_SIZE: &str = "1G";
/// InnoDB's redo log: large enough that checkpoints do not throttle writes
/// (PostgreSQL's default max_wal_size is 1 GB).
const LOG_FILE_SIZE: &str = "512M";
/// The longest Unix socket path the kernel accepts (sun_path less its NUL).
const SOCKET_PATH_MAX: usize = 107;
/// The database the benchmarks use.
const DATABASE: &str = "bench";

/// A running MariaDB server, stopped when dropped.
pub struct MariaServer {
    /// Stopped first (field order: dropped before the directory).
    process: PeerProcess,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// What `mariadbd --version` says.
    pub version: String,
    /// Removed after the server stops (field order: dropped after `process`).
    _dir: tempfile::TempDir,
}

/// The programs MariaDB needs: the server and its data directory setup.
fn programs() -> Result<(PathBuf, PathBuf), String> {
    let find = |name: &str| {
        peer::find_program(name).ok_or_else(|| {
            format!("{name} not found: install MariaDB 10.11: apt-get install mariadb-server")
        })
    };
    Ok((find("mariadbd")?, find("mariadb-install-db")?))
}

/// Connection options for the server on 127.0.0.1:`port` as root, without
/// a password, in database `db` (none: no default database).
fn opts(port: u16, db: Option<&str>) -> mysql::OptsBuilder {
    mysql::OptsBuilder::new()
        .ip_or_hostname(Some("127.0.0.1"))
        .tcp_port(port)
        // Stay on TCP, as every peer's clients do (the crate would otherwise
        // switch to the server's Unix socket).
        .prefer_socket(false)
        .user(Some("root"))
        .db_name(db)
        .tcp_connect_timeout(Some(CONNECT_TIMEOUT))
}

impl MariaServer {
    /// Why MariaDB cannot be run here, if it cannot.
    pub fn unavailable() -> Option<String> {
        programs().err()
    }

    /// Makes a fresh data directory in a scratch directory inside `parent`,
    /// starts the server accepting `max_connections` clients (plus a few
    /// spare), waits until it answers and creates database `bench`.
    pub fn start(parent: &Option<PathBuf>, max_connections: usize) -> anyhow::Result<MariaServer> {
        let (mariadbd, install_db) = programs().map_err(anyhow::Error::msg)?;
        let dir = crate::common::scratch_dir(parent, "bench-mariadb-")?;
        let data = dir.path().join("data");
        let socket = dir.path().join("mysqld.sock");
        if socket.as_os_str().len() > SOCKET_PATH_MAX {
            bail!(
                "the MariaDB socket path {} is longer than {SOCKET_PATH_MAX} bytes: \
                 choose a scratch parent directory with a shorter path",
                socket.display()
            );
        }
        let version = peer::version_line(&mariadbd, "--version", dir.path())?;
        let root = peer::is_root();

        // --no-defaults everywhere: the system's option files (its socket,
        // data directory, log settings) must not leak into the benchmark.
        let mut install = Command::new(&install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            // root gets no password (for TCP connections from 127.0.0.1 too);
            // no test database.
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if root {
            install.arg("--user=root");
        }
        peer::run_bounded(
            &mut install,
            "mariadb-install-db",
            &dir.path().join("install.log"),
            INSTALL_DEADLINE,
        )?;

        let port = crate::pg::free_ports(1)?[0];
        let mut cmd = Command::new(&mariadbd);
        cmd.arg("--no-defaults");
        if root {
            // mariadbd refuses to run as root unless told to.
            cmd.arg("--user=root");
        }
        cmd.arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!(
                "--pid-file={}",
                dir.path().join("mysqld.pid").display()
            ))
            .arg(format!("--tmpdir={}", dir.path().display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--skip-name-resolve")
            .arg(format!(
                "--max-connections={}",
                max_connections + SPARE_CONNECTIONS
            ))
            // Durable commits: the redo log written and synced at each one.
            // There is no binary log, so nothing else to sync.
            .arg("--innodb-flush-log-at-trx-commit=1")
            .arg("--skip-log-bin")
            .arg("--sync-binlog=0")
            .arg(format!("--innodb-buffer-pool-size={BUFFER_POOL_SIZE}"))
            .arg(format!("--innodb-log-file-size={LOG_FILE_SIZE}"))
            // UTF-8 text, as the PostgreSQL peer's.
            .arg("--character-set-server=utf8mb4")
            .arg("--collation-server=utf8mb4_general_ci");
        let mut process = PeerProcess::spawn(
            "MariaDB",
            cmd,
            &dir.path().join("server.log"),
            &RUNNING,
            STOP_DEADLINE,
        )?;
        process.wait_ready(START_DEADLINE, || {
            let mut conn = mysql::Conn::new(
                opts(port, None)
                    .read_timeout(Some(CONNECT_TIMEOUT))
                    .write_timeout(Some(CONNECT_TIMEOUT)),
            )?;
            conn.query_drop("SELECT 1")?;
            Ok(())
        })?;
        let server = MariaServer {
            process,
            port,
            version,
            _dir: dir,
        };
        let mut conn = mysql::Conn::new(opts(port, None))
            .context("connecting to MariaDB on 127.0.0.1 to create its database")?;
        conn.query_drop(format!("CREATE DATABASE {DATABASE}"))
            .with_context(|| format!("creating MariaDB's database {DATABASE}"))?;
        Ok(server)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A new connection over TCP to database `bench`, as root.
    pub fn connect(&self) -> anyhow::Result<mysql::Conn> {
        self.connect_to(DATABASE)
    }

    /// A new connection over TCP to database `db`, as root.
    pub fn connect_to(&self, db: &str) -> anyhow::Result<mysql::Conn> {
        mysql::Conn::new(opts(self.port, Some(db))).with_context(|| {
            format!(
                "connecting to MariaDB database {db} on 127.0.0.1:{}",
                self.port
            )
        })
    }
}

/// Kills every MariaDB server this process started, at once (second Ctrl-C).
pub fn emergency_stop() {
    peer::kill_all(&RUNNING);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql::params;

    #[test]
    fn create_insert_and_prepared_select() {
        if let Some(why) = MariaServer::unavailable() {
            eprintln!("skipped: MariaDB is not available ({why})");
            return;
        }
        let server = MariaServer::start(&None, 4).expect("start MariaDB");
        assert!(server.version.contains("MariaDB"), "{}", server.version);
        assert!(server.pid() > 0);
        let mut c = server.connect().expect("connect");
        c.query_drop(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL) ENGINE=InnoDB",
        )
        .expect("create table");
        let insert = c
            .prep("INSERT INTO t (id, name) VALUES (:id, :name)")
            .expect("prepare insert");
        for (id, name) in [(1i64, "one"), (2, "two"), (3, "trois é")] {
            c.exec_drop(&insert, params! { "id" => id, "name" => name })
                .expect("insert");
        }
        let select = c
            .prep("SELECT name FROM t WHERE id = ?")
            .expect("prepare select");
        let got: Option<String> = c.exec_first(&select, (3i64,)).expect("select");
        assert_eq!(got.as_deref(), Some("trois é"));
        let missing: Option<String> = c.exec_first(&select, (9i64,)).expect("select");
        assert_eq!(missing, None);
        let db: Option<String> = c.query_first("SELECT DATABASE()").expect("database()");
        assert_eq!(db.as_deref(), Some(DATABASE));
        let durable: Option<u32> = c
            .query_first("SELECT @@innodb_flush_log_at_trx_commit")
            .expect("read a setting");
        assert_eq!(durable, Some(1));
        drop(c);
        let pid = server.pid();
        drop(server);
        // SAFETY: signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        assert!(!alive, "MariaDB (pid {pid}) still runs after drop");
    }
}
