//! What the SQL sinks share: the state tables, the guarded statements of
//! `docs/publications.md` §5.3 and §5.4, schema changes, value literals and
//! the read-back of rows, written once for the three dialects (SQLite,
//! PostgreSQL, MariaDB). A sink only opens its transaction, hands this
//! module an [`Exec`] and commits.
//!
//! Values are written as SQL literals, quoted here and nowhere else: text
//! between single quotes with quotes doubled (PostgreSQL sessions run with
//! `standard_conforming_strings` on and MariaDB sessions with
//! `NO_BACKSLASH_ESCAPES`, so backslashes are plain), identifiers between
//! double quotes with double quotes doubled (MariaDB sessions run with
//! `ANSI_QUOTES`). In PostgreSQL every literal is cast to the attribute's
//! type (`'12.50'::numeric(10,2)`, `NULL::integer`); in SQLite it is
//! written in the column's storage class; in MariaDB in the column's type
//! (timestamps with a zone converted to UTC).
//!
//! MariaDB commits DDL implicitly, so its statements are collected apart
//! ([`Script::ddl`]), each safe to repeat, and run before the transaction
//! holding the rest; the other dialects keep DDL in the transaction.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use aqueduct_publish::{AttributeType, Change, ChangeOp, Lsn, ObjectSchema, SchemaChange};
use aqueduct_subscribe::{key_text, Item, Origin, Record, Resume, SchemaPos, SinkError};
use serde_json::{Map, Value};

/// The row version column every data table has.
pub const VERSION_COLUMN: &str = "_aq_version";

/// Which SQL the statements are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
    MariaDb,
}

/// How an attribute's values are stored, from its PostgreSQL type name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Integer,
    Boolean,
    Real,
    Bytes,
    Json,
    Array,
    /// Everything stored as its PostgreSQL text form: numeric (keeping its
    /// scale), text, dates, times, uuid and the rest.
    Text,
}

impl Kind {
    /// The kind of a PostgreSQL type name as Aqueduct prints it.
    pub(crate) fn of(ty: &str) -> Kind {
        let t = ty.trim().to_ascii_lowercase();
        if t.ends_with("[]") {
            return Kind::Array;
        }
        match t.as_str() {
            "smallint" | "integer" | "int" | "bigint" | "int2" | "int4" | "int8"
            | "smallserial" | "serial" | "bigserial" => Kind::Integer,
            "boolean" | "bool" => Kind::Boolean,
            "real" | "double precision" | "float4" | "float8" | "float" => Kind::Real,
            "bytea" => Kind::Bytes,
            "json" | "jsonb" => Kind::Json,
            _ if t.starts_with("float") => Kind::Real,
            _ => Kind::Text,
        }
    }

    /// The column type SQLite declares: one whose affinity keeps the value
    /// as written (numeric as text keeps its scale).
    fn sqlite_type(self) -> &'static str {
        match self {
            Kind::Integer | Kind::Boolean => "INTEGER",
            Kind::Real => "REAL",
            Kind::Bytes => "BLOB",
            Kind::Json | Kind::Array | Kind::Text => "TEXT",
        }
    }
}

/// Whether a PostgreSQL type is a timestamp, and then whether it has a
/// zone.
fn timestamp_zone(ty: &str) -> Option<bool> {
    let t = ty.trim().to_ascii_lowercase();
    if !t.starts_with("timestamp") {
        return None;
    }
    Some(t.starts_with("timestamptz") || t.ends_with("with time zone"))
}

/// The `(p, s)` of `numeric(p, s)` or `decimal(p)`, where MariaDB's DECIMAL
/// can hold it.
fn decimal_args(ty: &str) -> Option<(u32, u32)> {
    let t = ty.trim().to_ascii_lowercase();
    let args = t
        .strip_prefix("numeric")
        .or_else(|| t.strip_prefix("decimal"))?
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?;
    let mut parts = args.split(',').map(|p| p.trim().parse::<u32>().ok());
    let p = parts.next()??;
    let s = match parts.next() {
        Some(s) => s?,
        None => 0,
    };
    (parts.next().is_none() && (1..=65).contains(&p) && s <= 38 && s <= p).then_some((p, s))
}

/// The `n` of `character varying(n)` or `varchar(n)`.
fn varchar_len(ty: &str) -> Option<u32> {
    let t = ty.trim().to_ascii_lowercase();
    let args = t
        .strip_prefix("character varying")
        .or_else(|| t.strip_prefix("varchar"))?
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?;
    args.trim().parse().ok()
}

/// The longest text a MariaDB key column holds: InnoDB keys are at most
/// 3072 bytes, four per character.
const MARIADB_KEY_CHARS: u32 = 255;

/// The column type MariaDB declares for a PostgreSQL type: integers,
/// DECIMAL for `numeric(p, s)`, TINYINT(1) for booleans, DOUBLE, DATE,
/// DATETIME(6) (UTC) for timestamps, JSON for json and arrays, CHAR(36) for
/// uuid, LONGBLOB for bytea, and LONGTEXT for everything else (bare
/// numeric keeps its text, scale and all). Key columns cannot be LONGTEXT
/// or LONGBLOB: text keys are VARCHAR (at most 255 characters, longer keys
/// are refused by the server) and byte keys VARBINARY.
fn mariadb_type(ty: &str, key: bool) -> String {
    let t = ty.trim().to_ascii_lowercase();
    let text = |n: u32| {
        if key {
            format!("VARCHAR({})", n.min(MARIADB_KEY_CHARS))
        } else if n <= MARIADB_KEY_CHARS {
            format!("VARCHAR({n})")
        } else {
            "LONGTEXT".to_string()
        }
    };
    match Kind::of(ty) {
        Kind::Integer => match t.as_str() {
            "smallint" | "int2" | "smallserial" => "SMALLINT".into(),
            "integer" | "int" | "int4" | "serial" => "INT".into(),
            _ => "BIGINT".into(),
        },
        Kind::Boolean => "TINYINT(1)".into(),
        Kind::Real => "DOUBLE".into(),
        Kind::Bytes if key => format!("VARBINARY({})", MARIADB_KEY_CHARS * 4),
        Kind::Bytes => "LONGBLOB".into(),
        Kind::Json | Kind::Array if key => text(MARIADB_KEY_CHARS),
        Kind::Json | Kind::Array => "JSON".into(),
        Kind::Text => {
            if let Some((p, s)) = decimal_args(&t) {
                format!("DECIMAL({p},{s})")
            } else if t == "date" {
                "DATE".into()
            } else if t == "uuid" {
                "CHAR(36)".into()
            } else if timestamp_zone(&t).is_some() {
                "DATETIME(6)".into()
            } else if let Some(n) = varchar_len(&t) {
                text(n)
            } else if key {
                text(MARIADB_KEY_CHARS)
            } else {
                "LONGTEXT".into()
            }
        }
    }
}

/// A timestamp as the wire writes it (`2025-01-02 03:04:05.5+05:30`) as a
/// MariaDB DATETIME(6) expression in UTC.
fn mariadb_timestamp(text: &str, zone: bool) -> Option<String> {
    let t = text.trim();
    if !zone {
        return Some(string(t));
    }
    // The offset starts at the last sign after the time of day.
    let at = t.rfind(['+', '-']).filter(|&i| i > 10)?;
    let (local, offset) = t.split_at(at);
    let sign = &offset[..1];
    let mut hms = offset[1..].split(':');
    let mut part = || -> Option<u32> {
        match hms.next() {
            None => Some(0),
            Some(p) if !p.is_empty() && p.len() <= 2 => p.parse().ok(),
            _ => None,
        }
    };
    let (h, m, s) = (part()?, part()?, part()?);
    if hms.next().is_some() || local.as_bytes().get(10) != Some(&b' ') {
        return None;
    }
    let local = string(local);
    if h == 0 && m == 0 && s == 0 {
        return Some(local);
    }
    // Local time minus the offset is UTC.
    let op = if sign == "+" { "DATE_SUB" } else { "DATE_ADD" };
    Some(format!(
        "{op}(CAST({local} AS DATETIME(6)), INTERVAL '{h}:{m:02}:{s:02}' HOUR_SECOND)"
    ))
}

