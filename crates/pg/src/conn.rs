//! One client connection: startup and authentication (through pgwire),
//! then the simple and extended query protocols against one session.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aqueduct_sql::{Column, Outcome, Prepared, Session, SqlError, TxnStatus};
use aqueduct_values::{DataType, Value};
use bytes::{BufMut, BytesMut};
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    StartupHandler,
};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, SEVERITY_ERROR, SEVERITY_FATAL};
use pgwire::messages::copy::{CopyData, CopyDone, CopyInResponse, CopyOutResponse};
use pgwire::messages::data::{
    DataRow, FieldDescription, NoData, ParameterDescription, RowDescription,
};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Parse, ParseComplete,
    PortalSuspended, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, ReadyForQuery, TransactionStatus,
};
use pgwire::messages::startup::{ParameterStatus, Startup};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, MaybeTls, PgWireMessageServerCodec};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::codec::{Framed, FramedParts};
use tracing::{debug, error, info, Instrument};

use crate::auth::StartupParameters;
use crate::frame::MessageGuard;
use crate::wire::{self, Format};
use crate::{Shared, MAX_PIPELINED_BYTES, MAX_PORTALS, MAX_PREPARED_STATEMENTS, REJECTION_TIMEOUT};

type Socket = Framed<MessageGuard<MaybeTls>, PgWireMessageServerCodec<()>>;

/// What reading the socket gave: a message, an error, or (`None`) its end.
type Received = Option<Result<PgWireFrontendMessage, PgWireError>>;

/// Longest message, detail or hint sent in an ErrorResponse: pgwire refuses
/// to encode error messages over 30,000 bytes, and a client gains nothing
/// from an echo of a huge query.
const MAX_ERROR_FIELD_BYTES: usize = 4_000;

/// Time to flush the last messages to a closing connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The setting the LSN of the session's last commit is reported under.
const LAST_LSN_PARAMETER: &str = "aqueduct.last_lsn";

/// Startup parameters that are not settings to apply to the session.
const STARTUP_NON_SETTINGS: &[&str] = &[
    "user",
    "database",
    "options",
    "replication",
    // Only UTF8 is spoken; a client asking for another encoding still gets UTF8.
    "client_encoding",
];
/// PostgreSQL's limit on identifier length.
const MAX_SETTING_NAME_BYTES: usize = 63;

/// A connection's place: a slot, or a place among those being told there
/// is none. Held until the connection ends.
pub(crate) struct Admission {
    pub(crate) permit: OwnedSemaphorePermit,
    pub(crate) refused: bool,
}

enum Flow {
    Continue,
    Close,
}

/// What ends a message's processing early.
enum ConnError {
    /// Reported to the client; the connection goes on.
    Sql(SqlError),
    /// Reported to the client as FATAL; the connection closes.
    Fatal(Box<ErrorInfo>),
    /// The socket failed; nothing more can be said.
    Io(std::io::Error),
}

impl From<SqlError> for ConnError {
    fn from(e: SqlError) -> ConnError {
        ConnError::Sql(e)
    }
}

impl From<std::io::Error> for ConnError {
    fn from(e: std::io::Error) -> ConnError {
        ConnError::Io(e)
    }
}

impl From<PgWireError> for ConnError {
    fn from(e: PgWireError) -> ConnError {
        match e {
            PgWireError::IoError(io) => ConnError::Io(io),
            PgWireError::InvalidPassword(user) => ConnError::Fatal(Box::new(ErrorInfo::new(
                SEVERITY_FATAL.into(),
                "28P01".into(),
                format!("password authentication failed for user \"{user}\""),
            ))),
            other => {
                let mut info = ErrorInfo::from(other);
                info.severity = SEVERITY_FATAL.into();
                ConnError::Fatal(Box::new(info))
            }
        }
    }
}

