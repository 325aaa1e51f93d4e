//! Large `ModelInfer` calls are read here, ahead of tonic, into one buffer placed so that the request's
//! largest `raw_input_contents` starts on a 64-byte boundary.
//!
//! Why: tonic copies a call's HTTP/2 frames into its own buffer, where a tensor's bytes sit at whatever
//! offset the message's header gave them, so a backend that hands them to its runtime in place (ONNX
//! Runtime wants them aligned for their element type) had to copy them once more. Read here, the
//! message is copied once, straight to an aligned place, and decoded from that buffer (prost's `Bytes`
//! fields are slices of it, not copies); tonic then reads an empty message and the handler takes this
//! one from the call's extensions. A 588 KiB camera frame is one copy instead of two (measured with
//! benches/large_tensor.py; see the README).
//!
//! Only what this can do better is taken: an uncompressed unary `ModelInfer` whose message is at least
//! [`MIN_LEN`] and within the size limit, holding raw inputs. Everything else (small, compressed,
//! oversized, malformed, cut short, or anything after the message) goes to tonic exactly as it came,
//! frames replayed in order, so its checks and errors are unchanged.

use crate::proto::inference as pb;
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;
use prost::Message as _;
use std::time::Instant;
use tonic::body::Body;
use tonic::Status;

/// The one method whose messages are read here.
const PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// Messages shorter than this go to tonic untouched: a second copy of a small tensor costs less than
/// the look at its header.
pub(super) const MIN_LEN: usize = 64 << 10;

/// Where the largest raw input starts: a cache line, aligned for every element type and vector load.
pub(super) const ALIGN: usize = 64;

/// The gRPC message prefix: a compression flag and a big-endian length.
const PREFIX: usize = 5;

/// A message decoded here, for the `ModelInfer` handler (tonic itself decoded an empty one).
#[derive(Clone)]
pub(super) struct Predecoded(pub pb::ModelInferRequest);

/// When a call looked at here arrived: its trace's GRPC_WAITREAD_START (tonic's interceptor, which
/// marks it otherwise, runs only once this layer has read the message, or the first frames of one it
/// gives back).
#[derive(Clone, Copy)]
pub(super) struct ArrivedAt(pub Instant);

/// The layer: see the module's documentation.
#[derive(Clone)]
pub(super) struct AlignInfer<S> {
    pub inner: S,
    /// `--grpc-max-message-size` (tonic's decoding limit): a longer message is left to tonic to refuse.
    pub limit: usize,
}

impl<S> tower::Service<http::Request<Body>> for AlignInfer<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = super::layers::OrBoxed<S::Future, S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let compressed = req.headers().get("grpc-encoding").is_some_and(|v| v.as_bytes() != b"identity");
        if req.uri().path() != PATH || compressed {
            return futures_util::future::Either::Left(self.inner.call(req));
        }
        // The clone takes the place of the service that was polled ready, which serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit;
        futures_util::future::Either::Right(Box::pin(async move {
            let arrived = Instant::now();
            let (mut parts, mut body) = req.into_parts();
            let read = read(&mut body, limit).await;
            parts.extensions.insert(ArrivedAt(arrived));
            let body = match read.decoded {
                Some(msg) => {
                    parts.extensions.insert(Predecoded(msg));
                    replay(vec![Ok(Frame::data(Bytes::from_static(&[0; PREFIX])))], Some(body))
                }
                None => replay(read.frames, (!read.ended).then_some(body)),
            };
            inner.call(http::Request::from_parts(parts, body)).await
        }))
    }
}

/// What [`read`] took from a call's body.
struct Read {
    /// The message, when it was decoded here.
    decoded: Option<pb::ModelInferRequest>,
    /// Otherwise every frame taken, in order (an error included), for tonic.
    frames: Vec<std::result::Result<Frame<Bytes>, Status>>,
    /// The body has nothing more to give (it ended or failed).
    ended: bool,
}

