//! Executing bound plans against the catalog through a transaction: reads
//! are recorded for validation at commit, writes are buffered in the
//! transaction and reach the log as one batch.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use aqueduct_expr::agg::Accumulator;
use aqueduct_tables::{
    Catalog, Database, Key, LockTable, Row, SchemaChange, SequenceDef, SessionSequences, Table,
    TableId, TableSchema, Txn,
};
use aqueduct_values::{DataType, Value};

use aqueduct_expr::{Env, Expr, SqlError};
use std::cell::RefCell;

use crate::bind;
use crate::catalog_queries;
pub use crate::constraints::CheckDue;
use crate::constraints::{self, Changes};
pub(crate) use crate::effects::Fx;
use crate::plan::{
    Access, Aggregate, Column, Ddl, DeletePlan, InsertPlan, InsertSource, OnConflict, Outcome,
    Plan, RowLocking, SelectPlan, TruncatePlan, UpdatePlan,
};
pub use crate::rows::scan_rows;
use crate::rows::{
    conform, current, every_chunk, read_rows, refuse_taken_name, write_key, written_differently,
};

/// Runs a data or schema statement.
/// `out`, once the transaction's writes still fit one commit.
fn fits(fx: &mut Fx, out: Outcome) -> Result<Outcome, SqlError> {
    fx.txn.get_mut().check_size()?;
    Ok(out)
}

pub fn execute(
    db: &Database,
    catalog: &Catalog,
    txn: &mut Txn,
    seqs: &mut SessionSequences,
    plan: &Plan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let mut fx = Fx {
        db,
        catalog,
        txn: RefCell::new(txn),
        seqs: RefCell::new(seqs),
    };
    let fx = &mut fx;
    match plan {
        Plan::Select(p) => {
            let rows = select(catalog, fx.txn.get_mut(), p, params, Some(&fx.db.locks))?;
            Ok(rows_outcome(columns, rows, "SELECT"))
        }
        Plan::Values(outputs) => {
            let env = Env::with_effects(&[], params, fx);
            let row = outputs
                .iter()
                .map(|e| e.eval(&env))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows_outcome(columns, vec![row], "SELECT"))
        }
        Plan::Catalog(c) => {
            let rows = catalog_queries::run(catalog, c, params);
            Ok(rows_outcome(columns, rows, "SELECT"))
        }
        Plan::Insert(p) => insert(fx, p, columns, params).and_then(|o| fits(fx, o)),
        Plan::Update(p) => update(fx, p, columns, params).and_then(|o| fits(fx, o)),
        Plan::Delete(p) => delete(fx, p, columns, params).and_then(|o| fits(fx, o)),
        Plan::Truncate(p) => truncate(fx, p),
        Plan::Ddl(Ddl::AlterTable(a)) => crate::alter::alter_table(fx, a),
        Plan::Ddl(Ddl::AlterSequence {
            name,
            if_exists,
            change,
        }) => crate::alter_sequence::alter_sequence(fx, name, *if_exists, change),
        Plan::Ddl(d) => ddl(catalog, fx.txn.get_mut(), d),
        Plan::Begin { .. }
        | Plan::Commit
        | Plan::Rollback
        | Plan::Savepoint { .. }
        | Plan::ReleaseSavepoint { .. }
        | Plan::RollbackTo { .. }
        | Plan::SetConstraints { .. }
        | Plan::Set { .. }
        | Plan::SetConfig { .. }
        | Plan::ResetAll
        | Plan::LockTables
        | Plan::Maintenance { .. }
        | Plan::Show { .. }
        | Plan::Deallocate { .. }
        | Plan::ShowViews
        | Plan::ShowConsumers
        | Plan::Explain { .. } => {
            unreachable!("session statements are handled by the session")
        }
        Plan::Copy(_) => Err(SqlError::new(
            "XX000",
            "COPY reached direct evaluation: the session runs it",
        )),
        Plan::Dataflow(why) => Err(SqlError::new(
            "XX000",
            format!("a query that needs the dataflow ({why}) reached direct evaluation"),
        )),
        Plan::JoinLocking(_) => Err(SqlError::new(
            "XX000",
            "a locking query over several relations reached direct evaluation: the session runs it",
        )),
    }
}

fn rows_outcome(columns: Vec<Column>, rows: Vec<Vec<Value>>, verb: &str) -> Outcome {
    Outcome::Rows {
        tag: format!("{verb} {}", rows.len()),
        columns,
        rows,
    }
}

