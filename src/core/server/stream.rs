//! Streamed inference: a decoupled model's responses handed out as it sends them.

use super::handle::Server;
use super::inference::{child_trace, failure_reason, is_decoupled, link_trace, refuse_reentry, stamp_execution};
use crate::core::lifecycle::LoadedModel;
use crate::core::scheduler::{request_span, Job};
use crate::core::shm_params;
use crate::core::stats::{FailureReason, ResponseOutcome};
use crate::core::trace::{Activity, SharedTrace};
use crate::core::validate;
use crate::error::{Error, Result};
use crate::model_api::types::{InferRequest, RequestedOutput, StreamResponse};
use crate::model_api::{ExecResult, ResponseSender};
use futures_util::stream::{BoxStream, StreamExt};
use std::sync::Arc;
use std::time::Instant;

impl Server {
    /// Whether the model (version) serving `name` is decoupled (`model_transaction_policy { decoupled: true }`):
    /// its responses can only be streamed.
    pub fn is_decoupled(&self, name: &str, version: Option<i64>) -> bool {
        self.inner.models.get(name, version).is_ok_and(|m| is_decoupled(&m.config))
    }

    /// Runs one inference whose responses are streamed: a decoupled model's 0..n responses as it sends
    /// them, or the single response of any other model. The stream ends after the final response or an
    /// error. A request that cannot run (unknown model, invalid, refused by the queue) fails the call;
    /// once it has run, its errors come in the stream.
    pub async fn infer_stream(&self, req: InferRequest) -> Result<BoxStream<'static, Result<StreamResponse>>> {
        self.infer_stream_traced(req, None).await
    }

    /// [`Server::infer_stream`] for a request the front-end sampled for tracing: the core adds the model,
    /// REQUEST_START, QUEUE_START, COMPUTE_* and REQUEST_END to `trace` (a decoupled model's once its
    /// stream has ended); the front-end stamps each response it hands on.
    pub async fn infer_stream_traced(
        &self,
        req: InferRequest,
        trace: Option<SharedTrace>,
    ) -> Result<BoxStream<'static, Result<StreamResponse>>> {
        let model = self.inner.models.get(&req.model_name, req.model_version)?;
        if !is_decoupled(&model.config) {
            return self.stream_of_one(req, trace).await;
        }
        let start = Instant::now();
        let mut req = req;
        let trace = trace.or_else(|| child_trace(&req).map(SharedTrace::new));
        if let Some(t) = &trace {
            if let Some(mut owned) = t.take() {
                owned.set_model(&model.name, model.version);
                owned.stamp(Activity::RequestStart, start);
                link_trace(&mut req, Some(&owned));
                t.put(Some(owned));
            }
        } else {
            link_trace(&mut req, None);
        }
        if let Err(e) = refuse_reentry(&model, &req) {
            model.stats.record_failure(start.elapsed(), FailureReason::Other);
            return Err(e);
        }
        if let Err(e) = shm_params::resolve(&self.inner.shm, Some(&self.inner.pools.pinned), &mut req) {
            model.stats.record_failure(start.elapsed(), FailureReason::Other);
            return Err(e);
        }
        let id = req.id.clone();
        let mut prepared = match validate::prepare(&model.io, &model.name, req) {
            Ok(p) => p,
            Err(e) => {
                model.stats.record_failure(start.elapsed(), FailureReason::Other);
                return Err(e);
            }
        };
        let (responder, responses) = ResponseSender::channel();
        prepared.exec.responder = Some(responder);
        let (tx, executed) = crate::core::scheduler::Reply::channel();
        let enqueued = Instant::now();
        let signals = prepared.exec.meta.signals.clone();
        let job = Job {
            exec: prepared.exec,
            batch_size: prepared.batch_size,
            enqueued,
            control: prepared.control,
            reply: tx,
            span: request_span(&model.name, model.version, &id),
        };
        if let Err(e) = model.scheduler.submit(job) {
            model.stats.record_failure(start.elapsed(), FailureReason::Rejected);
            return Err(e);
        }
        let state = DecoupledStream {
            signals,
            failure: FailureReason::Backend,
            server: self.clone(),
            model,
            id,
            requested: prepared.outputs,
            responses,
            executed: Some(executed),
            start,
            done: false,
            answered: false,
            sent: 0,
            last: start,
            trace,
            enqueued,
        };
        Ok(futures_util::stream::unfold(state, DecoupledStream::next).boxed())
    }
}

impl Server {
    /// A request to a model that is not decoupled, as a stream of its one response; a failure in the
    /// model's execution comes in the stream, one before it fails the call.
    async fn stream_of_one(
        &self,
        req: InferRequest,
        trace: Option<SharedTrace>,
    ) -> Result<BoxStream<'static, Result<StreamResponse>>> {
        let mut owned = trace.as_ref().and_then(SharedTrace::take);
        let answer = self.infer_staged(req, owned.as_mut()).await;
        if let Some(t) = &trace {
            t.put(owned);
        }
        let one = match answer {
            Ok((response, _)) => Ok(StreamResponse { response, is_final: true, empty: false, error: None }),
            Err((e, FailureReason::Backend)) => Err(e),
            Err((e, _)) => return Err(e),
        };
        Ok(futures_util::stream::once(async move { one }).boxed())
    }
}

