//! SQL errors with PostgreSQL SQLSTATE codes, so drivers and ORMs react to
//! them as they would to PostgreSQL (for example, retry on 40001).

use std::fmt;

use aqueduct_values::ValueError;

/// A SQLSTATE received as text (from another node) as the `&'static str`
/// errors carry: the codes are few, so each distinct one is kept once.
pub fn static_code(code: &str) -> &'static str {
    static CODES: parking_lot::Mutex<Vec<&'static str>> = parking_lot::Mutex::new(Vec::new());
    if code.len() != 5 || !code.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return "XX000";
    }
    let mut codes = CODES.lock();
    if let Some(c) = codes.iter().find(|c| **c == code) {
        return c;
    }
    let c: &'static str = Box::leak(code.to_string().into_boxed_str());
    codes.push(c);
    c
}

/// An error reported to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    /// Five-character SQLSTATE.
    pub code: &'static str,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// Where it happened, as PostgreSQL's CONTEXT says it (`COPY t, line
    /// 3, column b: "abc"`): the wire's Where field.
    pub context: Option<String>,
}

impl SqlError {
    pub fn new(code: &'static str, message: impl Into<String>) -> SqlError {
        SqlError {
            code,
            message: message.into(),
            detail: None,
            hint: None,
            context: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }

    /// The error with `context` as its CONTEXT (the wire's Where field).
    pub fn with_context(mut self, context: impl Into<String>) -> SqlError {
        self.context = Some(context.into());
        self
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> SqlError {
        self.detail = Some(detail.into());
        self
    }

    /// 42601.
    pub fn syntax(message: impl Into<String>) -> SqlError {
        SqlError::new("42601", message)
    }

    /// 0A000: valid SQL that Aqueduct does not do.
    pub fn unsupported(what: impl Into<String>) -> SqlError {
        SqlError::new("0A000", format!("{} is not supported", what.into()))
    }

    /// 42P01.
    pub fn undefined_table(name: &str) -> SqlError {
        SqlError::new("42P01", format!("relation \"{name}\" does not exist"))
    }

    /// 42703.
    pub fn undefined_column(name: &str) -> SqlError {
        SqlError::new("42703", format!("column \"{name}\" does not exist"))
    }

    /// 42804.
    pub fn datatype_mismatch(message: impl Into<String>) -> SqlError {
        SqlError::new("42804", message)
    }

    /// 25P02: a statement in a transaction that already failed.
    pub fn in_failed_transaction() -> SqlError {
        SqlError::new(
            "25P02",
            "current transaction is aborted, commands ignored until end of transaction block",
        )
        .with_hint("send ROLLBACK to end the failed transaction")
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)
    }
}

impl std::error::Error for SqlError {}

impl From<ValueError> for SqlError {
    fn from(e: ValueError) -> SqlError {
        SqlError {
            detail: e.detail(),
            ..SqlError::new(e.sqlstate(), e.to_string())
        }
    }
}
