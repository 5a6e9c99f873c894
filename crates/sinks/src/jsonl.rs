//! JSON lines: each applied transaction or schema change written as its
//! wire line (`docs/publications.md` §4) to stdout or a file, flushed
//! before the batch counts as applied. At least once: the position is
//! stored apart (§5.4), in a state directory, after the lines are out; a
//! crash between the two sends some lines again, and each change's
//! `version` and `prev_version` (and the transaction's `txid`) let the
//! receiver guard itself.
//!
//! The state directory is the message sinks' (`state_dir`).

use std::fs::{File, OpenOptions};
use std::io::{self, Stdout, Write};
use std::path::{Path, PathBuf};

use aqueduct_subscribe::{Item, Record, Sink, SinkError};

use crate::state_dir::{io_error, state_dir_methods, wire_line, StateDir};
pub use crate::state_dir::{DEAD_LETTERS_FILE, POSITION_FILE};

/// A sink writing one JSON line per applied item to `W`.
pub struct JsonLinesSink<W: Write> {
    out: W,
    state: StateDir,
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
        Ok(JsonLinesSink {
            out,
            state: StateDir::open(state_dir)?,
        })
    }

    /// The writer, for tests and for a caller that wants it back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Sink for JsonLinesSink<W> {
    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        let mut text = String::new();
        for line in items.iter().filter_map(wire_line) {
            text.push_str(&line);
            text.push('\n');
        }
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| io_error("writing lines", e))?;
        self.state.delivered(record)
    }

    state_dir_methods!();
}
