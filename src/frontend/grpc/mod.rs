//! gRPC front-end (tonic): Triton's `inference.GRPCInferenceService` and `grpc.health.v1.Health`.
//!
//! Every method mirrors its HTTP counterpart (src/frontend/http): same core calls, same errors, with
//! `Error::grpc_code` as the status code.

mod align;
pub mod convert;
mod layers;

use crate::core::stats::DurationSnapshot;
use crate::core::trace::{Activity, SettingValue, Trace, TraceSettings, TraceUpdate};
use crate::core::Server;
use crate::error::Error;
use crate::frontend::conn::{GuardedListener, TrackLayer};
use crate::logging::{LogControl, LogSettings, LogUpdate};
use crate::model_api::types::StreamResponse;
use crate::model_api::LoadOptions;
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use crate::tensor::Parameters;
use futures_util::stream::BoxStream;
use futures_util::FutureExt as _;
use layers::{compress_replies_to_compressed_calls, is_too_large, too_large_is_resource_exhausted, Deadline, Restrict};
use prost::Message as _;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// The full name of the inference service, as gRPC health checks may name it.
pub const SERVICE_NAME: &str = "inference.GRPCInferenceService";

/// What `grpc.health.v1.Health` knows: the whole server ("") and the inference service.
const HEALTH_NAMES: [&str; 2] = ["", SERVICE_NAME];

/// What the gRPC services share.
#[derive(Clone)]
pub struct GrpcState {
    pub server: Server,
    pub log: LogControl,
    /// Largest message accepted or sent, in bytes.
    pub max_message_size: usize,
    /// `--grpc-restricted-protocol`.
    pub restricted: crate::frontend::restrict::Restrictions,
    /// `--grpc-header-forward-pattern`: metadata entries whose keys match become request parameters.
    pub header_forward: Option<regex::Regex>,
}

/// The metadata entries of a call that `--grpc-header-forward-pattern` forwards, as parameters.
fn forwarded(pattern: Option<&regex::Regex>, metadata: &tonic::metadata::MetadataMap) -> Parameters {
    let mut params = Parameters::new();
    let entries = metadata.iter().filter_map(|e| match e {
        tonic::metadata::KeyAndValueRef::Ascii(k, v) => Some((k.as_str(), v.to_str().ok())),
        tonic::metadata::KeyAndValueRef::Binary(..) => None,
    });
    crate::frontend::forward::forward(pattern, entries, &mut params);
    params
}

/// Turns a core error into a gRPC status with the code its kind maps to.
pub fn status(e: Error) -> Status {
    Status::new(Code::from_i32(e.grpc_code()), e.message)
}

type GrpcResult<T> = std::result::Result<Response<T>, Status>;

fn ok<T>(v: T) -> GrpcResult<T> {
    Ok(Response::new(v))
}

/// A region name from a shared-memory request: empty means every region.
fn named(name: &str) -> Option<&str> {
    (!name.is_empty()).then_some(name)
}

/// The HTTP/2 flow-control window of each call (bytes it may send before the server acknowledges).
const HTTP2_STREAM_WINDOW: u32 = 8 << 20;
/// The window shared by all calls of a connection.
const HTTP2_CONNECTION_WINDOW: u32 = 32 << 20;
/// Largest HTTP/2 frame the server accepts (the protocol allows up to 16 MiB - 1).
const HTTP2_MAX_FRAME: u32 = 1 << 20;

/// HTTP/2 connection settings (tritonserver's `--grpc-keepalive-*` and `--grpc-max-connection-age*`).
#[derive(Clone, Debug, Default)]
pub struct Http2Options {
    /// Interval between keepalive pings; `None`: no pings.
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unacknowledged before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Age after which a connection gets GOAWAY. The grace after it is enforced by the guarded listener:
    /// tonic, given a grace, would close the connection at its end without any GOAWAY.
    pub max_connection_age: Option<Duration>,
    /// `--grpc-infer-response-compression-level` other than none: responses are compressed in an
    /// encoding the client accepts, whether or not its call was compressed.
    pub compress_responses: bool,
}

