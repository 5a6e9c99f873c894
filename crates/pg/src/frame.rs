//! A guard between the socket and pgwire's decoder: it reads whole
//! frontend messages, checks each declared length against a limit as soon
//! as the header arrives (before buffering the body), and checks that the
//! body is well formed for its type before handing it on.
//!
//! Why: pgwire accepts messages of up to 1 GiB and decodes bodies with
//! panicking reads that are not bounded by the declared length, so a
//! truncated or malformed message could panic the connection task or be
//! read across into the next message. Behind this guard pgwire only ever
//! sees messages that decode exactly; anything else ends the connection
//! with an I/O error of kind `InvalidData`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Largest startup-phase message (startup, cancel): PostgreSQL's own limit.
pub const MAX_STARTUP_MESSAGE_BYTES: usize = 10_000;
/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 16 * 1024;

const CANCEL_REQUEST_CODE: u32 = 80_877_102;
const SSL_REQUEST_CODE: u32 = 80_877_103;
const GSSENC_REQUEST_CODE: u32 = 80_877_104;
/// Shortest and longest cancel request (protocol 3.2 keys run to 256 bytes).
const CANCEL_REQUEST_BYTES: std::ops::RangeInclusive<usize> = 16..=12 + 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the startup message: messages have no type byte.
    Startup,
    /// After a cancel request nothing more may follow.
    Closed,
    Typed,
}

