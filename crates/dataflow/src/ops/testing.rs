//! The oracle every operator is tested against: feed random deltas, and
//! after each one compare everything the operator emitted so far with the
//! operator's result recomputed from scratch over the accumulated inputs.

use std::collections::BTreeMap;

use aqueduct_values::Value;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::{consolidate, Delta, Operator, Row};

/// Random rows of `width` small integers (and some NULLs), so keys collide.
pub fn int_rows(width: usize) -> impl Strategy<Value = Row> + Clone {
    prop::collection::vec(
        prop_oneof![4 => (0i64..4).prop_map(Value::Int), 1 => Just(Value::Null)],
        width,
    )
}

/// A bag as a sorted map from row to count.
pub fn bag(rows: impl IntoIterator<Item = Row>) -> BTreeMap<Row, i64> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(r).or_insert(0) += 1;
    }
    m
}

/// Drives `make()` with random insert/delete deltas on `inputs` ports
/// (deletes only of rows present) and checks the accumulated output against
/// `recompute(current inputs)` after every delta.
pub fn check_against_recompute<S>(
    make: impl Fn() -> Box<dyn Operator>,
    recompute: impl Fn(&[Vec<Row>]) -> Vec<Row>,
    inputs: usize,
    rows: S,
) where
    S: Strategy<Value = Row> + Clone,
{
    let step = (0..inputs, rows, any::<bool>(), 0usize..64);
    let mut runner = TestRunner::new(Config {
        cases: 128,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(step, 1..40), |steps| {
            let mut op = make();
            let mut state: Vec<Vec<Row>> = vec![Vec::new(); inputs];
            let mut emitted: Delta = Vec::new();
            for (port, row, insert, pick) in steps {
                let delta = if insert || state[port].is_empty() {
                    state[port].push(row.clone());
                    vec![(row, 1)]
                } else {
                    let i = pick % state[port].len();
                    let gone = state[port].remove(i);
                    vec![(gone, -1)]
                };
                emitted.extend(op.process(port, delta).expect("operator failed"));
                consolidate(&mut emitted);
                prop_assert!(
                    emitted.iter().all(|(_, w)| *w > 0),
                    "negative multiplicity in output: {:?}",
                    emitted
                );
                let expected = bag(recompute(&state));
                let got: BTreeMap<Row, i64> = emitted.iter().cloned().collect();
                prop_assert_eq!(got, expected);
            }
            Ok(())
        })
        .unwrap();
}
