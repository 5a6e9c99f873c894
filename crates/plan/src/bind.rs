//! Binding: from the parser's AST to plans with resolved columns, inferred
//! parameter types and a chosen access path. A pure function of the catalog
//! and the statement.

use std::collections::BTreeMap;

use aqueduct_expr::agg::AggFunc;
use aqueduct_tables::{
    parse_type, Catalog, CheckDef, ColumnDef, FkAction, ForeignKeyDef, Identity, Isolation,
    SequenceDef, Table, TableId, TableSchema,
};
use aqueduct_values::{DataType, LabelPlace, Value};
use sqlparser::ast;

use aqueduct_expr::{BinOp, Expr, Func, SqlError, SubqueryKind, UnOp, Volatile};

use crate::limits::{MAX_INSERT_ROWS, MAX_PARAMS};
pub use crate::plan::{
    Access, Aggregate, AlterTablePlan, Bound, CatalogPlan, Column, CopiedRows, CopyDirection,
    CopyPlan, Ddl, DeletePlan, ExprUnique, Grouping, InsertPlan, InsertSource, JoinLocking,
    LockTarget, NeedsDataflow, OnConflict, Plan, RowLocking, SelectBody, SelectPlan,
    SequenceChange, SessionFacts, SortKey, StatementTime, TruncatePlan, TypeChange, UpdatePlan,
};

/// Why direct evaluation does not answer `q`, from its shape and the names
/// of the tables in `catalog` (`None`: it does). Direct evaluation answers a
/// SELECT over one base table, or without FROM; everything else needs the
/// dataflow's operators.
pub fn needs_dataflow(catalog: &Catalog, q: &ast::Query) -> Option<NeedsDataflow> {
    if q.with.is_some() {
        return Some(NeedsDataflow::With);
    }
    if crate::plan::has_subquery(q) {
        return Some(NeedsDataflow::Subquery);
    }
    let select = match q.body.as_ref() {
        ast::SetExpr::Select(s) => s,
        ast::SetExpr::Query(inner) => return needs_dataflow(catalog, inner),
        ast::SetExpr::SetOperation { op, .. } => {
            return Some(NeedsDataflow::SetOperation(op.to_string()))
        }
        other => return Some(NeedsDataflow::OtherBody(other.to_string())),
    };
    if select_has_window(select, q.order_by.as_ref()) {
        return Some(NeedsDataflow::WindowFunction);
    }
    if select.projection.iter().any(is_set_function) {
        return Some(NeedsDataflow::SetFunction);
    }
    let [twj] = select.from.as_slice() else {
        if select.from.is_empty() {
            let clauses =
                select.selection.is_some() || q.order_by.is_some() || q.limit_clause.is_some();
            return clauses.then_some(NeedsDataflow::ClausesWithoutFrom);
        }
        return Some(NeedsDataflow::SeveralRelations);
    };
    if !twj.joins.is_empty() {
        return Some(NeedsDataflow::Join);
    }
    match &twj.relation {
        ast::TableFactor::Table { name, .. } => match object_name(name) {
            // A bad name is the binder's error to report.
            Err(_) => None,
            Ok(n) if catalog.table(&n).is_some() => None,
            Ok(n) => Some(NeedsDataflow::NotATable(n)),
        },
        _ => Some(NeedsDataflow::FromItem),
    }
}

impl Plan {
    pub fn is_read_only(&self) -> bool {
        if let Plan::Values(outputs) = self {
            return !outputs.iter().any(Expr::writes);
        }
        matches!(
            self,
            Plan::Select(_)
                | Plan::Catalog(_)
                | Plan::ShowViews
                | Plan::ShowConsumers
                | Plan::Explain { .. }
                | Plan::Dataflow(_)
        )
    }
}

/// The columns of `SHOW VIEWS`.
pub fn show_views_columns() -> Vec<Column> {
    vec![
        Column::computed("name", DataType::Text),
        Column::computed("watermark", DataType::Int8),
        Column::computed("rows", DataType::Int8),
        Column::computed("keys", DataType::Int8),
        Column::computed("bytes", DataType::Int8),
        Column::computed("status", DataType::Text),
        Column::computed("state", DataType::Text),
        Column::computed("hits", DataType::Int8),
        Column::computed("misses", DataType::Int8),
        Column::computed("hit_rate", DataType::Float8),
        Column::computed("evictions", DataType::Int8),
        Column::computed("upquery_p50_us", DataType::Int8),
        Column::computed("upquery_p99_us", DataType::Int8),
    ]
}

/// The columns of `SHOW CONSUMERS`.
pub fn show_consumers_columns() -> Vec<Column> {
    vec![
        Column::computed("name", DataType::Text),
        Column::computed("next_lsn", DataType::Int8),
        Column::computed("lag", DataType::Int8),
        Column::computed("registered_at", DataType::TimestampTz),
        Column::computed("acknowledged_at", DataType::TimestampTz),
        Column::computed("status", DataType::Text),
    ]
}

/// Binds one statement.
pub fn bind(
    catalog: &Catalog,
    st: &ast::Statement,
    hints: &[Option<DataType>],
    settings: &BTreeMap<String, String>,
    time: StatementTime,
    session: &SessionFacts,
) -> Result<Bound, SqlError> {
    let mut b = Binder {
        catalog,
        params: hints.to_vec(),
        values: None,
        time: Some(time),
        settings: Some(settings),
        session: Some(session.clone()),
        without_from: false,
        lookups: None,
        subqueries: None,
        session_read: Default::default(),
    };
    let (plan, columns) = b.statement(st)?;
    let params = b
        .params
        .into_iter()
        .map(|p| p.unwrap_or(DataType::Text))
        .collect();
    Ok(Bound {
        plan,
        params,
        columns,
        session_dependent: b.session_read.get(),
    })
}

/// Binds statements, expressions and query bodies against one catalog,
/// collecting the parameters' types as it goes.
pub struct Binder<'a> {
    catalog: &'a Catalog,
    params: Vec<Option<DataType>>,
    /// Values to bind parameters to as constants (one-shot evaluation).
    values: Option<Vec<Value>>,
    /// What `now()` and its kin are for this statement; `None` in a
    /// maintained view, where they are refused.
    time: Option<StatementTime>,
    /// The session's settings (`current_setting`); `None` in a view.
    settings: Option<&'a BTreeMap<String, String>>,
    /// The session's backend and transaction (`pg_backend_pid()`); `None`
    /// in a view (`session_functions.rs`).
    pub(crate) session: Option<SessionFacts>,
    /// Binding the select list of a SELECT without FROM (`pg_sleep` is
    /// allowed only there: it runs holding nothing).
    pub(crate) without_from: bool,
    /// The catalog functions' tables, made on first use
    /// (`catalog_functions.rs`).
    pub(crate) lookups: Option<std::sync::Arc<crate::pg_catalog::CatalogLookups>>,
    /// What prepares subqueries in expressions (one-shot evaluation's);
    /// `None` where they are refused (`subqueries.rs`).
    pub(crate) subqueries: Option<std::sync::Arc<dyn crate::plan::SubqueryCompiler>>,
    /// Whether binding read the statement's time, the session's settings
    /// or its facts ([`Bound::session_dependent`]).
    session_read: std::cell::Cell<bool>,
}

/// A function whose value is the time the statement or its transaction
/// began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClockFunc {
    Transaction,
    Statement,
    /// `current_date`: the transaction's day.
    Date,
}

/// Whether `name` is `now()` or one of its kin: stable, not immutable.
pub(crate) fn is_clock_function(name: &str) -> bool {
    ClockFunc::by_name(name).is_some()
}

impl ClockFunc {
    fn by_name(name: &str) -> Option<ClockFunc> {
        match name {
            "now" | "current_timestamp" | "transaction_timestamp" => Some(ClockFunc::Transaction),
            "statement_timestamp" => Some(ClockFunc::Statement),
            "current_date" => Some(ClockFunc::Date),
            _ => None,
        }
    }
}

impl<'a> Binder<'a> {
    /// A binder over `catalog`, with no parameters seen yet.
    pub fn new(catalog: &'a Catalog) -> Binder<'a> {
        Binder {
            catalog,
            params: Vec::new(),
            values: None,
            time: None,
            settings: None,
            session: None,
            without_from: false,
            lookups: None,
            subqueries: None,
            session_read: Default::default(),
        }
    }

    /// Binds `now()` and its kin to `time`.
    pub fn set_time(&mut self, time: StatementTime) {
        self.time = Some(time);
    }

    /// Whether the statement has a time (a view's query has none).
    pub(crate) fn has_time(&self) -> bool {
        self.time.is_some()
    }

    /// The statement's time, which the plan then depends on.
    fn time(&self) -> Option<StatementTime> {
        self.session_read.set(true);
        self.time
    }

    /// The session's facts, which the plan then depends on.
    pub(crate) fn facts(&self) -> Option<SessionFacts> {
        self.session_read.set(true);
        self.session.clone()
    }

    /// The catalog names are resolved against.
    pub fn catalog(&self) -> &'a Catalog {
        self.catalog
    }

    /// Parameter types the client declared.
    pub fn seed_param_types(&mut self, hints: &[Option<DataType>]) {
        self.params = hints.to_vec();
    }

    /// Binds `$n` to `values[n - 1]` as a constant instead of a parameter.
    pub fn set_values(&mut self, values: Vec<Value>) {
        self.values = Some(values);
    }

    /// Whether the statement has parameters left unbound.
    pub fn has_params(&self) -> bool {
        !self.params.is_empty() && self.values.is_none()
    }

    /// The parameters' types as far as the statement shows them.
    pub fn param_types(&self) -> Vec<DataType> {
        self.params
            .iter()
            .map(|p| p.clone().unwrap_or(DataType::Text))
            .collect()
    }
}

/// A column an expression may name.
#[derive(Clone, Debug)]
pub struct ScopeColumn {
    /// The table name or alias it may be qualified with.
    pub qualifier: Option<String>,
    pub name: String,
    pub ty: DataType,
    /// Only reachable when qualified (`excluded.x` in ON CONFLICT).
    pub qualified_only: bool,
    /// The base table and position it is a column of, if it is one.
    pub table: Option<(TableId, usize)>,
}

/// The columns an expression may name, in row order: a bound
/// `Expr::Column(i)` reads position `i` of the row these columns describe.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub columns: Vec<ScopeColumn>,
}

impl Scope {
    pub fn empty() -> Scope {
        Scope::default()
    }

    /// The columns of `t`, qualified by `qualifier`.
    pub fn table(t: &Table, qualifier: &str) -> Scope {
        let mut s = Scope::empty();
        s.push_table(t, qualifier, false);
        s
    }

    /// The columns of a table that may not exist yet (`CREATE TABLE`).
    pub fn table_schema(t: &TableSchema, qualifier: &str) -> Scope {
        let mut s = Scope::empty();
        s.push_schema(t, qualifier, false);
        s
    }

    pub fn push_table(&mut self, t: &Table, qualifier: &str, qualified_only: bool) {
        self.push_schema(&t.schema, qualifier, qualified_only)
    }

    fn push_schema(&mut self, t: &TableSchema, qualifier: &str, qualified_only: bool) {
        for (i, c) in t.columns.iter().enumerate() {
            self.columns.push(ScopeColumn {
                qualifier: Some(qualifier.to_string()),
                name: c.name.clone(),
                // Expressions over a numeric(p, s) column are plain numeric.
                ty: c.ty.unconstrained(),
                qualified_only,
                table: Some((t.id, i)),
            });
        }
    }
}

/// An identifier's name: as written when quoted, lowercased otherwise.
pub fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// A query's `FOR UPDATE | FOR NO KEY UPDATE | FOR SHARE | FOR KEY SHARE
/// [NOWAIT | SKIP LOCKED]`.
fn row_locking(q: &ast::Query) -> Result<Option<RowLocking>, SqlError> {
    let Some(lock) = q.locks.first() else {
        return Ok(None);
    };
    Ok(Some(match lock.nonblock {
        None => RowLocking::Wait,
        Some(ast::NonBlock::Nowait) => RowLocking::NoWait,
        Some(ast::NonBlock::SkipLocked) => RowLocking::SkipLocked,
    }))
}

/// The isolation level `BEGIN` or `SET TRANSACTION` names, if any.
fn isolation_of(modes: &[ast::TransactionMode]) -> Result<Option<Isolation>, SqlError> {
    let mut level = None;
    for m in modes {
        if let ast::TransactionMode::IsolationLevel(l) = m {
            level = Some(match l {
                ast::TransactionIsolationLevel::ReadUncommitted
                | ast::TransactionIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
                ast::TransactionIsolationLevel::RepeatableRead => Isolation::RepeatableRead,
                ast::TransactionIsolationLevel::Serializable => Isolation::Serializable,
                other => {
                    return Err(SqlError::unsupported(format!("isolation level {other}")));
                }
            });
        }
    }
    Ok(level)
}

/// Whether a view's definition (SQL text) reads `relation`.
pub fn mentions(sql: &str, relation: &str) -> bool {
    match crate::parse::parse(sql) {
        Ok(statements) => statements
            .iter()
            .any(|st| relations(st).iter().any(|r| r == relation)),
        // Unreadable (never expected): assume it does, to be safe.
        Err(_) => true,
    }
}

/// The views that read `relations`, directly or through other views, in
/// creation order: (id, name, SQL).
pub fn dependent_views(catalog: &Catalog, relations: &[String]) -> Vec<(TableId, String, String)> {
    let mut names: Vec<String> = relations.to_vec();
    let mut out: Vec<(TableId, String, String)> = Vec::new();
    loop {
        let before = out.len();
        for (id, (name, sql)) in &catalog.views {
            if !names.contains(name) && names.iter().any(|r| mentions(sql, r)) {
                names.push(name.clone());
                out.push((*id, name.clone(), sql.clone()));
            }
        }
        if out.len() == before {
            break;
        }
    }
    out.sort_by_key(|(id, _, _)| *id);
    out
}

