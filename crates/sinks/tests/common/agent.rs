//! The real agent driving a message sink over a stream made in the test,
//! time passing only on the agent's clock (no sleeps).

use std::collections::VecDeque;

use aqueduct_publish::{ChangeOp, EpochMessage, Lsn, Mode, ProgressMessage, WireMessage};
use aqueduct_subscribe::{Agent, AgentConfig, Effect, Input, Item, PositionMode, Sink};
use serde_json::json;

use super::{change, posts, txn};

/// A transaction at `lsn` inserting `posts` row `lsn`, as a wire line.
pub fn insert_line(lsn: Lsn) -> WireMessage {
    let c = change(
        "posts",
        ChangeOp::Insert,
        json!(lsn),
        Some(json!({"id": lsn, "body": format!("post {lsn}")})),
        lsn,
    );
    let Item::Txn(t) = txn(lsn, vec![c]) else {
        unreachable!()
    };
    WireMessage::Txn((*t).clone())
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct Run {
    /// The last acknowledged LSN.
    pub acked: Option<Lsn>,
    /// The `from_lsn` of the stream the agent asked for.
    pub from_lsn: Option<Lsn>,
    /// Failed applies.
    pub failures: usize,
}

/// Runs the agent (weak mode, positions apart) from the sink's stored
/// position until it acknowledged `progress_to`. The fake server sends
/// those of `lines` at or above the `from_lsn` the agent asks for, then a
/// progress line at `progress_to`. Failed applies are retried on the
/// agent's schedule.
pub fn run(sink: &mut dyn Sink, lines: &[WireMessage], progress_to: Lsn) -> Run {
    let config = AgentConfig::new(Mode::Weak, PositionMode::Separate);
    let mut agent = Agent::new(config, sink.resume().unwrap()).unwrap();
    let mut now = 0;
    let mut inputs = VecDeque::from([Input::Start { now_ms: now }]);
    let mut stream = VecDeque::new();
    let mut run = Run::default();
    let mut retry_at: Option<u64> = None;
    for _ in 0..100_000 {
        let Some(input) = inputs.pop_front() else {
            if let Some(line) = stream.pop_front() {
                if let WireMessage::Epoch(e) = &line {
                    sink.ensure_objects(&e.objects).unwrap();
                }
                let bytes = WireMessage::to_line(&line).len();
                inputs.push_back(Input::Received {
                    now_ms: now,
                    line,
                    bytes,
                });
            } else if run.acked.is_some_and(|a| a >= progress_to) {
                return run;
            } else {
                // Time passes: a retry or the position store falls due.
                now = retry_at.take().unwrap_or(now).max(now + 1_000);
                inputs.push_back(Input::Tick { now_ms: now });
            }
            continue;
        };
        for e in agent.step(input) {
            match e {
                Effect::Connect { from_lsn, epoch } => {
                    run.from_lsn = Some(from_lsn);
                    stream.push_back(WireMessage::Epoch(EpochMessage {
                        epoch,
                        from_lsn,
                        server_id: "test".into(),
                        dep_slots: 1024,
                        objects: posts(),
                        bootstrap_until: None,
                    }));
                    stream.extend(
                        lines
                            .iter()
                            .filter(|l| l.lsn().is_some_and(|l| l >= from_lsn))
                            .cloned(),
                    );
                    stream.push_back(WireMessage::Progress(ProgressMessage { lsn: progress_to }));
                }
                Effect::Apply {
                    batch,
                    items,
                    record,
                    ..
                } => match sink.apply(&items, &record) {
                    Ok(()) => inputs.push_back(Input::Applied { now_ms: now, batch }),
                    Err(error) => {
                        run.failures += 1;
                        inputs.push_back(Input::SinkFailed {
                            now_ms: now,
                            batch,
                            error,
                        })
                    }
                },
                Effect::StorePosition {
                    watermark,
                    applied_above,
                    schema,
                } => {
                    sink.store_position(watermark, &applied_above, schema)
                        .unwrap();
                    inputs.push_back(Input::PositionStored {
                        now_ms: now,
                        watermark,
                    });
                }
                Effect::RetryAt { at_ms, .. } => {
                    retry_at = Some(retry_at.map_or(at_ms, |r| r.min(at_ms)));
                }
                Effect::DeadLetter {
                    lsn,
                    error,
                    attempts,
                } => sink.store_dead_letter(lsn, &error, attempts).unwrap(),
                Effect::Ack { lsn } => run.acked = Some(lsn),
                Effect::Fail { reason } => panic!("{reason}"),
                _ => {}
            }
        }
    }
    panic!("the agent did not finish: {run:?}");
}