/// A MariaDB timestamp read back as PostgreSQL (in UTC) writes it: no
/// trailing zeros in the fraction, `+00` for a zone.
fn mariadb_timestamp_text(text: &str, zone: bool) -> String {
    let mut t = text.to_string();
    if t.contains('.') {
        while t.ends_with('0') {
            t.pop();
        }
        if t.ends_with('.') {
            t.pop();
        }
    }
    if zone {
        t.push_str("+00");
    }
    t
}

/// A double-quoted identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A single-quoted string literal.
pub(crate) fn string(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// An LSN as SQL: both dialects store them as signed 64-bit integers.
/// An upsert's columns (the version last), values, and the guarded
/// assignments of its conflict clause.
type UpsertParts = (Vec<String>, Vec<String>, Vec<String>);

/// Rows in one multi-row upsert statement.
const UPSERT_ROWS_MAX: usize = 1_000;

/// The name of the key's text in a multi-row upsert's `VALUES` (matched
/// against `tombstones.key`): a name the sink keeps for itself, as it
/// keeps `_aq_version`.
const UPSERT_KEY_TEXT: &str = "_aq_key_text";

fn lsn(l: Lsn) -> String {
    assert!(
        i64::try_from(l).is_ok(),
        "LSN {l} does not fit a 64-bit SQL integer"
    );
    l.to_string()
}

/// A PostgreSQL type name checked to be only a type name, so it can be
/// written into statements as it is.
fn checked_type(ty: &str) -> Result<&str, SinkError> {
    let ok = !ty.trim().is_empty()
        && ty
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _(),[].\"".contains(c));
    if ok && !ty.contains("--") {
        Ok(ty)
    } else {
        Err(SinkError::permanent(format!("not a type name: {ty:?}")))
    }
}

/// A PostgreSQL array literal's text (`{"a","b",NULL}`) from a JSON array.
fn pg_array_text(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('{');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pg_array_text(item, out);
            }
            out.push('}');
        }
        Value::Null => out.push_str("NULL"),
        other => {
            let text = match other {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            out.push('"');
            for c in text.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        }
    }
}

/// A value's PostgreSQL text form as the feed writes it: strings as they
/// are, numbers and booleans as JSON writes them, json as its JSON text.
fn text_form(kind: Kind, value: &Value) -> String {
    match (kind, value) {
        (Kind::Json, v) => v.to_string(),
        (_, Value::String(s)) => s.clone(),
        (Kind::Array, v @ Value::Array(_)) => {
            let mut out = String::new();
            pg_array_text(v, &mut out);
            out
        }
        (_, v) => v.to_string(),
    }
}

