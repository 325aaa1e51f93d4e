//! The ensemble scheduler (`platform: "ensemble"`): runs a request through the composing models'
//! steps as their inputs become available, independent steps concurrently, each step through the
//! core's normal inference path so the composing model's own scheduler and statistics apply.
//!
//! An ensemble with a decoupled step is decoupled itself, as in Triton: each response of the decoupled
//! step flows on through the steps after it (they run once per response, in an iteration of their
//! own), and the ensemble streams a response for each iteration whose requested outputs are all there.
//!
//! The data flow and the per-request bookkeeping are the pure [`graph::EnsembleGraph`] and
//! [`graph::Run`]; [`EnsembleScheduler`] is the thin async driver: one task per request that hands
//! ready steps to a [`StepRunner`] and feeds their responses back. An ensemble has no instances.
//! Intermediate tensors move between steps as clones of their buffer handles, never as copies.

pub mod graph;

use super::workers;
use super::{Job, RequestControl, Scheduler};
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::types::{InferRequest, ParamValue, Parameters, RequestedOutput, StreamResponse, Tensor};
use crate::model_api::{DecoupledResponse, ExecResult, ExecTimings, ResponseSender, SequenceId};
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, SelectAll, StreamExt};
use graph::{adapt_shape, EnsembleGraph, Iteration, Run};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Runs one request on a composing model through the server's normal inference path (validation,
/// that model's scheduler, its statistics), returning its outputs and compute times. The server
/// implements it without being owned by it, so loaded models never keep the server alive.
pub trait StepRunner: Send + Sync {
    /// Runs `req`; the error is the composing model's, with its kind.
    fn run(&self, req: InferRequest) -> BoxFuture<'static, Result<ExecResult>>;
    /// Runs `req` on a decoupled composing model: its responses as it sends them.
    fn run_stream(&self, req: InferRequest) -> BoxFuture<'static, Result<BoxStream<'static, Result<StreamResponse>>>>;
}

/// What a step needs to know about its composing model, taken when the ensemble loads (a reload of a
/// composing model reloads the ensemble, so this stays current).
#[derive(Debug, Clone, Default)]
pub struct StepModel {
    /// Whether the composing model batches (`max_batch_size > 0`).
    pub batching: bool,
    /// Configured dims of each input, for the batch/non-batch shape conversion.
    pub input_dims: HashMap<String, Vec<i64>>,
    /// Whether the composing model is decoupled (0..n responses per request).
    pub decoupled: bool,
}

/// Everything a request's task needs, shared by all of them.
struct Shared {
    /// The ensemble's data flow.
    graph: EnsembleGraph,
    /// Per step, its composing model's shape facts.
    models: Vec<StepModel>,
    /// Whether the ensemble itself batches.
    batching: bool,
    /// Each ensemble output's configured dims (`reshape` when set), for the final shape conversion.
    output_dims: HashMap<String, Vec<i64>>,
    /// Runs the steps.
    runner: Arc<dyn StepRunner>,
    /// The ensemble's own statistics.
    stats: Arc<ModelStats>,
    /// The ensemble version (name, version): its steps' requests are made on its behalf, so a BLS
    /// request from a step back to the ensemble is refused rather than deadlocked.
    me: (String, i64),
}

/// Runs ensemble requests. Each accepted job gets a task on the runtime that was current when the
/// ensemble loaded; the job is answered when its outputs are ready or a step fails.
pub struct EnsembleScheduler {
    /// Shared with every request task.
    shared: Arc<Shared>,
    /// Requests accepted and not yet answered; the lifecycle waits for 0 before calling a version gone.
    running: Arc<AtomicUsize>,
    /// Where request tasks run.
    runtime: tokio::runtime::Handle,
}

