//! The server's dependency tracker (`docs/publications.md` §3): maps what a
//! transaction wrote and read to hashed slots and gives each message the
//! slot counts it must wait for, per delivery mode.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::dep_hash::dep_hash;
use crate::limits::DEP_SLOTS_MAX;

/// A delivery mode: what order a subscriber sees transactions in. Ordered
/// from the strongest: a subscriber may ask for a publication's mode or a
/// weaker one (Synapse §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every transaction after every earlier one.
    Global,
    /// After the transactions it depends on (rows, users, sessions, scans).
    Causal,
    /// No order; each row converges through its version guard.
    Weak,
}

impl Mode {
    /// Whether a subscriber may ask for `asked` from a publication of
    /// this mode: at most as strong.
    pub fn allows(self, asked: Mode) -> bool {
        asked >= self
    }

    /// The name on the wire and in SQL.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Global => "global",
            Mode::Causal => "causal",
            Mode::Weak => "weak",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is none of `global`, `causal`, `weak`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown mode \"{}\" (expected global, causal or weak)",
            self.0
        )
    }
}

impl std::error::Error for UnknownMode {}

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Mode, UnknownMode> {
        match s {
            "global" => Ok(Mode::Global),
            "causal" => Ok(Mode::Causal),
            "weak" => Ok(Mode::Weak),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// A dependency object (§3.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DepObject {
    /// A published row, by `dep_hash(row_log_key)`: the value the
    /// `txn_deps` log record carries, so it is passed already hashed.
    Row(u64),
    /// A whole published table, by id.
    Table(u64),
    /// An acting user, by name.
    User(String),
    /// A session, by id.
    Session(u64),
}

impl DepObject {
    /// The object's 64-bit hash: a row's is its recorded hash; the others
    /// hash a one-letter kind prefix and the name (ids big-endian).
    pub fn hash(&self) -> u64 {
        match self {
            DepObject::Row(h) => *h,
            DepObject::Table(id) => prefixed_hash(b't', &id.to_be_bytes()),
            DepObject::User(name) => prefixed_hash(b'u', name.as_bytes()),
            DepObject::Session(id) => prefixed_hash(b's', &id.to_be_bytes()),
        }
    }

    /// The object's slot among `dep_slots` (multiply-shift).
    pub fn slot(&self, dep_slots: u32) -> u32 {
        slot_of(self.hash(), dep_slots)
    }
}

fn prefixed_hash(kind: u8, name: &[u8]) -> u64 {
    let mut bytes = Vec::with_capacity(1 + name.len());
    bytes.push(kind);
    bytes.extend_from_slice(name);
    dep_hash(&bytes)
}

/// The slot of a hash: `hash * dep_slots >> 64`, in `0..dep_slots`.
pub fn slot_of(hash: u64, dep_slots: u32) -> u32 {
    ((u128::from(hash) * u128::from(dep_slots)) >> 64) as u32
}

/// Whether `n` is an acceptable `dep_slots`: a power of two, at most
/// [`DEP_SLOTS_MAX`].
pub fn valid_dep_slots(n: u32) -> bool {
    n.is_power_of_two() && n <= DEP_SLOTS_MAX
}

/// What one transaction touched among a publication's objects, as the
/// server learns it from the transaction's changes and its `txn_deps`
/// record. Objects of tables outside the publication are left out by the
/// caller. Duplicates are allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnObjects {
    /// `dep_hash(row_log_key)` of each published row written.
    pub writes: Vec<u64>,
    /// `dep_hash(row_log_key)` of each published row read (present or
    /// absent) and not written.
    pub reads: Vec<u64>,
    /// Ids of published tables the transaction scanned (whole-table reads,
    /// including those an overflow of row reads turned into).
    pub table_scans: Vec<u64>,
    /// Ids of published tables the transaction wrote.
    pub tables_written: Vec<u64>,
    /// The acting user (§2).
    pub user: Option<String>,
    /// The session that ran the transaction.
    pub session: Option<u64>,
}

