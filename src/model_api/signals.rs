//! What a request's client and its model signal to the server while the request is queued or runs:
//! cancellation (the client went away, or an in-process caller cancelled it) and rescheduling (the
//! model asks to run the same request again, for iterative sequences).
//!
//! The core owns a request's [`Signals`]: it trips cancellation when the future or stream that waits
//! for the request is dropped, so a front-end only has to drop it; schedulers register hooks that take
//! a queued request out of their queue; backends ask [`Signals::is_cancelled`] (Python's
//! `is_cancelled()`, `TRITONBACKEND_RequestIsCancelled`) and set [`Signals::reschedule`].

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Something to run once when a request is cancelled.
type Hook = Box<dyn FnOnce() + Send>;

/// A request's signals, shared by every copy of its metadata; cloning shares them.
#[derive(Clone, Default)]
pub struct Signals(Arc<State>);

#[derive(Default)]
struct State {
    /// Set once, never cleared.
    cancelled: AtomicBool,
    /// The model released the request with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` in its last
    /// execution; the scheduler takes it (and clears it) when that execution ends.
    reschedule: AtomicBool,
    /// What runs when the request is cancelled (take it out of a queue, wake a waiter), by key.
    hooks: Mutex<Vec<(u64, Hook)>>,
    /// The next hook key.
    next_key: AtomicU64,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals")
            .field("cancelled", &self.is_cancelled())
            .field("reschedule", &self.0.reschedule.load(Ordering::Relaxed))
            .finish()
    }
}

impl Signals {
    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// Cancels the request: later [`Signals::is_cancelled`] calls say so, and every registered hook runs
    /// once, here. Cancelling again does nothing.
    pub fn cancel(&self) {
        if self.0.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        let hooks = std::mem::take(&mut *self.0.hooks.lock());
        for (_, hook) in hooks {
            hook();
        }
    }

    /// Registers `hook` to run once if the request is cancelled, and returns its key for
    /// [`Signals::forget`]; `None` (and `hook` is dropped unrun) when the request is cancelled already.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) -> Option<u64> {
        let mut hooks = self.0.hooks.lock();
        // Checked under the lock: `cancel` sets the flag before it takes the hooks, so a hook added
        // while the flag is clear is always taken.
        if self.is_cancelled() {
            return None;
        }
        let key = self.0.next_key.fetch_add(1, Ordering::Relaxed);
        hooks.push((key, Box::new(hook)));
        Some(key)
    }

    /// Removes a hook that is no longer wanted (the request left the queue it watched).
    pub fn forget(&self, key: u64) {
        self.0.hooks.lock().retain(|(k, _)| *k != key);
    }

    /// Completes once the request is cancelled (at once if it is already).
    pub async fn cancelled(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let Some(key) = self.on_cancel(move || {
            let _ = tx.send(());
        }) else {
            return;
        };
        // Forgotten when this future is dropped before the cancellation came.
        let _forget = Forget(self, key);
        let _ = rx.await;
    }

    /// The model asks for the request to run again (`TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`).
    pub fn reschedule(&self) {
        self.0.reschedule.store(true, Ordering::Release);
    }

    /// Whether the model asked for the request to run again in the execution that just ended; clears
    /// the request for the next execution.
    pub fn take_reschedule(&self) -> bool {
        self.0.reschedule.swap(false, Ordering::AcqRel)
    }
}

/// Forgets a hook when dropped.
struct Forget<'a>(&'a Signals, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

#[cfg(test)]
mod tests;
