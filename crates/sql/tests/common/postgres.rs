//! A throwaway PostgreSQL 15 cluster for tests that compare with it: initdb
//! in a temporary directory, a Unix socket only, stopped when dropped.
//!
//! PostgreSQL's server programs are found through `PG_BIN`, else
//! `pg_config --bindir`, else Debian's `/usr/lib/postgresql/15/bin`. Run as
//! root, PostgreSQL's programs run as the `postgres` user.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A PostgreSQL cluster in a temporary directory, stopped when dropped.
pub struct Postgres {
    bin: PathBuf,
    pub dir: tempfile::TempDir,
    as_postgres: bool,
}

impl Postgres {
    pub fn bin_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("PG_BIN") {
            return Some(PathBuf::from(dir));
        }
        let from_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        [
            from_config,
            Some(PathBuf::from("/usr/lib/postgresql/15/bin")),
        ]
        .into_iter()
        .flatten()
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
    }

    fn command(&self, program: &Path) -> Command {
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    pub fn start(bin: PathBuf) -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        // Run as root, initdb refuses to run: PostgreSQL runs as postgres.
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "chown the cluster directory to postgres");
        }
        let pg = Postgres {
            bin,
            dir,
            as_postgres,
        };
        let data = pg.dir.path().join("data");
        let out = pg
            .command(&pg.bin.join("initdb"))
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--locale=C",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let options = format!(
            "-c listen_addresses='' -k {} -c timezone=UTC -c fsync=off",
            pg.dir.path().display()
        );
        let out = pg
            .command(&pg.bin.join("pg_ctl"))
            .args(["-w", "-s", "-D"])
            .arg(&data)
            .args(["-l"])
            .arg(pg.dir.path().join("log"))
            .args(["-o", &options, "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        pg
    }
}

impl Postgres {
    /// The cluster's programs, or `None` (the caller skips) unless
    /// `AQUEDUCT_REQUIRE_POSTGRES` is set, which makes their absence a
    /// failure.
    pub fn start_or_skip() -> Option<Postgres> {
        let Some(bin) = Postgres::bin_dir() else {
            assert!(
                std::env::var_os("AQUEDUCT_REQUIRE_POSTGRES").is_none(),
                "no PostgreSQL server programs (set PG_BIN)"
            );
            eprintln!("skipped: no PostgreSQL server programs (set PG_BIN)");
            return None;
        };
        Some(Postgres::start(bin))
    }

    /// A connection over the cluster's Unix socket.
    pub fn connect(&self) -> postgres::Client {
        postgres::Client::connect(
            &format!(
                "host={} user=postgres dbname=postgres",
                self.dir.path().display()
            ),
            postgres::NoTls,
        )
        .unwrap()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command(&self.bin.join("pg_ctl"))
            .args(["-s", "-m", "immediate", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("stop")
            .status();
    }
}
