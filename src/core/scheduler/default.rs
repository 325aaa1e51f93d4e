//! The default scheduler: one bounded queue per model version, drained by every instance thread.

use super::{execute, guarded, Job, Scheduler};
use crate::core::heartbeat::Beat;
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::{ExecResult, ModelInstance};
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Feeds a model version's instances from a bounded queue. Dropping it (when the last request holding
/// its model version finishes) closes the queue; the instance threads finish every job already queued,
/// then drop their instances and exit.
pub struct DefaultScheduler {
    /// The queue's sending side.
    tx: Sender<Job>,
    /// For error messages.
    model: String,
    /// The queue bound, for the "queue full" message.
    capacity: usize,
    /// Instance threads still running; reaches 0 once the queue is closed and drained.
    running: Arc<AtomicUsize>,
    /// Where the queue keeps its pending-request count.
    stats: Arc<ModelStats>,
}

impl DefaultScheduler {
    /// Starts one thread per instance, all pulling from one queue of `capacity` jobs.
    pub fn start(
        model: &str,
        instances: Vec<(String, Box<dyn ModelInstance>)>,
        capacity: usize,
        stats: Arc<ModelStats>,
    ) -> Result<Self> {
        let (tx, rx) = bounded::<Job>(capacity);
        let running = Arc::new(AtomicUsize::new(0));
        for (name, mut instance) in instances {
            let rx = rx.clone();
            let stats = stats.clone();
            let running_thread = running.clone();
            running.fetch_add(1, Ordering::SeqCst);
            std::thread::Builder::new()
                .name(format!("inst-{name}"))
                .spawn(move || {
                    let beat = crate::core::heartbeat::register(format!("inst-{name}"));
                    drain(&mut *instance, &rx, &stats, &beat);
                    // Dropping the instance runs the backend's finalizer before the thread counts as gone.
                    drop(instance);
                    running_thread.fetch_sub(1, Ordering::SeqCst);
                    tracing::debug!(instance = %name, "Instance thread exited because its model was unloaded.");
                })
                .map_err(|e| {
                    running.fetch_sub(1, Ordering::SeqCst);
                    Error::internal(format!("cannot start a thread for instance of model '{model}': {e}"))
                })?;
        }
        Ok(DefaultScheduler { tx, model: model.to_string(), capacity, running, stats })
    }
}

impl Scheduler for DefaultScheduler {
    fn running(&self) -> Arc<AtomicUsize> {
        self.running.clone()
    }

    /// Queues a job, or rejects it at once when the queue is full or closed. The job counts as pending
    /// from here until an instance picks it up.
    fn submit(&self, job: Job) -> Result<()> {
        // Counted before sending: an instance may pick the job up before `try_send` returns.
        self.stats.pending.fetch_add(1, Ordering::Relaxed);
        let result = self.tx.try_send(job);
        if result.is_err() {
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
        }
        match result {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Error::unavailable(format!(
                "exceeds maximum queue size: model '{}' already has {} requests queued",
                self.model, self.capacity
            ))),
            Err(TrySendError::Disconnected(_)) => {
                Err(Error::unavailable(format!("model '{}' has no running instances", self.model)))
            }
        }
    }
}

/// How many requests an instance that pipelines may have sent and not finished.
const PIPELINE_DEPTH: usize = 2;

/// An instance thread's loop: runs jobs until the queue closes. With an instance that pipelines, the
/// next queued job is sent before the previous one is finished, so the instance's process goes from one
/// request to the next without waiting for this thread; a job is only taken early when one is already
/// queued, so nothing waits for a batch that is not there.
fn drain(instance: &mut dyn ModelInstance, rx: &Receiver<Job>, stats: &ModelStats, beat: &Beat) {
    let mut sent: VecDeque<(Job, Instant, u64)> = VecDeque::new();
    loop {
        let next = if sent.is_empty() {
            beat.idle();
            match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        } else if sent.len() < PIPELINE_DEPTH {
            rx.try_recv().ok()
        } else {
            None
        };
        let Some(job) = next else {
            finish_oldest(instance, &mut sent, stats);
            beat.working();
            continue;
        };
        beat.working();
        stats.pending.fetch_sub(1, Ordering::Relaxed);
        let start = Instant::now();
        match guarded(|| instance.begin(&job.exec).transpose()) {
            Ok(Some(ticket)) => sent.push_back((job, start, ticket)),
            Err(e) => reply(job, start, Err(e), stats),
            Ok(None) => {
                // Not pipelined: what was sent finishes first, then this job runs on its own.
                while finish_oldest(instance, &mut sent, stats) {}
                let result = execute(instance, &job.exec);
                reply(job, start, result, stats);
            }
        }
    }
}

/// Finishes and answers the oldest job sent ahead; false when there is none.
fn finish_oldest(
    instance: &mut dyn ModelInstance,
    sent: &mut VecDeque<(Job, Instant, u64)>,
    stats: &ModelStats,
) -> bool {
    let Some((job, start, ticket)) = sent.pop_front() else { return false };
    let result = guarded(|| instance.finish(ticket, &job.exec));
    reply(job, start, result, stats);
    true
}

/// Records a finished job's statistics and answers it.
fn reply(job: Job, start: Instant, mut result: Result<ExecResult>, stats: &ModelStats) {
    let queue_ns = (start - job.enqueued).as_nanos() as u64;
    if let Ok(r) = &mut result {
        // A trace's COMPUTE_START: the moment this instance thread took the job.
        r.timings.started = Some(start);
        let t = r.timings;
        stats.record_execution(job.batch_size, t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns);
        stats.record_request_compute(queue_ns, t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns);
    }
    let _ = job.reply.send(result);
}
