//! `COPY`: `FROM STDIN` as a load the front end feeds message by message
//! ([`Session::copy_in_data`]) and ends ([`Session::copy_in_done`], or
//! [`Session::copy_in_fail`]). Its rows are written by the `INSERT` path a
//! chunk at a time as they arrive ([`COPY_CHUNK_ROWS`]), into the
//! transaction block or into a transaction of the COPY's own that its end
//! commits, so a COPY holds no more than its transaction's writes and
//! writes all its rows or none. `TO STDOUT` runs as its query, answered by
//! that query's own route, then encoded (`aqueduct_plan::copy`).

use aqueduct_expr::SqlError;
use aqueduct_tables::Isolation;
use aqueduct_values::Value;
use sqlparser::ast::Statement;

use aqueduct_plan::copy::{CopyDecoder, CopyEncoder, CopyLoad};
use aqueduct_plan::exec;
use aqueduct_plan::limits::COPY_CHUNK_ROWS;
use aqueduct_plan::plan::{
    CopiedRows, CopyDirection, CopyFormat, CopyPlan, InsertSource, Outcome, Plan,
};

use super::state::{CopyIn, Session};

impl Session {
    /// Runs a bound `COPY`: `FROM STDIN` begins a load and returns
    /// [`Outcome::CopyIn`]; `TO STDOUT` returns the data.
    pub(crate) fn run_copy(
        &mut self,
        plan: CopyPlan,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let binary = plan.options.format == CopyFormat::Binary;
        match plan.direction {
            CopyDirection::FromStdin { insert, columns } => {
                let decoder = CopyDecoder::new(plan.options, &plan.relation, &columns)?;
                // Outside a block the COPY is a transaction of its own:
                // optimistic, so the rows it checks are validated at its
                // end and nothing waits on it while the data arrives.
                let own = self
                    .txn
                    .is_none()
                    .then(|| self.engine.database().begin(Isolation::Serializable));
                self.copy_in = Some(CopyIn {
                    load: CopyLoad { decoder, insert },
                    own,
                    written: 0,
                });
                Ok(Outcome::CopyIn {
                    binary,
                    columns: columns.len(),
                })
            }
            CopyDirection::ToStdout { query } => {
                let st = Statement::Query(query);
                let route = self.route(&st, &[])?;
                let Outcome::Rows { columns, rows, .. } =
                    self.run_route(&st, route, &[], params)?
                else {
                    return Err(SqlError::new("XX000", "COPY's query returned no rows"));
                };
                let mut encoder = CopyEncoder::new(plan.options, &columns)?;
                for row in &rows {
                    aqueduct_expr::interrupt::check()?;
                    encoder.row(row)?;
                }
                Ok(Outcome::CopyOut {
                    binary,
                    columns: columns.len(),
                    chunks: encoder.finish(),
                    tag: format!("COPY {}", rows.len()),
                })
            }
        }
    }

    /// Whether a `COPY ... FROM STDIN` waits for its data.
    pub fn copy_in_active(&self) -> bool {
        self.copy_in.is_some()
    }

    /// One message of `COPY ... FROM STDIN` data (CopyData): its complete
    /// rows are parsed now and written a chunk at a time. An error ends
    /// the COPY with nothing written (and fails a transaction block).
    pub fn copy_in_data(&mut self, data: &[u8]) -> Result<(), SqlError> {
        if self.copy_in_decode(data)? {
            self.copy_in_write()?;
        }
        Ok(())
    }

    /// The parsing half of [`Session::copy_in_data`], cheap enough for a
    /// front end's own task: `true` when a chunk of rows waits for
    /// [`Session::copy_in_write`].
    pub fn copy_in_decode(&mut self, data: &[u8]) -> Result<bool, SqlError> {
        let Some(copy) = self.copy_in.as_mut() else {
            return Err(no_copy());
        };
        match copy.load.decoder.feed(data) {
            Ok(()) => Ok(copy.load.decoder.full()),
            Err(e) => Err(self.copy_failed(e)),
        }
    }

