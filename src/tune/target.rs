//! What a tuning run loads variants into and sends requests to: this process's own core (the default:
//! no server restart, no client process, no network), or a running server over gRPC (`--via`), where
//! variants are loaded through the repository API with a configuration override, as Model Analyzer's
//! remote mode does.

use crate::core::Server;
use crate::error::{Error, ErrorKind, Result};
use crate::model_api::types::InferRequest;
use crate::model_api::LoadOptions;
use crate::model_config::pbtxt::config_to_json;
use crate::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::proto::inference::{self as pb, ModelConfig};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The server's cumulative per-model times, as its statistics report them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerTimes {
    pub count: u64,
    pub queue_ns: u64,
    pub input_ns: u64,
    pub infer_ns: u64,
    pub output_ns: u64,
}

impl ServerTimes {
    /// Mean milliseconds per request between two readings: (queue, input, infer, output).
    pub fn mean_ms_since(&self, before: &ServerTimes) -> (f64, f64, f64, f64) {
        let n = self.count.saturating_sub(before.count);
        if n == 0 {
            return (0.0, 0.0, 0.0, 0.0);
        }
        let ms = |a: u64, b: u64| a.saturating_sub(b) as f64 / n as f64 / 1e6;
        (
            ms(self.queue_ns, before.queue_ns),
            ms(self.input_ns, before.input_ns),
            ms(self.infer_ns, before.infer_ns),
            ms(self.output_ns, before.output_ns),
        )
    }
}

type Http2 = hyper_util::client::legacy::Client<HttpConnector, tonic::body::Body>;

/// Where variants are measured.
#[derive(Clone)]
pub enum Target {
    InProcess(Server),
    /// `loopback`: the address names this machine (see [`Target::same_machine`]).
    Via {
        client: Box<GrpcInferenceServiceClient<Http2>>,
        address: String,
        loopback: bool,
    },
}

