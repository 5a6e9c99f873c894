//! Tests of the serializability checker for recorded histories.

mod common;

use std::collections::HashMap;

use aqueduct_chains::history::{
    check, Anomaly, Cycle, CycleClass, Dependency, History, Op, Serializable, Txn, INITIAL_VERSION,
    MAX_HISTORY_OPERATIONS,
};
use common::Rng;

fn history(txns: Vec<Txn>) -> History {
    txns.into_iter().collect()
}

fn expect_cycle(h: &History) -> Cycle {
    match check(h) {
        Err(Anomaly::Cycle(c)) => c,
        other => panic!("expected a dependency cycle, got {other:?}"),
    }
}

fn expect_serializable(h: &History) -> Serializable {
    match check(h) {
        Ok(s) => s,
        Err(a) => panic!("expected a serializable history, got {a}"),
    }
}

/// Asserts that `cycle` is a well-formed simple cycle whose edges are real
/// dependencies of `h`.
fn assert_valid_cycle(h: &History, cycle: &Cycle) {
    assert!(!cycle.is_empty());
    let txns: HashMap<u64, &Txn> = h.txns().iter().map(|t| (t.id, t)).collect();
    let mut seen = std::collections::HashSet::new();
    for (i, e) in cycle.edges.iter().enumerate() {
        let next = &cycle.edges[(i + 1) % cycle.len()];
        assert_eq!(e.to, next.from, "edges do not chain: {cycle}");
        assert!(seen.insert(e.from), "cycle is not simple: {cycle}");
        let from = txns[&e.from];
        let to = txns[&e.to];
        let writes = |t: &Txn, v: u64| {
            t.ops
                .iter()
                .any(|o| matches!(o, Op::Write { key, version } if *key == e.key && *version == v))
        };
        let reads = |t: &Txn, v: u64| {
            t.ops
                .iter()
                .any(|o| matches!(o, Op::Read { key, version } if *key == e.key && *version == v))
        };
        match e.kind {
            Dependency::Ww => assert!(writes(from, e.version)),
            Dependency::Wr => assert!(writes(from, e.version) && reads(to, e.version)),
            Dependency::Rw => assert!(reads(from, e.version)),
        }
    }
    assert_eq!(
        cycle.class,
        CycleClass::of(cycle.edges.iter().map(|e| e.kind))
    );
}

/// Replays the history in `order` against a fresh store: every read must
/// see the latest write before it, and every key's versions must be
/// installed in increasing order.
fn assert_valid_serial_order(h: &History, order: &[u64]) {
    assert_eq!(order.len(), h.len(), "order must list every transaction");
    let txns: HashMap<u64, &Txn> = h.txns().iter().map(|t| (t.id, t)).collect();
    let mut store: HashMap<&str, u64> = HashMap::new();
    let mut listed = std::collections::HashSet::new();
    for id in order {
        assert!(listed.insert(*id), "T{id} listed twice");
        let txn = txns[id];
        for op in &txn.ops {
            match op {
                Op::Read { key, version } => {
                    let current = store.get(key.as_str()).copied().unwrap_or(INITIAL_VERSION);
                    assert_eq!(
                        current, *version,
                        "T{id} reads {key}@{version} but the serial order gives {current}"
                    );
                }
                Op::Write { key, version } => {
                    let current = store.get(key.as_str()).copied().unwrap_or(INITIAL_VERSION);
                    assert!(
                        *version > current,
                        "T{id} installs {key}@{version} after {current}"
                    );
                    store.insert(key, *version);
                }
            }
        }
    }
}

#[test]
fn serial_history_passes_with_a_valid_order() {
    let h = history(vec![
        Txn::new(1, "init").write("x", 1).write("y", 2),
        Txn::new(2, "incr x").read("x", 1).write("x", 3),
        Txn::new(3, "copy x to y")
            .read("x", 3)
            .read("y", 2)
            .write("y", 4),
        Txn::new(4, "read all")
            .read("x", 3)
            .read("y", 4)
            .read("z", 0),
        Txn::new(5, "blind").write("z", 5),
    ]);
    let s = expect_serializable(&h);
    assert_valid_serial_order(&h, &s.order);
    assert_eq!(s.ww_edges, 2);
    assert_eq!(s.wr_edges, 5);
    assert_eq!(s.rw_edges, 1);
    // Pushed in another order, the checker still finds the serial order.
    let mut reversed: Vec<Txn> = h.txns().to_vec();
    reversed.reverse();
    let h = history(reversed);
    let s = expect_serializable(&h);
    assert_valid_serial_order(&h, &s.order);
    assert_eq!(s.order, vec![1, 2, 3, 4, 5]);
}