/// The slot counts a message must wait for (§3.2): `need` per slot written
/// (`w`) and read (`r`), each sorted by slot, no slot twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deps {
    /// `(slot, need)` of the slots written.
    pub w: Vec<(u32, u64)>,
    /// `(slot, need)` of the slots read and not written.
    pub r: Vec<(u32, u64)>,
}

impl Deps {
    /// No dependencies at all.
    pub fn is_empty(&self) -> bool {
        self.w.is_empty() && self.r.is_empty()
    }

    /// Every `(slot, need)` pair, writes first.
    pub fn pairs(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.w.iter().chain(self.r.iter()).copied()
    }
}

/// A deliberate defect of the tracker, for showing that the subscriber's
/// checkers catch it. Exists only with the `planted-bugs` feature.
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackerBug {
    /// A read's need is `ver[s] - 1`: a read may be applied before its write
    /// (`docs/publications.md` §10 item 4).
    ReadNeedOneLess,
    /// A slot is counted once per object when objects collide, while the
    /// message carries it once (§10 item 5).
    CollisionCountedTwice,
}

/// Per-stream dependency state: `ops[s]` and `ver[s]` for every slot of
/// the current epoch, and `GLOBAL` at index `dep_slots`.
#[derive(Clone, Debug)]
pub struct DepTracker {
    mode: Mode,
    dep_slots: u32,
    ops: Vec<u64>,
    ver: Vec<u64>,
    #[cfg(feature = "planted-bugs")]
    bug: Option<TrackerBug>,
}

impl DepTracker {
    /// A tracker for one stream in `mode` at the start of an epoch.
    ///
    /// Panics if `dep_slots` is not valid ([`valid_dep_slots`]); the catalog
    /// refuses such values before any stream starts.
    pub fn new(mode: Mode, dep_slots: u32) -> DepTracker {
        assert!(
            valid_dep_slots(dep_slots),
            "dep_slots {dep_slots} is not a power of two up to {DEP_SLOTS_MAX}"
        );
        let len = match mode {
            Mode::Causal => dep_slots as usize + 1,
            Mode::Global => 1,
            Mode::Weak => 0,
        };
        DepTracker {
            mode,
            dep_slots,
            ops: vec![0; len],
            ver: vec![0; len],
            #[cfg(feature = "planted-bugs")]
            bug: None,
        }
    }

