//! What a statement's writes must keep true: each CHECK on every row
//! written, conflicts on the primary key and unique constraints for
//! `ON CONFLICT`, and foreign keys at the end of the statement, with
//! their `ON DELETE` / `ON UPDATE` actions.
//!
//! Every lookup goes through the transaction, so it is in its read set:
//! a child inserted while its parent is deleted by a concurrent
//! transaction makes one of the two fail validation at commit (the
//! child's writer read the parent's key; the parent's deleter read the
//! child table).

use std::collections::HashMap;

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_tables::{
    Catalog, DeferredCheck, DeferredKind, FkAction, ForeignKeyDef, Key, Row, Table, TableId,
    TableSchema, Txn,
};
use aqueduct_values::Value;

use crate::limits::MAX_CASCADED_ROWS;
use crate::plan::{Access, ExprUnique};
use crate::rows::{conform, current, read_rows, write_key, written_differently};

/// A CHECK that is false for `row` fails the write with 23514 (NULL
/// passes, as in PostgreSQL).
pub(crate) fn check_row(
    t: &Table,
    checks: &[(String, Expr)],
    row: &Row,
    params: &[Value],
) -> Result<(), SqlError> {
    for (name, cond) in checks {
        if matches!(cond.eval(&Env::new(row, params))?, Value::Bool(false)) {
            return Err(SqlError::new(
                "23514",
                format!(
                    "new row for relation \"{}\" violates check constraint \"{name}\"",
                    t.schema.name
                ),
            )
            .with_detail(format!("Failing row contains ({}).", row_text(row))));
        }
    }
    Ok(())
}