/// Serves both services on `listener` until `shutdown` resolves, then lets calls in flight finish.
pub async fn serve(
    listener: GuardedListener,
    state: GrpcState,
    http2: Http2Options,
    tls: Option<crate::frontend::tls::Pem>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::result::Result<(), tonic::transport::Error> {
    let limit = state.max_message_size;
    let compress = http2.compress_responses;
    let restricted = std::sync::Arc::new(state.restricted.clone());
    let shutdown = shutdown.shared();
    let (reporter, health) = tonic_health::server::health_reporter();
    report_readiness(reporter, state.server.readiness(), shutdown.clone()).await;
    let server = state.server.clone();
    use tonic::codec::CompressionEncoding::{Deflate, Gzip};
    // As tritonserver: gzip and deflate requests are accepted, and their responses are compressed the
    // same way (tritonclient's `compression_algorithm`; see `compress_replies_to_compressed_calls`).
    // The size limit applies after decompression.
    let inference = GrpcInferenceServiceServer::new(InferenceService { state })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit)
        .accept_compressed(Gzip)
        .accept_compressed(Deflate)
        .send_compressed(Gzip)
        .send_compressed(Deflate);
    // Runs when a call's headers arrive, before its message is read: a trace's GRPC_WAITREAD_START.
    let inference = tonic::service::interceptor::InterceptedService::new(inference, move |mut req: Request<()>| {
        if server.tracer().enabled() {
            let start = req.extensions().get::<align::ArrivedAt>().map_or_else(Instant::now, |a| a.0);
            req.extensions_mut().insert(ReadStart(start));
        }
        Ok(req)
    });
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(http2.keepalive_interval)
        .http2_keepalive_timeout(Some(http2.keepalive_timeout))
        // HTTP/2's default 64 KiB windows make every large tensor wait for window updates, one round
        // trip per 64 KiB. Fixed windows sized for several camera frames, and 1 MiB frames, let a 600 KB
        // request arrive in one flight. (Adaptive windows would start again from 64 KiB on every
        // connection.) A window is a permission to send, not memory set aside.
        .initial_stream_window_size(Some(HTTP2_STREAM_WINDOW))
        .initial_connection_window_size(Some(HTTP2_CONNECTION_WINDOW))
        .max_frame_size(Some(HTTP2_MAX_FRAME));
    if let Some(age) = http2.max_connection_age {
        builder = builder.max_connection_age(age);
    }
    if let Some(crate::frontend::tls::Pem { cert, key, client_root: root }) = tls {
        let mut config =
            tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(cert, key));
        if let Some(root) = root {
            config = config.client_ca_root(tonic::transport::Certificate::from_pem(root));
        }
        builder = builder.tls_config(config)?;
    }
    builder
        // Outermost, so a call counts as in flight on its connection until its last frame is sent.
        .layer(TrackLayer)
        .layer(tower::layer::layer_fn(move |inner| Restrict { inner, rules: restricted.clone() }))
        .layer(tower::util::MapResponseLayer::new(too_large_is_resource_exhausted))
        .layer(tower::layer::layer_fn(|inner| Deadline { inner }))
        .layer(tower::util::MapRequestLayer::new(move |req: axum::http::Request<_>| {
            // As tritonserver, the level applies to infer responses only.
            let infer = req.uri().path().ends_with("/ModelInfer") || req.uri().path().ends_with("/ModelStreamInfer");
            if compress && infer {
                req
            } else {
                compress_replies_to_compressed_calls(req)
            }
        }))
        // Innermost: large ModelInfer messages read with their tensor aligned (see align.rs).
        .layer(tower::layer::layer_fn(move |inner| align::AlignInfer { inner, limit }))
        .add_service(inference)
        .add_service(health)
        // The guarded listener caps connections, times out slow ones and backs off on accept errors;
        // it also sets TCP_NODELAY.
        .serve_with_incoming_shutdown(listener.into_stream(), shutdown)
        .await
}

/// `grpc.health.v1.Health` (tonic-health) tells readiness: both [`HEALTH_NAMES`] are SERVING while the
/// server is ready and NOT_SERVING otherwise; other names are NOT_FOUND. Sets the current status, then
/// a task follows the changes. At `shutdown` it reports NOT_SERVING and removes the names, which ends
/// every `Watch` call: an open one would otherwise hold the graceful shutdown for
/// `--exit-timeout-secs`.
async fn report_readiness(
    mut reporter: HealthReporter,
    mut readiness: BoxStream<'static, bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    async fn set(reporter: &HealthReporter, ready: bool) {
        let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
        for name in HEALTH_NAMES {
            reporter.set_service_status(name, status).await;
        }
    }
    let mut last = readiness.next().await.unwrap_or(false);
    set(&reporter, last).await;
    tokio::spawn(async move {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                next = readiness.next() => match next {
                    Some(ready) => {
                        last = ready;
                        set(&reporter, ready).await;
                    }
                    None => break,
                },
                () = &mut shutdown => break,
            }
        }
        if last {
            set(&reporter, false).await;
        }
        for name in HEALTH_NAMES {
            reporter.clear_service_status(name).await;
        }
    });
}

