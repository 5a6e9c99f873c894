//! Answering a query that needs the dataflow: reads of automatic views
//! (made on first use, keyed on the query's pinned columns), and one-shot
//! evaluation through a temporary dataflow.

use aqueduct_dataflow::worker::WaitError;
use aqueduct_expr::SqlError;
use aqueduct_tables::Txn;
use aqueduct_values::Value;
use sqlparser::ast;

use crate::consistency::Ready;
use aqueduct_plan::plan::Outcome;
use aqueduct_views::auto_views::{AutoView, Lifted};
use aqueduct_views::oneshot;

use super::state::Session;

/// An automatic view a prepared statement was bound to.
#[derive(Clone, Debug)]
pub struct PreparedAuto {
    pub view: AutoView,
    /// Literals lifted out of the statement (parameters after its own).
    pub literals: Vec<Value>,
    /// The registry's generation when it was found (stale once it moves).
    pub generation: u64,
}

impl Session {
    /// Automatic views serve this session now: enabled, and outside a
    /// transaction block (whose reads must see its own writes).
    pub(crate) fn auto_views_on(&self) -> bool {
        self.txn.is_none() && self.reads.auto_views
    }

    /// The automatic view for the query `lifted` (made now when `make`).
    /// `None` inside a transaction block, with automatic views off, or
    /// when no view can serve the query.
    pub(crate) fn auto_for(
        &self,
        lifted: Lifted,
        make: bool,
    ) -> Result<Option<(AutoView, Lifted)>, SqlError> {
        if !self.auto_views_on() {
            return Ok(None);
        }
        let views = &self.engine.views;
        if let Some(a) = views.auto_view(&lifted.sql) {
            return Ok(Some((a, lifted)));
        }
        if !make {
            return Ok(None);
        }
        match views.make_auto_view(self.engine.database(), &lifted.sql, &lifted.query) {
            Ok(Some(a)) => Ok(Some((a, lifted))),
            Ok(None) => Ok(None),
            // Not maintainable as a keyed view: one-shot evaluation answers
            // (or reports the error for the query as the user wrote it).
            Err(e) => {
                tracing::debug!(sql = %lifted.sql, "no automatic view: {e}");
                Ok(None)
            }
        }
    }

    /// A read of an automatic view failed: answered another way (`None`)
    /// when the view was dropped meanwhile (a table or view it read went),
    /// or when its upquery timed out and the session says to compute.
    pub(crate) fn auto_read_failed(
        &self,
        auto: &AutoView,
        e: WaitError,
    ) -> Result<Option<Outcome>, SqlError> {
        let gone = self.engine.views.get(&auto.view).is_none();
        let compute = matches!(e, WaitError::Late(_))
            && self.on_upquery_timeout() == aqueduct_views::views::OnTimeout::Compute;
        if compute {
            self.engine
                .metrics
                .count(&self.engine.metrics.computed_after_timeout);
        }
        if gone || compute {
            Ok(None)
        } else {
            Err(e.into())
        }
    }

    /// Reads an automatic view with `values` (the statement's parameters,
    /// then the lifted literals). `None` when the view cannot answer these
    /// values (a literal of another type, a NULL key, no rows for a query
    /// that aggregates without GROUP BY): the caller evaluates once instead.
    pub(crate) fn read_auto(
        &mut self,
        auto: &AutoView,
        values: &[Value],
    ) -> Result<Option<Outcome>, SqlError> {
        self.read_auto_at(auto, values, None)
    }