/// Reads the call's first message when it is one to decode here; stops taking frames as soon as it is
/// not (a small message leaves the rest of its frames unread).
async fn read(body: &mut Body, limit: usize) -> Read {
    let mut frames = Vec::new();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut have = 0usize;
    let mut want: Option<usize> = None;
    let give_back = |chunks: Vec<Bytes>, mut frames: Vec<_>, ended: bool| {
        let mut all: Vec<std::result::Result<Frame<Bytes>, Status>> =
            chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
        all.append(&mut frames);
        Read { decoded: None, frames: all, ended }
    };
    while want.is_none_or(|w| have < w) {
        match body.frame().await {
            None => return give_back(chunks, frames, true),
            Some(Err(e)) => {
                frames.push(Err(e));
                return give_back(chunks, frames, true);
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    have += data.len();
                    chunks.push(data);
                }
                Err(other) => {
                    frames.push(Ok(other));
                    return give_back(chunks, frames, false);
                }
            },
        }
        if want.is_none() && have >= PREFIX {
            let mut head = Cursor::new(&chunks);
            let prefix: Vec<u8> = (0..PREFIX).filter_map(|_| head.byte()).collect();
            let Ok([flag, l0, l1, l2, l3]) = <[u8; PREFIX]>::try_from(prefix) else {
                return give_back(chunks, frames, false);
            };
            let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
            if flag != 0 || !(MIN_LEN..=limit).contains(&len) {
                return give_back(chunks, frames, false);
            }
            want = Some(PREFIX + len);
        }
    }
    // Exactly one message: anything after it (a second message on a unary call) is tonic's to judge.
    if want != Some(have) {
        return give_back(chunks, frames, false);
    }
    match decode_aligned(&chunks, have - PREFIX) {
        Some(msg) => Read { decoded: Some(msg), frames, ended: false },
        None => give_back(chunks, frames, false),
    }
}

/// The message in `chunks` (after its prefix) copied once, its largest raw input on an [`ALIGN`]
/// boundary, and decoded there. None when it holds no raw input or does not parse (tonic then decodes
/// it and reports what is wrong).
fn decode_aligned(chunks: &[Bytes], len: usize) -> Option<pb::ModelInferRequest> {
    let at = largest_raw_input(chunks, len)?;
    let (mut buf, pad) = crate::memory::recycled::placed(len, at, ALIGN);
    let mut skip = PREFIX;
    for chunk in chunks {
        let from = skip.min(chunk.len());
        skip -= from;
        buf.extend_from_slice(&chunk[from..]);
    }
    let message = crate::memory::recycled::into_bytes(buf).slice(pad..);
    pb::ModelInferRequest::decode(message).ok()
}

/// The offset, within the message, of the largest `raw_input_contents` entry's bytes; None when there
/// is none or the message's top level does not parse.
fn largest_raw_input(chunks: &[Bytes], len: usize) -> Option<usize> {
    /// `ModelInferRequest.raw_input_contents`'s field number.
    const RAW_INPUT_CONTENTS: u64 = 7;
    let mut c = Cursor::new(chunks);
    c.skip(PREFIX)?;
    let end = PREFIX + len;
    let mut best: Option<(usize, usize)> = None;
    while c.pos < end {
        let key = c.varint()?;
        match key & 7 {
            0 => {
                c.varint()?;
            }
            1 => c.skip(8)?,
            2 => {
                let n = usize::try_from(c.varint()?).ok()?;
                if key >> 3 == RAW_INPUT_CONTENTS && best.is_none_or(|(_, size)| n > size) {
                    best = Some((c.pos - PREFIX, n));
                }
                c.skip(n)?;
            }
            5 => c.skip(4)?,
            _ => return None,
        }
        if c.pos > end {
            return None;
        }
    }
    best.map(|(at, _)| at)
}

/// A reading position in a list of chunks.
struct Cursor<'a> {
    chunks: &'a [Bytes],
    /// The chunk being read and the offset in it.
    index: usize,
    offset: usize,
    /// Bytes read from the start of the first chunk.
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(chunks: &'a [Bytes]) -> Self {
        Cursor { chunks, index: 0, offset: 0, pos: 0 }
    }

    fn byte(&mut self) -> Option<u8> {
        loop {
            let chunk = self.chunks.get(self.index)?;
            if let Some(&b) = chunk.get(self.offset) {
                self.offset += 1;
                self.pos += 1;
                return Some(b);
            }
            self.index += 1;
            self.offset = 0;
        }
    }

    fn skip(&mut self, mut n: usize) -> Option<()> {
        while n > 0 {
            let chunk = self.chunks.get(self.index)?;
            let step = n.min(chunk.len() - self.offset);
            self.offset += step;
            self.pos += step;
            n -= step;
            if self.offset == chunk.len() {
                self.index += 1;
                self.offset = 0;
            }
        }
        Some(())
    }

    /// A protobuf varint (at most 10 bytes).
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

