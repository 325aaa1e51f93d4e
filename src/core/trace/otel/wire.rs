//! OTLP's protobuf encoding of a span, written straight into the export buffer: no message structs
//! and no allocation per span. Field numbers are those of `opentelemetry/proto/trace/v1/trace.proto`
//! and `common/v1/common.proto`; `tests.rs` decodes what this writes with `opentelemetry-proto`'s
//! messages.

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

/// `Span.flags` bits (`SpanFlags`): whether the parent's remoteness is known, and that it is remote.
pub(super) const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
pub(super) const CONTEXT_IS_REMOTE: u32 = 0x200;

/// `ScopeSpans.spans`: the field each encoded span is written as.
const SCOPE_SPANS_SPANS: u32 = 2;
/// `ExportTraceServiceRequest.resource_spans`, `ResourceSpans.scope_spans`.
const REQUEST_RESOURCE_SPANS: u32 = 1;
const RESOURCE_SPANS_SCOPE_SPANS: u32 = 2;
/// `ResourceSpans.resource` and `ScopeSpans.scope`: the fields of [`Envelope`]'s two messages.
const RESOURCE_SPANS_RESOURCE: u32 = 1;
const SCOPE_SPANS_SCOPE: u32 = 1;

/// What every OTLP export request starts with: the resource and the instrumentation scope, encoded
/// once as their fields; [`Envelope::request`] wraps a batch of encoded spans in them.
#[derive(Debug)]
pub struct Envelope {
    resource: Vec<u8>,
    scope: Vec<u8>,
}

impl Envelope {
    pub fn new(resource: &impl prost::Message, scope: &impl prost::Message) -> Envelope {
        Envelope { resource: field(RESOURCE_SPANS_RESOURCE, resource), scope: field(SCOPE_SPANS_SCOPE, scope) }
    }

    /// One `ExportTraceServiceRequest`: one `ResourceSpans` holding the resource and one `ScopeSpans`
    /// (the scope and `spans`, a run of [`super::EncodedSpans`]).
    pub fn request(&self, spans: &[u8]) -> Vec<u8> {
        let scope_spans = self.scope.len() + spans.len();
        let resource_spans = self.resource.len() + bytes_len(RESOURCE_SPANS_SCOPE_SPANS, scope_spans);
        let mut out = Vec::with_capacity(bytes_len(REQUEST_RESOURCE_SPANS, resource_spans));
        put_head(REQUEST_RESOURCE_SPANS, resource_spans, &mut out);
        out.extend_from_slice(&self.resource);
        put_head(RESOURCE_SPANS_SCOPE_SPANS, scope_spans, &mut out);
        out.extend_from_slice(&self.scope);
        out.extend_from_slice(spans);
        out
    }
}

/// A message encoded as field `tag` of its parent.
fn field(tag: u32, message: &impl prost::Message) -> Vec<u8> {
    let len = message.encoded_len();
    let mut out = Vec::with_capacity(bytes_len(tag, len));
    put_head(tag, len, &mut out);
    message.encode_raw(&mut out);
    out
}

/// `Span`'s fields.
mod span {
    pub const TRACE_ID: u32 = 1;
    pub const SPAN_ID: u32 = 2;
    pub const PARENT_SPAN_ID: u32 = 4;
    pub const NAME: u32 = 5;
    pub const KIND: u32 = 6;
    pub const START_TIME_UNIX_NANO: u32 = 7;
    pub const END_TIME_UNIX_NANO: u32 = 8;
    pub const ATTRIBUTES: u32 = 9;
    pub const EVENTS: u32 = 11;
    pub const STATUS: u32 = 15;
    pub const FLAGS: u32 = 16;
    /// `SpanKind.SPAN_KIND_SERVER`.
    pub const KIND_SERVER: u64 = 2;
    /// `Span.Event`'s fields.
    pub const EVENT_TIME_UNIX_NANO: u32 = 1;
    pub const EVENT_NAME: u32 = 2;
}

/// `KeyValue`'s and `AnyValue`'s fields.
mod common {
    pub const KEY: u32 = 1;
    pub const VALUE: u32 = 2;
    pub const STRING_VALUE: u32 = 1;
    pub const INT_VALUE: u32 = 3;
}

/// An attribute's value.
#[derive(Clone, Copy)]
pub(super) enum Value<'a> {
    Str(&'a str),
    Int(i64),
}

/// One span, borrowed from the finished trace; its events are given to [`Span::encode`].
pub(super) struct Span<'a> {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub flags: u32,
    pub name: &'a str,
    pub start: u64,
    pub end: u64,
    pub attributes: &'a [(&'a str, Value<'a>)],
}

