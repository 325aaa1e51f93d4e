//! What a Python model asks of the server while it runs: BLS inference requests and calls (request
//! cancellation, model control). The reader thread hands them here; anything that waits on the server
//! runs as a task on the runtime, never on the reader thread or an instance thread, so a model may
//! have many BLS requests in flight (`async_exec`).

use super::conn::Conn;
use super::ipc::{self, BlsRequest};
use crate::error::{Error, Result};
use crate::model_api::custom_metrics::{MetricKind, MetricOp};
use crate::model_api::types::{
    CallChain, InferRequest, Parameters, RequestedOutput, StreamResponse, Tensor, TraceLink,
};
use crate::model_api::ServerApi;
use crate::model_api::{LoadOptions, SequenceId};
use base64::Engine as _;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The server side of a stub's calls.
pub struct Calls {
    /// Where tasks run; `None` outside a runtime (then every call that needs the server fails).
    runtime: Option<tokio::runtime::Handle>,
    /// The server.
    api: Option<Arc<dyn ServerApi>>,
    /// The model version whose instance this is (name, version).
    model: (String, i64),
    /// The `execute` calls in flight on this instance, by call id, with the model versions waiting on
    /// their requests: a BLS request waits on behalf of all of them.
    in_flight: parking_lot::Mutex<Vec<(u64, CallChain)>>,
    /// The traced requests of the `execute` calls in flight: (call id, request key, its trace), for
    /// the BLS requests made with `trace=request.trace()`.
    traces: parking_lot::Mutex<Vec<(u64, u64, TraceLink)>>,
}

impl Calls {
    pub fn new(runtime: Option<tokio::runtime::Handle>, api: Option<Arc<dyn ServerApi>>, model: (String, i64)) -> Self {
        Calls { runtime, api, model, in_flight: Default::default(), traces: Default::default() }
    }

