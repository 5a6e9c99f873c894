//! `COPY`'s formats: its options checked as PostgreSQL 15 checks them
//! ([`options`]), the text, CSV and binary data read as it streams in
//! ([`CopyDecoder`]: rows parsed as each message arrives and handed on in
//! chunks of [`COPY_CHUNK_ROWS`]) and written ([`CopyEncoder`]),
//! byte for byte as PostgreSQL writes them. The layouts are in
//! `docs/copy.md`.
//!
//! A value's text form is the wire's text format and its binary form the
//! wire's binary format (`wire_values.rs`), as in PostgreSQL, where both
//! are the type's output and send functions.

use aqueduct_expr::SqlError;
use aqueduct_values::{DataType, Value};
use bytes::BytesMut;
use sqlparser::ast::{CopyLegacyCsvOption, CopyLegacyOption, CopyOption, Ident};

use crate::limits::{COPY_CHUNK_ROWS, MAX_COPY_ROW_BYTES};
use crate::plan::{Column, CopyFormat, CopyOptions, ForceQuote, InsertPlan};
use crate::wire_values;

/// The 11 bytes that begin binary `COPY` data.
pub const BINARY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// The flags bit that says binary data carries OIDs (refused, as
/// PostgreSQL 12 and later refuse it).
const BINARY_FLAG_OIDS: u32 = 1 << 16;

/// About how many bytes of encoded rows one CopyData message of `COPY ...
/// TO STDOUT` carries.
pub const COPY_OUT_CHUNK_BYTES: usize = 64 * 1024;

/// Characters a text-format delimiter cannot be: they mean something after
/// a backslash (PostgreSQL's list).
const TEXT_DELIMITER_FORBIDDEN: &[u8] = b"\\.abcdefghijklmnopqrstuvwxyz0123456789";

/// SQLSTATE 42601 for an option given twice.
fn redundant() -> SqlError {
    SqlError::syntax("conflicting or redundant options")
}

/// 22023 (invalid parameter value).
fn invalid(message: impl Into<String>) -> SqlError {
    SqlError::new("22023", message)
}

/// 22P04 (bad copy file format).
fn bad_format(message: impl Into<String>) -> SqlError {
    SqlError::new("22P04", message)
}

/// A one-byte option character, or 0A000 naming the option.
fn one_byte(c: char, what: &str) -> Result<u8, SqlError> {
    u8::try_from(c).ok().filter(u8::is_ascii).ok_or_else(|| {
        SqlError::new(
            "0A000",
            format!("COPY {what} must be a single one-byte character"),
        )
    })
}

/// The options as given, before defaults and checks.
#[derive(Default)]
struct Given {
    /// Each option as given (see [`CopyOptions`]), `None` when it was not.
    format: Option<CopyFormat>,
    header: Option<bool>,
    delimiter: Option<char>,
    null: Option<String>,
    quote: Option<char>,
    escape: Option<char>,
    force_quote: Option<ForceQuote>,
    force_not_null: Option<Vec<String>>,
    force_null: Option<Vec<String>>,
    encoding: Option<String>,
    freeze: Option<bool>,
}

/// Sets `slot` once; a second time is 42601, as in PostgreSQL.
fn once<T>(slot: &mut Option<T>, v: T) -> Result<(), SqlError> {
    if slot.is_some() {
        return Err(redundant());
    }
    *slot = Some(v);
    Ok(())
}

/// Column names as identifiers resolve them (unquoted: lower case).
fn names(ids: &[Ident]) -> Vec<String> {
    ids.iter()
        .map(|i| match i.quote_style {
            Some(_) => i.value.clone(),
            None => i.value.to_lowercase(),
        })
        .collect()
}

/// `FORCE_QUOTE` columns: `*` arrives from the parser as the one quoted
/// name `*` (`parse.rs: rewrite_copy_options`).
fn force_quote_of(ids: &[Ident]) -> ForceQuote {
    match ids {
        [one] if one.value == "*" => ForceQuote::All,
        _ => ForceQuote::Columns(names(ids)),
    }
}