/// `\x0a0b` as bytes.
fn bytea_bytes(text: &str) -> Option<Vec<u8>> {
    let hex = text.strip_prefix("\\x")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The state tables' names and the data tables' schema for one sink.
#[derive(Clone, Debug)]
pub(crate) struct Sql {
    pub(crate) dialect: Dialect,
    /// The subscription's name.
    pub(crate) name: String,
    /// `aqueduct_` (SQLite, MariaDB) or `aqueduct.` (PostgreSQL), before
    /// each state table's name.
    state: &'static str,
    /// The data tables' schema (PostgreSQL), unquoted.
    data_schema: Option<String>,
}

impl Sql {
    pub(crate) fn sqlite(name: &str) -> Sql {
        Sql {
            dialect: Dialect::Sqlite,
            name: name.to_string(),
            state: "aqueduct_",
            data_schema: None,
        }
    }

    pub(crate) fn postgres(name: &str, data_schema: &str) -> Sql {
        Sql {
            dialect: Dialect::Postgres,
            name: name.to_string(),
            state: "aqueduct.",
            data_schema: Some(data_schema.to_string()),
        }
    }

    pub(crate) fn mariadb(name: &str) -> Sql {
        Sql {
            dialect: Dialect::MariaDb,
            name: name.to_string(),
            state: "aqueduct_",
            data_schema: None,
        }
    }

    fn t(&self, table: &str) -> String {
        format!("{}{table}", self.state)
    }

    fn n(&self) -> String {
        string(&self.name)
    }

    /// The schema the `objects` state table files shapes under.
    fn schema_key(&self) -> String {
        string(self.data_schema.as_deref().unwrap_or("main"))
    }

    /// A data table's qualified, quoted name.
    pub(crate) fn table(&self, object: &str) -> String {
        match &self.data_schema {
            Some(s) => format!("{}.{}", ident(s), ident(object)),
            None => ident(object),
        }
    }

    /// What follows the columns of a `CREATE TABLE`: MariaDB tables are
    /// InnoDB (transactional) and compare text byte by byte without padding,
    /// as Aqueduct does, so keys differing in case or trailing spaces stay
    /// apart.
    fn table_options(&self) -> &'static str {
        match self.dialect {
            Dialect::MariaDb => " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin",
            Dialect::Sqlite | Dialect::Postgres => "",
        }
    }

    /// `ON CONFLICT (cols) DO UPDATE SET c = excluded.c, ...`, or MariaDB's
    /// `ON DUPLICATE KEY UPDATE c = VALUES(c), ...`: replaces `sets` of a
    /// row whose key `cols` exists.
    fn on_conflict_set(&self, cols: &str, sets: &[&str]) -> String {
        match self.dialect {
            Dialect::MariaDb => {
                let sets: Vec<String> = sets.iter().map(|c| format!("{c} = VALUES({c})")).collect();
                format!("ON DUPLICATE KEY UPDATE {}", sets.join(", "))
            }
            Dialect::Sqlite | Dialect::Postgres => {
                let sets: Vec<String> =
                    sets.iter().map(|c| format!("{c} = excluded.{c}")).collect();
                format!("ON CONFLICT ({cols}) DO UPDATE SET {}", sets.join(", "))
            }
        }
    }

    /// A DDL statement: into the transaction's statements, or, in MariaDB
    /// (where DDL commits implicitly), apart to run first.
    fn ddl(&self, s: &mut Script, ddl: Ddl) {
        match self.dialect {
            Dialect::MariaDb => s.ddl.push(ddl),
            Dialect::Sqlite | Dialect::Postgres => {
                let _ = writeln!(s.body, "{}", ddl.statement());
            }
        }
    }

    /// Creates the state tables and the subscription's row, if missing.
    /// In MariaDB it runs outside a transaction; every statement in it is
    /// safe to repeat.
    pub(crate) fn setup(&self) -> String {
        let mut s = String::new();
        if self.dialect == Dialect::Postgres {
            s.push_str("CREATE SCHEMA IF NOT EXISTS aqueduct;\n");
            if let Some(schema) = &self.data_schema {
                let _ = writeln!(s, "CREATE SCHEMA IF NOT EXISTS {};", ident(schema));
            }
        }
        // MariaDB keys cannot be TEXT; names and objects of up to 128
        // characters and key texts of up to 500 fit InnoDB's 3072 bytes.
        let (name, key, text) = match self.dialect {
            Dialect::MariaDb => ("VARCHAR(128)", "VARCHAR(500)", "LONGTEXT"),
            Dialect::Sqlite | Dialect::Postgres => ("text", "text", "text"),
        };
        let insert = match self.dialect {
            Dialect::MariaDb => "INSERT IGNORE",
            Dialect::Sqlite | Dialect::Postgres => "INSERT",
        };
        let ignore = match self.dialect {
            Dialect::MariaDb => "",
            Dialect::Sqlite | Dialect::Postgres => " ON CONFLICT (name) DO NOTHING",
        };
        let _ = write!(
            s,
            "CREATE TABLE IF NOT EXISTS {sub} (name {name} PRIMARY KEY, server_id {text}, \
             publication {text}, mode {text}, watermark bigint NOT NULL DEFAULT 0, \
             schema_lsn bigint, schema_seq bigint){opts};\n\
             CREATE TABLE IF NOT EXISTS {applied} (name {name} NOT NULL, lsn bigint NOT NULL, \
             PRIMARY KEY (name, lsn)){opts};\n\
             CREATE TABLE IF NOT EXISTS {tomb} (name {name} NOT NULL, object {name} NOT NULL, \
             \"key\" {key} NOT NULL, version bigint NOT NULL, \
             PRIMARY KEY (name, object, \"key\")){opts};\n\
             CREATE TABLE IF NOT EXISTS {dead} (name {name} NOT NULL, lsn bigint NOT NULL, \
             error {text} NOT NULL, attempts bigint NOT NULL, PRIMARY KEY (name, lsn)){opts};\n\
             CREATE TABLE IF NOT EXISTS {objects} (\"schema\" {name} NOT NULL, \
             object {name} NOT NULL, shape {text} NOT NULL, \
             PRIMARY KEY (\"schema\", object)){opts};\n\
             CREATE TABLE IF NOT EXISTS {origin} (name {name} PRIMARY KEY, server_id {text}, \
             boot_lsn bigint, sync_lsn bigint){opts};\n\
             {insert} INTO {sub} (name) VALUES ({n}){ignore};\n",
            opts = self.table_options(),
            sub = self.t("subscription"),
            applied = self.t("applied"),
            tomb = self.t("tombstones"),
            dead = self.t("dead_letters"),
            objects = self.t("objects"),
            origin = self.t("origin"),
            n = self.n(),
        );
        s
    }

    /// Where the copy came from (§5.6).
    pub(crate) fn origin(&self, db: &mut dyn Exec) -> Result<Origin, SinkError> {
        let rows = db.query(&format!(
            "SELECT server_id, boot_lsn, sync_lsn FROM {} WHERE name = {}",
            self.t("origin"),
            self.n()
        ))?;
        let Some(row) = rows.first() else {
            return Ok(Origin::default());
        };
        Ok(Origin {
            server_id: row[0].clone(),
            boot_lsn: int(&row[1])?,
            sync_lsn: int(&row[2])?,
        })
    }

    /// Replaces where the copy came from.
    pub(crate) fn set_origin(&self, o: &Origin) -> String {
        let lsn = |l: Option<Lsn>| l.map_or("NULL".to_string(), |l| l.to_string());
        format!(
            "DELETE FROM {t} WHERE name = {n};\n\
             INSERT INTO {t} (name, server_id, boot_lsn, sync_lsn) VALUES ({n}, {}, {}, {});\n",
            o.server_id.as_deref().map_or("NULL".to_string(), string),
            lsn(o.boot_lsn),
            lsn(o.sync_lsn),
            t = self.t("origin"),
            n = self.n(),
        )
    }

    // ---- reading state ----

    /// Reads the position (§5.3).
    pub(crate) fn resume(&self, db: &mut dyn Exec) -> Result<Resume, SinkError> {
        let n = self.n();
        let row = db.query(&format!(
            "SELECT watermark, schema_lsn, schema_seq FROM {} WHERE name = {n}",
            self.t("subscription")
        ))?;
        let row = row
            .first()
            .ok_or_else(|| SinkError::permanent(format!("no subscription {n} in the sink")))?;
        let watermark = int(&row[0])?.unwrap_or(0);
        let schema = match (int(&row[1])?, int(&row[2])?) {
            (Some(lsn), Some(seq)) => Some(SchemaPos {
                lsn,
                seq: u32::try_from(seq).map_err(|e| SinkError::permanent(e.to_string()))?,
            }),
            _ => None,
        };
        let applied_above = db
            .query(&format!(
                "SELECT lsn FROM {} WHERE name = {n} ORDER BY lsn",
                self.t("applied")
            ))?
            .iter()
            .map(|r| int(&r[0]).map(|l| l.unwrap_or(0)))
            .collect::<Result<Vec<_>, _>>()?;
        let dead_letters = db
            .query(&format!(
                "SELECT lsn, attempts FROM {} WHERE name = {n} ORDER BY lsn",
                self.t("dead_letters")
            ))?
            .iter()
            .map(|r| {
                let attempts = int(&r[1])?.unwrap_or(0);
                Ok((
                    int(&r[0])?.unwrap_or(0),
                    u32::try_from(attempts).map_err(|e| SinkError::permanent(e.to_string()))?,
                ))
            })
            .collect::<Result<Vec<_>, SinkError>>()?;
        Ok(Resume {
            watermark,
            applied_above,
            schema,
            dead_letters,
        })
    }

    /// The subscription's identity columns.
    pub(crate) fn identity(&self, db: &mut dyn Exec) -> Result<Identity, SinkError> {
        let rows = db.query(&format!(
            "SELECT server_id, publication, mode FROM {} WHERE name = {}",
            self.t("subscription"),
            self.n()
        ))?;
        let row = rows.into_iter().next().unwrap_or_default();
        let mut cells = row.into_iter();
        Ok(Identity {
            server_id: cells.next().flatten(),
            publication: cells.next().flatten(),
            mode: cells.next().flatten(),
        })
    }

    /// Whether a subscription of this sink database following `server_id`
    /// has applied its transaction `lsn`: its watermark is past it, or it
    /// is among its `applied` rows (§8). No such subscription: not yet.
    pub(crate) fn origin_applied(
        &self,
        db: &mut dyn Exec,
        server_id: &str,
        lsn: Lsn,
    ) -> Result<bool, SinkError> {
        let rows = db.query(&format!(
            "SELECT count(*) FROM {sub} s WHERE s.server_id = {id} AND (s.watermark > {lsn} \
             OR EXISTS (SELECT 1 FROM {applied} a WHERE a.name = s.name AND a.lsn = {lsn}))",
            sub = self.t("subscription"),
            applied = self.t("applied"),
            id = string(server_id),
        ))?;
        let n = rows.first().map(|r| int(&r[0])).transpose()?.flatten();
        Ok(n.unwrap_or(0) > 0)
    }

    /// Records the server the subscription follows, if none is recorded.
    pub(crate) fn note_server(&self, server_id: &str) -> String {
        format!(
            "UPDATE {} SET server_id = {} WHERE name = {} AND server_id IS NULL;\n",
            self.t("subscription"),
            string(server_id),
            self.n()
        )
    }

    /// Sets the subscription's identity columns.
    pub(crate) fn set_identity(&self, id: &Identity) -> String {
        let opt = |v: &Option<String>| v.as_deref().map_or("NULL".to_string(), string);
        format!(
            "UPDATE {} SET server_id = {}, publication = {}, mode = {} WHERE name = {};\n",
            self.t("subscription"),
            opt(&id.server_id),
            opt(&id.publication),
            opt(&id.mode),
            self.n()
        )
    }

    /// The objects' shapes as the sink holds them.
    pub(crate) fn shapes(&self, db: &mut dyn Exec) -> Result<Shapes, SinkError> {
        let rows = db.query(&format!(
            "SELECT object, shape FROM {} WHERE \"schema\" = {}",
            self.t("objects"),
            self.schema_key()
        ))?;
        let mut out = Shapes::new();
        for row in rows {
            let (Some(object), Some(shape)) = (&row[0], &row[1]) else {
                return Err(SinkError::permanent("a NULL in the objects table"));
            };
            let shape: ObjectSchema = serde_json::from_str(shape)
                .map_err(|e| SinkError::permanent(format!("stored shape of {object}: {e}")))?;
            out.insert(object.clone(), shape);
        }
        Ok(out)
    }

    // ---- writing ----

    /// Statements creating the objects `shapes` lacks; `shapes` learns them.
    pub(crate) fn ensure_objects(
        &self,
        shapes: &mut Shapes,
        objects: &BTreeMap<String, ObjectSchema>,
    ) -> Result<Script, SinkError> {
        let mut s = Script::default();
        for (object, shape) in objects {
            if !shapes.contains_key(object) {
                self.create_object(&mut s, shapes, object, shape)?;
            }
        }
        Ok(s)
    }

    fn create_object(
        &self,
        s: &mut Script,
        shapes: &mut Shapes,
        object: &str,
        shape: &ObjectSchema,
    ) -> Result<(), SinkError> {
        if shape.key.is_empty() {
            return Err(SinkError::permanent(format!("{object} has no key")));
        }
        for k in &shape.key {
            if !shape.attributes.iter().any(|a| &a.name == k) {
                return Err(SinkError::permanent(format!(
                    "{object}: key column {k} is not an attribute"
                )));
            }
        }
        let mut cols = Vec::new();
        for a in &shape.attributes {
            if a.name == VERSION_COLUMN {
                return Err(SinkError::permanent(format!(
                    "{object}: an attribute named {VERSION_COLUMN}"
                )));
            }
            let key = shape.key.contains(&a.name);
            cols.push(format!(
                "{} {}",
                ident(&a.name),
                self.column_type(&a.ty, key)?
            ));
        }
        cols.push(format!("{} bigint NOT NULL", ident(VERSION_COLUMN)));
        let key: Vec<String> = shape.key.iter().map(|k| ident(k)).collect();
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({})){};",
            self.table(object),
            cols.join(", "),
            key.join(", "),
            self.table_options()
        );
        self.ddl(s, Ddl::Run(create));
        shapes.insert(object.to_string(), shape.clone());
        self.save_shape(s, object, shape);
        Ok(())
    }

    fn save_shape(&self, s: &mut Script, object: &str, shape: &ObjectSchema) {
        let json = serde_json::to_string(shape).expect("shapes serialize");
        let _ = writeln!(
            s,
            "INSERT INTO {} (\"schema\", object, shape) VALUES ({}, {}, {}) {};",
            self.t("objects"),
            self.schema_key(),
            string(object),
            string(&json),
            self.on_conflict_set("\"schema\", object", &["shape"]),
        );
    }

    /// The column type of an attribute of PostgreSQL type `ty`; `key` when
    /// it is a key column.
    fn column_type(&self, ty: &str, key: bool) -> Result<String, SinkError> {
        let ty = checked_type(ty)?;
        Ok(match self.dialect {
            Dialect::Sqlite => Kind::of(ty).sqlite_type().to_string(),
            Dialect::Postgres => ty.to_string(),
            Dialect::MariaDb => mariadb_type(ty, key),
        })
    }

    /// A value as a literal of an attribute of type `ty`.
    pub(crate) fn literal(&self, ty: &str, value: &Value) -> Result<String, SinkError> {
        let kind = Kind::of(ty);
        match self.dialect {
            Dialect::Postgres => {
                let ty = checked_type(ty)?;
                if value.is_null() {
                    return Ok(format!("NULL::{ty}"));
                }
                Ok(format!("{}::{ty}", string(&text_form(kind, value))))
            }
            Dialect::Sqlite | Dialect::MariaDb => {
                let bad = || SinkError::permanent(format!("{value} is not a value of type {ty}"));
                let zone = timestamp_zone(ty).filter(|_| self.dialect == Dialect::MariaDb);
                Ok(match (kind, value) {
                    (_, Value::Null) => "NULL".into(),
                    (_, Value::String(s)) if zone.is_some() => {
                        mariadb_timestamp(s, zone == Some(true)).ok_or_else(bad)?
                    }
                    (Kind::Boolean, Value::Bool(b)) => if *b { "1" } else { "0" }.into(),
                    (Kind::Boolean, Value::String(s)) => match s.as_str() {
                        "t" | "true" => "1".into(),
                        "f" | "false" => "0".into(),
                        _ => return Err(bad()),
                    },
                    (Kind::Integer, Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                    (Kind::Integer, Value::String(s)) => {
                        s.trim().parse::<i64>().map_err(|_| bad())?.to_string()
                    }
                    (Kind::Real, Value::Number(n)) => {
                        let f = n.as_f64().ok_or_else(bad)?;
                        // Exact and always read back as a real.
                        format!("{f:?}")
                    }
                    (Kind::Bytes, Value::String(s)) => {
                        let bytes = bytea_bytes(s).ok_or_else(bad)?;
                        let mut hex = String::from("X'");
                        for b in bytes {
                            let _ = write!(hex, "{b:02x}");
                        }
                        hex.push('\'');
                        hex
                    }
                    (Kind::Integer | Kind::Boolean | Kind::Bytes, _) => return Err(bad()),
                    (Kind::Array, v @ Value::Array(_)) => string(&v.to_string()),
                    (k, v) => string(&text_form(k, v)),
                })
            }
        }
    }

    /// The shape of `c`'s object, checked against the change's key.
    fn shape_of<'s>(&self, shapes: &'s Shapes, c: &Change) -> Result<&'s ObjectSchema, SinkError> {
        let shape = shapes.get(&c.object).ok_or_else(|| {
            SinkError::permanent(format!(
                "a change of {}, an object the sink lacks",
                c.object
            ))
        })?;
        if c.key.len() != shape.key.len() {
            return Err(SinkError::permanent(format!(
                "{}: a key of {} values for {} key columns",
                c.object,
                c.key.len(),
                shape.key.len()
            )));
        }
        if c.key.iter().any(Value::is_null) {
            return Err(SinkError::permanent(format!("{}: a NULL key", c.object)));
        }
        Ok(shape)
    }

    /// The columns (the version last) and values of an upsert of `c`, and
    /// the guarded assignments of its conflict clause.
    fn upsert_parts(&self, shape: &ObjectSchema, c: &Change) -> Result<UpsertParts, SinkError> {
        let empty = Map::new();
        let attrs = c.attrs.as_ref().unwrap_or(&empty);
        if let Some(unknown) = attrs
            .keys()
            .find(|k| !shape.attributes.iter().any(|a| &a.name == *k))
        {
            return Err(SinkError::permanent(format!(
                "{} has no attribute {unknown}",
                c.object
            )));
        }
        let v = ident(VERSION_COLUMN);
        let mut cols = Vec::new();
        let mut vals = Vec::new();
        let mut sets = Vec::new();
        for a in &shape.attributes {
            let value = match shape.key.iter().position(|k| k == &a.name) {
                Some(i) => &c.key[i],
                None => attrs.get(&a.name).unwrap_or(&Value::Null),
            };
            cols.push(ident(&a.name));
            vals.push(self.literal(&a.ty, value)?);
            if !shape.key.contains(&a.name) {
                sets.push(ident(&a.name));
            }
        }
        cols.push(v.clone());
        vals.push(match self.dialect {
            // Typed, so a multi-row VALUES list has one type for it.
            Dialect::Postgres => format!("{}::bigint", lsn(c.version)),
            Dialect::Sqlite | Dialect::MariaDb => lsn(c.version),
        });
        // MariaDB evaluates the assignments in order, each seeing the ones
        // before it: the version, which every guard reads, is set last.
        sets.push(v.clone());
        let sets = match self.dialect {
            Dialect::MariaDb => sets
                .iter()
                .map(|c| format!("{c} = IF({v} < VALUES({v}), VALUES({c}), {c})"))
                .collect(),
            Dialect::Sqlite | Dialect::Postgres => {
                sets.iter().map(|c| format!("{c} = excluded.{c}")).collect()
            }
        };
        Ok((cols, vals, sets))
    }

    /// The conflict clause of an upsert into `shape`'s table.
    fn on_conflict(&self, shape: &ObjectSchema, sets: &[String]) -> String {
        let v = ident(VERSION_COLUMN);
        match self.dialect {
            Dialect::MariaDb => format!("ON DUPLICATE KEY UPDATE {}", sets.join(", ")),
            Dialect::Sqlite | Dialect::Postgres => {
                let key_cols: Vec<String> = shape.key.iter().map(|k| ident(k)).collect();
                format!(
                    "ON CONFLICT ({}) DO UPDATE SET {} WHERE t.{v} < excluded.{v}",
                    key_cols.join(", "),
                    sets.join(", ")
                )
            }
        }
    }

    /// The guarded statements of one change (§5.4).
    pub(crate) fn change(
        &self,
        s: &mut Script,
        shapes: &Shapes,
        c: &Change,
    ) -> Result<(), SinkError> {
        let shape = self.shape_of(shapes, c)?;
        let ty = |name: &str| {
            shape
                .attributes
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.ty.as_str())
                .ok_or_else(|| {
                    SinkError::permanent(format!("{} has no attribute {name}", c.object))
                })
        };
        let table = self.table(&c.object);
        let version = lsn(c.version);
        let key = string(&key_text(&c.key));
        let object = string(&c.object);
        let tombstones = self.t("tombstones");
        match c.op {
            ChangeOp::Insert | ChangeOp::Update => {
                let (cols, vals, sets) = self.upsert_parts(shape, c)?;
                let (alias, from) = match self.dialect {
                    Dialect::MariaDb => ("", " FROM DUAL"),
                    Dialect::Sqlite | Dialect::Postgres => (" AS t", ""),
                };
                let _ = writeln!(
                    s,
                    "INSERT INTO {table}{alias} ({cols}) SELECT {vals}{from} WHERE NOT EXISTS \
                     (SELECT 1 FROM {tombstones} WHERE name = {n} AND object = {object} \
                     AND \"key\" = {key} AND version >= {version}) {upsert};",
                    cols = cols.join(", "),
                    vals = vals.join(", "),
                    n = self.n(),
                    upsert = self.on_conflict(shape, &sets),
                );
            }
            ChangeOp::Delete => {
                let mut key_match = Vec::new();
                for (k, v) in shape.key.iter().zip(&c.key) {
                    key_match.push(format!("{} = {}", ident(k), self.literal(ty(k)?, v)?));
                }
                let key_match = key_match.join(" AND ");
                let (alias, from, upsert) = match self.dialect {
                    Dialect::MariaDb => (
                        "",
                        " FROM DUAL",
                        "ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))",
                    ),
                    Dialect::Sqlite | Dialect::Postgres => (
                        " AS tb",
                        "",
                        "ON CONFLICT (name, object, \"key\") DO UPDATE SET \
                         version = excluded.version WHERE tb.version < excluded.version",
                    ),
                };
                let _ = writeln!(
                    s,
                    "INSERT INTO {tombstones}{alias} (name, object, \"key\", version) \
                     SELECT {n}, {object}, {key}, {version}{from} WHERE NOT EXISTS \
                     (SELECT 1 FROM {table} WHERE {key_match} AND {v} >= {version}) \
                     {upsert};\n\
                     DELETE FROM {table} WHERE {key_match} AND {v} < {version};",
                    n = self.n(),
                    v = ident(VERSION_COLUMN),
                );
            }
        }
        Ok(())
    }

    /// One PostgreSQL statement upserting `changes`, inserts and updates of
    /// one object with distinct keys in key order, each guarded as
    /// [`Sql::change`] guards one: a row is written unless a tombstone or
    /// the row itself has its version or a newer one.
    fn upsert_many(
        &self,
        s: &mut Script,
        shapes: &Shapes,
        changes: &[&Change],
    ) -> Result<(), SinkError> {
        let first = changes.first().expect("changes to upsert");
        let shape = self.shape_of(shapes, first)?;
        let mut rows = Vec::with_capacity(changes.len());
        let mut columns = Vec::new();
        let mut sets = Vec::new();
        for c in changes {
            self.shape_of(shapes, c)?;
            let (cols, mut vals, row_sets) = self.upsert_parts(shape, c)?;
            vals.push(string(&key_text(&c.key)));
            rows.push(format!("({})", vals.join(", ")));
            columns = cols;
            sets = row_sets;
        }
        let names = columns.join(", ");
        let _ = writeln!(
            s,
            "INSERT INTO {table} AS t ({names}) SELECT {names} FROM (VALUES {rows}) \
             AS v({names}, {key_column}) WHERE NOT EXISTS (SELECT 1 FROM {tombstones} tb \
             WHERE tb.name = {n} AND tb.object = {object} AND tb.\"key\" = v.{key_column} \
             AND tb.version >= v.{version}) {upsert};",
            table = self.table(&first.object),
            rows = rows.join(", "),
            key_column = ident(UPSERT_KEY_TEXT),
            tombstones = self.t("tombstones"),
            n = self.n(),
            object = string(&first.object),
            version = ident(VERSION_COLUMN),
            upsert = self.on_conflict(shape, &sets),
        );
        Ok(())
    }

    /// The statements of one schema change (§6). Each is skipped when the
    /// sink's shape shows it done already (another subscription sharing the
    /// table applied it), so the tables follow whichever applies it first.
    ///
    /// In MariaDB the DDL is written to be repeated harmlessly (`ADD COLUMN
    /// IF NOT EXISTS`, `DROP COLUMN IF EXISTS`, a rename only while the
    /// table has the old name and lacks the new one), since a crash can
    /// fall between the DDL's own commit and the transaction recording it.
    pub(crate) fn schema(
        &self,
        s: &mut Script,
        shapes: &mut Shapes,
        object: &str,
        change: &SchemaChange,
    ) -> Result<(), SinkError> {
        let lacks =
            || SinkError::permanent(format!("a schema change of {object}, which the sink lacks"));
        let table = self.table(object);
        match change {
            SchemaChange::AddAttribute { name, ty, existing } => {
                let shape = shapes.get_mut(object).ok_or_else(lacks)?;
                if shape.attributes.iter().any(|a| &a.name == name) {
                    return Ok(());
                }
                if name == VERSION_COLUMN {
                    return Err(SinkError::permanent(format!(
                        "{object}: an attribute named {VERSION_COLUMN}"
                    )));
                }
                let ddl = format!(
                    "ALTER TABLE {table} ADD COLUMN {}{} {};",
                    self.if_exists(" IF NOT EXISTS"),
                    ident(name),
                    self.column_type(ty, false)?
                );
                self.ddl(s, Ddl::Run(ddl));
                if !existing.is_null() {
                    let _ = writeln!(
                        s,
                        "UPDATE {table} SET {} = {};",
                        ident(name),
                        self.literal(ty, existing)?
                    );
                }
                shape.attributes.push(AttributeType {
                    name: name.clone(),
                    ty: ty.clone(),
                });
                let shape = shape.clone();
                self.save_shape(s, object, &shape);
            }
            SchemaChange::DropAttribute { name } => {
                let shape = shapes.get_mut(object).ok_or_else(lacks)?;
                if shape.key.contains(name) {
                    return Err(SinkError::permanent(format!(
                        "{object}: dropping key column {name}"
                    )));
                }
                let before = shape.attributes.len();
                shape.attributes.retain(|a| &a.name != name);
                if shape.attributes.len() == before {
                    return Ok(());
                }
                let ddl = format!(
                    "ALTER TABLE {table} DROP COLUMN {}{};",
                    self.if_exists(" IF EXISTS"),
                    ident(name)
                );
                self.ddl(s, Ddl::Run(ddl));
                let shape = shape.clone();
                self.save_shape(s, object, &shape);
            }
            SchemaChange::RenameAttribute { from, to } => {
                let shape = shapes.get_mut(object).ok_or_else(lacks)?;
                let has = |n: &str| shape.attributes.iter().any(|a| a.name == n);
                match (has(from), has(to)) {
                    (false, true) => return Ok(()),
                    (true, false) => {}
                    _ => {
                        return Err(SinkError::permanent(format!(
                            "{object}: renaming {from} to {to} over the sink's attributes"
                        )))
                    }
                }
                if to == VERSION_COLUMN {
                    return Err(SinkError::permanent(format!(
                        "{object}: an attribute named {VERSION_COLUMN}"
                    )));
                }
                self.ddl(
                    s,
                    Ddl::Rename {
                        object: object.to_string(),
                        from: from.clone(),
                        to: to.clone(),
                        statement: format!(
                            "ALTER TABLE {table} RENAME COLUMN {} TO {};",
                            ident(from),
                            ident(to)
                        ),
                    },
                );
                for a in &mut shape.attributes {
                    if &a.name == from {
                        a.name = to.clone();
                    }
                }
                for k in &mut shape.key {
                    if k == from {
                        *k = to.clone();
                    }
                }
                let shape = shape.clone();
                self.save_shape(s, object, &shape);
            }
            SchemaChange::AddObject { object, schema } => {
                if !shapes.contains_key(object) {
                    self.create_object(s, shapes, object, schema)?;
                }
            }
            SchemaChange::DropObject { object } => {
                shapes.remove(object);
                self.ddl(
                    s,
                    Ddl::Run(format!("DROP TABLE IF EXISTS {};", self.table(object))),
                );
                let _ = writeln!(
                    s,
                    "DELETE FROM {} WHERE \"schema\" = {} AND object = {o};\n\
                     DELETE FROM {} WHERE name = {} AND object = {o};",
                    self.t("objects"),
                    self.schema_key(),
                    self.t("tombstones"),
                    self.n(),
                    o = string(object),
                );
            }
        }
        Ok(())
    }

    /// `clause` in MariaDB, where DDL must be safe to repeat; nothing
    /// elsewhere.
    fn if_exists(&self, clause: &'static str) -> &'static str {
        match self.dialect {
            Dialect::MariaDb => clause,
            Dialect::Sqlite | Dialect::Postgres => "",
        }
    }

    /// The statements of a batch's items, in order.
    pub(crate) fn items(
        &self,
        s: &mut Script,
        shapes: &mut Shapes,
        items: &[Item],
    ) -> Result<(), SinkError> {
        // The changes between two schema items are written in one order
        // of (object, key), the same in every batch, so that the row locks
        // concurrent batches take cannot form a cycle (workers apply in
        // parallel without deadlocks). Changes to one key keep their order.
        let mut run: Vec<&Change> = Vec::new();
        for item in items {
            match item {
                Item::Txn(t) => run.extend(&t.changes),
                Item::Schema(m, _) => {
                    self.changes_in_key_order(s, shapes, &mut run)?;
                    self.schema(s, shapes, &m.object, &m.change)?;
                }
                Item::Skip { .. } => {}
            }
        }
        self.changes_in_key_order(s, shapes, &mut run)
    }

    /// Writes `run`'s changes sorted by object and key, and empties it.
    fn changes_in_key_order(
        &self,
        s: &mut Script,
        shapes: &Shapes,
        run: &mut Vec<&Change>,
    ) -> Result<(), SinkError> {
        let mut keyed: Vec<(&str, String, &Change)> = run
            .drain(..)
            .map(|c| (c.object.as_str(), key_text(&c.key), c))
            .collect();
        keyed.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        // In PostgreSQL an object's inserts and updates go in one statement
        // when the run has no delete of it (a delete's tombstone and row
        // locks would then come after rows of higher keys): the newest
        // change of each key, in key order still, which in one sink
        // transaction leaves what all of them would.
        let mut i = 0;
        while i < keyed.len() {
            let object = keyed[i].0;
            let end = i + keyed[i..].iter().take_while(|k| k.0 == object).count();
            let group = &keyed[i..end];
            let upserts_only = group.iter().all(|(_, _, c)| c.op != ChangeOp::Delete);
            if self.dialect == Dialect::Postgres && upserts_only && group.len() > 1 {
                let mut newest: Vec<&Change> = Vec::with_capacity(group.len());
                for (j, (_, key, c)) in group.iter().enumerate() {
                    if j > 0 && group[j - 1].1 == *key {
                        let last = newest.last_mut().expect("the key's earlier change");
                        if c.version > last.version {
                            *last = c;
                        }
                    } else {
                        newest.push(c);
                    }
                }
                for part in newest.chunks(UPSERT_ROWS_MAX) {
                    self.upsert_many(s, shapes, part)?;
                }
            } else {
                for (_, _, c) in group {
                    self.change(s, shapes, c)?;
                }
            }
            i = end;
        }
        Ok(())
    }

    /// The statements of a position record written with a batch, or of a
    /// position stored on its own (`applied` empty). `current` is the
    /// stored watermark, read in the same transaction.
    pub(crate) fn record(&self, s: &mut Script, current: Lsn, record: &Record) {
        let n = self.n();
        for &l in &record.applied {
            // A plain insert: applying a transaction twice fails on the
            // primary key and rolls the whole batch back.
            let _ = writeln!(
                s,
                "INSERT INTO {} (name, lsn) VALUES ({n}, {});",
                self.t("applied"),
                lsn(l)
            );
        }
        if let Some(w) = record.watermark {
            assert!(
                w >= current,
                "stored watermark moves back from {current} to {w}"
            );
            let w = lsn(w);
            let _ = writeln!(
                s,
                "UPDATE {} SET watermark = {w} WHERE name = {n};\n\
                 DELETE FROM {} WHERE name = {n} AND lsn < {w};\n\
                 DELETE FROM {} WHERE name = {n} AND version < {w};",
                self.t("subscription"),
                self.t("applied"),
                self.t("tombstones"),
            );
        }
        if let Some(pos) = record.schema {
            let (l, q) = (lsn(pos.lsn), pos.seq);
            let _ = writeln!(
                s,
                "UPDATE {} SET schema_lsn = {l}, schema_seq = {q} WHERE name = {n} AND \
                 (schema_lsn IS NULL OR schema_lsn < {l} OR (schema_lsn = {l} AND schema_seq < {q}));",
                self.t("subscription"),
            );
        }
    }

    /// The stored watermark, locked for the transaction where the dialect
    /// locks rows.
    pub(crate) fn current_watermark(&self, db: &mut dyn Exec) -> Result<Lsn, SinkError> {
        let lock = match self.dialect {
            Dialect::Postgres | Dialect::MariaDb => " FOR UPDATE",
            Dialect::Sqlite => "",
        };
        let rows = db.query(&format!(
            "SELECT watermark FROM {} WHERE name = {}{lock}",
            self.t("subscription"),
            self.n()
        ))?;
        let row = rows.first().ok_or_else(|| {
            SinkError::permanent(format!("no subscription {} in the sink", self.name))
        })?;
        Ok(int(&row[0])?.unwrap_or(0))
    }

    /// Stores a dead letter, or updates its attempts.
    pub(crate) fn dead_letter(&self, l: Lsn, error: &SinkError, attempts: u32) -> String {
        format!(
            "INSERT INTO {} (name, lsn, error, attempts) VALUES ({}, {}, {}, {attempts}) {};",
            self.t("dead_letters"),
            self.n(),
            lsn(l),
            string(&error.to_string()),
            self.on_conflict_set("name, lsn", &["error", "attempts"]),
        )
    }

    /// Forgets a dead letter.
    pub(crate) fn clear_dead_letter(&self, l: Lsn) -> String {
        format!(
            "DELETE FROM {} WHERE name = {} AND lsn = {};",
            self.t("dead_letters"),
            self.n(),
            lsn(l)
        )
    }

    /// One object's rows as the wire writes them: key text to version and
    /// attributes, NULL attributes left out.
    pub(crate) fn rows(&self, db: &mut dyn Exec, object: &str) -> Result<Rows, SinkError> {
        let shapes = self.shapes(db)?;
        let shape = shapes
            .get(object)
            .ok_or_else(|| SinkError::permanent(format!("the sink lacks {object}")))?;
        let mut cols: Vec<String> = shape
            .attributes
            .iter()
            .map(|a| {
                let c = ident(&a.name);
                match (self.dialect, Kind::of(&a.ty)) {
                    (Dialect::Sqlite, _) => c,
                    (Dialect::Postgres, Kind::Array) => format!("to_jsonb({c})::text"),
                    (Dialect::Postgres, _) => format!("{c}::text"),
                    (Dialect::MariaDb, Kind::Bytes) => format!("CONCAT('\\x', LOWER(HEX({c})))"),
                    (Dialect::MariaDb, _) => c,
                }
            })
            .collect();
        cols.push(ident(VERSION_COLUMN));
        let mut out = Rows::new();
        for row in db.query(&format!(
            "SELECT {} FROM {}",
            cols.join(", "),
            self.table(object)
        ))? {
            let mut attrs = Map::new();
            for (a, cell) in shape.attributes.iter().zip(&row) {
                if let Some(text) = cell {
                    let zone = timestamp_zone(&a.ty).filter(|_| self.dialect == Dialect::MariaDb);
                    let value = match zone {
                        Some(zone) => Value::String(mariadb_timestamp_text(text, zone)),
                        None => from_text(Kind::of(&a.ty), text),
                    };
                    attrs.insert(a.name.clone(), value);
                }
            }
            let key: Vec<Value> = shape
                .key
                .iter()
                .map(|k| attrs.get(k).cloned().unwrap_or(Value::Null))
                .collect();
            let version = int(&row[shape.attributes.len()])?.unwrap_or(0);
            out.insert(key_text(&key), (version, attrs));
        }
        Ok(out)
    }
}