fn table(catalog: &Catalog, id: TableId) -> Result<&Table, SqlError> {
    catalog
        .table_by_id(id)
        .ok_or_else(|| SqlError::new("42P01", "the table was dropped while the statement ran"))
}

fn eval_all(exprs: &[Expr], env: &Env<'_>) -> Result<Vec<Value>, SqlError> {
    exprs.iter().map(|e| e.eval(env)).collect()
}

fn passes(filter: Option<&Expr>, row: &[Value], params: &[Value]) -> Result<bool, SqlError> {
    match filter {
        None => Ok(true),
        Some(f) => Ok(matches!(f.eval(&Env::new(row, params))?, Value::Bool(true))),
    }
}

fn select(
    catalog: &Catalog,
    txn: &mut Txn,
    p: &SelectPlan,
    params: &[Value],
    locks: Option<&LockTable>,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let t = table(catalog, p.table)?;
    let rows = read_rows(catalog, txn, t, &p.access, params)?;
    // `FOR UPDATE`: rows locked by another transaction are skipped (SKIP
    // LOCKED) before ORDER BY and LIMIT; the rows returned are locked.
    let locking = p.locking.zip(locks);
    let me = txn.id;
    let locked_by_other = |key: &Key| {
        locking.is_some_and(|(_, l)| {
            l.holder(&(t.schema.id, key.clone()))
                .is_some_and(|h| h != me)
        })
    };
    let mut matching = Vec::with_capacity(rows.len());
    let mut keys = Vec::new();
    for (i, (key, row)) in rows.into_iter().enumerate() {
        every_chunk(i, &row)?;
        if passes(p.body.filter.as_ref(), &row, params)? {
            if matches!(locking, Some((RowLocking::SkipLocked, _))) && locked_by_other(&key) {
                continue;
            }
            matching.push(row);
            keys.push(key);
        }
    }
    let mut out: Vec<Vec<Value>> = match &p.body.grouping {
        None => matching
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut out = eval_all(&p.body.outputs, &Env::new(row, params))?;
                if locking.is_some() {
                    // Which row it came from, through ORDER BY and LIMIT.
                    out.push(Value::Int(i as i64));
                }
                every_chunk(i, &out)?;
                Ok(out)
            })
            .collect::<Result<_, SqlError>>()?,
        Some(g) => group(&matching, g, &p.body.outputs, params)?,
    };
    if p.body.distinct {
        let mut seen = HashSet::new();
        let mut distinct = Vec::new();
        for (i, r) in out.into_iter().enumerate() {
            every_chunk(i, &r)?;
            if seen.insert(r[..p.body.visible].to_vec()) {
                distinct.push(r);
            }
        }
        out = distinct;
    }
    if !p.body.order_by.is_empty() {
        let keys = &p.body.order_by;
        let mut keyed: Vec<(Vec<Value>, Vec<Value>)> = out
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let k = keys
                    .iter()
                    .map(|s| s.expr.eval(&Env::new(&r, params)))
                    .collect::<Result<Vec<_>, _>>()?;
                every_chunk(i, &k)?;
                Ok((k, r))
            })
            .collect::<Result<_, SqlError>>()?;
        aqueduct_expr::interrupt::sort_by(&mut keyed, |(a, _), (b, _)| {
            for (i, s) in keys.iter().enumerate() {
                let ord = match (a[i].is_null(), b[i].is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => {
                        if s.nulls_first {
                            Ordering::Less
                        } else {
                            Ordering::Greater
                        }
                    }
                    (false, true) => {
                        if s.nulls_first {
                            Ordering::Greater
                        } else {
                            Ordering::Less
                        }
                    }
                    _ => {
                        let o = a[i].cmp(&b[i]);
                        if s.desc {
                            o.reverse()
                        } else {
                            o
                        }
                    }
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
            Ordering::Equal
        })?;
        out = keyed.into_iter().map(|(_, r)| r).collect();
    }
    let env = Env::new(&[], params);
    let offset = count_arg(p.body.offset.as_ref(), &env, "OFFSET")?.unwrap_or(0);
    let limit = count_arg(p.body.limit.as_ref(), &env, "LIMIT")?;
    let mut out: Vec<Vec<Value>> = out
        .into_iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .collect();
    if locking.is_some() {
        for r in &out {
            let Some(Value::Int(i)) = r.last() else {
                unreachable!("a locking select's rows end with their row's position")
            };
            let key = &keys[*i as usize];
            if matches!(locking, Some((RowLocking::NoWait, _))) && locked_by_other(key) {
                return Err(SqlError::new(
                    "55P03",
                    format!(
                        "could not obtain lock on row in relation \"{}\"",
                        t.schema.name
                    ),
                ));
            }
            txn.want_lock(t.schema.id, key.clone());
        }
    }
    for r in &mut out {
        r.truncate(p.body.visible);
    }
    Ok(out)
}

