//! The control protocol between the server and a Python stub: length-prefixed frames
//! (`<u32 json length><u32 payload length><json><payload>`, little-endian) over a Unix socket. The JSON
//! says what to do; tensor bytes live in shared memory ([`super::stub_memory`]) or, when they do not fit there,
//! in the frame's payload.

use crate::error::{Error, ErrorKind, Result};
use crate::model_api::types::{DataType, ParamValue, Parameters, Tensor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::io::{Read, Write};

/// Largest frame accepted from a stub (JSON plus payload); larger ones mean a broken stub.
pub const MAX_FRAME: usize = 1 << 31;

/// Writes one frame: the JSON, then the payload parts back to back.
pub fn write_frame(w: &mut impl Write, json: &[u8], payload: &[&[u8]]) -> std::io::Result<()> {
    let plen: usize = payload.iter().map(|p| p.len()).sum();
    let too_big = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "frame larger than 4 GiB");
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&u32::try_from(json.len()).map_err(|_| too_big())?.to_le_bytes());
    head[4..].copy_from_slice(&u32::try_from(plen).map_err(|_| too_big())?.to_le_bytes());
    if plen + json.len() <= 1 << 16 {
        // One write for small frames: fewer system calls on the hot path.
        let mut buf = Vec::with_capacity(8 + json.len() + plen);
        buf.extend_from_slice(&head);
        buf.extend_from_slice(json);
        for p in payload {
            buf.extend_from_slice(p);
        }
        return w.write_all(&buf);
    }
    w.write_all(&head)?;
    w.write_all(json)?;
    for p in payload {
        w.write_all(p)?;
    }
    Ok(())
}

/// Reads one frame: `(json, payload)`, or `None` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            // End of stream between frames is clean; inside a header it is not.
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let jlen = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let plen = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    if jlen + plen > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too large"));
    }
    let mut json = vec![0u8; jlen];
    r.read_exact(&mut json)?;
    let mut payload = vec![0u8; plen];
    r.read_exact(&mut payload)?;
    Ok(Some((json, payload)))
}

/// Reads frames from a socket with a read timeout: a timeout in the middle of a frame keeps what was
/// read, so the next call goes on from there.
#[derive(Debug, Default)]
pub struct FrameReader {
    /// Bytes read and not yet returned as a frame.
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next frame; `Ok(None)` when the read timed out first. End of stream is an error
    /// (`UnexpectedEof`), also between frames: the peer is gone either way.
    pub fn read(&mut self, r: &mut impl Read) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            if self.buf.len() >= 8 {
                let jlen = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                let plen = u32::from_le_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]) as usize;
                if jlen + plen > MAX_FRAME {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too large"));
                }
                let total = 8 + jlen + plen;
                if self.buf.len() >= total {
                    let rest = self.buf.split_off(total);
                    let mut frame = std::mem::replace(&mut self.buf, rest);
                    let payload = frame.split_off(8 + jlen);
                    frame.drain(..8);
                    return Ok(Some((frame, payload)));
                }
                self.buf.reserve(total - self.buf.len());
            }
            let start = self.buf.len();
            let want = self.buf.capacity().max(start + 4096);
            self.buf.resize(want, 0);
            match r.read(&mut self.buf[start..]) {
                Ok(0) => {
                    self.buf.truncate(start);
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                Ok(n) => self.buf.truncate(start + n),
                Err(e) => {
                    self.buf.truncate(start);
                    return match e.kind() {
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Ok(None),
                        std::io::ErrorKind::Interrupted => continue,
                        _ => Err(e),
                    };
                }
            }
        }
    }
}

/// A tensor as described in a frame: name, datatype, shape and where its `l` bytes are: at offset `o`
/// of the shared-memory file, or at offset `i` of the frame's payload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WireTensor {
    pub n: String,
    pub t: String,
    pub s: Vec<i64>,
    pub l: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub o: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub i: Option<u64>,
}

/// One request of an `execute` message. Fields at their defaults are left out: every byte is parsed in
/// Python on the hot path.
#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
    /// The server's key for the request (decoupled responses, cancellation).
    pub key: u64,
    pub outputs: &'a [String],
    pub inputs: Vec<WireTensor>,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corr: Option<Value>,
    #[serde(skip_serializing_if = "is_zero")]
    pub flags: u32,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub params: Map<String, Value>,
    /// The request is traced: `request.trace()` names it, and BLS requests made with it are traced
    /// as its children.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub traced: bool,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The `execute` message: one call of the model's `execute` with these requests.
#[derive(Debug, Serialize)]
pub struct ExecuteMsg<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: u64,
    pub requests: Vec<WireRequest<'a>>,
}