    /// [`Session::read_auto`], as of release `at` when given (through the
    /// release's own views; a range read is left to the caller).
    pub(crate) fn read_auto_at(
        &mut self,
        auto: &AutoView,
        values: &[Value],
        at: Option<&aqueduct_releases::Snapshot>,
    ) -> Result<Option<Outcome>, SqlError> {
        let Ok(Some(keys)) = auto.lookups(values) else {
            return Ok(None);
        };
        if keys.is_empty() && auto.global {
            return Ok(None);
        }
        let Some(entry) = self.engine.views.get(&auto.view) else {
            return Ok(None);
        };
        if at.is_some() && keys.iter().any(|k| k.range.is_some()) {
            return Ok(None);
        }
        let seen = match (at, self.views_ready()?) {
            (Some(_), _) => 0,
            (None, Ready::At(seen)) => seen,
            // The views are behind and the session asked for an answer
            // from the base tables: evaluated once, over them.
            (None, Ready::Compute) => return Ok(None),
        };
        // Keys read by equality on the same columns are looked up together,
        // so the ones a partial view misses are filled by one upquery.
        let mut prefetched: std::collections::HashMap<usize, Vec<aqueduct_dataflow::Row>> =
            Default::default();
        let point: Vec<usize> = (0..keys.len())
            .filter(|&i| keys[i].range.is_none())
            .collect();
        if let Some(&first) = point.first() {
            let same = point
                .iter()
                .all(|&i| keys[i].columns == keys[first].columns);
            if same && point.len() > 1 {
                let columns: Vec<usize> = keys[first]
                    .columns
                    .iter()
                    .map(|c| auto.visible + c)
                    .collect();
                let values: Vec<Vec<Value>> =
                    point.iter().map(|&i| keys[i].prefix.clone()).collect();
                let found = match at {
                    Some(snap) => values
                        .iter()
                        .map(|v| self.engine.release_lookup(snap, &entry, &columns, v))
                        .collect::<Result<Vec<_>, _>>()
                        .map(|rows| (rows, 0))
                        .map_err(WaitError::from),
                    None => self.engine.views.lookup_many(
                        &entry,
                        &columns,
                        &values,
                        self.upquery_timeout(),
                    ),
                };
                match found {
                    Ok((found, _)) => prefetched.extend(point.iter().copied().zip(found)),
                    Err(e) => return self.auto_read_failed(auto, e),
                }
            }
        }
        let mut rows = Vec::new();
        for (i, l) in keys.iter().enumerate() {
            let columns: Vec<usize> = l.columns.iter().map(|c| auto.visible + c).collect();
            let found = match &l.range {
                _ if prefetched.contains_key(&i) => {
                    Ok((prefetched.remove(&i).unwrap_or_default(), 0))
                }
                None => match at {
                    Some(snap) => self
                        .engine
                        .release_lookup(snap, &entry, &columns, &l.prefix)
                        .map(|rows| (rows, 0))
                        .map_err(WaitError::from),
                    None => self.engine.views.lookup_timed(
                        &entry,
                        &columns,
                        &l.prefix,
                        self.upquery_timeout(),
                    ),
                },
                Some((low, high)) => self
                    .engine
                    .views
                    .lookup_range(&entry, &columns, &l.prefix, low.as_ref(), high.as_ref())
                    .map_err(WaitError::from),
            };
            let found = match found {
                Ok((rows, _)) => rows,
                Err(e) => return self.auto_read_failed(auto, e),
            };
            // A row an earlier side of an OR found is not counted again.
            rows.extend(found.into_iter().filter(|r| {
                !l.exclude
                    .iter()
                    .any(|(c, v)| r[auto.visible + c] == *v && !v.is_null())
            }));
        }
        if rows.is_empty() && auto.global {
            match &auto.empty_row {
                Some(row) => rows.push(row.clone()),
                None => return Ok(None),
            }
        }
        // Counted once answered here (a fallback counts its own; a
        // release read was counted by its caller).
        if at.is_none() {
            self.engine.metrics.count(&self.engine.metrics.select);
            let seen = seen.max(self.engine.views.reflected_now());
            self.engine.database().await_visible(seen)?;
        }
        let rows = auto.finish(rows, keys.len());
        Ok(Some(Outcome::Rows {
            tag: super::state::select_tag(rows.len()),
            columns: auto.columns.clone(),
            rows,
        }))
    }

    /// Answers a query that needs the dataflow: from the automatic view
    /// `auto` (the query with its literals lifted) when it has one and the
    /// view answers these values, else by one-shot evaluation.
    pub(crate) fn answer_by_dataflow(
        &mut self,
        q: &ast::Query,
        auto: Option<Lifted>,
        params: &[Value],
    ) -> Result<Outcome, SqlError> {
        if let Some(lifted) = auto {
            if let Some((auto, lifted)) = self.auto_for(lifted, true)? {
                let values: Vec<Value> = params.iter().cloned().chain(lifted.literals).collect();
                if let Some(out) = self.read_auto(&auto, &values)? {
                    return Ok(out);
                }
            }
        }
        self.engine.metrics.count(&self.engine.metrics.select);
        let db = self.engine.database();
        let (columns, rows) = match self.txn.as_mut() {
            Some(txn) => {
                let catalog = db.read_in(Some(txn));
                if oneshot::has_subquery(q) || aqueduct_views::recursive::is_recursive(q) {
                    oneshot::evaluate_in_transaction(&catalog, txn, q, params, Some(self.time))?
                } else {
                    oneshot::evaluate(&catalog, txn, q, params, Some(self.time))?
                }
            }
            None => {
                let seen = db.applied_lsn();
                let out = if oneshot::has_subquery(q) || aqueduct_views::recursive::is_recursive(q)
                {
                    let catalog = std::sync::Arc::new(db.read().clone());
                    oneshot::evaluate_shared(catalog, q, params, Some(self.time))?
                } else {
                    oneshot::evaluate(&db.read(), &mut Txn::default(), q, params, Some(self.time))?
                };
                db.await_visible(seen)?;
                out
            }
        };
        Ok(Outcome::Rows {
            tag: super::state::select_tag(rows.len()),
            columns,
            rows,
        })
    }
}
