//! The session's read consistency (`docs/consistency.md`): waiting until
//! the views reach the LSN its level asks for, and reads answered as of
//! the current release.

use aqueduct_dataflow::worker::WaitError;
use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_releases::Snapshot;
use aqueduct_tables::{Catalog, Txn};
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;

use crate::consistency::{Consistency, Ready, MAX_RELEASE_RESULTS};
use aqueduct_plan::plan::Outcome;

use super::state::Session;

impl Session {
    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// The LSN a `session` read must reach: this session's last write or
    /// the token it was given, whichever is later.
    pub fn session_lsn(&self) -> Lsn {
        self.last_lsn().max(self.reads.after_lsn)
    }

    /// On a follower, before a query outside a transaction block or a
    /// `BEGIN`: waits until its tables reach the LSN this session's level
    /// asks (`session`: its token; `linearizable`: the commit LSN of the
    /// servers followed, asked now). Anything else, and any statement on
    /// a server that takes its own writes, goes on at once.
    pub(crate) fn follower_ready(&self, st: Option<&Statement>) -> Result<(), SqlError> {
        let Some(source) = self.engine.commit_source() else {
            return Ok(());
        };
        let reads = match st {
            Some(Statement::Query(_)) => self.txn.is_none(),
            Some(Statement::StartTransaction { .. }) => true,
            _ => false,
        };
        if !reads {
            return Ok(());
        }
        let timeout = self.reads.consistency_timeout;
        let target = match self.consistency() {
            Consistency::Eventual | Consistency::Release => return Ok(()),
            Consistency::Session => self.session_lsn(),
            Consistency::Linearizable => source.committed_lsn(timeout).map_err(|why| {
                SqlError::new(
                    "57014",
                    format!("a linearizable read on this follower could not learn the commit LSN of the servers it follows: {why}"),
                )
                .with_hint("SET aqueduct.consistency = 'eventual' reads what this follower holds")
            })?,
        };
        let db = self.engine.database();
        if db.await_applied(target, timeout) {
            return Ok(());
        }
        Err(SqlError::new(
            "57014",
            format!(
                "this follower reached LSN {} only, not LSN {target}, within aqueduct.consistency_timeout",
                db.applied_lsn()
            ),
        )
        .with_hint(format!(
            "the read asked for consistency '{}'; 'eventual' reads what this follower holds, or raise aqueduct.consistency_timeout",
            self.consistency().as_str()
        )))
    }

    /// Waits until the views satisfy this session's consistency level.
    pub(crate) fn views_ready(&self) -> Result<Ready, SqlError> {
        let Some(target) = self.views_target()? else {
            return Ok(Ready::At(self.engine.views.reflected_now()));
        };
        let timeout = self.reads.consistency_timeout;
        match self.engine.views.await_lsn_within(target, timeout) {
            Ok(()) => Ok(Ready::At(target)),
            Err(WaitError::Late(_)) if self.reads.compute_on_consistency_timeout => {
                self.engine
                    .metrics
                    .count(&self.engine.metrics.computed_after_timeout);
                Ok(Ready::Compute)
            }
            Err(e) => Err(SqlError::from(e).with_hint(format!(
                "the read asked for consistency '{}'; SET aqueduct.consistency_timeout_action = 'compute' answers from the base tables instead, or 'eventual' reads what the views hold",
                self.consistency().as_str()
            ))),
        }
    }

    /// The LSN the views must reflect before a read at this session's
    /// level answers, after telling them what is acknowledged; `None` for
    /// `eventual`, which reads what they hold now. 22023 for a session
    /// token past this server's last write.
    pub(crate) fn views_target(&self) -> Result<Option<Lsn>, SqlError> {
        let db = self.engine.database();
        // The views apply a commit once it is acknowledged; whatever is
        // acknowledged now they may apply (the committer tells them too).
        let acknowledged = db.committed_lsn();
        self.engine.views.open_to(acknowledged);
        Ok(Some(match self.consistency() {
            Consistency::Eventual => return Ok(None),
            Consistency::Session => {
                let target = self.session_lsn();
                let last = db.applied_lsn();
                // A follower waited for its tables first (`follower_ready`).
                if target > last && !self.engine.follows() {
                    return Err(SqlError::new(
                        "22023",
                        format!(
                            "aqueduct.after_lsn is {target}, but this server's last write is at LSN {last}"
                        ),
                    )
                    .with_hint(
                        "pass a token from SHOW aqueduct.last_lsn on a connection to this server",
                    ));
                }
                target
            }
            // Every write acknowledged before the read began: those are
            // what a linearizable read must see, and no more, so it waits
            // for no commit still in its fsync. Transaction blocks never
            // reach here in release mode; reads that do (EXPLAIN, SHOW)
            // see the newest acknowledged state.
            Consistency::Linearizable | Consistency::Release => acknowledged,
        }))
    }

