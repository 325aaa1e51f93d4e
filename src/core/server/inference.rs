//! Inference: a request validated, answered from the response cache or queued to an instance, and its
//! outputs post-processed (reshape, classification, shared memory) for the client.

use super::handle::Server;
use crate::core::cache;
use crate::core::classification::classify;
use crate::core::lifecycle::LoadedModel;
use crate::core::scheduler::Job;
use crate::core::shm_params;
use crate::core::stats::FailureReason;
use crate::core::trace::{self, Activity, Trace};
use crate::core::validate::{self, resolve_wildcards};
use crate::error::{Error, ErrorKind, Result};
use crate::model_api::types::{InferRequest, InferResponse, Parameters, RequestedOutput, Tensor};
use crate::model_api::ExecTimings;
use crate::proto::inference::ModelConfig;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Server {
    /// Runs one inference: validate, queue to an instance, wait, post-process (reshape, classification).
    pub async fn infer(&self, req: InferRequest) -> Result<InferResponse> {
        self.infer_traced(req, None).await
    }

    /// [`Server::infer`] for a request the front-end sampled for tracing: the core adds the model and
    /// REQUEST_START, QUEUE_START, COMPUTE_* and REQUEST_END to `trace`.
    pub async fn infer_traced(&self, req: InferRequest, trace: Option<&mut Trace>) -> Result<InferResponse> {
        self.infer_timed(req, trace).await.map(|(r, _)| r)
    }

    /// [`Self::infer_traced`], also returning the execution's compute times (an ensemble adds up its
    /// steps').
    pub(super) async fn infer_timed(
        &self,
        req: InferRequest,
        trace: Option<&mut Trace>,
    ) -> Result<(InferResponse, ExecTimings)> {
        self.infer_staged(req, trace).await.map_err(|(e, _)| e)
    }

    /// [`Self::infer_timed`], saying of a failure where it failed (`Backend`: in the model's execution).
    pub(super) async fn infer_staged(
        &self,
        mut req: InferRequest,
        trace: Option<&mut Trace>,
    ) -> std::result::Result<(InferResponse, ExecTimings), (Error, FailureReason)> {
        let start = Instant::now();
        let model = self.inner.models.get(&req.model_name, req.model_version).map_err(|e| (e, FailureReason::Other))?;
        let mut child = if trace.is_none() { child_trace(&req) } else { None };
        let mut trace = trace.or(child.as_mut());
        if let Some(t) = trace.as_deref_mut() {
            t.set_model(&model.name, model.version);
            t.stamp(Activity::RequestStart, start);
        }
        link_trace(&mut req, trace.as_deref());
        let result = self.infer_on(&model, req, trace.as_deref_mut(), start).await;
        if let Some(t) = trace {
            t.stamp_now(Activity::RequestEnd);
        }
        match result {
            Ok(r) => {
                model.stats.record_success(start.elapsed());
                Ok(r)
            }
            Err((e, reason)) => {
                model.stats.record_failure(start.elapsed(), reason);
                Err((e, reason))
            }
        }
    }

    /// Runs a request on one model version; a failure says which stage failed, for the metrics. Its
    /// span is the request's span: it goes with the job to the instance thread. Dropped while it waits
    /// (its client went away), it cancels the request and counts it as CANCELED (see [`Abandoned`]).
    #[tracing::instrument(name = "request", skip_all, fields(model = %model.name, version = model.version, id = %req.id))]
    async fn infer_on(
        &self,
        model: &Arc<LoadedModel>,
        req: InferRequest,
        trace: Option<&mut Trace>,
        start: Instant,
    ) -> std::result::Result<(InferResponse, ExecTimings), (Error, FailureReason)> {
        let other = |e: Error| (e, FailureReason::Other);
        if is_decoupled(&model.config) {
            return Err(other(Error::unsupported(format!(
                "model '{}' is decoupled: its responses can only be streamed (gRPC ModelStreamInfer)",
                model.name
            ))));
        }
        refuse_reentry(model, &req).map_err(other)?;
        let mut req = req;
        shm_params::resolve(&self.inner.shm, Some(&self.inner.pools.pinned), &mut req).map_err(other)?;
        let id = req.id.clone();
        let prepared = validate::prepare(&model.io, &model.name, req).map_err(other)?;
        // A cache hit answers without queueing; a miss remembers the key to store the result.
        let cached = match (&self.inner.cache, self.cache_enabled(model)) {
            (Some(c), true) => {
                let t = Instant::now();
                let key = cache::key(&model.name, model.version, &prepared.exec.inputs, &prepared.exec.outputs)
                    .map_err(other)?;
                if let Some(outputs) = c.lookup(&key).await {
                    model.stats.record_cache_hit(t.elapsed().as_nanos() as u64);
                    let response = self.respond(model, id, &prepared.outputs, outputs).map_err(other)?;
                    return Ok((response, ExecTimings::default()));
                }
                Some((c, key, t.elapsed()))
            }
            _ => None,
        };
        let (tx, rx) = crate::core::scheduler::Reply::channel();
        let enqueued = Instant::now();
        let waiting = Abandoned::new(&model.stats, &prepared.exec.meta.signals, start);
        let job = Job {
            exec: prepared.exec,
            batch_size: prepared.batch_size,
            enqueued,
            control: prepared.control,
            reply: tx,
            span: tracing::Span::current(),
        };
        if let Err(e) = model.scheduler.submit(job) {
            waiting.disarm();
            return Err((e, FailureReason::Rejected));
        }
        let answer = rx.await;
        waiting.disarm();
        let result = answer
            .map_err(|_| {
                other(Error::internal(format!("model '{}' stopped before answering the request", model.name)))
            })?
            .map_err(|e| {
                let reason = failure_reason(&e);
                (e, reason)
            })?;
        if let Some(t) = trace {
            stamp_execution(t, enqueued, &result.timings);
        }
        if let Some((c, key, lookup)) = cached {
            let t = Instant::now();
            c.insert(key, result.outputs.clone());
            model.stats.record_cache_miss((lookup + t.elapsed()).as_nanos() as u64);
        }
        let mut response = self.respond(model, id, &prepared.outputs, result.outputs).map_err(other)?;
        response.parameters = result.parameters;
        Ok((response, result.timings))
    }

    /// Whether a model version uses the response cache: enabled in its config and on the server.
    pub(super) fn cache_enabled(&self, model: &LoadedModel) -> bool {
        self.inner.cache.is_some() && model.config.response_cache.as_ref().is_some_and(|c| c.enable)
    }

    /// Post-processes a model's outputs for the client: `reshape` and classification.
    pub(super) fn respond(
        &self,
        model: &LoadedModel,
        id: String,
        requested: &[RequestedOutput],
        raw: Vec<Tensor>,
    ) -> Result<InferResponse> {
        let batched = model.io.max_batch_size > 0;
        let mut outputs = Vec::with_capacity(raw.len());
        for mut t in raw {
            if let Some(spec) = model.io.output(&t.name) {
                if spec.reshape.is_some() {
                    t.shape = client_shape(&t, &spec.dims, batched);
                }
            }
            // By name: a backend may leave out an output it did not produce (Python models can).
            let req = requested.iter().find(|r| r.name == t.name);
            let class_count = req.map_or(0, |r| r.class_count);
            if class_count > 0 {
                let labels = model.labels.get(&t.name).map(|l| l.as_slice());
                t = classify(&t, class_count, batched, labels)?;
            }
            if let Some(slice) = req.and_then(|r| r.shared_memory.as_ref()) {
                shm_params::place_output(&mut t, slice)?;
            }
            outputs.push(t);
        }
        Ok(InferResponse {
            model_name: model.name.clone(),
            model_version: model.version,
            id,
            outputs,
            parameters: Parameters::new(),
        })
    }

    /// [`Self::infer`], also returning the execution's compute times, for front-ends that report where
    /// a request's time went (the image pipeline).
    pub async fn infer_with_timings(
        &self,
        req: InferRequest,
        trace: Option<&mut Trace>,
    ) -> Result<(InferResponse, ExecTimings)> {
        self.infer_timed(req, trace).await
    }
}

