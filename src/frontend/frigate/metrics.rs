//! `tritonrs_frigate_zmq_*`: requests by kind, errors by reason, the peers connected, and the time a
//! detection takes from its arrival to its reply.

use crate::metrics_text::names::{FRIGATE_DURATION, FRIGATE_ERRORS, FRIGATE_PEERS, FRIGATE_REQUESTS};
use crate::metrics_text::{sample, SecondsHistogram};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Detect,
    ModelCheck,
    ModelPush,
}

const KINDS: [(Kind, &str); 3] =
    [(Kind::Detect, "detect"), (Kind::ModelCheck, "model_request"), (Kind::ModelPush, "model_data")];

/// Every reason an error is counted under: a zero reply, a refused push, a connection closed for a
/// frame past the size limit (`too_large`), a reply dropped because its peer was not reading
/// (`reply_dropped`).
pub const REASONS: [&str; 9] =
    ["header", "dtype", "shape", "short_tensor", "model", "infer", "model_push_refused", "too_large", "reply_dropped"];

#[derive(Default)]
pub struct FrigateMetrics {
    requests: [AtomicU64; 3],
    errors: [AtomicU64; REASONS.len()],
    duration: SecondsHistogram,
    peers: AtomicU64,
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
        FRIGATE_REQUESTS.header(out);
        for (k, name) in KINDS {
            sample(out, FRIGATE_REQUESTS.name, &[("kind", name)], self.requests[k as usize].load(Ordering::Relaxed));
        }
        FRIGATE_ERRORS.header(out);
        for (i, r) in REASONS.iter().enumerate() {
            sample(out, FRIGATE_ERRORS.name, &[("reason", r)], self.errors[i].load(Ordering::Relaxed));
        }
        FRIGATE_PEERS.header(out);
        sample(out, FRIGATE_PEERS.name, &[], self.peers.load(Ordering::Relaxed));
        FRIGATE_DURATION.header(out);
        self.duration.render(out, FRIGATE_DURATION.name, &[]);
    }
}

impl super::router::Events for FrigateMetrics {
    fn too_large(&self) {
        self.error("too_large");
    }

    fn reply_dropped(&self) {
        self.error("reply_dropped");
    }

    fn peers(&self, connected: usize) {
        self.peers.store(connected as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
