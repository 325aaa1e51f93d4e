//! OpenTelemetry mode (`--trace-config mode=opentelemetry`): a finished [`Trace`] becomes the spans
//! tritonserver exports for it, and W3C trace context (`traceparent`) continues a caller's trace.
//!
//! The core only builds span data; where it goes (the OTLP/HTTP exporter, with its batching and its
//! count of dropped spans) is a [`SpanSink`] handed in at assembly, so the core holds no HTTP client.

use super::{Activity, Clock, Trace};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use std::time::Instant;

mod wire;

pub use wire::Envelope;

/// Where the spans of finished traces go. Never blocks and never fails a request: a sink that cannot
/// keep up drops spans and counts them.
pub trait SpanSink: Send + Sync + std::fmt::Debug {
    /// Takes one finished trace; its spans are encoded by whoever exports them
    /// ([`Finished::encode_spans`]), off the request's path.
    fn submit(&self, trace: Finished);
    /// Spans dropped so far (queue full, or the collector refused or could not be reached).
    fn dropped(&self) -> u64;
    /// Sends what is queued, waiting a bounded time (graceful shutdown).
    fn shutdown(&self);
}

/// The span ids of one trace, fixed when it starts, so that child traces (ensemble steps, BLS calls)
/// can name their parent span before the parent has finished.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpanIds {
    pub trace_id: TraceId,
    /// The span the trace's top span hangs under: a caller's (`traceparent`, remote) or the parent
    /// trace's model span; none for a request that starts a trace.
    pub parent: Option<(SpanId, bool)>,
    /// The front-end's `InferRequest` span (only a trace the front-end sampled exports it).
    pub request: SpanId,
    /// The span of the model that runs the request.
    pub model: SpanId,
    /// The model's `compute` span.
    pub compute: SpanId,
}

fn span_id() -> SpanId {
    // Never the invalid all-zero id.
    SpanId::from_bytes(fastrand::u64(1..).to_be_bytes())
}

impl SpanIds {
    /// A new trace with fresh ids.
    pub fn root() -> SpanIds {
        let trace_id = TraceId::from_bytes(fastrand::u128(1..).to_be_bytes());
        SpanIds { trace_id, parent: None, request: span_id(), model: span_id(), compute: span_id() }
    }

    /// A child trace's ids: the same trace, under this trace's model span.
    pub fn child(&self) -> SpanIds {
        SpanIds { trace_id: self.trace_id, parent: Some((self.model, false)), ..SpanIds::root() }
    }

    /// These ids in the caller's trace (from its `traceparent`), under the caller's span.
    pub fn under(mut self, caller: Option<(TraceId, SpanId)>) -> SpanIds {
        if let Some((trace_id, parent)) = caller {
            self.trace_id = trace_id;
            self.parent = Some((parent, true));
        }
        self
    }
}

/// `version-traceid-parentid-flags` (W3C Trace Context, version 00; later versions may add fields).
pub(super) fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = value.trim().split('-');
    let (version, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(parent, 16) || !hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let parent = SpanId::from_hex(parent).ok().filter(|s| *s != SpanId::INVALID)?;
    Some((trace_id, parent))
}

/// Which span of a trace an activity is an event of, as tritonserver places them.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Place {
    Request,
    Model,
    Compute,
}

fn place(a: Activity) -> Place {
    match a {
        Activity::HttpRecvStart
        | Activity::HttpRecvEnd
        | Activity::GrpcWaitreadStart
        | Activity::GrpcWaitreadEnd
        | Activity::HttpSendStart
        | Activity::HttpSendEnd
        | Activity::GrpcSendStart
        | Activity::GrpcSendEnd
        | Activity::InferResponseComplete => Place::Request,
        Activity::RequestStart | Activity::QueueStart | Activity::RequestEnd => Place::Model,
        Activity::ComputeStart | Activity::ComputeInputEnd | Activity::ComputeOutputStart | Activity::ComputeEnd => {
            Place::Compute
        }
    }
}

/// Spans in OTLP's protobuf form, each a `ScopeSpans.spans` entry, so that a run of them is the spans
/// of an OTLP `ScopeSpans` message; taken from the front in batches.
#[derive(Debug, Default)]
pub struct EncodedSpans {
    bytes: Vec<u8>,
    /// Where each span ends in `bytes`.
    ends: Vec<usize>,
}

impl EncodedSpans {
    /// How many spans are held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The first `n` spans' bytes (all of them when fewer are held), taken out.
    pub fn take_front(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.ends.len());
        if n == self.ends.len() {
            self.ends.clear();
            return std::mem::take(&mut self.bytes);
        }
        let cut = if n == 0 { 0 } else { self.ends[n - 1] };
        let rest = self.bytes.split_off(cut);
        self.ends.drain(..n);
        self.ends.iter_mut().for_each(|e| *e -= cut);
        std::mem::replace(&mut self.bytes, rest)
    }
}