fn fatal(code: &str, message: impl Into<String>) -> ConnError {
    ConnError::Fatal(Box::new(ErrorInfo::new(
        SEVERITY_FATAL.into(),
        code.into(),
        message.into(),
    )))
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_ERROR_FIELD_BYTES {
        let mut cut = MAX_ERROR_FIELD_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

fn error_info(e: &SqlError) -> ErrorInfo {
    let mut info = ErrorInfo::new(
        SEVERITY_ERROR.into(),
        e.code.into(),
        truncate(e.message.clone()),
    );
    info.detail = e.detail.clone().map(truncate);
    info.hint = e.hint.clone().map(truncate);
    info.where_context = e.context.clone().map(truncate);
    info
}

/// A backend's secret key as bytes: protocol 3.0 keys are four bytes, which
/// a cancel request may carry as either form.
fn key_bytes(key: &pgwire::messages::startup::SecretKey) -> Vec<u8> {
    match key {
        pgwire::messages::startup::SecretKey::I32(k) => k.to_be_bytes().to_vec(),
        pgwire::messages::startup::SecretKey::Bytes(b) => b.to_vec(),
    }
}

/// The session, abandoned (open transaction dropped) when the connection ends.
struct SessionHandle(Arc<Mutex<Session>>);

impl Drop for SessionHandle {
    fn drop(&mut self) {
        // A statement still running on the blocking pool holds the lock and
        // its own reference; the session (and its transaction) is dropped
        // when it finishes.
        if let Some(mut s) = self.0.try_lock() {
            if s.status() != TxnStatus::Idle {
                debug!("connection closed inside a transaction: abandoning it");
            }
            s.abandon();
        }
    }
}

/// Session state as of the end of the last call.
#[derive(Clone, Copy)]
struct Snapshot {
    status: TxnStatus,
    last_lsn: u64,
}

fn ready_status(s: TxnStatus) -> TransactionStatus {
    match s {
        TxnStatus::Idle => TransactionStatus::Idle,
        TxnStatus::InBlock => TransactionStatus::Transaction,
        TxnStatus::Failed => TransactionStatus::Error,
    }
}

enum PortalState {
    /// Bound, not yet executed.
    New { params: Vec<Value> },
    /// Executed; rows not yet sent (after a row-limited Execute).
    Rows {
        columns: Vec<Column>,
        rows: std::vec::IntoIter<Vec<Value>>,
        tag: String,
        suspended: bool,
    },
    /// Ran to completion; executing it again repeats its tag.
    Done { tag: Option<String> },
    /// Its execution failed.
    Failed,
}

struct Portal {
    statement: Arc<Prepared>,
    /// Result format codes as bound (validated: none, one, or one per column).
    result_formats: Vec<Format>,
    state: PortalState,
}

fn format_of(formats: &[Format], i: usize) -> Format {
    match formats {
        [] => Format::Text,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(Format::Text),
    }
}

/// The row count in a command tag replaced, for portals fetched in parts
/// (PostgreSQL reports the rows of the last Execute).
fn retag(tag: &str, rows: usize) -> String {
    match tag.rsplit_once(' ') {
        Some((verb, n)) if n.parse::<u64>().is_ok() => format!("{verb} {rows}"),
        _ => tag.to_string(),
    }
}

/// Serves one accepted TCP connection to the end.
pub(crate) async fn run(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    admission: Admission,
    stop: watch::Receiver<bool>,
) {
    // Info level, so that the peer shows on auth failures and protocol violations.
    let span = tracing::info_span!("pg", %peer);
    async move {
        let refused = admission.refused;
        let timeout = if refused {
            REJECTION_TIMEOUT.min(shared.config.startup_timeout)
        } else {
            shared.config.startup_timeout
        };
        let deadline = Instant::now() + timeout;
        let tcp_local = tcp.local_addr().ok();
        let negotiated = tokio::time::timeout_at(
            deadline,
            negotiate_tls::<()>(tcp, shared.tls_acceptor.clone()),
        )
        .await;
        let framed = match negotiated {
            Ok(Ok(Some(f))) => f,
            Ok(Ok(None)) => {
                debug!("direct TLS requested but TLS is not configured: closing");
                return;
            }
            Ok(Err(e)) => {
                debug!(error = %e, "TLS negotiation failed: closing");
                return;
            }
            Err(_) => {
                debug!("startup timed out during TLS negotiation: closing");
                return;
            }
        };
        // Bytes pgwire read ahead while negotiating go through the guard too.
        let parts = framed.into_parts();
        let guard = MessageGuard::new(parts.io, parts.read_buf, shared.config.max_message_bytes);
        let mut new_parts = FramedParts::new::<PgWireBackendMessage>(guard, parts.codec);
        new_parts.write_buf = parts.write_buf;
        let mut socket: Socket = Framed::from_parts(new_parts);
        let local = tcp_local;
        let mut conn = Conn {
            peer,
            local,
            shared,
            session: None,
            sasl: None,
            statements: HashMap::new(),
            portals: HashMap::new(),
            skip_until_sync: false,
            reported_lsn: 0,
            registered: None,
            pending: VecDeque::new(),
        };
        conn.serve(&mut socket, deadline, refused, stop).await;
        // A client that stopped reading cannot hold the task: give up on
        // delivering the last words after a while.
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, socket.close()).await;
        debug!("connection closed");
        drop(admission.permit);
    }
    .instrument(span)
    .await
}

struct Conn {
    /// The client's address, and the server's it connected to.
    peer: SocketAddr,
    local: Option<SocketAddr>,
    shared: Arc<Shared>,
    session: Option<SessionHandle>,
    sasl: Option<SASLAuthStartupHandler<StartupParameters>>,
    statements: HashMap<String, Arc<Prepared>>,
    portals: HashMap<String, Portal>,
    /// After an error in the extended protocol, messages up to Sync are skipped.
    skip_until_sync: bool,
    /// The `aqueduct.last_lsn` the client was last told.
    reported_lsn: u64,
    /// The process id this backend is registered under for cancel requests.
    registered: Option<i32>,
    /// What was read from the socket while a statement ran (pipelined
    /// messages, or the end of the connection), processed next in order.
    pending: VecDeque<Received>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(pid) = self.registered.take() {
            if let Some((_, handle)) = self.shared.backends.lock().remove(&pid) {
                // A statement still running for a connection that is gone
                // stops at its next check, and no later one starts.
                handle.close();
            }
        }
    }
}

impl Conn {
    async fn serve(
        &mut self,
        socket: &mut Socket,
        deadline: Instant,
        refused: bool,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut authenticated = false;
        // `pg_terminate_backend` of this backend ends the connection.
        let (terminate, mut terminated) = watch::channel(false);
        let mut terminate = Some(terminate);
        loop {
            let next = if let Some(received) = self.pending.pop_front() {
                received
            } else if authenticated {
                tokio::select! {
                    biased;
                    _ = stop.changed() => {
                        let _ = send_fatal(socket, fatal("57P01", "terminating connection due to administrator command")).await;
                        return;
                    }
                    _ = terminated.changed() => {
                        info!("pg_terminate_backend: closing");
                        let _ = send_fatal(socket, fatal("57P01", "terminating connection due to administrator command")).await;
                        return;
                    }
                    m = socket.next() => m,
                }
            } else {
                tokio::select! {
                    biased;
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep_until(deadline) => {
                        info!("client did not finish startup in time: closing");
                        let _ = send_fatal(socket, fatal("08006", "timeout expired during startup")).await;
                        return;
                    }
                    m = socket.next() => m,
                }
            };
            let msg = match next {
                None => {
                    debug!("client closed the connection");
                    return;
                }
                Some(Err(PgWireError::IoError(e)))
                    if e.kind() == std::io::ErrorKind::InvalidData =>
                {
                    info!(error = %e, "protocol violation: closing");
                    let _ = send_fatal(
                        socket,
                        fatal("08P01", format!("invalid frontend message: {e}")),
                    )
                    .await;
                    return;
                }
                Some(Err(PgWireError::IoError(e))) => {
                    debug!(error = %e, "connection lost");
                    return;
                }
                Some(Err(e)) => {
                    info!(error = %e, "protocol violation: closing");
                    let _ = send_fatal(socket, ConnError::from(e)).await;
                    return;
                }
                Some(Ok(m)) => m,
            };
            let result = if authenticated {
                self.on_message(socket, msg).await
            } else {
                self.on_startup_message(socket, msg, refused).await
            };
            match result {
                Ok(Flow::Continue) => {}
                Ok(Flow::Close) => return,
                Err(ConnError::Io(e)) => {
                    debug!(error = %e, "connection lost");
                    return;
                }
                Err(e @ ConnError::Fatal(_)) => {
                    let _ = send_fatal(socket, e).await;
                    return;
                }
                Err(ConnError::Sql(e)) => {
                    // Only the extended protocol returns statement errors here.
                    // Any of them (at Parse, Bind or Execute) aborts an open
                    // transaction, as in PostgreSQL.
                    self.session().lock().fail_transaction();
                    debug!(code = e.code, error = %e.message, "statement failed");
                    if let Err(e) = socket
                        .send(PgWireBackendMessage::ErrorResponse(error_info(&e).into()))
                        .await
                    {
                        debug!(error = %e, "connection lost");
                        return;
                    }
                    self.skip_until_sync = true;
                }
            }
            if !authenticated && matches!(socket.state(), PgWireConnectionState::ReadyForQuery) {
                authenticated = true;
                self.sasl = None;
                // From now on a CancelRequest with this backend's key
                // cancels its statements.
                let (pid, key) = socket.pid_and_secret_key();
                let handle = {
                    let application_name = socket
                        .metadata()
                        .get("application_name")
                        .cloned()
                        .unwrap_or_default();
                    let mut session = self.session().lock();
                    let terminate = terminate.take().expect("a backend authenticates once");
                    session.attach_backend(
                        pid,
                        &application_name,
                        Some(self.peer),
                        self.local,
                        Box::new(move || {
                            let _ = terminate.send(true);
                        }),
                    );
                    session.interrupt_handle()
                };
                self.shared.backends.lock().insert(pid, (key, handle));
                self.registered = Some(pid);
                debug!(
                    user = socket
                        .metadata()
                        .get("user")
                        .map(String::as_str)
                        .unwrap_or(""),
                    tls = socket.is_secure(),
                    "authenticated"
                );
            }
        }
    }

