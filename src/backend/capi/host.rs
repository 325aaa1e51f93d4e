//! The TRITONBACKEND host as one more backend of `model_api`: a model whose `backend` names no
//! built-in backend is served by `libtriton_<name>.so`, found as tritonserver finds it (the model's
//! version folder, its folder, then `--backend-directory/<name>/`). Libraries, models and instances
//! are initialized and finalized in Triton's order. Each instance's scheduler thread hands the requests
//! it gets (a dynamic batch is a list of requests, as in Triton) to a thread of the instance's own that
//! calls `Execute`, and waits, for a bounded time, until Execute has returned and the backend has sent
//! each request's final response and released it. A backend that never comes back costs its requests
//! and, at unload, that one thread (abandoned), never the scheduler, the unload or a reload.

use super::abi::{
    Bell, BufferAttributesObj, Completion, InputObj, Origin, ParamSlot, RequestObj, ServerObj, INSTANCEGROUPKIND_CPU,
    INSTANCEGROUPKIND_GPU, INSTANCEGROUPKIND_MODEL,
};
use super::library::{Instance, Library, Model};
use crate::error::{Error, Result};
use crate::model_api::custom_metrics::{CustomMetrics, MetricKind, MetricOp};
use crate::model_api::types::{Parameters, Tensor};
use crate::model_api::{
    Backend, BackendConfig, ExecRequest, ExecResult, ExecTimings, InstanceKind, InstanceSpec, ModelContext,
    ModelInstance, Retirement, SequenceId,
};
use crate::proto::inference::model_config::SchedulingChoice;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

pub use crate::model_api::DEFAULT_BACKEND_DIRECTORY;

/// How long an instance waits for a backend to answer and release a request, unless
/// `--backend-config=<name>,response-timeout-ms=N` says otherwise.
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest an unload waits for a backend to finish the requests it holds.
const UNLOAD_WAIT: Duration = Duration::from_secs(30);

/// `--backend-directory` (global in the backend configuration), or tritonserver's default.
fn backend_directory(config: &BackendConfig) -> PathBuf {
    config.global.get("backend-directory").map_or_else(|| PathBuf::from(DEFAULT_BACKEND_DIRECTORY), PathBuf::from)
}

/// The host: finds backend libraries and shares libraries and model versions while they are in use.
pub struct CApiBackend {
    config: BackendConfig,
    /// What backends see as `TRITONSERVER_Server`.
    server: Arc<ServerObj>,
    directory: PathBuf,
}

/// A model version: its name, version, folder and configuration (JSON).
type ModelKey = (String, i64, PathBuf, String);

/// Backend libraries by path, and model versions, while in use: one process-wide set, shared by the
/// backend and the auto-completer.
static LIBRARIES: Mutex<Option<HashMap<PathBuf, Weak<Library>>>> = Mutex::new(None);
static MODELS: Mutex<Vec<(ModelKey, Weak<Model>)>> = Mutex::new(Vec::new());
/// Models initialized to complete their configuration (name, version, folder), kept until their
/// instances are created, so that the backend initializes each model once, as in Triton.
static COMPLETED: Mutex<Vec<(VersionKey, Arc<Model>)>> = Mutex::new(Vec::new());

/// A model version without its configuration: name, version, folder.
type VersionKey = (String, i64, PathBuf);

impl CApiBackend {
    pub fn new(config: &BackendConfig, api: Option<Arc<dyn crate::model_api::ServerApi>>) -> CApiBackend {
        let server = ServerObj::new(api);
        super::inprocess::set_current(&server);
        let directory = backend_directory(config);
        CApiBackend { config: config.clone(), server, directory }
    }

    /// Where tritonserver looks for backend `name` of a model, in order.
    pub fn search_path(&self, version_dir: &Path, model_dir: &Path, name: &str) -> Vec<PathBuf> {
        let file = format!("libtriton_{name}.so");
        vec![version_dir.join(&file), model_dir.join(&file), self.directory.join(name).join(&file)]
    }

