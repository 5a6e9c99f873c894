//! A secondary index: the rows of each distinct indexed value, in one
//! bucket per value.
//!
//! A write walks the tree of distinct values once and then changes a
//! bucket that is usually small; a lookup of a value reads its bucket, and
//! counting a value's rows reads the bucket's length without walking them.
//! Buckets are persistent like the tree: a clone of an index shares them,
//! and a write copies only the bucket (and path) it changes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use aqueduct_values::Value;
use imbl::OrdMap;

use crate::table::{above_prefix, btree_entry, values_bytes, Key, Row};

/// The most rows a bucket keeps in a sorted vector; a value with more has
/// a B-tree of its own. A vector of this many entries is cheaper to search
/// and copy than a tree node, which is allocated at full size (64 entries).
const FEW_MAX: usize = 32;

/// Indexed values to the rows that hold them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    buckets: OrdMap<Vec<Value>, Bucket>,
}

/// The rows of one indexed value, by key. Never empty.
#[derive(Clone, Debug)]
enum Bucket {
    /// One row (every bucket of a unique index, but for NULLs): no
    /// allocation.
    One(Key, Arc<Row>),
    /// Two to [`FEW_MAX`] rows, sorted by key; shared until written.
    Few(Arc<Vec<(Key, Arc<Row>)>>),
    /// More rows than [`FEW_MAX`] (half of it on the way down).
    Many(OrdMap<Key, Arc<Row>>),
}

impl Bucket {
    fn len(&self) -> usize {
        match self {
            Bucket::One(..) => 1,
            Bucket::Few(rows) => rows.len(),
            Bucket::Many(rows) => rows.len(),
        }
    }

    /// The first row and the number of rows.
    fn first_and_len(&self) -> (&Arc<Row>, usize) {
        let (_, row) = self.iter().next().expect("a bucket is never empty");
        (row, self.len())
    }

    fn iter(&self) -> BucketIter<'_> {
        match self {
            Bucket::One(key, row) => BucketIter::One(Some((key, row))),
            Bucket::Few(rows) => BucketIter::Few(rows.iter()),
            Bucket::Many(rows) => BucketIter::Many(rows.iter()),
        }
    }

    /// Adds a row at a key the bucket does not hold.
    fn insert(&mut self, key: Key, row: Arc<Row>) {
        match self {
            Bucket::One(..) => {
                let Bucket::One(k, r) = std::mem::replace(self, Bucket::Many(OrdMap::new())) else {
                    unreachable!()
                };
                assert!(k != key, "index entry stored twice");
                let rows = if k < key {
                    vec![(k, r), (key, row)]
                } else {
                    vec![(key, row), (k, r)]
                };
                *self = Bucket::Few(Arc::new(rows));
            }
            Bucket::Few(rows) => {
                let at = rows
                    .binary_search_by(|(k, _)| k.cmp(&key))
                    .expect_err("index entry stored twice");
                if rows.len() < FEW_MAX {
                    Arc::make_mut(rows).insert(at, (key, row));
                } else {
                    let few = Arc::unwrap_or_clone(std::mem::take(rows));
                    let mut tree: OrdMap<Key, Arc<Row>> = few.into_iter().collect();
                    tree.insert(key, row);
                    *self = Bucket::Many(tree);
                }
            }
            Bucket::Many(rows) => {
                let replaced = rows.insert(key, row);
                assert!(replaced.is_none(), "index entry stored twice");
            }
        }
    }

    /// Removes the row at `key`; returns whether the bucket is now empty.
    fn remove(&mut self, key: &Key) -> bool {
        match self {
            Bucket::One(k, _) => {
                assert!(k == key, "index entry of a stored row");
                true
            }
            Bucket::Few(rows) => {
                let at = rows
                    .binary_search_by(|(k, _)| k.cmp(key))
                    .expect("index entry of a stored row");
                let rows = Arc::make_mut(rows);
                rows.remove(at);
                if rows.len() == 1 {
                    let (k, r) = rows.pop().expect("one row left");
                    *self = Bucket::One(k, r);
                }
                false
            }
            Bucket::Many(rows) => {
                let removed = rows.remove(key);
                assert!(removed.is_some(), "index entry of a stored row");
                if rows.len() <= FEW_MAX / 2 {
                    let few: Vec<_> = std::mem::take(rows).into_iter().collect();
                    *self = Bucket::Few(Arc::new(few));
                }
                false
            }
        }
    }
}

