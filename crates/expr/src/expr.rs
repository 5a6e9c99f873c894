//! Bound scalar expressions and their evaluation with SQL's three-valued logic.

use std::cmp::Ordering;

use aqueduct_values::{DataType, Decimal, Value, DAY_MICROS};

use crate::numeric;
use crate::SqlError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    And,
    Or,
    Concat,
    /// `->`
    JsonGet,
    /// `->>`
    JsonGetText,
    /// `#>`
    JsonPath,
    /// `#>>`
    JsonPathText,
    /// `@>` (jsonb or arrays)
    Contains,
    /// `<@` (jsonb or arrays)
    ContainedBy,
    /// `?`
    HasKey,
    /// `?|`
    HasAnyKey,
    /// `?&`
    HasAllKeys,
    /// `&&` (arrays)
    Overlap,
    /// `&` (integers).
    BitAnd,
    /// `|` (integers).
    BitOr,
    /// `~`: the text matches the regular expression.
    Regex,
    /// `~*`: matches, ignoring case.
    RegexI,
}

impl BinOp {
    /// How SQL writes the operator (`+`, `<=`, `AND`, `||`, ...).
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Eq => "=",
            BinOp::NotEq => "<>",
            BinOp::Lt => "<",
            BinOp::LtEq => "<=",
            BinOp::Gt => ">",
            BinOp::GtEq => ">=",
            BinOp::And => "AND",
            BinOp::Or => "OR",
            BinOp::Concat => "||",
            BinOp::JsonGet => "->",
            BinOp::JsonGetText => "->>",
            BinOp::JsonPath => "#>",
            BinOp::JsonPathText => "#>>",
            BinOp::Contains => "@>",
            BinOp::ContainedBy => "<@",
            BinOp::HasKey => "?",
            BinOp::HasAnyKey => "?|",
            BinOp::HasAllKeys => "?&",
            BinOp::Overlap => "&&",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::Regex => "~",
            BinOp::RegexI => "~*",
        }
    }

    /// True for `=`, `<>`, `<`, `<=`, `>`, `>=`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::NotEq | BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Not,
    Neg,
}

/// A scalar function Aqueduct evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Lower,
    Upper,
    Length,
    Abs,
    Coalesce,
    NullIf,
    Concat,
    Substring,
    Trim,
    Round,
    Greatest,
    Least,
    Version,
    CurrentDatabase,
    CurrentSchema,
    CurrentUser,
    /// The text form of a `real` (its own shortest digits, `0.1` rather
    /// than the double `0.10000000149011612` it is held as). Not callable
    /// by name: the binder puts it where a `real` becomes text.
    RealText,
    /// A `real` as a `numeric`, from its 6 significant digits
    /// (`0.1::real::numeric` is 0.1). Not callable by name either.
    RealNumeric,
    JsonbBuildObject,
    /// `json_build_object`: a `json` object, members in the order given.
    JsonBuildObject,
    JsonbBuildArray,
    JsonbTypeof,
    JsonbSet,
    JsonbArrayLength,
    ToJsonb,
    Cardinality,
    ArrayLength,
    /// `ARRAY[a, b, ...]`; the binder casts the elements to one type.
    MakeArray,
    /// `a[i]`.
    Subscript,
    /// `array || array`: a NULL array is an empty one; NULL when both are.
    ArrayCat,
    /// `array || element`: the element appended (a NULL array is empty).
    ArrayAppend,
    /// `element || array`: the element prepended.
    ArrayPrepend,
    /// `x op ANY (array)`.
    AnyOf(BinOp),
    /// `x op ALL (array)`.
    AllOf(BinOp),
    JustifyDays,
    JustifyHours,
    JustifyInterval,
    /// `age(a, b)`; the binder gives `age(x)` today's midnight as `a`.
    Age,
    /// `make_interval(years, months, weeks, days, hours, mins, secs)`, the
    /// arguments in that order (the binder places named ones).
    MakeInterval,
    /// `date_part('unit', x)`: a double precision.
    DatePart,
    /// `EXTRACT(unit FROM x)`, the unit as a text first argument: a numeric.
    Extract,
    /// `array_upper(array, dimension)`: arrays here start at 1, so their
    /// length.
    ArrayUpper,
    /// `array_lower(array, dimension)`: 1 for an array with elements.
    ArrayLower,
    /// `ltrim(text [, characters])`, `TRIM(LEADING ...)`.
    LTrim,
    /// `rtrim(text [, characters])`, `TRIM(TRAILING ...)`.
    RTrim,
    /// `array_remove(array, element)`: the array without the elements
    /// equal to it.
    ArrayRemove,
    /// `array_position(array, element [, start])`: the first position (from
    /// `start`) of an element not distinct from it, NULL if none.
    ArrayPosition,
    /// `quote_ident(text)`.
    QuoteIdent,
    /// `quote_literal(text)`: the text as a quoted SQL literal.
    QuoteLiteral,
    /// `array_to_string(array, delimiter [, null_string])`.
    ArrayToString,
    /// `replace(text, from, to)`: every occurrence of `from` replaced.
    Replace,
    /// `format_type`'s text from a type's base name and its modifier; the
    /// binder looks the name up.
    FormatTypmod,
}

impl Func {
    pub fn by_name(name: &str) -> Option<Func> {
        Some(match name {
            "lower" => Func::Lower,
            "upper" => Func::Upper,
            "length" | "char_length" | "character_length" => Func::Length,
            "abs" => Func::Abs,
            "coalesce" => Func::Coalesce,
            "nullif" => Func::NullIf,
            "concat" => Func::Concat,
            "substr" | "substring" => Func::Substring,
            "btrim" | "trim" => Func::Trim,
            "round" => Func::Round,
            "greatest" => Func::Greatest,
            "least" => Func::Least,
            "version" => Func::Version,
            "current_database" | "current_catalog" => Func::CurrentDatabase,
            "current_schema" => Func::CurrentSchema,
            "current_user" | "current_role" | "session_user" | "user" => Func::CurrentUser,
            "jsonb_build_object" => Func::JsonbBuildObject,
            "json_build_object" => Func::JsonBuildObject,
            "jsonb_build_array" => Func::JsonbBuildArray,
            "jsonb_typeof" => Func::JsonbTypeof,
            "jsonb_set" => Func::JsonbSet,
            "jsonb_array_length" => Func::JsonbArrayLength,
            "to_jsonb" => Func::ToJsonb,
            "cardinality" => Func::Cardinality,
            "array_length" => Func::ArrayLength,
            "array_cat" => Func::ArrayCat,
            "array_append" => Func::ArrayAppend,
            "array_prepend" => Func::ArrayPrepend,
            "justify_days" => Func::JustifyDays,
            "justify_hours" => Func::JustifyHours,
            "justify_interval" => Func::JustifyInterval,
            "age" => Func::Age,
            "make_interval" => Func::MakeInterval,
            "date_part" => Func::DatePart,
            "quote_ident" => Func::QuoteIdent,
            "quote_literal" => Func::QuoteLiteral,
            "array_remove" => Func::ArrayRemove,
            "array_position" => Func::ArrayPosition,
            "ltrim" => Func::LTrim,
            "rtrim" => Func::RTrim,
            "array_upper" => Func::ArrayUpper,
            "array_lower" => Func::ArrayLower,
            "array_to_string" => Func::ArrayToString,
            "replace" => Func::Replace,
            _ => return None,
        })
    }
}

