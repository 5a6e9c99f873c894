//! One base table in memory: rows by primary key, secondary indexes, and the
//! versions (LSNs) that optimistic transactions validate against.

use std::ops::Bound;
use std::sync::Arc;

use aqueduct_log::Lsn;
use aqueduct_values::Value;
use imbl::OrdMap;

use crate::index::{bucket_bytes, row_entry_bytes, Index};
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

/// Rows and indexes are persistent (copy-on-write) B-trees: a clone of a
/// table shares every node with it and costs a few pointer copies, so a
/// release can keep the tables exactly as of its LSN while writes go on,
/// each later write copying only the nodes on its path.
#[derive(Clone, Debug)]
pub struct Table {
    pub schema: Arc<TableSchema>,
    rows: OrdMap<Key, RowVersion>,
    /// Parallel to `schema.indexes`: (indexed values, key) to the row, so a
    /// lookup by index reads rows in one ordered pass, with no second
    /// lookup by key per row.
    indexes: Vec<Index>,
    next_rowid: i64,
    /// LSN of the last write of any kind (scans validate against this).
    pub version: Lsn,
    /// Estimated bytes of memory the rows take with their keys and index
    /// entries ([`Table::stored_bytes`]), for metrics.
    pub bytes: usize,
    /// Counts changes of the table's columns and constraints: a
    /// transaction that wrote the table commits only if it is unchanged.
    pub shape: u64,
    /// Set during a restart's replay: writes change only the row map, and
    /// [`Table::build_indexes`] builds every index once at the end.
    indexes_deferred: bool,
}

/// Whether `row`'s `columns` equal `values` (as an index lookup compares).
pub fn matches(row: &Row, columns: &[usize], values: &[Value]) -> bool {
    columns.iter().zip(values).all(|(&c, v)| row[c] == *v)
}

/// A key above every key of `width` values that begins with `prefix` and
/// below every greater one: the prefix, then more NULLs than the rest of
/// the key has room for (NULL sorts above every other value, and a longer
/// key above its prefix).
pub(crate) fn above_prefix(prefix: &[Value], width: usize) -> Vec<Value> {
    let mut key = prefix.to_vec();
    key.resize(width.max(prefix.len()) + 1, Value::Null);
    key
}

/// What the allocator takes for a request of `n` bytes: a chunk of a
/// multiple of 16 bytes with an 8-byte header, at least 32.
pub(crate) fn allocated(n: usize) -> usize {
    (n + 8).next_multiple_of(16).max(32)
}

/// Bytes of a vector of values on the heap: its buffer and each value's
/// own allocation (text, bytes).
pub(crate) fn values_bytes(values: &[Value]) -> usize {
    let buffer = allocated(std::mem::size_of_val(values));
    let payload: usize = values
        .iter()
        .map(|v| match v.payload_len() {
            0 => 0,
            n => allocated(n),
        })
        .sum();
    buffer + payload
}

/// A B-tree map's bytes per entry: the entry, in nodes about two thirds
/// full on average.
pub(crate) fn btree_entry<K, V>() -> usize {
    std::mem::size_of::<(K, V)>() * 3 / 2
}

impl Table {
    pub fn new(schema: TableSchema) -> Table {
        let indexes = schema.indexes.iter().map(|_| Index::default()).collect();
        Table {
            schema: Arc::new(schema),
            rows: OrdMap::new(),
            indexes,
            next_rowid: 1,
            version: 0,
            bytes: 0,
            shape: 0,
            indexes_deferred: false,
        }
    }

    /// Whether the table has an index stored apart from its rows.
    fn has_physical_index(&self) -> bool {
        self.schema.indexes.iter().any(|d| d.is_physical())
    }

    /// From now until [`Table::build_indexes`], writes leave the indexes
    /// alone (a replay, which nothing reads until it ends). Only for a
    /// table with an index to maintain.
    pub(crate) fn defer_indexes(&mut self) {
        if self.has_physical_index() {
            self.indexes_deferred = true;
        }
    }

    pub(crate) fn indexes_deferred(&self) -> bool {
        self.indexes_deferred
    }

