//! `Server`: health, metadata, inference, repository control and statistics, independent of transport.

use crate::core::cache::{self, ResponseCache};
use crate::core::classification::classify;
use crate::core::lifecycle::{IndexEntry, LoadedModel, ModelManager};
use crate::core::rate_limiter::RateLimiter;
use crate::core::repository::{RemoteRepository, RepoOptions, SyncScope};
use crate::core::scheduler::ensemble::StepRunner;
use crate::core::scheduler::Job;
use crate::core::shm_params;
use crate::core::stats::{FailureReason, StatsSnapshot};
use crate::core::trace::{Activity, Trace, TraceSettings, TraceUpdate, Tracer};
use crate::core::validate::{self, resolve_wildcards};
use crate::error::{Error, ErrorKind, Result};
use crate::memory::regions::SharedMemoryManager;
use crate::model_api::custom_metrics::CustomMetrics;
use crate::model_api::types::{InferRequest, InferResponse, Parameters, RequestedOutput, StreamResponse, Tensor};
use crate::model_api::LoadOptions;
use crate::model_api::{BackendConfig, BackendFactory, ExecResult, ExecTimings, ResponseSender, ServerApi};
use crate::proto::inference::ModelConfig;
use futures_util::stream::{BoxStream, StreamExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Triton's `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ControlMode {
    /// Load every model at start; no changes afterwards.
    None,
    /// Load `--load-model` at start; load and unload through the API.
    Explicit,
    /// Load everything at start and follow the repository's changes.
    Poll,
}

/// Everything the core needs from the command line.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Reported as the server name in metadata (`--id`).
    pub id: String,
    pub repositories: Vec<PathBuf>,
    pub control_mode: ControlMode,
    /// Models to load at start in explicit mode; `*` means all.
    pub load_models: Vec<String>,
    pub poll_interval: Duration,
    pub strict_readiness: bool,
    pub exit_on_error: bool,
    pub repo: RepoOptions,
    pub backend_config: BackendConfig,
    /// Builds the backends (the built-in ones, registered by `main.rs`); the default builds none.
    pub backends: BackendFactory,
    pub load_threads: usize,
    /// `--rate-limit execution_count` with the `--rate-limit-resource` sizes; `None` when off.
    pub rate_limit: Option<Vec<(String, u32, Option<i32>)>>,
    /// Size of the response cache in bytes (`--cache-config local,size=N`); `None`: no cache.
    pub cache_bytes: Option<usize>,
    /// The start-up trace settings (`--trace-config`).
    pub trace: TraceSettings,
    /// `--pinned-memory-pool-byte-size`, `--cuda-memory-pool-byte-size`.
    pub pools: crate::memory::pool::PoolOptions,
    /// Cloud repositories (`s3://`, `gs://`, `as://`); each one's local view is also in `repositories`.
    pub remotes: Vec<Arc<dyn RemoteRepository>>,
}

impl ServerOptions {
    /// A server in explicit mode over `repositories` that loads nothing at start, with every other
    /// setting at its default and no backends (callers add theirs): for `tune` and for tests.
    pub fn explicit(repositories: Vec<PathBuf>) -> ServerOptions {
        ServerOptions {
            id: "triton".into(),
            repositories,
            control_mode: ControlMode::Explicit,
            load_models: Vec::new(),
            poll_interval: Duration::from_secs(1),
            strict_readiness: true,
            exit_on_error: false,
            repo: Default::default(),
            backend_config: Default::default(),
            backends: Default::default(),
            load_threads: 1,
            rate_limit: None,
            cache_bytes: None,
            trace: Default::default(),
            pools: Default::default(),
            remotes: Vec::new(),
        }
    }
}

/// The protocol extensions this server implements, as listed in server metadata.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "sequence",
    "model_repository",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
];

pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// Statistics of one model version.
pub struct ModelStatistics {
    pub name: String,
    pub version: i64,
    pub stats: StatsSnapshot,
    /// Failures per reason, in [`FailureReason::ALL`] order.
    pub failures: Vec<(FailureReason, u64)>,
    /// Requests queued and not yet executing.
    pub pending: i64,
    /// How long the version took to load.
    pub load_duration: Duration,
    /// Whether requests to this version go through the response cache.
    pub cache_enabled: bool,
}

