//! The functions and casts tools call on the system catalog:
//! `pg_get_indexdef`, `pg_get_constraintdef`, `pg_get_viewdef`,
//! `pg_get_expr`, `pg_get_userbyid`, `format_type`, the visibility and
//! privilege tests, `current_schemas`, `current_setting`, and the casts
//! to `regclass`, `regtype`, `regnamespace`, `regrole` and `regproc`.
//! Each is bound to a constant or to a lookup in a table made from the
//! catalog the statement is bound against (`pg_catalog.rs`), so its
//! answer is the catalog's.

use std::collections::HashMap;
use std::sync::Arc;

use aqueduct_expr::{Expr, Func, Lookup, LookupMiss, SqlError};
use aqueduct_values::{DataType, Value};
use sqlparser::ast;

use crate::bind::{Binder, Scope};
use crate::pg_catalog::{self, CatalogLookups};
use crate::plan::RegType;

/// A name as `'public.t'::regclass` writes it: schema and quotes gone.
fn unqualified(name: &str) -> String {
    let last = name
        .trim()
        .rsplit_once('.')
        .map_or(name.trim(), |(_, n)| n)
        .to_string();
    match last.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(q) => q.replace("\"\"", "\""),
        None => last.to_lowercase(),
    }
}

/// `Ok` when `ok` (the call's argument count fits), else PostgreSQL's
/// 42883 for a function with that many arguments.
pub(crate) fn arity_check(name: &str, given: usize, ok: bool) -> Result<(), SqlError> {
    if ok {
        return Ok(());
    }
    Err(SqlError::new(
        "42883",
        format!("function {name} with {given} arguments does not exist"),
    )
    .with_hint("No function matches the given name and argument types."))
}

fn always(v: bool) -> Expr {
    Expr::Literal(Value::Bool(v))
}

