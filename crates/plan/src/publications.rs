//! `CREATE PUBLICATION`, `ALTER PUBLICATION` and `DROP PUBLICATION`
//! (`docs/publications.md`, section 1.2): parsed here, since the SQL parser
//! does not know them, and planned against the catalog into the schema
//! records that declare them. The grammar is PostgreSQL 15's, plus
//! Aqueduct's additions inside it: an entry of a column list may be
//! `column AS name` or `expression AS name`, and `WITH` takes `mode`,
//! `dep_slots`, `max_lag` and `max_lag_age`; and maintained views as
//! published objects (`VIEW v [KEY (columns)]`, or a view named after
//! `TABLE`), with their changes from the view's dataflow.

use std::ops::ControlFlow;

use aqueduct_expr::{Expr, SqlError};
use aqueduct_tables::{
    Attribute, Catalog, Mode, ObjectKind, PublicationDef, PublishOps, PublishedObject,
    SchemaChange, Table, ViewColumn, DEP_SLOTS_DEFAULT, DEP_SLOTS_MAX,
};
use aqueduct_values::DataType;
use sqlparser::ast;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::bind::{ident, object_name, stored_sql, Binder, Scope};

/// A publication statement as written.
#[derive(Clone, Debug, PartialEq)]
pub enum PublicationStatement {
    Create {
        name: String,
        target: Target,
        options: Vec<(String, String)>,
    },
    Alter {
        name: String,
        action: AlterAction,
    },
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
}

/// What `CREATE PUBLICATION` publishes.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// No `FOR` clause: nothing yet.
    Nothing,
    AllTables,
    Tables(Vec<TableSpec>),
}

/// `TABLE t [ (columns) ] [ WHERE (filter) ]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub table: String,
    /// Written after `VIEW` (a view is also found after `TABLE`).
    pub view: bool,
    /// `KEY (columns)`: a view's key (views only).
    pub key: Option<Vec<String>>,
    /// `None`: no column list (every column, following the table).
    pub columns: Option<Vec<ColumnSpec>>,
    pub filter: Option<ast::Expr>,
}

/// An entry of a column list: a column or an expression, and the name it
/// is published under.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnSpec {
    pub expr: ast::Expr,
    pub alias: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AlterAction {
    AddTables(Vec<TableSpec>),
    SetTables(Vec<TableSpec>),
    DropTables(Vec<String>),
    SetOptions(Vec<(String, String)>),
    RenameTo(String),
    OwnerTo(String),
}

/// Whether `sql` is a publication statement, which bypasses the SQL
/// parser: its first two words are `CREATE`, `ALTER` or `DROP`, then
/// `PUBLICATION`.
pub fn is_publication_statement(sql: &str) -> bool {
    let mut words = sql.split_whitespace();
    let verb = words.next().unwrap_or("");
    let noun = words.next().unwrap_or("");
    ["create", "alter", "drop"]
        .iter()
        .any(|v| verb.eq_ignore_ascii_case(v))
        && noun.eq_ignore_ascii_case("publication")
}

fn usage() -> &'static str {
    "CREATE PUBLICATION name [FOR ALL TABLES | FOR TABLE t [(columns)] [WHERE (condition)], ...] \
     [WITH (mode = 'causal', ...)]; ALTER PUBLICATION name ADD | SET | DROP TABLE ... | SET (...) \
     | RENAME TO new | OWNER TO role; DROP PUBLICATION [IF EXISTS] name [, ...]"
}

fn syntax(e: ParserError) -> SqlError {
    if matches!(e, ParserError::RecursionLimitExceeded) {
        return crate::limits::too_complex();
    }
    let msg = e.to_string();
    let msg = msg.strip_prefix("sql parser error: ").unwrap_or(&msg);
    SqlError::syntax(format!("syntax error: {msg}")).with_hint(usage())
}

