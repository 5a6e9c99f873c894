//! Roles and privileges in SQL: who a session runs as, `CREATE/ALTER/DROP
//! ROLE` (and `USER`), `GRANT`/`REVOKE`, owners, and the privilege check
//! every statement passes before it runs (`docs/sql.md`, "Roles and
//! privileges").
//!
//! The check is made once per statement, at the level of relations, from
//! the relations the statement names: a table needs the privilege the
//! statement uses it for; a view is an opaque relation checked for the
//! calling role, and what the view reads is checked for the view's owner
//! (views run with their owner's rights, as in PostgreSQL). Because it
//! happens before a statement is routed, every way of answering a read (a
//! keyed view read, an automatic view, one-shot evaluation, a release
//! read) is covered by it alike.
//!
//! Superusers pass every check. A principal that is not a role of the
//! catalog is a bootstrap user (from the server's configuration) or a
//! client of a server without users (trust): both are superusers.

use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;

use aqueduct_tables::{
    Catalog, Grantee, Privilege, RoleDef, SchemaChange, ScramVerifier, TableId, Txn,
    MAX_ROLE_NAME_BYTES,
};
use sqlparser::ast::{self, Statement};

use aqueduct_expr::SqlError;
use aqueduct_plan::bind::{self, object_name};
use aqueduct_plan::parse::contains_ignore_case;

/// The name a session runs as when the front end names none.
pub const DEFAULT_PRINCIPAL: &str = "aqueduct";
/// Deepest chain of views over views followed when checking a view
/// owner's rights (a cycle cannot exist, but a bound keeps it certain).
pub const MAX_VIEW_DEPTH: usize = 64;

/// Who a session runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    /// A bootstrap user or a trusted client: a superuser that is not a
    /// role of the catalog.
    pub bootstrap: bool,
}

impl Principal {
    /// A superuser from outside the catalog (trust, or a bootstrap user).
    pub fn superuser(name: impl Into<String>) -> Principal {
        Principal {
            name: name.into(),
            bootstrap: true,
        }
    }

    /// A role of the catalog (its attributes are read at every check).
    pub fn role(name: impl Into<String>) -> Principal {
        Principal {
            name: name.into(),
            bootstrap: false,
        }
    }

    /// Whether this principal is a superuser in `catalog`.
    pub fn is_superuser(&self, catalog: &Catalog) -> bool {
        self.bootstrap || catalog.role(&self.name).is_some_and(|r| r.superuser)
    }
}

impl Default for Principal {
    fn default() -> Principal {
        Principal::superuser(DEFAULT_PRINCIPAL)
    }
}

/// Whether the owner of an object is a superuser: owners that are not
/// roles of the catalog are bootstrap users or trusted clients (a role
/// that owns objects cannot be dropped).
pub(crate) fn owner_is_superuser(catalog: &Catalog, owner: Option<&str>) -> bool {
    match owner {
        None => true,
        Some(o) => catalog.role(o).is_none_or(|r| r.superuser),
    }
}

/// Replaces `current_user`, `session_user`, `current_role` and `user` by
/// the name of the role the session runs as, so every way of evaluating a
/// statement reports it.
pub(crate) fn substitute_current_user(statements: &mut [Statement], sql: &str, name: &str) {
    if !contains_ignore_case(sql, "user") && !contains_ignore_case(sql, "current_role") {
        return;
    }
    let is_user_function = |n: &str| {
        matches!(
            n.to_ascii_lowercase().as_str(),
            "current_user" | "session_user" | "current_role" | "user"
        )
    };
    // A view is not bound to its creator's name: the binder refuses the
    // functions in a maintained view, as it does `now()`.
    for st in statements
        .iter_mut()
        .filter(|st| !matches!(st, Statement::CreateView(_)))
    {
        // `SELECT current_user` names its column as PostgreSQL does, after
        // the function, not `?column?` as a literal would.
        if let Statement::Query(q) = st {
            if let ast::SetExpr::Select(select) = q.body.as_mut() {
                for item in &mut select.projection {
                    let ast::SelectItem::UnnamedExpr(e) = item else {
                        continue;
                    };
                    let called = match e {
                        ast::Expr::Function(f) if f.name.0.len() == 1 => f.name.to_string(),
                        ast::Expr::Identifier(i) if i.quote_style.is_none() => i.value.clone(),
                        _ => continue,
                    };
                    if is_user_function(&called) {
                        *item = ast::SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: ast::Ident::new(called.to_ascii_lowercase()),
                        };
                    }
                }
            }
        }
        let _ = ast::visit_expressions_mut(st, |e| {
            let replace = match e {
                ast::Expr::Function(f) => {
                    let no_args = matches!(f.args, ast::FunctionArguments::None)
                        || matches!(&f.args, ast::FunctionArguments::List(l) if l.args.is_empty());
                    no_args && f.name.0.len() == 1 && is_user_function(&f.name.to_string())
                }
                ast::Expr::Identifier(i) => i.quote_style.is_none() && is_user_function(&i.value),
                _ => false,
            };
            if replace {
                *e = ast::Expr::Value(
                    ast::Value::SingleQuotedString(name.to_string()).with_empty_span(),
                );
            }
            ControlFlow::<()>::Continue(())
        });
    }
}