/// Adds the scheduler's and backend's timestamps: QUEUE_START when the job was queued, COMPUTE_START
/// when an instance took it, and the ends of the input, infer and output phases from their durations.
pub(super) fn stamp_execution(t: &mut Trace, enqueued: Instant, timings: &crate::model_api::ExecTimings) {
    t.stamp(Activity::QueueStart, enqueued);
    if let Some(started) = timings.started {
        let input_end = started + Duration::from_nanos(timings.compute_input_ns);
        let output_start = input_end + Duration::from_nanos(timings.compute_infer_ns);
        t.stamp(Activity::ComputeStart, started);
        t.stamp(Activity::ComputeInputEnd, input_end);
        t.stamp(Activity::ComputeOutputStart, output_start);
        t.stamp(Activity::ComputeEnd, output_start + Duration::from_nanos(timings.compute_output_ns));
    }
}

/// Why a request the scheduler answered with `e` failed: UNAVAILABLE is a request it gave up on (timed
/// out in the queue, model unloaded), CANCELLED one that was cancelled, anything else failed in the
/// backend.
pub(super) fn failure_reason(e: &Error) -> FailureReason {
    match e.kind {
        ErrorKind::Unavailable => FailureReason::Rejected,
        ErrorKind::Cancelled => FailureReason::Canceled,
        _ => FailureReason::Backend,
    }
}