/// Parses a publication statement (see [`is_publication_statement`]).
pub fn parse_publication(sql: &str) -> Result<PublicationStatement, SqlError> {
    if sql.len() > crate::limits::MAX_SQL_BYTES {
        return Err(SqlError::new(
            "54000",
            format!(
                "query of {} bytes exceeds the limit of {} bytes",
                sql.len(),
                crate::limits::MAX_SQL_BYTES
            ),
        ));
    }
    let dialect = PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .with_unescape(true)
        .tokenize_with_location()
        .map_err(|e| syntax(ParserError::from(e)))?;
    crate::limits::check_tokens(&tokens).map_err(|_| crate::limits::too_complex())?;
    let mut p = Parser::new(&dialect)
        .with_recursion_limit(crate::limits::PARSER_RECURSION_LIMIT)
        .with_tokens_with_locations(tokens);
    let st = statement(&mut p).map_err(syntax)?;
    while p.consume_token(&Token::SemiColon) {}
    if p.peek_token().token != Token::EOF {
        return Err(syntax(ParserError::ParserError(format!(
            "unexpected {} after the statement",
            p.peek_token().token
        ))));
    }
    Ok(st)
}

/// Consumes the bare word `w` (not a keyword of the SQL parser).
fn word(p: &mut Parser, w: &str) -> bool {
    if let Token::Word(x) = &p.peek_token().token {
        if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w) {
            p.next_token();
            return true;
        }
    }
    false
}

fn expect_word(p: &mut Parser, w: &str) -> Result<(), ParserError> {
    if word(p, w) {
        return Ok(());
    }
    p.expected(&w.to_uppercase(), p.peek_token())
}

fn parse_name(p: &mut Parser) -> Result<String, ParserError> {
    Ok(ident(&p.parse_identifier()?))
}

fn statement(p: &mut Parser) -> Result<PublicationStatement, ParserError> {
    let verb = p.parse_one_of_keywords(&[Keyword::CREATE, Keyword::ALTER, Keyword::DROP]);
    expect_word(p, "publication")?;
    match verb {
        Some(Keyword::CREATE) => {
            let name = parse_name(p)?;
            let target = if p.parse_keyword(Keyword::FOR) {
                if p.parse_keywords(&[Keyword::ALL, Keyword::TABLES]) {
                    Target::AllTables
                } else {
                    Target::Tables(table_list(p)?)
                }
            } else {
                Target::Nothing
            };
            let options = if p.parse_keyword(Keyword::WITH) {
                options(p)?
            } else {
                Vec::new()
            };
            Ok(PublicationStatement::Create {
                name,
                target,
                options,
            })
        }
        Some(Keyword::ALTER) => {
            let name = parse_name(p)?;
            let action = if p.parse_keyword(Keyword::ADD) {
                AlterAction::AddTables(table_list(p)?)
            } else if p.parse_keyword(Keyword::DROP) {
                let specs = table_list(p)?;
                let mut names = Vec::with_capacity(specs.len());
                for s in specs {
                    if s.columns.is_some() || s.filter.is_some() || s.key.is_some() {
                        return Err(ParserError::ParserError(
                            "column list and WHERE clause must not be given with DROP TABLE".into(),
                        ));
                    }
                    names.push(s.table);
                }
                AlterAction::DropTables(names)
            } else if p.parse_keyword(Keyword::SET) {
                if p.peek_token().token == Token::LParen {
                    AlterAction::SetOptions(options(p)?)
                } else {
                    AlterAction::SetTables(table_list(p)?)
                }
            } else if p.parse_keywords(&[Keyword::RENAME, Keyword::TO]) {
                AlterAction::RenameTo(parse_name(p)?)
            } else if p.parse_keywords(&[Keyword::OWNER, Keyword::TO]) {
                AlterAction::OwnerTo(parse_name(p)?)
            } else {
                return p.expected("ADD, DROP, SET, RENAME TO or OWNER TO", p.peek_token());
            };
            Ok(PublicationStatement::Alter { name, action })
        }
        _ => {
            let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            let names = p.parse_comma_separated(parse_name)?;
            // RESTRICT and CASCADE drop the same: nothing depends on a
            // publication.
            let _ = p.parse_one_of_keywords(&[Keyword::CASCADE, Keyword::RESTRICT]);
            Ok(PublicationStatement::Drop { names, if_exists })
        }
    }
}

