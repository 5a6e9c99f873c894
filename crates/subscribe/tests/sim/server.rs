//! The server's side of a stream: the publication's projection of the
//! source transactions, the real `DepTracker`, and the wire lines, frames
//! and all.

use std::collections::VecDeque;

use std::collections::BTreeMap;

use aqueduct_publish::{
    dep_hash, AttributeType, Change, DepTracker, EpochMessage, Mode, ObjectSchema, ProgressMessage,
    SchemaChange, SchemaMessage, TxnMessage, TxnObjects, WireMessage,
};
use serde_json::json;

use super::workload::{published, table_name, SrcTxn, COMMENTS, POSTS, USERS};

pub const SERVER_ID: &str = "sim";

pub fn row_hash(table: u64, id: u64) -> u64 {
    let mut key = table.to_be_bytes().to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    dep_hash(&key)
}

/// What the tracker is told about a transaction: published objects only.
pub fn objects(t: &SrcTxn) -> TxnObjects {
    let mut tables_written: Vec<u64> = t
        .writes
        .iter()
        .filter(|w| published(w.table))
        .map(|w| w.table)
        .collect();
    tables_written.sort_unstable();
    tables_written.dedup();
    TxnObjects {
        writes: t
            .writes
            .iter()
            .filter(|w| published(w.table))
            .map(|w| row_hash(w.table, w.id))
            .collect(),
        reads: t
            .reads
            .iter()
            .filter(|r| published(r.0))
            .map(|r| row_hash(r.0, r.1))
            .collect(),
        table_scans: t.scans.iter().copied().filter(|&x| published(x)).collect(),
        tables_written,
        user: Some(t.user.clone()),
        session: Some(t.session),
    }
}

pub fn changes(t: &SrcTxn) -> Vec<Change> {
    t.writes
        .iter()
        .filter(|w| published(w.table))
        .map(|w| Change {
            object: table_name(w.table).into(),
            op: w.op,
            key: vec![json!(w.id)],
            attrs: w.attrs.clone(),
            version: t.lsn,
            prev_version: w.prev_version,
        })
        .collect()
}

/// The published objects' shapes before the transactions from `from_lsn`
/// on, as the `epoch` line carries them.
pub fn shapes(txns: &[SrcTxn], from_lsn: u64) -> BTreeMap<String, ObjectSchema> {
    let attr = |name: &str, ty: &str| AttributeType {
        name: name.into(),
        ty: ty.into(),
    };
    let mut out = BTreeMap::new();
    for (table, names) in [
        (USERS, &["id", "n", "name", "posts"][..]),
        (POSTS, &["id", "n", "author"][..]),
        (COMMENTS, &["id", "n", "author", "post"][..]),
    ] {
        let attributes = names
            .iter()
            .map(|&n| attr(n, if n == "name" { "text" } else { "bigint" }))
            .collect();
        out.insert(
            table_name(table).to_string(),
            ObjectSchema {
                attributes,
                key: vec!["id".into()],
            },
        );
    }
    for t in txns.iter().filter(|t| t.first_lsn < from_lsn) {
        if let Some((table, SchemaChange::AddAttribute { name, ty, .. })) = &t.schema {
            let shape = out.get_mut(table_name(*table)).expect("published table");
            shape.attributes.push(attr(name, ty));
        }
    }
    out
}

/// The lines of a stream from `from_lsn` in `epoch`, in order.
pub fn stream(
    txns: &[SrcTxn],
    from_lsn: u64,
    epoch: u64,
    tracker: &mut DepTracker,
    frame_changes: usize,
) -> VecDeque<WireMessage> {
    tracker.reset();
    let mut out = VecDeque::new();
    out.push_back(WireMessage::Epoch(EpochMessage {
        epoch,
        from_lsn,
        server_id: SERVER_ID.into(),
        dep_slots: tracker.dep_slots(),
        objects: shapes(txns, from_lsn),
        bootstrap_until: None,
    }));
    for t in txns.iter().filter(|t| t.first_lsn >= from_lsn) {
        if let Some((table, change)) = &t.schema {
            out.push_back(WireMessage::Schema(SchemaMessage {
                lsn: t.lsn,
                epoch,
                object: table_name(*table).into(),
                change: change.clone(),
            }));
            continue;
        }
        let changes = changes(t);
        if changes.is_empty() {
            out.push_back(WireMessage::Progress(ProgressMessage { lsn: t.lsn }));
            continue;
        }
        let deps = tracker.assign(&objects(t));
        let frames: Vec<Vec<Change>> = changes.chunks(frame_changes).map(|c| c.to_vec()).collect();
        let n = frames.len();
        for (i, chunk) in frames.into_iter().enumerate() {
            out.push_back(WireMessage::Txn(TxnMessage {
                lsn: t.lsn,
                first_lsn: t.first_lsn,
                txid: format!("{SERVER_ID}:{}", t.lsn),
                commit_time: "2025-01-01T00:00:00.000000Z".into(),
                epoch,
                frame: i as u32,
                last: i + 1 == n,
                deps: (i == 0 && tracker.mode() != Mode::Weak).then(|| deps.clone()),
                bootstrap: false,
                changes: chunk,
                origin: None,
            }));
        }
    }
    out
}