/// The responses of one request to a decoupled model, as [`Server::infer_stream`] hands them out.
struct DecoupledStream {
    server: Server,
    model: Arc<LoadedModel>,
    /// The request's id, carried by every response.
    id: String,
    /// The request's cancellation, tripped when the stream is dropped before its end.
    signals: crate::model_api::Signals,
    /// Why the request failed, once it has (for the failure metric).
    failure: FailureReason,
    /// The outputs the client asked for (reshape and classification apply per response).
    requested: Vec<RequestedOutput>,
    /// What the model sends.
    responses: crate::model_api::ResponseReceiver,
    /// The scheduler's answer: only says that execution ended, or why it could not run.
    executed: Option<crate::core::scheduler::Answer>,
    /// For the request statistics.
    start: Instant,
    /// Set after the final response or an error.
    done: bool,
    /// Set once the first response went out (for the first-response histogram).
    answered: bool,
    /// Responses handed out so far: the next one's index in `response_stats`.
    sent: usize,
    /// When the previous response (or the request) arrived: a response's compute time starts there.
    last: Instant,
    /// The request's trace when it is sampled: the execution's timestamps and REQUEST_END go in once
    /// the stream has ended.
    trace: Option<SharedTrace>,
    /// When the request was queued (the trace's QUEUE_START, stamped with the execution's times).
    enqueued: Instant,
}

impl DecoupledStream {
    /// Counts the next response in `response_stats` and moves the clock on.
    fn count(&mut self, outcome: impl FnOnce(u64) -> ResponseOutcome) {
        let now = Instant::now();
        let ns = u64::try_from(now.duration_since(self.last).as_nanos()).unwrap_or(u64::MAX);
        if let Some(r) = &self.model.stats.responses {
            r.record(self.sent, outcome(ns));
        }
        self.sent += 1;
        self.last = now;
    }
}

impl Drop for DecoupledStream {
    /// A stream dropped before its final response was cancelled by its client (the gRPC stream ended,
    /// an HTTP client stopped reading, the connection went away): the request is cancelled (a queued
    /// one leaves its queue, a running one sees `is_cancelled()`), counted as a CANCELED failure, and
    /// as a cancelled response at the index it stopped at.
    fn drop(&mut self) {
        if !self.done {
            self.signals.cancel();
            self.model.stats.record_failure(self.start.elapsed(), FailureReason::Canceled);
            self.count(|ns| ResponseOutcome::Cancel { ns });
        }
        if let Some(t) = self.trace.take() {
            t.stamp_now(Activity::RequestEnd);
        }
    }
}

impl DecoupledStream {
    /// Adds the execution's timestamps to the trace, if the request is traced.
    fn trace_execution(&self, result: &ExecResult) {
        if let Some(t) = &self.trace {
            let mut owned = t.take();
            if let Some(o) = owned.as_mut() {
                stamp_execution(o, self.enqueued, &result.timings);
            }
            t.put(owned);
        }
    }

    /// Completes a traced request's trace once its stream has ended: the execution's timestamps (the
    /// scheduler reports them when the model's `execute` has returned, which can be after the final
    /// response) and REQUEST_END. Untraced requests wait for nothing.
    async fn finish_trace(&mut self) {
        if self.trace.is_none() {
            return;
        }
        if let Some(executed) = self.executed.take() {
            if let Ok(Ok(result)) = executed.await {
                self.trace_execution(&result);
            }
        }
        if let Some(t) = self.trace.take() {
            t.stamp_now(Activity::RequestEnd);
        }
    }
}

impl DecoupledStream {
    async fn next(mut self) -> Option<(Result<StreamResponse>, Self)> {
        if self.done {
            self.finish_trace().await;
            return None;
        }
        let item = match self.responses.recv().await {
            Some(Ok(r)) => {
                if !self.answered && !r.empty {
                    self.answered = true;
                    if let Some(h) = &self.model.stats.first_response {
                        h.observe(self.start.elapsed());
                    }
                }
                let built = Instant::now();
                let (empty, failed) = (r.empty, r.error.is_some());
                let response =
                    self.server.respond(&self.model, self.id.clone(), &self.requested, r.outputs).map(|mut resp| {
                        resp.parameters = r.parameters;
                        StreamResponse { response: resp, is_final: r.is_final, empty: r.empty, error: r.error }
                    });
                let output_ns = u64::try_from(built.elapsed().as_nanos()).unwrap_or(u64::MAX);
                self.count(|ns| match (&response, empty, failed) {
                    (Err(_), ..) | (_, _, true) => ResponseOutcome::Fail { ns },
                    (Ok(_), true, false) => ResponseOutcome::Empty { infer_ns: ns },
                    (Ok(_), false, false) => {
                        ResponseOutcome::Success { infer_ns: ns.saturating_sub(output_ns), output_ns }
                    }
                });
                if r.is_final || response.is_err() {
                    self.done = true;
                }
                response
            }
            Some(Err(e)) => {
                self.done = true;
                self.count(|ns| ResponseOutcome::Fail { ns });
                Err(e)
            }
            None => {
                // Every sender is gone without a final response: the request never ran (the error says
                // why), or the model dropped it.
                self.done = true;
                let executed = self.executed.take()?.await;
                match executed {
                    Ok(Err(e)) => {
                        self.failure = failure_reason(&e);
                        Err(e)
                    }
                    Ok(Ok(result)) => {
                        self.trace_execution(&result);
                        self.finish_trace().await;
                        return None;
                    }
                    Err(_) => Err(Error::internal(format!(
                        "model '{}' stopped before answering the request",
                        self.model.name
                    ))),
                }
            }
        };
        if self.done {
            match &item {
                Ok(_) => self.model.stats.record_success(self.start.elapsed()),
                Err(_) => self.model.stats.record_failure(self.start.elapsed(), self.failure),
            }
        }
        Some((item, self))
    }
}

#[cfg(test)]
mod tests;