    /// Notes an `execute` call sent to the stub, with the callers of its requests and the traces of
    /// its traced requests (by request key).
    pub fn enter<'a>(&self, call: u64, callers: impl Iterator<Item = &'a CallChain>, traces: Vec<(u64, TraceLink)>) {
        if !traces.is_empty() {
            self.traces.lock().extend(traces.into_iter().map(|(key, link)| (call, key, link)));
        }
        let mut chain: Vec<(String, i64)> = Vec::new();
        for c in callers {
            for m in c.iter() {
                if !chain.contains(m) {
                    chain.push(m.clone());
                }
            }
        }
        if !chain.is_empty() {
            self.in_flight.lock().push((call, chain.into()));
        }
    }

    /// The `execute` call `call` has been answered (or is lost with its stub).
    pub fn leave(&self, call: u64) {
        self.in_flight.lock().retain(|(c, _)| *c != call);
        self.traces.lock().retain(|(c, _, _)| *c != call);
    }

    /// Who waits on a BLS request this instance makes now: the callers of the requests it is running,
    /// then the instance's own model. The server refuses a request to a model in this chain, which
    /// would otherwise wait for an instance that waits for it (a deadlock in Triton).
    fn bls_callers(&self) -> CallChain {
        let mut chain: Vec<(String, i64)> = Vec::new();
        for (_, c) in self.in_flight.lock().iter() {
            for m in c.iter() {
                if !chain.contains(m) {
                    chain.push(m.clone());
                }
            }
        }
        if !chain.contains(&self.model) {
            chain.push(self.model.clone());
        }
        chain.into()
    }

    /// The trace of the running request with key `key` (a BLS request made with its `trace()`).
    fn trace_of(&self, key: Option<u64>) -> Option<TraceLink> {
        let key = key?;
        self.traces.lock().iter().find(|(_, k, _)| *k == key).map(|(_, _, link)| link.clone())
    }

    /// The runtime and the server, or why a call cannot run.
    fn server(&self) -> Result<(&tokio::runtime::Handle, &Arc<dyn ServerApi>)> {
        match (&self.runtime, &self.api) {
            (Some(rt), Some(api)) => Ok((rt, api)),
            _ => Err(Error::unavailable("this call needs a running server")),
        }
    }

    /// Runs a BLS request and sends its response back. The inputs are copied out of the stub's ring
    /// here, on the reader thread, before the stub may reuse it.
    pub fn bls(&self, conn: &Arc<Conn>, req: BlsRequest, payload: &[u8]) {
        let prepared = self.server().and_then(|(rt, api)| {
            let inputs = req.inputs.iter().map(|t| conn.read_tensor(t, payload)).collect::<Result<Vec<_>>>()?;
            Ok((rt, api, bls_request(&req, inputs, self.bls_callers(), self.trace_of(req.trace))))
        });
        let (rt, api, request) = match prepared {
            Ok(p) => p,
            Err(e) => return answer_bls_error(conn, req.id, req.main, &e),
        };
        let (conn, api, id, main) = (conn.clone(), api.clone(), req.id, req.main);
        if req.decoupled {
            // Every response as it comes, the last one final; a final flag without a response becomes an
            // empty final response (the stub's iterator yields it as an empty response, as Triton does).
            rt.spawn(async move {
                let mut responses = match api.infer_stream(request).await {
                    Ok(s) => s,
                    Err(e) => return answer_bls_error(&conn, id, main, &e),
                };
                while let Some(item) = responses.next().await {
                    match item {
                        Ok(r) if r.empty => return send_bls_final(&conn, id, main),
                        Ok(StreamResponse { error: Some(e), is_final, .. }) => {
                            send_bls_response(&conn, id, main, Err(e), is_final);
                            if is_final {
                                return;
                            }
                        }
                        Ok(r) => {
                            send_bls_response(
                                &conn,
                                id,
                                main,
                                Ok((r.response.outputs, r.response.parameters)),
                                r.is_final,
                            );
                            if r.is_final {
                                return;
                            }
                        }
                        Err(e) => return answer_bls_error(&conn, id, main, &e),
                    }
                }
                send_bls_final(&conn, id, main);
            });
            return;
        }
        if main && tokio::runtime::Handle::try_current().is_err() {
            // A blocking exec() from execute: this is the instance thread, which has nothing else to do
            // until the answer is back, so it runs the request itself instead of handing it to a tokio
            // worker and waiting to be woken (two thread switches fewer on every BLS call).
            let result = rt.block_on(api.infer(request)).map(|r| (r.outputs, r.parameters));
            send_bls_response(&conn, id, main, result, true);
            return;
        }
        rt.spawn(async move {
            let result = api.infer(request).await.map(|r| (r.outputs, r.parameters));
            send_bls_response(&conn, id, main, result, true);
        });
    }

    /// Answers a call; `id` is `None` for calls that want no answer.
    pub fn call(&self, conn: &Arc<Conn>, id: Option<u64>, op: &str, args: Map<String, Value>) {
        let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        match op {
            "is_cancelled" => {
                let key = args.get("key").and_then(Value::as_u64).unwrap_or(0);
                reply(conn, id, Ok(Value::Bool(conn.is_cancelled(key))));
            }
            "model_load" | "model_unload" | "model_ready" => {
                let (rt, api) = match self.server() {
                    Ok(s) => s,
                    Err(e) => return reply(conn, id, Err(e)),
                };
                let work: BoxFuture<'static, Result<Value>> = match op {
                    "model_load" => match load_options(&args) {
                        Ok(opts) => {
                            let f = api.load_model(text("name"), opts);
                            Box::pin(async move {
                                f.await.map(|()| Value::Null).map_err(|e| e.context("Failed to load model"))
                            })
                        }
                        Err(e) => return reply(conn, id, Err(e)),
                    },
                    "model_unload" => {
                        let f = api.unload_model(text("name"));
                        Box::pin(async move {
                            f.await.map(|()| Value::Null).map_err(|e| e.context("Failed to unload model"))
                        })
                    }
                    _ => {
                        let f = api.model_ready(text("name"), text("version"));
                        // An unknown model is simply not ready, as in Triton's C API.
                        Box::pin(async move { Ok(Value::Bool(f.await.unwrap_or(false))) })
                    }
                };
                let conn = conn.clone();
                rt.spawn(async move {
                    let result = work.await;
                    reply(&conn, id, result);
                });
            }
            op if op.starts_with("metric") => {
                let result = self.metric_call(conn, op, &args);
                reply(conn, id, result);
            }
            other => reply(conn, id, Err(Error::unsupported(format!("'{other}' is not supported by this server")))),
        }
    }
}

