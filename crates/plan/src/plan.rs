//! The plans the binder makes and direct evaluation, the view compiler
//! and the session's router read: a leaf of the crate (it imports nothing
//! of the crate), so every module can use them.

use aqueduct_expr::agg::AggFunc;
use aqueduct_expr::{Expr, SqlError};
use aqueduct_tables::{SequenceDef, TableId, TableSchema};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

/// A result column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: DataType,
    /// The table it comes from (0 if computed) and its position there (1-based, 0 if none).
    pub table_id: u64,
    pub column_id: i16,
}

impl Column {
    pub fn computed(name: impl Into<String>, ty: DataType) -> Column {
        Column {
            name: name.into(),
            ty,
            table_id: 0,
            column_id: 0,
        }
    }
}

/// What a statement produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Rows, with the command tag to send after them (`SELECT 3`, `INSERT 0 1`).
    Rows {
        columns: Vec<Column>,
        rows: Vec<Vec<Value>>,
        tag: String,
    },
    /// A command without rows, with its tag (`CREATE TABLE`, `UPDATE 2`).
    Command { tag: String },
    /// An empty query string.
    Empty,
    /// `COPY ... FROM STDIN` began: the session waits for the data
    /// (`Session::copy_in_data`, then `copy_in_done` or `copy_in_fail`);
    /// the front end asks the client for it (CopyInResponse).
    CopyIn {
        /// Binary format (else text: text and CSV).
        binary: bool,
        /// Columns each row carries.
        columns: usize,
    },
    /// `COPY ... TO STDOUT`: the encoded data, in chunks of about
    /// `COPY_OUT_CHUNK_BYTES` (CopyOutResponse, CopyData each, CopyDone).
    CopyOut {
        /// Binary format (else text: text and CSV).
        binary: bool,
        /// Columns each row carries.
        columns: usize,
        /// The data, in the order it is sent.
        chunks: Vec<Vec<u8>>,
        /// The command tag (`COPY 3`).
        tag: String,
    },
}

/// A bound statement.
#[derive(Clone, Debug)]
pub struct Bound {
    pub plan: Plan,
    pub params: Vec<DataType>,
    pub columns: Vec<Column>,
    /// Whether binding read the statement's time (`now()`), the session's
    /// settings or its facts (`pg_backend_pid()`) into the plan. A plan
    /// that did not is the same for every execution against the same
    /// catalog, so a prepared statement may keep it.
    pub session_dependent: bool,
}

#[derive(Clone, Debug)]
pub enum Plan {
    Select(SelectPlan),
    /// `SELECT` without `FROM`.
    Values(Vec<Expr>),
    Catalog(CatalogPlan),
    Insert(InsertPlan),
    Update(UpdatePlan),
    Delete(DeletePlan),
    /// `TRUNCATE`: a write like `DELETE`, so it runs inside transactions.
    Truncate(TruncatePlan),
    Ddl(Ddl),
    /// `BEGIN [ISOLATION LEVEL ...]`: the level, when it names one.
    Begin {
        isolation: Option<aqueduct_tables::Isolation>,
    },
    Commit,
    Rollback,
    /// `SAVEPOINT name`.
    Savepoint {
        name: String,
    },
    /// `RELEASE [SAVEPOINT] name`.
    ReleaseSavepoint {
        name: String,
    },
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackTo {
        name: String,
    },
    Set {
        name: String,
        value: Option<String>,
        /// `SET LOCAL`: until the transaction block ends.
        local: bool,
    },
    /// `VACUUM` and `ANALYZE`: nothing to do (no dead rows, no planner
    /// statistics); the command tag.
    Maintenance {
        tag: &'static str,
    },
    /// `LOCK TABLE ... IN ACCESS SHARE | ROW SHARE | ROW EXCLUSIVE MODE`
    /// inside a transaction block: these modes conflict only with schema
    /// changes, which a transaction's commit check already orders, so
    /// the lock is granted at once (pg_dump takes ACCESS SHARE).
    LockTables,
    /// `SELECT set_config(name, value, false) [FROM ... WHERE ...]`:
    /// `SET name = value` for each row of `rows` (a query whose columns
    /// are the name and the value; one row of constants without FROM),
    /// answering each new value.
    /// `RESET ALL`: every setting back to its default.
    ResetAll,
    SetConfig {
        rows: Box<ast::Query>,
        /// `is_local` true: as `SET LOCAL`.
        local: bool,
    },
    /// `SET CONSTRAINTS {ALL | names} {DEFERRED | IMMEDIATE}` (`names`
    /// `None` for ALL).
    SetConstraints {
        names: Option<Vec<String>>,
        deferred: bool,
    },
    Show {
        name: String,
    },
    /// `DEALLOCATE name | ALL`: the front end owns prepared statements; the
    /// session only acknowledges.
    Deallocate {
        name: String,
    },
    ShowViews,
    /// `SHOW CONSUMERS`: the change feed's durable consumers.
    ShowConsumers,
    /// `EXPLAIN`: how a statement is answered, and its dataflow (as
    /// Graphviz DOT with `EXPLAIN (FORMAT DOT)`).
    Explain {
        statement: Box<ast::Statement>,
        dot: bool,
    },
    /// `COPY ... FROM STDIN` or `COPY ... TO STDOUT` (`copy.rs`).
    Copy(CopyPlan),
    /// `SELECT ... FROM a JOIN b ... FOR UPDATE [OF a]`: a query that
    /// needs the dataflow and locks the rows it reads of some tables.
    JoinLocking(JoinLocking),
    /// A query direct evaluation does not answer (it reads one base table
    /// at most): decided from its shape before anything else is bound, so
    /// it goes to the dataflow (an automatic view or one-shot evaluation).
    Dataflow(NeedsDataflow),
}