/// `COPY`'s options, from the parenthesized list and the pre-9.0 syntax
/// (`WITH CSV HEADER`, `DELIMITER AS ','`, `NULL AS ''`, `BINARY`),
/// defaulted and checked as PostgreSQL 15's `ProcessCopyOptions`; `to`:
/// `COPY ... TO`.
pub fn options(
    list: &[CopyOption],
    legacy: &[CopyLegacyOption],
    to: bool,
) -> Result<CopyOptions, SqlError> {
    let mut g = Given::default();
    for o in list {
        match o {
            CopyOption::Format(f) => {
                let f = match f.value.to_lowercase().as_str() {
                    "text" => CopyFormat::Text,
                    "csv" => CopyFormat::Csv,
                    "binary" => CopyFormat::Binary,
                    other => {
                        return Err(invalid(format!("COPY format \"{other}\" not recognized")))
                    }
                };
                once(&mut g.format, f)?
            }
            CopyOption::Freeze(b) => once(&mut g.freeze, *b)?,
            CopyOption::Delimiter(c) => once(&mut g.delimiter, *c)?,
            CopyOption::Null(s) => once(&mut g.null, s.clone())?,
            CopyOption::Header(b) => once(&mut g.header, *b)?,
            CopyOption::Quote(c) => once(&mut g.quote, *c)?,
            CopyOption::Escape(c) => once(&mut g.escape, *c)?,
            CopyOption::ForceQuote(ids) => once(&mut g.force_quote, force_quote_of(ids))?,
            CopyOption::ForceNotNull(ids) => once(&mut g.force_not_null, names(ids))?,
            CopyOption::ForceNull(ids) => once(&mut g.force_null, names(ids))?,
            CopyOption::Encoding(e) => once(&mut g.encoding, e.clone())?,
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Binary => once(&mut g.format, CopyFormat::Binary)?,
            CopyLegacyOption::Delimiter(c) => once(&mut g.delimiter, *c)?,
            CopyLegacyOption::Null(s) => once(&mut g.null, s.clone())?,
            CopyLegacyOption::Header => once(&mut g.header, true)?,
            CopyLegacyOption::Csv(csv) => {
                once(&mut g.format, CopyFormat::Csv)?;
                for c in csv {
                    match c {
                        CopyLegacyCsvOption::Header => once(&mut g.header, true)?,
                        CopyLegacyCsvOption::Quote(q) => once(&mut g.quote, *q)?,
                        CopyLegacyCsvOption::Escape(e) => once(&mut g.escape, *e)?,
                        CopyLegacyCsvOption::ForceQuote(ids) => {
                            once(&mut g.force_quote, force_quote_of(ids))?
                        }
                        CopyLegacyCsvOption::ForceNotNull(ids) => {
                            once(&mut g.force_not_null, names(ids))?
                        }
                    }
                }
            }
            other => {
                return Err(SqlError::syntax(format!(
                    "option \"{other}\" not recognized"
                )))
            }
        }
    }
    check(g, to)
}

/// Defaults and PostgreSQL's checks of options against each other.
fn check(g: Given, to: bool) -> Result<CopyOptions, SqlError> {
    let format = g.format.unwrap_or(CopyFormat::Text);
    let csv = format == CopyFormat::Csv;
    if format == CopyFormat::Binary {
        if g.delimiter.is_some() {
            return Err(SqlError::syntax("cannot specify DELIMITER in BINARY mode"));
        }
        if g.null.is_some() {
            return Err(SqlError::syntax("cannot specify NULL in BINARY mode"));
        }
        if g.header.is_some() {
            return Err(SqlError::syntax("cannot specify HEADER in BINARY mode"));
        }
    }
    if let Some(e) = &g.encoding {
        let e = e.to_ascii_lowercase().replace(['-', '_'], "");
        if e != "utf8" && e != "unicode" {
            return Err(SqlError::new(
                "0A000",
                format!("COPY encoding \"{e}\" is not supported: Aqueduct speaks UTF8 only"),
            ));
        }
    }
    // FREEZE is accepted and changes nothing: a COPY's rows are visible
    // to others once its transaction commits, never before, as with
    // FREEZE in PostgreSQL; there is no hint bit or vacuum to save.
    let _ = g.freeze;
    let delimiter = one_byte(
        g.delimiter.unwrap_or(if csv { ',' } else { '\t' }),
        "delimiter",
    )?;
    let null = g
        .null
        .unwrap_or_else(|| if csv { String::new() } else { "\\N".into() });
    if delimiter == b'\r' || delimiter == b'\n' {
        return Err(invalid(
            "COPY delimiter cannot be newline or carriage return",
        ));
    }
    if null.contains(['\r', '\n']) {
        return Err(invalid(
            "COPY null representation cannot use newline or carriage return",
        ));
    }
    if format == CopyFormat::Text && TEXT_DELIMITER_FORBIDDEN.contains(&delimiter) {
        return Err(invalid(format!(
            "COPY delimiter cannot be \"{}\"",
            delimiter as char
        )));
    }
    let only_csv = |given: bool, what: &str| {
        if given && !csv {
            Err(SqlError::new(
                "0A000",
                format!("COPY {what} available only in CSV mode"),
            ))
        } else {
            Ok(())
        }
    };
    only_csv(g.quote.is_some(), "quote")?;
    only_csv(g.escape.is_some(), "escape")?;
    only_csv(g.force_quote.is_some(), "force quote")?;
    only_csv(g.force_not_null.is_some(), "force not null")?;
    only_csv(g.force_null.is_some(), "force null")?;
    let quote = one_byte(g.quote.unwrap_or('"'), "quote")?;
    let escape = match g.escape {
        Some(e) => one_byte(e, "escape")?,
        None => quote,
    };
    if csv && delimiter == quote {
        return Err(invalid("COPY delimiter and quote must be different"));
    }
    let wrong_way = |given: bool, what: &str, way: &str| {
        if given {
            Err(SqlError::new(
                "0A000",
                format!("COPY {what} only available using COPY {way}"),
            ))
        } else {
            Ok(())
        }
    };
    wrong_way(g.force_quote.is_some() && !to, "force quote", "TO")?;
    wrong_way(g.force_not_null.is_some() && to, "force not null", "FROM")?;
    wrong_way(g.force_null.is_some() && to, "force null", "FROM")?;
    if format != CopyFormat::Binary && null.as_bytes().contains(&delimiter) {
        return Err(invalid(
            "COPY delimiter must not appear in the NULL specification",
        ));
    }
    if csv && null.as_bytes().contains(&quote) {
        return Err(invalid(
            "CSV quote character must not appear in the NULL specification",
        ));
    }
    Ok(CopyOptions {
        format,
        header: g.header.unwrap_or(false),
        delimiter,
        null,
        quote,
        escape,
        force_quote: g.force_quote.unwrap_or(ForceQuote::Columns(Vec::new())),
        force_not_null: g.force_not_null.unwrap_or_default(),
        force_null: g.force_null.unwrap_or_default(),
    })
}

