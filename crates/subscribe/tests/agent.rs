//! The agent on small hand-made streams: Fig. 8's messages, global
//! batching, positions and acknowledgements, dead letters.

use aqueduct_publish::{
    dep_hash, Change, ChangeOp, DepTracker, EpochMessage, Mode, ProgressMessage, TxnMessage,
    TxnObjects, WireMessage,
};
use aqueduct_subscribe::{
    Agent, AgentConfig, Effect, Input, Item, Operator, PositionMode, Resume, SinkError,
};
use serde_json::json;

fn epoch(from_lsn: u64) -> Input {
    Input::Received {
        now_ms: 0,
        line: WireMessage::Epoch(EpochMessage {
            epoch: 0,
            from_lsn,
            server_id: "s".into(),
            dep_slots: 1024,
            objects: Default::default(),
            bootstrap_until: None,
        }),
        bytes: 10,
    }
}

fn txn(lsn: u64, deps: Option<aqueduct_publish::Deps>) -> Input {
    Input::Received {
        now_ms: 0,
        line: WireMessage::Txn(TxnMessage {
            lsn,
            first_lsn: lsn,
            txid: format!("s:{lsn}"),
            commit_time: "t".into(),
            epoch: 0,
            frame: 0,
            last: true,
            deps,
            bootstrap: false,
            changes: vec![Change {
                object: "posts".into(),
                op: ChangeOp::Insert,
                key: vec![json!(lsn)],
                attrs: Some(Default::default()),
                version: lsn,
                prev_version: None,
            }],
            origin: None,
        }),
        bytes: 100,
    }
}

fn applies(fx: &[Effect]) -> Vec<(u64, Vec<u64>)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Apply { batch, items, .. } => {
                Some((*batch, items.iter().map(Item::lsn).collect()))
            }
            _ => None,
        })
        .collect()
}

fn agent(mode: Mode, workers: usize) -> Agent {
    let mut c = AgentConfig::new(mode, PositionMode::InApply);
    c.workers = workers;
    let mut a = Agent::new(c, Resume::default()).unwrap();
    let fx = a.step(Input::Start { now_ms: 0 });
    assert_eq!(
        fx,
        vec![Effect::Connect {
            from_lsn: 0,
            epoch: 0
        }]
    );
    assert!(a.step(epoch(0)).is_empty());
    a
}

#[test]
fn fig8_through_the_agent() {
    let objs = |user: &str, writes: Vec<u64>, reads: Vec<u64>| TxnObjects {
        writes,
        reads,
        user: Some(user.into()),
        ..TxnObjects::default()
    };
    let (p1, c1, c2) = (dep_hash(b"p1"), dep_hash(b"c1"), dep_hash(b"c2"));
    let msgs = [
        objs("1", vec![p1], vec![]),
        objs("2", vec![c1], vec![p1]),
        objs("1", vec![c2], vec![p1]),
        objs("1", vec![p1], vec![]),
    ];
    let mut t = DepTracker::new(Mode::Causal, 1024);
    let deps: Vec<_> = msgs.iter().map(|m| t.assign(m)).collect();
    let mut a = agent(Mode::Causal, 4);
    // M4, M3 and M2 first are not applicable; M1 is.
    let mut started = Vec::new();
    for (i, d) in deps.iter().enumerate() {
        started.extend(applies(&a.step(txn(i as u64 + 1, Some(d.clone())))));
    }
    assert_eq!(started, vec![(0, vec![1])]);
    // After M1: M2 and M3 (user 1 counted by M1, post read) at once, on
    // two idle workers; M3 does not wait for M2.
    let next = applies(&a.step(Input::Applied {
        now_ms: 1,
        batch: 0,
    }));
    assert_eq!(next, vec![(1, vec![2]), (2, vec![3])]);
    // M4 (user 1 again) waits for M3, not for M2.
    let after_m2 = applies(&a.step(Input::Applied {
        now_ms: 2,
        batch: 1,
    }));
    assert!(after_m2.is_empty(), "{after_m2:?}");
    let last = applies(&a.step(Input::Applied {
        now_ms: 3,
        batch: 2,
    }));
    assert_eq!(last, vec![(3, vec![4])]);
}

