//! `CREATE TIME MAP name ON table (column) EVERY 'period', ...` and
//! `DROP TIME MAP [IF EXISTS] name`: declarations of time maps, kept in the
//! log as schema records and maintained by the releases
//! (`aqueduct_releases`, `docs/consistency.md`). Parsed here, before the
//! SQL parser, which does not know them.

use aqueduct_expr::SqlError;

/// Most periods one time map may be kept at.
pub const MAX_PERIODS: usize = 16;

#[derive(Debug, PartialEq)]
pub(crate) enum Token {
    Word(String),
    Quoted(String),
    Punct(char),
}

pub(crate) fn lex(sql: &str) -> Result<Vec<Token>, SqlError> {
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

pub(crate) fn usage() -> SqlError {
    SqlError::syntax("syntax error in time map statement").with_hint(
        "CREATE TIME MAP name ON table (column) EVERY '5s', '1min', ... | DROP TIME MAP [IF EXISTS] name",
    )
}

pub(crate) fn word(t: Option<&Token>) -> Result<String, SqlError> {
    match t {
        Some(Token::Word(w)) => Ok(w.strip_prefix("public.").unwrap_or(w).to_string()),
        _ => Err(usage()),
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
