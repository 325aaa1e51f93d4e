//! The interface between the core and the backends: what a backend is given (model context, instance
//! specs, `--backend-config`, load options), what an instance executes and returns (requests, results,
//! decoupled responses, timings), and what a backend may ask of the server (BLS, model control,
//! custom metrics). The core talks to backends only through it, and backends depend on it rather than
//! on the core: it imports neither.
//!
//! A backend instance is a plain struct that runs on its own OS thread (see `core::scheduler`); nothing
//! here is async, and inference never runs on tokio workers.

pub mod agents;
pub mod custom_metrics;
pub mod signals;
pub mod types;

use crate::error::{Error, Result};
use crate::proto::inference::ModelConfig;
use futures_util::future::BoxFuture;
pub use signals::Signals;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use types::{InferRequest, InferResponse, Parameters, Tensor};

/// A sequence's correlation id: Triton accepts an unsigned integer or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SequenceId {
    U64(u64),
    Str(String),
}

/// Puts what an in-process request (a backend's BLS) says about its sequence and timeout into the
/// request parameters Triton reserves for them: `sequence_id`, `sequence_start` (flag 1),
/// `sequence_end` (flag 2) and `timeout` (microseconds; 0 is none).
pub fn set_control_parameters(parameters: &mut Parameters, sequence: Option<SequenceId>, flags: u32, timeout_us: u64) {
    use types::ParamValue;
    match sequence {
        Some(SequenceId::U64(v)) => {
            parameters.insert("sequence_id".into(), ParamValue::Uint(v));
        }
        Some(SequenceId::Str(s)) => {
            parameters.insert("sequence_id".into(), ParamValue::String(s));
        }
        None => {}
    }
    if flags & 1 != 0 {
        parameters.insert("sequence_start".into(), ParamValue::Bool(true));
    }
    if flags & 2 != 0 {
        parameters.insert("sequence_end".into(), ParamValue::Bool(true));
    }
    if timeout_us > 0 {
        parameters.insert("timeout".into(), ParamValue::Uint(timeout_us));
    }
}

/// What a load request can override (the model repository extension's parameters).
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// A JSON model config that replaces config.pbtxt.
    pub config_json: Option<String>,
    /// Model files as (relative path like "1/model.onnx", contents); requires `config_json`.
    pub files: Vec<(String, Vec<u8>)>,
}

/// Where an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceKind {
    Cpu,
    Gpu {
        device_id: i32,
    },
    /// `KIND_MODEL`: the backend (or the model) decides where the instance runs; as tritonserver, the
    /// instance is given no device (device id 0).
    Model,
}

/// One instance to create, derived from an `instance_group` entry.
#[derive(Debug, Clone)]
pub struct InstanceSpec {
    /// e.g. "simple_0_1": group name plus index, as Triton names instances.
    pub name: String,
    pub kind: InstanceKind,
    /// The group's TensorRT optimization profiles (`instance_group { profile: [...] }`).
    pub profiles: Vec<String>,
    /// The DLA core of the group's `secondary_devices { kind: KIND_NVDLA }` (TensorRT plans only).
    pub dla_core: Option<i32>,
}

/// What a backend needs to know to create instances of one model version.
#[derive(Debug, Clone)]
pub struct ModelContext {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    /// The model's folder (holding config.pbtxt and the version folders).
    pub model_dir: PathBuf,
    /// The version folder.
    pub version_dir: PathBuf,
}

/// One execution: tensors already validated and shaped as the model expects.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub inputs: Vec<Tensor>,
    /// Outputs to return, by name; never empty (the core fills in all outputs when the client names none).
    pub outputs: Vec<String>,
    /// The client request's id, parameters and sequence fields, for backends that show requests to user
    /// code (Python). Shared, so batching and cloning never copy them.
    pub meta: Arc<RequestMeta>,
    /// Set for decoupled models: where the model's responses to this request go (0..n of them, the last
    /// one final). The scheduler's reply then only says that execution finished.
    pub responder: Option<ResponseSender>,
}

