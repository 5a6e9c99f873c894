//! Read consistency levels (`docs/consistency.md`): how fresh a read of
//! maintained views must be, chosen per session with
//! `SET aqueduct.consistency`. Each level is one question — "has the copy
//! I read reached LSN n?" — with a different n:
//!
//! - `eventual`: no n; read the views as they are.
//! - `session`: n = this session's last write, or a token passed in
//!   `aqueduct.after_lsn`, whichever is later (read-your-writes).
//! - `linearizable`: n = the last write committed before the read began.
//! - `release`: the whole read is answered from the current release's
//!   snapshot of the tables, the same for every reader until the next
//!   release (`aqueduct_releases`).
//!
//! Base tables always hold every committed write, so only reads of views
//! (named, automatic or prepared) wait; transaction blocks always read the
//! newest tables, as serializability requires. On a follower
//! (`docs/replication.md`) the tables too are a copy that may be behind:
//! there every query and `BEGIN` first waits until the tables reach n, and
//! for `linearizable` n is the commit LSN of the servers it follows, asked
//! of them through a [`CommitSource`] (a read index).

use std::collections::HashMap;

use aqueduct_log::Lsn;
use aqueduct_values::Value;

use aqueduct_plan::plan::Outcome;

/// Where a follower learns the LSN a `linearizable` read must reach: the
/// last LSN committed by the servers it follows, asked now.
pub trait CommitSource: Send + Sync {
    /// The commit LSN, asked within `timeout` as the `hops`-th follower on
    /// the way (a chain of followers passes the question up); the error
    /// says which servers could not answer.
    fn committed_lsn_via(&self, hops: u32, timeout: std::time::Duration) -> Result<Lsn, String>;

    /// The commit LSN, asked by a read here.
    fn committed_lsn(&self, timeout: std::time::Duration) -> Result<Lsn, String> {
        self.committed_lsn_via(0, timeout)
    }
}

/// Most statement results kept per release for `release` reads.
pub const MAX_RELEASE_RESULTS: usize = 65_536;

/// The consistency level of a session's reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    Eventual,
    Session,
    Release,
    Linearizable,
}

impl Consistency {
    pub fn parse(s: &str) -> Option<Consistency> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "eventual" => Consistency::Eventual,
            "session" => Consistency::Session,
            "release" => Consistency::Release,
            "linearizable" => Consistency::Linearizable,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Eventual => "eventual",
            Consistency::Session => "session",
            Consistency::Release => "release",
            Consistency::Linearizable => "linearizable",
        }
    }
}

/// Where a read of views stands once its level is satisfied.
pub(crate) enum Ready {
    /// The views reflect every write the level asks for; reads wait for
    /// writes up to this LSN to be durable before answering.
    At(Lsn),
    /// They did not within the deadline and the session asked for an
    /// answer from the base tables instead.
    Compute,
}

/// Results of `release` reads of the current release, by statement text
/// and parameters: a release never changes, so neither do they.
#[derive(Default)]
pub(crate) struct ReleaseResults {
    pub(crate) release: u64,
    pub(crate) results: HashMap<(String, Vec<Value>), Outcome>,
}