/// Whether `st` is one of the statements this module runs.
pub(crate) fn is_role_statement(st: &Statement) -> bool {
    matches!(
        st,
        Statement::CreateRole(_)
            | Statement::AlterRole { .. }
            | Statement::Grant(_)
            | Statement::Revoke(_)
            | Statement::Drop {
                object_type: ast::ObjectType::Role | ast::ObjectType::User,
                ..
            }
    ) || matches!(
        st,
        Statement::AlterTable(a) if !a.operations.is_empty()
            && a.operations.iter().all(|op| matches!(op, ast::AlterTableOperation::OwnerTo { .. }))
    )
}

/// After a statement that created tables or views: records the creator as
/// their owner, in the same log batch.
pub(crate) fn record_owners(txn: &mut Txn, owner: &str) {
    let created: Vec<TableId> = txn
        .writes()
        .iter()
        .filter_map(|w| match w {
            aqueduct_tables::Write::Schema(SchemaChange::CreateTable(t)) => Some(t.id),
            aqueduct_tables::Write::Schema(SchemaChange::CreateView { id, .. }) => Some(*id),
            _ => None,
        })
        .collect();
    for object in created {
        txn.schema(SchemaChange::SetOwner {
            object,
            owner: owner.to_string(),
        });
    }
}

/// A table or view named in a statement, as the catalog knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relation {
    Table(TableId),
    View(TableId),
}

impl Relation {
    pub(crate) fn find(catalog: &Catalog, name: &str) -> Option<Relation> {
        if let Some(t) = catalog.table(name) {
            return Some(Relation::Table(t.schema.id));
        }
        catalog.view(name).map(Relation::View)
    }

    pub(crate) fn id(self) -> TableId {
        match self {
            Relation::Table(id) | Relation::View(id) => id,
        }
    }

    pub(crate) fn kind(self) -> &'static str {
        match self {
            Relation::Table(_) => "table",
            Relation::View(_) => "view",
        }
    }
}

pub(crate) fn permission_denied(
    kind: &str,
    name: &str,
    privilege: Privilege,
    role: &str,
) -> SqlError {
    SqlError::new("42501", format!("permission denied for {kind} {name}")).with_hint(format!(
        "role \"{role}\" needs the {privilege} privilege on {name}: its owner or a superuser can run GRANT {privilege} ON {name} TO {role}"
    ))
}

pub(crate) fn must_be_owner(kind: &str, name: &str) -> SqlError {
    SqlError::new("42501", format!("must be owner of {kind} {name}")).with_hint(format!(
        "only the owner of {name} or a superuser may do this"
    ))
}

/// The relations a statement reads and what it needs on them.
#[derive(Default)]
pub(crate) struct Needs {
    /// (relation name, privilege), in the order found.
    pub(crate) list: Vec<(String, Privilege)>,
    /// Relations that must be owned by the caller.
    pub(crate) owned: Vec<String>,
    /// Index names whose table must be owned by the caller.
    pub(crate) owned_indexes: Vec<String>,
}

impl Needs {
    pub(crate) fn add(&mut self, name: String, p: Privilege) {
        if !self.list.iter().any(|(n, q)| *n == name && *q == p) {
            self.list.push((name, p));
        }
    }

    pub(crate) fn reads(&mut self, names: Vec<String>) {
        for n in names {
            self.add(n, Privilege::Select);
        }
    }

