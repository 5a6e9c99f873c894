//! The data directory is its owner's only: created 0700, every file in it
//! (segments, indexes, meta, lock) 0600, whatever the umask lets through.

use std::os::unix::fs::PermissionsExt;

use aqueduct_log::{Log, NewRecord, Options, SyncPolicy};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn data_directory_and_files_are_private() {
    // A permissive umask for this process: the modes must not rely on it.
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o002) };
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    {
        let opts = Options {
            sync: SyncPolicy::Never,
            segment_bytes: 4096,
            ..Default::default()
        };
        let (log, _) = Log::open(&dir, opts.clone()).unwrap();
        for i in 0..100u32 {
            log.append(&[NewRecord::put(format!("k{}", i % 7), vec![b'x'; 100])])
                .unwrap();
        }
        log.seal_active().unwrap();
        log.compact().unwrap();
    }
    unsafe { libc::umask(old) };
    assert_eq!(mode(&dir), 0o700, "data directory");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        files += 1;
    }
    assert!(files >= 3, "segments, an index and the lock at least");
}