    /// Builds every index of a table whose indexes were deferred from its
    /// rows as they are now, each in one pass over the rows in key order.
    pub(crate) fn build_indexes(&mut self) {
        if !std::mem::take(&mut self.indexes_deferred) {
            return;
        }
        for (i, def) in self.schema.indexes.iter().enumerate() {
            self.indexes[i] =
                if def.is_physical() {
                    Index::build(self.rows.iter().map(|(k, rv)| {
                        (Self::index_values(def, &rv.row), k.clone(), rv.row.clone())
                    }))
                } else {
                    Index::default()
                };
        }
        self.recount_bytes();
    }

    /// `ALTER TYPE` of an enum: columns of the type (or arrays of it)
    /// take its new definition. Stored values stay valid: labels keep
    /// their sort keys.
    pub fn retype_enum(&mut self, t: &Arc<aqueduct_values::EnumType>) {
        use aqueduct_values::DataType;
        let retype = |ty: &DataType| -> Option<DataType> {
            match ty {
                DataType::Enum(old) if old.id == t.id => Some(DataType::Enum(t.clone())),
                DataType::Array(e) if matches!(&**e, DataType::Enum(old) if old.id == t.id) => {
                    Some(DataType::Array(Box::new(DataType::Enum(t.clone()))))
                }
                _ => None,
            }
        };
        if !self.schema.columns.iter().any(|c| retype(&c.ty).is_some()) {
            return;
        }
        let mut schema = (*self.schema).clone();
        for c in &mut schema.columns {
            if let Some(ty) = retype(&c.ty) {
                c.ty = ty;
            }
        }
        self.schema = Arc::new(schema);
    }

    /// `ALTER TABLE`: the table takes `schema`, and each row is remade
    /// from `sources` (one per new column: an old column's value or a
    /// constant); keys stay (the primary key's values do not change), the
    /// indexes are built anew for the new positions.
    pub fn alter(&mut self, schema: TableSchema, sources: &[crate::ColumnSource]) {
        assert_eq!(
            schema.columns.len(),
            sources.len(),
            "a source for every column of the altered table"
        );
        let remade: OrdMap<Key, RowVersion> = self
            .rows
            .iter()
            .map(|(k, rv)| {
                let row: Row = sources
                    .iter()
                    .map(|s| match s {
                        crate::ColumnSource::Old(i) => rv.row[*i].clone(),
                        crate::ColumnSource::Value(v) => v.clone(),
                    })
                    .collect();
                (
                    k.clone(),
                    RowVersion {
                        row: Arc::new(row),
                        lsn: rv.lsn,
                    },
                )
            })
            .collect();
        self.rows = remade;
        let defs = schema.indexes.clone();
        self.schema = Arc::new(TableSchema {
            indexes: Vec::new(),
            ..schema
        });
        self.indexes.clear();
        for def in defs {
            self.add_index(def);
        }
        self.shape += 1;
        self.recount_bytes();
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
        self.rows.range::<_, Key>((lo, hi))
    }