/// What makes a query need the dataflow rather than direct evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NeedsDataflow {
    /// `WITH ...`
    With,
    /// A subquery in an expression (`(SELECT ...)`, `EXISTS`, `IN`).
    Subquery,
    /// A set-returning function in the select list (`unnest(a)`).
    SetFunction,
    /// `UNION`, `EXCEPT`, `INTERSECT`
    SetOperation(String),
    /// A query body other than a SELECT (`VALUES ...`, `TABLE t`).
    OtherBody(String),
    /// `WHERE`, `ORDER BY`, `LIMIT` or `OFFSET` without `FROM`.
    ClausesWithoutFrom,
    /// More than one item in `FROM`.
    SeveralRelations,
    /// A `JOIN`.
    Join,
    /// A subquery, nested join or table function in `FROM`.
    FromItem,
    /// A relation that is not a base table: a view, or no relation at all
    /// (the dataflow's compiler then says so).
    NotATable(String),
    /// A window function (`f(...) OVER (...)`).
    WindowFunction,
}

impl std::fmt::Display for NeedsDataflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NeedsDataflow::With => write!(f, "a WITH clause"),
            NeedsDataflow::Subquery => write!(f, "a subquery in an expression"),
            NeedsDataflow::SetFunction => write!(f, "a set-returning function in the select list"),
            NeedsDataflow::SetOperation(op) => write!(f, "{op} of queries"),
            NeedsDataflow::OtherBody(body) => {
                write!(f, "a query body that is not a SELECT ({body})")
            }
            NeedsDataflow::ClausesWithoutFrom => write!(f, "WHERE, ORDER BY or LIMIT without FROM"),
            NeedsDataflow::SeveralRelations => write!(f, "several relations in FROM"),
            NeedsDataflow::Join => write!(f, "a join"),
            NeedsDataflow::FromItem => write!(f, "a subquery or nested join in FROM"),
            NeedsDataflow::NotATable(name) => write!(f, "{name} is not a base table"),
            NeedsDataflow::WindowFunction => write!(f, "a window function"),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Ddl {
    CreateTable {
        schema: TableSchema,
        /// Sequences its `serial` and identity columns own (ids 0, and
        /// `owned_by` naming the table as 0: both given at creation).
        sequences: Vec<SequenceDef>,
        if_not_exists: bool,
    },
    DropTable {
        names: Vec<String>,
        if_exists: bool,
        /// Drop the views that depend on the tables too.
        cascade: bool,
    },
    CreateIndex {
        table: String,
        index: aqueduct_tables::IndexDef,
        /// For a unique index on expressions or a partial one: how the
        /// rows there are checked.
        check: Option<ExprUnique>,
        if_not_exists: bool,
    },
    DropIndex {
        names: Vec<String>,
        if_exists: bool,
    },
    CreateView {
        name: String,
        /// The whole `CREATE VIEW` statement, stored in the log.
        sql: String,
        if_not_exists: bool,
    },
    DropView {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
    CreateSequence {
        def: SequenceDef,
        if_not_exists: bool,
    },
    AlterTable(AlterTablePlan),
    AlterSequence {
        name: String,
        if_exists: bool,
        change: SequenceChange,
    },
    DropSequence {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `CREATE TYPE name AS ENUM (labels)`.
    CreateEnum {
        name: String,
        labels: Vec<String>,
    },
    AlterType {
        name: String,
        change: TypeChange,
    },
    DropType {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
    /// `COMMENT ON {TABLE | VIEW | SEQUENCE | TYPE} name IS text` and
    /// `COMMENT ON COLUMN table.column IS text` (`column` set); `text`
    /// `None` (`IS NULL` or `IS ''`) removes the comment.
    Comment {
        on: CommentOn,
        name: String,
        column: Option<String>,
        text: Option<String>,
    },
}

/// What kind of object `COMMENT ON` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommentOn {
    Table,
    View,
    Sequence,
    Type,
    Column,
}

impl CommentOn {
    pub fn kind(self) -> &'static str {
        match self {
            CommentOn::Table | CommentOn::Column => "table",
            CommentOn::View => "view",
            CommentOn::Sequence => "sequence",
            CommentOn::Type => "type",
        }
    }
}

/// What `ALTER TYPE` does to an enum type.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeChange {
    /// `ADD VALUE [IF NOT EXISTS] 'label' [BEFORE | AFTER 'label']`.
    AddValue {
        label: String,
        place: aqueduct_values::LabelPlace,
        if_not_exists: bool,
    },
    /// `RENAME TO name`.
    Rename(String),
}

