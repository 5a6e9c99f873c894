//! A small blocking HTTP/1.1 client over `std::net::TcpStream`: enough for
//! Aqueduct's `/v1/snapshot`, `/v1/changes` (long-lived NDJSON streams,
//! chunked) and `POST /v1/sql`. One request per connection
//! (`Connection: close`), plain HTTP only (put TLS in front with a proxy).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value as Json;

use crate::Error;

/// Bytes of a response head (status line and headers) accepted at most.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Bytes of one line of a stream accepted at most (a message of one
/// transaction; the server bounds a batch at 64 MiB of log).
pub const MAX_LINE_BYTES: usize = 256 << 20;
/// Bytes of an error body read at most.
const MAX_ERROR_BODY_BYTES: usize = 1 << 20;
const READ_CHUNK: usize = 64 << 10;

/// How the body's end is known.
#[derive(Debug)]
enum Framing {
    Chunked(Chunk),
    Length(u64),
    Close,
}

#[derive(Debug, Clone, Copy)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk with this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
}

/// A response: its status and a body read incrementally.
pub struct Response {
    pub status: u16,
    pub body: Body,
}

/// A response body, decoded as it arrives (chunked, sized, or until the
/// connection closes). Reads that time out leave it intact: call again.
pub struct Body {
    stream: TcpStream,
    /// Bytes read from the socket, not yet decoded, from `pos`.
    raw: Vec<u8>,
    pos: usize,
    /// Decoded body bytes not yet handed out.
    decoded: Vec<u8>,
    framing: Framing,
    done: bool,
}

fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, Error> {
    let err = |source| Error::Connect {
        addr: addr.to_string(),
        source,
    };
    let mut last = None;
    for a in addr.to_socket_addrs().map_err(err)? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                s.set_nodelay(true).ok();
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing")
    })))
}

/// Sends a request and reads the response head. `timeout` bounds the
/// connect and each read until the head is in.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response, Error> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| ("Authorization", a))
        .into_iter()
        .collect();
    request_with_headers(addr, method, path, &headers, body, timeout)
}