    async fn on_startup_message(
        &mut self,
        socket: &mut Socket,
        msg: PgWireFrontendMessage,
        refused: bool,
    ) -> Result<Flow, ConnError> {
        match msg {
            PgWireFrontendMessage::CancelRequest(c) => {
                // The backend's running statement stops at its next check
                // (57014), never inside a commit; a wrong key or an
                // unknown process id is ignored, as PostgreSQL does. The
                // protocol answers nothing: the connection is closed.
                let handle = self
                    .shared
                    .backends
                    .lock()
                    .get(&c.pid)
                    .filter(|(key, _)| key_bytes(key) == key_bytes(&c.secret_key))
                    .map(|(_, handle)| handle.clone());
                match handle {
                    Some(handle) => {
                        debug!(
                            pid = c.pid,
                            "cancel request: cancelling the running statement"
                        );
                        handle.cancel();
                    }
                    None => debug!(pid = c.pid, "cancel request for no such backend: ignored"),
                }
                Ok(Flow::Close)
            }
            PgWireFrontendMessage::Startup(startup) => {
                if refused {
                    info!("too many clients: refusing the connection");
                    return Err(fatal("53300", "sorry, too many clients already"));
                }
                self.on_startup(socket, startup).await?;
                Ok(Flow::Continue)
            }
            PgWireFrontendMessage::PasswordMessageFamily(_) => {
                let Some(sasl) = &self.sasl else {
                    return Err(fatal("08P01", "unexpected password message"));
                };
                if let Err(e) = sasl.on_startup(socket, msg).await {
                    let user = socket.metadata().get("user").cloned().unwrap_or_default();
                    info!(%user, error = %e, "authentication failed");
                    // pgwire's SCRAM does not know the user at the final step.
                    return Err(match e {
                        PgWireError::InvalidPassword(_) => PgWireError::InvalidPassword(user),
                        e => e,
                    }
                    .into());
                }
                Ok(Flow::Continue)
            }
            PgWireFrontendMessage::Terminate(_) => Ok(Flow::Close),
            other => Err(fatal(
                "08P01",
                format!("unexpected {} message during startup", message_name(&other)),
            )),
        }
    }

    async fn on_startup(&mut self, socket: &mut Socket, startup: Startup) -> Result<(), ConnError> {
        let user = match startup.parameters.get("user") {
            Some(u) if !u.is_empty() => u.clone(),
            _ => {
                return Err(fatal(
                    "28000",
                    "no PostgreSQL user name specified in startup packet",
                ))
            }
        };
        if self.shared.config.tls_required && !socket.is_secure() {
            info!(%user, "plaintext login refused: TLS is required");
            return Err(fatal(
                "28000",
                format!(
                    "connection without TLS refused for user \"{user}\": this server requires TLS; connect with sslmode=require"
                ),
            ));
        }
        let settings = startup_settings(&startup);
        // Who the session runs as: every trusted client is a superuser; with
        // users configured, a bootstrap user is one, and anyone else is the
        // role of the catalog SCRAM authenticates below.
        let principal =
            if self.shared.scram.is_none() || self.shared.engine.is_bootstrap_user(&user) {
                aqueduct_sql::Principal::superuser(user.clone())
            } else {
                aqueduct_sql::Principal::role(user.clone())
            };
        let mut session = self.shared.engine.session();
        session.set_principal(principal);
        let (session, mut parameters) = tokio::task::spawn_blocking(move || {
            let mut session = session;
            for sql in settings {
                for r in session.execute(&sql) {
                    if let Err(e) = r {
                        debug!(%sql, error = %e, "startup setting not applied");
                    }
                }
            }
            let parameters = session.startup_parameters();
            (session, parameters)
        })
        .await
        .map_err(|e| internal(&e))?;
        self.reported_lsn = session.last_lsn();
        self.session = Some(SessionHandle(Arc::new(Mutex::new(session))));
        parameters.push(("session_authorization".into(), user));
        let parameters = Arc::new(StartupParameters(parameters));

        match &self.shared.scram {
            None => {
                protocol_negotiation(socket, &startup).await?;
                save_startup_parameters_to_metadata(socket, &startup);
                let (pid, key) = self.shared.pid_generator.generate(socket);
                socket.set_pid_and_secret_key(pid, key);
                finish_authentication(socket, parameters.as_ref()).await?;
            }
            Some(scram) => {
                let mechanism = if socket.is_secure() {
                    scram.tls.clone()
                } else {
                    scram.plain.clone()
                };
                let sasl = SASLAuthStartupHandler::new(parameters)
                    .with_scram(mechanism)
                    .with_pid_secret_key_generator(self.shared.pid_generator.clone());
                sasl.on_startup(socket, PgWireFrontendMessage::Startup(startup))
                    .await?;
                self.sasl = Some(sasl);
            }
        }
        Ok(())
    }