/// A body that gives `frames`, then what is left of `rest`.
fn replay(frames: Vec<std::result::Result<Frame<Bytes>, Status>>, rest: Option<Body>) -> Body {
    use futures_util::StreamExt as _;
    let head = futures_util::stream::iter(frames);
    let tail = futures_util::stream::iter(rest).flat_map(http_body_util::BodyStream::new);
    Body::new(http_body_util::StreamBody::new(head.chain(tail)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(raw: Vec<Vec<u8>>) -> pb::ModelInferRequest {
        pb::ModelInferRequest {
            model_name: "camera".into(),
            inputs: raw
                .iter()
                .enumerate()
                .map(|(i, r)| pb::model_infer_request::InferInputTensor {
                    name: format!("in{i}"),
                    datatype: "UINT8".into(),
                    shape: vec![r.len() as i64],
                    ..Default::default()
                })
                .collect(),
            raw_input_contents: raw.into_iter().map(Bytes::from).collect(),
            ..Default::default()
        }
    }

    /// The message with its gRPC prefix, cut into chunks of `size` bytes.
    fn framed(msg: &pb::ModelInferRequest, size: usize) -> Vec<Bytes> {
        let body = msg.encode_to_vec();
        let mut all = vec![0u8];
        all.extend_from_slice(&(body.len() as u32).to_be_bytes());
        all.extend_from_slice(&body);
        all.chunks(size).map(Bytes::copy_from_slice).collect()
    }

    #[test]
    fn the_largest_raw_input_lands_aligned_whatever_the_chunking() {
        let small: Vec<u8> = (0..=255).cycle().take(1000).collect();
        let large: Vec<u8> = (0..=255).rev().cycle().take(MIN_LEN + 12_345).collect();
        let msg = request(vec![small, large.clone()]);
        for size in [1, 7, 4096, 16 << 10, 1 << 20] {
            let chunks = framed(&msg, size);
            let len = chunks.iter().map(Bytes::len).sum::<usize>() - PREFIX;
            let got = decode_aligned(&chunks, len).expect("decodes");
            assert_eq!(got, msg, "chunks of {size}");
            assert_eq!(got.raw_input_contents[1].as_ptr() as usize % ALIGN, 0, "chunks of {size}");
            assert_eq!(got.raw_input_contents[1], large);
        }
    }

    #[test]
    fn a_message_without_raw_inputs_or_that_does_not_parse_is_left_to_tonic() {
        let mut msg = request(vec![]);
        msg.id = "x".repeat(MIN_LEN);
        let chunks = framed(&msg, 4096);
        let len = chunks.iter().map(Bytes::len).sum::<usize>() - PREFIX;
        assert_eq!(largest_raw_input(&chunks, len), None);
        // A length that runs past the message.
        let cut = vec![Bytes::from_static(&[0, 0, 0, 0, 3, 0x3a, 0x7f, 1])];
        assert_eq!(largest_raw_input(&cut, 3), None);
        // Group wire types are not in this message.
        let group = vec![Bytes::from_static(&[0, 0, 0, 0, 1, 0x0b])];
        assert_eq!(largest_raw_input(&group, 1), None);
        // A varint that never ends.
        let endless = vec![Bytes::from(vec![
            0, 0, 0, 0, 12, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ])];
        assert_eq!(largest_raw_input(&endless, 12), None);
    }

    #[tokio::test]
    async fn small_compressed_or_oversized_messages_are_replayed_frame_for_frame() {
        use futures_util::StreamExt as _;
        async fn frames_of(body: Body) -> Vec<Bytes> {
            http_body_util::BodyStream::new(body).map(|f| f.expect("frame").into_data().expect("data")).collect().await
        }
        let big = request(vec![vec![1; MIN_LEN]]);
        let small = request(vec![vec![1; 100]]);
        let mut compressed = framed(&big, 1 << 20);
        compressed[0] = {
            let mut first = compressed[0].to_vec();
            first[0] = 1;
            Bytes::from(first)
        };
        for (chunks, limit) in [(framed(&small, 50), 1 << 30), (compressed, 1 << 30), (framed(&big, 4096), MIN_LEN)] {
            let body = || {
                let frames: Vec<std::result::Result<Frame<Bytes>, Status>> =
                    chunks.iter().cloned().map(|c| Ok(Frame::data(c))).collect();
                Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(frames)))
            };
            let mut original = body();
            let read = read(&mut original, limit).await;
            assert!(read.decoded.is_none());
            let again = replay(read.frames, (!read.ended).then_some(original));
            assert_eq!(frames_of(again).await, chunks);
        }
        // A large one is decoded, and the body's end is still there for tonic.
        let chunks = framed(&big, 4096);
        let frames: Vec<std::result::Result<Frame<Bytes>, Status>> =
            chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
        let mut body = Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(frames)));
        let read = read(&mut body, 1 << 30).await;
        assert_eq!(read.decoded, Some(big));
        assert!(!read.ended);
        assert!(body.frame().await.is_none());
    }
}
