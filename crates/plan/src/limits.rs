//! The SQL layer's guards against statements that would exhaust the stack:
//! the depth check run on every parsed statement before anything else walks
//! it. The limits themselves are in [`aqueduct_expr::limits`].

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Query, Select, SetExpr, Statement, TableFactor, TableWithJoins, Visit, Visitor,
};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, TokenWithSpan};

pub use aqueduct_expr::interrupt::{Interrupt, DEFAULT_STATEMENT_MEMORY_BYTES};
pub use aqueduct_expr::limits::*;

/// A size setting: a number of bytes, or with a unit `kB`, `MB`, `GB`, `TB`
/// (powers of 1024, as PostgreSQL's memory settings); 0 turns the limit off.
pub fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "kB" | "KB" => 10,
        "MB" => 20,
        "GB" => 30,
        "TB" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// A duration setting: `5s`, `250ms`, `1min`, `1h`, or a number of
/// milliseconds (as PostgreSQL's `statement_timeout`).
pub fn parse_duration(v: &str) -> Option<std::time::Duration> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit.trim() {
        "" | "ms" => n,
        "s" => n.checked_mul(1000)?,
        "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(ms))
}

/// Most columns (or expressions) of one index, primary key or unique
/// constraint, and most keys of one foreign key: PostgreSQL's limit, which
/// its `max_index_keys` setting reports (drivers read it to list keys).
pub const MAX_INDEX_KEYS: usize = 32;

/// SQLSTATE 54011 for an index or key of more than [`MAX_INDEX_KEYS`]
/// columns, as PostgreSQL words it.
pub fn check_index_keys(n: usize) -> Result<(), aqueduct_expr::SqlError> {
    if n > MAX_INDEX_KEYS {
        return Err(aqueduct_expr::SqlError::new(
            "54011",
            format!("cannot use more than {MAX_INDEX_KEYS} columns in an index"),
        ));
    }
    Ok(())
}

/// SQLSTATE 54011 for a foreign key of more than [`MAX_INDEX_KEYS`] keys.
pub fn check_foreign_key_keys(n: usize) -> Result<(), aqueduct_expr::SqlError> {
    if n > MAX_INDEX_KEYS {
        return Err(aqueduct_expr::SqlError::new(
            "54011",
            format!("cannot have more than {MAX_INDEX_KEYS} keys in a foreign key"),
        ));
    }
    Ok(())
}

/// Recursion limit given to the SQL parser: its recursive descent (nested
/// parentheses, unary operators, subqueries) stops here. Each level of
/// nesting takes at least one of its recursive calls and at least one level
/// of [`MAX_STATEMENT_DEPTH`], so it never refuses a statement the depth
/// check would accept by much; the parser grows its own stack on the heap
/// as it recurses.
pub const PARSER_RECURSION_LIMIT: usize = 2 * MAX_STATEMENT_DEPTH;

/// Most relations one `FROM` clause may join (tables, views, subqueries and
/// functions, whether listed with commas or `JOIN`): compiling a join plan
/// takes time and memory that grow faster than the number of its
/// relations, so a statement of thousands of joins would hold a thread for
/// hours. Relations of subqueries and of `UNION` arms count in their own
/// `FROM` clauses.
pub const MAX_JOINED_RELATIONS: usize = 500;

/// SQLSTATE 54001 for a `FROM` clause of more than
/// [`MAX_JOINED_RELATIONS`] relations.
pub fn too_many_relations(n: usize) -> aqueduct_expr::SqlError {
    aqueduct_expr::SqlError::new(
        "54001",
        format!(
            "statement too complex: one FROM clause joins {n} relations, \
             more than the limit of {MAX_JOINED_RELATIONS}"
        ),
    )
    .with_hint(
        "join fewer relations at once: split the statement, or name part \
         of the join as a view and read from it",
    )
}

/// The relations `select`'s `FROM` clause joins, nested joins included,
/// counted without recursion.
fn joined_relations(select: &Select) -> usize {
    let mut n = 0;
    let mut open: Vec<&TableWithJoins> = select.from.iter().collect();
    while let Some(t) = open.pop() {
        for f in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            match f {
                // Brackets around a join: its relations count here.
                TableFactor::NestedJoin {
                    table_with_joins, ..
                } => open.push(table_with_joins),
                _ => n += 1,
            }
        }
    }
    n
}

/// Largest bound [`check_tokens`] lets through to the parser: the depth of
/// any tree the parser can build from the text (even one it then refuses as
/// a syntax error) is at most this, so dropping it fits the statement stack.
/// A multiple of [`MAX_STATEMENT_DEPTH`] because the bound counts every
/// token of a chain (`a = 1 OR` is four tokens for one level).
pub const MAX_TOKEN_DEPTH_BOUND: usize = 8 * MAX_STATEMENT_DEPTH;