    /// Everything `st` names besides its `target` (subqueries, `FROM`,
    /// `USING`) it reads.
    pub(crate) fn reads_besides(&mut self, st: &Statement, target: &str) {
        self.reads(
            bind::relations(st)
                .into_iter()
                .filter(|n| n != target)
                .collect(),
        );
    }
}

/// Relations named in a query (tables, views, CTE names).
pub(crate) fn query_relations(q: &ast::Query) -> Vec<String> {
    let mut out = Vec::new();
    let _ = ast::visit_relations(q, |name| {
        if let Ok(n) = object_name(name) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    out
}

/// Whether an expression reads a column (and so needs SELECT on its table).
pub(crate) fn reads_columns<T: ast::Visit>(node: &T) -> bool {
    ast::visit_expressions(node, |e| match e {
        ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

pub(crate) fn needs_of(st: &Statement, needs: &mut Needs) -> Result<(), SqlError> {
    match st {
        Statement::Query(q) => needs.reads(query_relations(q)),
        Statement::Insert(i) => {
            let ast::TableObject::TableName(n) = &i.table else {
                return Ok(());
            };
            let target = object_name(n)?;
            needs.add(target.clone(), Privilege::Insert);
            if let Some(src) = &i.source {
                needs.reads(query_relations(src));
            }
            if i.returning.is_some() {
                needs.add(target.clone(), Privilege::Select);
            }
            if let Some(ast::OnInsert::OnConflict(c)) = &i.on {
                if let ast::OnConflictAction::DoUpdate(u) = &c.action {
                    needs.add(target.clone(), Privilege::Update);
                    if u.selection.is_some() || reads_columns(&u.assignments) {
                        needs.add(target, Privilege::Select);
                    }
                }
            }
        }
        Statement::Update(u) => {
            let target = match &u.table.relation {
                ast::TableFactor::Table { name, .. } => object_name(name)?,
                _ => return Ok(()),
            };
            needs.add(target.clone(), Privilege::Update);
            if u.selection.is_some() || u.returning.is_some() || reads_columns(&u.assignments) {
                needs.add(target.clone(), Privilege::Select);
            }
            needs.reads_besides(st, &target);
        }
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
            };
            let target = match from.first().map(|t| &t.relation) {
                Some(ast::TableFactor::Table { name, .. }) => object_name(name)?,
                _ => return Ok(()),
            };
            needs.add(target.clone(), Privilege::Delete);
            if d.selection.is_some() || d.returning.is_some() {
                needs.add(target.clone(), Privilege::Select);
            }
            needs.reads_besides(st, &target);
        }
        Statement::Explain { statement, .. } => needs_of(statement, needs)?,
        // `COPY t FROM` inserts into t; `COPY t TO` and `COPY (query) TO`
        // read, as the query they stand for would.
        Statement::Copy { source, to, .. } => match source {
            ast::CopySource::Table { table_name, .. } => needs.add(
                object_name(table_name)?,
                if *to {
                    Privilege::Select
                } else {
                    Privilege::Insert
                },
            ),
            ast::CopySource::Query(q) => needs.reads(query_relations(q)),
        },
        Statement::CreateView(v) => needs.reads(query_relations(&v.query)),
        Statement::CreateIndex(c) => needs.owned.push(object_name(&c.table_name)?),
        // Only the owner of a table or view may comment on it (or on its
        // columns).
        Statement::Comment {
            object_type:
                ast::CommentObject::Table
                | ast::CommentObject::View
                | ast::CommentObject::MaterializedView,
            object_name: name,
            ..
        } => needs.owned.push(object_name(name)?),
        Statement::Comment {
            object_type: ast::CommentObject::Column,
            object_name: name,
            ..
        } => {
            let mut parts = name.0.clone();
            parts.pop();
            needs.owned.push(object_name(&ast::ObjectName(parts))?);
        }
        Statement::Drop {
            object_type:
                ast::ObjectType::Table | ast::ObjectType::View | ast::ObjectType::MaterializedView,
            names,
            ..
        } => {
            for n in names {
                needs.owned.push(object_name(n)?);
            }
        }
        Statement::Drop {
            object_type: ast::ObjectType::Index,
            names,
            ..
        } => {
            for n in names {
                needs.owned_indexes.push(object_name(n)?);
            }
        }
        _ => {}
    }
    Ok(())
}

/// A role statement being run under the commit lock.
pub(crate) struct Acting<'a> {
    pub(crate) me: &'a Principal,
    pub(crate) catalog: &'a Catalog,
    pub(crate) bootstrap: &'a BTreeSet<String>,
}

/// Role attributes a statement sets.
#[derive(Default)]
pub(crate) struct Attributes {
    login: Option<bool>,
    superuser: Option<bool>,
    createrole: Option<bool>,
    /// `Some(None)`: `PASSWORD NULL`.
    password: Option<Option<ScramVerifier>>,
}

pub(crate) fn password_of(p: &ast::Password) -> Result<Option<ScramVerifier>, SqlError> {
    match p {
        ast::Password::NullPassword => Ok(None),
        ast::Password::Password(ast::Expr::Value(v)) => match &v.value {
            ast::Value::SingleQuotedString(s)
            | ast::Value::DollarQuotedString(ast::DollarQuotedString { value: s, .. }) => {
                if s.is_empty() {
                    // PostgreSQL: an empty password is no password.
                    return Ok(None);
                }
                // A verifier given as such (as pg_dump writes them) is kept;
                // anything else is a password, of which only the verifier
                // is kept.
                if s.starts_with("SCRAM-SHA-256$") {
                    return ScramVerifier::parse(s).map(Some).ok_or_else(|| {
                        SqlError::new("22023", "malformed SCRAM-SHA-256 verifier").with_hint(
                            "give a password, or a verifier of the form SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>",
                        )
                    });
                }
                Ok(Some(ScramVerifier::from_password(s)))
            }
            ast::Value::Null => Ok(None),
            _ => Err(SqlError::syntax("PASSWORD takes a string literal")),
        },
        ast::Password::Password(_) => Err(SqlError::syntax("PASSWORD takes a string literal")),
    }
}

pub(crate) fn role_name(n: &ast::ObjectName) -> Result<String, SqlError> {
    let name = match n.0.as_slice() {
        [p] => p
            .as_ident()
            .map(bind::ident)
            .ok_or_else(|| SqlError::syntax(format!("unexpected role name {n}")))?,
        _ => return Err(SqlError::syntax(format!("unexpected role name {n}"))),
    };
    check_role_name(&name)?;
    Ok(name)
}

pub(crate) fn check_role_name(name: &str) -> Result<(), SqlError> {
    if name.is_empty() || name.len() > MAX_ROLE_NAME_BYTES {
        return Err(SqlError::new(
            "42602",
            format!("role name \"{name}\" must be 1 to {MAX_ROLE_NAME_BYTES} bytes long"),
        ));
    }
    if name.eq_ignore_ascii_case("public") || name.starts_with("pg_") {
        return Err(SqlError::new(
            "42939",
            format!("role name \"{name}\" is reserved"),
        ));
    }
    Ok(())
}

pub(crate) fn undefined_role(name: &str) -> SqlError {
    SqlError::new("42704", format!("role \"{name}\" does not exist"))
        .with_hint("create it first with CREATE ROLE (or CREATE USER)")
}

impl Acting<'_> {
    pub(crate) fn superuser(&self) -> bool {
        self.me.is_superuser(self.catalog)
    }

    pub(crate) fn may_manage_roles(&self) -> bool {
        self.superuser()
            || self
                .catalog
                .role(&self.me.name)
                .is_some_and(|r| r.createrole)
    }

    /// Who may create, alter or drop a role with these attributes.
    pub(crate) fn check_manage(&self, verb: &str, touches_superuser: bool) -> Result<(), SqlError> {
        if touches_superuser && !self.superuser() {
            return Err(
                SqlError::new("42501", format!("permission denied to {verb} role"))
                    .with_detail("Only superusers may create, alter or drop superuser roles."),
            );
        }
        if !self.may_manage_roles() {
            return Err(
                SqlError::new("42501", format!("permission denied to {verb} role"))
                    .with_detail(
                        "Only superusers and roles with the CREATEROLE attribute may manage roles.",
                    )
                    .with_hint("ask a superuser, or have one grant it: ALTER ROLE name CREATEROLE"),
            );
        }
        Ok(())
    }

    pub(crate) fn create_role(
        &self,
        c: &ast::CreateRole,
        txn: &mut Txn,
    ) -> Result<&'static str, SqlError> {
        // Options that would mean something Aqueduct does not do are
        // refused rather than ignored.
        let unsupported = [
            (c.connection_limit.is_some(), "CONNECTION LIMIT"),
            (c.valid_until.is_some(), "VALID UNTIL"),
            (
                !(c.in_role.is_empty() && c.in_group.is_empty()),
                "IN ROLE (role membership)",
            ),
            (
                !(c.role.is_empty() && c.user.is_empty() && c.admin.is_empty()),
                "ROLE, USER and ADMIN (role membership)",
            ),
            (c.create_db == Some(true), "CREATEDB"),
            (c.replication == Some(true), "REPLICATION"),
            (c.bypassrls == Some(true), "BYPASSRLS"),
            (c.authorization_owner.is_some(), "AUTHORIZATION"),
        ];
        if let Some((_, what)) = unsupported.iter().find(|(used, _)| *used) {
            return Err(SqlError::unsupported(format!("the role option {what}"))
                .with_hint("roles take LOGIN, SUPERUSER, CREATEROLE and PASSWORD"));
        }
        let attrs = Attributes {
            login: c.login,
            superuser: c.superuser,
            createrole: c.create_role,
            password: c.password.as_ref().map(password_of).transpose()?,
        };
        self.check_manage("create", attrs.superuser == Some(true))?;
        let mut next = self.catalog.next_table_id();
        for n in &c.names {
            let name = role_name(n)?;
            if self.catalog.role(&name).is_some() || self.bootstrap.contains(&name) {
                if c.if_not_exists {
                    continue;
                }
                return Err(
                    SqlError::new("42710", format!("role \"{name}\" already exists"))
                        .with_hint("choose another name, or change it with ALTER ROLE"),
                );
            }
            // Objects made by a trusted client or a former bootstrap user
            // carry its name as owner: a role of that name would own them.
            let owned = self.catalog.owned_by(&name);
            if !owned.is_empty() && !self.superuser() {
                return Err(SqlError::new(
                    "42501",
                    format!(
                        "permission denied to create role \"{name}\": it would own {}",
                        owned.join(", ")
                    ),
                )
                .with_hint(
                    "only a superuser may create a role with the name of an existing owner",
                ));
            }
            txn.schema(SchemaChange::CreateRole(RoleDef {
                id: next,
                name,
                login: attrs.login.unwrap_or(false),
                superuser: attrs.superuser.unwrap_or(false),
                createrole: attrs.createrole.unwrap_or(false),
                password: attrs.password.clone().flatten(),
            }));
            next += 1;
        }
        Ok("CREATE ROLE")
    }

    pub(crate) fn alter_role(
        &self,
        name: &ast::Ident,
        op: &ast::AlterRoleOperation,
        txn: &mut Txn,
    ) -> Result<&'static str, SqlError> {
        let name = bind::ident(name);
        let ast::AlterRoleOperation::WithOptions { options } = op else {
            return Err(SqlError::unsupported(
                "ALTER ROLE other than changing LOGIN, SUPERUSER, CREATEROLE or PASSWORD",
            ));
        };
        let mut attrs = Attributes::default();
        for o in options {
            match o {
                ast::RoleOption::Login(b) => attrs.login = Some(*b),
                ast::RoleOption::SuperUser(b) => attrs.superuser = Some(*b),
                ast::RoleOption::CreateRole(b) => attrs.createrole = Some(*b),
                ast::RoleOption::Password(p) => attrs.password = Some(password_of(p)?),
                other => {
                    return Err(SqlError::unsupported(format!("role option {other}")));
                }
            }
        }
        let Some(old) = self.catalog.role(&name) else {
            if self.bootstrap.contains(&name) {
                return Err(SqlError::new(
                    "42501",
                    format!(
                        "role \"{name}\" is configured on the server and cannot be altered in SQL"
                    ),
                )
                .with_hint("change it in the server's configuration (user file or config file)"));
            }
            return Err(undefined_role(&name));
        };
        // A role may change its own password and nothing else about itself.
        let own_password_only = old.name == self.me.name
            && !self.me.bootstrap
            && attrs.login.is_none()
            && attrs.superuser.is_none()
            && attrs.createrole.is_none();
        if !own_password_only {
            self.check_manage("alter", old.superuser || attrs.superuser == Some(true))?;
        }
        let mut new = old.clone();
        if let Some(b) = attrs.login {
            new.login = b;
        }
        if let Some(b) = attrs.superuser {
            new.superuser = b;
        }
        if let Some(b) = attrs.createrole {
            new.createrole = b;
        }
        if let Some(p) = attrs.password {
            new.password = p;
        }
        txn.schema(SchemaChange::AlterRole(new));
        Ok("ALTER ROLE")
    }

    pub(crate) fn drop_role(
        &self,
        kind: ast::ObjectType,
        if_exists: bool,
        names: &[ast::ObjectName],
        txn: &mut Txn,
    ) -> Result<&'static str, SqlError> {
        let mut dropping = Vec::new();
        for n in names {
            let name = role_name(n)?;
            let Some(role) = self.catalog.role(&name) else {
                if self.bootstrap.contains(&name) {
                    return Err(SqlError::new(
                        "42501",
                        format!("role \"{name}\" is configured on the server and cannot be dropped in SQL"),
                    )
                    .with_hint("remove it from the server's configuration"));
                }
                if if_exists {
                    continue;
                }
                return Err(undefined_role(&name));
            };
            self.check_manage("drop", role.superuser)?;
            if name == self.me.name {
                return Err(SqlError::new("55006", "current user cannot be dropped"));
            }
            let owned = self.catalog.owned_by(&name);
            if !owned.is_empty() {
                return Err(SqlError::new(
                    "2BP01",
                    format!("role \"{name}\" cannot be dropped because some objects depend on it"),
                )
                .with_detail(
                    owned
                        .iter()
                        .map(|o| format!("owner of {o}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
                .with_hint("drop the objects it owns first"));
            }
            dropping.push(role.id);
        }
        for id in dropping {
            txn.schema(SchemaChange::DropRole { id });
        }
        let _ = kind;
        Ok("DROP ROLE")
    }

    pub(crate) fn grant(
        &self,
        privileges: &ast::Privileges,
        objects: Option<&ast::GrantObjects>,
        grantees: &[ast::Grantee],
        grant: bool,
        txn: &mut Txn,
    ) -> Result<&'static str, SqlError> {
        let verb = if grant { "GRANT" } else { "REVOKE" };
        let privileges = privilege_list(privileges)?;
        let names = match objects {
            Some(ast::GrantObjects::Tables(n)) | Some(ast::GrantObjects::Views(n)) => n,
            None => {
                return Err(SqlError::unsupported(format!(
                    "{verb} of roles (role membership)"
                )))
            }
            Some(other) => {
                return Err(
                    SqlError::unsupported(format!("{verb} ON {other}")).with_hint(
                        "privileges are granted on tables and views: GRANT SELECT ON t TO role",
                    ),
                )
            }
        };
        let mut targets = Vec::new();
        for g in grantees {
            targets.push(self.grantee(g)?);
        }
        let superuser = self.superuser();
        for n in names {
            let name = object_name(n)?;
            let rel = Relation::find(self.catalog, &name)
                .ok_or_else(|| SqlError::undefined_table(&name))?;
            if !superuser && !self.catalog.is_owner(&self.me.name, rel.id()) {
                return Err(must_be_owner(rel.kind(), &name));
            }
            for g in &targets {
                let change = if grant {
                    SchemaChange::Grant {
                        object: rel.id(),
                        grantee: g.clone(),
                        privileges: privileges.clone(),
                    }
                } else {
                    SchemaChange::Revoke {
                        object: rel.id(),
                        grantee: g.clone(),
                        privileges: privileges.clone(),
                    }
                };
                txn.schema(change);
            }
        }
        Ok(verb)
    }

    /// `ALTER TABLE | VIEW | SEQUENCE | TYPE name OWNER TO role`: the
    /// object's owner (its owner or a superuser may give it away).
    pub(crate) fn set_owner(
        &self,
        name: &ast::ObjectName,
        operations: &[ast::AlterTableOperation],
        txn: &mut Txn,
    ) -> Result<&'static str, SqlError> {
        let name = object_name(name)?;
        let (object, kind) = match Relation::find(self.catalog, &name) {
            Some(rel) => (rel.id(), rel.kind()),
            None => match (self.catalog.sequence(&name), self.catalog.enum_type(&name)) {
                (Some(seq), _) => (seq.def.id, "sequence"),
                (None, Some(t)) => (t.id, "type"),
                (None, None) => return Err(SqlError::undefined_table(&name)),
            },
        };
        if !self.superuser() && !self.catalog.is_owner(&self.me.name, object) {
            return Err(must_be_owner(kind, &name));
        }
        for op in operations {
            let ast::AlterTableOperation::OwnerTo { new_owner } = op else {
                continue;
            };
            let owner = match new_owner {
                ast::Owner::Ident(i) => {
                    let role = if i.quote_style.is_some() {
                        i.value.clone()
                    } else {
                        i.value.to_lowercase()
                    };
                    let known = self.catalog.role(&role).is_some()
                        || self.bootstrap.contains(&role)
                        || role == self.me.name;
                    if !known {
                        return Err(undefined_role(&role));
                    }
                    role
                }
                _ => self.me.name.clone(),
            };
            txn.schema(SchemaChange::SetOwner { object, owner });
        }
        Ok(match kind {
            "type" => "ALTER TYPE",
            _ => "ALTER TABLE",
        })
    }

    pub(crate) fn grantee(&self, g: &ast::Grantee) -> Result<Grantee, SqlError> {
        if g.grantee_type == ast::GranteesType::Public {
            return Ok(Grantee::Public);
        }
        let name = match &g.name {
            Some(ast::GranteeName::ObjectName(n)) => object_name(n)?,
            _ => return Err(SqlError::syntax(format!("unexpected grantee {g}"))),
        };
        if name == "public" {
            return Ok(Grantee::Public);
        }
        if self.catalog.role(&name).is_none() && !self.bootstrap.contains(&name) {
            return Err(undefined_role(&name));
        }
        Ok(Grantee::Role(name))
    }
}