/// A caller's W3C trace context (`traceparent` metadata), which OpenTelemetry traces continue.
fn traceparent(metadata: &tonic::metadata::MetadataMap) -> Option<Arc<str>> {
    metadata.get("traceparent").and_then(|v| v.to_str().ok()).map(Arc::from)
}

/// When a call's headers arrived; put in the request's extensions only while tracing is on.
#[derive(Clone, Copy)]
struct ReadStart(Instant);

/// Samples a request for tracing and gives it the time its message was awaited and the time it was in.
fn start_trace(
    server: &Server,
    req: &crate::model_api::types::InferRequest,
    read: (Instant, Instant),
    traceparent: Option<&str>,
) -> Option<Trace> {
    server.tracer().sample_in_context(&req.model_name, &req.id, traceparent).map(|mut t| {
        t.stamp(Activity::GrpcWaitreadStart, read.0);
        t.stamp(Activity::GrpcWaitreadEnd, read.1);
        t
    })
}

/// Runs a decoded request, traced if sampled; the trace is written when it drops, once the response
/// is encoded (GRPC_SEND_END: handed to tonic, which writes it to the connection).
#[tracing::instrument(name = "grpc_infer", level = "debug", skip_all)]
async fn infer_to_proto(
    server: &Server,
    req: crate::model_api::types::InferRequest,
    mut trace: Option<Trace>,
) -> Result<pb::ModelInferResponse, Error> {
    let resp = server.infer_traced(req, trace.as_mut()).await;
    if let Some(t) = trace.as_mut() {
        t.stamp_now(Activity::InferResponseComplete);
        t.stamp_now(Activity::GrpcSendStart);
    }
    let out = resp.and_then(convert::response_to_proto);
    if let Some(t) = trace.as_mut() {
        t.stamp_now(Activity::GrpcSendEnd);
    }
    out
}

fn trace_settings_to_proto(t: TraceSettings) -> HashMap<String, pb::trace_setting_response::SettingValue> {
    t.to_wire()
        .into_iter()
        .map(|(k, value)| (k.to_string(), pb::trace_setting_response::SettingValue { value }))
        .collect()
}

/// Reads a `TraceSetting` request's settings as the same update `POST /v2/trace/setting` takes; an
/// empty list clears a setting.
fn trace_update_from_proto(
    settings: HashMap<String, pb::trace_setting_request::SettingValue>,
) -> Result<TraceUpdate, Error> {
    TraceUpdate::parse(
        settings
            .into_iter()
            .map(|(k, v)| {
                let v = if v.value.is_empty() { SettingValue::Clear } else { SettingValue::Set(v.value) };
                (k, v)
            })
            .collect(),
    )
}

/// `inference.GRPCInferenceService`.
pub struct InferenceService {
    state: GrpcState,
}

impl InferenceService {
    fn server(&self) -> &Server {
        &self.state.server
    }
}

fn duration(d: DurationSnapshot) -> Option<pb::StatisticDuration> {
    Some(pb::StatisticDuration { count: d.count, ns: d.ns })
}

fn log_settings_to_proto(s: LogSettings) -> HashMap<String, pb::log_settings_response::SettingValue> {
    use pb::log_settings_response::setting_value::ParameterChoice as P;
    let v = |p: P| pb::log_settings_response::SettingValue { parameter_choice: Some(p) };
    HashMap::from([
        ("log_file".to_string(), v(P::StringParam(s.log_file))),
        ("log_info".to_string(), v(P::BoolParam(s.log_info))),
        ("log_warning".to_string(), v(P::BoolParam(s.log_warning))),
        ("log_error".to_string(), v(P::BoolParam(s.log_error))),
        ("log_verbose_level".to_string(), v(P::Uint32Param(s.log_verbose_level))),
        ("log_format".to_string(), v(P::StringParam(s.log_format))),
    ])
}

