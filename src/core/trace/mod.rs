//! Triton's trace extension, independent of transport: the settings (global and per model), which
//! requests are traced, the timestamps of one traced request, and where they go: the trace file in
//! Triton's JSON, or OpenTelemetry spans ([`otel`], exported by a [`SpanSink`] given at assembly).
//!
//! Tracing off is the common case and costs one atomic load per request ([`Tracer::enabled`]). Only a
//! sampled request carries a [`Trace`]; the front-ends and the core stamp it along the request's path,
//! and dropping it hands its records to the setting that sampled it, which writes them to the file, or
//! its stamps to the span sink. The requests made on a traced request's behalf (ensemble steps, BLS
//! calls) get child traces from its [`Trace::link`].

mod file;
mod otel;
mod settings;
#[cfg(test)]
mod tests;

pub use otel::{EncodedSpans, Envelope, Finished, SpanSink};
pub use settings::{OtelSettings, SettingValue, TraceLevel, TraceMode, TraceSettings, TraceUpdate};

use crate::error::{Error, Result};
use crate::model_api::types::TraceLink;
use file::TraceFile;
use otel::SpanIds;
use parking_lot::{Mutex, RwLock};
use settings::Specified;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A point in a request's life, named as in tritonserver's trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    HttpRecvStart,
    HttpRecvEnd,
    GrpcWaitreadStart,
    GrpcWaitreadEnd,
    RequestStart,
    QueueStart,
    ComputeStart,
    ComputeInputEnd,
    ComputeOutputStart,
    ComputeEnd,
    InferResponseComplete,
    RequestEnd,
    HttpSendStart,
    HttpSendEnd,
    GrpcSendStart,
    GrpcSendEnd,
}

impl Activity {
    pub fn name(self) -> &'static str {
        match self {
            Activity::HttpRecvStart => "HTTP_RECV_START",
            Activity::HttpRecvEnd => "HTTP_RECV_END",
            Activity::GrpcWaitreadStart => "GRPC_WAITREAD_START",
            Activity::GrpcWaitreadEnd => "GRPC_WAITREAD_END",
            Activity::RequestStart => "REQUEST_START",
            Activity::QueueStart => "QUEUE_START",
            Activity::ComputeStart => "COMPUTE_START",
            Activity::ComputeInputEnd => "COMPUTE_INPUT_END",
            Activity::ComputeOutputStart => "COMPUTE_OUTPUT_START",
            Activity::ComputeEnd => "COMPUTE_END",
            Activity::InferResponseComplete => "INFER_RESPONSE_COMPLETE",
            Activity::RequestEnd => "REQUEST_END",
            Activity::HttpSendStart => "HTTP_SEND_START",
            Activity::HttpSendEnd => "HTTP_SEND_END",
            Activity::GrpcSendStart => "GRPC_SEND_START",
            Activity::GrpcSendEnd => "GRPC_SEND_END",
        }
    }
}

/// Turns `Instant`s into nanoseconds of CLOCK_MONOTONIC, the clock behind tritonserver's
/// `steady_clock` timestamps, so traces of both servers read alike. (`Instant` is that clock on Linux,
/// but does not expose its value; one reading at start ties the two together.)
#[derive(Debug, Clone, Copy)]
struct Clock {
    base: Instant,
    base_ns: u64,
    /// The wall clock at `base`, for OpenTelemetry's Unix-epoch timestamps.
    base_system: SystemTime,
}

impl Clock {
    fn new() -> Clock {
        let base = Instant::now();
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let base_ns = u64::try_from(ts.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0));
        Clock { base, base_ns, base_system: SystemTime::now() }
    }

    /// `t` on the wall clock in nanoseconds since the Unix epoch, as OpenTelemetry timestamps are
    /// (steady from one reading at start).
    fn unix_ns(&self, t: Instant) -> u64 {
        let at = match t.checked_duration_since(self.base) {
            Some(after) => self.base_system + after,
            None => self.base_system.checked_sub(self.base - t).unwrap_or(self.base_system),
        };
        at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn ns(&self, t: Instant) -> u64 {
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match t.checked_duration_since(self.base) {
            Some(after) => self.base_ns.saturating_add(nanos(after)),
            None => self.base_ns.saturating_sub(nanos(self.base - t)),
        }
    }
}

