//! Parsing SQL text into statements (sqlparser, PostgreSQL dialect),
//! within the limits on size and nesting.

use aqueduct_expr::SqlError;
use sqlparser::ast::{self, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::limits::MAX_SQL_BYTES;

/// Parses SQL text into statements (PostgreSQL dialect).
pub fn parse(sql: &str) -> Result<Vec<Statement>, SqlError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::new(
            "54000",
            format!(
                "query of {} bytes exceeds the limit of {MAX_SQL_BYTES} bytes",
                sql.len()
            ),
        ));
    }
    if sql.trim().trim_matches(';').trim().is_empty() {
        return Ok(Vec::new());
    }
    let rewritten = rewrite_user_statements(sql);
    let sql = rewritten.as_deref().unwrap_or(sql);
    let reordered = reorder_sequence_options(sql);
    let sql = reordered.as_deref().unwrap_or(sql);
    let altered = rewrite_alter_sequence(sql);
    let sql = altered.as_deref().unwrap_or(sql);
    let named = rewrite_identity_sequence_name(sql);
    let sql = named.as_deref().unwrap_or(sql);
    let owned = rewrite_alter_type_owner(sql);
    let sql = owned.as_deref().unwrap_or(sql);
    let constraints = rewrite_set_constraints(sql);
    let sql = constraints.as_deref().unwrap_or(sql);
    let overriding = rewrite_overriding(sql);
    let sql = overriding.as_deref().unwrap_or(sql);
    let copy_options = rewrite_copy_options(sql);
    let sql = copy_options.as_deref().unwrap_or(sql);
    let vacuum = rewrite_vacuum(sql);
    let sql = vacuum.as_deref().unwrap_or(sql);
    let dialect = PostgreSqlDialect {};
    let mut statements = sqlparser::tokenizer::Tokenizer::new(&dialect, sql)
        .with_unescape(true)
        .tokenize_with_location()
        .map_err(sqlparser::parser::ParserError::from)
        .and_then(|tokens| {
            crate::limits::check_tokens(&tokens)
                .map_err(|_| sqlparser::parser::ParserError::RecursionLimitExceeded)?;
            if has_copy(&tokens) {
                return parse_each(&dialect, tokens);
            }
            Parser::new(&dialect)
                .with_recursion_limit(crate::limits::PARSER_RECURSION_LIMIT)
                .with_tokens_with_locations(tokens)
                .parse_statements()
        })
        .map_err(|e| {
            if matches!(e, sqlparser::parser::ParserError::RecursionLimitExceeded) {
                return crate::limits::too_complex();
            }
            let msg = e.to_string();
            let msg = msg.strip_prefix("sql parser error: ").unwrap_or(&msg);
            SqlError::syntax(format!("syntax error: {msg}"))
        })?;
    for st in &mut statements {
        crate::limits::check_depth(st)?;
        rewrite_string_agg(st);
        rewrite_expandarray(st);
        fold_qualified_subscripts(st);
    }
    Ok(statements)
}

