//! The timer both batchers share: one thread per batcher sleeps until the state's next deadline (a
//! queue delay ending, a timeout, an idle sequence) and lets the batcher act on it. Each timer thread
//! has a `core::heartbeat` mark, working while the batcher acts.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// The part of a batcher's locked state that the timer thread reads.
#[derive(Debug)]
pub struct Alarm {
    /// When the timer thread should next look at the state.
    pub wake_at: Option<Instant>,
    /// Cleared when the batcher is dropped: what is queued is answered, then every thread exits.
    pub open: bool,
}

impl Alarm {
    pub fn new() -> Self {
        Alarm { wake_at: None, open: true }
    }

    /// Moves the alarm to `wake` when that is sooner; returns whether the sleeping timer thread must be
    /// woken to notice.
    pub fn rearm(&mut self, wake: Option<Instant>) -> bool {
        let sooner = wake.is_some_and(|w| self.wake_at.is_none_or(|cur| w < cur));
        if sooner {
            self.wake_at = wake;
        }
        sooner
    }
}

/// A batcher's state with the alarm its timer thread sleeps on: one lock and one condition variable.
/// Submitters, instance threads and the timer thread all act under the lock, briefly.
pub struct Clocked<S> {
    state: Mutex<Timed<S>>,
    cv: Condvar,
}

/// The locked state: the batcher's own (reached through `Deref`) and the alarm.
pub struct Timed<S> {
    pub alarm: Alarm,
    inner: S,
}

impl<S> std::ops::Deref for Timed<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.inner
    }
}

impl<S> std::ops::DerefMut for Timed<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S> Clocked<S> {
    pub fn new(inner: S) -> Self {
        Clocked { state: Mutex::new(Timed { alarm: Alarm::new(), inner }), cv: Condvar::new() }
    }

    pub fn lock(&self) -> MutexGuard<'_, Timed<S>> {
        self.state.lock()
    }

    /// Locks the state of a batcher that still takes requests, or refuses: the model is unloading.
    pub fn lock_open(&self, model: &str) -> Result<MutexGuard<'_, Timed<S>>> {
        let st = self.state.lock();
        if !st.alarm.open {
            return Err(Error::unavailable(format!("model '{model}' is unloading")));
        }
        Ok(st)
    }

    /// Moves the alarm to `wake` when that is sooner and releases the lock; then wakes the timer thread
    /// if it must notice.
    pub fn rearm(&self, mut st: MutexGuard<'_, Timed<S>>, wake: Option<Instant>) {
        let sooner = st.alarm.rearm(wake);
        drop(st);
        if sooner {
            self.cv.notify_one();
        }
    }

    /// Closes the batcher (it is dropped, or failed to start): the timer thread answers what is queued
    /// and returns.
    pub fn close(&self) {
        self.state.lock().alarm.open = false;
        self.cv.notify_all();
    }

    /// The timer thread's loop, until the batcher closes: sleeps until the alarm (or a notification),
    /// then calls `fire` with the lock and the time. Returns the lock once closed, for the caller to
    /// answer what is left.
    pub fn run(&self, fire: impl Fn(MutexGuard<'_, Timed<S>>, Instant)) -> MutexGuard<'_, Timed<S>> {
        // The systemd watchdog also waits for this thread: a `fire` that never returns is a stall.
        let name = std::thread::current().name().unwrap_or("batch-timer").to_string();
        let beat = crate::core::heartbeat::register(name);
        let mut st = self.state.lock();
        while st.alarm.open {
            match st.alarm.wake_at {
                Some(t) if t > Instant::now() => {
                    self.cv.wait_until(&mut st, t);
                }
                Some(_) => {
                    st.alarm.wake_at = None;
                    beat.working();
                    fire(st, Instant::now());
                    beat.idle();
                    st = self.state.lock();
                }
                None => self.cv.wait(&mut st),
            }
        }
        st
    }
}

#[cfg(test)]
mod tests;