impl EnsembleScheduler {
    /// Prepares the scheduler of one ensemble version. `models[i]` describes step `i`'s composing model.
    pub fn start(
        cfg: &crate::proto::inference::ModelConfig,
        version: i64,
        graph: EnsembleGraph,
        models: Vec<StepModel>,
        runner: Arc<dyn StepRunner>,
        stats: Arc<ModelStats>,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::internal(format!(
                "ensemble '{}' must be loaded from within the server's runtime; this is a bug",
                cfg.name
            ))
        })?;
        if models.len() != graph.steps().len() {
            return Err(Error::internal(format!(
                "ensemble '{}': {} composing models for {} steps; this is a bug",
                cfg.name,
                models.len(),
                graph.steps().len()
            )));
        }
        let output_dims = cfg
            .output
            .iter()
            .map(|o| (o.name.clone(), o.reshape.as_ref().map(|r| r.shape.clone()).unwrap_or_else(|| o.dims.clone())))
            .collect();
        Ok(EnsembleScheduler {
            shared: Arc::new(Shared {
                graph,
                models,
                batching: cfg.max_batch_size > 0,
                output_dims,
                runner,
                stats,
                me: (cfg.name.clone(), version),
            }),
            running: Arc::new(AtomicUsize::new(0)),
            runtime,
        })
    }
}

impl Scheduler for EnsembleScheduler {
    fn running(&self) -> Arc<AtomicUsize> {
        self.running.clone()
    }

    /// Starts the request at once: an ensemble has no queue of its own (its steps queue at the
    /// composing models).
    fn submit(&self, job: Job) -> Result<()> {
        self.shared.stats.pending.fetch_add(1, Ordering::Relaxed);
        self.running.fetch_add(1, Ordering::SeqCst);
        let shared = self.shared.clone();
        let running = InFlight(self.running.clone());
        // The steps' requests are made in the ensemble request's span, so their own spans nest in it.
        let span = job.span.clone();
        let task = async move {
            // Counted out even if the task dies, or the lifecycle would wait for it forever.
            let _running = running;
            shared.stats.pending.fetch_sub(1, Ordering::Relaxed);
            let started = Instant::now();
            let result = shared.execute(&job).await;
            if let Ok(r) = &result {
                // As Triton reports an ensemble: one execution per request, whose compute times are the
                // sums of its steps' compute times. No COMPUTE_START: the steps have their own.
                workers::record_execution(&shared.stats, job.batch_size, &r.timings);
                workers::record_request(&shared.stats, job.enqueued, started, &r.timings);
            }
            let _ = job.reply.send(result);
        };
        self.runtime.spawn(task.instrument(span));
        Ok(())
    }
}

/// One accepted request in the scheduler's `running` count, for as long as this lives.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The parameters every step request carries: the ensemble request's priority, timeout and sequence
/// fields, as Triton passes them on.
fn step_parameters(c: &RequestControl) -> Parameters {
    let mut p = Parameters::new();
    if c.priority != 0 {
        p.insert("priority".into(), ParamValue::Uint(u64::from(c.priority)));
    }
    if let Some(t) = c.timeout {
        p.insert("timeout".into(), ParamValue::Uint(t.as_micros() as u64));
    }
    match &c.sequence_id {
        Some(SequenceId::U64(v)) => {
            p.insert("sequence_id".into(), ParamValue::Uint(*v));
        }
        Some(SequenceId::Str(s)) => {
            p.insert("sequence_id".into(), ParamValue::String(s.clone()));
        }
        None => {}
    }
    if c.sequence_start {
        p.insert("sequence_start".into(), ParamValue::Bool(true));
    }
    if c.sequence_end {
        p.insert("sequence_end".into(), ParamValue::Bool(true));
    }
    p
}

/// Ensemble tensor in an iteration → its data, and the batch size of the request that made it (0: no
/// batching).
type Tensors = HashMap<(String, Iteration), (Tensor, i64)>;

/// What one response of a step brings back.
struct StepItem {
    /// The response's outputs.
    outputs: Vec<Tensor>,
    /// The step's last response.
    is_final: bool,
    /// Only the final flag (a decoupled model's empty final response): no outputs, not even absent ones.
    empty: bool,
    /// An error response of a decoupled model.
    error: Option<Error>,
    /// The step's compute times (decoupled steps report none).
    timings: ExecTimings,
}

impl StepItem {
    fn from_exec(r: ExecResult) -> StepItem {
        StepItem { outputs: r.outputs, is_final: true, empty: false, error: None, timings: r.timings }
    }

    fn from_stream(r: StreamResponse) -> StepItem {
        StepItem {
            outputs: r.response.outputs,
            is_final: r.is_final,
            empty: r.empty,
            error: r.error,
            timings: ExecTimings::default(),
        }
    }
}