impl Binder<'_> {
    /// `x::regclass` (and the other reg types): a constant name becomes
    /// the object's id now (42P01 and its kin when there is none); an id
    /// becomes the object's name. Where the context wants text (the
    /// argument of `nextval`), the name stays the name.
    pub(crate) fn reg_cast(
        &mut self,
        reg: RegType,
        inner: &ast::Expr,
        scope: &Scope,
        expected: Option<&DataType>,
    ) -> Result<Expr, SqlError> {
        if reg == RegType::Proc {
            // A function's name as `regproc` prints it: every function is
            // in pg_catalog, always on the search path, so unqualified
            // (`'pg_catalog.array_in'::regproc = typinput`).
            if let ast::Expr::Value(v) = inner {
                if let ast::Value::SingleQuotedString(name) = &v.value {
                    return Ok(Expr::Literal(Value::Text(unqualified(name))));
                }
            }
            return self.expr(inner, scope, Some(&DataType::Text));
        }
        if expected.is_some_and(DataType::is_textual) {
            return self.expr(inner, scope, Some(&DataType::Text));
        }
        let bound = self.expr(inner, scope, None)?;
        let constant = match &bound {
            Expr::Literal(Value::Text(t)) => Some(t.clone()),
            Expr::Cast(e, _) => match e.as_ref() {
                Expr::Literal(Value::Text(t)) => Some(t.clone()),
                _ => None,
            },
            _ => None,
        };
        let lookups = self.catalog_lookups();
        if let Some(name) = constant {
            let key = unqualified(&name);
            if let Ok(n) = key.parse::<u32>() {
                return Ok(Expr::Cast(
                    Box::new(Expr::Literal(Value::Int(i64::from(n)))),
                    DataType::Oid,
                ));
            }
            let found = match reg {
                RegType::Class => lookups.relation_oid.get(&key),
                RegType::Type => lookups.type_oid.get(&key).or_else(|| {
                    aqueduct_values::DataType::from_sql(&key, &[])
                        .and_then(|t| lookups.type_oid.get(&t.to_string()))
                }),
                RegType::Namespace => lookups.namespace_oid.get(&key),
                RegType::Role => lookups.role_oid.get(&key),
                RegType::Proc => None,
            };
            return match found {
                Some(&oid) => Ok(Expr::Cast(
                    Box::new(Expr::Literal(Value::Int(i64::from(oid)))),
                    DataType::Oid,
                )),
                None => Err(SqlError::new(
                    reg.missing_code(),
                    format!("{} \"{name}\" does not exist", reg.word()),
                )),
            };
        }
        // Text known only when the statement runs (`$1::regclass`): the
        // object's id by its name, NULL when there is none.
        let textual = match self.known_type(&bound, scope) {
            None => true,
            Some(t) => t.is_textual(),
        };
        if textual && matches!(reg, RegType::Class | RegType::Type) {
            let name = self.expr(inner, scope, Some(&DataType::Text))?;
            let table = if reg == RegType::Class {
                lookups.relation_by_name.clone()
            } else {
                lookups.type_by_name.clone()
            };
            return Ok(Expr::Lookup(table, vec![name]));
        }
        let table = match reg {
            RegType::Class => lookups.relation_name.clone(),
            RegType::Type => lookups.type_name.clone(),
            RegType::Namespace => lookups.namespace_name.clone(),
            RegType::Role => lookups.user_by_id.clone(),
            RegType::Proc => unreachable!("regproc stays text"),
        };
        Ok(Expr::Lookup(
            table,
            vec![Expr::Cast(Box::new(bound), DataType::Oid)],
        ))
    }

    /// A function of the catalog, bound; `None` when `name` is not one.
    pub(crate) fn catalog_function(
        &mut self,
        name: &str,
        args: &[ast::Expr],
        scope: &Scope,
    ) -> Result<Option<Expr>, SqlError> {
        let oid_arg = |b: &mut Self, i: usize| -> Result<Expr, SqlError> {
            let e = b.expr(&args[i], scope, Some(&DataType::Oid))?;
            Ok(Expr::Cast(Box::new(e), DataType::Oid))
        };
        let int_arg = |b: &mut Self, i: usize| -> Result<Expr, SqlError> {
            let e = b.expr(&args[i], scope, Some(&DataType::Int8))?;
            Ok(Expr::Cast(Box::new(e), DataType::Int8))
        };
        let arity = |ok: bool| arity_check(name, args.len(), ok);
        Ok(Some(match name {
            "pg_get_indexdef" => {
                arity(matches!(args.len(), 1 | 3))?;
                let l = self.catalog_lookups();
                if args.len() == 1 {
                    Expr::Lookup(l.index_def.clone(), vec![oid_arg(self, 0)?])
                } else {
                    Expr::Lookup(
                        l.index_column.clone(),
                        vec![oid_arg(self, 0)?, int_arg(self, 1)?],
                    )
                }
            }
            "pg_get_constraintdef" => {
                arity(matches!(args.len(), 1 | 2))?;
                let l = self.catalog_lookups();
                let pretty = match args.get(1) {
                    Some(p) => self.expr(p, scope, Some(&DataType::Bool))?,
                    None => Expr::Literal(Value::Bool(false)),
                };
                Expr::Lookup(l.constraint_def.clone(), vec![oid_arg(self, 0)?, pretty])
            }
            "pg_get_viewdef" => {
                arity(matches!(args.len(), 1 | 2))?;
                let l = self.catalog_lookups();
                let first = self.expr(&args[0], scope, None)?;
                let view = match first {
                    Expr::Literal(Value::Text(t)) => {
                        let key = unqualified(&t);
                        let oid = l.relation_oid.get(&key).ok_or_else(|| {
                            SqlError::new("42P01", format!("relation \"{t}\" does not exist"))
                        })?;
                        Expr::Literal(Value::Int(i64::from(*oid)))
                    }
                    other => Expr::Cast(Box::new(other), DataType::Oid),
                };
                Expr::Lookup(l.view_def.clone(), vec![view])
            }
            "pg_get_expr" => {
                arity(matches!(args.len(), 2 | 3))?;
                // The catalog keeps expressions as SQL already.
                let e = self.expr(&args[0], scope, Some(&DataType::Text))?;
                Expr::Cast(Box::new(e), DataType::Text)
            }
            // No table is partitioned: a relation is its own only
            // ancestor (the one row the set-returning form makes).
            "pg_partition_ancestors" | "pg_partition_root" => {
                arity(args.len() == 1)?;
                oid_arg(self, 0)?
            }
            // The object's id by its name, NULL when there is none.
            "to_regclass" | "to_regtype" => {
                arity(args.len() == 1)?;
                let l = self.catalog_lookups();
                let object = self.expr(&args[0], scope, Some(&DataType::Text))?;
                let table = if name == "to_regclass" {
                    l.relation_by_name.clone()
                } else {
                    l.type_by_name.clone()
                };
                Expr::Lookup(table, vec![object])
            }
            "pg_relation_is_publishable" => {
                arity(args.len() == 1)?;
                let l = self.catalog_lookups();
                Expr::Lookup(l.publishable.clone(), vec![oid_arg(self, 0)?])
            }
            "pg_get_userbyid" => {
                arity(args.len() == 1)?;
                let l = self.catalog_lookups();
                Expr::Lookup(l.user_by_id.clone(), vec![oid_arg(self, 0)?])
            }
            "format_type" => {
                arity(args.len() == 2)?;
                let l = self.catalog_lookups();
                let base = Expr::Lookup(l.type_name.clone(), vec![oid_arg(self, 0)?]);
                Expr::Call(Func::FormatTypmod, vec![base, int_arg(self, 1)?])
            }
            "obj_description" | "col_description" => {
                // obj_description(oid [, catalog]) and col_description(table
                // oid, column): pg_description's rows.
                let column = name == "col_description";
                arity(matches!(args.len(), 1 | 2))?;
                let mut key = vec![oid_arg(self, 0)?];
                if column {
                    key.push(int_arg(self, 1)?);
                } else if let Some(catalog) = args.get(1) {
                    key.push(self.expr(catalog, scope, Some(&DataType::Text))?);
                }
                let rows = pg_catalog::descriptions(self.catalog())
                    .into_iter()
                    .filter(|(_, class, sub, _)| {
                        if column {
                            *class == 1259 && *sub > 0
                        } else {
                            *sub == 0
                        }
                    })
                    .map(|(o, class, sub, text)| {
                        let mut k = vec![Value::Int(i64::from(o))];
                        match (column, key.len()) {
                            (true, _) => k.push(Value::Int(sub)),
                            (false, 2) => k.push(Value::Text(
                                pg_catalog::relation_name_of(class)
                                    .unwrap_or_default()
                                    .to_string(),
                            )),
                            _ => {}
                        }
                        (k, Value::Text(text))
                    })
                    .collect();
                Expr::Lookup(
                    Arc::new(Lookup {
                        name: if column {
                            "col_description"
                        } else {
                            "obj_description"
                        },
                        rows,
                        otherwise: LookupMiss::Null,
                        ty: DataType::Text,
                    }),
                    key,
                )
            }
            "shobj_description"
            | "pg_get_statisticsobjdef"
            | "pg_get_statisticsobjdef_columns"
            | "pg_get_triggerdef"
            | "pg_get_ruledef"
            | "pg_get_partkeydef"
            | "pg_get_partition_constraintdef"
            | "pg_get_function_result"
            | "pg_get_function_arguments"
            | "pg_get_function_identity_arguments" => {
                // No shared object (database, role) has a comment, and there
                // are no statistics objects, triggers, rules, partitions or
                // functions of the user's (their relations are empty): no
                // object these are asked of exists.
                for a in args {
                    self.expr(a, scope, None)?;
                }
                Expr::Cast(Box::new(Expr::Literal(Value::Null)), DataType::Text)
            }
            "pg_table_is_visible"
            | "pg_type_is_visible"
            | "pg_function_is_visible"
            | "pg_collation_is_visible"
            | "pg_operator_is_visible"
            | "pg_opclass_is_visible"
            | "pg_conversion_is_visible"
            | "pg_statistics_obj_is_visible" => {
                // Every object is in `public` or `pg_catalog`, both on the
                // search path.
                arity(args.len() == 1)?;
                oid_arg(self, 0)?;
                always(true)
            }
            // Access privileges are not kept as ACLs: an object's ACL and
            // its default are NULL (pg_dump then dumps no GRANT; roles'
            // grants are statements of their own here).
            "acldefault" => {
                for a in args {
                    self.expr(a, scope, None)?;
                }
                Expr::Cast(
                    Box::new(Expr::Literal(Value::Null)),
                    DataType::Array(Box::new(DataType::Text)),
                )
            }
            "pg_is_in_recovery" => {
                arity(args.is_empty())?;
                always(false)
            }
            "current_schemas" => {
                arity(args.len() == 1)?;
                let implicit = self.expr(&args[0], scope, Some(&DataType::Bool))?;
                let with = |names: &[&str]| {
                    Expr::Literal(Value::Array(
                        names.iter().map(|n| Value::Text(n.to_string())).collect(),
                    ))
                };
                Expr::Cast(
                    Box::new(Expr::Case {
                        operand: None,
                        whens: vec![(implicit, with(&["pg_catalog", "public"]))],
                        otherwise: Some(Box::new(with(&["public"]))),
                    }),
                    DataType::Array(Box::new(DataType::Name)),
                )
            }
            "pg_encoding_to_char" => {
                arity(args.len() == 1)?;
                let e = int_arg(self, 0)?;
                let rows = HashMap::from([(vec![Value::Int(6)], Value::Text("UTF8".into()))]);
                Expr::Lookup(
                    Arc::new(Lookup {
                        name: "pg_encoding_to_char",
                        rows,
                        otherwise: LookupMiss::Text(""),
                        ty: DataType::Text,
                    }),
                    vec![e],
                )
            }
            "current_setting" => {
                arity(matches!(args.len(), 1 | 2))?;
                let e = self.expr(&args[0], scope, Some(&DataType::Text))?;
                let missing_ok = match args.get(1) {
                    Some(a) => matches!(
                        self.expr(a, scope, Some(&DataType::Bool))?,
                        Expr::Literal(Value::Bool(true))
                    ),
                    None => false,
                };
                let settings = self.session_settings();
                if let Expr::Literal(Value::Text(n)) = &e {
                    let key = n.to_lowercase();
                    return match settings.get(&key) {
                        Some(v) => Ok(Some(Expr::Literal(Value::Text(v.clone())))),
                        None if missing_ok => Ok(Some(Expr::Cast(
                            Box::new(Expr::Literal(Value::Null)),
                            DataType::Text,
                        ))),
                        None => Err(SqlError::new(
                            "42704",
                            format!("unrecognized configuration parameter \"{n}\""),
                        )),
                    };
                }
                let rows = settings
                    .iter()
                    .map(|(k, v)| (vec![Value::Text(k.clone())], Value::Text(v.clone())))
                    .collect();
                Expr::Lookup(
                    Arc::new(Lookup {
                        name: "current_setting",
                        rows,
                        otherwise: LookupMiss::Null,
                        ty: DataType::Text,
                    }),
                    vec![e],
                )
            }
            // has_table_privilege([user,] table, privilege): the catalog's
            // grants and owners, as the statement would be checked.
            "has_table_privilege" | "has_any_column_privilege" => {
                arity(matches!(args.len(), 2 | 3))?;
                let (user, rest) =
                    match args {
                        [user, rest @ ..] if args.len() == 3 => {
                            match self.expr(user, scope, Some(&DataType::Text))? {
                                Expr::Literal(Value::Text(u)) => (u, rest),
                                _ => return Err(SqlError::unsupported(format!(
                                    "{name}() for a user that is not a constant name"
                                ))
                                .with_hint(
                                    "name the user: has_table_privilege('alice', 't', 'SELECT')",
                                )),
                            }
                        }
                        _ => (
                            self.session_settings()
                                .get("session_authorization")
                                .cloned()
                                .unwrap_or_else(|| "aqueduct".into()),
                            args,
                        ),
                    };
                let table = self.expr(&rest[0], scope, None)?;
                let table = if self
                    .known_type(&table, scope)
                    .is_some_and(|t| t.is_textual())
                {
                    Expr::Lookup(self.catalog_lookups().relation_by_name.clone(), vec![table])
                } else {
                    Expr::Cast(Box::new(table), DataType::Oid)
                };
                let privilege = self.expr(&rest[1], scope, Some(&DataType::Text))?;
                let privilege = Expr::Call(Func::Upper, vec![privilege]);
                Expr::Lookup(
                    Arc::new(table_privileges(self.catalog(), &user)),
                    vec![table, privilege],
                )
            }
            _ if privilege_test(name) => {
                // Privileges are checked when a statement runs; these
                // answer what a tool may try (see docs/catalog.md).
                for a in args {
                    self.expr(a, scope, None)?;
                }
                always(true)
            }
            _ => return Ok(None),
        }))
    }

    /// The catalog functions' tables over this binder's catalog, made on
    /// first use.
    pub(crate) fn catalog_lookups(&mut self) -> Arc<CatalogLookups> {
        if let Some(l) = &self.lookups {
            return l.clone();
        }
        let ctx = pg_catalog::CatalogContext {
            user: self
                .session_settings()
                .get("session_authorization")
                .cloned()
                .unwrap_or_else(|| "aqueduct".into()),
            ..Default::default()
        };
        let l = Arc::new(pg_catalog::lookups(self.catalog(), &ctx));
        self.lookups = Some(l.clone());
        l
    }
}

