//! The ensemble scheduler (`platform: "ensemble"`): runs a request through the composing models'
//! steps as their inputs become available, independent steps concurrently, each step through the
//! core's normal inference path so the composing model's own scheduler and statistics apply.
//!
//! The data flow and the per-request bookkeeping are the pure [`graph::EnsembleGraph`] and
//! [`graph::Run`]; [`EnsembleScheduler`] is the thin async driver: one task per request that hands
//! ready steps to a [`StepRunner`] and feeds their outputs back. An ensemble has no instances.
//! Intermediate tensors move between steps as clones of their buffer handles, never as copies.

pub mod graph;

use super::workers;
use super::{Job, RequestControl, Scheduler};
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::types::{InferRequest, ParamValue, Parameters, RequestedOutput, Tensor};
use crate::model_api::SequenceId;
use crate::model_api::{ExecResult, ExecTimings};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use graph::{adapt_shape, EnsembleGraph, Run};
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
}

/// What a step needs to know about its composing model, taken when the ensemble loads (a reload of a
/// composing model reloads the ensemble, so this stays current).
#[derive(Debug, Clone, Default)]
pub struct StepModel {
    /// Whether the composing model batches (`max_batch_size > 0`).
    pub batching: bool,
    /// Configured dims of each input, for the batch/non-batch shape conversion.
    pub input_dims: HashMap<String, Vec<i64>>,
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

/// Ensemble tensor → its data, and the batch size of the request that made it (0: no batching).
type Tensors = HashMap<String, (Tensor, i64)>;

impl Shared {
    /// Runs one request to completion. On a step failure no further step starts; the steps already
    /// running finish (so their models' statistics stay whole) and the request fails with the first
    /// error, prefixed with the ensemble's name as Triton does, keeping the error's kind. A cancelled
    /// request (its client went away) starts no further step and drops the running ones, which
    /// cancels them in their models.
    async fn execute(&self, job: &Job) -> Result<ExecResult> {
        let name = self.graph.name();
        let mut run = Run::new(&self.graph, &job.exec.outputs)?;
        let mut tensors = self.provide_inputs(job, &mut run);
        let parameters = step_parameters(&job.control);
        // A step waits for nothing the ensemble's own callers do not, plus the ensemble itself.
        let callers: crate::model_api::types::CallChain =
            job.exec.meta.callers.iter().cloned().chain([self.me.clone()]).collect();
        let mut inflight = FuturesUnordered::new();
        let mut failure: Option<Error> = None;
        let mut timings = ExecTimings::default();
        let cancelled = job.exec.meta.signals.cancelled();
        tokio::pin!(cancelled);
        loop {
            if failure.is_none() {
                for index in run.ready_steps() {
                    let (req, batch) = self.step_request(index, &mut run, &mut tensors, &parameters, &callers);
                    let fut = self.runner.run(req);
                    inflight.push(async move { (index, batch, fut.await) });
                }
            }
            let next = tokio::select! {
                biased;
                next = inflight.next() => next,
                () = &mut cancelled => {
                    return Err(Error::cancelled(format!("in ensemble '{name}', the request was cancelled")));
                }
            };
            let Some((index, batch, result)) = next else {
                break;
            };
            run.complete(index);
            match result {
                Ok(r) => {
                    timings.compute_input_ns += r.timings.compute_input_ns;
                    timings.compute_infer_ns += r.timings.compute_infer_ns;
                    timings.compute_output_ns += r.timings.compute_output_ns;
                    self.store_outputs(index, batch, r.outputs, &mut run, &mut tensors);
                }
                Err(e) => {
                    if failure.is_none() {
                        failure = Some(e);
                    }
                }
            }
        }
        if let Some(e) = failure {
            return Err(Error::new(e.kind, format!("in ensemble '{name}', {}", e.message)));
        }
        if !run.finished() {
            return Err(Error::invalid(format!(
                "in ensemble '{name}', unexpected deadlock, at least one output is not set while no more ensemble \
                 steps can be made"
            )));
        }
        let outputs = self.take_outputs(job, tensors)?;
        Ok(ExecResult { outputs, timings, parameters: Default::default() })
    }

