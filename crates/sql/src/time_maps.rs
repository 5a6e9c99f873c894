//! `CREATE TIME MAP name ON table (column) EVERY 'period', ...` and
//! `DROP TIME MAP [IF EXISTS] name`: declarations of time maps, kept in the
//! log as schema records and maintained by the releases
//! (`aqueduct_releases`, `docs/consistency.md`). Parsed here, before the
//! SQL parser, which does not know them.

use aqueduct_tables::{SchemaChange, TimeMapDef};

use crate::session::{parse_duration, Outcome, Session};
use crate::SqlError;

/// Most periods one time map may be kept at.
pub const MAX_PERIODS: usize = 16;

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Punct(char),
}

fn lex(sql: &str) -> Result<Vec<Token>, SqlError> {
    let mut out = Vec::new();
    let mut chars = sql.trim().trim_end_matches(';').chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '\'' || c == '"' {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next() {
                    Some(q) if q == c && chars.peek() == Some(&c) => {
                        chars.next();
                        s.push(c);
                    }
                    Some(q) if q == c => break,
                    Some(ch) => s.push(ch),
                    None => return Err(SqlError::syntax("unterminated quoted text")),
                }
            }
            out.push(if c == '\'' {
                Token::Quoted(s)
            } else {
                Token::Word(s)
            });
        } else if c.is_alphanumeric() || c == '_' || c == '.' {
            let mut w = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_alphanumeric() || ch == '_' || ch == '.' {
                    w.push(ch.to_ascii_lowercase());
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Word(w));
        } else {
            out.push(Token::Punct(c));
            chars.next();
        }
    }
    Ok(out)
}

/// Whether `sql` is a time-map statement (so it bypasses the SQL parser).
pub(crate) fn is_time_map_statement(sql: &str) -> bool {
    let words: Vec<String> = sql
        .split_whitespace()
        .take(3)
        .map(|w| w.to_ascii_lowercase())
        .collect();
    matches!(words.as_slice(), [a, b, c] if (a == "create" || a == "drop") && b == "time" && c == "map")
}

fn usage() -> SqlError {
    SqlError::syntax("syntax error in time map statement").with_hint(
        "CREATE TIME MAP name ON table (column) EVERY '5s', '1min', ... | DROP TIME MAP [IF EXISTS] name",
    )
}

fn word(t: Option<&Token>) -> Result<String, SqlError> {
    match t {
        Some(Token::Word(w)) => Ok(w.strip_prefix("public.").unwrap_or(w).to_string()),
        _ => Err(usage()),
    }
}

impl Session {
    /// Runs a time-map statement.
    pub(crate) fn run_time_map(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        self.require_superuser("create or drop time maps")?;
        if self.txn.is_some() {
            return Err(SqlError::new(
                "25001",
                "schema changes inside a transaction block are not supported",
            ));
        }
        let tokens = lex(sql)?;
        let is = |i: usize, w: &str| matches!(tokens.get(i), Some(Token::Word(x)) if x == w);
        let db = self.engine.database();
        if is(0, "drop") {
            let if_exists = is(3, "if") && is(4, "exists");
            let at = if if_exists { 5 } else { 3 };
            let name = word(tokens.get(at))?;
            if tokens.len() != at + 1 {
                return Err(usage());
            }
            db.run_exclusive(|catalog, txn| {
                match catalog.time_map(&name) {
                    Some(def) => txn.schema(SchemaChange::DropTimeMap { id: def.id }),
                    None if if_exists => {}
                    None => {
                        return Err(SqlError::new(
                            "42704",
                            format!("time map \"{name}\" does not exist"),
                        ))
                    }
                }
                Ok(())
            })?;
            return Ok(Outcome::Command {
                tag: "DROP TIME MAP".into(),
            });
        }
        // CREATE TIME MAP name ON table ( column ) EVERY 'p' [, 'p']*
        let name = word(tokens.get(3))?;
        if !is(4, "on") {
            return Err(usage());
        }
        let table = word(tokens.get(5))?;
        let column = match (tokens.get(6), tokens.get(7), tokens.get(8)) {
            (Some(Token::Punct('(')), Some(Token::Word(c)), Some(Token::Punct(')'))) => c.clone(),
            _ => return Err(usage()),
        };
        if !is(9, "every") {
            return Err(usage());
        }
        let mut periods_ms = Vec::new();
        for (i, t) in tokens[10..].iter().enumerate() {
            match (i % 2, t) {
                (0, Token::Quoted(p)) => {
                    let d = parse_duration(p).filter(|d| !d.is_zero()).ok_or_else(|| {
                        SqlError::new("22023", format!("invalid time map period \"{p}\""))
                            .with_hint("a period is a duration such as '5s', '3min' or '1h'")
                    })?;
                    periods_ms.push(d.as_millis() as u64);
                }
                (1, Token::Punct(',')) => {}
                _ => return Err(usage()),
            }
        }
        if periods_ms.is_empty() || tokens.len() % 2 != 1 {
            return Err(usage());
        }
        periods_ms.sort_unstable();
        periods_ms.dedup();
        if periods_ms.len() > MAX_PERIODS {
            return Err(SqlError::new(
                "54000",
                format!("a time map has at most {MAX_PERIODS} periods"),
            ));
        }
        if let Some(s) = self.engine.releases.schedule() {
            if let Some(p) = periods_ms.iter().find(|&&p| !s.fits(p)) {
                return Err(SqlError::new(
                    "22023",
                    format!(
                        "time map period {p} ms is not a multiple of the release interval ({} ms)",
                        s.interval_ms()
                    ),
                )
                .with_hint("each period must hold whole release intervals"));
            }
        }
        db.run_exclusive(|catalog, txn| {
            if catalog.time_map(&name).is_some() {
                return Err(SqlError::new(
                    "42710",
                    format!("time map \"{name}\" already exists"),
                ));
            }
            let t = catalog.table(&table).ok_or_else(|| {
                SqlError::new("42P01", format!("relation \"{table}\" does not exist"))
            })?;
            let col = t
                .schema
                .columns
                .iter()
                .position(|c| c.name == column)
                .ok_or_else(|| {
                    SqlError::new(
                        "42703",
                        format!("column \"{column}\" of relation \"{table}\" does not exist"),
                    )
                })?;
            txn.schema(SchemaChange::CreateTimeMap(TimeMapDef {
                id: catalog.next_table_id(),
                name: name.clone(),
                table: t.schema.id,
                column: col,
                periods_ms: periods_ms.clone(),
            }));
            Ok(())
        })?;
        Ok(Outcome::Command {
            tag: "CREATE TIME MAP".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_map_statements_are_recognized_and_lexed() {
        assert!(is_time_map_statement(
            "create  TIME map x on t (a) every '5s'"
        ));
        assert!(is_time_map_statement("DROP TIME MAP x"));
        assert!(!is_time_map_statement("CREATE TABLE time (a int)"));
        let t = lex("CREATE TIME MAP \"M\" ON t (a) EVERY '5s', '1min';").unwrap();
        assert_eq!(t[3], Token::Word("M".into()));
        assert_eq!(t[10], Token::Quoted("5s".into()));
        assert_eq!(t[11], Token::Punct(','));
        assert!(lex("CREATE TIME MAP m ON t (a) EVERY '5s").is_err());
    }
}