fn bytes_len(tag: u32, n: usize) -> usize {
    key_len(tag) + encoded_len_varint(n as u64) + n
}

/// A string or bytes field; proto3 leaves an empty one out.
fn str_len(tag: u32, s: &[u8]) -> usize {
    if s.is_empty() {
        0
    } else {
        bytes_len(tag, s.len())
    }
}

fn put_bytes(tag: u32, s: &[u8], out: &mut Vec<u8>) {
    if !s.is_empty() {
        put_head(tag, s.len(), out);
        out.extend_from_slice(s);
    }
}

/// The key and length of a length-delimited field.
fn put_head(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

fn fixed64_len(tag: u32) -> usize {
    key_len(tag) + 8
}

fn put_fixed64(tag: u32, v: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::SixtyFourBit, out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// `AnyValue`'s length: a oneof, so even an empty string is written.
fn any_len(v: Value<'_>) -> usize {
    match v {
        Value::Str(s) => bytes_len(common::STRING_VALUE, s.len()),
        Value::Int(i) => key_len(common::INT_VALUE) + encoded_len_varint(i as u64),
    }
}

fn key_value_len(key: &str, v: Value<'_>) -> usize {
    str_len(common::KEY, key.as_bytes()) + bytes_len(common::VALUE, any_len(v))
}

fn put_key_value(tag: u32, key: &str, v: Value<'_>, out: &mut Vec<u8>) {
    put_head(tag, key_value_len(key, v), out);
    put_bytes(common::KEY, key.as_bytes(), out);
    put_head(common::VALUE, any_len(v), out);
    match v {
        Value::Str(s) => {
            put_head(common::STRING_VALUE, s.len(), out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Int(i) => {
            encode_key(common::INT_VALUE, WireType::Varint, out);
            encode_varint(i as u64, out);
        }
    }
}

fn event_len(name: &str) -> usize {
    fixed64_len(span::EVENT_TIME_UNIX_NANO) + str_len(span::EVENT_NAME, name.as_bytes())
}

impl Span<'_> {
    /// Appends this span, with `events` (name, Unix time in ns), as one `ScopeSpans.spans` entry.
    pub fn encode<'e>(&self, out: &mut Vec<u8>, events: impl Iterator<Item = (&'e str, u64)> + Clone) {
        let events_len: usize = events.clone().map(|(name, _)| bytes_len(span::EVENTS, event_len(name))).sum();
        let attributes_len: usize =
            self.attributes.iter().map(|(k, v)| bytes_len(span::ATTRIBUTES, key_value_len(k, *v))).sum();
        let len = bytes_len(span::TRACE_ID, 16)
            + bytes_len(span::SPAN_ID, 8)
            + self.parent.map_or(0, |_| bytes_len(span::PARENT_SPAN_ID, 8))
            + key_len(span::FLAGS)
            + 4
            + str_len(span::NAME, self.name.as_bytes())
            + key_len(span::KIND)
            + encoded_len_varint(span::KIND_SERVER)
            + fixed64_len(span::START_TIME_UNIX_NANO)
            + fixed64_len(span::END_TIME_UNIX_NANO)
            + attributes_len
            + events_len
            // An empty status (code UNSET), as the OpenTelemetry SDK writes it.
            + bytes_len(span::STATUS, 0);
        out.reserve(bytes_len(SCOPE_SPANS_SPANS, len));
        put_head(SCOPE_SPANS_SPANS, len, out);
        put_bytes(span::TRACE_ID, &self.trace_id, out);
        put_bytes(span::SPAN_ID, &self.span_id, out);
        if let Some(parent) = &self.parent {
            put_bytes(span::PARENT_SPAN_ID, parent, out);
        }
        encode_key(span::FLAGS, WireType::ThirtyTwoBit, out);
        out.extend_from_slice(&self.flags.to_le_bytes());
        put_bytes(span::NAME, self.name.as_bytes(), out);
        encode_key(span::KIND, WireType::Varint, out);
        encode_varint(span::KIND_SERVER, out);
        put_fixed64(span::START_TIME_UNIX_NANO, self.start, out);
        put_fixed64(span::END_TIME_UNIX_NANO, self.end, out);
        for (k, v) in self.attributes {
            put_key_value(span::ATTRIBUTES, k, *v, out);
        }
        for (name, at) in events {
            put_head(span::EVENTS, event_len(name), out);
            put_fixed64(span::EVENT_TIME_UNIX_NANO, at, out);
            put_bytes(span::EVENT_NAME, name.as_bytes(), out);
        }
        put_head(span::STATUS, 0, out);
    }
}