/// `TABLE a [(...)] [WHERE (...)], [TABLE] b ...`: PostgreSQL 15 lets the
/// word `TABLE` carry over to the entries after it.
fn table_list(p: &mut Parser) -> Result<Vec<TableSpec>, ParserError> {
    let mut out = Vec::new();
    loop {
        if p.parse_keywords(&[Keyword::TABLES, Keyword::IN, Keyword::SCHEMA]) {
            return Err(ParserError::ParserError(
                "TABLES IN SCHEMA is not supported: there is one schema, use FOR ALL TABLES".into(),
            ));
        }
        let said_view = p.parse_keyword(Keyword::VIEW);
        let said_table = said_view || p.parse_keyword(Keyword::TABLE);
        if !said_table && out.is_empty() {
            return p.expected("TABLE", p.peek_token());
        }
        let view = said_view || (!said_table && out.last().is_some_and(|s: &TableSpec| s.view));
        let _ = p.parse_keyword(Keyword::ONLY);
        let table = object_name(&p.parse_object_name(false)?)
            .map_err(|e| ParserError::ParserError(e.message))?;
        let _ = p.consume_token(&Token::Mul);
        let mut key = view_key_clause(p)?;
        let columns = if p.consume_token(&Token::LParen) {
            let list = p.parse_comma_separated(|p| {
                let expr = p.parse_expr()?;
                let alias = if p.parse_keyword(Keyword::AS) {
                    Some(parse_name(p)?)
                } else {
                    None
                };
                Ok(ColumnSpec { expr, alias })
            })?;
            p.expect_token(&Token::RParen)?;
            Some(list)
        } else {
            None
        };
        let filter = if p.parse_keyword(Keyword::WHERE) {
            p.expect_token(&Token::LParen)?;
            let e = p.parse_expr()?;
            p.expect_token(&Token::RParen)?;
            Some(e)
        } else {
            None
        };
        if key.is_none() {
            key = view_key_clause(p)?;
        }
        out.push(TableSpec {
            table,
            view,
            key,
            columns,
            filter,
        });
        if !p.consume_token(&Token::Comma) {
            return Ok(out);
        }
    }
}

/// `KEY (columns)`, a view's key, if it comes next.
fn view_key_clause(p: &mut Parser) -> Result<Option<Vec<String>>, ParserError> {
    if !p.parse_keyword(Keyword::KEY) {
        return Ok(None);
    }
    p.expect_token(&Token::LParen)?;
    let names = p.parse_comma_separated(parse_name)?;
    p.expect_token(&Token::RParen)?;
    Ok(Some(names))
}

/// `( name [= value] [, ...] )`; a value is a literal or a word.
fn options(p: &mut Parser) -> Result<Vec<(String, String)>, ParserError> {
    p.expect_token(&Token::LParen)?;
    let list = p.parse_comma_separated(|p| {
        let key = parse_name(p)?.to_lowercase();
        if !p.consume_token(&Token::Eq) {
            // A bare boolean option means true, as PostgreSQL reads it.
            return Ok((key, "true".to_string()));
        }
        let t = p.next_token();
        let value = match t.token {
            Token::SingleQuotedString(s) => s,
            Token::Number(n, _) => n,
            Token::Word(w) => w.value,
            _ => return p.expected("an option value", t),
        };
        Ok((key, value))
    })?;
    p.expect_token(&Token::RParen)?;
    Ok(list)
}

/// Who runs the statement.
pub struct Actor<'a> {
    pub role: &'a str,
    pub superuser: bool,
    /// Superusers from the server's configuration, outside the catalog's
    /// roles (they may own publications too).
    pub configured_superusers: &'a [String],
}

/// The columns of each maintained view, by name (from the views'
/// registry, which compiles them): what a published view's shape is.
pub type ViewColumns = std::collections::BTreeMap<String, Vec<(String, DataType)>>;

/// The schema records a publication statement writes, and its command tag.
pub struct PublicationPlan {
    pub changes: Vec<SchemaChange>,
    pub tag: &'static str,
}

