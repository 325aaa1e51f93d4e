//! ZMTP 3, ZeroMQ's wire protocol, as the ROUTER side of a NULL-security connection speaks it: the
//! 64-byte greeting, the READY handshake and the frames of a message (ZeroMQ RFC 23).
//!
//! Every length a peer declares is checked against the caller's limits before a byte is set aside for
//! it, and a frame's buffer grows with the bytes that really arrive: a header that declares 2^62 bytes
//! costs nothing but the connection.

use bytes::Bytes;
use std::fmt;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Flag bits of a frame's first byte.
const MORE: u8 = 0x01;
const LONG: u8 = 0x02;
const COMMAND: u8 = 0x04;

/// Bytes of a greeting.
pub const GREETING_LEN: usize = 64;
/// The largest command a peer may send (READY with its properties, PING): commands carry metadata,
/// never data.
pub const MAX_COMMAND: usize = 64 * 1024;
/// The first bytes of a frame's buffer; it grows as the frame's bytes arrive, up to the declared size.
const FIRST_CHUNK: usize = 64 * 1024;

/// Socket types a ROUTER talks to (RFC 28's compatibility table).
pub const ROUTER_PEERS: [&str; 3] = ["REQ", "DEALER", "ROUTER"];

/// Why a connection is closed.
#[derive(Debug)]
pub enum WireError {
    Io(io::Error),
    /// The peer does not speak ZMTP 3 with the NULL mechanism, or broke the handshake.
    Protocol(String),
    /// A frame, or the message it belongs to, is larger than the largest legal one.
    TooLarge {
        declared: u64,
        limit: u64,
    },
    /// A message of more frames than any request has.
    TooManyFrames(usize),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(e) => write!(f, "{e}"),
            WireError::Protocol(why) => write!(f, "{why}"),
            WireError::TooLarge { declared, limit } => {
                write!(f, "it declared a frame that makes its message {declared} bytes, more than the {limit} allowed")
            }
            WireError::TooManyFrames(n) => write!(f, "it sent a message of more than {n} frames"),
        }
    }
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

/// Our greeting: signature, version 3.1 (PING and PONG), mechanism NULL, as-server 0, filler.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = 1;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// Reads the peer's greeting and checks that it speaks ZMTP 3 or later with the NULL mechanism.
pub async fn read_greeting<R: AsyncRead + Unpin>(r: &mut R) -> Result<(), WireError> {
    let mut g = [0u8; GREETING_LEN];
    // The signature and major version first: a ZMTP 1 or 2 peer sends nothing more until it hears ours.
    r.read_exact(&mut g[..11]).await?;
    if g[0] != 0xFF || g[9] & 0x01 == 0 {
        return Err(WireError::Protocol("it is not a ZeroMQ peer (no ZMTP signature)".into()));
    }
    if g[10] < 3 {
        return Err(WireError::Protocol(format!("it speaks ZMTP {}, and ZMTP 3 is needed (libzmq 4 or later)", g[10])));
    }
    r.read_exact(&mut g[11..]).await?;
    let mechanism = &g[12..32];
    let end = mechanism.iter().position(|&b| b == 0).unwrap_or(mechanism.len());
    if &mechanism[..end] != b"NULL" {
        return Err(WireError::Protocol(format!(
            "it asks for the {} security mechanism; only NULL is served",
            String::from_utf8_lossy(&mechanism[..end]).escape_debug()
        )));
    }
    Ok(())
}

