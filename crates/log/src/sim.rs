//! An in-memory [`Storage`] that models crashes and injects faults.
//!
//! The model is deliberately pessimistic:
//! - file contents are durable only up to the last `sync` of that file;
//! - names (create, rename, remove) are durable only after `sync_dir`;
//! - at a crash, each file keeps its durable contents, or all of its pending
//!   contents, or (for appends) a random prefix of the pending bytes whose last
//!   part may read as zeroes, which is what a torn write looks like on disk.
//!
//! Faults: the Nth mutating operation can fail with an error or crash the
//! "machine"; a capacity makes writes fail with `ENOSPC`, as a full disk does.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::storage::{Storage, StorageFile};

/// What happens at the injected operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The operation fails with an I/O error (`ENOSPC` for writes, `EIO` otherwise).
    Error,
    /// The machine crashes just before the operation: unsynced state is lost,
    /// and every later operation fails until [`SimStorage::restart`].
    Crash,
}

#[derive(Clone, Default)]
struct Inode {
    durable: Vec<u8>,
    current: Vec<u8>,
}

struct State {
    inodes: Vec<Inode>,
    names: BTreeMap<String, usize>,
    durable_names: BTreeMap<String, usize>,
    epoch: u64,
    crashed: bool,
    ops: u64,
    fail_at: Option<(u64, Fault)>,
    capacity: Option<u64>,
    rng: StdRng,
}