/// Plans a publication statement against the catalog.
pub fn plan_publication(
    catalog: &Catalog,
    st: &PublicationStatement,
    actor: &Actor,
    views: &ViewColumns,
) -> Result<PublicationPlan, SqlError> {
    let plan = |changes, tag| PublicationPlan { changes, tag };
    match st {
        PublicationStatement::Create {
            name,
            target,
            options,
        } => {
            if catalog.publication(name).is_some() {
                return Err(SqlError::new(
                    "42710",
                    format!("publication \"{name}\" already exists"),
                ));
            }
            let mut def = PublicationDef {
                id: catalog.next_table_id(),
                name: name.clone(),
                mode: Mode::Causal,
                dep_slots: DEP_SLOTS_DEFAULT,
                publish: PublishOps::default(),
                max_lag_bytes: None,
                max_lag_age_s: None,
                all_tables: false,
                objects: Vec::new(),
            };
            apply_options(&mut def, options)?;
            match target {
                Target::Nothing => {}
                Target::AllTables => {
                    if !actor.superuser {
                        return Err(SqlError::new(
                            "42501",
                            "must be superuser to create FOR ALL TABLES publication",
                        ));
                    }
                    def.all_tables = true;
                }
                Target::Tables(specs) => {
                    for spec in specs {
                        add_object(catalog, &mut def, spec, actor, views)?;
                    }
                }
            }
            let id = def.id;
            Ok(plan(
                vec![
                    SchemaChange::CreatePublication(def),
                    SchemaChange::SetOwner {
                        object: id,
                        owner: actor.role.to_string(),
                    },
                ],
                "CREATE PUBLICATION",
            ))
        }
        PublicationStatement::Alter { name, action } => {
            let old = existing(catalog, name, actor)?;
            let mut def = old.clone();
            let all_tables_refused = || {
                SqlError::new(
                    "55000",
                    format!("publication \"{name}\" is defined as FOR ALL TABLES"),
                )
                .with_detail(
                    "Tables cannot be added to or dropped from FOR ALL TABLES publications.",
                )
            };
            let mut changes = Vec::new();
            match action {
                AlterAction::AddTables(specs) => {
                    if def.all_tables {
                        return Err(all_tables_refused());
                    }
                    for spec in specs {
                        add_object(catalog, &mut def, spec, actor, views)?;
                    }
                }
                AlterAction::SetTables(specs) => {
                    if def.all_tables {
                        return Err(all_tables_refused());
                    }
                    def.objects.clear();
                    for spec in specs {
                        add_object(catalog, &mut def, spec, actor, views)?;
                    }
                }
                AlterAction::DropTables(tables) => {
                    if def.all_tables {
                        return Err(all_tables_refused());
                    }
                    for t in tables {
                        let id = match relation_of(catalog, t, views) {
                            Ok(r) => r.schema.id,
                            Err(e) => return Err(e),
                        };
                        if def.object(id).is_none() {
                            return Err(SqlError::new(
                                "42704",
                                format!("relation \"{t}\" is not part of the publication"),
                            ));
                        }
                        def.objects.retain(|o| o.relation != id);
                    }
                }
                AlterAction::SetOptions(options) => apply_options(&mut def, options)?,
                AlterAction::RenameTo(new) => {
                    if catalog.publication(new).is_some() {
                        return Err(SqlError::new(
                            "42710",
                            format!("publication \"{new}\" already exists"),
                        ));
                    }
                    def.name = new.clone();
                }
                AlterAction::OwnerTo(role) => {
                    let configured = actor.configured_superusers.contains(role);
                    if catalog.role(role).is_none() && !configured && role != actor.role {
                        return Err(SqlError::new(
                            "42704",
                            format!("role \"{role}\" does not exist"),
                        ));
                    }
                    let superuser = configured
                        || catalog.role(role).is_some_and(|r| r.superuser)
                        || (role == actor.role && actor.superuser);
                    if def.all_tables && !superuser {
                        return Err(SqlError::new(
                            "42501",
                            format!("permission denied to change owner of publication \"{name}\""),
                        )
                        .with_hint(
                            "The owner of a FOR ALL TABLES publication must be a superuser.",
                        ));
                    }
                    changes.push(SchemaChange::SetOwner {
                        object: def.id,
                        owner: role.clone(),
                    });
                    return Ok(plan(changes, "ALTER PUBLICATION"));
                }
            }
            if def != *old {
                changes.push(SchemaChange::AlterPublication(def));
            }
            Ok(plan(changes, "ALTER PUBLICATION"))
        }
        PublicationStatement::Drop { names, if_exists } => {
            let mut out = plan(Vec::new(), "DROP PUBLICATION");
            for name in names {
                if *if_exists && catalog.publication(name).is_none() {
                    continue;
                }
                let def = existing(catalog, name, actor)?;
                if !out
                    .changes
                    .iter()
                    .any(|c| matches!(c, SchemaChange::DropPublication { id } if *id == def.id))
                {
                    out.changes
                        .push(SchemaChange::DropPublication { id: def.id });
                }
            }
            Ok(out)
        }
    }
}

