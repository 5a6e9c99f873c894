//! `UNION ALL` of several inputs of the same width: every delta passes
//! through unchanged, so the output is the sum of the inputs as bags.
//! (`UNION` is this followed by `Distinct`.) No state.

use aqueduct_expr::SqlError;

use super::no_such_input;
use crate::{Delta, Operator};

pub struct Union {
    inputs: usize,
    width: usize,
}

impl Union {
    pub fn new(inputs: usize, width: usize) -> Union {
        assert!(inputs >= 1, "a union needs an input");
        Union { inputs, width }
    }
}

impl Operator for Union {
    fn name(&self) -> &'static str {
        "union"
    }

    fn signature(&self) -> String {
        format!("union all[{} inputs, width {}]", self.inputs, self.width)
    }

    fn inputs(&self) -> usize {
        self.inputs
    }

    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        Some(vec![Some(key.to_vec()); self.inputs])
    }

    fn process(&mut self, port: usize, delta: Delta) -> Result<Delta, SqlError> {
        if port >= self.inputs {
            return Err(no_such_input("union", port));
        }
        if let Some((row, _)) = delta.iter().find(|(r, _)| r.len() != self.width) {
            return Err(SqlError::new(
                "XX000",
                format!(
                    "union input {port} has a row of width {}, not {}",
                    row.len(),
                    self.width
                ),
            ));
        }
        Ok(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};
    use aqueduct_values::Value;

    #[test]
    fn passes_every_input_through() {
        let mut u = Union::new(3, 1);
        let d = vec![(vec![Value::Int(1)], 2), (vec![Value::Null], -1)];
        for port in 0..3 {
            assert_eq!(u.process(port, d.clone()).unwrap(), d);
        }
        assert_eq!(u.process(3, d).unwrap_err().code, "XX000");
        let wide = vec![(vec![Value::Int(1), Value::Int(2)], 1)];
        assert_eq!(u.process(0, wide).unwrap_err().code, "XX000");
    }

    #[test]
    fn matches_recompute() {
        check_against_recompute(
            || Box::new(Union::new(3, 2)),
            |inputs| inputs.concat(),
            3,
            int_rows(2),
        );
    }
}