/// For each of `columns`, whether `listed` names it; 42P10 for a name that
/// is not among them, as PostgreSQL says it.
fn flags(listed: &[String], columns: &[String], option: &str) -> Result<Vec<bool>, SqlError> {
    for name in listed {
        if !columns.contains(name) {
            return Err(SqlError::new(
                "42P10",
                format!("{option} column \"{name}\" not referenced by COPY"),
            ));
        }
    }
    Ok(columns.iter().map(|c| listed.contains(c)).collect())
}

/// A `COPY ... FROM STDIN` under way, as a session holds it: the rows
/// read so far, and the `INSERT` that writes them when the data ends.
pub struct CopyLoad {
    /// The rows read so far.
    pub decoder: CopyDecoder,
    /// The `INSERT` that writes them (its source replaced by the rows).
    pub insert: Box<InsertPlan>,
}

/// How lines end (text and CSV), decided by the first line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Eol {
    /// `\n`.
    Nl,
    /// `\r`.
    Cr,
    /// `\r\n`.
    CrNl,
}

/// One field of a text or CSV line: its bytes after unescaping, and
/// whether it stands for NULL.
struct Field {
    /// The value's text, unescaped (unquoted).
    bytes: Vec<u8>,
    /// It stands for NULL.
    null: bool,
}

/// Reads `COPY ... FROM STDIN` data as it arrives: complete lines (text,
/// CSV) or tuples (binary) become rows of the columns' types at once; a
/// partial one waits in a buffer for the next chunk.
pub struct CopyDecoder {
    /// The options, checked.
    options: CopyOptions,
    /// The relation as errors' CONTEXT names it.
    relation: String,
    /// The copied columns' names and types.
    names: Vec<String>,
    types: Vec<DataType>,
    /// Per column: `FORCE_NOT_NULL` and `FORCE_NULL` name it.
    force_not_null: Vec<bool>,
    force_null: Vec<bool>,
    /// Bytes received and not yet consumed.
    buf: Vec<u8>,
    /// CSV: how far `buf` was scanned for the end of the line, and
    /// whether that point is inside quotes.
    scanned: usize,
    in_quotes: bool,
    /// How lines end, once the first one did.
    eol: Option<Eol>,
    /// The last line read (1-based), or the last tuple for binary data.
    line: u64,
    /// The header line (text, CSV) or the binary header is still to come.
    header_pending: bool,
    /// The end-of-data marker (`\.`, or the binary trailer) was read.
    ended: bool,
    /// The rows read, and the line each ended on.
    rows: Vec<Vec<Value>>,
    lines: Vec<u64>,
}