    fn session(&self) -> &Arc<Mutex<Session>> {
        &self
            .session
            .as_ref()
            .expect("a session exists once startup began")
            .0
    }

    /// Runs `f` on the session right here, on the connection's task: only
    /// for calls that never wait for an fsync or a long scan.
    fn inline<T>(&self, f: impl FnOnce(&mut Session) -> T) -> (T, Snapshot) {
        let mut s = self.session().lock();
        let out = f(&mut s);
        let snap = Snapshot {
            status: s.status(),
            last_lsn: s.last_lsn(),
        };
        (out, snap)
    }

    /// Runs `f` on the session on the blocking pool (session calls may wait
    /// for an fsync), watching the socket meanwhile: when the client goes
    /// away (the connection ends or fails) the statement is stopped, as no
    /// one is left to read its result. Messages the client sends meanwhile
    /// (up to [`MAX_PIPELINED_MESSAGES`]) are kept and processed next.
    async fn blocking<T: Send + 'static>(
        &mut self,
        socket: &mut Socket,
        f: impl FnOnce(&mut Session) -> T + Send + 'static,
    ) -> Result<(T, Snapshot), ConnError> {
        let session = self.session().clone();
        let interrupt = session.lock().interrupt_handle();
        let mut task = tokio::task::spawn_blocking(move || {
            let mut s = session.lock();
            let out = f(&mut s);
            let snap = Snapshot {
                status: s.status(),
                last_lsn: s.last_lsn(),
            };
            (out, snap)
        });
        let mut held: usize = self.pending.iter().map(received_bytes).sum();
        let mut watching =
            held < MAX_PIPELINED_BYTES && self.pending.iter().all(|r| matches!(r, Some(Ok(_))));
        loop {
            tokio::select! {
                done = &mut task => return done.map_err(|e| internal(&e)),
                received = socket.next(), if watching => {
                    if !matches!(received, Some(Ok(_))) {
                        debug!("the client went away while its statement ran: stopping it");
                        interrupt.close();
                        watching = false;
                    }
                    held += received_bytes(&received);
                    self.pending.push_back(received);
                    if held >= MAX_PIPELINED_BYTES {
                        watching = false;
                    }
                }
            }
        }
    }

    /// Tells the client the LSN of its last commit when it changed.
    async fn report_lsn(&mut self, socket: &mut Socket, snap: Snapshot) -> Result<(), ConnError> {
        if snap.last_lsn != self.reported_lsn {
            self.reported_lsn = snap.last_lsn;
            socket
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    LAST_LSN_PARAMETER.into(),
                    snap.last_lsn.to_string(),
                )))
                .await?;
        }
        Ok(())
    }

    async fn on_message(
        &mut self,
        socket: &mut Socket,
        msg: PgWireFrontendMessage,
    ) -> Result<Flow, ConnError> {
        if self.skip_until_sync {
            match msg {
                PgWireFrontendMessage::Sync(_) => {}
                PgWireFrontendMessage::Terminate(_) => return Ok(Flow::Close),
                _ => return Ok(Flow::Continue),
            }
        }
        match msg {
            PgWireFrontendMessage::Query(q) => self.simple_query(socket, q.query).await?,
            PgWireFrontendMessage::Parse(p) => self.parse(socket, p).await?,
            PgWireFrontendMessage::Bind(b) => self.bind(socket, b).await?,
            PgWireFrontendMessage::Describe(d) => self.describe(socket, d).await?,
            PgWireFrontendMessage::Execute(e) => self.execute(socket, e).await?,
            PgWireFrontendMessage::Close(c) => self.close(socket, c).await?,
            PgWireFrontendMessage::Flush(_) => socket.flush().await?,
            PgWireFrontendMessage::Sync(_) => self.sync(socket).await?,
            PgWireFrontendMessage::Terminate(_) => return Ok(Flow::Close),
            // Outside COPY these are ignored, as PostgreSQL does.
            PgWireFrontendMessage::CopyData(_)
            | PgWireFrontendMessage::CopyDone(_)
            | PgWireFrontendMessage::CopyFail(_) => {}
            other => {
                return Err(fatal(
                    "08P01",
                    format!("unexpected {} message after startup", message_name(&other)),
                ))
            }
        }
        Ok(Flow::Continue)
    }

    async fn simple_query(&mut self, socket: &mut Socket, sql: String) -> Result<(), ConnError> {
        // A simple query replaces the unnamed statement and portal.
        self.statements.remove("");
        self.portals.remove("");
        let deallocate = deallocate_target(&sql);
        let (results, mut snap) = self.blocking(socket, move |s| s.execute(&sql)).await?;
        if let (Some(target), Some(Ok(Outcome::Command { .. }))) = (&deallocate, results.first()) {
            // Protocol-level and SQL-level prepared statements share names.
            match target {
                None => self.statements.retain(|name, _| name.is_empty()),
                Some(name) => {
                    self.statements.remove(name);
                }
            }
        }
        for result in results {
            let sent = match result {
                Ok(Outcome::Rows { columns, rows, tag }) => {
                    // The simple protocol describes its rows itself, in text.
                    match socket
                        .feed(PgWireBackendMessage::RowDescription(row_description(
                            &columns,
                            &[],
                        )))
                        .await
                    {
                        Ok(()) => send_rows(
                            socket,
                            &columns,
                            &[],
                            &mut rows.into_iter(),
                            usize::MAX,
                            &tag,
                            false,
                        )
                        .await
                        .map(|_| ()),
                        Err(e) => Err(e.into()),
                    }
                }
                Ok(Outcome::Command { tag }) => socket
                    .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                        tag,
                    )))
                    .await
                    .map_err(ConnError::from),
                Ok(Outcome::Empty) => socket
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await
                    .map_err(ConnError::from),
                Ok(Outcome::CopyIn { binary, columns }) => {
                    let (done, after) = self.copy_in(socket, binary, columns).await?;
                    snap = after;
                    match done {
                        Ok(tag) => socket
                            .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                                tag,
                            )))
                            .await
                            .map_err(ConnError::from),
                        Err(e) => Err(ConnError::Sql(e)),
                    }
                }
                Ok(Outcome::CopyOut {
                    binary,
                    columns,
                    chunks,
                    tag,
                }) => send_copy_out(socket, binary, columns, chunks, tag).await,
                Err(e) => Err(ConnError::Sql(e)),
            };
            match sent {
                Ok(()) => {}
                Err(ConnError::Sql(e)) => {
                    debug!(code = e.code, error = %e.message, "statement failed");
                    socket
                        .feed(PgWireBackendMessage::ErrorResponse(error_info(&e).into()))
                        .await?;
                    // PostgreSQL stops at the first error; so does the session.
                    break;
                }
                Err(other) => return Err(other),
            }
        }
        self.report_lsn(socket, snap).await?;
        if snap.status == TxnStatus::Idle {
            // Portals live until their transaction ends.
            self.portals.clear();
        }
        self.ready_for_query(socket, snap.status).await
    }

    async fn ready_for_query(
        &mut self,
        socket: &mut Socket,
        status: TxnStatus,
    ) -> Result<(), ConnError> {
        socket
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                ready_status(status),
            )))
            .await?;
        Ok(())
    }

    async fn parse(&mut self, socket: &mut Socket, p: Parse) -> Result<(), ConnError> {
        let name = p.name.unwrap_or_default();
        if !name.is_empty() && self.statements.contains_key(&name) {
            return Err(SqlError::new(
                "42P05",
                format!("prepared statement \"{name}\" already exists"),
            )
            .into());
        }
        if !self.statements.contains_key(&name) && self.statements.len() >= MAX_PREPARED_STATEMENTS
        {
            return Err(SqlError::new(
                "54000",
                format!(
                    "more than {MAX_PREPARED_STATEMENTS} prepared statements on one connection"
                ),
            )
            .with_hint("close (DEALLOCATE) prepared statements that are no longer used")
            .into());
        }
        let hints = p
            .type_oids
            .iter()
            .map(|&oid| match oid {
                0 => Ok(None),
                oid => DataType::from_pg_oid(oid).map(Some).ok_or_else(|| {
                    SqlError::new("42704", format!("type with OID {oid} is not supported"))
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let sql = p.query;
        let (prepared, _) = self
            .blocking(socket, move |s| s.prepare(&sql, &hints))
            .await?;
        self.statements.insert(name, Arc::new(prepared?));
        socket
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    async fn bind(&mut self, socket: &mut Socket, b: Bind) -> Result<(), ConnError> {
        let portal_name = b.portal_name.unwrap_or_default();
        let statement_name = b.statement_name.unwrap_or_default();
        let statement = self
            .statements
            .get(&statement_name)
            .cloned()
            .ok_or_else(|| {
                SqlError::new(
                    "26000",
                    format!("prepared statement \"{statement_name}\" does not exist"),
                )
            })?;
        if !portal_name.is_empty() && self.portals.contains_key(&portal_name) {
            return Err(
                SqlError::new("42P03", format!("portal \"{portal_name}\" already exists")).into(),
            );
        }
        if !self.portals.contains_key(&portal_name) && self.portals.len() >= MAX_PORTALS {
            return Err(SqlError::new(
                "54000",
                format!("more than {MAX_PORTALS} portals on one connection"),
            )
            .into());
        }
        let n = statement.params.len();
        if b.parameters.len() != n {
            return Err(SqlError::new(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{statement_name}\" requires {n}",
                    b.parameters.len()
                ),
            )
            .into());
        }
        let param_formats = expand_formats(
            &b.parameter_format_codes,
            n,
            "parameter formats",
            "parameters",
        )?;
        let params = b
            .parameters
            .iter()
            .zip(&statement.params)
            .zip(&param_formats)
            .map(|((raw, ty), format)| match raw {
                None => Ok(Value::Null),
                Some(bytes) => match format {
                    Format::Text => wire::decode_text(bytes, ty),
                    Format::Binary => wire::decode_binary(bytes, ty),
                },
            })
            .collect::<Result<Vec<_>, _>>()?;
        let columns = statement.columns.len();
        let result_formats = match b.result_column_format_codes.len() {
            0 | 1 => b
                .result_column_format_codes
                .iter()
                .map(|&c| Format::from_code(c))
                .collect::<Result<Vec<_>, _>>()?,
            _ => expand_formats(
                &b.result_column_format_codes,
                columns,
                "result formats",
                "columns",
            )?,
        };
        self.portals.insert(
            portal_name,
            Portal {
                statement,
                result_formats,
                state: PortalState::New { params },
            },
        );
        socket
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn describe(&mut self, socket: &mut Socket, d: Describe) -> Result<(), ConnError> {
        let name = d.name.unwrap_or_default();
        let (statement, formats) = match d.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                let s = self.statements.get(&name).cloned().ok_or_else(|| {
                    SqlError::new(
                        "26000",
                        format!("prepared statement \"{name}\" does not exist"),
                    )
                })?;
                socket
                    .feed(PgWireBackendMessage::ParameterDescription(
                        ParameterDescription::new(s.params.iter().map(DataType::pg_oid).collect()),
                    ))
                    .await?;
                // Formats are not known before Bind: text, as PostgreSQL reports.
                (s, Vec::new())
            }
            TARGET_TYPE_BYTE_PORTAL => {
                let p = self.portals.get(&name).ok_or_else(|| {
                    SqlError::new("34000", format!("portal \"{name}\" does not exist"))
                })?;
                (p.statement.clone(), p.result_formats.clone())
            }
            other => {
                return Err(fatal(
                    "08P01",
                    format!("invalid DESCRIBE message subtype {other}"),
                ))
            }
        };
        if statement.columns.is_empty() {
            socket
                .feed(PgWireBackendMessage::NoData(NoData::new()))
                .await?;
        } else {
            socket
                .feed(PgWireBackendMessage::RowDescription(row_description(
                    &statement.columns,
                    &formats,
                )))
                .await?;
        }
        Ok(())
    }

    async fn execute(&mut self, socket: &mut Socket, e: Execute) -> Result<(), ConnError> {
        let name = e.name.unwrap_or_default();
        let max_rows = if e.max_rows <= 0 {
            usize::MAX
        } else {
            e.max_rows as usize
        };
        let mut portal = self
            .portals
            .remove(&name)
            .ok_or_else(|| SqlError::new("34000", format!("portal \"{name}\" does not exist")))?;
        let result = self.run_portal(socket, &mut portal, max_rows).await;
        if matches!(result, Err(ConnError::Sql(_))) {
            portal.state = PortalState::Failed;
        }
        self.portals.insert(name, portal);
        result
    }

    async fn run_portal(
        &mut self,
        socket: &mut Socket,
        portal: &mut Portal,
        max_rows: usize,
    ) -> Result<(), ConnError> {
        let state = std::mem::replace(&mut portal.state, PortalState::Failed);
        let mut snapshot = None;
        let (columns, rows, tag, suspended) = match state {
            PortalState::New { params } => {
                let statement = portal.statement.clone();
                // A lookup takes microseconds: handing it to the blocking
                // pool and back would cost more than running it. Asked and
                // run under one hold of the session.
                let ran = if statement.quick {
                    let (outcome, snap) = self.inline(|s| {
                        s.runs_without_waiting(&statement)
                            .then(|| s.execute_prepared(&statement, &params))
                    });
                    outcome.map(|outcome| (outcome, snap))
                } else {
                    None
                };
                let (outcome, snap) = match ran {
                    Some(ran) => ran,
                    None => {
                        self.blocking(socket, move |s| s.execute_prepared(&statement, &params))
                            .await?
                    }
                };
                snapshot = Some(snap);
                match outcome? {
                    Outcome::Rows { columns, rows, tag } => {
                        check_result_shape(&portal.statement.columns, &columns)?;
                        (columns, rows.into_iter(), tag, false)
                    }
                    Outcome::Command { tag } => {
                        socket
                            .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                                tag.clone(),
                            )))
                            .await?;
                        portal.state = PortalState::Done { tag: Some(tag) };
                        return self.report_lsn(socket, snap).await;
                    }
                    Outcome::Empty => {
                        socket
                            .feed(PgWireBackendMessage::EmptyQueryResponse(
                                EmptyQueryResponse::new(),
                            ))
                            .await?;
                        portal.state = PortalState::Done { tag: None };
                        return Ok(());
                    }
                    Outcome::CopyIn { binary, columns } => {
                        let (done, snap) = self.copy_in(socket, binary, columns).await?;
                        // An error: the serve loop reports it and skips to Sync.
                        let tag = done?;
                        socket
                            .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                                tag.clone(),
                            )))
                            .await?;
                        portal.state = PortalState::Done { tag: Some(tag) };
                        return self.report_lsn(socket, snap).await;
                    }
                    Outcome::CopyOut {
                        binary,
                        columns,
                        chunks,
                        tag,
                    } => {
                        send_copy_out(socket, binary, columns, chunks, tag.clone()).await?;
                        portal.state = PortalState::Done { tag: Some(tag) };
                        return Ok(());
                    }
                }
            }
            PortalState::Rows {
                columns,
                rows,
                tag,
                suspended,
            } => (columns, rows, tag, suspended),
            PortalState::Done { tag } => {
                let msg = match &tag {
                    Some(t) => {
                        PgWireBackendMessage::CommandComplete(CommandComplete::new(t.clone()))
                    }
                    None => PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new()),
                };
                socket.feed(msg).await?;
                portal.state = PortalState::Done { tag };
                return Ok(());
            }
            PortalState::Failed => {
                return Err(
                    SqlError::new("55000", "portal cannot be run: its execution failed").into(),
                )
            }
        };
        let mut rows = rows;
        let more = send_rows(
            socket,
            &columns,
            &portal.result_formats,
            &mut rows,
            max_rows,
            &tag,
            suspended,
        )
        .await?;
        portal.state = if more {
            PortalState::Rows {
                columns,
                rows,
                tag,
                suspended: true,
            }
        } else {
            PortalState::Done {
                tag: Some(retag(&tag, 0)),
            }
        };
        match snapshot {
            // A write with RETURNING: its LSN follows its rows.
            Some(snap) => self.report_lsn(socket, snap).await,
            None => Ok(()),
        }
    }

    /// The copy-in sub-protocol of a `COPY ... FROM STDIN` the session
    /// began: CopyInResponse, then CopyData messages fed to the session as
    /// they come (Flush and Sync ignored, as PostgreSQL ignores them
    /// there), until CopyDone (the rows are written: the command tag) or
    /// CopyFail (57014). On an error the rest of the client's CopyData is
    /// dropped by `on_message`, as PostgreSQL drops it.
    async fn copy_in(
        &mut self,
        socket: &mut Socket,
        binary: bool,
        columns: usize,
    ) -> Result<(Result<String, SqlError>, Snapshot), ConnError> {
        let format = i8::from(binary);
        let columns = i16::try_from(columns).unwrap_or(i16::MAX);
        socket
            .send(PgWireBackendMessage::CopyInResponse(CopyInResponse::new(
                format,
                columns,
                vec![i16::from(format); columns as usize],
            )))
            .await?;
        loop {
            let next = match self.pending.pop_front() {
                Some(received) => received,
                None => socket.next().await,
            };
            let msg = match next {
                None => {
                    return Err(ConnError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the client went away during COPY FROM STDIN",
                    )))
                }
                Some(Err(PgWireError::IoError(e)))
                    if e.kind() == std::io::ErrorKind::InvalidData =>
                {
                    return Err(fatal("08P01", format!("invalid frontend message: {e}")))
                }
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(m)) => m,
            };
            match msg {
                PgWireFrontendMessage::CopyData(d) => {
                    // Parsing runs here; writing a chunk of rows, which
                    // takes milliseconds, on the blocking pool.
                    let (fed, snap) = self.inline(|s| s.copy_in_decode(&d.data));
                    match fed {
                        Err(e) => return Ok((Err(e), snap)),
                        Ok(false) => {}
                        Ok(true) => {
                            let (written, snap) =
                                self.blocking(socket, |s| s.copy_in_write()).await?;
                            if let Err(e) = written {
                                return Ok((Err(e), snap));
                            }
                        }
                    }
                }
                PgWireFrontendMessage::CopyDone(_) => {
                    let (done, snap) = self.blocking(socket, |s| s.copy_in_done()).await?;
                    let tag = done.and_then(|o| match o {
                        Outcome::Command { tag } => Ok(tag),
                        _ => Err(SqlError::new("XX000", "COPY ended without a command tag")),
                    });
                    return Ok((tag, snap));
                }
                PgWireFrontendMessage::CopyFail(f) => {
                    let (e, snap) = self.inline(|s| s.copy_in_fail(&f.message));
                    return Ok((Err(e), snap));
                }
                PgWireFrontendMessage::Flush(_) | PgWireFrontendMessage::Sync(_) => {}
                other => {
                    let name = message_name(&other);
                    let (_, snap) = self.inline(|s| s.copy_in_fail(""));
                    return Ok((
                        Err(SqlError::new(
                            "08P01",
                            format!("unexpected {name} message during COPY from stdin"),
                        )),
                        snap,
                    ));
                }
            }
        }
    }

    async fn close(&mut self, socket: &mut Socket, c: Close) -> Result<(), ConnError> {
        let name = c.name.unwrap_or_default();
        match c.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                self.statements.remove(&name);
            }
            TARGET_TYPE_BYTE_PORTAL => {
                self.portals.remove(&name);
            }
            other => {
                return Err(fatal(
                    "08P01",
                    format!("invalid CLOSE message subtype {other}"),
                ))
            }
        }
        socket
            .feed(PgWireBackendMessage::CloseComplete(CloseComplete::new()))
            .await?;
        Ok(())
    }

    async fn sync(&mut self, socket: &mut Socket) -> Result<(), ConnError> {
        self.skip_until_sync = false;
        let status = self.session().lock().status();
        if status == TxnStatus::Idle {
            // Outside a transaction block each Sync ends the implicit
            // transaction, and the portals with it.
            self.portals.clear();
        }
        self.ready_for_query(socket, status).await
    }
}

