//! `ALTER TABLE`: the new definition of the table is worked out operation
//! by operation, checked against every row as the transaction sees it,
//! and written as one `AlterTable` schema record (with the rows whose
//! values are computed — a volatile default, `TYPE ... USING` — as row
//! writes after it). Views over the table are made anew by the dataflow
//! when the change commits; a change a view cannot survive (its column
//! dropped, renamed or retyped) is refused unless `CASCADE` drops it.

use std::collections::HashSet;

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_tables::{
    Attribute, Catalog, CheckDef, ColumnDef, ColumnSource, IndexDef, Key, PublicationDef, Row,
    SchemaChange, SequenceDef, Table, TableId, TableSchema,
};
use aqueduct_values::Value;
use sqlparser::ast;

use crate::bind::{self, ident, object_name, Binder, ConstraintNames, Scope};
use crate::constraints;
use crate::effects::Fx;
use crate::plan::{AlterTablePlan, Outcome};
use crate::rows::{conform, read_rows};

/// How a column of the new table gets each existing row's value besides
/// its source: computed from the old row, or the next value of a new
/// sequence (`ADD COLUMN id serial`).
#[derive(Clone)]
enum Fill {
    Expr(Expr),
    Sequence(usize),
}

/// The table as the operations so far leave it.
struct Work<'c> {
    old: &'c Table,
    schema: TableSchema,
    sources: Vec<ColumnSource>,
    fills: Vec<Option<Fill>>,
    /// Sequences to create (ids given at the end), with their owning
    /// column's name.
    sequences: Vec<(SequenceDef, String)>,
    names: ConstraintNames,
    /// Constraints added: checked against every row.
    new_checks: Vec<String>,
    new_fks: Vec<String>,
    new_uniques: Vec<String>,
    /// Views dropped by CASCADE, and foreign keys of other tables dropped.
    drop_views: Vec<TableId>,
    dropped_refs: HashSet<(TableId, String)>,
    /// Sequences owned by dropped columns.
    drop_sequences: Vec<TableId>,
    /// Views whose queries name the table by a new name.
    rewrite_views: Vec<(TableId, String)>,
    /// `ADD PRIMARY KEY`: its name; the rows are keyed anew.
    new_primary_key: Option<String>,
    /// Publications of the table as the operations leave them (a renamed
    /// column renamed in filters and computed attributes, an object
    /// dropped by CASCADE); each one changed is written after the table.
    publications: Vec<PublicationDef>,
}

fn tag() -> Outcome {
    Outcome::Command {
        tag: "ALTER TABLE".into(),
    }
}

pub(crate) fn alter_table(fx: &mut Fx<'_>, a: &AlterTablePlan) -> Result<Outcome, SqlError> {
    let catalog = fx.catalog;
    let Some(t) = catalog.table(&a.name) else {
        if a.if_exists {
            return Ok(tag());
        }
        return Err(SqlError::undefined_table(&a.name));
    };
    fx.txn.get_mut().note_schema_read(catalog);
    let mut names = ConstraintNames::default();
    names
        .taken
        .extend(t.schema.indexes.iter().map(|i| i.name.clone()));
    names
        .taken
        .extend(t.schema.checks.iter().map(|c| c.name.clone()));
    names
        .taken
        .extend(t.schema.foreign_keys.iter().map(|f| f.name.clone()));
    let mut w = Work {
        old: t,
        schema: (*t.schema).clone(),
        sources: (0..t.schema.columns.len()).map(ColumnSource::Old).collect(),
        fills: vec![None; t.schema.columns.len()],
        sequences: Vec::new(),
        names,
        new_checks: Vec::new(),
        new_fks: Vec::new(),
        new_uniques: Vec::new(),
        drop_views: Vec::new(),
        dropped_refs: HashSet::new(),
        drop_sequences: Vec::new(),
        rewrite_views: Vec::new(),
        new_primary_key: None,
        publications: catalog
            .publications
            .values()
            .filter(|p| p.object(t.schema.id).is_some())
            .cloned()
            .collect(),
    };
    let mut binder = Binder::new(catalog);
    binder.set_time(a.time);
    for op in &a.ops {
        w.apply(catalog, &mut binder, op)?;
    }
    w.finish(fx, &mut binder)
}

/// A view's definition names `column` somewhere (as a plain or qualified
/// identifier), or selects `*` from something: it may read it.
fn view_uses(sql: &str, column: &str) -> bool {
    use std::ops::ControlFlow;
    let Ok(statements) = crate::parse::parse(sql) else {
        return true;
    };
    let mut found = false;
    let _ = ast::visit_expressions(&statements, |e| {
        found |= match e {
            ast::Expr::Identifier(i) => ident(i) == column,
            ast::Expr::CompoundIdentifier(parts) => {
                parts.last().is_some_and(|i| ident(i) == column)
            }
            _ => false,
        };
        ControlFlow::<()>::Continue(())
    });
    /// Finds a `SELECT *` or `SELECT t.*` in any query of the statement.
    struct Wildcards(bool);
    impl ast::Visitor for Wildcards {
        type Break = ();
        fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<()> {
            if let ast::SetExpr::Select(s) = q.body.as_ref() {
                self.0 |= s.projection.iter().any(|i| {
                    matches!(
                        i,
                        ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..)
                    )
                });
            }
            ControlFlow::Continue(())
        }
    }
    let mut wildcards = Wildcards(false);
    for st in &statements {
        let _ = ast::Visit::visit(st, &mut wildcards);
    }
    found || wildcards.0
}

fn is_cascade(b: &Option<ast::DropBehavior>) -> bool {
    matches!(b, Some(ast::DropBehavior::Cascade))
}