#[test]
fn global_batches_consecutive_and_acks_after_durable() {
    let mut t = DepTracker::new(Mode::Global, 1024);
    let mut a = agent(Mode::Global, 8);
    let mut fx = Vec::new();
    for lsn in 1..=5 {
        fx.extend(a.step(txn(lsn, Some(t.assign(&TxnObjects::default())))));
    }
    // One worker: the first alone, then the next three (batch limit 256,
    // but all that arrived).
    assert_eq!(applies(&fx), vec![(0, vec![1])]);
    let fx = a.step(Input::Applied {
        now_ms: 1_000,
        batch: 0,
    });
    assert_eq!(applies(&fx), vec![(1, vec![2, 3, 4, 5])]);
    // The record of batch 1 stores the watermark (first store is due).
    let Effect::Apply { record, .. } = &fx[0] else {
        panic!()
    };
    assert_eq!(record.applied, vec![2, 3, 4, 5]);
    assert_eq!(record.watermark, Some(2));
    assert!(!fx.iter().any(|e| matches!(e, Effect::Ack { .. })));
    let fx = a.step(Input::Applied {
        now_ms: 1_020,
        batch: 1,
    });
    assert!(fx.contains(&Effect::Ack { lsn: 1 }));
    // Idle with progress: the position is stored on its own after the
    // interval, and acknowledged only once stored.
    let fx = a.step(Input::Received {
        now_ms: 30,
        line: WireMessage::Progress(ProgressMessage { lsn: 9 }),
        bytes: 5,
    });
    assert!(fx.is_empty(), "{fx:?}");
    assert!(a.step(Input::Tick { now_ms: 1_500 }).is_empty());
    let fx = a.step(Input::Tick { now_ms: 2_000 });
    assert_eq!(
        fx,
        vec![Effect::StorePosition {
            watermark: 10,
            applied_above: vec![],
            schema: None
        }]
    );
    let fx = a.step(Input::PositionStored {
        now_ms: 2_010,
        watermark: 10,
    });
    assert_eq!(fx, vec![Effect::Ack { lsn: 9 }]);
}

#[test]
fn dead_letter_blocks_dependents_only_and_can_be_skipped() {
    let mut t = DepTracker::new(Mode::Causal, 1024);
    let mut a = agent(Mode::Causal, 1);
    let o = |w: u64, u: &str| TxnObjects {
        writes: vec![w],
        user: Some(u.into()),
        ..TxnObjects::default()
    };
    let (r1, r7) = (dep_hash(b"r1"), dep_hash(b"r7"));
    let d1 = t.assign(&o(r1, "a"));
    let d2 = t.assign(&o(r1, "a"));
    let d3 = t.assign(&o(r7, "b"));
    let fx = a.step(txn(1, Some(d1)));
    assert_eq!(applies(&fx), vec![(0, vec![1])]);
    a.step(txn(2, Some(d2)));
    a.step(txn(3, Some(d3)));
    // Fail 1 until it is dead-lettered; 3 (independent) goes on meanwhile,
    // 2 (same row and user as 1) never starts.
    let mut now = 0;
    let mut pending = vec![(0, vec![1])];
    let mut applied_3 = false;
    while let Some((batch, lsns)) = pending.pop() {
        assert!(!lsns.contains(&2), "2 started before 1");
        let fx = if lsns == vec![1] {
            a.step(Input::SinkFailed {
                now_ms: now,
                batch,
                error: SinkError::permanent("23505"),
            })
        } else {
            applied_3 |= lsns == vec![3];
            a.step(Input::Applied { now_ms: now, batch })
        };
        pending.extend(applies(&fx));
        if let Some(at) = fx.iter().find_map(|e| match e {
            Effect::RetryAt { lsn: 1, at_ms } => Some(*at_ms),
            _ => None,
        }) {
            now = at;
            pending.extend(applies(&a.step(Input::Tick { now_ms: now })));
        }
    }
    assert!(applied_3);
    assert_eq!(a.dead_letters(), vec![1]);
    let fx = a.step(Input::Command {
        now_ms: now,
        cmd: Operator::SkipDeadLetter(1),
    });
    let Effect::Apply {
        batch: b, items, ..
    } = &fx[0]
    else {
        panic!("{fx:?}")
    };
    assert_eq!(items, &vec![Item::Skip { lsn: 1 }]);
    let fx = a.step(Input::Applied {
        now_ms: now,
        batch: *b,
    });
    assert!(fx.contains(&Effect::DeadLetterCleared { lsn: 1 }));
    assert_eq!(applies(&fx)[0].1, vec![2]);
}

#[test]
fn weak_mode_shares_a_backlog_among_the_workers() {
    let mut a = agent(Mode::Weak, 4);
    let mut started = Vec::new();
    for lsn in 1..=8 {
        started.extend(applies(&a.step(txn(lsn, None))));
    }
    // One transaction per idle worker as they arrive, then the rest wait
    // for a worker.
    assert_eq!(
        started,
        vec![(0, vec![1]), (1, vec![2]), (2, vec![3]), (3, vec![4])]
    );
    // The backlog is shared out over the workers as they come free: a
    // quarter of it to each, not all of it to the first.
    for lsn in 9..=16 {
        assert!(applies(&a.step(txn(lsn, None))).is_empty());
    }
    let next = applies(&a.step(Input::Applied {
        now_ms: 1,
        batch: 0,
    }));
    assert_eq!(next, vec![(4, vec![5, 6, 7])]);
    let next = applies(&a.step(Input::Applied {
        now_ms: 2,
        batch: 1,
    }));
    assert_eq!(next, vec![(5, vec![8, 9, 10])]);
}
