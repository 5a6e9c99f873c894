//! The chain statements, run for the session (`docs/chains.md`):
//! `CREATE [OR REPLACE] CHAIN`, `DROP CHAIN`, `EXPLAIN CHAIN`, `CALL` of
//! a chain and `WAIT FOR CHAINS`.

use std::sync::Arc;

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::{Column, Outcome};
use aqueduct_tables::{ChainDef, SchemaChange};
use aqueduct_values::{DataType, Value};

use aqueduct_log::Lsn;
use sqlparser::ast::Statement;

use super::state::{command, Session};
use crate::chains::analysis::Mode;
use crate::chains::declare::{self, ChainVerb};
use crate::chains::hop::{DeclSource, HopSession, Ticket, PROGRESS_TABLE};
use crate::chains::runtime::{Alive, CallStatus, Runtime, SessionFactory, Started};
use crate::engine::Engine;
use crate::roles::Principal;

/// The role hops run as: a superuser outside the catalog, as a chain runs
/// with its declarer's rights (only superusers declare chains).
const CHAIN_ROLE: &str = "aqueduct_chains";

impl HopSession for Session {
    fn execute_one(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        self.execute(sql)
            .into_iter()
            .last()
            .unwrap_or(Ok(Outcome::Empty))
    }

    fn run_one(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        self.statement(|s| s.run(Some(st), "", hints, params))
    }

    fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }
}

impl Engine {
    /// The logical servers, started on first use (which resumes the
    /// chains in flight).
    pub(crate) fn chain_runtime(self: &Arc<Engine>) -> Result<Arc<Runtime>, SqlError> {
        self.chains.runtime(|| {
            let weak = Arc::downgrade(self);
            let sessions: SessionFactory = Arc::new(move || {
                let engine = weak.upgrade()?;
                let s: Box<dyn HopSession> =
                    Box::new(engine.session_as(Principal::superuser(CHAIN_ROLE)));
                Some(s)
            });
            let weak = Arc::downgrade(self);
            let alive: Alive =
                Arc::new(move || weak.upgrade().is_some_and(|e| !e.is_shutting_down()));
            let weak = Arc::downgrade(self);
            let decls: DeclSource = Arc::new(move |name: &str| {
                let engine = weak.upgrade()?;
                let compiled = engine.chains.compiled(&engine.database().read()).ok()?;
                compiled.decls.get(name).cloned()
            });
            let datacenters = self.chains.datacenters.lock().clone();
            let placement = self.chains.placement.lock().clone();
            Runtime::start(sessions, alive, decls, datacenters, placement)
        })
    }

    /// Resumes the chains a crash or stop left in flight (their progress
    /// is in the log), on a server that takes its own writes; on a node of
    /// a spread placement, starts listening for other nodes' hops. The server
    /// calls it once it knows it is one (not a follower, not in a Raft
    /// group).
    pub fn resume_chains(self: &Arc<Engine>) -> Result<(), SqlError> {
        // A node of a spread placement listens for hops from the start.
        let spread = self.chains.placement.lock().is_spread();
        let in_flight = spread
            || self
                .database()
                .read()
                .table(PROGRESS_TABLE)
                .is_some_and(|t| !t.is_empty());
        if in_flight {
            self.chain_runtime()?;
        }
        Ok(())
    }
}

/// The columns a statement's rows have.
pub(crate) fn columns(verb: ChainVerb) -> Vec<Column> {
    let col = |name: &str, ty: DataType| Column {
        name: name.into(),
        ty,
        table_id: 0,
        column_id: 0,
    };
    match verb {
        ChainVerb::Explain => vec![col("QUERY PLAN", DataType::Text)],
        ChainVerb::Call => vec![
            col("chain_id", DataType::Int8),
            col("mode", DataType::Text),
            col("status", DataType::Text),
            col("lsn", DataType::Text),
            col("variables", DataType::Text),
        ],
        _ => Vec::new(),
    }
}

