//! `SHOW CONSUMERS`: each durable consumer of the change feed with its
//! position, lag and whether it was dropped (`docs/change-feed.md`).

use aqueduct_values::Value;

use crate::session::Session;
use aqueduct_plan::bind::show_consumers_columns;
use aqueduct_plan::plan::Outcome;

impl Session {
    pub(crate) fn show_consumers(&self) -> Outcome {
        let rows: Vec<Vec<Value>> = self
            .engine
            .feed()
            .consumers()
            .into_iter()
            .map(|c| {
                vec![
                    Value::Text(c.name),
                    Value::Int(c.next_lsn as i64),
                    Value::Int(c.lag as i64),
                    Value::TimestampTz(c.registered_micros),
                    Value::TimestampTz(c.acked_micros),
                    Value::Text(match c.dropped {
                        None => "active".into(),
                        Some(why) => format!("dropped: {why}"),
                    }),
                ]
            })
            .collect();
        Outcome::Rows {
            tag: format!("SHOW CONSUMERS {}", rows.len()),
            columns: show_consumers_columns(),
            rows,
        }
    }
}