/// What `ALTER SEQUENCE` changes; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SequenceChange {
    /// `AS type`.
    pub ty: Option<DataType>,
    pub increment: Option<i64>,
    /// `MINVALUE n`, or `NO MINVALUE` (`Some(None)`: the type's default).
    pub min: Option<Option<i64>>,
    pub max: Option<Option<i64>>,
    pub start: Option<i64>,
    /// `RESTART [WITH n]`: `Some(None)` restarts at the start value.
    pub restart: Option<Option<i64>>,
    pub cache: Option<i64>,
    /// `OWNED BY table.column` or `OWNED BY NONE` (`Some(None)`).
    pub owned_by: Option<Option<(String, String)>>,
    /// `RENAME TO name`.
    pub rename: Option<String>,
}

/// How rows are found.
#[derive(Clone, Debug, PartialEq)]
pub enum Access {
    Scan,
    /// Constant expressions for every primary-key column, in key order.
    PrimaryKey(Vec<Expr>),
    /// Several primary keys (a `col IN (...)` on a key column, the others
    /// pinned by equality): each as constant expressions in key order.
    PrimaryKeys(Vec<Vec<Expr>>),
    /// Constant expressions for the first columns of a composite primary
    /// key (not all of them): the rows whose keys start so, in key order.
    KeyPrefix(Vec<Expr>),
    /// Primary keys from an array (`key = ANY(array)`, the other key
    /// columns pinned by equality): constant expressions in key order, the
    /// one at `array_at` an array whose elements are one key each.
    PrimaryKeysOfArray {
        exprs: Vec<Expr>,
        array_at: usize,
    },
    /// Constant expressions for the columns of index `usize`.
    Index(usize, Vec<Expr>),
}

#[derive(Clone, Debug)]
pub struct Aggregate {
    pub func: AggFunc,
    pub arg: Option<Expr>,
    pub distinct: bool,
}

/// Grouping: output expressions are evaluated over `group values ++ aggregate values`.
#[derive(Clone, Debug)]
pub struct Grouping {
    pub keys: Vec<Expr>,
    pub aggregates: Vec<Aggregate>,
    pub having: Option<Expr>,
}

#[derive(Clone, Debug)]
pub struct SortKey {
    /// Evaluated over the output row.
    pub expr: Expr,
    pub desc: bool,
    pub nulls_first: bool,
}

/// A SELECT's clauses after FROM, bound over the FROM's rows.
#[derive(Clone, Debug)]
pub struct SelectBody {
    pub filter: Option<Expr>,
    pub grouping: Option<Grouping>,
    /// Output expressions (over the input row, or over the grouped row).
    pub outputs: Vec<Expr>,
    /// Hidden sort columns are appended to `outputs` and removed after sorting.
    pub visible: usize,
    pub order_by: Vec<SortKey>,
    pub distinct: bool,
    pub limit: Option<Expr>,
    pub offset: Option<Expr>,
    /// Window functions, evaluated after WHERE, GROUP BY and HAVING over
    /// the rows they leave (the input row, or the grouped row: keys then
    /// aggregates); the value of window function `i` is column
    /// `width + i` of the row `outputs` read, `width` that row's width.
    /// Only the dataflow evaluates them.
    pub windows: Vec<WindowItem>,
}

