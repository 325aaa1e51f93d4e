//! Every metric family the server exports, in one place: its name (Triton's `nv_*` names, kept so
//! existing dashboards work, and our `tritonrs_*` ones), its `# HELP` text and its `# TYPE`. Writers
//! take a [`Family`] from here; none spells a name or a help text itself.

use super::Kind;

/// A metric family: name, `# HELP` text and `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The family's name, as each sample line starts.
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// The `# TYPE`.
    pub kind: Kind,
}

impl Family {
    /// Writes the family's `# HELP` and `# TYPE` lines.
    pub fn header(&self, out: &mut String) {
        super::header(out, self.name, self.help, self.kind);
    }
}

/// Declares each family as a `pub const` and lists them all in [`ALL`], so a family can't be left out of
/// the list the tests check.
macro_rules! families {
    ($($id:ident = $name:literal, $kind:ident, $help:literal;)*) => {
        $(pub const $id: Family = Family { name: $name, help: $help, kind: Kind::$kind };)*
        /// Every family the server exports (besides models' custom metrics, named by their models).
        pub const ALL: &[Family] = &[$($id),*];
    };
}

families! {
    // Triton's per-model statistics (`frontend::metrics`; the MQTT status message reuses the names).
    REQUEST_SUCCESS = "nv_inference_request_success", Counter, "Number of successful inference requests, all batch sizes";
    REQUEST_FAILURE = "nv_inference_request_failure", Counter, "Number of failed inference requests, all batch sizes";
    INFERENCE_COUNT = "nv_inference_count", Counter, "Number of inferences performed (does not include cached requests)";
    EXEC_COUNT = "nv_inference_exec_count", Counter, "Number of model executions performed (does not include cached requests)";
    REQUEST_DURATION = "nv_inference_request_duration_us", Counter, "Cumulative inference request duration in microseconds (includes cached requests)";
    QUEUE_DURATION = "nv_inference_queue_duration_us", Counter, "Cumulative inference queuing duration in microseconds (includes cached requests)";
    COMPUTE_INPUT_DURATION = "nv_inference_compute_input_duration_us", Counter, "Cumulative compute input duration in microseconds (does not include cached requests)";
    COMPUTE_INFER_DURATION = "nv_inference_compute_infer_duration_us", Counter, "Cumulative compute inference duration in microseconds (does not include cached requests)";
    COMPUTE_OUTPUT_DURATION = "nv_inference_compute_output_duration_us", Counter, "Cumulative inference compute output duration in microseconds (does not include cached requests)";
    PENDING_REQUESTS = "nv_inference_pending_request_count", Gauge, "Instantaneous number of pending requests awaiting execution per-model.";
    MODEL_LOAD_DURATION = "nv_model_load_duration_secs", Gauge, "Model load time in seconds";
    CACHE_HITS = "nv_cache_num_hits_per_model", Counter, "Number of cache hits per model";
    CACHE_MISSES = "nv_cache_num_misses_per_model", Counter, "Number of cache misses per model";
    CACHE_HIT_DURATION = "nv_cache_hit_duration_per_model", Counter, "Total cache hit duration per model, in microseconds";
    // `--metrics-config summary_latencies=true`: tritonserver 2.51's summaries (their HELP texts as it
    // prints them, the compute ones saying "Cumulative").
    REQUEST_SUMMARY = "nv_inference_request_summary_us", Summary, "Summary of inference request duration in microseconds (includes cached requests)";
    QUEUE_SUMMARY = "nv_inference_queue_summary_us", Summary, "Summary of inference queuing duration in microseconds (includes cached requests)";
    COMPUTE_INPUT_SUMMARY = "nv_inference_compute_input_summary_us", Summary, "Cumulative compute input duration in microseconds (does not include cached requests)";
    COMPUTE_INFER_SUMMARY = "nv_inference_compute_infer_summary_us", Summary, "Cumulative compute inference duration in microseconds (does not include cached requests)";
    COMPUTE_OUTPUT_SUMMARY = "nv_inference_compute_output_summary_us", Summary, "Cumulative inference compute output duration in microseconds (does not include cached requests)";
    CACHE_HIT_SUMMARY = "nv_cache_hit_summary_per_model", Summary, "Summary of cache hit counts/durations per model, in microseconds.";
    CACHE_MISS_SUMMARY = "nv_cache_miss_summary_per_model", Summary, "Summary of cache miss counts/durations per model, in microseconds.";
    // `--metrics-config histogram_latencies=true`, decoupled models only.
    FIRST_RESPONSE_HISTOGRAM = "nv_inference_first_response_histogram_ms", Histogram, "Duration from request to first response in milliseconds";
    CACHE_MISS_DURATION = "nv_cache_miss_duration_per_model", Counter, "Total cache miss (insert+lookup) duration per model, in microseconds";

    // CPU (`platform::CpuMonitor`'s readings).
    CPU_UTILIZATION = "nv_cpu_utilization", Gauge, "CPU utilization rate [0.0 - 1.0]";
    CPU_MEMORY_TOTAL = "nv_cpu_memory_total_bytes", Gauge, "CPU total memory (RAM), in bytes";
    CPU_MEMORY_USED = "nv_cpu_memory_used_bytes", Gauge, "CPU used memory (RAM), in bytes";

    // Memory pools: tritonserver's pinned-pool gauges, and ours for the device pools and fallbacks.
    PINNED_POOL_TOTAL = "nv_pinned_memory_pool_total_bytes", Gauge, "Pinned memory pool total memory size, in bytes";
    PINNED_POOL_USED = "nv_pinned_memory_pool_used_bytes", Gauge, "Pinned memory pool used memory size, in bytes";
    CUDA_POOL_TOTAL = "tritonrs_cuda_memory_pool_total_bytes", Gauge, "CUDA memory pool size, in bytes";
    CUDA_POOL_USED = "tritonrs_cuda_memory_pool_used_bytes", Gauge, "CUDA memory pool used, in bytes";
    POOL_FALLBACKS = "tritonrs_memory_pool_fallback_total", Counter, "Allocations served outside a memory pool because it was full";

    // Cloud model repositories (ours; tritonserver has none).
    REPO_DOWNLOAD_BYTES = "tritonrs_repository_download_bytes_total", Counter, "Bytes downloaded from the cloud model repository";
    REPO_DOWNLOAD_FILES = "tritonrs_repository_download_files_total", Counter, "Files downloaded from the cloud model repository";
    REPO_PENDING_BYTES = "tritonrs_repository_download_pending_bytes", Gauge, "Bytes of the download under way not received yet";
    REPO_SYNC_FAILURES = "tritonrs_repository_sync_failures_total", Counter, "Failed listings and model downloads of the cloud model repository";

    // GPU readings (`platform::gpu`): Triton's NVML families and ours for Jetson.
    GPU_UTILIZATION = "nv_gpu_utilization", Gauge, "GPU utilization rate [0.0 - 1.0)";
    GPU_MEMORY_TOTAL = "nv_gpu_memory_total_bytes", Gauge, "GPU total memory, in bytes";
    GPU_MEMORY_USED = "nv_gpu_memory_used_bytes", Gauge, "GPU used memory, in bytes";
    GPU_POWER_USAGE = "nv_gpu_power_usage", Gauge, "GPU power usage in watts";
    GPU_POWER_LIMIT = "nv_gpu_power_limit", Gauge, "GPU power management limit in watts";
    GPU_ENERGY = "nv_energy_consumption", Counter, "GPU energy consumption in joules since the Triton Server started";
    JETSON_GPU_FREQUENCY = "tritonrs_jetson_gpu_frequency_hertz", Gauge, "Jetson GPU clock frequency, in hertz";
    JETSON_TEMPERATURE = "tritonrs_jetson_temperature_celsius", Gauge, "Jetson thermal zone temperature, in degrees Celsius";
    JETSON_POWER = "tritonrs_jetson_power_watts", Gauge, "Jetson power rail (INA3221), in watts";
    JETSON_NVPMODEL = "tritonrs_jetson_nvpmodel_mode", Gauge, "Jetson power mode (nvpmodel): 1 for the current mode";

    // The MQTT bridge (`frontend::mqtt`; its status message reuses the names).
    MQTT_CONNECTED = "tritonrs_mqtt_connected", Gauge, "Whether the MQTT bridge is connected to its broker";
    MQTT_MESSAGES = "tritonrs_mqtt_messages_total", Counter, "MQTT request messages by how they ended";
    MQTT_DURATION = "tritonrs_mqtt_request_duration_seconds", Histogram, "Time from an MQTT request's arrival to its result's publish";

    // Frigate's ZMQ detector (`frontend::frigate`).
    FRIGATE_REQUESTS = "tritonrs_frigate_zmq_requests_total", Counter, "Requests from Frigate's ZMQ detector, by kind";
    FRIGATE_ERRORS = "tritonrs_frigate_zmq_errors_total", Counter, "Frigate ZMQ requests answered with nothing found because they failed, by reason";
    FRIGATE_PEERS = "tritonrs_frigate_zmq_peers", Gauge, "Peers connected to the Frigate ZMQ detector";
    FRIGATE_DURATION = "tritonrs_frigate_zmq_request_duration_seconds", Histogram, "Time from a Frigate ZMQ detection's arrival to its reply";

    // OpenTelemetry trace mode (`telemetry`): spans that never reached the collector.
    TRACE_SPANS_DROPPED = "tritonrs_trace_spans_dropped_total", Counter, "Trace spans dropped because the export queue was full or the OpenTelemetry collector could not take them";

    // C API backends (`backend::capi`): registered through the custom-metrics registry, as a backend's own
    // metrics are, so that it shows where the backend's families do.
    BACKEND_ABANDONED_THREADS = "tritonrs_backend_abandoned_threads", Gauge, "Threads left inside a Triton backend library that never returned to tritonrs";
}

#[cfg(test)]
mod tests;
