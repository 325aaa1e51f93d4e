//! The OTLP/HTTP exporter of OpenTelemetry trace mode: the core's finished traces, queued (bounded, in
//! spans), batched as the batch span processor settings say, and POSTed by one thread as an OTLP
//! protobuf `ExportTraceServiceRequest` with reqwest. A full queue or a collector that is down drops
//! spans and counts them; inference never waits for the collector.
//!
//! The spans are encoded straight from a trace's stamps ([`Finished::encode_spans`]); the resource and
//! scope are `opentelemetry-proto`'s messages, encoded once. Through the SDK's `SpanData` and
//! `opentelemetry-otlp`'s exporter the export thread spent about 12 µs a request (3 spans), a tenth of
//! the throughput of `simple` at gRPC c8 on 2 cores.

use crate::core::trace::{EncodedSpans, Envelope, Finished, OtelSettings, SpanSink};
use crate::error::{Error, Result};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one export may take before its spans count as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for the queue to drain.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// The traces waiting for the exporter thread. Submitting only takes the lock: the thread is woken
/// when a batch is full or a flush is asked for, else it wakes on its schedule, so a traced request
/// costs no wake-up of another thread.
#[derive(Debug, Default)]
struct Queue {
    state: Mutex<Waiting>,
    /// Signalled when a batch is full, a flush is asked for, or the sink is gone.
    wake: Condvar,
    /// Signalled by the thread when it has exported what a flush asked for.
    flushed: Condvar,
}

/// What the queue holds.
#[derive(Debug, Default)]
struct Waiting {
    traces: Vec<Finished>,
    /// The spans `traces` will give.
    spans: usize,
    /// Flushes asked for and flushes done (a flush is done when `done` reaches its number).
    asked: u64,
    done: u64,
    /// The sink is gone: export what is left and end.
    closed: bool,
}

/// Counters the sink and its thread share.
#[derive(Debug, Default)]
struct Counters {
    /// Spans dropped: queue full, export failed or timed out.
    dropped: AtomicU64,
}

/// [`SpanSink`] over OTLP/HTTP (protobuf).
#[derive(Debug)]
pub struct OtlpSink {
    queue: Arc<Queue>,
    counters: Arc<Counters>,
    /// Spans waiting or being exported at most; more are dropped.
    max_queue: usize,
    /// Spans that wake the thread before its schedule.
    max_batch: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl OtlpSink {
    /// Starts the exporter thread for `settings`. Fails only on a malformed URL; a collector that is
    /// not there yet is not an error (spans are dropped and counted until it is).
    pub fn start(settings: &OtelSettings) -> Result<Arc<OtlpSink>> {
        let exporter = exporter(settings)?;
        let queue = Arc::new(Queue::default());
        let counters = Arc::new(Counters::default());
        let max_batch = settings.bsp_max_export_batch_size.max(1);
        let batch = Batching {
            max_batch,
            // At least 1 ms, so a delay of 0 (export at once) does not spin the thread.
            delay: Duration::from_millis(settings.bsp_schedule_delay_ms.max(1)),
            url: settings.url.clone(),
        };
        let (q, c) = (queue.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || batch.run(exporter, &q, &c))
            .map_err(|e| Error::internal(format!("cannot start the OTLP exporter thread: {e}")))?;
        Ok(Arc::new(OtlpSink {
            queue,
            counters,
            max_queue: settings.bsp_max_queue_size.max(1),
            max_batch,
            thread: Mutex::new(Some(thread)),
        }))
    }
}

/// Where and how the spans go: the endpoint, the HTTP client, and what every export request starts
/// with (the resource and tritonserver's scope, `triton-server` with no version, so dashboards that
/// select Triton's spans select these).
struct Exporter {
    url: String,
    client: reqwest::Client,
    envelope: Envelope,
}

/// The OTLP/HTTP exporter for `settings.url`, with the resource every span carries.
fn exporter(settings: &OtelSettings) -> Result<Exporter> {
    let uri: http::Uri = settings
        .url
        .parse()
        .map_err(|e| Error::invalid(format!("--trace-config opentelemetry,url={}: not a URL ({e})", settings.url)))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(Error::invalid(format!(
            "--trace-config opentelemetry,url={}: the OTLP/HTTP endpoint must be an http:// or https:// URL",
            settings.url
        )));
    }
    // reqwest is built without a default TLS provider; the process uses ring (as for the cloud
    // repositories). Installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| Error::invalid(format!("cannot set up the OTLP exporter for {}: {e}", settings.url)))?;
    let scope = InstrumentationScope { name: "triton-server".into(), ..Default::default() };
    Ok(Exporter { url: settings.url.clone(), client, envelope: Envelope::new(&resource(settings), &scope) })
}