fn count_arg(e: Option<&Expr>, env: &Env<'_>, what: &str) -> Result<Option<usize>, SqlError> {
    let Some(e) = e else { return Ok(None) };
    match e.eval(env)?.coerce(&DataType::Int8)? {
        Value::Null => Ok(None),
        Value::Int(n) if n >= 0 => Ok(Some(n as usize)),
        _ => Err(SqlError::new(
            // PostgreSQL: invalid_row_count_in_limit_clause and
            // invalid_row_count_in_result_offset_clause.
            if what == "OFFSET" { "2201X" } else { "2201W" },
            format!("{what} must not be negative"),
        )),
    }
}

fn group(
    rows: &[Arc<Row>],
    g: &bind::Grouping,
    outputs: &[Expr],
    params: &[Value],
) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut groups: BTreeMap<Vec<Value>, Vec<Accumulator>> = BTreeMap::new();
    let fresh = |aggs: &[Aggregate]| {
        aggs.iter()
            .map(|a| Accumulator::insert_only(a.func, a.distinct))
            .collect::<Vec<_>>()
    };
    if g.keys.is_empty() {
        // A global aggregate has one group even over no rows.
        groups.insert(Vec::new(), fresh(&g.aggregates));
    }
    for (i, row) in rows.iter().enumerate() {
        // The rows were charged when they were read.
        if i % aqueduct_expr::interrupt::CHECK_EVERY == 0 {
            aqueduct_expr::interrupt::check()?;
        }
        let env = Env::new(row, params);
        let key = eval_all(&g.keys, &env)?;
        let accs = groups.entry(key).or_insert_with(|| fresh(&g.aggregates));
        for (acc, a) in accs.iter_mut().zip(&g.aggregates) {
            let v = match &a.arg {
                Some(e) => e.eval(&env)?,
                None => Value::Null,
            };
            acc.insert(&v)?;
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for (i, (key, accs)) in groups.into_iter().enumerate() {
        every_chunk(i, &key)?;
        let mut grouped = key;
        for acc in &accs {
            grouped.push(acc.finish()?);
        }
        let env = Env::new(&grouped, params);
        if let Some(h) = &g.having {
            if !matches!(h.eval(&env)?, Value::Bool(true)) {
                continue;
            }
        }
        out.push(eval_all(outputs, &env)?);
    }
    Ok(out)
}

fn duplicate_key(t: &Table, key: &Key) -> SqlError {
    let names: Vec<&str> = t
        .schema
        .primary_key
        .iter()
        .map(|&c| t.schema.columns[c].name.as_str())
        .collect();
    let values: Vec<String> = key.iter().map(|v| v.to_string()).collect();
    SqlError::new(
        "23505",
        format!(
            "duplicate key value violates unique constraint \"{}_pkey\"",
            t.schema.name
        ),
    )
    .with_detail(format!(
        "Key ({})=({}) already exists.",
        names.join(", "),
        values.join(", ")
    ))
}

fn returning(
    p: &[Expr],
    rows: &[Row],
    columns: Vec<Column>,
    params: &[Value],
    tag: String,
) -> Result<Outcome, SqlError> {
    if p.is_empty() {
        return Ok(Outcome::Command { tag });
    }
    let out = rows
        .iter()
        .map(|r| eval_all(p, &Env::new(r, params)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Outcome::Rows {
        columns,
        rows: out,
        tag,
    })
}

fn insert(
    fx: &mut Fx<'_>,
    p: &InsertPlan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let (db, catalog) = (fx.db, fx.catalog);
    let t = table(catalog, p.table)?;
    fx.txn.get_mut().note_shape(catalog, t.schema.id);
    let sources: Box<dyn Iterator<Item = Vec<Value>>> = match &p.source {
        InsertSource::Values(rows) => Box::new(
            rows.iter()
                .map(|r| eval_all(r, &Env::with_effects(&[], params, fx)))
                .collect::<Result<Vec<_>, _>>()?
                .into_iter(),
        ),
        InsertSource::Query(q) => {
            Box::new(select(catalog, fx.txn.get_mut(), q, params, None)?.into_iter())
        }
        // One row at a time, so a large COPY is not held twice.
        InsertSource::Copied(c) => Box::new(c.rows.iter().cloned()),
        InsertSource::Evaluated(_) => {
            return Err(SqlError::new(
                "XX000",
                "an INSERT's query was not evaluated before the insert",
            ))
        }
    };
    // An error in a copied row names its line, as PostgreSQL's CONTEXT does.
    let at = |i: usize| {
        move |e: SqlError| match &p.source {
            InsertSource::Copied(c) => c.context_of(i, e),
            _ => e,
        }
    };
    // The rows are kept only for RETURNING, and offered to the foreign
    // key checks only where a row can break one: a new row references
    // others only through its own table's foreign keys.
    let mut written = Written::new(!p.returning.is_empty());
    let references = !t.schema.foreign_keys.is_empty();
    let mut changes = Changes::default();
    let mut unique = constraints::UniqueCheck::new(fx.txn.get_mut(), t, &p.uniques)?;
    fx.txn.get_mut().reserve(t.schema.id, sources.size_hint().0);
    let width = t.schema.columns.len();
    let every_column_in_order =
        p.columns.len() == width && p.columns.iter().enumerate().all(|(i, &c)| i == c);
    for (i, values) in sources.enumerate() {
        let row = if every_column_in_order && values.len() == width {
            values
        } else {
            // Defaults are evaluated for each row, and only for the
            // columns the row does not give.
            let mut given: Vec<Option<Value>> = vec![None; width];
            for (v, &c) in values.into_iter().zip(&p.columns) {
                given[c] = Some(v);
            }
            let env = Env::with_effects(&[], params, fx);
            given
                .into_iter()
                .zip(&p.defaults)
                .map(|(v, d)| match v {
                    Some(v) => Ok(v),
                    None => d.eval(&env),
                })
                .collect::<Result<Vec<_>, SqlError>>()
                .map_err(at(i))?
        };
        let row = conform(t, row).map_err(at(i))?;
        constraints::check_row(t, &p.checks, &row, params).map_err(at(i))?;
        let txn = fx.txn.get_mut();
        if !t.schema.has_primary_key() && p.arbiters.is_empty() {
            let key = vec![Value::Int(db.allocate_rowid())];
            unique.check(txn, t, &key, &row).map_err(at(i))?;
            if references {
                changes.push(t.schema.id, None, Some(row.clone()));
            }
            written.push(&row);
            txn.put(t.schema.id, key, row);
            continue;
        }
        let conflict =
            constraints::conflicting_row(catalog, txn, t, &p.arbiters, &row).map_err(at(i))?;
        match (conflict, &p.on_conflict) {
            (None, _) => {
                let key = if t.schema.has_primary_key() {
                    t.schema.key_of(&row)
                } else {
                    vec![Value::Int(db.allocate_rowid())]
                };
                unique.check(txn, t, &key, &row).map_err(at(i))?;
                if references {
                    changes.push(t.schema.id, None, Some(row.clone()));
                }
                written.push(&row);
                txn.put(t.schema.id, key, row);
            }
            (Some((key, _)), OnConflict::Error) => return Err(at(i)(duplicate_key(t, &key))),
            (Some(_), OnConflict::DoNothing) => {}
            (
                Some((key, existing)),
                OnConflict::DoUpdate {
                    assignments,
                    filter,
                },
            ) => {
                let mut both = existing.clone();
                both.extend(row.iter().cloned());
                if !passes(filter.as_ref(), &both, params)? {
                    continue;
                }
                let mut new = existing.clone();
                for (c, e) in assignments {
                    new[*c] = e.eval(&Env::new(&both, params))?;
                }
                let new = conform(t, new)?;
                constraints::check_row(t, &p.checks, &new, params)?;
                let key = write_key(t, key, &existing);
                let new_key = write_key(t, key.clone(), &new);
                if new_key != key {
                    return Err(SqlError::unsupported(
                        "changing the primary key in ON CONFLICT DO UPDATE",
                    ));
                }
                let txn = fx.txn.get_mut();
                unique.check(txn, t, &key, &new)?;
                if written_differently(&new_key, &key) {
                    // See `update`.
                    txn.delete(t.schema.id, key);
                }
                txn.put(t.schema.id, new_key, new.clone());
                changes.push(t.schema.id, Some(existing), Some(new.clone()));
                written.push(&new);
            }
        }
    }
    constraints::enforce_foreign_keys(catalog, fx.txn.get_mut(), changes)?;
    let tag = format!("INSERT 0 {}", written.count);
    returning(&p.returning, &written.rows, columns, params, tag)
}

/// The rows a statement wrote: counted, and kept only when RETURNING
/// needs them (a bulk insert does not hold its rows twice).
struct Written {
    count: usize,
    keep: bool,
    rows: Vec<Row>,
}

impl Written {
    fn new(keep: bool) -> Written {
        Written {
            count: 0,
            keep,
            rows: Vec::new(),
        }
    }

    fn push(&mut self, row: &Row) {
        self.count += 1;
        if self.keep {
            self.rows.push(row.clone());
        }
    }
}

fn update(
    fx: &mut Fx<'_>,
    p: &UpdatePlan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let catalog = fx.catalog;
    let t = table(catalog, p.table)?;
    fx.txn.get_mut().note_shape(catalog, t.schema.id);
    let rows = read_rows(catalog, fx.txn.get_mut(), t, &p.access, params)?;
    let mut updates = Vec::new();
    for (key, row) in rows {
        if !passes(p.filter.as_ref(), &row, params)? {
            continue;
        }
        let mut new = (*row).clone();
        let env = Env::with_effects(&row, params, fx);
        for (c, e) in &p.assignments {
            new[*c] = e.eval(&env)?;
        }
        let new = conform(t, new)?;
        constraints::check_row(t, &p.checks, &new, params)?;
        updates.push((key, row, new));
    }
    let txn = fx.txn.get_mut();
    let mut unique = constraints::UniqueCheck::new(txn, t, &p.uniques)?;
    let mut written = Vec::with_capacity(updates.len());
    let mut moved = Vec::with_capacity(updates.len());
    let mut changes = Changes::default();
    for (key, old, new) in updates {
        let key = write_key(t, key, &old);
        let new_key = write_key(t, key.clone(), &new);
        if new_key != key {
            if current(catalog, txn, t, &new_key).is_some() {
                return Err(duplicate_key(t, &new_key));
            }
            txn.delete(t.schema.id, key);
        } else if written_differently(&new_key, &key) {
            // An equal key written otherwise ('30 days' for '1 mon', 1.00
            // for 1.0): the log keys a row by its key's bytes, so the old
            // bytes are deleted too, or compaction would keep their put
            // and bring the row back at the next start.
            txn.delete(t.schema.id, key);
        }
        txn.put(t.schema.id, new_key.clone(), new.clone());
        changes.push(t.schema.id, Some((*old).clone()), Some(new.clone()));
        moved.push(new_key);
        written.push(new);
    }
    // After every row of the statement moved: a swap of unique values
    // within one statement is fine.
    for (key, new) in moved.iter().zip(&written) {
        unique.check(txn, t, key, new)?;
    }
    constraints::enforce_foreign_keys(catalog, txn, changes)?;
    let tag = format!("UPDATE {}", written.len());
    returning(&p.returning, &written, columns, params, tag)
}

fn delete(
    fx: &mut Fx<'_>,
    p: &DeletePlan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let catalog = fx.catalog;
    let txn = fx.txn.get_mut();
    let t = table(catalog, p.table)?;
    txn.note_shape(catalog, t.schema.id);
    let rows = read_rows(catalog, txn, t, &p.access, params)?;
    let mut removed = Vec::new();
    let mut changes = Changes::default();
    for (key, row) in rows {
        if passes(p.filter.as_ref(), &row, params)? {
            txn.delete(t.schema.id, write_key(t, key, &row));
            changes.push(t.schema.id, Some((*row).clone()), None);
            removed.push((*row).clone());
        }
    }
    constraints::enforce_foreign_keys(catalog, txn, changes)?;
    let tag = format!("DELETE {}", removed.len());
    returning(&p.returning, &removed, columns, params, tag)
}

/// `TRUNCATE`: every row of the tables goes, in this transaction; the
/// sequences their columns own restart with `RESTART IDENTITY`.
fn truncate(fx: &mut Fx<'_>, p: &TruncatePlan) -> Result<Outcome, SqlError> {
    let catalog = fx.catalog;
    let txn = fx.txn.get_mut();
    for &id in &p.tables {
        let t = table(catalog, id)?;
        txn.note_shape(catalog, id);
        for (key, row) in read_rows(catalog, txn, t, &Access::Scan, &[])? {
            txn.delete(id, write_key(t, key, &row));
        }
        if p.restart_identity {
            for seq in catalog.sequences.values() {
                if seq.def.owned_by.is_some_and(|(owner, _)| owner == id) {
                    txn.schema(SchemaChange::SetSequence {
                        id: seq.def.id,
                        value: seq.def.start,
                        is_called: false,
                    });
                }
            }
        }
    }
    Ok(Outcome::Command {
        tag: "TRUNCATE TABLE".into(),
    })
}

/// The foreign key checks a transaction put off (deferrable constraints,
/// deferred), done now; 23503 for one that fails.
pub fn check_deferred(catalog: &Catalog, txn: &mut Txn, due: CheckDue) -> Result<(), SqlError> {
    constraints::check_deferred(catalog, txn, due)
}

/// What a transaction's commit checks under the commit lock beyond what
/// the tables keep: its unique indexes on expressions still hold.
pub fn check_at_commit(catalog: &Catalog, txn: &Txn) -> Result<(), SqlError> {
    constraints::check_at_commit(catalog, txn)
}

fn ddl(catalog: &Catalog, txn: &mut Txn, d: &Ddl) -> Result<Outcome, SqlError> {
    txn.note_schema_read(catalog);
    let tag = |t: &str| Ok(Outcome::Command { tag: t.into() });
    match d {
        Ddl::CreateTable {
            schema,
            sequences,
            if_not_exists,
        } => {
            if catalog.table(&schema.name).is_some() {
                if *if_not_exists {
                    return tag("CREATE TABLE");
                }
                return Err(SqlError::new(
                    "42P07",
                    format!("relation \"{}\" already exists", schema.name),
                ));
            }
            // The owned sequences take the next ids, the table the one after.
            let first = catalog.next_table_id();
            let table_id = first + sequences.len() as TableId;
            let mut schema: TableSchema = bind::with_id(schema.clone(), table_id);
            for (n, seq) in sequences.iter().enumerate() {
                refuse_taken_name(catalog, &seq.name)?;
                let id = first + n as TableId;
                let column = seq.owned_by.map(|(_, c)| c).expect("an owned sequence");
                if let Some(identity) = &mut schema.columns[column].identity {
                    identity.sequence = id;
                }
                txn.schema(SchemaChange::CreateSequence(SequenceDef {
                    id,
                    owned_by: Some((table_id, column)),
                    ..seq.clone()
                }));
            }
            txn.schema(SchemaChange::CreateTable(schema));
            tag("CREATE TABLE")
        }
        Ddl::AlterTable(_) => unreachable!("ALTER TABLE runs in alter.rs"),
        Ddl::AlterSequence { .. } => unreachable!("ALTER SEQUENCE runs in alter_sequence.rs"),
        Ddl::CreateEnum { name, labels } => {
            crate::enum_types::create_enum(catalog, txn, name, labels)
        }
        Ddl::AlterType { name, change } => {
            crate::enum_types::alter_type(catalog, txn, name, change)
        }
        Ddl::DropType {
            names,
            if_exists,
            cascade,
        } => crate::enum_types::drop_types(catalog, txn, names, *if_exists, *cascade),
        Ddl::Comment {
            on,
            name,
            column,
            text,
        } => {
            use crate::plan::CommentOn;
            let wrong_kind =
                || SqlError::new("42809", format!("\"{name}\" is not a {}", on.kind()));
            let (object, position) = match on {
                CommentOn::Table | CommentOn::Column => {
                    let t = match catalog.table(name) {
                        Some(t) => t,
                        None if catalog.view(name).is_some() && *on == CommentOn::Table => {
                            return Err(wrong_kind())
                        }
                        None if catalog.view(name).is_some() => {
                            return Err(SqlError::unsupported("COMMENT ON COLUMN of a view")
                                .with_hint(
                                    "comment on the view itself: COMMENT ON VIEW v IS '...'",
                                ))
                        }
                        None => return Err(SqlError::undefined_table(name)),
                    };
                    let position = match column {
                        Some(c) => {
                            t.schema.column_index(c).ok_or_else(|| {
                                SqlError::new(
                                    "42703",
                                    format!("column \"{c}\" of relation \"{name}\" does not exist"),
                                )
                            })? + 1
                        }
                        None => 0,
                    };
                    (t.schema.id, position as u32)
                }
                CommentOn::View => match catalog.view(name) {
                    Some(id) => (id, 0),
                    None if catalog.table(name).is_some() => return Err(wrong_kind()),
                    None => return Err(SqlError::undefined_table(name)),
                },
                CommentOn::Sequence => match catalog.sequence(name) {
                    Some(s) => (s.def.id, 0),
                    None if catalog.table(name).is_some() || catalog.view(name).is_some() => {
                        return Err(wrong_kind())
                    }
                    None => return Err(SqlError::undefined_table(name)),
                },
                CommentOn::Type => match catalog.enum_type(name) {
                    Some(t) => (t.id, 0),
                    None => {
                        return Err(SqlError::new(
                            "42704",
                            format!("type \"{name}\" does not exist"),
                        ))
                    }
                },
            };
            txn.schema(SchemaChange::Comment {
                object,
                column: position,
                text: text.clone(),
            });
            tag("COMMENT")
        }
        Ddl::CreateSequence { def, if_not_exists } => {
            if catalog.sequence(&def.name).is_some() && *if_not_exists {
                return tag("CREATE SEQUENCE");
            }
            refuse_taken_name(catalog, &def.name)?;
            txn.schema(SchemaChange::CreateSequence(SequenceDef {
                id: catalog.next_table_id(),
                ..def.clone()
            }));
            tag("CREATE SEQUENCE")
        }
        Ddl::DropSequence { names, if_exists } => {
            for n in names {
                match catalog.sequence(n) {
                    Some(seq) => {
                        if let Some((t, c)) = seq.def.owned_by {
                            if let Some(t) = catalog.table_by_id(t) {
                                return Err(SqlError::new(
                                    "2BP01",
                                    format!(
                                        "cannot drop sequence {n} because column {} of table {} requires it",
                                        t.schema.columns[c].name, t.schema.name
                                    ),
                                )
                                .with_hint("drop the table, or the column's default, first"));
                            }
                        }
                        txn.schema(SchemaChange::DropSequence { id: seq.def.id });
                    }
                    None if *if_exists => {}
                    None => {
                        return Err(SqlError::new(
                            "42P01",
                            format!("sequence \"{n}\" does not exist"),
                        ))
                    }
                }
            }
            tag("DROP SEQUENCE")
        }
        Ddl::CreateView {
            name,
            sql,
            if_not_exists,
        } => {
            if catalog.table(name).is_some() || catalog.view(name).is_some() {
                if *if_not_exists {
                    return tag("CREATE VIEW");
                }
                return Err(SqlError::new(
                    "42P07",
                    format!("relation \"{name}\" already exists"),
                ));
            }
            txn.schema(SchemaChange::CreateView {
                id: catalog.next_table_id(),
                name: name.clone(),
                sql: sql.clone(),
            });
            tag("CREATE VIEW")
        }
        Ddl::DropView {
            names,
            if_exists,
            cascade,
        } => {
            let mut dropping = Vec::new();
            for n in names {
                match catalog.view(n) {
                    Some(_) => dropping.push(n.clone()),
                    None if *if_exists => {}
                    None => {
                        return Err(SqlError::new(
                            "42P01",
                            format!("view \"{n}\" does not exist"),
                        ))
                    }
                }
            }
            drop_dependents(catalog, txn, &dropping, *cascade, "view")?;
            for n in &dropping {
                if let Some(id) = catalog.view(n) {
                    txn.schema(SchemaChange::DropView { id });
                }
            }
            tag("DROP VIEW")
        }
        Ddl::DropTable {
            names,
            if_exists,
            cascade,
        } => {
            let mut dropping = Vec::new();
            for n in names {
                match catalog.table(n) {
                    Some(t) => dropping.push((n.clone(), t.schema.id)),
                    None if *if_exists => {}
                    None => return Err(SqlError::undefined_table(n)),
                }
            }
            let names: Vec<String> = dropping.iter().map(|(n, _)| n.clone()).collect();
            drop_dependents(catalog, txn, &names, *cascade, "table")?;
            let ids: Vec<TableId> = dropping.iter().map(|(_, id)| *id).collect();
            drop_referencing_keys(catalog, txn, &ids, *cascade)?;
            for (_, id) in dropping {
                txn.schema(SchemaChange::DropTable { id });
                for seq in catalog.sequences.values() {
                    if seq.def.owned_by.is_some_and(|(t, _)| t == id) {
                        txn.schema(SchemaChange::DropSequence { id: seq.def.id });
                    }
                }
            }
            tag("DROP TABLE")
        }
        Ddl::CreateIndex {
            table: tname,
            index,
            check,
            if_not_exists,
        } => {
            let name = &index.name;
            let t = catalog
                .table(tname)
                .ok_or_else(|| SqlError::undefined_table(tname))?;
            if catalog.index_owner(name).is_some() || catalog.table(name).is_some() {
                if *if_not_exists {
                    return tag("CREATE INDEX");
                }
                return Err(SqlError::new(
                    "42P07",
                    format!("relation \"{name}\" already exists"),
                ));
            }
            if index.unique {
                let mut seen = HashSet::new();
                for (_, rv) in t.scan() {
                    let v: Vec<Value> = match check {
                        Some(u) => match constraints::expr_key(u, &rv.row)? {
                            Some(v) => v,
                            None => continue,
                        },
                        None => index.columns.iter().map(|&c| rv.row[c].clone()).collect(),
                    };
                    if !v.iter().any(Value::is_null) && !seen.insert(v.clone()) {
                        let shown = match check {
                            Some(u) => u.shown.clone(),
                            None => index
                                .columns
                                .iter()
                                .map(|&c| t.schema.columns[c].name.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                        };
                        return Err(SqlError::new(
                            "23505",
                            format!("could not create unique index \"{name}\""),
                        )
                        .with_detail(format!(
                            "Key ({shown})=({}) is duplicated.",
                            v.iter()
                                .map(|x| x.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                }
            }
            txn.schema(SchemaChange::CreateIndex {
                table: t.schema.id,
                index: index.clone(),
            });
            tag("CREATE INDEX")
        }
        Ddl::DropIndex { names, if_exists } => {
            for n in names {
                match catalog.index_owner(n) {
                    Some(t) => txn.schema(SchemaChange::DropIndex {
                        table: t.schema.id,
                        name: n.clone(),
                    }),
                    None if *if_exists => {}
                    None => {
                        return Err(SqlError::new(
                            "42704",
                            format!("index \"{n}\" does not exist"),
                        ))
                    }
                }
            }
            tag("DROP INDEX")
        }
    }
}

/// Before dropping tables `ids`: the foreign keys of other tables that
/// reference them go too with `cascade` (the tables stay, as in
/// PostgreSQL); without, the drop is refused with 2BP01.
fn drop_referencing_keys(
    catalog: &Catalog,
    txn: &mut Txn,
    ids: &[TableId],
    cascade: bool,
) -> Result<(), SqlError> {
    for t in catalog.tables.values() {
        if ids.contains(&t.schema.id) {
            continue;
        }
        let (gone, kept): (Vec<_>, Vec<_>) = t
            .schema
            .foreign_keys
            .iter()
            .cloned()
            .partition(|fk| ids.contains(&fk.ref_table));
        let Some(fk) = gone.first() else { continue };
        if !cascade {
            let parent = catalog
                .table_by_id(fk.ref_table)
                .map(|p| p.schema.name.clone())
                .unwrap_or_default();
            return Err(SqlError::new(
                "2BP01",
                format!(
                    "cannot drop table {parent} because constraint {} on table {} depends on it",
                    fk.name, t.schema.name
                ),
            )
            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
        }
        txn.schema(SchemaChange::SetConstraints {
            table: t.schema.id,
            checks: t.schema.checks.clone(),
            foreign_keys: kept,
        });
    }
    Ok(())
}

use crate::bind::mentions;

/// Before dropping `relations` (tables or views): with `cascade`, drops
/// every view that depends on them, directly or through other views (the
/// furthest first); without, refuses if there is one.
fn drop_dependents(
    catalog: &Catalog,
    txn: &mut Txn,
    relations: &[String],
    cascade: bool,
    kind: &str,
) -> Result<(), SqlError> {
    let mut gone: Vec<String> = relations.to_vec();
    let mut dependents: Vec<(String, TableId)> = Vec::new();
    let mut i = 0;
    while i < gone.len() {
        for (id, (name, sql)) in &catalog.views {
            if gone.contains(name) || !mentions(sql, &gone[i]) {
                continue;
            }
            if !cascade {
                return Err(SqlError::new(
                    "2BP01",
                    format!(
                        "cannot drop {kind} {} because view {name} depends on it",
                        gone[i]
                    ),
                )
                .with_hint(format!(
                    "drop the view first (DROP VIEW {name}), or use DROP ... CASCADE"
                )));
            }
            gone.push(name.clone());
            dependents.push((name.clone(), *id));
        }
        i += 1;
    }
    for (_, id) in dependents.into_iter().rev() {
        txn.schema(SchemaChange::DropView { id });
    }
    Ok(())
}