    fn library(&self, ctx: &ModelContext, name: &str) -> Result<Arc<Library>> {
        if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
            return Err(Error::invalid(format!("model '{}': '{name}' is not a backend name", ctx.name)));
        }
        let candidates = self.search_path(&ctx.version_dir, &ctx.model_dir, name);
        let path = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
            Error::unavailable(format!(
                "model '{}': backend '{name}' is neither built in nor installed: no libtriton_{name}.so in {}",
                ctx.name,
                candidates
                    .iter()
                    .filter_map(|p| p.parent().map(|d| format!("'{}'", d.display())))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        self.load_library(path, name)
    }

    fn load_library(&self, path: &Path, name: &str) -> Result<Arc<Library>> {
        let mut libraries = LIBRARIES.lock();
        let libraries = libraries.get_or_insert_with(HashMap::new);
        if let Some(lib) = libraries.get(path).and_then(Weak::upgrade) {
            return Ok(lib);
        }
        let lib = Arc::new(Library::load(path, name, self.backend_config_json(name))?);
        libraries.retain(|_, w| w.strong_count() > 0);
        libraries.insert(path.to_path_buf(), Arc::downgrade(&lib));
        Ok(lib)
    }

    /// `TRITONBACKEND_BackendConfig`: `{"cmdline": {...}}` with the backend's `--backend-config`
    /// settings over the global ones, as tritonserver passes them.
    fn backend_config_json(&self, name: &str) -> String {
        let mut cmdline = serde_json::Map::new();
        for (k, v) in &self.config.global {
            cmdline.insert(k.clone(), v.clone().into());
        }
        if let Some(own) = self.config.per_backend.get(name) {
            for (k, v) in own {
                cmdline.insert(k.clone(), v.clone().into());
            }
        }
        cmdline.entry("backend-directory").or_insert_with(|| self.directory.display().to_string().into());
        serde_json::json!({ "cmdline": cmdline }).to_string()
    }

    fn model(&self, library: Arc<Library>, ctx: &ModelContext) -> Result<Arc<Model>> {
        // The configuration is part of the key: a reload with a changed configuration initializes a
        // new model while the old version's instances still serve.
        let json = crate::model_config::pbtxt::config_to_json(&ctx.config).to_string();
        let key = (ctx.name.clone(), ctx.version, ctx.model_dir.clone(), json.clone());
        let mut models = MODELS.lock();
        models.retain(|(_, w)| w.strong_count() > 0);
        if let Some(m) = models.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            return Ok(m);
        }
        let completed = {
            let mut c = COMPLETED.lock();
            let at = c.iter().position(|((n, v, d), _)| *n == ctx.name && *v == ctx.version && *d == ctx.model_dir);
            at.map(|i| c.remove(i).1)
        };
        if let Some(model) = completed {
            models.push((key, Arc::downgrade(&model)));
            return Ok(model);
        }
        let version = u64::try_from(ctx.version).unwrap_or(0);
        let model =
            Arc::new(Model::new(library, &ctx.name, version, &ctx.model_dir, json, false, self.server.clone())?);
        models.push((key, Arc::downgrade(&model)));
        Ok(model)
    }
}

/// Auto-completes the configuration of models served by Triton backend libraries the way Triton
/// does: the backend's `TRITONBACKEND_ModelInitialize` runs with auto-complete on and may set a new
/// configuration (`TRITONBACKEND_ModelSetConfig`), which the server then validates. The model stays
/// initialized for its instances.
pub struct CCompleter {
    host: CApiBackend,
    /// Backend names tritonrs serves itself (these are not completed through a library).
    builtin: Vec<&'static str>,
}

impl CCompleter {
    pub fn new(config: &BackendConfig, builtin: Vec<&'static str>) -> CCompleter {
        let directory = backend_directory(config);
        // Completers are made before the server: the model is given the running server's object
        // when it completes (see `complete`); this one serves only without a server.
        let server = ServerObj::new(None);
        CCompleter { host: CApiBackend { config: config.clone(), server, directory }, builtin }
    }
}