struct Inner {
    opts: ServerOptions,
    models: Arc<ModelManager>,
    /// Set once start-up loading has finished.
    started: AtomicBool,
    /// Cleared when shutdown begins.
    accepting: AtomicBool,
    /// Bumped when `started` or `accepting` changes, for [`Server::readiness`].
    flags_changed: tokio::sync::watch::Sender<u64>,
    /// The response cache, when configured.
    cache: Option<ResponseCache>,
    /// The trace extension's settings and sampling.
    tracer: Tracer,
    /// Metrics models create (Python's `pb_utils.MetricFamily`).
    custom_metrics: Arc<CustomMetrics>,
    /// The system and CUDA shared-memory regions clients registered.
    shm: SharedMemoryManager,
    /// Pinned host memory and device memory per GPU.
    pools: crate::memory::pool::Pools,
}

/// The server core. Cheap to clone; every front-end holds one.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

/// Parses a version as it appears in URLs and protocol fields; empty means "let the server choose".
pub fn parse_version(v: &str) -> Result<Option<i64>> {
    if v.is_empty() {
        return Ok(None);
    }
    v.parse::<i64>()
        .ok()
        .filter(|&n| n >= 0)
        .map(Some)
        .ok_or_else(|| Error::invalid(format!("'{v}' is not a valid model version: expected a non-negative integer")))
}

