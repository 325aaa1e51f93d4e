//! HTTP/REST front-end (axum): KServe v2 plus Triton's extensions (binary tensor data, classification,
//! model repository, configuration, statistics, trace, logging, system and CUDA shared memory, generate).

mod deepstack;
mod generate;
mod openai;
mod shm_api;

use crate::core::server::parse_version;
use crate::core::trace::{Activity, SettingValue, Trace, TraceSettings, TraceUpdate};
use crate::core::Server;
use crate::error::{Error, ErrorKind, Result};
use crate::kserve;
use crate::logging::{LogControl, LogUpdate};
use crate::model_api::types::DataType;
use crate::model_api::LoadOptions;
use crate::model_config::pbtxt::config_to_json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// What the handlers share.
#[derive(Clone)]
pub struct HttpState {
    pub server: Server,
    pub log: LogControl,
    /// Largest accepted body, after decompression.
    pub max_body: usize,
    /// `--http-restricted-api`.
    pub restricted: crate::frontend::restrict::Restrictions,
    /// `--deepstack-detection-model`: the model `/v1/vision/detection` runs.
    pub deepstack_detection_model: Option<String>,
    /// `--http-header-forward-pattern`: headers whose names match become request parameters.
    pub header_forward: Option<regex::Regex>,
}

const HEADER_LEN: &str = "inference-header-content-length";

/// Turns a core error into `{"error": ...}` with the status its kind maps to.
fn error_response(e: &Error) -> Response {
    error_answer(e, kserve::error_body(&e.message))
}

