//! The tracker against Synapse's worked example (Fig. 8) as a golden
//! transcript, and the degenerate one-slot space.

use aqueduct_publish::{dep_hash, DepObject, DepTracker, Deps, Mode, TxnObjects};

const SLOTS: u32 = 65_536;
const POSTS: u64 = 1;
const COMMENTS: u64 = 2;

fn row(table: u64, id: u64) -> u64 {
    let mut key = table.to_be_bytes().to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    dep_hash(&key)
}

fn slot(o: &DepObject) -> u32 {
    o.slot(SLOTS)
}

/// The four requests of Fig. 8(a): user 1 posts, user 2 comments reading
/// the post, user 1 comments back reading it, user 1 updates the post.
fn fig8(with_tables_and_sessions: bool) -> Vec<TxnObjects> {
    let p1 = row(POSTS, 1);
    let c1 = row(COMMENTS, 1);
    let c2 = row(COMMENTS, 2);
    let txn =
        |user: &str, writes: Vec<u64>, reads: Vec<u64>, table: u64, session: u64| TxnObjects {
            writes,
            reads,
            table_scans: vec![],
            tables_written: if with_tables_and_sessions {
                vec![table]
            } else {
                vec![]
            },
            user: Some(user.to_string()),
            session: with_tables_and_sessions.then_some(session),
        };
    vec![
        txn("1", vec![p1], vec![], POSTS, 11),
        txn("2", vec![c1], vec![p1], COMMENTS, 12),
        txn("1", vec![c2], vec![p1], COMMENTS, 13),
        // Reads the post it updates: the read counts as the write.
        txn("1", vec![p1], vec![p1], POSTS, 14),
    ]
}

fn sorted(mut v: Vec<(u32, u64)>) -> Vec<(u32, u64)> {
    v.sort_unstable();
    v
}

#[test]
fn fig8_golden_transcript() {
    let u1 = slot(&DepObject::User("1".into()));
    let u2 = slot(&DepObject::User("2".into()));
    let p1 = slot(&DepObject::Row(row(POSTS, 1)));
    let c1 = slot(&DepObject::Row(row(COMMENTS, 1)));
    let c2 = slot(&DepObject::Row(row(COMMENTS, 2)));
    let mut all = vec![u1, u2, p1, c1, c2];
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 5, "the example's objects must not collide");

    let mut t = DepTracker::new(Mode::Causal, SLOTS);
    let got: Vec<Deps> = fig8(false).iter().map(|x| t.assign(x)).collect();
    // Fig. 8(b): M1 {u1: 0, p1: 0}; M2 {u2: 0, c1: 0, p1: 1};
    // M3 {u1: 1, c2: 0, p1: 1}; M4 {u1: 2, p1: 3}.
    let want = [
        (vec![(u1, 0), (p1, 0)], vec![]),
        (vec![(u2, 0), (c1, 0)], vec![(p1, 1)]),
        (vec![(u1, 1), (c2, 0)], vec![(p1, 1)]),
        (vec![(u1, 2), (p1, 3)], vec![]),
    ];
    for (i, (d, (w, r))) in got.iter().zip(want).enumerate() {
        assert_eq!(d.w, sorted(w), "M{} writes", i + 1);
        assert_eq!(d.r, sorted(r), "M{} reads", i + 1);
    }

    // The same with Aqueduct's table and session slots: every write reads
    // its table's slot, each request is its own session.
    let tp = slot(&DepObject::Table(POSTS));
    let tc = slot(&DepObject::Table(COMMENTS));
    let s: Vec<u32> = (11..=14).map(|i| slot(&DepObject::Session(i))).collect();
    let mut all2 = all.clone();
    all2.extend([tp, tc]);
    all2.extend(&s);
    all2.sort_unstable();
    all2.dedup();
    assert_eq!(all2.len(), 11);
    t.reset();
    let got: Vec<Deps> = fig8(true).iter().map(|x| t.assign(x)).collect();
    let want = [
        (vec![(u1, 0), (p1, 0), (s[0], 0)], vec![(tp, 0)]),
        (vec![(u2, 0), (c1, 0), (s[1], 0)], vec![(p1, 1), (tc, 0)]),
        (vec![(u1, 1), (c2, 0), (s[2], 0)], vec![(p1, 1), (tc, 0)]),
        (vec![(u1, 2), (p1, 3), (s[3], 0)], vec![(tp, 0)]),
    ];
    for (i, (d, (w, r))) in got.iter().zip(want).enumerate() {
        assert_eq!(d.w, sorted(w), "M{} writes", i + 1);
        assert_eq!(d.r, sorted(r), "M{} reads", i + 1);
    }

    // A scan of the posts table after all that waits for both post writes.
    let scan = TxnObjects {
        writes: vec![row(COMMENTS, 3)],
        table_scans: vec![POSTS],
        tables_written: vec![COMMENTS],
        user: Some("2".into()),
        ..TxnObjects::default()
    };
    let d = t.assign(&scan);
    assert!(d.w.contains(&(tp, 2)), "{d:?}");
    // Writes to comments read its slot: after the last scan, none here.
    assert!(d.r.contains(&(tc, 0)), "{d:?}");
}

#[test]
fn one_slot_orders_everything() {
    let mut t = DepTracker::new(Mode::Causal, 1);
    for (i, x) in fig8(true).iter().cycle().take(40).enumerate() {
        let d = t.assign(x);
        assert_eq!(d.w, vec![(0, i as u64)]);
        assert!(d.r.is_empty());
    }
    // A transaction that only reads still follows every earlier write.
    let reader = TxnObjects {
        reads: vec![row(POSTS, 1)],
        ..TxnObjects::default()
    };
    assert_eq!(t.assign(&reader).r, vec![(0, 40)]);
}