/// An error in a response: message and `pb_utils.TritonError` code.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WireError {
    pub m: String,
    #[serde(default = "internal_code")]
    pub c: i64,
}

fn internal_code() -> i64 {
    1
}

/// A response: outputs or an error, and parameters.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct WireResponse {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub err: Option<WireError>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub out: Vec<WireTensor>,
    #[serde(skip_serializing_if = "Map::is_empty", default)]
    pub params: Map<String, Value>,
}

/// What a stub sends. Every message may also carry `ring` (the stub ring's position after this
/// message's tensors) and `rel` (server blocks it released); see [`ShmNotes`].
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromStub {
    /// The interpreter is up and its reader thread answers pings.
    Hello {},
    /// `initialize` succeeded; requests may come. `probe`: the model has `is_model_ready`.
    Ready {
        #[serde(default)]
        probe: bool,
    },
    /// Importing the model or `initialize` failed (the stub exits).
    InitError { error: String },
    /// The completed configuration (auto-complete mode).
    Autocomplete { config: Value },
    /// `execute` returned: one response per request, or an error for all of them.
    Done {
        id: u64,
        #[serde(default)]
        err: Option<String>,
        #[serde(default)]
        resps: Vec<WireResponse>,
        /// The requests (by index) the model released with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`;
        /// their entries in `resps` are placeholders.
        #[serde(default)]
        resched: Vec<usize>,
    },
    /// A decoupled model's response for request `key`; `flags & 1` is the final flag.
    Response {
        key: u64,
        flags: u32,
        #[serde(default)]
        resp: Option<WireResponse>,
    },
    /// A BLS inference request.
    Bls(Box<BlsRequest>),
    /// A call into the server (metrics, model control, cancellation); answered with a `reply` frame when
    /// it has an id.
    Call {
        #[serde(default)]
        id: Option<u64>,
        op: String,
        #[serde(flatten)]
        args: Map<String, Value>,
    },
    /// A reply to a call the server made (readiness).
    Reply {
        id: u64,
        #[serde(default)]
        value: Value,
        #[serde(default)]
        error: Option<String>,
    },
    /// A log line from `pb_utils.Logger`; `call` is the `execute` call the stub was running, if any.
    Log {
        level: u8,
        msg: String,
        file: String,
        line: u32,
        #[serde(default)]
        call: Option<u64>,
    },
    /// The answer to a ping.
    Pong {},
    /// `finalize` ran (the stub exits).
    Finalized {
        #[serde(default)]
        error: Option<String>,
    },
}

/// A BLS request from a model.
#[derive(Debug, Deserialize)]
pub struct BlsRequest {
    pub id: u64,
    pub model: String,
    #[serde(default = "minus_one")]
    pub version: i64,
    #[serde(default)]
    pub inputs: Vec<WireTensor>,
    #[serde(default)]
    pub outputs: Vec<String>,
    #[serde(default)]
    pub request_id: String,
    #[serde(default)]
    pub corr: Value,
    #[serde(default)]
    pub flags: u32,
    #[serde(default)]
    pub timeout: u64,
    #[serde(default)]
    pub params: Map<String, Value>,
    #[serde(default)]
    pub decoupled: bool,
    /// The key of the traced request given to `execute` whose trace this request continues
    /// (`trace=request.trace()`).
    #[serde(default)]
    pub trace: Option<u64>,
    /// Sent by the stub's main thread from a blocking `exec()`: the answer goes back on the main socket,
    /// where that thread waits for it.
    #[serde(default)]
    pub main: bool,
}

fn minus_one() -> i64 {
    -1
}

/// The shared-memory bookkeeping any stub message may carry.
#[derive(Debug, Default, Deserialize)]
pub struct ShmNotes {
    /// The stub ring's position after this message's tensors.
    #[serde(default)]
    pub ring: Option<u64>,
    /// Server blocks the stub released.
    #[serde(default)]
    pub rel: Vec<u64>,
}

/// [`FromStub::Done`] with its notes, for [`parse`]'s fast path (the `type` field is skipped as unknown).
#[derive(Deserialize)]
struct DoneMsg {
    id: u64,
    #[serde(default)]
    err: Option<String>,
    #[serde(default)]
    resps: Vec<WireResponse>,
    #[serde(default)]
    resched: Vec<usize>,
    #[serde(default)]
    ring: Option<u64>,
    #[serde(default)]
    rel: Vec<u64>,
}