const _: () = assert!(
    MAX_TOKEN_DEPTH_BOUND * DROP_STACK_BYTES_PER_LEVEL + STACK_RED_ZONE_BYTES
        <= STATEMENT_STACK_BYTES,
    "a refused tree of the largest bound is dropped within the statement stack"
);

/// Refuses (SQLSTATE 54001), before parsing, text from which the parser
/// could build a tree deeper than [`MAX_TOKEN_DEPTH_BOUND`]: the parser
/// builds chains of infix operators and `UNION` arms in loops, not by
/// recursion, so only the text bounds their depth, and the tree would be
/// too deep to walk — even to drop — before [`check_depth`] saw it.
///
/// The bound, in one pass without recursion: a group (parentheses,
/// brackets, `CASE ... END`, or a whole statement) is split into regions by
/// commas (`WHEN`/`THEN`/`ELSE` in `CASE`); a root-to-leaf path of the tree
/// meets each token of a region at most once and enters at most one inner
/// group of it, so a region's depth is at most its own tokens plus its
/// deepest inner group. A group is its deepest region, plus its set
/// operations (`UNION` arms span commas), plus a few levels of wrappers.
pub fn check_tokens(tokens: &[TokenWithSpan]) -> Result<(), aqueduct_expr::SqlError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Statement,
        Paren,
        Bracket,
        Case,
    }
    struct Group {
        kind: Kind,
        /// The deepest region closed so far.
        best: usize,
        /// Tokens of the open region.
        tokens: usize,
        /// Its deepest inner group.
        inner: usize,
        /// Set operations of the whole group.
        sets: usize,
    }
    /// Levels a group may add besides its tokens (an expression, a
    /// subquery's query, select and select item, a nested join).
    const WRAPPERS: usize = 4;
    fn open(kind: Kind) -> Group {
        Group {
            kind,
            best: 0,
            tokens: 0,
            inner: 0,
            sets: 0,
        }
    }
    fn bound(g: &Group) -> usize {
        g.best.max(g.tokens + g.inner) + g.sets + WRAPPERS
    }
    fn close(groups: &mut Vec<Group>) -> Result<usize, aqueduct_expr::SqlError> {
        let g = groups.pop().expect("a group is open");
        let b = bound(&g);
        if b > MAX_TOKEN_DEPTH_BOUND {
            return Err(too_complex());
        }
        if let Some(parent) = groups.last_mut() {
            parent.inner = parent.inner.max(b);
        }
        Ok(b)
    }
    let mut groups = vec![open(Kind::Statement)];
    for t in tokens {
        let top = groups.last_mut().expect("the statement group stays open");
        match &t.token {
            Token::Whitespace(_) | Token::EOF => {}
            Token::Comma => {
                top.best = top.best.max(top.tokens + top.inner);
                top.tokens = 0;
                top.inner = 0;
            }
            Token::SemiColon => {
                while groups.len() > 1 {
                    close(&mut groups)?;
                }
                close(&mut groups)?;
                groups.push(open(Kind::Statement));
            }
            Token::LParen => groups.push(open(Kind::Paren)),
            Token::LBracket => groups.push(open(Kind::Bracket)),
            Token::RParen if top.kind == Kind::Paren => {
                close(&mut groups)?;
            }
            Token::RBracket if top.kind == Kind::Bracket => {
                close(&mut groups)?;
            }
            Token::Word(w) => match w.keyword {
                Keyword::CASE => {
                    top.tokens += 1;
                    groups.push(open(Kind::Case));
                }
                Keyword::END if top.kind == Kind::Case => {
                    close(&mut groups)?;
                }
                Keyword::WHEN | Keyword::THEN | Keyword::ELSE if top.kind == Kind::Case => {
                    top.best = top.best.max(top.tokens + top.inner);
                    top.tokens = 0;
                    top.inner = 0;
                }
                Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT | Keyword::MINUS => {
                    top.sets += 1;
                }
                _ => top.tokens += 1,
            },
            _ => top.tokens += 1,
        }
        let top = groups.last().expect("the statement group stays open");
        if top.tokens + top.inner + top.sets > MAX_TOKEN_DEPTH_BOUND {
            return Err(too_complex());
        }
    }
    while !groups.is_empty() {
        close(&mut groups)?;
    }
    Ok(())
}