/// The subscription's identity as stored with its position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The server the subscription follows; another one is refused.
    pub server_id: Option<String>,
    /// The publication's name.
    pub publication: Option<String>,
    /// The delivery mode subscribed in.
    pub mode: Option<String>,
}

/// Objects' shapes by published name.
pub(crate) type Shapes = BTreeMap<String, ObjectSchema>;

/// Rows of one object by key text: version and attributes.
pub type Rows = BTreeMap<String, (Lsn, Map<String, Value>)>;

/// A stored value read back as the wire writes it.
fn from_text(kind: Kind, text: &str) -> Value {
    let parsed = match kind {
        Kind::Integer => text.parse::<i64>().ok().map(Value::from),
        Kind::Boolean => match text {
            "1" | "t" | "true" => Some(Value::Bool(true)),
            "0" | "f" | "false" => Some(Value::Bool(false)),
            _ => None,
        },
        Kind::Real => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        Kind::Json | Kind::Array => serde_json::from_str(text).ok(),
        Kind::Bytes | Kind::Text => None,
    };
    parsed.unwrap_or_else(|| Value::String(text.to_string()))
}

fn int(cell: &Option<String>) -> Result<Option<Lsn>, SinkError> {
    cell.as_deref()
        .map(|t| {
            t.parse::<Lsn>()
                .map_err(|_| SinkError::permanent(format!("{t:?} is not an LSN")))
        })
        .transpose()
}

