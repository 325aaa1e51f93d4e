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
mod tests;
