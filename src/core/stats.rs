//! Per model-version inference statistics, as Triton reports them. Updates are lock-free atomics so the
//! hot path never waits on a lock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod quantiles;

use quantiles::{Target, TimeWindow};

/// Which latency families the metrics export (`--metrics-config`): tritonserver's
/// `counter_latencies`, `summary_latencies` and `summary_quantiles`.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyMetrics {
    /// The `nv_inference_*_duration_us` counters (and the cache's per-model counters).
    pub counters: bool,
    /// The `nv_inference_*_summary_us` summaries.
    pub summaries: bool,
    /// The summaries' quantiles and their allowed rank errors.
    pub quantiles: Vec<Target>,
    /// `nv_inference_first_response_histogram_ms` for decoupled models (`histogram_latencies`).
    pub histograms: bool,
}

/// The first-response histogram's bucket bounds, in milliseconds, unless a model's `model_metrics`
/// overrides them (tritonserver's defaults).
pub const FIRST_RESPONSE_BUCKETS_MS: [f64; 4] = [100.0, 500.0, 2000.0, 5000.0];

/// tritonserver's default quantiles: the median within 5 %, the 90th within 1 %, and the 95th, 99th
/// and 99.9th within 0.1 % of rank.
pub const DEFAULT_QUANTILES: [Target; 5] = [
    Target { quantile: 0.5, error: 0.05 },
    Target { quantile: 0.9, error: 0.01 },
    Target { quantile: 0.95, error: 0.001 },
    Target { quantile: 0.99, error: 0.001 },
    Target { quantile: 0.999, error: 0.001 },
];

/// How long a summary's quantiles remember an observation, in how many steps (prometheus-cpp's
/// defaults, which tritonserver keeps).
const SUMMARY_MAX_AGE: Duration = Duration::from_secs(60);
const SUMMARY_AGE_BUCKETS: usize = 5;

impl Default for LatencyMetrics {
    fn default() -> Self {
        LatencyMetrics { counters: true, summaries: false, quantiles: DEFAULT_QUANTILES.to_vec(), histograms: false }
    }
}

/// Set once at start from `--metrics-config`, as tritonserver keeps its metrics settings global: every
/// model version loaded afterwards follows it.
static LATENCY_METRICS: OnceLock<LatencyMetrics> = OnceLock::new();

/// Sets the latency settings; only the first call counts (the server's start).
pub fn set_latency_metrics(m: LatencyMetrics) {
    let _ = LATENCY_METRICS.set(m);
}

/// The latency settings (the defaults until set).
pub fn latency_metrics() -> &'static LatencyMetrics {
    LATENCY_METRICS.get_or_init(LatencyMetrics::default)
}

/// The stages a latency summary is kept for, in [`Summaries`]' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Request,
    Queue,
    ComputeInput,
    ComputeInfer,
    ComputeOutput,
    CacheHit,
    CacheMiss,
}

/// One summary: all-time count and sum (microseconds), and the windowed quantiles.
#[derive(Debug, Clone)]
struct Summary {
    count: u64,
    sum_us: u64,
    window: TimeWindow,
}

/// The latency summaries of one model version, behind one lock taken once per observation group (a
/// request's compute times go in together), and only with `summary_latencies=true`.
#[derive(Debug)]
pub struct Summaries {
    stages: Mutex<[Summary; 7]>,
    quantiles: Vec<f64>,
}

/// A summary at one moment: count, sum in microseconds, and each quantile's estimate (NaN if none).
#[derive(Debug, Clone, PartialEq)]
pub struct SummarySnapshot {
    pub count: u64,
    pub sum_us: u64,
    pub quantiles: Vec<(f64, f64)>,
}

impl Summaries {
    fn new(targets: &[Target]) -> Self {
        let one =
            Summary { count: 0, sum_us: 0, window: TimeWindow::new(targets, SUMMARY_MAX_AGE, SUMMARY_AGE_BUCKETS) };
        Summaries {
            stages: Mutex::new(std::array::from_fn(|_| one.clone())),
            quantiles: targets.iter().map(|t| t.quantile).collect(),
        }
    }

