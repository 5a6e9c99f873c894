//! The leader's side of writes forwarded from other members
//! (`crate::forward`): it runs their statements in sessions of the
//! clients' roles, and holds the transaction blocks moved to it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::Outcome;
use parking_lot::Mutex;

use super::state::{Session, TxnStatus};
use crate::engine::Engine;
use crate::forward::{
    copy_refused, ForwardReply, ForwardRequest, FORWARDED_BLOCK_IDLE, MAX_FORWARDED_BLOCKS,
};

/// The transaction blocks a leader holds for other members' sessions.
#[derive(Default)]
pub struct ForwardedBlocks {
    next: std::sync::atomic::AtomicU64,
    held: Mutex<HashMap<u64, (Session, Instant)>>,
}

impl ForwardedBlocks {
    /// Rolls back the blocks idle past [`FORWARDED_BLOCK_IDLE`] (their
    /// member went away, or its client did): called with every request,
    /// and now and then by the server, so their locks do not stay held.
    pub fn expire(&self) {
        let expired: Vec<Session> = {
            let mut held = self.held.lock();
            let ids: Vec<u64> = held
                .iter()
                .filter(|(_, (_, at))| at.elapsed() > FORWARDED_BLOCK_IDLE)
                .map(|(id, _)| *id)
                .collect();
            ids.iter()
                .filter_map(|id| held.remove(id))
                .map(|(s, _)| s)
                .collect()
        };
        for mut s in expired {
            s.execute("ROLLBACK");
        }
    }
}

impl ForwardedBlocks {
    /// Answers a request another member forwarded (on the leader; any
    /// member answers, and one that does not lead refuses the writes).
    pub fn answer(&self, engine: &Arc<Engine>, body: &[u8]) -> Vec<u8> {
        let blocks = self;
        blocks.expire();
        let request = match ForwardRequest::decode(body) {
            Ok(r) => r,
            Err(e) => return failed_reply(e).encode(),
        };
        let mut session = match request.block {
            Some(id) => match blocks.held.lock().remove(&id) {
                Some((s, _)) => s,
                None => {
                    return failed_reply(
                        SqlError::new(
                            "40001",
                            "the transaction block this member held for the session is gone \
                             (it was idle too long, or leadership moved); it was rolled back",
                        )
                        .with_hint("roll back and retry the transaction"),
                    )
                    .encode()
                }
            },
            None => {
                let mut s = engine.session_as(request.principal.clone());
                for (name, value) in &request.settings {
                    // A setting this server does not take stays as it is:
                    // the member that sent it took it.
                    let _ = s.set(name, Some(value.clone()));
                }
                s
            }
        };
        let mut results = Vec::with_capacity(request.statements.len());
        for st in &request.statements {
            let r = if st.params.is_empty() {
                session
                    .execute(&st.sql)
                    .into_iter()
                    .last()
                    .unwrap_or(Ok(Outcome::Empty))
            } else {
                session.execute_with_params(&st.sql, &st.params)
            };
            let r = match r {
                Ok(Outcome::CopyIn { .. }) => {
                    session.copy_in_fail("COPY forwarded from another member");
                    Err(copy_refused())
                }
                other => other,
            };
            let failed = r.is_err();
            results.push(r);
            if failed {
                break;
            }
        }
        let status = session.status();
        let last_lsn = session.last_lsn();
        let block = (status != TxnStatus::Idle).then(|| {
            let mut held = blocks.held.lock();
            if held.len() >= MAX_FORWARDED_BLOCKS {
                return None;
            }
            let id = blocks
                .next
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            held.insert(id, (session, Instant::now()));
            Some(id)
        });
        match block {
            Some(None) => failed_reply(
                SqlError::new(
                    "53300",
                    format!(
                        "the leader holds {MAX_FORWARDED_BLOCKS} transaction blocks for other \
                         members already"
                    ),
                )
                .with_hint("retry the transaction, or run it on the leader"),
            )
            .encode(),
            block => ForwardReply {
                block: block.flatten(),
                status,
                results,
                last_lsn,
            }
            .encode(),
        }
    }
}

fn failed_reply(e: SqlError) -> ForwardReply {
    ForwardReply {
        block: None,
        status: TxnStatus::Idle,
        results: vec![Err(e)],
        last_lsn: 0,
    }
}
