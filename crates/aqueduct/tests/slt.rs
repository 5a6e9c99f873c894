//! The sqllogictest corpus in `tests/slt/` against the running server.
//!
//! For each `tests/slt/*.slt` file this starts the built `aqueduct serve` on a
//! fresh data directory and free loopback ports, runs the file's records over
//! the PostgreSQL wire protocol (tokio-postgres, simple query protocol), then
//! kills the server by its PID. Every failing record is reported with its file
//! and line; the test fails if any record failed.
//!
//! With `SLT_POSTGRES_URL` set to a libpq-style connection string (for example
//! `host=127.0.0.1 port=5432 user=postgres`), the same corpus runs against
//! that PostgreSQL instead, each file in a database of its own that is created
//! and dropped around it (C collation, sessions in UTC, as Aqueduct): the
//! expected results are PostgreSQL's (`scripts/slt-postgres` does this with a
//! throwaway PostgreSQL 15).
//! `SLT_FILTER=text` runs only the files whose name contains `text`.
//! `SLT_REWRITE=1` (with `SLT_POSTGRES_URL` only) writes PostgreSQL's results
//! into the files in place of the expected ones, for writing new records;
//! review the diff before keeping it.
//!
//! Column type letters are checked: `I` for integer types, `R` for float and
//! numeric, `T` for text types, `?` for any other (the types come from
//! describing each query over the extended protocol after running it).
//!
//! Records can be made engine-specific with `onlyif aqueduct` /
//! `skipif postgres` and so on; the corpus aims to need none.

use std::fmt;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqllogictest::{DBOutput, DefaultColumnType, Record};
use tempfile::TempDir;
use tokio::sync::Semaphore;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// How long one server start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// What the server logs once its PostgreSQL listener accepts connections.
const LISTENING: &str = "PostgreSQL listener serving";
/// Starts tried on fresh ports when the server exits during start-up (a port
/// taken between choosing it and binding it).
const START_ATTEMPTS: usize = 3;
/// Files run at the same time (each against its own server or database).
const PARALLEL_FILES: usize = 4;
/// How long one file may take, server start included.
const FILE_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// The database under test, as sqllogictest sees it.

/// An error from the server (with its SQLSTATE) or from the connection.
#[derive(Debug)]
struct SltError {
    message: String,
    sqlstate: Option<String>,
}

impl fmt::Display for SltError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sqlstate {
            Some(code) => write!(f, "{} (SQLSTATE {code})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SltError {}

impl From<tokio_postgres::Error> for SltError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => SltError {
                message: db.message().to_string(),
                sqlstate: Some(db.code().code().to_string()),
            },
            None => SltError {
                message: e.to_string(),
                sqlstate: None,
            },
        }
    }
}

/// One connection; the connection task runs on the test's runtime.
struct PgDb {
    client: Client,
    engine: &'static str,
}

impl PgDb {
    async fn connect(config: &str, engine: &'static str) -> Result<PgDb, SltError> {
        let (client, connection) = tokio_postgres::connect(config, NoTls).await?;
        tokio::spawn(async move {
            // The connection ends with an error when the server is killed.
            let _ = connection.await;
        });
        Ok(PgDb { client, engine })
    }
}