/// `c.conkey[1]` parses as field access `.conkey` then a subscript on `c`;
/// it is the column `c.conkey`, subscripted.
fn fold_qualified_subscripts(st: &mut Statement) {
    use sqlparser::ast::{AccessExpr, Expr};
    let _ = sqlparser::ast::visit_expressions_mut(st, |e| {
        if let Expr::CompoundFieldAccess { root, access_chain } = e {
            if let (Expr::Identifier(q), Some(AccessExpr::Dot(Expr::Identifier(c)))) =
                (root.as_ref(), access_chain.first())
            {
                let column = Expr::CompoundIdentifier(vec![q.clone(), c.clone()]);
                let rest: Vec<AccessExpr> = access_chain[1..].to_vec();
                *e = if rest.is_empty() {
                    column
                } else {
                    Expr::CompoundFieldAccess {
                        root: Box::new(column),
                        access_chain: rest,
                    }
                };
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `information_schema._pg_expandarray(a)`, the set-returning function of
/// rows `(x, n)` — each element and its 1-based position — that pgJDBC
/// calls to expand `pg_index.indkey`, is written as its two columns, which
/// set-returning functions in one select list give in step: `(f(a)).x` is
/// `unnest(a)`, `(f(a)).n` is `generate_series(1, cardinality(a))`, and a
/// select item `f(a) AS k` becomes the two items `k.x` and `k.n`, which a
/// query over it reads as `(q.k).x` and `(q.k).n`. There is no row type to
/// hold the pair itself.
fn rewrite_expandarray(st: &mut Statement) {
    use sqlparser::ast::{AccessExpr, Expr, Ident, SelectItem};
    let expanded = |e: &Expr| -> Option<Expr> {
        let Expr::Function(f) = e else { return None };
        let named = f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())?
            .value
            .to_lowercase();
        if named != "_pg_expandarray" {
            return None;
        }
        let sqlparser::ast::FunctionArguments::List(list) = &f.args else {
            return None;
        };
        match list.args.as_slice() {
            [sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(a))] => {
                Some(a.clone())
            }
            _ => None,
        }
    };
    let call = |name: &str, args: Vec<Expr>| -> Expr {
        let sql = format!(
            "{name}({})",
            args.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        parse_expr(&sql).expect("a call of expressions that parsed")
    };
    let field = |a: &Expr, f: &str| -> Option<Expr> {
        match f {
            "x" => Some(call("unnest", vec![a.clone()])),
            "n" => Some(call(
                "generate_series",
                vec![
                    Expr::Value(sqlparser::ast::Value::Number("1".into(), false).into()),
                    call("cardinality", vec![a.clone()]),
                ],
            )),
            _ => None,
        }
    };
    // `f(a) AS k` in a select list: its two columns.
    let mut flattened: Vec<String> = Vec::new();
    let mut queries: Vec<&mut sqlparser::ast::Query> = Vec::new();
    if let Statement::Query(q) = st {
        queries.push(q);
    }
    while let Some(q) = queries.pop() {
        let sqlparser::ast::SetExpr::Select(select) = q.body.as_mut() else {
            continue;
        };
        let mut items = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            match &item {
                SelectItem::ExprWithAlias { expr, alias } if expanded(expr).is_some() => {
                    let a = expanded(expr).expect("checked");
                    let k = alias.value.to_lowercase();
                    for f in ["x", "n"] {
                        items.push(SelectItem::ExprWithAlias {
                            expr: field(&a, f).expect("x and n"),
                            alias: Ident::with_quote('"', format!("{k}.{f}")),
                        });
                    }
                    flattened.push(k);
                }
                _ => items.push(item),
            }
        }
        select.projection = items;
        for twj in &mut select.from {
            for factor in std::iter::once(&mut twj.relation)
                .chain(twj.joins.iter_mut().map(|j| &mut j.relation))
            {
                if let sqlparser::ast::TableFactor::Derived { subquery, .. } = factor {
                    queries.push(subquery);
                }
            }
        }
    }
    let _ = sqlparser::ast::visit_expressions_mut(st, |e| {
        let Expr::CompoundFieldAccess { root, access_chain } = e else {
            return std::ops::ControlFlow::<()>::Continue(());
        };
        let [AccessExpr::Dot(Expr::Identifier(f))] = access_chain.as_slice() else {
            return std::ops::ControlFlow::Continue(());
        };
        let f = f.value.to_lowercase();
        let mut inner = root.as_ref();
        while let Expr::Nested(x) = inner {
            inner = x;
        }
        let replaced = match inner {
            // (f(a)).x
            other if expanded(other).is_some() => field(&expanded(other).expect("checked"), &f),
            // (q.k).x over a flattened `f(a) AS k`
            Expr::CompoundIdentifier(parts)
                if parts.len() == 2 && flattened.contains(&parts[1].value.to_lowercase()) =>
            {
                Some(Expr::CompoundIdentifier(vec![
                    parts[0].clone(),
                    Ident::with_quote('"', format!("{}.{f}", parts[1].value.to_lowercase())),
                ]))
            }
            Expr::Identifier(k) if flattened.contains(&k.value.to_lowercase()) => {
                Some(Expr::Identifier(Ident::with_quote(
                    '"',
                    format!("{}.{f}", k.value.to_lowercase()),
                )))
            }
            _ => None,
        };
        if let Some(r) = replaced {
            *e = r;
        }
        std::ops::ControlFlow::Continue(())
    });
}

/// `string_agg(x, sep)` is `array_to_string(array_agg(x), sep)`: both
/// skip NULL values and are NULL over no rows (the aggregate machinery
/// takes one argument; the separator is applied to its result).
fn rewrite_string_agg(st: &mut Statement) {
    use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectName};
    let _ = sqlparser::ast::visit_expressions_mut(st, |e| {
        if let Expr::Function(f) = e {
            let named = f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase());
            if named.as_deref() == Some("string_agg") && f.over.is_none() && f.filter.is_none() {
                if let FunctionArguments::List(list) = &f.args {
                    if let [value, FunctionArg::Unnamed(FunctionArgExpr::Expr(sep))] =
                        list.args.as_slice()
                    {
                        let mut agg = f.clone();
                        agg.name = ObjectName::from(vec![sqlparser::ast::Ident::new("array_agg")]);
                        let mut args = list.clone();
                        args.args = vec![value.clone()];
                        agg.args = FunctionArguments::List(args);
                        let mut outer = f.clone();
                        outer.name =
                            ObjectName::from(vec![sqlparser::ast::Ident::new("array_to_string")]);
                        let mut outer_args = list.clone();
                        outer_args.args = vec![
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Function(agg))),
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(sep.clone())),
                        ];
                        outer_args.clauses = Vec::new();
                        outer_args.duplicate_treatment = None;
                        outer.args = FunctionArguments::List(outer_args);
                        outer.within_group = Vec::new();
                        *e = Expr::Function(outer);
                    }
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// Whether a statement among `tokens` begins with `COPY`.
fn has_copy(tokens: &[sqlparser::tokenizer::TokenWithSpan]) -> bool {
    use sqlparser::tokenizer::Token;
    let mut first = true;
    for t in tokens {
        match &t.token {
            Token::Whitespace(_) => {}
            Token::SemiColon => first = true,
            other if first => {
                if keyword(other) == Some(sqlparser::keywords::Keyword::COPY) {
                    return true;
                }
                first = false;
            }
            _ => {}
        }
    }
    false
}

/// Parses the statements between semicolons one by one: sqlparser reads
/// whatever follows `COPY ... FROM STDIN;` as the COPY's inline data,
/// so a statement after it would be swallowed.
fn parse_each(
    dialect: &PostgreSqlDialect,
    tokens: Vec<sqlparser::tokenizer::TokenWithSpan>,
) -> Result<Vec<Statement>, sqlparser::parser::ParserError> {
    use sqlparser::tokenizer::Token;
    let mut statements = Vec::new();
    for group in tokens.split(|t| t.token == Token::SemiColon) {
        if group
            .iter()
            .all(|t| matches!(t.token, Token::Whitespace(_) | Token::EOF))
        {
            continue;
        }
        statements.extend(
            Parser::new(dialect)
                .with_recursion_limit(crate::limits::PARSER_RECURSION_LIMIT)
                .with_tokens_with_locations(group.to_vec())
                .parse_statements()?,
        );
    }
    Ok(statements)
}

/// One expression, as a column's default or a CHECK keeps it.
pub fn parse_expr(sql: &str) -> Result<ast::Expr, SqlError> {
    Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(crate::limits::PARSER_RECURSION_LIMIT)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| SqlError::syntax(format!("syntax error in a stored expression: {e}")))
}

/// The keyword a token is, unless it is quoted (then it is a name).
fn keyword(t: &sqlparser::tokenizer::Token) -> Option<sqlparser::keywords::Keyword> {
    match t {
        sqlparser::tokenizer::Token::Word(w) if w.quote_style.is_none() => Some(w.keyword),
        _ => None,
    }
}

/// A statement's tokens without whitespace, comments or final semicolons:
/// what the parsers of statements sqlparser does not know read.
pub fn solid_tokens(sql: &str) -> Vec<sqlparser::tokenizer::Token> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let mut t: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    while t.last() == Some(&Token::SemiColon) {
        t.pop();
    }
    t
}

/// An unquoted word's text in lower case (`None` for anything else).
pub fn plain_word(t: Option<&sqlparser::tokenizer::Token>) -> Option<String> {
    match t? {
        sqlparser::tokenizer::Token::Word(w) if w.quote_style.is_none() => {
            Some(w.value.to_ascii_lowercase())
        }
        _ => None,
    }
}

/// Whether `hay` contains `needle` (ASCII, any case), without allocating.
pub fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// PostgreSQL spells a role with LOGIN `USER`: `CREATE USER`, `ALTER USER`
/// and `DROP USER` are rewritten to the `ROLE` forms (adding `LOGIN` to a
/// `CREATE USER` that does not say `NOLOGIN`). `None` when `sql` has none.
pub(crate) fn rewrite_user_statements(sql: &str) -> Option<String> {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::{Token, Tokenizer};
    // Cheap test first: most statements are not these.
    if !contains_ignore_case(sql, "user") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant = |t: &Token| !matches!(t, Token::Whitespace(_));
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len() + 2);
    let mut changed = false;
    let mut start = 0;
    while start < tokens.len() {
        let end = tokens[start..]
            .iter()
            .position(|t| matches!(t, Token::SemiColon))
            .map_or(tokens.len(), |p| start + p + 1);
        let stmt = &tokens[start..end];
        let words: Vec<(usize, &Token)> = stmt
            .iter()
            .enumerate()
            .filter(|(_, t)| significant(t))
            .collect();
        let verb = words.first().and_then(|(_, t)| keyword(t));
        let is_user = words.get(1).and_then(|(_, t)| keyword(t)) == Some(Keyword::USER);
        if is_user && matches!(verb, Some(Keyword::CREATE | Keyword::ALTER | Keyword::DROP)) {
            changed = true;
            let says_login = stmt
                .iter()
                .any(|t| matches!(keyword(t), Some(Keyword::LOGIN | Keyword::NOLOGIN)));
            // The role's name: the first word after USER (and IF [NOT] EXISTS).
            let name_at = words
                .iter()
                .skip(2)
                .find(|(_, t)| {
                    !matches!(
                        keyword(t),
                        Some(Keyword::IF | Keyword::NOT | Keyword::EXISTS)
                    )
                })
                .map(|(i, _)| *i);
            // Options may come in any order: LOGIN goes after the last word.
            let last_word = words
                .iter()
                .rev()
                .find(|(_, t)| !matches!(t, Token::SemiColon))
                .map(|(i, _)| *i);
            for (i, t) in stmt.iter().enumerate() {
                if i == words[1].0 {
                    out.push(Token::make_keyword("ROLE"));
                } else {
                    out.push(t.clone());
                }
                if verb == Some(Keyword::CREATE)
                    && !says_login
                    && name_at.is_some()
                    && Some(i) == last_word
                {
                    out.push(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space));
                    out.push(Token::make_keyword("LOGIN"));
                }
            }
        } else {
            out.extend(stmt.iter().cloned());
        }
        start = end;
    }
    changed.then(|| out.iter().map(|t| t.to_string()).collect())
}

