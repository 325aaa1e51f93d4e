//! Unit tests of `frontend/metrics.rs`.

use super::*;
use crate::core::stats::{DurationSnapshot, FailureReason, StatsSnapshot};
use std::time::Duration;

#[test]
fn renders_triton_names_and_labels() {
    let stats = StatsSnapshot {
        inference_count: 6,
        execution_count: 3,
        success: DurationSnapshot { count: 3, ns: 9_000 },
        queue: DurationSnapshot { count: 3, ns: 2_500 },
        ..Default::default()
    };
    let m = ModelStatistics {
        name: "sim\"ple".into(),
        version: 2,
        stats,
        failures: vec![(FailureReason::Rejected, 1), (FailureReason::Other, 4)],
        pending: 5,
        load_duration: Duration::from_millis(1500),
        cache_enabled: false,
        summaries: None,
        first_response: None,
    };
    let text = render(&[m], Some(CpuReading { utilization: 0.25, memory_total_bytes: 100, memory_used_bytes: 40 }));
    for line in [
        "# TYPE nv_inference_request_success counter",
        "nv_inference_request_success{model=\"sim\\\"ple\",version=\"2\"} 3",
        "nv_inference_request_failure{model=\"sim\\\"ple\",version=\"2\",reason=\"REJECTED\"} 1",
        "nv_inference_request_failure{model=\"sim\\\"ple\",version=\"2\",reason=\"OTHER\"} 4",
        "nv_inference_count{model=\"sim\\\"ple\",version=\"2\"} 6",
        "nv_inference_exec_count{model=\"sim\\\"ple\",version=\"2\"} 3",
        "nv_inference_request_duration_us{model=\"sim\\\"ple\",version=\"2\"} 9",
        "nv_inference_queue_duration_us{model=\"sim\\\"ple\",version=\"2\"} 2",
        "# TYPE nv_inference_pending_request_count gauge",
        "nv_inference_pending_request_count{model=\"sim\\\"ple\",version=\"2\"} 5",
        "nv_model_load_duration_secs{model=\"sim\\\"ple\",version=\"2\"} 1.5",
        "nv_cpu_utilization 0.25",
        "nv_cpu_memory_total_bytes 100",
        "nv_cpu_memory_used_bytes 40",
    ] {
        assert!(text.lines().any(|l| l == line), "missing line {line:?} in:\n{text}");
    }
}

#[test]
fn cpu_metrics_can_be_left_out() {
    assert!(!render(&[], None).contains("nv_cpu_utilization"));
}