/// Parses a stub message and its shared-memory notes: two passes over the bytes, which allocate less
/// than building a JSON tree once (this runs for every response).
pub fn parse(json: &[u8]) -> Result<(FromStub, ShmNotes)> {
    let bad = |e: serde_json::Error| Error::internal(format!("the Python stub sent a malformed message: {e}"));
    // The answer to every execute, in one pass and without the tagged enum's buffering; the stub writes
    // the type first.
    if json.starts_with(br#"{"type":"done","#) {
        let d: DoneMsg = serde_json::from_slice(json).map_err(bad)?;
        let done = FromStub::Done { id: d.id, err: d.err, resps: d.resps, resched: d.resched };
        return Ok((done, ShmNotes { ring: d.ring, rel: d.rel }));
    }
    let notes: ShmNotes = serde_json::from_slice(json).map_err(bad)?;
    let msg: FromStub = serde_json::from_slice(json).map_err(bad)?;
    Ok((msg, notes))
}

/// Maps a `pb_utils.TritonError` code to the server's error kinds.
pub fn error_from_code(code: i64, message: String) -> Error {
    let kind = match code {
        2 => ErrorKind::NotFound,
        3 => ErrorKind::InvalidArgument,
        4 => ErrorKind::Unavailable,
        5 => ErrorKind::Unsupported,
        6 => ErrorKind::AlreadyExists,
        7 => ErrorKind::Cancelled,
        _ => ErrorKind::Internal,
    };
    Error::new(kind, message)
}

/// The `pb_utils.TritonError` code for a server error (for BLS responses).
pub fn code_from_error(e: &Error) -> i64 {
    match e.kind {
        ErrorKind::NotFound => 2,
        ErrorKind::InvalidArgument | ErrorKind::PayloadTooLarge => 3,
        ErrorKind::Unavailable => 4,
        ErrorKind::Unsupported => 5,
        ErrorKind::AlreadyExists => 6,
        ErrorKind::Cancelled => 7,
        // pb_utils has no permission code (and BLS requests are never restricted).
        ErrorKind::Internal | ErrorKind::PermissionDenied => 1,
    }
}

/// Request or response parameters as JSON values for the stub.
pub fn params_to_json(p: &Parameters) -> Map<String, Value> {
    p.iter()
        .map(|(k, v)| {
            let v = match v {
                ParamValue::Bool(b) => Value::from(*b),
                ParamValue::Int(i) => Value::from(*i),
                ParamValue::Uint(u) => Value::from(*u),
                ParamValue::Double(d) => Value::from(*d),
                ParamValue::String(s) => Value::from(s.clone()),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Parameters from the stub's JSON (bool, int, float and string values; anything else is dropped).
pub fn params_from_json(m: &Map<String, Value>) -> Parameters {
    m.iter()
        .filter_map(|(k, v)| {
            let p = match v {
                Value::Bool(b) => ParamValue::Bool(*b),
                Value::String(s) => ParamValue::String(s.clone()),
                Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => ParamValue::Int(i),
                    (None, Some(u), _) => ParamValue::Uint(u),
                    (None, None, Some(f)) => ParamValue::Double(f),
                    _ => return None,
                },
                _ => return None,
            };
            Some((k.clone(), p))
        })
        .collect()
}

/// Resolves a tensor a stub described into a server tensor, reading its bytes from the ring (through
/// `ring`) or the payload; sizes are checked against the datatype and shape.
pub fn read_tensor(t: &WireTensor, payload: &[u8], ring: impl FnOnce(u64, u64) -> Result<Vec<u8>>) -> Result<Tensor> {
    let dt = DataType::parse(&t.t).ok_or_else(|| {
        Error::internal(format!("tensor '{}' has datatype '{}', which is not a Triton type", t.n, t.t))
    })?;
    let data = match (t.o, t.i) {
        (Some(off), _) => ring(off, t.l)?,
        (None, Some(start)) => {
            let range = usize::try_from(start)
                .ok()
                .and_then(|s| Some(s..s.checked_add(usize::try_from(t.l).ok()?)?))
                .filter(|r| r.end <= payload.len())
                .ok_or_else(|| Error::internal(format!("tensor '{}' lies outside the frame", t.n)))?;
            payload[range].to_vec()
        }
        (None, None) if t.l == 0 => Vec::new(),
        (None, None) => return Err(Error::internal(format!("tensor '{}' says neither where its bytes are", t.n))),
    };
    if dt != DataType::Bytes {
        let need = crate::tensor::byte_len(dt, &t.s)
            .ok_or_else(|| Error::internal(format!("tensor '{}' has an invalid shape {:?}", t.n, t.s)))?;
        if need != data.len() {
            return Err(Error::internal(format!(
                "tensor '{}' holds {} bytes, but {:?} elements of {} need {need}",
                t.n,
                data.len(),
                t.s,
                dt
            )));
        }
    }
    Ok(Tensor::new(t.n.clone(), dt, t.s.clone(), data))
}

#[cfg(test)]
mod tests;