impl CopyDecoder {
    /// A decoder of rows of `columns` of `relation`.
    pub fn new(
        options: CopyOptions,
        relation: &str,
        columns: &[Column],
    ) -> Result<CopyDecoder, SqlError> {
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let force_not_null = flags(&options.force_not_null, &names, "FORCE_NOT_NULL")?;
        let force_null = flags(&options.force_null, &names, "FORCE_NULL")?;
        let header_pending = options.header || options.format == CopyFormat::Binary;
        Ok(CopyDecoder {
            relation: relation.to_string(),
            types: columns.iter().map(|c| c.ty.clone()).collect(),
            names,
            force_not_null,
            force_null,
            options,
            buf: Vec::new(),
            scanned: 0,
            in_quotes: false,
            eol: None,
            line: 0,
            header_pending,
            ended: false,
            rows: Vec::new(),
            lines: Vec::new(),
        })
    }

    /// The rows read so far.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Takes one chunk of data (a CopyData message's): its complete lines
    /// or tuples become rows, until [`CopyDecoder::full`] (then
    /// [`CopyDecoder::take_rows`] and [`CopyDecoder::resume`] read on).
    pub fn feed(&mut self, data: &[u8]) -> Result<(), SqlError> {
        if self.ended {
            // PostgreSQL reads and ignores what follows the end marker.
            return Ok(());
        }
        self.buf.extend_from_slice(data);
        self.resume(false)
    }

    /// Whether a chunk of rows ([`COPY_CHUNK_ROWS`]) waits to be taken
    /// before more data is read.
    pub fn full(&self) -> bool {
        self.rows.len() >= COPY_CHUNK_ROWS
    }

    /// The rows read and not yet taken, and the line each ended on.
    pub fn take_rows(&mut self) -> (Vec<Vec<Value>>, Vec<u64>) {
        (
            std::mem::take(&mut self.rows),
            std::mem::take(&mut self.lines),
        )
    }

    /// Reads on in the data held; `last`: the data ended (CopyDone), so
    /// the last line without a newline is a row too, and binary data must
    /// not stop inside a tuple. Stops once [`CopyDecoder::full`].
    pub fn resume(&mut self, last: bool) -> Result<(), SqlError> {
        if self.ended {
            return Ok(());
        }
        self.consume(last)?;
        if !self.full() && self.buf.len() > MAX_COPY_ROW_BYTES {
            return Err(SqlError::new(
                "54000",
                format!(
                    "COPY row of more than {MAX_COPY_ROW_BYTES} bytes exceeds the limit of one row (MAX_COPY_ROW_BYTES)"
                ),
            )
            .with_context(format!("COPY {}, line {}", self.relation, self.line + 1)));
        }
        Ok(())
    }

