//! The batchers' driver, written once: the dynamic and the sequence batcher differ in their queue
//! policy ([`Batching`]), not in how a request reaches it. A submitter checks the request, queues it
//! under the batcher's one lock, counts it pending and dispatches; dropping the batcher closes the
//! queue, so the instance and timer threads wind down.

use super::timer::{Clocked, Timed};
use super::workers::Workers;
use super::{Job, Scheduler};
use crate::core::stats::ModelStats;
use crate::error::Result;
use parking_lot::MutexGuard;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What a batcher's shared half (seen by submitters, instance threads and the timer thread) gives the
/// driver.
pub trait Batching: Send + Sync + 'static {
    /// The batcher's queue state, under the lock of its [`Clocked`].
    type State;
    /// The model name (for messages), the queue state and the model version's statistics.
    fn parts(&self) -> (&str, &Clocked<Self::State>, &ModelStats);
    /// Refuses a request before the lock is taken; none by default.
    fn check(&self, _job: &Job) -> Result<()> {
        Ok(())
    }
    /// Queues `job`, or refuses it with the message the client sees.
    fn push(&self, st: &mut Self::State, job: Job, now: Instant) -> Result<()>;
    /// Hands batches to idle instances and re-arms the timer; takes the lock guard so batches are
    /// handed over after the lock is released.
    fn dispatch(&self, st: MutexGuard<'_, Timed<Self::State>>, now: Instant);
}

/// A batcher of one model version: its shared half and its threads.
pub struct Batcher<S: Batching> {
    shared: Arc<S>,
    /// The instance threads and the timer thread.
    workers: Workers,
}

impl<S: Batching> Batcher<S> {
    pub fn new(shared: Arc<S>, workers: Workers) -> Self {
        Batcher { shared, workers }
    }
}

impl<S: Batching> Drop for Batcher<S> {
    fn drop(&mut self) {
        self.shared.parts().1.close();
    }
}

impl<S: Batching> Scheduler for Batcher<S> {
    fn submit(&self, job: Job) -> Result<()> {
        let s = &*self.shared;
        let (model, state, stats) = s.parts();
        let now = Instant::now();
        s.check(&job)?;
        let mut st = state.lock_open(model)?;
        s.push(&mut st, job, now)?;
        stats.pending.fetch_add(1, Ordering::Relaxed);
        s.dispatch(st, now);
        Ok(())
    }

    fn running(&self) -> Arc<AtomicUsize> {
        self.workers.running()
    }
}