/// A frontend message's name, for errors (its contents may be large).
fn message_name(m: &PgWireFrontendMessage) -> &'static str {
    match m {
        PgWireFrontendMessage::SslNegotiation(_) => "SSL negotiation",
        PgWireFrontendMessage::Startup(_) => "startup",
        PgWireFrontendMessage::CancelRequest(_) => "cancel request",
        PgWireFrontendMessage::PasswordMessageFamily(_) => "password",
        PgWireFrontendMessage::Query(_) => "Query",
        PgWireFrontendMessage::Parse(_) => "Parse",
        PgWireFrontendMessage::Close(_) => "Close",
        PgWireFrontendMessage::Bind(_) => "Bind",
        PgWireFrontendMessage::Describe(_) => "Describe",
        PgWireFrontendMessage::Execute(_) => "Execute",
        PgWireFrontendMessage::PortalSuspended(_) => "PortalSuspended",
        PgWireFrontendMessage::Flush(_) => "Flush",
        PgWireFrontendMessage::Sync(_) => "Sync",
        PgWireFrontendMessage::Terminate(_) => "Terminate",
        PgWireFrontendMessage::CopyData(_) => "CopyData",
        PgWireFrontendMessage::CopyFail(_) => "CopyFail",
        PgWireFrontendMessage::CopyDone(_) => "CopyDone",
    }
}

