//! Publications: the catalog's record of what leaves the server for
//! subscribers (`docs/publications.md`, section 1). A publication names
//! tables, the attributes of each that are published and an optional row
//! filter, and the strongest delivery mode its subscribers may ask for.
//! Kept in the log as schema records (`create_publication`,
//! `alter_publication`, `drop_publication`); the stream and the agent read
//! them from the catalog.

use serde::{Deserialize, Serialize};

use aqueduct_values::DataType;

use crate::schema::{parse_type, ColumnDef, ColumnSource, TableId, TableSchema};

pub use aqueduct_publish::limits::{DEP_SLOTS_DEFAULT, DEP_SLOTS_MAX};
pub use aqueduct_publish::Mode;

/// Which operations a publication sends (PostgreSQL's `publish` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishOps {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
}

impl Default for PublishOps {
    fn default() -> Self {
        PublishOps {
            insert: true,
            update: true,
            delete: true,
        }
    }
}

/// What kind of relation a published object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    Table,
    /// A maintained view: its changes come from the view's dataflow, not
    /// the log (`docs/publications.md`, section 8).
    View,
}

/// A published view's column as the publication was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewColumn {
    pub name: String,
    /// SQL type text (`parse_type`).
    #[serde(rename = "type")]
    pub ty: String,
}

/// One published attribute of an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Attribute {
    /// A column, by its position in the table, published under `name`.
    Column { name: String, column: usize },
    /// A computed attribute: an immutable expression over the row's
    /// columns (SQL text, by column name) and its type (SQL text).
    Computed {
        name: String,
        sql: String,
        #[serde(rename = "type")]
        ty: String,
    },
}

impl Attribute {
    pub fn name(&self) -> &str {
        match self {
            Attribute::Column { name, .. } | Attribute::Computed { name, .. } => name,
        }
    }
}

/// One published table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedObject {
    pub relation: TableId,
    pub kind: ObjectKind,
    /// No column list was given: every column is published under its own
    /// name, following the table as columns are added, dropped, renamed.
    pub all_columns: bool,
    /// The attributes when a column list was given (empty otherwise).
    #[serde(default)]
    pub attributes: Vec<Attribute>,
    /// The row filter: SQL text over the row's columns.
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// A view's columns when it was published (views only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub view_columns: Vec<ViewColumn>,
    /// A view's key: positions in `view_columns` (views only; every
    /// column when the publication named none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub view_key: Vec<usize>,
}

impl PublishedObject {
    /// A published view's shape as a table schema (id, name, columns and
    /// key), which the projection and the sinks read like a table's.
    pub fn view_schema(&self, name: &str) -> TableSchema {
        TableSchema {
            id: self.relation,
            name: name.to_string(),
            columns: self
                .view_columns
                .iter()
                .map(|c| {
                    ColumnDef::new(c.name.clone(), parse_type(&c.ty).unwrap_or(DataType::Text))
                })
                .collect(),
            primary_key: self.view_key.clone(),
            indexes: Vec::new(),
            checks: Vec::new(),
            foreign_keys: Vec::new(),
            ephemeral: false,
            shard_key: None,
        }
    }
}

/// A publication's whole definition, as its schema records carry it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationDef {
    /// From the table-id counter, never reused.
    pub id: TableId,
    pub name: String,
    /// The strongest mode subscribers may ask for.
    pub mode: Mode,
    /// Size of the hashed dependency space, a power of two.
    pub dep_slots: u32,
    #[serde(default)]
    pub publish: PublishOps,
    /// Subscribers are dropped past this much held log (absent: the
    /// server's consumer cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lag_bytes: Option<u64>,
    /// ... or past this long without acknowledging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lag_age_s: Option<u64>,
    /// `FOR ALL TABLES`: every table, present and future, all columns.
    #[serde(default)]
    pub all_tables: bool,
    /// The published tables (empty for `FOR ALL TABLES`).
    #[serde(default)]
    pub objects: Vec<PublishedObject>,
}

impl PublicationDef {
    /// The object publishing `table`, if the publication has one.
    pub fn object(&self, table: TableId) -> Option<&PublishedObject> {
        self.objects.iter().find(|o| o.relation == table)
    }

    /// Whether the publication publishes `table` (`FOR ALL TABLES`
    /// publishes every table).
    pub fn publishes(&self, table: TableId) -> bool {
        self.all_tables || self.object(table).is_some()
    }

    /// The definition after `ALTER TABLE` changed `table`'s columns:
    /// each column attribute moves with its column to its new position.
    /// An attribute whose column is gone is dropped (the server refuses
    /// such an `ALTER TABLE` unless `CASCADE` drops the object).
    pub(crate) fn follow_alter(&mut self, table: TableId, sources: &[ColumnSource]) {
        for o in self.objects.iter_mut().filter(|o| o.relation == table) {
            o.attributes.retain_mut(|a| match a {
                Attribute::Column { column, .. } => match sources
                    .iter()
                    .position(|s| matches!(s, ColumnSource::Old(old) if old == column))
                {
                    Some(new) => {
                        *column = new;
                        true
                    }
                    None => false,
                },
                Attribute::Computed { .. } => true,
            });
        }
    }

    /// The definition after `table` was dropped: without it.
    pub(crate) fn without(&mut self, table: TableId) {
        self.objects.retain(|o| o.relation != table);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_attributes_follow_an_alter() {
        let mut p = PublicationDef {
            id: 9,
            name: "p".into(),
            mode: Mode::Causal,
            dep_slots: 16,
            publish: PublishOps::default(),
            max_lag_bytes: None,
            max_lag_age_s: None,
            all_tables: false,
            objects: vec![PublishedObject {
                relation: 3,
                kind: ObjectKind::Table,
                all_columns: false,
                attributes: vec![
                    Attribute::Column {
                        name: "a".into(),
                        column: 0,
                    },
                    Attribute::Column {
                        name: "c".into(),
                        column: 2,
                    },
                ],
                filter: None,
                view_columns: Vec::new(),
                view_key: Vec::new(),
            }],
        };
        // Column 1 dropped: column 2 moves to 1.
        p.follow_alter(3, &[ColumnSource::Old(0), ColumnSource::Old(2)]);
        assert_eq!(
            p.objects[0].attributes[1],
            Attribute::Column {
                name: "c".into(),
                column: 1
            }
        );
        p.without(3);
        assert!(p.objects.is_empty());
    }
}