/// What a request says about itself besides its tensors.
#[derive(Debug, Clone, Default)]
pub struct RequestMeta {
    /// The client's request id.
    pub id: String,
    /// The request's parameters, minus the ones the server acts on (priority, timeout, sequence fields).
    pub parameters: Parameters,
    /// The sequence's correlation id, if any.
    pub correlation_id: Option<SequenceId>,
    /// `TRITONSERVER_REQUEST_FLAG_SEQUENCE_START` (1) and `_END` (2).
    pub flags: u32,
    /// The model versions waiting on this request (see `InferRequest::callers`), for BLS requests the
    /// model makes while it runs.
    pub callers: types::CallChain,
    /// Cancellation and rescheduling of the request, shared by every copy of this metadata (see
    /// [`Signals`]): backends ask whether it was cancelled, and set that it is to run again.
    pub signals: Signals,
    /// The request's trace when it is traced, for the requests made on its behalf (BLS calls, an
    /// ensemble's steps) to continue it.
    pub trace: Option<types::TraceLink>,
}

/// One response of a decoupled model.
#[derive(Debug, Clone, Default)]
pub struct DecoupledResponse {
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
    /// The last response of its request.
    pub is_final: bool,
    /// A final flag sent without a response (Triton's "empty final response").
    pub empty: bool,
    /// An error response the model sent; the request goes on until its final flag.
    pub error: Option<Error>,
}

/// Where a decoupled model sends the responses of one request; usable from any thread, also after
/// `execute` has returned. An `Err` ends the request (execute failed, the model's process died); error
/// responses the model sends itself are [`DecoupledResponse::error`].
#[derive(Debug, Clone)]
pub struct ResponseSender(tokio::sync::mpsc::UnboundedSender<Result<DecoupledResponse>>);

/// The receiving end of a [`ResponseSender`].
pub type ResponseReceiver = tokio::sync::mpsc::UnboundedReceiver<Result<DecoupledResponse>>;

impl ResponseSender {
    pub fn channel() -> (ResponseSender, ResponseReceiver) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (ResponseSender(tx), rx)
    }

    /// Sends a response; one whose client has gone away is dropped.
    pub fn send(&self, item: Result<DecoupledResponse>) {
        let _ = self.0.send(item);
    }

    /// Whether the client has gone away (Triton's request cancellation).
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    /// Resolves once the client has gone away.
    pub async fn closed(&self) {
        self.0.closed().await
    }
}

/// Time spent in each phase of one execution, for statistics and traces.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecTimings {
    pub compute_input_ns: u64,
    pub compute_infer_ns: u64,
    pub compute_output_ns: u64,
    /// How long the request, taken from the queue and handed to a pipelining instance, waited there for
    /// the requests handed over before it (see [`ModelInstance::begin`]): counted as queue time.
    pub waited_ns: u64,
    /// When an instance thread picked the request up (a trace's COMPUTE_START). Set by the scheduler,
    /// not the backend; `None` from backends.
    pub started: Option<std::time::Instant>,
}

impl ExecTimings {
    /// The phases between four instants: inputs ready at `t1`, inference done at `t2`, outputs at `t3`.
    pub fn between(
        t0: std::time::Instant,
        t1: std::time::Instant,
        t2: std::time::Instant,
        t3: std::time::Instant,
    ) -> Self {
        ExecTimings {
            compute_input_ns: (t1 - t0).as_nanos() as u64,
            compute_infer_ns: (t2 - t1).as_nanos() as u64,
            compute_output_ns: (t3 - t2).as_nanos() as u64,
            waited_ns: 0,
            started: None,
        }
    }
}

/// The outputs of one execution.
#[derive(Debug, Clone, Default)]
pub struct ExecResult {
    pub outputs: Vec<Tensor>,
    pub timings: ExecTimings,
    /// Response parameters the model set (Python models can).
    pub parameters: Parameters,
}

