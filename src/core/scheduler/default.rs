//! The default scheduler: one bounded queue per model version, drained by every instance thread. The
//! bound is the model's pending-request count, not the queue's: the queue (`queue.rs`, where an idle
//! instance thread parks at once instead of spinning and yielding) grows as requests queue, by 16
//! bytes a job, and keeps its largest size (64 KiB at the default 4,096 jobs), where a bounded channel
//! would reserve every slot up front.
//!
//! A queued job sits in a [`Queued`] cell: a cancelled request (its client went away) is taken out of
//! its cell at once, answered and uncounted, so it frees its place in the queue and its tensors without
//! waiting for an instance; the instance thread skips the empty cell.

use super::batch::{self, BatchSpec};
use super::queue::{queue, Receiver, Sender};
use super::workers::{answer_alone, Workers};
use super::{execute, guarded, Job, Scheduler};
use crate::core::heartbeat::Beat;
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::{ExecResult, ModelInstance};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Feeds a model version's instances from a bounded queue. Dropping it (when the last request holding
/// its model version finishes) closes the queue; the instance threads finish every job already queued,
/// then drop their instances and exit.
pub struct DefaultScheduler {
    /// The queue's sending side.
    tx: Sender<Queued>,
    /// For error messages.
    model: Arc<str>,
    /// The queue bound, for the "queue full" message.
    capacity: usize,
    /// The instance threads.
    workers: Workers,
    /// Where the queue keeps its pending-request count.
    stats: Arc<ModelStats>,
}

impl DefaultScheduler {
    /// Starts one thread per instance, all pulling from one queue of `capacity` jobs. With `spec`, each
    /// request runs as a batch of one: ragged inputs flattened, batch inputs added, outputs scattered.
    pub fn start(
        model: &str,
        instances: Vec<(String, Box<dyn ModelInstance>)>,
        capacity: usize,
        spec: Option<Arc<BatchSpec>>,
        stats: Arc<ModelStats>,
    ) -> Result<Self> {
        let (tx, rx) = queue::<Queued>();
        let workers = Workers::new(model);
        let free = Arc::new(AtomicUsize::new(0));
        for (name, instance) in instances {
            let (rx, stats, free, spec) = (rx.clone(), stats.clone(), free.clone(), spec.clone());
            workers.instance(&name, instance, move |instance, beat| {
                drain(instance, &rx, &stats, beat, &free, spec.as_deref())
            })?;
        }
        Ok(DefaultScheduler { tx, model: model.into(), capacity, workers, stats })
    }
}

impl Scheduler for DefaultScheduler {
    fn running(&self) -> Arc<AtomicUsize> {
        self.workers.running()
    }

    /// Queues a job, or rejects it at once when the queue is full or closed. The job counts as pending
    /// from here until an instance picks it up.
    fn submit(&self, job: Job) -> Result<()> {
        // Counted before sending: an instance may pick the job up before `send` returns. The count
        // before this job is the queue's length, so it is also the bound.
        let queued = self.stats.pending.fetch_add(1, Ordering::Relaxed);
        if queued >= self.capacity as i64 {
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::unavailable(format!(
                "exceeds maximum queue size: model '{}' already has {} requests queued",
                self.model, self.capacity
            )));
        }
        let Some(queued) = Queued::new(job, &self.model, &self.stats) else {
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(cancelled_error(&self.model));
        };
        if self.tx.send(queued).is_err() {
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::unavailable(format!("model '{}' has no running instances", self.model)));
        }
        Ok(())
    }
}

/// The answer to a request cancelled while it waited in a queue.
pub(super) fn cancelled_error(model: &str) -> Error {
    Error::cancelled(format!("the request to model '{model}' was cancelled before it ran"))
}

/// A job in the queue, in a cell its cancellation can empty: the hook takes the job out (once), answers
/// it and uncounts it, so whichever of the hook and an instance thread comes first has it.
pub(super) struct Queued {
    /// The job, until an instance or the cancellation takes it.
    cell: Arc<Mutex<Option<Job>>>,
    /// The cancellation hook, forgotten when an instance takes the job.
    hook: u64,
}

impl Queued {
    /// Puts `job` in a cell and registers its cancellation hook; `None` when the request is cancelled
    /// already (it must not be queued).
    fn new(job: Job, model: &Arc<str>, stats: &Arc<ModelStats>) -> Option<Queued> {
        let signals = job.exec.meta.signals.clone();
        let cell = Arc::new(Mutex::new(Some(job)));
        // Weak: the job (and through its metadata, this hook) lives in the cell.
        let (weak, model, stats) = (Arc::downgrade(&cell), model.clone(), stats.clone());
        let hook = signals.on_cancel(move || {
            let job = weak.upgrade().and_then(|cell| cell.lock().take());
            if let Some(job) = job {
                stats.pending.fetch_sub(1, Ordering::Relaxed);
                let _ = job.reply.send(Err(cancelled_error(&model)));
            }
        })?;
        Some(Queued { cell, hook })
    }

