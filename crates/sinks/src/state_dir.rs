//! The state directory of the message sinks (JSON lines, webhook, NATS,
//! RabbitMQ): the position kept apart from the messages
//! (`docs/publications.md` §5.4) and the dead letters, in files.
//!
//! The directory holds `position.json` (watermark, the transactions
//! applied above it, the last schema change; replaced whole through a
//! temporary file and a rename) and `dead_letters.jsonl` (appended: a line
//! per dead letter stored and per dead letter cleared; the last line for
//! an LSN wins). Each sink's [`aqueduct_subscribe::Sink`] methods for
//! positions and dead letters are the ones of [`StateDir`].

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::PathBuf;

use aqueduct_publish::{Lsn, WireMessage};
use aqueduct_subscribe::{Item, Origin, Record, Resume, SchemaPos, SinkError};
use serde::{Deserialize, Serialize};

/// The position file's name in the state directory.
pub const POSITION_FILE: &str = "position.json";

/// The dead letters' file name in the state directory.
pub const DEAD_LETTERS_FILE: &str = "dead_letters.jsonl";

/// A message sink's position and dead letters, in a directory.
#[derive(Debug)]
pub(crate) struct StateDir {
    dir: PathBuf,
    /// The last schema change delivered, kept with the position.
    schema: Option<SchemaPos>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Position {
    watermark: Lsn,
    applied_above: Vec<Lsn>,
    schema: Option<(Lsn, u32)>,
    /// Where the receiver's copy came from (§5.6).
    #[serde(default)]
    origin: Origin,
}

#[derive(Debug, Serialize, Deserialize)]
struct DeadLetterLine {
    lsn: Lsn,
    /// `None`: the dead letter was cleared.
    attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// I/O errors are transient: a full disk or a stalled reader heals.
pub(crate) fn io_error(what: &str, e: io::Error) -> SinkError {
    SinkError::transient(format!("{what}: {e}"))
}

/// An item's wire line (`docs/publications.md` §4), `None` for a skip.
pub(crate) fn wire_line(item: &Item) -> Option<String> {
    match item {
        Item::Txn(t) => Some(WireMessage::Txn((**t).clone()).to_line()),
        Item::Schema(s, _) => Some(WireMessage::Schema((**s).clone()).to_line()),
        Item::Skip { .. } => None,
    }
}

/// The idempotency key of an item: a transaction's `txid`; for a schema
/// change, which has none, `schema:{lsn}:{seq}` (unique within the
/// subscription).
pub(crate) fn message_id(item: &Item) -> Option<String> {
    match item {
        Item::Txn(t) => Some(t.txid.clone()),
        Item::Schema(_, pos) => Some(format!("schema:{}:{}", pos.lsn, pos.seq)),
        Item::Skip { .. } => None,
    }
}

impl StateDir {
    /// The state in `dir`, created if missing.
    pub(crate) fn open(dir: impl Into<PathBuf>) -> Result<StateDir, SinkError> {
        let dir = dir.into();
        fs::create_dir_all(&dir)
            .map_err(|e| SinkError::permanent(format!("{}: {e}", dir.display())))?;
        let mut state = StateDir { dir, schema: None };
        state.schema = state
            .read_position()?
            .schema
            .map(|(lsn, seq)| SchemaPos { lsn, seq });
        Ok(state)
    }

    fn read_position(&self) -> Result<Position, SinkError> {
        let path = self.dir.join(POSITION_FILE);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| SinkError::permanent(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Position::default()),
            Err(e) => Err(io_error(&path.display().to_string(), e)),
        }
    }

    /// Replaces the position file: written whole to a temporary file,
    /// synced, renamed over the old one, and the directory synced.
    fn write_position(&self, p: &Position) -> Result<(), SinkError> {
        let path = self.dir.join(POSITION_FILE);
        let tmp = self.dir.join(format!("{POSITION_FILE}.tmp"));
        let text = serde_json::to_vec(p).expect("positions serialize");
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| io_error(&path.display().to_string(), e))
    }

    fn append_dead_letter(&self, line: &DeadLetterLine) -> Result<(), SinkError> {
        let path = self.dir.join(DEAD_LETTERS_FILE);
        let mut text = serde_json::to_string(line).expect("dead letters serialize");
        text.push('\n');
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        write().map_err(|e| io_error(&path.display().to_string(), e))
    }

