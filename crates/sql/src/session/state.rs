//! A session's state: its transaction, settings, clock readings, bounds
//! and interrupt handle, and the statement frame every statement runs in.
//!
//! Transaction states follow PostgreSQL's `ReadyForQuery` status: idle,
//! in a transaction block, or in a failed block that only `ROLLBACK` (or
//! `COMMIT`, which then rolls back) ends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_tables::Txn;
use aqueduct_values::{DataType, Value};

use crate::consistency::Consistency;
use crate::engine::{Clock, Engine};
use crate::roles::{Principal, ViewRelationsCache};
use aqueduct_plan::plan::{Column, Outcome, StatementTime};

/// Counts a statement in the running gauge until dropped (also when it
/// unwinds).
pub(crate) struct Running<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Running<'a> {
    pub(crate) fn start(gauge: &'a std::sync::atomic::AtomicU64) -> Running<'a> {
        gauge.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Running(gauge)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How long, and with how much memory, each statement may run.
pub(crate) type StatementBounds = aqueduct_expr::interrupt::Bounds;

/// The settings every read consults, parsed once when they change rather
/// than from their text at each read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadSettings {
    /// `aqueduct.upquery_timeout`.
    pub(crate) upquery_timeout: std::time::Duration,
    /// `aqueduct.upquery_timeout_action`.
    pub(crate) on_upquery_timeout: aqueduct_views::views::OnTimeout,
    /// `aqueduct.consistency_timeout`.
    pub(crate) consistency_timeout: std::time::Duration,
    /// `aqueduct.consistency_timeout_action` is `compute`.
    pub(crate) compute_on_consistency_timeout: bool,
    /// `aqueduct.after_lsn`.
    pub(crate) after_lsn: Lsn,
    /// `aqueduct.auto_views` is `on`.
    pub(crate) auto_views: bool,
}

impl ReadSettings {
    fn of(settings: &BTreeMap<String, String>) -> ReadSettings {
        let get = |name: &str| settings.get(name).map(String::as_str).unwrap_or("");
        ReadSettings {
            upquery_timeout: parse_duration(get("aqueduct.upquery_timeout"))
                .unwrap_or(aqueduct_views::views::DEFAULT_UPQUERY_TIMEOUT),
            on_upquery_timeout: match get("aqueduct.upquery_timeout_action") {
                "compute" => aqueduct_views::views::OnTimeout::Compute,
                _ => aqueduct_views::views::OnTimeout::Error,
            },
            consistency_timeout: parse_duration(get("aqueduct.consistency_timeout"))
                .unwrap_or(aqueduct_views::views::VIEW_WAIT_TIMEOUT),
            compute_on_consistency_timeout: get("aqueduct.consistency_timeout_action") == "compute",
            after_lsn: get("aqueduct.after_lsn").trim().parse::<Lsn>().unwrap_or(0),
            auto_views: get("aqueduct.auto_views") == "on",
        }
    }
}

pub use crate::txn_status::TxnStatus;

/// Settings a client may read with `SHOW` and change with `SET`.
pub(crate) const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("application_name", ""),
    // Sent by drivers and pg_dump at connect; they change nothing here
    // (see docs/sql.md).
    ("bytea_output", "hex"),
    ("check_function_bodies", "on"),
    ("client_min_messages", "notice"),
    ("default_table_access_method", "heap"),
    ("default_tablespace", ""),
    ("idle_in_transaction_session_timeout", "0"),
    ("lock_timeout", "0"),
    ("row_security", "on"),
    ("synchronous_commit", "on"),
    ("xmloption", "content"),
    ("synchronize_seqscans", "on"),
    ("quote_all_identifiers", "off"),
    ("client_encoding", "UTF8"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "serializable"),
    ("extra_float_digits", "1"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "off"),
    // The most columns of an index or keys of a foreign key
    // (aqueduct_plan::limits::MAX_INDEX_KEYS); drivers read it.
    ("max_index_keys", "32"),
    ("search_path", "public"),
    ("server_encoding", "UTF8"),
    ("server_version", "15.0 (Aqueduct)"),
    ("server_version_num", "150000"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("aqueduct.statement_memory_limit", "1GB"),
    ("timezone", "UTC"),
    ("transaction_isolation", "serializable"),
    ("aqueduct.last_lsn", "0"),
    ("aqueduct.auto_views", "on"),
    ("aqueduct.upquery_timeout", "5s"),
    ("aqueduct.upquery_timeout_action", "error"),
    ("aqueduct.consistency", "linearizable"),
    ("aqueduct.after_lsn", "0"),
    ("aqueduct.consistency_timeout", "30s"),
    ("aqueduct.consistency_timeout_action", "error"),
    ("aqueduct.release", "0"),
    // When `CALL` of a chain returns: after its first hop ("first_hop",
    // Lynx' default) or once every hop committed ("completion").
    ("aqueduct.chain_return", "first_hop"),
    // The application's own user behind this session's writes, for
    // publications' causal order (docs/publications.md, section 2);
    // empty: the session's role.
    ("aqueduct.acting_user", ""),
    // The source transactions on other servers this session's writes
    // derive from, "<server_id>:<lsn>, ..." (a decorator's; docs/
    // publications.md, section 8); empty: none.
    ("aqueduct.origin", ""),
];

/// Settings clients may not change.
pub(crate) const READ_ONLY_SETTINGS: &[&str] = &[
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "is_superuser",
    "max_index_keys",
    "aqueduct.last_lsn",
    "aqueduct.release",
];

pub struct Session {
    pub(crate) engine: Arc<Engine>,
    pub(crate) txn: Option<Txn>,
    /// A REPEATABLE READ transaction's snapshot, from its first statement.
    pub(crate) snapshot: Option<Arc<aqueduct_tables::Catalog>>,
    pub(crate) failed: bool,
    /// `SAVEPOINT`s of the open transaction, oldest first.
    pub(crate) savepoints: Vec<(String, aqueduct_tables::TxnSavepoint)>,
    /// What this session's `nextval` calls returned (`currval`, `lastval`).
    pub(crate) sequences: aqueduct_tables::SessionSequences,
    pub(crate) settings: BTreeMap<String, String>,
    pub(crate) last_lsn: Lsn,
    pub(crate) release_read_id: Option<u64>,
    /// `aqueduct.consistency`, parsed once when set (every read asks).
    pub(crate) consistency: Consistency,
    /// The clock's reading for the running statement (`now()`).
    pub(crate) time: StatementTime,
    /// The clock's reading when the transaction block began.
    pub(crate) txn_began_micros: Option<i64>,
    /// The engine's clock when the session began.
    pub(crate) clock: Arc<dyn Clock>,
    /// `statement_timeout` and `aqueduct.statement_memory_limit`, parsed
    /// once when set (every statement asks).
    pub(crate) bounds: StatementBounds,
    /// The settings reads consult, parsed once when set.
    pub(crate) reads: ReadSettings,
    /// Stops the running statement (cancel, timeout, memory, shutdown).
    pub(crate) interrupt: aqueduct_expr::interrupt::Interrupt,
    /// Its entry among the server's backends, once a client's connection
    /// holds it (`backends.rs`).
    pub(crate) backend: Option<Arc<crate::backends::Backend>>,
    /// The transaction block (by when it began) and its number, once
    /// `txid_current()` asked.
    pub(crate) xid: std::cell::Cell<Option<(i64, i64)>>,
    /// The settings before the transaction block's first `SET`, put back
    /// if it does not commit.
    pub(crate) settings_before_block: Option<BTreeMap<String, String>>,
    /// Each name `SET LOCAL` changed in the block, with its value before
    /// (`None`: it had none), put back when the block ends.
    pub(crate) local_settings: BTreeMap<String, Option<String>>,
    /// Who the session runs as (`roles.rs`).
    pub(crate) principal: Principal,
    pub(crate) view_relations_cache: ViewRelationsCache,
    /// The prepared statements whose privilege check passed (`roles.rs`).
    pub(crate) authorized: crate::roles::AuthorizedPrepared,
    /// A `COPY ... FROM STDIN` waiting for its data (`copy.rs`).
    pub(crate) copy_in: Option<CopyIn>,
    /// Statements `PREPARE name AS ...` made, by name: their text and
    /// declared parameter types (prepared again by each `EXECUTE`, so
    /// they bind against the catalog then).
    pub(crate) sql_prepared: std::collections::HashMap<String, (String, Vec<Option<DataType>>)>,
    /// The transaction block the group's leader runs for this session
    /// (`forward.rs`).
    pub(crate) remote: Option<RemoteBlock>,
    /// Chains this session called that had not completed when `CALL`
    /// returned (`chains.rs`): `session` reads and `WAIT FOR CHAINS`
    /// wait for them.
    pub(crate) chain_tickets: Vec<Arc<crate::chains::hop::Ticket>>,
    /// What the open block ran, while it may move to the leader.
    pub(crate) movable: Option<Movable>,
}

/// A transaction block that runs on the leader.
pub(crate) struct RemoteBlock {
    /// The leader's HTTP address, where the block is held.
    pub(crate) leader: String,
    pub(crate) id: u64,
    pub(crate) status: TxnStatus,
}

/// What a local transaction block on a member that does not lead ran, to
/// be run again on the leader at its first write.
pub(crate) enum Movable {
    Recording {
        statements: Vec<(crate::forward::Forwarded, Result<Outcome, SqlError>)>,
        rows: usize,
    },
    /// It ran more than `MAX_MOVABLE_STATEMENTS` or
    /// `MAX_MOVABLE_ROWS` (`crate::forward`): it cannot move.
    TooLong,
}

impl Session {
    pub(crate) fn new(engine: Arc<Engine>) -> Session {
        let mut settings: BTreeMap<String, String> = DEFAULT_SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let consistency = engine.default_consistency();
        settings.insert("aqueduct.consistency".into(), consistency.as_str().into());
        if let Some(timeout) = engine.default_statement_timeout() {
            settings.insert("statement_timeout".into(), timeout);
        }
        let interrupt = engine.new_interrupt();
        let clock = engine.clock();
        Session {
            interrupt,
            backend: None,
            xid: Default::default(),
            settings_before_block: None,
            local_settings: BTreeMap::new(),
            engine,
            txn: None,
            snapshot: None,
            failed: false,
            savepoints: Vec::new(),
            sequences: aqueduct_tables::SessionSequences::default(),
            settings,
            last_lsn: 0,
            release_read_id: None,
            consistency,
            time: StatementTime {
                transaction_micros: 0,
                statement_micros: 0,
            },
            txn_began_micros: None,
            remote: None,
            chain_tickets: Vec::new(),
            movable: None,
            principal: Default::default(),
            view_relations_cache: Default::default(),
            authorized: Default::default(),
            sql_prepared: Default::default(),
            copy_in: None,
            bounds: StatementBounds::default(),
            reads: ReadSettings::of(&BTreeMap::new()),
            clock,
        }
        .with_default_principal()
        .with_bounds()
    }

    /// Parses the statement bounds from the settings (when they change).
    pub(crate) fn with_bounds(mut self) -> Session {
        self.refresh_bounds();
        self
    }

    pub(crate) fn refresh_bounds(&mut self) {
        self.reads = ReadSettings::of(&self.settings);
        self.bounds = StatementBounds {
            timeout: self
                .settings
                .get("statement_timeout")
                .and_then(|v| parse_duration(v)),
            lock_timeout: self
                .settings
                .get("lock_timeout")
                .and_then(|v| parse_duration(v)),
            memory: self
                .settings
                .get("aqueduct.statement_memory_limit")
                .and_then(|v| aqueduct_plan::limits::parse_bytes(v))
                .filter(|&b| b > 0),
        };
    }

    pub(crate) fn with_default_principal(mut self) -> Session {
        self.set_principal(Principal::default());
        self
    }

    /// Makes this session the backend `pid` of a client connected from
    /// `client` to `server` (`pg_stat_activity`, `pg_backend_pid()`);
    /// `terminate` ends the connection (`pg_terminate_backend`).
    pub fn attach_backend(
        &mut self,
        pid: i32,
        application_name: &str,
        client: Option<std::net::SocketAddr>,
        server: Option<std::net::SocketAddr>,
        terminate: crate::backends::Terminate,
    ) {
        let backend = Arc::new(crate::backends::Backend::new(
            pid,
            self.principal.name.clone(),
            "aqueduct".into(),
            application_name.into(),
            client,
            server,
            self.clock.now_micros(),
            self.interrupt.clone(),
            terminate,
        ));
        self.engine.backends.attach(backend.clone());
        self.backend = Some(backend);
    }

    /// What the statement binds session functions to (`pg_backend_pid()`,
    /// `txid_current()`, ...).
    pub(crate) fn facts(&self) -> aqueduct_plan::plan::SessionFacts {
        let fresh = || {
            self.engine
                .next_xid
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        };
        let transaction_id = match (&self.txn, self.txn_began_micros) {
            (Some(_), Some(began)) => match self.xid.get() {
                Some((b, xid)) if b == began => xid,
                _ => {
                    let xid = fresh();
                    self.xid.set(Some((began, xid)));
                    xid
                }
            },
            _ => fresh(),
        };
        let elapsed = i64::try_from(self.engine.started.elapsed().as_micros()).unwrap_or(0);
        aqueduct_plan::plan::SessionFacts {
            backend_pid: self.backend_pid(),
            transaction_id,
            server_addr: self.backend.as_ref().and_then(|b| b.server),
            client_addr: self.backend.as_ref().and_then(|b| b.client),
            server_started_micros: self.clock.now_micros() - elapsed,
            signals: Some(self.engine.backends.clone()),
        }
    }

    /// Binds `st` against `catalog` with the session's settings, time and
    /// facts.
    pub(crate) fn bind(
        &self,
        catalog: &aqueduct_tables::Catalog,
        st: &sqlparser::ast::Statement,
        hints: &[Option<DataType>],
    ) -> Result<aqueduct_plan::plan::Bound, SqlError> {
        aqueduct_plan::bind::bind(catalog, st, hints, &self.settings, self.time, &self.facts())
    }

    /// The backend's process id (0 for a session no connection holds).
    /// Who runs this session's transactions, for their `txn_deps` record.
    pub(crate) fn txn_origin(&self) -> aqueduct_tables::TxnOrigin {
        let acting = self
            .settings
            .get("aqueduct.acting_user")
            .map(String::as_str)
            .unwrap_or("");
        let origins = self
            .settings
            .get("aqueduct.origin")
            .and_then(|v| parse_origins(v).ok())
            .unwrap_or_default();
        aqueduct_tables::TxnOrigin {
            session: self.backend_pid() as u32 as u64,
            user: if acting.is_empty() {
                self.principal.name.clone()
            } else {
                acting.to_string()
            },
            origins,
        }
    }

    pub fn backend_pid(&self) -> i32 {
        self.backend.as_ref().map_or(0, |b| b.pid)
    }

    /// `pg_stat_activity`: a statement starts running.
    pub(crate) fn activity_starts(&self, sql: &str) {
        if let Some(b) = &self.backend {
            let now = self.clock.now_micros();
            let txn_start = self.txn_began_micros.filter(|_| self.txn.is_some());
            b.set_activity(|a| {
                a.state = "active";
                // A prepared statement runs again and again: its text is
                // copied only when it differs from the last one's.
                if a.query != sql {
                    a.query = sql
                        .chars()
                        .take(crate::backends::MAX_ACTIVITY_QUERY_CHARS)
                        .collect();
                }
                a.query_start_micros = Some(now);
                a.transaction_start_micros = txn_start.or(Some(now));
                a.state_change_micros = now;
            });
        }
    }

    /// `pg_stat_activity`: the statement ended.
    pub(crate) fn activity_ends(&self) {
        if let Some(b) = &self.backend {
            let now = self.clock.now_micros();
            let (state, txn_start) = match (&self.txn, self.failed) {
                (None, _) => ("idle", None),
                (Some(_), false) => ("idle in transaction", self.txn_began_micros),
                (Some(_), true) => ("idle in transaction (aborted)", self.txn_began_micros),
            };
            b.set_activity(|a| {
                a.state = state;
                a.transaction_start_micros = txn_start;
                a.state_change_micros = now;
            });
        }
    }

    /// The handle that stops this session's running statement from another
    /// thread (a protocol cancel request).
    pub fn interrupt_handle(&self) -> aqueduct_expr::interrupt::Interrupt {
        self.interrupt.clone()
    }

    /// Runs `f` as one statement: with the statement stack, and under the
    /// session's interrupt handle armed with `statement_timeout` and
    /// `aqueduct.statement_memory_limit` as set now.
    pub(crate) fn statement<R>(&mut self, f: impl FnOnce(&mut Session) -> R) -> R {
        let bounds = self.bounds;
        let interrupt = self.interrupt.clone();
        let engine = self.engine.clone();
        aqueduct_plan::limits::with_statement_stack(|| {
            interrupt.enter(std::time::Instant::now(), bounds, || {
                // Counted once the handle is armed, so a cancel that sees
                // the statement running is not dropped as early.
                let _running = Running::start(&engine.metrics.running);
                f(self)
            })
        })
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn status(&self) -> TxnStatus {
        if let Some(remote) = self.remote_status() {
            return remote;
        }
        match (&self.txn, self.failed) {
            (None, _) => TxnStatus::Idle,
            (Some(_), false) => TxnStatus::InBlock,
            (Some(_), true) => TxnStatus::Failed,
        }
    }

    /// The LSN of this session's last committed write (0 if none).
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }

    /// `SET name = value`, for front ends that take settings elsewhere
    /// (HTTP query parameters and headers).
    pub fn configure(&mut self, name: &str, value: &str) -> Result<(), SqlError> {
        self.set(name, Some(value.to_string())).map(|_| ())
    }

    /// The release the last `release` read was answered from.
    pub fn release_read_id(&self) -> Option<u64> {
        self.release_read_id
    }

    /// Settings reported to a client at connection start (`ParameterStatus`).
    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        [
            ("server_version", "server_version"),
            ("server_encoding", "server_encoding"),
            ("client_encoding", "client_encoding"),
            ("DateStyle", "datestyle"),
            ("TimeZone", "timezone"),
            ("integer_datetimes", "integer_datetimes"),
            ("standard_conforming_strings", "standard_conforming_strings"),
            ("IntervalStyle", "intervalstyle"),
            ("is_superuser", "is_superuser"),
            ("application_name", "application_name"),
            ("aqueduct.last_lsn", "aqueduct.last_lsn"),
        ]
        .iter()
        .map(|(shown, key)| (shown.to_string(), self.settings[*key].clone()))
        .collect()
    }

    /// Marks an open transaction failed, as any error inside one does
    /// (front ends call it for errors the session did not see, such as a
    /// parameter that would not decode).
    pub fn fail_transaction(&mut self) {
        if self.txn.is_some() {
            self.failed = true;
        }
    }

    /// Reads the clock for a statement that starts now.
    pub(crate) fn start_statement(&mut self) {
        let now = self.clock.now_micros();
        let transaction_micros = match (&self.txn, self.txn_began_micros) {
            (Some(_), Some(began)) => began,
            _ => now,
        };
        self.time = StatementTime {
            transaction_micros,
            statement_micros: now,
        };
    }

    /// Ends any open transaction without committing (client went away).
    pub fn abandon(&mut self) {
        self.txn = None;
        self.failed = false;
        self.savepoints.clear();
    }

    pub(crate) fn note_error(&mut self) {
        self.engine.metrics.count(&self.engine.metrics.errors);
        if self.txn.is_some() {
            self.failed = true;
        }
    }

    pub(crate) fn set_last_lsn(&mut self, lsn: Lsn) {
        self.last_lsn = lsn;
        self.settings
            .insert("aqueduct.last_lsn".into(), lsn.to_string());
    }

    pub(crate) fn set(&mut self, name: &str, value: Option<String>) -> Result<Outcome, SqlError> {
        let key = name.to_ascii_lowercase();
        if READ_ONLY_SETTINGS.contains(&key.as_str()) {
            return Err(SqlError::new(
                "55P02",
                format!("parameter \"{name}\" cannot be changed"),
            ));
        }
        let default = DEFAULT_SETTINGS.iter().find(|(k, _)| *k == key);
        if default.is_none() && !key.contains('.') {
            return Err(SqlError::new(
                "42704",
                format!("unrecognized configuration parameter \"{name}\""),
            ));
        }
        if let Some(v) = &value {
            if key == "aqueduct.origin" {
                parse_origins(v)?;
            }
            check_setting(&key, v)?;
        }
        if key == "transaction_isolation" || key == "default_transaction_isolation" {
            let level = match &value {
                Some(v) => aqueduct_tables::Isolation::parse(v).ok_or_else(|| {
                    SqlError::new(
                        "22023",
                        format!("invalid value for parameter \"{key}\": \"{v}\""),
                    )
                    .with_hint("read committed, repeatable read or serializable")
                })?,
                None => aqueduct_tables::Isolation::Serializable,
            };
            if key == "default_transaction_isolation" {
                self.settings.insert(key, level.as_str().into());
            } else if let Some(txn) = self.txn.as_mut() {
                if txn.write_count() > 0 || self.snapshot.is_some() {
                    return Err(SqlError::new(
                        "25001",
                        "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                    ));
                }
                txn.isolation = level;
            }
        } else if key == "aqueduct.consistency" {
            // RESET goes back to the server's default, not the built-in one.
            self.consistency = match &value {
                Some(v) => Consistency::parse(v).expect("checked above"),
                None => self.engine.default_consistency(),
            };
            self.settings.insert(key, self.consistency.as_str().into());
        } else {
            let v =
                value.unwrap_or_else(|| default.map(|(_, v)| v.to_string()).unwrap_or_default());
            if key == "application_name" {
                if let Some(b) = &self.backend {
                    b.set_activity(|a| a.application_name = v.clone());
                }
            }
            self.settings.insert(key, v);
            self.refresh_bounds();
        }
        Ok(command("SET"))
    }

    /// `SET [SESSION | LOCAL] name = value` as PostgreSQL has it: inside a
    /// transaction block a `SET` is undone by `ROLLBACK`, and a `SET LOCAL`
    /// (or `set_config(..., true)`) lasts until the block ends; outside a
    /// block `SET LOCAL` changes nothing (PostgreSQL warns).
    pub(crate) fn set_in_block(
        &mut self,
        name: &str,
        value: Option<String>,
        local: bool,
    ) -> Result<Outcome, SqlError> {
        let key = name.to_ascii_lowercase();
        if self.txn.is_none() {
            return if local {
                Ok(command("SET"))
            } else {
                self.set(&key, value)
            };
        }
        let before = self.settings.clone();
        let outcome = self.set(&key, value)?;
        if self.settings_before_block.is_none() {
            self.settings_before_block = Some(before.clone());
        }
        if local {
            self.local_settings
                .entry(key.clone())
                .or_insert_with(|| before.get(&key).cloned());
        }
        Ok(outcome)
    }

    /// `RESET ALL`: each setting back to its default (in a transaction
    /// block, undone by `ROLLBACK` like a `SET`); a custom one goes.
    pub(crate) fn reset_all(&mut self) -> Result<Outcome, SqlError> {
        let names: Vec<String> = self
            .settings
            .keys()
            .filter(|k| {
                !READ_ONLY_SETTINGS.contains(&k.as_str()) && k.as_str() != "aqueduct.last_lsn"
            })
            .cloned()
            .collect();
        for name in names {
            if DEFAULT_SETTINGS.iter().any(|(k, _)| *k == name) {
                self.set_in_block(&name, None, false)?;
            } else {
                if self.txn.is_some() && self.settings_before_block.is_none() {
                    self.settings_before_block = Some(self.settings.clone());
                }
                self.settings.remove(&name);
            }
        }
        Ok(command("RESET"))
    }

    /// The transaction block ended: its `SET LOCAL`s are undone, and all
    /// its `SET`s when it did not commit.
    pub(crate) fn settings_at_end(&mut self, committed: bool) {
        let before = self.settings_before_block.take();
        let locals = std::mem::take(&mut self.local_settings);
        let restore: Vec<(String, Option<String>)> = match (committed, before) {
            (false, Some(before)) => {
                let mut names: BTreeSet<&String> = before.keys().collect();
                names.extend(self.settings.keys());
                names
                    .into_iter()
                    .filter(|k| before.get(*k) != self.settings.get(*k))
                    .map(|k| (k.clone(), before.get(k).cloned()))
                    .collect()
            }
            _ => locals.into_iter().collect(),
        };
        for (name, value) in restore {
            if name == "aqueduct.last_lsn" {
                continue;
            }
            match value {
                Some(v) => {
                    // A value it held before passes its checks again.
                    let _ = self.set(&name, Some(v));
                }
                None => {
                    self.settings.remove(&name);
                }
            }
        }
        self.refresh_bounds();
    }

    pub(crate) fn show(&self, name: &str) -> Result<Outcome, SqlError> {
        let key = name.to_ascii_lowercase();
        if key == "all" {
            let rows = self
                .settings
                .iter()
                .map(|(k, v)| vec![Value::Text(k.clone()), Value::Text(v.clone())])
                .collect::<Vec<_>>();
            return Ok(Outcome::Rows {
                tag: format!("SHOW {}", rows.len()),
                columns: vec![
                    Column::computed("name", DataType::Text),
                    Column::computed("setting", DataType::Text),
                ],
                rows,
            });
        }
        if key == "transaction_isolation" {
            let level = match &self.txn {
                Some(txn) => txn.isolation,
                None => self.default_isolation(),
            };
            return Ok(Outcome::Rows {
                columns: vec![Column::computed(key.clone(), DataType::Text)],
                rows: vec![vec![Value::Text(level.as_str().into())]],
                tag: "SHOW".into(),
            });
        }
        let value = self.settings.get(&key).ok_or_else(|| {
            SqlError::new(
                "42704",
                format!("unrecognized configuration parameter \"{name}\""),
            )
        })?;
        Ok(Outcome::Rows {
            columns: vec![Column::computed(key.clone(), DataType::Text)],
            rows: vec![vec![Value::Text(value.clone())]],
            tag: "SHOW".into(),
        })
    }
}

impl Session {
    /// `default_transaction_isolation`: the level of a `BEGIN` that names none.
    pub(crate) fn default_isolation(&self) -> aqueduct_tables::Isolation {
        self.settings
            .get("default_transaction_isolation")
            .and_then(|v| aqueduct_tables::Isolation::parse(v))
            .unwrap_or_default()
    }
}

/// A `COPY ... FROM STDIN` under way (`copy.rs`).
pub(crate) struct CopyIn {
    /// The rows read and not yet written, and the `INSERT` that writes
    /// them.
    pub(crate) load: aqueduct_plan::copy::CopyLoad,
    /// The COPY's own transaction, when it began outside a transaction
    /// block: each chunk is written into it, and CopyDone commits it.
    pub(crate) own: Option<aqueduct_tables::Txn>,
    /// Rows written so far.
    pub(crate) written: u64,
}

impl Drop for Session {
    /// A session that ends inside a transaction block rolls it back: its
    /// row locks go.
    fn drop(&mut self) {
        if let Some(txn) = self.txn.take() {
            self.engine.database().end(&txn);
        }
        self.abandon_remote_block();
        if let Some(b) = &self.backend {
            self.engine.backends.detach(b.pid);
        }
    }
}

pub(crate) fn command(tag: &str) -> Outcome {
    Outcome::Command { tag: tag.into() }
}

/// The command tag of a query that returned `n` rows.
pub(crate) fn select_tag(n: usize) -> String {
    format!("SELECT {n}")
}

pub use aqueduct_plan::limits::parse_duration;

/// A boolean setting's value as PostgreSQL reads it.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" | "y" => Some(true),
        "off" | "false" | "no" | "0" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// `aqueduct.origin`: a comma-separated list of source transaction ids
/// `"<server_id>:<lsn>"` (each as a publication stream's `txid`); empty
/// for none. Refuses a malformed list (22023) and more than
/// `ORIGINS_PER_TXN_MAX` entries (54000).
pub(crate) fn parse_origins(value: &str) -> Result<Vec<aqueduct_publish::Origin>, SqlError> {
    use aqueduct_publish::limits::{ORIGINS_PER_TXN_MAX, ORIGIN_SERVER_ID_BYTES_MAX};
    let mut out: Vec<aqueduct_publish::Origin> = Vec::new();
    if value.trim().is_empty() {
        return Ok(out);
    }
    let bad = |part: &str| {
        SqlError::new(
            "22023",
            format!("invalid value for parameter \"aqueduct.origin\": \"{part}\""),
        )
        .with_hint(format!(
            "aqueduct.origin takes a comma-separated list of transaction ids \"<server_id>:<lsn>\" \
             (a publication stream's txid), the server id of letters, digits, '-', '_' or '.', \
             at most {ORIGIN_SERVER_ID_BYTES_MAX} bytes"
        ))
    };
    for part in value.split(',') {
        let part = part.trim();
        let Some((server_id, lsn)) = part.rsplit_once(':') else {
            return Err(bad(part));
        };
        let id_ok = !server_id.is_empty()
            && server_id.len() <= ORIGIN_SERVER_ID_BYTES_MAX
            && server_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        let lsn = match lsn.parse::<Lsn>() {
            Ok(l) if l > 0 && id_ok && lsn.bytes().all(|b| b.is_ascii_digit()) => l,
            _ => return Err(bad(part)),
        };
        let origin = aqueduct_publish::Origin {
            server_id: server_id.to_string(),
            lsn,
        };
        if !out.contains(&origin) {
            out.push(origin);
        }
        if out.len() > ORIGINS_PER_TXN_MAX {
            return Err(SqlError::new(
                "54000",
                format!("aqueduct.origin lists more than {ORIGINS_PER_TXN_MAX} transactions"),
            ));
        }
    }
    Ok(out)
}

/// Refuses a value a setting cannot take, saying what it takes.
pub(crate) fn check_setting(key: &str, value: &str) -> Result<(), SqlError> {
    let ok = match key {
        "aqueduct.upquery_timeout" => parse_duration(value).is_some_and(|d| !d.is_zero()),
        "aqueduct.upquery_timeout_action" => matches!(value, "error" | "compute"),
        "aqueduct.auto_views" => matches!(value, "on" | "off"),
        "aqueduct.chain_return" => matches!(value, "first_hop" | "completion"),
        "aqueduct.consistency" => Consistency::parse(value).is_some(),
        "aqueduct.after_lsn" => value.trim().parse::<Lsn>().is_ok(),
        "aqueduct.consistency_timeout" => parse_duration(value).is_some_and(|d| !d.is_zero()),
        "aqueduct.consistency_timeout_action" => matches!(value, "error" | "compute"),
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => {
            parse_duration(value).is_some()
        }
        "client_min_messages" => matches!(
            value.to_ascii_lowercase().as_str(),
            "debug5"
                | "debug4"
                | "debug3"
                | "debug2"
                | "debug1"
                | "debug"
                | "log"
                | "notice"
                | "warning"
                | "error"
        ),
        "bytea_output" => value.eq_ignore_ascii_case("hex"),
        "default_table_access_method" => value.eq_ignore_ascii_case("heap"),
        "synchronize_seqscans" => parse_bool(value).is_some(),
        "quote_all_identifiers" => parse_bool(value) == Some(false),
        "aqueduct.statement_memory_limit" => aqueduct_plan::limits::parse_bytes(value).is_some(),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let takes = match key {
        "aqueduct.upquery_timeout" | "aqueduct.consistency_timeout" => {
            "a positive duration such as '5s', '250ms' or '1min'"
        }
        "aqueduct.upquery_timeout_action" | "aqueduct.consistency_timeout_action" => {
            "'error' or 'compute'"
        }
        "aqueduct.consistency" => "'eventual', 'session', 'release' or 'linearizable'",
        "aqueduct.chain_return" => "'first_hop' or 'completion'",
        "aqueduct.after_lsn" => "an LSN, as SHOW aqueduct.last_lsn reports after a write",
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => {
            "a duration such as '5s', '250ms' or '1min' (0: none)"
        }
        "client_min_messages" => "a message level: debug5 to debug1, log, notice, warning or error",
        "bytea_output" => "'hex' (the only output Aqueduct writes)",
        "synchronize_seqscans" => "a boolean (it changes nothing here)",
        "quote_all_identifiers" => "off (identifiers are quoted only where they must be)",
        "default_table_access_method" => "'heap'",
        "aqueduct.statement_memory_limit" => "a size such as '512MB' or '2GB' (0: none)",
        _ => "'on' or 'off'",
    };
    Err(SqlError::new(
        "22023",
        format!("invalid value for parameter \"{key}\": \"{value}\""),
    )
    .with_hint(format!("{key} takes {takes}")))
}

impl Engine {
    /// A new session (one per client connection).
    pub fn session(self: &Arc<Engine>) -> Session {
        Session::new(self.clone())
    }

    /// A session running as `principal`.
    pub fn session_as(self: &Arc<Engine>, principal: Principal) -> Session {
        let mut s = self.session();
        s.set_principal(principal);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_and_refuse_what_they_must() {
        let o = parse_origins(" a1:5, b-2.x:7 ,a1:5").unwrap();
        assert_eq!(
            o.iter()
                .map(|o| (o.server_id.as_str(), o.lsn))
                .collect::<Vec<_>>(),
            vec![("a1", 5), ("b-2.x", 7)]
        );
        assert!(parse_origins("").unwrap().is_empty());
        for bad in [
            "a1", "a1:", ":5", "a1:0", "a1:-5", "a b:5", "a1:5,", "a1:+5",
        ] {
            let e = parse_origins(bad).unwrap_err();
            assert_eq!(e.code, "22023", "{bad}");
        }
        let many = (1..=aqueduct_publish::limits::ORIGINS_PER_TXN_MAX + 1)
            .map(|i| format!("s:{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse_origins(&many).unwrap_err().code, "54000");
    }

    #[test]
    fn max_index_keys_is_the_limit_enforced() {
        let (_, v) = DEFAULT_SETTINGS
            .iter()
            .find(|(n, _)| *n == "max_index_keys")
            .expect("the setting");
        assert_eq!(
            v.parse::<usize>().ok(),
            Some(aqueduct_plan::limits::MAX_INDEX_KEYS)
        );
        assert!(READ_ONLY_SETTINGS.contains(&"max_index_keys"));
    }
}
