//! jsonb operators and functions, with PostgreSQL 15's results and errors.
//!
//! On a `json` value (its text as given) `->`, `->>`, `#>` and `#>>` answer
//! with the text as written in it; the other operators read it as jsonb.

use aqueduct_values::{format_timestamp, json_path_text, JsonStep, Jsonb, Value};

use crate::SqlError;

/// The jsonb a value is, if it is one: a jsonb, a json (parsed), or a
/// text read as jsonb (an untyped literal the binder could not type).
pub fn jsonb_of(v: &Value) -> Result<Option<Jsonb>, SqlError> {
    Ok(match v {
        Value::Jsonb(j) => Some(j.clone()),
        Value::Json(s) | Value::Text(s) => Some(Jsonb::parse(s)?),
        _ => None,
    })
}

fn need_jsonb(v: &Value, op: &str, other: &Value) -> Result<Jsonb, SqlError> {
    jsonb_of(v)?.ok_or_else(|| crate::expr::operator_error(op, v, other))
}

/// The elements of a `text[]` path or key list; `None` when one is NULL.
fn text_elements(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::Array(items) => items.iter().map(|i| i.to_text()).collect(),
        Value::Text(s) => aqueduct_values::parse_array(s, &aqueduct_values::DataType::Text)
            .ok()
            .and_then(|items| items.iter().map(|i| i.to_text()).collect()),
        _ => None,
    }
}

fn jsonb_value(j: Option<&Jsonb>) -> Value {
    j.map_or(Value::Null, |j| Value::Jsonb(j.clone()))
}

/// `json -> key`, `json #> path`: the member's text exactly as written in
/// the json value (PostgreSQL's json operators keep it).
fn json_step<'s>(key: &'s Value) -> Option<JsonStep<'s>> {
    match key {
        Value::Int(i) => Some(JsonStep::Index(*i)),
        Value::Text(k) => Some(JsonStep::Key(k)),
        _ => None,
    }
}