impl Work<'_> {
    fn column(&self, name: &str) -> Result<usize, SqlError> {
        self.schema.column_index(name).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!(
                    "column \"{name}\" of relation \"{}\" does not exist",
                    self.schema.name
                ),
            )
        })
    }

    /// The views over the table that use `column`.
    fn views_using(&self, catalog: &Catalog, column: &str) -> Vec<(TableId, String, String)> {
        bind::dependent_views(catalog, std::slice::from_ref(&self.old.schema.name))
            .into_iter()
            .filter(|(_, _, sql)| {
                bind::mentions(sql, &self.old.schema.name) && view_uses(sql, column)
            })
            .collect()
    }

    /// Refuses a change to the column at `p` (now) named `column` that a
    /// publication's column list, row filter or computed attribute uses
    /// (`docs/publications.md`, section 6), or with `cascade` (a drop)
    /// takes the table out of those publications.
    fn publications_block(
        &mut self,
        p: usize,
        column: &str,
        cascade: bool,
        what: &str,
    ) -> Result<(), SqlError> {
        let table = self.old.schema.id;
        let old = match self.sources[p] {
            ColumnSource::Old(old) => Some(old),
            ColumnSource::Value(_) => None,
        };
        let uses = |o: &aqueduct_tables::PublishedObject| {
            let named =
                |sql: &str| crate::parse::parse_expr(sql).map_or(true, |e| expr_uses(&e, column));
            o.filter.as_deref().is_some_and(named)
                || o.attributes.iter().any(|a| match a {
                    Attribute::Column { column: c, .. } => Some(*c) == old,
                    Attribute::Computed { sql, .. } => named(sql),
                })
        };
        for publication in &mut self.publications {
            if !publication
                .objects
                .iter()
                .any(|o| o.relation == table && uses(o))
            {
                continue;
            }
            if what == "drop" && cascade {
                publication.objects.retain(|o| o.relation != table);
                continue;
            }
            let message = format!(
                "cannot {what} column {column} of table {} because publication {} depends on it",
                self.schema.name, publication.name
            );
            return Err(if what == "drop" {
                SqlError::new("2BP01", message).with_hint(format!(
                    "take the column out of the publication (ALTER PUBLICATION {} SET TABLE ...), \
                     or use DROP COLUMN ... CASCADE to take the table out of it",
                    publication.name
                ))
            } else {
                SqlError::new("0A000", message).with_hint(
                    "add a column of the new type and publish it instead: subscribers' copies \
                     keep the type they were given",
                )
            });
        }
        Ok(())
    }

    /// Refuses a change to `column` that views use, or with `cascade`
    /// drops them (and the views over them).
    fn views_block(
        &mut self,
        catalog: &Catalog,
        column: &str,
        cascade: bool,
        what: &str,
    ) -> Result<(), SqlError> {
        let using = self.views_using(catalog, column);
        let Some((_, view, _)) = using.first() else {
            return Ok(());
        };
        if !cascade {
            return Err(SqlError::new(
                if what == "drop" { "2BP01" } else { "0A000" },
                format!(
                    "cannot {what} column {column} of table {} because view {view} depends on it",
                    self.schema.name
                ),
            )
            .with_hint(if what == "drop" {
                "drop the view first, or use DROP COLUMN ... CASCADE".to_string()
            } else {
                format!("drop the view {view}, change the column, and create the view again")
            }));
        }
        let names: Vec<String> = using.iter().map(|(_, n, _)| n.clone()).collect();
        let mut all = using.clone();
        all.extend(bind::dependent_views(catalog, &names));
        for (id, _, _) in all {
            if !self.drop_views.contains(&id) {
                self.drop_views.push(id);
            }
        }
        Ok(())
    }

    fn apply(
        &mut self,
        catalog: &Catalog,
        binder: &mut Binder<'_>,
        op: &ast::AlterTableOperation,
    ) -> Result<(), SqlError> {
        use ast::AlterTableOperation as Op;
        match op {
            Op::AddColumn {
                if_not_exists,
                column_def,
                ..
            } => self.add_column(catalog, binder, column_def, *if_not_exists),
            Op::DropColumn {
                column_names,
                if_exists,
                drop_behavior,
                ..
            } => {
                for c in column_names {
                    self.drop_column(catalog, &ident(c), *if_exists, is_cascade(drop_behavior))?;
                }
                Ok(())
            }
            Op::RenameColumn {
                old_column_name,
                new_column_name,
            } => {
                let (old, new) = (ident(old_column_name), ident(new_column_name));
                let p = self.column(&old)?;
                if self.schema.column_index(&new).is_some() {
                    return Err(SqlError::new(
                        "42701",
                        format!(
                            "column \"{new}\" of relation \"{}\" already exists",
                            self.schema.name
                        ),
                    ));
                }
                // The views that name it read the new name (keeping the
                // old one as their output column's name); a view too
                // involved to rewrite safely still refuses the rename.
                for (id, view, sql) in self.views_using(catalog, &old) {
                    let rewritten =
                        rename_column_in(&sql, catalog, &self.old.schema.name, &old, &new)
                            .ok_or_else(|| {
                                SqlError::new(
                                    "0A000",
                                    format!(
                                        "cannot rename column {old} of table {} because view {view} depends on it",
                                        self.schema.name
                                    ),
                                )
                                .with_hint(format!(
                                    "drop the view {view}, rename the column, and create the view again (a view with subqueries, CTEs or derived tables is not rewritten)"
                                ))
                            })?;
                    self.rewrite_views.push((id, rewritten));
                }
                for ck in &mut self.schema.checks {
                    ck.sql = rename_in(&ck.sql, &old, &new)?;
                }
                // Filters and computed attributes of publications name
                // it; a column attribute keeps its published name.
                let table = self.old.schema.id;
                for publication in &mut self.publications {
                    for o in publication
                        .objects
                        .iter_mut()
                        .filter(|o| o.relation == table)
                    {
                        if let Some(f) = &mut o.filter {
                            *f = rename_in(f, &old, &new)?;
                        }
                        for a in &mut o.attributes {
                            if let Attribute::Computed { sql, .. } = a {
                                *sql = rename_in(sql, &old, &new)?;
                            }
                        }
                    }
                }
                // Indexes on expressions and partial ones name it too.
                for i in &mut self.schema.indexes {
                    for e in &mut i.expressions {
                        *e = rename_in(e, &old, &new)?;
                    }
                    if let Some(p) = &mut i.predicate {
                        *p = rename_in(p, &old, &new)?;
                    }
                }
                self.schema.columns[p].name = new;
                Ok(())
            }
            Op::RenameTable { table_name } => {
                let new = match table_name {
                    ast::RenameTableNameKind::To(n) | ast::RenameTableNameKind::As(n) => {
                        object_name(n)?
                    }
                };
                if catalog.table(&new).is_some()
                    || catalog.view(&new).is_some()
                    || catalog.sequence(&new).is_some()
                {
                    return Err(SqlError::new(
                        "42P07",
                        format!("relation \"{new}\" already exists"),
                    ));
                }
                // The views that read the table read it by the new name,
                // under the old one as an alias (so what they qualify with
                // it still resolves), as PostgreSQL's views follow a
                // renamed table.
                let old = self.old.schema.name.clone();
                for (id, view, sql) in bind::dependent_views(catalog, std::slice::from_ref(&old)) {
                    if !bind::mentions(&sql, &old) {
                        continue;
                    }
                    let rewritten = rename_table_in(&sql, &old, &new).ok_or_else(|| {
                        SqlError::new(
                            "0A000",
                            format!(
                                "cannot rename table {old} because view {view} names another relation {old} too"
                            ),
                        )
                        .with_hint("drop the view, rename the table, and create the view again")
                    })?;
                    self.rewrite_views.push((id, rewritten));
                }
                self.schema.name = new;
                Ok(())
            }
            Op::AlterColumn { column_name, op } => {
                let name = ident(column_name);
                let p = self.column(&name)?;
                match op {
                    ast::AlterColumnOperation::SetNotNull => self.schema.columns[p].not_null = true,
                    ast::AlterColumnOperation::DropNotNull => {
                        if self.schema.primary_key.contains(&p) {
                            return Err(SqlError::new(
                                "42P16",
                                format!("column \"{name}\" is in a primary key"),
                            ));
                        }
                        if self.schema.columns[p].identity.is_some() {
                            return Err(SqlError::new(
                                "42P16",
                                format!(
                                    "column \"{name}\" of relation \"{}\" is an identity column",
                                    self.schema.name
                                ),
                            ));
                        }
                        self.schema.columns[p].not_null = false;
                    }
                    ast::AlterColumnOperation::SetDefault { value } => {
                        let mut def = self.schema.columns[p].clone();
                        binder.column_default(&mut def, value)?;
                        self.schema.columns[p] = def;
                    }
                    ast::AlterColumnOperation::DropDefault => {
                        let c = &mut self.schema.columns[p];
                        c.default = None;
                        c.default_expr = None;
                    }
                    ast::AlterColumnOperation::SetDataType {
                        data_type, using, ..
                    } => {
                        let ty = bind::sql_type(catalog, data_type)?;
                        self.views_block(catalog, &name, false, "alter type of")?;
                        self.publications_block(p, &name, false, "alter type of")?;
                        let ColumnSource::Old(from) = self.sources[p] else {
                            return Err(SqlError::unsupported(
                                "changing the type of a column added in the same ALTER TABLE",
                            ));
                        };
                        let scope = Scope::table(self.old, &self.old.schema.name);
                        let value = match using {
                            Some(e) => binder.expr(e, &scope, Some(&ty))?,
                            None => Expr::Column(from),
                        };
                        self.fills[p] = Some(Fill::Expr(Expr::Cast(Box::new(value), ty.clone())));
                        self.schema.columns[p].ty = ty;
                    }
                    ast::AlterColumnOperation::AddGenerated {
                        generated_as,
                        sequence_options,
                    } => {
                        let c = &self.schema.columns[p];
                        let table = &self.schema.name;
                        if !matches!(
                            c.ty,
                            aqueduct_values::DataType::Int2
                                | aqueduct_values::DataType::Int4
                                | aqueduct_values::DataType::Int8
                        ) {
                            return Err(SqlError::new(
                                "22023",
                                format!("identity column type must be smallint, integer, or bigint (column \"{name}\")"),
                            ));
                        }
                        if c.identity.is_some() {
                            return Err(SqlError::new(
                                "42611",
                                format!("column \"{name}\" of relation \"{table}\" is already an identity column"),
                            ));
                        }
                        if c.has_default() {
                            return Err(SqlError::new(
                                "42611",
                                format!("column \"{name}\" of relation \"{table}\" already has a default value"),
                            ));
                        }
                        if !c.not_null {
                            return Err(SqlError::new(
                                "55000",
                                format!("column \"{name}\" of relation \"{table}\" must be declared NOT NULL before identity can be added"),
                            ));
                        }
                        let seq_name = format!("{table}_{name}_seq");
                        if catalog.sequence(&seq_name).is_some()
                            || catalog.table(&seq_name).is_some()
                        {
                            return Err(SqlError::new(
                                "42P07",
                                format!("relation \"{seq_name}\" already exists"),
                            ));
                        }
                        let def = bind::sequence_def(
                            &seq_name,
                            &c.ty,
                            sequence_options.as_deref().unwrap_or(&[]),
                        )?;
                        self.sequences.push((def, name.clone()));
                        self.schema.columns[p].identity = Some(aqueduct_tables::Identity {
                            always: !matches!(generated_as, Some(ast::GeneratedAs::ByDefault)),
                            // Given its sequence's id when the change is written.
                            sequence: 0,
                        });
                    }
                }
                Ok(())
            }
            Op::AddConstraint { constraint, .. } => self.add_constraint(binder, constraint),
            Op::DropConstraint {
                if_exists,
                name,
                drop_behavior,
            } => self.drop_constraint(catalog, &ident(name), *if_exists, is_cascade(drop_behavior)),
            Op::RenameConstraint { old_name, new_name } => {
                let (old, new) = (ident(old_name), ident(new_name));
                let s = &mut self.schema;
                if let Some(c) = s.checks.iter_mut().find(|c| c.name == old) {
                    c.name = new;
                } else if let Some(f) = s.foreign_keys.iter_mut().find(|f| f.name == old) {
                    f.name = new;
                } else if let Some(i) = s.indexes.iter_mut().find(|i| i.name == old && i.unique) {
                    i.name = new;
                } else {
                    return Err(no_constraint(&old, &s.name));
                }
                Ok(())
            }
            other => Err(SqlError::unsupported(format!("ALTER TABLE ... {other}"))),
        }
    }

    fn add_column(
        &mut self,
        catalog: &Catalog,
        binder: &mut Binder<'_>,
        c: &ast::ColumnDef,
        if_not_exists: bool,
    ) -> Result<(), SqlError> {
        let name = ident(&c.name);
        if self.schema.column_index(&name).is_some() {
            if if_not_exists {
                return Ok(());
            }
            return Err(SqlError::new(
                "42701",
                format!(
                    "column \"{name}\" of relation \"{}\" already exists",
                    self.schema.name
                ),
            ));
        }
        let serial = bind::serial_type(&c.data_type);
        let ty = match &serial {
            Some(ty) => ty.clone(),
            None => bind::sql_type(catalog, &c.data_type)?,
        };
        let p = self.schema.columns.len();
        let mut def = ColumnDef::new(name.clone(), ty.clone());
        let mut fill = None;
        if serial.is_some() {
            let seq_name = format!("{}_{name}_seq", self.schema.name);
            if catalog.sequence(&seq_name).is_some() {
                return Err(SqlError::new(
                    "42P07",
                    format!("relation \"{seq_name}\" already exists"),
                ));
            }
            self.sequences
                .push((bind::sequence_def(&seq_name, &ty, &[])?, name.clone()));
            def.not_null = true;
            def.default_expr = Some(format!("nextval('{seq_name}'::regclass)"));
            fill = Some(Fill::Sequence(self.sequences.len() - 1));
        }
        let mut constraints = Vec::new();
        for opt in &c.options {
            match &opt.option {
                ast::ColumnOption::Null => {}
                ast::ColumnOption::NotNull => def.not_null = true,
                ast::ColumnOption::Default(e) => binder.column_default(&mut def, e)?,
                ast::ColumnOption::Unique(u) => {
                    constraints.push(ast::TableConstraint::Unique(ast::UniqueConstraint {
                        columns: vec![ast::IndexColumn {
                            column: ast::OrderByExpr {
                                expr: ast::Expr::Identifier(c.name.clone()),
                                options: Default::default(),
                                with_fill: None,
                            },
                            operator_class: None,
                        }],
                        ..u.clone()
                    }))
                }
                ast::ColumnOption::Check(ck) => {
                    constraints.push(ast::TableConstraint::Check(ck.clone()))
                }
                ast::ColumnOption::ForeignKey(fk) => constraints.push(
                    ast::TableConstraint::ForeignKey(ast::ForeignKeyConstraint {
                        columns: vec![c.name.clone()],
                        ..fk.clone()
                    }),
                ),
                other => {
                    return Err(SqlError::unsupported(format!(
                        "ADD COLUMN with column option {other}"
                    )))
                }
            }
        }
        let source = match (&def.default, &def.default_expr) {
            (Some(v), _) => ColumnSource::Value(v.clone()),
            (None, Some(_)) if fill.is_none() => {
                fill = Some(Fill::Expr(binder.default_of(&def)?));
                ColumnSource::Value(Value::Null)
            }
            _ => ColumnSource::Value(Value::Null),
        };
        self.schema.columns.push(def);
        self.sources.push(source);
        self.fills.push(fill);
        debug_assert_eq!(self.schema.columns.len(), p + 1);
        for tc in constraints {
            self.add_constraint(binder, &tc)?;
        }
        Ok(())
    }

    fn drop_column(
        &mut self,
        catalog: &Catalog,
        name: &str,
        if_exists: bool,
        cascade: bool,
    ) -> Result<(), SqlError> {
        let Some(p) = self.schema.column_index(name) else {
            if if_exists {
                return Ok(());
            }
            return Err(self.column(name).unwrap_err());
        };
        if self.schema.primary_key.contains(&p) {
            return Err(SqlError::unsupported(format!(
                "dropping column \"{name}\", which is part of the primary key"
            )));
        }
        self.views_block(catalog, name, cascade, "drop")?;
        self.publications_block(p, name, cascade, "drop")?;
        // Foreign keys of other tables that reference the column.
        if let ColumnSource::Old(old_pos) = self.sources[p] {
            for other in catalog.tables.values() {
                for fk in &other.schema.foreign_keys {
                    if fk.ref_table == self.old.schema.id
                        && other.schema.id != self.old.schema.id
                        && fk.ref_columns.contains(&old_pos)
                    {
                        if !cascade {
                            return Err(SqlError::new(
                                "2BP01",
                                format!(
                                    "cannot drop column {name} of table {} because constraint {} on table {} depends on it",
                                    self.schema.name, fk.name, other.schema.name
                                ),
                            )
                            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
                        }
                        self.dropped_refs.insert((other.schema.id, fk.name.clone()));
                    }
                }
            }
            for seq in catalog.sequences.values() {
                if seq.def.owned_by == Some((self.old.schema.id, old_pos)) {
                    self.drop_sequences.push(seq.def.id);
                }
            }
        }
        // Indexes and constraints of the table on the column go with it.
        let s = &mut self.schema;
        s.indexes.retain(|i| !i.columns.contains(&p));
        s.foreign_keys.retain(|f| !f.columns.contains(&p));
        s.checks
            .retain(|c| !crate::parse::parse_expr(&c.sql).is_ok_and(|e| expr_uses(&e, name)));
        s.columns.remove(p);
        self.sources.remove(p);
        self.fills.remove(p);
        let shift = |c: &mut usize| {
            if *c > p {
                *c -= 1;
            }
        };
        s.primary_key.iter_mut().for_each(shift);
        for i in &mut s.indexes {
            i.columns.iter_mut().for_each(shift);
        }
        for f in &mut s.foreign_keys {
            f.columns.iter_mut().for_each(shift);
            if f.ref_table == s.id {
                f.ref_columns.iter_mut().for_each(shift);
            }
        }
        Ok(())
    }

    fn add_constraint(
        &mut self,
        binder: &mut Binder<'_>,
        tc: &ast::TableConstraint,
    ) -> Result<(), SqlError> {
        let table = self.schema.name.clone();
        let col_of = |ic: &ast::IndexColumn, s: &TableSchema| -> Result<usize, SqlError> {
            let ast::Expr::Identifier(id) = &ic.column.expr else {
                return Err(SqlError::unsupported("an expression in a key"));
            };
            s.column_index(&ident(id))
                .ok_or_else(|| SqlError::undefined_column(&ident(id)))
        };
        match tc {
            ast::TableConstraint::Check(ck) => {
                let scope = Scope::table_schema(&self.schema, &table);
                binder.condition(&ck.expr, &scope, "CHECK")?;
                let name = match &ck.name {
                    Some(n) => ident(n),
                    None => self.names.pick(
                        &table,
                        bind::check_columns(&ck.expr, &self.schema),
                        "check",
                    ),
                };
                self.new_checks.push(name.clone());
                self.schema.checks.push(CheckDef {
                    name,
                    sql: bind::stored_sql(&ck.expr),
                });
            }
            ast::TableConstraint::Unique(_) if self.schema.ephemeral => {
                return Err(bind::ephemeral_refused(
                    &self.schema.name,
                    "a unique constraint",
                    "An ephemeral table keeps no rows to check against.",
                ));
            }
            ast::TableConstraint::Unique(u) => {
                let cols: Vec<usize> = u
                    .columns
                    .iter()
                    .map(|ic| col_of(ic, &self.schema))
                    .collect::<Result<_, _>>()?;
                let name = match &u.name {
                    Some(n) => ident(n),
                    None => self.names.pick(
                        &table,
                        cols.iter().map(|&c| self.schema.columns[c].name.as_str()),
                        "key",
                    ),
                };
                crate::limits::check_index_keys(cols.len())?;
                self.new_uniques.push(name.clone());
                let (deferrable, initially_deferred) = bind::deferral(&u.characteristics);
                self.schema.indexes.push(IndexDef {
                    deferrable,
                    initially_deferred,
                    constraint: true,
                    ..IndexDef::on_columns(name, cols, true)
                });
            }
            ast::TableConstraint::ForeignKey(fk) => {
                let cols: Vec<usize> = fk
                    .columns
                    .iter()
                    .map(|c| {
                        self.schema
                            .column_index(&ident(c))
                            .ok_or_else(|| SqlError::undefined_column(&ident(c)))
                    })
                    .collect::<Result<_, _>>()?;
                let def = binder.foreign_key(
                    &self.schema,
                    fk.name.as_ref().map(ident),
                    cols,
                    fk,
                    &mut self.names,
                )?;
                let def = aqueduct_tables::ForeignKeyDef {
                    ref_table: if def.ref_table == 0 {
                        self.schema.id
                    } else {
                        def.ref_table
                    },
                    ..def
                };
                self.new_fks.push(def.name.clone());
                self.schema.foreign_keys.push(def);
            }
            ast::TableConstraint::PrimaryKey(pk) => {
                if self.schema.has_primary_key() {
                    return Err(SqlError::new(
                        "42P16",
                        format!(
                            "multiple primary keys for table \"{}\" are not allowed",
                            self.schema.name
                        ),
                    ));
                }
                let cols: Vec<usize> = pk
                    .columns
                    .iter()
                    .map(|c| match &c.column.expr {
                        ast::Expr::Identifier(id) => self
                            .schema
                            .column_index(&ident(id))
                            .ok_or_else(|| SqlError::undefined_column(&ident(id))),
                        other => Err(SqlError::syntax(format!(
                            "a primary key is on columns, not on {other}"
                        ))),
                    })
                    .collect::<Result<_, _>>()?;
                crate::limits::check_index_keys(cols.len())?;
                // The key's columns become NOT NULL; every row is checked
                // (23502) and keyed anew by them (23505 on a duplicate).
                for &c in &cols {
                    self.schema.columns[c].not_null = true;
                }
                self.schema.primary_key = cols;
                self.new_primary_key = Some(
                    pk.name
                        .as_ref()
                        .map(ident)
                        .unwrap_or_else(|| format!("{}_pkey", self.schema.name)),
                );
            }
            other => return Err(SqlError::unsupported(format!("ADD CONSTRAINT {other}"))),
        }
        Ok(())
    }

    fn drop_constraint(
        &mut self,
        catalog: &Catalog,
        name: &str,
        if_exists: bool,
        cascade: bool,
    ) -> Result<(), SqlError> {
        let s = &mut self.schema;
        if let Some(i) = s.checks.iter().position(|c| c.name == name) {
            s.checks.remove(i);
        } else if let Some(i) = s.foreign_keys.iter().position(|f| f.name == name) {
            s.foreign_keys.remove(i);
        } else if let Some(i) = s.indexes.iter().position(|x| x.name == name && x.unique) {
            // Foreign keys of other tables may rest on it.
            let cols = s.indexes[i].columns.clone();
            for other in catalog.tables.values() {
                for fk in &other.schema.foreign_keys {
                    let mut a = fk.ref_columns.clone();
                    let mut b = cols.clone();
                    a.sort_unstable();
                    b.sort_unstable();
                    if fk.ref_table == s.id && a == b && other.schema.id != s.id {
                        if !cascade {
                            return Err(SqlError::new(
                                "2BP01",
                                format!(
                                    "cannot drop constraint {name} on table {} because constraint {} on table {} depends on it",
                                    s.name, fk.name, other.schema.name
                                ),
                            ));
                        }
                        self.dropped_refs.insert((other.schema.id, fk.name.clone()));
                    }
                }
            }
            s.indexes.remove(i);
        } else if name == format!("{}_pkey", s.name) {
            return Err(SqlError::unsupported("dropping the primary key"));
        } else if !if_exists {
            return Err(no_constraint(name, &s.name));
        }
        Ok(())
    }

    /// Checks the new definition against every row the transaction sees
    /// and writes the change.
    fn finish(mut self, fx: &mut Fx<'_>, binder: &mut Binder<'_>) -> Result<Outcome, SqlError> {
        let catalog = fx.catalog;
        let first_id = catalog.next_table_id();
        let mut sequence_ids = Vec::new();
        for (n, (def, column)) in self.sequences.iter().enumerate() {
            let id = first_id + n as TableId;
            let p = self.schema.column_index(column).expect("the owning column");
            sequence_ids.push((id, def.start, def.increment, p));
            // An identity added here draws from the sequence made for it.
            if let Some(identity) = &mut self.schema.columns[p].identity {
                if identity.sequence == 0 {
                    identity.sequence = id;
                }
            }
        }
        // Checks of the new definition, bound over the new row.
        let scope = Scope::table_schema(&self.schema, &self.schema.name);
        let checks: Vec<(String, Expr)> = self
            .schema
            .checks
            .iter()
            .filter(|c| self.new_checks.contains(&c.name))
            .map(|c| {
                let e = crate::parse::parse_expr(&c.sql)?;
                Ok((c.name.clone(), binder.condition(&e, &scope, "CHECK")?))
            })
            .collect::<Result<_, SqlError>>()?;
        let shape = Table::new(self.schema.clone());
        let rows = read_rows(
            catalog,
            fx.txn.get_mut(),
            self.old,
            &crate::plan::Access::Scan,
            &[],
        )?;
        let own: HashSet<Key> = fx
            .txn
            .get_mut()
            .own_rows(self.old.schema.id)
            .map(|(k, _)| k.clone())
            .collect();
        let computes = self.fills.iter().any(Option::is_some);
        let mut seen: Vec<HashSet<Vec<Value>>> = vec![HashSet::new(); self.new_uniques.len()];
        let mut puts: Vec<(Key, Row)> = Vec::new();
        let mut filled = vec![0i64; self.sequences.len()];
        for (key, old) in rows {
            let mut row: Row = self
                .sources
                .iter()
                .map(|s| match s {
                    ColumnSource::Old(i) => old[*i].clone(),
                    ColumnSource::Value(v) => v.clone(),
                })
                .collect();
            for (p, fill) in self.fills.iter().enumerate() {
                match fill {
                    None => {}
                    Some(Fill::Expr(e)) => row[p] = e.eval(&Env::with_effects(&old, &[], fx))?,
                    Some(Fill::Sequence(n)) => {
                        let (_, start, inc, _) = sequence_ids[*n];
                        row[p] = Value::Int(start + inc * filled[*n]);
                        filled[*n] += 1;
                    }
                }
            }
            let row = conform(&shape, row).map_err(|e| {
                if e.code == "23502" {
                    let c = self
                        .schema
                        .columns
                        .iter()
                        .find(|c| {
                            c.not_null && row_null(&old, &self.sources, &self.schema, &c.name)
                        })
                        .map(|c| c.name.clone())
                        .unwrap_or_default();
                    SqlError::new(
                        "23502",
                        format!(
                            "column \"{c}\" of relation \"{}\" contains null values",
                            self.schema.name
                        ),
                    )
                } else {
                    e
                }
            })?;
            if let Err(e) = constraints::check_row(&shape, &checks, &row, &[]) {
                let name = checks
                    .iter()
                    .find(|(_, c)| matches!(c.eval(&Env::new(&row, &[])), Ok(Value::Bool(false))))
                    .map(|(n, _)| n.clone())
                    .unwrap_or_default();
                return Err(SqlError::new(
                    e.code,
                    format!(
                        "check constraint \"{name}\" of relation \"{}\" is violated by some row",
                        self.schema.name
                    ),
                ));
            }
            for (n, uname) in self.new_uniques.iter().enumerate() {
                let def = self
                    .schema
                    .indexes
                    .iter()
                    .find(|i| &i.name == uname)
                    .expect("added");
                let values: Vec<Value> = def.columns.iter().map(|&c| row[c].clone()).collect();
                if !values.iter().any(Value::is_null) && !seen[n].insert(values) {
                    return Err(SqlError::new(
                        "23505",
                        format!("could not create unique index \"{uname}\""),
                    ));
                }
            }
            if computes || own.contains(&key) || self.new_primary_key.is_some() {
                puts.push((key, row));
            }
        }
        // Keyed anew by the primary key added: each row moves from its
        // hidden row id to its key, which must be unique.
        let mut moves: Vec<Key> = Vec::new();
        if let Some(name) = &self.new_primary_key {
            let mut keys: HashSet<Key> = HashSet::new();
            for (key, row) in &mut puts {
                let new = self.schema.key_of(row);
                if !keys.insert(new.clone()) {
                    return Err(SqlError::new(
                        "23505",
                        format!("could not create unique index \"{name}\""),
                    )
                    .with_detail(format!(
                        "Key ({})=({}) is duplicated.",
                        self.schema
                            .primary_key
                            .iter()
                            .map(|&c| self.schema.columns[c].name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        new.iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                moves.push(std::mem::replace(key, new));
            }
        }
        let txn = fx.txn.get_mut();
        for id in &self.drop_views {
            txn.schema(SchemaChange::DropView { id: *id });
        }
        for (id, sql) in &self.rewrite_views {
            txn.schema(SchemaChange::AlterView {
                id: *id,
                sql: sql.clone(),
            });
        }
        for publication in &self.publications {
            if catalog.publications.get(&publication.id) != Some(publication) {
                txn.schema(SchemaChange::AlterPublication(publication.clone()));
            }
        }
        for (n, (def, _)) in self.sequences.iter().enumerate() {
            let (id, _, _, p) = sequence_ids[n];
            txn.schema(SchemaChange::CreateSequence(SequenceDef {
                id,
                owned_by: Some((self.schema.id, p)),
                ..def.clone()
            }));
        }
        // Where each old column went, for what refers to it by position.
        let moved = |old: usize| {
            self.sources
                .iter()
                .position(|s| matches!(s, ColumnSource::Old(i) if *i == old))
        };
        txn.schema(SchemaChange::AlterTable {
            schema: self.schema.clone(),
            sources: self.sources.clone(),
            old_columns: self
                .old
                .schema
                .columns
                .iter()
                .map(|c| c.name.clone())
                .collect(),
        });
        for (n, (id, start, inc, _)) in sequence_ids.iter().enumerate() {
            if filled[n] > 0 {
                txn.schema(SchemaChange::SetSequence {
                    id: *id,
                    value: start + inc * (filled[n] - 1),
                    is_called: true,
                });
            }
        }
        let new_fk_rows = !self.new_fks.is_empty();
        for old_key in moves {
            txn.delete(self.schema.id, old_key);
        }
        for (key, row) in puts {
            txn.put(self.schema.id, key, row);
        }
        for id in &self.drop_sequences {
            txn.schema(SchemaChange::DropSequence { id: *id });
        }
        for seq in catalog.sequences.values() {
            if let Some((t, c)) = seq.def.owned_by {
                if t == self.schema.id && !self.drop_sequences.contains(&seq.def.id) {
                    if let Some(to) = moved(c).filter(|&to| to != c) {
                        txn.schema(SchemaChange::AlterSequence(SequenceDef {
                            owned_by: Some((t, to)),
                            ..seq.def.clone()
                        }));
                    }
                }
            }
        }
        // Other tables' foreign keys into this one: dropped (CASCADE) or
        // pointed at the columns' new positions.
        for other in catalog.tables.values() {
            if other.schema.id == self.schema.id {
                continue;
            }
            let mut touched = false;
            let mut fks = Vec::new();
            for fk in &other.schema.foreign_keys {
                if self
                    .dropped_refs
                    .contains(&(other.schema.id, fk.name.clone()))
                {
                    touched = true;
                    continue;
                }
                let mut fk = fk.clone();
                if fk.ref_table == self.schema.id {
                    let remapped: Vec<usize> = fk
                        .ref_columns
                        .iter()
                        .map(|&c| moved(c).expect("a referenced column that stays"))
                        .collect();
                    touched |= remapped != fk.ref_columns;
                    fk.ref_columns = remapped;
                }
                fks.push(fk);
            }
            if touched {
                txn.schema(SchemaChange::SetConstraints {
                    table: other.schema.id,
                    checks: other.schema.checks.clone(),
                    foreign_keys: fks,
                });
            }
        }
        // New foreign keys hold for every row.
        if new_fk_rows {
            let new_fks: Vec<_> = self
                .schema
                .foreign_keys
                .iter()
                .filter(|f| self.new_fks.contains(&f.name))
                .cloned()
                .collect();
            let rows = read_rows(catalog, txn, self.old, &crate::plan::Access::Scan, &[])?;
            for (_, old) in rows {
                let row: Row = self
                    .sources
                    .iter()
                    .map(|s| match s {
                        ColumnSource::Old(i) => old[*i].clone(),
                        ColumnSource::Value(v) => v.clone(),
                    })
                    .collect();
                constraints::check_references(catalog, txn, &self.schema, &new_fks, &row)?;
            }
        }
        Ok(tag())
    }
}

fn row_null(old: &Row, sources: &[ColumnSource], schema: &TableSchema, column: &str) -> bool {
    schema
        .column_index(column)
        .map(|p| match &sources[p] {
            ColumnSource::Old(i) => old[*i].is_null(),
            ColumnSource::Value(v) => v.is_null(),
        })
        .unwrap_or(false)
}

fn no_constraint(name: &str, table: &str) -> SqlError {
    SqlError::new(
        "42704",
        format!("constraint \"{name}\" of relation \"{table}\" does not exist"),
    )
}

/// Whether an expression names `column`.
fn expr_uses(e: &ast::Expr, column: &str) -> bool {
    let mut found = false;
    let _ = ast::visit_expressions(e, |x| {
        if let ast::Expr::Identifier(i) = x {
            found |= ident(i) == column;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}

/// A CHECK's text with column `old` named `new`.
/// A view's SQL reading table `new` where it read `old` (aliased `old`
/// unless it had an alias). `None` when the query also defines a
/// relation called `old` (a CTE), which a rename cannot tell apart.
fn rename_table_in(sql: &str, old: &str, new: &str) -> Option<String> {
    struct Rename<'a> {
        old: &'a str,
        new: &'a str,
        shadowed: bool,
    }
    impl ast::VisitorMut for Rename<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> std::ops::ControlFlow<()> {
            if let Some(with) = &q.with {
                if with
                    .cte_tables
                    .iter()
                    .any(|c| ident(&c.alias.name) == self.old)
                {
                    self.shadowed = true;
                }
            }
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(
            &mut self,
            f: &mut ast::TableFactor,
        ) -> std::ops::ControlFlow<()> {
            if let ast::TableFactor::Table { name, alias, .. } = f {
                if object_name(name).is_ok_and(|n| n == self.old) {
                    if alias.is_none() {
                        *alias = Some(ast::TableAlias {
                            explicit: true,
                            name: ast::Ident::new(self.old),
                            columns: Vec::new(),
                            at: None,
                        });
                    }
                    *name = ast::ObjectName::from(vec![ast::Ident::new(self.new)]);
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut statements = crate::parse::parse(sql).ok()?;
    let mut r = Rename {
        old,
        new,
        shadowed: false,
    };
    for st in &mut statements {
        let _ = ast::VisitMut::visit(st, &mut r);
    }
    if r.shadowed {
        return None;
    }
    Some(
        statements
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// A view's SQL reading column `new` of `table` where it read `old`, its
/// output columns keeping their names (`new AS old`; a `*` over the table
/// becomes its columns). Only for queries of SELECTs (and set operations
/// of them) over tables and views, without CTEs, derived tables or
/// subqueries in expressions: `None` otherwise, where a reference could
/// not be told apart.
fn rename_column_in(
    sql: &str,
    catalog: &Catalog,
    table: &str,
    old: &str,
    new: &str,
) -> Option<String> {
    use std::ops::ControlFlow;
    let mut statements = crate::parse::parse(sql).ok()?;
    let [st] = statements.as_mut_slice() else {
        return None;
    };
    let q: &mut ast::Query = match st {
        ast::Statement::CreateView(cv) => &mut cv.query,
        ast::Statement::Query(q) => q,
        _ => return None,
    };
    if q.with.is_some() {
        return None;
    }
    let mut nested = false;
    let _ = ast::visit_expressions(&*q, |e| {
        nested |= matches!(
            e,
            ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. }
        );
        ControlFlow::<()>::Continue(())
    });
    if nested {
        return None;
    }
    let mut qualifiers: Vec<String> = Vec::new();
    rename_column_in_set(&mut q.body, catalog, table, old, new, &mut qualifiers)?;
    // ORDER BY names output columns (which keep their names) or, when
    // qualified, the table's.
    if let Some(order) = &mut q.order_by {
        let _ = ast::visit_expressions_mut(order, |e| {
            rename_qualified(e, &qualifiers, old, new);
            ControlFlow::<()>::Continue(())
        });
    }
    Some(st.to_string())
}

/// `q.old` to `q.new` when `q` names the table.
fn rename_qualified(e: &mut ast::Expr, qualifiers: &[String], old: &str, new: &str) {
    if let ast::Expr::CompoundIdentifier(parts) = e {
        if let [q, c] = parts.as_mut_slice() {
            if qualifiers.contains(&ident(q)) && ident(c) == old {
                *c = ast::Ident::new(new);
            }
        }
    }
}

fn rename_column_in_set(
    body: &mut ast::SetExpr,
    catalog: &Catalog,
    table: &str,
    old: &str,
    new: &str,
    qualifiers: &mut Vec<String>,
) -> Option<()> {
    use std::ops::ControlFlow;
    let s = match body {
        ast::SetExpr::Select(s) => s,
        ast::SetExpr::SetOperation { left, right, .. } => {
            rename_column_in_set(left, catalog, table, old, new, qualifiers)?;
            return rename_column_in_set(right, catalog, table, old, new, qualifiers);
        }
        ast::SetExpr::Values(_) => return Some(()),
        _ => return None,
    };
    // Who in this SELECT's FROM is the table, and whether another relation
    // there may have a column called `old` too.
    let mut here: Vec<String> = Vec::new();
    let mut others_may_have_it = false;
    for twj in &s.from {
        for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            let ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = factor
            else {
                return None;
            };
            let n = object_name(name).ok()?;
            let q = alias.as_ref().map_or_else(|| n.clone(), |a| ident(&a.name));
            if n == table {
                here.push(q);
            } else {
                others_may_have_it |= match catalog.table(&n) {
                    Some(t) => t.schema.column_index(old).is_some(),
                    None => true,
                };
            }
        }
    }
    if here.is_empty() {
        return Some(());
    }
    // `*` over the table becomes its columns, as PostgreSQL fixes a view's
    // columns when it is made: the renamed one keeps its name.
    let columns_of = |n: &str| -> Option<Vec<String>> {
        let t = catalog.table(n)?;
        Some(t.schema.columns.iter().map(|c| c.name.clone()).collect())
    };
    let qualified = |q: &str, c: &str| {
        ast::SelectItem::UnnamedExpr(ast::Expr::CompoundIdentifier(vec![
            ast::Ident::new(q),
            ast::Ident::new(c),
        ]))
    };
    let mut factors: Vec<(String, String)> = Vec::new();
    for twj in &s.from {
        for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            if let ast::TableFactor::Table { name, alias, .. } = factor {
                let n = object_name(name).ok()?;
                let q = alias.as_ref().map_or_else(|| n.clone(), |a| ident(&a.name));
                factors.push((n, q));
            }
        }
    }
    let mut projection = Vec::with_capacity(s.projection.len());
    for item in std::mem::take(&mut s.projection) {
        match &item {
            ast::SelectItem::Wildcard(_) => {
                for (n, q) in &factors {
                    for c in columns_of(n)? {
                        projection.push(qualified(q, &c));
                    }
                }
            }
            ast::SelectItem::QualifiedWildcard(
                ast::SelectItemQualifiedWildcardKind::ObjectName(w),
                _,
            ) if object_name(w).is_ok_and(|w| here.contains(&w)) => {
                let q = object_name(w).ok()?;
                for c in columns_of(table)? {
                    projection.push(qualified(&q, &c));
                }
            }
            _ => projection.push(item),
        }
    }
    s.projection = projection;
    // A bare `old` is the table's only when no other relation here may
    // have one; where one may, the view would not have named it bare.
    if others_may_have_it {
        let mut bare = false;
        let _ = ast::visit_expressions(&**s, |e| {
            bare |= matches!(e, ast::Expr::Identifier(i) if ident(i) == old);
            ControlFlow::<()>::Continue(())
        });
        if bare {
            return None;
        }
    }
    let is_ref = |e: &ast::Expr| match e {
        ast::Expr::Identifier(i) => ident(i) == old,
        ast::Expr::CompoundIdentifier(parts) => {
            matches!(parts.as_slice(), [q, c] if here.contains(&ident(q)) && ident(c) == old)
        }
        _ => false,
    };
    for item in &mut s.projection {
        if let ast::SelectItem::UnnamedExpr(e) = item {
            if is_ref(e) {
                *item = ast::SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: ast::Ident::new(old),
                };
            }
        }
    }
    let _ = ast::visit_expressions_mut(&mut **s, |e| {
        if let ast::Expr::Identifier(i) = e {
            if ident(i) == old {
                *i = ast::Ident::new(new);
            }
        }
        rename_qualified(e, &here, old, new);
        ControlFlow::<()>::Continue(())
    });
    qualifiers.extend(here);
    Some(())
}

fn rename_in(sql: &str, old: &str, new: &str) -> Result<String, SqlError> {
    let mut e = crate::parse::parse_expr(sql)?;
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        if let ast::Expr::Identifier(i) = x {
            if ident(i) == old {
                *i = ast::Ident::new(new);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    Ok(e.to_string())
}
