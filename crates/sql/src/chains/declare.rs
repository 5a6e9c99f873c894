//! The chain statements the SQL parser does not know, parsed into typed
//! values once: `CREATE CHAIN`, `DROP CHAIN`, `EXPLAIN CHAIN`, `CALL`'s
//! target, and `WAIT FOR CHAINS` (`docs/chains.md`, "Declaring a chain").
//!
//! A chain's body is dollar-quoted, as a PostgreSQL function's is:
//!
//! ```text
//! CREATE CHAIN place_bid (bidder bigint, item bigint, amount numeric) AS $$
//!   HOP ON $bidder;
//!     ABORT IF (SELECT balance < $amount FROM users WHERE id = $bidder);
//!     SELECT name INTO bidder_name FROM users WHERE id = $bidder;
//!     UPDATE users SET bids = bids + 1 WHERE id = $bidder;
//!   HOP ON $item COMMUTATIVE;
//!     INSERT INTO bids VALUES ($item, $bidder, $bidder_name, $amount);
//! $$
//! ```
//!
//! `$name` is a parameter, or a variable an earlier `SELECT ... INTO name`
//! set; each statement is rewritten once, here, to numbered placeholders
//! over the chain's *slots* (its parameters, then its variables), so a
//! hop runs its statements as prepared statements with values.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use aqueduct_expr::SqlError;
use aqueduct_values::{DataType, Value};
use sqlparser::ast::{self, Expr, SetExpr, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// The most hops a chain may declare (the sequencers' path limit).
pub const MAX_HOPS: usize = aqueduct_chains::sequencer::MAX_PATH_LEN;
/// The most statements one hop may run.
pub const MAX_HOP_STATEMENTS: usize = 64;
/// The most parameters plus variables a chain may have.
pub const MAX_SLOTS: usize = 256;

/// Which chain statement a text is, by its first words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainVerb {
    Create,
    Drop,
    Explain,
    Call,
    Wait,
}

fn words(sql: &str, n: usize) -> Vec<String> {
    sql.split_whitespace()
        .take(n)
        .map(|w| w.trim_end_matches(';').to_ascii_lowercase())
        .collect()
}

/// The chain statement `sql` is, if any. Every `CALL` is one: chains are
/// what `CALL` runs here (there are no stored procedures).
pub fn verb_of(sql: &str) -> Option<ChainVerb> {
    let w = words(sql, 4);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["create", "chain", ..] | ["create", "or", "replace", "chain"] => Some(ChainVerb::Create),
        ["drop", "chain", ..] => Some(ChainVerb::Drop),
        ["explain", "chain", ..] => Some(ChainVerb::Explain),
        ["explain", f, ..] if f.starts_with('(') => {
            // EXPLAIN (FORMAT x) CHAIN name
            let t = tokens(sql);
            let close = t.iter().position(|t| *t == Token::RParen)?;
            (word(t.get(close + 1)).as_deref() == Some("chain")).then_some(ChainVerb::Explain)
        }
        ["wait", "for", "chains"] => Some(ChainVerb::Wait),
        ["call", ..] => Some(ChainVerb::Call),
        _ => None,
    }
}

use aqueduct_plan::parse::{plain_word as word, solid_tokens as tokens};

/// A name: an unquoted word folded to lower case, or a quoted one as is.
fn name(t: Option<&Token>) -> Option<String> {
    match t? {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
        Token::Word(w) => Some(w.value.clone()),
        _ => None,
    }
}

fn usage() -> &'static str {
    "CREATE CHAIN name (param type, ...) AS $$ HOP ON $param; statement; ... $$"
}

fn syntax(what: impl Into<String>) -> SqlError {
    SqlError::syntax(what.into()).with_hint(usage())
}

/// Where a hop runs: the shard its key names.
#[derive(Clone, Debug, PartialEq)]
pub enum HopKey {
    /// A parameter's value (by slot).
    Param(usize),
    /// A constant: a shard every call of the chain shares.
    Constant(Value),
}

/// One statement of a hop.
#[derive(Clone, Debug)]
pub struct HopStatement {
    /// The statement, its `$names` rewritten to `$1..$n` over the slots
    /// and its `INTO` removed.
    pub statement: Statement,
    /// `SELECT ... INTO a, b`: the slots the first row's columns set.
    pub into: Vec<usize>,
}