/// One window function of a SELECT with its window.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowItem {
    pub partition: Vec<Expr>,
    pub order: Vec<aqueduct_dataflow::ops::WindowOrder>,
    pub frame: aqueduct_dataflow::ops::FrameEnd,
    pub call: aqueduct_dataflow::ops::WindowCall,
}

/// A SELECT over one base table, as direct evaluation runs it.
#[derive(Clone, Debug)]
pub struct SelectPlan {
    pub table: TableId,
    pub access: Access,
    pub body: SelectBody,
    /// `FOR UPDATE` / `FOR SHARE` (both lock rows exclusively).
    pub locking: Option<RowLocking>,
}

/// The tables whose rows a `SELECT ... FOR UPDATE` over several tables
/// locks, and how it waits. The session finds the keys of the rows the
/// query reads of each table, locks them through the one-table locking
/// select, then runs the query over the rows it locked (so `SKIP LOCKED`
/// leaves the others out, and a row changed while waiting is seen as it
/// is now).
#[derive(Clone, Debug)]
pub struct JoinLocking {
    pub targets: Vec<LockTarget>,
    pub locking: RowLocking,
}

/// One table a [`JoinLocking`] locks rows of.
#[derive(Clone, Debug)]
pub struct LockTarget {
    /// The table's name.
    pub table: String,
    /// The name the query calls it by (its alias, or its name).
    pub qualifier: String,
    /// Its primary key's columns.
    pub key: Vec<String>,
}

/// How a `SELECT ... FOR UPDATE` treats rows another transaction locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLocking {
    /// Wait for them.
    Wait,
    /// `NOWAIT`: fail with 55P03.
    NoWait,
    /// `SKIP LOCKED`: leave them out.
    SkipLocked,
}

#[derive(Clone, Debug)]
pub enum InsertSource {
    Values(Vec<Vec<Expr>>),
    Query(Box<SelectPlan>),
    /// Rows `COPY ... FROM STDIN` read, already of the columns' types.
    Copied(CopiedRows),
    /// A query only one-shot evaluation answers (a join, `VALUES` or a
    /// function in FROM, a subquery): the session runs it first and
    /// writes its rows as [`InsertSource::Copied`] ones.
    Evaluated(Box<ast::Query>),
}

/// The rows of one `COPY ... FROM STDIN`, with the input line each began
/// on, so an error names it as PostgreSQL's CONTEXT does.
#[derive(Clone, Debug, Default)]
pub struct CopiedRows {
    /// The table as `COPY` named it.
    pub relation: String,
    /// The rows, each of the copied columns' values in order.
    pub rows: Vec<Vec<Value>>,
    /// The line of each row (1-based; for binary data, the tuple's number).
    pub lines: Vec<u64>,
}

impl CopiedRows {
    /// `e`, raised for row `i`, with the CONTEXT `COPY t, line n` unless
    /// it has one.
    pub fn context_of(&self, i: usize, e: aqueduct_expr::SqlError) -> aqueduct_expr::SqlError {
        // Rows a query made (`INSERT ... SELECT`) have no lines.
        if e.context.is_some() || self.lines.is_empty() {
            return e;
        }
        let line = self.lines.get(i).copied().unwrap_or(0);
        let relation = &self.relation;
        e.with_context(format!("COPY {relation}, line {line}"))
    }
}

/// A bound `COPY`.
#[derive(Clone, Debug)]
pub struct CopyPlan {
    /// The relation as errors' CONTEXT names it (`COPY t, line 3`), or
    /// empty for `COPY (query)`.
    pub relation: String,
    /// The options, checked and defaulted.
    pub options: CopyOptions,
    /// From STDIN (with its INSERT) or to STDOUT (with its query).
    pub direction: CopyDirection,
}