/// Refuses (SQLSTATE 54001) a statement nested deeper than
/// [`MAX_STATEMENT_DEPTH`], or with a `FROM` clause of more than
/// [`MAX_JOINED_RELATIONS`] relations.
///
/// The parser builds chains of infix operators (`1+1+...`) and of `UNION`
/// arms in loops, so their depth is bounded only by the length of the text;
/// this check runs before any other walk of the tree. It walks with the
/// parser's visitor, which calls back at each expression, query, `SELECT`,
/// table factor and statement before descending, so it stops at the first
/// level past the limit; the one chain the visitor descends without a call
/// back, `UNION`/`INTERSECT`/`EXCEPT` arms, is measured without recursion
/// when its query is entered.
pub fn check_depth(statement: &Statement) -> Result<(), aqueduct_expr::SqlError> {
    let mut depth = Depth::default();
    match statement.visit(&mut depth) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(match depth.relations {
            Some(n) => too_many_relations(n),
            None => too_complex(),
        }),
    }
}

#[derive(Default)]
struct Depth {
    depth: usize,
    /// Levels each open query added (itself and its set-operation chain).
    queries: Vec<usize>,
    /// Set when the walk stopped at a `FROM` clause of too many relations.
    relations: Option<usize>,
}

impl Depth {
    fn enter(&mut self, levels: usize) -> ControlFlow<()> {
        self.depth += levels;
        if self.depth > MAX_STATEMENT_DEPTH {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn leave(&mut self, levels: usize) -> ControlFlow<()> {
        self.depth -= levels;
        ControlFlow::Continue(())
    }
}

/// The longest path of set operations from `body` down, without recursion.
fn set_operation_depth(body: &SetExpr) -> usize {
    let mut deepest = 0;
    let mut open = vec![(body, 0usize)];
    while let Some((node, depth)) = open.pop() {
        deepest = deepest.max(depth);
        if let SetExpr::SetOperation { left, right, .. } = node {
            open.push((left, depth + 1));
            open.push((right, depth + 1));
        }
    }
    deepest
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let levels = 1 + set_operation_depth(&query.body);
        self.queries.push(levels);
        self.enter(levels)
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
        let levels = self.queries.pop().unwrap_or(0);
        self.leave(levels)
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        let n = joined_relations(select);
        if n > MAX_JOINED_RELATIONS {
            self.relations = Some(n);
            return ControlFlow::Break(());
        }
        self.enter(1)
    }

    fn post_visit_select(&mut self, _select: &Select) -> ControlFlow<()> {
        self.leave(1)
    }

    fn pre_visit_table_factor(&mut self, _t: &TableFactor) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_table_factor(&mut self, _t: &TableFactor) -> ControlFlow<()> {
        self.leave(1)
    }

    fn pre_visit_expr(&mut self, _e: &Expr) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_expr(&mut self, _e: &Expr) -> ControlFlow<()> {
        self.leave(1)
    }

    fn pre_visit_statement(&mut self, _s: &Statement) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_statement(&mut self, _s: &Statement) -> ControlFlow<()> {
        self.leave(1)
    }
}

/// Largest SQL text accepted in one query message.
pub const MAX_SQL_BYTES: usize = 4 * 1024 * 1024;
/// Largest number of parameters in one statement (the wire protocol's limit).
pub const MAX_PARAMS: usize = 65_535;
/// Prepared statements a session remembers as having passed their
/// privilege check (at the same catalog version); past it the memory is
/// cleared and statements are checked again as they run.
pub const MAX_AUTHORIZED_PREPARED: usize = 4096;
/// Largest number of rows one `INSERT ... VALUES` may carry.
pub const MAX_INSERT_ROWS: usize = 100_000;
/// Rows one statement may change, its own and those its foreign keys'
/// `CASCADE`, `SET NULL` and `SET DEFAULT` actions change in turn: the
/// cascade is a loop over a work list, bounded by this.
pub const MAX_CASCADED_ROWS: usize = 1_000_000;
/// Rows `COPY ... FROM STDIN` decodes before it writes them into its
/// transaction: the data streams through in chunks of this many rows, so
/// what a COPY holds until its commit is its transaction's writes, which
/// are bounded by the log one commit may append (`MAX_BATCH_BYTES`,
/// checked as they grow: `Txn::check_size`).
pub const COPY_CHUNK_ROWS: usize = 10_000;
/// Largest row `COPY ... FROM STDIN` reads (a line of text or CSV, a
/// tuple of binary data): what it buffers of a row still arriving. A
/// binary field that says it is larger is invalid at once. One row of the
/// log's largest body ([`aqueduct_tables::MAX_BODY_BYTES`]) fits.
pub const MAX_COPY_ROW_BYTES: usize = 2 * aqueduct_tables::MAX_BODY_BYTES;

const _: () = assert!(
    MAX_COPY_ROW_BYTES < aqueduct_tables::MAX_BATCH_BYTES && COPY_CHUNK_ROWS <= MAX_INSERT_ROWS,
    "a row COPY buffers fits one commit, and a chunk is no larger than an INSERT may be"
);