/// PostgreSQL takes a sequence's options (`CREATE SEQUENCE`, an identity
/// column's `( ... )`) in any order; the parser only in one (INCREMENT,
/// MINVALUE, MAXVALUE, START, CACHE, CYCLE, OWNED BY). pg_dump writes
/// START first. The options are put in the parser's order; `None` when
/// `sql` has none to move.
pub(crate) fn reorder_sequence_options(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::{Token, Tokenizer};
    if !contains_ignore_case(sql, "sequence") && !contains_ignore_case(sql, "identity") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    // The rank of an option starting at `k` (after `NO` for `NO x`).
    let rank = |k: Keyword| match k {
        Keyword::INCREMENT => Some(0),
        Keyword::MINVALUE => Some(1),
        Keyword::MAXVALUE => Some(2),
        Keyword::START => Some(3),
        Keyword::CACHE => Some(4),
        Keyword::CYCLE => Some(5),
        Keyword::OWNED => Some(6),
        _ => None,
    };
    // The option regions: (start, end) token ranges.
    let mut regions: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match keyword(&tokens[i]) {
            Some(Keyword::SEQUENCE) => {
                let end = tokens[i..]
                    .iter()
                    .position(|t| matches!(t, Token::SemiColon))
                    .map_or(tokens.len(), |p| i + p);
                let start = (i + 1..end).find(|&j| {
                    keyword(&tokens[j]).and_then(rank).is_some()
                        || (keyword(&tokens[j]) == Some(Keyword::NO)
                            && tokens[j + 1..end]
                                .iter()
                                .find(|t| !matches!(t, Token::Whitespace(_)))
                                .and_then(keyword)
                                .and_then(rank)
                                .is_some())
                });
                if let Some(start) = start {
                    regions.push((start, end));
                }
                i = end;
            }
            Some(Keyword::IDENTITY) => {
                let open =
                    (i + 1..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)));
                if let Some(open) = open.filter(|&j| matches!(tokens[j], Token::LParen)) {
                    let close = (open..tokens.len()).find(|&j| matches!(tokens[j], Token::RParen));
                    if let Some(close) = close {
                        regions.push((open + 1, close));
                        i = close;
                    }
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    let mut changed = false;
    let mut out: Vec<String> = Vec::new();
    let mut at = 0;
    for (start, end) in regions {
        out.extend(tokens[at..start].iter().map(|t| t.to_string()));
        // Split the region into options, each starting at its keyword.
        let mut groups: Vec<(usize, Vec<&Token>)> = Vec::new();
        let mut after_no = false;
        for t in &tokens[start..end] {
            let k = keyword(t);
            let starts = match k {
                Some(Keyword::NO) => true,
                Some(k) => rank(k).is_some() && !after_no,
                None => false,
            };
            if !matches!(t, Token::Whitespace(_)) {
                after_no = k == Some(Keyword::NO);
            }
            if starts {
                groups.push((7, Vec::new()));
            }
            if let Some(g) = groups.last_mut() {
                if let Some(r) = k.and_then(rank) {
                    g.0 = g.0.min(r);
                }
                g.1.push(t);
            } else {
                out.push(t.to_string());
            }
        }
        let before: Vec<usize> = groups.iter().map(|g| g.0).collect();
        groups.sort_by_key(|g| g.0);
        changed |= groups.iter().map(|g| g.0).ne(before);
        for (_, g) in groups {
            out.push(" ".into());
            out.extend(g.iter().map(|t| t.to_string()));
        }
        at = end;
    }
    out.extend(tokens[at..].iter().map(|t| t.to_string()));
    changed.then(|| out.concat())
}

/// The parser has no `ALTER SEQUENCE`. PostgreSQL lets `ALTER TABLE`
/// name a sequence for the forms the two share (`RENAME TO`, `OWNER
/// TO`), so `ALTER SEQUENCE name ...` becomes `ALTER TABLE name ...`,
/// its options written as storage parameters: `SET (increment = 2,
/// restart = 'start', minvalue = 'none', owned_by = 't.c', ...)`. The
/// binder sees the relation is a sequence and makes
/// [`crate::plan::Ddl::AlterSequence`] of it. `None` when `sql` has none.
pub(crate) fn rewrite_alter_sequence(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    if !contains_ignore_case(sql, "sequence") {
        return None;
    }
    rewrite_statements(sql, |words| {
        let is_alter_sequence = words.len() > 2
            && keyword(words[0]) == Some(Keyword::ALTER)
            && keyword(words[1]) == Some(Keyword::SEQUENCE);
        is_alter_sequence
            .then(|| alter_sequence_as_table(&words[2..]))
            .flatten()
    })
}

/// The parser has no `ALTER TYPE name OWNER TO role` (pg_dump writes it
/// for each enum type): it becomes `ALTER TABLE name OWNER TO role`,
/// which changes the owner of whatever object has that name (a table,
/// view, sequence or type share one namespace). `None` when `sql` has
/// none.
pub(crate) fn rewrite_alter_type_owner(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    if !contains_ignore_case(sql, "owner") {
        return None;
    }
    rewrite_statements(sql, |words| {
        let owner_at = words.len().checked_sub(3)?;
        let is_it = words.len() > 5
            && keyword(words[0]) == Some(Keyword::ALTER)
            && keyword(words[1]) == Some(Keyword::TYPE)
            && keyword(words[owner_at]) == Some(Keyword::OWNER)
            && keyword(words[owner_at + 1]) == Some(Keyword::TO);
        is_it.then(|| {
            let rest: Vec<String> = words[2..].iter().map(|t| t.to_string()).collect();
            format!("ALTER TABLE {}", rest.join(" "))
        })
    })
}

/// The parser takes no `SEQUENCE NAME n` among an identity column's
/// options, which pg_dump always writes (`ALTER TABLE t ALTER COLUMN c ADD
/// GENERATED ... AS IDENTITY (SEQUENCE NAME n ...)`). The option goes;
/// the sequence gets the name Aqueduct gives (`t_c_seq`), renamed to `n`
/// by a statement that follows when `n` is another. `None` when `sql` has
/// none.
pub(crate) fn rewrite_identity_sequence_name(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::Token;
    if !contains_ignore_case(sql, "identity") || !contains_ignore_case(sql, "name") {
        return None;
    }
    let last_name = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_some() => w.value.clone(),
        Token::Word(w) => w.value.to_lowercase(),
        other => other.to_string(),
    };
    rewrite_statements(sql, |words| {
        // ALTER TABLE [ONLY] [IF EXISTS] name ALTER [COLUMN] c ADD GENERATED
        if keyword(words.first()?) != Some(Keyword::ALTER)
            || keyword(words.get(1)?) != Some(Keyword::TABLE)
        {
            return None;
        }
        let seq = (0..words.len().saturating_sub(1)).find(|&i| {
            keyword(words[i]) == Some(Keyword::SEQUENCE)
                && keyword(words[i + 1]) == Some(Keyword::NAME)
        })?;
        let mut at = 2;
        while matches!(
            keyword(words.get(at)?),
            Some(Keyword::ONLY | Keyword::IF | Keyword::EXISTS)
        ) {
            at += 1;
        }
        // The table's name: its last dotted part.
        let mut table = last_name(words.get(at)?);
        while matches!(words.get(at + 1), Some(Token::Period)) {
            at += 2;
            table = last_name(words.get(at)?);
        }
        at += 1;
        if keyword(words.get(at)?) != Some(Keyword::ALTER) {
            return None;
        }
        at += 1;
        if keyword(words.get(at)?) == Some(Keyword::COLUMN) {
            at += 1;
        }
        let column = last_name(words.get(at)?);
        // SEQUENCE NAME [schema.]n
        let mut end = seq + 2;
        let mut wanted = last_name(words.get(end)?);
        while matches!(words.get(end + 1), Some(Token::Period)) {
            end += 2;
            wanted = last_name(words.get(end)?);
        }
        let kept: Vec<String> = words[..seq]
            .iter()
            .chain(&words[end + 1..])
            .map(|t| t.to_string())
            .collect();
        let mut text = kept.join(" ");
        let given = format!("{table}_{column}_seq");
        if wanted != given {
            text.push_str(&format!(
                "; ALTER TABLE {} RENAME TO {}",
                aqueduct_expr::quote_ident(&given),
                aqueduct_expr::quote_ident(&wanted)
            ));
        }
        Some(text)
    })
}