/// [`request`] with extra header lines (name, value) in place of the
/// token; a body is sent as `application/json`.
pub fn request_with_headers(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response, Error> {
    let mut stream = connect(addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.unwrap_or_default());
    stream.write_all(&out)?;

    let (status, fields, raw, head_end) = read_head(&mut stream)?;
    let mut framing = Framing::Close;
    for (name, value) in &fields {
        let (name, value) = (name.as_str(), value.as_str());
        if name == "transfer-encoding" && value.to_ascii_lowercase().contains("chunked") {
            framing = Framing::Chunked(Chunk::Size);
        } else if name == "content-length" && !matches!(framing, Framing::Chunked(_)) {
            let n = value
                .parse()
                .map_err(|_| Error::Protocol(format!("bad content-length {value:?}")))?;
            framing = Framing::Length(n);
        }
    }
    let done = matches!(framing, Framing::Length(0));
    Ok(Response {
        status,
        body: Body {
            stream,
            raw,
            pos: head_end + 4,
            decoded: Vec::new(),
            framing,
            done,
        },
    })
}

/// Reads a response head: its status, its header fields (names in lower
/// case), and the bytes read so far with where the head ends in them.
#[allow(clippy::type_complexity)]
fn read_head(
    stream: &mut TcpStream,
) -> Result<(u16, Vec<(String, String)>, Vec<u8>, usize), Error> {
    let mut raw = Vec::with_capacity(READ_CHUNK);
    let head_end = loop {
        if let Some(i) = find(&raw, b"\r\n\r\n") {
            break i;
        }
        if raw.len() > MAX_HEAD_BYTES {
            return Err(Error::Protocol("response head too long".into()));
        }
        if read_more(stream, &mut raw)? == 0 {
            return Err(Error::Protocol(
                "the connection closed before a response".into(),
            ));
        }
    };
    let head = std::str::from_utf8(&raw[..head_end])
        .map_err(|_| Error::Protocol("response head is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| Error::Protocol(format!("bad status line {status_line:?}")))?;
    let fields = lines
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect();
    Ok((status, fields, raw, head_end))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn read_more(stream: &mut TcpStream, raw: &mut Vec<u8>) -> io::Result<usize> {
    let len = raw.len();
    raw.resize(len + READ_CHUNK, 0);
    let got = stream.read(&mut raw[len..]);
    raw.truncate(len + *got.as_ref().unwrap_or(&0));
    got
}

impl Body {
    /// Bounds each wait for bytes (`None`: wait forever). A read that
    /// times out returns an error of kind `WouldBlock` or `TimedOut`.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// The next line of the body without its `\n` (an empty line is a
    /// keep-alive on Aqueduct's streams); `None` at the end of the body.
    pub fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut scanned = 0;
        loop {
            if let Some(i) = self.decoded[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + i;
                let mut line: Vec<u8> = self.decoded.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
            scanned = self.decoded.len();
            if scanned > MAX_LINE_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a line of the response is too long",
                ));
            }
            if self.done {
                if self.decoded.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.decoded)));
            }
            self.decode_more()?;
        }
    }

    /// The rest of the body, which must be at most `max` bytes (an error
    /// of kind `InvalidData` if it is longer).
    pub fn read_all(&mut self, max: usize) -> io::Result<Vec<u8>> {
        let body = self.read_to_end(max.saturating_add(1))?;
        if body.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the body is longer than {max} bytes"),
            ));
        }
        Ok(body)
    }

    /// The rest of the body, up to `max` bytes (cut there).
    pub fn read_to_end(&mut self, max: usize) -> io::Result<Vec<u8>> {
        while !self.done && self.decoded.len() <= max {
            self.decode_more()?;
        }
        self.decoded.truncate(max);
        Ok(std::mem::take(&mut self.decoded))
    }

    /// Decodes what is buffered, reading from the socket when it is not
    /// enough for progress.
    fn decode_more(&mut self) -> io::Result<()> {
        let before = (self.decoded.len(), self.done);
        self.decode_buffered()?;
        if (self.decoded.len(), self.done) != before {
            return Ok(());
        }
        if self.pos > 0 && self.pos == self.raw.len() {
            self.raw.clear();
            self.pos = 0;
        } else if self.pos > READ_CHUNK {
            self.raw.drain(..self.pos);
            self.pos = 0;
        }
        let got = read_more(&mut self.stream, &mut self.raw)?;
        if got == 0 {
            if matches!(self.framing, Framing::Close) {
                self.done = true;
                return Ok(());
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed in the middle of the response",
            ));
        }
        self.decode_buffered()
    }

    fn decode_buffered(&mut self) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        loop {
            let avail = &self.raw[self.pos..];
            match &mut self.framing {
                Framing::Close => {
                    self.decoded.extend_from_slice(avail);
                    self.pos = self.raw.len();
                    return Ok(());
                }
                Framing::Length(left) => {
                    let n = (*left).min(avail.len() as u64) as usize;
                    self.decoded.extend_from_slice(&avail[..n]);
                    self.pos += n;
                    *left -= n as u64;
                    if *left == 0 {
                        self.done = true;
                    }
                    return Ok(());
                }
                Framing::Chunked(state) => match *state {
                    _ if self.done => return Ok(()),
                    Chunk::Size | Chunk::Trailer => {
                        let Some(i) = find(avail, b"\r\n") else {
                            if avail.len() > 4096 {
                                return Err(bad("chunk header too long"));
                            }
                            return Ok(());
                        };
                        let line = std::str::from_utf8(&avail[..i])
                            .map_err(|_| bad("chunk header is not text"))?;
                        if matches!(state, Chunk::Trailer) {
                            if line.is_empty() {
                                self.done = true;
                            }
                        } else {
                            let hex = line.split(';').next().unwrap_or_default().trim();
                            let size =
                                u64::from_str_radix(hex, 16).map_err(|_| bad("bad chunk size"))?;
                            *state = if size == 0 {
                                Chunk::Trailer
                            } else {
                                Chunk::Data(size)
                            };
                        }
                        self.pos += i + 2;
                    }
                    Chunk::Data(left) => {
                        if avail.is_empty() {
                            return Ok(());
                        }
                        let n = left.min(avail.len() as u64) as usize;
                        self.decoded.extend_from_slice(&avail[..n]);
                        self.pos += n;
                        *state = if left == n as u64 {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(left - n as u64)
                        };
                    }
                    Chunk::DataEnd => {
                        if avail.len() < 2 {
                            return Ok(());
                        }
                        if &avail[..2] != b"\r\n" {
                            return Err(bad("chunk not followed by CRLF"));
                        }
                        self.pos += 2;
                        *state = Chunk::Size;
                    }
                },
            }
        }
    }
}