impl Server {
    pub fn new(opts: ServerOptions) -> Server {
        let limiter = opts.rate_limit.as_ref().map(|fixed| Arc::new(RateLimiter::new(fixed)));
        let tracer = Tracer::new(opts.trace.clone());
        // Ensembles run their steps through this server; a weak handle keeps the models from owning it.
        let pools = crate::memory::pool::Pools::new(&opts.pools, &crate::platform::cuda::CudaMemory);
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let steps = Arc::new(StepsThroughServer(me.clone()));
            let backends = opts.backends.build(Some(Arc::new(ApiThroughServer(me.clone()))), Some(pools.clone()));
            let models = ModelManager::new(opts.repositories.clone(), opts.repo.clone(), backends, opts.load_threads)
                .with_rate_limiter(limiter)
                .with_ensembles(steps, opts.control_mode == ControlMode::Explicit)
                .with_remotes(opts.remotes.clone(), opts.control_mode == ControlMode::Explicit);
            Inner {
                cache: opts.cache_bytes.map(ResponseCache::new),
                opts,
                models: Arc::new(models),
                started: AtomicBool::new(false),
                accepting: AtomicBool::new(true),
                flags_changed: tokio::sync::watch::Sender::new(0),
                tracer,
                custom_metrics: Arc::new(CustomMetrics::new()),
                // CUDA regions open their IPC handles through the driver, loaded on first use; without
                // one, registering a CUDA region says why.
                shm: SharedMemoryManager::new(Some(crate::platform::cuda::ipc_opener()), String::new()),
                pools,
            }
        });
        Server { inner }
    }

    /// Loads the start-up models as the control mode says. Failures leave those models UNAVAILABLE;
    /// with `exit_on_error` the first one is returned instead.
    pub async fn startup(&self) -> Result<()> {
        let o = &self.inner.opts;
        // Cloud repositories first: when every model loads, all of them must be in their views before
        // the scan (errors are logged and leave those models out; the server starts regardless). Named
        // models are brought in by their own loads, whose failures then name the storage's error; with
        // none, a listing fills the repository index.
        let everything = o.control_mode != ControlMode::Explicit || o.load_models.iter().any(|m| m == "*");
        if everything {
            let _ = self.inner.models.sync_remotes(SyncScope::All).await;
        } else if o.load_models.is_empty() {
            let _ = self.inner.models.sync_remotes(SyncScope::List).await;
        }
        let names: Vec<String> = match o.control_mode {
            ControlMode::None | ControlMode::Poll => self.inner.models.repository_models(),
            ControlMode::Explicit => {
                if o.load_models.iter().any(|m| m == "*") {
                    self.inner.models.repository_models()
                } else {
                    o.load_models.clone()
                }
            }
        };
        // As in Triton, a repository path that cannot be read stops the server: it is a deployment
        // mistake, not a model failure.
        let (_, scan_errors) = crate::core::repository::scan(&o.repositories);
        if let Some(e) = scan_errors.into_iter().next() {
            return Err(e);
        }
        let loads = names.iter().map(|n| {
            let models = self.inner.models.clone();
            let n = n.clone();
            async move { (n.clone(), models.load_requested(&n, everything).await) }
        });
        let results = futures_util::future::join_all(loads).await;
        self.inner.started.store(true, Ordering::SeqCst);
        self.inner.flags_changed.send_modify(|n| *n = n.wrapping_add(1));
        if o.exit_on_error {
            if let Some((name, Err(e))) = results.into_iter().find(|(_, r)| r.is_err()) {
                return Err(e.context(format!("model '{name}' failed to load and --exit-on-error is set")));
            }
        }
        Ok(())
    }

    /// Poll mode: rescans the repositories forever, loading new or changed models and removing vanished ones.
    pub async fn poll_repositories(self) {
        let mut tick = tokio::time::interval(self.inner.opts.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if !self.inner.accepting.load(Ordering::SeqCst) {
                return;
            }
            self.poll_once().await;
        }
    }

    /// One poll-mode rescan.
    pub async fn poll_once(&self) {
        let models = &self.inner.models;
        let _ = models.sync_remotes(SyncScope::All).await;
        let (on_disk, _) = crate::core::repository::scan(&self.inner.opts.repositories);
        for (name, dir) in &on_disk {
            let changed = match dir {
                Ok(d) => models.fingerprint(name) != Some(crate::core::repository::fingerprint(d)),
                Err(_) => models.fingerprint(name).is_some(),
            };
            if changed {
                tracing::info!("Model '{name}' changed in the repository; reloading it.");
                let _ = models.load(name, LoadOptions::default()).await;
            }
        }
        for name in models.known_models() {
            if !on_disk.contains_key(&name) {
                tracing::info!("Model '{name}' was removed from the repository; unloading it.");
                let _ = models.remove(&name).await;
            }
        }
    }

    /// A reload (SIGHUP): in poll mode, one poll now; in explicit mode, the models already known are
    /// reloaded if their files changed (nothing new is loaded); in none mode, nothing.
    pub async fn rescan(&self) {
        match self.inner.opts.control_mode {
            ControlMode::Poll => self.poll_once().await,
            ControlMode::Explicit => {
                let models = &self.inner.models;
                let _ = models.sync_remotes(SyncScope::Models(&models.known_models())).await;
                let (on_disk, _) = crate::core::repository::scan(&self.inner.opts.repositories);
                for name in models.known_models() {
                    let Some(Ok(dir)) = on_disk.get(&name) else { continue };
                    if models.fingerprint(&name).is_some_and(|f| f != crate::core::repository::fingerprint(dir)) {
                        tracing::info!("Model '{name}' changed in the repository; reloading it.");
                        let _ = models.load(&name, LoadOptions::default()).await;
                    }
                }
            }
            ControlMode::None => {}
        }
    }

    /// Whether start-up loading has finished (whatever its outcome).
    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
    }

    pub fn is_live(&self) -> bool {
        true
    }

    /// Readiness as Triton defines it: start-up done, accepting requests, and with `--strict-readiness`
    /// every model that should be served is READY.
    pub fn is_ready(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
            && self.inner.accepting.load(Ordering::SeqCst)
            && (!self.inner.opts.strict_readiness || self.inner.models.all_ready())
    }

    /// Readiness now, then each time it changes (start-up finishing, shutdown beginning, and under
    /// `--strict-readiness` a model's state), for front-ends that push it (gRPC health `Watch`). The
    /// stream holds no strong handle: it ends when the server is dropped.
    pub fn readiness(&self) -> BoxStream<'static, bool> {
        let changes = (self.inner.flags_changed.subscribe(), self.inner.models.changes());
        let state = (Arc::downgrade(&self.inner), changes, None);
        futures_util::stream::unfold(state, |(inner, mut changes, last)| async move {
            loop {
                if last.is_some() {
                    let (flags, models) = &mut changes;
                    let open = tokio::select! {
                        r = flags.changed() => r.is_ok(),
                        r = models.changed() => r.is_ok(),
                    };
                    if !open {
                        return None;
                    }
                }
                let ready = Server { inner: inner.upgrade()? }.is_ready();
                if last != Some(ready) {
                    return Some((ready, (inner, changes, Some(ready))));
                }
            }
        })
        .boxed()
    }

    /// Stops readiness (for shutdown); requests in flight continue.
    pub fn stop_accepting(&self) {
        self.inner.accepting.store(false, Ordering::SeqCst);
        self.inner.flags_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Unloads every model, waiting for queued and running requests to finish and for the backends'
    /// finalizers to run.
    pub async fn unload_all(&self) {
        self.inner.models.unload_all().await;
    }

    pub fn metadata(&self) -> ServerMetadata {
        ServerMetadata {
            name: self.inner.opts.id.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            extensions: EXTENSIONS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Whether a model (version) is ready: loaded, and every instance that can tell (a Python stub, and
    /// the model's own `is_model_ready`) says it can serve.
    pub async fn model_ready(&self, name: &str, version: &str) -> Result<bool> {
        let version = parse_version(version)?;
        if !self.inner.models.is_ready(name, version)? {
            return Ok(false);
        }
        let Ok(model) = self.inner.models.get(name, version) else { return Ok(false) };
        if model.probes.is_empty() {
            return Ok(true);
        }
        let probes = model.probes.clone();
        // A probe may ask a process, so it runs off the runtime's workers.
        Ok(tokio::task::spawn_blocking(move || probes.iter().all(|p| p.ready())).await.unwrap_or(false))
    }

    fn model(&self, name: &str, version: &str) -> Result<Arc<LoadedModel>> {
        self.inner.models.get(name, parse_version(version)?)
    }

    pub fn model_metadata(&self, name: &str, version: &str) -> Result<ModelMetadata> {
        let m = self.model(name, version)?;
        let versions = self.inner.models.ready_versions(name).iter().map(i64::to_string).collect();
        let batch: Vec<i64> = if m.io.max_batch_size > 0 { vec![-1] } else { Vec::new() };
        let meta = |specs: &[validate::TensorSpec]| {
            specs
                .iter()
                .map(|s| TensorMetadata {
                    name: s.name.clone(),
                    datatype: s.datatype.as_str().to_string(),
                    shape: batch.iter().chain(s.dims.iter()).copied().collect(),
                })
                .collect()
        };
        Ok(ModelMetadata {
            name: m.name.clone(),
            versions,
            platform: if m.config.platform.is_empty() { m.config.backend.clone() } else { m.config.platform.clone() },
            inputs: meta(&m.io.inputs),
            outputs: meta(&m.io.outputs),
        })
    }

    pub fn model_config(&self, name: &str, version: &str) -> Result<Arc<ModelConfig>> {
        Ok(self.model(name, version)?.config.clone())
    }

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
    async fn infer_timed(
        &self,
        req: InferRequest,
        mut trace: Option<&mut Trace>,
    ) -> Result<(InferResponse, ExecTimings)> {
        let start = Instant::now();
        let model = self.inner.models.get(&req.model_name, req.model_version)?;
        if let Some(t) = trace.as_deref_mut() {
            t.set_model(&model.name, model.version);
            t.stamp(Activity::RequestStart, start);
        }
        let result = self.infer_on(&model, req, trace.as_deref_mut()).await;
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
                Err(e)
            }
        }
    }

    /// Whether the model (version) serving `name` is decoupled (`model_transaction_policy { decoupled: true }`):
    /// its responses can only be streamed.
    pub fn is_decoupled(&self, name: &str, version: Option<i64>) -> bool {
        self.inner.models.get(name, version).is_ok_and(|m| is_decoupled(&m.config))
    }

    /// Runs one inference whose responses are streamed: a decoupled model's 0..n responses as it sends
    /// them, or the single response of any other model. The stream ends after the final response or an
    /// error.
    pub async fn infer_stream(&self, req: InferRequest) -> Result<BoxStream<'static, Result<StreamResponse>>> {
        let model = self.inner.models.get(&req.model_name, req.model_version)?;
        if !is_decoupled(&model.config) {
            let response = self.infer(req).await?;
            let one = StreamResponse { response, is_final: true, empty: false, error: None };
            return Ok(futures_util::stream::once(async move { Ok(one) }).boxed());
        }
        let start = Instant::now();
        if let Err(e) = refuse_reentry(&model, &req) {
            model.stats.record_failure(start.elapsed(), FailureReason::Other);
            return Err(e);
        }
        let mut req = req;
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
        let (tx, executed) = tokio::sync::oneshot::channel();
        let job = Job {
            exec: prepared.exec,
            batch_size: prepared.batch_size,
            enqueued: Instant::now(),
            control: prepared.control,
            reply: tx,
        };
        if let Err(e) = model.scheduler.submit(job) {
            model.stats.record_failure(start.elapsed(), FailureReason::Rejected);
            return Err(e);
        }
        let state = DecoupledStream {
            server: self.clone(),
            model,
            id,
            requested: prepared.outputs,
            responses,
            executed: Some(executed),
            start,
            done: false,
        };
        Ok(futures_util::stream::unfold(state, DecoupledStream::next).boxed())
    }

    /// Runs a request on one model version; a failure says which stage failed, for the metrics.
    async fn infer_on(
        &self,
        model: &Arc<LoadedModel>,
        req: InferRequest,
        trace: Option<&mut Trace>,
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
                if let Some(outputs) = c.lookup(&key) {
                    model.stats.cache_hit.add(t.elapsed().as_nanos() as u64);
                    let response = self.respond(model, id, &prepared.outputs, outputs).map_err(other)?;
                    return Ok((response, ExecTimings::default()));
                }
                Some((c, key, t.elapsed()))
            }
            _ => None,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let enqueued = Instant::now();
        let job = Job {
            exec: prepared.exec,
            batch_size: prepared.batch_size,
            enqueued,
            control: prepared.control,
            reply: tx,
        };
        model.scheduler.submit(job).map_err(|e| (e, FailureReason::Rejected))?;
        let result = rx
            .await
            .map_err(|_| {
                other(Error::internal(format!("model '{}' stopped before answering the request", model.name)))
            })?
            // The scheduler answers UNAVAILABLE for requests it gave up on (timed out in the queue,
            // model unloaded); anything else failed in the backend.
            .map_err(|e| {
                let reason =
                    if e.kind == ErrorKind::Unavailable { FailureReason::Rejected } else { FailureReason::Backend };
                (e, reason)
            })?;
        if let Some(t) = trace {
            stamp_execution(t, enqueued, &result.timings);
        }
        if let Some((c, key, lookup)) = cached {
            let t = Instant::now();
            c.insert(key, result.outputs.clone());
            model.stats.cache_miss.add((lookup + t.elapsed()).as_nanos() as u64);
        }
        let mut response = self.respond(model, id, &prepared.outputs, result.outputs).map_err(other)?;
        response.parameters = result.parameters;
        Ok((response, result.timings))
    }

    /// Whether a model version uses the response cache: enabled in its config and on the server.
    fn cache_enabled(&self, model: &LoadedModel) -> bool {
        self.inner.cache.is_some() && model.config.response_cache.as_ref().is_some_and(|c| c.enable)
    }

    /// Post-processes a model's outputs for the client: `reshape` and classification.
    fn respond(
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

    /// The cloud repositories, for their download counters.
    pub fn remote_repositories(&self) -> &[Arc<dyn RemoteRepository>] {
        self.inner.models.remotes()
    }

    /// The memory pools (pinned host memory, device memory per GPU).
    pub fn pools(&self) -> &crate::memory::pool::Pools {
        &self.inner.pools
    }

    /// The shared-memory regions (system and CUDA) clients registered: register, unregister, status.
    pub fn shared_memory(&self) -> &SharedMemoryManager {
        &self.inner.shm
    }

    /// The metrics models created, for `/metrics`.
    pub fn custom_metrics(&self) -> &CustomMetrics {
        &self.inner.custom_metrics
    }

    /// The trace extension's hot-path API: whether tracing is on, and sampling a request.
    pub fn tracer(&self) -> &Tracer {
        &self.inner.tracer
    }

    /// The trace settings of a model (ready, as in tritonserver), or the global ones.
    pub fn trace_settings(&self, model: Option<&str>) -> Result<TraceSettings> {
        if let Some(name) = model {
            self.inner.models.get(name, None)?;
        }
        Ok(self.inner.tracer.settings(model))
    }

    /// Updates a model's trace settings (it must be ready, as in tritonserver) or the global ones, and
    /// returns the settings now in force.
    pub fn update_trace_settings(&self, model: Option<&str>, update: &TraceUpdate) -> Result<TraceSettings> {
        if let Some(name) = model {
            self.inner.models.get(name, None)?;
        }
        self.inner.tracer.update(model, update)
    }

    /// A receiver that sees a new value after every change of a model's state (loads, unloads,
    /// failures, versions coming and going).
    pub fn model_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.models.changes()
    }

    /// Every model version the server knows with its state, without reading the repositories
    /// (unlike [`Self::repository_index`]).
    pub fn model_states(&self) -> Vec<IndexEntry> {
        self.inner.models.states()
    }

    pub fn repository_index(&self, ready_only: bool) -> Vec<IndexEntry> {
        self.inner.models.index(ready_only)
    }

    pub async fn load_model(&self, name: &str, opts: LoadOptions) -> Result<()> {
        self.check_control("load")?;
        self.inner.models.load(name, opts).await
    }

    pub async fn unload_model(&self, name: &str) -> Result<()> {
        self.check_control("unload")?;
        self.inner.models.unload(name).await
    }

    /// `--model-control-mode`.
    pub fn control_mode(&self) -> ControlMode {
        self.inner.opts.control_mode
    }

    fn check_control(&self, what: &str) -> Result<()> {
        if self.inner.opts.control_mode == ControlMode::Explicit {
            Ok(())
        } else {
            Err(Error::unavailable(format!(
                "explicit model {what} is not allowed: the server runs with --model-control-mode={}",
                match self.inner.opts.control_mode {
                    ControlMode::None => "none",
                    ControlMode::Poll => "poll",
                    ControlMode::Explicit => "explicit",
                }
            )))
        }
    }

    /// Statistics for every loaded version, or for one model (and version).
    pub fn statistics(&self, name: Option<&str>, version: &str) -> Result<Vec<ModelStatistics>> {
        let version = parse_version(version)?;
        let loaded = self.inner.models.loaded();
        let snap = |m: &Arc<LoadedModel>| ModelStatistics {
            name: m.name.clone(),
            version: m.version,
            stats: m.stats.snapshot(),
            failures: FailureReason::ALL.iter().map(|&r| (r, m.stats.failures(r))).collect(),
            pending: m.stats.pending.load(Ordering::Relaxed),
            load_duration: m.load_duration,
            cache_enabled: self.cache_enabled(m),
        };
        match name {
            None => Ok(loaded.iter().map(snap).collect()),
            Some(n) => {
                // Unknown models and versions are errors, as in Triton.
                self.inner.models.get(n, version)?;
                Ok(loaded.iter().filter(|m| m.name == n && version.is_none_or(|v| v == m.version)).map(snap).collect())
            }
        }
    }

    /// [`Self::infer`], also returning the execution's compute times, for front-ends that report where
    /// a request's time went (the image pipeline).
    pub async fn infer_with_timings(&self, req: InferRequest) -> Result<(InferResponse, ExecTimings)> {
        self.infer_timed(req, None).await
    }

    /// The labels of a model output's `label_filename`, if it has one.
    pub fn model_labels(&self, name: &str, version: Option<i64>, output: &str) -> Option<Arc<Vec<String>>> {
        self.inner.models.get(name, version).ok()?.labels.get(output).cloned()
    }
}