/// Tokenizes `sql` and rewrites each statement `rewrite` has text for
/// (given its words: the tokens but white space and the `;`), keeping the
/// others as they are. `None` when it rewrites none.
fn rewrite_statements(
    sql: &str,
    rewrite: impl Fn(&[&sqlparser::tokenizer::Token]) -> Option<String>,
) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut out = String::with_capacity(sql.len() + 32);
    let mut changed = false;
    let mut start = 0;
    while start < tokens.len() {
        let end = tokens[start..]
            .iter()
            .position(|t| matches!(t, Token::SemiColon))
            .map_or(tokens.len(), |p| start + p + 1);
        let stmt = &tokens[start..end];
        let words: Vec<&Token> = stmt
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
            .collect();
        match rewrite(&words) {
            Some(text) => {
                changed = true;
                out.push_str(&text);
                if matches!(stmt.last(), Some(Token::SemiColon)) {
                    out.push(';');
                }
            }
            None => out.extend(stmt.iter().map(|t| t.to_string())),
        }
        start = end;
    }
    changed.then_some(out)
}

/// `ALTER TABLE ...` text for the words after `ALTER SEQUENCE`; `None`
/// when they are not an `ALTER SEQUENCE` (the parser then says why).
fn alter_sequence_as_table(words: &[&sqlparser::tokenizer::Token]) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::Token;
    let keyword = |i: usize| match words.get(i) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.keyword),
        _ => None,
    };
    let mut at = 0;
    let mut head = String::from("ALTER TABLE ");
    if keyword(0) == Some(Keyword::IF) && keyword(1) == Some(Keyword::EXISTS) {
        head.push_str("IF EXISTS ");
        at = 2;
    }
    // The name: words joined by periods.
    let mut name = String::new();
    loop {
        match words.get(at)? {
            Token::Word(w) => name.push_str(&Token::Word(w.clone()).to_string()),
            _ => return None,
        }
        at += 1;
        if matches!(words.get(at), Some(Token::Period)) {
            name.push('.');
            at += 1;
        } else {
            break;
        }
    }
    head.push_str(&name);
    // The forms ALTER TABLE has itself.
    if matches!(
        keyword(at),
        Some(Keyword::RENAME | Keyword::OWNER | Keyword::SET)
    ) {
        let rest: Vec<String> = words[at..].iter().map(|t| t.to_string()).collect();
        return Some(format!("{head} {}", rest.join(" ")));
    }
    let number = |at: &mut usize| -> Option<String> {
        let sign = match words.get(*at) {
            Some(Token::Minus) => {
                *at += 1;
                "-"
            }
            Some(Token::Plus) => {
                *at += 1;
                ""
            }
            _ => "",
        };
        match words.get(*at) {
            Some(Token::Number(n, _)) => {
                *at += 1;
                Some(format!("{sign}{n}"))
            }
            _ => None,
        }
    };
    let mut options: Vec<(&str, String)> = Vec::new();
    while at < words.len() {
        let k = keyword(at)?;
        at += 1;
        match k {
            Keyword::AS => match words.get(at) {
                Some(Token::Word(w)) => {
                    options.push(("as", format!("'{}'", w.value.to_lowercase())));
                    at += 1;
                }
                _ => return None,
            },
            Keyword::INCREMENT => {
                if keyword(at) == Some(Keyword::BY) {
                    at += 1;
                }
                options.push(("increment", number(&mut at)?));
            }
            Keyword::MINVALUE => options.push(("minvalue", number(&mut at)?)),
            Keyword::MAXVALUE => options.push(("maxvalue", number(&mut at)?)),
            Keyword::NO => {
                let what = keyword(at)?;
                at += 1;
                match what {
                    Keyword::MINVALUE => options.push(("minvalue", "'none'".into())),
                    Keyword::MAXVALUE => options.push(("maxvalue", "'none'".into())),
                    Keyword::CYCLE => options.push(("cycle", "false".into())),
                    _ => return None,
                }
            }
            Keyword::START => {
                if keyword(at) == Some(Keyword::WITH) {
                    at += 1;
                }
                options.push(("start", number(&mut at)?));
            }
            Keyword::RESTART => {
                if keyword(at) == Some(Keyword::WITH) {
                    at += 1;
                    options.push(("restart", number(&mut at)?));
                } else {
                    let n = number(&mut at).unwrap_or_else(|| "'start'".into());
                    options.push(("restart", n));
                }
            }
            Keyword::CACHE => options.push(("cache", number(&mut at)?)),
            Keyword::CYCLE => options.push(("cycle", "true".into())),
            Keyword::OWNED => {
                if keyword(at) != Some(Keyword::BY) {
                    return None;
                }
                at += 1;
                let mut owner = String::new();
                while let Some(Token::Word(w)) = words.get(at) {
                    match w.quote_style {
                        None => owner.push_str(&w.value.to_lowercase()),
                        Some(_) => owner.push_str(&w.value),
                    }
                    at += 1;
                    if matches!(words.get(at), Some(Token::Period)) {
                        owner.push('.');
                        at += 1;
                    } else {
                        break;
                    }
                }
                if owner.is_empty() {
                    return None;
                }
                options.push(("owned_by", format!("'{}'", owner.replace('\'', "''"))));
            }
            _ => return None,
        }
    }
    if options.is_empty() {
        return None;
    }
    let options: Vec<String> = options
        .into_iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    Some(format!("{head} SET ({})", options.join(", ")))
}