/// The names of the relations a statement reads or writes (tables, views,
/// CTEs), as the binder resolves them.
pub fn relations(st: &ast::Statement) -> Vec<String> {
    let mut out = Vec::new();
    let _ = ast::visit_relations(st, |name| {
        if let Ok(n) = object_name(name) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}

/// Whether `st` is a plain `SELECT` that names one relation once: no
/// join, no set operation, no subquery, no CTE.
pub fn reads_one_relation(st: &ast::Statement) -> bool {
    let ast::Statement::Query(q) = st else {
        return false;
    };
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    let mut named = 0usize;
    let _ = ast::visit_relations(st, |_| {
        named += 1;
        std::ops::ControlFlow::<()>::Continue(())
    });
    q.with.is_none()
        && named == 1
        && !select_has_window(select, q.order_by.as_ref())
        && matches!(select.from.as_slice(), [f] if f.joins.is_empty()
            && matches!(f.relation, ast::TableFactor::Table { .. }))
}

/// SQLSTATE 0A000 for `name()` in a maintained view: its value depends on
/// when or by whom the view is read, which no write to the tables reports.
pub(crate) fn session_dependent_in_view(name: &str) -> SqlError {
    SqlError::new(
        "0A000",
        format!("{name}() is not allowed in a maintained view: its value depends on when or by whom the view is read, which no write to the tables reports"),
    )
    .with_hint(
        "pass the value as a parameter when the view is read (WHERE at > $1, WHERE owner = $1), or run the query directly instead of through a view",
    )
}

/// `COMMENT ON kind name IS text`.
fn comment_on(
    kind: ast::CommentObject,
    name: &ast::ObjectName,
    text: Option<&str>,
) -> Result<Plan, SqlError> {
    use crate::plan::CommentOn;
    let on = match kind {
        ast::CommentObject::Table => CommentOn::Table,
        ast::CommentObject::View | ast::CommentObject::MaterializedView => CommentOn::View,
        ast::CommentObject::Sequence => CommentOn::Sequence,
        ast::CommentObject::Type => CommentOn::Type,
        ast::CommentObject::Column => CommentOn::Column,
        other => {
            return Err(SqlError::unsupported(format!("COMMENT ON {other}"))
                .with_hint("comments are kept on tables, views, sequences, types and columns"))
        }
    };
    let (name, column) = if on == CommentOn::Column {
        // [public.]table.column
        let mut parts = name.0.clone();
        let column = parts
            .pop()
            .and_then(|p| p.as_ident().map(ident))
            .ok_or_else(|| SqlError::syntax(format!("column name must be qualified: {name}")))?;
        if parts.is_empty() {
            return Err(SqlError::syntax(format!(
                "column name must be qualified: {name}"
            )));
        }
        (object_name(&ast::ObjectName(parts))?, Some(column))
    } else {
        (object_name(name)?, None)
    };
    Ok(Plan::Ddl(Ddl::Comment {
        on,
        name,
        column,
        text: text.filter(|t| !t.is_empty()).map(str::to_string),
    }))
}

/// An expression as the catalog keeps its text (a default, a CHECK): the
/// parentheses around the whole of it dropped (pg_get_constraintdef adds
/// its own, and a dump's `CHECK ((x > 0))` must load back as it was),
/// and type names as PostgreSQL prints them (`::regclass`).
pub(crate) fn stored_sql(e: &ast::Expr) -> String {
    let mut e = e.clone();
    while let ast::Expr::Nested(inner) = e {
        e = *inner;
    }
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        if let ast::Expr::Cast { data_type, .. } = x {
            if matches!(data_type, ast::DataType::Regclass) {
                *data_type = ast::DataType::Custom(
                    ast::ObjectName::from(vec![ast::Ident::new("regclass")]),
                    vec![],
                );
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    e.to_string()
}

/// The last part of an object name (schema qualifiers such as `public.` are ignored).
pub fn object_name(n: &ast::ObjectName) -> Result<String, SqlError> {
    let parts: Vec<String> =
        n.0.iter()
            .map(|p| p.as_ident().map(ident))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| SqlError::syntax(format!("unexpected name {n}")))?;
    match parts.as_slice() {
        [name] => Ok(name.clone()),
        [schema, name] if schema == "public" => Ok(name.clone()),
        [schema, name] if schema == "pg_catalog" => Ok(name.clone()),
        [schema, _] if schema == "information_schema" => Ok(parts.join(".")),
        _ => Err(SqlError::new(
            "3F000",
            format!("schema of \"{n}\" does not exist: only \"public\" is available"),
        )),
    }
}

fn literal_type(v: &Value) -> DataType {
    match v {
        Value::Int(i) if i32::try_from(*i).is_ok() => DataType::Int4,
        Value::Int(_) => DataType::Int8,
        Value::Float(_) => DataType::Float8,
        Value::Numeric(_) => DataType::Numeric,
        Value::Bool(_) => DataType::Bool,
        Value::Bytes(_) => DataType::Bytea,
        Value::Timestamp(_) => DataType::Timestamp,
        Value::TimestampTz(_) => DataType::TimestampTz,
        Value::Date(_) => DataType::Date,
        Value::Uuid(_) => DataType::Uuid,
        Value::Json(_) => DataType::Json,
        Value::Jsonb(_) => DataType::Jsonb,
        Value::Interval { .. } => DataType::Interval,
        Value::Array(items) => items
            .iter()
            .find(|v| !v.is_null())
            .map_or(DataType::Text, literal_type)
            .array_of(),
        // An enum literal is bound inside a cast, which has its type.
        Value::Text(_) | Value::Enum(..) | Value::Null => DataType::Text,
    }
}

fn numeric_rank(t: &DataType) -> u8 {
    match t {
        DataType::Int2 => 1,
        DataType::Int4 => 2,
        DataType::Int8 => 3,
        DataType::Numeric | DataType::NumericTypmod { .. } => 4,
        DataType::Float4 => 5,
        DataType::Float8 => 6,
        _ => 0,
    }
}

/// The type of `a op b` for an arithmetic operator, as PostgreSQL resolves
/// it: integers widen to the wider integer, an integer with a numeric is
/// numeric, `real` with `real` is `real`, and anything else with a float is
/// `double precision` (PostgreSQL's preferred type for mixed floats);
/// `date - date` is an integer, the difference of two timestamps (or a
/// timestamp and a date) an interval, a timestamp or date moved by an
/// interval a timestamp (a timestamptz stays one), and an interval
/// scaled by a number an interval.
fn arithmetic_type(a: &DataType, b: &DataType) -> DataType {
    use DataType as T;
    let datetime = |t: &DataType| matches!(t, T::Date | T::Timestamp | T::TimestampTz);
    match (a, b) {
        (T::Date, T::Date) => T::Int4,
        (T::TimestampTz, T::Interval) | (T::Interval, T::TimestampTz) => T::TimestampTz,
        (T::Timestamp | T::Date, T::Interval) | (T::Interval, T::Timestamp | T::Date) => {
            T::Timestamp
        }
        (x, y) if datetime(x) && datetime(y) => T::Interval,
        (T::Interval, _) | (_, T::Interval) => T::Interval,
        (T::Float4, T::Float4) => T::Float4,
        (T::Float4 | T::Float8, o) | (o, T::Float4 | T::Float8) if o.is_numeric() => T::Float8,
        _ if numeric_rank(a) == 0 => a.clone(),
        _ if numeric_rank(b) == 0 => b.clone(),
        _ if numeric_rank(b) >= numeric_rank(a) => b.clone(),
        _ => a.clone(),
    }
}

pub fn sql_type(catalog: &Catalog, dt: &ast::DataType) -> Result<DataType, SqlError> {
    // A name that is not a built-in type may be an enum type's.
    match dt {
        ast::DataType::Custom(name, modifiers) if modifiers.is_empty() => {
            if let Some(t) = catalog.enum_type(&object_name(name)?) {
                return Ok(DataType::Enum(t.clone()));
            }
        }
        ast::DataType::Array(
            ast::ArrayElemTypeDef::SquareBracket(inner, _)
            | ast::ArrayElemTypeDef::Qualified(inner, _),
        ) if matches!(**inner, ast::DataType::Custom(..)) => {
            return Ok(sql_type(catalog, inner)?.array_of());
        }
        _ => {}
    }
    let text = dt.to_string().to_lowercase();
    let text = text
        .strip_prefix("pg_catalog.")
        .map(str::to_string)
        .unwrap_or(text);
    if text == "serial" || text == "bigserial" || text == "smallserial" {
        return Err(SqlError::unsupported(format!("type {text}"))
            .with_hint("give rows an explicit key, for example a uuid generated by the client"));
    }
    if let ast::DataType::Numeric(info) | ast::DataType::Decimal(info) | ast::DataType::Dec(info) =
        dt
    {
        let (precision, scale) = match info {
            ast::ExactNumberInfo::None => (None, 0),
            ast::ExactNumberInfo::Precision(p) => (Some(*p), 0),
            ast::ExactNumberInfo::PrecisionAndScale(p, s) => (Some(*p), *s),
        };
        if let Some(p) = precision {
            if !(1..=1000).contains(&p) {
                return Err(SqlError::new(
                    "22023",
                    format!("NUMERIC precision {p} must be between 1 and 1000"),
                ));
            }
        }
        if scale < 0 {
            return Err(SqlError::unsupported("a negative numeric scale"));
        }
        if scale > aqueduct_values::MAX_NUMERIC_DIGITS as i64 {
            return Err(SqlError::unsupported(format!(
                "numeric scale {scale} (at most {} digits after the point)",
                aqueduct_values::MAX_NUMERIC_DIGITS
            )));
        }
    }
    if let ast::DataType::Interval { fields, precision } = dt {
        if fields.is_some() || precision.is_some() {
            return Err(SqlError::unsupported(
                "interval fields and precision in a type (interval(p), interval hour)",
            )
            .with_hint(
                "use plain interval; a literal may still name fields: INTERVAL '90' MINUTE",
            ));
        }
    }
    parse_type(&text).map_err(|_| {
        SqlError::new("42704", format!("type \"{text}\" does not exist"))
            .with_hint("supported: smallint, integer, bigint, real, double precision, numeric, boolean, text, varchar(n), bytea, timestamp, timestamptz, date, interval, uuid, json, jsonb, and one-dimensional arrays of them (text[])")
    })
}

impl<'a> Binder<'a> {
    fn statement(&mut self, st: &ast::Statement) -> Result<(Plan, Vec<Column>), SqlError> {
        use ast::Statement as S;
        Ok(match st {
            S::Query(q) => return self.query(q),
            S::Insert(i) => return self.insert(i),
            S::Update(u) => return self.update(u),
            S::Delete(d) => return self.delete(d),
            S::Copy { .. } => return self.copy(st),
            S::CreateTable(c) => (self.create_table(c)?, vec![]),
            S::CreateIndex(c) => (self.create_index(c)?, vec![]),
            S::Comment {
                object_type,
                object_name: name,
                comment,
                ..
            } => (comment_on(*object_type, name, comment.as_deref())?, vec![]),
            S::CreateView(cv) => {
                if !cv.columns.is_empty() {
                    return Err(SqlError::unsupported("column names in CREATE VIEW"));
                }
                let name = object_name(&cv.name)?;
                (
                    Plan::Ddl(Ddl::CreateView {
                        name,
                        sql: st.to_string(),
                        if_not_exists: cv.if_not_exists,
                    }),
                    vec![],
                )
            }
            S::Explain {
                statement,
                format,
                options,
                ..
            } => {
                let named =
                    |f: &str| f.eq_ignore_ascii_case("dot") || f.eq_ignore_ascii_case("graphviz");
                let mut dot = format.as_ref().is_some_and(|f| {
                    let text = f.to_string();
                    named(text.rsplit([' ', '=']).next().unwrap_or(""))
                });
                for o in options.iter().flatten() {
                    let value = o.arg.as_ref().map(|a| a.to_string()).unwrap_or_default();
                    match ident(&o.name).as_str() {
                        "format" if named(&value) => dot = true,
                        "format" if value.eq_ignore_ascii_case("text") => {}
                        "format" => {
                            return Err(SqlError::unsupported(format!(
                                "EXPLAIN format {value} (TEXT and DOT are)"
                            )))
                        }
                        _ => {}
                    }
                }
                (
                    Plan::Explain {
                        statement: statement.clone(),
                        dot,
                    },
                    vec![Column::computed("QUERY PLAN", DataType::Text)],
                )
            }
            S::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => {
                let cascade = *cascade;
                let names = names
                    .iter()
                    .map(object_name)
                    .collect::<Result<Vec<_>, _>>()?;
                let if_exists = *if_exists;
                (
                    Plan::Ddl(match object_type {
                        ast::ObjectType::Table => Ddl::DropTable {
                            names,
                            if_exists,
                            cascade,
                        },
                        ast::ObjectType::Index => Ddl::DropIndex { names, if_exists },
                        ast::ObjectType::Sequence => Ddl::DropSequence { names, if_exists },
                        ast::ObjectType::Type => Ddl::DropType {
                            names,
                            if_exists,
                            cascade,
                        },
                        ast::ObjectType::View | ast::ObjectType::MaterializedView => {
                            Ddl::DropView {
                                names,
                                if_exists,
                                cascade,
                            }
                        }
                        other => return Err(SqlError::unsupported(format!("DROP {other}"))),
                    }),
                    vec![],
                )
            }
            S::CreateSequence {
                temporary: false,
                if_not_exists,
                name,
                data_type,
                sequence_options,
                owned_by: None,
            } => {
                let ty = match data_type {
                    Some(dt) => sql_type(self.catalog, dt)?,
                    None => DataType::Int8,
                };
                if !matches!(ty, DataType::Int2 | DataType::Int4 | DataType::Int8) {
                    return Err(SqlError::new(
                        "22023",
                        "sequence type must be smallint, integer, or bigint",
                    ));
                }
                let def = sequence_def(&object_name(name)?, &ty, sequence_options)?;
                (
                    Plan::Ddl(Ddl::CreateSequence {
                        def,
                        if_not_exists: *if_not_exists,
                    }),
                    vec![],
                )
            }
            S::CreateType {
                name,
                representation: Some(ast::UserDefinedTypeRepresentation::Enum { labels }),
            } => (
                Plan::Ddl(Ddl::CreateEnum {
                    name: object_name(name)?,
                    labels: labels.iter().map(|l| l.value.clone()).collect(),
                }),
                vec![],
            ),
            S::AlterType(a) => {
                let change = match &a.operation {
                    ast::AlterTypeOperation::Rename(r) => TypeChange::Rename(ident(&r.new_name)),
                    ast::AlterTypeOperation::AddValue(v) => TypeChange::AddValue {
                        label: v.value.value.clone(),
                        place: match &v.position {
                            None => LabelPlace::Last,
                            Some(ast::AlterTypeAddValuePosition::Before(n)) => {
                                LabelPlace::Before(n.value.clone())
                            }
                            Some(ast::AlterTypeAddValuePosition::After(n)) => {
                                LabelPlace::After(n.value.clone())
                            }
                        },
                        if_not_exists: v.if_not_exists,
                    },
                    ast::AlterTypeOperation::RenameValue(_) => {
                        return Err(SqlError::unsupported("ALTER TYPE ... RENAME VALUE")
                            .with_hint("add the new label with ALTER TYPE ... ADD VALUE and UPDATE the rows that have the old one"))
                    }
                };
                (
                    Plan::Ddl(Ddl::AlterType {
                        name: object_name(&a.name)?,
                        change,
                    }),
                    vec![],
                )
            }
            S::Truncate(t) => (self.truncate(t)?, vec![]),
            S::AlterTable(a) if self.catalog.sequence(&object_name(&a.name)?).is_some() => (
                Plan::Ddl(Ddl::AlterSequence {
                    name: object_name(&a.name)?,
                    if_exists: a.if_exists,
                    change: sequence_change(&a.operations)?,
                }),
                vec![],
            ),
            S::AlterTable(a) => {
                let Some(time) = self.time() else {
                    return Err(SqlError::new("XX000", "ALTER TABLE bound without a clock"));
                };
                (
                    Plan::Ddl(Ddl::AlterTable(AlterTablePlan {
                        name: object_name(&a.name)?,
                        if_exists: a.if_exists,
                        ops: a.operations.clone(),
                        time,
                    })),
                    vec![],
                )
            }
            S::StartTransaction { modes, .. } => (
                Plan::Begin {
                    isolation: isolation_of(modes)?,
                },
                vec![],
            ),
            S::Commit { .. } => (Plan::Commit, vec![]),
            S::Rollback {
                savepoint: None, ..
            } => (Plan::Rollback, vec![]),
            S::Rollback {
                savepoint: Some(name),
                ..
            } => (Plan::RollbackTo { name: ident(name) }, vec![]),
            S::Savepoint { name } => (Plan::Savepoint { name: ident(name) }, vec![]),
            S::ReleaseSavepoint { name } => (Plan::ReleaseSavepoint { name: ident(name) }, vec![]),
            S::Set(set) => (self.set(set)?, vec![]),
            S::ShowVariable { variable } => {
                let words = variable.iter().map(ident).collect::<Vec<_>>();
                let name = match words.join(" ").as_str() {
                    "transaction isolation level" => "transaction_isolation".to_string(),
                    "time zone" => "timezone".to_string(),
                    "tables" => "tables".to_string(),
                    // `SHOW a.b` arrives as two words.
                    _ => words.join("."),
                };
                if name == "tables" {
                    return Ok(show_tables());
                }
                if name == "views" {
                    return Ok((Plan::ShowViews, show_views_columns()));
                }
                if name == "consumers" {
                    return Ok((Plan::ShowConsumers, show_consumers_columns()));
                }
                let columns = if name == "all" {
                    vec![
                        Column::computed("name", DataType::Text),
                        Column::computed("setting", DataType::Text),
                    ]
                } else {
                    vec![Column::computed(name.clone(), DataType::Text)]
                };
                (Plan::Show { name }, columns)
            }
            S::ShowTables { .. } => return Ok(show_tables()),
            // Rows are never left behind to vacuum and there are no planner
            // statistics: both only check their table.
            S::Vacuum(v) => {
                if let Some(t) = &v.table_name {
                    self.table(&object_name(t)?)?;
                }
                (Plan::Maintenance { tag: "VACUUM" }, vec![])
            }
            S::Analyze(a) => {
                if let Some(t) = &a.table_name {
                    self.table(&object_name(t)?)?;
                }
                (Plan::Maintenance { tag: "ANALYZE" }, vec![])
            }
            S::Lock(lock) => {
                use ast::LockTableMode as M;
                for t in &lock.tables {
                    self.table(&object_name(&t.name)?)?;
                }
                match &lock.lock_mode {
                    None | Some(M::AccessShare | M::RowShare | M::RowExclusive) => {
                        (Plan::LockTables, vec![])
                    }
                    Some(other) => {
                        return Err(SqlError::unsupported(format!(
                            "LOCK TABLE ... IN {other} MODE"
                        ))
                        .with_hint("rows are locked by SELECT ... FOR UPDATE; ACCESS SHARE, ROW SHARE and ROW EXCLUSIVE are taken"))
                    }
                }
            }
            S::ShowViews { .. } => return Ok((Plan::ShowViews, show_views_columns())),
            S::Deallocate { name, .. } => (Plan::Deallocate { name: ident(name) }, vec![]),
            S::Reset(r) => (
                match &r.reset {
                    ast::Reset::ALL => Plan::ResetAll,
                    ast::Reset::SessionAuthorization => Plan::Set {
                        name: "session_authorization".into(),
                        value: None,
                        local: false,
                    },
                    ast::Reset::ConfigurationParameter(name) => Plan::Set {
                        name: name.to_string().to_lowercase(),
                        value: None,
                        local: false,
                    },
                },
                vec![],
            ),
            S::Discard { .. } => (
                Plan::Set {
                    name: "application_name".into(),
                    value: None,
                    local: false,
                },
                vec![],
            ),
            other => {
                let text = other.to_string();
                let word = text.split_whitespace().next().unwrap_or("statement");
                return Err(SqlError::unsupported(format!("the {word} statement")));
            }
        })
    }

    fn set(&mut self, set: &ast::Set) -> Result<Plan, SqlError> {
        match set {
            ast::Set::SingleAssignment {
                variable, values, ..
            } if variable.to_string().eq_ignore_ascii_case("constraints") => {
                // See `parse::rewrite_set_constraints`.
                let text = |e: &ast::Expr| match e {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => Some(s.clone()),
                        _ => None,
                    },
                    _ => None,
                };
                let bad = || {
                    SqlError::syntax(
                        "SET CONSTRAINTS takes ALL or names, then DEFERRED or IMMEDIATE",
                    )
                };
                let (mode, targets) = values.split_last().ok_or_else(bad)?;
                let deferred = match text(mode).as_deref() {
                    Some("deferred") => true,
                    Some("immediate") => false,
                    _ => return Err(bad()),
                };
                let names = match targets {
                    [ast::Expr::Identifier(i)] if i.value.eq_ignore_ascii_case("all") => None,
                    _ => Some(
                        targets
                            .iter()
                            .map(|t| text(t).ok_or_else(bad))
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                };
                Ok(Plan::SetConstraints { names, deferred })
            }
            ast::Set::SingleAssignment {
                variable,
                values,
                scope,
                ..
            } => {
                let local = matches!(scope, Some(ast::ContextModifier::Local));
                let name = variable.to_string().to_lowercase();
                let value = values
                    .iter()
                    .map(|v| match v {
                        ast::Expr::Value(v) => match &v.value {
                            ast::Value::SingleQuotedString(s) => s.clone(),
                            other => other.to_string(),
                        },
                        ast::Expr::Identifier(i) => i.value.clone(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let value = if value.eq_ignore_ascii_case("default") {
                    None
                } else {
                    Some(value)
                };
                Ok(Plan::Set { name, value, local })
            }
            ast::Set::SetTimeZone { value, local } => Ok(Plan::Set {
                name: "timezone".into(),
                value: Some(value.to_string().trim_matches('\'').to_string()),
                local: *local,
            }),
            ast::Set::SetNames { charset_name, .. } => Ok(Plan::Set {
                name: "client_encoding".into(),
                value: Some(charset_name.to_string()),
                local: false,
            }),
            ast::Set::SetTransaction { modes, .. } => Ok(Plan::Set {
                name: "transaction_isolation".into(),
                value: isolation_of(modes)?.map(|i| i.as_str().to_string()),
                local: false,
            }),
            other => Err(SqlError::unsupported(format!("{other}"))),
        }
    }

    /// The table named `name`, or `undefined_table`.
    /// `SELECT set_config(name, value, is_local) [FROM ... WHERE ...]` (as
    /// pg_dump sends it): a setting changed for each row, planned as
    /// `SET`. `None` for any other query; `set_config` elsewhere in a
    /// query is refused by `function`.
    fn set_config(&mut self, q: &ast::Query) -> Result<Option<Plan>, SqlError> {
        let ast::SetExpr::Select(s) = q.body.as_ref() else {
            return Ok(None);
        };
        let [item] = s.projection.as_slice() else {
            return Ok(None);
        };
        let (ast::SelectItem::UnnamedExpr(ast::Expr::Function(f))
        | ast::SelectItem::ExprWithAlias {
            expr: ast::Expr::Function(f),
            ..
        }) = item
        else {
            return Ok(None);
        };
        if object_name(&f.name)? != "set_config" {
            return Ok(None);
        }
        let (args, _, _) = self.function_args(f)?;
        let [name, value, local] = args.as_slice() else {
            return Err(SqlError::new(
                "42883",
                "function set_config takes (text, text, boolean)",
            ));
        };
        let is_local = match self.expr(local, &Scope::empty(), Some(&DataType::Bool))? {
            Expr::Literal(Value::Bool(b)) => b,
            _ => {
                return Err(SqlError::unsupported(
                    "set_config whose is_local is not a constant",
                ))
            }
        };
        let mut rows = q.clone();
        let mut select = (**s).clone();
        select.projection = vec![
            ast::SelectItem::UnnamedExpr(name.clone()),
            ast::SelectItem::UnnamedExpr(value.clone()),
        ];
        rows.body = Box::new(ast::SetExpr::Select(Box::new(select)));
        Ok(Some(Plan::SetConfig {
            rows: Box::new(rows),
            local: is_local,
        }))
    }

    /// Lets subqueries in expressions be bound, prepared by `compiler`.
    pub fn allow_subqueries(
        &mut self,
        compiler: std::sync::Arc<dyn crate::plan::SubqueryCompiler>,
    ) {
        self.subqueries = Some(compiler);
    }

    /// How many parameters the statement has: its bound values, or the
    /// ones seen so far.
    pub(crate) fn parameter_count(&self) -> usize {
        match &self.values {
            Some(v) => v.len().max(self.params.len()),
            None => self.params.len(),
        }
    }

    /// The session's settings (none in a maintained view).
    pub(crate) fn session_settings(&self) -> BTreeMap<String, String> {
        self.session_read.set(true);
        self.settings.cloned().unwrap_or_default()
    }

    pub fn table(&self, name: &str) -> Result<&'a Table, SqlError> {
        self.catalog
            .table(name)
            .ok_or_else(|| SqlError::undefined_table(name))
    }

    pub(crate) fn param(
        &mut self,
        text: &str,
        expected: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        let n: usize = text
            .strip_prefix('$')
            .and_then(|d| d.parse().ok())
            .filter(|n| (1..=MAX_PARAMS).contains(n))
            .ok_or_else(|| SqlError::syntax(format!("bad parameter {text}")))?;
        if self.params.len() < n {
            self.params.resize(n, None);
        }
        if self.params[n - 1].is_none() {
            self.params[n - 1] = expected.map(DataType::unconstrained);
        }
        if let Some(values) = &self.values {
            let v = values.get(n - 1).cloned().ok_or_else(|| {
                SqlError::new("08P01", format!("no value given for parameter {text}"))
            })?;
            return Ok(match (expected, self.params[n - 1].clone()) {
                (Some(ty), _) => Expr::Literal(v.coerce(ty)?),
                // A declared type stays the value's (an empty array's
                // elements keep their type).
                (None, Some(ty)) => Expr::Cast(Box::new(Expr::Literal(v.coerce(&ty)?)), ty),
                (None, None) => Expr::Literal(v),
            });
        }
        Ok(Expr::Param(n - 1))
    }

    // ---- expressions ----

    fn column_ref(&self, scope: &Scope, parts: &[String]) -> Result<Expr, SqlError> {
        let (qualifier, name) = match parts {
            [name] => (None, name.as_str()),
            [q, name] => (Some(q.as_str()), name.as_str()),
            [_, q, name] => (Some(q.as_str()), name.as_str()),
            _ => {
                return Err(SqlError::syntax(format!(
                    "bad column name {}",
                    parts.join(".")
                )))
            }
        };
        let matches: Vec<usize> = scope
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.name == name
                    && match qualifier {
                        Some(q) => c.qualifier.as_deref() == Some(q),
                        None => !c.qualified_only,
                    }
            })
            .map(|(i, _)| i)
            .collect();
        match matches.as_slice() {
            [i] => Ok(Expr::Column(*i)),
            [] => match qualifier {
                Some(q)
                    if !scope
                        .columns
                        .iter()
                        .any(|c| c.qualifier.as_deref() == Some(q)) =>
                {
                    Err(SqlError::new(
                        "42P01",
                        format!("missing FROM-clause entry for table \"{q}\""),
                    ))
                }
                _ => Err(SqlError::undefined_column(name)),
            },
            _ => Err(
                SqlError::new("42702", format!("column reference \"{name}\" is ambiguous"))
                    .with_hint("qualify it with its table name"),
            ),
        }
    }

    /// The type of a bound expression in `scope` (text when nothing fixes it).
    pub(crate) fn type_of(&self, e: &Expr, scope: &Scope) -> DataType {
        self.known_type(e, scope).unwrap_or(DataType::Text)
    }

    /// The type of a bound expression in `scope`, `None` while unknown (a
    /// NULL literal, a parameter whose type nothing has fixed), as
    /// PostgreSQL's `unknown` takes the type of its context.
    pub fn known_type(&self, e: &Expr, scope: &Scope) -> Option<DataType> {
        Some(match e {
            Expr::Literal(Value::Null) => return None,
            Expr::Literal(v) => literal_type(v),
            Expr::Param(i) => return self.params.get(*i).cloned().flatten(),
            Expr::Column(i) => scope
                .columns
                .get(*i)
                .map(|c| c.ty.unconstrained())
                .unwrap_or(DataType::Text),
            Expr::Unary(UnOp::Not, _)
            | Expr::IsNull(..)
            | Expr::InList(..)
            | Expr::Between(..)
            | Expr::Like { .. } => DataType::Bool,
            Expr::Unary(UnOp::Neg, e) => return self.known_type(e, scope),
            Expr::Binary(op, l, r) => match op {
                BinOp::Concat => {
                    let (a, b) = (self.known_type(l, scope), self.known_type(r, scope));
                    match (a, b) {
                        (Some(DataType::Jsonb | DataType::Json), _)
                        | (_, Some(DataType::Jsonb | DataType::Json)) => DataType::Jsonb,
                        (Some(t @ DataType::Array(_)), _) | (_, Some(t @ DataType::Array(_))) => t,
                        _ => DataType::Text,
                    }
                }
                BinOp::JsonGet | BinOp::JsonPath => match self.known_type(l, scope) {
                    Some(DataType::Json) => DataType::Json,
                    _ => DataType::Jsonb,
                },
                BinOp::JsonGetText | BinOp::JsonPathText => DataType::Text,
                BinOp::Add
                | BinOp::Sub
                | BinOp::Mul
                | BinOp::Div
                | BinOp::Mod
                | BinOp::BitAnd
                | BinOp::BitOr => match (self.known_type(l, scope), self.known_type(r, scope)) {
                    (None, None) => return None,
                    (Some(t), None) | (None, Some(t)) => t,
                    (Some(a), Some(b)) => arithmetic_type(&a, &b),
                },
                _ => DataType::Bool,
            },
            Expr::Cast(_, ty) => ty.unconstrained(),
            Expr::Volatile(Volatile::GenRandomUuid, _) => DataType::Uuid,
            Expr::Volatile(..) => DataType::Int8,
            Expr::Lookup(l, _) => l.ty.clone(),
            Expr::Subquery(sub, _) => sub.ty.clone(),
            Expr::Server(call, _) => call.ty.clone(),
            Expr::Call(f, args) => match f {
                Func::Length => DataType::Int4,
                Func::RealNumeric => DataType::Numeric,
                // round(numeric) is numeric, round(int or float) float8,
                // round(x, s) numeric.
                Func::Round => match args.as_slice() {
                    [x] => match self.known_type(x, scope) {
                        Some(DataType::Numeric) => DataType::Numeric,
                        Some(t) if t.is_numeric() => DataType::Float8,
                        _ => DataType::Numeric,
                    },
                    _ => DataType::Numeric,
                },
                Func::Abs | Func::NullIf => {
                    return args.first().and_then(|a| self.known_type(a, scope))
                }
                Func::Coalesce | Func::Greatest | Func::Least => {
                    return args.iter().find_map(|a| self.known_type(a, scope))
                }
                Func::JsonbBuildObject | Func::JsonbBuildArray | Func::JsonbSet | Func::ToJsonb => {
                    DataType::Jsonb
                }
                Func::JsonBuildObject => DataType::Json,
                Func::JsonbArrayLength
                | Func::Cardinality
                | Func::ArrayLength
                | Func::ArrayUpper
                | Func::ArrayLower
                | Func::ArrayPosition => DataType::Int4,
                Func::AnyOf(_) | Func::AllOf(_) => DataType::Bool,
                Func::ArrayCat | Func::ArrayAppend | Func::ArrayRemove => {
                    return args.first().and_then(|a| self.known_type(a, scope))
                }
                Func::ArrayPrepend => return args.get(1).and_then(|a| self.known_type(a, scope)),
                Func::MakeArray => {
                    return args
                        .iter()
                        .find_map(|a| self.known_type(a, scope))
                        .map(|t| t.array_of())
                }
                Func::Subscript => {
                    return match args.first().and_then(|a| self.known_type(a, scope)) {
                        Some(DataType::Array(e)) => Some(*e),
                        _ => None,
                    }
                }
                Func::JustifyDays
                | Func::JustifyHours
                | Func::JustifyInterval
                | Func::Age
                | Func::MakeInterval => DataType::Interval,
                Func::DatePart => DataType::Float8,
                Func::Extract => DataType::Numeric,
                _ => DataType::Text,
            },
            Expr::Case {
                whens, otherwise, ..
            } => {
                return whens
                    .iter()
                    .map(|(_, t)| t)
                    .chain(otherwise.as_deref())
                    .find_map(|t| self.known_type(t, scope))
            }
        })
    }

    /// Binds a scalar expression over the columns of `scope`; `expected`
    /// is the type the context wants (it types parameters and literals).
    pub fn expr(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        expected: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        // One level of a statement nested up to `MAX_STATEMENT_DEPTH`:
        // this function's frame is large in a debug build.
        crate::limits::grow(|| self.expr_level(e, scope, expected))
    }

    fn expr_level(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        expected: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        use ast::Expr as E;
        Ok(match e {
            E::Identifier(i) => self.column_ref(scope, &[ident(i)])?,
            E::CompoundIdentifier(parts) => {
                self.column_ref(scope, &parts.iter().map(ident).collect::<Vec<_>>())?
            }
            E::Nested(inner) => self.expr(inner, scope, expected)?,
            E::Value(v) => self.value(&v.value, expected)?,
            E::TypedString(ts) => {
                let ty = sql_type(self.catalog, &ts.data_type)?;
                let text = match &ts.value.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                };
                Expr::Literal(Value::Text(text).coerce(&ty)?)
            }
            E::UnaryOp { op, expr } => match op {
                ast::UnaryOperator::Not => {
                    Expr::Unary(UnOp::Not, Box::new(self.condition(expr, scope, "NOT")?))
                }
                ast::UnaryOperator::Minus => {
                    // -9223372036854775808 is a bigint, though its digits
                    // alone are not.
                    if let ast::Expr::Value(v) = expr.as_ref() {
                        if let ast::Value::Number(n, _) = &v.value {
                            if let Ok(i) = format!("-{n}").parse::<i64>() {
                                return Ok(Expr::Literal(Value::Int(i)));
                            }
                        }
                    }
                    match self.expr(expr, scope, expected)? {
                        Expr::Literal(Value::Int(i)) => Expr::Literal(match i.checked_neg() {
                            Some(n) => Value::Int(n),
                            // -(-9223372036854775808) is a numeric constant.
                            None => Value::Numeric(-aqueduct_values::Decimal::from(i)),
                        }),
                        Expr::Literal(Value::Numeric(d)) => {
                            Expr::Literal(Value::Numeric(aqueduct_expr::numeric::neg(d)))
                        }
                        Expr::Literal(Value::Float(f)) => Expr::Literal(Value::Float(-f)),
                        inner => self.fit(Expr::Unary(UnOp::Neg, Box::new(inner)), scope),
                    }
                }
                ast::UnaryOperator::Plus => self.expr(expr, scope, expected)?,
                other => return Err(SqlError::unsupported(format!("operator {other}"))),
            },
            E::BinaryOp { left, op, right } => match regex_op(op) {
                // `!~` and `!~*` are the negations of `~` and `~*`.
                Some((op, negated)) => {
                    let l = self.expr(left, scope, Some(&DataType::Text))?;
                    let r = self.expr(right, scope, Some(&DataType::Text))?;
                    let m = Expr::Binary(op, Box::new(l), Box::new(r));
                    if negated {
                        Expr::Unary(UnOp::Not, Box::new(m))
                    } else {
                        m
                    }
                }
                None => {
                    let op = bin_op(op)?;
                    self.binary(op, left, right, scope)?
                }
            },
            E::IsNull(e) => Expr::IsNull(Box::new(self.expr(e, scope, None)?), false),
            // NULL-safe comparison: two NULLs are not distinct, a NULL and
            // a value are.
            E::IsDistinctFrom(a, b) | E::IsNotDistinctFrom(a, b) => {
                let distinct = matches!(e, E::IsDistinctFrom(..));
                let eq = self.binary(BinOp::Eq, a, b, scope)?;
                let (l, r) = match &eq {
                    Expr::Binary(_, l, r) => ((**l).clone(), (**r).clone()),
                    _ => (self.expr(a, scope, None)?, self.expr(b, scope, None)?),
                };
                let null = |x: &Expr| Expr::IsNull(Box::new(x.clone()), false);
                let both_null = Expr::Binary(BinOp::And, Box::new(null(&l)), Box::new(null(&r)));
                let one_null = Expr::Binary(BinOp::Or, Box::new(null(&l)), Box::new(null(&r)));
                let differ = Expr::Unary(UnOp::Not, Box::new(eq));
                let answer = |b: bool| Expr::Literal(Value::Bool(b == distinct));
                Expr::Case {
                    operand: None,
                    whens: vec![(both_null, answer(false)), (one_null, answer(true))],
                    otherwise: Some(Box::new(if distinct {
                        differ
                    } else {
                        Expr::Unary(UnOp::Not, Box::new(differ))
                    })),
                }
            }
            E::IsNotNull(e) => Expr::IsNull(Box::new(self.expr(e, scope, None)?), true),
            E::IsTrue(e) => self.is_bool(e, scope, true, false)?,
            E::IsNotTrue(e) => self.is_bool(e, scope, true, true)?,
            E::IsFalse(e) => self.is_bool(e, scope, false, false)?,
            E::IsNotFalse(e) => self.is_bool(e, scope, false, true)?,
            E::InList {
                expr,
                list,
                negated,
            } => {
                let lhs = self.expr(expr, scope, None)?;
                let ty = self.type_of(&lhs, scope);
                let mut bound = Vec::with_capacity(list.len());
                for x in list {
                    let item = self.expr(x, scope, Some(&ty))?;
                    self.check_comparable(BinOp::Eq, (&lhs, expr), (&item, x), scope)?;
                    bound.push(item);
                }
                Expr::InList(Box::new(lhs), bound, *negated)
            }
            E::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let lhs = self.expr(expr, scope, None)?;
                let ty = self.type_of(&lhs, scope);
                let lo = self.expr(low, scope, Some(&ty))?;
                let hi = self.expr(high, scope, Some(&ty))?;
                self.check_comparable(BinOp::GtEq, (&lhs, expr), (&lo, low), scope)?;
                self.check_comparable(BinOp::LtEq, (&lhs, expr), (&hi, high), scope)?;
                Expr::Between(Box::new(lhs), Box::new(lo), Box::new(hi), *negated)
            }
            E::Like {
                negated,
                expr,
                pattern,
                escape_char: None,
                any: false,
            } => self.like(expr, pattern, *negated, false, scope)?,
            E::ILike {
                negated,
                expr,
                pattern,
                escape_char: None,
                any: false,
            } => self.like(expr, pattern, *negated, true, scope)?,
            E::Subquery(q) => self.subquery(SubqueryKind::Scalar, q, None, scope)?,
            E::Exists { subquery, negated } => {
                let e = self.subquery(SubqueryKind::Exists, subquery, None, scope)?;
                if *negated {
                    Expr::Unary(UnOp::Not, Box::new(e))
                } else {
                    e
                }
            }
            E::InSubquery {
                expr,
                subquery,
                negated,
            } => {
                let e = self.subquery(SubqueryKind::Any(BinOp::Eq), subquery, Some(expr), scope)?;
                if *negated {
                    Expr::Unary(UnOp::Not, Box::new(e))
                } else {
                    e
                }
            }
            // `'t'::regclass`, `oid::regtype`, ... (`catalog_functions.rs`).
            E::Cast {
                expr, data_type, ..
            } if crate::plan::RegType::of(data_type).is_some() => {
                let reg = crate::plan::RegType::of(data_type).expect("a reg type");
                self.reg_cast(reg, expr, scope, expected)?
            }
            E::Cast {
                expr, data_type, ..
            } => {
                let ty = sql_type(self.catalog, data_type)?;
                let inner = self.expr(expr, scope, Some(&ty))?;
                // A constant is converted now (so bad literals fail at bind
                // time); the cast node stays so the result keeps its type.
                match inner {
                    Expr::Literal(v) => Expr::Cast(Box::new(Expr::Literal(v.coerce(&ty)?)), ty),
                    inner if ty.is_textual() => {
                        Expr::Cast(Box::new(self.real_as_text(inner, scope)), ty)
                    }
                    inner
                        if ty.unconstrained() == DataType::Numeric
                            && self.known_type(&inner, scope) == Some(DataType::Float4) =>
                    {
                        // real to numeric keeps the real's 6 digits.
                        Expr::Cast(Box::new(Expr::Call(Func::RealNumeric, vec![inner])), ty)
                    }
                    inner => Expr::Cast(Box::new(inner), ty),
                }
            }
            // Text compares by its bytes here, which is what the database's
            // collation ("C.UTF-8"), "C" and "POSIX" order by.
            E::Collate { expr, collation } => {
                let name = object_name(collation)?;
                if !matches!(
                    name.as_str(),
                    "default" | "C" | "POSIX" | "c" | "posix" | "ucs_basic"
                ) {
                    return Err(SqlError::new(
                        "42704",
                        format!("collation \"{name}\" for encoding \"UTF8\" does not exist"),
                    )
                    .with_hint("text compares by its bytes (the C collation); COLLATE \"C\" and \"default\" are accepted"));
                }
                self.expr(expr, scope, expected)?
            }
            E::Function(f) => self.function(f, scope, expected)?,
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => {
                let operand = match operand {
                    Some(o) => Some(Box::new(self.expr(o, scope, None)?)),
                    None => None,
                };
                // `CASE x WHEN '...'`: quoted literals take the operand's type.
                let when_ty = operand.as_ref().map(|o| self.type_of(o, scope));
                let results: Vec<&ast::Expr> = conditions
                    .iter()
                    .map(|c| &c.result)
                    .chain(else_result.as_deref())
                    .collect();
                let mut results = self
                    .bind_unified(
                        &results,
                        scope,
                        expected,
                        Unify::Case(else_result.is_some()),
                    )?
                    .into_iter();
                let mut whens = Vec::new();
                for c in conditions {
                    let cond = match (&when_ty, is_untyped_literal(&c.condition)) {
                        (Some(ty), true) => self.expr(&c.condition, scope, Some(ty))?,
                        (Some(_), false) => self.expr(&c.condition, scope, None)?,
                        (None, _) => self.condition(&c.condition, scope, "CASE/WHEN")?,
                    };
                    whens.push((cond, results.next().expect("one result per WHEN")));
                }
                let otherwise = results.next().map(Box::new);
                Expr::Case {
                    operand,
                    whens,
                    otherwise,
                }
            }
            E::Substring {
                expr,
                substring_from,
                substring_for,
                ..
            } => {
                let mut args = vec![self.expr(expr, scope, Some(&DataType::Text))?];
                args.push(match substring_from {
                    Some(f) => self.expr(f, scope, Some(&DataType::Int8))?,
                    None => Expr::Literal(Value::Int(1)),
                });
                if let Some(n) = substring_for {
                    args.push(self.expr(n, scope, Some(&DataType::Int8))?);
                }
                Expr::Call(Func::Substring, args)
            }
            E::Trim {
                expr,
                trim_where,
                trim_what,
                trim_characters: None,
            } => {
                let func = match trim_where {
                    Some(ast::TrimWhereField::Leading) => Func::LTrim,
                    Some(ast::TrimWhereField::Trailing) => Func::RTrim,
                    _ => Func::Trim,
                };
                let mut args = vec![self.expr(expr, scope, Some(&DataType::Text))?];
                if let Some(what) = trim_what {
                    args.push(self.expr(what, scope, Some(&DataType::Text))?);
                }
                Expr::Call(func, args)
            }
            E::AnyOp {
                left,
                compare_op,
                right,
                ..
            } => self.any_all(left, compare_op, right, false, scope)?,
            E::AllOp {
                left,
                compare_op,
                right,
            } => self.any_all(left, compare_op, right, true, scope)?,
            E::Array(array) => self.array(&array.elem, scope, expected)?,
            E::Interval(interval) => Expr::Literal(interval_literal(interval)?),
            E::Extract { field, expr, .. } => {
                let unit = match field {
                    ast::DateTimeField::Custom(name) => name.value.clone(),
                    other => other.to_string(),
                };
                let x = self.expr(expr, scope, None)?;
                self.check_date_part_argument("extract", &x, scope)?;
                Expr::Call(
                    Func::Extract,
                    vec![Expr::Literal(Value::Text(unit.to_lowercase())), x],
                )
            }
            E::CompoundFieldAccess { root, access_chain } => match access_chain.as_slice() {
                [ast::AccessExpr::Subscript(ast::Subscript::Index { index })] => {
                    let array = self.expr(root, scope, None)?;
                    match self.known_type(&array, scope) {
                        None | Some(DataType::Array(_)) => {}
                        // int2vector and oidvector count from 0.
                        Some(DataType::Vector(kind)) => {
                            let i = self.expr(index, scope, Some(&DataType::Int4))?;
                            let from = Expr::Binary(
                                BinOp::Add,
                                Box::new(i),
                                Box::new(Expr::Literal(Value::Int(1))),
                            );
                            let element = match kind {
                                aqueduct_values::VectorKind::Int2 => DataType::Int2,
                                aqueduct_values::VectorKind::Oid => DataType::Oid,
                            };
                            return Ok(Expr::Cast(
                                Box::new(Expr::Call(Func::Subscript, vec![array, from])),
                                element,
                            ));
                        }
                        // A `name` is an array of bytes, from 0
                        // (`typname[0] = '_'`).
                        Some(DataType::Name) => {
                            let i = self.expr(index, scope, Some(&DataType::Int4))?;
                            let from = Expr::Binary(
                                BinOp::Add,
                                Box::new(i),
                                Box::new(Expr::Literal(Value::Int(1))),
                            );
                            return Ok(Expr::Cast(
                                Box::new(Expr::Call(
                                    Func::Substring,
                                    vec![array, from, Expr::Literal(Value::Int(1))],
                                )),
                                DataType::Char,
                            ));
                        }
                        Some(ty) => {
                            return Err(SqlError::new(
                                "42804",
                                format!(
                                "cannot subscript type {} because it does not support subscripting",
                                type_name(&ty)
                            ),
                            ))
                        }
                    }
                    let index = self.expr(index, scope, Some(&DataType::Int4))?;
                    if let Some(ty) = self.known_type(&index, scope) {
                        if !matches!(ty, DataType::Int2 | DataType::Int4 | DataType::Int8) {
                            return Err(SqlError::new(
                                "42804",
                                "array subscript must have type integer",
                            ));
                        }
                    }
                    Expr::Call(Func::Subscript, vec![array, index])
                }
                _ => {
                    return Err(SqlError::unsupported(
                        "array slices, multiple subscripts and field access",
                    ))
                }
            },
            other => return Err(SqlError::unsupported(format!("the expression {other}"))),
        })
    }

    /// `x op ANY (array)` and `x op ALL (array)`: the array takes the type
    /// of arrays of `x` (so `id = ANY($1)` asks for an array parameter).
    fn any_all(
        &mut self,
        left: &ast::Expr,
        compare_op: &ast::BinaryOperator,
        right: &ast::Expr,
        all: bool,
        scope: &Scope,
    ) -> Result<Expr, SqlError> {
        let op = bin_op(compare_op)?;
        if !op.is_comparison() {
            return Err(SqlError::unsupported(format!(
                "operator {} with ANY or ALL",
                op.symbol()
            )));
        }
        if let ast::Expr::Subquery(q) = right {
            let kind = if all {
                SubqueryKind::All(op)
            } else {
                SubqueryKind::Any(op)
            };
            return self.subquery(kind, q, Some(left), scope);
        }
        let (l, r) = if is_placeholder(left) {
            let r = self.expr(right, scope, None)?;
            let element = match self.known_type(&r, scope) {
                Some(DataType::Array(e)) => Some(*e),
                _ => None,
            };
            (self.expr(left, scope, element.as_ref())?, r)
        } else {
            let l = self.expr(left, scope, None)?;
            let array = self.type_of(&l, scope).array_of();
            (l, self.expr(right, scope, Some(&array))?)
        };
        let element = self
            .known_type(&r, scope)
            .and_then(|t| t.element().cloned());
        let l = self.enum_literal(l, left, element.as_ref())?;
        match self.known_type(&r, scope) {
            None | Some(DataType::Array(_)) => {}
            Some(ty) => {
                return Err(SqlError::new(
                    "42809",
                    format!(
                        "op ANY/ALL (array) requires array on right side, not {}",
                        type_name(&ty)
                    ),
                ))
            }
        }
        let func = if all {
            Func::AllOf(op)
        } else {
            Func::AnyOf(op)
        };
        Ok(Expr::Call(func, vec![l, r]))
    }

    /// A quoted literal compared with an enum, read as a label of the enum
    /// type when it comes first too (`'ok' = mood`): a value alone does
    /// not say which enum type it would be, so it cannot wait for run time.
    fn enum_literal(
        &self,
        e: Expr,
        e_ast: &ast::Expr,
        other: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        match (other, &e) {
            (Some(ty @ DataType::Enum(_)), Expr::Literal(v @ Value::Text(_)))
                if is_untyped_literal(e_ast) =>
            {
                Ok(Expr::Literal(v.clone().coerce(ty)?))
            }
            _ => Ok(e),
        }
    }

    /// `ARRAY[a, b, ...]`: the elements take one type, as CASE's results do.
    fn array(
        &mut self,
        elements: &[ast::Expr],
        scope: &Scope,
        expected: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        let element = expected.and_then(DataType::element).cloned();
        if elements.is_empty() && element.is_none() {
            return Err(
                SqlError::new("42P18", "cannot determine type of empty array").with_hint(
                    "Explicitly cast to the desired type, for example ARRAY[]::integer[].",
                ),
            );
        }
        let refs: Vec<&ast::Expr> = elements.iter().collect();
        let bound = self.bind_unified(&refs, scope, element.as_ref(), Unify::Function("ARRAY"))?;
        for e in &bound {
            if matches!(self.known_type(e, scope), Some(DataType::Array(_))) {
                return Err(SqlError::unsupported("multidimensional arrays"));
            }
        }
        Ok(Expr::Call(Func::MakeArray, bound))
    }

    fn is_bool(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        value: bool,
        negated: bool,
    ) -> Result<Expr, SqlError> {
        // IS [NOT] TRUE/FALSE never yields NULL.
        let inner = self.expr(e, scope, Some(&DataType::Bool))?;
        let test = Expr::Call(
            Func::Coalesce,
            vec![
                Expr::Binary(
                    BinOp::Eq,
                    Box::new(inner),
                    Box::new(Expr::Literal(Value::Bool(value))),
                ),
                Expr::Literal(Value::Bool(false)),
            ],
        );
        Ok(if negated {
            Expr::Unary(UnOp::Not, Box::new(test))
        } else {
            test
        })
    }

    fn like(
        &mut self,
        expr: &ast::Expr,
        pattern: &ast::Expr,
        negated: bool,
        case_insensitive: bool,
        scope: &Scope,
    ) -> Result<Expr, SqlError> {
        Ok(Expr::Like {
            expr: Box::new(self.expr(expr, scope, Some(&DataType::Text))?),
            pattern: Box::new(self.expr(pattern, scope, Some(&DataType::Text))?),
            negated,
            case_insensitive,
        })
    }

    fn binary(
        &mut self,
        op: BinOp,
        left: &ast::Expr,
        right: &ast::Expr,
        scope: &Scope,
    ) -> Result<Expr, SqlError> {
        let logical = matches!(op, BinOp::And | BinOp::Or);
        let hint = if logical { Some(DataType::Bool) } else { None };
        // Bind the side that is not a parameter first, so `$1 = col` infers too.
        let left_is_param =
            matches!(left, ast::Expr::Value(v) if matches!(v.value, ast::Value::Placeholder(_)));
        let (l, r) = if left_is_param {
            let r = self.expr(right, scope, hint.as_ref())?;
            let ty = hint.clone().unwrap_or_else(|| self.type_of(&r, scope));
            (self.expr(left, scope, Some(&ty))?, r)
        } else {
            let l = self.expr(left, scope, hint.as_ref())?;
            let ty = hint.unwrap_or_else(|| self.type_of(&l, scope));
            let text_array = DataType::Array(Box::new(DataType::Text));
            let expected = match op {
                BinOp::Concat => match ty {
                    DataType::Json | DataType::Jsonb => Some(DataType::Jsonb),
                    DataType::Array(_) => Some(ty),
                    _ => Some(DataType::Text),
                },
                BinOp::JsonGet | BinOp::JsonGetText => None,
                BinOp::JsonPath | BinOp::JsonPathText | BinOp::HasAnyKey | BinOp::HasAllKeys => {
                    Some(text_array)
                }
                BinOp::HasKey => Some(DataType::Text),
                BinOp::Sub if matches!(ty, DataType::Json | DataType::Jsonb) => None,
                // PostgreSQL's only `+` of a timestamp takes an interval:
                // `ts + '1 day'` (while `ts - '1 day'` reads a timestamp).
                BinOp::Add if matches!(ty, DataType::Timestamp | DataType::TimestampTz) => {
                    Some(DataType::Interval)
                }
                // `interval * 2`, `interval / '4'`: a number.
                BinOp::Mul | BinOp::Div if ty == DataType::Interval => Some(DataType::Float8),
                _ => Some(ty),
            };
            (l, self.expr(right, scope, expected.as_ref())?)
        };
        let l = self.enum_literal(l, left, self.known_type(&r, scope).as_ref())?;
        if logical {
            let name = if op == BinOp::And { "AND" } else { "OR" };
            self.check_boolean(&l, scope, name)?;
            self.check_boolean(&r, scope, name)?;
        }
        let json_or_array = |t: Option<DataType>| {
            matches!(
                t,
                Some(DataType::Json | DataType::Jsonb | DataType::Array(_))
            )
        };
        let structured =
            json_or_array(self.known_type(&l, scope)) || json_or_array(self.known_type(&r, scope));
        if !logical && op != BinOp::Concat && !structured && bin_op_is_plain(op) {
            self.check_comparable(op, (&l, left), (&r, right), scope)?;
        }
        self.check_structured_operands(op, (&l, left), (&r, right), scope)?;
        let (l, r) = if op == BinOp::Concat && !structured {
            (self.real_as_text(l, scope), self.real_as_text(r, scope))
        } else {
            (l, r)
        };
        if op == BinOp::Concat {
            // Array concatenation, as array_cat, array_append or
            // array_prepend by the operands' types (a NULL array is empty).
            let is_array = |t: Option<DataType>| matches!(t, Some(DataType::Array(_)));
            let (a, b) = (
                is_array(self.known_type(&l, scope)),
                is_array(self.known_type(&r, scope)),
            );
            let func = match (a, b) {
                (true, true) => Some(Func::ArrayCat),
                (true, false) => Some(Func::ArrayAppend),
                (false, true) => Some(Func::ArrayPrepend),
                _ => None,
            };
            if let Some(func) = func {
                return Ok(Expr::Call(func, vec![l, r]));
            }
        }
        let e = Expr::Binary(op, Box::new(l), Box::new(r));
        Ok(match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => self.fit(e, scope),
            _ => e,
        })
    }

    /// Arithmetic whose result type is narrower than the 64 bits (or the
    /// double) it is computed in, cast to that type: an `integer` or
    /// `smallint` result out of range is an error (22003), a `real` result
    /// is rounded to `real`, as PostgreSQL computes in the type itself.
    fn fit(&self, e: Expr, scope: &Scope) -> Expr {
        match self.known_type(&e, scope) {
            Some(ty @ (DataType::Int2 | DataType::Int4 | DataType::Float4)) => {
                Expr::Cast(Box::new(e), ty)
            }
            _ => e,
        }
    }

    /// `e` as text where a `real` becomes text (a cast, `||`, `concat`): a
    /// `real` is held as the double nearest to it, whose own digits are not
    /// the real's (`0.1::real::text` is `0.1`).
    fn real_as_text(&self, e: Expr, scope: &Scope) -> Expr {
        if self.known_type(&e, scope) == Some(DataType::Float4) {
            Expr::Call(Func::RealText, vec![e])
        } else {
            e
        }
    }

    /// 42883 for a jsonb or array operator whose operands cannot have it, as
    /// PostgreSQL finds no such operator: `text -> unknown`,
    /// `integer[] @> jsonb`, `integer && integer[]`.
    fn check_structured_operands(
        &self,
        op: BinOp,
        (l, l_ast): (&Expr, &ast::Expr),
        (r, r_ast): (&Expr, &ast::Expr),
        scope: &Scope,
    ) -> Result<(), SqlError> {
        let json = |t: &Option<DataType>| matches!(t, Some(DataType::Json | DataType::Jsonb));
        let array = |t: &Option<DataType>| matches!(t, Some(DataType::Array(_)));
        let (a, b) = (self.known_type(l, scope), self.known_type(r, scope));
        let fits = match op {
            BinOp::JsonGet
            | BinOp::JsonGetText
            | BinOp::JsonPath
            | BinOp::JsonPathText
            | BinOp::HasKey
            | BinOp::HasAnyKey
            | BinOp::HasAllKeys => a.is_none() || json(&a),
            BinOp::Contains | BinOp::ContainedBy => {
                a.is_none() || b.is_none() || (json(&a) && json(&b)) || (array(&a) && array(&b))
            }
            BinOp::Overlap => (a.is_none() || array(&a)) && (b.is_none() || array(&b)),
            _ => true,
        };
        if fits {
            return Ok(());
        }
        let name = |t: &Option<DataType>, e: &ast::Expr| match t {
            _ if is_untyped_literal(e) => "unknown".to_string(),
            Some(t) => type_name(t),
            None => "unknown".to_string(),
        };
        Err(SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} {} {}",
                name(&a, l_ast),
                op.symbol(),
                name(&b, r_ast)
            ),
        )
        .with_hint("No operator matches the given name and argument types. You might need to add explicit type casts."))
    }

    /// Binds a condition (WHERE, HAVING, NOT, CASE WHEN, FILTER ...), which
    /// must be boolean (42804), as in PostgreSQL.
    pub(crate) fn condition(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        context: &str,
    ) -> Result<Expr, SqlError> {
        let x = self.expr(e, scope, Some(&DataType::Bool))?;
        if is_untyped_literal(e) {
            if let Expr::Literal(v @ Value::Text(_)) = &x {
                // 'maybe' is not a boolean: PostgreSQL's 22P02.
                v.clone().coerce(&DataType::Bool)?;
            }
        }
        self.check_boolean(&x, scope, context)?;
        Ok(x)
    }

    /// 42804 unless `x` is boolean (or of no type yet, as NULL).
    fn check_boolean(&self, x: &Expr, scope: &Scope, context: &str) -> Result<(), SqlError> {
        match self.known_type(x, scope) {
            None | Some(DataType::Bool) => Ok(()),
            Some(ty) => Err(SqlError::datatype_mismatch(format!(
                "argument of {context} must be type boolean, not type {}",
                type_name(&ty)
            ))),
        }
    }

    /// A comparison or arithmetic between text and a non-text type
    /// (`text_col = 1`, `text_col + 1`) has no operator in PostgreSQL
    /// (42883); a quoted literal takes the other side's type, and fails as
    /// that type if it cannot be read as one.
    fn check_comparable(
        &self,
        op: BinOp,
        (l, l_ast): (&Expr, &ast::Expr),
        (r, r_ast): (&Expr, &ast::Expr),
        scope: &Scope,
    ) -> Result<(), SqlError> {
        let (Some(a), Some(b)) = (self.known_type(l, scope), self.known_type(r, scope)) else {
            return Ok(());
        };
        // A quoted literal is read as the other side's type (at run time
        // when it came first); one that cannot be is PostgreSQL's 22P02.
        for (x, x_ast, other) in [(l, l_ast, &b), (r, r_ast, &a)] {
            if is_untyped_literal(x_ast) {
                if let Expr::Literal(v @ Value::Text(_)) = x {
                    if !other.is_textual() {
                        v.clone().coerce(other)?;
                    }
                }
                return Ok(());
            }
        }
        // Two enum types have no operators between them (PostgreSQL: no
        // `mood = size`).
        if let (DataType::Enum(x), DataType::Enum(y)) = (&a, &b) {
            if x.id != y.id {
                return Err(SqlError::new(
                    "42883",
                    format!(
                        "operator does not exist: {} {} {}",
                        x.name,
                        op.symbol(),
                        y.name
                    ),
                )
                .with_hint("compare their text: a::text = b::text"));
            }
        }
        let plain = |t: &DataType| {
            t.is_numeric()
                || matches!(
                    t,
                    DataType::Bool
                        | DataType::Date
                        | DataType::Timestamp
                        | DataType::TimestampTz
                        | DataType::Interval
                        | DataType::Uuid
                        | DataType::Bytea
                )
        };
        if (a.is_textual() && plain(&b)) || (b.is_textual() && plain(&a)) {
            return Err(SqlError::new(
                "42883",
                format!(
                    "operator does not exist: {} {} {}",
                    type_name(&a),
                    op.symbol(),
                    type_name(&b)
                ),
            )
            .with_hint("add an explicit cast, e.g. col::text = '1' or col = 1"));
        }
        Ok(())
    }

    fn value(&mut self, v: &ast::Value, expected: Option<&DataType>) -> Result<Expr, SqlError> {
        Ok(Expr::Literal(match v {
            ast::Value::Number(n, _) => {
                if let Ok(i) = n.parse::<i64>() {
                    Value::Int(i)
                } else if n.contains(['e', 'E'])
                    && matches!(expected, Some(DataType::Float4 | DataType::Float8))
                {
                    // A numeric in PostgreSQL, but read straight as the
                    // float it becomes (1e400 is out of range for one).
                    Value::Text(n.clone()).coerce(&DataType::Float8)?
                } else {
                    // 1.5, 1e-10, 9223372036854775808: numeric, as in PostgreSQL.
                    Value::Numeric(aqueduct_values::parse_numeric(n)?)
                }
            }
            ast::Value::SingleQuotedString(s)
            | ast::Value::EscapedStringLiteral(s)
            | ast::Value::DoubleQuotedString(s) => {
                // A quoted literal has no type of its own (PostgreSQL's
                // "unknown"): where the context expects a date, a number...
                // it is read as one, so `d IN ('2024-01-01')` compares dates.
                let text = Value::Text(s.clone());
                match expected {
                    Some(ty) if !ty.is_textual() => text.clone().coerce(ty).unwrap_or(text),
                    _ => text,
                }
            }
            ast::Value::DollarQuotedString(s) => Value::Text(s.value.clone()),
            ast::Value::HexStringLiteral(h) => {
                Value::Text(format!("\\x{h}")).coerce(&DataType::Bytea)?
            }
            ast::Value::Boolean(b) => Value::Bool(*b),
            ast::Value::Null => Value::Null,
            ast::Value::Placeholder(p) => return self.param(p, expected),
            other => return Err(SqlError::unsupported(format!("the literal {other}"))),
        }))
    }

    fn function_args(&self, f: &ast::Function) -> Result<(Vec<ast::Expr>, bool, bool), SqlError> {
        if f.over.is_some() {
            return Err(SqlError::new(
                "42P20",
                "window functions are not allowed here",
            ));
        }
        match &f.args {
            ast::FunctionArguments::None => Ok((vec![], false, false)),
            ast::FunctionArguments::Subquery(_) => Err(SqlError::unsupported("subqueries")),
            ast::FunctionArguments::List(list) => {
                let distinct = matches!(
                    list.duplicate_treatment,
                    Some(ast::DuplicateTreatment::Distinct)
                );
                if !list.clauses.is_empty() {
                    return Err(SqlError::unsupported(
                        "ORDER BY and other clauses inside function arguments",
                    ));
                }
                let mut out = Vec::new();
                let mut star = false;
                for a in &list.args {
                    match a {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => {
                            out.push(e.clone())
                        }
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => star = true,
                        other => {
                            return Err(SqlError::unsupported(format!("the argument {other}")))
                        }
                    }
                }
                Ok((out, distinct, star))
            }
        }
    }

    /// `now()` and its kin: the statement's clock reading as a constant.
    fn clock_reading(
        &mut self,
        clock: ClockFunc,
        name: &str,
        f: &ast::Function,
    ) -> Result<Expr, SqlError> {
        let (args, _, _) = self.function_args(f)?;
        if !args.is_empty() {
            return Err(SqlError::new(
                "42883",
                format!("function {name} takes no arguments"),
            ));
        }
        let Some(time) = self.time() else {
            return Err(session_dependent_in_view(name));
        };
        Ok(Expr::Literal(match clock {
            ClockFunc::Transaction => Value::TimestampTz(time.transaction_micros),
            ClockFunc::Statement => Value::TimestampTz(time.statement_micros),
            ClockFunc::Date => {
                Value::TimestampTz(time.transaction_micros).coerce(&DataType::Date)?
            }
        }))
    }

    fn function(
        &mut self,
        f: &ast::Function,
        scope: &Scope,
        expected: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        let name = object_name(&f.name)?;
        let name = name
            .strip_prefix("pg_catalog.")
            .unwrap_or(&name)
            .to_string();
        if AggFunc::by_name(&name).is_some() {
            return Err(SqlError::new(
                "42803",
                format!("aggregate function {name} is not allowed here"),
            ));
        }
        if let Some(clock) = ClockFunc::by_name(&name) {
            return self.clock_reading(clock, &name, f);
        }
        if let Some(v) = Volatile::by_name(&name) {
            return self.volatile_call(v, f, scope);
        }
        if name == "pg_get_serial_sequence" {
            return self.serial_sequence(f, scope);
        }
        if let ("array", ast::FunctionArguments::Subquery(q)) = (name.as_str(), &f.args) {
            return self.subquery(SubqueryKind::Array, q, None, scope);
        }

        if name == "make_interval" {
            return self.make_interval(f, scope);
        }
        // (Arguments a catalog function cannot take are reported below.)
        if let Ok((args, _, _)) = self.function_args(f) {
            if let Some(e) = self.catalog_function(&name, &args, scope)? {
                return Ok(e);
            }
            if let Some(e) = self.session_function(&name, &args, scope)? {
                return Ok(e);
            }
        }
        let func = Func::by_name(&name)
            .ok_or_else(|| SqlError::new("42883", format!("function {name}() does not exist")))?;
        if func == Func::CurrentUser && self.time.is_none() {
            return Err(session_dependent_in_view(&name));
        }
        if f.filter.is_some() {
            return Err(SqlError::new(
                "42809",
                format!("FILTER specified, but {name} is not an aggregate function"),
            ));
        }
        let (args, _, _) = self.function_args(f)?;
        check_arity(func, &name, args.len())?;
        let arg_hint = match func {
            Func::Lower
            | Func::Upper
            | Func::Length
            | Func::Trim
            | Func::LTrim
            | Func::RTrim
            | Func::Replace
            | Func::Concat => Some(DataType::Text),
            Func::Coalesce | Func::NullIf | Func::Greatest | Func::Least => expected.cloned(),
            Func::JsonbTypeof | Func::JsonbArrayLength | Func::JsonbSet => Some(DataType::Jsonb),
            Func::JustifyDays | Func::JustifyHours | Func::JustifyInterval => {
                Some(DataType::Interval)
            }
            Func::Age => Some(DataType::Timestamp),
            _ => None,
        };
        // jsonb_set(target, path text[], new jsonb [, create boolean]).
        let arg_hint_at = |i: usize| match (func, i) {
            (Func::JsonbSet, 1) => Some(DataType::Array(Box::new(DataType::Text))),
            (Func::JsonbSet, 3) => Some(DataType::Bool),
            (Func::ArrayLength | Func::ArrayUpper | Func::ArrayLower, 1) => Some(DataType::Int4),
            (Func::DatePart, 0) => Some(DataType::Text),
            _ => arg_hint.clone(),
        };
        let args = match func {
            // Arguments that must agree take one type, quoted literals
            // included (COALESCE(date_col, '2024-01-01') is a date).
            Func::Coalesce | Func::NullIf | Func::Greatest | Func::Least => {
                let refs: Vec<&ast::Expr> = args.iter().collect();
                let unify = match func {
                    Func::Coalesce => Unify::Function("COALESCE"),
                    Func::Greatest => Unify::Function("GREATEST"),
                    Func::Least => Unify::Function("LEAST"),
                    _ => Unify::LiteralsOnly,
                };
                let bound = self.bind_unified(&refs, scope, arg_hint.as_ref(), unify)?;
                if let ([a, b], [a_ast, b_ast]) = (bound.as_slice(), refs.as_slice()) {
                    if func == Func::NullIf {
                        self.check_comparable(BinOp::Eq, (a, a_ast), (b, b_ast), scope)?;
                    }
                }
                bound
            }
            _ => args
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let x = self.expr(a, scope, arg_hint_at(i).as_ref())?;
                    Ok(if func == Func::Concat {
                        self.real_as_text(x, scope)
                    } else {
                        x
                    })
                })
                .collect::<Result<Vec<_>, SqlError>>()?,
        };
        if func == Func::Round {
            // PostgreSQL has round(double precision) but no
            // round(double precision, integer).
            if let [x, _] = args.as_slice() {
                if let Some(ty @ (DataType::Float4 | DataType::Float8)) = self.known_type(x, scope)
                {
                    return Err(SqlError::new(
                        "42883",
                        format!("function round({}, integer) does not exist", type_name(&ty)),
                    )
                    .with_hint("cast the value to numeric: round(x::numeric, 2)"));
                }
            }
        }
        if func == Func::DatePart {
            self.check_date_part_argument("date_part", &args[1], scope)?;
        }
        let args = match (func, args.as_slice()) {
            // age(x) is age(today's midnight, x).
            (Func::Age, [x]) => {
                let Some(time) = self.time() else {
                    return Err(session_dependent_in_view(&name));
                };
                let day = Value::TimestampTz(time.transaction_micros).coerce(&DataType::Date)?;
                let midnight = day.coerce(&DataType::Timestamp)?;
                vec![Expr::Literal(midnight), x.clone()]
            }
            _ => args,
        };
        let call = Expr::Call(func, args);
        Ok(if func == Func::Abs {
            // abs(-2147483648) overflows an integer.
            self.fit(call, scope)
        } else {
            call
        })
    }

    /// `extract` and `date_part` take an interval here; other types are
    /// refused when they are bound, not when a row reaches them.
    fn check_date_part_argument(
        &self,
        name: &str,
        x: &Expr,
        scope: &Scope,
    ) -> Result<(), SqlError> {
        match self.known_type(x, scope) {
            None | Some(DataType::Interval) => Ok(()),
            Some(ty) => Err(SqlError::unsupported(format!(
                "{name} of a value of type {}",
                type_name(&ty)
            ))
            .with_hint("extract and date_part take an interval: cast the value to interval, or subtract timestamps")),
        }
    }

    /// `make_interval(years, months, weeks, days, hours, mins, secs)`, its
    /// arguments by position or by name (`make_interval(days => 10)`),
    /// missing ones zero.
    fn make_interval(&mut self, f: &ast::Function, scope: &Scope) -> Result<Expr, SqlError> {
        const PARAMETERS: [&str; 7] = ["years", "months", "weeks", "days", "hours", "mins", "secs"];
        const SECS: usize = 6;
        let no_such = || {
            SqlError::new("42883", "function make_interval with these arguments does not exist")
                .with_hint("make_interval(years, months, weeks, days, hours, mins, secs), each optional, by position or by name")
        };
        let args: &[ast::FunctionArg] = match &f.args {
            ast::FunctionArguments::List(list)
                if list.clauses.is_empty() && list.duplicate_treatment.is_none() =>
            {
                &list.args
            }
            ast::FunctionArguments::None => &[],
            _ => return Err(no_such()),
        };
        if f.over.is_some() || f.filter.is_some() {
            return Err(no_such());
        }
        let mut slots: [Option<Expr>; 7] = Default::default();
        let mut named = false;
        for (position, arg) in args.iter().enumerate() {
            let (slot, e) = match arg {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) if !named => (position, e),
                ast::FunctionArg::Unnamed(_) => {
                    return Err(SqlError::syntax(
                        "positional argument cannot follow named argument",
                    ))
                }
                ast::FunctionArg::Named {
                    name,
                    arg: ast::FunctionArgExpr::Expr(e),
                    ..
                }
                | ast::FunctionArg::ExprNamed {
                    name: ast::Expr::Identifier(name),
                    arg: ast::FunctionArgExpr::Expr(e),
                    ..
                } => {
                    named = true;
                    let slot = PARAMETERS
                        .iter()
                        .position(|p| *p == ident(name))
                        .ok_or_else(no_such)?;
                    (slot, e)
                }
                _ => return Err(no_such()),
            };
            let ty = if slot == SECS {
                DataType::Float8
            } else {
                DataType::Int4
            };
            let x = self.expr(e, scope, Some(&ty))?;
            let place = slots.get_mut(slot).ok_or_else(no_such)?;
            if place.is_some() {
                return Err(SqlError::syntax(format!(
                    "argument \"{}\" given more than once",
                    PARAMETERS[slot]
                )));
            }
            *place = Some(x);
        }
        let args = slots
            .into_iter()
            .enumerate()
            .map(|(i, x)| {
                x.unwrap_or(Expr::Literal(if i == SECS {
                    Value::Float(0.0)
                } else {
                    Value::Int(0)
                }))
            })
            .collect();
        Ok(Expr::Call(Func::MakeInterval, args))
    }

    /// Binds expressions that must have one type (COALESCE's arguments,
    /// CASE's results): a quoted literal or parameter among them takes the
    /// type of the others (the first typed one, or `expected`), as
    /// PostgreSQL resolves an unknown-typed literal; then, unless `unify`
    /// says only literals, the types must have a common type
    /// (`CASE types text and integer cannot be matched`, 42804), and
    /// expressions of a narrower number or datetime type are cast to it
    /// (`CASE WHEN c THEN 1 ELSE 2.5 END` is numeric).
    fn bind_unified(
        &mut self,
        items: &[&ast::Expr],
        scope: &Scope,
        expected: Option<&DataType>,
        unify: Unify,
    ) -> Result<Vec<Expr>, SqlError> {
        let unknown = |e: &ast::Expr| is_untyped_literal(e) || is_placeholder(e);
        let mut ty = expected.cloned();
        if ty.is_none() {
            for e in items {
                if unknown(e) || is_null_literal(e) {
                    continue;
                }
                let x = self.expr(e, scope, None)?;
                ty = self.known_type(&x, scope);
                if ty.is_some() {
                    break;
                }
            }
        }
        let mut bound = Vec::with_capacity(items.len());
        for e in items {
            let x = if unknown(e) {
                let x = self.expr(e, scope, ty.as_ref())?;
                // A literal that cannot be read as the others' type is
                // PostgreSQL's 22P02, not a text value.
                if let (Some(t), Expr::Literal(v @ Value::Text(_))) = (&ty, &x) {
                    if !t.is_textual() {
                        v.clone().coerce(t)?;
                    }
                }
                x
            } else {
                self.expr(e, scope, expected)?
            };
            bound.push(x);
        }
        let context = match unify {
            Unify::LiteralsOnly => return Ok(bound),
            Unify::Case(_) => "CASE",
            Unify::Function(name) => name,
        };
        let mut order: Vec<usize> = (0..bound.len()).collect();
        if unify == Unify::Case(true) {
            order.rotate_right(1);
        }
        let mut common: Option<DataType> = None;
        for i in order {
            let Some(t) = self.known_type(&bound[i], scope) else {
                continue;
            };
            common = Some(match common {
                None => t,
                Some(c) => common_type(&c, &t).ok_or_else(|| {
                    SqlError::datatype_mismatch(format!(
                        "{context} types {} and {} cannot be matched",
                        type_name(&c),
                        type_name(&t)
                    ))
                })?,
            });
        }
        if let Some(c) = common {
            for x in &mut bound {
                match self.known_type(x, scope) {
                    Some(t) if t != c && !(t.is_textual() && c.is_textual()) => {
                        *x = Expr::Cast(Box::new(x.clone()), c.clone());
                    }
                    _ => {}
                }
            }
        }
        Ok(bound)
    }

    // ---- queries ----

    fn query(&mut self, q: &ast::Query) -> Result<(Plan, Vec<Column>), SqlError> {
        if let Some(plan) = self.set_config(q)? {
            return Ok((plan, vec![Column::computed("set_config", DataType::Text)]));
        }
        if let Some(why) = needs_dataflow(self.catalog, q) {
            if !q.locks.is_empty() && matches!(why, NeedsDataflow::WindowFunction) {
                return Err(SqlError::new(
                    "0A000",
                    "FOR UPDATE is not allowed with window functions",
                ));
            }
            if !q.locks.is_empty() {
                return self.join_locking(q, &why);
            }
            return Ok((Plan::Dataflow(why), Vec::new()));
        }
        let select = match q.body.as_ref() {
            ast::SetExpr::Select(s) => s,
            ast::SetExpr::Query(inner) => return self.query(inner),
            other => {
                let why = NeedsDataflow::OtherBody(other.to_string());
                return Ok((Plan::Dataflow(why), Vec::new()));
            }
        };
        let (limit, offset) = self.limit(q)?;
        if select.from.is_empty() {
            return self.select_values(select, q, limit, offset);
        }
        let (mut plan, columns) = self.select(select, q.order_by.as_ref(), limit, offset)?;
        plan.locking = row_locking(q)?;
        if plan.locking.is_some() && (plan.body.grouping.is_some() || plan.body.distinct) {
            return Err(SqlError::new(
                "0A000",
                "FOR UPDATE is not allowed with GROUP BY, aggregate functions or DISTINCT",
            ));
        }
        Ok((Plan::Select(plan), columns))
    }

    /// Binds a query's LIMIT and OFFSET (constants or parameters).
    pub fn limit(&mut self, q: &ast::Query) -> Result<(Option<Expr>, Option<Expr>), SqlError> {
        let empty = Scope::empty();
        let (limit, offset) = match &q.limit_clause {
            None => (None, None),
            Some(ast::LimitClause::LimitOffset { limit, offset, .. }) => {
                (limit.clone(), offset.as_ref().map(|o| o.value.clone()))
            }
            Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
                (Some(limit.clone()), Some(offset.clone()))
            }
        };
        let mut bind = |e: Option<ast::Expr>| -> Result<Option<Expr>, SqlError> {
            match e {
                None => Ok(None),
                Some(e) => {
                    let x = self.expr(&e, &empty, Some(&DataType::Int8))?;
                    Ok(Some(x))
                }
            }
        };
        Ok((bind(limit)?, bind(offset)?))
    }

    fn select_values(
        &mut self,
        select: &ast::Select,
        q: &ast::Query,
        limit: Option<Expr>,
        offset: Option<Expr>,
    ) -> Result<(Plan, Vec<Column>), SqlError> {
        if select.selection.is_some() || q.order_by.is_some() || limit.is_some() || offset.is_some()
        {
            return Err(SqlError::unsupported(
                "WHERE, ORDER BY or LIMIT without FROM",
            ));
        }
        let scope = Scope::empty();
        let mut outputs = Vec::new();
        let mut columns = Vec::new();
        self.without_from = true;
        let bound = self.values_items(select, &scope, &mut outputs, &mut columns);
        self.without_from = false;
        bound?;
        Ok((Plan::Values(outputs), columns))
    }

    fn values_items(
        &mut self,
        select: &ast::Select,
        scope: &Scope,
        outputs: &mut Vec<Expr>,
        columns: &mut Vec<Column>,
    ) -> Result<(), SqlError> {
        for item in &select.projection {
            let (e, alias) = match item {
                ast::SelectItem::UnnamedExpr(e) => (e, None),
                ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(ident(alias))),
                _ => {
                    return Err(SqlError::syntax(
                        "SELECT * with no tables specified is not valid",
                    ))
                }
            };
            let x = self.expr(e, scope, None)?;
            columns.push(Column::computed(
                alias.unwrap_or_else(|| column_name(e)),
                self.type_of(&x, scope),
            ));
            outputs.push(x);
        }
        Ok(())
    }

    /// `FOR UPDATE [OF t, ...]` on a query that needs the dataflow: the
    /// tables of its FROM it locks rows of (all of them without OF). A
    /// query that groups, or is not one SELECT, is refused as PostgreSQL
    /// refuses it.
    fn join_locking(
        &self,
        q: &ast::Query,
        why: &NeedsDataflow,
    ) -> Result<(Plan, Vec<Column>), SqlError> {
        let select = match q.body.as_ref() {
            ast::SetExpr::Select(s) => s,
            _ => {
                return Err(SqlError::new(
                    "0A000",
                    format!("FOR UPDATE is not allowed with {why}"),
                ))
            }
        };
        let grouped =
            !matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
        if grouped || select.distinct.is_some() || select.having.is_some() {
            return Err(SqlError::new(
                "0A000",
                "FOR UPDATE is not allowed with GROUP BY, aggregate functions or DISTINCT",
            ));
        }
        let mut tables: Vec<(String, &Table)> = Vec::new();
        let mut factors: Vec<&ast::TableFactor> = Vec::new();
        for twj in &select.from {
            factors.push(&twj.relation);
            factors.extend(twj.joins.iter().map(|j| &j.relation));
        }
        while let Some(f) = factors.pop() {
            match f {
                ast::TableFactor::Table { name, alias, .. } => {
                    let n = object_name(name)?;
                    if let Some(t) = self.catalog.table(&n) {
                        let qualifier = alias.as_ref().map(|a| ident(&a.name)).unwrap_or(n);
                        tables.push((qualifier, t));
                    }
                }
                ast::TableFactor::NestedJoin {
                    table_with_joins, ..
                } => {
                    factors.push(&table_with_joins.relation);
                    factors.extend(table_with_joins.joins.iter().map(|j| &j.relation));
                }
                _ => {}
            }
        }
        let mut named: Vec<String> = Vec::new();
        let mut locking = RowLocking::Wait;
        for lock in &q.locks {
            if let Some(of) = &lock.of {
                named.push(object_name(of)?);
            }
            locking = match lock.nonblock {
                None => locking,
                Some(ast::NonBlock::Nowait) => RowLocking::NoWait,
                Some(ast::NonBlock::SkipLocked) => RowLocking::SkipLocked,
            };
        }
        for n in &named {
            if !tables.iter().any(|(q, _)| q == n) {
                return Err(SqlError::new(
                    "42P01",
                    format!("relation \"{n}\" in FOR UPDATE clause not found in FROM clause"),
                ));
            }
        }
        let mut targets = Vec::new();
        for (qualifier, t) in tables {
            if !named.is_empty() && !named.contains(&qualifier) {
                continue;
            }
            if !t.schema.has_primary_key() {
                return Err(SqlError::unsupported(format!(
                    "FOR UPDATE over several relations locking rows of \"{}\", which has no primary key",
                    t.schema.name
                ))
                .with_hint("name the tables with primary keys to lock: FOR UPDATE OF t"));
            }
            targets.push(LockTarget {
                table: t.schema.name.clone(),
                qualifier,
                key: t
                    .schema
                    .primary_key
                    .iter()
                    .map(|&i| t.schema.columns[i].name.clone())
                    .collect(),
            });
        }
        targets.reverse();
        Ok((
            Plan::JoinLocking(JoinLocking { targets, locking }),
            Vec::new(),
        ))
    }

    fn resolve_from(&self, from: &[ast::TableWithJoins]) -> Result<(&'a Table, String), SqlError> {
        let [twj] = from else {
            return Err(SqlError::unsupported(
                "selecting from several tables in this statement (a SELECT may join; INSERT, UPDATE and DELETE read one table)",
            ));
        };
        if !twj.joins.is_empty() {
            return Err(SqlError::unsupported(
                "JOIN in this statement (a SELECT may join; INSERT, UPDATE and DELETE read one table)",
            ));
        }
        match &twj.relation {
            ast::TableFactor::Table { name, alias, .. } => {
                let n = object_name(name)?;
                let t = self.table(&n)?;
                let q = alias.as_ref().map(|a| ident(&a.name)).unwrap_or(n);
                Ok((t, q))
            }
            _ => Err(SqlError::unsupported("subqueries in FROM")),
        }
    }

    fn select(
        &mut self,
        select: &ast::Select,
        order_by: Option<&ast::OrderBy>,
        limit: Option<Expr>,
        offset: Option<Expr>,
    ) -> Result<(SelectPlan, Vec<Column>), SqlError> {
        let (table, qualifier) = self.resolve_from(&select.from)?;
        let scope = Scope::table(table, &qualifier);
        let origin = |c: usize| table_column(table, c);
        let (body, columns) = self.select_body(&scope, &origin, select, order_by, limit, offset)?;
        // `needs_dataflow` sends every query with a window function there.
        assert!(
            body.windows.is_empty(),
            "a window function in direct evaluation"
        );
        let access = choose_access(table, body.filter.as_ref());
        Ok((
            SelectPlan {
                table: table.schema.id,
                access,
                body,
                locking: None,
            },
            columns,
        ))
    }

    /// Binds everything of a SELECT after FROM, over the rows `scope`
    /// describes; `origin(i)` describes input column `i` for result metadata.
    /// Direct evaluation and view compilation share it.
    pub fn select_body(
        &mut self,
        scope: &Scope,
        origin: &dyn Fn(usize) -> Column,
        select: &ast::Select,
        order_by: Option<&ast::OrderBy>,
        limit: Option<Expr>,
        offset: Option<Expr>,
    ) -> Result<(SelectBody, Vec<Column>), SqlError> {
        let scope = scope.clone();
        // Window functions run after WHERE, GROUP BY and HAVING, so none
        // may be in them.
        let no_window = |e: &ast::Expr, clause: &str| {
            if contains_window(e) {
                return Err(SqlError::new(
                    "42P20",
                    format!("window functions are not allowed in {clause}"),
                ));
            }
            Ok(())
        };
        if let Some(w) = &select.selection {
            no_window(w, "WHERE")?;
        }
        if let Some(h) = &select.having {
            no_window(h, "HAVING")?;
        }
        if let ast::GroupByExpr::Expressions(e, _) = &select.group_by {
            for g in e {
                no_window(g, "GROUP BY")?;
            }
        }
        let filter = match &select.selection {
            Some(w) => Some(self.condition(w, &scope, "WHERE")?),
            None => None,
        };
        let distinct = match &select.distinct {
            None | Some(ast::Distinct::All) => false,
            Some(ast::Distinct::Distinct) => true,
            Some(ast::Distinct::On(_)) => return Err(SqlError::unsupported("DISTINCT ON")),
        };
        let group_exprs: Vec<ast::Expr> = match &select.group_by {
            ast::GroupByExpr::Expressions(e, _) => e
                .iter()
                .map(|g| group_by_ordinal(g, &select.projection))
                .collect::<Result<_, _>>()?,
            ast::GroupByExpr::All(_) => return Err(SqlError::unsupported("GROUP BY ALL")),
        };
        let has_aggregates = !group_exprs.is_empty()
            || select.having.is_some()
            || select.projection.iter().any(|i| match i {
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => contains_aggregate(e),
                _ => false,
            });

        // Window function calls in the select list and ORDER BY become
        // references to columns of their own (`windows.rs`).
        let mut window_calls: Vec<ast::Function> = Vec::new();
        let mut own_order_by = order_by.cloned();
        if let Some(ast::OrderBy {
            kind: ast::OrderByKind::Expressions(items),
            ..
        }) = &mut own_order_by
        {
            for o in items {
                self.take_window_calls(&mut o.expr, &mut window_calls);
            }
        }
        let order_by = own_order_by.as_ref();

        // Output items: (expression AST or wildcard column, name).
        let mut items: Vec<(Option<ast::Expr>, Option<usize>, String)> = Vec::new();
        for item in &select.projection {
            match item {
                ast::SelectItem::UnnamedExpr(e) => {
                    let mut x = e.clone();
                    self.take_window_calls(&mut x, &mut window_calls);
                    items.push((Some(x), None, column_name(e)))
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let mut x = expr.clone();
                    self.take_window_calls(&mut x, &mut window_calls);
                    items.push((Some(x), None, ident(alias)))
                }
                ast::SelectItem::Wildcard(_) => {
                    for (i, c) in scope.columns.iter().enumerate() {
                        if !c.qualified_only {
                            items.push((None, Some(i), c.name.clone()));
                        }
                    }
                }
                ast::SelectItem::QualifiedWildcard(kind, _) => {
                    let q = match kind {
                        ast::SelectItemQualifiedWildcardKind::ObjectName(n) => object_name(n)?,
                        ast::SelectItemQualifiedWildcardKind::Expr(e) => e.to_string(),
                    };
                    let before = items.len();
                    for (i, c) in scope.columns.iter().enumerate() {
                        if c.qualifier.as_deref() == Some(q.as_str()) {
                            items.push((None, Some(i), c.name.clone()));
                        }
                    }
                    if items.len() == before {
                        return Err(SqlError::new(
                            "42P01",
                            format!("missing FROM-clause entry for table \"{q}\""),
                        ));
                    }
                }
                other => return Err(SqlError::unsupported(format!("{other}"))),
            }
        }

        let mut outputs = Vec::new();
        let mut columns = Vec::new();
        if has_aggregates {
            let mut keys = group_exprs
                .iter()
                .map(|g| self.expr(g, &scope, None))
                .collect::<Result<Vec<_>, _>>()?;
            self.functionally_dependent(&scope, &mut keys);
            let mut g = GroupBinder {
                keys,
                key_asts: group_exprs.clone(),
                windows: vec![DataType::Int8; window_calls.len()],
                aggregates: Vec::new(),
                agg_types: Vec::new(),
            };
            // The windows first: their columns follow the keys while
            // binding (their types are known then), and any aggregate
            // their arguments add comes after them.
            let mut windows = Vec::new();
            for (i, f) in window_calls.iter().enumerate() {
                let (item, ty) = self.window_item(f, &select.named_window, &mut |b, e| {
                    let x = b.grouped_expr(e, &scope, &mut g)?;
                    let ty = g.type_of(b, &x, &scope);
                    Ok((x, ty))
                })?;
                g.windows[i] = ty;
                windows.push(item);
            }
            for (e, col, name) in &items {
                let Some(e) = e else {
                    let c = col.expect("wildcard column");
                    let x = Expr::Column(c);
                    let pos = g.keys.iter().position(|k| *k == x).ok_or_else(|| {
                        SqlError::new("42803", format!("column \"{name}\" must appear in the GROUP BY clause or be used in an aggregate function"))
                    })?;
                    columns.push(origin(c));
                    outputs.push(Expr::Column(pos));
                    continue;
                };
                let x = self.grouped_expr(e, &scope, &mut g)?;
                let ty = g.type_of(self, &x, &scope);
                columns.push(match &x {
                    Expr::Column(p) if *p < g.keys.len() => match &g.keys[*p] {
                        Expr::Column(c)
                            if matches!(
                                e,
                                ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
                            ) =>
                        {
                            let mut col = origin(*c);
                            col.name = name.clone();
                            col
                        }
                        _ => computed_column(name.clone(), &x, ty),
                    },
                    _ => computed_column(name.clone(), &x, ty),
                });
                outputs.push(x);
            }
            let mut having = match &select.having {
                Some(h) => {
                    let x = self.grouped_expr(h, &scope, &mut g)?;
                    self.check_boolean(&x, &g.scope(self, &scope), "HAVING")?;
                    Some(x)
                }
                None => None,
            };
            let visible = outputs.len();
            let order = self.order_by(order_by, &items, &mut outputs, distinct, |b, e, _| {
                b.grouped_expr(e, &scope, &mut g)
            })?;
            // Bound over keys, windows, aggregates; the plan's row is
            // keys, aggregates, windows (the window operator appends).
            let (k, n, m) = (g.keys.len(), g.windows.len(), g.aggregates.len());
            if n > 0 {
                let mut remap = |e: &mut Expr| {
                    e.walk_mut(&mut |x| {
                        if let Expr::Column(c) = x {
                            *c = match *c {
                                c if c < k => c,
                                c if c < k + n => c + m,
                                c => c - n,
                            };
                        }
                    })
                };
                outputs.iter_mut().for_each(&mut remap);
                having.iter_mut().for_each(&mut remap);
                for w in &mut windows {
                    w.partition.iter_mut().for_each(&mut remap);
                    w.order.iter_mut().for_each(|o| remap(&mut o.expr));
                    w.call.args.iter_mut().for_each(&mut remap);
                }
            }
            return Ok((
                SelectBody {
                    filter,
                    grouping: Some(Grouping {
                        keys: g.keys,
                        aggregates: g.aggregates,
                        having,
                    }),
                    outputs,
                    visible,
                    order_by: order,
                    distinct,
                    limit,
                    offset,
                    windows,
                },
                columns,
            ));
        }
        // The windows' columns follow the input row's.
        let width = scope.columns.len();
        let mut windows = Vec::new();
        let mut with_windows = scope.clone();
        for (i, f) in window_calls.iter().enumerate() {
            let (item, ty) = self.window_item(f, &select.named_window, &mut |b, e| {
                let x = b.expr(e, &scope, None)?;
                let ty = b.type_of(&x, &scope);
                Ok((x, ty))
            })?;
            windows.push(item);
            with_windows.columns.push(ScopeColumn {
                qualifier: Some(WINDOW_QUALIFIER.into()),
                name: format!("w{i}"),
                ty,
                qualified_only: true,
                table: None,
            });
        }
        let scope = with_windows;
        for (e, col, name) in &items {
            match (e, col) {
                (None, Some(c)) => {
                    outputs.push(Expr::Column(*c));
                    columns.push(origin(*c));
                }
                (Some(e), _) => {
                    let x = self.expr(e, &scope, None)?;
                    columns.push(match &x {
                        Expr::Column(c) if *c < width => {
                            let mut col = origin(*c);
                            col.name = name.clone();
                            col
                        }
                        _ => computed_column(name.clone(), &x, self.type_of(&x, &scope)),
                    });
                    outputs.push(x);
                }
                _ => unreachable!("an item is an expression or a column"),
            }
        }
        let visible = outputs.len();
        let order = self.order_by(order_by, &items, &mut outputs, distinct, |b, e, _| {
            b.expr(e, &scope, None)
        })?;
        Ok((
            SelectBody {
                filter,
                grouping: None,
                outputs,
                visible,
                order_by: order,
                distinct,
                limit,
                offset,
                windows,
            },
            columns,
        ))
    }

    /// Binds ORDER BY items to output columns: by position, by output name,
    /// or as a new hidden output column.
    fn order_by(
        &mut self,
        order_by: Option<&ast::OrderBy>,
        items: &[(Option<ast::Expr>, Option<usize>, String)],
        outputs: &mut Vec<Expr>,
        distinct: bool,
        mut bind: impl FnMut(&mut Self, &ast::Expr, &[Expr]) -> Result<Expr, SqlError>,
    ) -> Result<Vec<SortKey>, SqlError> {
        let visible = outputs.len();
        let Some(ob) = order_by else {
            return Ok(Vec::new());
        };
        let exprs = match &ob.kind {
            ast::OrderByKind::Expressions(e) => e,
            ast::OrderByKind::All(_) => return Err(SqlError::unsupported("ORDER BY ALL")),
        };
        let mut keys = Vec::new();
        for o in exprs {
            let desc = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            let nulls_first = o.options.nulls_first.unwrap_or(desc);
            let pos = match &o.expr {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Number(n, _) => {
                        let p: usize = n.parse().unwrap_or(0);
                        if p == 0 || p > items.len() {
                            return Err(SqlError::new(
                                "42P10",
                                format!("ORDER BY position {n} is not in select list"),
                            ));
                        }
                        Some(p - 1)
                    }
                    _ => None,
                },
                ast::Expr::Identifier(i) => {
                    let name = ident(i);
                    items.iter().position(|(_, _, n)| *n == name)
                }
                _ => None,
            };
            let expr = match pos {
                Some(p) => Expr::Column(p),
                None => {
                    let x = bind(self, &o.expr, outputs)?;
                    match outputs[..visible].iter().position(|out| *out == x) {
                        // An expression of the select list sorts by its column.
                        Some(p) => Expr::Column(p),
                        None if distinct => return Err(SqlError::new(
                            "42P10",
                            "for SELECT DISTINCT, ORDER BY expressions must appear in select list",
                        )),
                        None => {
                            outputs.push(x);
                            Expr::Column(outputs.len() - 1)
                        }
                    }
                }
            };
            keys.push(SortKey {
                expr,
                desc,
                nulls_first,
            });
        }
        Ok(keys)
    }

    fn grouped_expr(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        g: &mut GroupBinder,
    ) -> Result<Expr, SqlError> {
        crate::limits::grow(|| self.grouped_expr_level(e, scope, g))
    }

    fn grouped_expr_level(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        g: &mut GroupBinder,
    ) -> Result<Expr, SqlError> {
        // A whole group key.
        if let Some(pos) = g.key_asts.iter().position(|k| k == e) {
            return Ok(Expr::Column(pos));
        }
        if let Some(i) = window_placeholder_index(e) {
            return Ok(Expr::Column(g.keys.len() + i));
        }
        match e {
            ast::Expr::Function(f) => {
                let name = object_name(&f.name)?;
                if let Some(func) = AggFunc::by_name(&name) {
                    let (plain, order) = split_order_by(f);
                    let f = &plain;
                    if !order.is_empty() && !func.collects() {
                        return Err(SqlError::unsupported(format!(
                            "ORDER BY inside {name}() (its result does not depend on the order)"
                        )));
                    }
                    let (args, distinct, star) = self.function_args(f)?;
                    let (func, arg) = match (func, star, args.as_slice()) {
                        (AggFunc::Count, true, []) => (AggFunc::CountStar, None),
                        (func, false, [a]) => {
                            if contains_aggregate(a) {
                                return Err(SqlError::new(
                                    "42803",
                                    "aggregate function calls cannot be nested",
                                ));
                            }
                            (func, Some(self.expr(a, scope, None)?))
                        }
                        _ => {
                            return Err(SqlError::new(
                                "42883",
                                format!("function {name} takes one argument"),
                            ))
                        }
                    };
                    let ty = match &arg {
                        Some(a) => func.result_type(&self.type_of(a, scope)),
                        None => DataType::Int8,
                    };
                    // `array_agg(x ORDER BY k DESC)`: the argument is
                    // `[k, desc, nulls_first, ..., x]` (`agg.rs`).
                    let (func, arg) = match (func, arg) {
                        (AggFunc::ArrayAgg | AggFunc::JsonbAgg, Some(x)) if !order.is_empty() => {
                            let mut parts = Vec::new();
                            for o in &order {
                                if contains_aggregate(&o.expr) {
                                    return Err(SqlError::new(
                                        "42803",
                                        "aggregate function calls cannot be nested",
                                    ));
                                }
                                let desc = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
                                parts.push(self.expr(&o.expr, scope, None)?);
                                parts.push(Expr::Literal(Value::Bool(desc)));
                                parts.push(Expr::Literal(Value::Bool(
                                    o.options.nulls_first.unwrap_or(desc),
                                )));
                            }
                            parts.push(x);
                            let ordered = if func == AggFunc::ArrayAgg {
                                AggFunc::OrderedArrayAgg
                            } else {
                                AggFunc::OrderedJsonbAgg
                            };
                            (ordered, Some(Expr::Call(Func::MakeArray, parts)))
                        }
                        other => other,
                    };
                    // agg(x) FILTER (WHERE c) is agg(CASE WHEN c THEN x END):
                    // every aggregate but COUNT(*) skips NULLs, and COUNT(*)
                    // becomes COUNT(CASE WHEN c THEN 1 END). Direct evaluation
                    // and views both see the rewritten argument.
                    let (func, arg) = match &f.filter {
                        None => (func, arg),
                        Some(_) if func.collects() => {
                            // The rewrite below would collect NULLs for
                            // the rows the filter leaves out.
                            return Err(SqlError::unsupported(format!(
                                "FILTER with {}",
                                func.name()
                            )));
                        }
                        Some(cond) => {
                            if contains_aggregate(cond) {
                                return Err(SqlError::new(
                                    "42803",
                                    "aggregate functions are not allowed in FILTER",
                                ));
                            }
                            let cond = self.condition(cond, scope, "FILTER")?;
                            let (func, value) = match arg {
                                Some(a) => (func, a),
                                None => (AggFunc::Count, Expr::Literal(Value::Int(1))),
                            };
                            let arg = Expr::Case {
                                operand: None,
                                whens: vec![(cond, value)],
                                otherwise: None,
                            };
                            (func, Some(arg))
                        }
                    };
                    g.aggregates.push(Aggregate {
                        func,
                        arg,
                        distinct,
                    });
                    g.agg_types.push(ty);
                    return Ok(Expr::Column(
                        g.keys.len() + g.windows.len() + g.aggregates.len() - 1,
                    ));
                }
                // A scalar function over grouped values.
                self.grouped_generic(e, scope, g)
            }
            ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => {
                let x = self.expr(e, scope, None)?;
                match g.keys.iter().position(|k| *k == x) {
                    Some(p) => Ok(Expr::Column(p)),
                    None => Err(SqlError::new(
                        "42803",
                        format!("column \"{e}\" must appear in the GROUP BY clause or be used in an aggregate function"),
                    )),
                }
            }
            other => self.grouped_generic(other, scope, g),
        }
    }

    /// Any other expression over a grouped row (CASE, NOT, IS NULL, CAST,
    /// LIKE, IN, BETWEEN ... around aggregates and group keys): each
    /// aggregate call and group key inside it is bound on its own and
    /// replaced by a reference to its column of the grouped row; what is
    /// left is bound as an ordinary expression over that row. A column that
    /// is neither grouped nor aggregated is the usual error.
    fn grouped_generic(
        &mut self,
        e: &ast::Expr,
        scope: &Scope,
        g: &mut GroupBinder,
    ) -> Result<Expr, SqlError> {
        use sqlparser::ast::VisitMut;
        use std::ops::ControlFlow;

        struct Replace<'b, 'a, 'g, 's> {
            binder: &'b mut Binder<'a>,
            group: &'g mut GroupBinder,
            scope: &'s Scope,
            error: Option<SqlError>,
        }
        impl ast::VisitorMut for Replace<'_, '_, '_, '_> {
            type Break = ();
            fn pre_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
                let is_aggregate = matches!(e, ast::Expr::Function(f)
                    if object_name(&f.name).ok().and_then(|n| AggFunc::by_name(&n)).is_some());
                let is_column = matches!(
                    e,
                    ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_)
                );
                let is_key = self.group.key_asts.iter().any(|k| k == e);
                if !(is_aggregate || is_column || is_key) {
                    return ControlFlow::Continue(());
                }
                match self.binder.grouped_expr(e, self.scope, self.group) {
                    Ok(Expr::Column(c)) => {
                        *e = ast::Expr::Identifier(ast::Ident::new(format!("{GROUPED_ALIAS}{c}")));
                        ControlFlow::Continue(())
                    }
                    Ok(_) => ControlFlow::Continue(()),
                    Err(err) => {
                        self.error = Some(err);
                        ControlFlow::Break(())
                    }
                }
            }
        }

        let mut rewritten = e.clone();
        let mut r = Replace {
            binder: self,
            group: g,
            scope,
            error: None,
        };
        let _ = rewritten.visit(&mut r);
        if let Some(err) = r.error {
            return Err(err);
        }
        let mut grouped = Scope::empty();
        let types: Vec<DataType> = g
            .keys
            .iter()
            .map(|k| self.type_of(k, scope))
            .chain(g.windows.iter().cloned())
            .chain(g.agg_types.iter().cloned())
            .collect();
        for (i, ty) in types.into_iter().enumerate() {
            grouped.columns.push(ScopeColumn {
                qualifier: None,
                name: format!("{GROUPED_ALIAS}{i}"),
                ty,
                qualified_only: false,
                table: None,
            });
        }
        self.expr(&rewritten, &grouped, None)
    }

    // ---- writes ----

    fn returning(
        &mut self,
        items: &Option<Vec<ast::SelectItem>>,
        table: &Table,
        scope: &Scope,
    ) -> Result<(Vec<Expr>, Vec<Column>), SqlError> {
        let mut outputs = Vec::new();
        let mut columns = Vec::new();
        for item in items.iter().flatten() {
            match item {
                ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                    for i in 0..table.schema.columns.len() {
                        outputs.push(Expr::Column(i));
                        columns.push(table_column(table, i));
                    }
                }
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                    let name = match item {
                        ast::SelectItem::ExprWithAlias { alias, .. } => ident(alias),
                        _ => column_name(e),
                    };
                    let x = self.expr(e, scope, None)?;
                    columns.push(match &x {
                        Expr::Column(c) => {
                            let mut col = table_column(table, *c);
                            col.name = name;
                            col
                        }
                        _ => Column::computed(name, self.type_of(&x, scope)),
                    });
                    outputs.push(x);
                }
                other => return Err(SqlError::unsupported(format!("{other}"))),
            }
        }
        Ok((outputs, columns))
    }

    fn insert(&mut self, i: &ast::Insert) -> Result<(Plan, Vec<Column>), SqlError> {
        let name = match &i.table {
            ast::TableObject::TableName(n) => object_name(n)?,
            _ => return Err(SqlError::unsupported("INSERT into a table function")),
        };
        let table = self.table(&name)?;
        let names = i
            .columns
            .iter()
            .map(object_name)
            .collect::<Result<Vec<_>, _>>()?;
        let mut columns = target_columns(table, &name, &names)?;
        // Without a column list, fewer values than columns fill the first
        // columns and leave the rest to their defaults, as PostgreSQL does.
        let fit = |width: usize, columns: &mut Vec<usize>| -> Result<(), SqlError> {
            if width > columns.len() {
                return Err(SqlError::syntax(
                    "INSERT has more expressions than target columns",
                ));
            }
            if width < columns.len() {
                if !names.is_empty() {
                    return Err(SqlError::syntax(
                        "INSERT has more target columns than expressions",
                    ));
                }
                columns.truncate(width);
            }
            Ok(())
        };
        let empty = Scope::empty();
        let source = match i.source.as_deref() {
            None => return Err(SqlError::unsupported("INSERT without VALUES or SELECT")),
            Some(q) => match q.body.as_ref() {
                ast::SetExpr::Values(values) => {
                    if values.rows.len() > MAX_INSERT_ROWS {
                        return Err(SqlError::new(
                            "54000",
                            format!("INSERT of {} rows exceeds the limit of {MAX_INSERT_ROWS} rows per statement", values.rows.len()),
                        ));
                    }
                    let mut rows = Vec::with_capacity(values.rows.len());
                    if let Some(first) = values.rows.first() {
                        fit(first.content.len(), &mut columns)?;
                    }
                    for row in &values.rows {
                        let row = &row.content;
                        if row.len() != columns.len() {
                            return Err(SqlError::syntax(
                                "VALUES lists must all be the same length",
                            ));
                        }
                        let mut bound = Vec::with_capacity(row.len());
                        for (e, c) in row.iter().zip(&columns) {
                            let column = &table.schema.columns[*c];
                            bound.push(match e {
                                ast::Expr::Identifier(id)
                                    if ident(id) == "default" && id.quote_style.is_none() =>
                                {
                                    self.default_of(column)?
                                }
                                e => {
                                    // `OVERRIDING SYSTEM VALUE` (see
                                    // `parse::rewrite_overriding`).
                                    if !i.overwrite {
                                        refuse_identity_value(column)?;
                                    }
                                    self.expr(e, &empty, Some(&column.ty))?
                                }
                            });
                        }
                        rows.push(bound);
                    }
                    InsertSource::Values(rows)
                }
                _ if needs_dataflow(self.catalog, q).is_some() => {
                    InsertSource::Evaluated(Box::new(q.clone()))
                }
                ast::SetExpr::Select(s) => {
                    let (limit, offset) = self.limit(q)?;
                    let (plan, cols) = self.select(s, q.order_by.as_ref(), limit, offset)?;
                    fit(cols.len(), &mut columns)?;
                    InsertSource::Query(Box::new(plan))
                }
                _ => return Err(SqlError::unsupported("this INSERT source")),
            },
        };
        let scope = {
            let mut s = Scope::table(table, &name);
            s.push_table(table, "excluded", true);
            s
        };
        let unique_sets: Vec<(String, Vec<usize>)> = table
            .schema
            .has_primary_key()
            .then(|| (format!("{name}_pkey"), table.schema.primary_key.clone()))
            .into_iter()
            .chain(
                table
                    .schema
                    .indexes
                    .iter()
                    .filter(|i| i.unique && i.is_physical())
                    .map(|i| (i.name.clone(), i.columns.clone())),
            )
            .collect();
        let mut arbiters: Vec<Vec<usize>> = if table.schema.has_primary_key() {
            vec![table.schema.primary_key.clone()]
        } else {
            Vec::new()
        };
        let on_conflict = match &i.on {
            None => OnConflict::Error,
            Some(ast::OnInsert::OnConflict(oc)) => {
                let no_match = || {
                    SqlError::new(
                        "42P10",
                        "there is no unique or exclusion constraint matching the ON CONFLICT specification",
                    )
                };
                arbiters = match &oc.conflict_target {
                    Some(ast::ConflictTarget::Columns(cols)) => {
                        let mut idx: Vec<usize> = cols
                            .iter()
                            .map(|c| {
                                table
                                    .schema
                                    .column_index(&ident(c))
                                    .ok_or_else(|| SqlError::undefined_column(&ident(c)))
                            })
                            .collect::<Result<_, _>>()?;
                        idx.sort_unstable();
                        let found = unique_sets.iter().find(|(_, set)| {
                            let mut set = set.clone();
                            set.sort_unstable();
                            set == idx
                        });
                        vec![found.ok_or_else(no_match)?.1.clone()]
                    }
                    Some(ast::ConflictTarget::OnConstraint(c)) => {
                        let c = object_name(c)?;
                        let found = unique_sets.iter().find(|(n, _)| *n == c).ok_or_else(|| {
                            SqlError::new(
                                "42704",
                                format!("constraint \"{c}\" for table \"{name}\" does not exist"),
                            )
                        })?;
                        vec![found.1.clone()]
                    }
                    None if matches!(oc.action, ast::OnConflictAction::DoNothing) => {
                        unique_sets.iter().map(|(_, set)| set.clone()).collect()
                    }
                    None => return Err(SqlError::new(
                        "42601",
                        "ON CONFLICT DO UPDATE requires inference specification or constraint name",
                    )
                    .with_hint("For example, ON CONFLICT (column_name).")),
                };
                match &oc.action {
                    ast::OnConflictAction::DoNothing => OnConflict::DoNothing,
                    ast::OnConflictAction::DoUpdate(du) => {
                        let assignments = self.assignments(&du.assignments, table, &scope)?;
                        let filter = match &du.selection {
                            Some(w) => Some(self.condition(w, &scope, "WHERE")?),
                            None => None,
                        };
                        OnConflict::DoUpdate {
                            assignments,
                            filter,
                        }
                    }
                }
            }
            Some(_) => return Err(SqlError::unsupported("ON DUPLICATE KEY")),
        };
        let row_scope = Scope::table(table, &name);
        let (returning, out_cols) = self.returning(&i.returning, table, &row_scope)?;
        let mut plan = self.insert_plan(table, &name, columns, source)?;
        plan.on_conflict = on_conflict;
        plan.arbiters = arbiters;
        plan.returning = returning;
        Ok((Plan::Insert(plan), out_cols))
    }

    /// An `INSERT` of `source` into `columns` of `table` (called `name`),
    /// without `ON CONFLICT` (a conflict on the primary key is an error)
    /// or `RETURNING`: its defaults, CHECK constraints and unique indexes
    /// on expressions bound. `INSERT` and `COPY ... FROM` both write
    /// through it.
    pub(crate) fn insert_plan(
        &mut self,
        table: &Table,
        name: &str,
        columns: Vec<usize>,
        source: InsertSource,
    ) -> Result<InsertPlan, SqlError> {
        let defaults = table
            .schema
            .columns
            .iter()
            .map(|c| self.default_of(c))
            .collect::<Result<Vec<_>, _>>()?;
        let checks = self.checks_of(table, name)?;
        let uniques = self.expr_uniques_of(table, name)?;
        Ok(InsertPlan {
            table: table.schema.id,
            columns,
            source,
            defaults,
            on_conflict: OnConflict::Error,
            arbiters: if table.schema.has_primary_key() {
                vec![table.schema.primary_key.clone()]
            } else {
                Vec::new()
            },
            checks,
            uniques,
            returning: Vec::new(),
        })
    }

    /// `COPY`: `FROM STDIN` as an `INSERT` of the copied columns (rows
    /// arrive at run time), `TO STDOUT` as its query (`SELECT cols FROM
    /// t` for a table); from or to a file or a program is refused with
    /// 42501, as PostgreSQL refuses a role without `pg_read_server_files`.
    fn copy(&mut self, st: &ast::Statement) -> Result<(Plan, Vec<Column>), SqlError> {
        let ast::Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            values,
        } = st
        else {
            return Err(SqlError::new("XX000", "not a COPY statement"));
        };
        match target {
            ast::CopyTarget::Stdin | ast::CopyTarget::Stdout => {}
            ast::CopyTarget::File { .. } | ast::CopyTarget::Program { .. } => {
                let (role, verb) = match (target, to) {
                    (ast::CopyTarget::Program { .. }, _) => {
                        ("pg_execute_server_program", if *to { "to" } else { "from" })
                    }
                    (_, true) => ("pg_write_server_files", "to"),
                    (_, false) => ("pg_read_server_files", "from"),
                };
                let what = if matches!(target, ast::CopyTarget::Program { .. }) {
                    "an external program"
                } else {
                    "a file"
                };
                return Err(SqlError::new(
                    "42501",
                    format!(
                        "must be superuser or have privileges of the {role} role to COPY {verb} {what}"
                    ),
                )
                .with_hint(
                    "Anyone can COPY to stdout or from stdin. psql's \\copy command also works for anyone.",
                ));
            }
        }
        if !values.is_empty() {
            return Err(SqlError::unsupported(
                "COPY data in the query string (send it after CopyInResponse)",
            ));
        }
        let opts = crate::copy::options(options, legacy_options, *to)?;
        let (table_name, column_idents) = match source {
            ast::CopySource::Table {
                table_name,
                columns,
            } => (table_name, columns),
            ast::CopySource::Query(q) => {
                return Ok((
                    Plan::Copy(CopyPlan {
                        relation: String::new(),
                        options: opts,
                        direction: CopyDirection::ToStdout { query: q.clone() },
                    }),
                    Vec::new(),
                ))
            }
        };
        let name = object_name(table_name)?;
        let names: Vec<String> = column_idents.iter().map(ident).collect();
        if *to {
            let table = self.table(&name)?;
            target_columns(table, &name, &names)?;
            let list = if column_idents.is_empty() {
                "*".to_string()
            } else {
                column_idents
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let sql = format!("SELECT {list} FROM {table_name}");
            let query = match crate::parse::parse(&sql)?.pop() {
                Some(ast::Statement::Query(q)) => q,
                _ => return Err(SqlError::new("XX000", "COPY's query did not parse")),
            };
            return Ok((
                Plan::Copy(CopyPlan {
                    relation: name,
                    options: opts,
                    direction: CopyDirection::ToStdout { query },
                }),
                Vec::new(),
            ));
        }
        let table = self.table(&name)?;
        let columns = target_columns(table, &name, &names)?;
        let copied = columns
            .iter()
            .map(|&c| {
                let def = &table.schema.columns[c];
                Column {
                    name: def.name.clone(),
                    ty: def.ty.clone(),
                    table_id: table.schema.id,
                    column_id: c as i16 + 1,
                }
            })
            .collect();
        let source = InsertSource::Copied(CopiedRows {
            relation: name.clone(),
            ..CopiedRows::default()
        });
        let insert = self.insert_plan(table, &name, columns, source)?;
        Ok((
            Plan::Copy(CopyPlan {
                relation: name,
                options: opts,
                direction: CopyDirection::FromStdin {
                    insert: Box::new(insert),
                    columns: copied,
                },
            }),
            Vec::new(),
        ))
    }

    fn assignments(
        &mut self,
        list: &[ast::Assignment],
        table: &Table,
        scope: &Scope,
    ) -> Result<Vec<(usize, Expr)>, SqlError> {
        let mut out = Vec::new();
        for a in list {
            let ast::AssignmentTarget::ColumnName(n) = &a.target else {
                return Err(SqlError::unsupported("assigning to a tuple"));
            };
            let name = object_name(n)?;
            let c = table
                .schema
                .column_index(&name)
                .ok_or_else(|| SqlError::undefined_column(&name))?;
            let ty = table.schema.columns[c].ty.clone();
            let column = &table.schema.columns[c];
            let value = match &a.value {
                ast::Expr::Identifier(id) if ident(id) == "default" && id.quote_style.is_none() => {
                    self.default_of(column)?
                }
                e => {
                    if column.identity.is_some_and(|i| i.always) {
                        return Err(SqlError::new(
                            "428C9",
                            format!("column \"{}\" can only be updated to DEFAULT", column.name),
                        )
                        .with_detail(format!(
                            "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
                            column.name
                        )));
                    }
                    self.expr(e, scope, Some(&ty))?
                }
            };
            out.push((c, value));
        }
        Ok(out)
    }

    fn update(&mut self, u: &ast::Update) -> Result<(Plan, Vec<Column>), SqlError> {
        if u.from.is_some() {
            return Err(SqlError::unsupported("UPDATE ... FROM"));
        }
        let (table, qualifier) = self.resolve_from(std::slice::from_ref(&u.table))?;
        let scope = Scope::table(table, &qualifier);
        let assignments = self.assignments(&u.assignments, table, &scope)?;
        let filter = match &u.selection {
            Some(w) => Some(self.condition(w, &scope, "WHERE")?),
            None => None,
        };
        let (returning, cols) = self.returning(&u.returning, table, &scope)?;
        let checks = self.checks_of(table, &qualifier)?;
        let uniques = self.expr_uniques_of(table, &qualifier)?;
        Ok((
            Plan::Update(UpdatePlan {
                table: table.schema.id,
                access: choose_access(table, filter.as_ref()),
                filter,
                assignments,
                checks,
                uniques,
                returning,
            }),
            cols,
        ))
    }

    fn delete(&mut self, d: &ast::Delete) -> Result<(Plan, Vec<Column>), SqlError> {
        if d.using.is_some() {
            return Err(SqlError::unsupported("DELETE ... USING"));
        }
        let from = match &d.from {
            ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
        };
        let (table, qualifier) = self.resolve_from(from)?;
        let scope = Scope::table(table, &qualifier);
        let filter = match &d.selection {
            Some(w) => Some(self.condition(w, &scope, "WHERE")?),
            None => None,
        };
        let (returning, cols) = self.returning(&d.returning, table, &scope)?;
        Ok((
            Plan::Delete(DeletePlan {
                table: table.schema.id,
                access: choose_access(table, filter.as_ref()),
                filter,
                returning,
            }),
            cols,
        ))
    }

    // ---- schema ----

    fn create_table(&mut self, c: &ast::CreateTable) -> Result<Plan, SqlError> {
        if c.query.is_some() {
            return Err(SqlError::unsupported("CREATE TABLE ... AS"));
        }
        let name = object_name(&c.name)?;
        let ephemeral = ephemeral_option(&c.table_options)?;
        let shard_key = shard_key_option(&c.table_options)?;
        if let Some(k) = &shard_key {
            if !c.columns.iter().any(|col| ident(&col.name) == *k) {
                return Err(SqlError::new(
                    "42703",
                    format!("shard key column \"{k}\" is not a column of table \"{name}\""),
                ));
            }
        }
        let mut columns = Vec::new();
        let mut primary_key: Vec<usize> = Vec::new();
        let mut uniques: Vec<UniqueSpec> = Vec::new();
        let mut checks: Vec<(Option<String>, Option<usize>, ast::Expr)> = Vec::new();
        let mut foreign_keys: Vec<(Option<String>, Vec<usize>, &ast::ForeignKeyConstraint)> =
            Vec::new();
        let mut sequences: Vec<SequenceDef> = Vec::new();
        for (i, col) in c.columns.iter().enumerate() {
            let cname = ident(&col.name);
            if columns.iter().any(|c: &ColumnDef| c.name == cname) {
                return Err(SqlError::new(
                    "42701",
                    format!("column \"{cname}\" specified more than once"),
                ));
            }
            let serial = serial_type(&col.data_type);
            let ty = match &serial {
                Some(ty) => ty.clone(),
                None => sql_type(self.catalog, &col.data_type)?,
            };
            let mut def = ColumnDef::new(cname.clone(), ty.clone());
            let owned_sequence =
                |sequences: &mut Vec<SequenceDef>, options: &[ast::SequenceOptions]| {
                    let seq_name = format!("{name}_{cname}_seq");
                    let def = sequence_def(&seq_name, &ty, options)?;
                    sequences.push(SequenceDef {
                        owned_by: Some((0, i)),
                        ..def
                    });
                    Ok::<String, SqlError>(seq_name)
                };
            if serial.is_some() {
                let seq_name = owned_sequence(&mut sequences, &[])?;
                def.not_null = true;
                def.default_expr = Some(format!("nextval('{seq_name}'::regclass)"));
            }
            for opt in &col.options {
                match &opt.option {
                    ast::ColumnOption::Null => {}
                    ast::ColumnOption::NotNull => def.not_null = true,
                    ast::ColumnOption::Default(e) => {
                        if serial.is_some() || def.identity.is_some() {
                            return Err(SqlError::syntax(format!(
                                "multiple default values specified for column \"{cname}\" of table \"{name}\""
                            )));
                        }
                        self.column_default(&mut def, e)?;
                    }
                    ast::ColumnOption::Generated {
                        generated_as:
                            generated_as @ (ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault),
                        sequence_options,
                        generation_expr: None,
                        ..
                    } => {
                        if !matches!(ty, DataType::Int2 | DataType::Int4 | DataType::Int8) {
                            return Err(SqlError::new(
                                "22023",
                                format!("identity column type must be smallint, integer, or bigint (column \"{cname}\")"),
                            ));
                        }
                        if def.has_default() || def.identity.is_some() {
                            return Err(SqlError::syntax(format!(
                                "multiple default values specified for column \"{cname}\" of table \"{name}\""
                            )));
                        }
                        owned_sequence(&mut sequences, sequence_options.as_deref().unwrap_or(&[]))?;
                        def.not_null = true;
                        def.identity = Some(Identity {
                            always: matches!(generated_as, ast::GeneratedAs::Always),
                            // Given its id when the table is created.
                            sequence: 0,
                        });
                    }
                    ast::ColumnOption::PrimaryKey(pk) => {
                        if !primary_key.is_empty() {
                            return Err(SqlError::new(
                                "42P16",
                                format!(
                                    "multiple primary keys for table \"{name}\" are not allowed"
                                ),
                            ));
                        }
                        let _ = pk;
                        primary_key = vec![i];
                    }
                    ast::ColumnOption::Unique(u) => uniques.push((
                        u.name.as_ref().map(ident),
                        vec![i],
                        deferral(&u.characteristics),
                    )),
                    ast::ColumnOption::Check(ck) => checks.push((
                        ck.name.as_ref().map(ident).or(opt.name.as_ref().map(ident)),
                        Some(i),
                        (*ck.expr).clone(),
                    )),
                    ast::ColumnOption::ForeignKey(fk) => foreign_keys.push((
                        fk.name.as_ref().map(ident).or(opt.name.as_ref().map(ident)),
                        vec![i],
                        fk,
                    )),
                    other => return Err(SqlError::unsupported(format!("column option {other}"))),
                }
            }
            columns.push(def);
        }
        let col_by_name = |n: &str| -> Result<usize, SqlError> {
            columns.iter().position(|c| c.name == n).ok_or_else(|| {
                SqlError::new(
                    "42703",
                    format!("column \"{n}\" named in key does not exist"),
                )
            })
        };
        let col_index = |ic: &ast::IndexColumn| -> Result<usize, SqlError> {
            let ast::Expr::Identifier(id) = &ic.column.expr else {
                return Err(SqlError::unsupported("an expression in a key"));
            };
            col_by_name(&ident(id))
        };
        for tc in &c.constraints {
            match tc {
                ast::TableConstraint::PrimaryKey(pk) => {
                    if !primary_key.is_empty() {
                        return Err(SqlError::new(
                            "42P16",
                            format!("multiple primary keys for table \"{name}\" are not allowed"),
                        ));
                    }
                    primary_key = pk.columns.iter().map(col_index).collect::<Result<_, _>>()?;
                }
                ast::TableConstraint::Unique(u) => uniques.push((
                    u.name.as_ref().map(ident),
                    u.columns.iter().map(col_index).collect::<Result<_, _>>()?,
                    deferral(&u.characteristics),
                )),
                ast::TableConstraint::Check(ck) => {
                    checks.push((ck.name.as_ref().map(ident), None, (*ck.expr).clone()))
                }
                ast::TableConstraint::ForeignKey(fk) => foreign_keys.push((
                    fk.name.as_ref().map(ident),
                    fk.columns
                        .iter()
                        .map(|c| col_by_name(&ident(c)))
                        .collect::<Result<_, _>>()?,
                    fk,
                )),
                other => return Err(SqlError::unsupported(format!("constraint {other}"))),
            }
        }
        crate::limits::check_index_keys(primary_key.len())?;
        for (_, cols, _) in &uniques {
            crate::limits::check_index_keys(cols.len())?;
        }
        for &k in &primary_key {
            columns[k].not_null = true;
        }
        if ephemeral && !uniques.is_empty() {
            return Err(ephemeral_refused(
                &name,
                "a unique constraint",
                "An ephemeral table keeps no rows to check against: drop the UNIQUE \
                 constraint (a primary key names each row, checked only among one \
                 transaction's own writes).",
            ));
        }
        let mut names = ConstraintNames::default();
        let indexes: Vec<aqueduct_tables::IndexDef> = uniques
            .into_iter()
            .map(|(given, cols, (deferrable, initially_deferred))| {
                let name = given.unwrap_or_else(|| {
                    names.pick(&name, cols.iter().map(|&c| columns[c].name.as_str()), "key")
                });
                aqueduct_tables::IndexDef {
                    deferrable,
                    initially_deferred,
                    constraint: true,
                    ..aqueduct_tables::IndexDef::on_columns(name, cols, true)
                }
            })
            .collect();
        let mut schema = TableSchema {
            id: 0,
            name: name.clone(),
            columns,
            primary_key,
            indexes,
            ephemeral,
            shard_key,
            ..TableSchema::default()
        };
        // CHECK conditions are bound over the table's row, to refuse bad
        // ones now; the text is kept and bound again by each write.
        for (given, column, e) in checks {
            let scope = Scope::table_schema(&schema, &name);
            self.condition(&e, &scope, "CHECK")?;
            let check_name = given.unwrap_or_else(|| match column {
                Some(c) => names.pick(&name, [schema.columns[c].name.as_str()], "check"),
                None => names.pick(&name, check_columns(&e, &schema), "check"),
            });
            schema.checks.push(CheckDef {
                name: check_name,
                sql: stored_sql(&e),
            });
        }
        for (given, cols, fk) in foreign_keys {
            let def = self.foreign_key(&schema, given, cols, fk, &mut names)?;
            schema.foreign_keys.push(def);
        }
        Ok(Plan::Ddl(Ddl::CreateTable {
            schema,
            sequences,
            if_not_exists: c.if_not_exists,
        }))
    }

    /// Binds a `DEFAULT`: a literal is kept as a value, anything else
    /// (`now()`, `nextval(...)`, arithmetic) as SQL text evaluated by each
    /// insert, after checking here that it binds.
    pub(crate) fn column_default(
        &mut self,
        def: &mut ColumnDef,
        e: &ast::Expr,
    ) -> Result<(), SqlError> {
        let x = self.expr(e, &Scope::empty(), Some(&def.ty))?;
        let literal = match &x {
            Expr::Literal(v) => Some(v),
            Expr::Cast(inner, _) => match inner.as_ref() {
                Expr::Literal(v) => Some(v),
                _ => None,
            },
            _ => None,
        };
        match literal {
            Some(v) if is_literal(e) => {
                def.default = Some(v.clone().coerce(&def.ty)?);
                def.default_expr = None;
            }
            _ => {
                def.default = None;
                def.default_expr = Some(stored_sql(e));
            }
        }
        Ok(())
    }

    /// `TRUNCATE [TABLE] t, ... [RESTART IDENTITY] [CASCADE]`: with
    /// CASCADE the tables whose foreign keys reference these go too, as
    /// far as the references reach; without, they are refused (0A000).
    fn truncate(&mut self, t: &ast::Truncate) -> Result<Plan, SqlError> {
        let mut tables: Vec<TableId> = Vec::new();
        for target in &t.table_names {
            let name = object_name(&target.name)?;
            match self.catalog.table(&name) {
                Some(table) => tables.push(table.schema.id),
                None if t.if_exists => {}
                None => return Err(SqlError::undefined_table(&name)),
            }
        }
        let cascade = matches!(t.cascade, Some(ast::CascadeOption::Cascade));
        let mut i = 0;
        while i < tables.len() {
            let id = tables[i];
            i += 1;
            for other in self.catalog.tables.values() {
                if tables.contains(&other.schema.id)
                    || !other
                        .schema
                        .foreign_keys
                        .iter()
                        .any(|fk| fk.ref_table == id)
                {
                    continue;
                }
                if !cascade {
                    let name = &self.catalog.tables[&id].schema.name;
                    return Err(SqlError::new(
                        "0A000",
                        "cannot truncate a table referenced in a foreign key constraint",
                    )
                    .with_detail(format!(
                        "Table \"{}\" references \"{name}\".",
                        other.schema.name
                    ))
                    .with_hint(format!(
                        "Truncate table \"{}\" at the same time, or use TRUNCATE ... CASCADE.",
                        other.schema.name
                    )));
                }
                tables.push(other.schema.id);
            }
        }
        Ok(Plan::Truncate(TruncatePlan {
            tables,
            restart_identity: matches!(t.identity, Some(ast::TruncateIdentityOption::Restart)),
        }))
    }

    /// A column's default, bound for one statement: its value, the next
    /// value of its identity sequence, its expression, or NULL.
    pub(crate) fn default_of(&mut self, c: &ColumnDef) -> Result<Expr, SqlError> {
        if let Some(v) = &c.default {
            return Ok(Expr::Literal(v.clone()));
        }
        if let Some(identity) = c.identity {
            let seq = self
                .catalog
                .sequences
                .get(&identity.sequence)
                .ok_or_else(|| {
                    SqlError::new(
                        "XX000",
                        format!("the sequence of identity column \"{}\" is missing", c.name),
                    )
                })?;
            return Ok(Expr::Volatile(
                Volatile::NextVal,
                vec![Expr::Literal(Value::Text(seq.def.name.clone()))],
            ));
        }
        match &c.default_expr {
            Some(sql) => {
                let e = crate::parse::parse_expr(sql)?;
                self.expr(&e, &Scope::empty(), Some(&c.ty))
            }
            None => Ok(Expr::Literal(Value::Null)),
        }
    }

    /// A table's CHECK constraints, bound over its row.
    fn checks_of(&mut self, table: &Table, name: &str) -> Result<Vec<(String, Expr)>, SqlError> {
        let scope = Scope::table(table, name);
        table
            .schema
            .checks
            .iter()
            .map(|ck| {
                let e = crate::parse::parse_expr(&ck.sql)?;
                Ok((ck.name.clone(), self.condition(&e, &scope, "CHECK")?))
            })
            .collect()
    }

    /// The table's unique indexes on expressions and partial unique
    /// indexes, bound over its row.
    pub(crate) fn expr_uniques_of(
        &mut self,
        table: &Table,
        name: &str,
    ) -> Result<Vec<ExprUnique>, SqlError> {
        let scope = Scope::table(table, name);
        let mut out = Vec::new();
        for idx in table
            .schema
            .indexes
            .iter()
            .filter(|i| i.unique && !i.is_physical())
        {
            let (keys, shown) = if idx.expressions.is_empty() {
                let names: Vec<&str> = idx
                    .columns
                    .iter()
                    .map(|&c| table.schema.columns[c].name.as_str())
                    .collect();
                (
                    idx.columns.iter().map(|&c| Expr::Column(c)).collect(),
                    names.join(", "),
                )
            } else {
                let keys = idx
                    .expressions
                    .iter()
                    .map(|sql| {
                        let e = crate::parse::parse_expr(sql)?;
                        self.expr(&e, &scope, None)
                    })
                    .collect::<Result<Vec<_>, SqlError>>()?;
                (keys, idx.expressions.join(", "))
            };
            let predicate = match &idx.predicate {
                Some(sql) => {
                    let e = crate::parse::parse_expr(sql)?;
                    Some(self.condition(&e, &scope, "WHERE")?)
                }
                None => None,
            };
            out.push(ExprUnique {
                name: idx.name.clone(),
                keys,
                predicate,
                shown,
            });
        }
        Ok(out)
    }

    /// Grouping by a table's primary key groups by all of its columns (they
    /// depend on the key), so the select list may use them, as PostgreSQL
    /// allows: they are added to `keys`, which changes no group.
    fn functionally_dependent(&self, scope: &Scope, keys: &mut Vec<Expr>) {
        let mut instances: Vec<(Option<String>, TableId)> = Vec::new();
        for c in &scope.columns {
            if let Some((t, _)) = c.table {
                let at = (c.qualifier.clone(), t);
                if !instances.contains(&at) {
                    instances.push(at);
                }
            }
        }
        for (qualifier, t) in instances {
            let Some(table) = self.catalog.table_by_id(t) else {
                continue;
            };
            if !table.schema.has_primary_key() {
                continue;
            }
            let columns: Vec<(usize, usize)> = scope
                .columns
                .iter()
                .enumerate()
                .filter_map(|(i, c)| match c.table {
                    Some((ct, p)) if ct == t && c.qualifier == qualifier => Some((i, p)),
                    _ => None,
                })
                .collect();
            let grouped_by_key = table.schema.primary_key.iter().all(|pk| {
                columns
                    .iter()
                    .any(|(i, p)| p == pk && keys.contains(&Expr::Column(*i)))
            });
            if grouped_by_key {
                for (i, _) in columns {
                    if !keys.contains(&Expr::Column(i)) {
                        keys.push(Expr::Column(i));
                    }
                }
            }
        }
    }

    /// `pg_get_serial_sequence('table', 'column')`: the sequence a
    /// `serial` or identity column owns, or NULL.
    fn serial_sequence(&mut self, f: &ast::Function, scope: &Scope) -> Result<Expr, SqlError> {
        let (args, _, _) = self.function_args(f)?;
        let bound = args
            .iter()
            .map(|a| self.expr(a, scope, Some(&DataType::Text)))
            .collect::<Result<Vec<_>, _>>()?;
        let constant = |e: &Expr| match e {
            Expr::Literal(Value::Text(t)) => Some(t.clone()),
            Expr::Cast(inner, _) => match inner.as_ref() {
                Expr::Literal(Value::Text(t)) => Some(t.clone()),
                _ => None,
            },
            _ => None,
        };
        let texts: Vec<String> = bound.iter().filter_map(constant).collect();
        if texts.len() != bound.len() {
            // Known when the statement runs (a catalog query's columns):
            // looked up among the sequences columns own.
            return match bound.as_slice() {
                [_, _] => {
                    let l = self.catalog_lookups();
                    Ok(Expr::Lookup(l.serial_sequence.clone(), bound))
                }
                _ => Err(SqlError::new(
                    "42883",
                    "function pg_get_serial_sequence() takes two arguments",
                )),
            };
        }
        let [table, column] = texts.as_slice() else {
            return Err(SqlError::new(
                "42883",
                "function pg_get_serial_sequence() takes two arguments",
            ));
        };
        let table = table
            .strip_prefix("public.")
            .unwrap_or(table)
            .trim_matches('"');
        let t = self.table(table)?;
        let c = t
            .schema
            .column_index(column)
            .ok_or_else(|| SqlError::undefined_column(column))?;
        let owned = self
            .catalog
            .sequences
            .values()
            .find(|s| s.def.owned_by == Some((t.schema.id, c)));
        Ok(Expr::Literal(match owned {
            Some(s) => Value::Text(format!("public.{}", s.def.name)),
            None => Value::Null,
        }))
    }

    /// `nextval`, `currval`, `setval`, `lastval`, `gen_random_uuid`: only
    /// where a statement runs, never in a maintained view.
    fn volatile_call(
        &mut self,
        v: Volatile,
        f: &ast::Function,
        scope: &Scope,
    ) -> Result<Expr, SqlError> {
        if self.time.is_none() {
            return Err(SqlError::new(
                "0A000",
                format!(
                    "{}() is not allowed in a maintained view: its value changes from call to call",
                    v.name()
                ),
            ));
        }
        let (args, _, _) = self.function_args(f)?;
        let types: &[DataType] = match v {
            Volatile::NextVal | Volatile::CurrVal => &[DataType::Text],
            Volatile::SetVal if args.len() == 3 => {
                &[DataType::Text, DataType::Int8, DataType::Bool]
            }
            Volatile::SetVal => &[DataType::Text, DataType::Int8],
            Volatile::LastVal | Volatile::GenRandomUuid => &[],
        };
        if args.len() != types.len() {
            return Err(SqlError::new(
                "42883",
                format!(
                    "function {}() with {} arguments does not exist",
                    v.name(),
                    args.len()
                ),
            ));
        }
        let args = args
            .iter()
            .zip(types)
            .map(|(a, ty)| self.expr(a, scope, Some(ty)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr::Volatile(v, args))
    }

    /// A `FOREIGN KEY ... REFERENCES` of `schema` (a table being created,
    /// which may reference itself).
    pub(crate) fn foreign_key(
        &mut self,
        schema: &TableSchema,
        given: Option<String>,
        cols: Vec<usize>,
        fk: &ast::ForeignKeyConstraint,
        names: &mut ConstraintNames,
    ) -> Result<ForeignKeyDef, SqlError> {
        crate::limits::check_foreign_key_keys(cols.len())?;
        let ref_name = object_name(&fk.foreign_table)?;
        let referenced: &TableSchema = if ref_name == schema.name {
            schema
        } else {
            &self.table(&ref_name)?.schema
        };
        if referenced.ephemeral {
            return Err(ephemeral_refused(
                &ref_name,
                "a foreign key referencing it",
                "An ephemeral table keeps no rows to reference: reference a stored table.",
            ));
        }
        let ref_columns: Vec<usize> = if fk.referred_columns.is_empty() {
            if referenced.primary_key.is_empty() {
                return Err(SqlError::new(
                    "42830",
                    format!("there is no primary key for referenced table \"{ref_name}\""),
                ));
            }
            referenced.primary_key.clone()
        } else {
            fk.referred_columns
                .iter()
                .map(|c| {
                    referenced.column_index(&ident(c)).ok_or_else(|| {
                        SqlError::new(
                            "42703",
                            format!(
                                "column \"{}\" referenced in foreign key constraint does not exist",
                                ident(c)
                            ),
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        };
        if cols.len() != ref_columns.len() {
            return Err(SqlError::new(
                "42830",
                "number of referencing and referenced columns for foreign key disagree",
            ));
        }
        let mut sorted = ref_columns.clone();
        sorted.sort_unstable();
        let unique_sets = std::iter::once(referenced.primary_key.clone()).chain(
            referenced
                .indexes
                .iter()
                .filter(|i| i.unique && i.is_physical())
                .map(|i| i.columns.clone()),
        );
        if !unique_sets.into_iter().any(|mut set| {
            set.sort_unstable();
            !set.is_empty() && set == sorted
        }) {
            return Err(SqlError::new(
                "42830",
                format!("there is no unique constraint matching given keys for referenced table \"{ref_name}\""),
            ));
        }
        for (&c, &r) in cols.iter().zip(&ref_columns) {
            let (a, b) = (&schema.columns[c].ty, &referenced.columns[r].ty);
            if !key_types_match(a, b) {
                return Err(SqlError::new(
                    "42804",
                    format!(
                        "foreign key constraint cannot be implemented: key columns \"{}\" and \"{}\" are of incompatible types: {a} and {b}",
                        schema.columns[c].name, referenced.columns[r].name
                    ),
                ));
            }
        }
        let action = |a: &Option<ast::ReferentialAction>| match a {
            None | Some(ast::ReferentialAction::NoAction) => FkAction::NoAction,
            Some(ast::ReferentialAction::Restrict) => FkAction::Restrict,
            Some(ast::ReferentialAction::Cascade) => FkAction::Cascade,
            Some(ast::ReferentialAction::SetNull) => FkAction::SetNull,
            Some(ast::ReferentialAction::SetDefault) => FkAction::SetDefault,
        };
        let name = given.unwrap_or_else(|| {
            names.pick(
                &schema.name,
                cols.iter().map(|&c| schema.columns[c].name.as_str()),
                "fkey",
            )
        });
        Ok(ForeignKeyDef {
            name,
            columns: cols,
            // The table itself until it has its id (see `with_id`).
            ref_table: if ref_name == schema.name {
                0
            } else {
                referenced.id
            },
            ref_columns,
            on_delete: action(&fk.on_delete),
            on_update: action(&fk.on_update),
            deferrable: deferral(&fk.characteristics).0,
            initially_deferred: deferral(&fk.characteristics).1,
        })
    }

    fn create_index(&mut self, c: &ast::CreateIndex) -> Result<Plan, SqlError> {
        // Indexes here are ordered, as btree is; an equality-only hash
        // index is served by one too. Other methods are not pretended.
        match &c.using {
            None | Some(ast::IndexType::BTree | ast::IndexType::Hash) => {}
            Some(other) => {
                return Err(SqlError::unsupported(format!(
                    "index access method \"{}\"",
                    other.to_string().to_lowercase()
                ))
                .with_hint(
                    "indexes here are ordered (btree): drop USING, or leave the index out (queries answer the same without it)",
                ))
            }
        }
        let table_name = object_name(&c.table_name)?;
        let table = self.table(&table_name)?;
        let scope = Scope::table(table, &table_name);
        let mut columns: Vec<usize> = Vec::new();
        let mut expressions: Vec<String> = Vec::new();
        // Words for the index's default name.
        let mut words: Vec<String> = Vec::new();
        // An index on expressions reads these columns.
        let read = |e: &Expr, columns: &mut Vec<usize>| {
            e.walk(&mut |x| {
                if let Expr::Column(i) = x {
                    if !columns.contains(i) {
                        columns.push(*i);
                    }
                }
            })
        };
        let mut volatile = false;
        for ic in &c.columns {
            let e = match &ic.column.expr {
                ast::Expr::Nested(inner) => inner.as_ref(),
                e => e,
            };
            match e {
                ast::Expr::Identifier(id) => {
                    let i = table
                        .schema
                        .column_index(&ident(id))
                        .ok_or_else(|| SqlError::undefined_column(&ident(id)))?;
                    columns.push(i);
                    words.push(table.schema.columns[i].name.clone());
                }
                e => {
                    let bound = self.expr(e, &scope, None)?;
                    bound.walk(&mut |x| volatile |= matches!(x, Expr::Volatile(..)));
                    read(&bound, &mut columns);
                    expressions.push(e.to_string());
                    words.push(match e {
                        ast::Expr::Function(f) => f.name.to_string().to_lowercase(),
                        _ => "expr".into(),
                    });
                }
            }
        }
        if !expressions.is_empty() && expressions.len() != c.columns.len() {
            return Err(
                SqlError::unsupported("an index on both columns and expressions").with_hint(
                    "index the columns as expressions too, e.g. (lower(email), (tenant))",
                ),
            );
        }
        let predicate = match &c.predicate {
            Some(p) => {
                let bound = self.condition(p, &scope, "WHERE")?;
                bound.walk(&mut |x| volatile |= matches!(x, Expr::Volatile(..)));
                let mut cols = Vec::new();
                read(&bound, &mut cols);
                // The predicate's columns are the index's too (dropping
                // one drops the index), once it is not on plain columns.
                if expressions.is_empty() {
                    expressions = columns
                        .iter()
                        .map(|&i| quoted_ident(&table.schema.columns[i].name))
                        .collect();
                }
                for i in cols {
                    if !columns.contains(&i) {
                        columns.push(i);
                    }
                }
                Some(p.to_string())
            }
            None => None,
        };
        if volatile {
            return Err(SqlError::new(
                "42P17",
                "functions in index expression must be marked IMMUTABLE",
            ));
        }
        let name = match &c.name {
            Some(n) => object_name(n)?,
            // As PostgreSQL names it: `t_a_b_idx`, then `t_a_b_idx1`, ...
            // while a relation has the name.
            None => {
                let base = format!("{table_name}_{}_idx", words.join("_"));
                let taken = |n: &str| {
                    self.catalog.index_owner(n).is_some()
                        || self.catalog.table(n).is_some()
                        || self.catalog.view(n).is_some()
                        || self.catalog.sequence(n).is_some()
                };
                let mut name = base.clone();
                let mut n = 0;
                while taken(&name) {
                    n += 1;
                    name = format!("{base}{n}");
                }
                name
            }
        };
        crate::limits::check_index_keys(c.columns.len())?;
        let index = aqueduct_tables::IndexDef {
            name,
            columns,
            unique: c.unique,
            expressions,
            predicate,
            ..Default::default()
        };
        let check = if index.unique && !index.is_physical() {
            let mut schema = (*table.schema).clone();
            schema.indexes = vec![index.clone()];
            let probe = Table::new(schema);
            self.expr_uniques_of(&probe, &table_name)?.pop()
        } else {
            None
        };
        Ok(Plan::Ddl(Ddl::CreateIndex {
            table: table_name,
            index,
            check,
            if_not_exists: c.if_not_exists,
        }))
    }
}

/// `name` as SQL writes it: quoted unless it is a plain lower-case word.
fn quoted_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Names given to the columns of a grouped row while binding an expression
/// over it (never visible: they are bound away at once).
const GROUPED_ALIAS: &str = "__aqueduct_grouped_";

/// Aggregates found while binding a grouped query.
struct GroupBinder {
    keys: Vec<Expr>,
    key_asts: Vec<ast::Expr>,
    /// The types of the window functions' columns, which follow the keys
    /// while binding (`select_body` moves them last).
    windows: Vec<DataType>,
    aggregates: Vec<Aggregate>,
    agg_types: Vec<DataType>,
}

impl GroupBinder {
    /// The type of an expression over the grouped row (group keys, then
    /// aggregate results).
    fn type_of(&self, b: &Binder<'_>, e: &Expr, scope: &Scope) -> DataType {
        b.type_of(e, &self.scope(b, scope))
    }

    /// The columns of the grouped row.
    fn scope(&self, b: &Binder<'_>, scope: &Scope) -> Scope {
        let mut grouped = Scope::empty();
        for k in &self.keys {
            grouped.columns.push(ScopeColumn {
                qualifier: None,
                name: String::new(),
                ty: b.type_of(k, scope),
                qualified_only: false,
                table: None,
            });
        }
        for ty in self.windows.iter().chain(&self.agg_types) {
            grouped.columns.push(ScopeColumn {
                qualifier: None,
                name: String::new(),
                ty: ty.clone(),
                qualified_only: false,
                table: None,
            });
        }
        grouped
    }
}

/// How `bind_unified` treats the types of its expressions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unify {
    /// CASE results; with an ELSE, PostgreSQL resolves it first (so its
    /// type comes first in the error message).
    Case(bool),
    /// The arguments of COALESCE, GREATEST, LEAST (named for messages).
    Function(&'static str),
    /// Only quoted literals and parameters take the others' type (NULLIF,
    /// whose arguments are compared instead).
    LiteralsOnly,
}

/// `INTERVAL '...' [fields]`: the literal read as PostgreSQL reads it, a
/// bare number in the last field named and finer fields dropped
/// (`INTERVAL '90' MINUTE`, `INTERVAL '1 day 02:03:04' HOUR TO MINUTE`).
fn interval_literal(i: &ast::Interval) -> Result<Value, SqlError> {
    use aqueduct_values::IntervalFields as F;
    use ast::DateTimeField as D;
    let text = match i.value.as_ref() {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) | ast::Value::EscapedStringLiteral(s) => {
                Some(s.clone())
            }
            _ => None,
        },
        _ => None,
    }
    .ok_or_else(|| SqlError::syntax("INTERVAL takes a quoted literal: INTERVAL '1 day'"))?;
    let fields = match (&i.leading_field, &i.last_field) {
        (None, None) => F::All,
        (Some(D::Year), None) => F::Year,
        (Some(D::Month), None) => F::Month,
        (Some(D::Day), None) => F::Day,
        (Some(D::Hour), None) => F::Hour,
        (Some(D::Minute), None) => F::Minute,
        (Some(D::Second), None) => F::Second,
        (Some(D::Year), Some(D::Month)) => F::YearToMonth,
        (Some(D::Day), Some(D::Hour)) => F::DayToHour,
        (Some(D::Day), Some(D::Minute)) => F::DayToMinute,
        (Some(D::Day), Some(D::Second)) => F::DayToSecond,
        (Some(D::Hour), Some(D::Minute)) => F::HourToMinute,
        (Some(D::Hour), Some(D::Second)) => F::HourToSecond,
        (Some(D::Minute), Some(D::Second)) => F::MinuteToSecond,
        _ => return Err(SqlError::syntax(format!("invalid interval fields in {i}"))),
    };
    // Only seconds have a precision: SECOND(p), ... TO SECOND(p).
    let precision = match (
        &i.leading_field,
        i.leading_precision,
        i.fractional_seconds_precision,
    ) {
        (_, None, None) => None,
        (Some(D::Second), p, None) => p,
        (_, None, p) if i.last_field == Some(D::Second) => p,
        _ => {
            return Err(SqlError::syntax(format!(
                "invalid interval precision in {i}"
            )))
        }
    };
    let precision = precision.map(|p| {
        u32::try_from(p)
            .unwrap_or(u32::MAX)
            .min(aqueduct_values::MAX_INTERVAL_PRECISION)
    });
    Ok(aqueduct_values::parse_interval_fields(&text, fields, precision)?.to_value())
}

/// PostgreSQL's common type of two types (`select_common_type`): numbers
/// widen to the widest (integers < numeric < real < double precision),
/// dates and timestamps to the widest, text and varchar to text; other
/// types only match themselves. `None` when they cannot be matched.
fn common_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType as T;
    let datetime = |t: &DataType| match t {
        T::Date => Some(1),
        T::Timestamp => Some(2),
        T::TimestampTz => Some(3),
        _ => None,
    };
    if a == b {
        return Some(a.clone());
    }
    if a.is_numeric() && b.is_numeric() {
        return Some(if numeric_rank(b) > numeric_rank(a) {
            b.clone()
        } else {
            a.clone()
        });
    }
    if a.is_textual() && b.is_textual() {
        return Some(if a == &T::Text || b == &T::Text {
            T::Text
        } else {
            T::Varchar(None)
        });
    }
    match (datetime(a), datetime(b)) {
        (Some(x), Some(y)) => Some(if y > x { b.clone() } else { a.clone() }),
        _ => None,
    }
}

/// 42883 for a call of a jsonb or array function with the wrong number of
/// arguments, as PostgreSQL finds no function of that signature.
fn check_arity(func: Func, name: &str, n: usize) -> Result<(), SqlError> {
    let ok = match func {
        Func::JsonbTypeof
        | Func::JsonbArrayLength
        | Func::ToJsonb
        | Func::Cardinality
        | Func::JustifyDays
        | Func::JustifyHours
        | Func::JustifyInterval => n == 1,
        Func::ArrayLength | Func::ArrayUpper | Func::ArrayLower | Func::DatePart => n == 2,
        Func::Replace => n == 3,
        Func::Age => n == 1 || n == 2,
        Func::JsonbSet => n == 3 || n == 4,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(SqlError::new(
            "42883",
            format!("function {name} with {n} arguments does not exist"),
        )
        .with_hint("No function matches the given name and argument types."))
    }
}

/// A type's name as PostgreSQL's messages give it (without modifiers).
fn type_name(ty: &DataType) -> String {
    match ty {
        DataType::Varchar(_) => "character varying".into(),
        other => other.unconstrained().to_string(),
    }
}

fn bin_op(op: &ast::BinaryOperator) -> Result<BinOp, SqlError> {
    Ok(match op {
        ast::BinaryOperator::Plus => BinOp::Add,
        ast::BinaryOperator::Minus => BinOp::Sub,
        ast::BinaryOperator::Multiply => BinOp::Mul,
        ast::BinaryOperator::Divide => BinOp::Div,
        ast::BinaryOperator::Modulo => BinOp::Mod,
        ast::BinaryOperator::Eq => BinOp::Eq,
        ast::BinaryOperator::NotEq => BinOp::NotEq,
        ast::BinaryOperator::Lt => BinOp::Lt,
        ast::BinaryOperator::LtEq => BinOp::LtEq,
        ast::BinaryOperator::Gt => BinOp::Gt,
        ast::BinaryOperator::GtEq => BinOp::GtEq,
        ast::BinaryOperator::And => BinOp::And,
        ast::BinaryOperator::Or => BinOp::Or,
        ast::BinaryOperator::StringConcat => BinOp::Concat,
        ast::BinaryOperator::Arrow => BinOp::JsonGet,
        ast::BinaryOperator::LongArrow => BinOp::JsonGetText,
        ast::BinaryOperator::HashArrow => BinOp::JsonPath,
        ast::BinaryOperator::HashLongArrow => BinOp::JsonPathText,
        ast::BinaryOperator::AtArrow => BinOp::Contains,
        ast::BinaryOperator::ArrowAt => BinOp::ContainedBy,
        ast::BinaryOperator::Question => BinOp::HasKey,
        ast::BinaryOperator::QuestionPipe => BinOp::HasAnyKey,
        ast::BinaryOperator::QuestionAnd => BinOp::HasAllKeys,
        ast::BinaryOperator::PGOverlap => BinOp::Overlap,
        ast::BinaryOperator::BitwiseAnd => BinOp::BitAnd,
        ast::BinaryOperator::BitwiseOr => BinOp::BitOr,
        other => return Err(SqlError::unsupported(format!("operator {other}"))),
    })
}

/// A regular expression match operator (`~`, `~*`, `!~`, `!~*`, and
/// psql's `OPERATOR(pg_catalog.~)`): the match and whether it is negated.
fn regex_op(op: &ast::BinaryOperator) -> Option<(BinOp, bool)> {
    use ast::BinaryOperator as B;
    let symbol = match op {
        B::PGRegexMatch => "~",
        B::PGRegexIMatch => "~*",
        B::PGRegexNotMatch => "!~",
        B::PGRegexNotIMatch => "!~*",
        B::PGCustomBinaryOperator(parts) => match parts.as_slice() {
            [schema, s] if schema == "pg_catalog" => s.as_str(),
            [s] => s.as_str(),
            _ => return None,
        },
        _ => return None,
    };
    Some(match symbol {
        "~" => (BinOp::Regex, false),
        "~*" => (BinOp::RegexI, false),
        "!~" => (BinOp::Regex, true),
        "!~*" => (BinOp::RegexI, true),
        _ => return None,
    })
}

/// Comparison and arithmetic, whose operands `check_comparable` checks.
fn bin_op_is_plain(op: BinOp) -> bool {
    op.is_comparison()
        || matches!(
            op,
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod
        )
}

/// A quoted string with no type of its own (`'2024-01-01'`).
fn is_untyped_literal(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Value(v) => matches!(v.value, ast::Value::SingleQuotedString(_)),
        ast::Expr::Nested(inner) => is_untyped_literal(inner),
        _ => false,
    }
}

/// A `$n` parameter.
fn is_placeholder(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Value(v) => matches!(v.value, ast::Value::Placeholder(_)),
        ast::Expr::Nested(inner) => is_placeholder(inner),
        _ => false,
    }
}