/// About the bytes a message read ahead holds.
fn received_bytes(r: &Received) -> usize {
    const SMALL: usize = 64;
    SMALL
        + match r {
            Some(Ok(PgWireFrontendMessage::Query(q))) => q.query.len(),
            Some(Ok(PgWireFrontendMessage::Parse(p))) => p.query.len(),
            Some(Ok(PgWireFrontendMessage::Bind(b))) => b
                .parameters
                .iter()
                .map(|p| p.as_ref().map_or(0, |b| b.len()))
                .sum(),
            Some(Ok(PgWireFrontendMessage::CopyData(d))) => d.data.len(),
            _ => 0,
        }
}

fn internal(e: &tokio::task::JoinError) -> ConnError {
    error!(error = %e, "a statement's task failed; closing the connection");
    fatal("XX000", "internal error while running the statement")
}

async fn send_fatal(socket: &mut Socket, e: ConnError) -> std::io::Result<()> {
    let info = match e {
        ConnError::Fatal(info) => *info,
        ConnError::Sql(e) => {
            let mut info = error_info(&e);
            info.severity = SEVERITY_FATAL.into();
            info
        }
        ConnError::Io(_) => return Ok(()),
    };
    let send = socket.send(PgWireBackendMessage::ErrorResponse(info.into()));
    match tokio::time::timeout(CLOSE_TIMEOUT, send).await {
        Ok(sent) => sent,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

fn expand_formats(codes: &[i16], n: usize, what: &str, of: &str) -> Result<Vec<Format>, SqlError> {
    match codes.len() {
        0 => Ok(vec![Format::Text; n]),
        1 => Ok(vec![Format::from_code(codes[0])?; n]),
        k if k == n => codes.iter().map(|&c| Format::from_code(c)).collect(),
        k => Err(SqlError::new(
            "08P01",
            format!("bind message has {k} {what} but {n} {of}"),
        )),
    }
}

/// PostgreSQL refuses to run a statement whose result changed shape since
/// it was described, rather than send rows the client would misread.
fn check_result_shape(described: &[Column], actual: &[Column]) -> Result<(), SqlError> {
    let same = described.len() == actual.len()
        && described
            .iter()
            .zip(actual)
            .all(|(a, b)| a.ty.pg_oid() == b.ty.pg_oid());
    if described.is_empty() || same {
        Ok(())
    } else {
        Err(
            SqlError::new("0A000", "cached plan must not change result type")
                .with_hint("prepare the statement again"),
        )
    }
}

fn row_description(columns: &[Column], formats: &[Format]) -> RowDescription {
    RowDescription::new(
        columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                FieldDescription::new(
                    c.name.clone(),
                    // The table's OID as pg_class has it (0: computed).
                    if c.table_id == 0
                        || c.table_id >= aqueduct_sql::pg_catalog::CATALOG_RELATION_IDS
                    {
                        0
                    } else {
                        aqueduct_sql::pg_catalog::object_oid(c.table_id) as i32
                    },
                    c.column_id,
                    c.ty.pg_oid(),
                    c.ty.pg_len(),
                    wire::type_modifier(&c.ty),
                    format_of(formats, i).code(),
                )
            })
            .collect(),
    )
}