/// A loaded copy of a model that executes requests, one at a time, on its own thread.
pub trait ModelInstance: Send {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult>;

    /// Whether the dynamic batcher hands this instance a batch as a list of requests, each with its own
    /// tensors and its own result (as Triton does for Python models), instead of merging them into one
    /// execution along the batch dimension.
    fn takes_request_lists(&self) -> bool {
        false
    }

    /// Executes several requests in one call, one result per request; by default one after another.
    fn execute_list(&mut self, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
        reqs.iter().map(|r| self.execute(r)).collect()
    }

    /// Pipelining, for instances whose requests run in another process that reads them in order (a
    /// Python stub): sends `req` to run after those already sent and returns a ticket for
    /// [`ModelInstance::finish`], so that the instance thread can send the next request while this one
    /// runs and the process never waits for it. `None` (the default): not now or never; the caller
    /// finishes the oldest request it sent and asks again, and once nothing is in flight runs the
    /// request with `execute` if the answer is still `None`.
    fn begin(&mut self, _req: &ExecRequest) -> Option<Result<u64>> {
        None
    }

    /// Waits for the request sent under `ticket` by [`ModelInstance::begin`] and returns its result.
    /// Tickets are finished in the order they were handed out.
    fn finish(&mut self, _ticket: u64, _req: &ExecRequest) -> Result<ExecResult> {
        Err(crate::error::Error::internal("finish() on an instance that does not pipeline; this is a bug"))
    }

    /// A probe the model's readiness endpoint asks, for backends whose instances can stop being ready
    /// while loaded (a Python stub that died, or a model whose own readiness check fails). Taken once,
    /// before the instance moves to its thread.
    fn readiness(&self) -> Option<Arc<dyn Readiness>> {
        None
    }

    /// What serves the model when it is not the backend built into tritonrs (a Triton backend
    /// library's path), for the load log and the repository index.
    fn served_by(&self) -> Option<String> {
        None
    }

    /// Who to tell when the model version leaves service, for instances that wait on code they do not
    /// control (a C backend's `Execute`) and must then bound that wait. Taken once, before the instance
    /// moves to its thread.
    fn retirement(&self) -> Option<Arc<dyn Retirement>> {
        None
    }

    /// Called first on the instance's own thread, before any request (a host policy pins it there).
    fn thread_started(&mut self) {}

    /// Where the backend reports the memory the model version holds, for statistics' `memory_usage`
    /// (a C backend's `TRITONBACKEND_ModelReportMemoryUsage` and the instance form). Instances of one
    /// version may share one. Taken once, before the instance moves to its thread.
    fn memory_usage(&self) -> Option<Arc<MemoryUsage>> {
        None
    }
}

/// A kind of memory in a [`MemoryUsage`] report, ordered and named as tritonserver's statistics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemoryKind {
    Cpu,
    CpuPinned,
    Gpu,
}

impl MemoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Cpu => "CPU",
            MemoryKind::CpuPinned => "CPU_PINNED",
            MemoryKind::Gpu => "GPU",
        }
    }
}

/// The memory a backend reports a model version holds. Each reporter (the model, or one instance)
/// has one report, which its next report replaces, as tritonserver keeps the last one a model or an
/// instance set; `memory_usage` sums them per memory kind and device.
#[derive(Debug, Default)]
pub struct MemoryUsage(parking_lot::Mutex<BTreeMap<usize, MemoryReport>>);

/// One reporter's bytes per memory kind and device.
type MemoryReport = BTreeMap<(MemoryKind, i64), u64>;

impl MemoryUsage {
    /// Replaces `reporter`'s report with `entries` (memory kind, device id, bytes).
    pub fn set(&self, reporter: usize, entries: &[(MemoryKind, i64, u64)]) {
        let mut report = BTreeMap::new();
        for &(kind, id, bytes) in entries {
            let total: &mut u64 = report.entry((kind, id)).or_default();
            *total = total.saturating_add(bytes);
        }
        self.0.lock().insert(reporter, report);
    }

