//! The timer both batchers share: one thread per batcher sleeps until the state's next deadline (a
//! queue delay ending, a timeout, an idle sequence) and lets the batcher act on it. Each timer thread
//! has a `core::heartbeat` mark, working while the batcher acts.

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

/// Runs the timer until the alarm closes: sleeps until `wake_at` (or a notification on `cv`), then
/// calls `fire` with the lock and the time. Returns the lock once the batcher is closed, for the caller
/// to answer what is left.
pub fn run<'a, S>(
    state: &'a Mutex<S>,
    cv: &Condvar,
    alarm: impl Fn(&mut S) -> &mut Alarm,
    fire: impl Fn(MutexGuard<'a, S>, Instant),
) -> MutexGuard<'a, S> {
    // The systemd watchdog also waits for this thread: a `fire` that never returns is a stall.
    let name = std::thread::current().name().unwrap_or("batch-timer").to_string();
    let beat = crate::core::heartbeat::register(name);
    let mut st = state.lock();
    while alarm(&mut st).open {
        match alarm(&mut st).wake_at {
            Some(t) if t > Instant::now() => {
                cv.wait_until(&mut st, t);
            }
            Some(_) => {
                alarm(&mut st).wake_at = None;
                beat.working();
                fire(st, Instant::now());
                beat.idle();
                st = state.lock();
            }
            None => cv.wait(&mut st),
        }
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rearm_only_moves_the_alarm_earlier() {
        let t = Instant::now();
        let mut a = Alarm::new();
        assert!(!a.rearm(None));
        assert!(a.rearm(Some(t + Duration::from_millis(5))));
        assert!(!a.rearm(Some(t + Duration::from_millis(9))), "later: the sleeping timer wakes soon enough");
        assert!(a.rearm(Some(t + Duration::from_millis(1))));
        assert_eq!(a.wake_at, Some(t + Duration::from_millis(1)));
    }

    #[test]
    fn run_fires_when_due_and_returns_once_closed() {
        let state = Mutex::new(Alarm::new());
        let cv = Condvar::new();
        state.lock().wake_at = Some(Instant::now());
        let fired = std::cell::Cell::new(0);
        let st = run(
            &state,
            &cv,
            |a| a,
            |mut st, _| {
                fired.set(fired.get() + 1);
                st.open = false; // the batcher closes while the timer acts
            },
        );
        assert!(!st.open && st.wake_at.is_none());
        assert_eq!(fired.get(), 1);
    }
}