/// A function whose answer changes from call to call, or that changes
/// something: evaluated through [`Env::effects`], so only where a
/// statement runs (never in a maintained view).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Volatile {
    /// `nextval(sequence)`.
    NextVal,
    /// `currval(sequence)`.
    CurrVal,
    /// `setval(sequence, value [, is_called])`.
    SetVal,
    /// `lastval()`.
    LastVal,
    /// `gen_random_uuid()`: evaluated here, needs no effects.
    GenRandomUuid,
}

impl Volatile {
    pub fn by_name(name: &str) -> Option<Volatile> {
        Some(match name {
            "nextval" => Volatile::NextVal,
            "currval" => Volatile::CurrVal,
            "setval" => Volatile::SetVal,
            "lastval" => Volatile::LastVal,
            "gen_random_uuid" | "uuid_generate_v4" => Volatile::GenRandomUuid,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Volatile::NextVal => "nextval",
            Volatile::CurrVal => "currval",
            Volatile::SetVal => "setval",
            Volatile::LastVal => "lastval",
            Volatile::GenRandomUuid => "gen_random_uuid",
        }
    }

    /// Whether a call changes state (a statement calling it writes).
    pub fn writes(self) -> bool {
        matches!(self, Volatile::NextVal | Volatile::SetVal)
    }
}

/// What volatile functions act on: the statement's sequences.
pub trait Effects {
    fn call(&self, f: Volatile, args: &[Value]) -> Result<Value, SqlError>;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Literal(Value),
    /// `$n`, zero-based.
    Param(usize),
    /// A column of the input row.
    Column(usize),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    IsNull(Box<Expr>, bool),
    InList(Box<Expr>, Vec<Expr>, bool),
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        negated: bool,
        case_insensitive: bool,
    },
    Cast(Box<Expr>, DataType),
    Call(Func, Vec<Expr>),
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
    Volatile(Volatile, Vec<Expr>),
    /// A function of the system catalog (`pg_get_indexdef(oid)`,
    /// `oid::regclass`): its answer for the arguments, from a table the
    /// binder made from the catalog the statement was bound against.
    Lookup(std::sync::Arc<Lookup>, Vec<Expr>),
    /// A subquery in an expression (`(SELECT ...)`, `EXISTS`, `IN`,
    /// `ARRAY(SELECT ...)`), run for the values its outer references take
    /// in the row (one-shot evaluation only).
    Subquery(std::sync::Arc<Subquery>, Vec<Expr>),
    /// A function that acts on the server outside the statement
    /// (`pg_cancel_backend(pid)`), called with its arguments' values.
    Server(std::sync::Arc<ServerCall>, Vec<Expr>),
}

/// What a [`ServerCall`] does.
pub trait ServerFunction: Send + Sync {
    fn call(&self, args: &[Value]) -> Result<Value, SqlError>;
}

/// A bound call of a function that acts on the server (see
/// [`Expr::Server`]).
pub struct ServerCall {
    pub name: &'static str,
    pub function: Box<dyn ServerFunction>,
    /// The type of its answer.
    pub ty: DataType,
}

impl std::fmt::Debug for ServerCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}()", self.name)
    }
}

impl PartialEq for ServerCall {
    fn eq(&self, other: &ServerCall) -> bool {
        std::ptr::eq(self, other)
    }
}

/// Runs a subquery for the values of its outer references.
pub trait SubqueryRunner: Send + Sync {
    /// The subquery's rows (their visible columns) with its outer
    /// references bound to `outer`.
    fn rows(&self, outer: &[Value]) -> Result<Vec<Vec<Value>>, SqlError>;
}

/// What a subquery in an expression answers.
#[derive(Clone, Debug, PartialEq)]
pub enum SubqueryKind {
    /// `(SELECT x ...)`: its one value, NULL with no row, 21000 with more.
    Scalar,
    /// `EXISTS (SELECT ...)`.
    Exists,
    /// `ARRAY(SELECT x ...)`: its values as an array.
    Array,
    /// `left op ANY (SELECT x ...)` (`IN` is `= ANY`), with the left
    /// operand as the first of the expression's arguments.
    Any(BinOp),
    /// `left op ALL (SELECT x ...)`, likewise.
    All(BinOp),
}

/// A bound subquery (see [`Expr::Subquery`]).
pub struct Subquery {
    pub kind: SubqueryKind,
    pub runner: Box<dyn SubqueryRunner>,
    /// The type of its answer.
    pub ty: DataType,
}

impl std::fmt::Debug for Subquery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Subquery({:?})", self.kind)
    }
}

