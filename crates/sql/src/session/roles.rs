//! Who the session runs as and what it may do: the principal, the
//! privilege check of every statement before it is routed, and role and
//! privilege statements (`roles.rs` holds what they need of the catalog).

use aqueduct_expr::SqlError;
use aqueduct_tables::{Catalog, Privilege, TableId};
use sqlparser::ast::Statement;

use crate::roles::{
    is_role_statement, must_be_owner, needs_of, owner_is_superuser, permission_denied,
    query_relations, Acting, Needs, Principal, Relation, MAX_VIEW_DEPTH,
};
use aqueduct_plan::bind;
use aqueduct_plan::parse::parse;
use aqueduct_plan::plan::Outcome;

use super::state::Session;

impl Session {
    /// The role this session runs as.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Makes this session run as `principal` (front ends call it once the
    /// client is known): `current_user` reports it, `SHOW is_superuser`
    /// reflects it, and every statement is checked against its privileges.
    pub fn set_principal(&mut self, principal: Principal) {
        let superuser = principal.is_superuser(&self.engine.database().read());
        self.settings.insert(
            "is_superuser".into(),
            if superuser { "on" } else { "off" }.into(),
        );
        self.settings
            .insert("session_authorization".into(), principal.name.clone());
        self.principal = principal;
        self.authorized.clear();
    }

    /// [`Session::authorize`] for a prepared statement's execution: outside
    /// a transaction block (whose catalog may hold its own schema changes)
    /// a statement that passed against the same catalog version and role
    /// is not checked again.
    pub(crate) fn authorize_prepared(&mut self, id: u64, st: &Statement) -> Result<(), SqlError> {
        if self.txn.is_some() {
            return self.authorize(st);
        }
        // Read before the check: a change committed while it runs moves
        // the version past the one noted, so the next execution checks
        // again.
        let version = self.engine.database().schema_version_now();
        if self.authorized.holds(id, version) {
            return Ok(());
        }
        self.authorize(st)?;
        self.authorized.note(id, version);
        Ok(())
    }

    /// Whether prepared statement `id` passed its check at the catalog's
    /// schema version now, outside a transaction block: it may run
    /// without being checked again.
    pub(crate) fn authorized_already(&self, id: u64) -> bool {
        self.txn.is_none()
            && self
                .authorized
                .holds(id, self.engine.database().schema_version_now())
    }

    /// Refuses what the session's role may not do with `st` (SQLSTATE
    /// 42501, naming the object).
    /// Also refuses, for every role, what no statement may do with an
    /// ephemeral table (SQLSTATE 0A000: reading, updating, deleting).
    pub(crate) fn authorize(&mut self, st: &Statement) -> Result<(), SqlError> {
        aqueduct_plan::ephemeral::refuse_unsupported(
            &self.engine.database().read_in(self.txn.as_ref()),
            st,
        )?;
        if self.principal.bootstrap {
            return Ok(());
        }
        let mut needs = Needs::default();
        needs_of(st, &mut needs)?;
        self.authorize_needs(needs)
    }

    /// Refuses a read of `relation` (a table or view) the session's role
    /// may not make, as a `SELECT` of it would be (front ends serving rows
    /// without SQL: release change sets, time maps).
    pub fn authorize_select(&mut self, relation: &str) -> Result<(), SqlError> {
        if self.principal.bootstrap {
            return Ok(());
        }
        let mut needs = Needs::default();
        needs.add(relation.to_string(), Privilege::Select);
        self.authorize_needs(needs)
    }

    pub(crate) fn authorize_needs(&mut self, needs: Needs) -> Result<(), SqlError> {
        if needs.list.is_empty() && needs.owned.is_empty() && needs.owned_indexes.is_empty() {
            return Ok(());
        }
        let engine = self.engine.clone();
        let catalog = engine.database().read();
        if self.principal.is_superuser(&catalog) {
            return Ok(());
        }
        let role = self.principal.name.clone();
        for name in &needs.owned {
            if let Some(rel) = Relation::find(&catalog, name) {
                if !catalog.is_owner(&role, rel.id()) {
                    return Err(must_be_owner(rel.kind(), name));
                }
            }
        }
        for index in &needs.owned_indexes {
            if let Some(t) = catalog.index_owner(index) {
                if !catalog.is_owner(&role, t.schema.id) {
                    return Err(must_be_owner("index", index));
                }
            }
        }
        for (name, privilege) in &needs.list {
            // Names that are neither (CTEs, catalog views, missing
            // relations) are the binder's to resolve or refuse.
            let Some(rel) = Relation::find(&catalog, name) else {
                continue;
            };
            if !catalog.has_privilege(&role, rel.id(), *privilege) {
                return Err(permission_denied(rel.kind(), name, *privilege, &role));
            }
            if let Relation::View(id) = rel {
                self.check_view_owner(&catalog, id, 0)?;
            }
        }
        Ok(())
    }

