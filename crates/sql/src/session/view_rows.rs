//! Reads of maintained views: the views a statement reads as tables
//! holding their rows (by keyed lookups where its WHERE pins their
//! columns), planned keyed reads, upquery timeouts, `SHOW VIEWS`.

use std::sync::Arc;

use aqueduct_dataflow::worker::WaitError;
use aqueduct_expr::SqlError;
use aqueduct_log::Lsn;
use aqueduct_tables::{Catalog, ColumnDef, SchemaChange, TableSchema};
use aqueduct_values::{DataType, Value};
use sqlparser::ast::Statement;

use crate::consistency::Ready;
use aqueduct_plan::bind;
use aqueduct_plan::plan::Outcome;
use aqueduct_views::view_read::ViewRead;

use super::state::Session;

/// A view a statement reads, with the key columns and the keys its
/// `WHERE` pins (none: all its rows).
pub(crate) type ViewReadKeys = (
    Arc<aqueduct_views::views::ViewEntry>,
    Option<(Vec<usize>, Vec<Vec<Value>>)>,
);

/// Adds view `v` to `catalog` as a table holding `rows`.
pub(crate) fn add_view_table(
    catalog: &mut Catalog,
    v: &aqueduct_views::views::ViewEntry,
    rows: Vec<Vec<Value>>,
    watermark: Lsn,
) {
    catalog.apply_schema(SchemaChange::CreateTable(TableSchema {
        id: v.id,
        name: v.name.clone(),
        columns: v
            .columns
            .iter()
            .map(|c| ColumnDef::new(c.name.clone(), c.ty.clone()))
            .collect(),
        ..TableSchema::default()
    }));
    for (i, row) in rows.into_iter().enumerate() {
        catalog.apply_row(v.id, vec![Value::Int(i as i64)], Some(row), watermark);
    }
}