impl PartialEq for Subquery {
    fn eq(&self, other: &Subquery) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Subquery {
    fn eval(&self, args: Vec<Value>) -> Result<Value, SqlError> {
        let (left, outer) = match self.kind {
            SubqueryKind::Any(_) | SubqueryKind::All(_) => (args.first().cloned(), &args[1..]),
            _ => (None, &args[..]),
        };
        let rows = self.runner.rows(outer)?;
        let first = |r: &Vec<Value>| r.first().cloned().unwrap_or(Value::Null);
        Ok(match &self.kind {
            SubqueryKind::Exists => Value::Bool(!rows.is_empty()),
            SubqueryKind::Scalar => match rows.as_slice() {
                [] => Value::Null,
                [one] => first(one),
                _ => {
                    return Err(SqlError::new(
                        "21000",
                        "more than one row returned by a subquery used as an expression",
                    ))
                }
            },
            SubqueryKind::Array => Value::Array(rows.iter().map(first).collect()),
            SubqueryKind::Any(op) => {
                let left = left.unwrap_or(Value::Null);
                let mut unknown = false;
                for r in &rows {
                    match truth(&binary(*op, left.clone(), first(r))?) {
                        Some(true) => return Ok(Value::Bool(true)),
                        Some(false) => {}
                        None => unknown = true,
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(false)
                }
            }
            // True for no rows; false once a row compares false; NULL if
            // none did but one compared NULL.
            SubqueryKind::All(op) => {
                let left = left.unwrap_or(Value::Null);
                let mut unknown = false;
                for r in &rows {
                    match truth(&binary(*op, left.clone(), first(r))?) {
                        Some(false) => return Ok(Value::Bool(false)),
                        Some(true) => {}
                        None => unknown = true,
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(true)
                }
            }
        })
    }
}

/// The answers of a catalog function for one statement (see
/// [`Expr::Lookup`]).
#[derive(Debug)]
pub struct Lookup {
    /// The function's name, for messages.
    pub name: &'static str,
    /// The answer for each list of arguments.
    pub rows: std::collections::HashMap<Vec<Value>, Value>,
    /// The answer for arguments with no row.
    pub otherwise: LookupMiss,
    /// The type of the answers.
    pub ty: DataType,
}

/// What a catalog function answers for an object it does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupMiss {
    /// NULL (`pg_get_indexdef` of no index).
    Null,
    /// The first argument as text (`12345::regclass` is `12345`).
    FirstAsText,
    /// `unknown (OID=n)`, as `pg_get_userbyid` says.
    UnknownOid,
    /// This text (`format_type` of an unknown type is `???`).
    Text(&'static str),
    /// False (`pg_relation_is_publishable` of what is not a table).
    False,
}

impl PartialEq for Lookup {
    fn eq(&self, other: &Lookup) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Lookup {
    fn answer(&self, args: Vec<Value>) -> Value {
        if args.first().is_some_and(Value::is_null) {
            return Value::Null;
        }
        if let Some(v) = self.rows.get(&args) {
            return v.clone();
        }
        match self.otherwise {
            LookupMiss::Null => Value::Null,
            LookupMiss::FirstAsText => args
                .first()
                .and_then(Value::to_text)
                .map_or(Value::Null, Value::Text),
            LookupMiss::UnknownOid => Value::Text(format!(
                "unknown (OID={})",
                args.first().and_then(Value::to_text).unwrap_or_default()
            )),
            LookupMiss::Text(t) => Value::Text(t.to_string()),
            LookupMiss::False => Value::Bool(false),
        }
    }
}

/// What an expression is evaluated against.
pub struct Env<'a> {
    pub row: &'a [Value],
    pub params: &'a [Value],
    /// Where volatile functions act; `None` where they are not allowed.
    pub effects: Option<&'a dyn Effects>,
}

impl<'a> Env<'a> {
    pub fn new(row: &'a [Value], params: &'a [Value]) -> Env<'a> {
        Env {
            row,
            params,
            effects: None,
        }
    }

    pub fn with_effects(
        row: &'a [Value],
        params: &'a [Value],
        effects: &'a dyn Effects,
    ) -> Env<'a> {
        Env {
            row,
            params,
            effects: Some(effects),
        }
    }
}

/// A version-4 UUID from the thread's random generator.
pub fn random_uuid() -> u128 {
    let r: u128 = rand::random();
    let versioned = (r & !(0xF << 76)) | (0x4 << 76);
    (versioned & !(0x3 << 62)) | (0x2 << 62)
}

fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn bool_value(b: Option<bool>) -> Value {
    b.map(Value::Bool).unwrap_or(Value::Null)
}

impl Expr {
    pub fn eval(&self, env: &Env<'_>) -> Result<Value, SqlError> {
        // Expressions nest up to `limits::MAX_STATEMENT_DEPTH` levels, and
        // views evaluate theirs on the dataflow worker's thread.
        crate::limits::grow(|| self.eval_level(env))
    }

    fn eval_level(&self, env: &Env<'_>) -> Result<Value, SqlError> {
        Ok(match self {
            Expr::Literal(v) => v.clone(),
            Expr::Param(i) => env.params.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Column(i) => env.row[*i].clone(),
            Expr::Unary(UnOp::Not, e) => bool_value(truth(&e.eval(env)?).map(|b| !b)),
            Expr::Unary(UnOp::Neg, e) => match e.eval(env)? {
                Value::Null => Value::Null,
                Value::Int(i) => Value::Int(i.checked_neg().ok_or_else(overflow)?),
                Value::Float(f) => Value::Float(-f),
                Value::Numeric(d) => Value::Numeric(numeric::neg(d)),
                v @ Value::Interval { .. } => aqueduct_values::Interval::of(&v)
                    .expect("an interval")
                    .checked_neg()?
                    .to_value(),
                v => return Err(operator_error("-", &v, &v)),
            },
            Expr::Binary(BinOp::And, l, r) => {
                let a = truth(&l.eval(env)?);
                if a == Some(false) {
                    return Ok(Value::Bool(false));
                }
                let b = truth(&r.eval(env)?);
                bool_value(match (a, b) {
                    (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                })
            }
            Expr::Binary(BinOp::Or, l, r) => {
                let a = truth(&l.eval(env)?);
                if a == Some(true) {
                    return Ok(Value::Bool(true));
                }
                let b = truth(&r.eval(env)?);
                bool_value(match (a, b) {
                    (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                })
            }
            Expr::Binary(op, l, r) => binary(*op, l.eval(env)?, r.eval(env)?)?,
            Expr::IsNull(e, negated) => Value::Bool(e.eval(env)?.is_null() != *negated),
            Expr::InList(e, list, negated) => {
                let v = e.eval(env)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    let x = item.eval(env)?;
                    match v.sql_cmp(&x) {
                        Some(Ordering::Equal) => return Ok(Value::Bool(!negated)),
                        None => saw_null |= x.is_null(),
                        _ => {}
                    }
                }
                if saw_null {
                    Value::Null
                } else {
                    Value::Bool(*negated)
                }
            }
            Expr::Between(e, lo, hi, negated) => {
                let v = e.eval(env)?;
                let ge = cmp_op(BinOp::GtEq, &v, &lo.eval(env)?);
                let le = cmp_op(BinOp::LtEq, &v, &hi.eval(env)?);
                let both = match (truth(&ge), truth(&le)) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                };
                bool_value(both.map(|b| b != *negated))
            }
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => match (expr.eval(env)?, pattern.eval(env)?) {
                (Value::Null, _) | (_, Value::Null) => Value::Null,
                (v, p) => {
                    let (mut s, mut p) = (text_of(&v), text_of(&p));
                    if *case_insensitive {
                        s = s.to_lowercase();
                        p = p.to_lowercase();
                    }
                    Value::Bool(like(&s, &p) != *negated)
                }
            },
            Expr::Cast(e, ty) => e.eval(env)?.coerce(ty)?,
            Expr::Call(f, args) => call(*f, args, env)?,
            Expr::Volatile(Volatile::GenRandomUuid, _) => Value::Uuid(random_uuid()),
            Expr::Volatile(f, args) => {
                let Some(effects) = env.effects else {
                    return Err(SqlError::new(
                        "0A000",
                        format!("{}() is not allowed here", f.name()),
                    ));
                };
                let args = args
                    .iter()
                    .map(|a| a.eval(env))
                    .collect::<Result<Vec<_>, _>>()?;
                effects.call(*f, &args)?
            }
            Expr::Subquery(sub, args) => sub.eval(
                args.iter()
                    .map(|a| a.eval(env))
                    .collect::<Result<Vec<_>, _>>()?,
            )?,
            Expr::Server(call, args) => call.function.call(
                &args
                    .iter()
                    .map(|a| a.eval(env))
                    .collect::<Result<Vec<_>, _>>()?,
            )?,
            Expr::Lookup(table, args) => table.answer(
                args.iter()
                    .map(|a| a.eval(env))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                let base = match operand {
                    Some(o) => Some(o.eval(env)?),
                    None => None,
                };
                for (when, then) in whens {
                    let w = when.eval(env)?;
                    let hit = match &base {
                        Some(b) => b.sql_cmp(&w) == Some(Ordering::Equal),
                        None => truth(&w) == Some(true),
                    };
                    if hit {
                        return then.eval(env);
                    }
                }
                match otherwise {
                    Some(e) => e.eval(env)?,
                    None => Value::Null,
                }
            }
        })
    }