impl Target {
    /// A gRPC client for `grpc://HOST:PORT` (HTTP/2 without TLS, as perf_analyzer's default).
    pub fn via(url: &str) -> Result<Target> {
        let rest = url.strip_prefix("grpc://").ok_or_else(|| {
            Error::invalid(format!("--via '{url}' is not a grpc://HOST:PORT address (TLS is not supported here)"))
        })?;
        let origin: http::Uri = format!("http://{rest}")
            .parse()
            .map_err(|e| Error::invalid(format!("--via '{url}' is not a grpc://HOST:PORT address: {e}")))?;
        if origin.port().is_none() || origin.path() != "/" {
            return Err(Error::invalid(format!("--via '{url}' must be grpc://HOST:PORT with nothing after the port")));
        }
        let loopback = origin.host().is_some_and(is_loopback_host);
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
        let client = GrpcInferenceServiceClient::with_origin(http, origin)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Target::Via { client: Box::new(client), address: url.to_string(), loopback })
    }

    /// Under `--via`, refuses a server that does not let models be loaded through its repository API
    /// (tritonserver and tritonrs allow it only with `--model-control-mode=explicit`), before anything
    /// is loaded or measured. The check is an unload of a name the server's repository does not list,
    /// which changes nothing: such a server refuses it as UNAVAILABLE "... not allowed ...", one in
    /// explicit mode answers it (or says there is no such model).
    pub async fn check_control_mode(&self) -> Result<()> {
        let Target::Via { client, address, .. } = self else { return Ok(()) };
        let index = (**client)
            .clone()
            .repository_index(pb::RepositoryIndexRequest::default())
            .await
            .map_err(status_error)?
            .into_inner();
        let mut name = "tritonrs-tune-control-mode-check".to_string();
        while index.models.iter().any(|m| m.name == name) {
            name.push('_');
        }
        let req = pb::RepositoryModelUnloadRequest { model_name: name, ..Default::default() };
        match (**client).clone().repository_model_unload(req).await {
            Err(s) if s.code() == tonic::Code::Unavailable && s.message().contains("not allowed") => {
                Err(Error::unavailable(format!(
                    "the server at {address} does not let clients load and unload models (it answers: {}); \
                     start it with --model-control-mode=explicit, since tune --via loads each variant through its \
                     repository API",
                    s.message()
                )))
            }
            Err(s) if s.code() == tonic::Code::Unavailable => Err(status_error(s)),
            _ => Ok(()),
        }
    }

    /// `in-process`, or the `--via` address.
    pub fn describe(&self) -> String {
        match self {
            Target::InProcess(_) => "in-process".into(),
            Target::Via { address, .. } => address.clone(),
        }
    }

    /// Whether the process measured is this one (so its CPU time and memory are the server's).
    pub fn is_local(&self) -> bool {
        matches!(self, Target::InProcess(_))
    }

    /// Whether the server runs on this machine (in-process, or `--via` a loopback address), so that
    /// this machine's power readings are the server's.
    pub fn same_machine(&self) -> bool {
        match self {
            Target::InProcess(_) => true,
            Target::Via { loopback, .. } => *loopback,
        }
    }

    /// Loads `model` with `config` in place of its config.pbtxt (replacing a loaded version).
    pub async fn load(&self, model: &str, config: &ModelConfig) -> Result<()> {
        let json = config_to_json(config).to_string();
        match self {
            Target::InProcess(server) => {
                server.load_model(model, LoadOptions { config_json: Some(json), files: Vec::new() }).await
            }
            Target::Via { client, .. } => {
                let req = pb::RepositoryModelLoadRequest {
                    model_name: model.to_string(),
                    parameters: [(
                        "config".to_string(),
                        pb::ModelRepositoryParameter {
                            parameter_choice: Some(pb::model_repository_parameter::ParameterChoice::StringParam(json)),
                        },
                    )]
                    .into_iter()
                    .collect(),
                    ..Default::default()
                };
                (**client).clone().repository_model_load(req).await.map(|_| ()).map_err(status_error)
            }
        }
    }

    pub async fn unload(&self, model: &str) -> Result<()> {
        match self {
            Target::InProcess(server) => server.unload_model(model).await,
            Target::Via { client, .. } => {
                let req = pb::RepositoryModelUnloadRequest { model_name: model.to_string(), ..Default::default() };
                (**client).clone().repository_model_unload(req).await.map(|_| ()).map_err(status_error)
            }
        }
    }

    /// The model's configuration as the target completed it.
    pub async fn config(&self, model: &str) -> Result<ModelConfig> {
        match self {
            Target::InProcess(server) => server.model_config(model, "").map(|c| (*c).clone()),
            Target::Via { client, .. } => {
                let req = pb::ModelConfigRequest { name: model.to_string(), version: String::new() };
                let resp = (**client).clone().model_config(req).await.map_err(status_error)?.into_inner();
                resp.config.ok_or_else(|| Error::internal(format!("the server sent no configuration for '{model}'")))
            }
        }
    }

    /// One inference; the response is dropped.
    pub async fn infer(&self, req: InferRequest) -> Result<()> {
        match self {
            Target::InProcess(server) => server.infer(req).await.map(|_| ()),
            Target::Via { client, .. } => {
                let msg = to_proto(req)?;
                (**client).clone().model_infer(msg).await.map(|_| ()).map_err(status_error)
            }
        }
    }

    /// The model's cumulative times (every version summed).
    pub async fn times(&self, model: &str) -> Result<ServerTimes> {
        let mut t = ServerTimes::default();
        match self {
            Target::InProcess(server) => {
                for s in server.statistics(Some(model), "")? {
                    t.count += s.stats.success.count;
                    t.queue_ns += s.stats.queue.ns;
                    t.input_ns += s.stats.compute_input.ns;
                    t.infer_ns += s.stats.compute_infer.ns;
                    t.output_ns += s.stats.compute_output.ns;
                }
            }
            Target::Via { client, .. } => {
                let req = pb::ModelStatisticsRequest { name: model.to_string(), version: String::new() };
                let resp = (**client).clone().model_statistics(req).await.map_err(status_error)?.into_inner();
                for s in resp.model_stats {
                    let Some(st) = s.inference_stats else { continue };
                    let get = |d: Option<pb::StatisticDuration>| d.unwrap_or_default();
                    let success = get(st.success);
                    t.count += success.count;
                    t.queue_ns += get(st.queue).ns;
                    t.input_ns += get(st.compute_input).ns;
                    t.infer_ns += get(st.compute_infer).ns;
                    t.output_ns += get(st.compute_output).ns;
                }
            }
        }
        Ok(t)
    }
}

/// Whether a `--via` address's host names this machine by loopback (`localhost`, 127.0.0.0/8,
/// `[::1]`).
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn status_error(s: tonic::Status) -> Error {
    let kind = match s.code() {
        tonic::Code::InvalidArgument => ErrorKind::InvalidArgument,
        tonic::Code::NotFound => ErrorKind::NotFound,
        tonic::Code::Unavailable => ErrorKind::Unavailable,
        tonic::Code::Unimplemented => ErrorKind::Unsupported,
        _ => ErrorKind::Internal,
    };
    let msg = if s.code() == tonic::Code::Unavailable && s.message().contains("connect") {
        format!("cannot reach the server: {}", s.message())
    } else {
        s.message().to_string()
    };
    Error::new(kind, msg)
}

/// A core request as a gRPC `ModelInferRequest` with raw contents.
fn to_proto(req: InferRequest) -> Result<pb::ModelInferRequest> {
    let mut inputs = Vec::with_capacity(req.inputs.len());
    let mut raw = Vec::with_capacity(req.inputs.len());
    for t in req.inputs {
        raw.push(t.data.to_host()?);
        inputs.push(pb::model_infer_request::InferInputTensor {
            name: t.name,
            datatype: t.datatype.as_str().to_string(),
            shape: t.shape,
            ..Default::default()
        });
    }
    Ok(pb::ModelInferRequest {
        model_name: req.model_name,
        model_version: req.model_version.map(|v| v.to_string()).unwrap_or_default(),
        id: req.id,
        inputs,
        raw_input_contents: raw,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests;