impl crate::model_config::Completer for CCompleter {
    fn complete(
        &self,
        dir: &Path,
        name: &str,
        cfg: crate::proto::inference::ModelConfig,
    ) -> std::result::Result<crate::proto::inference::ModelConfig, crate::model_config::ConfigFailure> {
        let backend = cfg.backend.clone();
        if backend.is_empty() || self.builtin.contains(&backend.as_str()) || backend.contains(['/', '\0']) {
            return Ok(cfg);
        }
        // Triton completes from the version that will be served: the latest.
        let Some(version) = crate::model_config::list_versions(dir).into_iter().next_back() else { return Ok(cfg) };
        let version_dir = dir.join(version.to_string());
        let Some(path) = self.host.search_path(&version_dir, dir, &backend).into_iter().find(|p| p.is_file()) else {
            // Not installed: the load says so.
            return Ok(cfg);
        };
        let fail = |error: Error| crate::model_config::ConfigFailure { error, version: Some(version) };
        if !super::library::api_exported() {
            super::library::forwarding().map_err(|why| fail(Error::unavailable(why.to_string())))?;
        }
        let library = self.host.load_library(&path, &backend).map_err(fail)?;
        let json = crate::model_config::pbtxt::config_to_json(&cfg).to_string();
        let v = u64::try_from(version).unwrap_or(0);
        // The running server's object, so that the model (kept for its instances) can call back into it.
        let server = super::inprocess::current().unwrap_or_else(|| self.host.server.clone());
        server.learn_runtime();
        let model = Model::new(library, name, v, dir, json, true, server).map_err(fail)?;
        let completed = model.config_json();
        let new_cfg = crate::model_config::pbtxt::config_from_json(&completed).map_err(|e| {
            fail(Error::invalid(format!("backend '{backend}' completed the configuration of '{name}' badly: {}", e)))
        })?;
        let mut c = COMPLETED.lock();
        c.retain(|((n, _, d), _)| !(n == name && d == dir));
        c.push(((name.to_string(), version, dir.to_path_buf()), Arc::new(model)));
        Ok(new_cfg)
    }
}

impl Backend for CApiBackend {
    fn name(&self) -> &'static str {
        "triton-c-api"
    }

    fn check_instance(&self, ctx: &ModelContext, _spec: &InstanceSpec) -> Result<()> {
        // Loaded whether or not the executable exports the API: backends that need the library find it.
        let forwarding = super::library::forwarding();
        if !super::library::api_exported() {
            if let Err(why) = forwarding {
                return Err(Error::unavailable(format!(
                    "model '{}': backend '{}' needs Triton's C API, which this tritonrs binary does not export \
                     (it was linked without a symbol list, as the glibc-2.27 portable builds are), and {why}",
                    ctx.name, ctx.config.backend
                )));
            }
        }
        Ok(())
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let name = ctx.config.backend.clone();
        let decoupled = ctx.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        // The core has run `check_instance` and, for a GPU instance, checked its GPU (as Triton's core does).
        let (kind, device) = match spec.kind {
            InstanceKind::Cpu => (INSTANCEGROUPKIND_CPU, 0),
            InstanceKind::Gpu { device_id } => (INSTANCEGROUPKIND_GPU, device_id),
            InstanceKind::Model => (INSTANCEGROUPKIND_MODEL, 0),
        };
        self.server.learn_runtime();
        let library = self.library(ctx, &name)?;
        let model = self.model(library, ctx)?;
        let instance = Instance::new(model, &spec.name, kind, device)?;
        let timeout = self
            .config
            .get(&name, "response-timeout-ms")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_RESPONSE_TIMEOUT, Duration::from_millis);
        let state_outputs: Arc<[String]> = match &ctx.config.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(s)) => s.state.iter().map(|st| st.output_name.clone()).collect(),
            _ => Arc::from(Vec::new()),
        };
        let shared = Arc::new(Shared {
            bell: Arc::default(),
            exec: Mutex::default(),
            retired: Mutex::default(),
            instance: spec.name.clone(),
            origin: instance.model.origin.clone(),
            metrics: self.server.api.as_ref().and_then(|a| a.custom_metrics()),
            gauge: Mutex::default(),
        });
        let served_by = instance.model.library.path.display().to_string();
        let model_handle = Arc::downgrade(&instance.model);
        let memory = instance.model.memory_usage();
        let (to_executor, requests) = crossbeam_channel::bounded::<Handed>(1);
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("exec-{}", spec.name))
            .spawn(move || run_executor(instance, &requests, &s))
            .map_err(|e| {
                Error::internal(format!("cannot start the execute thread of instance '{}': {e}", spec.name))
            })?;
        Ok(Box::new(CInstance {
            shared,
            to_executor: Some(to_executor),
            timeout,
            abandoned: 0,
            decoupled,
            state_outputs,
            outstanding: Vec::new(),
            runtime: self.server.runtime.lock().clone(),
            served_by,
            model_handle,
            memory,
        }))
    }
}