    /// Consumes what `buf` holds; `last`: no more data follows.
    fn consume(&mut self, last: bool) -> Result<(), SqlError> {
        let mut at = 0;
        let result = loop {
            if self.ended || self.full() {
                break Ok(());
            }
            let step = match self.options.format {
                CopyFormat::Binary => self.binary_step(at, last),
                _ => self.line_step(at, last),
            };
            match step {
                Ok(Some(next)) => at = next,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.buf.drain(..at);
        self.scanned = self.scanned.saturating_sub(at);
        result
    }

    /// Reads one line of text or CSV from `buf[at..]`: `Some(next)` past
    /// it, or `None` when no complete line is there yet.
    fn line_step(&mut self, at: usize, last: bool) -> Result<Option<usize>, SqlError> {
        let csv = self.options.format == CopyFormat::Csv;
        let rest = &self.buf[at..];
        if rest.is_empty() {
            return Ok(None);
        }
        let end = if csv {
            self.csv_line_end(at)
        } else {
            rest.iter()
                .position(|&b| b == b'\n' || b == b'\r')
                .map(|p| at + p)
        };
        let (line_end, next) = match end {
            Some(e) => {
                let eol = if self.buf[e] == b'\n' {
                    Eol::Nl
                } else if self.eol == Some(Eol::Cr) {
                    Eol::Cr
                } else {
                    match self.buf.get(e + 1) {
                        Some(b'\n') => Eol::CrNl,
                        Some(_) => Eol::Cr,
                        // A `\r` at the end of this chunk: wait for what follows.
                        None if !last => return Ok(None),
                        None => Eol::Cr,
                    }
                };
                self.check_eol(eol)?;
                (e, e + if eol == Eol::CrNl { 2 } else { 1 })
            }
            None if last => {
                if csv && self.in_quotes {
                    self.line += 1;
                    return Err(bad_format("unterminated CSV quoted field")
                        .with_context(self.line_context(&self.buf[at..])));
                }
                (self.buf.len(), self.buf.len())
            }
            None => return Ok(None),
        };
        self.scanned = next;
        self.in_quotes = false;
        // A CSV row's quoted newlines are lines too: errors name the last
        // (PostgreSQL counts physical lines as it reads them).
        self.line += 1 + self.buf[at..line_end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        let line = self.buf[at..line_end].to_vec();
        if line == b"\\." {
            self.ended = true;
            return Ok(Some(next));
        }
        if std::mem::take(&mut self.header_pending) {
            return Ok(Some(next));
        }
        let fields = if csv {
            self.csv_fields(&line)
        } else {
            self.text_fields(&line)
        }
        .map_err(|e| e.with_context(self.line_context(&line)))?;
        let row = self.row_of(fields, &line)?;
        self.rows.push(row);
        self.lines.push(self.line);
        Ok(Some(next))
    }

    /// The first line's ending is every line's, as in PostgreSQL: a
    /// carriage return or newline that ends a line otherwise is 22P04
    /// (data must escape it, or quote it in CSV).
    fn check_eol(&mut self, eol: Eol) -> Result<(), SqlError> {
        let seen = *self.eol.get_or_insert(eol);
        if seen == eol {
            return Ok(());
        }
        let csv = self.options.format == CopyFormat::Csv;
        let newline = eol == Eol::Nl;
        let message = match (csv, newline) {
            (false, true) => "literal newline found in data",
            (false, false) => "literal carriage return found in data",
            (true, true) => "unquoted newline found in data",
            (true, false) => "unquoted carriage return found in data",
        };
        let hint = match (csv, newline) {
            (false, true) => "Use \"\\n\" to represent newline.",
            (false, false) => "Use \"\\r\" to represent carriage return.",
            (true, true) => "Use quoted CSV field to represent newline.",
            (true, false) => "Use quoted CSV field to represent carriage return.",
        };
        Err(bad_format(message).with_hint(hint).with_context(format!(
            "COPY {}, line {}",
            self.relation,
            self.line + 1
        )))
    }

    /// Where the CSV line that starts at `at` ends (an unquoted `\n` or
    /// `\r`), scanning on from where the last chunk left off.
    fn csv_line_end(&mut self, at: usize) -> Option<usize> {
        let (quote, escape) = (self.options.quote, self.options.escape);
        let mut i = self.scanned.max(at);
        while i < self.buf.len() {
            let c = self.buf[i];
            if self.in_quotes {
                if c == escape && escape != quote {
                    match self.buf.get(i + 1) {
                        Some(&n) if n == quote || n == escape => {
                            i += 2;
                            continue;
                        }
                        Some(_) => {}
                        // The escaped character is in the next chunk.
                        None => break,
                    }
                }
                if c == quote {
                    self.in_quotes = false;
                }
            } else if c == quote {
                self.in_quotes = true;
            } else if c == b'\n' || c == b'\r' {
                self.scanned = i;
                return Some(i);
            }
            i += 1;
        }
        self.scanned = i;
        None
    }

    /// Text format: fields split at unescaped delimiters, backslash
    /// sequences decoded; a field whose raw bytes are the NULL string is NULL.
    fn text_fields(&self, line: &[u8]) -> Result<Vec<Field>, SqlError> {
        let delim = self.options.delimiter;
        let null = self.options.null.as_bytes();
        let mut fields = Vec::new();
        let mut i = 0;
        loop {
            let start = i;
            let mut out = Vec::new();
            while i < line.len() && line[i] != delim {
                let c = line[i];
                i += 1;
                if c != b'\\' {
                    out.push(c);
                    continue;
                }
                let Some(&n) = line.get(i) else {
                    // A backslash at the end of the line stands for itself.
                    out.push(b'\\');
                    break;
                };
                i += 1;
                match n {
                    b'0'..=b'7' => {
                        let mut v = u32::from(n - b'0');
                        for _ in 0..2 {
                            match line.get(i) {
                                Some(&d @ b'0'..=b'7') => {
                                    v = v * 8 + u32::from(d - b'0');
                                    i += 1;
                                }
                                _ => break,
                            }
                        }
                        out.push((v & 0xff) as u8);
                    }
                    b'x' if line.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                        let mut v = 0u32;
                        for _ in 0..2 {
                            match line.get(i) {
                                Some(d) if d.is_ascii_hexdigit() => {
                                    v = v * 16 + (*d as char).to_digit(16).unwrap_or(0);
                                    i += 1;
                                }
                                _ => break,
                            }
                        }
                        out.push(v as u8);
                    }
                    b'b' => out.push(0x08),
                    b'f' => out.push(0x0c),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'v' => out.push(0x0b),
                    other => out.push(other),
                }
            }
            let raw = &line[start..i];
            fields.push(Field {
                null: raw == null,
                bytes: out,
            });
            if i >= line.len() {
                break;
            }
            // Past the delimiter.
            i += 1;
        }
        Ok(fields)
    }

    /// CSV: fields split at delimiters outside quotes; quotes removed and
    /// escaped quotes kept; an unquoted field equal to the NULL string is
    /// NULL (not with FORCE_NOT_NULL), and a quoted one too with FORCE_NULL.
    fn csv_fields(&self, line: &[u8]) -> Result<Vec<Field>, SqlError> {
        let (delim, quote, escape) = (
            self.options.delimiter,
            self.options.quote,
            self.options.escape,
        );
        let null = self.options.null.as_bytes();
        let mut fields = Vec::new();
        let mut i = 0;
        loop {
            let column = fields.len();
            let mut out = Vec::new();
            let mut quoted = false;
            let mut raw_unquoted = Vec::new();
            let mut in_quotes = false;
            while i < line.len() {
                let c = line[i];
                if in_quotes {
                    if c == escape && line.get(i + 1).is_some_and(|&n| n == quote || n == escape) {
                        // With escape == quote this is `""`: one quote.
                        out.push(line[i + 1]);
                        i += 2;
                        continue;
                    }
                    if c == quote {
                        in_quotes = false;
                        i += 1;
                        continue;
                    }
                    out.push(c);
                    i += 1;
                } else {
                    if c == delim {
                        break;
                    }
                    if c == quote {
                        in_quotes = true;
                        quoted = true;
                        i += 1;
                        continue;
                    }
                    out.push(c);
                    raw_unquoted.push(c);
                    i += 1;
                }
            }
            if in_quotes {
                return Err(bad_format("unterminated CSV quoted field"));
            }
            let not_null = self.force_not_null.get(column).copied().unwrap_or(false);
            let force_null = self.force_null.get(column).copied().unwrap_or(false);
            let is_null = if quoted {
                force_null && out == null
            } else {
                !not_null && raw_unquoted == null
            };
            fields.push(Field {
                bytes: out,
                null: is_null,
            });
            if i >= line.len() {
                break;
            }
            i += 1;
        }
        Ok(fields)
    }

    /// One row of the columns' types from a line's fields; 22P04 when the
    /// line has too few or too many.
    fn row_of(&self, fields: Vec<Field>, line: &[u8]) -> Result<Vec<Value>, SqlError> {
        if fields.len() > self.types.len() {
            return Err(bad_format("extra data after last expected column")
                .with_context(self.line_context(line)));
        }
        if fields.len() < self.types.len() {
            let missing = &self.names[fields.len()];
            return Err(bad_format(format!("missing data for column \"{missing}\""))
                .with_context(self.line_context(line)));
        }
        fields
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                if f.null {
                    return Ok(Value::Null);
                }
                let ty = &self.types[i];
                let shown = String::from_utf8_lossy(&f.bytes).into_owned();
                let context = || {
                    format!(
                        "COPY {}, line {}, column {}: \"{}\"",
                        self.relation, self.line, self.names[i], shown
                    )
                };
                let text = std::str::from_utf8(&f.bytes).map_err(|_| {
                    SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\"")
                        .with_context(context())
                })?;
                crate::parse::param_from_text(text, ty).map_err(|e| e.with_context(context()))
            })
            .collect()
    }

    /// The CONTEXT of an error in a whole line: `COPY t, line 3: "..."`.
    fn line_context(&self, line: &[u8]) -> String {
        format!(
            "COPY {}, line {}: \"{}\"",
            self.relation,
            self.line,
            String::from_utf8_lossy(line)
        )
    }

    /// Reads the binary header or one tuple from `buf[at..]`: `Some(next)`
    /// past it, `None` when it is not all there yet.
    fn binary_step(&mut self, at: usize, last: bool) -> Result<Option<usize>, SqlError> {
        let b = &self.buf[at..];
        let eof = || bad_format("unexpected EOF in COPY data");
        if self.header_pending {
            if b.len() < BINARY_SIGNATURE.len() + 8 {
                if last {
                    return Err(
                        if b.len() < BINARY_SIGNATURE.len()
                            || &b[..BINARY_SIGNATURE.len()] != BINARY_SIGNATURE
                        {
                            bad_format("COPY file signature not recognized")
                        } else {
                            bad_format("invalid COPY file header (missing flags)")
                        },
                    );
                }
                return Ok(None);
            }
            if &b[..BINARY_SIGNATURE.len()] != BINARY_SIGNATURE {
                return Err(bad_format("COPY file signature not recognized"));
            }
            let flags = u32::from_be_bytes(b[11..15].try_into().expect("four bytes"));
            if flags & BINARY_FLAG_OIDS != 0 {
                return Err(bad_format("invalid COPY file header (WITH OIDS)"));
            }
            if flags & 0xffff_0000 & !BINARY_FLAG_OIDS != 0 {
                return Err(bad_format(
                    "unrecognized critical flags in COPY file header",
                ));
            }
            let ext = i32::from_be_bytes(b[15..19].try_into().expect("four bytes"));
            let ext = usize::try_from(ext)
                .map_err(|_| bad_format("invalid COPY file header (missing length)"))?;
            let total = 19 + ext;
            if b.len() < total {
                if last {
                    return Err(bad_format("invalid COPY file header (wrong length)"));
                }
                return Ok(None);
            }
            self.header_pending = false;
            return Ok(Some(at + total));
        }
        if b.is_empty() {
            return Ok(None);
        }
        if b.len() < 2 {
            return if last { Err(eof()) } else { Ok(None) };
        }
        let count = i16::from_be_bytes([b[0], b[1]]);
        if count == -1 {
            self.ended = true;
            return Ok(Some(at + 2));
        }
        let tuple = self.line + 1;
        let context = |column: Option<&str>| match column {
            Some(c) => format!("COPY {}, line {tuple}, column {c}", self.relation),
            None => format!("COPY {}, line {tuple}", self.relation),
        };
        if usize::try_from(count).ok() != Some(self.types.len()) {
            return Err(bad_format(format!(
                "row field count is {count}, expected {}",
                self.types.len()
            ))
            .with_context(context(None)));
        }
        // Find the whole tuple first, so a partial one waits for more.
        let mut spans = Vec::with_capacity(self.types.len());
        let mut i = 2;
        for _ in 0..self.types.len() {
            let Some(len) = b.get(i..i + 4) else {
                return if last {
                    Err(eof().with_context(context(None)))
                } else {
                    Ok(None)
                };
            };
            let len = i32::from_be_bytes(len.try_into().expect("four bytes"));
            i += 4;
            if len < 0 {
                if len != -1 {
                    return Err(bad_format("invalid field size").with_context(context(None)));
                }
                spans.push(None);
                continue;
            }
            let len = len as usize;
            if b.len() < i + len {
                if len > MAX_COPY_ROW_BYTES {
                    return Err(bad_format("invalid field size").with_context(context(None)));
                }
                return if last {
                    Err(eof().with_context(context(None)))
                } else {
                    Ok(None)
                };
            }
            spans.push(Some(i..i + len));
            i += len;
        }
        let row = spans
            .into_iter()
            .enumerate()
            .map(|(c, span)| match span {
                None => Ok(Value::Null),
                Some(span) => wire_values::decode_binary(&b[span], &self.types[c])
                    .map_err(|e| e.with_context(context(Some(&self.names[c])))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.line = tuple;
        self.rows.push(row);
        self.lines.push(tuple);
        Ok(Some(at + i))
    }
}

/// Writes `COPY ... TO STDOUT` data: rows in the chosen format, as
/// PostgreSQL 15 writes them.
pub struct CopyEncoder {
    /// The options, checked.
    options: CopyOptions,
    /// The columns' types.
    types: Vec<DataType>,
    /// Per column: `FORCE_QUOTE` names it.
    force_quote: Vec<bool>,
    /// The chunk being filled.
    out: BytesMut,
    /// Chunks filled.
    chunks: Vec<Vec<u8>>,
}

impl CopyEncoder {
    /// An encoder of rows of `columns`; writes the header (binary, or the
    /// column names with `HEADER`).
    pub fn new(options: CopyOptions, columns: &[Column]) -> Result<CopyEncoder, SqlError> {
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let force_quote = match &options.force_quote {
            ForceQuote::All => vec![true; names.len()],
            ForceQuote::Columns(listed) => flags(listed, &names, "FORCE_QUOTE")?,
        };
        let mut e = CopyEncoder {
            types: columns.iter().map(|c| c.ty.clone()).collect(),
            force_quote,
            options,
            out: BytesMut::new(),
            chunks: Vec::new(),
        };
        match e.options.format {
            CopyFormat::Binary => {
                e.out.extend_from_slice(BINARY_SIGNATURE);
                e.out.extend_from_slice(&0u32.to_be_bytes());
                e.out.extend_from_slice(&0u32.to_be_bytes());
            }
            _ if e.options.header => {
                let single = names.len() == 1;
                for (i, n) in names.iter().enumerate() {
                    if i > 0 {
                        e.out.extend_from_slice(&[e.options.delimiter]);
                    }
                    e.field(n.as_bytes(), false, single);
                }
                e.out.extend_from_slice(b"\n");
            }
            _ => {}
        }
        Ok(e)
    }

    /// Appends one row.
    pub fn row(&mut self, row: &[Value]) -> Result<(), SqlError> {
        if self.options.format == CopyFormat::Binary {
            let count = i16::try_from(row.len())
                .map_err(|_| SqlError::new("54000", "too many columns for binary COPY"))?;
            self.out.extend_from_slice(&count.to_be_bytes());
            for (v, ty) in row.iter().zip(&self.types) {
                if v.is_null() {
                    self.out.extend_from_slice(&(-1i32).to_be_bytes());
                    continue;
                }
                let at = self.out.len();
                self.out.extend_from_slice(&0i32.to_be_bytes());
                wire_values::encode_binary(v, ty, &mut self.out)?;
                let len = i32::try_from(self.out.len() - at - 4)
                    .map_err(|_| SqlError::new("54000", "value too large for binary COPY"))?;
                self.out[at..at + 4].copy_from_slice(&len.to_be_bytes());
            }
        } else {
            let single = row.len() == 1;
            let mut text = BytesMut::new();
            for (i, v) in row.iter().enumerate() {
                if i > 0 {
                    self.out.extend_from_slice(&[self.options.delimiter]);
                }
                if v.is_null() {
                    let null = self.options.null.clone();
                    self.out.extend_from_slice(null.as_bytes());
                    continue;
                }
                text.clear();
                let ty = self.types.get(i).unwrap_or(&DataType::Text);
                wire_values::encode_text(v, ty, &mut text)?;
                let force = self.force_quote.get(i).copied().unwrap_or(false);
                self.field(&text, force, single);
            }
            self.out.extend_from_slice(b"\n");
        }
        if self.out.len() >= COPY_OUT_CHUNK_BYTES {
            self.chunks.push(self.out.split().to_vec());
        }
        Ok(())
    }

    /// One value's text form, escaped (text) or quoted as needed (CSV).
    fn field(&mut self, v: &[u8], force_quote: bool, single: bool) {
        if self.options.format == CopyFormat::Csv {
            self.csv_field(v, force_quote, single);
            return;
        }
        let delim = self.options.delimiter;
        for &c in v {
            match c {
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'\n' => self.out.extend_from_slice(b"\\n"),
                b'\r' => self.out.extend_from_slice(b"\\r"),
                b'\t' => self.out.extend_from_slice(b"\\t"),
                0x08 => self.out.extend_from_slice(b"\\b"),
                0x0c => self.out.extend_from_slice(b"\\f"),
                0x0b => self.out.extend_from_slice(b"\\v"),
                c if c == delim => self.out.extend_from_slice(&[b'\\', c]),
                c => self.out.extend_from_slice(&[c]),
            }
        }
    }

    /// A CSV field: quoted when forced, when it equals the NULL string,
    /// when it holds the delimiter, the quote, `\n` or `\r`, or when it is
    /// `\.` alone on its line; inside quotes the quote and the escape
    /// character are preceded by the escape character.
    fn csv_field(&mut self, v: &[u8], force_quote: bool, single: bool) {
        let (delim, quote, escape) = (
            self.options.delimiter,
            self.options.quote,
            self.options.escape,
        );
        let needs = force_quote
            || v == self.options.null.as_bytes()
            || (single && v == b"\\.")
            || v.iter()
                .any(|&c| c == delim || c == quote || c == b'\n' || c == b'\r');
        if !needs {
            self.out.extend_from_slice(v);
            return;
        }
        self.out.extend_from_slice(&[quote]);
        for &c in v {
            if c == quote || c == escape {
                self.out.extend_from_slice(&[escape]);
            }
            self.out.extend_from_slice(&[c]);
        }
        self.out.extend_from_slice(&[quote]);
    }

    /// Ends the data (the binary trailer) and returns it in chunks.
    pub fn finish(mut self) -> Vec<Vec<u8>> {
        if self.options.format == CopyFormat::Binary {
            self.out.extend_from_slice(&(-1i16).to_be_bytes());
        }
        if !self.out.is_empty() {
            self.chunks.push(self.out.to_vec());
        }
        self.chunks
    }
}

#[cfg(test)]
mod tests;