impl State {
    /// Counts a mutating operation and applies an injected fault, if due.
    fn mutating_op(&mut self, is_write: bool) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::other("simulated machine has crashed"));
        }
        self.ops += 1;
        if let Some((at, fault)) = self.fail_at {
            if self.ops == at {
                self.fail_at = None;
                match fault {
                    Fault::Error if is_write => {
                        return Err(io::Error::from_raw_os_error(libc::ENOSPC))
                    }
                    Fault::Error => return Err(io::Error::from_raw_os_error(libc::EIO)),
                    Fault::Crash => {
                        self.crash();
                        return Err(io::Error::other("simulated crash"));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_epoch(&self, epoch: u64) -> io::Result<()> {
        if self.crashed || epoch != self.epoch {
            return Err(io::Error::other(
                "file handle from before a simulated crash",
            ));
        }
        Ok(())
    }

    fn used_bytes(&self) -> u64 {
        let live: std::collections::BTreeSet<usize> = self
            .names
            .values()
            .chain(self.durable_names.values())
            .copied()
            .collect();
        live.iter()
            .map(|&i| {
                self.inodes[i]
                    .current
                    .len()
                    .max(self.inodes[i].durable.len()) as u64
            })
            .sum()
    }

    fn crash(&mut self) {
        self.crashed = true;
        self.epoch += 1;
        for i in 0..self.inodes.len() {
            let inode = &mut self.inodes[i];
            if inode.current == inode.durable {
                continue;
            }
            let choice = self.rng.gen_range(0..3);
            let kept = match choice {
                0 => inode.durable.clone(),
                1 => inode.current.clone(),
                _ if inode.current.len() > inode.durable.len()
                    && inode.current.starts_with(&inode.durable) =>
                {
                    let extra = inode.current.len() - inode.durable.len();
                    let keep = self.rng.gen_range(0..=extra);
                    let mut v = inode.current[..inode.durable.len() + keep].to_vec();
                    if keep > 0 && self.rng.gen_bool(0.3) {
                        // The file grew but the last block's data never landed.
                        let zero_from = inode.durable.len() + self.rng.gen_range(0..keep);
                        v[zero_from..].iter_mut().for_each(|b| *b = 0);
                    }
                    v
                }
                _ => inode.durable.clone(),
            };
            inode.durable = kept.clone();
            inode.current = kept;
        }
        self.names = self.durable_names.clone();
    }
}

/// In-memory storage with crash and fault injection. Deterministic for a seed.
pub struct SimStorage {
    state: Arc<Mutex<State>>,
}

struct SimFile {
    state: Arc<Mutex<State>>,
    inode: usize,
    epoch: u64,
}

impl SimStorage {
    pub fn new(seed: u64) -> Arc<SimStorage> {
        Arc::new(SimStorage {
            state: Arc::new(Mutex::new(State {
                inodes: Vec::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                epoch: 0,
                crashed: false,
                ops: 0,
                fail_at: None,
                capacity: None,
                rng: StdRng::seed_from_u64(seed),
            })),
        })
    }

    /// Crashes now: unsynced data and names are lost (per the model above).
    pub fn crash(&self) {
        self.state.lock().crash();
    }

    /// Ends a crash: the storage accepts operations again (old handles stay dead).
    pub fn restart(&self) {
        let mut s = self.state.lock();
        s.crashed = false;
        s.fail_at = None;
    }

    /// Injects `fault` at mutating operation number `ops() + n` (n >= 1).
    pub fn fail_in(&self, n: u64, fault: Fault) {
        let mut s = self.state.lock();
        let at = s.ops + n;
        s.fail_at = Some((at, fault));
    }

    /// Clears a pending injected fault.
    pub fn clear_fault(&self) {
        self.state.lock().fail_at = None;
    }

    /// Whether the injected fault has fired (or none was set).
    pub fn fault_fired(&self) -> bool {
        self.state.lock().fail_at.is_none()
    }

    /// Mutating operations so far.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Limits the total bytes of all files; `None` removes the limit.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity = bytes;
    }

    /// XORs `mask` into the byte at `offset` of `name`, durably (bit rot).
    pub fn corrupt(&self, name: &str, offset: usize, mask: u8) {
        let mut s = self.state.lock();
        let i = s.names[name];
        s.inodes[i].current[offset] ^= mask;
        s.inodes[i].durable[offset] ^= mask;
    }

    /// Durably cuts `name` to `len` bytes (a torn tail, made by hand).
    pub fn cut(&self, name: &str, len: usize) {
        let mut s = self.state.lock();
        let i = s.names[name];
        s.inodes[i].current.truncate(len);
        s.inodes[i].durable.truncate(len);
    }

    /// The current contents of a file.
    pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.state.lock();
        s.names.get(name).map(|&i| s.inodes[i].current.clone())
    }

    /// Removes a file durably (e.g. a lost index).
    pub fn delete(&self, name: &str) {
        let mut s = self.state.lock();
        s.names.remove(name);
        s.durable_names.remove(name);
    }
}

impl Storage for SimStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        if s.crashed {
            return Err(io::Error::other("simulated machine has crashed"));
        }
        Ok(s.names.keys().cloned().collect())
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let s = self.state.lock();
        if s.crashed {
            return Err(io::Error::other("simulated machine has crashed"));
        }
        let inode = *s
            .names
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Arc::new(SimFile {
            state: self.state.clone(),
            inode,
            epoch: s.epoch,
        }))
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let mut s = self.state.lock();
        s.mutating_op(false)?;
        let inode = s.inodes.len();
        s.inodes.push(Inode::default());
        s.names.insert(name.to_string(), inode);
        Ok(Arc::new(SimFile {
            state: self.state.clone(),
            inode,
            epoch: s.epoch,
        }))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutating_op(false)?;
        let inode = s
            .names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.names.insert(to.to_string(), inode);
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutating_op(false)?;
        s.names
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutating_op(false)?;
        s.durable_names = s.names.clone();
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("sim:{name}")
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let s = self.state.lock();
        s.check_epoch(self.epoch)?;
        let data = &s.inodes[self.inode].current;
        let offset = offset as usize;
        if offset >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - offset);
        buf[..n].copy_from_slice(&data[offset..offset + n]);
        Ok(n)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check_epoch(self.epoch)?;
        s.mutating_op(true)?;
        let end = offset as usize + data.len();
        let grow = end.saturating_sub(s.inodes[self.inode].current.len()) as u64;
        if let Some(cap) = s.capacity {
            if s.used_bytes() + grow > cap {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        let file = &mut s.inodes[self.inode].current;
        if file.len() < end {
            file.resize(end, 0);
        }
        file[offset as usize..end].copy_from_slice(data);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.state.lock();
        s.check_epoch(self.epoch)?;
        Ok(s.inodes[self.inode].current.len() as u64)
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check_epoch(self.epoch)?;
        s.mutating_op(false)?;
        let inode = &mut s.inodes[self.inode];
        inode.durable = inode.current.clone();
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check_epoch(self.epoch)?;
        s.mutating_op(false)?;
        s.inodes[self.inode].current.resize(len as usize, 0);
        Ok(())
    }
}
