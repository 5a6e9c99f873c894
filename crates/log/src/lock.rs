//! One process per log directory: an advisory `flock` on `LOCK`, released when
//! the process exits (even by kill -9), so a stale lock never needs clean-up.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

pub const LOCK_NAME: &str = "LOCK";

/// How long a busy lock is retried before the directory is reported in use.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Held for as long as the directory is in use.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    path: PathBuf,
}

impl DirLock {
    /// Takes the lock or explains who holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        crate::storage::create_private_dir(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let path = dir.join(LOCK_NAME);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::storage::DATA_FILE_MODE)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        // A holder that is going away (a process exiting, or a copy of the
        // descriptor a concurrent fork made that its exec is about to close)
        // lets go within moments: try again for a short while before
        // reporting the directory in use.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let rc = loop {
            // SAFETY: flock on a file descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            let busy = rc != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK);
            if !busy || std::time::Instant::now() >= deadline {
                break rc;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::Locked(format!(
                    "the log directory {} is in use by another process{}; stop it first \
                     (a running server holds its data directory; `aqueduct wal` needs it idle)",
                    dir.display(),
                    if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {holder})")
                    }
                )));
            }
            return Err(Error::io(format!("locking {}", path.display()), err));
        }
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = write!(file, "{}", std::process::id());
        Ok(DirLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