    /// Provides the request's inputs to `run`, keeping those a step reads, and marks the optional
    /// ensemble inputs the request left out as absent, so the steps go without them.
    fn provide_inputs(&self, job: &Job, run: &mut Run<'_>) -> Tensors {
        let mut tensors: Tensors = HashMap::new();
        let input_batch = if self.batching { i64::from(job.batch_size) } else { 0 };
        for t in &job.exec.inputs {
            if run.provide(&t.name) {
                tensors.insert(t.name.clone(), (t.clone(), input_batch));
            }
        }
        for input in self.graph.inputs() {
            run.provide(input);
        }
        tensors
    }

    /// The request to the composing model of ready step `index`, its inputs taken from `tensors` (and
    /// shaped for that model), and the batch size it runs with (0 when that model does not batch).
    /// Drops the tensors no other step or output reads any more.
    fn step_request(
        &self,
        index: usize,
        run: &mut Run<'_>,
        tensors: &mut Tensors,
        parameters: &Parameters,
        callers: &crate::model_api::types::CallChain,
    ) -> (InferRequest, i64) {
        let step = &self.graph.steps()[index];
        let model = &self.models[index];
        let mut inputs = Vec::with_capacity(step.inputs.len());
        for (input, tensor) in &step.inputs {
            if let Some((t, batch)) = tensors.get(tensor) {
                // A clone shares the buffer: no tensor data is copied between steps.
                let mut t = t.clone();
                t.name = input.clone();
                if let Some(dims) = model.input_dims.get(input) {
                    t.shape = adapt_shape(dims, model.batching, *batch, &t.shape);
                }
                inputs.push(t);
            }
        }
        for gone in run.consume_inputs(index) {
            tensors.remove(&gone);
        }
        let batch = if model.batching { inputs.first().and_then(|t| t.shape.first()).copied().unwrap_or(1) } else { 0 };
        let req = InferRequest {
            model_name: step.model.clone(),
            model_version: step.version,
            id: String::new(),
            inputs,
            outputs: step
                .outputs
                .iter()
                .map(|(o, _)| RequestedOutput { name: o.clone(), ..Default::default() })
                .collect(),
            parameters: parameters.clone(),
            callers: callers.clone(),
        };
        (req, batch)
    }

    /// Provides the outputs of finished step `index` (run with `batch`) to `run` under their ensemble
    /// names, keeping those something reads.
    fn store_outputs(&self, index: usize, batch: i64, outputs: Vec<Tensor>, run: &mut Run<'_>, tensors: &mut Tensors) {
        let mut produced: HashMap<String, Tensor> = outputs.into_iter().map(|t| (t.name.clone(), t)).collect();
        for (output, tensor) in &self.graph.steps()[index].outputs {
            // An output the model did not return counts as absent (an optional input downstream).
            let data = produced.remove(output);
            if run.provide(tensor) {
                if let Some(mut t) = data {
                    t.name = tensor.clone();
                    tensors.insert(tensor.clone(), (t, batch));
                }
            }
        }
    }

    /// The outputs the request asked for, in its order, each shaped as the ensemble's configuration says.
    fn take_outputs(&self, job: &Job, mut tensors: Tensors) -> Result<Vec<Tensor>> {
        let name = self.graph.name();
        let mut outputs = Vec::with_capacity(job.exec.outputs.len());
        for o in &job.exec.outputs {
            let (mut t, batch) = tensors.remove(o).ok_or_else(|| {
                Error::internal(format!("in ensemble '{name}', the composing models did not produce output '{o}'"))
            })?;
            if let Some(dims) = self.output_dims.get(o) {
                t.shape = adapt_shape(dims, self.batching, batch, &t.shape);
            }
            outputs.push(t);
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests;