    /// Plants a defect (tests of the checkers only).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: TrackerBug) {
        self.bug = Some(bug);
    }

    /// The stream's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The number of hashed slots; also the index of `GLOBAL`.
    pub fn dep_slots(&self) -> u32 {
        self.dep_slots
    }

    /// The `GLOBAL` slot.
    pub fn global_slot(&self) -> u32 {
        self.dep_slots
    }

    /// Starts a new epoch (§3.4): every counter back to zero.
    pub fn reset(&mut self) {
        self.ops.iter_mut().for_each(|c| *c = 0);
        self.ver.iter_mut().for_each(|c| *c = 0);
    }

    /// The slots a transaction writes and reads in this tracker's mode,
    /// each sorted and deduplicated, reads with written slots removed.
    pub fn slots(&self, txn: &TxnObjects) -> (Vec<u32>, Vec<u32>) {
        let (mut w, mut r) = self.object_slots(txn);
        w.sort_unstable();
        w.dedup();
        r.sort_unstable();
        r.dedup();
        r.retain(|s| w.binary_search(s).is_err());
        (w, r)
    }

    /// Slots per object, in the order the rules list them, with repeats.
    fn object_slots(&self, txn: &TxnObjects) -> (Vec<u32>, Vec<u32>) {
        let n = self.dep_slots;
        match self.mode {
            Mode::Weak => (Vec::new(), Vec::new()),
            Mode::Global => (vec![self.global_slot()], Vec::new()),
            Mode::Causal => {
                let mut w: Vec<u32> = txn.writes.iter().map(|&h| slot_of(h, n)).collect();
                if let Some(user) = &txn.user {
                    w.push(DepObject::User(user.clone()).slot(n));
                }
                if let Some(session) = txn.session {
                    w.push(DepObject::Session(session).slot(n));
                }
                w.extend(txn.table_scans.iter().map(|&t| DepObject::Table(t).slot(n)));
                let mut r: Vec<u32> = txn.reads.iter().map(|&h| slot_of(h, n)).collect();
                r.extend(
                    txn.tables_written
                        .iter()
                        .map(|&t| DepObject::Table(t).slot(n)),
                );
                (w, r)
            }
        }
    }

    /// Counts one message and returns what it must wait for (§3.2):
    /// for each slot written, `need = ops; ops += 1; ver = ops`; for each
    /// slot read, `ops += 1; need = ver`. Call in LSN order, once per
    /// transaction sent. Weak mode gives empty deps (sent as none).
    pub fn assign(&mut self, txn: &TxnObjects) -> Deps {
        let (w, r) = self.slots(txn);
        let mut deps = Deps::default();
        for &s in &w {
            let i = self.index(s);
            let times = self.times_counted(txn, s, true);
            deps.w.push((s, self.ops[i]));
            self.ops[i] += times;
            self.ver[i] = self.ops[i];
        }
        for &s in &r {
            let i = self.index(s);
            self.ops[i] += self.times_counted(txn, s, false);
            #[allow(unused_mut)]
            let mut need = self.ver[i];
            #[cfg(feature = "planted-bugs")]
            if self.bug == Some(TrackerBug::ReadNeedOneLess) {
                need = need.saturating_sub(1);
            }
            deps.r.push((s, need));
        }
        deps
    }

    /// Index of a slot in the counters (global mode keeps only `GLOBAL`).
    fn index(&self, s: u32) -> usize {
        match self.mode {
            Mode::Global => 0,
            _ => s as usize,
        }
    }

    /// How many times a message counts on slot `s`: once, however many of
    /// its objects share the slot.
    #[cfg_attr(not(feature = "planted-bugs"), allow(unused_variables))]
    fn times_counted(&self, txn: &TxnObjects, s: u32, written: bool) -> u64 {
        #[cfg(feature = "planted-bugs")]
        if self.bug == Some(TrackerBug::CollisionCountedTwice) {
            let (raw_w, raw_r) = self.object_slots(txn);
            let list = if written { raw_w } else { raw_r };
            return list.iter().filter(|&&x| x == s).count() as u64;
        }
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names() {
        for m in [Mode::Global, Mode::Causal, Mode::Weak] {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                format!("\"{}\"", m.as_str())
            );
        }
        assert!("strong".parse::<Mode>().is_err());
    }

    #[test]
    fn slot_bounds() {
        assert_eq!(slot_of(0, 16), 0);
        assert_eq!(slot_of(u64::MAX, 16), 15);
        assert_eq!(slot_of(u64::MAX, 1), 0);
        assert_eq!(slot_of(1 << 63, 2), 1);
        assert!(valid_dep_slots(1) && valid_dep_slots(DEP_SLOTS_MAX));
        assert!(!valid_dep_slots(0) && !valid_dep_slots(3) && !valid_dep_slots(DEP_SLOTS_MAX * 2));
    }

    #[test]
    fn collisions_count_once_and_reads_of_written_slots_drop() {
        let mut t = DepTracker::new(Mode::Causal, 1);
        let txn = TxnObjects {
            writes: vec![1, 2, 3],
            reads: vec![4],
            tables_written: vec![9],
            user: Some("a".into()),
            session: Some(1),
            ..TxnObjects::default()
        };
        let d = t.assign(&txn);
        assert_eq!(d.w, vec![(0, 0)]);
        assert!(d.r.is_empty());
        assert_eq!(t.assign(&txn).w, vec![(0, 1)]);
    }

    #[test]
    fn global_and_weak() {
        let mut g = DepTracker::new(Mode::Global, 8);
        let txn = TxnObjects {
            writes: vec![5],
            ..TxnObjects::default()
        };
        assert_eq!(g.assign(&txn).w, vec![(8, 0)]);
        assert_eq!(g.assign(&TxnObjects::default()).w, vec![(8, 1)]);
        g.reset();
        assert_eq!(g.assign(&txn).w, vec![(8, 0)]);
        let mut w = DepTracker::new(Mode::Weak, 8);
        assert!(w.assign(&txn).is_empty());
    }
}
