//! Set-returning functions in a select list (`SELECT id, unnest(tags)
//! FROM t`): each input row becomes as many rows as its longest function
//! makes, with the functions' values appended in lockstep (a shorter one
//! is NULL past its end, as in PostgreSQL). A row for which every function
//! makes nothing is dropped. Each row's expansion depends on that row
//! alone, so a retraction retracts exactly what its insertion made.

use aqueduct_expr::{Env, Expr, SqlError};
use aqueduct_values::Value;

use crate::{Delta, Operator};

/// A set-returning function and its bound arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum SetFunction {
    /// `unnest(array)`: its elements.
    Unnest(Expr),
    /// `generate_subscripts(array, 1)`: 1 to its length.
    Subscripts(Expr, Expr),
    /// `generate_series(start, stop [, step])` over integers.
    Series(Expr, Expr, Option<Expr>),
    /// `WITH ORDINALITY`: the number of each row the others make, from 1.
    Ordinality,
}

/// The most rows one input row may expand to.
pub const MAX_EXPANSION: usize = 10_000_000;

impl SetFunction {
    fn values(&self, env: &Env<'_>) -> Result<Vec<Value>, SqlError> {
        let ints = |a: &Expr| -> Result<Option<i64>, SqlError> {
            match a.eval(env)? {
                Value::Int(i) => Ok(Some(i)),
                Value::Null => Ok(None),
                other => Err(SqlError::new(
                    "42883",
                    format!(
                        "a set-returning function takes an integer, not {}",
                        other.kind_name()
                    ),
                )),
            }
        };
        Ok(match self {
            SetFunction::Ordinality => Vec::new(),
            SetFunction::Unnest(e) => match e.eval(env)? {
                Value::Array(items) => items,
                _ => Vec::new(),
            },
            SetFunction::Subscripts(e, dim) => match (e.eval(env)?, ints(dim)?) {
                (Value::Array(items), Some(1)) => {
                    (1..=items.len() as i64).map(Value::Int).collect()
                }
                _ => Vec::new(),
            },
            SetFunction::Series(a, b, step) => {
                let step = match step {
                    Some(s) => ints(s)?,
                    None => Some(1),
                };
                let (Some(a), Some(b), Some(step)) = (ints(a)?, ints(b)?, step) else {
                    return Ok(Vec::new());
                };
                if step == 0 {
                    return Err(SqlError::new("22023", "step size cannot equal zero"));
                }
                let mut out = Vec::new();
                let mut v = a;
                while (step > 0 && v <= b) || (step < 0 && v >= b) {
                    if out.len() >= MAX_EXPANSION {
                        return Err(SqlError::new(
                            "54000",
                            format!("generate_series would make more than {MAX_EXPANSION} rows"),
                        ));
                    }
                    out.push(Value::Int(v));
                    match v.checked_add(step) {
                        Some(n) => v = n,
                        None => break,
                    }
                }
                out
            }
        })
    }
}

pub struct Expand {
    functions: Vec<SetFunction>,
    /// Columns of the input rows (the functions' values come after).
    input_width: usize,
}

impl Expand {
    pub fn new(functions: Vec<SetFunction>, input_width: usize) -> Expand {
        Expand {
            functions,
            input_width,
        }
    }
}

impl Operator for Expand {
    fn name(&self) -> &'static str {
        "expand"
    }

    fn signature(&self) -> String {
        format!("expand[{:?};{}]", self.functions, self.input_width)
    }

    fn trace_key(&self, key: &[usize]) -> Option<Vec<Option<Vec<usize>>>> {
        // Only the input's own columns trace back to it.
        key.iter()
            .all(|&c| c < self.input_width)
            .then(|| vec![Some(key.to_vec())])
    }

    fn process(&mut self, _port: usize, delta: Delta) -> Result<Delta, SqlError> {
        let mut out = Vec::with_capacity(delta.len());
        for (row, w) in delta {
            let env = Env::new(&row, &[]);
            let sets = self
                .functions
                .iter()
                .map(|f| f.values(&env))
                .collect::<Result<Vec<_>, _>>()?;
            let n = sets.iter().map(Vec::len).max().unwrap_or(0);
            for k in 0..n {
                let mut r = row.clone();
                r.extend(sets.iter().zip(&self.functions).map(|(s, f)| match f {
                    SetFunction::Ordinality => Value::Int(k as i64 + 1),
                    _ => s.get(k).cloned().unwrap_or(Value::Null),
                }));
                out.push((r, w));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn functions_run_in_lockstep_and_retract_what_they_made() {
        let mut e = Expand::new(
            vec![
                SetFunction::Unnest(Expr::Column(1)),
                SetFunction::Subscripts(Expr::Column(1), Expr::Literal(Value::Int(1))),
                SetFunction::Series(
                    Expr::Literal(Value::Int(1)),
                    Expr::Literal(Value::Int(3)),
                    None,
                ),
            ],
            2,
        );
        let out = e
            .process(0, vec![(vec![Value::Int(7), arr(&[10, 20])], 1)])
            .unwrap();
        assert_eq!(
            out,
            vec![
                (
                    vec![
                        Value::Int(7),
                        arr(&[10, 20]),
                        Value::Int(10),
                        Value::Int(1),
                        Value::Int(1)
                    ],
                    1
                ),
                (
                    vec![
                        Value::Int(7),
                        arr(&[10, 20]),
                        Value::Int(20),
                        Value::Int(2),
                        Value::Int(2)
                    ],
                    1
                ),
                (
                    vec![
                        Value::Int(7),
                        arr(&[10, 20]),
                        Value::Null,
                        Value::Null,
                        Value::Int(3)
                    ],
                    1
                ),
            ]
        );
        let back = e
            .process(0, vec![(vec![Value::Int(7), arr(&[10, 20])], -1)])
            .unwrap();
        assert!(back.iter().all(|(_, w)| *w == -1));
        assert_eq!(back.len(), 3);
        // Nothing to expand: the row goes.
        let mut only = Expand::new(vec![SetFunction::Unnest(Expr::Column(0))], 1);
        assert!(only
            .process(0, vec![(vec![arr(&[])], 1)])
            .unwrap()
            .is_empty());
    }
}