/// A select-list item that is a set-returning function (`unnest(a)`,
/// `generate_subscripts(a, 1)`, `generate_series(x, y)`).
fn is_set_function(item: &ast::SelectItem) -> bool {
    let (ast::SelectItem::UnnamedExpr(ast::Expr::Function(f))
    | ast::SelectItem::ExprWithAlias {
        expr: ast::Expr::Function(f),
        ..
    }) = item
    else {
        return false;
    };
    object_name(&f.name).is_ok_and(|n| {
        matches!(
            n.strip_prefix("pg_catalog.").unwrap_or(&n),
            "unnest" | "generate_subscripts" | "generate_series"
        )
    })
}

/// `GROUP BY 2`: the second output column's expression (42P10 past the
/// last one); any other grouping expression as it is.
fn group_by_ordinal(g: &ast::Expr, projection: &[ast::SelectItem]) -> Result<ast::Expr, SqlError> {
    let ast::Expr::Value(v) = g else {
        return Ok(g.clone());
    };
    let ast::Value::Number(n, _) = &v.value else {
        return Ok(g.clone());
    };
    let out_of_range = || {
        SqlError::new(
            "42P10",
            format!("GROUP BY position {n} is not in select list"),
        )
    };
    let i: usize = n.parse().map_err(|_| out_of_range())?;
    match i.checked_sub(1).and_then(|i| projection.get(i)) {
        Some(ast::SelectItem::UnnamedExpr(e))
        | Some(ast::SelectItem::ExprWithAlias { expr: e, .. }) => Ok(e.clone()),
        Some(_) => Err(SqlError::unsupported("GROUP BY the position of a wildcard")),
        None => Err(out_of_range()),
    }
}

