//! The TRITONBACKEND host as one more backend of `model_api`: a model whose `backend` names no
//! built-in backend is served by `libtriton_<name>.so`, found as tritonserver finds it (the model's
//! version folder, its folder, then `--backend-directory/<name>/`). Libraries, models and instances
//! are initialized and finalized in Triton's order; each instance runs `Execute` on its own thread
//! with the requests the scheduler hands it (a dynamic batch is a list of requests, as in Triton), and
//! waits, for a bounded time, until the backend has sent each request's final response and released
//! it.

use super::abi::{
    BufferAttributesObj, Completion, InputObj, ParamSlot, RequestObj, ServerObj, INSTANCEGROUPKIND_CPU,
    INSTANCEGROUPKIND_GPU,
};
use super::library::{Instance, Library, Model};
use crate::error::{Error, ErrorKind, Result};
use crate::model_api::types::{Parameters, Tensor};
use crate::model_api::{
    Backend, BackendConfig, ExecRequest, ExecResult, ExecTimings, InstanceKind, InstanceSpec, ModelContext,
    ModelInstance, SequenceId,
};
use crate::proto::inference::model_config::SchedulingChoice;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// tritonserver's `--backend-directory` default.
pub const DEFAULT_BACKEND_DIRECTORY: &str = "/opt/tritonserver/backends";

/// How long an instance waits for a backend to answer and release a request, unless
/// `--backend-config=<name>,response-timeout-ms=N` says otherwise.
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest an unload waits for a backend to finish the requests it holds.
const UNLOAD_WAIT: Duration = Duration::from_secs(30);

/// Our error for a `TRITONSERVER_Error_Code` and message.
pub fn to_error(code: u32, message: &str) -> Error {
    use super::abi::code;
    let kind = match code {
        code::INVALID_ARG => ErrorKind::InvalidArgument,
        code::NOT_FOUND => ErrorKind::NotFound,
        code::UNAVAILABLE => ErrorKind::Unavailable,
        code::UNSUPPORTED => ErrorKind::Unsupported,
        code::ALREADY_EXISTS => ErrorKind::AlreadyExists,
        _ => ErrorKind::Internal,
    };
    Error::new(kind, message)
}

/// `--backend-directory` (global in the backend configuration), or tritonserver's default.
fn backend_directory(config: &BackendConfig) -> PathBuf {
    config.global.get("backend-directory").map_or_else(|| PathBuf::from(DEFAULT_BACKEND_DIRECTORY), PathBuf::from)
}

/// The `TRITONSERVER_Error_Code` for our error.
pub fn code_of(e: &Error) -> u32 {
    use super::abi::code;
    match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::PayloadTooLarge => code::INVALID_ARG,
        ErrorKind::NotFound => code::NOT_FOUND,
        ErrorKind::Unavailable => code::UNAVAILABLE,
        ErrorKind::Unsupported => code::UNSUPPORTED,
        ErrorKind::AlreadyExists => code::ALREADY_EXISTS,
        _ => code::INTERNAL,
    }
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

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let name = ctx.config.backend.clone();
        let decoupled = ctx.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        let forwarding = super::library::forwarding();
        if !super::library::api_exported() {
            if let Err(why) = forwarding {
                return Err(Error::unavailable(format!(
                    "model '{}': backend '{name}' needs Triton's C API, which this tritonrs binary does not export \
                     (it was linked without a symbol list, as the glibc-2.27 portable builds are), and {why}",
                    ctx.name
                )));
            }
        }
        let (kind, device) = match spec.kind {
            InstanceKind::Cpu => (INSTANCEGROUPKIND_CPU, 0),
            // Triton's core refuses a GPU instance without the GPU before the backend sees it.
            InstanceKind::Gpu { device_id } => {
                crate::platform::cuda::check_instance_gpu(&spec.name, device_id)?;
                (INSTANCEGROUPKIND_GPU, device_id)
            }
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
        Ok(Box::new(CInstance {
            instance,
            timeout,
            backend: name,
            model: ctx.name.clone(),
            abandoned: 0,
            decoupled,
            state_outputs,
            outstanding: Vec::new(),
            runtime: self.server.runtime.lock().clone(),
        }))
    }
}