/// Adds the scheduler's and backend's timestamps: QUEUE_START when the job was queued, COMPUTE_START
/// when an instance took it, and the ends of the input, infer and output phases from their durations.
fn stamp_execution(t: &mut Trace, enqueued: Instant, timings: &crate::model_api::ExecTimings) {
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

/// Runs ensemble steps through [`Server::infer`], so a composing model's validation, scheduler and
/// statistics apply to them as to any request.
struct StepsThroughServer(Weak<Inner>);

impl StepRunner for StepsThroughServer {
    fn run(&self, req: InferRequest) -> futures_util::future::BoxFuture<'static, Result<ExecResult>> {
        let inner = self.0.upgrade();
        Box::pin(async move {
            let inner = inner.ok_or_else(|| Error::unavailable("the server is shutting down"))?;
            let (response, timings) = Server { inner }.infer_timed(req, None).await?;
            Ok(ExecResult { outputs: response.outputs, timings, parameters: response.parameters })
        })
    }
}

fn is_decoupled(cfg: &ModelConfig) -> bool {
    cfg.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
}

/// The responses of one request to a decoupled model, as [`Server::infer_stream`] hands them out.
struct DecoupledStream {
    server: Server,
    model: Arc<LoadedModel>,
    /// The request's id, carried by every response.
    id: String,
    /// The outputs the client asked for (reshape and classification apply per response).
    requested: Vec<RequestedOutput>,
    /// What the model sends.
    responses: crate::model_api::ResponseReceiver,
    /// The scheduler's answer: only says that execution ended, or why it could not run.
    executed: Option<tokio::sync::oneshot::Receiver<Result<ExecResult>>>,
    /// For the request statistics.
    start: Instant,
    /// Set after the final response or an error.
    done: bool,
}