/// The parser has no `SET CONSTRAINTS {ALL | name, ...} {DEFERRED |
/// IMMEDIATE}`: it becomes `SET CONSTRAINTS TO ALL|'name', ..., deferred`
/// (names as string literals, `ALL` as a word, the mode last), which the
/// binder makes [`crate::plan::Plan::SetConstraints`] of. `None` when `sql`
/// has none.
pub(crate) fn rewrite_set_constraints(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::Token;
    if !contains_ignore_case(sql, "constraints") {
        return None;
    }
    rewrite_statements(sql, |words| {
        (words.len() >= 4
            && keyword(words[0]) == Some(Keyword::SET)
            && matches!(words[1], Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("constraints")))
        .then(|| {
            let mode = match keyword(words[words.len() - 1])? {
                Keyword::DEFERRED => "deferred",
                Keyword::IMMEDIATE => "immediate",
                _ => return None,
            };
            let targets = &words[2..words.len() - 1];
            let mut values: Vec<String> = Vec::new();
            if targets.len() == 1 && keyword(targets[0]) == Some(Keyword::ALL) {
                values.push("ALL".into());
            } else {
                for (i, t) in targets.iter().enumerate() {
                    match (i % 2, t) {
                        (0, Token::Word(w)) => {
                            let name = match w.quote_style {
                                None => w.value.to_lowercase(),
                                Some(_) => w.value.clone(),
                            };
                            values.push(format!("'{}'", name.replace('\'', "''")));
                        }
                        (1, Token::Comma) => {}
                        _ => return None,
                    }
                }
            }
            values.push(format!("'{mode}'"));
            Some(format!("SET CONSTRAINTS TO {}", values.join(", ")))
        })
        .flatten()
    })
}