impl Calls {
    /// Custom metrics: families and metrics are handles the stub holds until it deletes them (or exits).
    fn metric_call(&self, conn: &Conn, op: &str, args: &Map<String, Value>) -> Result<Value> {
        let metrics = self
            .api
            .as_ref()
            .and_then(|a| a.custom_metrics())
            .ok_or_else(|| Error::unavailable("custom metrics need a running server"))?;
        let num = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let handle = args.get("handle").and_then(Value::as_u64).unwrap_or(0);
        // A stub may only use the handles it was given.
        let owned = || {
            if conn.metric_handles.lock().contains(&handle) {
                Ok(handle)
            } else {
                Err(Error::invalid("the metric has been deleted"))
            }
        };
        match op {
            "metric_family" => {
                let kind = match args.get("kind").and_then(Value::as_u64) {
                    Some(0) => MetricKind::Counter,
                    Some(1) => MetricKind::Gauge,
                    Some(2) => MetricKind::Histogram,
                    _ => return Err(Error::invalid("MetricFamily kind must be COUNTER, GAUGE or HISTOGRAM")),
                };
                let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
                let help = args.get("description").and_then(Value::as_str).unwrap_or_default();
                let id = metrics.family(name, help, kind)?;
                conn.metric_handles.lock().insert(id);
                Ok(Value::from(id))
            }
            "metric_new" => {
                let family = args.get("family").and_then(Value::as_u64).unwrap_or(0);
                if !conn.metric_handles.lock().contains(&family) {
                    return Err(Error::invalid(
                        "Invalid metric operation as the corresponding 'MetricFamily' has been deleted.",
                    ));
                }
                let labels = match args.get("labels") {
                    Some(Value::Object(m)) => {
                        m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()
                    }
                    _ => Default::default(),
                };
                let buckets = match args.get("buckets") {
                    Some(Value::Array(b)) => Some(b.iter().filter_map(Value::as_f64).collect()),
                    _ => None,
                };
                let id = metrics.metric(family, labels, buckets)?;
                conn.metric_handles.lock().insert(id);
                Ok(Value::from(id))
            }
            "metric_family_delete" | "metric_delete" => {
                if conn.metric_handles.lock().remove(&handle) {
                    metrics.release(handle);
                }
                Ok(Value::Null)
            }
            "metric_op" => {
                let op = match args.get("action").and_then(Value::as_str) {
                    Some("increment") => MetricOp::Increment(num("value")),
                    Some("set") => MetricOp::Set(num("value")),
                    Some("observe") => MetricOp::Observe(num("value")),
                    _ => return Err(Error::invalid("unknown metric operation")),
                };
                metrics.update(owned()?, op).map(|()| Value::Null)
            }
            "metric_value" => metrics.value(owned()?).map(Value::from),
            other => Err(Error::unsupported(format!("'{other}' is not supported by this server"))),
        }
    }

    /// Releases what a stub held when its process goes away (its metrics disappear unless another
    /// instance holds them too; a restarted stub creates them again in `initialize`).
    pub fn stub_gone(&self, conn: &Conn) {
        let handles: Vec<u64> = conn.metric_handles.lock().drain().collect();
        if let Some(metrics) = self.api.as_ref().and_then(|a| a.custom_metrics()) {
            for h in handles {
                metrics.release(h);
            }
        }
    }
}