    /// Writes the chunks of rows parsed so far.
    pub fn copy_in_write(&mut self) -> Result<(), SqlError> {
        let result = self.statement(|s| s.write_chunks(false));
        result.map_err(|e| self.copy_failed(e))
    }

    /// The data ended (CopyDone): the rows still held are written, and a
    /// COPY outside a block commits; `COPY n` names how many rows.
    pub fn copy_in_done(&mut self) -> Result<Outcome, SqlError> {
        if self.copy_in.is_none() {
            return Err(no_copy());
        }
        let result = self.statement(|s| {
            s.write_chunks(true)?;
            let copy = s.copy_in.take().expect("a COPY under way");
            if let Some(txn) = copy.own {
                s.commit_txn(txn)?;
            }
            Ok(Outcome::Command {
                tag: format!("COPY {}", copy.written),
            })
        });
        result.map_err(|e| self.copy_failed(e))
    }

    /// The client gave up (CopyFail): nothing is written, and the error
    /// PostgreSQL reports is returned (57014).
    pub fn copy_in_fail(&mut self, message: &str) -> SqlError {
        self.copy_failed(SqlError::new(
            "57014",
            format!("COPY from stdin failed: {message}"),
        ))
    }

    /// Ends the COPY under way, if any, on `e`: its own transaction ends
    /// with nothing written, a block's fails.
    fn copy_failed(&mut self, e: SqlError) -> SqlError {
        if let Some(own) = self.copy_in.take().and_then(|c| c.own) {
            self.engine.database().end(&own);
        }
        self.note_error();
        e
    }

    /// Writes every chunk of rows the decoder holds; `last`: the data
    /// ended, so the rest of it is read too.
    fn write_chunks(&mut self, last: bool) -> Result<(), SqlError> {
        loop {
            let copy = self.copy_in.as_mut().ok_or_else(no_copy)?;
            copy.load.decoder.resume(last)?;
            let full = copy.load.decoder.full();
            let (rows, lines) = copy.load.decoder.take_rows();
            if !rows.is_empty() {
                self.write_chunk(rows, lines)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Writes one chunk of rows through the COPY's `INSERT`: into the
    /// block's transaction, or into the COPY's own.
    fn write_chunk(&mut self, rows: Vec<Vec<Value>>, lines: Vec<u64>) -> Result<(), SqlError> {
        debug_assert!(rows.len() <= COPY_CHUNK_ROWS);
        let copy = self.copy_in.as_mut().ok_or_else(no_copy)?;
        let n = rows.len() as u64;
        let mut insert = (*copy.load.insert).clone();
        let relation = match &insert.source {
            InsertSource::Copied(c) => c.relation.clone(),
            _ => String::new(),
        };
        insert.source = InsertSource::Copied(CopiedRows {
            relation,
            rows,
            lines,
        });
        let plan = Plan::Insert(insert);
        match copy.own.take() {
            None => {
                self.run_data(plan, Vec::new(), &[])?;
            }
            Some(mut txn) => {
                let db = self.engine.database();
                let written = {
                    let catalog = db.read_in(Some(&txn));
                    exec::execute(
                        db,
                        &catalog,
                        &mut txn,
                        &mut self.sequences,
                        &plan,
                        Vec::new(),
                        &[],
                    )
                };
                let copy = self.copy_in.as_mut().ok_or_else(no_copy)?;
                copy.own = Some(txn);
                written?;
            }
        }
        let copy = self.copy_in.as_mut().ok_or_else(no_copy)?;
        copy.written += n;
        Ok(())
    }
}

/// A CopyData, CopyDone or CopyFail with no `COPY ... FROM STDIN` under way.
fn no_copy() -> SqlError {
    SqlError::new("08P01", "no COPY FROM STDIN is in progress")
}