/// An aggregate call without its `ORDER BY` clause, and that clause's
/// keys (none when it has none).
fn split_order_by(f: &ast::Function) -> (ast::Function, Vec<ast::OrderByExpr>) {
    let mut plain = f.clone();
    let mut order = Vec::new();
    if let ast::FunctionArguments::List(list) = &mut plain.args {
        list.clauses.retain(|c| match c {
            ast::FunctionArgumentClause::OrderBy(keys) => {
                order.extend(keys.iter().cloned());
                false
            }
            _ => true,
        });
    }
    (plain, order)
}

/// `SHOW TABLES`: one column of names.
fn show_tables() -> (Plan, Vec<Column>) {
    (
        Plan::Catalog(CatalogPlan::Tables),
        vec![Column::computed("name", DataType::Text)],
    )
}

fn is_null_literal(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Value(v) => matches!(v.value, ast::Value::Null),
        ast::Expr::Nested(inner) => is_null_literal(inner),
        _ => false,
    }
}

/// Whether `e` calls an aggregate function of its own query (a subquery's
/// aggregates are the subquery's).
/// The qualifier of the columns window functions add (not one a query
/// can name: it starts with a space).
const WINDOW_QUALIFIER: &str = " window";

/// The reference the binder puts in place of window function call `i`.
pub(crate) fn window_placeholder(i: usize) -> ast::Expr {
    ast::Expr::CompoundIdentifier(vec![
        ast::Ident::new(WINDOW_QUALIFIER),
        ast::Ident::new(format!("w{i}")),
    ])
}

