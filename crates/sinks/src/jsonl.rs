//! JSON lines: each applied transaction or schema change written as its
//! wire line (`docs/publications.md` §4) to stdout or a file, flushed
//! before the batch counts as applied. At least once: the position is
//! stored apart (§5.4), in a state directory, after the lines are out; a
//! crash between the two sends some lines again, and each change's
//! `version` and `prev_version` (and the transaction's `txid`) let the
//! receiver guard itself.
//!
//! The state directory holds `position.json` (watermark, the transactions
//! applied above it, the last schema change; replaced whole through a
//! temporary file and a rename) and `dead_letters.jsonl` (appended: a line
//! per dead letter stored and per dead letter cleared; the last line for
//! an LSN wins).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Stdout, Write};
use std::path::{Path, PathBuf};

use aqueduct_publish::{Lsn, ObjectSchema, WireMessage};
use aqueduct_subscribe::{Item, PositionMode, Record, Resume, SchemaPos, Sink, SinkError};
use serde::{Deserialize, Serialize};

/// The position file's name in the state directory.
pub const POSITION_FILE: &str = "position.json";

/// The dead letters' file name in the state directory.
pub const DEAD_LETTERS_FILE: &str = "dead_letters.jsonl";

/// A sink writing one JSON line per applied item to `W`.
pub struct JsonLinesSink<W: Write> {
    out: W,
    state_dir: PathBuf,
    /// The last schema change written, kept with the position.
    schema: Option<SchemaPos>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Position {
    watermark: Lsn,
    applied_above: Vec<Lsn>,
    schema: Option<(Lsn, u32)>,
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
fn io_error(what: &str, e: io::Error) -> SinkError {
    SinkError::transient(format!("{what}: {e}"))
}

impl JsonLinesSink<Stdout> {
    /// Lines on standard output.
    pub fn stdout(state_dir: impl Into<PathBuf>) -> Result<Self, SinkError> {
        JsonLinesSink::new(io::stdout(), state_dir)
    }
}

impl JsonLinesSink<File> {
    /// Lines appended to the file at `path`.
    pub fn file(path: impl AsRef<Path>, state_dir: impl Into<PathBuf>) -> Result<Self, SinkError> {
        let path = path.as_ref();
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| SinkError::permanent(format!("{}: {e}", path.display())))?;
        JsonLinesSink::new(out, state_dir)
    }
}

impl<W: Write> JsonLinesSink<W> {
    /// Lines written to `out`; the position kept in `state_dir`, created
    /// if missing.
    pub fn new(out: W, state_dir: impl Into<PathBuf>) -> Result<Self, SinkError> {
        let state_dir = state_dir.into();
        fs::create_dir_all(&state_dir)
            .map_err(|e| SinkError::permanent(format!("{}: {e}", state_dir.display())))?;
        let mut sink = JsonLinesSink {
            out,
            state_dir,
            schema: None,
        };
        sink.schema = sink
            .read_position()?
            .schema
            .map(|(lsn, seq)| SchemaPos { lsn, seq });
        Ok(sink)
    }

    /// The writer, for tests and for a caller that wants it back.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn read_position(&self) -> Result<Position, SinkError> {
        let path = self.state_dir.join(POSITION_FILE);
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
        let path = self.state_dir.join(POSITION_FILE);
        let tmp = self.state_dir.join(format!("{POSITION_FILE}.tmp"));
        let text = serde_json::to_vec(p).expect("positions serialize");
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            File::open(&self.state_dir)?.sync_all()
        };
        write().map_err(|e| io_error(&path.display().to_string(), e))
    }

    fn append_dead_letter(&self, line: &DeadLetterLine) -> Result<(), SinkError> {
        let path = self.state_dir.join(DEAD_LETTERS_FILE);
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
        let path = self.state_dir.join(DEAD_LETTERS_FILE);
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
}

impl<W: Write> Sink for JsonLinesSink<W> {
    fn position_mode(&self) -> PositionMode {
        PositionMode::Separate
    }

    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        assert!(
            record.applied.is_empty() && record.watermark.is_none(),
            "a sink storing positions apart got a position with its rows"
        );
        let mut text = String::new();
        for item in items {
            let line = match item {
                Item::Txn(t) => WireMessage::Txn((**t).clone()).to_line(),
                Item::Schema(s, _) => WireMessage::Schema((**s).clone()).to_line(),
                Item::Skip { .. } => continue,
            };
            text.push_str(&line);
            text.push('\n');
        }
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| io_error("writing lines", e))?;
        // A schema change is a barrier: recording it once its line is out
        // is as safe as a transactional sink's record.
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

    fn store_position(
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
        })?;
        self.schema = schema;
        Ok(())
    }

    fn store_dead_letter(
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

    fn clear_dead_letter(&mut self, lsn: Lsn) -> Result<(), SinkError> {
        self.append_dead_letter(&DeadLetterLine {
            lsn,
            attempts: None,
            error: None,
        })
    }

    fn resume(&self) -> Result<Resume, SinkError> {
        let p = self.read_position()?;
        Ok(Resume {
            watermark: p.watermark,
            applied_above: p.applied_above,
            schema: p.schema.map(|(lsn, seq)| SchemaPos { lsn, seq }),
            dead_letters: self.dead_letters()?,
        })
    }

    /// Message sinks hold no tables: the receiver learns shapes from the
    /// schema lines.
    fn ensure_objects(&mut self, _: &BTreeMap<String, ObjectSchema>) -> Result<(), SinkError> {
        Ok(())
    }
}
