//! Computes output columns from each row (expressions over the input row).

use aqueduct_expr::{Env, Expr, SqlError};

use crate::{Delta, Operator};

pub struct Project {
    outputs: Vec<Expr>,
}

impl Project {
    pub fn new(outputs: Vec<Expr>) -> Project {
        Project { outputs }
    }
}

impl Operator for Project {
    fn name(&self) -> &'static str {
        "project"
    }

    fn signature(&self) -> String {
        format!("project{:?}", self.outputs)
    }

    /// A key column that is an input column passed through traces to it; a
    /// computed one does not trace.
    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        let cols = key
            .iter()
            .map(|&k| match self.outputs.get(k)? {
                Expr::Column(c) => Some(*c),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()?;
        Some(vec![Some(cols)])
    }

    fn process(&mut self, _port: usize, delta: Delta) -> Result<Delta, SqlError> {
        delta
            .into_iter()
            .map(|(row, w)| {
                let env = Env {
                    row: &row,
                    params: &[],
                };
                let out = self
                    .outputs
                    .iter()
                    .map(|e| e.eval(&env))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((out, w))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{check_against_recompute, int_rows};
    use aqueduct_expr::BinOp;
    use aqueduct_values::Value;

    #[test]
    fn computes_expressions_and_keeps_duplicates() {
        let sum = Expr::Binary(
            BinOp::Add,
            Box::new(Expr::Column(0)),
            Box::new(Expr::Column(1)),
        );
        check_against_recompute(
            move || Box::new(Project::new(vec![sum.clone()])),
            |inputs| {
                inputs[0]
                    .iter()
                    .map(|r| match (&r[0], &r[1]) {
                        (Value::Int(a), Value::Int(b)) => vec![Value::Int(a + b)],
                        _ => vec![Value::Null],
                    })
                    .collect()
            },
            1,
            int_rows(2),
        );
    }
}