/// Which window function call `e` stands for, when it is a placeholder.
fn window_placeholder_index(e: &ast::Expr) -> Option<usize> {
    match e {
        ast::Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [q, n] if q.value == WINDOW_QUALIFIER && q.quote_style.is_none() => {
                n.value.strip_prefix('w')?.parse().ok()
            }
            _ => None,
        },
        _ => None,
    }
}

/// `e` with its subqueries blanked out (they are queries of their own:
/// what they call is not `e`'s).
fn without_subqueries(e: &ast::Expr) -> ast::Expr {
    let mut own = e.clone();
    let _ = ast::visit_expressions_mut(&mut own, |x| {
        if matches!(
            x,
            ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. }
        ) || matches!(x, ast::Expr::Function(f) if matches!(f.args, ast::FunctionArguments::Subquery(_)))
        {
            *x = ast::Expr::Value(ast::Value::Null.into());
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    own
}

/// Whether `e` calls a window function (outside subqueries, which are
/// queries of their own).
pub(crate) fn contains_window(e: &ast::Expr) -> bool {
    let own = without_subqueries(e);
    ast::visit_expressions(&own, |x| match x {
        ast::Expr::Function(f) if f.over.is_some() => std::ops::ControlFlow::Break(()),
        _ => std::ops::ControlFlow::Continue(()),
    })
    .is_break()
}

/// Whether a SELECT (with its query's ORDER BY) calls a window function
/// in any of its clauses.
pub fn select_has_window(select: &ast::Select, order_by: Option<&ast::OrderBy>) -> bool {
    let items = select.projection.iter().filter_map(|i| match i {
        ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
        _ => None,
    });
    let groups: Vec<&ast::Expr> = match &select.group_by {
        ast::GroupByExpr::Expressions(e, _) => e.iter().collect(),
        ast::GroupByExpr::All(_) => Vec::new(),
    };
    let order: Vec<&ast::Expr> = match order_by.map(|o| &o.kind) {
        Some(ast::OrderByKind::Expressions(e)) => e.iter().map(|o| &o.expr).collect(),
        _ => Vec::new(),
    };
    items
        .chain(select.selection.iter())
        .chain(select.having.iter())
        .chain(groups)
        .chain(order)
        .any(contains_window)
}

fn contains_aggregate(e: &ast::Expr) -> bool {
    let own = without_subqueries(e);
    ast::visit_expressions(&own, |x| match x {
        ast::Expr::Function(f)
            if f.over.is_none()
                && object_name(&f.name)
                    .ok()
                    .is_some_and(|n| AggFunc::by_name(&n).is_some()) =>
        {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    })
    .is_break()
}

fn table_column(t: &Table, i: usize) -> Column {
    let c = &t.schema.columns[i];
    Column {
        name: c.name.clone(),
        // `numeric(p, s)` stays so: RowDescription reports its type
        // modifier, which drivers read as precision and scale.
        ty: c.ty.clone(),
        table_id: t.schema.id,
        column_id: (i + 1) as i16,
    }
}

/// A computed result column of type `ty`: a cast to `numeric(p, s)` as the
/// whole expression keeps its modifier in the result's metadata, as
/// PostgreSQL's RowDescription does (drivers read precision and scale).
fn computed_column(name: String, x: &Expr, ty: DataType) -> Column {
    match x {
        Expr::Cast(_, t @ DataType::NumericTypmod { .. }) => Column::computed(name, t.clone()),
        _ => Column::computed(name, ty),
    }
}

/// PostgreSQL's name for an unnamed output column.
fn column_name(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Identifier(i) => ident(i),
        ast::Expr::CompoundIdentifier(p) => p.last().map(ident).unwrap_or_default(),
        ast::Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(ident)
            .unwrap_or_else(|| "?column?".into()),
        ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => {
            match column_name(expr).as_str() {
                "?column?" => match e {
                    ast::Expr::Cast { data_type, .. } => data_type.to_string().to_lowercase(),
                    _ => "?column?".into(),
                },
                n => n.to_string(),
            }
        }
        ast::Expr::Case { .. } => "case".into(),
        ast::Expr::Exists { .. } => "exists".into(),
        // A scalar subquery is named by its one column.
        ast::Expr::Subquery(q) => match q.body.as_ref() {
            ast::SetExpr::Select(s) => match s.projection.first() {
                Some(ast::SelectItem::UnnamedExpr(e)) => column_name(e),
                Some(ast::SelectItem::ExprWithAlias { alias, .. }) => ident(alias),
                _ => "?column?".into(),
            },
            _ => "?column?".into(),
        },
        _ => "?column?".into(),
    }
}

/// Picks a primary-key or index lookup when the filter pins every key column
/// to a constant with `=` (in a conjunction); otherwise a scan.
fn choose_access(table: &Table, filter: Option<&Expr>) -> Access {
    let Some(f) = filter else {
        return Access::Scan;
    };
    let mut eqs: Vec<(usize, Expr)> = Vec::new();
    collect_equalities(f, &mut eqs);
    let lookup = |cols: &[usize]| -> Option<Vec<Expr>> {
        cols.iter()
            .map(|c| eqs.iter().find(|(col, _)| col == c).map(|(_, e)| e.clone()))
            .collect()
    };
    if table.schema.has_primary_key() {
        if let Some(keys) = lookup(&table.schema.primary_key) {
            return Access::PrimaryKey(keys);
        }
        if let Some(keys) = key_lists(f, &table.schema.primary_key, &eqs) {
            return Access::PrimaryKeys(keys);
        }
        if let Some((exprs, array_at)) = key_array(f, &table.schema.primary_key, &eqs) {
            return Access::PrimaryKeysOfArray { exprs, array_at };
        }
        let pinned = table
            .schema
            .primary_key
            .iter()
            .take_while(|c| eqs.iter().any(|(col, _)| col == *c))
            .count();
        if pinned > 0 {
            if let Some(prefix) = lookup(&table.schema.primary_key[..pinned]) {
                return Access::KeyPrefix(prefix);
            }
        }
    }
    for (i, idx) in table.schema.indexes.iter().enumerate() {
        if !idx.is_physical() {
            continue;
        }
        if let Some(keys) = lookup(&idx.columns) {
            return Access::Index(i, keys);
        }
    }
    Access::Scan
}

/// Most keys one `IN` list is read by as primary-key lookups; a longer
/// list scans the table.
pub const MAX_IN_KEYS: usize = 1024;

/// The keys `cols` take when one of them is in a `col IN (constants)`
/// conjunct of `f` and every other is pinned by an equality in `eqs`.
fn key_lists(f: &Expr, cols: &[usize], eqs: &[(usize, Expr)]) -> Option<Vec<Vec<Expr>>> {
    let mut lists = Vec::new();
    collect_in_lists(f, &mut lists);
    for (col, list) in lists {
        if !cols.contains(&col) || list.len() > MAX_IN_KEYS {
            continue;
        }
        let fixed: Option<Vec<Option<Expr>>> = cols
            .iter()
            .map(|c| match c == &col {
                true => Some(None),
                false => eqs
                    .iter()
                    .find(|(e, _)| e == c)
                    .map(|(_, v)| Some(v.clone())),
            })
            .collect();
        let Some(fixed) = fixed else { continue };
        return Some(
            list.iter()
                .map(|v| {
                    fixed
                        .iter()
                        .map(|f| f.clone().unwrap_or_else(|| v.clone()))
                        .collect()
                })
                .collect(),
        );
    }
    None
}

/// The key expressions of `cols` when one of them is in a
/// `col = ANY(constant array)` conjunct of `f` and every other is pinned by
/// an equality in `eqs`, with the position of the array among them.
fn key_array(f: &Expr, cols: &[usize], eqs: &[(usize, Expr)]) -> Option<(Vec<Expr>, usize)> {
    let mut arrays = Vec::new();
    collect_any_arrays(f, &mut arrays);
    arrays.into_iter().find_map(|(col, array)| {
        let array_at = cols.iter().position(|c| *c == col)?;
        let exprs = cols
            .iter()
            .map(|c| match c == &col {
                true => Some(array.clone()),
                false => eqs.iter().find(|(e, _)| e == c).map(|(_, v)| v.clone()),
            })
            .collect::<Option<Vec<Expr>>>()?;
        Some((exprs, array_at))
    })
}

/// `col = ANY(constant array)` conjuncts.
fn collect_any_arrays(e: &Expr, out: &mut Vec<(usize, Expr)>) {
    match e {
        Expr::Binary(BinOp::And, l, r) => {
            collect_any_arrays(l, out);
            collect_any_arrays(r, out);
        }
        Expr::Call(Func::AnyOf(BinOp::Eq), args) => {
            if let [Expr::Column(c), array] = args.as_slice() {
                if array.is_constant() {
                    out.push((*c, array.clone()));
                }
            }
        }
        _ => {}
    }
}

/// `col IN (constants)` conjuncts (not negated).
fn collect_in_lists(e: &Expr, out: &mut Vec<(usize, Vec<Expr>)>) {
    match e {
        Expr::Binary(BinOp::And, l, r) => {
            collect_in_lists(l, out);
            collect_in_lists(r, out);
        }
        Expr::InList(c, list, false) => {
            if let Expr::Column(c) = c.as_ref() {
                if !list.is_empty() && list.iter().all(Expr::is_constant) {
                    out.push((*c, list.clone()));
                }
            }
        }
        _ => {}
    }
}

fn collect_equalities(e: &Expr, out: &mut Vec<(usize, Expr)>) {
    match e {
        Expr::Binary(BinOp::And, l, r) => {
            collect_equalities(l, out);
            collect_equalities(r, out);
        }
        Expr::Binary(BinOp::Eq, l, r) => match (l.as_ref(), r.as_ref()) {
            (Expr::Column(c), v) | (v, Expr::Column(c)) if v.is_constant() => {
                out.push((*c, v.clone()))
            }
            _ => {}
        },
        _ => {}
    }
}

/// The schema of a table to be created, with its id filled in.
pub fn with_id(mut schema: TableSchema, id: TableId) -> TableSchema {
    schema.id = id;
    for fk in &mut schema.foreign_keys {
        if fk.ref_table == 0 {
            fk.ref_table = id;
        }
    }
    schema
}

/// Whether an expression is a literal as written (`42`, `'x'`, `-1.5`,
/// `'2024-01-01'::date`): such a default is kept as a value.
fn is_literal(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Value(_) | ast::Expr::TypedString(_) => true,
        ast::Expr::Nested(inner) | ast::Expr::Cast { expr: inner, .. } => is_literal(inner),
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus,
            expr,
        } => matches!(expr.as_ref(), ast::Expr::Value(_)),
        _ => false,
    }
}

