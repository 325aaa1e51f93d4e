//! Schedulers: how queued requests reach a model's instances. Each scheduler is a thin loop over a
//! queue; the instances run on their own OS threads.

mod default;

pub use default::DefaultScheduler;

use crate::backend::{ExecRequest, ExecResult};
use crate::error::Result;
use std::time::Instant;
use tokio::sync::oneshot;

/// One request waiting for an instance.
pub struct Job {
    /// What to execute.
    pub exec: ExecRequest,
    /// Inferences in this request (the batch dimension, 1 for non-batching models).
    pub batch_size: u32,
    /// When the job entered the queue, for queue-time statistics.
    pub enqueued: Instant,
    /// Where the result goes; a dropped receiver (client gone) is not an error.
    pub reply: oneshot::Sender<Result<ExecResult>>,
}