    /// Keys of rows whose indexed columns equal `values`.
    pub fn index_lookup<'a>(
        &'a self,
        index: usize,
        values: &'a [Value],
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.index_rows(index, values).map(|(k, _)| k)
    }

    /// The keys and rows whose values in index `index` begin with (or, all
    /// given, equal) `values`, in order.
    pub fn index_rows<'a>(
        &'a self,
        index: usize,
        values: &[Value],
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Row>)> + 'a> {
        let width = self.schema.indexes[index].columns.len();
        self.indexes[index].rows(values, width)
    }

    /// The rows whose `columns` equal `values`: by the primary key or an
    /// index when `columns` are all or the first of its columns (a lookup
    /// or a range of it), else by a scan.
    pub fn matching<'a>(
        &'a self,
        columns: &'a [usize],
        values: &'a [Value],
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Row>)> + 'a> {
        let pk = &self.schema.primary_key;
        if self.schema.has_primary_key() && pk.as_slice() == columns {
            return Box::new(
                self.rows
                    .get_key_value(values)
                    .map(|(k, rv)| (k, &rv.row))
                    .into_iter(),
            );
        }
        if self.schema.has_primary_key() && !columns.is_empty() && pk.starts_with(columns) {
            let lo = values.to_vec();
            let hi = above_prefix(values, pk.len());
            return Box::new(
                self.rows
                    .range((Bound::Included(lo), Bound::Excluded(hi)))
                    .map(|(k, rv)| (k, &rv.row)),
            );
        }
        if let Some(ix) = self.index_starting(columns) {
            return self.index_rows(ix, values);
        }
        Box::new(
            self.rows
                .iter()
                .filter(move |(_, rv)| matches(&rv.row, columns, values))
                .map(|(k, rv)| (k, &rv.row)),
        )
    }

    /// The rows whose `columns` equal `values` with weights: each row once,
    /// or, when `counted`, the first row alone weighted by how many match.
    /// A reader that looks at no column but `columns` cannot tell the rows
    /// apart. A counted read by an index reads its buckets' lengths
    /// ([`Table::index_counted`]); by a range of the primary key or a scan
    /// it walks the rows.
    pub fn weighted_matching(
        &self,
        columns: &[usize],
        values: &[Value],
        counted: bool,
    ) -> crate::WeightedRows {
        let is_pk = self.schema.has_primary_key() && self.schema.primary_key == columns;
        if counted && !is_pk {
            if let Some(ix) = self.index_starting(columns) {
                return self
                    .index_counted(ix, values)
                    .map(|(row, n)| (row.clone(), n as i64))
                    .into_iter()
                    .collect();
            }
        }
        let mut rows = self.matching(columns, values);
        if !counted {
            return rows.map(|(_, r)| (r.clone(), 1)).collect();
        }
        match rows.next() {
            Some((_, first)) => vec![(first.clone(), 1 + rows.count() as i64)],
            None => Vec::new(),
        }
    }

    /// The first row whose values in index `index` begin with (or, all
    /// given, equal) `values`, and how many rows do, from the index's
    /// buckets without walking a row; `None` when none does.
    pub fn index_counted(&self, index: usize, values: &[Value]) -> Option<(&Arc<Row>, usize)> {
        let width = self.schema.indexes[index].columns.len();
        self.indexes[index].counted(values, width)
    }

    /// The position of an index whose first columns are `columns` (the
    /// one with the fewest columns), so that equal values are one range.
    pub fn index_starting(&self, columns: &[usize]) -> Option<usize> {
        if columns.is_empty() {
            return None;
        }
        self.schema
            .indexes
            .iter()
            .enumerate()
            .filter(|(_, i)| i.is_physical() && i.columns.starts_with(columns))
            .min_by_key(|(_, i)| i.columns.len())
            .map(|(pos, _)| pos)
    }

    /// Whether rows with given values of `columns` are found by a lookup
    /// or a range of the primary key or an index (not a scan).
    pub fn has_lookup(&self, columns: &[usize]) -> bool {
        (self.schema.has_primary_key()
            && !columns.is_empty()
            && self.schema.primary_key.starts_with(columns))
            || self.index_starting(columns).is_some()
    }

    /// The position of an index whose columns are exactly `columns`.
    pub fn index_on(&self, columns: &[usize]) -> Option<usize> {
        self.schema
            .indexes
            .iter()
            .position(|i| i.is_physical() && i.columns == columns)
    }

    /// One above the highest hidden row id stored.
    pub fn peek_rowid(&self) -> i64 {
        self.next_rowid
    }

    /// Estimated bytes one row takes: the shared row, its entry and key in
    /// the row map, and an entry in each index's bucket (its key and a
    /// pointer to the row). Each distinct indexed value adds its bucket
    /// ([`bucket_bytes`]). Resident memory is higher still by what the
    /// allocator keeps free.
    fn stored_bytes(&self, key: &Key, row: &Row) -> usize {
        self.key_bytes(key) + Self::row_bytes(row)
    }

    /// The part of [`Table::stored_bytes`] the key makes: its entry in the
    /// row map and in each index.
    fn key_bytes(&self, key: &Key) -> usize {
        let entry = btree_entry::<Key, RowVersion>() + values_bytes(key);
        let indexes = self.schema.indexes.len() * row_entry_bytes(key);
        entry + indexes
    }

    /// The part the shared row makes.
    fn row_bytes(row: &Row) -> usize {
        allocated(16 + std::mem::size_of::<Row>()) + values_bytes(row)
    }

    /// Recounts [`Table::bytes`] (after the indexes changed).
    fn recount_bytes(&mut self) {
        let rows: usize = self
            .rows
            .iter()
            .map(|(k, rv)| self.stored_bytes(k, &rv.row))
            .sum();
        let counts: usize = self
            .indexes
            .iter()
            .flat_map(Index::distinct_values)
            .map(|values| bucket_bytes(values))
            .sum();
        self.bytes = rows + counts;
    }

    fn index_values(def: &IndexDef, row: &Row) -> Vec<Value> {
        def.columns.iter().map(|&c| row[c].clone()).collect()
    }

    /// An insert into an ephemeral table, which stores nothing: the table
    /// learns only the row id, so no id is handed out twice (even after
    /// compaction dropped the rows). Its version stays: nothing reads the
    /// table, so no transaction's reads are invalidated by an insert.
    pub fn note_ephemeral(&mut self, key: &Key) {
        assert!(
            self.schema.ephemeral && self.rows.is_empty(),
            "rows noted but not stored only in an empty ephemeral table"
        );
        if !self.schema.has_primary_key() {
            if let Some(Value::Int(id)) = key.first() {
                self.next_rowid = self.next_rowid.max(id + 1);
            }
        }
    }

    /// Stores `row` at `key`; returns the row it replaced.
    pub fn put(&mut self, key: Key, row: impl Into<Arc<Row>>, lsn: Lsn) -> Option<Arc<Row>> {
        self.put_version(key, row.into(), lsn).map(|old| old.row)
    }

    /// [`Table::put`], returning the version it replaced (row and LSN) from
    /// the same walk down the row map.
    pub fn put_version(&mut self, key: Key, row: Arc<Row>, lsn: Lsn) -> Option<RowVersion> {
        assert_eq!(row.len(), self.schema.columns.len(), "row width");
        assert!(!self.schema.ephemeral, "a row stored in an ephemeral table");
        if !self.schema.has_primary_key() {
            if let Some(Value::Int(id)) = key.first() {
                self.next_rowid = self.next_rowid.max(id + 1);
            }
        }
        let key_bytes = self.key_bytes(&key);
        self.bytes += key_bytes + Self::row_bytes(&row);
        self.version = lsn;
        if self.indexes_deferred || !self.has_physical_index() {
            // Without indexes the key is not needed past the row map: it
            // moves there (a restart stores every row this way).
            let old = self.rows.insert(key, RowVersion { row, lsn })?;
            self.bytes -= key_bytes + Self::row_bytes(&old.row);
            return Some(old);
        }
        // One walk down the row map stores the row and finds the old one.
        let old = self.rows.insert(
            key.clone(),
            RowVersion {
                row: row.clone(),
                lsn,
            },
        );
        if let Some(old) = &old {
            self.unindex(&key, &old.row);
        }
        for (i, def) in self.schema.indexes.iter().enumerate() {
            if def.is_physical() {
                let values = Self::index_values(def, &row);
                self.bytes += self.indexes[i].insert(values, key.clone(), row.clone());
            }
        }
        old
    }

    /// Removes the row at `key`; returns it.
    pub fn delete(&mut self, key: &Key, lsn: Lsn) -> Option<Arc<Row>> {
        let old = self.rows.remove(key)?;
        self.unindex(key, &old.row);
        self.version = lsn;
        Some(old.row)
    }

    /// Takes a removed row out of the indexes and the bytes.
    fn unindex(&mut self, key: &Key, row: &Row) {
        self.bytes -= self.stored_bytes(key, row);
        if self.indexes_deferred {
            return;
        }
        for (i, def) in self.schema.indexes.iter().enumerate() {
            if def.is_physical() {
                self.bytes -= self.indexes[i].remove(&Self::index_values(def, row), key);
            }
        }
    }

    /// Adds an index and fills it from the rows.
    pub fn add_index(&mut self, def: IndexDef) {
        let mut index = Index::default();
        // A deferred table builds it with the others at the end.
        if def.is_physical() && !self.indexes_deferred {
            for (k, rv) in &self.rows {
                index.insert(Self::index_values(&def, &rv.row), k.clone(), rv.row.clone());
            }
        }
        let mut schema = (*self.schema).clone();
        schema.indexes.push(def);
        self.schema = Arc::new(schema);
        self.indexes.push(index);
        self.recount_bytes();
    }

    /// Replaces the table's CHECK constraints and foreign keys (its rows
    /// and indexes stay as they are).
    pub fn set_constraints(
        &mut self,
        checks: Vec<crate::CheckDef>,
        foreign_keys: Vec<crate::ForeignKeyDef>,
    ) {
        let mut schema = (*self.schema).clone();
        schema.checks = checks;
        schema.foreign_keys = foreign_keys;
        self.schema = Arc::new(schema);
        self.shape += 1;
    }

    pub fn drop_index(&mut self, name: &str) -> bool {
        let Some(pos) = self.schema.indexes.iter().position(|i| i.name == name) else {
            return false;
        };
        let mut schema = (*self.schema).clone();
        schema.indexes.remove(pos);
        self.schema = Arc::new(schema);
        self.indexes.remove(pos);
        self.recount_bytes();
        true
    }

    /// Keys of other rows that hold `row`'s values in a unique index.
    pub fn unique_conflicts(&self, key: &Key, row: &Row) -> Vec<(String, Key)> {
        let mut out = Vec::new();
        for (i, def) in self.schema.indexes.iter().enumerate() {
            if !def.unique || !def.is_physical() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ColumnDef;
    use aqueduct_values::DataType;

    fn table() -> Table {
        let column = |name: &str, ty: DataType| ColumnDef {
            name: name.into(),
            ty,
            not_null: false,
            default: None,
            default_expr: None,
            identity: None,
        };
        Table::new(TableSchema {
            id: 1,
            name: "t".into(),
            columns: vec![column("a", DataType::Int8), column("b", DataType::Text)],
            primary_key: Vec::new(),
            indexes: Vec::new(),
            checks: vec![],
            foreign_keys: vec![],
            ephemeral: false,
            shard_key: None,
        })
    }

    /// A table of nullable `bigint` columns with a primary key and one
    /// index.
    fn int_table(columns: &[&str], primary_key: Vec<usize>, index: Vec<usize>) -> Table {
        Table::new(TableSchema {
            id: 1,
            name: "t".into(),
            columns: columns
                .iter()
                .map(|&name| ColumnDef::new(name, DataType::Int8))
                .collect(),
            primary_key,
            indexes: vec![IndexDef::on_columns("t_index", index, false)],
            ..TableSchema::default()
        })
    }

    /// Lookups by the primary key, its first column, an index's first
    /// column (whose second column holds NULLs, which sort last) and a
    /// column no index starts with all equal a filtered scan, counted too.
    #[test]
    fn matching_uses_keys_and_prefixes_and_equals_a_scan() {
        let mut t = int_table(&["a", "b", "c", "d"], vec![0, 1], vec![2, 3]);
        for i in 0..200i64 {
            let (a, b, c) = (i % 7, i, i % 5);
            let d = if i % 3 == 0 {
                Value::Null
            } else {
                Value::Int(i % 4)
            };
            t.put(
                vec![Value::Int(a), Value::Int(b)],
                vec![Value::Int(a), Value::Int(b), Value::Int(c), d],
                i as Lsn + 1,
            );
        }
        assert!(t.has_lookup(&[0, 1]) && t.has_lookup(&[0]) && t.has_lookup(&[2]));
        assert!(!t.has_lookup(&[1]) && !t.has_lookup(&[]));
        for (columns, values) in [
            (vec![0, 1], vec![Value::Int(3), Value::Int(17)]),
            (vec![0, 1], vec![Value::Int(3), Value::Int(18)]),
            (vec![0], vec![Value::Int(3)]),
            (vec![0], vec![Value::Int(9)]),
            (vec![2], vec![Value::Int(4)]),
            (vec![2], vec![Value::Int(0)]),
            (vec![2, 3], vec![Value::Int(4), Value::Int(1)]),
            (vec![2, 3], vec![Value::Int(4), Value::Null]),
            (vec![1], vec![Value::Int(42)]),
        ] {
            let mut got: Vec<Key> = t
                .matching(&columns, &values)
                .map(|(k, _)| k.clone())
                .collect();
            got.sort();
            let want: Vec<Key> = t
                .scan()
                .filter(|(_, rv)| matches(&rv.row, &columns, &values))
                .map(|(k, _)| k.clone())
                .collect();
            let counted: i64 = t
                .weighted_matching(&columns, &values, true)
                .iter()
                .map(|(r, w)| {
                    assert!(matches(r, &columns, &values));
                    w
                })
                .sum();
            assert_eq!(
                counted,
                want.len() as i64,
                "{columns:?} = {values:?} counted"
            );
            assert_eq!(got, want, "{columns:?} = {values:?}");
        }
    }

    /// After random puts, overwrites and deletes that grow buckets past a
    /// vector and shrink them to one row, every index lookup and count, by
    /// value and by prefix, equals a scan; clones keep what they saw while
    /// the table changes under them; the bytes equal a recount.
    #[test]
    fn index_lookups_and_counts_follow_writes() {
        let mut t = int_table(&["k", "a", "b"], vec![0], vec![1, 2]);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as i64
        };
        let value = |v: i64| if v == 0 { Value::Null } else { Value::Int(v) };
        let check = |t: &Table| {
            let lookup = |values: &[Value]| {
                let want: Vec<&Key> = t
                    .scan()
                    .filter(|(_, rv)| rv.row[1..1 + values.len()] == *values)
                    .map(|(k, _)| k)
                    .collect();
                let mut got: Vec<&Key> = t.index_rows(0, values).map(|(k, _)| k).collect();
                if values.len() == 2 {
                    assert!(got.is_sorted(), "{values:?} in key order");
                }
                got.sort();
                assert_eq!(got, want, "{values:?}");
                let counted = t.index_counted(0, values);
                let first = t.index_rows(0, values).next().map(|(_, row)| row);
                assert_eq!(counted.map(|(row, _)| row), first, "{values:?} first");
                let n = counted.map_or(0, |(_, n)| n);
                assert_eq!(n, want.len(), "{values:?} counted");
            };
            for a in 0..4 {
                for b in 0..3 {
                    lookup(&[value(a), value(b)]);
                }
                lookup(&[value(a)]);
            }
            let mut recounted = t.clone();
            recounted.recount_bytes();
            assert_eq!(t.bytes, recounted.bytes);
        };
        let mut lsn = 0;
        let mut clones = Vec::new();
        for round in 0..6000 {
            lsn += 1;
            let k = vec![Value::Int(next(600))];
            // Grow to about a hundred rows a value, then shrink to a few.
            let delete = if round < 3000 {
                next(4) == 0
            } else {
                next(8) != 0
            };
            if delete {
                t.delete(&k, lsn);
            } else {
                let row = vec![k[0].clone(), value(next(3)), value(next(2))];
                t.put(k, row, lsn);
            }
            if round % 1500 == 0 {
                check(&t);
                clones.push(t.clone());
            }
        }
        check(&t);
        assert!(t.len() < 100, "shrunk: {}", t.len());
        for clone in &clones {
            check(clone);
        }
        for i in 0..600 {
            t.delete(&vec![Value::Int(i)], lsn + 1);
        }
        assert_eq!((t.bytes, t.indexes[0].distinct_values().count()), (0, 0));
    }

    #[test]
    fn bytes_follow_rows_and_indexes() {
        let mut t = table();
        let row = |i: i64| vec![Value::Int(i % 7), Value::Text(format!("row {i}"))];
        for i in 0..100 {
            t.put(vec![Value::Int(i)], row(i), i as Lsn + 1);
        }
        let plain = t.bytes;
        assert!(plain > 100 * 100, "at least 100 bytes a row: {plain}");
        t.add_index(IndexDef::on_columns("t_a", vec![0], false));
        let indexed = t.bytes;
        assert!(
            indexed > plain,
            "an index adds bytes: {plain} then {indexed}"
        );
        // Overwriting with an equal row changes nothing; deleting every row
        // leaves nothing counted, index entries included.
        t.put(vec![Value::Int(3)], row(3), 200);
        assert_eq!(t.bytes, indexed);
        for i in 0..100 {
            t.delete(&vec![Value::Int(i)], 300 + i as Lsn);
        }
        assert_eq!(t.bytes, 0);
        t.drop_index("t_a");
        assert_eq!(t.bytes, 0);
    }
}
