//! Functions in `FROM` that make rows (`generate_series`, `unnest`), for
//! queries evaluated once: their arguments are constants there (the
//! statement's parameters, and a correlated subquery's outer values, are
//! bound), so the rows are made when the query is compiled and read as a
//! source of their own.

use aqueduct_values::{DataType, Value};

use aqueduct_expr::SqlError;

/// The most rows one function in `FROM` may make.
pub const MAX_FUNCTION_ROWS: usize = 10_000_000;

/// What a function in `FROM` makes: its columns' names and types, and
/// rows.
pub struct FunctionRows {
    pub columns: Vec<(String, DataType)>,
    pub rows: Vec<Vec<Value>>,
}

fn too_many(name: &str) -> SqlError {
    SqlError::new(
        "54000",
        format!("{name} would make more than {MAX_FUNCTION_ROWS} rows"),
    )
    .with_hint("narrow its range")
}

/// The rows of `name(args)`, or `None` when `name` is no such function.
pub fn rows(
    name: &str,
    args: &[(Value, Option<DataType>)],
) -> Result<Option<FunctionRows>, SqlError> {
    Ok(Some(match name {
        "generate_series" => {
            let int = |i: usize| match args.get(i).map(|a| &a.0) {
                Some(Value::Int(n)) => Ok(Some(*n)),
                Some(Value::Null) => Ok(None),
                None if i == 2 => Ok(Some(1)),
                _ => Err(SqlError::unsupported(
                    "generate_series over values that are not integers",
                )),
            };
            if !(2..=3).contains(&args.len()) {
                return Err(SqlError::new(
                    "42883",
                    format!(
                        "function generate_series with {} arguments does not exist",
                        args.len()
                    ),
                ));
            }
            let (start, stop, step) = (int(0)?, int(1)?, int(2)?);
            let ty = match args.iter().filter_map(|a| a.1.clone()).next() {
                Some(DataType::Int8) => DataType::Int8,
                _ => DataType::Int4,
            };
            let mut rows = Vec::new();
            if let (Some(start), Some(stop), Some(step)) = (start, stop, step) {
                if step == 0 {
                    return Err(SqlError::new("22023", "step size cannot equal zero"));
                }
                let mut v = start;
                while (step > 0 && v <= stop) || (step < 0 && v >= stop) {
                    if rows.len() >= MAX_FUNCTION_ROWS {
                        return Err(too_many("generate_series"));
                    }
                    rows.push(vec![Value::Int(v)]);
                    match v.checked_add(step) {
                        Some(next) => v = next,
                        None => break,
                    }
                }
            }
            FunctionRows {
                columns: vec![("generate_series".into(), ty)],
                rows,
            }
        }
        // `unnest(a, b, ...)`: the arrays side by side, the shorter ones
        // NULL past their ends.
        "unnest" => {
            if args.is_empty() {
                return Err(SqlError::new("42883", "function unnest() takes an array"));
            }
            let mut columns = Vec::new();
            let mut arrays = Vec::new();
            for (array, ty) in args {
                let element = match ty {
                    Some(DataType::Array(e)) => (**e).clone(),
                    _ => DataType::Text,
                };
                columns.push(("unnest".to_string(), element));
                arrays.push(match array {
                    Value::Array(items) => items.clone(),
                    Value::Null => Vec::new(),
                    _ => return Err(SqlError::new("42883", "function unnest takes an array")),
                });
            }
            let n = arrays.iter().map(Vec::len).max().unwrap_or(0);
            if n > MAX_FUNCTION_ROWS {
                return Err(too_many("unnest"));
            }
            let rows = (0..n)
                .map(|i| {
                    arrays
                        .iter()
                        .map(|a| a.get(i).cloned().unwrap_or(Value::Null))
                        .collect()
                })
                .collect();
            FunctionRows { columns, rows }
        }
        // No table is partitioned: a relation is its own only ancestor.
        "pg_partition_ancestors" => {
            let [(relation, _)] = args else {
                return Err(SqlError::new(
                    "42883",
                    "function pg_partition_ancestors takes one argument",
                ));
            };
            FunctionRows {
                columns: vec![("relid".into(), DataType::Oid)],
                rows: match relation {
                    Value::Null => Vec::new(),
                    v => vec![vec![v.clone()]],
                },
            }
        }
        // Storage options (`{fillfactor=70}`) as (name, value) rows.
        "pg_options_to_table" => {
            let [(options, _)] = args else {
                return Err(SqlError::new(
                    "42883",
                    "function pg_options_to_table takes one argument",
                ));
            };
            let rows = match options {
                Value::Array(items) => items
                    .iter()
                    .filter_map(Value::to_text)
                    .map(|o| match o.split_once('=') {
                        Some((k, v)) => vec![Value::Text(k.into()), Value::Text(v.into())],
                        None => vec![Value::Text(o), Value::Null],
                    })
                    .collect(),
                _ => Vec::new(),
            };
            FunctionRows {
                columns: vec![
                    ("option_name".into(), DataType::Text),
                    ("option_value".into(), DataType::Text),
                ],
                rows,
            }
        }
        _ => return Ok(None),
    }))
}
