//! Expiring puts (`Log::set_expiry`): compaction drops the records the
//! layer above says have expired, even as their key's newest version, but
//! only below every hold, and nothing else changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use aqueduct_log::{ExpiredPuts, Expiry, Log, Lsn, NewRecord, Options, RecordKind, SyncPolicy};

/// Records appended of each kind of key.
const RECORDS: u32 = 400;
/// Small segments, so the records fill many.
const SEGMENT_BYTES: u64 = 4096;
/// More events than one segment holds: what may survive below a hold, in
/// the segment that holds both sides of it.
const STRADDLING_MAX: usize = 64;

/// Keys starting with `e` expire; the pass count shows it was asked.
struct ByPrefix(AtomicUsize);

impl Expiry for ByPrefix {
    fn for_pass(&self) -> Option<ExpiredPuts> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Some(Box::new(|key: &[u8]| key.first() == Some(&b'e')))
    }
}

fn keys(log: &Log, prefix: u8) -> Vec<(Lsn, Vec<u8>)> {
    let mut out = Vec::new();
    log.replay(0, |r| {
        if r.key.first() == Some(&prefix) {
            assert_eq!(r.kind, RecordKind::Put);
            out.push((r.lsn, r.key.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn expired_puts_go_only_below_every_hold() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncPolicy::Never,
        segment_bytes: SEGMENT_BYTES,
        ..Default::default()
    };
    let (log, _) = Log::open(dir.path(), opts.clone()).unwrap();
    let expiry = Arc::new(ByPrefix(AtomicUsize::new(0)));
    log.set_expiry(Some(expiry.clone()));
    let append = |from: u32| {
        for i in from..from + RECORDS {
            // Every event key is new (its only version); `k` keys repeat.
            log.append(&[
                NewRecord::put(format!("e{i:06}"), vec![b'x'; 40]),
                NewRecord::put(format!("k{}", i % 10), vec![b'y'; 40]),
            ])
            .unwrap();
        }
    };
    append(0);
    let hold = log.committed_lsn() + 1;
    log.set_hold("reader", Some(hold)).unwrap();
    append(RECORDS);
    log.seal_active().unwrap();
    log.compact().unwrap();
    assert!(expiry.0.load(Ordering::Relaxed) >= 1, "asked per pass");

    // From the hold on every event stays; below it they went, but for
    // those sharing a segment with held records (the compactable range
    // ends at the first segment holding one).
    let events = keys(&log, b'e');
    let held = events.iter().filter(|(lsn, _)| *lsn >= hold).count();
    assert_eq!(held, RECORDS as usize, "every event the hold keeps");
    let below = events.len() - held;
    assert!(
        below < STRADDLING_MAX,
        "{below} expired puts below the hold survived"
    );
    // The key rule is unchanged: each `k` key's newest version stays.
    let ks = keys(&log, b'k');
    for k in 0..10 {
        assert!(ks
            .iter()
            .any(|(_, key)| *key == format!("k{k}").into_bytes()));
    }

    // Released, and after a restart (no expiry set): nothing more expires
    // unless the layer above says so again.
    log.set_hold("reader", None).unwrap();
    drop(log);
    let (log, _) = Log::open(dir.path(), opts).unwrap();
    log.compact().unwrap();
    assert_eq!(keys(&log, b'e').len(), events.len());
    log.set_expiry(Some(expiry));
    log.seal_active().unwrap();
    log.compact().unwrap();
    assert!(keys(&log, b'e').is_empty(), "released: every event expired");
    assert_eq!(
        keys(&log, b'k').len(),
        10,
        "exactly the newest version of each other key"
    );
}