fn row_text(row: &[Value]) -> String {
    row.iter()
        .map(|v| match v {
            Value::Null => "null".to_string(),
            v => v.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows of `t` whose `columns` equal `values`, as `txn` sees them
/// (by key or index when there is one, else by scan), the read noted.
fn rows_with(
    catalog: &Catalog,
    txn: &mut Txn,
    t: &Table,
    columns: &[usize],
    values: &[Value],
) -> Result<Vec<(Key, Row)>, SqlError> {
    if values.iter().any(Value::is_null) {
        return Ok(Vec::new());
    }
    let literals = |order: &[usize]| -> Vec<Expr> {
        order
            .iter()
            .map(|c| {
                let at = columns.iter().position(|x| x == c).expect("same columns");
                Expr::Literal(values[at].clone())
            })
            .collect()
    };
    let same = |a: &[usize], b: &[usize]| {
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        a.sort_unstable();
        b.sort_unstable();
        a == b
    };
    let access = if t.schema.has_primary_key() && same(&t.schema.primary_key, columns) {
        Access::PrimaryKey(literals(&t.schema.primary_key))
    } else if let Some(i) = t
        .schema
        .indexes
        .iter()
        .position(|i| i.is_physical() && same(&i.columns, columns))
    {
        Access::Index(i, literals(&t.schema.indexes[i].columns))
    } else {
        Access::Scan
    };
    Ok(read_rows(catalog, txn, t, &access, &[])?
        .into_iter()
        .filter(|(_, r)| {
            columns
                .iter()
                .zip(values)
                .all(|(&c, v)| r[c].sql_cmp(v) == Some(std::cmp::Ordering::Equal))
        })
        .map(|(k, r)| (k, (*r).clone()))
        .collect())
}

/// The row a new `row` conflicts with on one of `arbiters` (column sets
/// of the primary key or of unique constraints), as `txn` sees the table.
pub(crate) fn conflicting_row(
    catalog: &Catalog,
    txn: &mut Txn,
    t: &Table,
    arbiters: &[Vec<usize>],
    row: &Row,
) -> Result<Option<(Key, Row)>, SqlError> {
    for cols in arbiters {
        if t.schema.has_primary_key() && cols == &t.schema.primary_key {
            let key = t.schema.key_of(row);
            if let Some(existing) = current(catalog, txn, t, &key) {
                return Ok(Some((key, existing)));
            }
            continue;
        }
        let values: Vec<Value> = cols.iter().map(|&c| row[c].clone()).collect();
        if let Some(found) = rows_with(catalog, txn, t, cols, &values)?
            .into_iter()
            .next()
        {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The unique constraints of one table (other than the primary key) for
/// one statement: a row that would break one fails with 23505 at the
/// statement, as PostgreSQL reports it. The transaction's own rows of the
/// table are gathered once per statement, so a statement of many rows
/// checks each in constant time. Not in the read set: the commit checks
/// unique constraints again under the commit lock, against what committed
/// meanwhile, so a transaction is not failed for a concurrent write that
/// breaks nothing.
pub(crate) struct UniqueCheck<'p> {
    /// Per unique index: its position and the values own rows hold.
    own: Vec<(usize, HashMap<Vec<Value>, Key>)>,
    /// Per unique index on expressions (or partial): the values every
    /// row the transaction sees holds, gathered once per statement.
    exprs: Vec<(&'p ExprUnique, HashMap<Vec<Value>, Key>)>,
}

/// The key `u` gives `row`, unless the row is not in the index or a
/// value is NULL.
pub(crate) fn expr_key(u: &ExprUnique, row: &Row) -> Result<Option<Vec<Value>>, SqlError> {
    let env = Env::new(row, &[]);
    if let Some(p) = &u.predicate {
        if !matches!(p.eval(&env)?, Value::Bool(true)) {
            return Ok(None);
        }
    }
    let values = u
        .keys
        .iter()
        .map(|k| k.eval(&env))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((!values.iter().any(Value::is_null)).then_some(values))
}

impl<'p> UniqueCheck<'p> {
    pub(crate) fn new(
        txn: &Txn,
        t: &Table,
        uniques: &'p [ExprUnique],
    ) -> Result<UniqueCheck<'p>, SqlError> {
        // A deferrable unique constraint, deferred, is left to the check
        // every commit makes.
        let mut own: Vec<(usize, HashMap<Vec<Value>, Key>)> = t
            .schema
            .indexes
            .iter()
            .enumerate()
            .filter(|(_, i)| {
                i.unique
                    && i.is_physical()
                    && !txn
                        .constraint_modes
                        .deferred(&i.name, i.deferrable, i.initially_deferred)
            })
            .map(|(n, _)| (n, HashMap::new()))
            .collect();
        if !own.is_empty() {
            for (key, row) in txn.own_rows(t.schema.id) {
                let Some(row) = row else { continue };
                for (n, seen) in &mut own {
                    if let Some(values) = unique_values(t, *n, row) {
                        seen.insert(values, key.clone());
                    }
                }
            }
        }
        // No index holds these keys: every row is read once, committed
        // ones the transaction has not rewritten, then its own.
        let mut exprs: Vec<(&ExprUnique, HashMap<Vec<Value>, Key>)> =
            uniques.iter().map(|u| (u, HashMap::new())).collect();
        if !exprs.is_empty() {
            for (key, rv) in t.scan() {
                if txn.own(t.schema.id, key).is_some() {
                    continue;
                }
                for (u, seen) in &mut exprs {
                    if let Some(values) = expr_key(u, &rv.row)? {
                        seen.insert(values, key.clone());
                    }
                }
            }
            for (key, row) in txn.own_rows(t.schema.id) {
                let Some(row) = row else { continue };
                for (u, seen) in &mut exprs {
                    if let Some(values) = expr_key(u, row)? {
                        seen.insert(values, key.clone());
                    }
                }
            }
        }
        Ok(UniqueCheck { own, exprs })
    }

    /// Checks `row` at `key` (already written to `txn`, or about to be)
    /// and remembers it for the statement's later rows.
    pub(crate) fn check(
        &mut self,
        txn: &Txn,
        t: &Table,
        key: &Key,
        row: &Row,
    ) -> Result<(), SqlError> {
        for (u, seen) in &mut self.exprs {
            let Some(values) = expr_key(u, row)? else {
                continue;
            };
            // The row seen with these values may have changed since.
            let holds = |other: &Key| -> Result<bool, SqlError> {
                let now = match txn.own(t.schema.id, other) {
                    Some(r) => r.cloned(),
                    None => t.get(other).map(|rv| (*rv.row).clone()),
                };
                Ok(match now {
                    Some(r) => expr_key(u, &r)?.as_ref() == Some(&values),
                    None => false,
                })
            };
            if let Some(other) = seen.get(&values) {
                if other != key && holds(other)? {
                    return Err(expr_duplicate(u, &values));
                }
            }
            seen.insert(values, key.clone());
        }
        if self.own.is_empty() {
            return Ok(());
        }
        let committed = t.unique_conflicts(key, row);
        for (n, seen) in &mut self.own {
            let Some(values) = unique_values(t, *n, row) else {
                continue;
            };
            let def = &t.schema.indexes[*n];
            let by_committed = committed
                .iter()
                .any(|(name, other)| *name == def.name && txn.own(t.schema.id, other).is_none());
            // An own row seen earlier may have changed since: it counts
            // only if it still holds the values.
            let by_own = seen.get(&values).is_some_and(|other| {
                other != key
                    && txn
                        .own(t.schema.id, other)
                        .flatten()
                        .is_some_and(|r| unique_values(t, *n, r).as_ref() == Some(&values))
            });
            if by_committed || by_own {
                return Err(SqlError::new(
                    "23505",
                    format!(
                        "duplicate key value violates unique constraint \"{}\"",
                        def.name
                    ),
                )
                .with_detail(format!(
                    "{} already exists.",
                    key_text(&names(t, &def.columns), &values)
                )));
            }
            seen.insert(values, key.clone());
        }
        Ok(())
    }
}

/// The values of unique index `n` in `row`, unless one is NULL (NULLs are
/// distinct).
fn unique_values(t: &Table, n: usize, row: &Row) -> Option<Vec<Value>> {
    let values: Vec<Value> = t.schema.indexes[n]
        .columns
        .iter()
        .map(|&c| row[c].clone())
        .collect();
    (!values.iter().any(Value::is_null)).then_some(values)
}

/// The rows a statement changed: old and new versions by table.
#[derive(Default)]
pub(crate) struct Changes {
    rows: Vec<(TableId, Option<Row>, Option<Row>)>,
}

impl Changes {
    pub(crate) fn push(&mut self, table: TableId, old: Option<Row>, new: Option<Row>) {
        self.rows.push((table, old, new));
    }
}

fn key_text(schema_columns: &[String], values: &[Value]) -> String {
    format!(
        "Key ({})=({})",
        schema_columns.join(", "),
        values
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn names(t: &Table, cols: &[usize]) -> Vec<String> {
    cols.iter()
        .map(|&c| t.schema.columns[c].name.clone())
        .collect()
}

fn table(catalog: &Catalog, id: TableId) -> Result<&Table, SqlError> {
    catalog
        .table_by_id(id)
        .ok_or_else(|| SqlError::new("42P01", "a table was dropped while the statement ran"))
}

/// At the end of a statement: the actions of foreign keys whose
/// referenced rows went or changed key (cascading as far as they go, up
/// to `MAX_CASCADED_ROWS` rows), then every foreign key of every row
/// written holds, or the statement fails with 23503.
pub(crate) fn enforce_foreign_keys(
    catalog: &Catalog,
    txn: &mut Txn,
    changes: Changes,
) -> Result<(), SqlError> {
    if catalog
        .tables
        .values()
        .all(|t| t.schema.foreign_keys.is_empty())
    {
        return Ok(());
    }
    let mut work = changes.rows;
    let mut done = 0;
    let mut i = 0;
    while i < work.len() {
        let (table_id, old, new) = work[i].clone();
        i += 1;
        done += 1;
        if done > MAX_CASCADED_ROWS {
            return Err(SqlError::new(
                "54000",
                format!(
                    "a statement changing more than {MAX_CASCADED_ROWS} rows through foreign keys"
                ),
            )
            .with_hint("delete or update the referencing rows in smaller statements"));
        }
        let t = table(catalog, table_id)?;
        // This row references others: they must exist.
        if let Some(new) = &new {
            let changed: Vec<ForeignKeyDef> = t
                .schema
                .foreign_keys
                .iter()
                .filter(|fk| {
                    !old.as_ref()
                        .is_some_and(|o| fk.columns.iter().all(|&c| o[c] == new[c]))
                })
                .cloned()
                .collect();
            check_references(catalog, txn, &t.schema, &changed, new)?;
        }
        // Rows that reference this one: their key went or changed.
        let Some(old) = old else { continue };
        for child in catalog.tables.values() {
            for fk in child
                .schema
                .foreign_keys
                .iter()
                .filter(|fk| fk.ref_table == table_id)
            {
                let key: Vec<Value> = fk.ref_columns.iter().map(|&c| old[c].clone()).collect();
                if key.iter().any(Value::is_null) {
                    continue;
                }
                if let Some(new) = &new {
                    if fk.ref_columns.iter().all(|&c| old[c] == new[c]) {
                        continue;
                    }
                }
                // Another row may hold the key now (deleted and inserted
                // again in one statement): then nothing is orphaned.
                if !rows_with(catalog, txn, t, &fk.ref_columns, &key)?.is_empty() {
                    continue;
                }
                let children = rows_with(catalog, txn, child, &fk.columns, &key)?;
                if children.is_empty() {
                    continue;
                }
                let action = if new.is_some() {
                    fk.on_update
                } else {
                    fk.on_delete
                };
                // NO ACTION may wait for the end of the transaction;
                // RESTRICT never does.
                if action == FkAction::NoAction
                    && txn
                        .constraint_modes
                        .deferred(&fk.name, fk.deferrable, fk.initially_deferred)
                {
                    txn.deferred.push(DeferredCheck {
                        table: child.schema.id,
                        constraint: fk.name.clone(),
                        kind: DeferredKind::Referenced(key.clone()),
                    });
                    continue;
                }
                let replaced: Option<Vec<Value>> = new
                    .as_ref()
                    .map(|n| fk.ref_columns.iter().map(|&c| n[c].clone()).collect());
                for (ckey, crow) in children {
                    let next = act(child, fk, action, &crow, replaced.as_deref(), t, &key)?
                        .map(|row| conform(child, row))
                        .transpose()?;
                    let ckey = write_key(child, ckey, &crow);
                    match &next {
                        None => txn.delete(child.schema.id, ckey),
                        Some(row) => {
                            let nkey = write_key(child, ckey.clone(), row);
                            if nkey != ckey || written_differently(&nkey, &ckey) {
                                txn.delete(child.schema.id, ckey);
                            }
                            txn.put(child.schema.id, nkey, row.clone());
                        }
                    }
                    work.push((child.schema.id, Some(crow), next));
                }
            }
        }
    }
    Ok(())
}

/// Each of `fks` (foreign keys of the table `schema` describes) holds for
/// `row`: the row it references exists, or 23503.
pub(crate) fn check_references(
    catalog: &Catalog,
    txn: &mut Txn,
    schema: &TableSchema,
    fks: &[ForeignKeyDef],
    row: &Row,
) -> Result<(), SqlError> {
    for fk in fks {
        let values: Vec<Value> = fk.columns.iter().map(|&c| row[c].clone()).collect();
        if values.iter().any(Value::is_null) {
            continue;
        }
        let parent = table(catalog, fk.ref_table)?;
        let found = rows_with(catalog, txn, parent, &fk.ref_columns, &values)?;
        // A locking transaction holds the row it references until it ends,
        // so the row cannot go meanwhile.
        for (key, _) in &found {
            txn.want_lock(fk.ref_table, key.clone());
        }
        if found.is_empty() {
            if txn
                .constraint_modes
                .deferred(&fk.name, fk.deferrable, fk.initially_deferred)
            {
                txn.deferred.push(DeferredCheck {
                    table: schema.id,
                    constraint: fk.name.clone(),
                    kind: DeferredKind::References(values),
                });
                continue;
            }
            return Err(fk_missing(schema, fk, parent, &values));
        }
    }
    Ok(())
}

/// 23503: `parent`'s row with `key` went (or changed key) while rows of
/// `child` reference it through `fk`.
fn still_referenced(child: &Table, fk: &ForeignKeyDef, parent: &Table, key: &[Value]) -> SqlError {
    SqlError::new(
        "23503",
        format!(
            "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\"",
            parent.schema.name, fk.name, child.schema.name
        ),
    )
    .with_detail(format!(
        "{} is still referenced from table \"{}\".",
        key_text(&names(parent, &fk.ref_columns), key),
        child.schema.name
    ))
}

/// 23503: a row of `schema`'s table references `values`, which `parent`
/// does not have.
fn fk_missing(
    schema: &TableSchema,
    fk: &ForeignKeyDef,
    parent: &Table,
    values: &[Value],
) -> SqlError {
    let cols: Vec<String> = fk
        .columns
        .iter()
        .map(|&c| schema.columns[c].name.clone())
        .collect();
    SqlError::new(
        "23503",
        format!(
            "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
            schema.name, fk.name
        ),
    )
    .with_detail(format!(
        "{} is not present in table \"{}\".",
        key_text(&cols, values),
        parent.schema.name
    ))
}

/// What foreign key `fk` of `child` does to a referencing row `row` when
/// the referenced `key` of `parent` went (`replaced` `None`) or became
/// `replaced`: the row's new version (`None` to delete it), or 23503.
fn act(
    child: &Table,
    fk: &ForeignKeyDef,
    action: FkAction,
    row: &Row,
    replaced: Option<&[Value]>,
    parent: &Table,
    key: &[Value],
) -> Result<Option<Row>, SqlError> {
    let set = |values: &dyn Fn(usize, usize) -> Value| {
        let mut out = row.clone();
        for (i, &c) in fk.columns.iter().enumerate() {
            out[c] = values(i, c);
        }
        out
    };
    Ok(match action {
        FkAction::NoAction | FkAction::Restrict => {
            return Err(still_referenced(child, fk, parent, key))
        }
        FkAction::Cascade => replaced.map(|values| set(&|i, _| values[i].clone())),
        FkAction::SetNull => Some(set(&|_, _| Value::Null)),
        FkAction::SetDefault => {
            if let Some(c) = fk
                .columns
                .iter()
                .find(|&&c| child.schema.columns[c].default_expr.is_some())
            {
                return Err(SqlError::unsupported(format!(
                    "ON DELETE/UPDATE SET DEFAULT with a default that is an expression (column \"{}\")",
                    child.schema.columns[*c].name
                ))
                .with_hint("use a constant default for the column, or SET NULL"));
            }
            Some(set(&|_, c| {
                child.schema.columns[c]
                    .default
                    .clone()
                    .unwrap_or(Value::Null)
            }))
        }
    })
}

/// Which deferred checks are done now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckDue {
    /// All: the transaction ends.
    All,
    /// Those of constraints no longer deferred (`SET CONSTRAINTS ...
    /// IMMEDIATE`).
    Immediate,
}

/// The foreign key checks put off to the end of the transaction, done now
/// (at `COMMIT`, at the end of a statement outside a transaction block,
/// or for the constraints `SET CONSTRAINTS ... IMMEDIATE` names): 23503 for
/// the first that fails. Those done are taken off the list.
pub(crate) fn check_deferred(
    catalog: &Catalog,
    txn: &mut Txn,
    due: CheckDue,
) -> Result<(), SqlError> {
    let (due, kept): (Vec<DeferredCheck>, Vec<DeferredCheck>) = std::mem::take(&mut txn.deferred)
        .into_iter()
        .partition(|d| {
            due == CheckDue::All
                || catalog.table_by_id(d.table).is_some_and(|t| {
                    t.schema.foreign_keys.iter().any(|fk| {
                        fk.name == d.constraint
                            && !txn.constraint_modes.deferred(
                                &fk.name,
                                fk.deferrable,
                                fk.initially_deferred,
                            )
                    })
                })
        });
    txn.deferred = kept;
    // Of checks still pending when a constraint or table went, nothing is
    // left to check.
    txn.deferred.retain(|d| {
        catalog.table_by_id(d.table).is_some_and(|t| {
            t.schema
                .foreign_keys
                .iter()
                .any(|fk| fk.name == d.constraint)
        })
    });
    for d in due {
        let child = table(catalog, d.table)?;
        let Some(fk) = child
            .schema
            .foreign_keys
            .iter()
            .find(|fk| fk.name == d.constraint)
            .cloned()
        else {
            continue;
        };
        let Some(parent) = catalog.table_by_id(fk.ref_table) else {
            continue;
        };
        match &d.kind {
            DeferredKind::References(values) => {
                // Still referenced by a row? Then the referenced row must
                // be there now.
                if rows_with(catalog, txn, child, &fk.columns, values)?.is_empty() {
                    continue;
                }
                let found = rows_with(catalog, txn, parent, &fk.ref_columns, values)?;
                if found.is_empty() {
                    return Err(fk_missing(&child.schema, &fk, parent, values));
                }
                for (key, _) in found {
                    txn.want_lock(fk.ref_table, key);
                }
            }
            DeferredKind::Referenced(key) => {
                if !rows_with(catalog, txn, parent, &fk.ref_columns, key)?.is_empty() {
                    continue;
                }
                if !rows_with(catalog, txn, child, &fk.columns, key)?.is_empty() {
                    return Err(still_referenced(child, &fk, parent, key));
                }
            }
        }
    }
    Ok(())
}

/// Under the commit lock: the unique indexes on expressions (and partial
/// ones) of the tables `txn` wrote still hold against what committed
/// since its statements checked them (23505 otherwise).
pub(crate) fn check_at_commit(catalog: &Catalog, txn: &Txn) -> Result<(), SqlError> {
    for id in txn.written_tables() {
        let Some(t) = catalog.table_by_id(id) else {
            continue;
        };
        if !t
            .schema
            .indexes
            .iter()
            .any(|i| i.unique && !i.is_physical())
        {
            continue;
        }
        let uniques = crate::bind::Binder::new(catalog).expr_uniques_of(t, &t.schema.name)?;
        for u in &uniques {
            let mut own: HashMap<Vec<Value>, &Key> = HashMap::new();
            for (key, row) in txn.own_rows(id) {
                if let Some(values) = row.map(|r| expr_key(u, r)).transpose()?.flatten() {
                    own.insert(values, key);
                }
            }
            if own.is_empty() {
                continue;
            }
            for (key, rv) in t.scan() {
                if txn.own(id, key).is_some() {
                    continue;
                }
                if let Some(values) = expr_key(u, &rv.row)? {
                    if own.contains_key(&values) {
                        return Err(expr_duplicate(u, &values));
                    }
                }
            }
        }
    }
    Ok(())
}

/// 23505 for a unique index on expressions.
fn expr_duplicate(u: &ExprUnique, values: &[Value]) -> SqlError {
    SqlError::new(
        "23505",
        format!(
            "duplicate key value violates unique constraint \"{}\"",
            u.name
        ),
    )
    .with_detail(format!(
        "Key ({})=({}) already exists.",
        u.shown,
        values
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