/// PostgreSQL's `VACUUM [FULL] [FREEZE] [VERBOSE] [ANALYZE] [(options)]
/// [table [, ...]]` (pgbench sends `vacuum analyze t`): the parser takes
/// only `VACUUM [table]`, so the options are dropped (they change nothing
/// here: rows are never left behind to vacuum, and there are no planner
/// statistics) and the first table kept, for the binder to check.
pub(crate) fn rewrite_vacuum(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::Token;
    if !contains_ignore_case(sql, "vacuum") {
        return None;
    }
    rewrite_statements(sql, |words| {
        if words.first().and_then(|w| keyword(w)) != Some(Keyword::VACUUM) {
            return None;
        }
        let mut at = 1;
        // `VACUUM (ANALYZE, VERBOSE) t`.
        if matches!(words.get(at), Some(Token::LParen)) {
            let close = words.iter().position(|t| matches!(t, Token::RParen))?;
            at = close + 1;
        }
        while words.get(at).and_then(|w| keyword(w)).is_some_and(|k| {
            matches!(
                k,
                Keyword::FULL | Keyword::FREEZE | Keyword::VERBOSE | Keyword::ANALYZE
            )
        }) {
            at += 1;
        }
        let mut table = String::new();
        while let Some(t) = words.get(at) {
            match t {
                Token::Word(_) | Token::Period => table.push_str(&t.to_string()),
                _ => break,
            }
            at += 1;
        }
        Some(if table.is_empty() {
            "VACUUM".to_string()
        } else {
            format!("VACUUM {table}")
        })
    })
}

