//! A session on a member of a Raft group that does not lead: its writes
//! run on the leader (`crate::forward` says how, and why a moved
//! transaction block is what the client saw).

use std::ops::ControlFlow;
use std::sync::Arc;

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::Outcome;
use aqueduct_values::Value;
use sqlparser::ast::{Expr, Statement};

use super::state::{Movable, RemoteBlock, Session, TxnStatus, DEFAULT_SETTINGS};
use crate::forward::{
    copy_refused, ForwardReply, ForwardRequest, Forwarded, GroupLink, ABANDON_TIMEOUT,
    FORWARD_TIMEOUT, MAX_MOVABLE_ROWS, MAX_MOVABLE_STATEMENTS,
};

/// Whether a statement writes, as far as its form tells: those that may
/// go to the leader. A write taken for a read runs here and is refused
/// (25006) at its commit; a read taken for a write runs on the leader.
pub(crate) fn writes(st: &Statement) -> bool {
    use Statement as S;
    match st {
        S::Query(_) => calls_sequence_writer(st),
        S::Copy { to, .. } => !to,
        S::StartTransaction { .. }
        | S::Commit { .. }
        | S::Rollback { .. }
        | S::Savepoint { .. }
        | S::ReleaseSavepoint { .. }
        | S::Set(_)
        | S::ShowVariable { .. }
        | S::ShowVariables { .. }
        | S::ShowTables { .. }
        | S::ShowColumns { .. }
        | S::ShowFunctions { .. }
        | S::ShowStatus { .. }
        | S::ShowCreate { .. }
        | S::ExplainTable { .. }
        | S::Prepare { .. }
        | S::Execute { .. }
        | S::Deallocate { .. }
        | S::Declare { .. }
        | S::Fetch { .. }
        | S::Close { .. }
        | S::Discard { .. } => false,
        S::Explain { analyze, .. } => *analyze,
        _ => true,
    }
}

