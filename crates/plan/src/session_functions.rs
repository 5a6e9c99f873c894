//! The functions that answer about the session and the server running a
//! statement: `pg_backend_pid()`, `txid_current()` /
//! `pg_current_xact_id()`, `inet_server_addr()` / `inet_server_port()`,
//! `inet_client_addr()` / `inet_client_port()`,
//! `pg_postmaster_start_time()`, and the ones that act on another backend,
//! `pg_cancel_backend(pid)` and `pg_terminate_backend(pid)`. The first are
//! bound to constants from the session's [`SessionFacts`]; the last call
//! the server's backends when evaluated. A maintained view refuses all of
//! them (its rows cannot depend on who reads it).

use std::sync::Arc;

use aqueduct_expr::{Expr, ServerCall, ServerFunction, SqlError};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use crate::bind::{Binder, Scope};
use crate::catalog_functions::arity_check;
use crate::plan::BackendSignals;

/// `pg_cancel_backend` or `pg_terminate_backend`.
struct Signal {
    signals: Arc<dyn BackendSignals>,
    terminate: bool,
}

impl ServerFunction for Signal {
    fn call(&self, args: &[Value]) -> Result<Value, SqlError> {
        let pid = match args {
            [Value::Null, ..] => return Ok(Value::Null),
            [Value::Int(pid), ..] => i32::try_from(*pid).unwrap_or(0),
            _ => {
                return Err(SqlError::new(
                    "22023",
                    "a backend's process id is an integer",
                ))
            }
        };
        let found = if self.terminate {
            self.signals.terminate(pid)
        } else {
            self.signals.cancel(pid)
        };
        if !found {
            // PostgreSQL warns and answers false.
            return Ok(Value::Bool(false));
        }
        Ok(Value::Bool(true))
    }
}

/// `pg_sleep(seconds)`: waits, stopping early with the statement
/// (statement_timeout, a cancel request, shutdown).
struct Sleep;

/// How often a sleeping statement looks whether it should stop.
const SLEEP_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

impl ServerFunction for Sleep {
    fn call(&self, args: &[Value]) -> Result<Value, SqlError> {
        let seconds = match args {
            [Value::Float(s)] => *s,
            _ => return Ok(Value::Null),
        };
        if !seconds.is_finite() {
            return Err(SqlError::new(
                "22023",
                "pg_sleep takes a finite number of seconds",
            ));
        }
        let until = std::time::Instant::now()
            + std::time::Duration::from_secs_f64(seconds.clamp(0.0, u32::MAX as f64));
        loop {
            aqueduct_expr::interrupt::check()?;
            let now = std::time::Instant::now();
            if now >= until {
                return Ok(Value::Null);
            }
            std::thread::sleep(SLEEP_CHECK_INTERVAL.min(until - now));
        }
    }
}

impl Binder<'_> {
    /// Binds a session function `name(args)`; `None` when `name` is not
    /// one.
    pub(crate) fn session_function(
        &mut self,
        name: &str,
        args: &[ast::Expr],
        scope: &Scope,
    ) -> Result<Option<Expr>, SqlError> {
        let arity = |n: usize| arity_check(name, args.len(), args.len() == n);
        if name == "pg_sleep" {
            arity(1)?;
            if !self.without_from {
                return Err(SqlError::unsupported(
                    "pg_sleep() anywhere but in a SELECT without FROM",
                )
                .with_hint("sleep in a statement of its own: SELECT pg_sleep(1)"));
            }
            let e = self.expr(&args[0], scope, Some(&DataType::Float8))?;
            return Ok(Some(Expr::Server(
                Arc::new(ServerCall {
                    name: "pg_sleep",
                    function: Box::new(Sleep),
                    // PostgreSQL's is void; its one value is NULL either way.
                    ty: DataType::Text,
                }),
                vec![Expr::Cast(Box::new(e), DataType::Float8)],
            )));
        }
        let known = matches!(
            name,
            "pg_backend_pid"
                | "txid_current"
                | "pg_current_xact_id"
                | "txid_current_if_assigned"
                | "pg_current_xact_id_if_assigned"
                | "inet_server_addr"
                | "inet_server_port"
                | "inet_client_addr"
                | "inet_client_port"
                | "pg_postmaster_start_time"
                | "pg_cancel_backend"
                | "pg_terminate_backend"
        );
        if !known {
            return Ok(None);
        }
        let Some(facts) = self.facts() else {
            return Err(if self.has_time() {
                SqlError::unsupported(format!(
                    "{name}() in a query evaluated through the dataflow (a join, subquery or set operation)"
                ))
                .with_hint(format!("select {name}() in a statement of its own, or over one relation"))
            } else {
                crate::bind::session_dependent_in_view(name)
            });
        };
        let addr = |a: Option<std::net::SocketAddr>| {
            a.map_or(Value::Null, |a| Value::Text(a.ip().to_string()))
        };
        let port = |a: Option<std::net::SocketAddr>| {
            a.map_or(Value::Null, |a| Value::Int(i64::from(a.port())))
        };
        let constant = match name {
            "pg_backend_pid" => Some((Value::Int(i64::from(facts.backend_pid)), DataType::Int4)),
            "txid_current"
            | "pg_current_xact_id"
            | "txid_current_if_assigned"
            | "pg_current_xact_id_if_assigned" => {
                Some((Value::Int(facts.transaction_id), DataType::Int8))
            }
            "inet_server_addr" => Some((addr(facts.server_addr), DataType::Text)),
            "inet_client_addr" => Some((addr(facts.client_addr), DataType::Text)),
            "inet_server_port" => Some((port(facts.server_addr), DataType::Int4)),
            "inet_client_port" => Some((port(facts.client_addr), DataType::Int4)),
            "pg_postmaster_start_time" => Some((
                Value::TimestampTz(facts.server_started_micros),
                DataType::TimestampTz,
            )),
            _ => None,
        };
        if let Some((value, ty)) = constant {
            arity(0)?;
            return Ok(Some(Expr::Cast(Box::new(Expr::Literal(value)), ty)));
        }
        // pg_cancel_backend(pid), pg_terminate_backend(pid [, timeout])
        let terminate = name == "pg_terminate_backend";
        if !(args.len() == 1 || (terminate && args.len() == 2)) {
            arity(1)?;
        }
        let mut bound = Vec::new();
        for a in args {
            let e = self.expr(a, scope, Some(&DataType::Int8))?;
            bound.push(Expr::Cast(Box::new(e), DataType::Int8));
        }
        let signals = facts.signals.ok_or_else(|| {
            SqlError::new("55000", format!("{name}(): this server has no backends"))
        })?;
        Ok(Some(Expr::Server(
            Arc::new(ServerCall {
                name: if terminate {
                    "pg_terminate_backend"
                } else {
                    "pg_cancel_backend"
                },
                function: Box::new(Signal { signals, terminate }),
                ty: DataType::Bool,
            }),
            bound,
        )))
    }
}
