//! A publication's view of its tables' changes (`docs/publications.md`,
//! section 1): the attributes that leave the server (columns, renamed
//! columns, computed attributes), the row filter with PostgreSQL's
//! transitions (an update whose old row matches and new row does not is
//! sent as a delete, and the reverse as an insert), and the operations
//! the publication sends.

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_feed::{value_json, Op, TableInfo};
use aqueduct_plan::bind::{Binder, Scope};
use aqueduct_publish::{AttributeType, Change, ChangeOp, ObjectSchema};
use aqueduct_tables::{
    Attribute, Catalog, Key, ObjectKind, PublicationDef, PublishOps, Row, Table, TableId,
};
use aqueduct_values::Value;
use serde_json::{Map, Value as Json};

/// The name a table without a primary key publishes its hidden row id as.
pub const ROW_ID_ATTRIBUTE: &str = "_aq_rowid";

/// Where one published attribute comes from.
#[derive(Clone, Debug)]
enum Source {
    /// A column of the table as it is now.
    Column(usize),
    /// An expression over the row (columns as they are now).
    Computed(Expr),
    /// The hidden row id (tables without a primary key): the key's value.
    RowId,
}

/// One published table.
#[derive(Clone, Debug)]
pub struct ObjectProjection {
    pub table: TableId,
    /// No column list: the attributes are the row's columns as of its
    /// write (so a stream behind an `ALTER TABLE` sends each row as it
    /// was, and the `schema` line between them says what changed).
    all_columns: bool,
    /// The name it is published under (the table's).
    pub name: String,
    /// The table's columns now, by name: rows read from the log are put in
    /// this order by name, so a row written before a column was added or
    /// dropped is projected with the definition of today.
    columns: Vec<String>,
    attributes: Vec<(String, Source)>,
    filter: Option<Expr>,
    schema: ObjectSchema,
}

impl ObjectProjection {
    fn new(
        catalog: &Catalog,
        table: &Table,
        object: Option<&aqueduct_tables::PublishedObject>,
    ) -> Result<ObjectProjection, SqlError> {
        let s = &table.schema;
        let scope = Scope::table(table, &s.name);
        let mut binder = Binder::new(catalog);
        let bind = |binder: &mut Binder, sql: &str| -> Result<Expr, SqlError> {
            binder.expr(&aqueduct_plan::parse::parse_expr(sql)?, &scope, None)
        };
        let mut attributes: Vec<(String, Source)> = Vec::new();
        let mut types: Vec<AttributeType> = Vec::new();
        let all_columns = object.is_none_or(|o| o.all_columns);
        if all_columns {
            for (i, c) in s.columns.iter().enumerate() {
                attributes.push((c.name.clone(), Source::Column(i)));
                types.push(AttributeType {
                    name: c.name.clone(),
                    ty: c.ty.to_string(),
                });
            }
        } else {
            for a in &object.expect("a column list").attributes {
                match a {
                    Attribute::Column { name, column } => {
                        let Some(c) = s.columns.get(*column) else {
                            continue;
                        };
                        attributes.push((name.clone(), Source::Column(*column)));
                        types.push(AttributeType {
                            name: name.clone(),
                            ty: c.ty.to_string(),
                        });
                    }
                    Attribute::Computed { name, sql, ty } => {
                        attributes.push((name.clone(), Source::Computed(bind(&mut binder, sql)?)));
                        types.push(AttributeType {
                            name: name.clone(),
                            ty: ty.clone(),
                        });
                    }
                }
            }
        }
        // The key always travels, and the sink's copy is keyed by it: its
        // columns are attributes too, under their own names.
        let mut key = Vec::new();
        if s.has_primary_key() {
            for &k in &s.primary_key {
                let c = &s.columns[k];
                let published = attributes
                    .iter()
                    .find(|(_, src)| matches!(src, Source::Column(i) if *i == k))
                    .map(|(n, _)| n.clone());
                let name = match published {
                    Some(n) => n,
                    None => {
                        attributes.push((c.name.clone(), Source::Column(k)));
                        types.push(AttributeType {
                            name: c.name.clone(),
                            ty: c.ty.to_string(),
                        });
                        c.name.clone()
                    }
                };
                key.push(name);
            }
        } else {
            attributes.push((ROW_ID_ATTRIBUTE.to_string(), Source::RowId));
            types.push(AttributeType {
                name: ROW_ID_ATTRIBUTE.to_string(),
                ty: "bigint".to_string(),
            });
            key.push(ROW_ID_ATTRIBUTE.to_string());
        }
        let filter = match object.and_then(|o| o.filter.as_deref()) {
            Some(sql) => Some(bind(&mut binder, sql)?),
            None => None,
        };
        Ok(ObjectProjection {
            table: s.id,
            all_columns,
            name: s.name.clone(),
            columns: s.columns.iter().map(|c| c.name.clone()).collect(),
            attributes,
            filter,
            schema: ObjectSchema {
                attributes: types,
                key,
            },
        })
    }

    /// The object's shape as sinks create it.
    pub fn schema(&self) -> &ObjectSchema {
        &self.schema
    }

    /// Whether every column is published (no column list).
    pub fn all_columns(&self) -> bool {
        self.all_columns
    }

