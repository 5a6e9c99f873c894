//! Limits that keep one statement from taking the server down, in one
//! place, with the arithmetic that says they fit together.
//!
//! **Stack.** Statements are trees, and the code that walks them (the SQL
//! parser, the binder, the view compiler, expression evaluation, and the
//! compiler-generated `Drop`, `Clone`, `Debug` and `PartialEq` of syntax
//! trees and bound expressions) recurses once per level. Three rules keep
//! every walk inside its thread's stack:
//!
//! 1. A statement nested deeper than [`MAX_STATEMENT_DEPTH`] levels is
//!    refused right after parsing (SQLSTATE 54001, `statement too complex`),
//!    before anything else walks it.
//! 2. Walks of ours with large frames (the binder's are tens of KiB per
//!    level in a debug build) call [`grow`] at each level: when less than
//!    [`STACK_RED_ZONE_BYTES`] remain, the walk continues on a new stack
//!    segment of [`STACK_SEGMENT_BYTES`] taken from the heap.
//! 3. Everything else — the derived recursions of the syntax tree, whose
//!    frames we do not control — fits in [`STATEMENT_STACK_BYTES`], which a
//!    statement is guaranteed by [`with_statement_stack`]: front ends run
//!    statements on threads of [`SERVER_THREAD_STACK_BYTES`], and a caller on
//!    a smaller stack gets a new one for the statement.
//!
//! The per-level cost of rule 3 was measured in a debug build (CI runs the
//! tests unoptimised; release frames are smaller), and
//! `crates/sql/tests/limits.rs` runs statements at the depth limit from a
//! thread with a tiny stack, so [`STATEMENT_STACK_BYTES`] is exercised as
//! the whole budget.

use crate::SqlError;

/// Deepest nesting of one statement: operators in a chain (`1+1+...`,
/// `a AND b AND ...`, `x::int::text...`), parentheses, subqueries, `UNION`
/// arms, nested joins, each counting one level.
pub const MAX_STATEMENT_DEPTH: usize = 1_000;

/// Stack bytes one level of a statement may take in the walks that are not
/// of ours (derived `Drop`, `Clone`, `PartialEq`, `Debug`, the SQL
/// parser's visitor and `Display`). The costliest measured in a debug build
/// is the `Clone` of a `UNION` arm, 17.5 KiB; this leaves room to spare.
pub const STACK_BYTES_PER_LEVEL: usize = 32 * 1024;

/// Stack bytes one level of a syntax tree takes when it is dropped, for the
/// deeper trees the parser may build before they are refused
/// (`MAX_TOKEN_DEPTH_BOUND` in `aqueduct-sql`): measured at under 400 bytes
/// in a debug build.
pub const DROP_STACK_BYTES_PER_LEVEL: usize = 1024;

/// Stack bytes the walks of ours may use between two calls to [`grow`]
/// (the deepest chain of frames from one level to the next, a subquery
/// through the binder in a debug build, is well under this).
pub const STACK_RED_ZONE_BYTES: usize = 512 * 1024;

/// Size of each stack segment [`grow`] takes from the heap.
pub const STACK_SEGMENT_BYTES: usize = 4 * 1024 * 1024;

/// Stack a statement is guaranteed: every level of the deepest statement
/// allowed, plus the red zone for what runs around it.
/// (Address space only: a thread touches the pages a statement uses.)
pub const STATEMENT_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Stack size of the threads that run statements in the server (the async
/// runtime's workers and blocking pool, the dataflow worker): the statement
/// stack and 2 MiB for the front end's own frames below it.
pub const SERVER_THREAD_STACK_BYTES: usize = STATEMENT_STACK_BYTES + 2 * 1024 * 1024;

const _: () = {
    // The deepest statement fits the stack a statement is given, with the
    // red zone left for the frames of ours that run at its deepest level.
    assert!(
        MAX_STATEMENT_DEPTH * STACK_BYTES_PER_LEVEL + STACK_RED_ZONE_BYTES <= STATEMENT_STACK_BYTES
    );
    // A new segment has room for more than one red zone.
    assert!(STACK_SEGMENT_BYTES >= 2 * STACK_RED_ZONE_BYTES);
    // A server thread holds a whole statement stack above its own frames.
    assert!(SERVER_THREAD_STACK_BYTES > STATEMENT_STACK_BYTES);
};

/// Runs `f` (one statement) with at least [`STATEMENT_STACK_BYTES`] of
/// stack: on the caller's stack when that much remains, else on a new one.
pub fn with_statement_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STATEMENT_STACK_BYTES, STATEMENT_STACK_BYTES, f)
}

/// Runs one level of a deep walk: on a new stack segment when less than
/// [`STACK_RED_ZONE_BYTES`] remain.
#[inline]
pub fn grow<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STACK_RED_ZONE_BYTES, STACK_SEGMENT_BYTES, f)
}

/// SQLSTATE 54001 for a statement nested deeper than
/// [`MAX_STATEMENT_DEPTH`].
pub fn too_complex() -> SqlError {
    SqlError::new(
        "54001",
        format!(
            "statement too complex: it nests more than {MAX_STATEMENT_DEPTH} levels \
             (operators in a chain, parentheses, subqueries, JOIN ... ON chains or UNION arms)"
        ),
    )
    .with_hint(
        "split the statement, or write long chains as lists: \
         x IN (1, 2, ...) rather than x = 1 OR x = 2 OR ..., \
         sum over rows rather than a + b + ...",
    )
}

/// The most memory one compiled regular expression (`~`, `~*`) may take:
/// a pattern that needs more is refused instead of compiled.
pub const MAX_REGEX_BYTES: usize = 1024 * 1024;
