//! OpenTelemetry mode (`--trace-config mode=opentelemetry`): a finished [`Trace`] becomes the spans
//! tritonserver exports for it, and W3C trace context (`traceparent`) continues a caller's trace.
//!
//! The core only builds span data; where it goes (the OTLP/HTTP exporter, with its batching and its
//! count of dropped spans) is a [`SpanSink`] handed in at assembly, so the core holds no HTTP client.

use super::{Activity, Clock, Trace};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, status, Span, SpanFlags, Status};
use std::time::Instant;

/// Where the spans of finished traces go. Never blocks and never fails a request: a sink that cannot
/// keep up drops spans and counts them.
pub trait SpanSink: Send + Sync + std::fmt::Debug {
    /// Takes one finished trace; its spans are built by whoever exports them ([`Finished::spans`]),
    /// off the request's path.
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

/// One span of a trace, from the events that belong to it.
struct SpanPlan<'a> {
    name: String,
    id: SpanId,
    parent: Option<(SpanId, bool)>,
    attributes: Vec<KeyValue>,
    events: Vec<&'a (Activity, Instant)>,
    /// The span's time: its events' unless it covers more (the front-end's span covers the request).
    range: Option<(Instant, Instant)>,
}

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue { key: key.to_owned(), value: Some(AnyValue { value: Some(value) }), ..Default::default() }
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
        [Place::Request, Place::Model, Place::Compute]
            .into_iter()
            .filter(|p| self.stamps.iter().any(|(a, _)| place(*a) == *p))
            .count()
    }

    /// Whether the trace has no span at all.
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }

    /// The spans of this finished trace, in OTLP's form (built straight from the stamps: no SDK span
    /// in between): the front-end's `InferRequest` span (a trace the front-end sampled), the model's
    /// span under it (or under the parent trace's model span), and the model's `compute` span. Spans
    /// without events are left out.
    pub fn spans(&self) -> Vec<Span> {
        let mut out = Vec::with_capacity(3);
        self.spans_into(&mut out);
        out
    }

    /// [`Finished::spans`], appended to `out`.
    pub fn spans_into(&self, out: &mut Vec<Span>) {
        let ids = &self.ids;
        let of = |p: Place| self.stamps.iter().filter(|(a, _)| place(*a) == p).collect::<Vec<_>>();
        let (name, version) = match &self.model {
            Some((n, v)) => (n.as_str(), *v),
            None => ("", -1),
        };
        let request = SpanPlan {
            name: "InferRequest".to_owned(),
            id: ids.request,
            parent: ids.parent,
            attributes: Vec::new(),
            events: of(Place::Request),
            range: self.stamps.iter().map(|(_, t)| *t).min().zip(self.stamps.iter().map(|(_, t)| *t).max()),
        };
        // A child trace has no front-end span: its model span hangs under the parent's model span.
        let model_parent = if request.events.is_empty() { ids.parent } else { Some((ids.request, false)) };
        let mut attributes = vec![
            attribute("triton.model_name", any_value::Value::StringValue(name.to_owned())),
            attribute("triton.model_version", any_value::Value::IntValue(version)),
            attribute("triton.trace_id", any_value::Value::IntValue(self.id as i64)),
            attribute("triton.trace_parent_id", any_value::Value::IntValue(self.parent_id.map_or(0, |p| p as i64))),
        ];
        if !self.request_id.is_empty() {
            attributes.push(attribute("triton.request_id", any_value::Value::StringValue(self.request_id.clone())));
        }
        let model = SpanPlan {
            name: name.to_owned(),
            id: ids.model,
            parent: model_parent,
            attributes,
            events: of(Place::Model),
            range: None,
        };
        let compute = SpanPlan {
            name: "compute".to_owned(),
            id: ids.compute,
            parent: Some((ids.model, false)),
            attributes: Vec::new(),
            events: of(Place::Compute),
            range: None,
        };
        out.extend([request, model, compute].into_iter().filter(|p| !p.events.is_empty()).map(|p| self.span(ids, p)));
    }

    fn span(&self, ids: &SpanIds, plan: SpanPlan<'_>) -> Span {
        let at = |t: &Instant| self.clock.unix_ns(*t);
        let times = || plan.events.iter().map(|(_, t)| *t);
        let (start, end) = match plan.range.or_else(|| times().min().zip(times().max())) {
            Some((first, last)) => (at(&first), at(&last)),
            None => (0, 0),
        };
        let events = plan
            .events
            .iter()
            .map(|(a, t)| span::Event { time_unix_nano: at(t), name: a.name().to_owned(), ..Default::default() })
            .collect();
        let (parent, remote) = match plan.parent {
            Some((id, remote)) => (id.to_bytes().to_vec(), remote),
            None => (Vec::new(), false),
        };
        // W3C flags (sampled), and whether the parent is remote, as the OTLP exporter sets them.
        let mut flags = u32::from(TraceFlags::SAMPLED.to_u8()) | SpanFlags::ContextHasIsRemoteMask as u32;
        if remote {
            flags |= SpanFlags::ContextIsRemoteMask as u32;
        }
        Span {
            trace_id: ids.trace_id.to_bytes().to_vec(),
            span_id: plan.id.to_bytes().to_vec(),
            trace_state: String::new(),
            parent_span_id: parent,
            flags,
            name: plan.name,
            // Every span is a server span with status UNSET, as tritonserver's are.
            kind: span::SpanKind::Server as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes: plan.attributes,
            dropped_attributes_count: 0,
            events,
            dropped_events_count: 0,
            links: Vec::new(),
            dropped_links_count: 0,
            status: Some(Status { code: status::StatusCode::Unset as i32, message: String::new() }),
        }
    }
}