/// One event of a running step: a response, or the error that ended it, or just its end (`item` is
/// `None`). `last` says that the step has finished: nothing follows from it.
struct StepEvent {
    /// The step's index.
    step: usize,
    /// The iteration it runs in.
    it: Iteration,
    /// The batch size it runs with (0 when its model does not batch).
    batch: i64,
    item: Option<Result<StepItem>>,
    last: bool,
}

/// Where the ensemble's responses go.
enum Answer {
    /// A decoupled ensemble's responses go out as they are ready, the last one (or an empty response
    /// after it) final; `bool`: whether the final flag has gone out.
    Stream(ResponseSender, bool),
    /// Any other ensemble answers once, with the scheduler's reply.
    Once(Option<Vec<Tensor>>),
}

/// One request going through the ensemble: the steps running, the tensors they made, and the answer so
/// far.
struct Pass<'a> {
    shared: &'a Shared,
    job: &'a Job,
    run: Run<'a>,
    tensors: Tensors,
    /// The running steps' events, as they come.
    steps: SelectAll<BoxStream<'static, StepEvent>>,
    /// What every step request carries from the ensemble request.
    parameters: Parameters,
    /// The model versions each step request is made for.
    callers: crate::model_api::types::CallChain,
    /// The first step failure (already prefixed); no step starts after it.
    failure: Option<Error>,
    /// The steps' compute times, summed.
    timings: ExecTimings,
    answer: Answer,
}

impl Shared {
    /// Runs one request to completion. Each response of a step provides its outputs (a decoupled step's
    /// each in a new iteration) and starts the steps that have all their inputs in that iteration; an
    /// ensemble response goes out whenever the requested outputs of an iteration are all there, final
    /// when no step is running any more (an empty final response follows otherwise, as in Triton). On
    /// a step failure no further step starts; the steps already running finish (so their models'
    /// statistics stay whole) and the request fails with the first error, prefixed with the ensemble's
    /// name as Triton does, keeping the error's kind (a decoupled ensemble sends it at once). A
    /// cancelled request (its client went away) starts no further step and drops the running ones,
    /// which cancels them in their models.
    async fn execute(&self, job: &Job) -> Result<ExecResult> {
        let name = self.graph.name();
        let mut pass = Pass::new(self, job)?;
        pass.start_ready();
        let cancelled = job.exec.meta.signals.cancelled();
        tokio::pin!(cancelled);
        let gone = || Error::cancelled(format!("in ensemble '{name}', the request was cancelled"));
        loop {
            let event = match &pass.answer {
                Answer::Stream(sender, _) => tokio::select! {
                    // The steps first: once the final response is out, they are all done.
                    biased;
                    e = pass.steps.next() => e,
                    // The client went away: the running steps are dropped, which cancels decoupled ones.
                    () = sender.closed() => return Err(gone()),
                    () = &mut cancelled => return Err(gone()),
                },
                Answer::Once(_) => tokio::select! {
                    biased;
                    e = pass.steps.next() => e,
                    () = &mut cancelled => return Err(gone()),
                },
            };
            let Some(event) = event else { break };
            let produced = pass.on_event(event);
            if pass.failure.is_none() {
                pass.start_ready();
                if let Some(it) = produced {
                    pass.answer_if_ready(it);
                }
            }
        }
        pass.finish()
    }
}

