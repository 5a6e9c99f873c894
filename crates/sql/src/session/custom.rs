//! Statements the SQL parser does not know, recognised by their first
//! words once, then run from their text: `CREATE TIME MAP` and its kin
//! (`time_maps.rs`), `CREATE`/`ALTER`/`DROP PUBLICATION`
//! (`publications.rs`).

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::Outcome;

use super::state::Session;

/// Which statement the parser does not know a text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Custom {
    TimeMap,
    Publication,
}

impl Custom {
    pub(crate) fn of(sql: &str) -> Option<Custom> {
        if crate::time_maps::is_time_map_statement(sql) {
            Some(Custom::TimeMap)
        } else if aqueduct_plan::publications::is_publication_statement(sql) {
            Some(Custom::Publication)
        } else {
            None
        }
    }
}

impl Session {
    /// Runs a statement the parser does not know.
    pub(crate) fn run_custom(&mut self, kind: Custom, sql: &str) -> Result<Outcome, SqlError> {
        let out = match kind {
            Custom::TimeMap => self.run_time_map(sql),
            Custom::Publication => self.run_publication(sql),
        };
        if out.is_err() {
            self.note_error();
        }
        out
    }
}