/// Reads a `LogSettings` request as the same partial update `POST /v2/logging` takes.
fn log_update_from_proto(
    settings: HashMap<String, pb::log_settings_request::SettingValue>,
) -> Result<LogUpdate, Error> {
    use pb::log_settings_request::setting_value::ParameterChoice as P;
    let mut u = LogUpdate::default();
    for (k, v) in settings {
        let wrong = |want: &str| Error::invalid(format!("log setting '{k}' must be a {want}"));
        match (k.as_str(), v.parameter_choice) {
            // A setting without a value leaves it unchanged.
            (_, None) => {}
            ("log_file", Some(P::StringParam(s))) => u.log_file = Some(s),
            ("log_format", Some(P::StringParam(s))) => u.log_format = Some(s),
            ("log_info", Some(P::BoolParam(b))) => u.log_info = Some(b),
            ("log_warning", Some(P::BoolParam(b))) => u.log_warning = Some(b),
            ("log_error", Some(P::BoolParam(b))) => u.log_error = Some(b),
            ("log_verbose_level", Some(P::Uint32Param(n))) => u.log_verbose_level = Some(n),
            ("log_file" | "log_format", Some(_)) => return Err(wrong("string")),
            ("log_info" | "log_warning" | "log_error", Some(_)) => return Err(wrong("bool")),
            ("log_verbose_level", Some(_)) => return Err(wrong("uint32")),
            (other, Some(_)) => return Err(Error::invalid(format!("unknown log setting '{other}'"))),
        }
    }
    Ok(u)
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> GrpcResult<pb::ServerLiveResponse> {
        ok(pb::ServerLiveResponse { live: self.server().is_live() })
    }

    async fn server_ready(&self, _: Request<pb::ServerReadyRequest>) -> GrpcResult<pb::ServerReadyResponse> {
        ok(pb::ServerReadyResponse { ready: self.server().is_ready() })
    }

    async fn model_ready(&self, req: Request<pb::ModelReadyRequest>) -> GrpcResult<pb::ModelReadyResponse> {
        let r = req.into_inner();
        // As in tritonserver's gRPC API, an unknown model is simply not ready.
        let ready = match self.server().model_ready(&r.name, &r.version).await {
            Ok(b) => b,
            Err(e) if e.kind == crate::error::ErrorKind::NotFound => false,
            Err(e) => return Err(status(e)),
        };
        ok(pb::ModelReadyResponse { ready })
    }

    async fn server_metadata(&self, _: Request<pb::ServerMetadataRequest>) -> GrpcResult<pb::ServerMetadataResponse> {
        let m = self.server().metadata();
        ok(pb::ServerMetadataResponse { name: m.name, version: m.version, extensions: m.extensions })
    }

    async fn model_metadata(&self, req: Request<pb::ModelMetadataRequest>) -> GrpcResult<pb::ModelMetadataResponse> {
        let r = req.into_inner();
        let m = self.server().model_metadata(&r.name, &r.version).map_err(status)?;
        let tensors = |ts: Vec<crate::core::server::TensorMetadata>| {
            ts.into_iter()
                .map(|t| pb::model_metadata_response::TensorMetadata {
                    name: t.name,
                    datatype: t.datatype,
                    shape: t.shape,
                })
                .collect()
        };
        ok(pb::ModelMetadataResponse {
            name: m.name,
            versions: m.versions,
            platform: m.platform,
            inputs: tensors(m.inputs),
            outputs: tensors(m.outputs),
        })
    }

    async fn model_infer(&self, req: Request<pb::ModelInferRequest>) -> GrpcResult<pb::ModelInferResponse> {
        // The interceptor's mark is there only while tracing is on; otherwise this is all tracing costs.
        let read = req.extensions().get::<ReadStart>().map(|r| (r.0, Instant::now()));
        let headers = forwarded(self.state.header_forward.as_ref(), req.metadata());
        let context = read.and_then(|_| traceparent(req.metadata()));
        let (_, mut extensions, msg) = req.into_parts();
        let msg = extensions.remove::<align::Predecoded>().map_or(msg, |p| p.0);
        let mut req = convert::request_from_proto(msg).map_err(status)?;
        req.parameters.extend(headers);
        if self.server().is_decoupled(&req.model_name, req.model_version) {
            return Err(status(Error::unsupported(
                "ModelInfer RPC doesn't support models with decoupled transaction policy",
            )));
        }
        let trace = read.and_then(|read| start_trace(self.server(), &req, read, context.as_deref()));
        let resp = infer_to_proto(self.server(), req, trace).await.map_err(status)?;
        if let Some(e) = too_large_to_send(resp.encoded_len(), self.state.max_message_size, &resp.model_name) {
            return Err(status(e));
        }
        ok(resp)
    }

    type ModelStreamInferStream =
        Pin<Box<dyn Stream<Item = std::result::Result<pb::ModelStreamInferResponse, Status>> + Send + 'static>>;

    /// Each request gets one response carrying its id; requests run concurrently, so responses may
    /// come back in another order. A failed request answers with `error_message` and the stream goes on.
    async fn model_stream_infer(
        &self,
        req: Request<Streaming<pb::ModelInferRequest>>,
    ) -> GrpcResult<Self::ModelStreamInferStream> {
        // The stream's metadata is forwarded into each of its requests.
        let headers = Arc::new(forwarded(self.state.header_forward.as_ref(), req.metadata()));
        let context = traceparent(req.metadata());
        let mut inbound = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let server = self.server().clone();
        let limit = self.state.max_message_size;
        tokio::spawn(async move {
            let mut order = SequenceOrder::default();
            loop {
                // A traced message's GRPC_WAITREAD_START is when the stream began waiting for it.
                let wait_start = server.tracer().enabled().then(Instant::now);
                let Some(msg) = inbound.next().await else { break };
                let read = wait_start.map(|t| (t, Instant::now()));
                let msg = match msg {
                    Ok(m) => m,
                    Err(e) => {
                        // The client's side of the stream broke; nothing more will arrive. An oversized
                        // message ends the stream with the code gRPC C++ (and so Triton) uses for it.
                        tracing::debug!("gRPC inference stream ended with an error: {e}");
                        if is_too_large(e.code(), e.message()) {
                            let _ = tx.send(Err(Status::resource_exhausted(e.message().to_string()))).await;
                        }
                        break;
                    }
                };
                let server = server.clone();
                let tx = tx.clone();
                let headers = headers.clone();
                let context = context.clone();
                let (previous, done) = order.enter(&msg);
                tokio::spawn(async move {
                    // Completes when the previous request of this sequence has finished (or is gone).
                    if let Some(previous) = previous {
                        let _ = previous.await;
                    }
                    let id = msg.id.clone();
                    let empty_final = wants_empty_final(&msg);
                    let result = match convert::request_from_proto(msg).map(|mut r| {
                        r.parameters.extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
                        r
                    }) {
                        Ok(r) if server.is_decoupled(&r.model_name, r.model_version) => {
                            stream_decoupled(&server, r, &id, empty_final, limit, &tx).await;
                            return;
                        }
                        Ok(r) => {
                            let trace = read.and_then(|read| start_trace(&server, &r, read, context.as_deref()));
                            tokio::select! {
                                result = infer_to_proto(&server, r, trace) => result,
                                // The client cancelled the stream (or went away): dropping the request
                                // cancels it.
                                () = tx.closed() => return,
                            }
                        }
                        Err(e) => Err(e),
                    };
                    // The next request of the sequence may go now.
                    drop(done);
                    let answer = match result {
                        Ok(resp) => stream_answer(resp, true),
                        Err(e) => stream_error(e, &id),
                    };
                    let _ = tx.send(Ok(within_limit(answer, limit, &id))).await;
                });
            }
        });
        ok(Box::pin(ReceiverStream::new(rx)) as Self::ModelStreamInferStream)
    }

    async fn model_config(&self, req: Request<pb::ModelConfigRequest>) -> GrpcResult<pb::ModelConfigResponse> {
        let r = req.into_inner();
        let cfg = self.server().model_config(&r.name, &r.version).map_err(status)?;
        ok(pb::ModelConfigResponse { config: Some((*cfg).clone()) })
    }

    async fn model_statistics(
        &self,
        req: Request<pb::ModelStatisticsRequest>,
    ) -> GrpcResult<pb::ModelStatisticsResponse> {
        let r = req.into_inner();
        let name = (!r.name.is_empty()).then_some(r.name.as_str());
        let stats = self.server().statistics(name, &r.version).map_err(status)?;
        let model_stats = stats
            .into_iter()
            .map(|m| {
                let st = m.stats;
                pb::ModelStatistics {
                    name: m.name,
                    version: m.version.to_string(),
                    last_inference: st.last_inference,
                    inference_count: st.inference_count,
                    execution_count: st.execution_count,
                    inference_stats: Some(pb::InferStatistics {
                        success: duration(st.success),
                        fail: duration(st.fail),
                        queue: duration(st.queue),
                        compute_input: duration(st.compute_input),
                        compute_infer: duration(st.compute_infer),
                        compute_output: duration(st.compute_output),
                        cache_hit: duration(st.cache_hit),
                        cache_miss: duration(st.cache_miss),
                    }),
                    batch_stats: st
                        .batches
                        .into_iter()
                        .map(|b| pb::InferBatchStatistics {
                            batch_size: b.batch_size,
                            compute_input: duration(b.compute_input),
                            compute_infer: duration(b.compute_infer),
                            compute_output: duration(b.compute_output),
                        })
                        .collect(),
                    memory_usage: st
                        .memory
                        .iter()
                        .map(|(kind, id, bytes)| pb::MemoryUsage {
                            r#type: kind.as_str().to_string(),
                            id: *id,
                            byte_size: *bytes,
                        })
                        .collect(),
                    response_stats: st
                        .responses
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            let stats = pb::InferResponseStatistics {
                                compute_infer: duration(r.compute_infer),
                                compute_output: duration(r.compute_output),
                                success: duration(r.success),
                                fail: duration(r.fail),
                                empty_response: duration(r.empty_response),
                                cancel: duration(r.cancel),
                            };
                            (i.to_string(), stats)
                        })
                        .collect(),
                }
            })
            .collect();
        ok(pb::ModelStatisticsResponse { model_stats })
    }

    async fn repository_index(
        &self,
        req: Request<pb::RepositoryIndexRequest>,
    ) -> GrpcResult<pb::RepositoryIndexResponse> {
        let r = req.into_inner();
        let models = self
            .server()
            .repository_index(r.ready)
            .into_iter()
            .map(|e| pb::repository_index_response::ModelIndex {
                name: e.name,
                version: e.version.map(|v| v.to_string()).unwrap_or_default(),
                state: e.state.map(|s| s.as_str().to_string()).unwrap_or_default(),
                reason: e.reason,
            })
            .collect();
        ok(pb::RepositoryIndexResponse { models })
    }

    async fn repository_model_load(
        &self,
        req: Request<pb::RepositoryModelLoadRequest>,
    ) -> GrpcResult<pb::RepositoryModelLoadResponse> {
        use pb::model_repository_parameter::ParameterChoice as P;
        let r = req.into_inner();
        let mut opts = LoadOptions::default();
        for (k, v) in r.parameters {
            if k == "config" {
                match v.parameter_choice {
                    Some(P::StringParam(s)) => opts.config_json = Some(s),
                    _ => {
                        return Err(status(
                            Error::invalid("the 'config' parameter must be a string holding JSON")
                                .context(format!("failed to load '{}'", r.model_name)),
                        ))
                    }
                }
            } else if let Some(path) = k.strip_prefix("file:") {
                match v.parameter_choice {
                    Some(P::BytesParam(b)) => opts.files.push((path.to_string(), b)),
                    _ => {
                        return Err(status(
                            Error::invalid(format!("parameter '{k}' must be bytes"))
                                .context(format!("failed to load '{}'", r.model_name)),
                        ))
                    }
                }
            }
        }
        self.server().load_model(&r.model_name, opts).await.map_err(status)?;
        ok(pb::RepositoryModelLoadResponse {})
    }

    async fn repository_model_unload(
        &self,
        req: Request<pb::RepositoryModelUnloadRequest>,
    ) -> GrpcResult<pb::RepositoryModelUnloadResponse> {
        let r = req.into_inner();
        // As tritonserver: a bool `unload_dependents` also unloads the ensembles using the model.
        let dependents = match r.parameters.get("unload_dependents").map(|p| &p.parameter_choice) {
            None => false,
            Some(Some(pb::model_repository_parameter::ParameterChoice::BoolParam(b))) => *b,
            Some(_) => {
                return Err(status(Error::invalid("the 'unload_dependents' parameter must be a bool")));
            }
        };
        self.server().unload_model_with(&r.model_name, dependents).await.map_err(status)?;
        ok(pb::RepositoryModelUnloadResponse {})
    }

    async fn system_shared_memory_status(
        &self,
        req: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryStatusResponse> {
        let name = req.into_inner().name;
        let regions = self.server().shared_memory().system_status(named(&name)).map_err(status)?;
        let regions = regions
            .into_iter()
            .map(|r| {
                let st = pb::system_shared_memory_status_response::RegionStatus {
                    name: r.name.clone(),
                    key: r.key,
                    offset: r.offset,
                    byte_size: r.byte_size,
                };
                (r.name, st)
            })
            .collect();
        ok(pb::SystemSharedMemoryStatusResponse { regions })
    }

    async fn system_shared_memory_register(
        &self,
        req: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryRegisterResponse> {
        let r = req.into_inner();
        self.server().shared_memory().register_system(&r.name, &r.key, r.offset, r.byte_size).map_err(status)?;
        ok(pb::SystemSharedMemoryRegisterResponse {})
    }

    async fn system_shared_memory_unregister(
        &self,
        req: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryUnregisterResponse> {
        let name = req.into_inner().name;
        self.server().shared_memory().unregister_system(named(&name)).map_err(status)?;
        ok(pb::SystemSharedMemoryUnregisterResponse {})
    }

    async fn cuda_shared_memory_status(
        &self,
        req: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryStatusResponse> {
        let name = req.into_inner().name;
        let regions = self.server().shared_memory().cuda_status(named(&name)).map_err(status)?;
        let regions = regions
            .into_iter()
            .map(|r| {
                let st = pb::cuda_shared_memory_status_response::RegionStatus {
                    name: r.name.clone(),
                    device_id: u64::try_from(r.device_id).unwrap_or_default(),
                    byte_size: r.byte_size,
                };
                (r.name, st)
            })
            .collect();
        ok(pb::CudaSharedMemoryStatusResponse { regions })
    }

    async fn cuda_shared_memory_register(
        &self,
        req: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryRegisterResponse> {
        let r = req.into_inner();
        self.server()
            .shared_memory()
            .register_cuda(&r.name, &r.raw_handle, r.device_id, r.byte_size)
            .map_err(status)?;
        ok(pb::CudaSharedMemoryRegisterResponse {})
    }

    async fn cuda_shared_memory_unregister(
        &self,
        req: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryUnregisterResponse> {
        let name = req.into_inner().name;
        self.server().shared_memory().unregister_cuda(named(&name)).map_err(status)?;
        ok(pb::CudaSharedMemoryUnregisterResponse {})
    }

    async fn trace_setting(&self, req: Request<pb::TraceSettingRequest>) -> GrpcResult<pb::TraceSettingResponse> {
        let r = req.into_inner();
        let model = (!r.model_name.is_empty()).then_some(r.model_name.as_str());
        // No settings reads them, as `GET /v2/trace/setting` does.
        let current = if r.settings.is_empty() {
            self.server().trace_settings(model)
        } else {
            trace_update_from_proto(r.settings).and_then(|u| self.server().update_trace_settings(model, &u))
        }
        .map_err(status)?;
        ok(pb::TraceSettingResponse { settings: trace_settings_to_proto(current) })
    }

    async fn log_settings(&self, req: Request<pb::LogSettingsRequest>) -> GrpcResult<pb::LogSettingsResponse> {
        let settings = req.into_inner().settings;
        // An empty request reads the settings, as `GET /v2/logging` does.
        let current = if settings.is_empty() {
            self.state.log.get()
        } else {
            self.state.log.update(log_update_from_proto(settings).map_err(status)?).map_err(status)?
        };
        ok(pb::LogSettingsResponse { settings: log_settings_to_proto(current) })
    }
}

/// Whether a streamed request asks for an empty response carrying only the final flag
/// (`triton_enable_empty_final_response`), as decoupled clients do to learn that a request is complete.
fn wants_empty_final(msg: &pb::ModelInferRequest) -> bool {
    use pb::infer_parameter::ParameterChoice;
    matches!(
        msg.parameters.get("triton_enable_empty_final_response").and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    )
}

/// A stream response; like Triton, every one says whether it is its request's last
/// (`triton_final_response`).
fn stream_answer(mut resp: pb::ModelInferResponse, is_final: bool) -> pb::ModelStreamInferResponse {
    resp.parameters.insert(
        "triton_final_response".into(),
        pb::InferParameter { parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(is_final)) },
    );
    pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(resp) }
}

/// The error for a response of `len` bytes that gRPC may not send (`--grpc-max-message-size`), as tonic
/// would otherwise fail it with OUT_OF_RANGE and, on a stream, end the whole stream. The request failed
/// for want of room: RESOURCE_EXHAUSTED, as gRPC C++ servers say.
fn too_large_to_send(len: usize, limit: usize, model: &str) -> Option<Error> {
    (len > limit).then(|| {
        Error::new(
            crate::error::ErrorKind::PayloadTooLarge,
            format!(
                "the response of model '{model}' is {len} bytes, over the gRPC message limit of {limit} bytes \
                 (--grpc-max-message-size)"
            ),
        )
    })
}

/// `answer`, or an error answer for its request when it is too large to send: the stream stays open
/// for the requests after it.
fn within_limit(answer: pb::ModelStreamInferResponse, limit: usize, id: &str) -> pb::ModelStreamInferResponse {
    let model = answer.infer_response.as_ref().map_or("", |r| r.model_name.as_str());
    match too_large_to_send(answer.encoded_len(), limit, model) {
        None => answer,
        Some(e) => {
            let is_final =
                answer.infer_response.as_ref().and_then(|r| r.parameters.get("triton_final_response").cloned());
            let mut error = stream_error(e, id);
            if let (Some(flag), Some(r)) = (is_final, error.infer_response.as_mut()) {
                r.parameters.insert("triton_final_response".into(), flag);
            }
            error
        }
    }
}

/// A failed request's answer on a stream; the id still tells the client which request failed.
fn stream_error(e: Error, id: &str) -> pb::ModelStreamInferResponse {
    pb::ModelStreamInferResponse {
        error_message: e.message,
        infer_response: Some(pb::ModelInferResponse { id: id.to_string(), ..Default::default() }),
    }
}

/// Streams a decoupled model's responses to one request as the model sends them. An empty final
/// response goes out only to clients that asked for it. A client that went away stops the request's
/// stream, which the model sees as cancellation.
#[tracing::instrument(name = "grpc_stream", level = "debug", skip_all)]
async fn stream_decoupled(
    server: &Server,
    req: crate::model_api::types::InferRequest,
    id: &str,
    empty_final: bool,
    limit: usize,
    tx: &tokio::sync::mpsc::Sender<std::result::Result<pb::ModelStreamInferResponse, Status>>,
) {
    let mut responses = match server.infer_stream(req).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(Ok(stream_error(e, id))).await;
            return;
        }
    };
    loop {
        let item = tokio::select! {
            item = responses.next() => item,
            // The client cancelled the stream (or went away): stop at once, not only when the model next
            // sends something, so a model that waits without sending still sees `is_cancelled()`.
            () = tx.closed() => return,
        };
        let Some(item) = item else { break };
        let answer = match item {
            Ok(r) if r.empty && !empty_final => continue,
            Ok(StreamResponse { error: Some(e), .. }) => stream_error(e, id),
            Ok(r) => match convert::response_to_proto(r.response) {
                Ok(resp) => stream_answer(resp, r.is_final),
                Err(e) => stream_error(e, id),
            },
            // The request is over (execute failed, the stub died): as in Triton, no final response follows.
            Err(e) => stream_error(e, id),
        };
        if tx.send(Ok(within_limit(answer, limit, id))).await.is_err() {
            return;
        }
    }
}

/// Keeps a stream's requests of one sequence in the order they were sent, as Triton's stream hands them
/// to the scheduler in order and a sequence's state depends on it. Each request of a sequence waits until
/// the previous request of the same sequence on the stream has finished; other requests run concurrently.
#[derive(Default)]
struct SequenceOrder {
    /// Per (model, sequence id): resolves when the latest request of that sequence has finished.
    last: HashMap<(String, String), tokio::sync::oneshot::Receiver<()>>,
}

impl SequenceOrder {
    /// Streams with more sequences than this drop the entries of sequences with nothing running.
    const PRUNE_AT: usize = 256;

    /// For a request of a sequence: what to wait for before running it, and a guard to drop once it has
    /// finished. Requests without a sequence id wait for nothing.
    fn enter(
        &mut self,
        msg: &pb::ModelInferRequest,
    ) -> (Option<tokio::sync::oneshot::Receiver<()>>, Option<tokio::sync::oneshot::Sender<()>>) {
        use pb::infer_parameter::ParameterChoice;
        let id = match msg.parameters.get("sequence_id").and_then(|p| p.parameter_choice.as_ref()) {
            Some(ParameterChoice::Int64Param(v)) if *v != 0 => format!("u{v}"),
            Some(ParameterChoice::Uint64Param(v)) if *v != 0 => format!("u{v}"),
            Some(ParameterChoice::StringParam(v)) if !v.is_empty() => format!("s{v}"),
            _ => return (None, None),
        };
        if self.last.len() >= Self::PRUNE_AT {
            self.last.retain(|_, rx| matches!(rx.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty)));
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        let previous = self.last.insert((msg.model_name.clone(), id), rx);
        (previous, Some(done))
    }
}

#[cfg(test)]
mod tests;
