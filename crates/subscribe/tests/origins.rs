//! A decorator's transactions (`docs/publications.md` §8): one carrying
//! `origin` waits until the sink says each origin is applied there, while
//! transactions without origins go on; past the causal timeout it is
//! applied anyway and reported; a planted defect that ignores origins is
//! caught.

use aqueduct_publish::{Change, ChangeOp, EpochMessage, Mode, Origin, TxnMessage, WireMessage};
use aqueduct_subscribe::{Agent, AgentBug, AgentConfig, Effect, Input, Item, PositionMode, Resume};
use serde_json::json;

fn epoch() -> Input {
    Input::Received {
        now_ms: 0,
        line: WireMessage::Epoch(EpochMessage {
            epoch: 0,
            from_lsn: 0,
            server_id: "b".into(),
            dep_slots: 1024,
            objects: Default::default(),
            bootstrap_until: None,
        }),
        bytes: 10,
    }
}

fn origin(lsn: u64) -> Origin {
    Origin {
        server_id: "a".into(),
        lsn,
    }
}

fn txn(now_ms: u64, lsn: u64, origin: Option<Vec<Origin>>) -> Input {
    Input::Received {
        now_ms,
        line: WireMessage::Txn(TxnMessage {
            lsn,
            first_lsn: lsn,
            txid: format!("b:{lsn}"),
            commit_time: "t".into(),
            epoch: 0,
            frame: 0,
            last: true,
            deps: None,
            bootstrap: false,
            changes: vec![Change {
                object: "user_interests".into(),
                op: ChangeOp::Insert,
                key: vec![json!(lsn)],
                attrs: Some(Default::default()),
                version: lsn,
                prev_version: None,
            }],
            origin,
        }),
        bytes: 100,
    }
}

fn applied_lsns(fx: &[Effect]) -> Vec<u64> {
    fx.iter()
        .flat_map(|e| match e {
            Effect::Apply { items, .. } => items.iter().map(Item::lsn).collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn checks(fx: &[Effect]) -> Vec<(u64, Vec<Origin>)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::CheckOrigins { lsn, origins } => Some((*lsn, origins.clone())),
            _ => None,
        })
        .collect()
}

fn agent(timeout_ms: Option<u64>, bug: Option<AgentBug>) -> Agent {
    let mut c = AgentConfig::new(Mode::Weak, PositionMode::InApply);
    c.workers = 2;
    c.causal_timeout_ms = timeout_ms;
    let mut a = Agent::new(c, Resume::default()).unwrap();
    if let Some(bug) = bug {
        a.plant(bug);
    }
    a.step(Input::Start { now_ms: 0 });
    assert!(a.step(epoch()).is_empty());
    a
}

#[test]
fn a_decoration_waits_for_its_origins_and_others_go_on() {
    let mut a = agent(None, None);
    let fx = a.step(txn(0, 10, Some(vec![origin(5), origin(7)])));
    assert_eq!(applied_lsns(&fx), Vec::<u64>::new());
    assert_eq!(checks(&fx), vec![(10, vec![origin(5), origin(7)])]);
    assert_eq!(a.origins_waiting(), 1);
    // A transaction without origins is not held behind it.
    let fx = a.step(txn(1, 11, None));
    assert_eq!(applied_lsns(&fx), vec![11]);
    // Asked again only after the recheck interval.
    assert!(checks(&a.step(Input::Tick { now_ms: 10 })).is_empty());
    let later = aqueduct_subscribe::limits::ORIGIN_RECHECK_MS + 10;
    assert_eq!(checks(&a.step(Input::Tick { now_ms: later })).len(), 1);
    // Strict without a timeout: an hour later it still waits.
    let fx = a.step(Input::Tick { now_ms: 3_600_000 });
    assert_eq!(applied_lsns(&fx), Vec::<u64>::new());
    // The sink holds the origins: it is applied.
    let fx = a.step(Input::OriginsApplied {
        now_ms: 3_600_001,
        lsn: 10,
    });
    assert_eq!(applied_lsns(&fx), vec![10]);
    assert_eq!(a.origins_waiting(), 0);
    // An answer for a transaction not waiting changes nothing.
    assert!(applied_lsns(&a.step(Input::OriginsApplied {
        now_ms: 3_600_002,
        lsn: 10
    }))
    .is_empty());
}

#[test]
fn past_the_causal_timeout_a_decoration_is_applied_and_reported() {
    let timeout = 60_000;
    let mut a = agent(Some(timeout), None);
    let fx = a.step(txn(100, 10, Some(vec![origin(5)])));
    assert!(applied_lsns(&fx).is_empty());
    let fx = a.step(Input::Tick {
        now_ms: 100 + timeout - 1,
    });
    assert!(applied_lsns(&fx).is_empty());
    let fx = a.step(Input::Tick {
        now_ms: 100 + timeout,
    });
    assert_eq!(applied_lsns(&fx), vec![10]);
    assert!(fx.contains(&Effect::OriginFallback {
        lsn: 10,
        origins: vec![origin(5)],
    }));
    assert_eq!(a.origins_waiting(), 0);
}

#[test]
fn a_zero_timeout_does_not_wait() {
    let mut a = agent(Some(0), None);
    let fx = a.step(txn(0, 10, Some(vec![origin(5)])));
    assert_eq!(applied_lsns(&fx), vec![10]);
    assert!(checks(&fx).is_empty());
}

/// The ordering check: a decoration is not applied before the sink says
/// its origins are.
fn decoration_waits(bug: Option<AgentBug>) -> Result<(), String> {
    let mut a = agent(None, bug);
    let fx = a.step(txn(0, 10, Some(vec![origin(5)])));
    if !applied_lsns(&fx).is_empty() {
        return Err("a decoration was applied before its origin".into());
    }
    let fx = a.step(Input::OriginsApplied { now_ms: 1, lsn: 10 });
    if applied_lsns(&fx) != vec![10] {
        return Err("a decoration was not applied once its origin was".into());
    }
    Ok(())
}

#[test]
fn the_check_catches_the_planted_origin_ignored_defect() {
    decoration_waits(None).unwrap();
    assert!(decoration_waits(Some(AgentBug::OriginIgnored)).is_err());
}

#[test]
fn a_disconnect_forgets_the_waiting() {
    let mut a = agent(None, None);
    a.step(txn(0, 10, Some(vec![origin(5)])));
    a.step(Input::Disconnected {
        now_ms: 1,
        reason: aqueduct_subscribe::StreamEnd::Closed("gone".into()),
    });
    assert_eq!(a.origins_waiting(), 0);
}
