//! `jsonb`: JSON held as a tree in PostgreSQL's canonical form.
//!
//! Object keys are unique (the last of duplicates wins) and kept in
//! PostgreSQL's storage order: shorter keys first, keys of one length
//! bytewise. Numbers are `numeric` and print as `numeric` does (`1e2` is
//! `100`, `1.50` stays `1.50`). The text form is what PostgreSQL prints:
//! `{"a": [1, 2], "b": null}`.
//!
//! Order and equality are PostgreSQL's jsonb btree order: object > array >
//! boolean > number > string > null; containers with more members are
//! greater, equal-sized ones compare member by member (objects key, value,
//! key, value ... in storage order); numbers compare as numbers.

use std::cmp::Ordering;
use std::fmt::Write;
use std::hash::{Hash, Hasher};

use rust_decimal::Decimal;

use crate::ValueError;

/// Deepest nesting of arrays and objects accepted in jsonb input; deeper
/// input is refused (54001) so that parsing, printing, comparing and
/// dropping a value never recurse deeper than this.
pub const MAX_JSON_DEPTH: usize = 128;

/// One jsonb value.
#[derive(Clone, Debug)]
pub enum Jsonb {
    Null,
    Bool(bool),
    /// The number in `numeric`'s text form.
    Number(String),
    String(String),
    Array(Vec<Jsonb>),
    /// Members in storage order, keys unique.
    Object(Vec<(String, Jsonb)>),
}