impl<'a> Pass<'a> {
    fn new(shared: &'a Shared, job: &'a Job) -> Result<Pass<'a>> {
        let mut run = Run::new(&shared.graph, &job.exec.outputs)?;
        let tensors = shared.provide_inputs(job, &mut run);
        let mut parameters = job.exec.meta.parameters.clone();
        // As Triton, the steps get the ensemble request's parameters, with its priority, timeout and
        // sequence fields.
        parameters.extend(step_parameters(&job.control));
        // A step waits for nothing the ensemble's own callers do not, plus the ensemble itself.
        let callers = job.exec.meta.callers.iter().cloned().chain([shared.me.clone()]).collect();
        let answer = match &job.exec.responder {
            Some(sender) => Answer::Stream(sender.clone(), false),
            None => Answer::Once(None),
        };
        Ok(Pass {
            shared,
            job,
            run,
            tensors,
            steps: SelectAll::new(),
            parameters,
            callers,
            failure: None,
            timings: ExecTimings::default(),
            answer,
        })
    }

    /// Starts the steps that have all their inputs.
    fn start_ready(&mut self) {
        for (index, it) in self.run.ready_steps() {
            let (req, batch) = self.step_request(index, it);
            self.steps.push(self.shared.step_events(index, it, batch, req));
        }
    }

    /// Takes in one event of a running step; returns the iteration its outputs went to, if any.
    fn on_event(&mut self, event: StepEvent) -> Option<Iteration> {
        if event.last {
            self.run.complete(event.step, event.it);
        }
        let item = match event.item? {
            Ok(item) => item,
            Err(e) => {
                self.fail(e);
                return None;
            }
        };
        let t = &item.timings;
        self.timings.compute_input_ns += t.compute_input_ns;
        self.timings.compute_infer_ns += t.compute_infer_ns;
        self.timings.compute_output_ns += t.compute_output_ns;
        if let Some(e) = item.error {
            self.fail(e);
            return None;
        }
        if self.failure.is_some() || item.empty {
            return None;
        }
        // Each response of a decoupled step flows on through the graph on its own.
        let it = if self.shared.models[event.step].decoupled { self.run.new_iteration() } else { event.it };
        self.store_outputs(event.step, event.batch, item.outputs, it);
        Some(it)
    }

    /// Records the request's first failure; a decoupled ensemble sends it at once, as Triton does.
    fn fail(&mut self, e: Error) {
        if self.failure.is_some() {
            return;
        }
        let e = Error::new(e.kind, format!("in ensemble '{}', {}", self.shared.graph.name(), e.message));
        if let Answer::Stream(sender, _) = &self.answer {
            sender.send(Err(e.clone()));
        }
        self.failure = Some(e);
    }

    /// Answers with the requested outputs of iteration `it` when they are all there.
    fn answer_if_ready(&mut self, it: Iteration) {
        if !self.run.outputs_ready(it) {
            return;
        }
        let outputs = match self.take_outputs(it) {
            Ok(o) => o,
            Err(e) => {
                // Already prefixed; not a step's error.
                self.failure.get_or_insert(e.clone());
                if let Answer::Stream(sender, _) = &self.answer {
                    sender.send(Err(e));
                }
                return;
            }
        };
        let is_final = self.run.running() == 0;
        match &mut self.answer {
            Answer::Stream(sender, sent_final) => {
                sender.send(Ok(DecoupledResponse { outputs, is_final, ..Default::default() }));
                *sent_final |= is_final;
            }
            Answer::Once(slot) => {
                slot.get_or_insert(outputs);
            }
        }
    }

    /// The request's end, once no step runs: the scheduler's reply. A decoupled ensemble that has not
    /// sent its final flag sends it alone; any other ensemble without an answer is deadlocked.
    fn finish(self) -> Result<ExecResult> {
        if let Some(e) = self.failure {
            return Err(e);
        }
        let outputs = match self.answer {
            Answer::Stream(sender, sent_final) => {
                if !sent_final {
                    sender.send(Ok(DecoupledResponse { is_final: true, empty: true, ..Default::default() }));
                }
                Vec::new()
            }
            Answer::Once(Some(outputs)) => outputs,
            Answer::Once(None) => {
                return Err(Error::invalid(format!(
                    "in ensemble '{}', unexpected deadlock, at least one output is not set while no more ensemble \
                     steps can be made",
                    self.shared.graph.name()
                )))
            }
        };
        Ok(ExecResult { outputs, timings: self.timings, parameters: Default::default() })
    }

    /// The request to the composing model of step `index`, ready in iteration `it`, its inputs taken
    /// from that iteration's tensors (and shaped for that model), and the batch size it runs with (0
    /// when that model does not batch). Drops the tensors no other step or output reads any more.
    fn step_request(&mut self, index: usize, it: Iteration) -> (InferRequest, i64) {
        let step = &self.shared.graph.steps()[index];
        let model = &self.shared.models[index];
        let mut inputs = Vec::with_capacity(step.inputs.len());
        for (input, tensor) in &step.inputs {
            if let Some((t, batch)) = self.tensors.get(&(tensor.clone(), it)) {
                // A clone shares the buffer: no tensor data is copied between steps.
                let mut t = t.clone();
                t.name = input.clone();
                if let Some(dims) = model.input_dims.get(input) {
                    t.shape = adapt_shape(dims, model.batching, *batch, &t.shape);
                }
                inputs.push(t);
            }
        }
        for gone in self.run.consume_inputs(index, it) {
            self.tensors.remove(&(gone, it));
        }
        let batch = if model.batching { inputs.first().and_then(|t| t.shape.first()).copied().unwrap_or(1) } else { 0 };
        let req = InferRequest {
            model_name: step.model.clone(),
            model_version: step.version,
            id: self.job.exec.meta.id.clone(),
            inputs,
            outputs: step
                .outputs
                .iter()
                .map(|(o, _)| RequestedOutput { name: o.clone(), ..Default::default() })
                .collect(),
            parameters: self.parameters.clone(),
            callers: self.callers.clone(),
            trace: self.job.exec.meta.trace.clone(),
        };
        (req, batch)
    }

    /// Provides the outputs of a response of step `index` (run with `batch`) to iteration `it` under
    /// their ensemble names, keeping those something reads.
    fn store_outputs(&mut self, index: usize, batch: i64, outputs: Vec<Tensor>, it: Iteration) {
        let mut produced: HashMap<String, Tensor> = outputs.into_iter().map(|t| (t.name.clone(), t)).collect();
        for (output, tensor) in &self.shared.graph.steps()[index].outputs {
            // An output the model did not return counts as absent (an optional input downstream).
            let data = produced.remove(output);
            if self.run.provide(tensor, it) {
                if let Some(mut t) = data {
                    t.name = tensor.clone();
                    self.tensors.insert((tensor.clone(), it), (t, batch));
                }
            }
        }
    }

    /// The outputs the request asked for from iteration `it`, in its order, each shaped as the
    /// ensemble's configuration says.
    fn take_outputs(&mut self, it: Iteration) -> Result<Vec<Tensor>> {
        let name = self.shared.graph.name();
        let mut outputs = Vec::with_capacity(self.job.exec.outputs.len());
        for o in &self.job.exec.outputs {
            let (mut t, batch) = self.tensors.get(&(o.clone(), it)).cloned().ok_or_else(|| {
                Error::internal(format!("in ensemble '{name}', the composing models did not produce output '{o}'"))
            })?;
            if let Some(dims) = self.shared.output_dims.get(o) {
                t.shape = adapt_shape(dims, self.shared.batching, batch, &t.shape);
            }
            outputs.push(t);
        }
        for done in self.run.take_outputs(it) {
            self.tensors.remove(&(done, it));
        }
        Ok(outputs)
    }
}