#[test]
fn empty_history_is_serializable() {
    let s = expect_serializable(&History::new());
    assert!(s.order.is_empty());
}

#[test]
fn lost_update_is_a_cycle_with_an_anti_dependency() {
    let h = history(vec![
        Txn::new(1, "init").write("x", 1),
        Txn::new(2, "add 1").read("x", 1).write("x", 2),
        Txn::new(3, "add 2").read("x", 1).write("x", 3),
    ]);
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert!(c.contains(2) && c.contains(3), "{c}");
    assert!(!c.contains(1), "{c}");
    assert_eq!(c.class, CycleClass::G2);
    assert!(c.edges.iter().any(|e| e.kind == Dependency::Rw));
    let text = c.to_string();
    assert!(text.starts_with("G2: "), "{text}");
    assert!(
        text.contains("T2 add 1") && text.contains("T3 add 2"),
        "{text}"
    );
    assert!(text.contains("-rw(x)->"), "{text}");
}

#[test]
fn write_skew_is_g2() {
    let h = history(vec![
        Txn::new(1, "t1").read("x", 0).read("y", 0).write("x", 1),
        Txn::new(2, "t2").read("x", 0).read("y", 0).write("y", 2),
    ]);
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert_eq!(c.class, CycleClass::G2);
    assert_eq!(c.len(), 2);
    assert!(c.edges.iter().all(|e| e.kind == Dependency::Rw));
    assert!(c.contains(1) && c.contains(2));
}

#[test]
fn circular_information_flow_is_g1c() {
    let h = history(vec![
        Txn::new(1, "t1").write("x", 1).read("y", 2),
        Txn::new(2, "t2").read("x", 1).write("y", 2),
    ]);
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert_eq!(c.class, CycleClass::G1c);
    assert!(c.edges.iter().all(|e| e.kind == Dependency::Wr));

    // ww and wr: T1 -wr(x)-> T2 -ww(y)-> T1.
    let h = history(vec![
        Txn::new(1, "t1").write("x", 1).write("y", 3),
        Txn::new(2, "t2").read("x", 1).write("y", 2),
    ]);
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert_eq!(c.class, CycleClass::G1c);
    assert_eq!(c.to_string(), "G1c: T1 t1 -wr(x)-> T2 t2 -ww(y)-> T1");
}

#[test]
fn write_cycle_is_g0_even_when_other_cycles_exist() {
    let h = history(vec![
        Txn::new(1, "t1").write("x", 1).write("y", 4).read("z", 0),
        Txn::new(2, "t2").write("x", 2).write("y", 3).write("z", 5),
    ]);
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert_eq!(c.class, CycleClass::G0);
    assert!(c.edges.iter().all(|e| e.kind == Dependency::Ww));
}

#[test]
fn read_of_a_version_nobody_wrote() {
    let h = history(vec![
        Txn::new(1, "t1").write("x", 1),
        Txn::new(2, "t2").read("x", 7),
    ]);
    assert_eq!(
        check(&h),
        Err(Anomaly::ReadOfUnwrittenVersion {
            txn: 2,
            key: "x".to_string(),
            version: 7
        })
    );
    // Even of a key nobody wrote at all.
    let h = history(vec![Txn::new(1, "t1").read("never", 3)]);
    assert!(matches!(
        check(&h),
        Err(Anomaly::ReadOfUnwrittenVersion { version: 3, .. })
    ));
    // The initial version of such a key is fine.
    let h = history(vec![Txn::new(1, "t1").read("never", INITIAL_VERSION)]);
    expect_serializable(&h);
}

