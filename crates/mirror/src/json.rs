//! The JSON of `/v1/snapshot` and `/v1/changes` back into typed values:
//! integers, floats and booleans come as JSON, json/jsonb as nested JSON,
//! everything else as PostgreSQL text, converted with the column's type.

use aqueduct_tables::{parse_type, Key, Row};
use aqueduct_values::{DataType, Value};
use serde_json::{json, Value as Json};

use crate::{Column, Error, Position, TableInfo};

fn bad(what: impl Into<String>) -> Error {
    Error::Protocol(what.into())
}

/// One JSON value as a value of type `ty`.
pub(crate) fn value(j: &Json, ty: &DataType) -> Result<Value, Error> {
    let v = match (j, ty) {
        (Json::Null, _) => return Ok(Value::Null),
        (_, DataType::Json | DataType::Jsonb) => Value::Json(j.to_string()),
        (Json::Array(items), DataType::Array(element)) => {
            return Ok(Value::Array(
                items
                    .iter()
                    .map(|i| value(i, element))
                    .collect::<Result<_, _>>()?,
            ))
        }
        (Json::Bool(b), _) => Value::Bool(*b),
        (Json::Number(n), _) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(
                n.as_f64()
                    .ok_or_else(|| bad(format!("number {n} out of range")))?,
            ),
        },
        (Json::String(s), _) => Value::Text(s.clone()),
        (other, _) => return Err(bad(format!("{other} is not a value of type {ty}"))),
    };
    v.coerce(ty).map_err(|e| bad(format!("{j} as {ty}: {e}")))
}

/// The types of a table's key values.
fn key_types(t: &TableInfo) -> Vec<DataType> {
    if t.primary_key.is_empty() {
        vec![DataType::Int8]
    } else {
        t.primary_key
            .iter()
            .map(|&i| t.columns[i].ty.clone())
            .collect()
    }
}

pub(crate) fn key(j: &Json, t: &TableInfo) -> Result<Key, Error> {
    let arr = j
        .as_array()
        .ok_or_else(|| bad(format!("key of {} is not an array", t.name)))?;
    let types = key_types(t);
    if arr.len() != types.len() {
        return Err(bad(format!(
            "key of {} has {} values, not {}",
            t.name,
            arr.len(),
            types.len()
        )));
    }
    arr.iter().zip(&types).map(|(v, ty)| value(v, ty)).collect()
}

/// A row object `{column: value}` in column order.
pub(crate) fn row(j: &Json, t: &TableInfo) -> Result<Row, Error> {
    let obj = j
        .as_object()
        .ok_or_else(|| bad(format!("row of {} is not an object", t.name)))?;
    t.columns
        .iter()
        .map(|c| match obj.get(&c.name) {
            Some(v) => value(v, &c.ty),
            None => Err(bad(format!("row of {} lacks column {}", t.name, c.name))),
        })
        .collect()
}

pub(crate) fn opt_row(j: &Json, t: &TableInfo) -> Result<Option<Row>, Error> {
    if j.is_null() {
        Ok(None)
    } else {
        row(j, t).map(Some)
    }
}

/// A table of the snapshot header (or of a saved position):
/// `{"name", "columns": [{"name", "type"}], "primary_key", ["id"]}`.
pub(crate) fn table_info(j: &Json) -> Result<TableInfo, Error> {
    let name = j["name"]
        .as_str()
        .ok_or_else(|| bad("a table without a name"))?
        .to_string();
    let columns = j["columns"]
        .as_array()
        .ok_or_else(|| bad(format!("table {name} without columns")))?
        .iter()
        .map(|c| {
            let cname = c["name"].as_str().ok_or_else(|| bad("a nameless column"))?;
            let ty = c["type"]
                .as_str()
                .ok_or_else(|| bad(format!("column {cname} without a type")))?;
            Ok(Column {
                name: cname.to_string(),
                ty: parse_type(ty).map_err(bad)?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let primary_key = j["primary_key"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p.as_u64()).map(|p| p as usize))
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    if primary_key.iter().any(|&p| p >= columns.len()) {
        return Err(bad(format!("table {name}: primary key out of range")));
    }
    Ok(TableInfo {
        name,
        columns,
        primary_key,
        id: j["id"].as_u64(),
    })
}

pub(crate) fn table_json(t: &TableInfo) -> Json {
    json!({
        "name": t.name,
        "id": t.id,
        "columns": t.columns.iter().map(|c| json!({"name": c.name, "type": c.ty.to_string()})).collect::<Vec<_>>(),
        "primary_key": t.primary_key,
    })
}

pub(crate) fn position_to_json(p: &Position) -> Json {
    json!({
        "lsn": p.lsn,
        "tables": p.tables.iter().map(table_json).collect::<Vec<_>>(),
    })
}

pub(crate) fn position_from_json(j: &Json) -> Result<Position, Error> {
    Ok(Position {
        lsn: j["lsn"]
            .as_u64()
            .ok_or_else(|| bad("a position without an lsn"))?,
        tables: j["tables"]
            .as_array()
            .ok_or_else(|| bad("a position without tables"))?
            .iter()
            .map(table_info)
            .collect::<Result<_, _>>()?,
    })
}