/// One hop: a local transaction on one shard.
#[derive(Clone, Debug)]
pub struct HopDecl {
    pub key: HopKey,
    /// `COMMUTATIVE`: the hop commutes with every instance of itself.
    pub commutative: bool,
    /// `COMMUTES WITH chain.n, ...`: hops (1-based) it commutes with.
    pub commutes_with: Vec<(String, usize)>,
    /// `ABORT IF condition` (first hop only): the chain stops before any
    /// effect when it holds.
    pub abort_if: Option<Statement>,
    pub statements: Vec<HopStatement>,
    /// Tables and views the hop reads, and base tables it writes.
    pub reads: BTreeSet<String>,
    pub writes: BTreeSet<String>,
}

/// A declared chain, parsed.
#[derive(Clone, Debug)]
pub struct ChainDecl {
    pub name: String,
    /// Parameters: name and type, in order (slots `0..params.len()`).
    pub params: Vec<(String, DataType)>,
    /// Every slot's name: the parameters', then the variables'.
    pub slots: Vec<String>,
    pub hops: Vec<HopDecl>,
    /// `THEN CALL other(args)`, the last statement: the chain linked to
    /// this one, started once this one has committed (Lynx §3).
    pub then: Option<LinkDecl>,
}

/// A linked chain: its name and `SELECT arg, ...` over this chain's
/// slots, evaluated in the last hop.
#[derive(Clone, Debug)]
pub struct LinkDecl {
    pub chain: String,
    /// `None` when the linked chain takes no arguments.
    pub args: Option<Statement>,
}

impl ChainDecl {
    /// The slot a parameter or variable name has.
    pub fn slot(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|s| s == name)
    }
}

/// `DROP CHAIN [IF EXISTS] name [, ...]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DropChain {
    pub names: Vec<String>,
    pub if_exists: bool,
}

/// `EXPLAIN [(FORMAT TEXT|DOT)] CHAIN name`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExplainChain {
    pub name: String,
    pub dot: bool,
}

/// `CALL name(args)`: the chain and its argument expressions' text.
#[derive(Clone, Debug)]
pub struct CallChain {
    pub name: String,
    pub args: Vec<Expr>,
}

/// `CREATE [OR REPLACE] CHAIN`: the declaration and whether it replaces.
pub fn parse_create(sql: &str) -> Result<(ChainDecl, bool), SqlError> {
    let t = tokens(sql);
    let w = |i: usize| word(t.get(i));
    let mut at = 1;
    let replace = w(1).as_deref() == Some("or");
    if replace {
        if w(2).as_deref() != Some("replace") {
            return Err(syntax(format!("syntax error in {sql:?}")));
        }
        at = 3;
    }
    if w(at).as_deref() != Some("chain") {
        return Err(syntax(format!("syntax error in {sql:?}")));
    }
    let chain = name(t.get(at + 1)).ok_or_else(|| syntax("CREATE CHAIN needs a name"))?;
    if t.get(at + 2) != Some(&Token::LParen) {
        return Err(syntax(format!(
            "CREATE CHAIN {chain} needs its parameters in parentheses, () for none"
        )));
    }
    // Parameters: name type-words, separated by commas at depth 0.
    let mut i = at + 3;
    let mut params: Vec<(String, DataType)> = Vec::new();
    let mut current: Vec<&Token> = Vec::new();
    let mut depth = 0;
    loop {
        let tok = t
            .get(i)
            .ok_or_else(|| syntax("unterminated parameter list"))?;
        i += 1;
        match tok {
            Token::LParen => {
                depth += 1;
                current.push(tok);
            }
            Token::RParen if depth > 0 => {
                depth -= 1;
                current.push(tok);
            }
            Token::Comma | Token::RParen if depth == 0 => {
                if !current.is_empty() {
                    params.push(param(&chain, &current)?);
                    current.clear();
                } else if matches!(tok, Token::Comma) || !params.is_empty() {
                    return Err(syntax("an empty parameter in CREATE CHAIN"));
                }
                if matches!(tok, Token::RParen) {
                    break;
                }
            }
            _ => current.push(tok),
        }
    }
    if w(i).as_deref() != Some("as") {
        return Err(syntax("CREATE CHAIN ... ( ... ) needs AS $$ body $$"));
    }
    let body = match t.get(i + 1) {
        Some(Token::DollarQuotedString(s)) => s.value.clone(),
        Some(Token::SingleQuotedString(s)) => s.clone(),
        _ => {
            return Err(syntax(
                "a chain's body is a dollar-quoted string: AS $$ ... $$",
            ))
        }
    };
    if t.len() != i + 2 {
        return Err(syntax("nothing may follow a chain's body"));
    }
    let mut seen = BTreeSet::new();
    for (p, _) in &params {
        if !seen.insert(p.clone()) {
            return Err(SqlError::new(
                "42P13",
                format!("parameter name \"{p}\" used more than once"),
            ));
        }
    }
    Ok((parse_body(chain, params, &body)?, replace))
}