/// One span of a trace: the place its events come from, its name, id and parent, and the time it
/// covers when that is more than its events' (the front-end's span covers the whole request).
struct Plan<'a> {
    place: Place,
    name: &'a str,
    id: SpanId,
    parent: Option<(SpanId, bool)>,
    range: Option<(Instant, Instant)>,
}

/// What a finished trace hands to the exporter: its stamps and names, moved out of the [`Trace`].
#[derive(Debug)]
pub struct Finished {
    id: u64,
    parent_id: Option<u64>,
    request_id: String,
    model: Option<(String, i64)>,
    stamps: Vec<(Activity, Instant)>,
    clock: Clock,
    ids: SpanIds,
}

impl Trace {
    /// Moves what the spans are built from out of this trace (dropped just after).
    pub(super) fn finish(&mut self, ids: SpanIds) -> Finished {
        Finished {
            id: self.id,
            parent_id: self.parent_id,
            request_id: std::mem::take(&mut self.request_id),
            model: self.model.take(),
            stamps: std::mem::take(&mut self.stamps),
            clock: self.clock,
            ids,
        }
    }
}

impl Finished {
    /// How many spans [`Finished::spans`] gives (for the exporter's queue bound).
    pub fn len(&self) -> usize {
        [Place::Request, Place::Model, Place::Compute].into_iter().filter(|p| self.has(*p)).count()
    }

    /// Whether any stamp belongs to the span of `p` (a span without events is left out).
    fn has(&self, p: Place) -> bool {
        self.stamps.iter().any(|(a, _)| place(*a) == p)
    }

    /// Whether the trace has no span at all.
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }

    /// Appends the spans of this finished trace to `out` in OTLP's protobuf form, and returns how
    /// many: the front-end's `InferRequest` span (a trace the front-end sampled), the model's span
    /// under it (or under the parent trace's model span), and the model's `compute` span. Spans
    /// without events are left out. Written straight from the stamps, with no message structs in
    /// between (see [`wire`]).
    pub fn encode_spans(&self, out: &mut EncodedSpans) -> usize {
        let ids = &self.ids;
        let (name, version) = match &self.model {
            Some((n, v)) => (n.as_str(), *v),
            None => ("", -1),
        };
        let before = out.len();
        let front = self.has(Place::Request);
        if front {
            let first = self.stamps.iter().map(|(_, t)| *t).min();
            let range = first.zip(self.stamps.iter().map(|(_, t)| *t).max());
            let plan = Plan { place: Place::Request, name: "InferRequest", id: ids.request, parent: ids.parent, range };
            self.encode_span(out, plan, &[]);
        }
        if self.has(Place::Model) {
            // A child trace has no front-end span: its model span hangs under the parent's model span.
            let parent = if front { Some((ids.request, false)) } else { ids.parent };
            let parent_id = self.parent_id.map_or(0, |p| p as i64);
            let all = [
                ("triton.model_name", wire::Value::Str(name)),
                ("triton.model_version", wire::Value::Int(version)),
                ("triton.trace_id", wire::Value::Int(self.id as i64)),
                ("triton.trace_parent_id", wire::Value::Int(parent_id)),
                ("triton.request_id", wire::Value::Str(&self.request_id)),
            ];
            let attributes = if self.request_id.is_empty() { &all[..4] } else { &all[..] };
            let plan = Plan { place: Place::Model, name, id: ids.model, parent, range: None };
            self.encode_span(out, plan, attributes);
        }
        if self.has(Place::Compute) {
            let parent = Some((ids.model, false));
            let plan = Plan { place: Place::Compute, name: "compute", id: ids.compute, parent, range: None };
            self.encode_span(out, plan, &[]);
        }
        out.len() - before
    }

    /// One span: the events of its place, over their time unless its range covers more.
    fn encode_span(&self, out: &mut EncodedSpans, plan: Plan<'_>, attributes: &[(&str, wire::Value<'_>)]) {
        let Plan { place: place_of, name, id, parent, range } = plan;
        let events = || self.stamps.iter().filter(move |(a, _)| place(*a) == place_of);
        let times = || events().map(|(_, t)| *t);
        let (start, end) = match range.or_else(|| times().min().zip(times().max())) {
            Some((first, last)) => (self.clock.unix_ns(first), self.clock.unix_ns(last)),
            None => (0, 0),
        };
        let (parent, remote) = match parent {
            Some((id, remote)) => (Some(id.to_bytes()), remote),
            None => (None, false),
        };
        // W3C flags (sampled), and whether the parent is remote, as OTLP exporters set them.
        let mut flags = u32::from(TraceFlags::SAMPLED.to_u8()) | wire::CONTEXT_HAS_IS_REMOTE;
        if remote {
            flags |= wire::CONTEXT_IS_REMOTE;
        }
        let span = wire::Span {
            trace_id: self.ids.trace_id.to_bytes(),
            span_id: id.to_bytes(),
            parent,
            flags,
            name,
            start,
            end,
            attributes,
        };
        span.encode(&mut out.bytes, events().map(|(a, t)| (a.name(), self.clock.unix_ns(*t))));
        out.ends.push(out.bytes.len());
    }
}
