//! Throwaway in-memory key-value peers for one benchmark run: Redis (no
//! snapshots, no append-only file) and memcached, each our own child process
//! on 127.0.0.1 only, stopped by its process id when dropped and killed by
//! the second Ctrl-C. Redis clients use the `redis` crate's blocking API;
//! memcached's are [`Memcache`], a small blocking client of its text protocol.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use redis::IntoConnectionInfo;

use crate::peer::{self, PeerProcess, Registry};

/// Process ids of the Redis and memcached servers this process started.
static RUNNING: Registry = Registry::new(Vec::new());

/// How long a server may take to answer after it starts.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long an orderly shutdown (SIGTERM) may take before SIGKILL.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one read or write on a memcached connection may block.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// memcached's memory for items, in MiB.
const MEMCACHED_MEMORY_MB: usize = 1024;
/// memcached's worker threads: one per core of the benchmark machine.
const MEMCACHED_THREADS: usize = 2;
/// memcached's limit on simultaneous connections.
const MEMCACHED_MAX_CONNECTIONS: usize = 1024;
/// The longest key memcached accepts, in bytes.
const MAX_KEY_BYTES: usize = 250;
/// The longest reply line read from memcached, in bytes.
const MAX_LINE_BYTES: u64 = 1024;
/// The largest value read from memcached: its own ceiling on item size.
const MAX_VALUE_BYTES: usize = 1024 * 1024 * 1024;

/// Kills every Redis and memcached server this process started, at once
/// (second Ctrl-C).
pub fn emergency_stop() {
    peer::kill_all(&RUNNING);
}

/// The program `name`, or a message saying which Debian package has it.
fn program(name: &str, package: &str) -> Result<PathBuf, String> {
    peer::find_program(name)
        .ok_or_else(|| format!("{name} not found: install it: apt-get install {package}"))
}

/// A running Redis server without persistence, stopped when dropped.
pub struct RedisServer {
    /// Stopped first (field order: dropped before the directory).
    process: PeerProcess,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// What `redis-server --version` says.
    pub version: String,
    /// Its working directory and log, removed after it stops.
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Why Redis cannot be run here, if it cannot.
    pub fn unavailable() -> Option<String> {
        program("redis-server", "redis-server").err()
    }