/// The trace of one sampled request. Stamped along the request's path; dropping it writes it.
pub struct Trace {
    /// tritonserver's trace id: 1, 2, ... over the server's life, for traced requests only.
    id: u64,
    /// The trace this one is a child of (an ensemble step's, a BLS request's parent).
    parent_id: Option<u64>,
    level: TraceLevel,
    request_id: String,
    /// The model and version that served the request, once the core has resolved them.
    model: Option<(String, i64)>,
    /// In the order they were taken, which is the order of the request's path.
    stamps: Vec<(Activity, Instant)>,
    /// The setting that sampled the trace and collects it.
    sink: Arc<Generation>,
    clock: Clock,
    /// What every trace shares: ids for children, and where OpenTelemetry spans go.
    shared: Arc<Shared>,
    /// Set in OpenTelemetry mode: the ids of the spans this trace becomes.
    otel: Option<SpanIds>,
}

/// What a child trace takes from its parent; shared as the parent's [`TraceLink`].
struct Parent {
    id: u64,
    level: TraceLevel,
    sink: Arc<Generation>,
    shared: Arc<Shared>,
    otel: Option<SpanIds>,
}

/// A child of the trace behind `link` (an ensemble step or a BLS request on behalf of the traced
/// request): a trace id of its own, the parent's id as `parent_id`, the same setting; in OpenTelemetry
/// mode the same trace under the parent's model span. `None` when `link` is not a tritonrs trace.
pub fn child_of(link: &TraceLink) -> Option<Trace> {
    let p = link.0.downcast_ref::<Parent>()?;
    p.sink.adopt();
    Some(Trace {
        id: p.shared.next_id.fetch_add(1, Ordering::Relaxed),
        parent_id: Some(p.id),
        level: p.level,
        request_id: String::new(),
        model: None,
        stamps: Vec::with_capacity(8),
        sink: p.sink.clone(),
        clock: p.shared.clock,
        shared: p.shared.clone(),
        otel: p.otel.as_ref().map(SpanIds::child),
    })
}

impl Trace {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The handle the requests made on this request's behalf spawn their child traces from.
    pub fn link(&self) -> TraceLink {
        TraceLink(Arc::new(Parent {
            id: self.id,
            level: self.level,
            sink: self.sink.clone(),
            shared: self.shared.clone(),
            otel: self.otel,
        }))
    }

    pub fn stamp(&mut self, activity: Activity, at: Instant) {
        self.stamps.push((activity, at));
    }

    pub fn stamp_now(&mut self, activity: Activity) {
        self.stamp(activity, Instant::now());
    }

    /// Names the model version that runs the request (the core knows it once it resolved the version).
    pub fn set_model(&mut self, name: &str, version: i64) {
        self.model = Some((name.to_string(), version));
    }

    /// Names the request, for a front-end that samples before it has read the request's id (as
    /// tritonserver's generate extension does).
    pub fn set_request_id(&mut self, id: &str) {
        id.clone_into(&mut self.request_id);
    }

    /// The trace's records in tritonserver's layout: one object per timestamp, and the model's object
    /// just before REQUEST_START. Empty unless the level has TIMESTAMPS (tensor records are not written).
    fn render(&self) -> String {
        let mut out = String::new();
        if !self.level.contains(TraceLevel::TIMESTAMPS) {
            return out;
        }
        let id = self.id;
        for (activity, at) in &self.stamps {
            if *activity == Activity::RequestStart {
                if let Some((name, version)) = &self.model {
                    // serde_json quotes and escapes the names; Display on a Value cannot fail.
                    let _ = write!(
                        out,
                        "{{\"id\":{id},\"model_name\":{},\"model_version\":{version}",
                        serde_json::Value::from(name.as_str())
                    );
                    if !self.request_id.is_empty() {
                        let _ = write!(out, ",\"request_id\":{}", serde_json::Value::from(self.request_id.as_str()));
                    }
                    if let Some(parent) = self.parent_id {
                        let _ = write!(out, ",\"parent_id\":{parent}");
                    }
                    out.push_str("},");
                }
            }
            let _ = write!(
                out,
                "{{\"id\":{id},\"timestamps\":[{{\"name\":\"{}\",\"ns\":{}}}]}},",
                activity.name(),
                self.clock.ns(*at)
            );
        }
        out.pop(); // the last comma
        out
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        match (self.otel, self.shared.spans.clone()) {
            (Some(ids), Some(spans)) => {
                // Nothing to buffer or chunk: the spans go straight to the exporter.
                if self.level.contains(TraceLevel::TIMESTAMPS) {
                    spans.submit(self.finish(ids));
                }
            }
            _ => {
                let records = self.render();
                self.sink.collect(records);
            }
        }
    }
}

/// A trace stamped by several owners: a streamed request's, which the core stamps as the request runs
/// and the front-end as it sends each response. Written when the last owner drops it. The core can
/// take the trace out for a while ([`SharedTrace::take`]) to stamp it through the plain [`Trace`] API.
#[derive(Clone)]
pub struct SharedTrace(Arc<Mutex<Option<Trace>>>);