    /// The table's columns as the projection was made.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// `row`, written with the columns of `info`, in today's column order
    /// (a column it did not have is NULL).
    fn conform(&self, info: &TableInfo, row: &Row) -> Row {
        if info.columns == self.columns {
            return row.clone();
        }
        self.columns
            .iter()
            .map(|c| {
                info.columns
                    .iter()
                    .position(|x| x == c)
                    .and_then(|i| row.get(i).cloned())
                    .unwrap_or(Value::Null)
            })
            .collect()
    }

    fn passes(&self, row: &Row) -> bool {
        match &self.filter {
            None => true,
            // As PostgreSQL: NULL or an error is not a match.
            Some(f) => matches!(f.eval(&Env::new(row, &[])), Ok(Value::Bool(true))),
        }
    }

    /// The published attributes of `row`, written with the columns of
    /// `info` (`conformed`: the same row in today's column order).
    fn attrs_as_written(
        &self,
        info: &TableInfo,
        key: &Key,
        row: &Row,
        conformed: &Row,
    ) -> Map<String, Json> {
        if !self.all_columns || info.columns == self.columns {
            return self.attrs(key, conformed);
        }
        let mut out: Map<String, Json> = info
            .columns
            .iter()
            .zip(row.iter())
            .map(|(c, v)| (c.clone(), value_json(v)))
            .collect();
        if self.schema.key == [ROW_ID_ATTRIBUTE] {
            out.insert(
                ROW_ID_ATTRIBUTE.to_string(),
                key.first().map_or(Json::Null, value_json),
            );
        }
        out
    }

    fn attrs(&self, key: &Key, row: &Row) -> Map<String, Json> {
        self.attributes
            .iter()
            .map(|(name, src)| {
                let v = match src {
                    Source::Column(i) => row.get(*i).map_or(Json::Null, value_json),
                    Source::Computed(e) => e
                        .eval(&Env::new(row, &[]))
                        .map_or(Json::Null, |v| value_json(&v)),
                    Source::RowId => key.first().map_or(Json::Null, value_json),
                };
                (name.clone(), v)
            })
            .collect()
    }

    /// The published change for a row change, after the row filter's
    /// transitions and the publication's operations; `None` when nothing
    /// is published.
    #[allow(clippy::too_many_arguments)]
    pub fn project(
        &self,
        publish: PublishOps,
        info: &TableInfo,
        key: &Key,
        op: Op,
        version: u64,
        prev_version: Option<u64>,
        old: Option<&Row>,
        new: Option<&Row>,
    ) -> Option<Change> {
        let raw_new = new;
        let old = old.map(|r| self.conform(info, r));
        let new = new.map(|r| self.conform(info, r));
        let was = old.as_ref().is_some_and(|r| self.passes(r));
        let is = new.as_ref().is_some_and(|r| self.passes(r));
        let op = match (op, was, is) {
            (Op::Insert, _, true) => ChangeOp::Insert,
            (Op::Update, true, true) => ChangeOp::Update,
            (Op::Update, false, true) => ChangeOp::Insert,
            (Op::Update, true, false) | (Op::Delete, true, _) => ChangeOp::Delete,
            _ => return None,
        };
        let allowed = match op {
            ChangeOp::Insert => publish.insert,
            ChangeOp::Update => publish.update,
            ChangeOp::Delete => publish.delete,
        };
        if !allowed {
            return None;
        }
        Some(Change {
            object: self.name.clone(),
            op,
            key: key.iter().map(value_json).collect(),
            attrs: match (op, raw_new, &new) {
                (ChangeOp::Delete, _, _) => None,
                (_, Some(raw), Some(conformed)) => {
                    Some(self.attrs_as_written(info, key, raw, conformed))
                }
                _ => None,
            },
            version,
            prev_version,
        })
    }

    /// A row of a bootstrap snapshot as published attributes, or `None`
    /// when the filter leaves it out.
    pub fn snapshot_row(&self, key: &Key, row: &Row) -> Option<Map<String, Json>> {
        self.passes(row).then(|| self.attrs(key, row))
    }
}

/// Every object of one publication, by table.
#[derive(Clone, Debug)]
pub struct Projection {
    pub publication: Arc<PublicationDef>,
    pub objects: BTreeMap<TableId, ObjectProjection>,
}

impl Projection {
    /// The publication named `name` as the catalog has it now.
    pub fn of(catalog: &Catalog, name: &str) -> Result<Projection, SqlError> {
        let def = catalog.publication(name).ok_or_else(|| {
            SqlError::new("42704", format!("publication \"{name}\" does not exist"))
        })?;
        let mut objects = BTreeMap::new();
        for t in catalog.tables.values() {
            let object = def.object(t.schema.id);
            if !def.all_tables && object.is_none() {
                continue;
            }
            objects.insert(t.schema.id, ObjectProjection::new(catalog, t, object)?);
        }
        // Views, with the shape they had when published.
        for o in def.objects.iter().filter(|o| o.kind == ObjectKind::View) {
            if let Some((name, _)) = catalog.views.get(&o.relation) {
                let table = Table::new(o.view_schema(name));
                objects.insert(o.relation, ObjectProjection::new(catalog, &table, Some(o))?);
            }
        }
        Ok(Projection {
            publication: Arc::new(def.clone()),
            objects,
        })
    }

    /// Each object's shape, by published name.
    pub fn schemas(&self) -> BTreeMap<String, ObjectSchema> {
        self.objects
            .values()
            .map(|o| (o.name.clone(), o.schema.clone()))
            .collect()
    }
}
