//! `CREATE TIME MAP` and its kin, run for the session (`time_maps.rs`
//! reads the statements).

use aqueduct_expr::SqlError;
use aqueduct_tables::{SchemaChange, TimeMapDef};

use crate::time_maps::*;
use aqueduct_plan::plan::Outcome;

use super::state::{parse_duration, Session};

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
