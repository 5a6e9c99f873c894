//! Set semantics (`SELECT DISTINCT`, and `UNION` after a union): each row
//! comes out once while its count is positive.
//!
//! State: each row's count. A row is emitted (+1) when its count goes from
//! zero to positive and retracted (-1) when it returns to zero, so the output
//! always holds exactly the rows with a positive count, once each.

use aqueduct_expr::SqlError;

use crate::{consolidate, stored_bytes, Delta, FastMap, Operator, Row};

#[derive(Default)]
pub struct Distinct {
    counts: FastMap<Row, i64>,
    bytes: i64,
}

impl Distinct {
    pub fn new() -> Distinct {
        Distinct::default()
    }
}

impl Operator for Distinct {
    fn name(&self) -> &'static str {
        "distinct"
    }

    fn signature(&self) -> String {
        "distinct".into()
    }

    fn process(&mut self, _port: usize, mut delta: Delta) -> Result<Delta, SqlError> {
        // Net changes only: one transition per row at most.
        consolidate(&mut delta);
        let mut out = Vec::new();
        for (row, w) in delta {
            let before = self.counts.get(&row).copied().unwrap_or(0);
            let after = before + w;
            match (before > 0, after > 0) {
                (false, true) => out.push((row.clone(), 1)),
                (true, false) => out.push((row.clone(), -1)),
                _ => {}
            }
            if after == 0 {
                self.counts.remove(&row);
                self.bytes -= stored_bytes(&row);
            } else {
                if before == 0 {
                    self.bytes += stored_bytes(&row);
                }
                self.counts.insert(row, after);
            }
        }
        // Sorted already: the input was consolidated.
        Ok(out)
    }

    fn state_rows(&self) -> usize {
        self.counts.len()
    }

    fn state_bytes(&self) -> usize {
        self.bytes.max(0) as usize
    }

    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        Some(vec![Some(key.to_vec())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{bag, check_against_recompute, int_rows};
    use aqueduct_values::Value;

    #[test]
    fn emits_on_first_copy_and_retracts_on_last() {
        let r = vec![Value::Int(1)];
        let mut d = Distinct::new();
        assert_eq!(
            d.process(0, vec![(r.clone(), 2)]).unwrap(),
            vec![(r.clone(), 1)]
        );
        assert!(d.process(0, vec![(r.clone(), 1)]).unwrap().is_empty());
        assert!(d.process(0, vec![(r.clone(), -2)]).unwrap().is_empty());
        assert_eq!(d.process(0, vec![(r.clone(), -1)]).unwrap(), vec![(r, -1)]);
        assert_eq!(d.state_rows(), 0);
    }

    #[test]
    fn a_delete_and_reinsert_in_one_delta_emits_nothing() {
        let r = vec![Value::Int(1)];
        let mut d = Distinct::new();
        d.process(0, vec![(r.clone(), 1)]).unwrap();
        assert!(d
            .process(0, vec![(r.clone(), -1), (r, 1)])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn matches_recompute() {
        check_against_recompute(
            || Box::new(Distinct::new()),
            |inputs| bag(inputs[0].iter().cloned()).into_keys().collect(),
            1,
            int_rows(2),
        );
    }
}
