//! Maintained views in publications (`docs/publications.md`, section 8).
//! A view's changes are not in the log: they come from the tap on the
//! view in full (`aqueduct_dataflow::tap`), one transaction's at a time,
//! once the dataflow has processed that transaction. A published view is
//! keyed by the columns its publication names (`KEY (...)`, else every
//! column), and its changes become row changes by key: a row that goes
//! and a row that comes with the same key are an update.
//!
//! Its bootstrap rows are the view's rows as of the snapshot's LSN `S`
//! (its rows now, with the tap's changes since `S` undone), put in a
//! table of their own beside the snapshot's tables, so a bootstrap reads
//! a view like a table. A row's version is the LSN of the transaction
//! that changed it (`S` for a bootstrap row).

use std::collections::BTreeMap;
use std::sync::Arc;

use aqueduct_dataflow::tap::{Tap, TapRead};
use aqueduct_expr::SqlError;
use aqueduct_feed::{Op, Snapshot, SnapshotTable, TableInfo};
use aqueduct_log::Lsn;
use aqueduct_publish::limits::VIEW_CHANGES_WAIT;
use aqueduct_tables::{Catalog, Key, ObjectKind, PublicationDef, Row, Table, TableId, TableSchema};
use aqueduct_views::views::ViewRegistry;

/// One published view: its name, its shape as a table, and its tap.
pub struct PublishedView {
    pub name: String,
    pub schema: TableSchema,
    pub info: TableInfo,
    tap: Arc<Tap>,
}

/// A row change of a view, by key.
pub struct ViewChange {
    pub key: Key,
    pub op: Op,
    pub old: Option<Row>,
    pub new: Option<Row>,
}

/// The views `def` publishes, with their shapes (as the publication was
/// made) and taps: made (or found) now, before a snapshot is taken, so
/// each holds every change after the snapshot.
pub fn published_views(
    catalog: &Catalog,
    def: &PublicationDef,
    views: &ViewRegistry,
) -> Result<BTreeMap<TableId, PublishedView>, SqlError> {
    let mut out = BTreeMap::new();
    for o in def.objects.iter().filter(|o| o.kind == ObjectKind::View) {
        let Some((name, _)) = catalog.views.get(&o.relation) else {
            continue;
        };
        let schema = o.view_schema(name);
        out.insert(
            o.relation,
            PublishedView {
                name: name.clone(),
                info: TableInfo::of(&schema),
                schema,
                tap: views.tap(name)?,
            },
        );
    }
    Ok(out)
}

impl PublishedView {
    /// The view's changes at `lsn`, once the dataflow has processed it;
    /// 55000 when the tap no longer holds them (the subscriber starts
    /// again from a new snapshot).
    pub fn changes_at(&self, views: &ViewRegistry, lsn: Lsn) -> Result<Vec<ViewChange>, SqlError> {
        match views.tap_changes(&self.tap, lsn, VIEW_CHANGES_WAIT)? {
            TapRead::Changes(delta) => Ok(by_key(&self.schema.primary_key, delta)),
            TapRead::Gone => Err(SqlError::new(
                "55000",
                format!(
                    "the changes of view \"{}\" at LSN {lsn} are no longer kept (the view was made anew, or the subscriber is too far behind)",
                    self.name
                ),
            )
            .with_hint("the subscriber bootstraps again")),
        }
    }

    /// Whether `other` reads the same tap (the view was not made anew).
    pub fn same_tap(&self, other: &PublishedView) -> bool {
        Arc::ptr_eq(&self.tap, &other.tap)
    }

    /// Whether the tap holds every change after `lsn`.
    pub fn covers(&self, lsn: Lsn) -> bool {
        self.tap.covers(lsn)
    }

    /// The view's rows as of `lsn`, as a table keyed by the view's key.
    /// 23505 when two rows share a key.
    fn table_at(&self, views: &ViewRegistry, lsn: Lsn) -> Result<Table, SqlError> {
        let (rows, _) = views.rows_as_of(&self.name, lsn, VIEW_CHANGES_WAIT)?;
        let mut table = Table::new(self.schema.clone());
        for row in rows {
            let key = self.schema.key_of(&row);
            if table.put(key.clone(), row, lsn).is_some() {
                return Err(not_unique(&self.name, &key));
            }
        }
        Ok(table)
    }
}

/// Adds each published view's rows as of the snapshot's LSN to `snapshot`
/// as a table of its own.
pub fn add_view_tables(
    snapshot: &mut Snapshot,
    published: &BTreeMap<TableId, PublishedView>,
    views: &ViewRegistry,
) -> Result<(), SqlError> {
    for view in published.values() {
        snapshot.tables.push(SnapshotTable {
            info: Arc::new(view.info.clone()),
            table: view.table_at(views, snapshot.lsn)?,
        });
    }
    Ok(())
}

fn not_unique(view: &str, key: &Key) -> SqlError {
    SqlError::new(
        "23505",
        format!(
            "view \"{view}\" has more than one row with key ({})",
            key.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .with_hint("publish the view with a KEY (columns) that is unique in it")
}

/// A view's delta as row changes by key: the rows that went (negative
/// weights) and came (positive) with each key, after equal rows cancel.
fn by_key(key_columns: &[usize], delta: aqueduct_dataflow::Delta) -> Vec<ViewChange> {
    let mut net: BTreeMap<Row, i64> = BTreeMap::new();
    for (row, w) in delta {
        *net.entry(row).or_default() += w;
    }
    let mut keyed: BTreeMap<Key, (Option<Row>, Option<Row>)> = BTreeMap::new();
    for (row, w) in net {
        if w == 0 {
            continue;
        }
        let key: Key = key_columns.iter().map(|&c| row[c].clone()).collect();
        let entry = keyed.entry(key).or_default();
        if w < 0 {
            entry.0 = Some(row);
        } else {
            entry.1 = Some(row);
        }
    }
    keyed
        .into_iter()
        .map(|(key, (old, new))| ViewChange {
            op: match (&old, &new) {
                (None, _) => Op::Insert,
                (Some(_), Some(_)) => Op::Update,
                (Some(_), None) => Op::Delete,
            },
            key,
            old,
            new,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_values::Value;

    fn row(k: i64, v: i64) -> Row {
        vec![Value::Int(k), Value::Int(v)]
    }

    #[test]
    fn a_delta_becomes_inserts_updates_and_deletes_by_key() {
        let delta = vec![
            (row(1, 10), -1),
            (row(1, 11), 1),
            (row(2, 20), 1),
            (row(3, 30), -1),
            (row(4, 40), 1),
            (row(4, 40), -1),
        ];
        let changes = by_key(&[0], delta);
        let ops: Vec<(i64, Op)> = changes
            .iter()
            .map(|c| match c.key[0] {
                Value::Int(k) => (k, c.op),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(ops, vec![(1, Op::Update), (2, Op::Insert), (3, Op::Delete)]);
        assert_eq!(changes[0].old, Some(row(1, 10)));
        assert_eq!(changes[0].new, Some(row(1, 11)));
    }
}
