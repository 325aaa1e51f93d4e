//! Unit tests of `frontend/frigate/metrics.rs`.

use super::*;

#[test]
fn counts_by_kind_and_reason() {
    let m = FrigateMetrics::default();
    m.request(Kind::Detect);
    m.request(Kind::Detect);
    m.request(Kind::ModelCheck);
    m.error("short_tensor");
    m.error("not-a-reason");
    super::super::router::Events::reply_dropped(&m);
    super::super::router::Events::peers(&m, 3);
    m.observe(0.004);
    let mut s = String::new();
    m.render(&mut s);
    assert!(s.contains("tritonrs_frigate_zmq_requests_total{kind=\"detect\"} 2\n"), "{s}");
    assert!(s.contains("tritonrs_frigate_zmq_requests_total{kind=\"model_data\"} 0\n"));
    assert!(s.contains("tritonrs_frigate_zmq_errors_total{reason=\"short_tensor\"} 1\n"));
    assert!(s.contains("tritonrs_frigate_zmq_request_duration_seconds_count 1\n"));
    assert!(s.contains("tritonrs_frigate_zmq_errors_total{reason=\"reply_dropped\"} 1\n"), "{s}");
    assert!(s.contains("tritonrs_frigate_zmq_peers 3\n"), "{s}");
}