    /// Observes durations in nanoseconds, each as whole microseconds, as tritonserver does.
    fn observe(&self, values: &[(Stage, u64)]) {
        let now = Instant::now();
        // A poisoned lock only means another observer panicked mid-insert; the estimates stay usable.
        let mut stages = self.stages.lock().unwrap_or_else(|p| p.into_inner());
        for &(stage, ns) in values {
            let s = &mut stages[stage as usize];
            let us = ns / 1000;
            s.count += 1;
            s.sum_us += us;
            s.window.insert(us as f64, now);
        }
    }

    /// Every stage's summary, in [`Stage`] order.
    pub fn snapshot(&self) -> Vec<SummarySnapshot> {
        let now = Instant::now();
        let mut stages = self.stages.lock().unwrap_or_else(|p| p.into_inner());
        stages
            .iter_mut()
            .map(|s| SummarySnapshot {
                count: s.count,
                sum_us: s.sum_us,
                quantiles: self.quantiles.iter().map(|&q| (q, s.window.get(q, now))).collect(),
            })
            .collect()
    }
}

/// Why a request failed, as Triton's `nv_inference_request_failure` `reason` label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// Refused by the scheduler (queue full, model unloading).
    Rejected,
    /// Cancelled by the client.
    Canceled,
    /// The backend failed while executing.
    Backend,
    /// Anything else, e.g. a request that does not match the model.
    Other,
}

impl FailureReason {
    pub const ALL: [FailureReason; 4] =
        [FailureReason::Rejected, FailureReason::Canceled, FailureReason::Backend, FailureReason::Other];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Rejected => "REJECTED",
            FailureReason::Canceled => "CANCELED",
            FailureReason::Backend => "BACKEND",
            FailureReason::Other => "OTHER",
        }
    }
}

/// A count and a total time.
#[derive(Debug, Default)]
pub struct DurationStat {
    count: AtomicU64,
    ns: AtomicU64,
}

impl DurationStat {
    pub fn add(&self, ns: u64) {
        self.count.fetch_add(1, Relaxed);
        self.ns.fetch_add(ns, Relaxed);
    }
    pub fn snapshot(&self) -> DurationSnapshot {
        DurationSnapshot { count: self.count.load(Relaxed), ns: self.ns.load(Relaxed) }
    }
}

/// A point-in-time copy of a [`DurationStat`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DurationSnapshot {
    pub count: u64,
    pub ns: u64,
}

/// Compute times for executions of one batch size.
#[derive(Debug, Default)]
pub struct BatchStat {
    pub compute_input: DurationStat,
    pub compute_infer: DurationStat,
    pub compute_output: DurationStat,
}

/// All statistics of one model version.
#[derive(Debug)]
pub struct ModelStats {
    pub success: DurationStat,
    pub fail: DurationStat,
    pub queue: DurationStat,
    pub compute_input: DurationStat,
    pub compute_infer: DurationStat,
    pub compute_output: DurationStat,
    pub cache_hit: DurationStat,
    pub cache_miss: DurationStat,
    /// Inferences performed (a batch of 4 counts 4).
    pub inference_count: AtomicU64,
    /// Model executions (a batch of 4 counts 1).
    pub execution_count: AtomicU64,
    /// Milliseconds since the epoch of the last successful inference, 0 if none.
    pub last_inference_ms: AtomicU64,
    /// Failures by reason, indexed like [`FailureReason::ALL`].
    failures: [AtomicU64; 4],
    /// Requests queued and not yet picked up by an instance.
    pub pending: AtomicI64,
    /// Index `b - 1` holds executions of batch size `b`; preallocated up to the model's max batch size.
    batches: Vec<BatchStat>,
    /// The latency summaries, with `--metrics-config summary_latencies=true` only.
    pub summaries: Option<Summaries>,
    /// Time to a decoupled request's first response, with `histogram_latencies=true` only.
    pub first_response: Option<Histogram>,
    /// Per response index, a decoupled model's responses (`response_stats`); `None` for other models.
    pub responses: Option<ResponseStats>,
    /// What the backend reports of the memory the version holds (`memory_usage`), one per reporter.
    memory: OnceLock<Vec<Arc<crate::model_api::MemoryUsage>>>,
}

