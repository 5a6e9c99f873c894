//! `CREATE`, `ALTER` and `DROP PUBLICATION`, run for the session
//! (`aqueduct_plan::publications` parses and plans them).

use aqueduct_expr::SqlError;
use aqueduct_plan::plan::Outcome;
use aqueduct_plan::publications::{
    parse_publication, plan_publication, Actor, AlterAction, PublicationStatement,
};

use super::state::Session;

impl Session {
    /// Runs a publication statement.
    pub(crate) fn run_publication(&mut self, sql: &str) -> Result<Outcome, SqlError> {
        let st = parse_publication(sql)?;
        if self.txn.is_some() {
            return Err(SqlError::new(
                "25001",
                "schema changes inside a transaction block are not supported",
            )
            .with_hint("run the publication statement outside BEGIN ... COMMIT"));
        }
        let db = self.engine.database();
        let role = self.principal.name.clone();
        let superuser = self.principal.is_superuser(&db.read());
        let configured: Vec<String> = self.engine.bootstrap_users.read().iter().cloned().collect();
        let views = self.view_columns();
        let mut tag = "";
        let (_, lsn) = db.run_exclusive(|catalog, txn| {
            let plan = plan_publication(
                catalog,
                &st,
                &Actor {
                    role: &role,
                    superuser,
                    configured_superusers: &configured,
                },
                &views,
            )?;
            tag = plan.tag;
            for change in plan.changes {
                txn.schema(change);
            }
            Ok::<(), SqlError>(())
        })?;
        if let Some(lsn) = lsn {
            self.set_last_lsn(lsn);
        }
        self.engine.tap_published_views();
        // Subscribers of a publication that is gone, or that now has
        // another name, no longer hold the log.
        let gone: Vec<&String> = match &st {
            PublicationStatement::Drop { names, .. } => names.iter().collect(),
            PublicationStatement::Alter {
                name,
                action: AlterAction::RenameTo(_),
            } => vec![name],
            _ => Vec::new(),
        };
        if !gone.is_empty() {
            let feed = self.engine.feed();
            for c in feed.consumers() {
                if gone
                    .iter()
                    .any(|p| c.name.starts_with(&aqueduct_publish::consumer_prefix(p)))
                {
                    let _ = feed.unregister(&c.name);
                }
            }
        }
        Ok(Outcome::Command { tag: tag.into() })
    }
}
