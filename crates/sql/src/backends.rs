//! The server's backends: the sessions clients hold through a connection,
//! by process id. `pg_stat_activity` lists them, `pg_backend_pid()` names
//! a session's own, and `pg_cancel_backend` / `pg_terminate_backend` act
//! on another's. The front end attaches a session when its client has
//! authenticated; the session leaves the registry when it ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use aqueduct_expr::interrupt::Interrupt;

/// The most characters of a statement's text `pg_stat_activity` keeps
/// (PostgreSQL's `track_activity_query_size` default, 1024 bytes).
pub const MAX_ACTIVITY_QUERY_CHARS: usize = 1024;

/// The running backends.
#[derive(Default)]
pub struct Backends {
    by_pid: Mutex<BTreeMap<i32, Arc<Backend>>>,
}

/// What ends a backend's connection (the front end's), when
/// `pg_terminate_backend` asks.
pub type Terminate = Box<dyn Fn() + Send + Sync>;

/// One backend: who it is, and what its session does now.
pub struct Backend {
    pub pid: i32,
    pub user: String,
    pub database: String,
    /// The client's address and port; `None` over a Unix socket.
    pub client: Option<std::net::SocketAddr>,
    /// The server's address the client connected to.
    pub server: Option<std::net::SocketAddr>,
    /// When it connected (microseconds since the Unix epoch).
    pub started_micros: i64,
    interrupt: Interrupt,
    terminate: Terminate,
    activity: Mutex<Activity>,
}

/// What a backend's session is doing, as `pg_stat_activity` shows it.
#[derive(Clone, Debug, Default)]
pub struct Activity {
    /// `application_name` as the session has it now.
    pub application_name: String,
    /// `active`, `idle`, `idle in transaction` or `idle in transaction
    /// (aborted)`.
    pub state: &'static str,
    /// The running or last statement's text (at most
    /// [`MAX_ACTIVITY_QUERY_CHARS`]).
    pub query: String,
    pub query_start_micros: Option<i64>,
    pub transaction_start_micros: Option<i64>,
    pub state_change_micros: i64,
}

impl Backend {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pid: i32,
        user: String,
        database: String,
        application_name: String,
        client: Option<std::net::SocketAddr>,
        server: Option<std::net::SocketAddr>,
        started_micros: i64,
        interrupt: Interrupt,
        terminate: Terminate,
    ) -> Backend {
        Backend {
            pid,
            user,
            database,
            client,
            server,
            started_micros,
            interrupt,
            terminate,
            activity: Mutex::new(Activity {
                application_name,
                state: "idle",
                state_change_micros: started_micros,
                ..Activity::default()
            }),
        }
    }

    pub fn activity(&self) -> Activity {
        self.activity.lock().clone()
    }

    pub(crate) fn set_activity(&self, f: impl FnOnce(&mut Activity)) {
        f(&mut self.activity.lock());
    }
}

impl aqueduct_plan::plan::BackendSignals for Backends {
    fn cancel(&self, pid: i32) -> bool {
        Backends::cancel(self, pid)
    }

    fn terminate(&self, pid: i32) -> bool {
        Backends::terminate(self, pid)
    }
}

impl Backends {
    pub(crate) fn attach(&self, backend: Arc<Backend>) {
        self.by_pid.lock().insert(backend.pid, backend);
    }

    pub(crate) fn detach(&self, pid: i32) {
        self.by_pid.lock().remove(&pid);
    }

    /// Every backend, by process id.
    pub fn list(&self) -> Vec<Arc<Backend>> {
        self.by_pid.lock().values().cloned().collect()
    }

    /// `pg_cancel_backend(pid)`: stops the backend's running statement
    /// (57014 there). False when no backend has that process id.
    pub fn cancel(&self, pid: i32) -> bool {
        match self.by_pid.lock().get(&pid) {
            Some(b) => {
                b.interrupt.cancel();
                true
            }
            None => false,
        }
    }

    /// `pg_terminate_backend(pid)`: stops its running statement and ends
    /// its connection (57P01 to its client). False when no backend has
    /// that process id.
    pub fn terminate(&self, pid: i32) -> bool {
        let Some(b) = self.by_pid.lock().get(&pid).cloned() else {
            return false;
        };
        b.interrupt.cancel();
        (b.terminate)();
        true
    }
}