/// A connection or transaction the shared statements run on.
pub(crate) trait Exec {
    /// Runs statements separated by semicolons.
    fn exec(&mut self, sql: &str) -> Result<(), SinkError>;
    /// Runs one query; each cell as text (BLOBs as `\x` hex), NULL as
    /// `None`.
    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, SinkError>;
}

/// The statements of one sink transaction: `body`, and in MariaDB the DDL
/// to run before it, each statement committing itself.
#[derive(Debug, Default)]
pub(crate) struct Script {
    /// DDL run before the transaction (MariaDB only), in order; each is
    /// safe to repeat.
    pub(crate) ddl: Vec<Ddl>,
    /// The transaction's statements.
    pub(crate) body: String,
}

impl Script {
    fn is_empty(&self) -> bool {
        self.ddl.is_empty() && self.body.is_empty()
    }
}

impl std::fmt::Write for Script {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.body.push_str(s);
        Ok(())
    }
}

/// A DDL statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ddl {
    /// A statement safe to repeat as it is (`IF [NOT] EXISTS`).
    Run(String),
    /// `statement` renames the column `from` of `object` to `to`; run only
    /// while the table has `from` and lacks `to`.
    Rename {
        object: String,
        from: String,
        to: String,
        statement: String,
    },
}

impl Ddl {
    fn statement(&self) -> &str {
        match self {
            Ddl::Run(s) | Ddl::Rename { statement: s, .. } => s,
        }
    }
}