/// Answers `body`, an error body from [`kserve::error_body`], with the status `e`'s kind maps to.
fn error_answer(e: &Error, body: serde_json::Map<String, Value>) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(Value::Object(body))).into_response();
    if e.kind == ErrorKind::PayloadTooLarge {
        // The rest of an oversized body is never read, so the connection cannot carry another request.
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

struct ApiError(Error);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(&self.0)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

type ApiResult = std::result::Result<Response, ApiError>;

fn json_ok(v: Value) -> ApiResult {
    Ok(axum::Json(v).into_response())
}

pub fn router(state: HttpState) -> Router {
    let state = Arc::new(state);
    let router = Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/stats", get(stats_all))
        .route("/v2/models/{name}", get(model_metadata))
        .route("/v2/models/{name}/versions/{version}", get(model_metadata_v))
        .route("/v2/models/{name}/ready", get(model_ready))
        .route("/v2/models/{name}/versions/{version}/ready", get(model_ready_v))
        .route("/v2/models/{name}/config", get(model_config))
        .route("/v2/models/{name}/versions/{version}/config", get(model_config_v))
        .route("/v2/models/{name}/stats", get(model_stats))
        .route("/v2/models/{name}/versions/{version}/stats", get(model_stats_v))
        .route("/v2/models/{name}/infer", post(infer))
        .route("/v2/models/{name}/versions/{version}/infer", post(infer_v))
        .route("/v2/repository/index", post(repo_index))
        .route("/v2/repository/models/{name}/load", post(repo_load))
        .route("/v2/repository/models/{name}/unload", post(repo_unload))
        .route("/v2/logging", get(log_get).post(log_post))
        .route("/v2/trace/setting", get(trace_get).post(trace_post))
        .route("/v2/models/{name}/trace/setting", get(trace_get_model).post(trace_post_model))
        .route("/v1/vision/detection", deepstack::detection(state.max_body))
        .route("/v1/vision/custom/{model}", deepstack::custom(state.max_body))
        .merge(openai::router(state.clone()));
    let router =
        generate::routes(shm_api::routes(router)).fallback(not_found).method_not_allowed_fallback(method_not_allowed);
    let router = if state.restricted.is_empty() {
        router
    } else {
        router.layer(axum::middleware::from_fn_with_state(state.clone(), restricted))
    };
    router.with_state(state)
}

/// `--http-restricted-api`: a request to a restricted group without its header gets 403 with
/// tritonserver's message.
async fn restricted(State(s): St, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if let Some(api) = crate::frontend::restrict::http_api(req.uri().path()) {
        let headers = req.headers();
        if let Err(key) = s.restricted.check(api, |k| headers.get(k).and_then(|v| v.to_str().ok())) {
            let e = Error::new(ErrorKind::PermissionDenied, crate::frontend::restrict::http_message(key));
            let openai = openai::owns(req.uri().path());
            let mut r = discard_body(&s, req.into_body(), e.clone()).await;
            if openai {
                // The same status and headers, the body in OpenAI's form.
                *r.body_mut() = openai::error_response(e.into()).into_body();
            }
            return r;
        }
    }
    next.run(req).await
}

type St = State<Arc<HttpState>>;

/// Reads and discards a request body we answer without using, so the connection stays usable for the
/// next request; answers `Connection: close` when the body is too large to drain.
async fn discard_body(s: &HttpState, body: Body, e: Error) -> Response {
    let drained = axum::body::to_bytes(body, s.max_body).await.is_ok();
    let mut r = error_response(&e);
    if !drained {
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

async fn not_found(State(s): St, body: Body) -> Response {
    discard_body(&s, body, Error::not_found("no such endpoint")).await
}

async fn method_not_allowed(State(s): St, body: Body) -> Response {
    let mut r = discard_body(&s, body, Error::invalid("method not allowed for this endpoint")).await;
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}

async fn live(State(s): St) -> StatusCode {
    if s.server.is_live() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn ready(State(s): St) -> StatusCode {
    if s.server.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn server_metadata(State(s): St) -> ApiResult {
    let m = s.server.metadata();
    json_ok(json!({ "name": m.name, "version": m.version, "extensions": m.extensions }))
}

fn metadata_json(s: &HttpState, name: &str, version: &str) -> ApiResult {
    let m = s.server.model_metadata(name, version)?;
    let tensors = |ts: &[crate::core::server::TensorMetadata]| -> Vec<Value> {
        ts.iter().map(|t| json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape })).collect()
    };
    json_ok(json!({
        "name": m.name,
        "versions": m.versions,
        "platform": m.platform,
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    }))
}

async fn model_metadata(State(s): St, Path(name): Path<String>) -> ApiResult {
    metadata_json(&s, &name, "")
}

async fn model_metadata_v(State(s): St, Path((name, version)): Path<(String, String)>) -> ApiResult {
    metadata_json(&s, &name, &version)
}

async fn ready_status(s: &HttpState, name: &str, version: &str) -> Response {
    match s.server.model_ready(name, version).await {
        Ok(true) => StatusCode::OK.into_response(),
        Ok(false) => error_response(&Error::unavailable(format!("model '{name}' is not ready"))),
        Err(e) => error_response(&e),
    }
}

async fn model_ready(State(s): St, Path(name): Path<String>) -> Response {
    ready_status(&s, &name, "").await
}

async fn model_ready_v(State(s): St, Path((name, version)): Path<(String, String)>) -> Response {
    ready_status(&s, &name, &version).await
}

async fn model_config(State(s): St, Path(name): Path<String>) -> ApiResult {
    json_ok(config_to_json(&*s.server.model_config(&name, "")?))
}

async fn model_config_v(State(s): St, Path((name, version)): Path<(String, String)>) -> ApiResult {
    json_ok(config_to_json(&*s.server.model_config(&name, &version)?))
}

fn stats_json(s: &HttpState, name: Option<&str>, version: &str) -> ApiResult {
    let d = |x: crate::core::stats::DurationSnapshot| json!({ "count": x.count, "ns": x.ns });
    let stats: Vec<Value> = s
        .server
        .statistics(name, version)?
        .into_iter()
        .map(|m| {
            let st = m.stats;
            json!({
                "name": m.name,
                "version": m.version.to_string(),
                "last_inference": st.last_inference,
                "inference_count": st.inference_count,
                "execution_count": st.execution_count,
                "inference_stats": {
                    "success": d(st.success),
                    "fail": d(st.fail),
                    "queue": d(st.queue),
                    "compute_input": d(st.compute_input),
                    "compute_infer": d(st.compute_infer),
                    "compute_output": d(st.compute_output),
                    "cache_hit": d(st.cache_hit),
                    "cache_miss": d(st.cache_miss),
                },
                "response_stats": st.responses.iter().enumerate().map(|(i, r)| (i.to_string(), json!({
                    "compute_infer": d(r.compute_infer),
                    "compute_output": d(r.compute_output),
                    "success": d(r.success),
                    "fail": d(r.fail),
                    "empty_response": d(r.empty_response),
                    "cancel": d(r.cancel),
                }))).collect::<serde_json::Map<_, _>>(),
                "batch_stats": st.batches.iter().map(|b| json!({
                    "batch_size": b.batch_size,
                    "compute_input": d(b.compute_input),
                    "compute_infer": d(b.compute_infer),
                    "compute_output": d(b.compute_output),
                })).collect::<Vec<_>>(),
                "memory_usage": st.memory.iter().map(|(kind, id, bytes)| json!({
                    "type": kind.as_str(),
                    "id": id,
                    "byte_size": bytes,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json_ok(json!({ "model_stats": stats }))
}

async fn stats_all(State(s): St) -> ApiResult {
    stats_json(&s, None, "")
}

async fn model_stats(State(s): St, Path(name): Path<String>) -> ApiResult {
    stats_json(&s, Some(&name), "")
}

async fn model_stats_v(State(s): St, Path((name, version)): Path<(String, String)>) -> ApiResult {
    stats_json(&s, Some(&name), &version)
}

/// Why a request body could not be read, as the client's error.
fn body_error(s: &HttpState, inner: axum::BoxError) -> Error {
    if inner.is::<http_body_util::LengthLimitError>() {
        Error::new(ErrorKind::PayloadTooLarge, format!("request body exceeds the {} byte limit", s.max_body))
    } else if let Some(stalled) = inner.downcast_ref::<crate::frontend::conn::BodyStalled>() {
        Error::invalid(format!("cannot read the request body: {stalled} (--http-header-timeout-secs)"))
    } else {
        Error::invalid(format!("cannot read the request body: {inner}"))
    }
}

/// The request's `Content-Length`, when it has a valid one.
fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok())
}

/// Bodies at least this large with binary tensor data are read into a buffer placed so that the data
/// after the JSON header starts 64-byte aligned (below it, a copy costs less than the placement).
const ALIGNED_BODY_MIN: usize = 64 * 1024;

/// An inference request's body. A large one with binary data (`Inference-Header-Content-Length`, a
/// declared `Content-Length`, no content encoding) is copied from the connection's chunks once, into a
/// buffer where the binary part starts 64-byte aligned, so ONNX Runtime can take its tensors where
/// they lie instead of copying them again; any other body is read as [`read_body`] reads it.
async fn read_infer_body(s: &HttpState, headers: &HeaderMap, body: Body, header_len: Option<usize>) -> Result<Bytes> {
    use http_body_util::BodyExt;
    let declared = declared_length(headers);
    let (Some(len), Some(json_len)) = (declared, header_len) else { return read_body(s, headers, body).await };
    if len < ALIGNED_BODY_MIN || len > s.max_body || json_len > len || headers.contains_key(header::CONTENT_ENCODING) {
        return read_body(s, headers, body).await;
    }
    // Reused from request to request (see memory::recycled).
    let (mut buf, pad) = crate::memory::recycled::placed(len, json_len, 64);
    let mut body = http_body_util::Limited::new(body, s.max_body);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| body_error(s, e))?;
        if let Ok(chunk) = frame.into_data() {
            if buf.len() - pad + chunk.len() > len {
                return Err(Error::invalid(format!("the request body is longer than its Content-Length {len}")));
            }
            buf.extend_from_slice(&chunk);
        }
    }
    Ok(crate::memory::recycled::into_bytes(buf).slice(pad..))
}

/// Reads the whole body within the size limit, undoing gzip/deflate content encoding.
async fn read_body(s: &HttpState, headers: &HeaderMap, body: Body) -> Result<Bytes> {
    let too_large =
        || Error::new(ErrorKind::PayloadTooLarge, format!("request body exceeds the {} byte limit", s.max_body));
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > s.max_body) {
        return Err(too_large());
    }
    let raw = axum::body::to_bytes(body, s.max_body).await.map_err(|e| body_error(s, e.into_inner()))?;
    let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).map(str::trim).unwrap_or("");
    let mut out = Vec::new();
    let limit = s.max_body as u64 + 1;
    let res = match encoding.to_ascii_lowercase().as_str() {
        "" | "identity" => return Ok(raw),
        "gzip" | "x-gzip" => flate2::read::GzDecoder::new(&raw[..]).take(limit).read_to_end(&mut out),
        "deflate" => flate2::read::ZlibDecoder::new(&raw[..]).take(limit).read_to_end(&mut out),
        other => return Err(Error::invalid(format!("unsupported Content-Encoding '{other}' (use gzip or deflate)"))),
    };
    res.map_err(|e| Error::invalid(format!("cannot decompress the {encoding} request body: {e}")))?;
    if out.len() > s.max_body {
        return Err(too_large());
    }
    Ok(Bytes::from(out))
}

async fn infer(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> Response {
    traced_infer(&s, &name, "", &headers, body).await
}

async fn infer_v(
    State(s): St,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    traced_infer(&s, &name, &version, &headers, body).await
}

/// An inference, traced when the tracer samples it: HTTP_RECV_* around reading the body, the core's
/// timestamps, INFER_RESPONSE_COMPLETE, then HTTP_SEND_START here and HTTP_SEND_END once the body is sent.
#[tracing::instrument(name = "http_infer", level = "debug", skip_all)]
async fn traced_infer(s: &HttpState, name: &str, version: &str, headers: &HeaderMap, body: Body) -> Response {
    // One atomic load while tracing is off; only a request that could be traced notes its arrival.
    let recv_start = s.server.tracer().enabled().then(Instant::now);
    let mut trace = None;
    let r =
        do_infer(s, name, version, headers, body, recv_start, &mut trace).await.unwrap_or_else(|e| error_response(&e));
    match trace {
        None => r,
        Some(mut t) => {
            t.stamp_now(Activity::HttpSendStart);
            let (parts, body) = r.into_parts();
            Response::from_parts(parts, Body::new(TracedBody { inner: body, trace: Some(t) }))
        }
    }
}

/// A response body that finishes its request's trace when hyper drops it after sending the last byte:
/// HTTP_SEND_END is stamped and the trace is handed to the file writer.
struct TracedBody {
    inner: Body,
    trace: Option<Trace>,
}

impl http_body::Body for TracedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<http_body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TracedBody {
    fn drop(&mut self) {
        if let Some(mut t) = self.trace.take() {
            t.stamp_now(Activity::HttpSendEnd);
        }
    }
}

async fn do_infer(
    s: &HttpState,
    name: &str,
    version: &str,
    headers: &HeaderMap,
    body: Body,
    recv_start: Option<Instant>,
    trace: &mut Option<Trace>,
) -> Result<Response> {
    let header_len = headers.get(HEADER_LEN).map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<usize>().ok()));
    // The body is read before anything can fail, so an error answer leaves the connection reusable.
    let body = read_infer_body(s, headers, body, header_len.flatten()).await?;
    let recv_end = recv_start.map(|_| Instant::now());
    let version = parse_version(version)?;
    let header_len = header_len
        .map(|v| v.ok_or_else(|| Error::invalid("Inference-Header-Content-Length must be a non-negative integer")))
        .transpose()?;
    let mut decoded = if header_len == Some(0) {
        raw_request(s, name, version, body)?
    } else {
        kserve::decode_request(body, header_len, name, version)?
    };
    crate::frontend::forward::forward(
        s.header_forward.as_ref(),
        headers.iter().map(|(k, v)| (k.as_str(), v.to_str().ok())),
        &mut decoded.request.parameters,
    );
    if s.server.is_decoupled(name, version) {
        // Triton's status and words for it.
        return Err(Error::unsupported("HTTP end point doesn't support models with decoupled transaction policy"));
    }
    let binary = decoded.binary_outputs();
    if let (Some(start), Some(end)) = (recv_start, recv_end) {
        let context = headers.get("traceparent").and_then(|v| v.to_str().ok());
        *trace = s.server.tracer().sample_in_context(name, &decoded.request.id, context).map(|mut t| {
            t.stamp(Activity::HttpRecvStart, start);
            t.stamp(Activity::HttpRecvEnd, end);
            t
        });
    }
    let resp = s.server.infer_traced(decoded.request, trace.as_mut()).await?;
    if let Some(t) = trace.as_mut() {
        t.stamp_now(Activity::InferResponseComplete);
    }
    let enc = kserve::encode_response(&resp, |n| binary.is_binary(n))?;
    let mut r = Response::new(Body::from(enc.body));
    match enc.header_len {
        Some(n) => {
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            r.headers_mut().insert(HEADER_LEN, HeaderValue::from(n));
        }
        None => {
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
    }
    Ok(r)
}

/// A raw binary request: the body is the model's single input.
fn raw_request(s: &HttpState, name: &str, version: Option<i64>, body: Bytes) -> Result<kserve::DecodedRequest> {
    let v = version.map(|v| v.to_string()).unwrap_or_default();
    let cfg = s.server.model_config(name, &v)?;
    let [input] = cfg.input.as_slice() else {
        return Err(Error::invalid(format!(
            "a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly one input; '{name}' has {}",
            cfg.input.len()
        )));
    };
    let dt = DataType::from_config(input.data_type).ok_or_else(|| Error::internal("input without datatype"))?;
    let tensor = kserve::raw_input(body, &input.name, dt, &input.dims, cfg.max_batch_size > 0)?;
    Ok(kserve::DecodedRequest {
        request: crate::model_api::types::InferRequest {
            model_name: name.to_string(),
            model_version: version,
            inputs: vec![tensor],
            ..Default::default()
        },
        binary_default: false,
    })
}

fn parse_json_body(body: &Bytes) -> Result<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| Error::invalid(format!("failed to parse the request JSON: {e}")))?;
    if !v.is_object() {
        return Err(Error::invalid("the request body must be a JSON object"));
    }
    Ok(v)
}

async fn repo_index(State(s): St, headers: HeaderMap, body: Body) -> ApiResult {
    let body = read_body(&s, &headers, body).await?;
    let req = parse_json_body(&body)?;
    let ready_only = match req.get("ready") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Error::invalid("'ready' must be a bool").into()),
    };
    let rows: Vec<Value> = s
        .server
        .repository_index(ready_only)
        .into_iter()
        .map(|e| {
            let mut row = serde_json::Map::new();
            row.insert("name".into(), json!(e.name));
            if let Some(v) = e.version {
                row.insert("version".into(), json!(v.to_string()));
            }
            if let Some(st) = e.state {
                row.insert("state".into(), json!(st.as_str()));
            }
            // Triton leaves "reason" out when there is none.
            if !e.reason.is_empty() {
                row.insert("reason".into(), json!(e.reason));
            }
            Value::Object(row)
        })
        .collect();
    json_ok(Value::Array(rows))
}