/// The publication `name`, which `actor` must own (or be a superuser).
fn existing<'c>(
    catalog: &'c Catalog,
    name: &str,
    actor: &Actor,
) -> Result<&'c PublicationDef, SqlError> {
    let def = catalog
        .publication(name)
        .ok_or_else(|| SqlError::new("42704", format!("publication \"{name}\" does not exist")))?;
    if !actor.superuser && !catalog.is_owner(actor.role, def.id) {
        return Err(
            SqlError::new("42501", format!("must be owner of publication {name}")).with_hint(
                format!("only the owner of {name} or a superuser may do this"),
            ),
        );
    }
    Ok(def)
}

/// The table or maintained view called `name`: a view as a table of its
/// columns (no key yet).
fn relation_of(catalog: &Catalog, name: &str, views: &ViewColumns) -> Result<Table, SqlError> {
    let bare = name.strip_prefix("public.").unwrap_or(name);
    if let Some(t) = catalog.table(bare) {
        return Ok(t.clone());
    }
    let (Some(id), Some(columns)) = (catalog.view(bare), views.get(bare)) else {
        return Err(SqlError::undefined_table(bare));
    };
    let object = PublishedObject {
        relation: id,
        kind: ObjectKind::View,
        all_columns: true,
        attributes: Vec::new(),
        filter: None,
        view_columns: columns
            .iter()
            .map(|(name, ty)| ViewColumn {
                name: name.clone(),
                ty: ty.to_string(),
            })
            .collect(),
        view_key: Vec::new(),
    };
    Ok(Table::new(object.view_schema(bare)))
}

/// A published view's key: the columns `KEY` names, else every column.
fn view_key(table: &Table, key: Option<&[String]>) -> Result<Vec<usize>, SqlError> {
    let s = &table.schema;
    let Some(names) = key else {
        return Ok((0..s.columns.len()).collect());
    };
    let mut out = Vec::new();
    for n in names {
        let i = s.column_index(n).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!("column \"{n}\" of view \"{}\" does not exist", s.name),
            )
        })?;
        if out.contains(&i) {
            return Err(SqlError::new(
                "42701",
                format!("column \"{n}\" appears twice in the key of \"{}\"", s.name),
            ));
        }
        out.push(i);
    }
    Ok(out)
}

