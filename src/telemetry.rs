//! The OTLP/HTTP exporter of OpenTelemetry trace mode: the core's finished spans, queued (bounded, in
//! spans), batched as the batch span processor settings say and sent by one thread with the
//! OpenTelemetry SDK's OTLP exporter. A full queue or a collector that is down drops spans and counts
//! them; inference never waits for the collector.

use crate::core::trace::{Finished, OtelSettings, SpanSink};
use crate::error::{Error, Result};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one export may take before its spans count as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for the queue to drain.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// What the exporter thread is told.
#[derive(Debug)]
enum Msg {
    /// A finished trace, whose spans the thread builds.
    Trace(Finished),
    /// Send what is queued, then say so on the channel.
    Flush(Sender<()>),
}

/// The counters the sink and its thread share.
#[derive(Debug, Default)]
struct Counters {
    /// Spans submitted and not yet exported (or dropped).
    queued: AtomicUsize,
    /// Spans dropped: queue full, export failed or timed out.
    dropped: AtomicU64,
}

/// [`SpanSink`] over OTLP/HTTP (protobuf).
#[derive(Debug)]
pub struct OtlpSink {
    tx: Sender<Msg>,
    counters: Arc<Counters>,
    max_queue: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl OtlpSink {
    /// Starts the exporter thread for `settings`. Fails only on a malformed URL; a collector that is
    /// not there yet is not an error (spans are dropped and counted until it is).
    pub fn start(settings: &OtelSettings) -> Result<Arc<OtlpSink>> {
        let uri: http::Uri = settings.url.parse().map_err(|e| {
            Error::invalid(format!("--trace-config opentelemetry,url={}: not a URL ({e})", settings.url))
        })?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(Error::invalid(format!(
                "--trace-config opentelemetry,url={}: the OTLP/HTTP endpoint must be an http:// or https:// URL",
                settings.url
            )));
        }
        // reqwest is built without a default TLS provider; the process uses ring (as for the cloud
        // repositories). Installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(settings.url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(Default::default())
            .build()
            .map_err(|e| Error::invalid(format!("cannot set up the OTLP exporter for {}: {e}", settings.url)))?;
        exporter.set_resource(&resource(settings));
        let (tx, rx) = crossbeam_channel::unbounded();
        let counters = Arc::new(Counters::default());
        let batch = Batching {
            max_batch: settings.bsp_max_export_batch_size.max(1),
            delay: Duration::from_millis(settings.bsp_schedule_delay_ms),
            url: settings.url.clone(),
        };
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || batch.run(exporter, &rx, &c))
            .map_err(|e| Error::internal(format!("cannot start the OTLP exporter thread: {e}")))?;
        Ok(Arc::new(OtlpSink {
            tx,
            counters,
            max_queue: settings.bsp_max_queue_size.max(1),
            thread: Mutex::new(Some(thread)),
        }))
    }
}

/// The resource every span carries: tritonserver's service name, the SDK's `telemetry.sdk.*`, then
/// the `resource=` attributes (which may replace the service name; a repeated key takes the last).
fn resource(settings: &OtelSettings) -> Resource {
    let mut attrs = vec![KeyValue::new("service.name", "triton-inference-server")];
    attrs.extend(settings.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())));
    Resource::builder_empty()
        .with_detector(Box::new(opentelemetry_sdk::resource::TelemetryResourceDetector))
        .with_attributes(attrs)
        .build()
}

impl SpanSink for OtlpSink {
    fn submit(&self, trace: Finished) {
        let n = trace.len();
        let queued = self.counters.queued.fetch_add(n, Ordering::AcqRel);
        if queued + n > self.max_queue || self.tx.send(Msg::Trace(trace)).is_err() {
            self.counters.queued.fetch_sub(n, Ordering::AcqRel);
            self.counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    fn shutdown(&self) {
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Msg::Flush(done_tx)).is_ok() && done_rx.recv_timeout(SHUTDOWN_WAIT).is_err() {
            tracing::warn!("The OpenTelemetry collector did not take the last spans within {SHUTDOWN_WAIT:?}.");
        }
        // The thread ends when the sink (and so the channel) goes; it is not joined, so a collector
        // that hangs cannot hold up the shutdown.
        drop(self.thread.lock().take());
    }
}

/// The batch span processor's schedule, run by the exporter thread.
struct Batching {
    max_batch: usize,
    delay: Duration,
    url: String,
}

impl Batching {
    /// Collects spans until a batch is full or `delay` passed since its first span, and exports it;
    /// a flush exports at once. Ends when every sender is gone.
    fn run(self, exporter: opentelemetry_otlp::SpanExporter, rx: &Receiver<Msg>, counters: &Counters) {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("The OTLP exporter cannot start its runtime ({e}); no spans will be exported.");
                return;
            }
        };
        let mut health = Health::default();
        let mut batch: Vec<SpanData> = Vec::new();
        let mut deadline: Option<Instant> = None;
        loop {
            let msg = match deadline {
                Some(d) => rx.recv_deadline(d),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let mut flush = None;
            match msg {
                Ok(Msg::Trace(trace)) => {
                    deadline.get_or_insert_with(|| Instant::now() + self.delay);
                    // As many spans as the queue counted for it (`Finished::len`).
                    batch.extend(trace.spans());
                }
                Ok(Msg::Flush(done)) => flush = Some(done),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.export_all(&rt, &exporter, &mut batch, counters, &mut health);
                    return;
                }
            }
            let due = deadline.is_some_and(|d| Instant::now() >= d);
            if batch.len() >= self.max_batch || due || flush.is_some() {
                self.export_all(&rt, &exporter, &mut batch, counters, &mut health);
                deadline = None;
            }
            if let Some(done) = flush {
                let _ = done.send(());
            }
        }
    }

    /// Exports `batch` in pieces of at most `max_batch` spans.
    fn export_all(
        &self,
        rt: &tokio::runtime::Runtime,
        exporter: &opentelemetry_otlp::SpanExporter,
        batch: &mut Vec<SpanData>,
        counters: &Counters,
        health: &mut Health,
    ) {
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(self.max_batch));
            let piece = std::mem::replace(batch, rest);
            let n = piece.len();
            let sent = rt.block_on(async { tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(piece)).await });
            counters.queued.fetch_sub(n, Ordering::AcqRel);
            match sent {
                Ok(Ok(())) => health.up(&self.url),
                Ok(Err(e)) => {
                    counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                    health.down(&self.url, &e.to_string());
                }
                Err(_) => {
                    counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                    health.down(&self.url, "the export timed out");
                }
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
