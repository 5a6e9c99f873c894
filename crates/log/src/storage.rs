//! The only place the log touches the file system.
//!
//! Everything above this module speaks to a [`Storage`]: a flat directory of
//! named files. [`FsStorage`] is the real one; [`crate::sim::SimStorage`] keeps
//! files in memory, models what survives a crash, and injects failures, so the
//! crash argument of every operation can be tested step by step.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory of files.
pub trait Storage: Send + Sync + 'static {
    /// Names of the files in the directory (not recursive).
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Opens an existing file for reading only. Whoever must not change
    /// anything (a follower of a log another process writes, the manifest's
    /// reader) opens files this way.
    fn open_read(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.open(name)
    }
    /// Creates a file, truncating any file of that name.
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Atomically replaces `to` with `from`. Durable after [`Storage::sync_dir`].
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes a file. Durable after [`Storage::sync_dir`].
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes creations, renames and removals durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// A human-readable location, for messages.
    fn describe(&self, name: &str) -> String;
}

/// One open file.
#[allow(clippy::len_without_is_empty)]
pub trait StorageFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `data` at `offset`.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Makes the contents durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
    /// Sets the length, discarding bytes past it.
    fn truncate(&self, len: u64) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Reads the whole range `[offset, offset + len)` into a new buffer.
    fn read_vec(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
}

/// Permissions of a data directory the log creates: its owner's only.
pub const DATA_DIR_MODE: u32 = 0o700;
/// Permissions of every file the log creates in it (segments, indexes,
/// meta, lock): readable and writable by their owner only.
pub const DATA_FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) with [`DATA_DIR_MODE`]; an existing
/// directory keeps the permissions it has.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DATA_DIR_MODE)
        .create(dir)
}

/// A real directory.
#[derive(Debug)]
pub struct FsStorage {
    root: PathBuf,
}

impl FsStorage {
    /// Uses `root`, creating it if needed.
    pub fn new(root: impl AsRef<Path>) -> io::Result<FsStorage> {
        let root = root.as_ref().to_path_buf();
        create_private_dir(&root)?;
        Ok(FsStorage { root })
    }

    /// Uses `root`, which must exist already: nothing is created, so a
    /// reader that must not change the directory can use it.
    pub fn existing(root: impl AsRef<Path>) -> io::Result<FsStorage> {
        let root = root.as_ref().to_path_buf();
        if !fs::metadata(&root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(FsStorage { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> PathBuf {
        debug_assert!(!name.contains('/'), "storage names are flat: {name}");
        self.root.join(name)
    }
}

struct FsFile(File);

impl StorageFile for FsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl Storage for FsStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(name))?;
        Ok(Arc::new(FsFile(f)))
    }
    fn open_read(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(FsFile(File::open(self.path(name))?)))
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(DATA_FILE_MODE)
            .open(self.path(name))?;
        Ok(Arc::new(FsFile(f)))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name))
    }
    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.root)?.sync_all()
    }
    fn describe(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// Whether an I/O error means the disk (or quota) is full.
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
}
