//! Schedulers: how queued requests reach a model's instances. Each scheduler is a queue policy (a pure
//! state struct) connected to one runtime ([`workers`]: instance threads, heartbeat, running count,
//! statistics and replies; [`timer`]: the batchers' timer thread and its alarm; [`queue`]: what hands
//! work to instance threads, which park at once when it is empty).
//!
//! - [`DefaultScheduler`]: one bounded FIFO, each request executed alone.
//! - [`dynamic::DynamicBatcher`]: `dynamic_batching`, merging queued requests into batches.
//! - [`sequence::SequenceBatcher`]: `sequence_batching`, for stateful models.
//! - [`ensemble::EnsembleScheduler`]: `ensemble_scheduling`, a pipeline of other models (no instances;
//!   the model lifecycle starts it once the composing models serve).

pub mod batch;
mod default;
mod driver;
pub mod dynamic;
pub mod ensemble;
pub mod queue;
pub mod sequence;
mod timer;
pub mod workers;

pub use default::DefaultScheduler;

use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::{ExecRequest, ExecResult, ModelInstance, SequenceId};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::ModelConfig;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Queue bound for models whose configuration sets none.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 4096;

/// What every scheduler offers the core: queue a job, and tell when its instance threads are gone.
pub trait Scheduler: Send + Sync {
    /// Queues a job, or rejects it at once (queue full, model unloading). An accepted job is always
    /// answered through its `reply`, with a result or an error.
    fn submit(&self, job: Job) -> Result<()>;
    /// Instance threads still running; reaches 0 once the scheduler is dropped and its queue drained.
    fn running(&self) -> Arc<AtomicUsize>;
}

/// Scheduling parameters a request may carry (Triton's schedule-policy and sequence extensions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestControl {
    /// `priority`: 0 means the model's default level; 1 is the highest.
    pub priority: u32,
    /// `timeout` in the request, in microseconds; honoured where the queue policy allows overrides.
    pub timeout: Option<Duration>,
    /// `sequence_id`; `None` when absent, 0 or empty (Triton's "no correlation id").
    pub sequence_id: Option<SequenceId>,
    /// `sequence_start`: the request opens its sequence.
    pub sequence_start: bool,
    /// `sequence_end`: the request closes its sequence.
    pub sequence_end: bool,
}

/// One request waiting for an instance.
pub struct Job {
    /// What to execute.
    pub exec: ExecRequest,
    /// Inferences in this request (the batch dimension, 1 for non-batching models).
    pub batch_size: u32,
    /// When the job entered the queue, for queue-time statistics.
    pub enqueued: Instant,
    /// Priority, timeout and sequence fields of the request.
    pub control: RequestControl,
    /// Where the result goes; a dropped receiver (client gone) is not an error.
    pub reply: Reply,
    /// The request's span, `request` with its model, version and id (`#[instrument]` on the core's
    /// `infer_on`, or [`request_span`] for streams): the instance thread enters it around the backend
    /// call, so a log line written meanwhile names the request.
    pub span: tracing::Span,
}

/// Replies sent by the schedulers (instance threads, mostly) that their requests have not taken yet:
/// each is a task about to run on an I/O thread, to answer its client. A front-end that writes to a
/// connection shared by many requests (gRPC's HTTP/2) may hold a write back while this is above zero,
/// so that the answers arriving together leave in one write (see `frontend::conn`).
static REPLIES_ON_THE_WAY: AtomicUsize = AtomicUsize::new(0);