/// A column's sqllogictest type letter: `I` integers, `R` floating point and
/// numeric, `T` text; anything else (booleans, dates, ...) is `?`.
fn column_type(ty: &Type) -> DefaultColumnType {
    match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 => DefaultColumnType::Integer,
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => DefaultColumnType::FloatingPoint,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

/// A value as sqllogictest expects it: NULL as `NULL`, the empty string as
/// `(empty)`, anything else in PostgreSQL's text form.
fn render(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_string(),
        Some("") => "(empty)".to_string(),
        Some(text) => text.to_string(),
    }
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for PgDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let messages = self.client.simple_query(sql).await?;
        // A statement that describes rows (even none) is a query; of a string
        // of several statements, the last one that describes rows counts.
        let mut width: Option<usize> = None;
        let mut rows = Vec::new();
        let mut count = 0;
        for message in messages {
            match message {
                SimpleQueryMessage::RowDescription(columns) => {
                    width = Some(columns.len());
                    rows.clear();
                }
                SimpleQueryMessage::Row(row) => {
                    width = Some(row.len());
                    rows.push((0..row.len()).map(|i| render(row.get(i))).collect());
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        let Some(width) = width else {
            return Ok(DBOutput::StatementComplete(count));
        };
        // The simple query protocol sends no column types: describe the
        // statement (without running it again) over the extended protocol.
        let types = match self.client.prepare(sql).await {
            Ok(statement) if statement.columns().len() == width => statement
                .columns()
                .iter()
                .map(|column| column_type(column.type_()))
                .collect(),
            _ => vec![DefaultColumnType::Any; width],
        };
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        self.engine
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await
    }

    fn error_sql_state(err: &SltError) -> Option<String> {
        err.sqlstate.clone()
    }
}

/// Runs every record of one file (after a failure too, so that one run
/// reports them all); returns the failures, each naming file and line.
async fn run_records(path: &Path, config: String, engine: &'static str) -> Vec<String> {
    let name = display_name(path);
    let parsed = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|script| {
            sqllogictest::parse_with_name::<DefaultColumnType>(&script, name.as_str())
                .map_err(|e| e.to_string())
        });
    let records = match parsed {
        Ok(records) => records,
        Err(e) => return vec![format!("{name}: cannot parse: {e}")],
    };
    let mut runner = sqllogictest::Runner::new(move || {
        let config = config.clone();
        async move { PgDb::connect(&config, engine).await }
    });
    runner.add_label(engine);
    runner.with_column_validator(sqllogictest::strict_column_validator);
    if engine == "postgres" && std::env::var_os("SLT_REWRITE").is_some() {
        let rewrite = runner
            .update_test_file(
                path,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::strict_column_validator,
            )
            .await
            .map_err(|e| e.to_string());
        runner.shutdown_async().await;
        return match rewrite {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("{name}: rewriting: {e}")],
        };
    }
    let mut failures = Vec::new();
    for record in records {
        if let Record::Halt { .. } = record {
            break;
        }
        if let Err(e) = runner.run_async(record).await {
            failures.push(e.display(false).to_string());
        }
    }
    runner.shutdown_async().await;
    failures
}

// ---------------------------------------------------------------------------
// The server.

/// A running `aqueduct serve` on its own data directory; killed on drop.
struct Server {
    child: Child,
    pg_port: u16,
    dir: TempDir,
}

/// A TCP port free on 127.0.0.1 right now (the kernel picks it).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    listener.local_addr().expect("local address").port()
}

impl Server {
    /// Starts the server and waits until it accepts a PostgreSQL connection;
    /// retries on fresh ports if it exits during start-up.
    async fn start() -> Result<Server, String> {
        let mut last_error = String::new();
        for attempt in 1..=START_ATTEMPTS {
            match Server::try_start().await {
                Ok(server) => return Ok(server),
                Err(e) => last_error = format!("attempt {attempt}: {e}"),
            }
        }
        Err(last_error)
    }

    fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=slt dbname=slt connect_timeout=5",
            self.pg_port
        )
    }

    async fn try_start() -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let pg_port = free_port();
        let mut http_port = free_port();
        while http_port == pg_port {
            http_port = free_port();
        }
        let log = File::create(dir.path().join("server.log")).map_err(|e| e.to_string())?;
        let mut log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_aqueduct"));
        // The settings come from the flags alone, not from AQUEDUCT_*
        // variables that happen to be set.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AQUEDUCT_") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .env("RUST_LOG", "info")
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--pg-addr")
            .arg(format!("127.0.0.1:{pg_port}"))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{http_port}"))
            .args(["--fsync", "never"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", env!("CARGO_BIN_EXE_aqueduct")))?;
        // The server's log goes to the file through this thread, which says
        // when the listener is up (or, by closing the channel, that the
        // server exited first).
        let stderr = child.stderr.take().expect("piped stderr");
        let (listening, up) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let mut listening = Some(listening);
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log_err, "{line}");
                if line.contains(LISTENING) {
                    if let Some(tx) = listening.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        let mut server = Server {
            child,
            pg_port,
            dir,
        };
        let waited = tokio::task::spawn_blocking(move || up.recv_timeout(START_TIMEOUT))
            .await
            .map_err(|e| e.to_string())?;
        match waited {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = server.child.wait().map_err(|e| e.to_string())?;
                return Err(format!(
                    "the server exited during start-up ({status}):\n{}",
                    server.log()
                ));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "the server did not start listening within {START_TIMEOUT:?}:\n{}",
                    server.log()
                ));
            }
        }
        let config = server.config();
        let connect = tokio_postgres::connect(&config, NoTls);
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok((client, connection))) => {
                drop(client);
                let _ = connection.await;
                Ok(server)
            }
            _ => Err(format!(
                "the server listens but refused a connection:\n{}",
                server.log()
            )),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Kills the server by its PID and reaps it; true if it was still running
    /// (it should be: an exit before that is a crash).
    fn stop(&mut self) -> bool {
        let running = matches!(self.child.try_wait(), Ok(None));
        let _ = self.child.kill();
        let _ = self.child.wait();
        running
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// The targets: a server per file, or a database per file on PostgreSQL.

async fn run_on_aqueduct(path: PathBuf) -> Vec<String> {
    let name = display_name(&path);
    let mut server = match Server::start().await {
        Ok(server) => server,
        Err(e) => return vec![format!("{name}: cannot start aqueduct: {e}")],
    };
    let mut failures = run_records(&path, server.config(), "aqueduct").await;
    if !server.stop() {
        failures.push(format!(
            "{name}: the server was no longer running at the end of the file:\n{}",
            server.log()
        ));
    }
    failures
}

async fn run_on_postgres(path: PathBuf, base: String) -> Vec<String> {
    let name = display_name(&path);
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let database: String = format!("slt_{stem}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let admin = match PgDb::connect(&base, "postgres").await {
        Ok(db) => db,
        Err(e) => return vec![format!("{name}: cannot connect to PostgreSQL: {e}")],
    };
    // Text compares byte-wise (C collation) and times show in UTC, as in
    // Aqueduct, whatever the cluster's defaults are.
    let recreate = [
        format!("DROP DATABASE IF EXISTS {database}"),
        format!(
            "CREATE DATABASE {database} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
        ),
    ];
    for sql in recreate {
        if let Err(e) = admin.client.simple_query(&sql).await {
            return vec![format!("{name}: {sql}: {}", SltError::from(e))];
        }
    }
    let config = format!("{base} dbname={database} options='-c TimeZone=UTC'");
    let failures = run_records(&path, config, "postgres").await;
    if let Err(e) = admin
        .client
        .simple_query(&format!("DROP DATABASE IF EXISTS {database}"))
        .await
    {
        eprintln!(
            "warning: dropping database {database}: {}",
            SltError::from(e)
        );
    }
    failures
}

/// `tests/slt/NAME.slt`, as a path from the repository root.
fn display_name(path: &Path) -> String {
    format!(
        "tests/slt/{}",
        path.file_name().unwrap_or_default().to_string_lossy()
    )
}

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/slt");
    let filter = std::env::var("SLT_FILTER").unwrap_or_default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(&filter))
        .collect();
    files.sort();
    files
}

#[test]
fn sqllogictest_corpus() {
    let files = corpus();
    assert!(!files.is_empty(), "no .slt files in tests/slt");
    let postgres = std::env::var("SLT_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty());
    let target = if postgres.is_some() {
        "PostgreSQL"
    } else {
        "aqueduct"
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let results = runtime.block_on(async {
        let slots = Arc::new(Semaphore::new(PARALLEL_FILES));
        let tasks: Vec<_> = files
            .iter()
            .map(|path| {
                let path = path.clone();
                let postgres = postgres.clone();
                let slots = Arc::clone(&slots);
                tokio::spawn(async move {
                    let _slot = slots.acquire_owned().await.expect("semaphore");
                    let t0 = Instant::now();
                    let run = async {
                        match postgres {
                            Some(base) => run_on_postgres(path.clone(), base).await,
                            None => run_on_aqueduct(path.clone()).await,
                        }
                    };
                    // Dropping the run on timeout kills its server.
                    let failures = tokio::time::timeout(FILE_TIMEOUT, run)
                        .await
                        .unwrap_or_else(|_| {
                            vec![format!(
                                "{}: did not finish within {FILE_TIMEOUT:?}",
                                display_name(&path)
                            )]
                        });
                    (path, failures, t0.elapsed())
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("file task panicked"));
        }
        results
    });
    let mut failed = 0;
    for (path, failures, elapsed) in &results {
        let name = path.file_name().unwrap().to_string_lossy();
        if failures.is_empty() {
            eprintln!("slt {name}: ok ({elapsed:.1?})");
        } else {
            eprintln!("slt {name}: {} FAILED ({elapsed:.1?})", failures.len());
            for failure in failures {
                eprintln!("{failure}");
            }
            failed += failures.len();
        }
    }
    eprintln!(
        "slt against {target}: {} files in {:.1?}",
        results.len(),
        started.elapsed()
    );
    assert!(
        failed == 0,
        "{failed} sqllogictest record(s) failed against {target} (listed above)"
    );
}
