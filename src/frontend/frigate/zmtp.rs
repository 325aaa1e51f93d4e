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
mod tests {
    use super::*;

    fn limits(frame: u64) -> impl FnMut(bool) -> Limits {
        move |_| Limits { frame, message: frame * 2, frames: 8 }
    }

    fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        header(flags, body.len(), &mut out);
        out.extend_from_slice(body);
        out
    }

    #[tokio::test]
    async fn reads_a_greeting_and_refuses_other_peers() {
        let g = greeting();
        assert_eq!(g.len(), 64);
        read_greeting(&mut &g[..]).await.unwrap();
        let mut old = g;
        old[10] = 2;
        assert!(matches!(read_greeting(&mut &old[..]).await, Err(WireError::Protocol(m)) if m.contains("ZMTP 2")));
        let mut curve = g;
        curve[12..17].copy_from_slice(b"CURVE");
        assert!(matches!(read_greeting(&mut &curve[..]).await, Err(WireError::Protocol(m)) if m.contains("CURVE")));
        let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(3);
        assert!(matches!(read_greeting(&mut &http[..]).await, Err(WireError::Protocol(_))));
    }

    #[tokio::test]
    async fn ready_round_trip_with_identity() {
        let mut body = Vec::new();
        property(&mut body, "socket-type", b"DEALER");
        property(&mut body, "Identity", b"cam-1");
        let wire = command("READY", &body);
        let ready = read_ready(&mut &wire[..]).await.unwrap();
        assert_eq!(ready, Ready { socket_type: "DEALER".into(), identity: Bytes::from_static(b"cam-1") });
        assert_eq!(parse_ready(&super::ready("ROUTER")[2..]).unwrap().socket_type, "ROUTER");
        // A property whose length runs past the end.
        let mut body = Vec::new();
        property(&mut body, "Socket-Type", b"REQ");
        body.truncate(body.len() - 1);
        assert!(parse_ready(&command("READY", &body)[2..]).is_err());
        let err = command("ERROR", b"\x05nope!");
        assert!(matches!(parse_ready(&err[2..]), Err(WireError::Protocol(m)) if m.contains("nope")));
    }

    #[tokio::test]
    async fn reads_messages_pings_and_long_frames() {
        let mut wire = frame(MORE, b"");
        wire.extend(frame(COMMAND, b"\x04PING\x00\x0actx"));
        let big = vec![7u8; 300];
        wire.extend(frame(0, &big));
        let mut r = &wire[..];
        let msg = read_inbound(&mut r, &mut limits(1000)).await.unwrap();
        assert_eq!(msg, Inbound::Message(vec![Bytes::new(), Bytes::from(big)]));
        let ping = [frame(COMMAND, b"\x04PING\x00\x0actx"), frame(0, b"x")].concat();
        let mut r = &ping[..];
        assert_eq!(read_inbound(&mut r, &mut limits(10)).await.unwrap(), Inbound::Ping(Bytes::from_static(b"ctx")));
        assert_eq!(
            read_inbound(&mut r, &mut limits(10)).await.unwrap(),
            Inbound::Message(vec![Bytes::from_static(b"x")])
        );
        assert_eq!(pong(b"ctx"), frame(COMMAND, b"\x04PONGctx"));
    }

    #[tokio::test]
    async fn a_declared_size_past_the_limit_is_refused_before_any_read() {
        for declared in [1u64 << 36, 1 << 40, 1 << 62, u64::MAX] {
            let mut wire = vec![LONG];
            wire.extend_from_slice(&declared.to_be_bytes());
            // No body follows: the refusal must come from the header alone.
            let got = read_inbound(&mut &wire[..], &mut limits(1 << 20)).await;
            assert!(
                matches!(got, Err(WireError::TooLarge { declared: d, limit }) if d == declared && limit == 1 << 20)
            );
        }
        // The message total counts too: two frames of 0.75 of a 2x message limit each are fine, three not.
        let part = vec![0u8; 750];
        let wire = [frame(MORE, &part), frame(MORE, &part), frame(MORE, &part)].concat();
        let got = read_inbound(&mut &wire[..], &mut limits(1000)).await;
        assert!(matches!(got, Err(WireError::TooLarge { declared: 2250, limit: 2000 })), "{got:?}");
        let wire: Vec<u8> = (0..9).flat_map(|_| frame(MORE, b"a")).collect();
        assert!(matches!(read_inbound(&mut &wire[..], &mut limits(1000)).await, Err(WireError::TooManyFrames(8))));
        assert!(matches!(read_inbound(&mut &[0x80u8, 0][..], &mut limits(10)).await, Err(WireError::Protocol(_))));
        assert!(read_ready(&mut &[COMMAND | LONG, 0, 0, 0, 1, 0, 0, 0, 0][..]).await.is_err());
    }

    #[tokio::test]
    async fn the_exact_limit_is_asked_for_only_past_the_cached_one() {
        let mut asked = Vec::new();
        let mut l = |fresh: bool| {
            asked.push(fresh);
            Limits { frame: if fresh { 500 } else { 100 }, message: 1000, frames: 4 }
        };
        let wire = frame(0, &[1u8; 300]);
        assert!(matches!(read_inbound(&mut &wire[..], &mut l).await, Ok(Inbound::Message(_))));
        assert_eq!(asked, vec![false, true]);
    }

    #[tokio::test]
    async fn writes_frames_with_more_flags_and_long_sizes() {
        let mut out = Vec::new();
        write_message(&mut out, &[Bytes::new(), Bytes::from(vec![1u8; 256])]).await.unwrap();
        assert_eq!(&out[..2], &[MORE, 0]);
        assert_eq!(out[2], LONG);
        assert_eq!(&out[3..11], &256u64.to_be_bytes());
        assert_eq!(out.len(), 2 + 9 + 256);
        let back = read_inbound(&mut &out[..], &mut limits(1000)).await.unwrap();
        assert_eq!(back, Inbound::Message(vec![Bytes::new(), Bytes::from(vec![1u8; 256])]));
    }
}
