//! `tritonrs_frigate_zmq_*`: requests by kind, errors by reason, and the time a detection takes from
//! its arrival to its reply.

use crate::metrics_text::{header, sample, Kind as MetricKind, SecondsHistogram};
use std::sync::atomic::{AtomicU64, Ordering};

pub const REQUESTS: &str = "tritonrs_frigate_zmq_requests_total";
pub const ERRORS: &str = "tritonrs_frigate_zmq_errors_total";
pub const DURATION: &str = "tritonrs_frigate_zmq_request_duration_seconds";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Detect,
    ModelCheck,
    ModelPush,
}

const KINDS: [(Kind, &str); 3] =
    [(Kind::Detect, "detect"), (Kind::ModelCheck, "model_request"), (Kind::ModelPush, "model_data")];

/// Every reason an error is counted under (a zero reply, or a refused push).
pub const REASONS: [&str; 7] = ["header", "dtype", "shape", "short_tensor", "model", "infer", "model_push_refused"];

#[derive(Default)]
pub struct FrigateMetrics {
    requests: [AtomicU64; 3],
    errors: [AtomicU64; REASONS.len()],
    duration: SecondsHistogram,
}

impl FrigateMetrics {
    pub fn request(&self, kind: Kind) {
        self.requests[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn error(&self, reason: &str) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn observe(&self, secs: f64) {
        self.duration.observe(secs);
    }

    pub fn render(&self, out: &mut String) {
        header(out, REQUESTS, "Requests from Frigate's ZMQ detector, by kind", MetricKind::Counter);
        for (k, name) in KINDS {
            sample(out, REQUESTS, &[("kind", name)], self.requests[k as usize].load(Ordering::Relaxed));
        }
        header(
            out,
            ERRORS,
            "Frigate ZMQ requests answered with nothing found because they failed, by reason",
            MetricKind::Counter,
        );
        for (i, r) in REASONS.iter().enumerate() {
            sample(out, ERRORS, &[("reason", r)], self.errors[i].load(Ordering::Relaxed));
        }
        header(out, DURATION, "Time from a Frigate ZMQ detection's arrival to its reply", MetricKind::Histogram);
        self.duration.render(out, DURATION, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind_and_reason() {
        let m = FrigateMetrics::default();
        m.request(Kind::Detect);
        m.request(Kind::Detect);
        m.request(Kind::ModelCheck);
        m.error("short_tensor");
        m.error("not-a-reason");
        m.observe(0.004);
        let mut s = String::new();
        m.render(&mut s);
        assert!(s.contains("tritonrs_frigate_zmq_requests_total{kind=\"detect\"} 2\n"), "{s}");
        assert!(s.contains("tritonrs_frigate_zmq_requests_total{kind=\"model_data\"} 0\n"));
        assert!(s.contains("tritonrs_frigate_zmq_errors_total{reason=\"short_tensor\"} 1\n"));
        assert!(s.contains("tritonrs_frigate_zmq_request_duration_seconds_count 1\n"));
    }
}
