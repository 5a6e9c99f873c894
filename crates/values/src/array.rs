//! One-dimensional arrays: PostgreSQL's text form (`{a,b,"c d",NULL}`)
//! both ways.
//!
//! Output quotes an element when it is empty, is `NULL` in any case, or
//! holds a brace, a comma, a double quote, a backslash or white space;
//! inside quotes `"` and `\` are escaped with a backslash. Input takes the
//! same form, unquoted elements trimmed of surrounding white space, and an
//! unquoted `NULL` (any case) as NULL. Arrays of arrays are not supported.

use crate::{DataType, Value, ValueError};

/// Most elements in one array.
pub const MAX_ARRAY_ELEMENTS: usize = 1 << 20;

fn malformed(input: &str, detail: &str) -> ValueError {
    ValueError::MalformedArray {
        input: input.chars().take(100).collect(),
        detail: detail.to_string(),
    }
}

fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.eq_ignore_ascii_case("null")
        || s.chars()
            .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || is_array_space(c))
}

/// White space as PostgreSQL's array code sees it (`isspace` in C).
fn is_array_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}')
}

/// The text form of an array whose elements print as `element`.
pub fn format_array(items: &[Value], element: impl Fn(&Value) -> Option<String>) -> String {
    let mut out = String::from("{");
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match element(v) {
            None => out.push_str("NULL"),
            Some(s) if needs_quotes(&s) => {
                out.push('"');
                for c in s.chars() {
                    if c == '"' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
            }
            Some(s) => out.push_str(&s),
        }
    }
    out.push('}');
    out
}

/// Parses the text form of a one-dimensional array of `element` values.
pub fn parse_array(input: &str, element: &DataType) -> Result<Vec<Value>, ValueError> {
    let s = input.trim_matches(is_array_space);
    let Some(body) = s.strip_prefix('{') else {
        return Err(malformed(
            input,
            "Array value must start with \"{\" or dimension information.",
        ));
    };
    let chars: Vec<char> = body.chars().collect();
    let mut items = Vec::new();
    let mut i = 0;
    let skip_space = |i: &mut usize| {
        while *i < chars.len() && is_array_space(chars[*i]) {
            *i += 1;
        }
    };
    skip_space(&mut i);
    if chars.get(i) == Some(&'}') {
        i += 1;
        skip_space(&mut i);
        return if i == chars.len() {
            Ok(items)
        } else {
            Err(malformed(input, "Junk after closing right brace."))
        };
    }
    loop {
        skip_space(&mut i);
        let (text, quoted) = match chars.get(i) {
            Some('"') => {
                i += 1;
                let mut t = String::new();
                loop {
                    match chars.get(i) {
                        None => return Err(malformed(input, "Unexpected end of input.")),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let c = *chars
                                .get(i + 1)
                                .ok_or_else(|| malformed(input, "Unexpected end of input."))?;
                            t.push(c);
                            i += 2;
                        }
                        Some(c) => {
                            t.push(*c);
                            i += 1;
                        }
                    }
                }
                (t, true)
            }
            Some('{') => {
                return Err(ValueError::Unsupported(
                    "multidimensional arrays".to_string(),
                ))
            }
            Some(_) => {
                let mut t = String::new();
                while let Some(&c) = chars.get(i) {
                    match c {
                        ',' | '}' => break,
                        '{' | '"' => {
                            return Err(malformed(input, &format!("Unexpected \"{c}\" character.")))
                        }
                        '\\' => {
                            let n = *chars
                                .get(i + 1)
                                .ok_or_else(|| malformed(input, "Unexpected end of input."))?;
                            t.push(n);
                            i += 2;
                            continue;
                        }
                        c => t.push(c),
                    }
                    i += 1;
                }
                let t = t.trim_end_matches(is_array_space).to_string();
                if t.is_empty() {
                    return Err(malformed(input, "Unexpected \",\" character."));
                }
                (t, false)
            }
            None => return Err(malformed(input, "Unexpected end of input.")),
        };
        items.push(if !quoted && text.eq_ignore_ascii_case("null") {
            Value::Null
        } else {
            Value::Text(text).coerce(element)?
        });
        if items.len() > MAX_ARRAY_ELEMENTS {
            return Err(ValueError::Range(format!(
                "array size exceeds the maximum allowed ({MAX_ARRAY_ELEMENTS})"
            )));
        }
        skip_space(&mut i);
        match chars.get(i) {
            Some(',') => i += 1,
            Some('}') => {
                i += 1;
                skip_space(&mut i);
                if i != chars.len() {
                    return Err(malformed(input, "Junk after closing right brace."));
                }
                return Ok(items);
            }
            Some(c) => return Err(malformed(input, &format!("Unexpected \"{c}\" character."))),
            None => return Err(malformed(input, "Unexpected end of input.")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_array(s: &str) -> Vec<Value> {
        parse_array(s, &DataType::Text).unwrap()
    }

    #[test]
    fn text_forms_round_trip_with_postgres_quoting() {
        // SELECT '{a,"b c",NULL,"NULL","",x\"y,"{}"}'::text[] in PostgreSQL 15.
        let v = text_array(r#"{a,"b c",NULL,"NULL","",x\"y,"{}"}"#);
        assert_eq!(v.len(), 7);
        assert!(v[2].is_null());
        let shown = format_array(&v, Value::to_text);
        assert_eq!(shown, r#"{a,"b c",NULL,"NULL","","x\"y","{}"}"#);
        assert_eq!(format_array(&text_array(&shown), Value::to_text), shown);
        assert_eq!(
            format_array(&text_array("{ a , b }"), Value::to_text),
            "{a,b}"
        );
        assert_eq!(format_array(&text_array(" { } "), Value::to_text), "{}");
        let ints = parse_array("{1, 2,NULL}", &DataType::Int4).unwrap();
        assert_eq!(ints, vec![Value::Int(1), Value::Int(2), Value::Null]);
        assert_eq!(format_array(&ints, Value::to_text), "{1,2,NULL}");
    }

    #[test]
    fn malformed_literals_are_refused() {
        for bad in ["a,b", "{a,b", "{a,,b}", "{a}x", "{\"a}", "{,}", "{a\"b}"] {
            let e = parse_array(bad, &DataType::Text).unwrap_err();
            assert_eq!(e.sqlstate(), "22P02", "{bad}");
            assert!(
                e.to_string().starts_with("malformed array literal"),
                "{bad}"
            );
        }
        let e = parse_array("{1,x}", &DataType::Int4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid input syntax for type integer: \"x\""
        );
    }
}