/// The parser has no `INSERT INTO t [(cols)] OVERRIDING SYSTEM VALUE ...`
/// (pg_dump writes it for identity columns): it becomes `INSERT OVERWRITE
/// INTO t ...`, whose flag the binder reads as overriding the identity.
/// `None` when `sql` has none.
pub(crate) fn rewrite_overriding(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::{Token, Tokenizer};
    if !contains_ignore_case(sql, "overriding") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let mut drop = vec![false; tokens.len()];
    let mut overwrite_after: Vec<usize> = Vec::new();
    let mut insert_at: Option<usize> = None;
    let word = |n: usize, text: &str| {
        significant.get(n).is_some_and(|&j| {
            matches!(&tokens[j], Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text))
        })
    };
    for (n, &i) in significant.iter().enumerate() {
        if keyword(&tokens[i]) == Some(Keyword::INSERT) {
            insert_at = Some(i);
        } else if word(n, "overriding") && word(n + 1, "system") && word(n + 2, "value") {
            if let Some(at) = insert_at.take() {
                for k in 0..3 {
                    drop[significant[n + k]] = true;
                }
                overwrite_after.push(at);
            }
        }
        if matches!(tokens[i], Token::SemiColon) {
            insert_at = None;
        }
    }
    if overwrite_after.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(sql.len());
    for (i, t) in tokens.iter().enumerate() {
        if !drop[i] {
            out.push_str(&t.to_string());
        }
        if overwrite_after.contains(&i) {
            out.push_str(" OVERWRITE");
        }
    }
    Some(out)
}