/// Runs DDL collected apart (MariaDB), outside any transaction: each
/// statement commits on its own, and a rename is first checked in
/// `information_schema`, so running the list again after a crash changes
/// nothing.
pub(crate) fn run_ddl(db: &mut dyn Exec, ddl: &[Ddl]) -> Result<(), SinkError> {
    for d in ddl {
        if let Ddl::Rename {
            object, from, to, ..
        } = d
        {
            let cols = db.query(&format!(
                "SELECT column_name FROM information_schema.columns WHERE \
                 table_schema = DATABASE() AND table_name = {} AND column_name IN ({}, {})",
                string(object),
                string(from),
                string(to)
            ))?;
            // Column names compare without case in MariaDB.
            let has = |n: &str| {
                cols.iter()
                    .any(|r| r[0].as_deref().is_some_and(|c| c.eq_ignore_ascii_case(n)))
            };
            if has(to) && !has(from) {
                continue;
            }
        }
        db.exec(d.statement())?;
    }
    Ok(())
}

/// The DDL a batch's items need before their transaction, in a dialect
/// collecting DDL apart (MariaDB; empty elsewhere).
pub(crate) fn ddl_of(sql: &Sql, db: &mut dyn Exec, items: &[Item]) -> Result<Vec<Ddl>, SinkError> {
    let mut shapes = sql.shapes(db)?;
    let mut script = Script::default();
    if sql.dialect == Dialect::Postgres {
        script.body.push_str(&origin_setting(items));
    }
    sql.items(&mut script, &mut shapes, items)?;
    Ok(script.ddl)
}

