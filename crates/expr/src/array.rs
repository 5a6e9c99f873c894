//! Array operators and functions, as PostgreSQL 15 evaluates them on
//! one-dimensional arrays.

use std::cmp::Ordering;

use aqueduct_values::{Value, MAX_ARRAY_ELEMENTS};

use crate::expr::{binary_values, BinOp};
use crate::SqlError;

fn too_many() -> SqlError {
    SqlError::new(
        "54000",
        format!("array size exceeds the maximum allowed ({MAX_ARRAY_ELEMENTS})"),
    )
}

/// `||` with an array on either side: concatenation, or an element
/// appended or prepended. A NULL array is an empty one here.
pub fn concat(a: Value, b: Value) -> Result<Value, SqlError> {
    let items = match (a, b) {
        (Value::Array(mut x), Value::Array(y)) => {
            x.extend(y);
            x
        }
        (Value::Array(x), Value::Null) | (Value::Null, Value::Array(x)) => x,
        (Value::Array(mut x), e) => {
            x.push(e);
            x
        }
        (e, Value::Array(mut y)) => {
            y.insert(0, e);
            y
        }
        (a, b) => return Err(crate::expr::operator_error("||", &a, &b)),
    };
    if items.len() > MAX_ARRAY_ELEMENTS {
        return Err(too_many());
    }
    Ok(Value::Array(items))
}

/// `array_append` (`array_prepend` with `front`): a NULL array is an
/// empty one, a NULL element is an element.
pub fn append(array: Value, element: Value, front: bool) -> Result<Value, SqlError> {
    let mut items = match array {
        Value::Null => Vec::new(),
        Value::Array(items) => items,
        other => return Err(crate::expr::operator_error("||", &other, &element)),
    };
    if items.len() >= MAX_ARRAY_ELEMENTS {
        return Err(too_many());
    }
    if front {
        items.insert(0, element);
    } else {
        items.push(element);
    }
    Ok(Value::Array(items))
}

fn elements<'v>(v: &'v Value, op: &str, other: &Value) -> Result<&'v [Value], SqlError> {
    match v {
        Value::Array(items) => Ok(items),
        _ => Err(crate::expr::operator_error(op, v, other)),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    a.sql_cmp(b) == Some(Ordering::Equal)
}

/// `a @> b`: every element of `b` is in `a` (a NULL element is in nothing).
pub fn contains(a: &Value, b: &Value) -> Result<Value, SqlError> {
    let (x, y) = (elements(a, "@>", b)?, elements(b, "@>", a)?);
    Ok(Value::Bool(y.iter().all(|e| x.iter().any(|f| equal(f, e)))))
}

/// `a && b`: an element in both.
pub fn overlap(a: &Value, b: &Value) -> Result<Value, SqlError> {
    let (x, y) = (elements(a, "&&", b)?, elements(b, "&&", a)?);
    Ok(Value::Bool(y.iter().any(|e| x.iter().any(|f| equal(f, e)))))
}

/// `a[i]`: 1-based; NULL outside the array.
pub fn subscript(a: &Value, i: &Value) -> Result<Value, SqlError> {
    let items = elements(a, "[]", i)?;
    Ok(match i {
        Value::Int(i) => usize::try_from(*i - 1)
            .ok()
            .and_then(|i| items.get(i))
            .cloned()
            .unwrap_or(Value::Null),
        _ => {
            return Err(SqlError::new(
                "42804",
                "array subscript must have type integer",
            ))
        }
    })
}

/// `x op ANY (a)` (`all` false) or `x op ALL (a)`, with three-valued logic:
/// ANY is true when one comparison is, ALL false when one is; otherwise a
/// NULL comparison makes the answer NULL. Over an empty array ANY is false
/// and ALL true.
pub fn any_all(op: BinOp, x: &Value, a: &Value, all: bool) -> Result<Value, SqlError> {
    if a.is_null() {
        return Ok(Value::Null);
    }
    let items = match a {
        Value::Array(items) => items,
        other => {
            return Err(SqlError::new(
                "42809",
                format!(
                    "op ANY/ALL (array) requires array on right side, not {}",
                    other.kind_name()
                ),
            ))
        }
    };
    let mut saw_null = false;
    for e in items {
        match binary_values(op, x.clone(), e.clone())? {
            Value::Bool(b) if b != all => return Ok(Value::Bool(b)),
            Value::Bool(_) => {}
            _ => saw_null = true,
        }
    }
    Ok(if saw_null {
        Value::Null
    } else {
        Value::Bool(all)
    })
}

