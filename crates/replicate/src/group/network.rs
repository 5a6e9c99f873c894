//! Raft's messages between members, over the members' HTTP listeners
//! (`docs/replication.md`, "Raft messages on the wire"): `POST
//! /v1/raft/{append,vote,snapshot}` with the request encoded by bincode, and
//! the answer (the callee's `Result`) encoded the same way.

use std::time::Duration;

use aqueduct_mirror::http;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::types::{Group, NodeId};

/// The largest Raft message a member takes: one batch of the largest size
/// and room for its framing. A message of several entries that would be
/// larger is sent in smaller ones.
pub const MAX_MESSAGE_BYTES: usize = aqueduct_log::MAX_BATCH_BYTES + (4 << 20);
/// The largest answer a member reads back.
const MAX_ANSWER_BYTES: usize = 64 << 20;
/// How long a connection to a member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Which call a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Append,
    Vote,
    Snapshot,
}

impl Call {
    pub fn path(self) -> &'static str {
        match self {
            Call::Append => "/v1/raft/append",
            Call::Vote => "/v1/raft/vote",
            Call::Snapshot => "/v1/raft/snapshot",
        }
    }

    pub fn parse(name: &str) -> Option<Call> {
        Some(match name {
            "append" => Call::Append,
            "vote" => Call::Vote,
            "snapshot" => Call::Snapshot,
            _ => return None,
        })
    }
}

/// Makes a connection to each member: at the address this member's own
/// `--cluster` names for it, else at the one the group recorded when it
/// was added.
pub struct Network {
    pub token: Option<String>,
    pub routes: std::collections::BTreeMap<NodeId, String>,
}

impl RaftNetworkFactory<Group> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: self
                .routes
                .get(&target)
                .cloned()
                .unwrap_or_else(|| node.addr.clone()),
            token: self.token.clone(),
            connection: None,
        }
    }
}

/// One member, as another reaches it (over one kept-open connection).
pub struct Peer {
    target: NodeId,
    addr: String,
    token: Option<String>,
    connection: Option<http::Connection>,
}

type Rpc<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl Peer {
    async fn call<Req, Resp, E>(&mut self, call: Call, req: &Req, ttl: Duration) -> Rpc<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned + Send + 'static,
        E: std::error::Error + DeserializeOwned + Send + 'static,
    {
        let body = bincode::serialize(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut connection = self
            .connection
            .take()
            .unwrap_or_else(|| http::Connection::new(&self.addr));
        let token = self.token.clone();
        let (target, addr) = (self.target, self.addr.clone());
        let (connection, answer) = tokio::task::spawn_blocking(move || {
            let answer = connection
                .post(
                    call.path(),
                    token.as_deref(),
                    &body,
                    CONNECT_TIMEOUT.max(ttl),
                    MAX_ANSWER_BYTES,
                )
                .and_then(|(status, bytes)| {
                    if status == 200 {
                        Ok(bytes)
                    } else {
                        Err(aqueduct_mirror::Error::Protocol(format!(
                            "member {target} at {addr} answered {status}: {}",
                            String::from_utf8_lossy(&bytes)
                        )))
                    }
                });
            (connection, answer)
        })
        .await
        .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.connection = Some(connection);
        let bytes = answer.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let result: Result<Resp, RaftError<NodeId, E>> =
            bincode::deserialize(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<Group> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Group>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        let size = bincode::serialized_size(&rpc).unwrap_or(u64::MAX);
        if size > MAX_MESSAGE_BYTES as u64 && rpc.entries.len() > 1 {
            return Err(RPCError::PayloadTooLarge(
                openraft::error::PayloadTooLarge::new_entries_hint(rpc.entries.len() as u64 / 2),
            ));
        }
        self.call(Call::Append, &rpc, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<Group>,
        option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Call::Snapshot, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(Call::Vote, &rpc, option.hard_ttl()).await
    }
}

/// Answers a message from another member: `body` decoded, handed to
/// `raft`, and its result encoded.
pub async fn answer(raft: &super::types::Raft, call: Call, body: &[u8]) -> Result<Vec<u8>, String> {
    fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
        bincode::serialize(v).map_err(|e| format!("encoding the answer: {e}"))
    }
    fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        bincode::deserialize(body).map_err(|e| format!("the message does not decode: {e}"))
    }
    match call {
        Call::Append => encode(&raft.append_entries(decode(body)?).await),
        Call::Vote => encode(&raft.vote(decode(body)?).await),
        Call::Snapshot => encode(&raft.install_snapshot(decode(body)?).await),
    }
}
