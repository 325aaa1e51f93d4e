//! Per model-version inference statistics, as Triton reports them. Updates are lock-free atomics so the
//! hot path never waits on a lock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
        }
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
    }

    pub fn record_success(&self, total: Duration) {
        self.success.add(total.as_nanos() as u64);
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