    /// Whether evaluating the expression changes state (`nextval`).
    pub fn writes(&self) -> bool {
        let mut writes = false;
        self.walk(&mut |e| {
            if let Expr::Volatile(f, _) = e {
                writes |= f.writes();
            }
        });
        writes
    }

    /// Whether evaluating the expression needs a statement's effects (the
    /// sequences: `nextval`, `currval`, ...).
    pub fn needs_effects(&self) -> bool {
        let mut needs = false;
        self.walk(&mut |e| {
            if let Expr::Volatile(f, _) = e {
                needs |= *f != Volatile::GenRandomUuid;
            }
        });
        needs
    }

    /// True when the expression reads no column (a constant or parameter).
    pub fn is_constant(&self) -> bool {
        let mut constant = true;
        self.walk(&mut |e| {
            if matches!(e, Expr::Column(_)) {
                constant = false;
            }
        });
        constant
    }

    /// Visits this expression and all sub-expressions.
    pub fn walk(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Literal(_) | Expr::Param(_) | Expr::Column(_) => {}
            Expr::Unary(_, e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.walk(f),
            Expr::Binary(_, l, r) => {
                l.walk(f);
                r.walk(f);
            }
            Expr::InList(e, list, _) => {
                e.walk(f);
                list.iter().for_each(|x| x.walk(f));
            }
            Expr::Between(a, b, c, _) => {
                a.walk(f);
                b.walk(f);
                c.walk(f);
            }
            Expr::Like { expr, pattern, .. } => {
                expr.walk(f);
                pattern.walk(f);
            }
            Expr::Call(_, args)
            | Expr::Volatile(_, args)
            | Expr::Lookup(_, args)
            | Expr::Subquery(_, args)
            | Expr::Server(_, args) => args.iter().for_each(|x| x.walk(f)),
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                if let Some(o) = operand {
                    o.walk(f);
                }
                for (w, t) in whens {
                    w.walk(f);
                    t.walk(f);
                }
                if let Some(o) = otherwise {
                    o.walk(f);
                }
            }
        }
    }

    /// Visits this expression and all sub-expressions, mutably (children
    /// after their parent).
    pub fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        f(self);
        match self {
            Expr::Literal(_) | Expr::Param(_) | Expr::Column(_) => {}
            Expr::Unary(_, e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.walk_mut(f),
            Expr::Binary(_, l, r) => {
                l.walk_mut(f);
                r.walk_mut(f);
            }
            Expr::InList(e, list, _) => {
                e.walk_mut(f);
                list.iter_mut().for_each(|x| x.walk_mut(f));
            }
            Expr::Between(a, b, c, _) => {
                a.walk_mut(f);
                b.walk_mut(f);
                c.walk_mut(f);
            }
            Expr::Like { expr, pattern, .. } => {
                expr.walk_mut(f);
                pattern.walk_mut(f);
            }
            Expr::Call(_, args)
            | Expr::Volatile(_, args)
            | Expr::Lookup(_, args)
            | Expr::Subquery(_, args)
            | Expr::Server(_, args) => args.iter_mut().for_each(|x| x.walk_mut(f)),
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                if let Some(o) = operand {
                    o.walk_mut(f);
                }
                for (w, t) in whens {
                    w.walk_mut(f);
                    t.walk_mut(f);
                }
                if let Some(o) = otherwise {
                    o.walk_mut(f);
                }
            }
        }
    }

    /// The columns the expression reads.
    pub fn columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.walk(&mut |e| {
            if let Expr::Column(i) = e {
                out.push(*i);
            }
        });
        out
    }
}

/// 64-bit integer arithmetic overflowed. (Narrower integer types are
/// checked by the casts the binder puts around their arithmetic.)
fn overflow() -> SqlError {
    SqlError::new("22003", "bigint out of range")
}

pub(crate) fn operator_error(op: &str, a: &Value, b: &Value) -> SqlError {
    SqlError::new(
        "42883",
        format!(
            "operator does not exist: {} {op} {}",
            a.kind_name(),
            b.kind_name()
        ),
    )
    .with_hint("add explicit casts")
}

fn text_of(v: &Value) -> String {
    v.to_text().unwrap_or_default()
}

/// A value as `||` sees it: cast to text, so booleans are spelled out
/// (`'a' || true` is `atrue`; `concat` uses the output form `t`).
fn concat_text(v: &Value) -> String {
    match v {
        Value::Bool(b) => if *b { "true" } else { "false" }.to_string(),
        v => text_of(v),
    }
}

fn cmp_op(op: BinOp, a: &Value, b: &Value) -> Value {
    let Some(ord) = a.sql_cmp(b) else {
        return Value::Null;
    };
    Value::Bool(match op {
        BinOp::Eq => ord == Ordering::Equal,
        BinOp::NotEq => ord != Ordering::Equal,
        BinOp::Lt => ord == Ordering::Less,
        BinOp::LtEq => ord != Ordering::Greater,
        BinOp::Gt => ord == Ordering::Greater,
        BinOp::GtEq => ord != Ordering::Less,
        _ => unreachable!("comparison operator"),
    })
}

/// Text compared with a typed value is read as that type (PostgreSQL's
/// untyped literal rule): `'5' = 5`, `ts > '2024-01-01'`.
fn unify(a: Value, b: Value) -> Result<(Value, Value), SqlError> {
    Ok(match (&a, &b) {
        (Value::Text(_), Value::Text(_)) | (Value::Null, _) | (_, Value::Null) => (a, b),
        (Value::Text(_), other) => {
            let ty = kind_type(other);
            (a.coerce(&ty)?, b)
        }
        (other, Value::Text(_)) => {
            let ty = kind_type(other);
            let b = b.coerce(&ty)?;
            (a, b)
        }
        _ => (a, b),
    })
}

/// The type a value is of, as far as the value tells (text for text,
/// enums and NULL; bigint for integers).
pub fn type_of_value(v: &Value) -> DataType {
    kind_type(v)
}

fn kind_type(v: &Value) -> DataType {
    match v {
        Value::Bool(_) => DataType::Bool,
        Value::Int(_) => DataType::Int8,
        Value::Float(_) => DataType::Float8,
        Value::Numeric(_) => DataType::Numeric,
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
            .map_or(DataType::Text, kind_type)
            .array_of(),
        // The binder reads text compared with an enum as the enum type;
        // the type is not known from a value.
        Value::Text(_) | Value::Enum(..) | Value::Null => DataType::Text,
    }
}

/// `a op b` over two values (not `AND` / `OR`, which short-circuit).
pub(crate) fn binary_values(op: BinOp, a: Value, b: Value) -> Result<Value, SqlError> {
    binary(op, a, b)
}