/// Wraps the connection's byte stream; see the module documentation.
pub struct MessageGuard<S> {
    inner: S,
    /// Bytes read but not yet checked as a whole message.
    raw: BytesMut,
    /// Whole, checked messages not yet read by the decoder.
    ready: BytesMut,
    phase: Phase,
    /// `p` messages seen: the first one is a SASLInitialResponse.
    password_messages: usize,
    max_message_bytes: usize,
    eof: bool,
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl<S> MessageGuard<S> {
    /// `buffered` holds bytes already read from `inner` (by TLS negotiation)
    /// that have not been checked yet.
    pub fn new(inner: S, buffered: BytesMut, max_message_bytes: usize) -> MessageGuard<S> {
        MessageGuard {
            inner,
            raw: buffered,
            ready: BytesMut::new(),
            phase: Phase::Startup,
            password_messages: 0,
            max_message_bytes,
            eof: false,
        }
    }

    /// Moves the next complete message from `raw` to `ready` if there is one.
    fn extract(&mut self) -> io::Result<bool> {
        match self.phase {
            Phase::Closed if !self.raw.is_empty() => Err(invalid("data after a cancel request")),
            Phase::Closed => Ok(false),
            Phase::Startup => {
                if self.raw.len() < 4 {
                    return Ok(false);
                }
                let len = u32::from_be_bytes(self.raw[..4].try_into().unwrap()) as usize;
                if !(8..=MAX_STARTUP_MESSAGE_BYTES).contains(&len) {
                    return Err(invalid(format!("invalid startup packet length {len}")));
                }
                if self.raw.len() < len {
                    return Ok(false);
                }
                let code = u32::from_be_bytes(self.raw[4..8].try_into().unwrap());
                match code {
                    CANCEL_REQUEST_CODE => {
                        if !CANCEL_REQUEST_BYTES.contains(&len) {
                            return Err(invalid("invalid cancel request length"));
                        }
                        self.phase = Phase::Closed;
                    }
                    SSL_REQUEST_CODE | GSSENC_REQUEST_CODE => {
                        return Err(invalid("encryption requested twice"));
                    }
                    _ => {
                        if code >> 16 != 3 {
                            return Err(invalid(format!(
                                "unsupported frontend protocol {}.{}",
                                code >> 16,
                                code & 0xffff
                            )));
                        }
                        check_startup_parameters(&self.raw[8..len])?;
                        self.phase = Phase::Typed;
                    }
                }
                self.ready.extend_from_slice(&self.raw.split_to(len));
                Ok(true)
            }
            Phase::Typed => {
                if self.raw.len() < 5 {
                    return Ok(false);
                }
                let tag = self.raw[0];
                let len = u32::from_be_bytes(self.raw[1..5].try_into().unwrap()) as usize;
                let fixed_empty = matches!(tag, b'S' | b'H' | b'X' | b'c');
                if !matches!(
                    tag,
                    b'Q' | b'P'
                        | b'B'
                        | b'E'
                        | b'D'
                        | b'C'
                        | b'S'
                        | b'H'
                        | b'X'
                        | b'p'
                        | b'd'
                        | b'c'
                        | b'f'
                ) {
                    return Err(invalid(format!("invalid frontend message type {tag}")));
                }
                if len < 4 || len > self.max_message_bytes || (fixed_empty && len != 4) {
                    return Err(invalid(format!(
                        "invalid length {len} of message type {:?} (limit {} bytes)",
                        tag as char, self.max_message_bytes
                    )));
                }
                if self.raw.len() < 1 + len {
                    return Ok(false);
                }
                let body = &self.raw[5..1 + len];
                let ok = match tag {
                    b'p' => {
                        self.password_messages += 1;
                        self.password_messages > 1 || check_sasl_initial(body)
                    }
                    _ => check_body(tag, body),
                };
                if !ok {
                    return Err(invalid(format!(
                        "malformed message of type {:?}",
                        tag as char
                    )));
                }
                self.ready.extend_from_slice(&self.raw.split_to(1 + len));
                Ok(true)
            }
        }
    }
}

/// Splits `input` into the messages the guard lets through, in order, and
/// the error that stopped it, if any (for tests and fuzzing: the same
/// checks as the stream, without a socket).
pub fn split_checked(input: &[u8], max_message_bytes: usize) -> (Vec<Vec<u8>>, io::Result<()>) {
    let mut guard = MessageGuard::new((), BytesMut::from(input), max_message_bytes);
    let mut out = Vec::new();
    loop {
        match guard.extract() {
            Ok(true) => out.push(guard.ready.split().to_vec()),
            Ok(false) => return (out, Ok(())),
            Err(e) => return (out, Err(e)),
        }
    }
}

/// The property the fuzz target and the tests check: whatever the guard
/// lets through, pgwire decodes exactly: no panic, nothing left over,
/// nothing read across into the next message. Panics otherwise.
#[doc(hidden)]
pub fn decode_with_pgwire(messages: &[Vec<u8>]) {
    use pgwire::api::{DefaultClient, PgWireConnectionState};
    use pgwire::messages::PgWireFrontendMessage;
    use pgwire::tokio::server::PgWireMessageServerCodec;
    use tokio_util::codec::Decoder;

    let addr = ([127, 0, 0, 1], 5432).into();
    let mut client = DefaultClient::<()>::new(addr, false);
    client.state = PgWireConnectionState::AwaitingStartup;
    let mut codec = PgWireMessageServerCodec::new(client);
    let mut first_password = true;
    for (i, m) in messages.iter().enumerate() {
        let mut buf = BytesMut::from(&m[..]);
        let decoded = codec
            .decode(&mut buf)
            .unwrap_or_else(|e| panic!("message {i} {m:?}: {e}"));
        assert!(decoded.is_some(), "message {i} {m:?} not decoded");
        assert!(
            buf.is_empty(),
            "message {i} {m:?}: {} bytes left over",
            buf.len()
        );
        if let Some(PgWireFrontendMessage::PasswordMessageFamily(p)) = decoded {
            if first_password {
                first_password = false;
                p.into_sasl_initial_response().unwrap();
            }
        }
        codec.client_info.state = PgWireConnectionState::ReadyForQuery;
    }
}

/// A startup message for user `fuzz`, protocol 3.0.
const FUZZ_STARTUP: &[u8] = b"\0\0\0\x13\0\x03\0\0user\0fuzz\0\0";

/// Entry point of the fuzz target (`crates/pg/fuzz`): arbitrary bytes,
/// after a valid startup message when the first byte is odd.
#[doc(hidden)]
pub fn fuzz_check(data: &[u8]) {
    let input = match data.split_first() {
        Some((first, rest)) if first & 1 == 1 => [FUZZ_STARTUP, rest].concat(),
        _ => data.to_vec(),
    };
    let (passed, _) = split_checked(&input, 1 << 20);
    decode_with_pgwire(&passed);
}

/// Reads a message body the way pgwire's decoders do, but checked.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn cstr(&mut self) -> Option<()> {
        let nul = self.0.iter().position(|&b| b == 0)?;
        self.take(nul + 1).map(|_| ())
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A length-prefixed value: -1 (NULL) or that many bytes.
    fn value(&mut self) -> Option<()> {
        match self.i32()? {
            -1 => Some(()),
            n if n >= 0 => self.take(n as usize).map(|_| ()),
            _ => None,
        }
    }