/// Adds `spec` to `def` as one object.
fn add_object(
    catalog: &Catalog,
    def: &mut PublicationDef,
    spec: &TableSpec,
    actor: &Actor,
    views: &ViewColumns,
) -> Result<(), SqlError> {
    let mut table = relation_of(catalog, &spec.table, views)?;
    let is_view = catalog.table(&table.schema.name).is_none();
    if spec.view && !is_view {
        return Err(
            SqlError::new("42809", format!("\"{}\" is not a view", table.schema.name))
                .with_hint("write TABLE for a table"),
        );
    }
    let mut view_key_columns = Vec::new();
    if is_view {
        view_key_columns = view_key(&table, spec.key.as_deref())?;
        table = Table::new(aqueduct_tables::TableSchema {
            primary_key: view_key_columns.clone(),
            ..(*table.schema).clone()
        });
    } else if spec.key.is_some() {
        return Err(SqlError::new(
            "42601",
            format!(
                "KEY is for views: table \"{}\" is published by its primary key",
                table.schema.name
            ),
        ));
    }
    let table = &table;
    let tname = &table.schema.name;
    if !actor.superuser && !catalog.is_owner(actor.role, table.schema.id) {
        return Err(
            SqlError::new("42501", format!("must be owner of table {tname}")).with_hint(format!(
                "only the owner of {tname} or a superuser may publish it"
            )),
        );
    }
    if def.object(table.schema.id).is_some() {
        return Err(SqlError::new(
            "42710",
            format!(
                "relation \"{tname}\" is already member of publication \"{}\"",
                def.name
            ),
        ));
    }
    let scope = Scope::table(table, tname);
    let mut binder = Binder::new(catalog);
    let mut attributes: Vec<Attribute> = Vec::new();
    if let Some(columns) = &spec.columns {
        for c in columns {
            let bare = match &c.expr {
                ast::Expr::Identifier(id) => Some(ident(id)),
                ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => Some(ident(&parts[1])),
                _ => None,
            };
            let attribute = match bare {
                Some(col) => {
                    let column = table.schema.column_index(&col).ok_or_else(|| {
                        SqlError::new(
                            "42703",
                            format!("column \"{col}\" of relation \"{tname}\" does not exist"),
                        )
                    })?;
                    Attribute::Column {
                        name: c.alias.clone().unwrap_or(col),
                        column,
                    }
                }
                None => {
                    let name = c.alias.clone().ok_or_else(|| {
                        SqlError::syntax(format!("the computed attribute {} needs a name", c.expr))
                            .with_hint("write expression AS name")
                    })?;
                    immutable_only(&c.expr, "column list")?;
                    let bound = binder.expr(&c.expr, &scope, None)?;
                    not_volatile(&bound, "column list")?;
                    Attribute::Computed {
                        name,
                        sql: stored_sql(&c.expr),
                        ty: binder.type_of(&bound, &scope).to_string(),
                    }
                }
            };
            if attributes.iter().any(|a| a.name() == attribute.name()) {
                return Err(SqlError::new(
                    "42701",
                    format!(
                        "duplicate attribute \"{}\" in the column list of \"{tname}\"",
                        attribute.name()
                    ),
                ));
            }
            attributes.push(attribute);
        }
    }
    let filter = match &spec.filter {
        Some(e) => {
            immutable_only(e, "WHERE")?;
            let bound = binder.condition(e, &scope, "WHERE")?;
            not_volatile(&bound, "WHERE")?;
            Some(stored_sql(e))
        }
        None => None,
    };
    def.objects.push(PublishedObject {
        relation: table.schema.id,
        kind: if is_view {
            ObjectKind::View
        } else {
            ObjectKind::Table
        },
        all_columns: spec.columns.is_none(),
        attributes,
        filter,
        view_columns: if is_view {
            table
                .schema
                .columns
                .iter()
                .map(|c| ViewColumn {
                    name: c.name.clone(),
                    ty: c.ty.to_string(),
                })
                .collect()
        } else {
            Vec::new()
        },
        view_key: view_key_columns,
    });
    Ok(())
}

fn invalid(what: &str, detail: &str) -> SqlError {
    SqlError::new("42P17", format!("invalid publication {what} expression")).with_detail(detail)
}

