//! `COPY`: `FROM STDIN` as a load the front end feeds chunk by chunk
//! ([`Session::copy_in_data`]) and ends ([`Session::copy_in_done`], or
//! [`Session::copy_in_fail`]), whose rows are written by the `INSERT` path
//! when the data ends, in the transaction block or as a transaction of
//! their own; `TO STDOUT` as its query, answered by that query's own
//! route, then encoded (`aqueduct_plan::copy`).

use aqueduct_expr::SqlError;
use aqueduct_values::Value;
use sqlparser::ast::Statement;

use aqueduct_plan::copy::{CopyDecoder, CopyEncoder, CopyLoad};
use aqueduct_plan::plan::{
    CopiedRows, CopyDirection, CopyFormat, CopyPlan, InsertPlan, InsertSource, Outcome, Plan,
};

use super::state::Session;

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
                self.copy_in = Some(CopyLoad { decoder, insert });
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

    /// One chunk of `COPY ... FROM STDIN` data (a CopyData message): its
    /// complete rows are parsed now. An error ends the COPY with nothing
    /// written (and fails a transaction block).
    pub fn copy_in_data(&mut self, data: &[u8]) -> Result<(), SqlError> {
        let Some(copy) = self.copy_in.as_mut() else {
            return Err(no_copy());
        };
        if let Err(e) = copy.decoder.feed(data) {
            self.copy_in = None;
            self.note_error();
            return Err(e);
        }
        Ok(())
    }

    /// The data ended (CopyDone): the rows are written as one `INSERT`,
    /// all or none; `COPY n` names how many.
    pub fn copy_in_done(&mut self) -> Result<Outcome, SqlError> {
        let Some(CopyLoad { decoder, insert }) = self.copy_in.take() else {
            return Err(no_copy());
        };
        let result = self.statement(|s| s.write_copied(decoder, *insert));
        if result.is_err() {
            self.note_error();
        }
        result
    }

    /// The client gave up (CopyFail): nothing is written, and the error
    /// PostgreSQL reports is returned (57014).
    pub fn copy_in_fail(&mut self, message: &str) -> SqlError {
        self.copy_in = None;
        self.note_error();
        SqlError::new("57014", format!("COPY from stdin failed: {message}"))
    }

    /// Writes the rows `decoder` read through `insert`.
    fn write_copied(
        &mut self,
        decoder: CopyDecoder,
        mut insert: InsertPlan,
    ) -> Result<Outcome, SqlError> {
        let (rows, lines) = decoder.finish()?;
        let n = rows.len();
        let relation = match &insert.source {
            InsertSource::Copied(c) => c.relation.clone(),
            _ => String::new(),
        };
        insert.source = InsertSource::Copied(CopiedRows {
            relation,
            rows,
            lines,
        });
        self.run_data(Plan::Insert(insert), Vec::new(), &[])?;
        Ok(Outcome::Command {
            tag: format!("COPY {n}"),
        })
    }
}

/// A CopyData, CopyDone or CopyFail with no `COPY ... FROM STDIN` under way.
fn no_copy() -> SqlError {
    SqlError::new("08P01", "no COPY FROM STDIN is in progress")
}