/// The arguments' values when every one is a literal (a number, a string,
/// a boolean or NULL, a number maybe negated), as untyped text the
/// parameter's type then parses, or a parameter `$n` of the extended
/// protocol, from `bound`; `None` when one is anything else.
fn literal_arguments(args: &[sqlparser::ast::Expr], bound: &[Value]) -> Option<Vec<Value>> {
    use sqlparser::ast::{Expr, UnaryOperator, Value as V};
    args.iter()
        .map(|a| match a {
            Expr::Value(v) => match &v.value {
                V::Placeholder(p) => placeholder(p).and_then(|n| bound.get(n)).cloned(),
                V::Number(n, _) => Some(Value::Text(n.clone())),
                V::SingleQuotedString(s) => Some(Value::Text(s.clone())),
                V::Boolean(b) => Some(Value::Bool(*b)),
                V::Null => Some(Value::Null),
                _ => None,
            },
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match expr.as_ref() {
                Expr::Value(v) => match &v.value {
                    V::Number(n, _) => Some(Value::Text(format!("-{n}"))),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The index of a parameter `$n` (from 0).
fn placeholder(p: &str) -> Option<usize> {
    p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
}

/// The parameter types of a prepared `CALL`: `$n` as an argument has the
/// chain parameter's type there (unless the client declared one); a
/// parameter used elsewhere in the arguments is text.
pub(crate) fn call_parameter_types(
    call: &declare::CallChain,
    decl: Option<&declare::ChainDecl>,
    hints: &[Option<DataType>],
) -> Vec<DataType> {
    use sqlparser::ast::{Expr, Value as V};
    let mut types: Vec<Option<DataType>> = hints.to_vec();
    let mut note = |n: usize, ty: Option<DataType>| {
        if types.len() <= n {
            types.resize(n + 1, None);
        }
        if types[n].is_none() {
            types[n] = ty;
        }
    };
    for (i, arg) in call.args.iter().enumerate() {
        if let Expr::Value(v) = arg {
            if let V::Placeholder(p) = &v.value {
                if let Some(n) = placeholder(p) {
                    note(
                        n,
                        decl.and_then(|d| d.params.get(i)).map(|(_, t)| t.clone()),
                    );
                }
            }
        }
        let _ = sqlparser::ast::visit_expressions(arg, |e| {
            if let Expr::Value(v) = e {
                if let V::Placeholder(p) = &v.value {
                    if let Some(n) = placeholder(p) {
                        note(n, None);
                    }
                }
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
    }
    types
        .into_iter()
        .map(|t| t.unwrap_or(DataType::Text))
        .collect()
}

impl Session {
    pub(crate) fn run_chain_statement(
        &mut self,
        verb: ChainVerb,
        sql: &str,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        if self.txn.is_some() && verb != ChainVerb::Explain {
            return Err(SqlError::new(
                "25001",
                "chain statements cannot run inside a transaction block",
            )
            .with_hint("a chain is its own transaction: CALL it outside BEGIN ... COMMIT"));
        }
        if self.engine.group_link().is_some() || self.engine.commit_source().is_some() {
            return Err(SqlError::new(
                "0A000",
                "transaction chains run on a server that takes its own writes, not on a member of a Raft group or a follower",
            ));
        }
        match verb {
            ChainVerb::Create => self.create_chain(sql),
            ChainVerb::Drop => self.drop_chain(sql),
            ChainVerb::Explain => self.explain_chain(sql),
            ChainVerb::Call => self.call_chain(sql, params),
            ChainVerb::Wait => self.wait_for_chains().map(|()| command("WAIT")),
        }
    }

    fn create_chain(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        self.require_superuser("create chains")?;
        let (decl, replace) = declare::parse_create(sql)?;
        let db = self.engine.database();
        let owner = self.principal.name.clone();
        let (_, lsn) = db.run_exclusive(|catalog, txn| {
            for hop in &decl.hops {
                for t in hop.reads.iter().chain(&hop.writes) {
                    if catalog.table(t).is_none() && catalog.view(t).is_none() {
                        return Err(SqlError::new(
                            "42P01",
                            format!("relation \"{t}\" does not exist (in chain {})", decl.name),
                        ));
                    }
                }
            }
            crate::chains::shards::check_hops(&decl, catalog)?;
            if let Some(then) = &decl.then {
                if then.chain != decl.name && catalog.chain(&then.chain).is_none() {
                    return Err(SqlError::new(
                        "42883",
                        format!(
                            "chain {} links to chain \"{}\", which does not exist",
                            decl.name, then.chain
                        ),
                    )
                    .with_hint("declare the linked chain first"));
                }
            }
            let existing = catalog.chain(&decl.name).map(|c| c.id);
            if existing.is_some() && !replace {
                return Err(SqlError::new(
                    "42723",
                    format!("chain \"{}\" already exists", decl.name),
                )
                .with_hint("CREATE OR REPLACE CHAIN replaces it"));
            }
            // The analysis must accept the workload with this chain.
            let mut without = catalog.clone();
            if let Some(id) = existing {
                without.apply_schema(SchemaChange::DropChain { id });
            }
            crate::chains::analysis::compile(&without, Some(&decl))?;
            if let Some(id) = existing {
                txn.schema(SchemaChange::DropChain { id });
            }
            let id = catalog.next_table_id();
            txn.schema(SchemaChange::CreateChain(ChainDef {
                id,
                name: decl.name.clone(),
                sql: sql.trim().trim_end_matches(';').to_string(),
            }));
            txn.schema(SchemaChange::SetOwner {
                object: id,
                owner: owner.clone(),
            });
            Ok::<(), SqlError>(())
        })?;
        if let Some(lsn) = lsn {
            self.set_last_lsn(lsn);
        }
        Ok(command("CREATE CHAIN"))
    }

    fn drop_chain(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        self.require_superuser("drop chains")?;
        let st = declare::parse_drop(sql)?;
        let db = self.engine.database();
        let (_, lsn) = db.run_exclusive(|catalog, txn| {
            for name in &st.names {
                match catalog.chain(name) {
                    Some(c) => txn.schema(SchemaChange::DropChain { id: c.id }),
                    None if st.if_exists => {}
                    None => {
                        return Err(SqlError::new(
                            "42883",
                            format!("chain \"{name}\" does not exist"),
                        ))
                    }
                }
            }
            Ok::<(), SqlError>(())
        })?;
        if let Some(lsn) = lsn {
            self.set_last_lsn(lsn);
        }
        Ok(command("DROP CHAIN"))
    }

    fn explain_chain(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        let st = declare::parse_explain(sql)?;
        let compiled = self
            .engine
            .chains
            .compiled(&self.engine.database().read())?;
        let missing = || SqlError::new("42883", format!("chain \"{}\" does not exist", st.name));
        let text = if st.dot {
            compiled
                .report
                .to_dot_for_chain(&st.name)
                .ok_or_else(missing)?
        } else {
            compiled
                .report
                .explain_chain(&st.name)
                .ok_or_else(missing)?
        };
        let rows = text
            .lines()
            .map(|l| vec![Value::Text(l.to_string())])
            .collect::<Vec<_>>();
        Ok(Outcome::Rows {
            columns: columns(ChainVerb::Explain),
            tag: format!("EXPLAIN {}", rows.len()),
            rows,
        })
    }

    fn call_chain(&mut self, sql: &str, params: &[Value]) -> Result<Outcome, SqlError> {
        let call = declare::parse_call(sql)?;
        let compiled = self
            .engine
            .chains
            .compiled(&self.engine.database().read())?;
        let decl = compiled.decls.get(&call.name).cloned().ok_or_else(|| {
            SqlError::new(
                "42883",
                format!("procedure or chain \"{}\" does not exist", call.name),
            )
            .with_hint("CALL runs a chain declared with CREATE CHAIN (docs/chains.md)")
        })?;
        if call.args.len() != decl.params.len() {
            return Err(SqlError::new(
                "42883",
                format!(
                    "chain {} takes {} arguments, not {}",
                    decl.name,
                    decl.params.len(),
                    call.args.len()
                ),
            ));
        }
        let mut slots = self.call_arguments(&call.args, &decl.params, params)?;
        slots.resize(decl.slots.len(), Value::Null);
        let forced = self
            .engine
            .chains
            .force_piecewise
            .load(std::sync::atomic::Ordering::SeqCst);
        let mode = if forced {
            Mode::Piecewise
        } else {
            compiled.mode(&decl.name)
        };
        let runtime = self.engine.chain_runtime()?;
        let started = match mode {
            Mode::Piecewise => runtime.call(decl.clone(), slots)?,
            Mode::Distributed => runtime.call_distributed(decl.clone(), slots)?,
        };
        self.set_last_lsn(started.lsn);
        // Later hops, or a linked chain, ran or still run after the call
        // was answered.
        let pending = started.status == CallStatus::Started || !started.ticket.is_done();
        let started = if pending && self.settings["aqueduct.chain_return"] == "completion" {
            let (lsn, slots) = self.await_ticket(&started.ticket)?;
            self.set_last_lsn(lsn);
            Started {
                status: CallStatus::Completed,
                lsn,
                slots,
                ..started
            }
        } else {
            if pending {
                self.chain_tickets.retain(|t| !t.is_done());
                self.chain_tickets.push(started.ticket.clone());
            }
            started
        };
        let vars: serde_json::Map<String, serde_json::Value> = declare::variables(&decl)
            .into_iter()
            .map(|(slot, name)| {
                let v = match started.slots.get(slot) {
                    None | Some(Value::Null) => serde_json::Value::Null,
                    Some(Value::Int(i)) => serde_json::json!(i),
                    Some(Value::Bool(b)) => serde_json::json!(b),
                    Some(v) => serde_json::Value::String(v.to_string()),
                };
                (name.to_string(), v)
            })
            .collect();
        Ok(Outcome::Rows {
            columns: columns(ChainVerb::Call),
            rows: vec![vec![
                Value::Int(started.id as i64),
                Value::Text(mode.as_str().into()),
                Value::Text(started.status.as_str().into()),
                Value::Text(started.lsn.to_string()),
                Value::Text(serde_json::Value::Object(vars).to_string()),
            ]],
            tag: "CALL".into(),
        })
    }

    /// The arguments' values, each of its parameter's type.
    fn call_arguments(
        &mut self,
        args: &[sqlparser::ast::Expr],
        params: &[(String, DataType)],
        bound: &[Value],
    ) -> Result<Vec<Value>, SqlError> {
        if args.is_empty() {
            return Ok(Vec::new());
        }
        // Literals and parameters (the usual cases) need no statement.
        if let Some(values) = literal_arguments(args, bound) {
            return values
                .into_iter()
                .zip(params)
                .map(|(v, (name, ty))| {
                    v.coerce(ty).map_err(|e| {
                        SqlError::new(e.sqlstate(), format!("argument {name} of the chain: {e}"))
                    })
                })
                .collect();
        }
        let list: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut st = aqueduct_plan::parse::parse(&format!("SELECT {}", list.join(", ")))?;
        let st = st
            .pop()
            .ok_or_else(|| SqlError::syntax("CALL chain(arguments)"))?;
        let hints: Vec<Option<DataType>> = bound.iter().map(|_| None).collect();
        let row = match self.statement(|s| s.run(Some(&st), "", &hints, bound))? {
            Outcome::Rows { mut rows, .. } if !rows.is_empty() => rows.swap_remove(0),
            _ => return Err(SqlError::syntax("CALL chain(arguments)")),
        };
        row.into_iter()
            .zip(params)
            .map(|(v, (name, ty))| {
                v.coerce(ty).map_err(|e| {
                    SqlError::new(e.sqlstate(), format!("argument {name} of the chain: {e}"))
                })
            })
            .collect()
    }

    fn await_ticket(&self, ticket: &Arc<Ticket>) -> Result<(Lsn, Vec<Value>), SqlError> {
        self.await_ticket_within(ticket)
            .unwrap_or_else(|| Err(chain_late()))
    }

    /// The chain's outcome, or `None` when it did not complete within
    /// `aqueduct.consistency_timeout` (its hops go on).
    fn await_ticket_within(
        &self,
        ticket: &Arc<Ticket>,
    ) -> Option<Result<(Lsn, Vec<Value>), SqlError>> {
        ticket.wait(self.reads.consistency_timeout)
    }

    /// Waits until every chain this session called has completed, and
    /// makes the session's reads see them (`session` consistency).
    pub(crate) fn wait_for_chains(&mut self) -> Result<(), SqlError> {
        let tickets = std::mem::take(&mut self.chain_tickets);
        let mut result = Ok(());
        for (i, t) in tickets.iter().enumerate() {
            match self.await_ticket_within(t) {
                Some(Ok((lsn, _))) => {
                    let last = self.last_lsn.max(lsn);
                    self.set_last_lsn(last);
                }
                // Not yet complete: this and the later ones are waited
                // for again.
                None => {
                    self.chain_tickets = tickets[i..].to_vec();
                    return Err(chain_late());
                }
                // A chain whose later hop failed: reported once.
                Some(Err(e)) => {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result
    }
}

/// A chain this session called did not complete in time (SQLSTATE 57014).
fn chain_late() -> SqlError {
    SqlError::new(
        "57014",
        "a chain this session called did not complete within aqueduct.consistency_timeout",
    )
    .with_hint("its hops go on; WAIT FOR CHAINS waits again")
}