/// A query that calls `nextval` or `setval` (which move a sequence).
fn calls_sequence_writer(st: &Statement) -> bool {
    let found = sqlparser::ast::visit_expressions(st, |e| match e {
        Expr::Function(f)
            if f.name.0.last().is_some_and(|p| {
                p.as_ident().is_some_and(|i| {
                    i.value.eq_ignore_ascii_case("nextval")
                        || i.value.eq_ignore_ascii_case("setval")
                })
            }) =>
        {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    });
    found.is_break()
}

impl Session {
    /// This member's forwarder while it does not lead.
    pub(crate) fn forwarding(&self) -> Option<(Arc<dyn GroupLink>, Result<String, SqlError>)> {
        let f = self.engine.group_link()?;
        let leader = f.leader()?;
        Some((f, leader))
    }

    pub(crate) fn remote_status(&self) -> Option<TxnStatus> {
        self.remote.as_ref().map(|r| r.status)
    }

    /// Runs `st` on the leader where it must run there: every statement of
    /// a block held there, and a write on a member that does not lead.
    /// `None`: it runs here.
    pub(crate) fn forward_if_needed(
        &mut self,
        st: &Statement,
        params: &[Value],
    ) -> Option<Result<Outcome, SqlError>> {
        let statement = || Forwarded {
            sql: st.to_string(),
            params: params.to_vec(),
        };
        if self.remote.is_some() {
            let ends = matches!(st, Statement::Commit { .. } | Statement::Rollback { .. });
            return self.in_remote_block(statement(), ends);
        }
        if !writes(st) || self.forwarding().is_none() {
            return None;
        }
        if matches!(st, Statement::Copy { .. }) {
            return Some(Err(copy_refused()));
        }
        self.forward_write(statement())
    }

    /// A statement the SQL parser does not know (`custom.rs`), all of
    /// which write: run on the leader as [`Session::forward_if_needed`]
    /// runs a write.
    pub(crate) fn forward_custom(&mut self, sql: &str) -> Option<Result<Outcome, SqlError>> {
        let statement = Forwarded {
            sql: sql.to_string(),
            params: Vec::new(),
        };
        if self.remote.is_some() {
            return self.in_remote_block(statement, false);
        }
        self.forward_write(statement)
    }

    /// A write, on the leader where this member does not lead.
    fn forward_write(&mut self, statement: Forwarded) -> Option<Result<Outcome, SqlError>> {
        let (f, leader) = self.forwarding()?;
        let leader = match leader {
            Ok(l) => l,
            Err(e) => return Some(Err(e)),
        };
        if self.txn.is_none() {
            return Some(self.autocommit_on_leader(f.as_ref(), leader, statement));
        }
        if self.failed {
            // It fails here as in any failed block (25P02).
            return None;
        }
        Some(self.move_block(f.as_ref(), leader, statement))
    }

    /// Keeps what a block on a member that does not lead ran (`result`
    /// of `st`), to move it to the leader at its first write.
    pub(crate) fn record_for_move(
        &mut self,
        st: &Statement,
        params: &[Value],
        result: &Result<Outcome, SqlError>,
    ) {
        if self.txn.is_none() || self.remote.is_some() {
            self.movable = None;
            return;
        }
        if matches!(st, Statement::StartTransaction { .. }) {
            self.movable = self.forwarding().map(|_| Movable::Recording {
                statements: Vec::new(),
                rows: 0,
            });
            return;
        }
        let Some(Movable::Recording { statements, rows }) = &mut self.movable else {
            return;
        };
        if let Ok(Outcome::Rows { rows: r, .. }) = result {
            *rows += r.len();
        }
        if statements.len() >= MAX_MOVABLE_STATEMENTS || *rows > MAX_MOVABLE_ROWS {
            self.movable = Some(Movable::TooLong);
            return;
        }
        statements.push((
            Forwarded {
                sql: st.to_string(),
                params: params.to_vec(),
            },
            result.clone(),
        ));
    }

    /// The settings a new session on the leader needs to act as this one.
    fn changed_settings(&self) -> std::collections::BTreeMap<String, String> {
        self.settings
            .iter()
            .filter(|(k, v)| {
                !matches!(k.as_str(), "aqueduct.last_lsn")
                    && DEFAULT_SETTINGS
                        .iter()
                        .find(|(d, _)| d == k)
                        .is_none_or(|(_, d)| d != v)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn send(
        &mut self,
        f: &dyn GroupLink,
        leader: &str,
        block: Option<u64>,
        statements: Vec<Forwarded>,
    ) -> Result<ForwardReply, SqlError> {
        let request = ForwardRequest {
            block,
            principal: self.principal.clone(),
            settings: if block.is_none() {
                self.changed_settings()
            } else {
                Default::default()
            },
            statements,
        };
        let timeout = self
            .bounds
            .timeout
            .filter(|t| !t.is_zero())
            .unwrap_or(FORWARD_TIMEOUT);
        let bytes = f.send(leader, &request.encode(), timeout)?;
        let reply = ForwardReply::decode(&bytes, &self.engine.database().read())?;
        if reply.last_lsn > self.last_lsn {
            self.set_last_lsn(reply.last_lsn);
        }
        Ok(reply)
    }

    fn autocommit_on_leader(
        &mut self,
        f: &dyn GroupLink,
        leader: String,
        statement: Forwarded,
    ) -> Result<Outcome, SqlError> {
        let mut reply = self.send(f, &leader, None, vec![statement])?;
        if let Some(id) = reply.block {
            // A statement that left a block open there (none should).
            self.remote = Some(RemoteBlock {
                leader,
                id,
                status: reply.status,
            });
        }
        reply.results.pop().unwrap_or(Ok(Outcome::Empty))
    }

    /// The block's first write: the block moves to the leader if what it
    /// ran gives the same there.
    fn move_block(
        &mut self,
        f: &dyn GroupLink,
        leader: String,
        write: Forwarded,
    ) -> Result<Outcome, SqlError> {
        let recorded = match self.movable.take() {
            Some(Movable::Recording { statements, .. }) => statements,
            Some(Movable::TooLong) | None => {
                return Err(SqlError::new(
                    "25006",
                    "this transaction block read too much on this member, which does not lead \
                     the group, to move it to the leader for its write",
                )
                .with_hint(format!(
                    "begin transactions that write on the leader ({leader})"
                )))
            }
        };
        let isolation = self.txn.as_ref().map(|t| t.isolation).unwrap_or_default();
        let mut statements = vec![Forwarded {
            sql: format!("BEGIN ISOLATION LEVEL {}", isolation.as_str()),
            params: Vec::new(),
        }];
        statements.extend(recorded.iter().map(|(s, _)| s.clone()));
        statements.push(write);
        let mut reply = self.send(f, &leader, None, statements)?;
        let same = reply.results.len() == recorded.len() + 2
            && reply.results[0].is_ok()
            && recorded
                .iter()
                .zip(&reply.results[1..])
                .all(|((_, here), there)| same_outcome(here, there));
        let Some(id) = reply.block.filter(|_| same) else {
            if let Some(id) = reply.block {
                let _ = self.send(
                    f,
                    &leader,
                    Some(id),
                    vec![Forwarded {
                        sql: "ROLLBACK".into(),
                        params: Vec::new(),
                    }],
                );
            }
            // A failure to begin there is the client's answer as it is.
            if let Some(Err(e)) = reply.results.first() {
                return Err(e.clone());
            }
            return Err(SqlError::new(
                "40001",
                "could not serialize access: what this transaction read on this member changed \
                 on the leader before its first write reached it",
            )
            .with_hint("retry the transaction"));
        };
        // The block now lives on the leader; here it is over.
        if let Some(txn) = self.txn.take() {
            self.engine.database().end(&txn);
        }
        self.savepoints.clear();
        self.snapshot = None;
        self.remote = Some(RemoteBlock {
            leader,
            id,
            status: reply.status,
        });
        reply.results.pop().unwrap_or(Ok(Outcome::Empty))
    }

    /// A statement of the block held on the leader (`ends`: `COMMIT` or
    /// `ROLLBACK`).
    fn in_remote_block(
        &mut self,
        statement: Forwarded,
        ends: bool,
    ) -> Option<Result<Outcome, SqlError>> {
        let f = self.engine.group_link()?;
        let remote = self.remote.take().expect("a block on the leader");
        let reply = self.send(f.as_ref(), &remote.leader, Some(remote.id), vec![statement]);
        let mut reply = match reply {
            Ok(r) => r,
            Err(e) => {
                // The leader did not answer: the block's fate there is
                // not known, and this session's block has failed.
                self.fail_block();
                return Some(Err(e));
            }
        };
        match reply.block {
            Some(id) => {
                self.remote = Some(RemoteBlock {
                    id,
                    status: reply.status,
                    ..remote
                })
            }
            None if !ends => self.fail_block(),
            None => {}
        }
        Some(reply.results.pop().unwrap_or(Ok(Outcome::Empty)))
    }

    /// A session that ends with a block held on the leader rolls it back
    /// there (on a thread of its own: a session may end on the front
    /// end's thread), so its locks go now rather than when the leader
    /// finds it idle.
    pub(crate) fn abandon_remote_block(&mut self) {
        let (Some(remote), Some(f)) = (self.remote.take(), self.engine.group_link()) else {
            return;
        };
        let request = ForwardRequest {
            block: Some(remote.id),
            principal: self.principal.clone(),
            settings: Default::default(),
            statements: vec![Forwarded {
                sql: "ROLLBACK".into(),
                params: Vec::new(),
            }],
        };
        let spawned = std::thread::Builder::new()
            .name("block-rollback".into())
            .spawn(move || {
                let _ = f.send(&remote.leader, &request.encode(), ABANDON_TIMEOUT);
            });
        if let Err(e) = spawned {
            tracing::warn!("a block held on the leader waits for its idle expiry: {e}");
        }
    }

    /// The block held on the leader is gone: a failed block here, which
    /// the client ends with ROLLBACK as after any error.
    fn fail_block(&mut self) {
        let isolation = self.default_isolation();
        self.txn = Some(self.engine.database().begin(isolation));
        self.failed = true;
    }
}

/// Whether a statement run again on the leader answered as it did here.
fn same_outcome(here: &Result<Outcome, SqlError>, there: &Result<Outcome, SqlError>) -> bool {
    match (here, there) {
        (
            Ok(Outcome::Rows {
                rows: a, tag: t, ..
            }),
            Ok(Outcome::Rows {
                rows: b, tag: u, ..
            }),
        ) => a == b && t == u,
        (Ok(Outcome::Command { tag: a }), Ok(Outcome::Command { tag: b })) => a == b,
        (Ok(Outcome::Empty), Ok(Outcome::Empty)) => true,
        (Err(a), Err(b)) => a.code == b.code,
        _ => false,
    }
}
