//! Computes output columns from each row (expressions over the input row).

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_values::Value;

use crate::{Delta, Operator};

pub struct Project {
    outputs: Vec<Expr>,
    /// Per output, the input column it can take out of the input row
    /// instead of cloning: a column no later output reads.
    moves: Vec<Option<usize>>,
}

impl Project {
    pub fn new(outputs: Vec<Expr>) -> Project {
        let moves = outputs
            .iter()
            .enumerate()
            .map(|(i, e)| match e {
                Expr::Column(c) => outputs[i + 1..]
                    .iter()
                    .all(|later| matches!(later, Expr::Column(d) if d != c))
                    .then_some(*c),
                _ => None,
            })
            .collect();
        Project { outputs, moves }
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

    /// The input columns passed through, when every output is one (a
    /// computed output's columns are not worked out: all, then).
    fn input_columns(&self, _port: usize) -> Option<Vec<usize>> {
        let mut cols = self
            .outputs
            .iter()
            .map(|e| match e {
                Expr::Column(c) => Some(*c),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()?;
        cols.sort_unstable();
        cols.dedup();
        Some(cols)
    }

    /// Each output row is written into its input row's allocation: no
    /// allocation per row (a fill may bring millions).
    fn process(&mut self, _port: usize, mut delta: Delta) -> Result<Delta, SqlError> {
        let mut values = Vec::with_capacity(self.outputs.len());
        for (row, _) in &mut delta {
            for (e, moved) in self.outputs.iter().zip(&self.moves) {
                values.push(match moved {
                    Some(c) => std::mem::replace(&mut row[*c], Value::Null),
                    None => e.eval(&Env::new(row, &[]))?,
                });
            }
            row.clear();
            row.append(&mut values);
        }
        Ok(delta)
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

    #[test]
    fn columns_are_taken_only_when_no_later_output_reads_them() {
        let text = |s: &str| Value::Text(s.into());
        let twice = Expr::Binary(
            BinOp::Add,
            Box::new(Expr::Column(1)),
            Box::new(Expr::Column(1)),
        );
        let outputs = vec![
            Expr::Column(2),
            Expr::Column(0),
            twice,
            Expr::Column(2),
            Expr::Column(0),
        ];
        let mut p = Project::new(outputs);
        assert_eq!(p.moves, vec![None, None, None, Some(2), Some(0)]);
        let row = vec![text("a"), Value::Int(1), text("b")];
        let out = p.process(0, vec![(row, -2)]).unwrap();
        let expected = vec![text("b"), text("a"), Value::Int(2), text("b"), text("a")];
        assert_eq!(out, vec![(expected, -2)]);
    }
}