    /// The job, unless its cancellation took it first.
    fn take(self) -> Option<Job> {
        let job = self.cell.lock().take()?;
        job.exec.meta.signals.forget(self.hook);
        Some(job)
    }
}

/// How many requests an instance that pipelines may have sent and not finished. At 8 (from 2), a
/// Python stub under eight concurrent clients reads several requests a wake-up and the instance thread
/// reads several answers: `add_sub` at gRPC c8 with the server on one core, 1.9 context switches a
/// request against 1.3, and 11% less CPU (medians of six alternating pairs). The instance bounds the
/// bytes it sends ahead ([`ModelInstance::begin`] says "not now").
const PIPELINE_DEPTH: usize = 8;

/// An instance thread's loop: runs jobs until the queue closes. With an instance that pipelines, the
/// next queued job is sent before the previous one is finished, so the instance's process goes from one
/// request to the next without waiting for this thread; a job is only taken early when one is already
/// queued and no other instance of the model is free (`free` counts the instance threads with nothing
/// in flight; a thread counts itself free before it answers its last job, since that answer is what
/// brings the client's next request), so a job never queues behind a busy instance while another one
/// is idle.
fn drain(
    instance: &mut dyn ModelInstance,
    rx: &Receiver<Queued>,
    stats: &ModelStats,
    beat: &Beat,
    free: &AtomicUsize,
    spec: Option<&BatchSpec>,
) {
    let mut sent: VecDeque<(Job, Instant, u64)> = VecDeque::new();
    free.fetch_add(1, Ordering::SeqCst);
    loop {
        let next = if sent.is_empty() {
            beat.idle();
            match rx.recv() {
                Some(queued) => Some(queued),
                None => return,
            }
        } else if sent.len() < PIPELINE_DEPTH && free.load(Ordering::SeqCst) == 0 {
            rx.try_recv()
        } else {
            None
        };
        let job = match next.map(Queued::take) {
            Some(Some(job)) => job,
            // Cancelled while it waited: answered and uncounted already.
            Some(None) => continue,
            None => {
                finish_oldest(instance, &mut sent, stats, Some(free));
                beat.working();
                continue;
            }
        };
        beat.working();
        if sent.is_empty() {
            free.fetch_sub(1, Ordering::SeqCst);
        }
        stats.pending.fetch_sub(1, Ordering::Relaxed);
        // "Not now" (the instance has enough sent ahead): finish the oldest and ask again, until it takes
        // the job or nothing is left in flight ("never": the job runs on its own). The job's queue time
        // runs until the call that takes it.
        let (start, begun) = loop {
            let start = Instant::now();
            let begun = job.span.in_scope(|| guarded(|| instance.begin(&job.exec).transpose()));
            if !matches!(begun, Ok(None)) || !finish_oldest(instance, &mut sent, stats, None) {
                break (start, begun);
            }
        };
        match begun {
            Ok(Some(ticket)) => sent.push_back((job, start, ticket)),
            Err(e) => {
                if sent.is_empty() {
                    free.fetch_add(1, Ordering::SeqCst);
                }
                answer_alone(stats, job, start, Err(e))
            }
            Ok(None) => {
                // Not pipelined: what was sent has finished (above), and this job runs on its own.
                let result = job.span.in_scope(|| execute_alone(instance, &job, spec));
                free.fetch_add(1, Ordering::SeqCst);
                answer_alone(stats, job, start, result);
            }
        }
    }
}

/// Runs one job on its own; with a spec, as a batch of one.
fn execute_alone(instance: &mut dyn ModelInstance, job: &Job, spec: Option<&BatchSpec>) -> Result<ExecResult> {
    let Some(spec) = spec else { return execute(instance, &job.exec) };
    let one = [&job.exec];
    let merged = batch::merge(&one, spec)?;
    batch::split(execute(instance, &merged)?, &one, &[job.batch_size], spec)?
        .pop()
        .ok_or_else(|| Error::internal("a batch of one request gave no result; this is a bug"))
}

/// Finishes and answers the oldest job sent ahead; false when there is none. With `free`, a thread
/// left with nothing in flight counts itself free before answering.
fn finish_oldest(
    instance: &mut dyn ModelInstance,
    sent: &mut VecDeque<(Job, Instant, u64)>,
    stats: &ModelStats,
    free: Option<&AtomicUsize>,
) -> bool {
    let Some((job, start, ticket)) = sent.pop_front() else { return false };
    let result = job.span.in_scope(|| guarded(|| instance.finish(ticket, &job.exec)));
    if let (true, Some(free)) = (sent.is_empty(), free) {
        free.fetch_add(1, Ordering::SeqCst);
    }
    answer_alone(stats, job, start, result);
    true
}

#[cfg(test)]
mod tests;
