//! Keeps the rows for which a predicate is true (not false, not NULL).

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_values::Value;

use crate::{Delta, Operator};

pub struct Filter {
    predicate: Expr,
}

impl Filter {
    pub fn new(predicate: Expr) -> Filter {
        Filter { predicate }
    }
}

impl Operator for Filter {
    fn name(&self) -> &'static str {
        "filter"
    }

    fn signature(&self) -> String {
        format!("filter[{:?}]", self.predicate)
    }

    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        Some(vec![Some(key.to_vec())])
    }

    fn process(&mut self, _port: usize, delta: Delta) -> Result<Delta, SqlError> {
        let mut out = Vec::with_capacity(delta.len());
        for (row, w) in delta {
            let keep = matches!(
                self.predicate.eval(&Env::new(&row, &[]))?,
                Value::Bool(true)
            );
            if keep {
                out.push((row, w));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};
    use aqueduct_expr::BinOp;

    fn gt(col: usize, v: i64) -> Expr {
        Expr::Binary(
            BinOp::Gt,
            Box::new(Expr::Column(col)),
            Box::new(Expr::Literal(Value::Int(v))),
        )
    }

    #[test]
    fn passes_true_rows_with_their_weights() {
        let mut f = Filter::new(gt(0, 1));
        let out = f
            .process(0, vec![(vec![Value::Int(1)], 1), (vec![Value::Int(2)], -2)])
            .unwrap();
        assert_eq!(out, vec![(vec![Value::Int(2)], -2)]);
        // NULL is not true.
        assert!(f
            .process(0, vec![(vec![Value::Null], 1)])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn matches_recompute() {
        check_against_recompute(
            || Box::new(Filter::new(gt(1, 3))),
            |inputs| {
                inputs[0]
                    .iter()
                    .filter(|r| matches!(&r[1], Value::Int(v) if *v > 3))
                    .cloned()
                    .collect()
            },
            1,
            int_rows(2),
        );
    }
}
