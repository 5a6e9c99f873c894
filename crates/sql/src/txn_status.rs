//! Where a session stands in a transaction, as `ReadyForQuery` says it.

/// `ReadyForQuery` status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    Idle,
    InBlock,
    Failed,
}