/// Which way a `COPY` goes.
#[derive(Clone, Debug)]
pub enum CopyDirection {
    /// `COPY t [(cols)] FROM STDIN`: the rows become an `INSERT` of
    /// `columns` (source [`InsertSource::Copied`]), so defaults,
    /// constraints and coercion are INSERT's.
    FromStdin {
        insert: Box<InsertPlan>,
        /// The columns each input row carries, in order.
        columns: Vec<Column>,
    },
    /// `COPY t [(cols)] TO STDOUT` (as `SELECT cols FROM t`) or `COPY
    /// (query) TO STDOUT`: the query, answered by its own route.
    ToStdout { query: Box<ast::Query> },
}

/// `COPY`'s data format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFormat {
    /// Tab-separated lines with backslash escapes.
    Text,
    /// Comma-separated values with quoting.
    Csv,
    /// `PGCOPY` tuples of the values' binary forms.
    Binary,
}

/// Columns a `FORCE_QUOTE` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForceQuote {
    /// `FORCE_QUOTE *`.
    All,
    /// These columns (none by default).
    Columns(Vec<String>),
}

/// `COPY`'s options, checked against each other as PostgreSQL checks
/// them (`copy.rs: options`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyOptions {
    /// `FORMAT` (text by default).
    pub format: CopyFormat,
    /// `HEADER`: a first line of column names (skipped on input).
    pub header: bool,
    /// `DELIMITER`: a tab in text, a comma in CSV.
    pub delimiter: u8,
    /// The string that stands for NULL (`\N` in text, empty in CSV).
    pub null: String,
    /// `QUOTE` (CSV): `"` by default.
    pub quote: u8,
    /// `ESCAPE` (CSV): the quote by default.
    pub escape: u8,
    /// `FORCE_QUOTE` (CSV, `TO`): columns always quoted.
    pub force_quote: ForceQuote,
    /// `FORCE_NOT_NULL` (CSV, `FROM`): columns whose unquoted NULL string
    /// is a string.
    pub force_not_null: Vec<String>,
    /// `FORCE_NULL` (CSV, `FROM`): columns whose quoted NULL string is NULL.
    pub force_null: Vec<String>,
}

#[derive(Clone, Debug)]
pub enum OnConflict {
    Error,
    DoNothing,
    /// Assignments over `existing row ++ excluded row`.
    DoUpdate {
        assignments: Vec<(usize, Expr)>,
        filter: Option<Expr>,
    },
}

#[derive(Clone, Debug)]
pub struct InsertPlan {
    pub table: TableId,
    /// Target column of each source value.
    pub columns: Vec<usize>,
    pub source: InsertSource,
    /// For every column of the table, its value when a row does not give
    /// one: evaluated once per row (`nextval`, `now()`, a constant, NULL).
    pub defaults: Vec<Expr>,
    pub on_conflict: OnConflict,
    /// The column sets (primary key, unique constraints) a new row is
    /// looked up by for a conflict: those `ON CONFLICT` names, or all of
    /// them for a bare `ON CONFLICT DO NOTHING`, or the primary key.
    pub arbiters: Vec<Vec<usize>>,
    /// The table's CHECK constraints: name and condition over the row.
    pub checks: Vec<(String, Expr)>,
    pub uniques: Vec<ExprUnique>,
    pub returning: Vec<Expr>,
}

/// A unique index on expressions or a partial unique index, bound: the
/// statements that write the table check it (`constraints.rs`).
#[derive(Clone, Debug)]
pub struct ExprUnique {
    pub name: String,
    /// The key, over the table's row.
    pub keys: Vec<Expr>,
    /// Only rows where this holds are in the index.
    pub predicate: Option<Expr>,
    /// The key as an error's detail names it (`lower(email)`).
    pub shown: String,
}

#[derive(Clone, Debug)]
pub struct UpdatePlan {
    pub table: TableId,
    pub access: Access,
    pub filter: Option<Expr>,
    pub assignments: Vec<(usize, Expr)>,
    pub checks: Vec<(String, Expr)>,
    pub uniques: Vec<ExprUnique>,
    pub returning: Vec<Expr>,
}

/// `ALTER TABLE name op, ...`: the operations are worked out against the
/// catalog and the rows when it runs (`alter.rs`).
#[derive(Clone, Debug)]
pub struct AlterTablePlan {
    pub name: String,
    pub if_exists: bool,
    pub ops: Vec<ast::AlterTableOperation>,
    /// For defaults that read the clock.
    pub time: StatementTime,
}

#[derive(Clone, Debug)]
pub struct TruncatePlan {
    pub tables: Vec<TableId>,
    /// `RESTART IDENTITY`: the sequences the tables' columns own restart.
    pub restart_identity: bool,
}