fn is_json(v: &Value) -> bool {
    matches!(v, Value::Json(_) | Value::Jsonb(_))
}

fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, SqlError> {
    // `array || NULL` is the array.
    if op == BinOp::Concat
        && (matches!(a, Value::Array(_)) || matches!(b, Value::Array(_)))
        && !(is_json(&a) || is_json(&b))
    {
        return crate::array::concat(a, b);
    }
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    let arrays = matches!((&a, &b), (Value::Array(_), Value::Array(_)));
    match op {
        BinOp::JsonGet => return crate::json::get(&a, &b),
        BinOp::JsonGetText => return crate::json::get_text(&a, &b),
        BinOp::JsonPath => return crate::json::get_path(&a, &b),
        BinOp::JsonPathText => return crate::json::get_path_text(&a, &b),
        BinOp::HasKey | BinOp::HasAnyKey | BinOp::HasAllKeys => {
            return crate::json::has_keys(&a, &b, op.symbol())
        }
        BinOp::Contains if arrays => return crate::array::contains(&a, &b),
        BinOp::ContainedBy if arrays => return crate::array::contains(&b, &a),
        BinOp::Contains => return crate::json::contains(&a, &b, false),
        BinOp::ContainedBy => return crate::json::contains(&a, &b, true),
        BinOp::Overlap => return crate::array::overlap(&a, &b),
        BinOp::Regex | BinOp::RegexI => {
            return regex_match(&text_of(&a), &text_of(&b), op == BinOp::RegexI)
        }
        BinOp::Concat if is_json(&a) || is_json(&b) => return crate::json::concat(&a, &b),
        BinOp::Sub if matches!(a, Value::Jsonb(_)) => return crate::json::delete(&a, &b),
        _ => {}
    }
    if op == BinOp::Concat {
        return Ok(Value::Text(concat_text(&a) + &concat_text(&b)));
    }
    let (a, b) = unify(a, b)?;
    if matches!(
        op,
        BinOp::Eq | BinOp::NotEq | BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq
    ) {
        if a.sql_cmp(&b).is_none() {
            return Err(operator_error(op.symbol(), &a, &b));
        }
        return Ok(cmp_op(op, &a, &b));
    }
    arithmetic(op, a, b)
}

fn division_by_zero() -> SqlError {
    SqlError::new("22012", "division by zero")
}

fn arithmetic(op: BinOp, a: Value, b: Value) -> Result<Value, SqlError> {
    use Value::*;
    Ok(match (&a, &b) {
        (Int(x), Int(y)) => {
            let (x, y) = (*x, *y);
            Int(match op {
                BinOp::Add => x.checked_add(y),
                BinOp::Sub => x.checked_sub(y),
                BinOp::Mul => x.checked_mul(y),
                BinOp::Div if y == 0 => return Err(division_by_zero()),
                BinOp::Div => x.checked_div(y),
                BinOp::Mod if y == 0 => return Err(division_by_zero()),
                // i64::MIN % -1 is 0 (checked_rem calls it an overflow).
                BinOp::Mod if y == -1 => Some(0),
                BinOp::Mod => x.checked_rem(y),
                BinOp::BitAnd => Some(x & y),
                BinOp::BitOr => Some(x | y),
                _ => return Err(operator_error(op.symbol(), &a, &b)),
            }
            .ok_or_else(overflow)?)
        }
        (Float(_), Int(_) | Float(_) | Numeric(_)) | (Int(_) | Numeric(_), Float(_)) => {
            let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div if y == 0.0 => return Err(division_by_zero()),
                BinOp::Div => x / y,
                // PostgreSQL has no % for floats.
                _ => return Err(operator_error(op.symbol(), &a, &b)),
            };
            // Finite operands with an infinite result overflowed (PostgreSQL: 22003).
            if r.is_infinite() && x.is_finite() && y.is_finite() {
                return Err(SqlError::new("22003", "value out of range: overflow"));
            }
            Float(r)
        }
        (Numeric(_), Int(_) | Numeric(_)) | (Int(_), Numeric(_)) => {
            let d = |v: &Value| match v {
                Int(i) => Decimal::from(*i),
                Numeric(d) => *d,
                _ => unreachable!(),
            };
            let (x, y) = (d(&a), d(&b));
            Numeric(match op {
                BinOp::Add => numeric::add(x, y)?,
                BinOp::Sub => numeric::sub(x, y)?,
                BinOp::Mul => numeric::mul(x, y)?,
                BinOp::Div => numeric::div(x, y)?,
                BinOp::Mod if y.is_zero() => return Err(division_by_zero()),
                BinOp::Mod => numeric::rem(x, y)?,
                _ => return Err(operator_error(op.symbol(), &a, &b)),
            })
        }
        (Timestamp(t), Int(days)) | (TimestampTz(t), Int(days)) if op == BinOp::Add => {
            let v = t + days * DAY_MICROS;
            if matches!(a, Timestamp(_)) {
                Timestamp(v)
            } else {
                TimestampTz(v)
            }
        }
        (Date(d), Int(n)) if matches!(op, BinOp::Add | BinOp::Sub) => {
            let n = i32::try_from(*n).map_err(|_| overflow())?;
            Date(if op == BinOp::Add { d + n } else { d - n })
        }
        (Date(x), Date(y)) if op == BinOp::Sub => Int((*x - *y) as i64),
        _ => match crate::datetime::arithmetic(op, &a, &b)? {
            Some(v) => v,
            None => return Err(operator_error(op.symbol(), &a, &b)),
        },
    })
}