/// How many replies are on their way (see [`REPLIES_ON_THE_WAY`]).
pub fn replies_on_the_way() -> usize {
    REPLIES_ON_THE_WAY.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one reply on its way, until dropped: when its request takes it, or with the channel when the
/// request is gone.
#[derive(Debug)]
struct OnTheWay;

impl OnTheWay {
    fn new() -> Self {
        REPLIES_ON_THE_WAY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OnTheWay
    }
}

impl Drop for OnTheWay {
    fn drop(&mut self) {
        REPLIES_ON_THE_WAY.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The sending side of a job's reply: a oneshot channel whose message is counted on its way.
#[derive(Debug)]
pub struct Reply(oneshot::Sender<(Result<ExecResult>, OnTheWay)>);

/// The receiving side of a job's reply: the job's result, or an error when the scheduler dropped the
/// job unanswered.
#[derive(Debug)]
pub struct Answer(oneshot::Receiver<(Result<ExecResult>, OnTheWay)>);

impl Reply {
    /// A reply and the answer it goes to.
    pub fn channel() -> (Reply, Answer) {
        let (tx, rx) = oneshot::channel();
        (Reply(tx), Answer(rx))
    }

    /// Sends the result; it comes back as the error when the request is gone (uncounted again).
    #[allow(clippy::result_large_err)]
    pub fn send(self, result: Result<ExecResult>) -> std::result::Result<(), Result<ExecResult>> {
        self.0.send((result, OnTheWay::new())).map_err(|(r, _)| r)
    }
}

impl Answer {
    /// Waits for the answer on a thread outside the runtime (tests).
    pub fn blocking_recv(self) -> std::result::Result<Result<ExecResult>, oneshot::error::RecvError> {
        self.0.blocking_recv().map(|(r, _)| r)
    }
}

impl std::future::Future for Answer {
    type Output = std::result::Result<Result<ExecResult>, oneshot::error::RecvError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(|r| r.map(|(result, _taken)| result))
    }
}

/// The span of one request to a model version, for requests that do not come through the instrumented
/// `infer_on` (streams); carried in its [`Job`]. INFO, the default log level, so that log lines show its
/// fields; when the log level is above INFO it is disabled and costs next to nothing.
pub fn request_span(model: &str, version: i64, id: &str) -> tracing::Span {
    tracing::info_span!("request", model = %model, version, id = %id)
}

/// The span an execution of `jobs` runs in: a single request's own span, or for several a `batch` span
/// that names the model, the batch size (the requests' inferences) and the requests' ids (joined only
/// when the span is enabled). Takes an iterator so a batch costs no allocation while spans are off.
pub(crate) fn execution_span<'a>(model: &str, jobs: impl Iterator<Item = &'a Job> + Clone) -> tracing::Span {
    let mut first_two = jobs.clone();
    if let (Some(one), None) = (first_two.next(), first_two.next()) {
        return one.span.clone();
    }
    let size: u32 = jobs.clone().map(|j| j.batch_size).sum();
    let span = tracing::info_span!("batch", model = %model, size, ids = tracing::field::Empty);
    if !span.is_disabled() {
        let ids: Vec<&str> = jobs.map(|j| j.exec.meta.id.as_str()).collect();
        span.record("ids", tracing::field::display(ids.join(",")));
    }
    span
}

/// Starts the scheduler that a model's configuration asks for, over already created instances.
/// `model_dir` is the model's folder (the sequence batcher reads `initial_state/` files from it).
pub fn start(
    name: &str,
    cfg: &ModelConfig,
    model_dir: &Path,
    instances: Vec<(String, Box<dyn ModelInstance>)>,
    stats: Arc<ModelStats>,
) -> Result<Box<dyn Scheduler>> {
    match &cfg.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(d)) if cfg.max_batch_size > 0 => {
            Ok(Box::new(dynamic::DynamicBatcher::start(name, cfg, d, instances, stats)?))
        }
        Some(SchedulingChoice::DynamicBatching(d)) => {
            // A model that cannot batch still gets the queue policy's bound, as in Triton.
            let queue = d
                .default_queue_policy
                .as_ref()
                .map(|p| p.max_queue_size)
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .unwrap_or(DEFAULT_MAX_QUEUE_SIZE);
            let spec = alone_spec(cfg, &instances);
            Ok(Box::new(DefaultScheduler::start(name, instances, queue, spec, stats)?))
        }
        Some(SchedulingChoice::SequenceBatching(s)) => {
            let policy = sequence::policy::SequencePolicy::from_config(cfg, s, model_dir)?;
            Ok(Box::new(sequence::SequenceBatcher::start(name, cfg, policy, instances, stats)?))
        }
        Some(SchedulingChoice::EnsembleScheduling(_)) => Err(Error::internal(format!(
            "model '{name}': an ensemble has no instances to schedule; the model lifecycle starts its \
             EnsembleScheduler instead; this is a bug"
        ))),
        None => {
            let spec = alone_spec(cfg, &instances);
            Ok(Box::new(DefaultScheduler::start(name, instances, DEFAULT_MAX_QUEUE_SIZE, spec, stats)?))
        }
    }
}

/// What the default scheduler needs to run a request as a batch of one: the model's ragged inputs, batch
/// inputs and scattered outputs, unless it has none or its instances take request lists (Python models
/// and backend libraries see each request as it came, as in Triton, where such backends compute their
/// batch inputs themselves).
fn alone_spec(cfg: &ModelConfig, instances: &[(String, Box<dyn ModelInstance>)]) -> Option<Arc<batch::BatchSpec>> {
    let spec = batch::BatchSpec::from_config(cfg);
    let lists = !instances.is_empty() && instances.iter().all(|(_, i)| i.takes_request_lists());
    (!spec.is_plain() && !lists).then(|| Arc::new(spec))
}

/// Runs one execution on an instance, turning a backend panic into an error.
pub(crate) fn execute(instance: &mut dyn ModelInstance, exec: &ExecRequest) -> Result<ExecResult> {
    guarded(|| instance.execute(exec))
}

/// Runs a backend call, turning a panic into an error.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(Error::internal("the backend panicked while executing the request; this is a bug")))
}

/// Runs a list of requests on an instance that takes lists, turning a backend panic into an error for
/// each of them.
pub(crate) fn execute_list(instance: &mut dyn ModelInstance, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| instance.execute_list(reqs))).unwrap_or_else(|_| {
        let e = Error::internal("the backend panicked while executing the requests; this is a bug");
        reqs.iter().map(|_| Err(e.clone())).collect()
    })
}