/// One instance of a C backend model, on its own thread.
struct CInstance {
    instance: Instance,
    timeout: Duration,
    backend: String,
    /// Requests the backend never finished with; their memory stays the backend's.
    abandoned: usize,
    /// The model's name, for messages.
    model: String,
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
}

/// The C view of one request: its tensors in host memory, its names as C strings.
fn request_object(req: &ExecRequest, state_outputs: &Arc<[String]>) -> Result<(Arc<RequestObj>, Arc<Completion>)> {
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
    let completion = Arc::new(Completion { sink: req.responder.clone(), ..Default::default() });
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
    /// Waits until the backend has sent the final response and released the request, or gives up.
    fn wait(&mut self, completion: &Completion, deadline: Instant) -> Result<(Vec<Tensor>, Parameters)> {
        let mut p = completion.progress.lock();
        while !(p.done && p.released) {
            if completion.changed.wait_until(&mut p, deadline).timed_out() && !(p.done && p.released) {
                p.abandoned = true;
                self.abandoned += 1;
                let what = match (p.done, p.released) {
                    (false, false) => "neither sent the final response nor released the request",
                    (false, true) => "released the request without sending its final response",
                    _ => "sent the final response but never released the request",
                };
                return Err(Error::unavailable(format!(
                    "backend '{}' {what} within {} ms",
                    self.backend,
                    self.timeout.as_millis()
                )));
            }
        }
        let states = std::mem::take(&mut p.states);
        let mut responses = std::mem::take(&mut p.responses).into_iter();
        match responses.next() {
            Some(Ok((mut outputs, parameters))) => {
                outputs.extend(states);
                Ok((outputs, parameters))
            }
            Some(Err(e)) => Err(e),
            None => {
                Err(Error::internal(format!("backend '{}' completed the request without a response", self.backend)))
            }
        }
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
        Some(self.instance.model.library.path.display().to_string())
    }

    fn execute_list(&mut self, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
        let t0 = Instant::now();
        let mut built = Vec::with_capacity(reqs.len());
        let mut results: Vec<Option<Result<ExecResult>>> = Vec::with_capacity(reqs.len());
        for r in reqs {
            match request_object(r, &self.state_outputs) {
                Ok(b) => {
                    built.push(b);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let (objs, completions): (Vec<_>, Vec<_>) = built.into_iter().unzip();
        let t1 = Instant::now();
        if let Err(e) = self.instance.execute(objs) {
            return results.into_iter().map(|r| r.unwrap_or_else(|| Err(e.clone()))).collect();
        }
        if self.decoupled {
            self.outstanding.retain(|c| !c.finished());
            for c in completions {
                // The client hears an error once the backend has neither finished nor released the
                // request within the timeout; what the backend sends later is dropped.
                if let Some(rt) = &self.runtime {
                    let (c2, timeout, backend) = (c.clone(), self.timeout, self.backend.clone());
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
            let timings = ExecTimings::between(t0, t1, Instant::now(), Instant::now());
            return results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Ok(ExecResult { timings, ..Default::default() })))
                .collect();
        }
        let deadline = Instant::now() + self.timeout;
        let mut answers = completions
            .iter()
            .map(|c| (self.wait(c, deadline), c.progress.lock().reported))
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

impl Drop for CInstance {
    fn drop(&mut self) {
        // Unload waits, for a bounded time, for requests the backend still holds: finalizing the
        // instance under them would pull their objects away from a backend still using them.
        let deadline = Instant::now() + self.timeout.min(UNLOAD_WAIT);
        let mut left = 0;
        for c in self.outstanding.drain(..) {
            let mut p = c.progress.lock();
            while !(p.abandoned || p.done && p.released) {
                if c.changed.wait_until(&mut p, deadline).timed_out() {
                    break;
                }
            }
            if !(p.done && p.released) {
                p.abandoned = true;
                left += 1;
            }
        }
        if left > 0 {
            tracing::warn!(
                "Model '{}': unloaded with {left} decoupled request(s) that backend '{}' did not finish within {} ms; \
                 they were abandoned.",
                self.model,
                self.backend,
                self.timeout.min(UNLOAD_WAIT).as_millis()
            );
        }
        if self.abandoned > 0 {
            tracing::warn!(
                "Model instance of backend '{}' unloaded with {} request(s) the backend never finished; their memory \
                 is left to it.",
                self.backend,
                self.abandoned
            );
        }
    }
}