/// A UNIQUE constraint of `CREATE TABLE`: its given name, columns and
/// [`deferral`].
type UniqueSpec = (Option<String>, Vec<usize>, (bool, bool));

/// A refusal of `what` on ephemeral table `table` (SQLSTATE 0A000; the
/// statements refused are listed in `ephemeral.rs`).
pub fn ephemeral_refused(table: &str, what: &str, hint: &str) -> SqlError {
    SqlError::new(
        "0A000",
        format!("{what} is not supported on ephemeral table \"{table}\""),
    )
    .with_detail("An ephemeral table is published but not stored: it takes inserts only.")
    .with_hint(hint)
}

/// `CREATE TABLE ... WITH (ephemeral = true)`: whether the table is
/// ephemeral. The value is a boolean as PostgreSQL's storage parameters
/// take one (`true`, `false`, `on`, `off`, `1`, `0`, quoted or not; the
/// name alone means true). Other storage parameters (`fillfactor`, ...)
/// are accepted and ignored, as before.
fn ephemeral_option(options: &ast::CreateTableOptions) -> Result<bool, SqlError> {
    let ast::CreateTableOptions::With(options) = options else {
        return Ok(false);
    };
    let mut ephemeral = false;
    for o in options {
        let value = match o {
            ast::SqlOption::Ident(i) if ident(i) == "ephemeral" => "true".to_string(),
            ast::SqlOption::KeyValue { key, value } if ident(key) == "ephemeral" => match value {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Boolean(b) => b.to_string(),
                    ast::Value::Number(n, _) => n.clone(),
                    ast::Value::SingleQuotedString(t) => t.to_lowercase(),
                    other => other.to_string(),
                },
                ast::Expr::Identifier(i) => ident(i),
                other => other.to_string(),
            },
            _ => continue,
        };
        ephemeral = match value.as_str() {
            "true" | "on" | "yes" | "1" => true,
            "false" | "off" | "no" | "0" => false,
            _ => {
                return Err(SqlError::new(
                    "22023",
                    format!("invalid value for boolean option \"ephemeral\": {value}"),
                ))
            }
        };
    }
    Ok(ephemeral)
}