fn data_row(row: &[Value], columns: &[Column], formats: &[Format]) -> Result<DataRow, SqlError> {
    if row.len() != columns.len() {
        // Rows must match their description, or the client misreads them.
        return Err(SqlError::new(
            "XX000",
            format!(
                "internal error: a row of {} values for {} columns",
                row.len(),
                columns.len()
            ),
        ));
    }
    let mut buf = BytesMut::with_capacity(16 * row.len());
    for (i, v) in row.iter().enumerate() {
        if v.is_null() {
            buf.put_i32(-1);
            continue;
        }
        let at = buf.len();
        buf.put_i32(0);
        let ty = &columns[i].ty;
        match format_of(formats, i) {
            Format::Text => wire::encode_text(v, ty, &mut buf)?,
            Format::Binary => wire::encode_binary(v, ty, &mut buf)?,
        }
        let len = i32::try_from(buf.len() - at - 4)
            .map_err(|_| SqlError::new("54000", "value too large to send"))?;
        buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    let count =
        i16::try_from(row.len()).map_err(|_| SqlError::new("54000", "too many columns to send"))?;
    Ok(DataRow::new(buf, count))
}

/// Sends up to `max_rows` rows, then CommandComplete; or, when the limit
/// is reached, PortalSuspended (returns `true`: the portal has more to
/// give, or at least does not know it has not, as in PostgreSQL).
async fn send_rows(
    socket: &mut Socket,
    columns: &[Column],
    formats: &[Format],
    rows: &mut impl Iterator<Item = Vec<Value>>,
    max_rows: usize,
    tag: &str,
    was_suspended: bool,
) -> Result<bool, ConnError> {
    let mut sent = 0;
    while sent < max_rows {
        let Some(row) = rows.next() else {
            let tag = if was_suspended {
                retag(tag, sent)
            } else {
                tag.to_string()
            };
            socket
                .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                    tag,
                )))
                .await?;
            return Ok(false);
        };
        socket
            .feed(PgWireBackendMessage::DataRow(data_row(
                &row, columns, formats,
            )?))
            .await?;
        sent += 1;
    }
    socket
        .feed(PgWireBackendMessage::PortalSuspended(PortalSuspended::new()))
        .await?;
    Ok(true)
}

