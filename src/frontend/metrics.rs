//! Prometheus metrics on `--metrics-port` at `/metrics`, with Triton's `nv_*` names and labels so
//! existing dashboards work. The counters are the core's lock-free statistics, read at scrape time.

use crate::core::server::ModelStatistics;
use crate::core::Server;
use crate::metrics_text::names::{self, Family};
use crate::metrics_text::sample;
use crate::platform::{CpuMonitor, CpuReading};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::fmt::Display;
use std::sync::Arc;

/// What the endpoint reads.
#[derive(Clone)]
pub struct MetricsState {
    pub server: Server,
    /// `None` with `--allow-cpu-metrics=false`.
    pub cpu: Option<Arc<CpuMonitor>>,
    /// GPU readings (NVML, Jetson sysfs); `None` with `--allow-gpu-metrics=false` or without a GPU.
    pub gpu: Option<Arc<crate::platform::gpu::GpuMonitor>>,
    /// The MQTT bridge's counters, when it runs.
    pub mqtt: Option<Arc<crate::frontend::mqtt::metrics::MqttMetrics>>,
    /// Frigate's ZMQ detector's counters, when it runs.
    pub frigate: Option<Arc<crate::frontend::frigate::metrics::FrigateMetrics>>,
}

pub fn router(state: MetricsState) -> Router {
    Router::new().route("/metrics", get(scrape)).with_state(state)
}

async fn scrape(axum::extract::State(s): axum::extract::State<MetricsState>) -> Response {
    let stats = s.server.statistics(None, "").unwrap_or_default();
    let mut body = render(&stats, s.cpu.as_ref().map(|c| c.reading()));
    if let Some(g) = &s.gpu {
        crate::platform::gpu::render(&mut body, &g.readings());
    }
    render_pools(&mut body, s.server.pools());
    render_remotes(&mut body, s.server.remote_repositories());
    if s.server.tracer().exports_spans() {
        names::TRACE_SPANS_DROPPED.header(&mut body);
        sample(&mut body, names::TRACE_SPANS_DROPPED.name, &[], s.server.tracer().spans_dropped());
    }
    s.server.custom_metrics().render(&mut body);
    if let Some(m) = &s.mqtt {
        m.render(&mut body);
    }
    if let Some(m) = &s.frigate {
        m.render(&mut body);
    }
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(crate::metrics_text::MEDIA_TYPE));
    r
}

/// Downloads from cloud repositories (ours; tritonserver has none), one series per repository URL.
pub fn render_remotes(out: &mut String, remotes: &[Arc<dyn crate::core::repository::RemoteRepository>]) {
    use names::*;
    if remotes.is_empty() {
        return;
    }
    let all: Vec<_> = remotes.iter().map(|r| (r.url(), r.progress())).collect();
    type Read = fn(&crate::core::repository::SyncProgress) -> u64;
    let families: [(Family, Read); 4] = [
        (REPO_DOWNLOAD_BYTES, |p| p.bytes),
        (REPO_DOWNLOAD_FILES, |p| p.files),
        (REPO_PENDING_BYTES, |p| p.pending_bytes),
        (REPO_SYNC_FAILURES, |p| p.failures),
    ];
    for (f, value) in families {
        f.header(out);
        for (url, p) in &all {
            sample(out, f.name, &[("repository", url)], value(p));
        }
    }
}

/// The memory pools: tritonserver's pinned-pool gauges, and ours for the device pools and fallbacks.
pub fn render_pools(out: &mut String, pools: &crate::memory::pool::Pools) {
    use names::*;
    let pinned = pools.pinned.stats();
    PINNED_POOL_TOTAL.header(out);
    sample(out, PINNED_POOL_TOTAL.name, &[], pinned.total_bytes);
    PINNED_POOL_USED.header(out);
    sample(out, PINNED_POOL_USED.name, &[], pinned.used_bytes);
    if !pools.gpus.is_empty() {
        CUDA_POOL_TOTAL.header(out);
        for (_, p, uuid) in &pools.gpus {
            sample(out, CUDA_POOL_TOTAL.name, &[("gpu_uuid", uuid)], p.stats().total_bytes);
        }
        CUDA_POOL_USED.header(out);
        for (_, p, uuid) in &pools.gpus {
            sample(out, CUDA_POOL_USED.name, &[("gpu_uuid", uuid)], p.stats().used_bytes);
        }
    }
    POOL_FALLBACKS.header(out);
    sample(out, POOL_FALLBACKS.name, &[("pool", &pinned.name)], pinned.fallbacks);
    for (_, p, _) in &pools.gpus {
        let st = p.stats();
        sample(out, POOL_FALLBACKS.name, &[("pool", &st.name)], st.fallbacks);
    }
}

/// One of Triton's per-model families: HELP, TYPE, then a sample per model version that `value` gives
/// one for.
fn family<V: Display>(
    out: &mut String,
    f: Family,
    models: &[ModelStatistics],
    value: impl Fn(&ModelStatistics) -> Option<V>,
) {
    f.header(out);
    for m in models {
        if let Some(v) = value(m) {
            sample(out, f.name, &[("model", &m.name), ("version", &m.version.to_string())], v);
        }
    }
}

