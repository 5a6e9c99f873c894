//! Executing bound plans against the catalog through a transaction: reads
//! are recorded for validation at commit, writes are buffered in the
//! transaction and reach the log as one batch.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use aqueduct_expr::agg::Accumulator;
use aqueduct_tables::{
    Catalog, Database, IndexDef, Key, Row, SchemaChange, Table, TableId, TableSchema, Txn,
};
use aqueduct_values::{DataType, Value, MAX_ROW_BYTES};

use aqueduct_expr::{Env, Expr, SqlError};

use crate::bind;
use crate::catalog_queries;
use crate::plan::{
    Access, Aggregate, Column, Ddl, DeletePlan, InsertPlan, InsertSource, OnConflict, Outcome,
    Plan, SelectPlan, UpdatePlan,
};

/// Runs a data or schema statement.
pub fn execute(
    db: &Database,
    catalog: &Catalog,
    txn: &mut Txn,
    plan: &Plan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    match plan {
        Plan::Select(p) => {
            let rows = select(catalog, txn, p, params)?;
            Ok(rows_outcome(columns, rows, "SELECT"))
        }
        Plan::Values(outputs) => {
            let env = Env { row: &[], params };
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
        Plan::Insert(p) => insert(db, catalog, txn, p, columns, params),
        Plan::Update(p) => update(catalog, txn, p, columns, params),
        Plan::Delete(p) => delete(catalog, txn, p, columns, params),
        Plan::Ddl(d) => ddl(catalog, txn, d),
        Plan::Begin
        | Plan::Commit
        | Plan::Rollback
        | Plan::Savepoint { .. }
        | Plan::ReleaseSavepoint { .. }
        | Plan::RollbackTo { .. }
        | Plan::Set { .. }
        | Plan::Show { .. }
        | Plan::Deallocate { .. }
        | Plan::ShowViews
        | Plan::ShowConsumers
        | Plan::Explain { .. } => {
            unreachable!("session statements are handled by the session")
        }
        Plan::Dataflow(why) => Err(SqlError::new(
            "XX000",
            format!("a query that needs the dataflow ({why}) reached direct evaluation"),
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

/// Evaluates constant key expressions as values of the key columns' types
/// (without a numeric's precision and scale: `WHERE k = 1.234` on a
/// `numeric(10,2)` key looks for 1.234, which is not there, not for 1.23).
fn key_values(
    t: &Table,
    cols: &[usize],
    exprs: &[Expr],
    params: &[Value],
) -> Result<Vec<Value>, SqlError> {
    let env = Env { row: &[], params };
    cols.iter()
        .zip(exprs)
        .map(|(&c, e)| {
            Ok(e.eval(&env)?
                .coerce(&t.schema.columns[c].ty.unconstrained())?)
        })
        .collect()
}

/// Every row of `t` as `txn` sees it (its own writes included), noting the
/// scan in the transaction's read set.
pub fn scan_rows(catalog: &Catalog, txn: &mut Txn, t: &Table) -> Result<Vec<Row>, SqlError> {
    Ok(read_rows(catalog, txn, t, &Access::Scan, &[])?
        .into_iter()
        .map(|(_, r)| (*r).clone())
        .collect())
}

/// The rows a statement reads from `t` via `access`, as this transaction
/// sees them (its own writes included). Records the reads for validation.
fn read_rows(
    catalog: &Catalog,
    txn: &mut Txn,
    t: &Table,
    access: &Access,
    params: &[Value],
) -> Result<Vec<(Key, Arc<Row>)>, SqlError> {
    let id = t.schema.id;
    // The row at one primary key as the transaction sees it, the read noted.
    let at_key = |txn: &mut Txn, exprs: &[Expr]| -> Result<Option<(Key, Arc<Row>)>, SqlError> {
        let key = key_values(t, &t.schema.primary_key, exprs, params)?;
        if key.iter().any(Value::is_null) {
            return Ok(None);
        }
        txn.note_row_read(catalog, id, &key);
        let row = match txn.own(id, &key) {
            Some(own) => own.map(|r| Arc::new(r.clone())),
            None => t.get(&key).map(|rv| rv.row.clone()),
        };
        Ok(row.map(|r| (key, r)))
    };
    match access {
        Access::PrimaryKey(exprs) => Ok(at_key(txn, exprs)?.into_iter().collect()),
        Access::PrimaryKeys(keys) => {
            // `IN (1, 1)` reads the row once.
            let mut found: BTreeMap<Key, Arc<Row>> = BTreeMap::new();
            for exprs in keys {
                if let Some((key, row)) = at_key(txn, exprs)? {
                    found.insert(key, row);
                }
            }
            Ok(found.into_iter().collect())
        }
        Access::PrimaryKeysOfArray { exprs, array_at } => {
            // A NULL array matches nothing, nor does a NULL element; a key
            // given twice reads the row once.
            let items = match exprs[*array_at].eval(&Env { row: &[], params })? {
                Value::Array(items) => items,
                _ => Vec::new(),
            };
            let mut found: BTreeMap<Key, Arc<Row>> = BTreeMap::new();
            let mut key = exprs.clone();
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 && i.is_multiple_of(aqueduct_expr::interrupt::CHECK_EVERY) {
                    aqueduct_expr::interrupt::check()?;
                }
                if item.is_null() {
                    continue;
                }
                key[*array_at] = Expr::Literal(item);
                if let Some((k, row)) = at_key(txn, &key)? {
                    found.insert(k, row);
                }
            }
            Ok(found.into_iter().collect())
        }
        Access::KeyPrefix(exprs) if txn.own_rows(id).next().is_none() => {
            let n = exprs.len();
            let prefix = key_values(t, &t.schema.primary_key[..n], exprs, params)?;
            txn.note_table_read(catalog, id);
            if prefix.iter().any(Value::is_null) {
                return Ok(Vec::new());
            }
            Ok(t.range(
                std::ops::Bound::Included(&prefix),
                std::ops::Bound::Unbounded,
            )
            .take_while(|(k, _)| k[..n] == prefix[..])
            .map(|(k, rv)| (k.clone(), rv.row.clone()))
            .collect())
        }
        Access::Index(i, exprs) if txn.own_rows(id).next().is_none() => {
            let values = key_values(t, &t.schema.indexes[*i].columns, exprs, params)?;
            txn.note_table_read(catalog, id);
            Ok(t.index_rows(*i, &values)
                .map(|(k, row)| (k.clone(), row.clone()))
                .collect())
        }
        Access::Index(..) | Access::KeyPrefix(_) | Access::Scan => {
            txn.note_table_read(catalog, id);
            let mut own: BTreeMap<Key, Option<Row>> = txn
                .own_rows(id)
                .map(|(k, r)| (k.clone(), r.cloned()))
                .collect();
            let mut out = Vec::with_capacity(t.len());
            for (i, (k, rv)) in t.scan().enumerate() {
                every_chunk(i, &rv.row)?;
                match own.remove(k) {
                    Some(Some(r)) => out.push((k.clone(), Arc::new(r))),
                    Some(None) => {}
                    None => out.push((k.clone(), rv.row.clone())),
                }
            }
            for (k, r) in own {
                if let Some(r) = r {
                    out.push((k, Arc::new(r)));
                }
            }
            Ok(out)
        }
    }
}

/// Every [`CHECK_EVERY`](aqueduct_expr::interrupt::CHECK_EVERY) rows of a
/// loop (`i` counts them, `row` is one of them): charges that many rows of
/// its size to the running statement's memory budget and checks whether it
/// must stop (cancel, timeout, shutdown).
fn every_chunk(i: usize, row: &[Value]) -> Result<(), SqlError> {
    use aqueduct_expr::interrupt::{charge, CHECK_EVERY};
    if !i.is_multiple_of(CHECK_EVERY) || i == 0 {
        return Ok(());
    }
    charge((CHECK_EVERY * aqueduct_dataflow::row_bytes(row)) as u64)
}

fn passes(filter: Option<&Expr>, row: &[Value], params: &[Value]) -> Result<bool, SqlError> {
    match filter {
        None => Ok(true),
        Some(f) => Ok(matches!(f.eval(&Env { row, params })?, Value::Bool(true))),
    }
}

fn select(
    catalog: &Catalog,
    txn: &mut Txn,
    p: &SelectPlan,
    params: &[Value],
) -> Result<Vec<Vec<Value>>, SqlError> {
    let t = table(catalog, p.table)?;
    let rows = read_rows(catalog, txn, t, &p.access, params)?;
    let mut matching = Vec::with_capacity(rows.len());
    for (i, (_, row)) in rows.into_iter().enumerate() {
        every_chunk(i, &row)?;
        if passes(p.body.filter.as_ref(), &row, params)? {
            matching.push(row);
        }
    }
    let mut out: Vec<Vec<Value>> = match &p.body.grouping {
        None => matching
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let out = eval_all(&p.body.outputs, &Env { row, params })?;
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
                    .map(|s| s.expr.eval(&Env { row: &r, params }))
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
    let env = Env { row: &[], params };
    let offset = count_arg(p.body.offset.as_ref(), &env, "OFFSET")?.unwrap_or(0);
    let limit = count_arg(p.body.limit.as_ref(), &env, "LIMIT")?;
    let mut out: Vec<Vec<Value>> = out
        .into_iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .collect();
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
        let env = Env { row, params };
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
        let env = Env {
            row: &grouped,
            params,
        };
        if let Some(h) = &g.having {
            if !matches!(h.eval(&env)?, Value::Bool(true)) {
                continue;
            }
        }
        out.push(eval_all(outputs, &env)?);
    }
    Ok(out)
}

/// Checks a row against the table's column rules and coerces its values.
fn conform(t: &Table, row: Vec<Value>) -> Result<Row, SqlError> {
    let mut out = Vec::with_capacity(row.len());
    let mut bytes = 0;
    for (v, c) in row.into_iter().zip(&t.schema.columns) {
        let v = v.coerce(&c.ty).map_err(|e| {
            let mut err = SqlError::from(e);
            err.message = format!("{} (column \"{}\")", err.message, c.name);
            err
        })?;
        if v.is_null() && c.not_null {
            return Err(SqlError::new(
                "23502",
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    c.name, t.schema.name
                ),
            ));
        }
        bytes += v.payload_len() + 16;
        out.push(v);
    }
    if bytes > MAX_ROW_BYTES {
        return Err(SqlError::new(
            "54000",
            format!("row of {bytes} bytes exceeds the limit of {MAX_ROW_BYTES} bytes"),
        ));
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

/// The current row at `key` as this transaction sees it; records the read.
fn current(catalog: &Catalog, txn: &mut Txn, t: &Table, key: &Key) -> Option<Row> {
    txn.note_row_read(catalog, t.schema.id, key);
    match txn.own(t.schema.id, key) {
        Some(own) => own.cloned(),
        None => t.get(key).map(|rv| (*rv.row).clone()),
    }
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
        .map(|r| eval_all(p, &Env { row: r, params }))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Outcome::Rows {
        columns,
        rows: out,
        tag,
    })
}

fn insert(
    db: &Database,
    catalog: &Catalog,
    txn: &mut Txn,
    p: &InsertPlan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let t = table(catalog, p.table)?;
    let sources: Vec<Vec<Value>> = match &p.source {
        InsertSource::Values(rows) => rows
            .iter()
            .map(|r| eval_all(r, &Env { row: &[], params }))
            .collect::<Result<_, _>>()?,
        InsertSource::Query(q) => select(catalog, txn, q, params)?,
    };
    let mut written = Vec::new();
    for values in sources {
        let mut row: Vec<Value> = t
            .schema
            .columns
            .iter()
            .map(|c| c.default.clone().unwrap_or(Value::Null))
            .collect();
        for (v, &c) in values.into_iter().zip(&p.columns) {
            row[c] = v;
        }
        let row = conform(t, row)?;
        if !t.schema.has_primary_key() {
            let key = vec![Value::Int(db.allocate_rowid())];
            txn.put(t.schema.id, key, row.clone());
            written.push(row);
            continue;
        }
        let key = t.schema.key_of(&row);
        match (current(catalog, txn, t, &key), &p.on_conflict) {
            (None, _) => {
                txn.put(t.schema.id, key, row.clone());
                written.push(row);
            }
            (Some(_), OnConflict::Error) => return Err(duplicate_key(t, &key)),
            (Some(_), OnConflict::DoNothing) => {}
            (
                Some(existing),
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
                    new[*c] = e.eval(&Env { row: &both, params })?;
                }
                let new = conform(t, new)?;
                if t.schema.key_of(&new) != key {
                    return Err(SqlError::unsupported(
                        "changing the primary key in ON CONFLICT DO UPDATE",
                    ));
                }
                txn.put(t.schema.id, key, new.clone());
                written.push(new);
            }
        }
    }
    let tag = format!("INSERT 0 {}", written.len());
    returning(&p.returning, &written, columns, params, tag)
}

fn update(
    catalog: &Catalog,
    txn: &mut Txn,
    p: &UpdatePlan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let t = table(catalog, p.table)?;
    let rows = read_rows(catalog, txn, t, &p.access, params)?;
    let mut changes = Vec::new();
    for (key, row) in rows {
        if !passes(p.filter.as_ref(), &row, params)? {
            continue;
        }
        let mut new = (*row).clone();
        for (c, e) in &p.assignments {
            new[*c] = e.eval(&Env { row: &row, params })?;
        }
        changes.push((key, conform(t, new)?));
    }
    let mut written = Vec::with_capacity(changes.len());
    for (key, new) in changes {
        let new_key = if t.schema.has_primary_key() {
            t.schema.key_of(&new)
        } else {
            key.clone()
        };
        if new_key != key {
            if current(catalog, txn, t, &new_key).is_some() {
                return Err(duplicate_key(t, &new_key));
            }
            txn.delete(t.schema.id, key);
        }
        txn.put(t.schema.id, new_key, new.clone());
        written.push(new);
    }
    let tag = format!("UPDATE {}", written.len());
    returning(&p.returning, &written, columns, params, tag)
}

fn delete(
    catalog: &Catalog,
    txn: &mut Txn,
    p: &DeletePlan,
    columns: Vec<Column>,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let t = table(catalog, p.table)?;
    let rows = read_rows(catalog, txn, t, &p.access, params)?;
    let mut removed = Vec::new();
    for (key, row) in rows {
        if passes(p.filter.as_ref(), &row, params)? {
            txn.delete(t.schema.id, key);
            removed.push((*row).clone());
        }
    }
    let tag = format!("DELETE {}", removed.len());
    returning(&p.returning, &removed, columns, params, tag)
}

fn ddl(catalog: &Catalog, txn: &mut Txn, d: &Ddl) -> Result<Outcome, SqlError> {
    let tag = |t: &str| Ok(Outcome::Command { tag: t.into() });
    match d {
        Ddl::CreateTable {
            schema,
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
            let schema: TableSchema = bind::with_id(schema.clone(), catalog.next_table_id());
            txn.schema(SchemaChange::CreateTable(schema));
            tag("CREATE TABLE")
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
            for (_, id) in dropping {
                txn.schema(SchemaChange::DropTable { id });
            }
            tag("DROP TABLE")
        }
        Ddl::CreateIndex {
            table: tname,
            name,
            columns,
            unique,
            if_not_exists,
        } => {
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
            if *unique {
                let mut seen = HashSet::new();
                for (_, rv) in t.scan() {
                    let v: Vec<Value> = columns.iter().map(|&c| rv.row[c].clone()).collect();
                    if !v.iter().any(Value::is_null) && !seen.insert(v.clone()) {
                        return Err(SqlError::new(
                            "23505",
                            format!("could not create unique index \"{name}\""),
                        )
                        .with_detail(format!(
                            "Key ({})=({}) is duplicated.",
                            columns
                                .iter()
                                .map(|&c| t.schema.columns[c].name.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
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
                index: IndexDef {
                    name: name.clone(),
                    columns: columns.clone(),
                    unique: *unique,
                },
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

/// A view whose definition names table `table` (as a whole word).
/// Whether a view's definition reads `relation`.
fn mentions(sql: &str, relation: &str) -> bool {
    match crate::parse::parse(sql) {
        Ok(statements) => statements
            .iter()
            .any(|st| crate::bind::relations(st).iter().any(|r| r == relation)),
        // Unreadable (never expected): assume it does, to be safe.
        Err(_) => true,
    }
}

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