/// A request list handed to an instance's execute thread, with the span the scheduler runs it in.
type Handed = (Vec<Arc<RequestObj>>, tracing::Span);

/// What an instance's execute thread does, as the instance thread sees it.
#[derive(Default)]
struct ExecState {
    /// When the request list now inside `Execute` was handed over; `None` while Execute is not running.
    inside_since: Option<Instant>,
    /// What the last Execute returned, until the instance thread takes it.
    returned: Option<Result<()>>,
    /// The thread has finalized the instance and ended.
    exited: bool,
    /// The instance thread left this thread behind (see [`CInstance::abandon`]).
    abandoned: bool,
}

/// What an instance thread shares with its execute thread and with the model's lifecycle.
struct Shared {
    /// Rung by the execute thread, by the requests' completions and by the retirement.
    bell: Arc<Bell>,
    exec: Mutex<ExecState>,
    /// When the model version left service, and whether it was unloaded (not replaced).
    retired: Mutex<Option<(Instant, bool)>>,
    /// The instance's name, for messages.
    instance: String,
    origin: Arc<Origin>,
    /// Where the abandoned-thread gauge lives (while the server does).
    metrics: Option<Arc<CustomMetrics>>,
    /// This instance's handle on the gauge, once it was abandoned.
    gauge: Mutex<Option<u64>>,
}

impl Retirement for Shared {
    fn retiring(&self, unload: bool) {
        {
            let mut r = self.retired.lock();
            let (at, was_unload) = r.unwrap_or((Instant::now(), false));
            *r = Some((at, unload || was_unload));
        }
        self.bell.ring();
    }
}

/// The gauge of threads left inside a backend after their instance was given up (they leave it when
/// the backend finally returns).
const ABANDONED_GAUGE: crate::metrics_text::names::Family = crate::metrics_text::names::BACKEND_ABANDONED_THREADS;

/// Abandoned instance threads in this process so far, for the log.
static ABANDONED_THREADS: AtomicUsize = AtomicUsize::new(0);

impl Shared {
    /// Moves this instance's abandoned-thread gauge by `delta`. The handles are kept for the process,
    /// so the gauge stays on `/metrics` (at 0 once the thread came back).
    fn count_abandoned(&self, delta: f64) {
        let Some(m) = &self.metrics else { return };
        let mut gauge = self.gauge.lock();
        let id = match *gauge {
            Some(id) => Ok(id),
            None => m.family(ABANDONED_GAUGE.name, ABANDONED_GAUGE.help, MetricKind::Gauge).and_then(|family| {
                let labels = [("backend", &self.origin.backend), ("model", &self.origin.model)];
                m.metric(family, labels.into_iter().map(|(k, v)| (k.to_string(), v.clone())).collect(), None)
            }),
        };
        match id.and_then(|id| m.update(id, MetricOp::Increment(delta)).map(|()| id)) {
            Ok(id) => *gauge = Some(id),
            Err(e) => tracing::warn!("Counting an abandoned backend thread on /metrics failed: {}", e.message),
        }
    }
}

/// An instance's execute thread: runs `TRITONBACKEND_ModelInstanceExecute` for each request list the
/// instance thread hands it and, once the instance thread lets go, finalizes the instance. It is a
/// thread of its own so that a backend whose Execute (or finalizer) never returns holds only this
/// thread: the instance thread stops waiting after the response timeout, and unload leaves this one
/// behind (see [`CInstance::abandon`]) instead of waiting for ever.
fn run_executor(mut instance: Instance, requests: &crossbeam_channel::Receiver<Handed>, shared: &Shared) {
    while let Ok((list, span)) = requests.recv() {
        // In the requests' span, so what the backend logs meanwhile (TRITONSERVER_LogMessage) names them.
        let result = span
            .in_scope(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| instance.execute(list))))
            .unwrap_or_else(|_| Err(Error::internal("handing requests to the backend panicked; this is a bug")));
        {
            let mut s = shared.exec.lock();
            s.inside_since = None;
            s.returned = Some(result);
        }
        shared.bell.ring();
    }
    drop(instance);
    let abandoned = {
        let mut s = shared.exec.lock();
        s.exited = true;
        s.abandoned
    };
    shared.bell.ring();
    if abandoned {
        shared.count_abandoned(-1.0);
        tracing::warn!(
            "Model '{}': backend '{}' returned at last to the abandoned instance '{}', which is now finalized.",
            shared.origin.model,
            shared.origin.backend,
            shared.instance
        );
    }
}

