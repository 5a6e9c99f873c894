//! The isolation levels' cases run on Aqueduct and on a real PostgreSQL 15,
//! with the same interleaving of two sessions: each case's outcome — what
//! its reads returned, which transactions committed and which failed with
//! which SQLSTATE, and the table afterwards — must be the same. Where
//! PostgreSQL blocks a statement on a row lock, the runner waits until the
//! server reports the session waiting (Aqueduct's lock table, PostgreSQL's
//! `pg_stat_activity`) or the statement has finished, then goes on.
//!
//! The outcome records how each transaction ended, not at which statement
//! it failed: a SERIALIZABLE conflict fails at `COMMIT` here and may fail at
//! the `UPDATE` on PostgreSQL, and the victim of a deadlock may differ.

use crate::common;

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_sql::{Engine, Outcome, Session};
use common::engine;
use common::postgres::Postgres;

/// A statement's result: its rows as text, or its SQLSTATE.
type Answer = Result<Vec<String>, String>;

/// What a session runs on.
enum Conn {
    Aqueduct(Box<Session>),
    Postgres(Box<postgres::Client>),
}

impl Conn {
    fn run(&mut self, sql: &str) -> Answer {
        match self {
            Conn::Aqueduct(s) => match s.execute(sql).pop().unwrap() {
                Ok(Outcome::Rows { rows, .. }) => Ok(rows
                    .iter()
                    .map(|r| {
                        r.iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join("|")
                    })
                    .collect()),
                Ok(_) => Ok(vec![]),
                Err(e) => Err(e.code.to_string()),
            },
            Conn::Postgres(c) => match c.simple_query(sql) {
                Ok(messages) => Ok(messages
                    .iter()
                    .filter_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(r) => Some(
                            (0..r.len())
                                .map(|i| r.get(i).unwrap_or("NULL").to_string())
                                .collect::<Vec<_>>()
                                .join("|"),
                        ),
                        _ => None,
                    })
                    .collect()),
                Err(e) => Err(e
                    .code()
                    .map(|c| c.code().to_string())
                    .unwrap_or_else(|| format!("client error: {e}"))),
            },
        }
    }
}

/// A session on its own thread, so that a statement may block.
struct Client {
    tx: Sender<String>,
    rx: Receiver<Answer>,
}

impl Client {
    fn new(mut conn: Conn) -> Client {
        let (tx, commands) = mpsc::channel::<String>();
        let (answers, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for sql in commands {
                if answers.send(conn.run(&sql)).is_err() {
                    break;
                }
            }
        });
        Client { tx, rx }
    }
}

/// One server under test.
trait Server {
    fn conn(&self) -> Conn;
    /// How many sessions wait for a row lock.
    fn waiting(&self) -> usize;
}