/// The DDL [`ensure_objects`] needs before its transaction, as
/// [`ddl_of`].
pub(crate) fn ensure_ddl(
    sql: &Sql,
    db: &mut dyn Exec,
    objects: &BTreeMap<String, ObjectSchema>,
) -> Result<Vec<Ddl>, SinkError> {
    let mut shapes = sql.shapes(db)?;
    Ok(sql.ensure_objects(&mut shapes, objects)?.ddl)
}

/// Applies a batch on `db`, inside the caller's transaction: the items'
/// statements, then the record, as one script. In MariaDB the caller ran
/// the batch's DDL ([`ddl_of`]) before.
pub(crate) fn apply(
    sql: &Sql,
    db: &mut dyn Exec,
    items: &[Item],
    record: &Record,
) -> Result<(), SinkError> {
    let mut shapes = sql.shapes(db)?;
    let mut script = Script::default();
    if sql.dialect == Dialect::Postgres {
        script.body.push_str(&origin_setting(items));
    }
    sql.items(&mut script, &mut shapes, items)?;
    // Rows are written in key order (`Sql::items`) and the subscription's
    // row, which a batch storing a position (about once a second) or a
    // schema change locks, last: every batch takes its locks in one
    // global order, so the workers' batches commit in parallel and never
    // deadlock on one another.
    if record.watermark.is_none() && record.schema.is_none() {
        sql.record(&mut script, 0, record);
        return db.exec(&script.body);
    }
    if !script.is_empty() {
        db.exec(&script.body)?;
    }
    let current = sql.current_watermark(db)?;
    let mut script = Script::default();
    sql.record(&mut script, current, record);
    db.exec(&script.body)
}

/// In PostgreSQL, the batch's source transactions as the transaction's
/// `aqueduct.origin` (`docs/publications.md` §8): when the target is an
/// Aqueduct server, whatever it publishes from these rows names them as
/// origins, so a decorator built on an agent orders after its sources for
/// free; PostgreSQL itself keeps the dotted setting and ignores it.
/// Empty when the batch has no transaction ids (bootstrap chunks).
fn origin_setting(items: &[Item]) -> String {
    let txids: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::Txn(t) if !t.txid.is_empty() => Some(t.txid.as_str()),
            _ => None,
        })
        .collect();
    if txids.is_empty() {
        return String::new();
    }
    format!(
        "SET LOCAL aqueduct.origin = {};\n",
        string(&txids.join(","))
    )
}

/// Stores a position on its own, inside the caller's transaction.
pub(crate) fn store_position(
    sql: &Sql,
    db: &mut dyn Exec,
    watermark: Lsn,
    schema: Option<SchemaPos>,
) -> Result<(), SinkError> {
    let current = sql.current_watermark(db)?;
    let mut script = Script::default();
    sql.record(
        &mut script,
        current,
        &Record {
            applied: Vec::new(),
            watermark: Some(watermark),
            schema,
        },
    );
    db.exec(&script.body)
}

