//! The types the Raft library is instantiated with, and what one entry
//! carries.

use std::io::Cursor;

use aqueduct_log::Lsn;
use serde::{Deserialize, Serialize};

/// A member's id in the group (`--node-id`).
pub type NodeId = u64;

/// One committed transaction's batch, as a Raft entry carries it: the
/// LSNs the leader gave its records, and the records themselves in the
/// log's wire encoding (`crates/log/src/wire.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub first: Lsn,
    pub last: Lsn,
    #[serde(with = "serde_bytes")]
    pub records: Vec<u8>,
}

impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch {}..={}", self.first, self.last)
    }
}

openraft::declare_raft_types!(
    /// Aqueduct's instance of the Raft library.
    pub Group:
        D = Proposal,
        R = (),
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<Group>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = super::runtime::Runtime,
);

pub type Raft = openraft::Raft<Group>;
pub type Entry = openraft::Entry<Group>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;

/// A storage error carrying `what` went wrong.
pub fn storage_error(what: impl std::fmt::Display) -> StorageError {
    openraft::StorageIOError::<NodeId>::write(openraft::AnyError::error(what.to_string())).into()
}