pub(crate) fn privilege_list(p: &ast::Privileges) -> Result<Vec<Privilege>, SqlError> {
    match p {
        ast::Privileges::All { .. } => Ok(Privilege::ALL.to_vec()),
        ast::Privileges::Actions(actions) => {
            let mut out = Vec::new();
            for a in actions {
                let p = match a {
                    ast::Action::Select { columns: None } => Privilege::Select,
                    ast::Action::Insert { columns: None } => Privilege::Insert,
                    ast::Action::Update { columns: None } => Privilege::Update,
                    ast::Action::Delete => Privilege::Delete,
                    ast::Action::Select { .. }
                    | ast::Action::Insert { .. }
                    | ast::Action::Update { .. } => {
                        return Err(SqlError::unsupported("column privileges").with_hint(
                            "grant on the whole table or view, or grant on a view of the columns",
                        ))
                    }
                    other => {
                        return Err(SqlError::unsupported(format!("the {other} privilege"))
                            .with_hint("SELECT, INSERT, UPDATE, DELETE and ALL are supported"))
                    }
                };
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            Ok(out)
        }
    }
}

/// Kept per session: the relations each view reads.
pub(crate) type ViewRelationsCache = HashMap<TableId, Vec<String>>;

/// Kept per session: the prepared statements (by [`Prepared::id`]) whose
/// privilege check passed, valid while the catalog's schema version (which
/// every role, grant and ownership change moves) and the session's role
/// stay the same. An executed prepared statement is checked once, not at
/// every execution.
///
/// [`Prepared::id`]: crate::session::Prepared
#[derive(Debug, Default)]
pub(crate) struct AuthorizedPrepared {
    schema_version: u64,
    ids: std::collections::HashSet<u64, aqueduct_dataflow::FastHash>,
}

impl AuthorizedPrepared {
    /// Whether statement `id` passed its check at `schema_version`.
    pub(crate) fn holds(&self, id: u64, schema_version: u64) -> bool {
        self.schema_version == schema_version && self.ids.contains(&id)
    }

    /// Statement `id` passed its check against the catalog at
    /// `schema_version` (read before the check began).
    pub(crate) fn note(&mut self, id: u64, schema_version: u64) {
        if self.schema_version != schema_version
            || self.ids.len() >= aqueduct_plan::limits::MAX_AUTHORIZED_PREPARED
        {
            self.ids.clear();
            self.schema_version = schema_version;
        }
        self.ids.insert(id);
    }

    /// Forgets every check (the session's role changed).
    pub(crate) fn clear(&mut self) {
        self.ids.clear();
    }
}
