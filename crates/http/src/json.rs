//! SQL values to and from JSON for `/v1/sql`.
//!
//! Results: integers, floats and booleans as JSON numbers and booleans,
//! `numeric` as a string (no precision lost), json/jsonb as nested JSON,
//! everything else as its PostgreSQL text form.

use aqueduct_sql::Outcome;
use aqueduct_values::{DataType, Value};
use serde_json::{json, Value as Json};

/// A JSON parameter as a SQL value; the statement's inferred types convert it further.
pub fn param(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Text(s.clone()),
        other => Value::Json(other.to_string()),
    }
}

/// A SQL value as JSON (the change feed's form, shared).
pub fn value(v: &Value) -> Json {
    aqueduct_feed::value_json(v)
}

pub fn outcome(o: &Outcome, lsn: u64) -> Json {
    match o {
        Outcome::Rows { columns, rows, tag } => json!({
            "columns": columns
                .iter()
                .map(|c| json!({ "name": c.name, "type": c.ty.portable().to_string() }))
                .collect::<Vec<_>>(),
            "rows": rows
                .iter()
                .map(|r| {
                    r.iter()
                        .zip(columns)
                        .map(|(v, c)| match (v, &c.ty) {
                            // A real is held as the nearest double; as a JSON
                            // number it keeps the real's own digits (0.1).
                            (Value::Float(f), DataType::Float4) if f.is_finite() => {
                                let shortest = (*f as f32).to_string();
                                json!(shortest.parse::<f64>().unwrap_or(*f))
                            }
                            _ => value(v),
                        })
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>(),
            "command": tag,
            "lsn": lsn,
        }),
        Outcome::Command { tag } => json!({ "command": tag, "lsn": lsn }),
        Outcome::Empty => json!({ "command": "", "lsn": lsn }),
        // `/v1/sql` refuses COPY before it gets here (`lib.rs`).
        Outcome::CopyIn { .. } => json!({ "command": "COPY", "lsn": lsn }),
        Outcome::CopyOut { tag, .. } => json!({ "command": tag, "lsn": lsn }),
    }
}