impl SharedTrace {
    pub fn new(trace: Trace) -> SharedTrace {
        SharedTrace(Arc::new(Mutex::new(Some(trace))))
    }

    pub fn stamp(&self, activity: Activity, at: Instant) {
        if let Some(t) = self.0.lock().as_mut() {
            t.stamp(activity, at);
        }
    }

    pub fn stamp_now(&self, activity: Activity) {
        self.stamp(activity, Instant::now());
    }

    /// Takes the trace out, for stamping across an `await`; [`SharedTrace::put`] puts it back.
    pub fn take(&self) -> Option<Trace> {
        self.0.lock().take()
    }

    pub fn put(&self, trace: Option<Trace>) {
        if let Some(t) = trace {
            *self.0.lock() = Some(t);
        }
    }
}

/// One generation of a setting (tritonserver's `TraceSetting`): fixed values, plus the sampling and
/// collection state that starts afresh whenever an update replaces the generation. Traces in flight
/// keep theirs alive; the last one to go writes what is left (see `Drop`).
struct Generation {
    values: TraceSettings,
    specified: Specified,
    file: Arc<TraceFile>,
    state: Mutex<SampleState>,
}

/// Counters and buffered records of a generation.
#[derive(Default)]
struct SampleState {
    /// Requests seen while the setting could trace (tritonserver's `sample_`).
    seen: u64,
    /// Traces still to take; -1 is no limit.
    remaining: i32,
    /// Traces taken (sampled ones and their children), and traces written: when both meet at count 0
    /// the buffer goes to a chunk file at once.
    created: u64,
    collected: u64,
    /// Comma-separated records not yet written, and how many traces they hold.
    buffer: String,
    buffered: u32,
}

impl Generation {
    fn new(values: TraceSettings, specified: Specified, file: Arc<TraceFile>) -> Generation {
        let state = SampleState { remaining: values.count, ..Default::default() };
        Generation { values, specified, file, state: Mutex::new(state) }
    }

    /// The values with the count that is left, as the settings API reports them.
    fn current(&self) -> TraceSettings {
        TraceSettings { count: self.state.lock().remaining, ..self.values.clone() }
    }

    fn can_sample(&self) -> bool {
        self.values.invalid_reason().is_none() && self.state.lock().remaining != 0
    }

    /// tritonserver's sampling: every `rate`-th request the setting sees is traced while the count lasts.
    /// Returns (traced, whether that used up the count).
    fn sample(&self) -> (bool, bool) {
        if self.values.invalid_reason().is_some() {
            return (false, false);
        }
        let mut st = self.state.lock();
        if st.remaining == 0 {
            return (false, false);
        }
        st.seen += 1;
        let traced = st.seen.is_multiple_of(u64::from(self.values.rate));
        if traced {
            st.created += 1;
            if st.remaining > 0 {
                st.remaining -= 1;
            }
        }
        (traced, st.remaining == 0)
    }

    /// Counts a child trace, which the setting collects like the traces it sampled.
    fn adopt(&self) {
        self.state.lock().created += 1;
    }

    /// Buffers one finished trace; writes a chunk when the count is used up and every trace taken is
    /// in, or when `log_frequency` traces are buffered.
    fn collect(&self, records: String) {
        let chunk = {
            let mut st = self.state.lock();
            st.collected += 1;
            if !records.is_empty() {
                if st.buffered > 0 {
                    st.buffer.push(',');
                }
                st.buffer.push_str(&records);
                st.buffered += 1;
            }
            let count_done = st.remaining == 0 && st.collected == st.created;
            let frequency_done = self.values.log_frequency != 0 && st.buffered >= self.values.log_frequency;
            if st.buffered > 0 && (count_done || frequency_done) {
                st.buffered = 0;
                Some(std::mem::take(&mut st.buffer))
            } else {
                None
            }
        };
        // Written outside the lock, so other requests can keep sampling.
        if let Some(chunk) = chunk {
            self.file.save(&chunk, true);
        }
    }