/// Refuses what a filter or computed attribute may not hold: it is
/// evaluated over each changed row alone, the same on every replay.
fn immutable_only(e: &ast::Expr, what: &str) -> Result<(), SqlError> {
    let mut found: Option<SqlError> = None;
    let _ = ast::visit_expressions(e, |x| {
        let bad = match x {
            ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. } => {
                Some("Subqueries are not allowed.")
            }
            ast::Expr::Function(f) => {
                let n = f.name.to_string().to_lowercase();
                let n = n.strip_prefix("pg_catalog.").unwrap_or(&n);
                if f.over.is_some() {
                    Some("Window functions are not allowed.")
                } else if aqueduct_expr::agg::AggFunc::by_name(n).is_some() {
                    Some("Aggregate functions are not allowed.")
                } else if crate::bind::is_clock_function(n)
                    || aqueduct_expr::Volatile::by_name(n).is_some()
                {
                    Some("User-defined or built-in mutable functions are not allowed.")
                } else {
                    None
                }
            }
            _ => None,
        };
        match bad {
            Some(detail) => {
                found = Some(invalid(what, detail));
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    });
    found.map_or(Ok(()), Err)
}

fn not_volatile(bound: &Expr, what: &str) -> Result<(), SqlError> {
    let mut volatile = false;
    bound.walk(&mut |x| volatile |= matches!(x, Expr::Volatile(..)));
    if volatile {
        return Err(invalid(
            what,
            "User-defined or built-in mutable functions are not allowed.",
        ));
    }
    Ok(())
}

fn bad_value(option: &str, value: &str) -> SqlError {
    SqlError::new(
        "22023",
        format!("invalid value for publication parameter \"{option}\": \"{value}\""),
    )
}

/// Applies `WITH (...)` options to a definition.
fn apply_options(def: &mut PublicationDef, options: &[(String, String)]) -> Result<(), SqlError> {
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in options {
        if seen.contains(&key.as_str()) {
            return Err(SqlError::syntax("conflicting or redundant options"));
        }
        seen.push(key);
        match key.as_str() {
            "mode" => {
                def.mode = value.to_ascii_lowercase().parse().map_err(|_| {
                    bad_value(key, value).with_hint("mode is 'global', 'causal' or 'weak'")
                })?;
            }
            "dep_slots" => {
                def.dep_slots = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| n.is_power_of_two() && *n <= DEP_SLOTS_MAX)
                    .ok_or_else(|| {
                        bad_value(key, value).with_hint(format!(
                            "dep_slots is a power of two from 1 to {DEP_SLOTS_MAX}"
                        ))
                    })?;
            }
            "publish" => {
                let mut ops = PublishOps {
                    insert: false,
                    update: false,
                    delete: false,
                };
                for op in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    match op.to_ascii_lowercase().as_str() {
                        "insert" => ops.insert = true,
                        "update" => ops.update = true,
                        "delete" => ops.delete = true,
                        // TRUNCATE is published as the deletes it makes.
                        "truncate" => {}
                        _ => {
                            return Err(SqlError::syntax(format!(
                                "unrecognized value for publication option \"publish\": \"{op}\""
                            ))
                            .with_hint("publish takes insert, update, delete and truncate"))
                        }
                    }
                }
                def.publish = ops;
            }
            "publish_via_partition_root" => {
                // No partitions: accepted and ignored, as a boolean.
                if !matches!(
                    value.to_ascii_lowercase().as_str(),
                    "true" | "false" | "on" | "off" | "1" | "0"
                ) {
                    return Err(bad_value(key, value));
                }
            }
            "max_lag" => {
                def.max_lag_bytes = Some(
                    crate::limits::parse_bytes(value)
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            bad_value(key, value).with_hint("a size such as '512MB' or '1GB'")
                        })?,
                );
            }
            "max_lag_age" => {
                def.max_lag_age_s = Some(
                    crate::limits::parse_duration(value)
                        .filter(|d| d.as_secs() > 0)
                        .ok_or_else(|| {
                            bad_value(key, value).with_hint("a duration such as '30min' or '24h'")
                        })?
                        .as_secs(),
                );
            }
            other => {
                return Err(SqlError::syntax(format!(
                    "unrecognized publication parameter: \"{other}\""
                ))
                .with_hint(
                    "the parameters are mode, dep_slots, publish, max_lag, max_lag_age and \
                     publish_via_partition_root",
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_parse() {
        assert!(is_publication_statement("create  Publication p"));
        assert!(!is_publication_statement(
            "create table publication (a int)"
        ));
        let st = parse_publication(
            "CREATE PUBLICATION social FOR TABLE users (id, name AS n, lower(email) AS e), \
             posts WHERE (NOT draft), TABLE comments WITH (mode = 'weak', dep_slots = 1024)",
        )
        .unwrap();
        let PublicationStatement::Create {
            name,
            target: Target::Tables(specs),
            options,
        } = st
        else {
            panic!("{st:?}")
        };
        assert_eq!(name, "social");
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].columns.as_ref().unwrap().len(), 3);
        assert_eq!(
            specs[0].columns.as_ref().unwrap()[1].alias.as_deref(),
            Some("n")
        );
        assert!(specs[1].filter.is_some());
        assert_eq!(specs[2].table, "comments");
        assert_eq!(options[1], ("dep_slots".into(), "1024".into()));
        assert_eq!(
            parse_publication("DROP PUBLICATION IF EXISTS a, b CASCADE").unwrap(),
            PublicationStatement::Drop {
                names: vec!["a".into(), "b".into()],
                if_exists: true
            }
        );
        assert!(matches!(
            parse_publication("ALTER PUBLICATION p SET (mode = global)").unwrap(),
            PublicationStatement::Alter {
                action: AlterAction::SetOptions(_),
                ..
            }
        ));
        assert_eq!(
            parse_publication("CREATE PUBLICATION p FOR TABLE")
                .unwrap_err()
                .code,
            "42601"
        );
    }
}