/// `CREATE TABLE ... WITH (shard_key = 'column')`: the column naming
/// the entity each row belongs to (`docs/chains.md`, "Sharded tables").
fn shard_key_option(options: &ast::CreateTableOptions) -> Result<Option<String>, SqlError> {
    let ast::CreateTableOptions::With(options) = options else {
        return Ok(None);
    };
    let mut key = None;
    for o in options {
        let ast::SqlOption::KeyValue { key: k, value } = o else {
            continue;
        };
        if ident(k) != "shard_key" {
            continue;
        }
        key = Some(match value {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(t) => t.to_lowercase(),
                other => {
                    return Err(SqlError::new(
                        "22023",
                        format!("shard_key names a column, not {other}"),
                    ))
                }
            },
            ast::Expr::Identifier(i) => ident(i),
            other => {
                return Err(SqlError::new(
                    "22023",
                    format!("shard_key names a column, not {other}"),
                ))
            }
        });
    }
    Ok(key)
}

/// A constraint's `[NOT] DEFERRABLE [INITIALLY DEFERRED | IMMEDIATE]`:
/// (deferrable, initially deferred). INITIALLY DEFERRED implies
/// DEFERRABLE, as in PostgreSQL.
pub(crate) fn deferral(c: &Option<ast::ConstraintCharacteristics>) -> (bool, bool) {
    let deferred = c
        .as_ref()
        .is_some_and(|c| c.initially == Some(ast::DeferrableInitial::Deferred));
    let deferrable = c
        .as_ref()
        .is_some_and(|c| c.deferrable == Some(true) || (c.deferrable.is_none() && deferred));
    (deferrable, deferred)
}