impl DecoupledStream {
    async fn next(mut self) -> Option<(Result<StreamResponse>, Self)> {
        if self.done {
            return None;
        }
        let item = match self.responses.recv().await {
            Some(Ok(r)) => {
                let response =
                    self.server.respond(&self.model, self.id.clone(), &self.requested, r.outputs).map(|mut resp| {
                        resp.parameters = r.parameters;
                        StreamResponse { response: resp, is_final: r.is_final, empty: r.empty, error: r.error }
                    });
                if r.is_final || response.is_err() {
                    self.done = true;
                }
                response
            }
            Some(Err(e)) => {
                self.done = true;
                Err(e)
            }
            None => {
                // Every sender is gone without a final response: the request never ran (the error says
                // why), or the model dropped it.
                self.done = true;
                match self.executed.take()?.await {
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(_)) => return None,
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
                Err(_) => self.model.stats.record_failure(self.start.elapsed(), FailureReason::Backend),
            }
        }
        Some((item, self))
    }
}

/// What backends ask of the server (Python BLS, model control), through a weak handle.
struct ApiThroughServer(Weak<Inner>);

impl ApiThroughServer {
    fn server(&self) -> Result<Server> {
        self.0.upgrade().map(|inner| Server { inner }).ok_or_else(|| Error::unavailable("the server is shutting down"))
    }
}