/// The load API's options from `pb_utils.load_model(name, config, files)`; file names keep Triton's
/// `file:` prefix, contents arrive base64-encoded.
fn load_options(args: &Map<String, Value>) -> Result<LoadOptions> {
    let config = args.get("config").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let mut files = Vec::new();
    if let Some(Value::Object(m)) = args.get("files") {
        for (k, v) in m {
            let path = k.strip_prefix("file:").ok_or_else(|| {
                Error::invalid(format!("file '{k}' must be named 'file:<version>/<name>', as Triton's load API wants"))
            })?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or_default())
                .map_err(|e| Error::invalid(format!("file '{k}' is not valid base64: {e}")))?;
            files.push((path.to_string(), data));
        }
    }
    if !files.is_empty() && config.is_none() {
        return Err(Error::invalid("load_model: files need a config"));
    }
    Ok(LoadOptions { config_json: config, files })
}

/// A BLS request as the server takes it: the correlation id, sequence flags and timeout become the
/// request parameters Triton reserves for them.
fn bls_request(req: &BlsRequest, inputs: Vec<Tensor>, callers: CallChain, trace: Option<TraceLink>) -> InferRequest {
    let mut parameters: Parameters = ipc::params_from_json(&req.params);
    let sequence = match &req.corr {
        Value::Number(n) => n.as_u64().filter(|&v| v != 0).map(SequenceId::U64),
        Value::String(s) if !s.is_empty() => Some(SequenceId::Str(s.clone())),
        _ => None,
    };
    crate::model_api::set_control_parameters(&mut parameters, sequence, req.flags, req.timeout);
    InferRequest {
        model_name: req.model.clone(),
        model_version: (req.version >= 0).then_some(req.version),
        id: req.request_id.clone(),
        inputs,
        outputs: req.outputs.iter().map(|n| RequestedOutput { name: n.clone(), ..Default::default() }).collect(),
        parameters,
        callers,
        trace,
    }
}

/// Sends one response to a BLS request; its tensors go into the server's shared-memory area.
/// `main`: the answer goes on the main socket (see [`ipc::BlsRequest::main`]).
pub fn send_bls_response(conn: &Conn, id: u64, main: bool, result: Result<(Vec<Tensor>, Parameters)>, is_final: bool) {
    let mut payload = Vec::new();
    let mut payload_len = 0;
    let resp = result.and_then(|(outputs, params)| {
        let out = conn.encode_tensors(&outputs, &mut payload, &mut payload_len)?;
        Ok(json!({"out": out, "params": ipc::params_to_json(&params)}))
    });
    let resp = resp.unwrap_or_else(|e| json!({"err": {"m": e.message, "c": ipc::code_from_error(&e)}}));
    let msg = json!({"type": "bls_resp", "id": id, "final": is_final, "resp": resp});
    let parts: Vec<&[u8]> = payload.iter().map(|b| b.as_ref()).collect();
    if let Err(e) = conn.send_on(main, &msg, &parts) {
        tracing::debug!("{}", e.message);
    }
}

/// Ends a decoupled BLS request without a response.
fn send_bls_final(conn: &Conn, id: u64, main: bool) {
    if let Err(e) = conn.send_on(main, &json!({"type": "bls_resp", "id": id, "final": true}), &[]) {
        tracing::debug!("{}", e.message);
    }
}

/// Sends the answer to a call, if it wants one.
pub fn reply(conn: &Conn, id: Option<u64>, result: Result<Value>) {
    let Some(id) = id else {
        if let Err(e) = result {
            tracing::warn!("{}: {}", conn.label, e.message);
        }
        return;
    };
    let msg = match result {
        Ok(v) => json!({"type": "reply", "id": id, "value": v}),
        Err(e) => json!({"type": "reply", "id": id, "error": e.message}),
    };
    if let Err(e) = conn.send(&msg, &[]) {
        tracing::debug!("{}", e.message);
    }
}

/// Answers a BLS request with an error response.
pub fn answer_bls_error(conn: &Conn, id: u64, main: bool, e: &Error) {
    send_bls_response(conn, id, main, Err(e.clone()), true);
}