fn json_text_at(text: &str, path: &[JsonStep<'_>]) -> Value {
    json_path_text(text, path).map_or(Value::Null, |t| Value::Json(t.to_string()))
}

/// `->>` and `#>>` of a json value: a string unescaped, `null` as NULL,
/// anything else its text.
fn json_as_text(v: Value) -> Result<Value, SqlError> {
    Ok(match v {
        Value::Json(t) => match Jsonb::parse(&t) {
            Ok(Jsonb::String(s)) => Value::Text(s),
            Ok(Jsonb::Null) => Value::Null,
            _ => Value::Text(t),
        },
        other => other,
    })
}

/// `->`: an object's member by key, an array's element by index.
pub fn get(doc: &Value, key: &Value) -> Result<Value, SqlError> {
    if let Value::Json(text) = doc {
        let step = json_step(key).ok_or_else(|| crate::expr::operator_error("->", doc, key))?;
        return Ok(json_text_at(text, &[step]));
    }
    let j = need_jsonb(doc, "->", key)?;
    Ok(match key {
        // PostgreSQL holds a top-level scalar as a one-element array, so
        // `'"s"'::jsonb -> 0` (and `-> -1`) is the scalar itself.
        Value::Int(0 | -1) if !matches!(j, Jsonb::Array(_) | Jsonb::Object(_)) => Value::Jsonb(j),
        Value::Int(i) => jsonb_value(j.get_index(*i)),
        Value::Text(k) => jsonb_value(j.get_key(k)),
        other => return Err(crate::expr::operator_error("->", doc, other)),
    })
}

/// `->>`: as `->`, as text.
pub fn get_text(doc: &Value, key: &Value) -> Result<Value, SqlError> {
    if let Value::Json(_) = doc {
        return json_as_text(get(doc, key)?);
    }
    as_text(get(doc, key)?)
}

fn as_text(v: Value) -> Result<Value, SqlError> {
    Ok(match v {
        Value::Jsonb(j) => j.as_text().map_or(Value::Null, Value::Text),
        other => other,
    })
}

/// `#>`: the value at a path.
pub fn get_path(doc: &Value, path: &Value) -> Result<Value, SqlError> {
    let Some(steps) = text_elements(path) else {
        return Ok(Value::Null);
    };
    if let Value::Json(text) = doc {
        let steps: Vec<JsonStep<'_>> = steps.iter().map(|s| JsonStep::Either(s)).collect();
        return Ok(json_text_at(text, &steps));
    }
    let j = need_jsonb(doc, "#>", path)?;
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    Ok(jsonb_value(j.get_path(&steps)))
}

/// `#>>`: as `#>`, as text.
pub fn get_path_text(doc: &Value, path: &Value) -> Result<Value, SqlError> {
    if let Value::Json(_) = doc {
        return json_as_text(get_path(doc, path)?);
    }
    as_text(get_path(doc, path)?)
}

/// `@>` (`reverse`: `<@`).
pub fn contains(a: &Value, b: &Value, reverse: bool) -> Result<Value, SqlError> {
    let op = if reverse { "<@" } else { "@>" };
    let (x, y) = (need_jsonb(a, op, b)?, need_jsonb(b, op, a)?);
    Ok(Value::Bool(if reverse {
        y.contains(&x)
    } else {
        x.contains(&y)
    }))
}

/// `?`, `?|` (`all` false) and `?&` (`all` true).
pub fn has_keys(doc: &Value, keys: &Value, op: &str) -> Result<Value, SqlError> {
    let j = need_jsonb(doc, op, keys)?;
    if op == "?" {
        return match keys {
            Value::Text(k) => Ok(Value::Bool(j.has_key(k))),
            other => Err(crate::expr::operator_error(op, doc, other)),
        };
    }
    let list: Vec<Option<String>> = match keys {
        Value::Array(items) => items.iter().map(Value::to_text).collect(),
        other => return Err(crate::expr::operator_error(op, doc, other)),
    };
    let mut present = list.iter().flatten().map(|k| j.has_key(k));
    Ok(Value::Bool(if op == "?&" {
        present.all(|p| p)
    } else {
        present.any(|p| p)
    }))
}

/// `jsonb || jsonb`: objects merge (the right side's members win), anything
/// else concatenates as arrays (a non-array as a one-element array).
pub fn concat(a: &Value, b: &Value) -> Result<Value, SqlError> {
    let (x, y) = (need_jsonb(a, "||", b)?, need_jsonb(b, "||", a)?);
    Ok(Value::Jsonb(match (x, y) {
        (Jsonb::Object(mut m), Jsonb::Object(n)) => {
            m.extend(n);
            Jsonb::object(m)
        }
        (x, y) => {
            let items = |j: Jsonb| match j {
                Jsonb::Array(a) => a,
                other => vec![other],
            };
            let mut all = items(x);
            all.extend(items(y));
            Jsonb::Array(all)
        }
    }))
}

fn cannot_delete(what: &str) -> SqlError {
    SqlError::new("22023", format!("cannot delete from {what}"))
}

/// `jsonb - text`, `jsonb - integer`, `jsonb - text[]`.
pub fn delete(doc: &Value, what: &Value) -> Result<Value, SqlError> {
    let j = need_jsonb(doc, "-", what)?;
    let remove_keys = |j: Jsonb, keys: &[String]| -> Result<Jsonb, SqlError> {
        Ok(match j {
            Jsonb::Object(m) => {
                Jsonb::Object(m.into_iter().filter(|(k, _)| !keys.contains(k)).collect())
            }
            Jsonb::Array(a) => Jsonb::Array(
                a.into_iter()
                    .filter(|e| !matches!(e, Jsonb::String(s) if keys.contains(s)))
                    .collect(),
            ),
            _ => return Err(cannot_delete("scalar")),
        })
    };
    Ok(Value::Jsonb(match what {
        Value::Text(k) => remove_keys(j, std::slice::from_ref(k))?,
        Value::Array(items) => {
            let keys: Vec<String> = items.iter().filter_map(Value::to_text).collect();
            remove_keys(j, &keys)?
        }
        Value::Int(i) => match j {
            Jsonb::Array(mut a) => {
                let at = if *i < 0 { a.len() as i64 + i } else { *i };
                if let Ok(at) = usize::try_from(at) {
                    if at < a.len() {
                        a.remove(at);
                    }
                }
                Jsonb::Array(a)
            }
            Jsonb::Object(_) => {
                return Err(SqlError::new(
                    "22023",
                    "cannot delete from object using integer index",
                ))
            }
            _ => return Err(cannot_delete("scalar")),
        },
        other => return Err(crate::expr::operator_error("-", doc, other)),
    }))
}

/// `to_jsonb`: a SQL value as jsonb, as PostgreSQL converts it (numbers as
/// numbers, dates and timestamps as ISO 8601 strings, arrays as arrays).
pub fn to_jsonb(v: &Value) -> Result<Jsonb, SqlError> {
    Ok(match v {
        Value::Null => Jsonb::Null,
        Value::Bool(b) => Jsonb::Bool(*b),
        Value::Int(i) => Jsonb::Number(i.to_string()),
        Value::Numeric(d) => Jsonb::number(*d),
        // PostgreSQL reads the float's text as a numeric (1e+20 becomes
        // 100000000000000000000).
        Value::Float(f) if f.is_finite() => Jsonb::Number(aqueduct_values::canonical_number(
            &v.to_text().unwrap_or_default(),
        )?),
        Value::Float(_) => Jsonb::String(v.to_text().unwrap_or_default()),
        Value::Text(s) => Jsonb::String(s.clone()),
        Value::Json(s) => Jsonb::parse(s)?,
        Value::Jsonb(j) => j.clone(),
        Value::Array(items) => Jsonb::Array(items.iter().map(to_jsonb).collect::<Result<_, _>>()?),
        Value::Timestamp(t) => Jsonb::String(format_timestamp(*t).replacen(' ', "T", 1)),
        Value::TimestampTz(t) => Jsonb::String(format!(
            "{}+00:00",
            format_timestamp(*t).replacen(' ', "T", 1)
        )),
        other => Jsonb::String(other.to_text().unwrap_or_default()),
    })
}

/// `jsonb_build_object(k1, v1, ...)`.
pub fn build_object(args: &[Value]) -> Result<Value, SqlError> {
    Ok(Value::Jsonb(Jsonb::object(object_members(args)?)))
}

/// `json_build_object(k1, v1, ...)`: the members in the order given, as
/// PostgreSQL writes a `json` object (`{"a" : 1, "b" : 2}`).
pub fn build_json_object(args: &[Value]) -> Result<Value, SqlError> {
    let members: Vec<String> = object_members(args)?
        .into_iter()
        .map(|(k, v)| format!("{} : {}", Jsonb::String(k), v))
        .collect();
    Ok(Value::Json(format!("{{{}}}", members.join(", "))))
}

/// The members `(k1, v1, ...)` make, keys as text.
fn object_members(args: &[Value]) -> Result<Vec<(String, Jsonb)>, SqlError> {
    if !args.len().is_multiple_of(2) {
        return Err(SqlError::new(
            "22023",
            "argument list must have even number of elements",
        )
        .with_hint(
            "The arguments of jsonb_build_object() must consist of alternating keys and values.",
        ));
    }
    let mut members = Vec::with_capacity(args.len() / 2);
    for (i, pair) in args.chunks(2).enumerate() {
        let key = match &pair[0] {
            Value::Null => {
                return Err(SqlError::new(
                    "22023",
                    format!("argument {}: key must not be null", 2 * i + 1),
                ))
            }
            Value::Bool(b) => if *b { "true" } else { "false" }.to_string(),
            k => match to_jsonb(k)? {
                Jsonb::String(s) => s,
                Jsonb::Number(n) => n,
                _ => {
                    return Err(SqlError::new(
                        "22023",
                        "key value must be scalar, not array, composite, or json",
                    ))
                }
            },
        };
        members.push((key, to_jsonb(&pair[1])?));
    }
    Ok(members)
}

/// `jsonb_build_array(...)`.
pub fn build_array(args: &[Value]) -> Result<Value, SqlError> {
    Ok(Value::Jsonb(Jsonb::Array(
        args.iter().map(to_jsonb).collect::<Result<_, _>>()?,
    )))
}

/// `jsonb_typeof`.
pub fn type_of(doc: &Value) -> Result<Value, SqlError> {
    let j = need_jsonb(doc, "jsonb_typeof", doc)?;
    Ok(Value::Text(j.type_name().into()))
}

/// `jsonb_array_length`.
pub fn array_length(doc: &Value) -> Result<Value, SqlError> {
    match need_jsonb(doc, "jsonb_array_length", doc)? {
        Jsonb::Array(a) => Ok(Value::Int(a.len() as i64)),
        Jsonb::Object(_) => Err(SqlError::new(
            "22023",
            "cannot get array length of a non-array",
        )),
        _ => Err(SqlError::new(
            "22023",
            "cannot get array length of a scalar",
        )),
    }
}

/// `jsonb_set(target, path, new [, create_if_missing])`.
pub fn set(target: &Value, path: &Value, new: &Value, create: bool) -> Result<Value, SqlError> {
    let j = need_jsonb(target, "jsonb_set", target)?;
    let new = need_jsonb(new, "jsonb_set", new)?;
    let Some(steps) = text_elements(path) else {
        return Err(SqlError::new("22004", "path element at position 1 is null"));
    };
    if !matches!(j, Jsonb::Array(_) | Jsonb::Object(_)) {
        return Err(SqlError::new("22023", "cannot set path in scalar"));
    }
    if steps.is_empty() {
        return Ok(Value::Jsonb(j));
    }
    Ok(Value::Jsonb(set_at(j, &steps, 0, new, create)?))
}

fn set_at(
    at: Jsonb,
    steps: &[String],
    level: usize,
    new: Jsonb,
    create: bool,
) -> Result<Jsonb, SqlError> {
    let last = level + 1 == steps.len();
    let step = &steps[level];
    Ok(match at {
        Jsonb::Object(mut m) => {
            match m.iter().position(|(k, _)| k == step) {
                Some(i) => {
                    let old = std::mem::replace(&mut m[i].1, Jsonb::Null);
                    m[i].1 = if last {
                        new
                    } else {
                        set_at(old, steps, level + 1, new, create)?
                    };
                }
                None if last && create => {
                    m.push((step.clone(), new));
                    return Ok(Jsonb::object(m));
                }
                None => {}
            }
            Jsonb::Object(m)
        }
        Jsonb::Array(mut a) => {
            let index: i64 = step.trim().parse().map_err(|_| {
                SqlError::new(
                    "22P02",
                    format!(
                        "path element at position {} is not an integer: \"{step}\"",
                        level + 1
                    ),
                )
            })?;
            let len = a.len() as i64;
            let at = if index < 0 { len + index } else { index };
            if (0..len).contains(&at) {
                let at = at as usize;
                let old = std::mem::replace(&mut a[at], Jsonb::Null);
                a[at] = if last {
                    new
                } else {
                    set_at(old, steps, level + 1, new, create)?
                };
            } else if last && create {
                if at < 0 {
                    a.insert(0, new);
                } else {
                    a.push(new);
                }
            }
            Jsonb::Array(a)
        }
        scalar => scalar,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(s: &str) -> Value {
        Value::Jsonb(Jsonb::parse(s).unwrap())
    }

    fn t(s: &str) -> Value {
        Value::Text(s.into())
    }

    fn shown(v: Value) -> String {
        v.to_text().unwrap_or_else(|| "NULL".into())
    }

    fn path(steps: &[&str]) -> Value {
        Value::Array(steps.iter().map(|s| t(s)).collect())
    }

    #[test]
    fn getters_follow_postgres() {
        let doc = j(r#"{"name": "ann", "tags": ["a", "b"], "n": {"x": 1}}"#);
        assert_eq!(shown(get(&doc, &t("name")).unwrap()), "\"ann\"");
        assert_eq!(shown(get_text(&doc, &t("name")).unwrap()), "ann");
        assert_eq!(shown(get_text(&doc, &t("n")).unwrap()), r#"{"x": 1}"#);
        assert!(get(&doc, &t("none")).unwrap().is_null());
        let tags = get(&doc, &t("tags")).unwrap();
        assert_eq!(shown(get(&tags, &Value::Int(-1)).unwrap()), "\"b\"");
        assert!(get(&tags, &Value::Int(5)).unwrap().is_null());
        assert!(get(&doc, &Value::Int(0)).unwrap().is_null());
        assert_eq!(shown(get_path(&doc, &path(&["n", "x"])).unwrap()), "1");
        assert_eq!(
            shown(get_path_text(&doc, &path(&["tags", "0"])).unwrap()),
            "a"
        );
        assert!(get_text(&j(r#"{"a": null}"#), &t("a")).unwrap().is_null());
        assert_eq!(get(&Value::Int(1), &t("a")).unwrap_err().code, "42883");
    }

    #[test]
    fn containment_keys_concat_and_delete() {
        let doc = j(r#"{"a": 1, "b": [1, 2]}"#);
        assert_eq!(
            contains(&doc, &j(r#"{"b": [2]}"#), false).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            contains(&j(r#"{"b": [2]}"#), &doc, true).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(has_keys(&doc, &t("a"), "?").unwrap(), Value::Bool(true));
        let keys = path(&["a", "z"]);
        assert_eq!(has_keys(&doc, &keys, "?|").unwrap(), Value::Bool(true));
        assert_eq!(has_keys(&doc, &keys, "?&").unwrap(), Value::Bool(false));
        assert_eq!(
            shown(concat(&doc, &j(r#"{"a": 2, "c": 3}"#)).unwrap()),
            r#"{"a": 2, "b": [1, 2], "c": 3}"#
        );
        assert_eq!(shown(concat(&j("[1]"), &j("2")).unwrap()), "[1, 2]");
        assert_eq!(
            shown(concat(&j(r#"{"a": 1}"#), &j("[2]")).unwrap()),
            r#"[{"a": 1}, 2]"#
        );
        assert_eq!(shown(delete(&doc, &t("a")).unwrap()), r#"{"b": [1, 2]}"#);
        assert_eq!(
            shown(delete(&j(r#"["a", "b", 1]"#), &t("a")).unwrap()),
            r#"["b", 1]"#
        );
        assert_eq!(
            shown(delete(&j("[1, 2, 3]"), &Value::Int(-1)).unwrap()),
            "[1, 2]"
        );
        assert_eq!(shown(delete(&doc, &path(&["a", "b"])).unwrap()), "{}");
        assert_eq!(delete(&doc, &Value::Int(0)).unwrap_err().code, "22023");
        assert_eq!(delete(&j("1"), &t("a")).unwrap_err().code, "22023");
    }

    #[test]
    fn builders_and_set() {
        let o = build_object(&[
            t("b"),
            Value::Int(1),
            t("a"),
            Value::Null,
            t("b"),
            Value::Bool(true),
        ])
        .unwrap();
        assert_eq!(shown(o), r#"{"a": null, "b": true}"#);
        assert_eq!(build_object(&[t("a")]).unwrap_err().code, "22023");
        assert_eq!(
            build_object(&[Value::Null, Value::Int(1)])
                .unwrap_err()
                .code,
            "22023"
        );
        let a = build_array(&[Value::Int(1), t("x"), Value::Timestamp(0), Value::Null]).unwrap();
        assert_eq!(shown(a), r#"[1, "x", "1970-01-01T00:00:00", null]"#);
        assert_eq!(shown(type_of(&j("[]")).unwrap()), "array");
        assert_eq!(array_length(&j("[1, 2]")).unwrap(), Value::Int(2));
        assert_eq!(array_length(&j("{}")).unwrap_err().code, "22023");
        let doc = j(r#"{"a": {"b": [1, 2]}}"#);
        assert_eq!(
            shown(set(&doc, &path(&["a", "b", "0"]), &j("9"), true).unwrap()),
            r#"{"a": {"b": [9, 2]}}"#
        );
        assert_eq!(
            shown(set(&doc, &path(&["a", "c"]), &j("true"), true).unwrap()),
            r#"{"a": {"b": [1, 2], "c": true}}"#
        );
        assert_eq!(
            shown(set(&doc, &path(&["a", "c"]), &j("true"), false).unwrap()),
            r#"{"a": {"b": [1, 2]}}"#
        );
        assert_eq!(
            shown(set(&doc, &path(&["a", "b", "9"]), &j("3"), true).unwrap()),
            r#"{"a": {"b": [1, 2, 3]}}"#
        );
        assert_eq!(
            set(&doc, &path(&["a", "b", "x"]), &j("3"), true)
                .unwrap_err()
                .code,
            "22P02"
        );
    }
}