/// A frame header's bytes for a frame of `len` bytes.
fn header(flags: u8, len: usize, out: &mut Vec<u8>) {
    if len <= u8::MAX as usize {
        out.push(flags);
        out.push(len as u8);
    } else {
        out.push(flags | LONG);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// A command frame: its name, then its body.
fn command(name: &str, body: &[u8]) -> Vec<u8> {
    let len = 1 + name.len() + body.len();
    let mut out = Vec::with_capacity(len + 9);
    header(COMMAND, len, &mut out);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(body);
    out
}

/// The READY command with our socket type.
pub fn ready(socket_type: &str) -> Vec<u8> {
    let mut body = Vec::new();
    property(&mut body, "Socket-Type", socket_type.as_bytes());
    command("READY", &body)
}

fn property(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
}

/// The PONG that answers a PING with `context`.
pub fn pong(context: &[u8]) -> Vec<u8> {
    command("PONG", context)
}

/// What a peer's READY says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub socket_type: String,
    /// The routing identity the peer asked for; empty: none.
    pub identity: Bytes,
}

/// A command's name and body.
fn split_command(frame: &[u8]) -> Result<(&[u8], &[u8]), WireError> {
    let (&n, rest) = frame.split_first().ok_or_else(|| WireError::Protocol("it sent an empty command".into()))?;
    if rest.len() < n as usize {
        return Err(WireError::Protocol("it sent a command whose name runs past its end".into()));
    }
    Ok(rest.split_at(n as usize))
}

/// Reads a READY command's properties (or an ERROR command's reason).
pub fn parse_ready(frame: &[u8]) -> Result<Ready, WireError> {
    let (name, mut body) = split_command(frame)?;
    if name == b"ERROR" {
        let reason = body.get(1..).unwrap_or_default();
        return Err(WireError::Protocol(format!("it refused the handshake: {}", String::from_utf8_lossy(reason))));
    }
    if name != b"READY" {
        return Err(WireError::Protocol(format!(
            "it sent {} where READY belongs",
            String::from_utf8_lossy(name).escape_debug()
        )));
    }
    let bad = || WireError::Protocol("its READY command has a property that runs past its end".into());
    let mut ready = Ready { socket_type: String::new(), identity: Bytes::new() };
    while let Some((&n, rest)) = body.split_first() {
        let (key, rest) = rest.split_at_checked(n as usize).ok_or_else(bad)?;
        let (len, rest) = rest.split_at_checked(4).ok_or_else(bad)?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (value, rest) = rest.split_at_checked(len).ok_or_else(bad)?;
        // Property names are case-insensitive (RFC 23).
        if key.eq_ignore_ascii_case(b"Socket-Type") {
            ready.socket_type = String::from_utf8_lossy(value).into_owned();
        } else if key.eq_ignore_ascii_case(b"Identity") {
            ready.identity = Bytes::copy_from_slice(value);
        }
        body = rest;
    }
    Ok(ready)
}

/// Reads one frame's header: its flags and declared size.
async fn read_header<R: AsyncRead + Unpin>(r: &mut R) -> Result<(u8, u64), WireError> {
    let flags = r.read_u8().await?;
    if flags & !(MORE | LONG | COMMAND) != 0 {
        return Err(WireError::Protocol(format!("it sent a frame with reserved flag bits set ({flags:#04x})")));
    }
    let size = if flags & LONG != 0 { r.read_u64().await? } else { u64::from(r.read_u8().await?) };
    Ok((flags, size))
}

/// Reads `size` bytes (already checked against a limit) into a buffer that grows as they arrive.
async fn read_body<R: AsyncRead + Unpin>(r: &mut R, size: usize) -> Result<Bytes, WireError> {
    let mut buf = Vec::with_capacity(size.min(FIRST_CHUNK));
    while buf.len() < size {
        if buf.len() == buf.capacity() {
            buf.reserve_exact((buf.capacity() * 2).min(size) - buf.len());
        }
        let want = (buf.capacity() - buf.len()).min(size - buf.len());
        let n = (&mut *r).take(want as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok(Bytes::from(buf))
}

/// Reads the peer's READY command (the first frame after the greetings).
pub async fn read_ready<R: AsyncRead + Unpin>(r: &mut R) -> Result<Ready, WireError> {
    let (flags, size) = read_header(r).await?;
    if flags & COMMAND == 0 {
        return Err(WireError::Protocol("it sent a message before its READY command".into()));
    }
    if size > MAX_COMMAND as u64 {
        return Err(WireError::TooLarge { declared: size, limit: MAX_COMMAND as u64 });
    }
    let body = read_body(r, size as usize).await?;
    parse_ready(&body)
}

/// How much a peer may send in one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame.
    pub frame: u64,
    /// The largest message, all its frames together.
    pub message: u64,
    /// The most frames in one message.
    pub frames: usize,
}

/// What arrives between messages.
#[derive(Debug, PartialEq)]
pub enum Inbound {
    /// A whole message, its frames in order.
    Message(Vec<Bytes>),
    /// A PING command, answered with [`pong`] and this context.
    Ping(Bytes),
}

/// Reads the next message or PING. `limits` gives the bounds; it is asked again, through `retry`,
/// when a frame exceeds them, so a caller can keep a cheap cached bound and compute the exact one only
/// for a frame that needs it.
pub async fn read_inbound<R: AsyncRead + Unpin, L: FnMut(bool) -> Limits>(
    r: &mut R,
    limits: &mut L,
) -> Result<Inbound, WireError> {
    let mut frames = Vec::new();
    let mut total: u64 = 0;
    loop {
        let (flags, size) = read_header(r).await?;
        if flags & COMMAND != 0 {
            if size > MAX_COMMAND as u64 {
                return Err(WireError::TooLarge { declared: size, limit: MAX_COMMAND as u64 });
            }
            let body = read_body(r, size as usize).await?;
            let (name, rest) = split_command(&body)?;
            // PING: a 2-byte TTL, then the context to echo (ZMTP 3.1). Other commands mean nothing to a
            // ROUTER (SUBSCRIBE and CANCEL are for PUB/SUB) and are skipped.
            if name == b"PING" && frames.is_empty() {
                return Ok(Inbound::Ping(Bytes::copy_from_slice(rest.get(2..).unwrap_or_default())));
            }
            continue;
        }
        let mut bound = limits(false);
        let declared = total.saturating_add(size);
        if size > bound.frame || declared > bound.message {
            bound = limits(true);
            if size > bound.frame {
                return Err(WireError::TooLarge { declared: size, limit: bound.frame });
            }
            if declared > bound.message {
                return Err(WireError::TooLarge { declared, limit: bound.message });
            }
        }
        if frames.len() >= bound.frames {
            return Err(WireError::TooManyFrames(bound.frames));
        }
        total = declared;
        // `size` is within `bound.frame`, which the caller keeps far below usize::MAX.
        frames.push(read_body(r, usize::try_from(size).unwrap_or(usize::MAX)).await?);
        if flags & MORE == 0 {
            return Ok(Inbound::Message(frames));
        }
    }
}

/// Writes a message's frames (the routing identity already taken off) to `w`, without flushing.
pub async fn write_message<W: AsyncWrite + Unpin>(w: &mut W, frames: &[Bytes]) -> io::Result<()> {
    let mut head = Vec::with_capacity(9);
    for (i, f) in frames.iter().enumerate() {
        head.clear();
        header(if i + 1 < frames.len() { MORE } else { 0 }, f.len(), &mut head);
        w.write_all(&head).await?;
        w.write_all(f).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
