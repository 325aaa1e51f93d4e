//! Unit tests of `frontend/mqtt/metrics.rs`.

use super::*;

#[test]
fn renders_counters_and_a_cumulative_histogram() {
    let m = MqttMetrics::default();
    m.set_connected(true);
    m.count(Outcome::Ok);
    m.count(Outcome::Ok);
    m.count(Outcome::Rejected);
    m.observe(0.003);
    m.observe(0.2);
    m.observe(60.0);
    let mut s = String::new();
    m.render(&mut s);
    assert!(s.contains("tritonrs_mqtt_connected 1\n"));
    assert!(s.contains("tritonrs_mqtt_messages_total{result=\"ok\"} 2\n"));
    assert!(s.contains("tritonrs_mqtt_messages_total{result=\"rejected\"} 1\n"));
    assert!(s.contains("tritonrs_mqtt_messages_total{result=\"duplicate\"} 0\n"));
    assert!(s.contains("tritonrs_mqtt_request_duration_seconds_bucket{le=\"0.0025\"} 0\n"));
    assert!(s.contains("tritonrs_mqtt_request_duration_seconds_bucket{le=\"0.005\"} 1\n"));
    assert!(s.contains("tritonrs_mqtt_request_duration_seconds_bucket{le=\"0.25\"} 2\n"));
    assert!(s.contains("tritonrs_mqtt_request_duration_seconds_bucket{le=\"10\"} 2\n"));
    assert!(s.contains("tritonrs_mqtt_request_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
    assert!(s.contains("tritonrs_mqtt_request_duration_seconds_count 3\n"));
}