/// Forgets the subscription before a new bootstrap, inside the caller's
/// transaction: every row of its objects (tables are shared by the
/// subscriptions of one database: theirs go too, and come back with their
/// next bootstrap or writes), its applied transactions and tombstones, and
/// its position.
pub(crate) fn reset(sql: &Sql, db: &mut dyn Exec) -> Result<(), SinkError> {
    let shapes = sql.shapes(db)?;
    let n = sql.n();
    let mut script = String::new();
    for object in shapes.keys() {
        let _ = writeln!(script, "DELETE FROM {};", sql.table(object));
    }
    let _ = write!(
        script,
        "DELETE FROM {applied} WHERE name = {n};\n\
         DELETE FROM {tomb} WHERE name = {n};\n\
         UPDATE {sub} SET watermark = 0, schema_lsn = NULL, schema_seq = NULL WHERE name = {n};\n",
        applied = sql.t("applied"),
        tomb = sql.t("tombstones"),
        sub = sql.t("subscription"),
    );
    db.exec(&script)
}

/// Deletes one object's rows (those matching `filter`, a condition in
/// the sink's SQL), inside the caller's transaction.
pub(crate) fn clear_object(
    sql: &Sql,
    db: &mut dyn Exec,
    object: &str,
    filter: Option<&str>,
) -> Result<(), SinkError> {
    if !sql.shapes(db)?.contains_key(object) {
        return Err(SinkError::permanent(format!(
            "the sink holds no object \"{object}\""
        )));
    }
    let script = match filter {
        None => format!("DELETE FROM {};", sql.table(object)),
        Some(f) => format!("DELETE FROM {} WHERE ({f});", sql.table(object)),
    };
    db.exec(&script)
}

/// Creates the missing objects, inside the caller's transaction (in
/// MariaDB after [`ensure_ddl`] ran).
pub(crate) fn ensure_objects(
    sql: &Sql,
    db: &mut dyn Exec,
    objects: &BTreeMap<String, ObjectSchema>,
) -> Result<(), SinkError> {
    let mut shapes = sql.shapes(db)?;
    let script = sql.ensure_objects(&mut shapes, objects)?;
    if script.is_empty() {
        return Ok(());
    }
    db.exec(&script.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_batchs_txids_are_its_origin() {
        let txn = |txid: &str| {
            Item::Txn(std::sync::Arc::new(aqueduct_publish::TxnMessage {
                lsn: 1,
                first_lsn: 1,
                txid: txid.into(),
                commit_time: String::new(),
                epoch: 0,
                frame: 0,
                last: true,
                deps: None,
                bootstrap: false,
                changes: Vec::new(),
                origin: None,
            }))
        };
        assert_eq!(
            origin_setting(&[txn("a1:5"), txn("a1:9")]),
            "SET LOCAL aqueduct.origin = 'a1:5,a1:9';\n"
        );
        // Bootstrap chunks have no txids.
        assert_eq!(origin_setting(&[txn("")]), "");
    }

    #[test]
    fn kinds() {
        assert_eq!(Kind::of("bigint"), Kind::Integer);
        assert_eq!(Kind::of("numeric(10,2)"), Kind::Text);
        assert_eq!(Kind::of("text[]"), Kind::Array);
        assert_eq!(Kind::of("double precision"), Kind::Real);
        assert_eq!(Kind::of("timestamp with time zone"), Kind::Text);
        assert_eq!(Kind::of("jsonb"), Kind::Json);
    }

    #[test]
    fn literals() {
        let pg = Sql::postgres("s", "public");
        let lite = Sql::sqlite("s");
        let v = json!("it's");
        assert_eq!(pg.literal("text", &v).unwrap(), "'it''s'::text");
        assert_eq!(lite.literal("text", &v).unwrap(), "'it''s'");
        assert_eq!(
            pg.literal("numeric(10,2)", &json!("12.50")).unwrap(),
            "'12.50'::numeric(10,2)"
        );
        assert_eq!(
            pg.literal("integer", &Value::Null).unwrap(),
            "NULL::integer"
        );
        assert_eq!(
            pg.literal("text[]", &json!(["a\"b", null, "c\\d"]))
                .unwrap(),
            r#"'{"a\"b",NULL,"c\\d"}'::text[]"#
        );
        assert_eq!(
            pg.literal("jsonb", &json!({"a": "x'y"})).unwrap(),
            r#"'{"a":"x''y"}'::jsonb"#
        );
        assert_eq!(pg.literal("jsonb", &json!("s")).unwrap(), r#"'"s"'::jsonb"#);
        assert_eq!(lite.literal("boolean", &json!(true)).unwrap(), "1");
        assert_eq!(lite.literal("double precision", &json!(1)).unwrap(), "1.0");
        assert_eq!(lite.literal("bytea", &json!("\\x0aff")).unwrap(), "X'0aff'");
        assert!(lite.literal("bigint", &json!("x")).is_err());
        assert!(pg.literal("int); DROP TABLE x; --", &json!(1)).is_err());
    }

    #[test]
    fn mariadb_types_and_literals() {
        assert_eq!(mariadb_type("integer", false), "INT");
        assert_eq!(mariadb_type("bigint", true), "BIGINT");
        assert_eq!(mariadb_type("numeric(10,2)", false), "DECIMAL(10,2)");
        assert_eq!(mariadb_type("numeric", false), "LONGTEXT");
        assert_eq!(mariadb_type("text", false), "LONGTEXT");
        assert_eq!(mariadb_type("text", true), "VARCHAR(255)");
        assert_eq!(mariadb_type("character varying(40)", false), "VARCHAR(40)");
        assert_eq!(mariadb_type("boolean", false), "TINYINT(1)");
        assert_eq!(
            mariadb_type("timestamp with time zone", false),
            "DATETIME(6)"
        );
        assert_eq!(mariadb_type("jsonb", false), "JSON");
        assert_eq!(mariadb_type("integer[]", false), "JSON");
        assert_eq!(mariadb_type("uuid", true), "CHAR(36)");
        assert_eq!(mariadb_type("bytea", false), "LONGBLOB");
        let m = Sql::mariadb("s");
        let ts = "timestamp with time zone";
        assert_eq!(
            m.literal(ts, &json!("2025-01-02 03:04:05.5+00")).unwrap(),
            "'2025-01-02 03:04:05.5'"
        );
        assert_eq!(
            m.literal(ts, &json!("2025-01-02 03:04:05+05:30")).unwrap(),
            "DATE_SUB(CAST('2025-01-02 03:04:05' AS DATETIME(6)), INTERVAL '5:30:00' HOUR_SECOND)"
        );
        assert_eq!(
            m.literal(ts, &json!("1900-01-02 03:04:05-00:53:28"))
                .unwrap(),
            "DATE_ADD(CAST('1900-01-02 03:04:05' AS DATETIME(6)), INTERVAL '0:53:28' HOUR_SECOND)"
        );
        assert!(m.literal(ts, &json!("infinity")).is_err());
        assert_eq!(m.literal("boolean", &json!(true)).unwrap(), "1");
        assert_eq!(m.literal("text[]", &json!(["a"])).unwrap(), r#"'["a"]'"#);
        assert_eq!(
            mariadb_timestamp_text("2025-01-02 03:04:05.500000", true),
            "2025-01-02 03:04:05.5+00"
        );
        assert_eq!(
            mariadb_timestamp_text("2025-01-02 03:04:05.000000", false),
            "2025-01-02 03:04:05"
        );
    }

    #[test]
    fn read_back() {
        assert_eq!(from_text(Kind::Boolean, "t"), json!(true));
        assert_eq!(from_text(Kind::Real, "1.5"), json!(1.5));
        assert_eq!(from_text(Kind::Text, "12.50"), json!("12.50"));
        assert_eq!(from_text(Kind::Array, r#"["a",null]"#), json!(["a", null]));
    }
}