#[test]
fn malformed_histories_are_typed_errors() {
    let dup = history(vec![
        Txn::new(1, "a").write("x", 1),
        Txn::new(2, "b").write("x", 1),
    ]);
    assert_eq!(
        check(&dup),
        Err(Anomaly::DuplicateVersion {
            key: "x".to_string(),
            version: 1,
            first: 1,
            second: 2
        })
    );
    let ids = history(vec![Txn::new(1, "a"), Txn::new(1, "b")]);
    assert_eq!(check(&ids), Err(Anomaly::DuplicateTxnId { txn: 1 }));
    let zero = history(vec![Txn::new(1, "a").write("x", INITIAL_VERSION)]);
    assert!(matches!(
        check(&zero),
        Err(Anomaly::WriteOfInitialVersion { txn: 1, .. })
    ));
    // Reading a key after writing it must observe the own write.
    let stale_own = history(vec![
        Txn::new(1, "a").write("x", 1),
        Txn::new(2, "b").write("x", 2).read("x", 1),
    ]);
    assert_eq!(
        check(&stale_own),
        Err(Anomaly::InconsistentOwnRead {
            txn: 2,
            key: "x".to_string(),
            own_write: Some(2),
            observed: 1
        })
    );
    // Reading a version before writing it.
    let future = history(vec![Txn::new(1, "a").read("x", 5).write("x", 5)]);
    assert!(matches!(
        check(&future),
        Err(Anomaly::InconsistentOwnRead {
            own_write: None,
            observed: 5,
            ..
        })
    ));
    // Reading own writes, repeatedly and across rewrites, is fine.
    let own = history(vec![Txn::new(1, "a")
        .read("x", 0)
        .write("x", 1)
        .read("x", 1)
        .write("x", 2)
        .read("x", 2)]);
    expect_serializable(&own);
    let backwards = history(vec![Txn::new(1, "a").write("x", 3).write("x", 2)]);
    assert!(matches!(
        check(&backwards),
        Err(Anomaly::WritesOutOfOrder {
            earlier: 3,
            later: 2,
            ..
        })
    ));
    // Another transaction must not see an intermediate write (G1b).
    let intermediate = history(vec![
        Txn::new(1, "a").write("x", 1).write("x", 2),
        Txn::new(2, "b").read("x", 1),
    ]);
    assert_eq!(
        check(&intermediate),
        Err(Anomaly::IntermediateRead {
            txn: 2,
            writer: 1,
            key: "x".to_string(),
            version: 1
        })
    );
    // A fuzzy read closes a cycle.
    let fuzzy = history(vec![
        Txn::new(1, "a").read("x", 0).read("x", 1),
        Txn::new(2, "b").write("x", 1),
    ]);
    let c = expect_cycle(&fuzzy);
    assert_eq!(c.class, CycleClass::G2);
}

#[test]
fn too_large_histories_are_refused() {
    let mut t = Txn::new(1, "big");
    t.ops = vec![
        Op::Read {
            key: "x".to_string(),
            version: 0
        };
        MAX_HISTORY_OPERATIONS + 1
    ];
    let h = history(vec![t]);
    assert!(matches!(check(&h), Err(Anomaly::TooManyOperations { .. })));
}

/// Two instances of a chain `bid`: hop 1 writes the `bids` key, hop 2 reads
/// and writes the item's price. Versions are log positions.
fn bid_chains(a_hop2_first: bool) -> History {
    // Hop 1 of a runs before hop 1 of b in both executions.
    let (a_price_read, a_price, b_price_read, b_price) = if a_hop2_first {
        (0, 3, 3, 4)
    } else {
        (3, 4, 0, 3)
    };
    history(vec![
        Txn::new(10, "bid(7, 3)")
            .write("bids", 1)
            .read("items/7.price", a_price_read)
            .write("items/7.price", a_price),
        Txn::new(11, "bid(7, 4)")
            .write("bids", 2)
            .read("items/7.price", b_price_read)
            .write("items/7.price", b_price),
    ])
}

#[test]
fn chain_run_piecewise_when_it_should_not() {
    // a.hop1 (bids@1), b.hop1 (bids@2), b.hop2 (price 0 -> 3),
    // a.hop2 (price 3 -> 4): bids orders a before b, the price b before a.
    let h = bid_chains(false);
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert!(c.contains(10) && c.contains(11), "{c}");
    // Both keys are written by both instances, so the weakest cycle is a
    // write cycle: ww(bids) one way, ww(price) the other.
    assert_eq!(c.class, CycleClass::G0);
    let text = c.to_string();
    assert!(
        text.contains("T10 bid(7, 3) -ww(bids)-> T11 bid(7, 4)"),
        "{text}"
    );
    assert!(text.contains("-ww(items/7.price)->"), "{text}");

    // a.hop1, b.hop1, a.hop2 (price 0 -> 3), b.hop2 (price 3 -> 4).
    let h = bid_chains(true);
    let s = expect_serializable(&h);
    assert_eq!(s.order, vec![10, 11]);
    assert_valid_serial_order(&h, &s.order);
}