/// A load request's parameters, each still raw JSON borrowed from the body: a huge `config` is refused by
/// its length before it is unescaped or copied.
type RawParameters<'a> = std::collections::BTreeMap<std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue>;

/// Reads a load request's parameters (`config`, `file:<path>`); other parameters are ignored, as in Triton.
fn load_options(body: &[u8]) -> Result<LoadOptions> {
    #[derive(serde::Deserialize)]
    struct LoadBody<'a> {
        #[serde(borrow, default)]
        parameters: Option<&'a serde_json::value::RawValue>,
    }
    let mut opts = LoadOptions::default();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(opts);
    }
    let parsed: LoadBody = serde_json::from_slice(body).map_err(|e| {
        Error::invalid(format!("failed to parse the request JSON (it must be an object with 'parameters'): {e}"))
    })?;
    let Some(raw) = parsed.parameters.filter(|r| r.get() != "null") else {
        return Ok(opts);
    };
    let params: RawParameters =
        serde_json::from_str(raw.get()).map_err(|_| Error::invalid("'parameters' must be a JSON object"))?;
    for (k, v) in params {
        if k == "config" {
            // Escapes at most double a configuration's JSON text; the exact limit is checked on the text.
            if v.get().len() > 2 * crate::core::repository::limits::MAX_CONFIG_BYTES {
                return Err(Error::invalid(format!(
                    "the 'config' parameter is {} bytes, over the limit of {} bytes for a model configuration",
                    v.get().len(),
                    crate::core::repository::limits::MAX_CONFIG_BYTES
                )));
            }
            let cfg: String = serde_json::from_str(v.get())
                .map_err(|_| Error::invalid("the 'config' parameter must be a string holding JSON"))?;
            opts.config_json = Some(cfg);
        } else if let Some(path) = k.strip_prefix("file:") {
            let b64: std::borrow::Cow<str> = serde_json::from_str(v.get())
                .map_err(|_| Error::invalid(format!("parameter '{k}' must be a base64 string")))?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| Error::invalid(format!("parameter '{k}' is not valid base64: {e}")))?;
            opts.files.push((path.to_string(), data));
        }
    }
    Ok(opts)
}