    /// Writes what is buffered: as the next chunk with a log frequency, else into `<file>`.
    fn flush(&self) {
        let rest = {
            let mut st = self.state.lock();
            st.buffered = 0;
            std::mem::take(&mut st.buffer)
        };
        self.file.save(&rest, self.values.log_frequency != 0);
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The settings in force.
struct Settings {
    global: Arc<Generation>,
    /// Models with settings of their own (at least one field specified).
    models: HashMap<String, Arc<Generation>>,
}

/// What the tracer and every trace share.
struct Shared {
    /// tritonserver's trace ids: 1, 2, ... for sampled traces and their children alike.
    next_id: AtomicU64,
    clock: Clock,
    /// Where OpenTelemetry mode's spans go; `None` in triton mode.
    spans: Option<Arc<dyn SpanSink>>,
}

/// The trace manager: owns the settings, samples requests and hands out [`Trace`]s.
pub struct Tracer {
    /// Whether any setting can trace now: the hot path's only check while tracing is off.
    enabled: AtomicBool,
    /// Set at shutdown: nothing is traced afterwards.
    closed: AtomicBool,
    shared: Arc<Shared>,
    /// The start-up values the global setting falls back to when a field is cleared.
    defaults: TraceSettings,
    file: Arc<TraceFile>,
    settings: RwLock<Settings>,
}

impl Tracer {
    /// A tracer with the start-up settings (from `--trace-config` and the older `--trace-*` flags).
    pub fn new(startup: TraceSettings) -> Tracer {
        Tracer::with_spans(startup, None)
    }

    /// A tracer whose OpenTelemetry mode sends its spans to `spans` (built at assembly from
    /// `--trace-config opentelemetry,...`).
    pub fn with_spans(startup: TraceSettings, spans: Option<Arc<dyn SpanSink>>) -> Tracer {
        let file = Arc::new(TraceFile::new(startup.file.clone()));
        let global = Arc::new(Generation::new(startup.clone(), Specified::default(), file.clone()));
        let tracer = Tracer {
            enabled: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            shared: Arc::new(Shared { next_id: AtomicU64::new(1), clock: Clock::new(), spans }),
            defaults: startup,
            file,
            settings: RwLock::new(Settings { global, models: HashMap::new() }),
        };
        tracer.refresh_enabled(&tracer.settings.read());
        tracer
    }

    /// Whether a request could be traced at all. One relaxed atomic load: callers check it before
    /// taking any timestamp, so tracing off costs nothing more.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Decides whether this request to `model` is traced, under the model's setting or the global one.
    pub fn sample(&self, model: &str, request_id: &str) -> Option<Trace> {
        self.sample_in_context(model, request_id, None)
    }

    /// [`Tracer::sample`] for a request that may carry a caller's W3C `traceparent`: in OpenTelemetry
    /// mode such a request is always traced (as in tritonserver, whatever the rate) and continues the
    /// caller's trace; a malformed value is ignored and the request sampled as any other.
    pub fn sample_in_context(&self, model: &str, request_id: &str, traceparent: Option<&str>) -> Option<Trace> {
        if !self.enabled() {
            return None;
        }
        let generation = {
            let s = self.settings.read();
            s.models.get(model).unwrap_or(&s.global).clone()
        };
        let caller = match traceparent {
            Some(tp) if generation.values.mode == TraceMode::OpenTelemetry => otel::parse_traceparent(tp),
            _ => None,
        };
        if caller.is_some() {
            generation.adopt();
        } else {
            let (traced, used_up) = generation.sample();
            if used_up {
                self.refresh_enabled(&self.settings.read());
            }
            if !traced {
                return None;
            }
        }
        let otel = (generation.values.mode == TraceMode::OpenTelemetry).then(|| SpanIds::root().under(caller));
        Some(Trace {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            parent_id: None,
            level: generation.values.level,
            request_id: request_id.to_string(),
            model: None,
            stamps: Vec::with_capacity(16),
            sink: generation,
            clock: self.shared.clock,
            shared: self.shared.clone(),
            otel,
        })
    }

    /// Whether OpenTelemetry spans have somewhere to go (the exporter was started).
    pub fn exports_spans(&self) -> bool {
        self.shared.spans.is_some()
    }

    /// Spans OpenTelemetry mode dropped (queue full, collector down); 0 in triton mode.
    pub fn spans_dropped(&self) -> u64 {
        self.shared.spans.as_ref().map_or(0, |s| s.dropped())
    }

    /// The settings that apply to `model`, or the global ones.
    pub fn settings(&self, model: Option<&str>) -> TraceSettings {
        let s = self.settings.read();
        model.and_then(|m| s.models.get(m)).unwrap_or(&s.global).current()
    }

    /// Applies an update to `model`'s setting or the global one, with tritonserver's rules: a model's
    /// unspecified fields mirror the global setting (and follow it when it changes), cleared fields
    /// return to what they mirror, and a model with no field left falls back to the global setting.
    /// Returns the settings now in force for the same target.
    pub fn update(&self, model: Option<&str>, update: &TraceUpdate) -> Result<TraceSettings> {
        // Replaced generations write their buffered traces when dropped: that happens after the lock.
        let mut retired: Vec<Arc<Generation>> = Vec::new();
        let result = {
            let mut s = self.settings.write();
            match model {
                None => {
                    let current = s.global.current();
                    let (next, specified) =
                        settings::merge(Some((&current, s.global.specified)), &self.defaults, update);
                    self.validate(&next, update)?;
                    let next = Arc::new(Generation::new(next, specified, self.file.clone()));
                    retired.push(std::mem::replace(&mut s.global, next));
                    // Every model setting mirrors the new global one in its unspecified fields.
                    let global_now = s.global.current();
                    let names: Vec<String> = s.models.keys().cloned().collect();
                    for name in names {
                        let Some(old) = s.models.get(&name).cloned() else { continue };
                        let cur = old.current();
                        let (mut values, specified) =
                            settings::merge(Some((&cur, old.specified)), &global_now, &TraceUpdate::default());
                        values.mode = global_now.mode;
                        let fresh = Arc::new(Generation::new(values, specified, self.file.clone()));
                        s.models.insert(name, fresh);
                        retired.push(old);
                    }
                }
                Some(name) => {
                    let old = s.models.get(name).cloned();
                    let current = old.as_ref().map(|g| (g.current(), g.specified));
                    let global_now = s.global.current();
                    if update.mode.is_some_and(|m| m != global_now.mode) {
                        return Err(Error::invalid(
                            "trace_mode is the whole server's: change it with the global trace settings \
                             (/v2/trace/setting)",
                        ));
                    }
                    let (mut next, specified) =
                        settings::merge(current.as_ref().map(|(v, sp)| (v, *sp)), &global_now, update);
                    next.mode = global_now.mode;
                    if specified.none() {
                        // Nothing of its own left: the model simply uses the global setting.
                        if let Some(old) = s.models.remove(name) {
                            retired.push(old);
                        }
                    } else {
                        self.validate(&next, update)?;
                        let fresh = Arc::new(Generation::new(next, specified, self.file.clone()));
                        if let Some(old) = s.models.insert(name.to_string(), fresh) {
                            retired.push(old);
                        }
                    }
                }
            }
            self.refresh_enabled(&s);
            model.and_then(|m| s.models.get(m)).unwrap_or(&s.global).current()
        };
        drop(retired);
        Ok(result)
    }

    /// [`settings::validate`], and a switch to OpenTelemetry mode needs the exporter started.
    fn validate(&self, next: &TraceSettings, update: &TraceUpdate) -> Result<()> {
        if next.mode == TraceMode::OpenTelemetry && self.shared.spans.is_none() {
            return Err(Error::invalid(
                "invalid trace setting: trace_mode opentelemetry needs the exporter, which starts with \
                 --trace-config opentelemetry,url=URL",
            ));
        }
        settings::validate(next, update)
    }

    /// Stops tracing and writes every buffered trace, then closes `<file>`'s JSON array (graceful
    /// shutdown, after the requests in flight have finished).
    pub fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.enabled.store(false, Ordering::SeqCst);
        let generations: Vec<Arc<Generation>> = {
            let s = self.settings.read();
            std::iter::once(s.global.clone()).chain(s.models.values().cloned()).collect()
        };
        for g in &generations {
            g.flush();
        }
        self.file.close();
        if let Some(spans) = &self.shared.spans {
            spans.shutdown();
        }
        if !self.file.path().is_empty() {
            tracing::debug!("Closed the trace file '{}'.", self.file.path());
        }
    }

    /// Recomputes the hot path's flag from every setting in force.
    fn refresh_enabled(&self, s: &Settings) {
        let on =
            !self.closed.load(Ordering::SeqCst) && (s.global.can_sample() || s.models.values().any(|g| g.can_sample()));
        self.enabled.store(on, Ordering::Relaxed);
    }
}

/// Checks start-up settings from the command line; tracing asked for without a file is allowed (as in
/// tritonserver) but nothing can be traced, so it is worth a warning.
pub fn check_startup(s: &TraceSettings) -> Result<Option<String>> {
    if s.count < -1 {
        return Err(Error::invalid(format!(
            "--trace-config count={}: the trace count must be -1 (no limit) or more",
            s.count
        )));
    }
    if !s.level.is_off() && s.rate == 0 {
        return Err(Error::invalid("--trace-config rate=0: the trace rate must be at least 1"));
    }
    if !s.level.is_off() && s.file.is_empty() && s.mode == TraceMode::Triton {
        return Ok(Some(
            "Tracing is on but no trace file is set (--trace-config triton,file=PATH), so nothing will be traced."
                .to_string(),
        ));
    }
    Ok(None)
}