/// Runs `txns` random transactions one at a time against an in-memory
/// store over `keys` keys; versions come from one global counter, like
/// log positions. Transactions are pushed in a shuffled order.
fn random_serial_history(rng: &mut Rng, txns: u64, keys: u64) -> History {
    let mut store: HashMap<String, u64> = HashMap::new();
    let mut lsn = 0u64;
    let mut out = Vec::new();
    for id in 1..=txns {
        let mut t = Txn::new(id, format!("random #{id}"));
        let ops = 1 + rng.range(0, 5);
        for _ in 0..ops {
            let key = format!("k{}", rng.range(0, keys - 1));
            if rng.range(0, 1) == 0 {
                let v = store.get(&key).copied().unwrap_or(INITIAL_VERSION);
                t = t.read(key, v);
            } else {
                lsn += 1;
                store.insert(key.clone(), lsn);
                t = t.write(key, lsn);
            }
        }
        out.push(t);
    }
    // Fisher-Yates.
    for i in (1..out.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        out.swap(i, j);
    }
    history(out)
}

fn find_txn(h: &History, id: u64) -> usize {
    h.txns()
        .iter()
        .position(|t| t.id == id)
        .expect("transaction present")
}

/// Plants a stale read: a transaction `t2` that reads `k`@`v` (installed by
/// `t1`) and then installs the next version of `k` is made to read the
/// version before `v` instead, which is the initial one or the final write
/// of another transaction. That is a lost update: `t2 -rw-> t1 -ww-> t2`.
/// Returns `(t1, t2)`, or `None` if the history has no such read.
fn plant_stale_read(h: &mut History) -> Option<(u64, u64)> {
    // key -> sorted (version, txn id, is last write of that txn)
    let mut versions: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for t in h.txns() {
        for op in &t.ops {
            if let Op::Write { key, version } = op {
                versions
                    .entry(key.clone())
                    .or_default()
                    .push((*version, t.id));
            }
        }
    }
    for v in versions.values_mut() {
        v.sort();
    }
    let mut choice = None;
    'txns: for t in h.txns() {
        for (i, op) in t.ops.iter().enumerate() {
            let Op::Read { key, version } = op else {
                continue;
            };
            if t.ops[..i].iter().any(|o| o.key() == key) {
                continue;
            }
            let Some(order) = versions.get(key) else {
                continue;
            };
            let Ok(pos) = order.binary_search_by_key(version, |&(v, _)| v) else {
                continue;
            };
            let (_, t1) = order[pos];
            let Some(&(_, next_writer)) = order.get(pos + 1) else {
                continue;
            };
            let writes_next = next_writer == t.id;
            let t1_writes_once = order.iter().filter(|&&(_, w)| w == t1).count() == 1;
            let prev_ok = pos == 0 || order[pos - 1].1 != t1;
            if t1 != t.id && writes_next && t1_writes_once && prev_ok {
                let prev = if pos == 0 { 0 } else { order[pos - 1].0 };
                choice = Some((t1, t.id, i, prev));
                break 'txns;
            }
        }
    }
    let (t1, t2, op, prev) = choice?;
    let idx = find_txn(h, t2);
    if let Op::Read { version, .. } = &mut h.txns_mut()[idx].ops[op] {
        *version = prev;
    }
    Some((t1, t2))
}

/// Plants swapped versions: `t1` and `t2` each write `k` once and read it
/// never, `t2` reads another key from `t1` (a final write), and `t1`'s
/// version of `k` is lower. Swapping the two versions orders `t2` before
/// `t1` on `k` while `t1 -wr-> t2` stays. Returns `(t1, t2)`.
fn plant_swapped_versions(h: &mut History) -> Option<(u64, u64)> {
    let index: HashMap<u64, usize> = h
        .txns()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id, i))
        .collect();
    let mut writer_of: HashMap<(String, u64), u64> = HashMap::new();
    for t in h.txns() {
        for op in &t.ops {
            if let Op::Write { key, version } = op {
                writer_of.insert((key.clone(), *version), t.id);
            }
        }
    }
    let writes_once = |t: &Txn, k: &str| {
        t.ops
            .iter()
            .filter(|o| matches!(o, Op::Write { .. }) && o.key() == k)
            .count()
            == 1
            && !t
                .ops
                .iter()
                .any(|o| matches!(o, Op::Read { .. }) && o.key() == k)
    };
    let mut choice = None;
    'search: for t2 in h.txns() {
        for op in &t2.ops {
            let Op::Read { key: j, version } = op else {
                continue;
            };
            let Some(&t1) = writer_of.get(&(j.clone(), *version)) else {
                continue;
            };
            if t1 == t2.id {
                continue;
            }
            let t1_txn = &h.txns()[index[&t1]];
            // t1's write of j must be its last one.
            let last_j = t1_txn
                .ops
                .iter()
                .rev()
                .find(|o| matches!(o, Op::Write { .. }) && o.key() == j);
            if last_j.map(Op::version) != Some(*version) {
                continue;
            }
            for o1 in &t1_txn.ops {
                let Op::Write {
                    key: k,
                    version: v1,
                } = o1
                else {
                    continue;
                };
                if k == j || !writes_once(t1_txn, k) || !writes_once(t2, k) {
                    continue;
                }
                let v2 = t2
                    .ops
                    .iter()
                    .find(|o| matches!(o, Op::Write { .. }) && o.key() == k)
                    .map(Op::version);
                if let Some(v2) = v2 {
                    if *v1 < v2 {
                        choice = Some((t1, t2.id, k.clone(), *v1, v2));
                        break 'search;
                    }
                }
            }
        }
    }
    let (t1, t2, k, v1, v2) = choice?;
    for (id, from, to) in [(t1, v1, v2), (t2, v2, v1)] {
        for op in h.txns_mut()[index[&id]].ops.iter_mut() {
            if let Op::Write { key, version } = op {
                if *key == k && *version == from {
                    *version = to;
                }
            }
        }
    }
    Some((t1, t2))
}