async fn repo_load(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    let body = read_body(&s, &headers, body).await?;
    let opts = load_options(&body).map_err(|e| e.context(format!("failed to load '{name}'")))?;
    drop(body);
    s.server.load_model(&name, opts).await?;
    Ok(StatusCode::OK.into_response())
}

async fn repo_unload(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    let body = read_body(&s, &headers, body).await?;
    let parsed = parse_json_body(&body)?;
    // As tritonserver: `{"parameters": {"unload_dependents": true}}` also unloads the ensembles using it.
    let dependents = match parsed.get("parameters").and_then(|p| p.get("unload_dependents")) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Error::invalid("the 'unload_dependents' parameter must be a boolean").into()),
    };
    s.server.unload_model_with(&name, dependents).await?;
    Ok(StatusCode::OK.into_response())
}

async fn log_get(State(s): St) -> ApiResult {
    json_ok(serde_json::to_value(s.log.get()).map_err(|e| Error::internal(e.to_string()))?)
}

async fn log_post(State(s): St, headers: HeaderMap, body: Body) -> ApiResult {
    let body = read_body(&s, &headers, body).await?;
    let update: LogUpdate =
        serde_json::from_slice(&body).map_err(|e| Error::invalid(format!("invalid logging settings: {e}")))?;
    let settings = s.log.update(update)?;
    json_ok(serde_json::to_value(settings).map_err(|e| Error::internal(e.to_string()))?)
}