/// A bucket's rows in key order.
enum BucketIter<'a> {
    One(Option<(&'a Key, &'a Arc<Row>)>),
    Few(std::slice::Iter<'a, (Key, Arc<Row>)>),
    Many(imbl::ordmap::Iter<'a, Key, Arc<Row>, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a> Iterator for BucketIter<'a> {
    type Item = (&'a Key, &'a Arc<Row>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            BucketIter::One(one) => one.take(),
            BucketIter::Few(rows) => rows.next().map(|(k, r)| (k, r)),
            BucketIter::Many(rows) => rows.next(),
        }
    }
}

impl Index {
    /// An index of `entries` (indexed values, key, row) given in key order,
    /// built in one pass: each value's rows arrive sorted, so every bucket
    /// is made whole, with no bucket looked up in the tree per row (a
    /// restart builds its indexes this way, after the rows are replayed).
    pub(crate) fn build(entries: impl Iterator<Item = (Vec<Value>, Key, Arc<Row>)>) -> Index {
        let mut groups: BTreeMap<Vec<Value>, Vec<(Key, Arc<Row>)>> = BTreeMap::new();
        for (values, key, row) in entries {
            let rows = groups.entry(values).or_default();
            debug_assert!(
                rows.last().is_none_or(|(k, _)| *k < key),
                "keys out of order"
            );
            rows.push((key, row));
        }
        let buckets = groups
            .into_iter()
            .map(|(values, mut rows)| {
                let bucket = match rows.len() {
                    1 => {
                        let (key, row) = rows.pop().expect("one row");
                        Bucket::One(key, row)
                    }
                    n if n <= FEW_MAX => Bucket::Few(Arc::new(rows)),
                    _ => Bucket::Many(rows.into_iter().collect()),
                };
                (values, bucket)
            })
            .collect();
        Index { buckets }
    }

    /// Adds `row` at `key` under `values`; returns the bytes of a new
    /// bucket (each row's own entry is counted by the table).
    pub(crate) fn insert(&mut self, values: Vec<Value>, key: Key, row: Arc<Row>) -> usize {
        if let Some(bucket) = self.buckets.get_mut(&values) {
            bucket.insert(key, row);
            return 0;
        }
        let bytes = bucket_bytes(&values);
        self.buckets.insert(values, Bucket::One(key, row));
        bytes
    }

    /// Removes the row at `key` under `values`; returns the bytes of a
    /// bucket that went with it.
    pub(crate) fn remove(&mut self, values: &[Value], key: &Key) -> usize {
        let bucket = self
            .buckets
            .get_mut(values)
            .expect("index bucket of a stored row");
        if !bucket.remove(key) {
            return 0;
        }
        self.buckets.remove(values);
        bucket_bytes(values)
    }

    /// The keys and rows whose values begin with (or, all `width` given,
    /// equal) `values`, in order of values, then key.
    pub(crate) fn rows<'a>(
        &'a self,
        values: &[Value],
        width: usize,
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Row>)> + 'a> {
        if values.len() == width {
            return match self.buckets.get(values) {
                Some(bucket) => Box::new(bucket.iter()),
                None => Box::new(std::iter::empty()),
            };
        }
        Box::new(self.prefix(values, width).flat_map(Bucket::iter))
    }

    /// The first row whose values begin with (or, all `width` given,
    /// equal) `values`, and how many there are: one bucket's first row and
    /// length, or, under a prefix, the first bucket's first row and the
    /// lengths of all. No row is walked. `None` when no row matches.
    pub(crate) fn counted(&self, values: &[Value], width: usize) -> Option<(&Arc<Row>, usize)> {
        if values.len() == width {
            return self.buckets.get(values).map(Bucket::first_and_len);
        }
        let mut buckets = self.prefix(values, width);
        let (row, first) = buckets.next()?.first_and_len();
        Some((row, first + buckets.map(Bucket::len).sum::<usize>()))
    }

    /// The buckets whose values begin with `values` (exact bounds: the
    /// prefix, then NULLs, which sort last).
    fn prefix<'a>(&'a self, values: &[Value], width: usize) -> impl Iterator<Item = &'a Bucket> {
        let lo = values.to_vec();
        let hi = above_prefix(values, width);
        self.buckets
            .range((Bound::Included(lo), Bound::Excluded(hi)))
            .map(|(_, bucket)| bucket)
    }

    /// The values of every bucket (each distinct value once).
    pub(crate) fn distinct_values(&self) -> impl Iterator<Item = &Vec<Value>> {
        self.buckets.keys()
    }
}

/// Bytes of one distinct value's bucket entry in the tree of values.
pub(crate) fn bucket_bytes(values: &[Value]) -> usize {
    btree_entry::<Vec<Value>, Bucket>() + values_bytes(values)
}

/// Bytes of one row's entry in a bucket: its key and a pointer to the row.
pub(crate) fn row_entry_bytes(key: &Key) -> usize {
    std::mem::size_of::<(Key, Arc<Row>)>() * 3 / 2 + values_bytes(key)
}