    /// Starts Redis in a scratch directory inside `parent`, with no
    /// snapshots and no append-only file, and waits until it answers PING.
    pub fn start(parent: &Option<PathBuf>) -> anyhow::Result<RedisServer> {
        let bin = program("redis-server", "redis-server").map_err(anyhow::Error::msg)?;
        let dir = crate::common::scratch_dir(parent, "bench-redis-")?;
        let version = peer::version_line(&bin, "--version", dir.path())?;
        let port = crate::pg::free_ports(1)?[0];
        let mut cmd = Command::new(&bin);
        cmd.arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1"])
            // No snapshots, no append-only file: a cache held in memory.
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path());
        let mut process = PeerProcess::spawn(
            "Redis",
            cmd,
            &dir.path().join("server.log"),
            &RUNNING,
            STOP_DEADLINE,
        )?;
        process.wait_ready(START_DEADLINE, || {
            let mut conn = redis_connect(port)?;
            let pong: String = redis::cmd("PING").query(&mut conn)?;
            if pong != "PONG" {
                bail!("Redis answered PING with {pong:?}");
            }
            Ok(())
        })?;
        Ok(RedisServer {
            process,
            port,
            version,
            _dir: dir,
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A new blocking connection over TCP (TCP_NODELAY on).
    pub fn connect(&self) -> anyhow::Result<redis::Connection> {
        redis_connect(self.port)
    }
}

fn redis_connect(port: u16) -> anyhow::Result<redis::Connection> {
    let info = ("127.0.0.1", port)
        .into_connection_info()?
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    redis::Client::open(info)?
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .with_context(|| format!("connecting to Redis on 127.0.0.1:{port}"))
}

/// A running memcached server, stopped when dropped.
pub struct MemcachedServer {
    /// Stopped first (field order: dropped before the directory).
    process: PeerProcess,
    /// Its TCP port on 127.0.0.1 (UDP is off).
    pub port: u16,
    /// What `memcached -V` says.
    pub version: String,
    /// Holds its log, removed after it stops.
    _dir: tempfile::TempDir,
}

impl MemcachedServer {
    /// Why memcached cannot be run here, if it cannot.
    pub fn unavailable() -> Option<String> {
        program("memcached", "memcached").err()
    }

    /// Starts memcached (its log in a scratch directory inside `parent`)
    /// and waits until it answers `version`.
    pub fn start(parent: &Option<PathBuf>) -> anyhow::Result<MemcachedServer> {
        let bin = program("memcached", "memcached").map_err(anyhow::Error::msg)?;
        let dir = crate::common::scratch_dir(parent, "bench-memcached-")?;
        let version = peer::version_line(&bin, "-V", dir.path())?;
        let port = crate::pg::free_ports(1)?[0];
        let mut cmd = Command::new(&bin);
        cmd.args(["-l", "127.0.0.1"])
            .arg("-p")
            .arg(port.to_string())
            .args(["-U", "0"])
            .arg("-m")
            .arg(MEMCACHED_MEMORY_MB.to_string())
            .arg("-t")
            .arg(MEMCACHED_THREADS.to_string())
            .arg("-c")
            .arg(MEMCACHED_MAX_CONNECTIONS.to_string());
        if peer::is_root() {
            // memcached refuses to run as root unless told which user to be.
            cmd.args(["-u", "root"]);
        }
        let mut process = PeerProcess::spawn(
            "memcached",
            cmd,
            &dir.path().join("server.log"),
            &RUNNING,
            STOP_DEADLINE,
        )?;
        process.wait_ready(START_DEADLINE, || {
            Memcache::connect(port)?.version().map(drop)
        })?;
        Ok(MemcachedServer {
            process,
            port,
            version,
            _dir: dir,
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A new connection over TCP.
    pub fn connect(&self) -> anyhow::Result<Memcache> {
        Memcache::connect(self.port)
    }
}

/// A blocking connection to memcached speaking its text protocol, one
/// request at a time. After an error other than a refused key, the
/// connection may be out of step with the server: drop it.
pub struct Memcache {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    /// The last reply line read, without its line end.
    line: Vec<u8>,
}

/// Refuses a key memcached's text protocol cannot carry.
fn check_key(key: &[u8]) -> anyhow::Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        bail!(
            "a memcached key must have 1 to {MAX_KEY_BYTES} bytes, not {}",
            key.len()
        );
    }
    if let Some(b) = key.iter().find(|b| **b <= b' ' || **b == 0x7f) {
        bail!(
            "a memcached key may not hold spaces or control characters (byte {b:#04x} in {:?})",
            String::from_utf8_lossy(key)
        );
    }
    Ok(())
}

impl Memcache {
    /// Connects to memcached on 127.0.0.1:`port`, with TCP_NODELAY on and
    /// reads and writes bounded in time.
    pub fn connect(port: u16) -> anyhow::Result<Memcache> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .with_context(|| format!("connecting to memcached on {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Memcache {
            reader: BufReader::new(stream.try_clone()?),
            writer: BufWriter::new(stream),
            line: Vec::new(),
        })
    }

    /// The server's version (`version`).
    pub fn version(&mut self) -> anyhow::Result<String> {
        self.writer.write_all(b"version\r\n")?;
        self.writer.flush()?;
        self.read_line("version")?;
        match self.line.strip_prefix(b"VERSION ") {
            Some(v) => Ok(String::from_utf8_lossy(v).into_owned()),
            None => self.unexpected("version"),
        }
    }

    /// The value stored under `key`, if any.
    pub fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.writer.write_all(b"get ")?;
        self.writer.write_all(key)?;
        self.writer.write_all(b"\r\n")?;
        self.writer.flush()?;
        self.read_line("get")?;
        if self.line == b"END" {
            return Ok(None);
        }
        // VALUE <key> <flags> <bytes>
        let len = {
            let mut fields = self.line.split(|b| *b == b' ');
            match (fields.next(), fields.next(), fields.next(), fields.next()) {
                (Some(b"VALUE"), Some(k), Some(_flags), Some(n)) if k == key => {
                    std::str::from_utf8(n)
                        .ok()
                        .and_then(|n| n.parse::<usize>().ok())
                }
                _ => None,
            }
        };
        let Some(len) = len.filter(|n| *n <= MAX_VALUE_BYTES) else {
            return self.unexpected("get");
        };
        // The data, then its own line end.
        let mut value = vec![0u8; len + 2];
        self.reader
            .read_exact(&mut value)
            .context("reading a value from memcached")?;
        if !value.ends_with(b"\r\n") {
            bail!("memcached sent a value of {len} bytes without a line end after it");
        }
        value.truncate(len);
        self.read_line("get")?;
        if self.line != b"END" {
            return self.unexpected("get");
        }
        Ok(Some(value))
    }

    /// Stores `value` under `key`, with no flags and no expiry.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        check_key(key)?;
        self.writer.write_all(b"set ")?;
        self.writer.write_all(key)?;
        write!(self.writer, " 0 0 {}\r\n", value.len())?;
        self.writer.write_all(value)?;
        self.writer.write_all(b"\r\n")?;
        self.writer.flush()?;
        self.read_line("set")?;
        if self.line == b"STORED" {
            Ok(())
        } else {
            self.unexpected("set")
        }
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&mut self, key: &[u8]) -> anyhow::Result<bool> {
        check_key(key)?;
        self.writer.write_all(b"delete ")?;
        self.writer.write_all(key)?;
        self.writer.write_all(b"\r\n")?;
        self.writer.flush()?;
        self.read_line("delete")?;
        match self.line.as_slice() {
            b"DELETED" => Ok(true),
            b"NOT_FOUND" => Ok(false),
            _ => self.unexpected("delete"),
        }
    }