/// The trace settings as tritonserver's HTTP API shows them: the level a list, every other value a
/// string, in tritonserver's key order (written by hand, because a JSON map would sort the keys).
fn trace_response(t: &TraceSettings) -> ApiResult {
    let mut body = String::from("{");
    for (key, values) in t.to_wire() {
        if body.len() > 1 {
            body.push(',');
        }
        let value = match values.as_slice() {
            [one] if key != "trace_level" => Value::from(one.as_str()),
            _ => Value::from(values),
        };
        body.push_str(&format!("{}:{value}", Value::from(key)));
    }
    body.push('}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Reads a trace settings update: each value a string, a list of strings, or null to clear it.
fn trace_update_from_json(body: &Bytes) -> Result<TraceUpdate> {
    let req = parse_json_body(body)?;
    let Value::Object(map) = req else { return Err(Error::invalid("the request body must be a JSON object")) };
    let mut settings = Vec::with_capacity(map.len());
    for (k, v) in map {
        let wrong = || Error::invalid(format!("trace setting '{k}' must be a string, a list of strings or null"));
        let value = match &v {
            Value::Null => SettingValue::Clear,
            Value::String(s) => SettingValue::Set(vec![s.clone()]),
            Value::Array(items) => SettingValue::Set(
                items.iter().map(|i| i.as_str().map(str::to_string).ok_or_else(wrong)).collect::<Result<_>>()?,
            ),
            _ => return Err(wrong()),
        };
        settings.push((k, value));
    }
    TraceUpdate::parse(settings)
}

async fn trace_get(State(s): St) -> ApiResult {
    trace_response(&s.server.trace_settings(None)?)
}

async fn trace_get_model(State(s): St, Path(name): Path<String>) -> ApiResult {
    trace_response(&s.server.trace_settings(Some(&name))?)
}

async fn trace_post(State(s): St, headers: HeaderMap, body: Body) -> ApiResult {
    let body = read_body(&s, &headers, body).await?;
    trace_response(&s.server.update_trace_settings(None, &trace_update_from_json(&body)?)?)
}

async fn trace_post_model(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    let body = read_body(&s, &headers, body).await?;
    trace_response(&s.server.update_trace_settings(Some(&name), &trace_update_from_json(&body)?)?)
}

#[cfg(test)]
mod tests;