/// The most response indices `response_stats` keeps apart: later responses of a longer stream count in
/// the last index, so a model streaming without end cannot grow the table without bound.
pub const MAX_RESPONSE_INDICES: usize = 4096;

/// How one response of a decoupled model ended, for [`ResponseStats::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOutcome {
    /// Outputs were sent: `infer_ns` waiting for the backend, `output_ns` building the response.
    Success { infer_ns: u64, output_ns: u64 },
    /// The final flag alone, after `infer_ns`.
    Empty { infer_ns: u64 },
    /// An error response, after `ns`.
    Fail { ns: u64 },
    /// The client went away (the stream was cancelled) after `ns`.
    Cancel { ns: u64 },
}

/// tritonserver's `response_stats` of a decoupled model: per response index (the k-th response of a
/// request), counts and times of computing, building, succeeding, failing, empty and cancelled responses.
#[derive(Debug, Default)]
pub struct ResponseStats {
    by_index: Mutex<Vec<ResponseSnapshot>>,
}

/// One response index's statistics, as `response_stats` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseSnapshot {
    pub compute_infer: DurationSnapshot,
    pub compute_output: DurationSnapshot,
    pub success: DurationSnapshot,
    pub fail: DurationSnapshot,
    pub empty_response: DurationSnapshot,
    pub cancel: DurationSnapshot,
}

impl DurationSnapshot {
    fn add(&mut self, ns: u64) {
        self.count += 1;
        self.ns = self.ns.saturating_add(ns);
    }
}

impl ResponseStats {
    /// Records the `index`-th response of a request (0 is the first).
    pub fn record(&self, index: usize, outcome: ResponseOutcome) {
        let mut all = self.by_index.lock().unwrap_or_else(|e| e.into_inner());
        let i = index.min(MAX_RESPONSE_INDICES - 1);
        if all.len() <= i {
            all.resize(i + 1, ResponseSnapshot::default());
        }
        let r = &mut all[i];
        match outcome {
            ResponseOutcome::Success { infer_ns, output_ns } => {
                r.compute_infer.add(infer_ns);
                r.compute_output.add(output_ns);
                r.success.add(infer_ns.saturating_add(output_ns));
            }
            ResponseOutcome::Empty { infer_ns } => {
                r.compute_infer.add(infer_ns);
                r.empty_response.add(infer_ns);
            }
            ResponseOutcome::Fail { ns } => r.fail.add(ns),
            ResponseOutcome::Cancel { ns } => r.cancel.add(ns),
        }
    }

