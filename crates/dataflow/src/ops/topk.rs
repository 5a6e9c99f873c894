//! `ORDER BY ... LIMIT k OFFSET o`, per group: the output holds, for each
//! group, the rows at positions `[o, o + k)` of the group in sort order.
//!
//! State: per group, every row with its count, in sort order; ties are
//! broken by the whole row, so the window is a function of the group's
//! contents alone. After a delta the window of each touched group is
//! recomputed and the difference between the old and the new window emitted,
//! so when a row in the window is deleted, the next one moves in.
//!
//! Without a limit and an offset the window is the whole input: the operator
//! passes deltas through and keeps no state.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use aqueduct_expr::SqlError;
use aqueduct_values::Value;

use super::columns;
use crate::{consolidate, stored_bytes, Delta, Operator, Row};

/// One `ORDER BY` column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortColumn {
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
}

impl SortColumn {
    /// `column ASC` (PostgreSQL: NULLS LAST).
    pub fn asc(column: usize) -> SortColumn {
        SortColumn {
            column,
            descending: false,
            nulls_first: false,
        }
    }

    /// `column DESC` (PostgreSQL: NULLS FIRST).
    pub fn desc(column: usize) -> SortColumn {
        SortColumn {
            column,
            descending: true,
            nulls_first: true,
        }
    }
}

/// Compares two rows by `order`, as `ORDER BY` sorts them (the order a TopK
/// keeps its rows in, ties left equal).
pub fn compare_rows(order: &[SortColumn], a: &Row, b: &Row) -> std::cmp::Ordering {
    let key = |r: &Row| -> Vec<Part> { order.iter().map(|s| part(s, &r[s.column])).collect() };
    key(a).cmp(&key(b))
}

fn part(s: &SortColumn, v: &Value) -> Part {
    let null_rank = match (v.is_null(), s.nulls_first) {
        (false, _) => 1,
        (true, true) => 0,
        (true, false) => 2,
    };
    let value = if s.descending {
        Directed::Desc(Reverse(v.clone()))
    } else {
        Directed::Asc(v.clone())
    };
    Part { null_rank, value }
}

/// One sort column of a row, ordered as the `SortColumn` says: NULLs by
/// `null_rank` (0 before the values, 2 after), values ascending or reversed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Part {
    null_rank: u8,
    value: Directed,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Directed {
    Asc(Value),
    Desc(Reverse<Value>),
}

/// A row's place in its group: its sort columns, then the row itself.
type Place = (Vec<Part>, Row);

pub struct TopK {
    group_by: Vec<usize>,
    order: Vec<SortColumn>,
    limit: Option<usize>,
    offset: usize,
    /// Group key → rows in sort order → count.
    groups: BTreeMap<Row, BTreeMap<Place, i64>>,
    bytes: i64,
}

impl TopK {
    pub fn new(
        group_by: Vec<usize>,
        order: Vec<SortColumn>,
        limit: Option<usize>,
        offset: usize,
    ) -> TopK {
        TopK {
            group_by,
            order,
            limit,
            offset,
            groups: BTreeMap::new(),
            bytes: 0,
        }
    }

    fn place(&self, row: Row) -> Place {
        let parts = self.order.iter().map(|s| part(s, &row[s.column])).collect();
        (parts, row)
    }

    /// The rows of a group at positions `[offset, offset + limit)`.
    fn window(&self, key: &Row) -> Vec<(Row, i64)> {
        let Some(rows) = self.groups.get(key) else {
            return Vec::new();
        };
        let mut skip = self.offset as i64;
        let mut take = self.limit.map_or(i64::MAX, |l| l as i64);
        let mut out = Vec::new();
        for ((_, row), &c) in rows {
            if take == 0 {
                break;
            }
            let skipped = c.min(skip);
            skip -= skipped;
            let n = (c - skipped).min(take);
            if n > 0 {
                take -= n;
                out.push((row.clone(), n));
            }
        }
        out
    }

