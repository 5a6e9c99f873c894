//! Enum types (`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`): their
//! labels and the sort keys that order them.
//!
//! A label's sort key never changes once given, so a stored enum value
//! carries its key and compares without the type at hand. Keys are spaced
//! [`ENUM_SORT_GAP`] apart; a label added `BEFORE`/`AFTER` another takes
//! the midpoint of its neighbours (PostgreSQL does the same with float
//! keys), so about 30 labels fit between two neighbours.

use std::fmt;

/// The distance between the sort keys of labels given in order.
pub const ENUM_SORT_GAP: i64 = 1 << 32;
/// The first object id of a user's types, as in PostgreSQL; an enum's id
/// is this plus twice its catalog id, its array type's the next one.
pub const FIRST_USER_OID: u32 = 16_384;
/// Longest label, in bytes (PostgreSQL's NAMEDATALEN - 1).
pub const MAX_ENUM_LABEL_BYTES: usize = 63;

/// An enum type: its catalog id, name and labels in order with their sort
/// keys (ascending).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EnumType {
    pub id: u64,
    pub name: String,
    pub labels: Vec<(String, i64)>,
}

/// Why a label cannot be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelError {
    /// 42710: the label is there already.
    Exists(String),
    /// 22023: `BEFORE`/`AFTER` a label that is not there.
    NoNeighbour(String),
    /// 22023: too long.
    TooLong(String),
    /// 54000: no sort key is left between the neighbours.
    NoRoom,
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabelError::Exists(l) => write!(f, "enum label \"{l}\" already exists"),
            LabelError::NoNeighbour(l) => write!(f, "\"{l}\" is not an existing enum label"),
            LabelError::TooLong(l) => write!(
                f,
                "invalid enum label \"{l}\": labels must be {MAX_ENUM_LABEL_BYTES} bytes or less"
            ),
            LabelError::NoRoom => f.write_str("no room left between these enum labels"),
        }
    }
}

impl LabelError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            LabelError::Exists(_) => "42710",
            LabelError::NoNeighbour(_) | LabelError::TooLong(_) => "22023",
            LabelError::NoRoom => "54000",
        }
    }
}

/// Where `ALTER TYPE ... ADD VALUE` puts a label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelPlace {
    Last,
    Before(String),
    After(String),
}

impl EnumType {
    /// A type with `labels` in the order given.
    pub fn new(id: u64, name: &str, labels: &[String]) -> Result<EnumType, LabelError> {
        let mut t = EnumType {
            id,
            name: name.to_string(),
            labels: Vec::with_capacity(labels.len()),
        };
        for l in labels {
            t.add(l, &LabelPlace::Last)?;
        }
        Ok(t)
    }

    /// The type's object id.
    pub fn oid(&self) -> u32 {
        FIRST_USER_OID.saturating_add(u32::try_from(self.id.saturating_mul(2)).unwrap_or(u32::MAX))
    }

    /// Its array type's object id.
    pub fn array_oid(&self) -> u32 {
        self.oid().saturating_add(1)
    }

    /// The sort key of `label`.
    pub fn sort_of(&self, label: &str) -> Option<i64> {
        self.labels
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, s)| *s)
    }

    /// Adds `label` at `place`.
    pub fn add(&mut self, label: &str, place: &LabelPlace) -> Result<(), LabelError> {
        if label.is_empty() || label.len() > MAX_ENUM_LABEL_BYTES {
            return Err(LabelError::TooLong(label.to_string()));
        }
        if self.sort_of(label).is_some() {
            return Err(LabelError::Exists(label.to_string()));
        }
        let at = |n: &str| {
            self.labels
                .iter()
                .position(|(l, _)| l == n)
                .ok_or_else(|| LabelError::NoNeighbour(n.to_string()))
        };
        // The index the label goes to.
        let index = match place {
            LabelPlace::Last => self.labels.len(),
            LabelPlace::Before(n) => at(n)?,
            LabelPlace::After(n) => at(n)? + 1,
        };
        let below = index.checked_sub(1).map(|i| self.labels[i].1);
        let above = self.labels.get(index).map(|(_, s)| *s);
        let sort = match (below, above) {
            (None, None) => 0,
            (Some(b), None) => b.checked_add(ENUM_SORT_GAP).ok_or(LabelError::NoRoom)?,
            (None, Some(a)) => a.checked_sub(ENUM_SORT_GAP).ok_or(LabelError::NoRoom)?,
            (Some(b), Some(a)) => {
                let mid = b + (a - b) / 2;
                if mid == b {
                    return Err(LabelError::NoRoom);
                }
                mid
            }
        };
        self.labels.insert(index, (label.to_string(), sort));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_keep_their_order_and_added_labels_go_between() {
        let names: Vec<String> = ["sad", "ok", "happy"].map(String::from).to_vec();
        let mut t = EnumType::new(1, "mood", &names).unwrap();
        t.add("meh", &LabelPlace::Before("ok".into())).unwrap();
        t.add("ecstatic", &LabelPlace::Last).unwrap();
        t.add("awful", &LabelPlace::Before("sad".into())).unwrap();
        let order: Vec<&str> = t.labels.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(order, ["awful", "sad", "meh", "ok", "happy", "ecstatic"]);
        assert!(t.labels.windows(2).all(|w| w[0].1 < w[1].1));
        assert_eq!(
            t.add("ok", &LabelPlace::Last),
            Err(LabelError::Exists("ok".into()))
        );
        assert!(matches!(
            t.add("x", &LabelPlace::After("nope".into())),
            Err(LabelError::NoNeighbour(_))
        ));
    }

    #[test]
    fn repeated_insertion_between_two_labels_runs_out_of_room_with_an_error() {
        let names: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let mut t = EnumType::new(1, "e", &names).unwrap();
        let mut added = 0;
        loop {
            match t.add(&format!("x{added}"), &LabelPlace::Before("b".into())) {
                Ok(()) => added += 1,
                Err(e) => {
                    assert_eq!(e, LabelError::NoRoom);
                    break;
                }
            }
        }
        assert!(added >= 30, "{added}");
        assert!(t.labels.windows(2).all(|w| w[0].1 < w[1].1));
    }
}