    /// The indices seen so far, index 0 first.
    pub fn snapshot(&self) -> Vec<ResponseSnapshot> {
        self.by_index.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A lock-free histogram of whole milliseconds with fixed bucket bounds (tritonserver observes the
/// first-response time in whole milliseconds too).
#[derive(Debug)]
pub struct Histogram {
    /// Ascending upper bounds.
    bounds: Vec<f64>,
    /// Observations per bucket (not cumulative); one more than `bounds`, for `+Inf`.
    counts: Vec<AtomicU64>,
    sum_ms: AtomicU64,
}

/// A histogram read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Each bound with the observations that fell in it alone, ascending.
    pub buckets: Vec<(f64, u64)>,
    pub sum_ms: u64,
    pub count: u64,
}

impl Histogram {
    /// A histogram with `bounds` (sorted and deduplicated here; NaN bounds are dropped).
    pub fn new(bounds: &[f64]) -> Self {
        let mut bounds: Vec<f64> = bounds.iter().copied().filter(|b| !b.is_nan()).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram { bounds, counts, sum_ms: AtomicU64::new(0) }
    }

    pub fn observe(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let i = self.bounds.iter().position(|b| ms as f64 <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ms.fetch_add(ms, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        HistogramSnapshot {
            buckets: self.bounds.iter().copied().zip(counts.iter().copied()).collect(),
            sum_ms: self.sum_ms.load(Relaxed),
            count: counts.iter().sum(),
        }
    }
}

impl ModelStats {
    pub fn new(max_batch_size: i32) -> Self {
        let n = max_batch_size.max(1) as usize;
        ModelStats {
            success: DurationStat::default(),
            fail: DurationStat::default(),
            queue: DurationStat::default(),
            compute_input: DurationStat::default(),
            compute_infer: DurationStat::default(),
            compute_output: DurationStat::default(),
            cache_hit: DurationStat::default(),
            cache_miss: DurationStat::default(),
            inference_count: AtomicU64::new(0),
            execution_count: AtomicU64::new(0),
            last_inference_ms: AtomicU64::new(0),
            failures: Default::default(),
            pending: AtomicI64::new(0),
            batches: (0..n).map(|_| BatchStat::default()).collect(),
            summaries: latency_metrics().summaries.then(|| Summaries::new(&latency_metrics().quantiles)),
            first_response: None,
            responses: None,
            memory: OnceLock::new(),
        }
    }

    /// Reads `memory_usage` from these reports (each counted once), set once the instances exist.
    pub fn set_memory_usage(&self, reports: Vec<Arc<crate::model_api::MemoryUsage>>) {
        let mut unique: Vec<Arc<crate::model_api::MemoryUsage>> = Vec::new();
        for r in reports {
            if !unique.iter().any(|m| Arc::ptr_eq(m, &r)) {
                unique.push(r);
            }
        }
        let _ = self.memory.set(unique);
    }

    /// `memory_usage`: the bytes of every kind and device the backend reported, summed over reporters.
    fn memory_snapshot(&self) -> Vec<(crate::model_api::MemoryKind, i64, u64)> {
        let mut sum: std::collections::BTreeMap<_, u64> = Default::default();
        for (k, id, b) in self.memory.get().into_iter().flatten().flat_map(|m| m.entries()) {
            let t = sum.entry((k, id)).or_default();
            *t = t.saturating_add(b);
        }
        sum.into_iter().map(|((k, id), b)| (k, id, b)).collect()
    }

    /// Keeps `response_stats` (for a decoupled model).
    pub fn with_response_stats(mut self) -> Self {
        self.responses = Some(ResponseStats::default());
        self
    }

    /// With `histogram_latencies=true`, keeps the first-response histogram (for a decoupled model) with
    /// `bounds`.
    pub fn with_first_response_histogram(mut self, bounds: &[f64]) -> Self {
        if latency_metrics().histograms {
            self.first_response = Some(Histogram::new(bounds));
        }
        self
    }

    /// Records one execution of `batch_size` inferences.
    pub fn record_execution(&self, batch_size: u32, input_ns: u64, infer_ns: u64, output_ns: u64) {
        self.record_padded_execution(batch_size, batch_size, input_ns, infer_ns, output_ns);
    }

    /// Records one execution of `rows` batch rows of which `inferences` were requests: the sequence
    /// batcher pads idle slots, and Triton counts the padded size in the batch statistics but only the
    /// requests as inferences.
    pub fn record_padded_execution(&self, inferences: u32, rows: u32, input_ns: u64, infer_ns: u64, output_ns: u64) {
        self.execution_count.fetch_add(1, Relaxed);
        self.inference_count.fetch_add(u64::from(inferences), Relaxed);
        if let Some(b) = self.batches.get((rows as usize).wrapping_sub(1)) {
            b.compute_input.add(input_ns);
            b.compute_infer.add(infer_ns);
            b.compute_output.add(output_ns);
        }
    }

    /// Records the per-request compute times of a request that was part of an execution.
    pub fn record_request_compute(&self, queue_ns: u64, input_ns: u64, infer_ns: u64, output_ns: u64) {
        self.queue.add(queue_ns);
        self.compute_input.add(input_ns);
        self.compute_infer.add(infer_ns);
        self.compute_output.add(output_ns);
        self.observe(&[
            (Stage::Queue, queue_ns),
            (Stage::ComputeInput, input_ns),
            (Stage::ComputeInfer, infer_ns),
            (Stage::ComputeOutput, output_ns),
        ]);
    }

    /// Adds observations to the latency summaries, if they are kept.
    pub fn observe(&self, values: &[(Stage, u64)]) {
        if let Some(s) = &self.summaries {
            s.observe(values);
        }
    }

    /// Records a response-cache hit that took `ns`.
    pub fn record_cache_hit(&self, ns: u64) {
        self.cache_hit.add(ns);
        self.observe(&[(Stage::CacheHit, ns)]);
    }

    /// Records a response-cache miss (lookup and insertion) that took `ns`.
    pub fn record_cache_miss(&self, ns: u64) {
        self.cache_miss.add(ns);
        self.observe(&[(Stage::CacheMiss, ns)]);
    }

    pub fn record_success(&self, total: Duration) {
        self.success.add(total.as_nanos() as u64);
        self.observe(&[(Stage::Request, total.as_nanos() as u64)]);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        self.last_inference_ms.store(now, Relaxed);
    }

    pub fn record_failure(&self, total: Duration, reason: FailureReason) {
        self.fail.add(total.as_nanos() as u64);
        self.failures[reason as usize].fetch_add(1, Relaxed);
    }

    /// Failures with this reason so far.
    pub fn failures(&self, reason: FailureReason) -> u64 {
        self.failures[reason as usize].load(Relaxed)
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            last_inference: self.last_inference_ms.load(Relaxed),
            inference_count: self.inference_count.load(Relaxed),
            execution_count: self.execution_count.load(Relaxed),
            success: self.success.snapshot(),
            fail: self.fail.snapshot(),
            queue: self.queue.snapshot(),
            compute_input: self.compute_input.snapshot(),
            compute_infer: self.compute_infer.snapshot(),
            compute_output: self.compute_output.snapshot(),
            cache_hit: self.cache_hit.snapshot(),
            cache_miss: self.cache_miss.snapshot(),
            batches: self
                .batches
                .iter()
                .enumerate()
                .filter(|(_, b)| b.compute_infer.count.load(Relaxed) > 0)
                .map(|(i, b)| BatchSnapshot {
                    batch_size: i as u64 + 1,
                    compute_input: b.compute_input.snapshot(),
                    compute_infer: b.compute_infer.snapshot(),
                    compute_output: b.compute_output.snapshot(),
                })
                .collect(),
            responses: self.responses.as_ref().map(|r| r.snapshot()).unwrap_or_default(),
            memory: self.memory_snapshot(),
        }
    }
}

/// Statistics of one model version at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub last_inference: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: DurationSnapshot,
    pub fail: DurationSnapshot,
    pub queue: DurationSnapshot,
    pub compute_input: DurationSnapshot,
    pub compute_infer: DurationSnapshot,
    pub compute_output: DurationSnapshot,
    pub cache_hit: DurationSnapshot,
    pub cache_miss: DurationSnapshot,
    pub batches: Vec<BatchSnapshot>,
    /// `response_stats`, index 0 first (decoupled models only).
    pub responses: Vec<ResponseSnapshot>,
    /// `memory_usage`: memory kind, device id and bytes, as the backend reported them.
    pub memory: Vec<(crate::model_api::MemoryKind, i64, u64)>,
}

/// Compute times of executions of one batch size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSnapshot {
    pub batch_size: u64,
    pub compute_input: DurationSnapshot,
    pub compute_infer: DurationSnapshot,
    pub compute_output: DurationSnapshot,
}

#[cfg(test)]
mod tests;