/// The resource every span carries: tritonserver's service name, the SDK's `telemetry.sdk.*`, then
/// the `resource=` attributes (which may replace the service name; a repeated key takes the last).
fn resource(settings: &OtelSettings) -> Resource {
    let sdk = opentelemetry_sdk::Resource::builder_empty()
        .with_detector(Box::new(opentelemetry_sdk::resource::TelemetryResourceDetector))
        .build();
    let mut attrs: Vec<(String, String)> = vec![("service.name".into(), "triton-inference-server".into())];
    attrs.extend(sdk.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    for (k, v) in &settings.resource {
        match attrs.iter_mut().find(|(key, _)| key == k) {
            Some(kv) => kv.1 = v.clone(),
            None => attrs.push((k.clone(), v.clone())),
        }
    }
    let attributes = attrs
        .into_iter()
        .map(|(key, v)| KeyValue {
            key,
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(v)) }),
            ..Default::default()
        })
        .collect();
    Resource { attributes, dropped_attributes_count: 0, entity_refs: Vec::new() }
}

impl Exporter {
    /// POSTs `spans`; an error says why they were not taken.
    async fn send(&self, spans: &[u8]) -> std::result::Result<(), String> {
        let reply = self
            .client
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(self.envelope.request(spans))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = reply.status();
        // Read the (small) reply so the connection goes back to the pool.
        let _ = reply.bytes().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    }
}

impl SpanSink for OtlpSink {
    fn submit(&self, trace: Finished) {
        let n = trace.len();
        let mut w = self.queue.state.lock();
        if w.closed || w.spans + n > self.max_queue {
            drop(w);
            self.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        w.spans += n;
        w.traces.push(trace);
        // Woken once per batch, not per trace.
        if w.spans >= self.max_batch && w.spans - n < self.max_batch {
            self.queue.wake.notify_one();
        }
    }

    fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    fn shutdown(&self) {
        let mut w = self.queue.state.lock();
        w.asked += 1;
        let ticket = w.asked;
        self.queue.wake.notify_one();
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        while w.done < ticket {
            if self.queue.flushed.wait_until(&mut w, deadline).timed_out() {
                tracing::warn!("The OpenTelemetry collector did not take the last spans within {SHUTDOWN_WAIT:?}.");
                break;
            }
        }
        w.closed = true;
        self.queue.wake.notify_one();
        drop(w);
        // Not joined, so a collector that hangs cannot hold up the shutdown.
        drop(self.thread.lock().take());
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.queue.state.lock().closed = true;
        self.queue.wake.notify_one();
    }
}

/// The batch span processor's schedule, run by the exporter thread.
struct Batching {
    max_batch: usize,
    delay: Duration,
    url: String,
}

impl Batching {
    /// Every `delay`, or when a batch is full or a flush is asked for, takes what is queued, builds
    /// its spans and exports them in batches. Ends when the sink is closed.
    fn run(self, exporter: Exporter, queue: &Queue, counters: &Counters) {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("The OTLP exporter cannot start its runtime ({e}); no spans will be exported.");
                return;
            }
        };
        let mut health = Health::default();
        let mut spans = EncodedSpans::default();
        loop {
            let (traces, flush, closed) = {
                let mut w = queue.state.lock();
                let deadline = Instant::now() + self.delay;
                while w.spans < self.max_batch && w.asked == w.done && !w.closed {
                    if queue.wake.wait_until(&mut w, deadline).timed_out() {
                        break;
                    }
                }
                w.spans = 0;
                (std::mem::take(&mut w.traces), w.asked, w.closed)
            };
            for t in &traces {
                t.encode_spans(&mut spans);
                while spans.len() >= self.max_batch {
                    let piece = spans.take_front(self.max_batch);
                    self.export(&rt, &exporter, &piece, self.max_batch, counters, &mut health);
                }
            }
            drop(traces);
            if !spans.is_empty() {
                let n = spans.len();
                let piece = spans.take_front(n);
                self.export(&rt, &exporter, &piece, n, counters, &mut health);
            }
            let mut w = queue.state.lock();
            if w.done < flush {
                w.done = flush;
                queue.flushed.notify_all();
            }
            if closed {
                return;
            }
        }
    }

    /// Exports one batch of `n` encoded spans; counts them as dropped when the collector does not
    /// take them.
    fn export(
        &self,
        rt: &tokio::runtime::Runtime,
        exporter: &Exporter,
        spans: &[u8],
        n: usize,
        counters: &Counters,
        health: &mut Health,
    ) {
        let sent = rt.block_on(async { tokio::time::timeout(EXPORT_TIMEOUT, exporter.send(spans)).await });
        match sent {
            Ok(Ok(())) => health.up(&self.url),
            Ok(Err(e)) => {
                counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                health.down(&self.url, &e);
            }
            Err(_) => {
                counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                health.down(&self.url, "the export timed out");
            }
        }
    }
}