fn param(chain: &str, tokens: &[&Token]) -> Result<(String, DataType), SqlError> {
    let pname = name(tokens.first().copied())
        .ok_or_else(|| syntax(format!("a parameter of chain {chain} needs a name")))?;
    let ty_text: String = tokens[1..]
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    if ty_text.trim().is_empty() {
        return Err(syntax(format!(
            "parameter {pname} of chain {chain} needs a type"
        )));
    }
    let ty = aqueduct_tables::parse_type(&ty_text.replace(" ( ", "(").replace(" )", ")"))
        .map_err(|why| SqlError::new("42704", format!("type of parameter {pname}: {why}")))?;
    Ok((pname, ty))
}

/// The body's pieces between semicolons, each as its tokens.
fn pieces(body: &str) -> Result<Vec<Vec<Token>>, SqlError> {
    let toks = Tokenizer::new(&PostgreSqlDialect {}, body)
        .tokenize()
        .map_err(|e| SqlError::syntax(format!("in the chain's body: {e}")))?;
    let mut out: Vec<Vec<Token>> = vec![Vec::new()];
    for t in toks {
        if t == Token::SemiColon {
            out.push(Vec::new());
        } else {
            out.last_mut().expect("never empty").push(t);
        }
    }
    out.retain(|p| p.iter().any(|t| !matches!(t, Token::Whitespace(_))));
    Ok(out)
}

fn text_of(tokens: &[Token]) -> String {
    tokens.iter().map(|t| t.to_string()).collect()
}