    fn dead_letters(&self) -> Result<Vec<(Lsn, u32)>, SinkError> {
        let path = self.dir.join(DEAD_LETTERS_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&path.display().to_string(), e)),
        };
        let mut held = BTreeMap::new();
        for line in BufReader::new(file).lines() {
            let line = line.map_err(|e| io_error(&path.display().to_string(), e))?;
            // A crash mid-append leaves a torn last line: it never counted.
            let Ok(d) = serde_json::from_str::<DeadLetterLine>(&line) else {
                continue;
            };
            match d.attempts {
                Some(a) => held.insert(d.lsn, a),
                None => held.remove(&d.lsn),
            };
        }
        Ok(held.into_iter().collect())
    }

    /// After a batch was delivered: checks that the agent sent no position
    /// with it, and keeps its schema change. A schema change is a barrier:
    /// recording it once its message is out is as safe as a transactional
    /// sink's record.
    pub(crate) fn delivered(&mut self, record: &Record) -> Result<(), SinkError> {
        assert!(
            record.applied.is_empty() && record.watermark.is_none(),
            "a sink storing positions apart got a position with its rows"
        );
        if let Some(pos) = record.schema {
            if self.schema.is_none_or(|s| s < pos) {
                let mut p = self.read_position()?;
                p.schema = Some((pos.lsn, pos.seq));
                self.write_position(&p)?;
                self.schema = Some(pos);
            }
        }
        Ok(())
    }

    /// [`aqueduct_subscribe::Sink::store_position`].
    pub(crate) fn store_position(
        &mut self,
        watermark: Lsn,
        applied_above: &[Lsn],
        schema: Option<SchemaPos>,
    ) -> Result<(), SinkError> {
        let old = self.read_position()?;
        assert!(
            watermark >= old.watermark,
            "stored watermark moves back from {} to {watermark}",
            old.watermark
        );
        let schema = self.schema.max(schema);
        self.write_position(&Position {
            watermark,
            applied_above: applied_above.to_vec(),
            schema: schema.map(|s| (s.lsn, s.seq)),
            origin: old.origin,
        })?;
        self.schema = schema;
        Ok(())
    }

    /// [`aqueduct_subscribe::Sink::store_dead_letter`].
    pub(crate) fn store_dead_letter(
        &mut self,
        lsn: Lsn,
        error: &SinkError,
        attempts: u32,
    ) -> Result<(), SinkError> {
        self.append_dead_letter(&DeadLetterLine {
            lsn,
            attempts: Some(attempts),
            error: Some(error.to_string()),
        })
    }

    /// [`aqueduct_subscribe::Sink::clear_dead_letter`].
    pub(crate) fn clear_dead_letter(&mut self, lsn: Lsn) -> Result<(), SinkError> {
        self.append_dead_letter(&DeadLetterLine {
            lsn,
            attempts: None,
            error: None,
        })
    }

    /// [`aqueduct_subscribe::Sink::origin`].
    pub(crate) fn origin(&self) -> Result<Origin, SinkError> {
        Ok(self.read_position()?.origin)
    }

    /// [`aqueduct_subscribe::Sink::set_origin`].
    pub(crate) fn set_origin(&mut self, origin: &Origin) -> Result<(), SinkError> {
        let mut p = self.read_position()?;
        p.origin = origin.clone();
        self.write_position(&p)
    }

    /// [`aqueduct_subscribe::Sink::resume`].
    pub(crate) fn resume(&self) -> Result<Resume, SinkError> {
        let p = self.read_position()?;
        Ok(Resume {
            watermark: p.watermark,
            applied_above: p.applied_above,
            schema: p.schema.map(|(lsn, seq)| SchemaPos { lsn, seq }),
            dead_letters: self.dead_letters()?,
        })
    }
}

/// The [`aqueduct_subscribe::Sink`] methods a message sink takes from its
/// [`StateDir`] (in the field `state`): everything but `apply`.
macro_rules! state_dir_methods {
    () => {
        fn position_mode(&self) -> aqueduct_subscribe::PositionMode {
            aqueduct_subscribe::PositionMode::Separate
        }

        fn store_position(
            &mut self,
            watermark: aqueduct_publish::Lsn,
            applied_above: &[aqueduct_publish::Lsn],
            schema: Option<aqueduct_subscribe::SchemaPos>,
        ) -> Result<(), aqueduct_subscribe::SinkError> {
            self.state.store_position(watermark, applied_above, schema)
        }

        fn store_dead_letter(
            &mut self,
            lsn: aqueduct_publish::Lsn,
            error: &aqueduct_subscribe::SinkError,
            attempts: u32,
        ) -> Result<(), aqueduct_subscribe::SinkError> {
            self.state.store_dead_letter(lsn, error, attempts)
        }

        fn clear_dead_letter(
            &mut self,
            lsn: aqueduct_publish::Lsn,
        ) -> Result<(), aqueduct_subscribe::SinkError> {
            self.state.clear_dead_letter(lsn)
        }

        fn resume(&self) -> Result<aqueduct_subscribe::Resume, aqueduct_subscribe::SinkError> {
            self.state.resume()
        }

        fn origin(&self) -> Result<aqueduct_subscribe::Origin, aqueduct_subscribe::SinkError> {
            self.state.origin()
        }

        fn set_origin(
            &mut self,
            origin: &aqueduct_subscribe::Origin,
        ) -> Result<(), aqueduct_subscribe::SinkError> {
            self.state.set_origin(origin)
        }

        /// Message sinks hold no tables: the receiver learns shapes from
        /// the schema messages.
        fn ensure_objects(
            &mut self,
            _: &std::collections::BTreeMap<String, aqueduct_publish::ObjectSchema>,
        ) -> Result<(), aqueduct_subscribe::SinkError> {
            Ok(())
        }
    };
}
pub(crate) use state_dir_methods;