#[test]
fn random_serial_histories_pass_and_planted_anomalies_are_found() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut stale_planted = 0;
    let mut swaps_planted = 0;
    for round in 0..300 {
        let txns = 2 + rng.range(0, 59);
        let keys = 1 + rng.range(0, 7);
        let h = random_serial_history(&mut rng, txns, keys);
        let s = expect_serializable(&h);
        assert_valid_serial_order(&h, &s.order);

        let mut stale = h.clone();
        if let Some((t1, t2)) = plant_stale_read(&mut stale) {
            stale_planted += 1;
            let c = expect_cycle(&stale);
            assert_valid_cycle(&stale, &c);
            assert!(
                c.contains(t1) || c.contains(t2),
                "round {round}: planted T{t1}/T{t2}, found {c}"
            );
            assert!(c.edges.iter().any(|e| e.kind == Dependency::Rw), "{c}");
        }

        let mut swapped = h.clone();
        if let Some((t1, t2)) = plant_swapped_versions(&mut swapped) {
            swaps_planted += 1;
            let c = expect_cycle(&swapped);
            assert_valid_cycle(&swapped, &c);
            assert!(
                c.contains(t1) || c.contains(t2),
                "round {round}: planted T{t1}/T{t2}, found {c}"
            );
        }
    }
    // The plants must actually have happened for the test to mean anything.
    assert!(
        stale_planted > 100,
        "only {stale_planted} stale reads planted"
    );
    assert!(swaps_planted > 100, "only {swaps_planted} swaps planted");
}

#[test]
fn large_serial_history_checks_without_recursion() {
    let mut rng = Rng::new(42);
    let h = random_serial_history(&mut rng, 50_000, 1_000);
    let s = expect_serializable(&h);
    assert_valid_serial_order(&h, &s.order);
}

#[test]
fn long_cycle_is_reported_whole() {
    // T_i writes k_i and reads k_{i+1}: a ring of read dependencies over
    // every transaction.
    let n: u64 = 50_000;
    let h: History = (0..n)
        .map(|i| {
            Txn::new(i, format!("ring {i}"))
                .write(format!("k{i}"), 1)
                .read(format!("k{}", (i + 1) % n), 1)
        })
        .collect();
    let c = expect_cycle(&h);
    assert_eq!(c.len(), n as usize);
    assert_eq!(c.class, CycleClass::G1c);
    assert_valid_cycle(&h, &c);
}

#[test]
fn shortest_witness_is_preferred() {
    // A ring T9 -> T8 -> ... -> T0 -> T9 of read dependencies, and a chord
    // T4 -wr(k4)-> T6 closing the short cycle T6 -> T5 -> T4 -> T6.
    let n: u64 = 10;
    let h: History = (0..n)
        .map(|i| {
            let t = Txn::new(i, format!("ring {i}"))
                .write(format!("k{i}"), 1)
                .read(format!("k{}", (i + 1) % n), 1);
            if i == 6 {
                t.read("k4", 1)
            } else {
                t
            }
        })
        .collect();
    let c = expect_cycle(&h);
    assert_valid_cycle(&h, &c);
    assert_eq!(c.len(), 3, "{c}");
    assert!(c.contains(4) && c.contains(5) && c.contains(6), "{c}");
}