fn parse_body(
    chain: String,
    params: Vec<(String, DataType)>,
    body: &str,
) -> Result<ChainDecl, SqlError> {
    let mut decl = ChainDecl {
        name: chain,
        slots: params.iter().map(|(n, _)| n.clone()).collect(),
        params,
        hops: Vec::new(),
        then: None,
    };
    for piece in pieces(body)? {
        let solid: Vec<Token> = piece
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .cloned()
            .collect();
        if decl.then.is_some() {
            return Err(SqlError::new(
                "42P13",
                "THEN CALL is the last statement of a chain",
            ));
        }
        match word(solid.first()).as_deref() {
            Some("then") if word(solid.get(1)).as_deref() == Some("call") => {
                if decl.hops.is_empty() {
                    return Err(syntax("THEN CALL follows the chain's hops"));
                }
                let at_call = piece
                    .iter()
                    .position(|t| word(Some(t)).as_deref() == Some("call"))
                    .expect("checked above");
                let call = parse_call(&text_of(&piece[at_call..]))?;
                let list: Vec<String> = call.args.iter().map(|a| a.to_string()).collect();
                let args = if list.is_empty() {
                    None
                } else {
                    let mut args = one_statement(&format!("SELECT {}", list.join(", ")))?;
                    rewrite_names(&mut args, &decl.slots)?;
                    Some(args)
                };
                decl.then = Some(LinkDecl {
                    chain: call.name,
                    args,
                });
            }
            Some("hop") => {
                if decl.hops.len() == MAX_HOPS {
                    return Err(SqlError::new(
                        "54000",
                        format!("a chain has at most {MAX_HOPS} hops"),
                    ));
                }
                let hop = hop_header(&decl, &solid)?;
                decl.hops.push(hop);
            }
            Some("abort") => {
                let n = decl.hops.len();
                if n != 1 {
                    return Err(SqlError::new(
                        "42P13",
                        "only a chain's first hop may abort (ABORT IF belongs to the first hop)",
                    ));
                }
                if word(solid.get(1)).as_deref() != Some("if") || solid.len() < 3 {
                    return Err(syntax("ABORT IF condition"));
                }
                // The condition's text, whitespace kept: after the IF.
                let at_if = piece
                    .iter()
                    .position(|t| word(Some(t)).as_deref() == Some("if"))
                    .expect("checked above");
                let cond = text_of(&piece[at_if + 1..]);
                let mut st = one_statement(&format!("SELECT ({cond})"))?;
                let _ = rewrite_names(&mut st, &decl.slots)?;
                let hop = decl.hops.last_mut().expect("n == 1");
                if hop.abort_if.is_some() {
                    return Err(SqlError::new("42P13", "a hop has one ABORT IF"));
                }
                note_tables(&st, &mut hop.reads, &mut hop.writes);
                hop.abort_if = Some(st);
            }
            _ => {
                if decl.hops.is_empty() {
                    return Err(syntax(
                        "a chain's body starts with HOP ON $param; before its statements",
                    ));
                }
                let mut st = one_statement(&text_of(&piece))?;
                check_kind(&st)?;
                let into_names = take_into(&mut st)?;
                let mut into = Vec::new();
                for v in into_names {
                    let slot = match decl.slot(&v) {
                        Some(s) if s < decl.params.len() => {
                            return Err(SqlError::new(
                                "42P13",
                                format!("INTO {v}: {v} is a parameter of the chain"),
                            ))
                        }
                        Some(s) => s,
                        None => {
                            if decl.slots.len() == MAX_SLOTS {
                                return Err(SqlError::new(
                                    "54000",
                                    format!(
                                        "a chain has at most {MAX_SLOTS} parameters and variables"
                                    ),
                                ));
                            }
                            decl.slots.push(v);
                            decl.slots.len() - 1
                        }
                    };
                    into.push(slot);
                }
                // Names are resolved against the slots known so far, so a
                // variable is used only after the statement that sets it.
                let defined = decl.slots.len();
                let used = rewrite_names(&mut st, &decl.slots)?;
                if let Some(late) = used.iter().find(|&&s| s >= defined) {
                    return Err(SqlError::new(
                        "42703",
                        format!("${} is used before it is set", decl.slots[*late]),
                    ));
                }
                let hop = decl.hops.last_mut().expect("checked above");
                if hop.statements.len() == MAX_HOP_STATEMENTS {
                    return Err(SqlError::new(
                        "54000",
                        format!("a hop runs at most {MAX_HOP_STATEMENTS} statements"),
                    ));
                }
                note_tables(&st, &mut hop.reads, &mut hop.writes);
                hop.statements.push(HopStatement {
                    statement: st,
                    into,
                });
            }
        }
    }
    if decl.hops.is_empty() {
        return Err(syntax("a chain has at least one hop"));
    }
    if let Some(i) = decl.hops.iter().position(|h| h.statements.is_empty()) {
        return Err(SqlError::new(
            "42P13",
            format!("hop {} of chain {} runs no statement", i + 1, decl.name),
        ));
    }
    Ok(decl)
}

