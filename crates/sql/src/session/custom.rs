//! Statements the SQL parser does not know, recognised by their first
//! words once, then run from their text: `CREATE TIME MAP` and its kin
//! (`time_maps.rs`), `CREATE`/`ALTER`/`DROP PUBLICATION`
//! (`publications.rs`), the chain statements and `CALL` of a chain
//! (`chains.rs`).

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::Outcome;

use super::state::Session;

/// Which statement the parser does not know a text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Custom {
    TimeMap,
    Publication,
    /// `ALTER CLUSTER ...` (`cluster.rs`).
    ClusterChange,
    /// `SHOW CLUSTER`.
    ShowCluster,
    /// `CREATE`/`DROP`/`EXPLAIN CHAIN`, `CALL` of a chain, `WAIT FOR
    /// CHAINS` (`chains.rs`).
    Chain(crate::chains::declare::ChainVerb),
}

impl Custom {
    pub(crate) fn of(sql: &str) -> Option<Custom> {
        if let Some(verb) = crate::chains::declare::verb_of(sql) {
            Some(Custom::Chain(verb))
        } else if crate::time_maps::is_time_map_statement(sql) {
            Some(Custom::TimeMap)
        } else if aqueduct_plan::publications::is_publication_statement(sql) {
            Some(Custom::Publication)
        } else {
            super::cluster::verb_of(sql).map(|v| match v {
                super::cluster::ClusterVerb::Alter => Custom::ClusterChange,
                super::cluster::ClusterVerb::Show => Custom::ShowCluster,
            })
        }
    }

    /// The columns its rows have, for a client that describes it before
    /// running it (only `SHOW CLUSTER` returns rows).
    pub(crate) fn columns(self) -> Vec<aqueduct_plan::plan::Column> {
        match self {
            Custom::ShowCluster => super::cluster::show_columns(),
            Custom::Chain(verb) => super::chains::columns(verb),
            _ => Vec::new(),
        }
    }

    /// Whether it changes what the leader holds (and runs there when
    /// sent to a member that does not lead).
    pub(crate) fn writes(self) -> bool {
        !matches!(
            self,
            Custom::ShowCluster
                | Custom::Chain(
                    crate::chains::declare::ChainVerb::Explain
                        | crate::chains::declare::ChainVerb::Wait
                )
        )
    }
}

/// The statements of a query string that holds a statement the parser
/// does not know among others (`CREATE TABLE ...; CREATE PUBLICATION
/// ...;`) or after comments, each as its own text without comments;
/// `None` when it holds none or is one statement as it is. Split at the semicolons between tokens, so a semicolon in
/// a string, a quoted name or a comment does not split.
pub(crate) fn split_around_custom(sql: &str) -> Option<Vec<String>> {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};
    if !(crate::time_maps::is_time_map_statement(sql)
        || aqueduct_plan::parse::contains_ignore_case(sql, "publication")
        || aqueduct_plan::parse::contains_ignore_case(sql, "time map")
        || aqueduct_plan::parse::contains_ignore_case(sql, "cluster")
        || aqueduct_plan::parse::contains_ignore_case(sql, "chain")
        || aqueduct_plan::parse::contains_ignore_case(sql, "call"))
    {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    for t in tokens {
        match t {
            Token::SemiColon => pieces.push(std::mem::take(&mut current)),
            // A comment before a statement would hide its first words.
            Token::Whitespace(
                Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_),
            ) => current.push(' '),
            t => current.push_str(&t.to_string()),
        }
    }
    pieces.push(current);
    pieces.retain(|p| !p.trim().is_empty());
    // One statement is split only when comments hid its first words.
    let alone = pieces.len() == 1 && pieces[0].trim() == sql.trim().trim_end_matches(';').trim();
    if pieces.is_empty() || alone || !pieces.iter().any(|p| Custom::of(p.trim()).is_some()) {
        return None;
    }
    Some(pieces.into_iter().map(|p| p.trim().to_string()).collect())
}

impl Session {
    /// The parameter types of a prepared statement the parser does not
    /// know: only `CALL` of a chain takes parameters.
    pub(crate) fn custom_parameter_types(
        &mut self,
        kind: Custom,
        sql: &str,
        hints: &[Option<aqueduct_values::DataType>],
    ) -> Vec<aqueduct_values::DataType> {
        if kind != Custom::Chain(crate::chains::declare::ChainVerb::Call) {
            return Vec::new();
        }
        let Ok(call) = crate::chains::declare::parse_call(sql) else {
            return Vec::new();
        };
        let compiled = self
            .engine
            .chains
            .compiled(&self.engine.database().read())
            .ok();
        let decl = compiled.as_ref().and_then(|c| c.decls.get(&call.name));
        super::chains::call_parameter_types(&call, decl.map(|d| d.as_ref()), hints)
    }

    /// Runs a statement the parser does not know, with the parameters of
    /// the extended protocol (only `CALL` of a chain takes any).
    pub(crate) fn run_custom(
        &mut self,
        kind: Custom,
        sql: &str,
        params: &[aqueduct_values::Value],
    ) -> Result<Outcome, SqlError> {
        if kind.writes() {
            if let Some(r) = self.forward_custom(sql) {
                return r;
            }
        }
        let out = match kind {
            Custom::TimeMap => self.run_time_map(sql),
            Custom::Publication => self.run_publication(sql),
            Custom::ClusterChange | Custom::ShowCluster => self.run_cluster(sql),
            Custom::Chain(verb) => self.run_chain_statement(verb, sql, params),
        };
        if out.is_err() {
            self.note_error();
        }
        out
    }
}