/// A request somebody waits for. Dropped while armed, the waiter stopped waiting (its client went away,
/// or the request's future was dropped): the request is cancelled, so a queued request leaves its queue
/// without running and a running one sees `is_cancelled()`, and it counts as a CANCELED failure.
/// Disarmed once the request has its answer (or was refused), when the caller counts the outcome.
pub(super) struct Abandoned<'a> {
    stats: &'a crate::core::stats::ModelStats,
    signals: crate::model_api::Signals,
    start: Instant,
    armed: bool,
}

impl<'a> Abandoned<'a> {
    pub(super) fn new(
        stats: &'a crate::core::stats::ModelStats,
        signals: &crate::model_api::Signals,
        start: Instant,
    ) -> Self {
        Abandoned { stats, signals: signals.clone(), start, armed: true }
    }

    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!("The request's client went away before its answer; the request is cancelled.");
            self.signals.cancel();
            self.stats.record_failure(self.start.elapsed(), FailureReason::Canceled);
        }
    }
}

pub(super) fn is_decoupled(cfg: &ModelConfig) -> bool {
    cfg.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
}

/// The shape a client sees for an output with `reshape`: the configured dims (plus the batch dimension).
fn client_shape(t: &Tensor, dims: &[i64], batched: bool) -> Vec<i64> {
    let batch = if batched { t.shape.first().copied().unwrap_or(1).max(1) } else { 1 };
    let per_item = t.element_count() / batch as usize;
    let mut shape = if batched { vec![batch] } else { Vec::new() };
    shape.extend(resolve_wildcards(dims, per_item));
    shape
}

/// Refuses a BLS request to a model version that is waiting for it: one of its instances runs the
/// `execute` that made the request (directly, or through other models' BLS requests). Queued, it could
/// only run once that instance is free, which it never is: the model would be deadlocked for every
/// client, as it is in Triton.
pub(super) fn refuse_reentry(model: &LoadedModel, req: &InferRequest) -> Result<()> {
    if !req.callers.iter().any(|(name, version)| *name == model.name && *version == model.version) {
        return Ok(());
    }
    let chain: Vec<String> = req
        .callers
        .iter()
        .map(|(n, v)| format!("{n} (v{v})"))
        .chain([format!("{} (v{})", model.name, model.version)])
        .collect();
    Err(Error::invalid(format!(
        "BLS request to model '{}' version {} refused: it was made while that model version runs the request \
         it would wait for, so it could never run (call chain: {})",
        model.name,
        model.version,
        chain.join(" -> ")
    )))
}

/// The child trace of a request made on behalf of a traced one (an ensemble step, a BLS call).
pub(super) fn child_trace(req: &InferRequest) -> Option<Trace> {
    let mut t = trace::child_of(req.trace.as_ref()?)?;
    t.set_request_id(&req.id);
    Some(t)
}

/// From here on `req.trace` is the request's own trace, for the requests made on its behalf to
/// continue (it arrived as the parent's).
pub(super) fn link_trace(req: &mut InferRequest, trace: Option<&Trace>) {
    req.trace = trace.map(Trace::link);
}