    /// `st` when this session reads it from the current release: a query,
    /// in `release` mode, outside a transaction block.
    pub(crate) fn release_read<'a>(&self, st: Option<&'a Statement>) -> Option<&'a Statement> {
        match st {
            Some(st @ Statement::Query(_))
                if self.txn.is_none() && self.consistency() == Consistency::Release =>
            {
                Some(st)
            }
            _ => None,
        }
    }

    /// Answers `st` as of the current release: from its snapshot of the
    /// tables, once per release and statement (later reads get the same
    /// result without evaluating again).
    /// `auto`: the automatic view that serves `st` (a prepared query) and
    /// the values to read it with, when it has one.
    pub(crate) fn read_release(
        &mut self,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
        auto: Option<(&aqueduct_views::auto_views::AutoView, Vec<Value>)>,
    ) -> Result<Outcome, SqlError> {
        let releases = &self.engine.releases;
        let Some(snap) = releases.current() else {
            let why = match releases.schedule() {
                None => "releases are off: start the server with --release-interval".to_string(),
                Some(s) => format!(
                    "no release is out yet; they happen every {} ms, the first after the server started is due within one interval",
                    s.interval_ms()
                ),
            };
            return Err(SqlError::new("55000", why).with_hint(
                "SET aqueduct.consistency = 'linearizable' (or 'eventual') reads without releases",
            ));
        };
        self.engine.metrics.count(&self.engine.metrics.select);
        let id = snap.release.id;
        self.release_read_id = Some(id);
        self.settings
            .insert("aqueduct.release".into(), id.to_string());
        let key = (st.to_string(), params.to_vec());
        {
            let results = self.engine.release_results.lock();
            if results.release == id {
                if let Some(out) = results.results.get(&key) {
                    return Ok(out.clone());
                }
            }
        }
        let from_view = match auto {
            Some((a, values)) => self.read_auto_at(a, &values, Some(&snap))?,
            None => None,
        };
        let out = match from_view {
            Some(out) => out,
            None => self.evaluate_at(&snap, st, hints, params)?,
        };
        let mut results = self.engine.release_results.lock();
        if results.release != id {
            // Results of an older release are of no more use; a newer
            // release's are kept (this read was of one being replaced).
            if results.release > id {
                return Ok(out);
            }
            results.release = id;
            results.results.clear();
        }
        if results.results.len() < MAX_RELEASE_RESULTS {
            results.results.insert(key, out.clone());
        }
        Ok(out)
    }

    /// Evaluates the query `st` over the tables of `snap`: maintained
    /// views by their defining queries over those tables, everything else
    /// directly or by one-shot dataflow, as for the newest state.
    pub(crate) fn evaluate_at(
        &self,
        snap: &Snapshot,
        st: &Statement,
        hints: &[Option<DataType>],
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        let catalog: &Catalog = &snap.catalog;
        let db = self.engine.database();
        if let Some(views) = self.release_view_catalog(snap, st, params)? {
            let bound = self.bind(&views, st, hints)?;
            return aqueduct_plan::exec::execute(
                db,
                &views,
                &mut Txn::default(),
                &mut aqueduct_tables::SessionSequences::default(),
                &bound.plan,
                bound.columns,
                params,
            );
        }
        let bound = self.bind(catalog, st, hints)?;
        match (&bound.plan, st) {
            (aqueduct_plan::bind::Plan::Dataflow(_), Statement::Query(q)) => {
                let (columns, rows) = aqueduct_views::oneshot::evaluate(
                    catalog,
                    &mut Txn::default(),
                    q,
                    params,
                    Some(self.time),
                )?;
                Ok(Outcome::Rows {
                    tag: super::state::select_tag(rows.len()),
                    columns,
                    rows,
                })
            }
            _ => aqueduct_plan::exec::execute(
                db,
                catalog,
                &mut Txn::default(),
                &mut aqueduct_tables::SessionSequences::default(),
                &bound.plan,
                bound.columns,
                params,
            ),
        }
    }
}