/// The error a non-2xx answer carries: Aqueduct's `{"error": {"code",
/// "message"}}`, or the status and body when it is something else.
pub fn error_of(status: u16, body: &mut Body) -> Error {
    let bytes = body.read_to_end(MAX_ERROR_BODY_BYTES).unwrap_or_default();
    match serde_json::from_slice::<Json>(&bytes) {
        Ok(j) if j.get("error").is_some() => server_error(&j["error"]),
        _ => Error::Protocol(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(500)
                .collect::<String>()
        )),
    }
}

/// An `{"code", "message"}` object as an error.
pub fn server_error(e: &Json) -> Error {
    Error::Server {
        code: e["code"].as_str().unwrap_or("XX000").to_string(),
        message: e["message"].as_str().unwrap_or_default().to_string(),
    }
}

/// `POST /v1/sql` with `{"sql", "params"}`: the answer's JSON (`rows`,
/// `columns`, `lsn`, ...), or the server's error.
pub fn sql(
    addr: &str,
    token: Option<&str>,
    sql: &str,
    params: &[Json],
    timeout: Duration,
) -> Result<Json, Error> {
    let body = serde_json::json!({ "sql": sql, "params": params }).to_string();
    let mut r = request(
        addr,
        "POST",
        "/v1/sql",
        token,
        Some(body.as_bytes()),
        timeout,
    )?;
    if !(200..300).contains(&r.status) {
        return Err(error_of(r.status, &mut r.body));
    }
    let bytes = r.body.read_to_end(MAX_LINE_BYTES)?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Protocol(format!("bad JSON answer: {e}")))
}

/// A connection kept open across requests (HTTP/1.1 keep-alive), for a
/// caller that sends many small requests to one server, one at a time
/// (a Raft member's messages to another). A request on a connection the
/// server closed meanwhile is sent once more on a new one, so it must be
/// safe to repeat.
pub struct Connection {
    addr: String,
    stream: Option<TcpStream>,
}

impl Connection {
    pub fn new(addr: &str) -> Connection {
        Connection {
            addr: addr.to_string(),
            stream: None,
        }
    }

    /// `POST path` with `body`; the status and the response body (at most
    /// `max` bytes). `timeout` bounds the connect and each read and write.
    pub fn post(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &[u8],
        timeout: Duration,
        max: usize,
    ) -> Result<(u16, Vec<u8>), Error> {
        let reused = self.stream.is_some();
        match self.post_once(path, token, body, timeout, max) {
            Err(Error::Io(_) | Error::Protocol(_)) if reused => {
                self.post_once(path, token, body, timeout, max)
            }
            other => other,
        }
    }

    fn post_once(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &[u8],
        timeout: Duration,
        max: usize,
    ) -> Result<(u16, Vec<u8>), Error> {
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => connect(&self.addr, timeout)?,
        };
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        stream.write_all(&out)?;
        let (status, fields, mut raw, head_end) = read_head(&mut stream)?;
        let (mut length, mut keep) = (None, true);
        for (name, value) in &fields {
            let (name, value) = (name.as_str(), value.as_str());
            if name == "content-length" {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| Error::Protocol(format!("bad content-length {value:?}")))?,
                );
            } else if name == "connection" && value.eq_ignore_ascii_case("close") {
                keep = false;
            } else if name == "transfer-encoding" {
                return Err(Error::Protocol(
                    "a chunked answer where a sized one was expected".into(),
                ));
            }
        }
        let Some(length) = length else {
            return Err(Error::Protocol("an answer without a content-length".into()));
        };
        if length > max {
            return Err(Error::Protocol(format!(
                "an answer of {length} bytes (at most {max} are read)"
            )));
        }
        let mut body = raw.split_off(head_end + 4);
        while body.len() < length {
            if read_more(&mut stream, &mut body)? == 0 {
                return Err(Error::Protocol("the answer was cut short".into()));
            }
        }
        if body.len() > length {
            return Err(Error::Protocol("bytes past the answer".into()));
        }
        if keep {
            self.stream = Some(stream);
        }
        Ok((status, body))
    }
}