/// PostgreSQL's order of object keys: shorter first, then bytewise.
pub fn key_order(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

fn syntax(input: &str) -> ValueError {
    ValueError::Syntax {
        ty: "json".into(),
        input: input.chars().take(100).collect(),
    }
}

impl Jsonb {
    /// Parses JSON text into canonical form (22P02 on bad syntax).
    pub fn parse(text: &str) -> Result<Jsonb, ValueError> {
        Jsonb::parse_with(text, false)
    }

    /// Checks that `text` is JSON, as the `json` type does on input: its
    /// syntax only, so `\u0000` and numbers beyond `numeric` pass.
    pub fn validate_json(text: &str) -> Result<(), ValueError> {
        Jsonb::parse_with(text, true).map(|_| ())
    }

    fn parse_with(text: &str, syntax_only: bool) -> Result<Jsonb, ValueError> {
        let mut p = Parser {
            s: text.as_bytes(),
            pos: 0,
            input: text,
            syntax_only,
        };
        p.skip_ws();
        let v = p.value(0)?;
        p.skip_ws();
        if p.pos != p.s.len() {
            return Err(syntax(text));
        }
        Ok(v)
    }

    /// An object from members in any order: keys sorted, the last of
    /// duplicates kept.
    pub fn object(members: Vec<(String, Jsonb)>) -> Jsonb {
        let mut out: Vec<(String, Jsonb)> = Vec::with_capacity(members.len());
        for (k, v) in members {
            match out.binary_search_by(|(x, _)| key_order(x, &k)) {
                Ok(i) => out[i].1 = v,
                Err(i) => out.insert(i, (k, v)),
            }
        }
        Jsonb::Object(out)
    }

    /// A number from a `numeric`.
    pub fn number(d: Decimal) -> Jsonb {
        Jsonb::Number(d.to_string())
    }

    /// Bytes held, about the length of the text form (for memory accounting
    /// and the value size limit), without printing it.
    pub fn size(&self) -> usize {
        match self {
            Jsonb::Null | Jsonb::Bool(_) => 5,
            Jsonb::Number(n) => n.len(),
            Jsonb::String(s) => s.len() + 2,
            Jsonb::Array(a) => 2 + a.iter().map(|e| e.size() + 2).sum::<usize>(),
            Jsonb::Object(m) => 2 + m.iter().map(|(k, v)| k.len() + 6 + v.size()).sum::<usize>(),
        }
    }

    /// `jsonb_typeof`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Jsonb::Null => "null",
            Jsonb::Bool(_) => "boolean",
            Jsonb::Number(_) => "number",
            Jsonb::String(_) => "string",
            Jsonb::Array(_) => "array",
            Jsonb::Object(_) => "object",
        }
    }

    /// The member `key` of an object.
    pub fn get_key(&self, key: &str) -> Option<&Jsonb> {
        match self {
            Jsonb::Object(m) => m
                .binary_search_by(|(k, _)| key_order(k, key))
                .ok()
                .map(|i| &m[i].1),
            _ => None,
        }
    }

    /// The element `i` of an array; a negative index counts from the end.
    pub fn get_index(&self, i: i64) -> Option<&Jsonb> {
        match self {
            Jsonb::Array(a) => {
                let i = if i < 0 { a.len() as i64 + i } else { i };
                usize::try_from(i).ok().and_then(|i| a.get(i))
            }
            _ => None,
        }
    }

    /// The value at a path of keys or indexes (`#>`); an array step that is
    /// not an integer finds nothing.
    pub fn get_path(&self, path: &[&str]) -> Option<&Jsonb> {
        let mut at = self;
        for step in path {
            at = match at {
                Jsonb::Object(_) => at.get_key(step)?,
                Jsonb::Array(_) => at.get_index(step.trim().parse().ok()?)?,
                _ => return None,
            };
        }
        Some(at)
    }

    /// The text `->>` gives: a string's contents unquoted, `null` as SQL
    /// NULL, anything else its jsonb text.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Jsonb::Null => None,
            Jsonb::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// `@>`: whether `self` contains `other`, as PostgreSQL's jsonb
    /// containment (arrays contain elements in any order, objects contain
    /// sub-objects, a top-level array contains a bare scalar).
    pub fn contains(&self, other: &Jsonb) -> bool {
        self.contains_at(other, true)
    }

    fn contains_at(&self, other: &Jsonb, top: bool) -> bool {
        match (self, other) {
            (Jsonb::Object(a), Jsonb::Object(b)) => b.iter().all(|(k, bv)| {
                a.binary_search_by(|(x, _)| key_order(x, k))
                    .is_ok_and(|i| a[i].1.contains_at(bv, false))
            }),
            (Jsonb::Array(a), Jsonb::Array(b)) => b.iter().all(|bv| match bv {
                Jsonb::Array(_) | Jsonb::Object(_) => a.iter().any(|av| av.contains_at(bv, false)),
                scalar => a.iter().any(|av| av == scalar),
            }),
            (Jsonb::Array(a), scalar) if top && !matches!(scalar, Jsonb::Object(_)) => {
                a.iter().any(|av| av == scalar)
            }
            (Jsonb::Array(_) | Jsonb::Object(_), _) | (_, Jsonb::Array(_) | Jsonb::Object(_)) => {
                false
            }
            (a, b) => a == b,
        }
    }

    /// `?`: a key of an object, a string element of an array, or the
    /// string itself.
    pub fn has_key(&self, key: &str) -> bool {
        match self {
            Jsonb::Object(_) => self.get_key(key).is_some(),
            Jsonb::Array(a) => a.iter().any(|e| matches!(e, Jsonb::String(s) if s == key)),
            Jsonb::String(s) => s == key,
            _ => false,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Jsonb::Null => 0,
            Jsonb::String(_) => 1,
            Jsonb::Number(_) => 2,
            Jsonb::Bool(_) => 3,
            Jsonb::Array(_) => 4,
            Jsonb::Object(_) => 5,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Jsonb::Null => out.push_str("null"),
            Jsonb::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Jsonb::Number(n) => out.push_str(n),
            Jsonb::String(s) => write_string(s, out),
            Jsonb::Array(a) => {
                out.push('[');
                for (i, e) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    e.write(out);
                }
                out.push(']');
            }
            Jsonb::Object(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_string(k, out);
                    out.push_str(": ");
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// One step of a path into `json` text: an object's key or an array's
/// index (negative from the end).
pub enum JsonStep<'s> {
    Key(&'s str),
    Index(i64),
    /// A path element that is a key to objects and an index to arrays if it
    /// reads as an integer (`#>`'s `text[]` path).
    Either(&'s str),
}

/// The text of the value at `path` inside `json` text, exactly as written
/// there (what PostgreSQL's `json` operators `->` and `#>` return). `None`
/// when the path leads nowhere. Of duplicate keys the last one counts.
pub fn json_path_text<'t>(text: &'t str, path: &[JsonStep<'_>]) -> Option<&'t str> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        input: text,
        syntax_only: true,
    };
    p.skip_ws();
    for step in path {
        let (start, _) = match (p.s.get(p.pos), step) {
            (Some(b'{'), JsonStep::Key(k) | JsonStep::Either(k)) => {
                let mut found = None;
                p.members(|key, span| {
                    if key == *k {
                        found = Some(span);
                    }
                })?;
                found?
            }
            (Some(b'['), JsonStep::Index(_) | JsonStep::Either(_)) => {
                let index = match step {
                    JsonStep::Index(i) => *i,
                    JsonStep::Either(k) => k.trim().parse().ok()?,
                    JsonStep::Key(_) => return None,
                };
                let mut spans = Vec::new();
                p.elements(|span| spans.push(span))?;
                let at = if index < 0 {
                    spans.len() as i64 + index
                } else {
                    index
                };
                *spans.get(usize::try_from(at).ok()?)?
            }
            _ => return None,
        };
        p.pos = start;
    }
    let start = p.pos;
    p.value(0).ok()?;
    Some(&text[start..p.pos])
}

/// A JSON string literal with PostgreSQL's escapes.
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl std::fmt::Display for Jsonb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        self.write(&mut s);
        f.write_str(&s)
    }
}