    fn done(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

fn check_body(tag: u8, body: &[u8]) -> bool {
    let mut c = Cursor(body);
    let parsed = (|| match tag {
        b'Q' | b'f' => {
            c.cstr()?;
            c.done()
        }
        b'P' => {
            c.cstr()?;
            c.cstr()?;
            let n = c.u16()?;
            c.take(n * 4)?;
            c.done()
        }
        b'B' => {
            c.cstr()?;
            c.cstr()?;
            let formats = c.u16()?;
            c.take(formats * 2)?;
            for _ in 0..c.u16()? {
                c.value()?;
            }
            let result_formats = c.u16()?;
            c.take(result_formats * 2)?;
            c.done()
        }
        b'E' => {
            c.cstr()?;
            c.i32()?;
            c.done()
        }
        b'D' | b'C' => {
            c.take(1)?;
            c.cstr()?;
            c.done()
        }
        // Sync, Flush, Terminate, CopyDone (length checked to be empty),
        // CopyData (any bytes).
        _ => Some(()),
    })();
    parsed.is_some()
}

fn check_sasl_initial(body: &[u8]) -> bool {
    let mut c = Cursor(body);
    (|| {
        c.cstr()?;
        c.value()?;
        c.done()
    })()
    .is_some()
}

/// Startup parameters: `name\0value\0` pairs ending in an empty name.
fn check_startup_parameters(body: &[u8]) -> io::Result<()> {
    let mut c = Cursor(body);
    loop {
        let rest = c.0;
        match rest.first() {
            Some(0) if rest.len() == 1 => return Ok(()),
            Some(0) | None => break,
            Some(_) => {
                if c.cstr().and_then(|_| c.cstr()).is_none() {
                    break;
                }
            }
        }
    }
    Err(invalid("malformed startup parameters"))
}

impl<S: AsyncRead + Unpin> AsyncRead for MessageGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready[..n]);
                this.ready.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.extract()? {
                continue;
            }
            if this.eof {
                // A partial message at EOF is dropped: the client is gone anyway.
                return Poll::Ready(Ok(()));
            }
            this.raw.reserve(READ_CHUNK_BYTES);
            let spare = this.raw.spare_capacity_mut();
            let mut rb = ReadBuf::uninit(spare);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == 0 {
                        this.eof = true;
                    }
                    // SAFETY: `poll_read` initialised the first `n` bytes of the
                    // spare capacity it was given.
                    unsafe { this.raw.set_len(this.raw.len() + n) };
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for MessageGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::AsyncReadExt;

    const LIMIT: usize = 1 << 20;

    fn startup() -> Vec<u8> {
        let body = b"user\0alice\0database\0db\0\0";
        let mut m = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&196_608u32.to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    async fn pass(input: Vec<u8>) -> io::Result<Vec<u8>> {
        let mut g = MessageGuard::new(&input[..], BytesMut::new(), LIMIT);
        let mut out = Vec::new();
        g.read_to_end(&mut out).await?;
        Ok(out)
    }

    fn run(input: Vec<u8>) -> io::Result<Vec<u8>> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(pass(input))
    }

    #[test]
    fn well_formed_messages_pass_unchanged() {
        let mut input = startup();
        input.extend(msg(b'Q', b"select 1\0"));
        input.extend(msg(b'P', b"s1\0select $1\0\0\x01\0\0\0\x17"));
        input.extend(msg(
            b'B',
            b"\0s1\0\0\x01\0\x01\0\x01\0\0\0\x04\0\0\0\x07\0\x01\0\x01",
        ));
        input.extend(msg(b'B', b"\0s1\0\0\0\0\x01\xff\xff\xff\xff\0\0"));
        input.extend(msg(b'D', b"S\0"));
        input.extend(msg(b'E', b"\0\0\0\0\0"));
        input.extend(msg(b'S', b""));
        input.extend(msg(b'X', b""));
        assert_eq!(run(input.clone()).unwrap(), input);
    }

