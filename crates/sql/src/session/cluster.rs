//! A Raft group's membership in SQL (`docs/replication.md`, "Membership
//! and status"):
//!
//! - `ALTER CLUSTER ADD MEMBER id AT 'host:port' [AS LEARNER]`
//! - `ALTER CLUSTER REMOVE MEMBER id`
//! - `ALTER CLUSTER TRANSFER LEADERSHIP TO id`
//! - `SHOW CLUSTER`: a row per member (id, address, voter, role, term,
//!   commit and applied LSN, lag, and why it did not answer).
//!
//! Superuser only, outside transaction blocks. A change sent to a member
//! that does not lead runs on the leader (`forward.rs`).

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::{Column, Outcome};
use aqueduct_values::{DataType, Value};
use sqlparser::tokenizer::Token;

use super::state::{command, Session};
use crate::forward::MembershipChange;

fn usage() -> &'static str {
    "ALTER CLUSTER ADD MEMBER id AT 'host:port' [AS LEARNER] | ALTER CLUSTER REMOVE MEMBER id | \
     ALTER CLUSTER TRANSFER LEADERSHIP TO id | SHOW CLUSTER"
}

use aqueduct_plan::parse::{plain_word as word, solid_tokens as tokens};

/// Which cluster statement `sql` is, by its first words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClusterVerb {
    Alter,
    Show,
}

pub(crate) fn verb_of(sql: &str) -> Option<ClusterVerb> {
    let mut words = sql.split_whitespace().map(|w| w.trim_end_matches(';'));
    let (verb, noun) = (words.next()?, words.next()?);
    if !noun.eq_ignore_ascii_case("cluster") {
        return None;
    }
    if verb.eq_ignore_ascii_case("alter") {
        Some(ClusterVerb::Alter)
    } else if verb.eq_ignore_ascii_case("show") && words.next().is_none() {
        Some(ClusterVerb::Show)
    } else {
        None
    }
}

enum ClusterStatement {
    Show,
    Change(MembershipChange),
}

fn parse(sql: &str) -> Result<ClusterStatement, SqlError> {
    let t = tokens(sql);
    let w = |i: usize| word(t.get(i));
    let syntax = || SqlError::syntax(format!("syntax error in {sql:?}; expected {}", usage()));
    let id = |i: usize| -> Result<u64, SqlError> {
        match t.get(i) {
            Some(Token::Number(n, _)) => match n.parse::<u64>() {
                Ok(id) if id > 0 => Ok(id),
                _ => Err(SqlError::new(
                    "22023",
                    format!("member ids are whole numbers from 1, not {n}"),
                )),
            },
            _ => Err(syntax()),
        }
    };
    let ends_at = |n: usize| if t.len() == n { Ok(()) } else { Err(syntax()) };
    match (w(0).as_deref(), w(1).as_deref(), w(2).as_deref()) {
        (Some("show"), Some("cluster"), None) if t.len() == 2 => Ok(ClusterStatement::Show),
        (Some("alter"), Some("cluster"), Some("add")) => {
            if w(3).as_deref() != Some("member") || w(5).as_deref() != Some("at") {
                return Err(syntax());
            }
            let id = id(4)?;
            let addr = match t.get(6) {
                Some(Token::SingleQuotedString(a)) if !a.trim().is_empty() => a.trim().to_string(),
                _ => return Err(syntax()),
            };
            let voter = match (w(7).as_deref(), w(8).as_deref()) {
                (None, None) if t.len() == 7 => true,
                (Some("as"), Some("learner")) if t.len() == 9 => false,
                _ => return Err(syntax()),
            };
            Ok(ClusterStatement::Change(MembershipChange::Add {
                id,
                addr,
                voter,
            }))
        }
        (Some("alter"), Some("cluster"), Some("remove")) => {
            if w(3).as_deref() != Some("member") {
                return Err(syntax());
            }
            let id = id(4)?;
            ends_at(5)?;
            Ok(ClusterStatement::Change(MembershipChange::Remove { id }))
        }
        (Some("alter"), Some("cluster"), Some("transfer")) => {
            if w(3).as_deref() != Some("leadership") || w(4).as_deref() != Some("to") {
                return Err(syntax());
            }
            let id = id(5)?;
            ends_at(6)?;
            Ok(ClusterStatement::Change(MembershipChange::Transfer { id }))
        }
        _ => Err(syntax()),
    }
}