/// An engine and the directory of its log (kept while it runs).
struct AqueductServer(Arc<Engine>, #[allow(dead_code)] tempfile::TempDir);

impl Server for AqueductServer {
    fn conn(&self) -> Conn {
        Conn::Aqueduct(Box::new(self.0.session()))
    }
    fn waiting(&self) -> usize {
        self.0.database().locks.waiters()
    }
}

struct PostgresServer(Postgres, std::sync::Mutex<postgres::Client>);

impl Server for PostgresServer {
    fn conn(&self) -> Conn {
        Conn::Postgres(Box::new(self.0.connect()))
    }
    fn waiting(&self) -> usize {
        let n: i64 = self
            .1
            .lock()
            .unwrap()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get(0);
        n as usize
    }
}

/// A step of a case: session `0` or `1` runs the statement.
struct Step(usize, &'static str);

struct Case {
    name: String,
    setup: &'static [&'static str],
    steps: Vec<Step>,
    /// Read at the end, in a new session.
    check: &'static str,
}

const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `case` on `server`: the outcome as lines of text.
fn run_case(server: &dyn Server, case: &Case) -> Vec<String> {
    let mut setup = server.conn();
    for sql in case.setup {
        setup.run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let clients = [Client::new(server.conn()), Client::new(server.conn())];
    // A statement sent and not answered yet, per session.
    let mut pending: [Option<&'static str>; 2] = [None, None];
    let mut outcome = Vec::new();
    let mut ended: [Option<String>; 2] = [None, None];
    let mut record =
        |session: usize, sql: &str, answer: Answer, ended: &mut [Option<String>; 2]| {
            let verb = sql.split_whitespace().next().unwrap_or("").to_uppercase();
            match (&answer, verb.as_str()) {
                (Ok(rows), "SELECT") => outcome.push(format!("{session} read {}", rows.join(","))),
                (Ok(_), "COMMIT") if ended[session].is_none() => {
                    ended[session] = Some("committed".into())
                }
                (Err(code), _) if ended[session].is_none() => {
                    ended[session] = Some(format!("failed {code}"))
                }
                _ => {}
            }
        };
    for Step(session, sql) in &case.steps {
        let session = *session;
        // A session's next statement waits for its previous one.
        if let Some(prev) = pending[session].take() {
            let answer = clients[session]
                .rx
                .recv_timeout(STEP_TIMEOUT)
                .expect("an answer");
            record(session, prev, answer, &mut ended);
        }
        // A failed transaction's statements are not sent (PostgreSQL would
        // answer 25P02); its COMMIT/ROLLBACK still ends it.
        let sql = if ended[session]
            .as_deref()
            .is_some_and(|e| e.starts_with("failed"))
            && !sql.eq_ignore_ascii_case("COMMIT")
            && !sql.eq_ignore_ascii_case("ROLLBACK")
        {
            continue;
        } else {
            *sql
        };
        clients[session].tx.send(sql.to_string()).unwrap();
        // Answered, or waiting for a lock: go on either way.
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            match clients[session].rx.try_recv() {
                Ok(answer) => {
                    record(session, sql, answer, &mut ended);
                    break;
                }
                Err(mpsc::TryRecvError::Empty) => {
                    if server.waiting() > 0 {
                        pending[session] = Some(sql);
                        break;
                    }
                    assert!(Instant::now() < deadline, "{}: step {sql} hangs", case.name);
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    for (session, prev) in pending.iter_mut().enumerate() {
        if let Some(prev) = prev.take() {
            let answer = clients[session]
                .rx
                .recv_timeout(STEP_TIMEOUT)
                .expect("an answer");
            record(session, prev, answer, &mut ended);
        }
    }
    let mut ends: Vec<String> = ended.into_iter().map(|e| e.unwrap_or_default()).collect();
    // Which of two symmetric transactions failed may differ: compare them
    // as a multiset where the case says so.
    if case.name.starts_with("deadlock") || case.name.starts_with("write skew serializable") {
        ends.sort();
    }
    outcome.extend(ends.into_iter().map(|e| format!("ended {e}")));
    let mut check = server.conn();
    outcome.push(format!(
        "after: {}",
        check.run(case.check).unwrap().join(",")
    ));
    outcome
}

const ACCOUNTS: &[&str] = &[
    "DROP TABLE IF EXISTS acc",
    "CREATE TABLE acc (id int PRIMARY KEY, bal int NOT NULL)",
    "INSERT INTO acc VALUES (1, 100), (2, 100)",
];

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for level in ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"] {
        let begin: &'static str =
            Box::leak(format!("BEGIN ISOLATION LEVEL {level}").into_boxed_str());
        cases.push(Case {
            name: format!("lost update {level}"),
            setup: ACCOUNTS,
            steps: vec![
                Step(0, begin),
                Step(1, begin),
                Step(0, "SELECT bal FROM acc WHERE id = 1"),
                Step(1, "SELECT bal FROM acc WHERE id = 1"),
                Step(0, "UPDATE acc SET bal = bal + 10 WHERE id = 1"),
                Step(1, "UPDATE acc SET bal = bal + 10 WHERE id = 1"),
                Step(0, "COMMIT"),
                Step(1, "COMMIT"),
            ],
            check: "SELECT bal FROM acc ORDER BY id",
        });
        // SERIALIZABLE here reads the latest committed rows and fails a
        // transaction whose reads changed (`docs/sql.md`), where
        // PostgreSQL reads a snapshot and commits it: a known difference,
        // left out of the comparison.
        if level != "SERIALIZABLE" {
            cases.push(Case {
                name: format!("non-repeatable read {level}"),
                setup: ACCOUNTS,
                steps: vec![
                    Step(0, begin),
                    Step(0, "SELECT bal FROM acc WHERE id = 1"),
                    Step(1, "UPDATE acc SET bal = 50 WHERE id = 1"),
                    Step(0, "SELECT bal FROM acc WHERE id = 1"),
                    Step(0, "COMMIT"),
                ],
                check: "SELECT bal FROM acc ORDER BY id",
            });
        }
        cases.push(Case {
            name: format!("write skew {}", level.to_lowercase()),
            setup: ACCOUNTS,
            steps: vec![
                Step(0, begin),
                Step(1, begin),
                Step(0, "SELECT sum(bal) FROM acc"),
                Step(1, "SELECT sum(bal) FROM acc"),
                Step(0, "UPDATE acc SET bal = bal - 150 WHERE id = 1"),
                Step(1, "UPDATE acc SET bal = bal - 150 WHERE id = 2"),
                Step(0, "COMMIT"),
                Step(1, "COMMIT"),
            ],
            check: "SELECT count(*) FROM acc WHERE bal < 0",
        });
    }
    for level in ["READ COMMITTED", "REPEATABLE READ"] {
        let begin: &'static str =
            Box::leak(format!("BEGIN ISOLATION LEVEL {level}").into_boxed_str());
        cases.push(Case {
            name: format!("deadlock {level}"),
            setup: ACCOUNTS,
            steps: vec![
                Step(0, begin),
                Step(1, begin),
                Step(0, "UPDATE acc SET bal = bal + 1 WHERE id = 1"),
                Step(1, "UPDATE acc SET bal = bal + 1 WHERE id = 2"),
                Step(0, "UPDATE acc SET bal = bal + 1 WHERE id = 2"),
                Step(1, "UPDATE acc SET bal = bal + 1 WHERE id = 1"),
                Step(1, "COMMIT"),
                Step(0, "COMMIT"),
            ],
            check: "SELECT sum(bal) FROM acc",
        });
    }
    cases.push(Case {
        name: "skip locked READ COMMITTED".into(),
        setup: &[
            "DROP TABLE IF EXISTS jobs",
            "CREATE TABLE jobs (id int PRIMARY KEY, done boolean NOT NULL)",
            "INSERT INTO jobs VALUES (1, false), (2, false), (3, false)",
        ],
        steps: vec![
            Step(0, "BEGIN ISOLATION LEVEL READ COMMITTED"),
            Step(1, "BEGIN ISOLATION LEVEL READ COMMITTED"),
            Step(
                0,
                "SELECT id FROM jobs WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
            ),
            Step(
                1,
                "SELECT id FROM jobs WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
            ),
            Step(0, "UPDATE jobs SET done = true WHERE id = 1"),
            Step(1, "UPDATE jobs SET done = true WHERE id = 2"),
            Step(0, "COMMIT"),
            Step(1, "COMMIT"),
        ],
        check: "SELECT id FROM jobs WHERE NOT done ORDER BY id",
    });
    cases.push(Case {
        name: "parent under a concurrent child READ COMMITTED".into(),
        setup: &[
            "DROP TABLE IF EXISTS child",
            "DROP TABLE IF EXISTS parent",
            "CREATE TABLE parent (id int PRIMARY KEY)",
            "CREATE TABLE child (id int PRIMARY KEY, p int REFERENCES parent)",
            "INSERT INTO parent VALUES (1)",
        ],
        steps: vec![
            Step(0, "BEGIN ISOLATION LEVEL READ COMMITTED"),
            Step(1, "BEGIN ISOLATION LEVEL READ COMMITTED"),
            Step(0, "INSERT INTO child VALUES (1, 1)"),
            Step(1, "DELETE FROM parent WHERE id = 1"),
            Step(0, "COMMIT"),
            Step(1, "COMMIT"),
        ],
        check: "SELECT count(*) FROM parent",
    });
    cases
}

#[test]
fn isolation_cases_end_as_on_postgres() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let monitor = std::sync::Mutex::new(pg.connect());
    let postgres = PostgresServer(pg, monitor);
    let mut differences = Vec::new();
    for case in cases() {
        let dir = tempfile::tempdir().unwrap();
        let aqueduct = AqueductServer(engine(dir.path()), dir);
        let ours = run_case(&aqueduct, &case);
        let theirs = run_case(&postgres, &case);
        if ours != theirs {
            differences.push(format!(
                "{}:\n  aqueduct:   {ours:?}\n  postgresql: {theirs:?}",
                case.name
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} cases end differently from PostgreSQL:\n{}",
        differences.len(),
        differences.join("\n")
    );
}