/// An explicit value for a `GENERATED ALWAYS` identity column: 428C9.
fn refuse_identity_value(c: &ColumnDef) -> Result<(), SqlError> {
    if c.identity.is_some_and(|i| i.always) {
        return Err(SqlError::new(
            "428C9",
            format!(
                "cannot insert a non-DEFAULT value into column \"{}\"",
                c.name
            ),
        )
        .with_detail(format!(
            "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
            c.name
        )));
    }
    Ok(())
}

/// Whether a foreign key's column can reference a column of type `b`.
fn key_types_match(a: &DataType, b: &DataType) -> bool {
    let (a, b) = (a.unconstrained(), b.unconstrained());
    a == b || (a.is_numeric() && b.is_numeric()) || (a.is_textual() && b.is_textual())
}

/// The integer type of `serial`, `bigserial` and `smallserial`.
pub(crate) fn serial_type(dt: &ast::DataType) -> Option<DataType> {
    match dt.to_string().to_lowercase().as_str() {
        "serial" | "serial4" => Some(DataType::Int4),
        "bigserial" | "serial8" => Some(DataType::Int8),
        "smallserial" | "serial2" => Some(DataType::Int2),
        _ => None,
    }
}

/// The largest value of an integer type.
pub(crate) fn integer_max(ty: &DataType) -> i64 {
    match ty {
        DataType::Int2 => i16::MAX as i64,
        DataType::Int4 => i32::MAX as i64,
        _ => i64::MAX,
    }
}

pub(crate) fn integer_min(ty: &DataType) -> i64 {
    match ty {
        DataType::Int2 => i16::MIN as i64,
        DataType::Int4 => i32::MIN as i64,
        _ => i64::MIN,
    }
}

/// A sequence's definition from `CREATE SEQUENCE` options (or an
/// identity column's), with PostgreSQL's defaults; id 0 until created.
pub fn sequence_def(
    name: &str,
    ty: &DataType,
    options: &[ast::SequenceOptions],
) -> Result<SequenceDef, SqlError> {
    let number = |e: &ast::Expr| -> Result<i64, SqlError> {
        let text = e.to_string().replace(' ', "");
        text.parse::<i64>().map_err(|_| {
            SqlError::new(
                "22023",
                format!("sequence option value {text} is not a bigint"),
            )
        })
    };
    let mut increment = 1i64;
    let (mut min, mut max, mut start) = (None, None, None);
    for o in options {
        match o {
            ast::SequenceOptions::IncrementBy(e, _) => increment = number(e)?,
            ast::SequenceOptions::MinValue(e) => min = e.as_ref().map(number).transpose()?,
            ast::SequenceOptions::MaxValue(e) => max = e.as_ref().map(number).transpose()?,
            ast::SequenceOptions::StartWith(e, _) => start = Some(number(e)?),
            // Every value is logged ahead in ranges anyway (see
            // `docs/sequences.md`): a cache size changes nothing visible.
            ast::SequenceOptions::Cache(e) => {
                if number(e)? < 1 {
                    return Err(SqlError::new(
                        "22023",
                        format!("CACHE ({}) must be greater than zero", number(e)?),
                    ));
                }
            }
            // The parser gives `NO CYCLE` as `Cycle(true)` and `CYCLE` as
            // `Cycle(false)`.
            ast::SequenceOptions::Cycle(true) => {}
            ast::SequenceOptions::Cycle(false) => {
                return Err(SqlError::unsupported("CYCLE sequences")
                    .with_hint("sequences here stop at their limit (NO CYCLE)"))
            }
        }
    }
    let min = min.unwrap_or_else(|| default_min(ty, increment));
    let max = max.unwrap_or_else(|| default_max(ty, increment));
    let start = start.unwrap_or(if increment > 0 { min } else { max });
    let def = SequenceDef {
        id: 0,
        name: name.to_string(),
        ty: ty.to_string(),
        increment,
        min,
        max,
        start,
        owned_by: None,
    };
    check_sequence_def(&def, ty)?;
    Ok(def)
}

/// What an `ALTER SEQUENCE` (parsed as `ALTER TABLE name SET (...)`,
/// see [`crate::parse`]) or an `ALTER TABLE` naming a sequence changes.
fn sequence_change(ops: &[ast::AlterTableOperation]) -> Result<SequenceChange, SqlError> {
    let mut change = SequenceChange::default();
    let bad = |what: &str| SqlError::new("22023", format!("sequence option {what} is invalid"));
    for op in ops {
        match op {
            ast::AlterTableOperation::RenameTable {
                table_name: ast::RenameTableNameKind::To(n) | ast::RenameTableNameKind::As(n),
            } => change.rename = Some(object_name(n)?),
            ast::AlterTableOperation::SetOptionsParens { options } => {
                for o in options {
                    let ast::SqlOption::KeyValue { key, value } = o else {
                        return Err(bad(&o.to_string()));
                    };
                    let text = value.to_string();
                    let text = text.trim_matches('\'');
                    let number = || {
                        text.replace(' ', "").parse::<i64>().map_err(|_| {
                            SqlError::new(
                                "22023",
                                format!("sequence option value {text} is not a bigint"),
                            )
                        })
                    };
                    let bound = || match text {
                        "none" => Ok(None),
                        _ => number().map(Some),
                    };
                    match ident(key).as_str() {
                        "as" => {
                            let ty = DataType::from_sql(text, &[])
                                .filter(|t| {
                                    matches!(t, DataType::Int2 | DataType::Int4 | DataType::Int8)
                                })
                                .ok_or_else(|| {
                                    SqlError::new(
                                        "22023",
                                        "sequence type must be smallint, integer, or bigint",
                                    )
                                })?;
                            change.ty = Some(ty);
                        }
                        "increment" => change.increment = Some(number()?),
                        "minvalue" => change.min = Some(bound()?),
                        "maxvalue" => change.max = Some(bound()?),
                        "start" => change.start = Some(number()?),
                        "restart" => {
                            change.restart = Some(match text {
                                "start" => None,
                                _ => Some(number()?),
                            })
                        }
                        "cache" => change.cache = Some(number()?),
                        "cycle" if text == "false" => {}
                        "cycle" => {
                            return Err(SqlError::unsupported("CYCLE sequences")
                                .with_hint("sequences here stop at their limit (NO CYCLE)"))
                        }
                        "owned_by" => {
                            change.owned_by = Some(match text.rsplit_once('.') {
                                None if text == "none" => None,
                                Some((table, column)) => {
                                    let table = table.strip_prefix("public.").unwrap_or(table);
                                    Some((table.to_string(), column.to_string()))
                                }
                                None => {
                                    return Err(SqlError::new("42P16", "invalid OWNED BY option")
                                        .with_hint(
                                            "Specify OWNED BY table.column or OWNED BY NONE.",
                                        ))
                                }
                            })
                        }
                        other => return Err(bad(other)),
                    }
                }
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "ALTER SEQUENCE ... {}",
                    other.to_string().split_whitespace().next().unwrap_or("")
                )))
            }
        }
    }
    Ok(change)
}

/// A sequence's lowest value when it says `NO MINVALUE`.
pub(crate) fn default_min(ty: &DataType, increment: i64) -> i64 {
    if increment > 0 {
        1
    } else {
        integer_min(ty)
    }
}

/// A sequence's highest value when it says `NO MAXVALUE`.
pub(crate) fn default_max(ty: &DataType, increment: i64) -> i64 {
    if increment > 0 {
        integer_max(ty)
    } else {
        -1
    }
}

/// Refuses a sequence whose bounds do not fit its type or its start.
pub(crate) fn check_sequence_def(def: &SequenceDef, ty: &DataType) -> Result<(), SqlError> {
    let (min, max, start) = (def.min, def.max, def.start);
    if def.increment == 0 {
        return Err(SqlError::new("22023", "INCREMENT must not be zero"));
    }
    if min > max || max > integer_max(ty) || min < integer_min(ty) {
        return Err(SqlError::new(
            "22023",
            format!(
                "MINVALUE ({min}) must be less than MAXVALUE ({max}) and both fit in {}",
                ty
            ),
        ));
    }
    if start < min || start > max {
        return Err(SqlError::new(
            "22023",
            format!(
                "START value ({start}) cannot be outside MINVALUE ({min}) and MAXVALUE ({max})"
            ),
        ));
    }
    Ok(())
}

/// Picks constraint names as PostgreSQL does (`t_a_b_key`, `t_a_check`,
/// `t_a_fkey`), numbering repeats (`t_a_check1`).
#[derive(Default)]
pub(crate) struct ConstraintNames {
    pub(crate) taken: std::collections::HashSet<String>,
}

impl ConstraintNames {
    pub(crate) fn pick<'c>(
        &mut self,
        table: &str,
        columns: impl IntoIterator<Item = &'c str>,
        suffix: &str,
    ) -> String {
        let cols: Vec<&str> = columns.into_iter().collect();
        let base = if cols.is_empty() {
            table.to_string()
        } else {
            format!("{table}_{}", cols.join("_"))
        };
        let mut n = 0;
        loop {
            let name = if n == 0 {
                format!("{base}_{suffix}")
            } else {
                format!("{base}_{suffix}{n}")
            };
            if self.taken.insert(name.clone()) {
                return name;
            }
            n += 1;
        }
    }
}

/// The first column a table CHECK names (PostgreSQL names the
/// constraint after it).
pub(crate) fn check_columns<'s>(e: &ast::Expr, schema: &'s TableSchema) -> Vec<&'s str> {
    let mut first = None;
    let _ = ast::visit_expressions(e, |x| {
        if let ast::Expr::Identifier(id) = x {
            if first.is_none() {
                first = schema.column_index(&ident(id));
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    first
        .map(|c| vec![schema.columns[c].name.as_str()])
        .unwrap_or_default()
}

/// The columns of `table` (called `name`) an `INSERT` or `COPY` lists, by
/// position (all of them when `names` is empty); 42703 for one it does not
/// have, 42701 for one listed twice.
fn target_columns(table: &Table, name: &str, names: &[String]) -> Result<Vec<usize>, SqlError> {
    if names.is_empty() {
        return Ok((0..table.schema.columns.len()).collect());
    }
    let mut columns = Vec::with_capacity(names.len());
    for n in names {
        let c = table.schema.column_index(n).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!("column \"{n}\" of relation \"{name}\" does not exist"),
            )
        })?;
        if columns.contains(&c) {
            return Err(SqlError::new(
                "42701",
                format!(
                    "column \"{}\" specified more than once",
                    table.schema.columns[c].name
                ),
            ));
        }
        columns.push(c);
    }
    Ok(columns)
}