/// Compares two canonical numbers exactly, at any size.
fn number_cmp(a: &str, b: &str) -> Ordering {
    let (na, ia, fa) = number_parts(a);
    let (nb, ib, fb) = number_parts(b);
    let magnitude = ia
        .len()
        .cmp(&ib.len())
        .then_with(|| ia.cmp(ib))
        .then_with(|| fa.cmp(fb));
    match (na, nb) {
        (false, false) => magnitude,
        (true, true) => magnitude.reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    }
}

impl Ord for Jsonb {
    fn cmp(&self, other: &Jsonb) -> Ordering {
        match (self, other) {
            (Jsonb::Null, Jsonb::Null) => Ordering::Equal,
            (Jsonb::Bool(a), Jsonb::Bool(b)) => a.cmp(b),
            (Jsonb::Number(a), Jsonb::Number(b)) => number_cmp(a, b),
            (Jsonb::String(a), Jsonb::String(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Jsonb::Array(a), Jsonb::Array(b)) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
            (Jsonb::Object(a), Jsonb::Object(b)) => a.len().cmp(&b.len()).then_with(|| {
                for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                    let o = ka.as_bytes().cmp(kb.as_bytes()).then_with(|| va.cmp(vb));
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            }),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Jsonb {
    fn partial_cmp(&self, other: &Jsonb) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Jsonb {
    fn eq(&self, other: &Jsonb) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Jsonb {}

impl Hash for Jsonb {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Jsonb::Null => {}
            Jsonb::Bool(b) => b.hash(state),
            // Equal numbers written differently (1.0, 1) hash alike.
            Jsonb::Number(n) => number_parts(n).hash(state),
            Jsonb::String(s) => s.hash(state),
            Jsonb::Array(a) => a.hash(state),
            Jsonb::Object(m) => m.hash(state),
        }
    }
}

/// Most digits before the point of a jsonb number (PostgreSQL's numeric
/// limit); more is 22003.
pub const MAX_JSON_NUMBER_DIGITS: i64 = 131_072;
/// Most digits after the point (PostgreSQL's numeric display scale limit).
pub const MAX_JSON_NUMBER_SCALE: i64 = 16_383;

/// The canonical text of a number in JSON's syntax, as PostgreSQL's
/// `numeric` prints it: plain digits, no exponent, as many places after
/// the point as were written less the exponent (`1.50e1` is `15.0`, `1e2`
/// is `100`, `-0` is `0`). Exact at any size.
pub fn canonical_number(text: &str) -> Result<String, ValueError> {
    let overflow = || ValueError::Range("value overflows numeric format".into());
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exp) = match rest.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i64>().map_err(|_| overflow())?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.len() as i64 + exp > MAX_JSON_NUMBER_DIGITS
        || frac.len() as i64 - exp > MAX_JSON_NUMBER_SCALE
        || exp.abs() > MAX_JSON_NUMBER_DIGITS + MAX_JSON_NUMBER_SCALE
    {
        return Err(overflow());
    }
    let digits: String = format!("{int}{frac}");
    let scale = (frac.len() as i64 - exp).max(0) as usize;
    // Position of the point in `digits`.
    let point = int.len() as i64 + exp;
    let (int_part, frac_part) = if point <= 0 {
        (
            String::new(),
            "0".repeat(point.unsigned_abs() as usize) + &digits,
        )
    } else if point as usize >= digits.len() {
        (
            digits.clone() + &"0".repeat(point as usize - digits.len()),
            String::new(),
        )
    } else {
        let (i, f) = digits.split_at(point as usize);
        (i.to_string(), f.to_string())
    };
    let int_part = int_part.trim_start_matches('0');
    let mut frac_part = frac_part;
    frac_part.truncate(scale);
    while frac_part.len() < scale {
        frac_part.push('0');
    }
    let zero = int_part.is_empty() && frac_part.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(int_part.len() + frac_part.len() + 3);
    if negative && !zero {
        out.push('-');
    }
    out.push_str(if int_part.is_empty() { "0" } else { int_part });
    if !frac_part.is_empty() {
        out.push('.');
        out.push_str(&frac_part);
    }
    Ok(out)
}

/// A canonical number split into sign, integer digits and fractional
/// digits without trailing zeros: equal numbers give equal parts.
fn number_parts(n: &str) -> (bool, &str, &str) {
    let (negative, rest) = match n.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, n),
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    (negative && !(int.is_empty() && frac.is_empty()), int, frac)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    input: &'a str,
    /// Checking `json` input: no canonical numbers, `\u0000` allowed.
    syntax_only: bool,
}

impl Parser<'_> {
    fn err(&self) -> ValueError {
        syntax(self.input)
    }

    fn skip_ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.pos) == Some(&b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn word(&mut self, w: &str) -> Result<(), ValueError> {
        if self.s[self.pos..].starts_with(w.as_bytes()) {
            self.pos += w.len();
            Ok(())
        } else {
            Err(self.err())
        }
    }

    fn value(&mut self, depth: usize) -> Result<Jsonb, ValueError> {
        if depth > MAX_JSON_DEPTH {
            return Err(ValueError::TooDeep {
                limit: MAX_JSON_DEPTH,
            });
        }
        match self.s.get(self.pos).copied() {
            Some(b'{') => {
                self.pos += 1;
                let mut members = Vec::new();
                self.skip_ws();
                if !self.eat(b'}') {
                    loop {
                        self.skip_ws();
                        let k = self.string()?;
                        self.skip_ws();
                        if !self.eat(b':') {
                            return Err(self.err());
                        }
                        self.skip_ws();
                        let v = self.value(depth + 1)?;
                        members.push((k, v));
                        self.skip_ws();
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.err());
                        }
                    }
                }
                Ok(Jsonb::object(members))
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if !self.eat(b']') {
                    loop {
                        self.skip_ws();
                        items.push(self.value(depth + 1)?);
                        self.skip_ws();
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.err());
                        }
                    }
                }
                Ok(Jsonb::Array(items))
            }
            Some(b'"') => Ok(Jsonb::String(self.string()?)),
            Some(b't') => self.word("true").map(|_| Jsonb::Bool(true)),
            Some(b'f') => self.word("false").map(|_| Jsonb::Bool(false)),
            Some(b'n') => self.word("null").map(|_| Jsonb::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.err()),
        }
    }

    /// JSON's number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<Jsonb, ValueError> {
        let start = self.pos;
        let digits = |p: &mut Parser<'_>| {
            let from = p.pos;
            while p.s.get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
            p.pos - from
        };
        self.eat(b'-');
        let int_start = self.pos;
        let n = digits(self);
        if n == 0 || (n > 1 && self.s[int_start] == b'0') {
            return Err(self.err());
        }
        if self.eat(b'.') && digits(self) == 0 {
            return Err(self.err());
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if digits(self) == 0 {
                return Err(self.err());
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).map_err(|_| self.err())?;
        if self.syntax_only {
            return Ok(Jsonb::Number(text.to_string()));
        }
        Ok(Jsonb::Number(canonical_number(text)?))
    }

    fn string(&mut self) -> Result<String, ValueError> {
        if !self.eat(b'"') {
            return Err(self.err());
        }
        let mut out = Vec::new();
        loop {
            let b = *self.s.get(self.pos).ok_or_else(|| self.err())?;
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let e = *self.s.get(self.pos).ok_or_else(|| self.err())?;
                    self.pos += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.err()),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                // Control characters must be escaped.
                0..=0x1f => return Err(self.err()),
                b => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.err())
    }

    /// Walks an object's members, giving each key and the byte span of its
    /// value; leaves the position after the object.
    fn members(&mut self, mut each: impl FnMut(&str, (usize, usize))) -> Option<()> {
        self.eat(b'{').then_some(())?;
        self.skip_ws();
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.skip_ws();
            let key = self.string().ok()?;
            self.skip_ws();
            self.eat(b':').then_some(())?;
            self.skip_ws();
            let start = self.pos;
            self.value(1).ok()?;
            each(&key, (start, self.pos));
            self.skip_ws();
            if self.eat(b'}') {
                return Some(());
            }
            self.eat(b',').then_some(())?;
        }
    }

    /// Walks an array's elements, giving the byte span of each.
    fn elements(&mut self, mut each: impl FnMut((usize, usize))) -> Option<()> {
        self.eat(b'[').then_some(())?;
        self.skip_ws();
        if self.eat(b']') {
            return Some(());
        }
        loop {
            self.skip_ws();
            let start = self.pos;
            self.value(1).ok()?;
            each((start, self.pos));
            self.skip_ws();
            if self.eat(b']') {
                return Some(());
            }
            self.eat(b',').then_some(())?;
        }
    }

    fn hex4(&mut self) -> Result<u32, ValueError> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err())?;
        let h = std::str::from_utf8(h).map_err(|_| self.err())?;
        let v = u32::from_str_radix(h, 16).map_err(|_| self.err())?;
        self.pos += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, ValueError> {
        let hi = self.hex4()?;
        if hi == 0 && self.syntax_only {
            return Ok('\u{0}');
        }
        if hi == 0 {
            // PostgreSQL's text cannot hold NUL (22P05).
            return Err(ValueError::UnsupportedEscape);
        }
        let code = if (0xD800..0xDC00).contains(&hi) {
            if !(self.eat(b'\\') && self.eat(b'u')) {
                return Err(self.err());
            }
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.err());
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Jsonb::parse(s).unwrap().to_string()
    }

    #[test]
    fn canonical_form_is_postgres_output() {
        // SELECT '...'::jsonb in PostgreSQL 15.
        for (input, shown) in [
            (r#"{"b":1,"a":[1,2]}"#, r#"{"a": [1, 2], "b": 1}"#),
            (r#"{"a":1,"a":2}"#, r#"{"a": 2}"#),
            (r#"{"bb":1,"a":2,"c":3}"#, r#"{"a": 2, "c": 3, "bb": 1}"#),
            ("[1e2, 1.50, -0, 0.1E-1]", "[100, 1.50, 0, 0.01]"),
            ("[1.50e1, -0.0, 1E+2, 12e-1, 0.5e1, 100e-2]", "[15.0, 0.0, 100, 1.2, 5, 1.00]"),
            (
                "[123456789012345678901234567890.5, 1e30, -2.5e-31]",
                "[123456789012345678901234567890.5, 1000000000000000000000000000000, -0.00000000000000000000000000000025]",
            ),
            (r#" "a\u00e9\n" "#, r#""aé\n""#),
            ("{}", "{}"),
            ("[]", "[]"),
            ("null", "null"),
            (
                r#"{"x": {"z": true, "y": null}}"#,
                r#"{"x": {"y": null, "z": true}}"#,
            ),
            (r#""\u0001\/""#, r#""\u0001/""#),
        ] {
            assert_eq!(canon(input), shown, "{input}");
        }
    }

    #[test]
    fn bad_json_is_a_syntax_error() {
        for bad in [
            "{",
            "[1,]",
            "01",
            "1.",
            "tru",
            "{\"a\" 1}",
            "\"\u{1}\"",
            "1 2",
            "",
        ] {
            let e = Jsonb::parse(bad).unwrap_err();
            assert_eq!(e.sqlstate(), "22P02", "{bad}");
        }
        assert_eq!(Jsonb::parse("\"\\u0000\"").unwrap_err().sqlstate(), "22P05");
        assert_eq!(Jsonb::parse("1e200000").unwrap_err().sqlstate(), "22003");
        // json checks syntax only.
        assert!(Jsonb::validate_json("[\"\\u0000\", 1e200000]").is_ok());
        assert!(Jsonb::validate_json("[1,]").is_err());
        assert_eq!(Jsonb::parse("1e-20000").unwrap_err().sqlstate(), "22003");
        assert!(Jsonb::parse("1e20000").is_ok());
        let deep = "[".repeat(MAX_JSON_DEPTH + 2);
        assert!(Jsonb::parse(&deep).is_err());
    }

    #[test]
    fn order_is_postgres_btree_order() {
        let j = |s: &str| Jsonb::parse(s).unwrap();
        // object > array > boolean > number > string > null
        let mut v = [j("{}"), j("[]"), j("true"), j("1"), j("\"a\""), j("null")];
        v.sort();
        let shown: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        assert_eq!(shown, ["null", "\"a\"", "1", "true", "[]", "{}"]);
        assert_eq!(j("1.0"), j("1"));
        assert_eq!(j("-0.0"), j("0"));
        assert!(j("-2") < j("-1.5"));
        assert!(j("1e30") > j("999999999999999999999999999999.9"));
        assert!(j("0.001") < j("0.01"));
        {
            use std::hash::BuildHasher;
            let h = std::collections::hash_map::RandomState::new();
            assert_eq!(h.hash_one(j("[1.50]")), h.hash_one(j("[1.5]")));
        }
        assert!(j("[2]") < j("[1, 1]"));
        assert!(j("[1, 2]") < j("[1, 3]"));
        assert!(j(r#"{"b": 1}"#) > j(r#"{"a": 9}"#));
    }

    #[test]
    fn json_paths_keep_the_text_as_written() {
        let text = r#" {"a" : { "b" :[1, {"c":  2.50 }] }, "d": "x\ty", "a2": 1} "#;
        let at = |path: &[JsonStep<'_>]| json_path_text(text, path);
        assert_eq!(
            at(&[JsonStep::Key("a")]),
            Some(r#"{ "b" :[1, {"c":  2.50 }] }"#)
        );
        assert_eq!(
            at(&[
                JsonStep::Either("a"),
                JsonStep::Either("b"),
                JsonStep::Either("-1")
            ]),
            Some(r#"{"c":  2.50 }"#)
        );
        assert_eq!(at(&[JsonStep::Key("d")]), Some(r#""x\ty""#));
        assert_eq!(at(&[JsonStep::Index(0)]), None);
        assert_eq!(
            at(&[JsonStep::Key("a"), JsonStep::Key("b"), JsonStep::Index(5)]),
            None
        );
        assert_eq!(
            json_path_text(r#"{"k":1,"k":2}"#, &[JsonStep::Key("k")]),
            Some("2")
        );
        assert_eq!(json_path_text(" [1] ", &[]), Some("[1]"));
    }

    #[test]
    fn containment_and_keys() {
        let j = |s: &str| Jsonb::parse(s).unwrap();
        assert!(j(r#"{"a": 1, "b": [1, 2, 3]}"#).contains(&j(r#"{"b": [3, 1]}"#)));
        assert!(!j(r#"{"a": 1}"#).contains(&j(r#"{"a": 2}"#)));
        assert!(j("[1, [2, 3]]").contains(&j("[[3]]")));
        assert!(j("[1, 2]").contains(&j("1")));
        assert!(!j("[[1]]").contains(&j("1")));
        assert!(j(r#"["a", "b"]"#).has_key("a"));
        assert!(j(r#"{"a": null}"#).has_key("a"));
        assert!(!j(r#"{"a": null}"#).has_key("b"));
        let doc = j(r#"{"a": [10, {"b": "x"}]}"#);
        assert_eq!(doc.get_path(&["a", "1", "b"]), Some(&j("\"x\"")));
        assert_eq!(doc.get_path(&["a", "-1", "b"]), Some(&j("\"x\"")));
        assert_eq!(doc.get_path(&["a", "x"]), None);
        assert_eq!(j("\"x\"").as_text().as_deref(), Some("x"));
        assert_eq!(j("null").as_text(), None);
    }
}