/// What `user` may do to each table and view: `(oid, PRIVILEGE)` to
/// true or false. A superuser (or the configured superuser, who is no
/// role of the catalog) may do all; the owner all; others what grants to
/// them or to PUBLIC give (TRUNCATE, REFERENCES and TRIGGER: the owner
/// only, as nothing grants them here).
fn table_privileges(catalog: &aqueduct_tables::Catalog, user: &str) -> Lookup {
    use aqueduct_tables::Privilege;
    let superuser = catalog.role(user).is_none_or(|r| r.superuser);
    let objects = catalog
        .tables
        .keys()
        .copied()
        .chain(catalog.views.keys().copied());
    let mut rows = HashMap::new();
    for object in objects {
        let owner = superuser || catalog.is_owner(user, object);
        for (word, privilege) in [
            ("SELECT", Some(Privilege::Select)),
            ("INSERT", Some(Privilege::Insert)),
            ("UPDATE", Some(Privilege::Update)),
            ("DELETE", Some(Privilege::Delete)),
            ("TRUNCATE", None),
            ("REFERENCES", None),
            ("TRIGGER", None),
        ] {
            let may = owner || privilege.is_some_and(|p| catalog.has_privilege(user, object, p));
            rows.insert(
                vec![
                    Value::Int(i64::from(pg_catalog::object_oid(object))),
                    Value::Text(word.into()),
                ],
                Value::Bool(may),
            );
        }
    }
    // The catalog's own relations: readable by all, as PostgreSQL's are.
    for oid in pg_catalog::system_relation_oids() {
        for word in [
            "SELECT",
            "INSERT",
            "UPDATE",
            "DELETE",
            "TRUNCATE",
            "REFERENCES",
            "TRIGGER",
        ] {
            rows.insert(
                vec![Value::Int(i64::from(oid)), Value::Text(word.into())],
                Value::Bool(word == "SELECT" || superuser),
            );
        }
    }
    Lookup {
        name: "has_table_privilege",
        rows,
        // No such relation, or a privilege named otherwise.
        otherwise: LookupMiss::Null,
        ty: DataType::Bool,
    }
}

/// `has_table_privilege` and its kin.
fn privilege_test(name: &str) -> bool {
    name.starts_with("has_") && name.ends_with("_privilege")
}