    /// Every kind and device reported, with its bytes summed over the reporters, in order.
    pub fn entries(&self) -> Vec<(MemoryKind, i64, u64)> {
        let mut sum: BTreeMap<(MemoryKind, i64), u64> = BTreeMap::new();
        for (&key, &bytes) in self.0.lock().values().flatten() {
            let total = sum.entry(key).or_default();
            *total = total.saturating_add(bytes);
        }
        sum.into_iter().map(|((k, id), b)| (k, id, b)).collect()
    }
}

/// Tells whether an instance can serve right now. May block briefly (it may ask a process).
pub trait Readiness: Send + Sync {
    fn ready(&self) -> bool;
}

/// Told when a loaded model version leaves service, before its instances are dropped.
pub trait Retirement: Send + Sync {
    /// `unload`: the model is unloaded, so requests still queued for the instance fail at once instead
    /// of running; `false`: a newer copy serves in its place and queued requests still run here. Either
    /// way the instance should stop waiting on its backend within a bounded time.
    fn retiring(&self, unload: bool);
}

/// A kind of backend (onnxruntime, ...), able to create instances.
pub trait Backend: Send + Sync {
    /// The name used in `config.pbtxt`'s `backend` field.
    fn name(&self) -> &'static str;
    /// The backend's own refusals of an instance that are said before the core checks the instance's
    /// GPU (TensorRT missing, the model file missing, a typo in the model's settings), so that the
    /// first problem is the one reported. Called by the core before [`Backend::create_instance`].
    fn check_instance(&self, _ctx: &ModelContext, _spec: &InstanceSpec) -> Result<()> {
        Ok(())
    }
    /// Creates one instance; called on a blocking thread during model load. A KIND_GPU instance's GPU
    /// has been checked by the core.
    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>>;
}

/// What a backend may ask of the server while it runs: inference on any loaded model (a Python model's
/// BLS requests) and model control. The core implements it over a weak handle, so loaded models never
/// keep the server alive; every call fails once the server is gone.
pub trait ServerApi: Send + Sync {
    /// Runs a request through the server's normal inference path (validation, the model's scheduler,
    /// its statistics).
    fn infer(&self, req: InferRequest) -> BoxFuture<'static, Result<InferResponse>>;
    /// Runs a request whose responses are streamed (a decoupled model's 0..n responses).
    fn infer_stream(
        &self,
        req: InferRequest,
    ) -> BoxFuture<'static, Result<futures_util::stream::BoxStream<'static, Result<types::StreamResponse>>>>;
    /// Loads or reloads a model (explicit model control only).
    fn load_model(&self, name: String, opts: LoadOptions) -> BoxFuture<'static, Result<()>>;
    /// Unloads a model (explicit model control only).
    fn unload_model(&self, name: String) -> BoxFuture<'static, Result<()>>;
    /// Whether a model (version; empty: any) is ready.
    fn model_ready(&self, name: String, version: String) -> BoxFuture<'static, Result<bool>>;
    /// Whether the model (version; `None`: the one the server picks) is decoupled; an error when no
    /// such model is loaded.
    fn is_decoupled(&self, name: &str, version: Option<i64>) -> Result<bool> {
        let _ = (name, version);
        Err(Error::unsupported("this server cannot tell how its models answer"))
    }
    /// Where models' custom metrics live (`None` once the server is gone).
    fn custom_metrics(&self) -> Option<Arc<custom_metrics::CustomMetrics>>;
}

/// tritonserver's `--backend-directory` default.
pub const DEFAULT_BACKEND_DIRECTORY: &str = "/opt/tritonserver/backends";

/// tritonserver's `--repoagent-directory` default.
pub const DEFAULT_REPOAGENT_DIRECTORY: &str = "/opt/tritonserver/repoagents";