    /// A view reads its relations with its owner's rights: the owner must
    /// (still) be able to read each of them, through views all the way down.
    pub(crate) fn check_view_owner(
        &mut self,
        catalog: &Catalog,
        view: TableId,
        depth: usize,
    ) -> Result<(), SqlError> {
        if depth > MAX_VIEW_DEPTH {
            return Err(SqlError::new(
                "54001",
                format!("views nested more than {MAX_VIEW_DEPTH} deep"),
            ));
        }
        let owner = catalog.owner(view);
        if owner_is_superuser(catalog, owner) {
            return Ok(());
        }
        let owner = owner.expect("checked above").to_string();
        for name in self.view_relations(catalog, view) {
            let Some(rel) = Relation::find(catalog, &name) else {
                continue;
            };
            if !catalog.has_privilege(&owner, rel.id(), Privilege::Select) {
                let view_name = catalog
                    .views
                    .get(&view)
                    .map(|(n, _)| n.as_str())
                    .unwrap_or("?");
                return Err(SqlError::new(
                    "42501",
                    format!("permission denied for {} {name}", rel.kind()),
                )
                .with_detail(format!(
                    "view {view_name} reads {name} with the rights of its owner \"{owner}\", who lacks SELECT on it"
                ))
                .with_hint(format!("GRANT SELECT ON {name} TO {owner}")));
            }
            if let Relation::View(inner) = rel {
                self.check_view_owner(catalog, inner, depth + 1)?;
            }
        }
        Ok(())
    }

    /// The relations a view's definition names (kept per view id: a
    /// view's definition never changes and ids are never reused).
    pub(crate) fn view_relations(&mut self, catalog: &Catalog, view: TableId) -> Vec<String> {
        if let Some(r) = self.view_relations_cache.get(&view) {
            return r.clone();
        }
        let names = catalog
            .views
            .get(&view)
            .and_then(|(_, sql)| parse(sql).ok())
            .map(|sts| {
                sts.iter()
                    .flat_map(|st| match st {
                        // What the view reads, not its own name.
                        Statement::CreateView(v) => query_relations(&v.query),
                        other => bind::relations(other),
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        self.view_relations_cache.insert(view, names.clone());
        names
    }

    /// Refuses a statement only superusers may run.
    pub(crate) fn require_superuser(&self, what: &str) -> Result<(), SqlError> {
        if self.principal.is_superuser(&self.engine.database().read()) {
            return Ok(());
        }
        Err(
            SqlError::new("42501", format!("permission denied to {what}"))
                .with_hint(format!("only a superuser may {what}")),
        )
    }

    /// Runs a role or privilege statement; `None` for any other.
    pub(crate) fn run_role_statement(
        &mut self,
        st: &Statement,
    ) -> Option<Result<Outcome, SqlError>> {
        if !is_role_statement(st) {
            return None;
        }
        if self.txn.is_some() {
            return Some(Err(SqlError::new(
                "25001",
                "role and privilege changes inside a transaction block are not supported",
            )
            .with_hint("run them outside BEGIN ... COMMIT")));
        }
        Some(self.role_statement(st))
    }

    pub(crate) fn role_statement(&mut self, st: &Statement) -> Result<Outcome, SqlError> {
        let me = self.principal.clone();
        let bootstrap = self.engine.bootstrap_users.read().clone();
        let engine = self.engine.clone();
        let db = engine.database();
        let (tag, lsn) = db.run_exclusive(|catalog, txn| {
            let acting = Acting {
                me: &me,
                catalog,
                bootstrap: &bootstrap,
            };
            match st {
                Statement::CreateRole(c) => acting.create_role(c, txn),
                Statement::AlterRole { name, operation } => acting.alter_role(name, operation, txn),
                Statement::Drop {
                    object_type,
                    if_exists,
                    names,
                    ..
                } => acting.drop_role(*object_type, *if_exists, names, txn),
                Statement::Grant(g) => {
                    acting.grant(&g.privileges, g.objects.as_ref(), &g.grantees, true, txn)
                }
                Statement::AlterTable(a) => acting.set_owner(&a.name, &a.operations, txn),
                Statement::Revoke(r) => {
                    acting.grant(&r.privileges, r.objects.as_ref(), &r.grantees, false, txn)
                }
                _ => Err(SqlError::unsupported(st.to_string())),
            }
        })?;
        if let Some(lsn) = lsn {
            self.set_last_lsn(lsn);
        }
        // A change to this session's own role shows at once.
        if !me.bootstrap {
            let superuser = me.is_superuser(&db.read());
            self.settings.insert(
                "is_superuser".into(),
                if superuser { "on" } else { "off" }.into(),
            );
        }
        Ok(Outcome::Command { tag: tag.into() })
    }
}