/// `upper` of one character as PostgreSQL does it: each character on its
/// own, kept when its upper case is several characters (`ß`, `ﬁ`).
fn upper_char(c: char) -> char {
    let mut up = c.to_uppercase();
    match (up.next(), up.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// `lower` of one character, likewise (`İ` becomes `i`, its simple lower case).
fn lower_char(c: char) -> char {
    if c == '\u{130}' {
        return 'i';
    }
    let mut low = c.to_lowercase();
    match (low.next(), low.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

/// SQL LIKE with `%` and `_` and backslash escapes.
pub fn like(s: &str, p: &str) -> bool {
    let s: Vec<char> = s.chars().collect();
    let p: Vec<char> = p.chars().collect();
    // Iterative matcher with backtracking to the last `%`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if j < p.len() && p[j] == '\\' && j + 1 < p.len() && p[j + 1] == s[i] {
            i += 1;
            j += 2;
        } else if j < p.len() && (p[j] == '_' || (p[j] == s[i] && p[j] != '%' && p[j] != '\\')) {
            i += 1;
            j += 1;
        } else if j < p.len() && p[j] == '%' {
            star = Some((j, i));
            j += 1;
        } else if let Some((sj, si)) = star {
            j = sj + 1;
            i = si + 1;
            star = Some((sj, si + 1));
        } else {
            return false;
        }
    }
    while j < p.len() && p[j] == '%' {
        j += 1;
    }
    j == p.len()
}

fn call(f: Func, args: &[Expr], env: &Env<'_>) -> Result<Value, SqlError> {
    let vals = args
        .iter()
        .map(|a| a.eval(env))
        .collect::<Result<Vec<_>, _>>()?;
    let arg = |i: usize| vals.get(i).cloned().unwrap_or(Value::Null);
    let strict = |v: &Value| v.is_null();
    Ok(match f {
        Func::Coalesce => vals
            .into_iter()
            .find(|v| !v.is_null())
            .unwrap_or(Value::Null),
        Func::NullIf => {
            if arg(0).sql_cmp(&arg(1)) == Some(Ordering::Equal) {
                Value::Null
            } else {
                arg(0)
            }
        }
        Func::Greatest | Func::Least => {
            let mut best: Option<Value> = None;
            for v in vals.into_iter().filter(|v| !v.is_null()) {
                best = Some(match best {
                    None => v,
                    Some(b) => {
                        let take = match v.sql_cmp(&b) {
                            Some(Ordering::Greater) => f == Func::Greatest,
                            Some(Ordering::Less) => f == Func::Least,
                            _ => false,
                        };
                        if take {
                            v
                        } else {
                            b
                        }
                    }
                });
            }
            best.unwrap_or(Value::Null)
        }
        Func::Concat => Value::Text(vals.iter().filter_map(|v| v.to_text()).collect()),
        Func::JsonbBuildObject => crate::json::build_object(&vals)?,
        Func::JsonBuildObject => crate::json::build_json_object(&vals)?,
        Func::JsonbBuildArray => crate::json::build_array(&vals)?,
        Func::MakeArray => Value::Array(vals),
        Func::ArrayCat => match (arg(0), arg(1)) {
            (Value::Null, Value::Null) => Value::Null,
            (a, b) => crate::array::concat(a, b)?,
        },
        Func::ArrayAppend => crate::array::append(arg(0), arg(1), false)?,
        Func::ArrayPrepend => crate::array::append(arg(1), arg(0), true)?,
        Func::AnyOf(op) => crate::array::any_all(op, &arg(0), &arg(1), false)?,
        Func::AllOf(op) => crate::array::any_all(op, &arg(0), &arg(1), true)?,
        Func::Version => Value::Text("PostgreSQL 15.0 (Aqueduct 0.1)".into()),
        Func::CurrentDatabase => Value::Text("aqueduct".into()),
        Func::CurrentSchema => Value::Text("public".into()),
        Func::CurrentUser => Value::Text("aqueduct".into()),
        Func::FormatTypmod => match (arg(0), arg(1)) {
            (Value::Null, _) => Value::Null,
            (Value::Text(base), Value::Int(m)) => Value::Text(format_typmod(&base, m)),
            (base, _) => base,
        },
        Func::ArrayPosition => match (arg(0), arg(1), arg(2)) {
            (Value::Array(items), wanted, start) => {
                let from = match start {
                    Value::Int(s) => usize::try_from(s.max(1) - 1).unwrap_or(0),
                    _ => 0,
                };
                items
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, v)| match (v, &wanted) {
                        (Value::Null, Value::Null) => true,
                        (Value::Null, _) | (_, Value::Null) => false,
                        (v, w) => v.sql_cmp(w) == Some(Ordering::Equal),
                    })
                    .map_or(Value::Null, |(i, _)| Value::Int(i as i64 + 1))
            }
            _ => Value::Null,
        },
        Func::ArrayRemove => match arg(0) {
            Value::Array(items) => {
                let gone = arg(1);
                Value::Array(
                    items
                        .into_iter()
                        .filter(|v| match (v, &gone) {
                            (Value::Null, Value::Null) => false,
                            (Value::Null, _) | (_, Value::Null) => true,
                            (v, g) => v.sql_cmp(g) != Some(Ordering::Equal),
                        })
                        .collect(),
                )
            }
            other => other,
        },
        Func::ArrayToString => match (arg(0), arg(1)) {
            (Value::Array(items), Value::Text(sep)) => {
                let null = arg(2).to_text();
                let parts: Vec<String> = items
                    .iter()
                    .filter_map(|v| match v {
                        Value::Null => null.clone(),
                        v => v.to_text(),
                    })
                    .collect();
                Value::Text(parts.join(&sep))
            }
            _ => Value::Null,
        },
        _ if vals.iter().any(strict) => Value::Null,
        Func::QuoteIdent => Value::Text(quote_ident(&text_of(&arg(0)))),
        Func::Replace => {
            let (t, from) = (text_of(&arg(0)), text_of(&arg(1)));
            // An empty `from` matches nowhere (PostgreSQL's answer).
            Value::Text(if from.is_empty() {
                t
            } else {
                t.replace(&from, &text_of(&arg(2)))
            })
        }
        Func::QuoteLiteral => {
            let t = text_of(&arg(0));
            // A backslash makes it an escape string literal (E'...').
            let quoted = t.replace('\'', "''");
            Value::Text(if t.contains('\\') {
                format!("E'{}'", quoted.replace('\\', "\\\\"))
            } else {
                format!("'{quoted}'")
            })
        }
        Func::Lower => Value::Text(text_of(&arg(0)).chars().map(lower_char).collect()),
        Func::Upper => Value::Text(text_of(&arg(0)).chars().map(upper_char).collect()),
        Func::Length => Value::Int(match arg(0) {
            Value::Bytes(b) => b.len() as i64,
            v => text_of(&v).chars().count() as i64,
        }),
        Func::Trim | Func::LTrim | Func::RTrim => {
            // Spaces, unless the characters to trim are given.
            let chars = if vals.len() > 1 {
                text_of(&arg(1))
            } else {
                " ".to_string()
            };
            let text = text_of(&arg(0));
            let cut = |c: char| chars.contains(c);
            Value::Text(
                match f {
                    Func::LTrim => text.trim_start_matches(cut),
                    Func::RTrim => text.trim_end_matches(cut),
                    _ => text.trim_matches(cut),
                }
                .to_string(),
            )
        }
        Func::JsonbTypeof => crate::json::type_of(&arg(0))?,
        Func::JsonbArrayLength => crate::json::array_length(&arg(0))?,
        Func::JsonbSet => {
            let create = !matches!(vals.get(3), Some(Value::Bool(false)));
            crate::json::set(&arg(0), &arg(1), &arg(2), create)?
        }
        Func::ToJsonb => Value::Jsonb(crate::json::to_jsonb(&arg(0))?),
        Func::Cardinality => crate::array::cardinality(&arg(0))?,
        Func::ArrayLength | Func::ArrayUpper => crate::array::length(&arg(0), &arg(1))?,
        Func::ArrayLower => match crate::array::length(&arg(0), &arg(1))? {
            Value::Int(_) => Value::Int(1),
            other => other,
        },
        Func::Subscript => crate::array::subscript(&arg(0), &arg(1))?,
        Func::JustifyDays => crate::datetime::justify(
            &arg(0),
            "justify_days",
            aqueduct_values::Interval::justify_days,
        )?,
        Func::JustifyHours => crate::datetime::justify(
            &arg(0),
            "justify_hours",
            aqueduct_values::Interval::justify_hours,
        )?,
        Func::JustifyInterval => crate::datetime::justify(
            &arg(0),
            "justify_interval",
            aqueduct_values::Interval::justify_interval,
        )?,
        Func::Age => crate::datetime::age(&arg(0), &arg(1))?,
        Func::MakeInterval => crate::datetime::make_interval(&vals)?,
        Func::DatePart => crate::datetime::part(&arg(0), &arg(1), false)?,
        Func::Extract => crate::datetime::part(&arg(0), &arg(1), true)?,
        Func::RealNumeric => match arg(0) {
            Value::Float(f) => Value::Numeric(aqueduct_values::real_to_numeric(f as f32)?),
            v => v.coerce(&DataType::Numeric)?,
        },
        Func::RealText => match arg(0) {
            Value::Float(f) => Value::Text(aqueduct_values::format_float4(f as f32)),
            v => Value::Text(text_of(&v)),
        },
        Func::Abs => match arg(0) {
            Value::Int(i) => Value::Int(i.checked_abs().ok_or_else(overflow)?),
            Value::Float(x) => Value::Float(x.abs()),
            Value::Numeric(d) => Value::Numeric(d.abs()),
            v => return Err(operator_error("abs", &v, &v)),
        },
        // round(numeric [, s]) rounds half away from zero; round(float8)
        // half to even; round(int) is round(float8), round(int, s)
        // round(numeric, s); there is no round(float8, s).
        Func::Round => match (arg(0), vals.get(1)) {
            (Value::Int(i), None) => Value::Float(i as f64),
            (Value::Float(x), None) => Value::Float(x.round_ties_even()),
            (Value::Numeric(d), None) => Value::Numeric(numeric::round(d, 0)?),
            (Value::Int(i), Some(Value::Int(p))) => {
                Value::Numeric(numeric::round(Decimal::from(i), *p)?)
            }
            (Value::Numeric(d), Some(Value::Int(p))) => Value::Numeric(numeric::round(d, *p)?),
            (v, _) => {
                return Err(SqlError::new(
                    "42883",
                    format!(
                        "function round({}{}) does not exist",
                        v.kind_name(),
                        if vals.len() > 1 { ", integer" } else { "" }
                    ),
                )
                .with_hint("round with places takes a numeric: cast the value to numeric"))
            }
        },
        Func::Substring => {
            let s: Vec<char> = text_of(&arg(0)).chars().collect();
            let start = match arg(1) {
                Value::Int(i) => i,
                _ => 1,
            };
            let len = match vals.get(2) {
                Some(Value::Int(n)) if *n < 0 => {
                    return Err(SqlError::new(
                        "22011",
                        "negative substring length not allowed",
                    ))
                }
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            };
            let from = (start - 1).max(0) as usize;
            let to = match len {
                Some(n) => (start - 1 + n).max(0) as usize,
                None => s.len(),
            };
            Value::Text(
                s[from.min(s.len())..to.min(s.len()).max(from.min(s.len()))]
                    .iter()
                    .collect(),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(e: Expr) -> Value {
        e.eval(&Env::new(&[], &[])).unwrap()
    }

    fn lit(v: Value) -> Box<Expr> {
        Box::new(Expr::Literal(v))
    }

    #[test]
    fn three_valued_logic() {
        let null = || lit(Value::Null);
        let t = || lit(Value::Bool(true));
        let f = || lit(Value::Bool(false));
        assert_eq!(
            eval(Expr::Binary(BinOp::And, null(), f())),
            Value::Bool(false)
        );
        assert!(eval(Expr::Binary(BinOp::And, null(), t())).is_null());
        assert_eq!(
            eval(Expr::Binary(BinOp::Or, null(), t())),
            Value::Bool(true)
        );
        assert!(eval(Expr::Binary(BinOp::Or, null(), f())).is_null());
        assert!(eval(Expr::Unary(UnOp::Not, null())).is_null());
        assert!(eval(Expr::Binary(BinOp::Eq, null(), null())).is_null());
        // 1 IN (2, NULL) is NULL; 1 NOT IN (2, NULL) is NULL too.
        let list = vec![Expr::Literal(Value::Int(2)), Expr::Literal(Value::Null)];
        assert!(eval(Expr::InList(lit(Value::Int(1)), list.clone(), false)).is_null());
        assert!(eval(Expr::InList(lit(Value::Int(1)), list, true)).is_null());
    }

    fn eval_err(e: Expr) -> SqlError {
        e.eval(&Env::new(&[], &[])).unwrap_err()
    }

    fn text(s: &str) -> Box<Expr> {
        lit(Value::Text(s.into()))
    }

    fn num(s: &str) -> Value {
        Value::Numeric(aqueduct_values::parse_numeric(s).unwrap())
    }

    #[test]
    fn sixty_four_bit_overflow_is_a_bigint_error() {
        // 9223372036854775807 + 1 and abs(-9223372036854775808).
        let e = eval_err(Expr::Binary(
            BinOp::Add,
            lit(Value::Int(i64::MAX)),
            lit(Value::Int(1)),
        ));
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22003", "bigint out of range")
        );
        let e = eval_err(Expr::Call(
            Func::Abs,
            vec![Expr::Literal(Value::Int(i64::MIN))],
        ));
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22003", "bigint out of range")
        );
        // An integer result checked in its own type (the binder's cast).
        let e = eval_err(Expr::Cast(
            Box::new(Expr::Binary(
                BinOp::Add,
                lit(Value::Int(2_147_483_647)),
                lit(Value::Int(1)),
            )),
            DataType::Int4,
        ));
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22003", "integer out of range")
        );
        // -9223372036854775808 % -1 is 0.
        assert_eq!(
            eval(Expr::Binary(
                BinOp::Mod,
                lit(Value::Int(i64::MIN)),
                lit(Value::Int(-1))
            )),
            Value::Int(0)
        );
        // There is no % for floats.
        let e = eval_err(Expr::Binary(
            BinOp::Mod,
            lit(Value::Float(5.5)),
            lit(Value::Int(2)),
        ));
        assert_eq!(e.code, "42883");
    }

    #[test]
    fn concatenated_booleans_are_spelled_out() {
        // 'a' || true is 'atrue'; concat(true, 1) is 't1'.
        assert_eq!(
            eval(Expr::Binary(
                BinOp::Concat,
                text("a"),
                lit(Value::Bool(true))
            )),
            Value::Text("atrue".into())
        );
        assert_eq!(
            eval(Expr::Call(
                Func::Concat,
                vec![
                    Expr::Literal(Value::Bool(true)),
                    Expr::Literal(Value::Int(1))
                ]
            )),
            Value::Text("t1".into())
        );
    }

    #[test]
    fn case_mapping_is_per_character() {
        // upper('straße') is 'STRAßE' in PostgreSQL, not 'STRASSE'.
        let call = |f, s: &str| eval(Expr::Call(f, vec![Expr::Literal(Value::Text(s.into()))]));
        assert_eq!(call(Func::Upper, "straße"), Value::Text("STRAßE".into()));
        assert_eq!(call(Func::Upper, "ﬁx"), Value::Text("ﬁX".into()));
        assert_eq!(call(Func::Lower, "ÀB"), Value::Text("àb".into()));
        assert_eq!(call(Func::Lower, "İ"), Value::Text("i".into()));
    }

    #[test]
    fn round_follows_the_argument_type() {
        let round = |args: Vec<Value>| {
            eval(Expr::Call(
                Func::Round,
                args.into_iter().map(Expr::Literal).collect(),
            ))
        };
        // numeric: half away from zero, at the requested scale.
        assert_eq!(round(vec![num("2.5")]).to_text().unwrap(), "3");
        assert_eq!(round(vec![num("-2.5")]).to_text().unwrap(), "-3");
        assert_eq!(
            round(vec![num("12.345"), Value::Int(2)]).to_text().unwrap(),
            "12.35"
        );
        assert_eq!(round(vec![num("0.5")]).to_text().unwrap(), "1");
        // float8: half to even.
        assert_eq!(round(vec![Value::Float(2.5)]), Value::Float(2.0));
        assert_eq!(round(vec![Value::Float(3.5)]), Value::Float(4.0));
        // round(int) is round(float8); round(int, s) is numeric.
        assert_eq!(round(vec![Value::Int(7)]), Value::Float(7.0));
        assert_eq!(
            round(vec![Value::Int(5), Value::Int(2)]).to_text().unwrap(),
            "5.00"
        );
        // No round(double precision, integer).
        let e = eval_err(Expr::Call(
            Func::Round,
            vec![
                Expr::Literal(Value::Float(2.5)),
                Expr::Literal(Value::Int(1)),
            ],
        ));
        assert_eq!(e.code, "42883");
    }

    #[test]
    fn numeric_arithmetic_keeps_postgres_scales() {
        let op = |op, a: &str, b: &str| {
            eval(Expr::Binary(op, lit(num(a)), lit(num(b))))
                .to_text()
                .unwrap()
        };
        assert_eq!(op(BinOp::Div, "1.50", "3"), "0.50000000000000000000");
        assert_eq!(op(BinOp::Add, "0.00", "1"), "1.00");
        assert_eq!(op(BinOp::Mul, "2.00", "0"), "0.00");
        assert_eq!(
            eval(Expr::Binary(
                BinOp::Div,
                lit(Value::Int(3)),
                lit(num("2.0"))
            ))
            .to_text()
            .unwrap(),
            "1.5000000000000000"
        );
        assert_eq!(
            eval(Expr::Unary(UnOp::Neg, lit(num("0.00"))))
                .to_text()
                .unwrap(),
            "0.00"
        );
    }

    #[test]
    fn real_text_has_real_digits() {
        assert_eq!(
            eval(Expr::Call(
                Func::RealText,
                vec![Expr::Literal(Value::Float(0.1f32 as f64))]
            )),
            Value::Text("0.1".into())
        );
    }

    #[test]
    fn like_patterns() {
        assert!(like("hello", "h%o"));
        assert!(like("hello", "_ello"));
        assert!(!like("hello", "h_o"));
        assert!(like("50%", "50\\%"));
        assert!(like("", "%"));
        assert!(like("abcabc", "%bc"));
    }

    #[test]
    fn arithmetic_errors_are_sql_errors() {
        let e = Expr::Binary(BinOp::Div, lit(Value::Int(1)), lit(Value::Int(0)));
        let err = e.eval(&Env::new(&[], &[])).unwrap_err();
        assert_eq!(err.code, "22012");
        let e = Expr::Binary(BinOp::Add, lit(Value::Int(i64::MAX)), lit(Value::Int(1)));
        assert_eq!(e.eval(&Env::new(&[], &[])).unwrap_err().code, "22003");
    }
}

/// `format_type`'s text for a type's base name and modifier (`character
/// varying(255)`, `numeric(10,2)`, `integer[]`); a modifier below 4 (or
/// none) adds nothing.
pub fn format_typmod(base: &str, typmod: i64) -> String {
    let (stem, array) = match base.strip_suffix("[]") {
        Some(s) => (s, "[]"),
        None => (base, ""),
    };
    let modifier = match stem {
        _ if typmod < 4 => String::new(),
        "character varying" | "character" | "bit" | "bit varying" => format!("({})", typmod - 4),
        "numeric" => {
            let m = typmod - 4;
            format!("({},{})", (m >> 16) & 0xFFFF, m & 0xFFFF)
        }
        _ => String::new(),
    };
    format!("{stem}{modifier}{array}")
}

/// Words PostgreSQL reserves: `quote_ident` quotes them.
const RESERVED_WORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "column",
    "constraint",
    "create",
    "current_catalog",
    "current_date",
    "current_role",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "from",
    "grant",
    "group",
    "having",
    "in",
    "initially",
    "intersect",
    "into",
    "lateral",
    "leading",
    "limit",
    "localtime",
    "localtimestamp",
    "not",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "placing",
    "primary",
    "references",
    "returning",
    "select",
    "session_user",
    "some",
    "symmetric",
    "table",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "when",
    "where",
    "window",
    "with",
];