/// `HOP ON $param|constant [COMMUTATIVE] [COMMUTES WITH chain.n, ...]`.
fn hop_header(decl: &ChainDecl, t: &[Token]) -> Result<HopDecl, SqlError> {
    if word(t.get(1)).as_deref() != Some("on") {
        return Err(syntax("HOP ON $param"));
    }
    let key = match t.get(2) {
        Some(Token::Placeholder(p)) => {
            let n = p.trim_start_matches('$');
            let slot = match n.parse::<usize>() {
                Ok(k) if k >= 1 && k <= decl.params.len() => k - 1,
                _ => decl.slot(n).filter(|&s| s < decl.params.len()).ok_or_else(|| {
                    SqlError::new(
                        "42703",
                        format!(
                            "HOP ON {p}: a hop's shard comes from a parameter of the chain, known before it starts"
                        ),
                    )
                })?,
            };
            HopKey::Param(slot)
        }
        Some(Token::SingleQuotedString(s)) => HopKey::Constant(Value::Text(s.clone())),
        Some(Token::Number(n, _)) => HopKey::Constant(Value::Text(n.clone())),
        _ => return Err(syntax("HOP ON $param or HOP ON 'constant'")),
    };
    let mut hop = HopDecl {
        key,
        commutative: false,
        commutes_with: Vec::new(),
        abort_if: None,
        statements: Vec::new(),
        reads: BTreeSet::new(),
        writes: BTreeSet::new(),
    };
    let mut i = 3;
    while i < t.len() {
        match word(t.get(i)).as_deref() {
            Some("commutative") => {
                hop.commutative = true;
                i += 1;
            }
            Some("commutes") if word(t.get(i + 1)).as_deref() == Some("with") => {
                i += 2;
                loop {
                    let chain = name(t.get(i)).ok_or_else(|| syntax("COMMUTES WITH chain.n"))?;
                    let n = match (t.get(i + 1), t.get(i + 2)) {
                        (Some(Token::Period), Some(Token::Number(n, _))) => n.parse::<usize>().ok(),
                        (Some(Token::Number(n, _)), _) if n.starts_with('.') => {
                            n[1..].parse::<usize>().ok()
                        }
                        _ => None,
                    }
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| syntax("COMMUTES WITH chain.n (n counts hops from 1)"))?;
                    i += if matches!(t.get(i + 1), Some(Token::Period)) {
                        3
                    } else {
                        2
                    };
                    hop.commutes_with.push((chain, n));
                    if t.get(i) == Some(&Token::Comma) {
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            _ => return Err(syntax(format!("unexpected {} in a hop's header", t[i]))),
        }
    }
    Ok(hop)
}

fn one_statement(sql: &str) -> Result<Statement, SqlError> {
    let mut st = aqueduct_plan::parse::parse(sql)?;
    if st.len() != 1 {
        return Err(syntax(format!("expected one statement, not {sql:?}")));
    }
    Ok(st.remove(0))
}

fn check_kind(st: &Statement) -> Result<(), SqlError> {
    match st {
        Statement::Query(_)
        | Statement::Insert(_)
        | Statement::Update(_)
        | Statement::Delete(_) => Ok(()),
        other => Err(SqlError::new(
            "0A000",
            format!(
                "a hop runs SELECT, INSERT, UPDATE and DELETE statements, not {}",
                other
                    .to_string()
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        )
        .with_hint("a chain's hops are its transaction: declare schema outside it")),
    }
}

/// Removes `INTO a, b` from a `SELECT` and returns the names.
fn take_into(st: &mut Statement) -> Result<Vec<String>, SqlError> {
    let Statement::Query(q) = st else {
        return Ok(Vec::new());
    };
    let SetExpr::Select(s) = q.body.as_mut() else {
        return Ok(Vec::new());
    };
    let Some(into) = s.into.take() else {
        return Ok(Vec::new());
    };
    if into.temporary || into.unlogged || into.table {
        return Err(SqlError::new(
            "0A000",
            "SELECT INTO in a hop sets variables; it does not create tables",
        ));
    }
    into.targets
        .iter()
        .map(|e| match e {
            Expr::Identifier(i) => Ok(if i.quote_style.is_some() {
                i.value.clone()
            } else {
                i.value.to_ascii_lowercase()
            }),
            other => Err(syntax(format!(
                "SELECT ... INTO names variables, not {other}"
            ))),
        })
        .collect()
}

/// Rewrites `$name` (and `$n`, a parameter by position) to `$k`, the slot
/// plus one, and returns the slots used.
fn rewrite_names(st: &mut Statement, slots: &[String]) -> Result<Vec<usize>, SqlError> {
    let mut used = Vec::new();
    let mut bad: Option<String> = None;
    let _ = ast::visit_expressions_mut(st, |e| {
        if let Expr::Value(v) = e {
            if let ast::Value::Placeholder(p) = &mut v.value {
                let n = p.trim_start_matches('$').to_string();
                let slot = match n.parse::<usize>() {
                    Ok(k) if k >= 1 && k <= slots.len() => Some(k - 1),
                    Ok(_) => None,
                    Err(_) => slots.iter().position(|s| *s == n),
                };
                match slot {
                    Some(s) => {
                        used.push(s);
                        *p = format!("${}", s + 1);
                    }
                    None => {
                        bad = Some(p.clone());
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    match bad {
        Some(p) => Err(SqlError::new(
            "42703",
            format!("{p} is neither a parameter of the chain nor a variable set before it"),
        )),
        None => Ok(used),
    }
}

/// Canonical relation name: lower case without `public.`.
pub fn relation(name: &ast::ObjectName) -> String {
    let s = name.to_string();
    let s = s.strip_prefix("public.").unwrap_or(&s);
    if s.starts_with('"') {
        s.trim_matches('"').to_string()
    } else {
        s.to_ascii_lowercase()
    }
}

/// The relations a statement reads, and the table it writes.
fn note_tables(st: &Statement, reads: &mut BTreeSet<String>, writes: &mut BTreeSet<String>) {
    let _ = ast::visit_relations(st, |r| {
        reads.insert(relation(r));
        ControlFlow::<()>::Continue(())
    });
    let target = match st {
        Statement::Insert(i) => match &i.table {
            ast::TableObject::TableName(n) => Some(relation(n)),
            _ => None,
        },
        Statement::Update(u) => match &u.table.relation {
            ast::TableFactor::Table { name, .. } => Some(relation(name)),
            _ => None,
        },
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
            };
            from.first().and_then(|t| match &t.relation {
                ast::TableFactor::Table { name, .. } => Some(relation(name)),
                _ => None,
            })
        }
        _ => None,
    };
    if let Some(t) = target {
        writes.insert(t);
    }
}

/// `DROP CHAIN [IF EXISTS] name [, ...]`.
pub fn parse_drop(sql: &str) -> Result<DropChain, SqlError> {
    let t = tokens(sql);
    let if_exists = word(t.get(2)).as_deref() == Some("if");
    let mut i = if if_exists {
        if word(t.get(3)).as_deref() != Some("exists") {
            return Err(SqlError::syntax("DROP CHAIN [IF EXISTS] name"));
        }
        4
    } else {
        2
    };
    let mut names = Vec::new();
    loop {
        names.push(name(t.get(i)).ok_or_else(|| SqlError::syntax("DROP CHAIN [IF EXISTS] name"))?);
        i += 1;
        match t.get(i) {
            Some(Token::Comma) => i += 1,
            None => break,
            Some(_) => return Err(SqlError::syntax("DROP CHAIN [IF EXISTS] name [, ...]")),
        }
    }
    Ok(DropChain { names, if_exists })
}

/// `EXPLAIN CHAIN name` or `EXPLAIN (FORMAT TEXT|DOT) CHAIN name`.
pub fn parse_explain(sql: &str) -> Result<ExplainChain, SqlError> {
    let t = tokens(sql);
    let usage = || SqlError::syntax("EXPLAIN [(FORMAT TEXT | DOT)] CHAIN name");
    let (dot, at) = if t.get(1) == Some(&Token::LParen) {
        if word(t.get(2)).as_deref() != Some("format") || t.get(4) != Some(&Token::RParen) {
            return Err(usage());
        }
        match word(t.get(3)).as_deref() {
            Some("text") => (false, 5),
            Some("dot") => (true, 5),
            _ => return Err(usage()),
        }
    } else {
        (false, 1)
    };
    if word(t.get(at)).as_deref() != Some("chain") || t.len() != at + 2 {
        return Err(usage());
    }
    Ok(ExplainChain {
        name: name(t.get(at + 1)).ok_or_else(usage)?,
        dot,
    })
}

/// `CALL name(args)` (already known to name a chain).
pub fn parse_call(sql: &str) -> Result<CallChain, SqlError> {
    let st = one_statement(sql)?;
    let Statement::Call(f) = st else {
        return Err(SqlError::syntax("CALL chain(arguments)"));
    };
    let name = relation(&f.name);
    let args = match f.args {
        ast::FunctionArguments::None => Vec::new(),
        ast::FunctionArguments::List(l) => l
            .args
            .into_iter()
            .map(|a| match a {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e),
                other => Err(SqlError::new(
                    "0A000",
                    format!("a chain takes its arguments by position, not {other}"),
                )),
            })
            .collect::<Result<_, _>>()?,
        ast::FunctionArguments::Subquery(_) => {
            return Err(SqlError::syntax("CALL chain(arguments)"))
        }
    };
    Ok(CallChain { name, args })
}

/// The hops' names for the analysis: `chain.n`.
pub fn hop_label(chain: &str, hop: usize) -> String {
    format!("{chain}.{}", hop + 1)
}

/// The variables' slot numbers by name, for a result row.
pub fn variables(decl: &ChainDecl) -> BTreeMap<usize, &str> {
    decl.slots
        .iter()
        .enumerate()
        .skip(decl.params.len())
        .map(|(i, s)| (i, s.as_str()))
        .collect()
}