/// `cardinality(a)`.
pub fn cardinality(a: &Value) -> Result<Value, SqlError> {
    Ok(Value::Int(elements(a, "cardinality", a)?.len() as i64))
}

/// `array_length(a, dim)`: NULL for an empty array or another dimension.
pub fn length(a: &Value, dim: &Value) -> Result<Value, SqlError> {
    let items = elements(a, "array_length", a)?;
    Ok(match dim {
        Value::Int(1) if !items.is_empty() => Value::Int(items.len() as i64),
        _ => Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[Option<i64>]) -> Value {
        Value::Array(
            v.iter()
                .map(|i| i.map_or(Value::Null, Value::Int))
                .collect(),
        )
    }

    #[test]
    fn operators_follow_postgres() {
        let a = ints(&[Some(1), Some(2), None]);
        assert_eq!(
            concat(a.clone(), ints(&[Some(3)]))
                .unwrap()
                .to_text()
                .unwrap(),
            "{1,2,NULL,3}"
        );
        assert_eq!(
            concat(Value::Int(0), ints(&[Some(1)]))
                .unwrap()
                .to_text()
                .unwrap(),
            "{0,1}"
        );
        assert_eq!(concat(a.clone(), Value::Null).unwrap(), a);
        assert_eq!(
            contains(&a, &ints(&[Some(2), Some(1)])).unwrap(),
            Value::Bool(true)
        );
        // A NULL element is contained in nothing.
        assert_eq!(contains(&a, &ints(&[None])).unwrap(), Value::Bool(false));
        assert_eq!(contains(&a, &ints(&[])).unwrap(), Value::Bool(true));
        assert_eq!(
            overlap(&a, &ints(&[Some(5), Some(2)])).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(overlap(&a, &ints(&[None])).unwrap(), Value::Bool(false));
        assert_eq!(subscript(&a, &Value::Int(1)).unwrap(), Value::Int(1));
        assert!(subscript(&a, &Value::Int(0)).unwrap().is_null());
        assert!(subscript(&a, &Value::Int(9)).unwrap().is_null());
        assert_eq!(cardinality(&a).unwrap(), Value::Int(3));
        assert_eq!(length(&a, &Value::Int(1)).unwrap(), Value::Int(3));
        assert!(length(&ints(&[]), &Value::Int(1)).unwrap().is_null());
        assert!(length(&a, &Value::Int(2)).unwrap().is_null());
    }

    #[test]
    fn any_and_all_use_three_valued_logic() {
        let a = ints(&[Some(1), None]);
        let one = Value::Int(1);
        let two = Value::Int(2);
        assert_eq!(
            any_all(BinOp::Eq, &one, &a, false).unwrap(),
            Value::Bool(true)
        );
        assert!(any_all(BinOp::Eq, &two, &a, false).unwrap().is_null());
        assert_eq!(
            any_all(BinOp::NotEq, &one, &a, true).unwrap(),
            Value::Bool(false)
        );
        assert!(any_all(BinOp::NotEq, &two, &a, true).unwrap().is_null());
        assert_eq!(
            any_all(BinOp::Eq, &one, &ints(&[]), false).unwrap(),
            Value::Bool(false)
        );
        assert_eq!(
            any_all(BinOp::Eq, &one, &ints(&[]), true).unwrap(),
            Value::Bool(true)
        );
        assert!(any_all(BinOp::Eq, &one, &Value::Null, false)
            .unwrap()
            .is_null());
        assert_eq!(
            any_all(BinOp::Eq, &one, &one, false).unwrap_err().code,
            "42809"
        );
    }
}
