//! The scheduler runtime: what every scheduler runs on, written once. It owns
//! - the threads: one per instance (named `inst-<instance>`) and a batcher's timer thread, each with a
//!   `core::heartbeat` mark for the systemd watchdog, and the running count the model lifecycle waits
//!   on before a model counts as unloaded;
//! - the instance thread's loop over the batches a batcher hands it ([`Work`], [`serve`]);
//! - statistics and replies: what a finished execution and each request in it add to the model's
//!   statistics, and the trace's COMPUTE_START.
//!
//! The schedulers keep their queue policies (pure state, unit-tested without threads) and the few lines
//! that connect a policy to this runtime. The rate limiter is not here: it wraps each instance once, in
//! the model lifecycle, so every scheduler's executions hold their resources the same way.

use super::queue::Receiver;
use super::Job;
use crate::core::heartbeat::{self, Beat};
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::{ExecResult, ExecTimings, ModelInstance};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The threads of one scheduler and their running count.
pub struct Workers {
    model: String,
    /// Threads still running; reaches 0 once every thread has exited (instances dropped first).
    running: Arc<AtomicUsize>,
}

impl Workers {
    pub fn new(model: &str) -> Workers {
        Workers { model: model.to_string(), running: Arc::new(AtomicUsize::new(0)) }
    }

    /// The running count, for [`super::Scheduler::running`].
    pub fn running(&self) -> Arc<AtomicUsize> {
        self.running.clone()
    }

    /// Starts the thread of instance `name`: `body` runs the instance until its queue closes; then the
    /// instance is dropped, running the backend's finalizer, before the thread counts as gone.
    pub fn instance(
        &self,
        name: &str,
        mut instance: Box<dyn ModelInstance>,
        body: impl FnOnce(&mut dyn ModelInstance, &Beat) + Send + 'static,
    ) -> Result<()> {
        let thread = format!("inst-{name}");
        let instance_name = name.to_string();
        self.spawn(thread.clone(), "a thread for an instance", move || {
            let beat = heartbeat::register(thread);
            instance.thread_started();
            // After the backend's own start (threads it starts there keep the usual policy): an I/O
            // worker that hands this thread a request goes on with its other requests first.
            if let Err(e) = crate::platform::affinity::batch_current_thread() {
                tracing::debug!(instance = %instance_name, "{}", e.message);
            }
            body(&mut *instance, &beat);
            drop(instance);
            tracing::debug!(instance = %instance_name, "Instance thread exited because its model was unloaded.");
        })
    }

    /// Starts a batcher's timer thread, named `thread` (its heartbeat mark is taken by `timer::run`).
    pub fn timer(&self, thread: String, body: impl FnOnce() + Send + 'static) -> Result<()> {
        self.spawn(thread, "the batcher thread", body)
    }

    fn spawn(&self, thread: String, what: &str, body: impl FnOnce() + Send + 'static) -> Result<()> {
        let running = self.running.clone();
        self.running.fetch_add(1, Ordering::SeqCst);
        std::thread::Builder::new()
            .name(thread)
            .spawn(move || {
                body();
                running.fetch_sub(1, Ordering::SeqCst);
            })
            .map(drop)
            .map_err(|e| {
                self.running.fetch_sub(1, Ordering::SeqCst);
                Error::internal(format!("cannot start {what} of model '{}': {e}", self.model))
            })
    }
}

/// What a batcher hands an instance thread.
pub enum Work<B> {
    /// Execute this batch.
    Batch(B),
    /// The batcher is gone: return, so the instance is dropped.
    Stop,
}

/// An instance thread's loop under a batcher: runs each batch, working on the heartbeat meanwhile,
/// until the batcher says stop (or is gone).
pub fn serve<B>(rx: &Receiver<Work<B>>, beat: &Beat, mut run: impl FnMut(B)) {
    while let Some(Work::Batch(batch)) = rx.recv() {
        beat.working();
        run(batch);
        beat.idle();
    }
}

/// Records one execution of `inferences` requests' worth of work with the compute times it reported.
pub fn record_execution(stats: &ModelStats, inferences: u32, t: &ExecTimings) {
    stats.record_execution(inferences, t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns);
}

/// Records a request's queue time (from `enqueued` until `start`, when an instance or the ensemble took
/// it) and its compute times.
pub fn record_request(stats: &ModelStats, enqueued: Instant, start: Instant, t: &ExecTimings) {
    let queue_ns = start.saturating_duration_since(enqueued).as_nanos() as u64 + t.waited_ns;
    stats.record_request_compute(queue_ns, t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns);
}

/// A request's part of a finished execution: stamps the trace's COMPUTE_START (`start`, when the
/// instance took the work) and records the request. A failed request records nothing.
pub fn finish_request(stats: &ModelStats, enqueued: Instant, start: Instant, result: &mut Result<ExecResult>) {
    if let Ok(r) = result {
        r.timings.started = Some(start);
        record_request(stats, enqueued, start, &r.timings);
    }
}

/// Answers a job executed alone: one execution of its batch size, its request statistics, its reply.
/// A dropped receiver (the client went away) is not an error.
pub fn answer_alone(stats: &ModelStats, job: Job, start: Instant, mut result: Result<ExecResult>) {
    if let Ok(r) = &result {
        record_execution(stats, job.batch_size, &r.timings);
    }
    finish_request(stats, job.enqueued, start, &mut result);
    let _ = job.reply.send(result);
}

/// The answer to a request still queued when its model unloaded (only requests whose clients went
/// away are left: a request in flight keeps its model alive).
pub fn unloaded(model: &str) -> Error {
    Error::unavailable(format!("model '{model}' was unloaded before the request ran"))
}

#[cfg(test)]
mod tests;