/// `COPY` options sqlparser does not take as PostgreSQL writes them:
/// `FORCE_QUOTE *` and the older `CSV FORCE QUOTE *` (sqlparser takes only
/// column names there, so `*` becomes the one quoted name `"*"`, which
/// `copy.rs` reads as every column: a column really called `*` is then
/// quoted with all the others), and `FREEZE` / `HEADER` with `on`, `off`,
/// `1` or `0` (pgbench sends `FREEZE ON`), which become `TRUE` / `FALSE`.
/// `None` when `sql` has none.
pub(crate) fn rewrite_copy_options(sql: &str) -> Option<String> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::{Token, Tokenizer};
    if !contains_ignore_case(sql, "copy") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let mut replace: Vec<(usize, &str)> = Vec::new();
    let mut in_copy = false;
    let mut first = true;
    for (n, &i) in significant.iter().enumerate() {
        if first {
            in_copy = keyword(&tokens[i]) == Some(Keyword::COPY);
            first = false;
        }
        if matches!(tokens[i], Token::SemiColon) {
            first = true;
            continue;
        }
        if !in_copy || n == 0 {
            continue;
        }
        let before = keyword(&tokens[significant[n - 1]]);
        if matches!(before, Some(Keyword::FREEZE | Keyword::HEADER)) {
            let value = match &tokens[i] {
                Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_lowercase(),
                Token::Number(n, _) => n.clone(),
                _ => continue,
            };
            match value.as_str() {
                "on" | "1" => replace.push((i, "TRUE")),
                "off" | "0" => replace.push((i, "FALSE")),
                _ => {}
            }
            continue;
        }
        if !matches!(tokens[i], Token::Mul) {
            continue;
        }
        if before == Some(Keyword::FORCE_QUOTE) {
            replace.push((i, "(\"*\")"));
        } else if before == Some(Keyword::QUOTE)
            && n >= 2
            && keyword(&tokens[significant[n - 2]]) == Some(Keyword::FORCE)
        {
            replace.push((i, "\"*\""));
        }
    }
    if replace.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(sql.len() + 8);
    for (i, t) in tokens.iter().enumerate() {
        match replace.iter().find(|(at, _)| *at == i) {
            Some((_, with)) => out.push_str(with),
            None => out.push_str(&t.to_string()),
        }
    }
    Some(out)
}

/// The SELECT inside `CREATE [MATERIALIZED] VIEW name AS SELECT ...`.
pub fn view_query(sql: &str) -> Result<Box<ast::Query>, SqlError> {
    let mut statements = parse(sql)?;
    match statements.pop() {
        Some(ast::Statement::CreateView(cv)) => Ok(cv.query),
        Some(ast::Statement::Query(q)) => Ok(q),
        _ => Err(SqlError::syntax("a view is defined by one SELECT")),
    }
}

/// Parses a parameter sent in text format for a parameter of type `ty`.
pub fn param_from_text(
    text: &str,
    ty: &aqueduct_values::DataType,
) -> Result<aqueduct_values::Value, SqlError> {
    Ok(aqueduct_values::Value::Text(text.to_string()).coerce(ty)?)
}