/// Where the rows of views read by a statement come from.
#[derive(Clone, Copy)]
pub(crate) enum ViewRows<'a> {
    /// The maintained views, as the session's consistency level asks.
    Views,
    /// Their queries evaluated over these tables.
    Tables(&'a Catalog),
    /// As of a release.
    Release(&'a aqueduct_releases::Snapshot),
}

impl Session {
    /// The maintained views `st` reads, when every relation it names is one
    /// (anything else — a table, a CTE — goes the general way).
    pub(crate) fn views_only(&self, st: &Statement) -> Option<Vec<String>> {
        let relations = bind::relations(st);
        if relations.is_empty() {
            return None;
        }
        // A query over views that direct evaluation cannot answer over their
        // rows (a join, a set operation, a subquery) goes the general way,
        // which compiles the views' queries into its dataflow.
        if matches!(st, Statement::Query(_)) && !bind::reads_one_relation(st) {
            return None;
        }
        let views = &self.engine.views;
        relations
            .into_iter()
            .map(|r| views.get(&r).map(|_| r))
            .collect()
    }

    /// The maintained views a statement reads, as tables holding their
    /// current rows (read lock-free from the views, as the session's
    /// consistency level asks), or `None`.
    pub(crate) fn view_catalog(
        &mut self,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Catalog>, SqlError> {
        if self.views_only(st).is_none() {
            return Ok(None);
        }
        if self.txn.is_some() {
            return self.views_as_tables_in_txn(st, params);
        }
        match self.views_ready()? {
            Ready::At(seen) => {
                let out = self.views_as_tables(st, params, Some(ViewRows::Views))?;
                let seen = seen.max(self.engine.views.reflected_now());
                self.engine.database().await_visible(seen)?;
                Ok(out)
            }
            Ready::Compute => {
                let db = self.engine.database();
                let seen = db.applied_lsn();
                let out = self.views_as_tables(st, params, Some(ViewRows::Tables(&db.read())))?;
                db.await_visible(seen)?;
                Ok(out)
            }
        }
    }

    /// The maintained views `st` reads as tables as of the release
    /// `snap`, or `None` when it reads anything else.
    pub(crate) fn release_view_catalog(
        &self,
        snap: &aqueduct_releases::Snapshot,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Catalog>, SqlError> {
        self.views_as_tables(st, params, Some(ViewRows::Release(snap)))
    }

    /// The views `st` reads, each with the columns and keys its `WHERE`
    /// pins when it reads just one; `None` when it reads anything else.
    pub(crate) fn view_reads(&self, st: &Statement, params: &[Value]) -> Option<Vec<ViewReadKeys>> {
        let names = self.views_only(st)?;
        let entries: Vec<_> = names
            .iter()
            .filter_map(|n| self.engine.views.get(n))
            .collect();
        if entries.is_empty() {
            return None;
        }
        let single = entries.len() == 1;
        Some(
            entries
                .into_iter()
                .map(|v| {
                    let keyed = if single {
                        equality_key(st, &v, params)
                    } else {
                        None
                    };
                    (v, keyed)
                })
                .collect(),
        )
    }

    /// The views `st` reads as tables: with no rows (`rows` None, for
    /// describing a statement), or with the rows `rows` says where to get.
    pub(crate) fn views_as_tables(
        &self,
        st: &Statement,
        params: &[Value],
        rows: Option<ViewRows>,
    ) -> Result<Option<Catalog>, SqlError> {
        let Some(reads) = self.view_reads(st, params) else {
            return Ok(None);
        };
        let views = &self.engine.views;
        let mut catalog = Catalog::default();
        for (v, keyed) in reads {
            let (rows, watermark) = match (keyed, rows) {
                (_, None) => (Vec::new(), 0),
                (Some((cols, combos)), Some(ViewRows::Views)) => {
                    let (found, watermark) = self.lookup_view(&v, &cols, &combos)?;
                    (found.into_iter().flatten().collect(), watermark)
                }
                (None, Some(ViewRows::Views)) => views.rows(&v)?,
                (Some((cols, combos)), Some(ViewRows::Tables(tables))) => {
                    let mut found = Vec::new();
                    for key in &combos {
                        found.extend(views.compute_lookup(tables, &v, &cols, key)?);
                    }
                    (found, tables.lsn())
                }
                (Some((cols, combos)), Some(ViewRows::Release(snap))) => {
                    let mut found = Vec::new();
                    for key in &combos {
                        found.extend(self.engine.release_lookup(snap, &v, &cols, key)?);
                    }
                    (found, snap.release.lsn)
                }
                (None, Some(ViewRows::Tables(tables))) => {
                    (views.compute_lookup(tables, &v, &[], &[])?, tables.lsn())
                }
                (None, Some(ViewRows::Release(snap))) => (
                    views.compute_lookup(&snap.catalog, &v, &[], &[])?,
                    snap.release.lsn,
                ),
            };
            add_view_table(&mut catalog, &v, rows, watermark);
        }
        Ok(Some(catalog))
    }

    /// [`Session::views_as_tables`] for a read inside a transaction block
    /// (`txn_view_reads.rs`): the rows as the transaction sees them, the
    /// read noted for validation at COMMIT.
    pub(crate) fn views_as_tables_in_txn(
        &mut self,
        st: &Statement,
        params: &[Value],
    ) -> Result<Option<Catalog>, SqlError> {
        let Some(reads) = self.view_reads(st, params) else {
            return Ok(None);
        };
        let mut catalog = Catalog::default();
        for (v, keyed) in reads {
            let rows: Vec<_> = match keyed {
                Some((cols, combos)) => self.view_rows_in_txn(&v, &cols, &combos)?,
                None => self.view_rows_in_txn(&v, &[], &[])?,
            }
            .into_iter()
            .flatten()
            .collect();
            add_view_table(&mut catalog, &v, rows, 0);
        }
        Ok(Some(catalog))
    }

    /// A keyed read of one view planned for `st`, when it has that shape.
    pub(crate) fn plan_view_read(
        &self,
        st: &Statement,
        hints: &[Option<DataType>],
    ) -> Option<ViewRead> {
        let names = self.views_only(st)?;
        let [name] = names.as_slice() else {
            return None;
        };
        ViewRead::plan(st, &*self.engine.views.get(name)?, hints)
    }

    /// Runs a planned keyed view read; `None` when the view it was planned
    /// for is gone (the statement then takes the general path).
    pub(crate) fn read_view(
        &mut self,
        read: &ViewRead,
        params: &[Value],
    ) -> Result<Option<Outcome>, SqlError> {
        let Some(entry) = self.engine.views.get(read.view()) else {
            return Ok(None);
        };
        if !read.planned_for(&entry) {
            return Ok(None);
        }
        if self.failed {
            return Err(SqlError::in_failed_transaction());
        }
        self.engine.metrics.count(&self.engine.metrics.select);
        let rows = match read.key_values(params) {
            None => Vec::new(),
            Some(key) if self.txn.is_some() => {
                let found = self.view_rows_in_txn(&entry, read.key(), &[key])?;
                found.iter().flatten().map(|r| read.project(r)).collect()
            }
            Some(key) => {
                let db = self.engine.database();
                let mut rows = Vec::new();
                let seen = match self.views_ready()? {
                    Ready::At(seen) => {
                        // The copy read may be past the acknowledged
                        // commits (a key just filled from the tables):
                        // what it shows must be acknowledged first.
                        let copy = self.lookup_view_each(&entry, read.key(), &key, |r| {
                            rows.push(read.project(r))
                        })?;
                        seen.max(copy)
                    }
                    Ready::Compute => {
                        let seen = db.applied_lsn();
                        let found = self.engine.views.compute_lookup(
                            &db.read(),
                            &entry,
                            read.key(),
                            &key,
                        )?;
                        rows = found.iter().map(|r| read.project(r)).collect();
                        seen
                    }
                };
                db.await_visible(seen)?;
                rows
            }
        };
        Ok(Some(Outcome::Rows {
            tag: super::state::select_tag(rows.len()),
            columns: read.columns.clone(),
            rows,
        }))
    }

    /// How long a read waits for the upquery that fills a missing key.
    pub(crate) fn upquery_timeout(&self) -> std::time::Duration {
        self.reads.upquery_timeout
    }

    /// What a read does when its upquery takes longer than that.
    pub(crate) fn on_upquery_timeout(&self) -> aqueduct_views::views::OnTimeout {
        self.reads.on_upquery_timeout
    }

    /// [`Session::lookup_view`] of one key, calling `f` on each row in
    /// place rather than copying the rows out. Returns the watermark.
    pub(crate) fn lookup_view_each(
        &self,
        v: &aqueduct_views::views::ViewEntry,
        cols: &[usize],
        key: &[Value],
        mut f: impl FnMut(&aqueduct_dataflow::Row),
    ) -> Result<Lsn, SqlError> {
        let views = &self.engine.views;
        // A read that fails has called `f` on no row.
        match views.lookup_with(v, cols, key, self.reads.upquery_timeout, &mut f) {
            Err(WaitError::Late(_))
                if self.on_upquery_timeout() == aqueduct_views::views::OnTimeout::Compute =>
            {
                self.engine
                    .metrics
                    .count(&self.engine.metrics.computed_after_timeout);
                let db = self.engine.database();
                let catalog = db.read();
                views
                    .compute_lookup(&catalog, v, cols, key)?
                    .iter()
                    .for_each(f);
                Ok(catalog.lsn())
            }
            other => Ok(other?),
        }
    }

    /// A keyed lookup of a view, with this session's upquery timeout; on
    /// timeout, by setting, the rows are computed from the base tables
    /// instead (without filling the key).
    pub(crate) fn lookup_view(
        &self,
        v: &aqueduct_views::views::ViewEntry,
        cols: &[usize],
        keys: &[Vec<Value>],
    ) -> Result<(Vec<Vec<aqueduct_dataflow::Row>>, Lsn), SqlError> {
        let views = &self.engine.views;
        match views.lookup_many(v, cols, keys, self.upquery_timeout()) {
            Err(WaitError::Late(_))
                if self.on_upquery_timeout() == aqueduct_views::views::OnTimeout::Compute =>
            {
                self.engine
                    .metrics
                    .count(&self.engine.metrics.computed_after_timeout);
                let db = self.engine.database();
                let catalog = db.read();
                let lsn = catalog.lsn();
                let rows = keys
                    .iter()
                    .map(|k| views.compute_lookup(&catalog, v, cols, k))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((rows, lsn))
            }
            other => Ok(other?),
        }
    }

    pub(crate) fn show_views(&self) -> Outcome {
        let rows: Vec<Vec<Value>> = self
            .engine
            .views
            .stats()
            .into_iter()
            .map(|v| {
                vec![
                    Value::Text(v.name),
                    Value::Int(v.watermark as i64),
                    Value::Int(v.rows as i64),
                    Value::Int(v.keys as i64),
                    Value::Int(v.bytes as i64),
                    Value::Text(match v.failed {
                        None => "maintained".into(),
                        Some(e) => format!("failed: {e}"),
                    }),
                    Value::Text(v.state),
                    Value::Int(v.reads.hits as i64),
                    Value::Int(v.reads.misses as i64),
                    Value::Float(v.reads.hit_rate()),
                    Value::Int(v.reads.evictions as i64),
                    v.reads
                        .upquery
                        .quantile_us(0.5)
                        .map_or(Value::Null, |us| Value::Int(us as i64)),
                    v.reads
                        .upquery
                        .quantile_us(0.99)
                        .map_or(Value::Null, |us| Value::Int(us as i64)),
                ]
            })
            .collect();
        Outcome::Rows {
            tag: format!("SHOW VIEWS {}", rows.len()),
            columns: bind::show_views_columns(),
            rows,
        }
    }
}

/// For `SELECT ... FROM view WHERE col = value AND other IN (...) ...`: the
/// view columns pinned to constants (or given parameters), sorted, and every
/// combination of their values, so the rows can be found by keyed lookups
/// instead of a scan.
fn equality_key(
    st: &Statement,
    view: &aqueduct_views::views::ViewEntry,
    params: &[Value],
) -> Option<(Vec<usize>, Vec<Vec<Value>>)> {
    use sqlparser::ast;
    let Statement::Query(q) = st else { return None };
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    if sel.from.len() != 1 || !sel.from[0].joins.is_empty() {
        return None;
    }
    let mut conjuncts = Vec::new();
    aqueduct_views::auto_views::split(sel.selection.as_ref()?, &mut conjuncts);
    let mut key: Vec<(usize, Vec<Value>)> = Vec::new();
    for c in conjuncts {
        // `col = value` or `col IN (values)`.
        let (col, vals): (&ast::Expr, Vec<&ast::Expr>) = match c {
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } => match (left.as_ref(), right.as_ref()) {
                (c @ (ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)), v)
                | (v, c @ (ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_))) => {
                    (c, vec![v])
                }
                _ => continue,
            },
            ast::Expr::InList {
                expr,
                list,
                negated: false,
            } if !list.is_empty() => (expr.as_ref(), list.iter().collect()),
            _ => continue,
        };
        let col = match col {
            ast::Expr::Identifier(i) => bind::ident(i),
            ast::Expr::CompoundIdentifier(p) => bind::ident(p.last()?),
            _ => continue,
        };
        let Some(pos) = view.columns.iter().position(|c| c.name == col) else {
            continue;
        };
        let mut values = Vec::new();
        for val in vals {
            let value = match val {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Placeholder(p) => {
                        let n: usize = p.strip_prefix('$')?.parse().ok()?;
                        params.get(n.checked_sub(1)?)?.clone()
                    }
                    ast::Value::Number(n, _) => Value::Text(n.clone()),
                    ast::Value::SingleQuotedString(s) => Value::Text(s.clone()),
                    _ => return None,
                },
                _ => return None,
            };
            // A value of the wrong type is left to the normal path's error.
            let Ok(value) = value.coerce(&view.columns[pos].ty) else {
                return None;
            };
            // NULL matches nothing; the statement's own WHERE says so.
            if !value.is_null() && !values.contains(&value) {
                values.push(value);
            }
        }
        key.push((pos, values));
    }
    if key.is_empty() {
        return None;
    }
    // The lookups fetch a superset of the answer (the whole WHERE is then
    // evaluated over their rows), so one condition per column is enough.
    key.sort_by_key(|(c, _)| *c);
    key.dedup_by_key(|(c, _)| *c);
    let columns: Vec<usize> = key.iter().map(|(c, _)| *c).collect();
    let mut combos: Vec<Vec<Value>> = vec![Vec::new()];
    for (_, values) in key {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push(v.clone());
                    c
                })
            })
            .collect();
        if combos.len() > aqueduct_views::auto_views::MAX_KEYS_PER_READ {
            return None;
        }
    }
    Some((columns, combos))
}