#[derive(Clone, Debug)]
pub struct DeletePlan {
    pub table: TableId,
    pub access: Access,
    pub filter: Option<Expr>,
    pub returning: Vec<Expr>,
}

#[derive(Clone, Debug)]
pub enum CatalogPlan {
    /// `SHOW TABLES`: one column of names.
    Tables,
}

/// The clock as a statement sees it, read once by the session (from the
/// engine's clock) and bound into the statement as constants, so
/// that evaluation never reads a clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatementTime {
    /// When the transaction began (the statement, outside a transaction
    /// block): `now()`, `current_timestamp`, `transaction_timestamp()`.
    pub transaction_micros: i64,
    /// When the statement began: `statement_timestamp()`.
    pub statement_micros: i64,
}

/// What a statement knows of the session and server running it:
/// `pg_backend_pid()`, `txid_current()`, `inet_server_addr()` and their
/// kin are bound to these as constants; `pg_cancel_backend` and
/// `pg_terminate_backend` act through `signals`.
#[derive(Clone, Default)]
pub struct SessionFacts {
    /// The backend's process id (0 for a session no connection holds).
    pub backend_pid: i32,
    /// The transaction's number: the same for every statement of a
    /// transaction block, a new one for each statement outside one.
    pub transaction_id: i64,
    pub server_addr: Option<std::net::SocketAddr>,
    pub client_addr: Option<std::net::SocketAddr>,
    /// When the server started (microseconds since the Unix epoch).
    pub server_started_micros: i64,
    /// What cancels or ends other backends.
    pub signals: Option<std::sync::Arc<dyn BackendSignals>>,
}

/// Acts on the server's backends by process id (true when there is one).
pub trait BackendSignals: Send + Sync {
    fn cancel(&self, pid: i32) -> bool;
    fn terminate(&self, pid: i32) -> bool;
}

/// A subquery prepared to run: its result columns, the types of the
/// statement's parameters it uses (by position), and what runs it.
pub struct PreparedSubquery {
    pub columns: Vec<Column>,
    pub params: Vec<DataType>,
    pub runner: Box<dyn aqueduct_expr::SubqueryRunner>,
}

/// Prepares subqueries to run (given by one-shot evaluation).
pub trait SubqueryCompiler: Send + Sync {
    /// Prepares `q`, whose outer references are parameters `$first + 1`
    /// on: its result columns and what runs it.
    fn prepare(
        &self,
        q: &ast::Query,
        first: usize,
        outer: &[Option<DataType>],
    ) -> Result<PreparedSubquery, SqlError>;
}

/// Whether `q` has a subquery in an expression (`(SELECT ...)`,
/// `EXISTS`, `IN (SELECT ...)`, `ARRAY(SELECT ...)`).
pub fn has_subquery(q: &ast::Query) -> bool {
    ast::visit_expressions(q, |e| match e {
        ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. } => {
            std::ops::ControlFlow::Break(())
        }
        ast::Expr::Function(f) if matches!(f.args, ast::FunctionArguments::Subquery(_)) => {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    })
    .is_break()
}

/// The catalog types a cast may name, read as an object's id from its
/// name (a constant) or as the object's name from its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegType {
    Class,
    Type,
    Namespace,
    Role,
    /// `regproc`/`regprocedure`: a function's name (text here: there
    /// are no function ids to look it up by).
    Proc,
}

impl RegType {
    /// The reg type a cast's target names, if it is one.
    pub fn of(data_type: &ast::DataType) -> Option<RegType> {
        let text = data_type.to_string().to_lowercase();
        Some(match text.strip_prefix("pg_catalog.").unwrap_or(&text) {
            "regclass" => RegType::Class,
            "regtype" => RegType::Type,
            "regnamespace" => RegType::Namespace,
            "regrole" => RegType::Role,
            "regproc" | "regprocedure" => RegType::Proc,
            _ => return None,
        })
    }

    pub fn word(self) -> &'static str {
        match self {
            RegType::Class => "relation",
            RegType::Type => "type",
            RegType::Namespace => "schema",
            RegType::Role => "role",
            RegType::Proc => "function",
        }
    }

    pub fn missing_code(self) -> &'static str {
        match self {
            RegType::Class => "42P01",
            RegType::Type => "42704",
            RegType::Namespace => "3F000",
            RegType::Role => "42704",
            RegType::Proc => "42883",
        }
    }
}
