//! The bridge's Prometheus metrics: connection state, messages by result and request durations.

use crate::metrics_text::names::{MQTT_CONNECTED, MQTT_DURATION, MQTT_MESSAGES};
use crate::metrics_text::{sample, SecondsHistogram};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How a request message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Error,
    Expired,
    Rejected,
    Duplicate,
}

impl Outcome {
    pub const ALL: [Outcome; 5] =
        [Outcome::Ok, Outcome::Error, Outcome::Expired, Outcome::Rejected, Outcome::Duplicate];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Expired => "expired",
            Outcome::Rejected => "rejected",
            Outcome::Duplicate => "duplicate",
        }
    }
}

/// Shared between the bridge (writer) and the metrics endpoint (reader).
#[derive(Default)]
pub struct MqttMetrics {
    connected: AtomicBool,
    messages: [AtomicU64; 5],
    duration: SecondsHistogram,
}

impl MqttMetrics {
    pub fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::Relaxed);
    }

    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    pub fn count(&self, o: Outcome) {
        self.messages[o as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn messages(&self, o: Outcome) -> u64 {
        self.messages[o as usize].load(Ordering::Relaxed)
    }

    /// Records a request's time from arrival to its result being handed to the broker.
    pub fn observe(&self, secs: f64) {
        self.duration.observe(secs);
    }

    /// Appends the families in the text exposition format.
    pub fn render(&self, out: &mut String) {
        MQTT_CONNECTED.header(out);
        sample(out, MQTT_CONNECTED.name, &[], u8::from(self.is_connected()));
        MQTT_MESSAGES.header(out);
        for o in Outcome::ALL {
            sample(out, MQTT_MESSAGES.name, &[("result", o.as_str())], self.messages(o));
        }
        MQTT_DURATION.header(out);
        self.duration.render(out, MQTT_DURATION.name, &[]);
    }
}

#[cfg(test)]
mod tests {
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
}