/// An identifier as `quote_ident` writes it: quoted unless it is lower
/// case letters, digits and underscores, not starting with a digit, and
/// not a reserved word.
pub fn quote_ident(s: &str) -> String {
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !RESERVED_WORDS.contains(&s);
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

/// Compiled patterns are kept per thread up to this many.
const REGEX_CACHE: usize = 64;

thread_local! {
    static PATTERNS: std::cell::RefCell<std::collections::HashMap<(String, bool), regex::Regex>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `text ~ pattern` (`~*` ignoring case). The pattern is a regular
/// expression of the syntax PostgreSQL's and Rust's share (classes,
/// anchors, groups, alternation, repetition); one that does not compile
/// is 2201B, as PostgreSQL reports an invalid one.
fn regex_match(text: &str, pattern: &str, ignore_case: bool) -> Result<Value, SqlError> {
    PATTERNS.with(|cell| {
        let mut cache = cell.borrow_mut();
        let key = (pattern.to_string(), ignore_case);
        if !cache.contains_key(&key) {
            let re = regex::RegexBuilder::new(pattern)
                .case_insensitive(ignore_case)
                .size_limit(crate::limits::MAX_REGEX_BYTES)
                .build()
                .map_err(|e| {
                    SqlError::new(
                        "2201B",
                        format!("invalid regular expression: {}", first_line(&e.to_string())),
                    )
                })?;
            if cache.len() >= REGEX_CACHE {
                cache.clear();
            }
            cache.insert(key.clone(), re);
        }
        Ok(Value::Bool(cache[&key].is_match(text)))
    })
}

fn first_line(s: &str) -> &str {
    s.lines().last().unwrap_or(s).trim()
}