    fn unbounded(&self) -> bool {
        self.limit.is_none() && self.offset == 0
    }
}

impl Operator for TopK {
    fn name(&self) -> &'static str {
        "topk"
    }

    fn signature(&self) -> String {
        let order: Vec<String> = self
            .order
            .iter()
            .map(|s| {
                format!(
                    "#{} {} nulls {}",
                    s.column,
                    if s.descending { "desc" } else { "asc" },
                    if s.nulls_first { "first" } else { "last" }
                )
            })
            .collect();
        let limit = self.limit.map_or("all".to_string(), |l| l.to_string());
        format!(
            "topk[group {:?}; order {}; limit {limit} offset {}]",
            self.group_by,
            order.join(", "),
            self.offset
        )
    }

    fn process(&mut self, _port: usize, mut delta: Delta) -> Result<Delta, SqlError> {
        consolidate(&mut delta);
        if self.unbounded() {
            return Ok(delta);
        }
        // Touched groups and their window before this delta.
        let mut before: BTreeMap<Row, Vec<(Row, i64)>> = BTreeMap::new();
        for (row, w) in delta {
            let key = columns(&row, &self.group_by);
            if !before.contains_key(&key) {
                let old = self.window(&key);
                before.insert(key.clone(), old);
            }
            let place = self.place(row);
            if !self.groups.contains_key(&key) {
                self.bytes += stored_bytes(&key);
            }
            let rows = self.groups.entry(key).or_default();
            match rows.get_mut(&place) {
                Some(c) if *c + w == 0 => {
                    self.bytes -= 2 * stored_bytes(&place.1);
                    rows.remove(&place);
                }
                Some(c) => *c += w,
                None => {
                    // The row and its sort values (about as large again).
                    self.bytes += 2 * stored_bytes(&place.1);
                    rows.insert(place, w);
                }
            }
        }
        let mut out = Vec::new();
        for (key, old) in before {
            out.extend(self.window(&key));
            out.extend(old.into_iter().map(|(r, c)| (r, -c)));
            if self.groups.get(&key).is_some_and(BTreeMap::is_empty) {
                self.groups.remove(&key);
                self.bytes -= stored_bytes(&key);
            }
        }
        consolidate(&mut out);
        Ok(out)
    }

    fn state_rows(&self) -> usize {
        self.groups.values().map(BTreeMap::len).sum()
    }

    fn state_bytes(&self) -> usize {
        self.bytes.max(0) as usize
    }

    /// Groups never span keys when every key column is a group column.
    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        let within_groups = key.iter().all(|k| self.group_by.contains(k));
        (within_groups || self.unbounded()).then(|| vec![Some(key.to_vec())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};
    use std::cmp::Ordering;

    fn r(v: &[Option<i64>]) -> Row {
        v.iter()
            .map(|x| x.map_or(Value::Null, Value::Int))
            .collect()
    }

    #[test]
    fn the_next_row_moves_in_when_one_in_the_window_goes() {
        // Top 2 by column 1 descending, per column 0.
        let mut t = TopK::new(vec![0], vec![SortColumn::desc(1)], Some(2), 0);
        let out = t
            .process(
                0,
                vec![
                    (r(&[Some(1), Some(5)]), 1),
                    (r(&[Some(1), Some(9)]), 1),
                    (r(&[Some(1), Some(7)]), 1),
                    (r(&[Some(2), Some(1)]), 1),
                ],
            )
            .unwrap();
        assert_eq!(
            out,
            vec![
                (r(&[Some(1), Some(7)]), 1),
                (r(&[Some(1), Some(9)]), 1),
                (r(&[Some(2), Some(1)]), 1),
            ]
        );
        let out = t.process(0, vec![(r(&[Some(1), Some(9)]), -1)]).unwrap();
        assert_eq!(
            out,
            vec![(r(&[Some(1), Some(5)]), 1), (r(&[Some(1), Some(9)]), -1)]
        );
        // A row below the window changes nothing.
        assert!(t
            .process(0, vec![(r(&[Some(1), Some(0)]), 1)])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn duplicates_fill_the_window_by_count() {
        let mut t = TopK::new(vec![], vec![SortColumn::asc(0)], Some(3), 1);
        let out = t
            .process(0, vec![(r(&[Some(1)]), 2), (r(&[Some(2)]), 5)])
            .unwrap();
        assert_eq!(out, vec![(r(&[Some(1)]), 1), (r(&[Some(2)]), 2)]);
    }

    #[test]
    fn nulls_sort_where_the_flags_say() {
        let rows = || vec![(r(&[None]), 1), (r(&[Some(1)]), 1)];
        let first = |s: SortColumn| {
            let mut t = TopK::new(vec![], vec![s], Some(1), 0);
            t.process(0, rows()).unwrap()
        };
        // PostgreSQL's defaults: ASC puts NULLs last, DESC first.
        assert_eq!(first(SortColumn::asc(0)), vec![(r(&[Some(1)]), 1)]);
        assert_eq!(first(SortColumn::desc(0)), vec![(r(&[None]), 1)]);
        let asc_nulls_first = SortColumn {
            nulls_first: true,
            ..SortColumn::asc(0)
        };
        assert_eq!(first(asc_nulls_first), vec![(r(&[None]), 1)]);
    }

    #[test]
    fn without_limit_or_offset_it_passes_through() {
        let mut t = TopK::new(vec![0], vec![SortColumn::asc(0)], None, 0);
        let d = vec![(r(&[Some(1)]), 2)];
        assert_eq!(t.process(0, d.clone()).unwrap(), d);
        assert_eq!(t.state_rows(), 0);
    }

    /// The reference: sort each group as PostgreSQL would (ties by the
    /// whole row), then skip and take.
    fn recompute(
        rows: &[Row],
        group_by: &[usize],
        order: &[SortColumn],
        limit: Option<usize>,
        offset: usize,
    ) -> Vec<Row> {
        let mut groups: BTreeMap<Row, Vec<Row>> = BTreeMap::new();
        for row in rows {
            groups
                .entry(columns(row, group_by))
                .or_default()
                .push(row.clone());
        }
        let cmp = |a: &Row, b: &Row| {
            for s in order {
                let (x, y) = (&a[s.column], &b[s.column]);
                let o = match (x.is_null(), y.is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) if s.nulls_first => Ordering::Less,
                    (true, false) => Ordering::Greater,
                    (false, true) if s.nulls_first => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    _ if s.descending => y.sql_cmp(x).unwrap(),
                    _ => x.sql_cmp(y).unwrap(),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
            a.cmp(b)
        };
        let mut out = Vec::new();
        for (_, mut rows) in groups {
            rows.sort_by(cmp);
            out.extend(
                rows.into_iter()
                    .skip(offset)
                    .take(limit.unwrap_or(usize::MAX)),
            );
        }
        out
    }

    #[test]
    fn matches_recompute() {
        let nulls_first_asc = SortColumn {
            nulls_first: true,
            ..SortColumn::asc(2)
        };
        let desc_nulls_last = SortColumn {
            nulls_first: false,
            ..SortColumn::desc(1)
        };
        let no_group: Vec<usize> = vec![];
        let cases = [
            (vec![0], vec![SortColumn::desc(1)], Some(2), 1),
            (
                no_group.clone(),
                vec![SortColumn::asc(0), desc_nulls_last],
                Some(3),
                0,
            ),
            (vec![0], vec![nulls_first_asc], None, 2),
            (vec![0, 1], vec![SortColumn::asc(2)], Some(1), 0),
            (no_group, vec![SortColumn::asc(1)], Some(0), 0),
        ];
        for (group_by, order, limit, offset) in cases {
            let (g, o) = (group_by.clone(), order.clone());
            check_against_recompute(
                || Box::new(TopK::new(group_by.clone(), order.clone(), limit, offset)),
                |inputs| recompute(&inputs[0], &g, &o, limit, offset),
                1,
                int_rows(3),
            );
        }
    }
}