impl Session {
    /// `ALTER CLUSTER ...` (on the leader, where it came if sent to
    /// another member) and `SHOW CLUSTER`.
    pub(crate) fn run_cluster(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        let statement = parse(sql)?;
        let Some(group) = self.engine.group_link() else {
            return Err(
                SqlError::new("55000", "this server is not a member of a Raft group")
                    .with_hint("start it with --node-id and --cluster (docs/replication.md)"),
            );
        };
        if !self.principal.is_superuser(&self.engine.database().read()) {
            return Err(SqlError::new(
                "42501",
                "must be superuser to see or change the group's members",
            ));
        }
        if self.txn.is_some() {
            return Err(SqlError::new(
                "25001",
                "ALTER CLUSTER and SHOW CLUSTER cannot run inside a transaction block",
            ));
        }
        match statement {
            ClusterStatement::Show => Ok(show(group.members())),
            ClusterStatement::Change(change) => {
                group.change(&change).map_err(|why| {
                    SqlError::new(
                        "55000",
                        format!("the group's membership did not change: {why}"),
                    )
                })?;
                Ok(command("ALTER CLUSTER"))
            }
        }
    }
}

/// `SHOW CLUSTER`'s columns.
pub(crate) fn show_columns() -> Vec<Column> {
    [
        ("id", DataType::Int8),
        ("addr", DataType::Text),
        ("voter", DataType::Bool),
        ("role", DataType::Text),
        ("term", DataType::Int8),
        ("commit_lsn", DataType::Int8),
        ("applied_lsn", DataType::Int8),
        ("lag", DataType::Int8),
        ("error", DataType::Text),
    ]
    .into_iter()
    .map(|(name, ty)| Column::computed(name, ty))
    .collect()
}

fn show(members: Vec<crate::forward::MemberState>) -> Outcome {
    let int = |v: Option<u64>| v.map_or(Value::Null, |v| Value::Int(v as i64));
    let text = |v: Option<String>| v.map_or(Value::Null, Value::Text);
    let columns = show_columns();
    let rows: Vec<Vec<Value>> = members
        .into_iter()
        .map(|m| {
            vec![
                int(Some(m.id)),
                Value::Text(m.addr),
                Value::Bool(m.voter),
                Value::Text(m.role),
                int(m.term),
                int(m.commit_lsn),
                int(m.applied_lsn),
                int(m.lag),
                text(m.error),
            ]
        })
        .collect();
    Outcome::Rows {
        tag: format!("SHOW {}", rows.len()),
        columns,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_statements_parse() {
        let change = |sql: &str| match parse(sql) {
            Ok(ClusterStatement::Change(c)) => c,
            Ok(ClusterStatement::Show) => panic!("{sql}: show"),
            Err(e) => panic!("{sql}: {e}"),
        };
        assert_eq!(
            change("alter cluster add member 4 at '10.0.0.4:8433';"),
            MembershipChange::Add {
                id: 4,
                addr: "10.0.0.4:8433".into(),
                voter: true
            }
        );
        assert_eq!(
            change("ALTER CLUSTER ADD MEMBER 5 AT 'h:1' AS LEARNER"),
            MembershipChange::Add {
                id: 5,
                addr: "h:1".into(),
                voter: false
            }
        );
        assert_eq!(
            change("ALTER CLUSTER REMOVE MEMBER 2"),
            MembershipChange::Remove { id: 2 }
        );
        assert_eq!(
            change("ALTER CLUSTER TRANSFER LEADERSHIP TO 3"),
            MembershipChange::Transfer { id: 3 }
        );
        assert!(matches!(parse("SHOW CLUSTER"), Ok(ClusterStatement::Show)));
        assert_eq!(verb_of("show cluster;"), Some(ClusterVerb::Show));
        assert_eq!(
            verb_of("ALTER CLUSTER REMOVE MEMBER 2"),
            Some(ClusterVerb::Alter)
        );
        assert_eq!(verb_of("SHOW clustering"), None);
        for bad in [
            "ALTER CLUSTER ADD MEMBER 0 AT 'h:1'",
            "ALTER CLUSTER ADD MEMBER 4 AT h",
            "ALTER CLUSTER ADD MEMBER 4 AT 'h:1' AS VOTER",
            "ALTER CLUSTER REMOVE MEMBER 2 NOW",
            "ALTER CLUSTER TRANSFER LEADERSHIP 3",
            "ALTER CLUSTER",
        ] {
            let e = parse(bad).err().unwrap_or_else(|| panic!("{bad} parsed"));
            assert!(matches!(e.code, "42601" | "22023"), "{bad}: {e}");
        }
    }
}
