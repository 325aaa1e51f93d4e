//! Liveness of the threads that run models, for the systemd watchdog: each instance thread has a
//! [`Beat`] that it marks working when it takes or finishes a job and idle when it waits for one. A
//! thread that has been working on the same job for too long (no job finished in that time) is stalled;
//! while one is, the server stops telling systemd it is alive, so a wedged backend gets the service
//! restarted.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// One thread's mark.
#[derive(Debug)]
pub struct Beat {
    name: String,
    /// [`now_ms`] of the last job taken or finished while working; 0 idle.
    since: AtomicU64,
}

/// Milliseconds since the first call in this process, plus one, so that 0 can mean "never" in an
/// atomic timestamp (also used by the front-ends' connection guard).
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

fn beats() -> &'static Mutex<Vec<Weak<Beat>>> {
    static BEATS: OnceLock<Mutex<Vec<Weak<Beat>>>> = OnceLock::new();
    BEATS.get_or_init(Default::default)
}

/// Registers a thread (named for log lines); the mark is forgotten once the returned `Arc` is dropped.
pub fn register(name: impl Into<String>) -> Arc<Beat> {
    let beat = Arc::new(Beat { name: name.into(), since: AtomicU64::new(0) });
    let mut all = beats().lock();
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(&beat));
    beat
}

impl Beat {
    /// A job was taken or finished: working, with progress now.
    pub fn working(&self) {
        self.since.store(now_ms(), Ordering::Relaxed);
    }

    /// Waiting for work.
    pub fn idle(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    /// How long this thread has been working without finishing a job, if it is working.
    pub fn stuck_for(&self) -> Option<Duration> {
        match self.since.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Duration::from_millis(now_ms().saturating_sub(t))),
        }
    }
}

/// The thread that has gone longest without progress, if that is longer than `limit`.
pub fn stalled(limit: Duration) -> Option<(String, Duration)> {
    beats()
        .lock()
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|b| b.stuck_for().filter(|d| *d > limit).map(|d| (b.name.clone(), d)))
        .max_by_key(|(_, d)| *d)
}

#[cfg(test)]
mod tests;