    #[test]
    fn malformed_messages_are_refused() {
        let bad: Vec<Vec<u8>> = vec![
            msg(b'Q', b"select 1"),                           // no terminator
            msg(b'Q', b"select 1\0extra"),                    // trailing bytes
            msg(b'P', b"s1\0select\0\0\x02\0\0\0\x17"),       // fewer OIDs than counted
            msg(b'B', b"\0\0\0\0\0\x01\0\0\0\x09ab\0\0"),     // value longer than the body
            msg(b'B', b"\0\0\0\0\0\x01\xff\xff\xff\xfe\0\0"), // negative length
            msg(b'E', b"\0\0\0"),
            msg(b'S', b"x"),
            msg(b'Z', b""), // not a frontend message
            {
                let mut m = vec![b'Q'];
                m.extend_from_slice(&(LIMIT as u32 + 1).to_be_bytes());
                m
            },
        ];
        for b in bad {
            let mut input = startup();
            input.extend(&b);
            let err = run(input).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{b:?}");
        }
        // Absurd startup lengths are refused before anything is buffered.
        assert!(run(vec![0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(run(vec![0, 0, 0, 4, 0, 3, 0, 0]).is_err());
        // Startup parameters must end with an empty name.
        let mut s = 17u32.to_be_bytes().to_vec();
        s.extend_from_slice(&196_608u32.to_be_bytes());
        s.extend_from_slice(b"user\0bob\0");
        assert!(run(s).is_err());
    }

    #[test]
    fn fuzz_startup_is_valid() {
        let (passed, result) = split_checked(&[FUZZ_STARTUP, &msg(b'S', b"")].concat(), LIMIT);
        result.unwrap();
        assert_eq!(passed.len(), 2);
        decode_with_pgwire(&passed);
    }

    #[test]
    fn truncated_message_ends_the_stream() {
        let mut input = startup();
        let q = msg(b'Q', b"select 1\0");
        input.extend(&q[..q.len() - 2]);
        assert_eq!(run(input).unwrap(), startup());
    }

    fn templates() -> Vec<Vec<u8>> {
        vec![
            msg(b'Q', b"select 1\0"),
            msg(b'P', b"s1\0select $1, $2\0\0\x02\0\0\0\x17\0\0\0\x19"),
            msg(
                b'B',
                b"p\0s1\0\0\x02\0\x01\0\0\0\x02\0\0\0\x04\0\0\0\x07\xff\xff\xff\xff\0\x01\0\x01",
            ),
            msg(b'E', b"p\0\0\0\0\x05"),
            msg(b'D', b"P\0"),
            msg(b'C', b"S\0"),
            msg(b'S', b""),
            msg(b'H', b""),
            msg(b'd', b"abc"),
            msg(b'c', b""),
            msg(b'f', b"oops\0"),
            msg(b'p', b"SCRAM-SHA-256\0\0\0\0\x03n,,"),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut input = startup();
            input.extend(&tail);
            let _ = run(input);
            fuzz_check(&tail);
            fuzz_check(&[&[1u8][..], &tail].concat());
        }

        /// Mutated messages: whatever the guard passes, pgwire decodes
        /// exactly (no panic, nothing left over, nothing read across).
        #[test]
        fn what_passes_decodes_exactly(
            picks in proptest::collection::vec((0usize..12, any::<u16>(), any::<u8>(), 0u8..4), 1..12)
        ) {
            let t = templates();
            let mut input = startup();
            for (which, at, byte, how) in picks {
                let mut m = t[which].clone();
                let at = at as usize % m.len();
                match how {
                    0 => {}
                    1 => m[at] = byte,
                    2 => m.truncate(at.max(1)),
                    _ => m.insert(at, byte),
                }
                input.extend(m);
            }
            let (passed, _) = split_checked(&input, LIMIT);
            decode_with_pgwire(&passed);
        }
    }
}