/// When an instance stops waiting on its backend: at `own`, or sooner once its model was retired at
/// `retired`: unload then waits at most the response timeout (and never more than [`UNLOAD_WAIT`])
/// for what the backend still holds, counted from the retirement, however many requests there are.
fn give_up_at(own: Instant, retired: Option<Instant>, timeout: Duration) -> Instant {
    retired.map_or(own, |at| own.min(at + timeout.min(UNLOAD_WAIT)))
}

/// One instance of a C backend model: the scheduler's thread runs it, and a thread of its own calls
/// into the backend (see [`run_executor`]).
struct CInstance {
    shared: Arc<Shared>,
    /// To the execute thread; taken when the instance is dropped, which lets the thread finalize.
    to_executor: Option<crossbeam_channel::Sender<Handed>>,
    timeout: Duration,
    /// Requests the backend never finished with; their memory stays the backend's.
    abandoned: usize,
    /// Decoupled requests the backend may still answer; unload waits for them (bounded).
    outstanding: Vec<Arc<Completion>>,
    /// Where a decoupled request's deadline runs.
    runtime: Option<tokio::runtime::Handle>,
    /// Responses go to each request's responder as the backend sends them (also after Execute
    /// returned, from any thread, until the final flag); Execute's return is all the scheduler waits for.
    decoupled: bool,
    /// The model's implicit state outputs: not requested outputs for the backend, but written through
    /// `TRITONBACKEND_StateUpdate`.
    state_outputs: Arc<[String]>,
    /// The backend library's path.
    served_by: String,
    /// The backend's model, forgotten by the host if this instance is abandoned.
    model_handle: Weak<Model>,
    /// Where the backend's memory reports for the model and its instances add up.
    memory: Arc<crate::model_api::MemoryUsage>,
}

