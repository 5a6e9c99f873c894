//! The modules of a crate form a DAG: no file imports (through `crate::`
//! or `super::` paths, `use` lines or inline) a module that imports it
//! back, directly or through others. A crate root (`lib.rs`) and a
//! directory's `mod.rs` only declare modules and re-export, so importing an
//! item through them (`crate::Engine`) counts as importing the root, which
//! imports everything: a cycle. Run by `scripts/check-module-cycles`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose modules must form a DAG.
const CHECKED: &[&str] = &["crates/plan/src", "crates/views/src", "crates/sql/src"];

/// A crate's modules: module path (`""` for the root, `a::b`) to source text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel: PathBuf = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("lib" | "main" | "mod")
            ) {
                parts.pop();
            }
            if parts.first().map(String::as_str) == Some("bin") {
                continue;
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The text without comments and string literals (so a doc comment or a
/// message naming `crate::x` is no import).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'r' && b.get(i + 1) == Some(&b'#') && b.get(i + 2) == Some(&b'"') {
            let end = text[i + 3..].find("\"#").map_or(b.len(), |e| i + 3 + e + 2);
            i = end;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A char literal such as '"' or '{'.
            i += 3;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Paths a use tree starting at `text` names, each a list of segments
/// (`{a::b, c::{self, D}}` gives `a::b`, `c`, `c::D`).
fn use_tree(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut i = 0;
    let mut segs = prefix.to_vec();
    let chars: Vec<char> = text.chars().collect();
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i < chars.len() && chars[i] == '{' {
            i += 1;
            loop {
                while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
                    i += 1;
                }
                if i >= chars.len() || chars[i] == '}' {
                    return i + 1;
                }
                let rest: String = chars[i..].iter().collect();
                i += use_tree(&rest, &segs, out);
            }
        }
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        if !word.is_empty() && word != "self" {
            segs.push(word);
        }
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
            continue;
        }
        out.push(segs);
        return i;
    }
}

/// The modules `module` imports (its `crate::` and `super::` paths).
fn imports(module: &str, text: &str, all: &BTreeMap<String, String>) -> BTreeSet<String> {
    let code = code_only(text);
    // `super::` inside an inline test module means the file itself.
    let (body, tests) = match code.find("mod tests {") {
        Some(at) => code.split_at(at),
        None => (code.as_str(), ""),
    };
    let own: Vec<String> = if module.is_empty() {
        vec![]
    } else {
        module.split("::").map(String::from).collect()
    };
    let mut paths = Vec::new();
    for (part, supers) in [(body, true), (tests, false)] {
        let mut at = 0;
        while let Some(found) = part[at..].find("crate::").map(|f| at + f) {
            at = found + "crate::".len();
            if found > 0 && is_ident(part[..found].chars().last().unwrap()) {
                continue;
            }
            use_tree(&part[at..], &[], &mut paths);
        }
        if !supers {
            continue;
        }
        // `use child::...` (relative to this module).
        let mut at = 0;
        while let Some(found) = part[at..].find("use ").map(|f| at + f) {
            at = found + "use ".len();
            if found > 0 && is_ident(part[..found].chars().last().unwrap()) {
                continue;
            }
            let mut relative = Vec::new();
            use_tree(&part[at..], &own, &mut relative);
            paths.extend(
                relative.into_iter().filter(|p| {
                    p.len() > own.len() && all.contains_key(&p[..=own.len()].join("::"))
                }),
            );
        }
        let mut at = 0;
        while let Some(found) = part[at..].find("super::").map(|f| at + f) {
            at = found + "super::".len();
            if found > 0 && is_ident(part[..found].chars().last().unwrap()) {
                continue;
            }
            let parent: Vec<String> = own[..own.len().saturating_sub(1)].to_vec();
            use_tree(&part[at..], &parent, &mut paths);
        }
    }
    let mut out = BTreeSet::new();
    for path in paths {
        // The longest prefix of the path that is a module.
        let target = (0..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| all.contains_key(m))
            .unwrap_or_default();
        if target != module {
            out.insert(target);
        }
    }
    out
}

/// Every import cycle of the crate at `src`, each as its modules in order.
fn cycles(src: &Path) -> Vec<Vec<String>> {
    let all = modules(src);
    let edges: BTreeMap<String, BTreeSet<String>> = all
        .iter()
        .map(|(m, text)| (m.clone(), imports(m, text, &all)))
        .collect();
    let mut found = Vec::new();
    // 0: unvisited, 1: on the path, 2: done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    fn visit<'a>(
        m: &'a str,
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
        found: &mut Vec<Vec<String>>,
    ) {
        state.insert(m, 1);
        path.push(m);
        for next in &edges[m] {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                0 => visit(next, edges, state, path, found),
                1 => {
                    let start = path.iter().position(|p| p == next).unwrap();
                    let mut cycle: Vec<String> = path[start..].iter().map(|p| name(p)).collect();
                    cycle.push(name(next));
                    found.push(cycle);
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(m, 2);
    }
    fn name(m: &str) -> String {
        if m.is_empty() {
            "crate".into()
        } else {
            m.into()
        }
    }
    for m in edges.keys() {
        if state.get(m.as_str()).copied().unwrap_or(0) == 0 {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

#[test]
fn modules_form_a_dag() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut failures = Vec::new();
    for src in CHECKED {
        let dir = workspace.join(src);
        if !dir.exists() {
            continue;
        }
        for cycle in cycles(&dir) {
            failures.push(format!("{src}: {}", cycle.join(" -> ")));
        }
    }
    assert!(
        failures.is_empty(),
        "import cycles between modules:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_cycle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n");
    write("a.rs", "use crate::b::{self, B};\npub struct A;\n");
    write("b.rs", "pub struct B;\nfn f() { crate::c::g() }\n");
    write(
        "c/mod.rs",
        "mod d;\n// crate::a::A in a comment is no import\npub fn g() { let _ = \"crate::a\"; }\n",
    );
    write("c/d.rs", "use super::g;\n");
    assert!(cycles(dir.path()).is_empty(), "{:?}", cycles(dir.path()));
    // c's child d imports a; a imports b, b imports c, c declares d.
    write("c/d.rs", "use super::g;\nuse crate::{a::A, b};\n");
    write("c/mod.rs", "mod d;\npub use d::*;\npub fn g() {}\n");
    let found = cycles(dir.path());
    assert!(
        found
            .iter()
            .any(|c| c.contains(&"a".to_string()) && c.contains(&"c::d".to_string())),
        "{found:?}"
    );
    // Importing through the root is importing the root.
    write("c/d.rs", "use super::g;\n");
    write("c/mod.rs", "mod d;\npub fn g() {}\n");
    write("b.rs", "use crate::A;\npub struct B;\n");
    assert_eq!(cycles(dir.path()), vec![vec!["crate", "a", "b", "crate"]]);
}