/// `--backend-config` settings: per backend name, and global ones (given without a backend name).
#[derive(Debug, Clone, Default)]
pub struct BackendConfig {
    /// backend name -> setting -> value.
    pub per_backend: HashMap<String, HashMap<String, String>>,
    /// Settings given as `--backend-config=<setting>=<value>`.
    pub global: HashMap<String, String>,
    /// Whether the settings come from the configuration file rather than the command line (or
    /// `TRITONRS_BACKEND_CONFIG`): a runtime's library named there gives way to its environment
    /// variable (`ORT_DYLIB_PATH`), as the file gives way to the environment everywhere.
    pub from_config_file: bool,
}

impl BackendConfig {
    /// Parses Triton's `--backend-config` values: `<backend>,<setting>=<value>` or `<setting>=<value>`.
    pub fn parse(values: &[String]) -> Result<BackendConfig> {
        BackendConfig::parse_flag(values, "--backend-config", "backend")
    }

    /// Parses the values of a flag of the same form (`--repoagent-config`), naming `flag` and what its
    /// first part names (`noun`) in errors.
    pub fn parse_flag(values: &[String], flag: &str, noun: &str) -> Result<BackendConfig> {
        let mut cfg = BackendConfig::default();
        for v in values {
            let (backend, setting) = match v.split_once(',') {
                Some((b, s)) => (Some(b.trim()), s),
                None => (None, v.as_str()),
            };
            let (key, value) = setting.split_once('=').ok_or_else(|| {
                Error::invalid(format!("{flag} '{v}' must be '<{noun}>,<setting>=<value>' or '<setting>=<value>'"))
            })?;
            let map = match backend {
                Some(b) if !b.is_empty() => cfg.per_backend.entry(b.to_string()).or_default(),
                _ => &mut cfg.global,
            };
            map.insert(key.trim().to_string(), value.trim().to_string());
        }
        Ok(cfg)
    }

    /// A setting for a backend, falling back to the global value.
    pub fn get(&self, backend: &str, key: &str) -> Option<&str> {
        self.per_backend.get(backend).and_then(|m| m.get(key)).or_else(|| self.global.get(key)).map(String::as_str)
    }
}

/// The backends a server can use, by name.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: HashMap<&'static str, Arc<dyn Backend>>,
    /// Serves every name not registered (the TRITONBACKEND host: `libtriton_<name>.so`).
    fallback: Option<Arc<dyn Backend>>,
}

impl BackendRegistry {
    /// Adds a backend under its name (replacing one of the same name).
    pub fn insert(&mut self, backend: Arc<dyn Backend>) {
        self.backends.insert(backend.name(), backend);
    }

    /// The backend that serves names nobody registered.
    pub fn set_fallback(&mut self, backend: Arc<dyn Backend>) {
        self.fallback = Some(backend);
    }

    pub fn get(&self, name: &str) -> Result<Arc<dyn Backend>> {
        self.backends
            .get(name)
            .or(self.fallback.as_ref())
            .cloned()
            .ok_or_else(|| Error::unavailable(format!("backend '{name}' is not available in this build")))
    }
}

/// Builds the server's backends once the server exists: they get its [`ServerApi`] and memory pools.
/// The server is given one by whoever assembles it (`assemble` registers the built-in backends), so
/// the core never names a concrete backend. The default builds none.
#[derive(Clone)]
pub struct BackendFactory(pub Arc<BuildBackends>);

/// What a [`BackendFactory`] calls: the server's API and pools in, the registry out.
pub type BuildBackends =
    dyn Fn(Option<Arc<dyn ServerApi>>, Option<crate::memory::pool::Pools>) -> BackendRegistry + Send + Sync;

impl BackendFactory {
    pub fn build(&self, api: Option<Arc<dyn ServerApi>>, pools: Option<crate::memory::pool::Pools>) -> BackendRegistry {
        (self.0)(api, pools)
    }
}

impl Default for BackendFactory {
    fn default() -> Self {
        BackendFactory(Arc::new(|_, _| BackendRegistry::default()))
    }
}

impl std::fmt::Debug for BackendFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackendFactory")
    }
}

#[cfg(test)]
mod tests;