impl Shared {
    /// Provides the request's inputs to `run` (iteration 0), keeping those a step reads, and marks the
    /// optional ensemble inputs the request left out as absent, so the steps go without them.
    fn provide_inputs(&self, job: &Job, run: &mut Run<'_>) -> Tensors {
        let mut tensors: Tensors = HashMap::new();
        let input_batch = if self.batching { i64::from(job.batch_size) } else { 0 };
        for t in &job.exec.inputs {
            if run.provide(&t.name, 0) {
                tensors.insert((t.name.clone(), 0), (t.clone(), input_batch));
            }
        }
        for input in self.graph.inputs() {
            run.provide(input, 0);
        }
        tensors
    }

    /// Runs the request of step `index` (in iteration `it`, with `batch`) and hands out its events: the
    /// one answer of a model that is not decoupled, or each response of a decoupled one as it comes.
    fn step_events(&self, index: usize, it: Iteration, batch: i64, req: InferRequest) -> BoxStream<'static, StepEvent> {
        let items: BoxStream<'static, Result<StepItem>> = if self.models[index].decoupled {
            futures_util::stream::once(self.runner.run_stream(req))
                .flat_map(|started| match started {
                    Ok(responses) => responses.map(|r| r.map(StepItem::from_stream)).boxed(),
                    Err(e) => futures_util::stream::iter([Err(e)]).boxed(),
                })
                .boxed()
        } else {
            futures_util::stream::once(self.runner.run(req)).map(|r| r.map(StepItem::from_exec)).boxed()
        };
        let event = move |item, last| StepEvent { step: index, it, batch, item, last };
        futures_util::stream::unfold(Some(items), move |items| async move {
            let mut items = items?;
            Some(match items.next().await {
                Some(Ok(item)) if item.is_final => (event(Some(Ok(item)), true), None),
                Some(item) => (event(Some(item), false), Some(items)),
                None => (event(None, true), None),
            })
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests;
