//! A table's rows as a transaction sees them (its own writes merged in,
//! its reads noted for validation at commit), and rows made to fit a
//! table: what statements and constraint checks share.

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_tables::{Catalog, Key, Row, Table, Txn};
use aqueduct_values::{Value, MAX_ROW_BYTES};

use crate::plan::Access;

/// Evaluates constant key expressions as values of the key columns' types
/// (without a numeric's precision and scale: `WHERE k = 1.234` on a
/// `numeric(10,2)` key looks for 1.234, which is not there, not for 1.23).
pub(crate) fn key_values(
    t: &Table,
    cols: &[usize],
    exprs: &[Expr],
    params: &[Value],
) -> Result<Vec<Value>, SqlError> {
    let env = Env::new(&[], params);
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
pub(crate) fn read_rows(
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
            let items = match exprs[*array_at].eval(&Env::new(&[], params))? {
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
pub(crate) fn every_chunk(i: usize, row: &[Value]) -> Result<(), SqlError> {
    use aqueduct_expr::interrupt::{charge, CHECK_EVERY};
    if !i.is_multiple_of(CHECK_EVERY) || i == 0 {
        return Ok(());
    }
    charge((CHECK_EVERY * aqueduct_dataflow::row_bytes(row)) as u64)
}

/// Checks a row against the table's column rules and coerces its values.
pub(crate) fn conform(t: &Table, mut row: Vec<Value>) -> Result<Row, SqlError> {
    // In place: a bulk load conforms a million rows.
    row.truncate(t.schema.columns.len());
    let mut bytes = 0;
    for (slot, c) in row.iter_mut().zip(&t.schema.columns) {
        let v = std::mem::replace(slot, Value::Null)
            .coerce(&c.ty)
            .map_err(|e| {
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
        *slot = v;
    }
    if bytes > MAX_ROW_BYTES {
        return Err(SqlError::new(
            "54000",
            format!("row of {bytes} bytes exceeds the limit of {MAX_ROW_BYTES} bytes"),
        ));
    }
    Ok(row)
}

/// The key a write names for `row`, found at `found`. A table with a
/// primary key keys each row in the log by the bytes of the row's own key
/// columns (every put names those), and an equal key the row was found by
/// may be written otherwise (`'30 days'` for `'1 mon'`, `1` for `1.0`): a
/// delete naming those bytes would leave the put under the row's own for
/// compaction to keep. A table without one keys rows by their row id.
pub(crate) fn write_key(t: &Table, found: Key, row: &Row) -> Key {
    if t.schema.has_primary_key() {
        t.schema.key_of(row)
    } else {
        found
    }
}

/// Whether two equal keys are written differently (`'1 mon'` and
/// `'30 days'`, `1.0` and `1.00`), so that their log keys differ: a write
/// that rekeys a row so deletes the old bytes first.
pub(crate) fn written_differently(a: &[Value], b: &[Value]) -> bool {
    let bytes = |key: &[Value]| {
        let mut out = Vec::new();
        for v in key {
            aqueduct_values::encode_value(v, &mut out);
        }
        out
    };
    bytes(a) != bytes(b)
}

/// The current row at `key` as this transaction sees it; records the read.
pub(crate) fn current(catalog: &Catalog, txn: &mut Txn, t: &Table, key: &Key) -> Option<Row> {
    txn.note_row_read(catalog, t.schema.id, key);
    match txn.own(t.schema.id, key) {
        Some(own) => own.cloned(),
        None => t.get(key).map(|rv| (*rv.row).clone()),
    }
}

/// Refuses `name` for a new relation when a table, view, sequence or
/// index has it (42P07).
pub(crate) fn refuse_taken_name(catalog: &Catalog, name: &str) -> Result<(), SqlError> {
    if catalog.table(name).is_some()
        || catalog.view(name).is_some()
        || catalog.sequence(name).is_some()
        || catalog.index_owner(name).is_some()
    {
        return Err(SqlError::new(
            "42P07",
            format!("relation \"{name}\" already exists"),
        ));
    }
    Ok(())
}