/// The C view of one request: its tensors in host memory, its names as C strings.
fn request_object(
    req: &ExecRequest,
    state_outputs: &Arc<[String]>,
    shared: &Shared,
) -> Result<(Arc<RequestObj>, Arc<Completion>)> {
    use super::abi::{cstring, datatype_to_c};
    let inputs = req
        .inputs
        .iter()
        .map(|t| {
            let data = t.data.to_host()?;
            Ok(InputObj {
                name: cstring(&t.name),
                datatype: datatype_to_c(t.datatype),
                shape: t.shape.clone(),
                attributes: BufferAttributesObj::host(data.len()),
                data,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let (correlation_id, correlation_str) = match &req.meta.correlation_id {
        Some(SequenceId::U64(v)) => (*v, String::new()),
        Some(SequenceId::Str(s)) => (0, s.clone()),
        None => (0, String::new()),
    };
    let parameters = req
        .meta
        .parameters
        .iter()
        .map(|(k, v)| {
            let (t, slot): (u32, ParamSlot) = ParamSlot::from_value(v);
            (cstring(k), t, slot)
        })
        .collect();
    let completion = Arc::new(Completion {
        sink: req.responder.clone(),
        bell: shared.bell.clone(),
        origin: shared.origin.clone(),
        request_id: req.meta.id.clone(),
        progress: Default::default(),
        signals: req.meta.signals.clone(),
    });
    let obj = RequestObj {
        id: cstring(&req.meta.id),
        correlation_id,
        correlation_str: cstring(&correlation_str),
        flags: req.meta.flags,
        inputs,
        outputs: req.outputs.iter().filter(|o| !state_outputs.contains(o)).map(|o| cstring(o)).collect(),
        parameters,
        completion: completion.clone(),
        state_outputs: state_outputs.clone(),
        states: Default::default(),
    };
    Ok((Arc::new(obj), completion))
}

impl CInstance {
    fn give_up_at(&self, own: Instant) -> Instant {
        give_up_at(own, self.shared.retired.lock().map(|(at, _)| at), self.timeout)
    }

    fn unloaded(&self) -> bool {
        self.shared.retired.lock().is_some_and(|(_, unload)| unload)
    }

    fn unloaded_error(&self) -> Error {
        Error::unavailable(format!("model '{}' was unloaded before the request ran", self.shared.origin.model))
    }

    /// Whether requests may be handed to the backend now: not once the model is unloaded (they fail at
    /// once instead of each waiting on a backend that may never answer), and only once the backend's
    /// previous Execute returned: a backend still inside it gets up to the response timeout to come
    /// back, then the requests fail rather than wait behind it.
    fn ready_to_execute(&self) -> Result<()> {
        let since = self.shared.exec.lock().inside_since;
        if let Some(since) = since {
            let deadline = Instant::now() + self.timeout;
            let back = self.shared.bell.wait(
                || self.unloaded() || self.shared.exec.lock().inside_since.is_none(),
                || self.give_up_at(deadline),
            );
            if back && !self.unloaded() {
                self.shared.exec.lock().returned = None;
                tracing::info!(
                    "Model '{}': backend '{}' returned from TRITONBACKEND_ModelInstanceExecute after {:.1} s; instance \
                     '{}' takes requests again.",
                    self.shared.origin.model,
                    self.shared.origin.backend,
                    since.elapsed().as_secs_f64(),
                    self.shared.instance
                );
            } else if !self.unloaded() {
                return Err(Error::unavailable(format!(
                    "instance '{}' is still inside TRITONBACKEND_ModelInstanceExecute of backend '{}' (for {:.1} s) \
                     and could not take the request within {} ms",
                    self.shared.instance,
                    self.shared.origin.backend,
                    since.elapsed().as_secs_f64(),
                    self.timeout.as_millis()
                )));
            }
        }
        if self.unloaded() {
            return Err(self.unloaded_error());
        }
        Ok(())
    }

    /// Hands the requests to the execute thread and waits until Execute returns: `Ok(true)`, or its
    /// error. `Ok(false)`: it did not return within the response timeout (less once the model is
    /// retired); the backend keeps the requests, and the instance takes no more until it returns.
    fn run_execute(&self, requests: Vec<Arc<RequestObj>>) -> Result<bool> {
        let gone = || Error::internal(format!("the execute thread of instance '{}' ended", self.shared.instance));
        let tx = self.to_executor.as_ref().ok_or_else(gone)?;
        let started = Instant::now();
        {
            let mut s = self.shared.exec.lock();
            if s.exited {
                return Err(gone());
            }
            s.returned = None;
            s.inside_since = Some(started);
        }
        if tx.send((requests, tracing::Span::current())).is_err() {
            self.shared.exec.lock().inside_since = None;
            return Err(gone());
        }
        let deadline = started + self.timeout;
        let returned =
            self.shared.bell.wait(|| self.shared.exec.lock().returned.is_some(), || self.give_up_at(deadline));
        if returned {
            return self.shared.exec.lock().returned.take().unwrap_or(Ok(())).map(|()| true);
        }
        tracing::warn!(
            "Model '{}': instance '{}' has been inside TRITONBACKEND_ModelInstanceExecute of backend '{}' for {} ms; \
             its requests fail, and it takes new ones only once Execute returns.",
            self.shared.origin.model,
            self.shared.instance,
            self.shared.origin.backend,
            started.elapsed().as_millis()
        );
        Ok(false)
    }

    /// Why the backend did not return from Execute, for the requests it kept.
    fn stuck_error(&self) -> Error {
        Error::unavailable(format!(
            "backend '{}' did not return from TRITONBACKEND_ModelInstanceExecute within {} ms",
            self.shared.origin.backend,
            self.timeout.as_millis()
        ))
    }

    /// Waits until the backend has sent the final response and released the request, or gives up
    /// (`stuck`: Execute never returned, so that is the reason).
    fn wait(&mut self, completion: &Completion, deadline: Instant, stuck: bool) -> Result<(Vec<Tensor>, Parameters)> {
        let finished = |c: &Completion| {
            let p = c.progress.lock();
            (p.done && p.released) || p.rescheduled
        };
        self.shared.bell.wait(|| finished(completion), || self.give_up_at(deadline));
        let mut p = completion.progress.lock();
        if p.rescheduled {
            // It runs again; its response comes from a later execution.
            return Ok((Vec::new(), Parameters::new()));
        }
        if !(p.done && p.released) {
            p.abandoned = true;
            self.abandoned += 1;
            if stuck {
                return Err(self.stuck_error());
            }
            let what = match (p.done, p.released) {
                (false, false) => "neither sent the final response nor released the request",
                (false, true) => "released the request without sending its final response",
                _ => "sent the final response but never released the request",
            };
            // The retirement may have cut the wait short.
            let within = if self.give_up_at(deadline) < deadline {
                "before its model was unloaded or replaced".to_string()
            } else {
                format!("within {} ms", self.timeout.as_millis())
            };
            return Err(Error::unavailable(format!("backend '{}' {what} {within}", self.shared.origin.backend)));
        }
        let states = std::mem::take(&mut p.states);
        let mut responses = std::mem::take(&mut p.responses).into_iter();
        match responses.next() {
            Some(Ok((mut outputs, parameters))) => {
                outputs.extend(states);
                Ok((outputs, parameters))
            }
            Some(Err(e)) => Err(e),
            None => Err(Error::internal(format!(
                "backend '{}' completed the request without a response",
                self.shared.origin.backend
            ))),
        }
    }

    /// Leaves the execute thread behind: the backend has not come back from Execute (or from finalizing
    /// the instance) within the unload's limit. The thread keeps the instance, its model and library;
    /// the host forgets the model, so a reload initializes a new one; the log and the
    /// `tritonrs_backend_abandoned_threads` gauge count the thread until the backend returns.
    fn abandon(&self) {
        let inside = {
            let mut s = self.shared.exec.lock();
            if s.exited {
                return;
            }
            s.abandoned = true;
            s.inside_since
        };
        MODELS.lock().retain(|(_, w)| !w.ptr_eq(&self.model_handle));
        self.shared.count_abandoned(1.0);
        let total = ABANDONED_THREADS.fetch_add(1, Ordering::Relaxed) + 1;
        let doing = match inside {
            Some(t) => {
                format!("has been inside TRITONBACKEND_ModelInstanceExecute for {:.1} s", t.elapsed().as_secs_f64())
            }
            None => "did not finish TRITONBACKEND_ModelInstanceFinalize".to_string(),
        };
        tracing::warn!(
            "Model '{}': instance '{}' is abandoned: backend '{}' {doing}. Its thread is left running ({total} \
             abandoned backend thread(s) in this process, gauge {}).",
            self.shared.origin.model,
            self.shared.instance,
            self.shared.origin.backend,
            ABANDONED_GAUGE.name
        );
    }
}

impl ModelInstance for CInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        self.execute_list(&[req]).pop().unwrap_or_else(|| Err(Error::internal("no result for the request")))
    }

    fn takes_request_lists(&self) -> bool {
        true
    }

    fn served_by(&self) -> Option<String> {
        Some(self.served_by.clone())
    }

    fn retirement(&self) -> Option<Arc<dyn Retirement>> {
        Some(self.shared.clone())
    }

    fn memory_usage(&self) -> Option<Arc<crate::model_api::MemoryUsage>> {
        Some(self.memory.clone())
    }

    fn execute_list(&mut self, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
        let t0 = Instant::now();
        if let Err(e) = self.ready_to_execute() {
            return reqs.iter().map(|_| Err(e.clone())).collect();
        }
        let mut built = Vec::with_capacity(reqs.len());
        let mut results: Vec<Option<Result<ExecResult>>> = Vec::with_capacity(reqs.len());
        for r in reqs {
            match request_object(r, &self.state_outputs, &self.shared) {
                Ok(b) => {
                    built.push(b);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let (objs, completions): (Vec<_>, Vec<_>) = built.into_iter().unzip();
        let t1 = Instant::now();
        let stuck = match self.run_execute(objs) {
            Ok(returned) => !returned,
            Err(e) => return results.into_iter().map(|r| r.unwrap_or_else(|| Err(e.clone()))).collect(),
        };
        if self.decoupled {
            for c in &completions {
                c.progress.lock().settled = true;
            }
            self.outstanding.retain(|c| !c.finished());
            if stuck {
                // The stream ends with the error; what the backend sends later is dropped.
                let e = self.stuck_error();
                for c in &completions {
                    if !c.finished() {
                        c.expire(&e.message);
                        self.abandoned += 1;
                    }
                }
                return results.into_iter().map(|r| r.unwrap_or_else(|| Err(e.clone()))).collect();
            }
            for c in completions {
                self.watch_outstanding(c);
            }
            let timings = ExecTimings::between(t0, t1, Instant::now(), Instant::now());
            return results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Ok(ExecResult { timings, ..Default::default() })))
                .collect();
        }
        // A backend stuck in Execute had its time: only requests it finished anyway are answered.
        let deadline = if stuck { Instant::now() } else { Instant::now() + self.timeout };
        let mut answers = completions
            .iter()
            .map(|c| (self.wait(c, deadline, stuck), c.progress.lock().reported))
            .collect::<Vec<_>>()
            .into_iter();
        let t2 = Instant::now();
        let measured = ExecTimings::between(t0, t1, t2, Instant::now());
        results
            .into_iter()
            .map(|r| match r {
                Some(failed) => failed,
                None => match answers.next() {
                    Some((Ok((outputs, parameters)), reported)) => {
                        Ok(ExecResult { outputs, timings: reported.unwrap_or(measured), parameters })
                    }
                    Some((Err(e), _)) => Err(e),
                    None => Err(Error::internal("a request lost its answer")),
                },
            })
            .collect()
    }
}

impl CInstance {
    /// Keeps a decoupled request the backend may still answer: its client hears an error once the
    /// backend has neither finished nor released it within the timeout; what the backend sends later
    /// is dropped.
    fn watch_outstanding(&mut self, c: Arc<Completion>) {
        if let Some(rt) = &self.runtime {
            let (c2, timeout, backend) = (c.clone(), self.timeout, self.shared.origin.backend.clone());
            rt.spawn(async move {
                tokio::time::sleep(timeout).await;
                c2.expire(&format!(
                    "backend '{backend}' did not send the final response within {} ms",
                    timeout.as_millis()
                ));
            });
        }
        self.outstanding.push(c);
    }
}

impl Drop for CInstance {
    fn drop(&mut self) {
        // Unload waits, for a bounded time, for what the backend still holds: finalizing the instance
        // under requests it still uses would pull their objects away from it.
        let limit = self.timeout.min(UNLOAD_WAIT);
        let deadline = self.give_up_at(Instant::now() + limit);
        let mut left = 0;
        for c in std::mem::take(&mut self.outstanding) {
            // Finished also counts a request the server gave up on (expired): that one is left too.
            self.shared.bell.wait(|| c.finished(), || deadline);
            let done = {
                let p = c.progress.lock();
                p.done && p.released
            };
            if !done {
                c.expire(&format!(
                    "model '{}' was unloaded before backend '{}' sent the final response",
                    self.shared.origin.model, self.shared.origin.backend
                ));
                left += 1;
            }
        }
        if left > 0 {
            tracing::warn!(
                "Model '{}': unloaded with {left} decoupled request(s) that backend '{}' did not finish within {} ms; \
                 they were abandoned.",
                self.shared.origin.model,
                self.shared.origin.backend,
                limit.as_millis()
            );
        }
        // Without its sender the execute thread finalizes the instance and ends, unless it is stuck in
        // the backend: then it is left behind once the same deadline passes.
        drop(self.to_executor.take());
        if !self.shared.bell.wait(|| self.shared.exec.lock().exited, || deadline) {
            self.abandon();
        }
        if self.abandoned > 0 {
            tracing::warn!(
                "Model instance of backend '{}' unloaded with {} request(s) the backend never finished; their memory \
                 is left to it.",
                self.shared.origin.backend,
                self.abandoned
            );
        }
    }
}

#[cfg(test)]
mod tests;