/// Logs the collector going down and coming back once each, not per batch.
#[derive(Default)]
struct Health {
    down: bool,
}

impl Health {
    fn down(&mut self, url: &str, why: &str) {
        if !self.down {
            tracing::warn!(
                "Cannot export trace spans to the OpenTelemetry collector at {url} ({why}); spans are dropped \
                 (counted in tritonrs_trace_spans_dropped_total) until it is back."
            );
            self.down = true;
        }
    }

    fn up(&mut self, url: &str) {
        if self.down {
            tracing::info!("The OpenTelemetry collector at {url} takes spans again.");
            self.down = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    #[test]
    fn an_export_request_carries_the_resource_the_scope_and_the_spans() {
        let settings = OtelSettings {
            url: "http://127.0.0.1:1/v1/traces".into(),
            resource: vec![("service.name".into(), "edge1".into()), ("site".into(), "cam7".into())],
            ..Default::default()
        };
        let exporter = exporter(&settings).unwrap();
        // Two spans as a ScopeSpans message's spans field (2) would hold them.
        let mut spans = Vec::new();
        for name in ["a", "b"] {
            let span = opentelemetry_proto::tonic::trace::v1::Span { name: name.into(), ..Default::default() };
            // ScopeSpans.spans is field 2.
            prost::encoding::message::encode(2, &span, &mut spans);
        }
        let request = ExportTraceServiceRequest::decode(exporter.envelope.request(&spans).as_slice()).unwrap();
        assert_eq!(request.resource_spans.len(), 1);
        let rs = &request.resource_spans[0];
        let attrs: Vec<(String, String)> = rs
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| match kv.value.as_ref().and_then(|v| v.value.clone()) {
                Some(any_value::Value::StringValue(s)) => (kv.key.clone(), s),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(attrs[0], ("service.name".into(), "edge1".into()), "a resource flag replaces the default");
        assert!(attrs.contains(&("telemetry.sdk.name".into(), "opentelemetry".into())));
        assert!(attrs.contains(&("telemetry.sdk.language".into(), "rust".into())));
        assert_eq!(attrs.last(), Some(&("site".into(), "cam7".into())));
        assert_eq!(rs.scope_spans.len(), 1);
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().map(|s| (s.name.as_str(), s.version.as_str())), Some(("triton-server", "")));
        assert_eq!(ss.spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn only_http_urls_are_endpoints() {
        for bad in ["localhost:4318", "grpc://c:4317", "http://bad host/"] {
            let settings = OtelSettings { url: bad.into(), ..Default::default() };
            assert!(exporter(&settings).is_err(), "{bad}");
        }
    }
}
