use aqueduct_log::{Log, NewRecord, Options, SyncPolicy};

#[test]
fn append_reopen_replay() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: SyncPolicy::Always,
        segment_bytes: 4096,
        ..Default::default()
    };
    {
        let (log, rep) = Log::open(dir.path(), opts.clone()).unwrap();
        assert_eq!(rep.last_lsn, 0);
        for i in 0..200u32 {
            let lsn = log
                .append(&[NewRecord::put(format!("k{}", i % 20), vec![b'x'; 100])])
                .unwrap();
            assert_eq!(lsn.first, i as u64 + 1);
        }
        let r = log
            .append(&[NewRecord::delete("k1"), NewRecord::put("k2", "v")])
            .unwrap();
        assert_eq!((r.first, r.last), (201, 202));
        assert!(log.segments().len() > 3);
        let mut n = 0;
        log.replay(1, |r| {
            n += 1;
            assert_eq!(r.lsn, n);
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 202);
        log.seal_active().unwrap();
        let rep = log.compact().unwrap();
        assert!(rep.records_after < rep.records_before, "{rep:?}");
    }
    let (log, rep) = Log::open(dir.path(), opts).unwrap();
    assert_eq!(rep.last_lsn, 202);
    let recs: Vec<_> = log.reader(0).map(|r| r.unwrap()).collect();
    assert!(recs.windows(2).all(|w| w[0].lsn < w[1].lsn));
    assert_eq!(recs.last().unwrap().lsn, 202);
    assert!(
        recs.iter().all(|r| r.key != b"k1"),
        "k1 was deleted: nothing of it is left"
    );
    assert_eq!(recs.iter().filter(|r| r.key == b"k2").count(), 1);
}
