//! One base table in memory: rows by primary key, secondary indexes, and the
//! versions (LSNs) that optimistic transactions validate against.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use aqueduct_log::Lsn;
use aqueduct_values::Value;

use crate::schema::{IndexDef, TableSchema};

/// A row's primary key (or `[Int(row id)]` for a table without one).
pub type Key = Vec<Value>;
pub type Row = Vec<Value>;

/// A stored row and the LSN of the write that last changed it.
#[derive(Clone, Debug)]
pub struct RowVersion {
    pub row: Arc<Row>,
    pub lsn: Lsn,
}

#[derive(Clone, Debug)]
pub struct Table {
    pub schema: Arc<TableSchema>,
    rows: BTreeMap<Key, RowVersion>,
    /// Parallel to `schema.indexes`: (indexed values, key).
    indexes: Vec<BTreeSet<(Vec<Value>, Key)>>,
    next_rowid: i64,
    /// LSN of the last write of any kind (scans validate against this).
    pub version: Lsn,
    /// LSN of the last insert or delete (reads of absent keys validate against this).
    pub membership_version: Lsn,
    /// Approximate bytes of row data, for metrics.
    pub bytes: usize,
}

fn row_bytes(row: &Row) -> usize {
    row.iter().map(|v| 16 + v.payload_len()).sum::<usize>() + 48
}

impl Table {
    pub fn new(schema: TableSchema) -> Table {
        let indexes = schema.indexes.iter().map(|_| BTreeSet::new()).collect();
        Table {
            schema: Arc::new(schema),
            rows: BTreeMap::new(),
            indexes,
            next_rowid: 1,
            version: 0,
            membership_version: 0,
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn get(&self, key: &Key) -> Option<&RowVersion> {
        self.rows.get(key)
    }

    pub fn scan(&self) -> impl Iterator<Item = (&Key, &RowVersion)> {
        self.rows.iter()
    }

    /// Rows whose primary key lies in the given bounds, in key order.
    pub fn range(
        &self,
        lo: Bound<&Key>,
        hi: Bound<&Key>,
    ) -> impl Iterator<Item = (&Key, &RowVersion)> {
        self.rows.range::<Key, _>((lo, hi))
    }

    /// Keys of rows whose indexed columns equal `values`.
    pub fn index_lookup<'a>(
        &'a self,
        index: usize,
        values: &'a [Value],
    ) -> impl Iterator<Item = &'a Key> + 'a {
        let start = (values.to_vec(), Vec::new());
        self.indexes[index]
            .range(start..)
            .take_while(move |(v, _)| v.as_slice() == values)
            .map(|(_, k)| k)
    }

    /// The position of an index whose columns are exactly `columns`.
    pub fn index_on(&self, columns: &[usize]) -> Option<usize> {
        self.schema
            .indexes
            .iter()
            .position(|i| i.columns == columns)
    }

    /// One above the highest hidden row id stored.
    pub fn peek_rowid(&self) -> i64 {
        self.next_rowid
    }

    fn index_values(def: &IndexDef, row: &Row) -> Vec<Value> {
        def.columns.iter().map(|&c| row[c].clone()).collect()
    }

    /// Stores `row` at `key`; returns the row it replaced.
    pub fn put(&mut self, key: Key, row: Row, lsn: Lsn) -> Option<Arc<Row>> {
        assert_eq!(row.len(), self.schema.columns.len(), "row width");
        if !self.schema.has_primary_key() {
            if let Some(Value::Int(id)) = key.first() {
                self.next_rowid = self.next_rowid.max(id + 1);
            }
        }
        let old = self.rows.remove(&key);
        if let Some(old) = &old {
            self.bytes -= row_bytes(&old.row);
            for (i, def) in self.schema.indexes.iter().enumerate() {
                self.indexes[i].remove(&(Self::index_values(def, &old.row), key.clone()));
            }
        } else {
            self.membership_version = lsn;
        }
        for (i, def) in self.schema.indexes.iter().enumerate() {
            self.indexes[i].insert((Self::index_values(def, &row), key.clone()));
        }
        self.bytes += row_bytes(&row);
        self.rows.insert(
            key,
            RowVersion {
                row: Arc::new(row),
                lsn,
            },
        );
        self.version = lsn;
        old.map(|o| o.row)
    }

    /// Removes the row at `key`; returns it.
    pub fn delete(&mut self, key: &Key, lsn: Lsn) -> Option<Arc<Row>> {
        let old = self.rows.remove(key)?;
        {
            self.bytes -= row_bytes(&old.row);
            for (i, def) in self.schema.indexes.iter().enumerate() {
                self.indexes[i].remove(&(Self::index_values(def, &old.row), key.clone()));
            }
            self.membership_version = lsn;
            self.version = lsn;
        }
        Some(old.row)
    }

    /// Adds an index and fills it from the rows.
    pub fn add_index(&mut self, def: IndexDef) {
        let mut set = BTreeSet::new();
        for (k, rv) in &self.rows {
            set.insert((Self::index_values(&def, &rv.row), k.clone()));
        }
        let mut schema = (*self.schema).clone();
        schema.indexes.push(def);
        self.schema = Arc::new(schema);
        self.indexes.push(set);
    }

    pub fn drop_index(&mut self, name: &str) -> bool {
        let Some(pos) = self.schema.indexes.iter().position(|i| i.name == name) else {
            return false;
        };
        let mut schema = (*self.schema).clone();
        schema.indexes.remove(pos);
        self.schema = Arc::new(schema);
        self.indexes.remove(pos);
        true
    }

    /// Keys of other rows that hold `row`'s values in a unique index.
    pub fn unique_conflicts(&self, key: &Key, row: &Row) -> Vec<(String, Key)> {
        let mut out = Vec::new();
        for (i, def) in self.schema.indexes.iter().enumerate() {
            if !def.unique {
                continue;
            }
            let values = Self::index_values(def, row);
            if values.iter().any(Value::is_null) {
                continue;
            }
            for k in self.index_lookup(i, &values) {
                if k != key {
                    out.push((def.name.clone(), k.clone()));
                }
            }
        }
        out
    }
}
