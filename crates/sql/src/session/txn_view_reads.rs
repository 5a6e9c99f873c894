//! Reads of maintained views inside a transaction block.
//!
//! Such a read must see the transaction's own writes and must be validated
//! at `COMMIT` like any other read. The rule (`docs/sql.md`, "Views inside
//! a transaction"): a view read enters the read set as a read of every base
//! table the view is computed from, at the version it has when the read
//! starts. Then:
//! - when the transaction has written none of those tables, the
//!   maintained view answers, once the dataflow has reached the LSN at
//!   which the versions were noted. It may reflect later commits too, but
//!   any such commit changed one of the noted tables, so `COMMIT` fails
//!   with 40001: a transaction that commits saw exactly the state at the
//!   noted versions;
//! - when it has written one of them, the view's query is evaluated once
//!   over the tables as the transaction sees them (its own writes
//!   included), each table scanned noted the same way.
//!
//! The unit is the table, not the rows a key traces to: a write anywhere
//! in a table a view reads fails a transaction that read the view and
//! then wrote (PostgreSQL's serializable isolation also takes coarse
//! predicate locks). A read-only transaction never fails.

use aqueduct_dataflow::Row;
use aqueduct_tables::Write;
use aqueduct_values::Value;

use aqueduct_expr::SqlError;

use aqueduct_views::view_entry::ViewEntry;

use super::state::Session;

impl Session {
    /// The rows of `entry` for a read inside this session's transaction
    /// block: one list per key of `keys` on the columns `cols`, or, with no
    /// columns, one list of every row.
    pub(crate) fn view_rows_in_txn(
        &mut self,
        entry: &ViewEntry,
        cols: &[usize],
        keys: &[Vec<Value>],
    ) -> Result<Vec<Vec<Row>>, SqlError> {
        let engine = self.engine.clone();
        let timeout = self.upquery_timeout();
        let views = &engine.views;
        let db = engine.database();
        let txn = self
            .txn
            .as_mut()
            .expect("a view read in a transaction block has a transaction");
        let catalog = db.read();
        let wrote_input = txn.writes().iter().any(|w| match w {
            Write::Put { table, .. } | Write::Delete { table, .. } => entry.tables.contains(table),
            Write::Schema(_) => false,
        });
        if wrote_input {
            if cols.is_empty() {
                return Ok(vec![views.compute_lookup_in(
                    &catalog,
                    txn,
                    entry,
                    &[],
                    &[],
                )?]);
            }
            return keys
                .iter()
                .map(|k| views.compute_lookup_in(&catalog, txn, entry, cols, k))
                .collect();
        }
        drop(catalog);
        // Noted with commits paused: a commit applies its rows to the
        // tables before it hands them to the dataflow, and the dataflow
        // counts an empty queue as caught up, so outside the commit lock
        // the versions could be newer than what the views will wait for.
        let noted_at = db.with_commits_paused(|catalog, lsn| {
            for &t in &entry.tables {
                txn.note_table_read(catalog, t);
            }
            lsn
        });
        views.await_lsn(noted_at)?;
        if cols.is_empty() {
            return Ok(vec![views.rows(entry)?.0]);
        }
        Ok(views.lookup_many(entry, cols, keys, timeout)?.0)
    }
}