/// The latency summaries of `--metrics-config summary_latencies=true`, as tritonserver 2.51 has them:
/// the request summary only for models without the response cache (its time would mix hits and
/// executions), the cache's two only for models with it.
fn render_summaries(out: &mut String, models: &[ModelStatistics]) {
    use crate::core::stats::Stage;
    use names::*;
    let families = [
        (REQUEST_SUMMARY, Stage::Request, Some(false)),
        (QUEUE_SUMMARY, Stage::Queue, None),
        (COMPUTE_INPUT_SUMMARY, Stage::ComputeInput, None),
        (COMPUTE_INFER_SUMMARY, Stage::ComputeInfer, None),
        (COMPUTE_OUTPUT_SUMMARY, Stage::ComputeOutput, None),
        (CACHE_HIT_SUMMARY, Stage::CacheHit, Some(true)),
        (CACHE_MISS_SUMMARY, Stage::CacheMiss, Some(true)),
    ];
    for (f, stage, cache) in families {
        let with: Vec<_> = models
            .iter()
            .filter(|m| cache.is_none_or(|c| c == m.cache_enabled))
            .filter_map(|m| Some((m, m.summaries.as_ref()?.get(stage as usize)?)))
            .collect();
        if with.is_empty() {
            continue;
        }
        f.header(out);
        for (m, s) in with {
            let version = m.version.to_string();
            let labels = [("model", m.name.as_str()), ("version", version.as_str())];
            crate::metrics_text::summary(out, f.name, &labels, s.count, s.sum_us, &s.quantiles);
        }
    }
}

/// `nv_inference_first_response_histogram_ms` of `histogram_latencies=true`: decoupled models only, as
/// in tritonserver.
fn render_first_response(out: &mut String, models: &[ModelStatistics]) {
    let f = names::FIRST_RESPONSE_HISTOGRAM;
    let with: Vec<_> = models.iter().filter_map(|m| Some((m, m.first_response.as_ref()?))).collect();
    if with.is_empty() {
        return;
    }
    f.header(out);
    for (m, h) in with {
        let version = m.version.to_string();
        let labels = [("model", m.name.as_str()), ("version", version.as_str())];
        crate::metrics_text::histogram(out, f.name, &labels, h.buckets.iter().copied(), h.sum_ms, h.count);
    }
}

/// Renders the exposition text. Pure, so it is unit-tested without a server.
pub fn render(models: &[ModelStatistics], cpu: Option<CpuReading>) -> String {
    use names::*;
    let mut out = String::with_capacity(4096);
    let us = |ns: u64| Some(ns / 1000);
    family(&mut out, REQUEST_SUCCESS, models, |m| Some(m.stats.success.count));
    REQUEST_FAILURE.header(&mut out);
    for m in models {
        let version = m.version.to_string();
        for (reason, n) in &m.failures {
            let labels = [("model", m.name.as_str()), ("version", &version), ("reason", reason.as_str())];
            sample(&mut out, REQUEST_FAILURE.name, &labels, n);
        }
    }
    family(&mut out, INFERENCE_COUNT, models, |m| Some(m.stats.inference_count));
    family(&mut out, EXEC_COUNT, models, |m| Some(m.stats.execution_count));
    let latency = crate::core::stats::latency_metrics();
    if latency.counters {
        family(&mut out, REQUEST_DURATION, models, |m| us(m.stats.success.ns + m.stats.fail.ns));
        family(&mut out, QUEUE_DURATION, models, |m| us(m.stats.queue.ns));
        family(&mut out, COMPUTE_INPUT_DURATION, models, |m| us(m.stats.compute_input.ns));
        family(&mut out, COMPUTE_INFER_DURATION, models, |m| us(m.stats.compute_infer.ns));
        family(&mut out, COMPUTE_OUTPUT_DURATION, models, |m| us(m.stats.compute_output.ns));
    }
    family(&mut out, PENDING_REQUESTS, models, |m| Some(m.pending.max(0)));
    family(&mut out, MODEL_LOAD_DURATION, models, |m| Some(m.load_duration.as_secs_f64()));
    if latency.counters && models.iter().any(|m| m.cache_enabled) {
        // Like Triton, the cache families exist only for models that use the response cache, and go
        // with the latency counters.
        let cached = |v: u64, m: &ModelStatistics| m.cache_enabled.then_some(v);
        family(&mut out, CACHE_HITS, models, |m| cached(m.stats.cache_hit.count, m));
        family(&mut out, CACHE_MISSES, models, |m| cached(m.stats.cache_miss.count, m));
        family(&mut out, CACHE_HIT_DURATION, models, |m| cached(m.stats.cache_hit.ns / 1000, m));
        family(&mut out, CACHE_MISS_DURATION, models, |m| cached(m.stats.cache_miss.ns / 1000, m));
    }
    render_summaries(&mut out, models);
    render_first_response(&mut out, models);
    if let Some(c) = cpu {
        CPU_UTILIZATION.header(&mut out);
        sample(&mut out, CPU_UTILIZATION.name, &[], c.utilization);
        CPU_MEMORY_TOTAL.header(&mut out);
        sample(&mut out, CPU_MEMORY_TOTAL.name, &[], c.memory_total_bytes);
        CPU_MEMORY_USED.header(&mut out);
        sample(&mut out, CPU_MEMORY_USED.name, &[], c.memory_used_bytes);
    }
    out
}

#[cfg(test)]
mod tests;