impl ServerApi for ApiThroughServer {
    fn infer(&self, req: InferRequest) -> futures_util::future::BoxFuture<'static, Result<InferResponse>> {
        let server = self.server();
        Box::pin(async move { server?.infer(req).await })
    }

    fn infer_stream(
        &self,
        req: InferRequest,
    ) -> futures_util::future::BoxFuture<'static, Result<BoxStream<'static, Result<StreamResponse>>>> {
        let server = self.server();
        Box::pin(async move { server?.infer_stream(req).await })
    }

    fn load_model(&self, name: String, opts: LoadOptions) -> futures_util::future::BoxFuture<'static, Result<()>> {
        let server = self.server();
        Box::pin(async move { server?.load_model(&name, opts).await })
    }

    fn unload_model(&self, name: String) -> futures_util::future::BoxFuture<'static, Result<()>> {
        let server = self.server();
        Box::pin(async move { server?.unload_model(&name).await })
    }

    fn model_ready(&self, name: String, version: String) -> futures_util::future::BoxFuture<'static, Result<bool>> {
        let server = self.server();
        Box::pin(async move { server?.model_ready(&name, &version).await })
    }

    fn is_decoupled(&self, name: &str, version: Option<i64>) -> Result<bool> {
        let server = self.server()?;
        let model = server.inner.models.get(name, version)?;
        Ok(is_decoupled(&model.config))
    }

    fn custom_metrics(&self) -> Option<Arc<CustomMetrics>> {
        self.0.upgrade().map(|inner| inner.custom_metrics.clone())
    }
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
fn refuse_reentry(model: &LoadedModel, req: &InferRequest) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_streams_each_change_and_ends_with_the_server() {
        let repo = tempfile::tempdir().unwrap();
        let broken = repo.path().join("broken");
        std::fs::create_dir_all(broken.join("1")).unwrap();
        std::fs::write(broken.join("config.pbtxt"), "max_batch_sizee: 8\n").unwrap();
        let server = Server::new(ServerOptions::explicit(vec![repo.path().to_path_buf()]));
        let mut readiness = server.readiness();
        let mut next = async || tokio::time::timeout(Duration::from_secs(10), readiness.next()).await.unwrap();
        assert_eq!(next().await, Some(false), "before start-up");
        server.startup().await.unwrap();
        assert_eq!(next().await, Some(true));
        // Strict readiness: a model that failed to load counts until it is unloaded.
        assert!(server.load_model("broken", LoadOptions::default()).await.is_err());
        assert_eq!(next().await, Some(false));
        server.unload_model("broken").await.unwrap();
        assert_eq!(next().await, Some(true));
        server.stop_accepting();
        assert_eq!(next().await, Some(false), "shutdown began");
        drop(server);
        assert_eq!(next().await, None, "the server is gone");
    }
}