    /// Reads one reply line into `self.line`, without its "\r\n".
    fn read_line(&mut self, request: &str) -> anyhow::Result<()> {
        self.line.clear();
        let n = (&mut self.reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut self.line)
            .with_context(|| format!("reading memcached's reply to {request}"))?;
        if n == 0 {
            bail!("memcached closed the connection instead of answering {request}");
        }
        if !self.line.ends_with(b"\r\n") {
            bail!(
                "memcached's reply to {request} is not a line of at most {MAX_LINE_BYTES} bytes: {:?}",
                String::from_utf8_lossy(&self.line)
            );
        }
        self.line.truncate(self.line.len() - 2);
        Ok(())
    }

    /// The error for a reply line that does not answer `request` as it should
    /// (including ERROR, CLIENT_ERROR ... and SERVER_ERROR ...).
    fn unexpected<T>(&self, request: &str) -> anyhow::Result<T> {
        let line = String::from_utf8_lossy(&self.line);
        if line == "ERROR" || line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR") {
            bail!("memcached refused {request}: {line}");
        }
        bail!("memcached answered {request} with an unexpected {line:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Commands;

    fn gone(pid: u32) -> bool {
        // SAFETY: signal 0 only checks whether the process exists.
        unsafe { libc::kill(pid as libc::pid_t, 0) != 0 }
    }

    #[test]
    fn keys_the_text_protocol_cannot_carry_are_refused() {
        assert!(check_key(b"obj/42").is_ok());
        assert!(check_key(&[b'k'; MAX_KEY_BYTES]).is_ok());
        for bad in [
            &b""[..],
            b"a b",
            b"a\r\nb",
            b"tab\t",
            b"\x7f",
            &[b'k'; MAX_KEY_BYTES + 1],
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_missing_program_names_its_package() {
        let why = program("bench-no-such-program", "some-package").unwrap_err();
        assert!(why.contains("apt-get install some-package"), "{why}");
    }

    #[test]
    fn redis_set_get_del() {
        if let Some(why) = RedisServer::unavailable() {
            eprintln!("skipped: Redis is not available ({why})");
            return;
        }
        let server = RedisServer::start(&None).expect("start Redis");
        assert!(server.version.contains("Redis"), "{}", server.version);
        let mut c = server.connect().expect("connect");
        let () = c.set("k1", b"v\r\n1".as_slice()).expect("set");
        let got: Option<Vec<u8>> = c.get("k1").expect("get");
        assert_eq!(got.as_deref(), Some(b"v\r\n1".as_slice()));
        let removed: u64 = c.del("k1").expect("del");
        assert_eq!(removed, 1);
        let got: Option<Vec<u8>> = c.get("k1").expect("get after del");
        assert_eq!(got, None);
        let save: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("save")
            .query(&mut c)
            .expect("config get");
        assert_eq!(save, ["save", ""]);
        drop(c);
        let pid = server.pid();
        drop(server);
        assert!(gone(pid), "Redis (pid {pid}) still runs after drop");
    }

    #[test]
    fn memcached_set_get_delete() {
        if let Some(why) = MemcachedServer::unavailable() {
            eprintln!("skipped: memcached is not available ({why})");
            return;
        }
        let server = MemcachedServer::start(&None).expect("start memcached");
        assert!(server.version.contains("memcached"), "{}", server.version);
        let mut c = server.connect().expect("connect");
        assert_eq!(c.get(b"absent").expect("get a miss"), None);
        c.set(b"k", b"hello").expect("set");
        assert_eq!(c.get(b"k").expect("get").as_deref(), Some(&b"hello"[..]));
        // Line ends and the protocol's own words inside a value.
        let tricky = b"a\r\nEND\r\nVALUE x 0 1\r\n\r\n";
        c.set(b"tricky", tricky).expect("set tricky");
        assert_eq!(
            c.get(b"tricky").expect("get tricky").as_deref(),
            Some(&tricky[..])
        );
        c.set(b"empty", b"").expect("set empty");
        assert_eq!(
            c.get(b"empty").expect("get empty").as_deref(),
            Some(&b""[..])
        );
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        c.set(b"big", &big).expect("set big");
        assert_eq!(c.get(b"big").expect("get big"), Some(big));
        assert!(c.delete(b"k").expect("delete"));
        assert!(!c.delete(b"k").expect("delete again"));
        assert_eq!(c.get(b"k").expect("get deleted"), None);
        // Refused before anything is sent: the connection stays usable.
        assert!(c.set(b"has space", b"x").is_err());
        assert!(c.get(&[b'k'; MAX_KEY_BYTES + 1]).is_err());
        // Refused by the server, which reads and drops the value.
        let too_big = vec![0u8; 2 * 1024 * 1024];
        let err = c
            .set(b"huge", &too_big)
            .expect_err("over the item size limit");
        assert!(format!("{err}").contains("SERVER_ERROR"), "{err}");
        assert_eq!(
            c.get(b"tricky").expect("still usable").as_deref(),
            Some(&tricky[..])
        );
        drop(c);
        let pid = server.pid();
        drop(server);
        assert!(gone(pid), "memcached (pid {pid}) still runs after drop");
    }
}