/// The data of a `COPY ... TO STDOUT`: CopyOutResponse, a CopyData per
/// chunk, CopyDone, then CommandComplete with `tag`.
async fn send_copy_out(
    socket: &mut Socket,
    binary: bool,
    columns: usize,
    chunks: Vec<Vec<u8>>,
    tag: String,
) -> Result<(), ConnError> {
    let format = i8::from(binary);
    let columns = i16::try_from(columns).unwrap_or(i16::MAX);
    socket
        .feed(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            format,
            columns,
            vec![i16::from(format); columns as usize],
        )))
        .await?;
    for chunk in chunks {
        socket
            .feed(PgWireBackendMessage::CopyData(CopyData::new(chunk.into())))
            .await?;
    }
    socket
        .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    socket
        .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
            tag,
        )))
        .await?;
    Ok(())
}

/// `SET` statements for the settings a client sent in its startup message:
/// those in its `options` parameter (libpq's `PGOPTIONS`, as
/// `-c name=value`) first, then the parameters, as PostgreSQL applies them.
fn startup_settings(startup: &Startup) -> Vec<String> {
    let options = startup
        .parameters
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("options"))
        .flat_map(|(_, v)| startup_options(v));
    let parameters = startup
        .parameters
        .iter()
        .filter(|(k, _)| !STARTUP_NON_SETTINGS.contains(&k.to_ascii_lowercase().as_str()))
        .map(|(k, v)| (k.clone(), v.clone()));
    options
        .chain(parameters)
        .filter(|(k, _)| {
            k.len() <= MAX_SETTING_NAME_BYTES
                && k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        })
        .map(|(k, v)| format!("SET {k} TO '{}'", v.replace('\'', "''")))
        .collect()
}

/// The settings in a startup `options` string, split as PostgreSQL splits
/// it: words separated by white space, a backslash taking the next
/// character as it is (`-c default_transaction_isolation=read\ committed`).
/// `-c name=value`, `-cname=value` and `--name=value` each set one (a `-`
/// in the name stands for `_`); other switches are ignored.
fn startup_options(options: &str) -> Vec<(String, String)> {
    let mut words = Vec::new();
    let mut chars = options.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut word = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
            if c == '\\' {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            } else {
                word.push(c);
            }
        }
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let setting = if word == "-c" {
            words.next()
        } else if let Some(rest) = word.strip_prefix("--") {
            Some(rest.to_string())
        } else {
            word.strip_prefix("-c").map(str::to_string)
        };
        if let Some((name, value)) = setting.as_deref().and_then(|s| s.split_once('=')) {
            settings.push((name.replace('-', "_"), value.to_string()));
        }
    }
    settings
}

/// For a lone `DEALLOCATE [PREPARE] name | ALL`: `Some(None)` for ALL,
/// `Some(Some(name))` for one statement.
fn deallocate_target(sql: &str) -> Option<Option<String>> {
    let words: Vec<&str> = sql
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    let rest = match words.as_slice() {
        [first, rest @ ..] if first.eq_ignore_ascii_case("deallocate") => rest,
        _ => return None,
    };
    let rest = match rest {
        [p, rest @ ..] if p.eq_ignore_ascii_case("prepare") => rest,
        other => other,
    };
    match rest {
        [name] if name.eq_ignore_ascii_case("all") => Some(None),
        [name] => Some(Some(name.trim_matches('"').to_string())),
        _ => None,
    }
}
