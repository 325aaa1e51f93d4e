//! The Python backend (`backend: "python"`): unmodified Triton `model.py` models, each instance in its
//! own Python stub process.
//!
//! The stub (`stub/tritonrs_stub.py`) and the `triton_python_backend_utils` module models import
//! (`stub/triton_python_backend_utils.py`) are part of the binary and written to a private temporary
//! folder on first use, so the server stays a single file; the stub needs only a Python 3 with numpy.
//! Tensors cross in shared memory ([`shm`]), control messages over a socket ([`ipc`]); [`stub`] starts,
//! watches and stops the processes over a [`conn`] (the connection its reader thread and the server
//! share), and [`calls`] answers what models ask of the server (BLS, metrics, model control);
//! [`settings`] holds the settings below and a model's Python environment.
//!
//! `--backend-config=python,<setting>=<value>` settings: `python-executable` (the interpreter, default
//! `python3` from PATH), `stub-timeout-seconds` (default 30: how long a stub may take to start, or stay
//! silent while executing, before it counts as hung), `shm-default-byte-size` (each stub's shared-memory
//! file, default 8 MiB; larger tensors travel through the socket). A model's `EXECUTION_ENV_PATH`
//! parameter names a Python environment (a folder, or a `.tar.gz` conda-pack archive) to run its stubs in.
//! `zygote` (default true): stubs of the server's interpreter are forked from one process that has
//! imported numpy and the stub once ([`zygote`]), so they share that memory.

pub mod calls;
pub mod conn;
pub mod ipc;
pub mod settings;
pub mod stub;
pub mod stub_memory;
pub mod zygote;

use crate::error::{Error, Result};
use crate::model_api::SequenceId;
use crate::model_api::{
    Backend, BackendConfig, ExecRequest, ExecResult, ExecTimings, InstanceKind, InstanceSpec, ModelContext,
    ModelInstance, ServerApi,
};
use crate::model_config::{pbtxt, ConfigFailure};
use crate::proto::inference::ModelConfig;
use parking_lot::Mutex;
use serde_json::json;
pub use settings::{ExecEnv, Settings};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stub::{Control, Launch, Stub};

/// The backend: creates instances, each with its own stub process.
pub struct PythonBackend {
    /// The settings, or why they are invalid (every Python model then fails to load with that reason).
    settings: Result<Settings>,
    /// The server, for BLS and model control; `None` without one.
    api: Option<Arc<dyn ServerApi>>,
}

impl PythonBackend {
    pub fn new(config: &BackendConfig, api: Option<Arc<dyn ServerApi>>) -> Self {
        PythonBackend { settings: Settings::from_config(config), api }
    }
}

fn decoupled(cfg: &ModelConfig) -> bool {
    cfg.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
}

fn iterative(cfg: &ModelConfig) -> bool {
    use crate::proto::inference::model_config::SchedulingChoice;
    matches!(&cfg.scheduling_choice, Some(SchedulingChoice::SequenceBatching(s)) if s.iterative_sequence)
}

/// Why a request the model rescheduled fails when the model is not an iterative sequence, in
/// tritonserver's words (it logs them; tritonrs answers the request with them instead of leaving its
/// client waiting).
fn not_reschedulable() -> Error {
    Error::invalid(
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to \
         handle such a flag.",
    )
}

/// The model's code, which must exist, and the folders its imports look in first: its `model.py` (or
/// the file the configuration names) with its version and model folders, or for a model of a
/// Python-based backend that backend's `model.py` with that backend's folder, as in Triton.
fn model_code(settings: &Settings, ctx: &ModelContext) -> Result<(PathBuf, Vec<PathBuf>)> {
    let (model_path, sys_path) = match settings.python_based_backend(&ctx.config) {
        Some(dir) => (dir.join(crate::model_config::PYTHON_RUNTIME), vec![dir]),
        None => (
            crate::model_config::model_file(&ctx.version_dir, &ctx.config)?,
            vec![ctx.version_dir.clone(), ctx.model_dir.clone()],
        ),
    };
    if !model_path.is_file() {
        return Err(Error::invalid(format!("model file '{}' not found", model_path.display())));
    }
    Ok((model_path, sys_path))
}

/// What every stub of a model version is started with.
fn launch(settings: &Settings, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Launch> {
    let (model_path, sys_path) = model_code(settings, ctx)?;
    // As tritonserver, a GPU instance needs the GPU (the core has checked it), although the stub does
    // not touch it itself.
    let (kind, device) = match spec.kind {
        InstanceKind::Cpu => ("CPU", 0),
        InstanceKind::Gpu { device_id } => ("GPU", device_id),
        // As tritonserver: the model places itself; the stub is told MODEL and device 0.
        InstanceKind::Model => ("MODEL", 0),
    };
    let args = json!({
        "model_config": pbtxt::config_to_json(&ctx.config).to_string(),
        "model_instance_kind": kind,
        "model_instance_name": spec.name,
        "model_instance_device_id": device.to_string(),
        "model_repository": ctx.model_dir.display().to_string(),
        "model_version": ctx.version.to_string(),
        "model_name": ctx.name,
    });
    Ok(Launch {
        settings: settings.clone(),
        env: ExecEnv::resolve(settings, &ctx.config, &ctx.model_dir)?,
        model: ctx.name.clone(),
        model_path,
        sys_path,
        init: json!({
            "mode": "serve",
            "model_name": ctx.name,
            "model_version": ctx.version,
            "decoupled": decoupled(&ctx.config),
            "args": args,
        }),
        label: format!("model '{}' instance '{}'", ctx.name, spec.name),
        instance: spec.name.clone(),
        with_shm: true,
    })
}

impl Backend for PythonBackend {
    fn name(&self) -> &'static str {
        "python"
    }

    fn check_instance(&self, ctx: &ModelContext, _spec: &InstanceSpec) -> Result<()> {
        let settings = self.settings.as_ref().map_err(Clone::clone)?;
        model_code(settings, ctx).map(drop)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let settings = self.settings.clone()?;
        let launch = launch(&settings, ctx, spec)?;
        let calls = Arc::new(calls::Calls::new(
            tokio::runtime::Handle::try_current().ok(),
            self.api.clone(),
            (ctx.name.clone(), ctx.version),
        ));
        let (deaths, death_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { stub: None, generation: 0, closing: false }),
            current: Mutex::new(None),
            launch,
            calls,
            decoupled: decoupled(&ctx.config),
            iterative: iterative(&ctx.config),
            deaths,
        });
        shared.restart(&mut shared.state.lock())?;
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let sup = shared.clone();
        std::thread::Builder::new()
            .name(format!("py-watch-{}", spec.name))
            .spawn(move || supervise(&sup, &death_rx, &stop_rx))
            .map_err(|e| {
                Error::internal(format!("cannot start the supervisor thread of {}: {e}", shared.launch.label))
            })?;
        Ok(Box::new(PythonInstance { shared, _stop: stop, sent: VecDeque::new(), last_done: None }))
    }
}

/// One instance: its stub process, restarted when it dies or hangs.
struct PythonInstance {
    /// What the instance thread, the supervisor and the readiness probe share.
    shared: Arc<Shared>,
    /// Dropping it stops the supervisor thread.
    _stop: crossbeam_channel::Sender<()>,
    /// Calls sent ahead with `begin`, oldest first.
    sent: VecDeque<Sent>,
    /// When the stub last answered a pipelined call.
    last_done: Option<Instant>,
}

/// At most this many input bytes are sent ahead of the request the stub works on (see `begin`), so the
/// frames the stub has not read yet always fit in the socket's buffer: the instance thread never blocks
/// sending while the stub blocks sending it a large answer.
const PIPELINE_MAX_BYTES: usize = 32 << 10;

/// The stub of one instance and how to restart it.
struct Shared {
    /// The stub; held by the instance thread while it executes and by the supervisor while it restarts.
    state: Mutex<State>,
    /// The running stub's connection, for the readiness probe (which must not wait for an execute).
    current: Mutex<Option<Arc<conn::Conn>>>,
    /// How to (re)start the stub.
    launch: Launch,
    /// Answers the stub's BLS requests and calls.
    calls: Arc<calls::Calls>,
    /// Whether the model is decoupled (responses go through each request's responder).
    decoupled: bool,
    /// Whether the model is an iterative sequence (`sequence_batching { iterative_sequence: true }`): only
    /// then may it reschedule a request.
    iterative: bool,
    /// Every stub's reader thread sends its generation here when its process goes away.
    deaths: crossbeam_channel::Sender<u64>,
}

/// The instance's stub, guarded by [`Shared::state`].
struct State {
    /// The running stub; `None` after a failed restart (the next request tries again).
    stub: Option<Stub>,
    /// Increases with every start, so the death of an old stub does not restart a newer one.
    generation: u64,
    /// Set when the model unloads: nothing restarts any more.
    closing: bool,
}

impl Shared {
    /// Starts a new stub (stopping the old one, if any) and waits until `initialize` has run.
    fn restart(&self, st: &mut State) -> Result<()> {
        st.stub = None;
        *self.current.lock() = None;
        st.generation += 1;
        let result = self.start(st);
        if result.is_err() {
            // The failed stub's exit must not make the supervisor try again at once (and forever): the
            // next request does.
            st.generation += 1;
        }
        result
    }

    fn start(&self, st: &mut State) -> Result<()> {
        let mut stub = Stub::spawn(&self.launch, Some(self.calls.clone()), Some((self.deaths.clone(), st.generation)))?;
        match stub.handshake()? {
            Control::Ready => {
                *self.current.lock() = Some(stub.conn.clone());
                st.stub = Some(stub);
                Ok(())
            }
            // The Python error as the reason, as Triton reports it.
            Control::InitError(e) => Err(Error::invalid(e)),
            other => Err(Error::internal(format!(
                "the Python stub of {} answered {other:?} instead of starting",
                self.launch.label
            ))),
        }
    }

    /// The running stub, restarting one that died or was killed.
    fn running<'a>(&self, st: &'a mut State) -> Result<&'a mut Stub> {
        if !st.stub.as_ref().is_some_and(|s| s.conn.is_alive()) {
            tracing::warn!("Restarting the Python stub of {}.", self.launch.label);
            self.restart(st)?;
            tracing::info!("The Python stub of {} is running again.", self.launch.label);
        }
        st.stub.as_mut().ok_or_else(|| Error::internal("the Python stub is missing after a start; this is a bug"))
    }

    /// Runs `execute` for a list of requests in the stub.
    fn run(&self, reqs: &[&ExecRequest]) -> Result<(stub::Executed, ExecTimings)> {
        let mut st = self.state.lock();
        let sent = self.send_exec(&mut st, reqs)?;
        self.wait_exec(&mut st, &sent, sent.sent_at)
    }

    /// Sends an `execute` call for a list of requests to the stub (starting one if none runs).
    fn send_exec(&self, st: &mut State, reqs: &[&ExecRequest]) -> Result<Sent> {
        match self.try_send_exec(st, reqs) {
            Ok(sent) => Ok(sent),
            // The stub died before the call reached it (its exit not noticed yet): nothing of the call
            // ran, so it goes to a new stub.
            Err((e, true)) => {
                tracing::warn!("{}; restarting the stub and sending the request again", e.message);
                self.try_send_exec(st, reqs).map_err(|(e, _)| e)
            }
            Err((e, false)) => Err(e),
        }
    }

    /// [`Shared::send_exec`] once; a failure says whether the call never reached the stub.
    fn try_send_exec(&self, st: &mut State, reqs: &[&ExecRequest]) -> std::result::Result<Sent, (Error, bool)> {
        let t0 = Instant::now();
        self.running(st).map_err(|e| (e, false))?;
        let generation = st.generation;
        let Some(stub) = st.stub.as_mut() else {
            return Err((Error::internal("the Python stub is missing after a start; this is a bug"), false));
        };
        let conn = stub.conn.clone();
        let id = conn.next_id();
        // The span the scheduler entered for this execution: the model's log lines go out in it.
        conn.remember_span(id, tracing::Span::current());
        let mut payload = Vec::new();
        let mut payload_len = 0u64;
        let mut wire = Vec::with_capacity(reqs.len());
        let mut keys = Vec::new();
        let mut plain = Vec::new();
        let mut traces = Vec::new();
        for r in reqs {
            let key = conn.next_id();
            conn.watch(key, &r.meta.signals);
            let inputs = conn.encode_tensors(&r.inputs, &mut payload, &mut payload_len).map_err(|e| (e, false))?;
            wire.push(ipc::WireRequest {
                key,
                outputs: &r.outputs,
                inputs,
                id: &r.meta.id,
                corr: match &r.meta.correlation_id {
                    None => None,
                    Some(SequenceId::U64(v)) => Some(json!(v)),
                    Some(SequenceId::Str(s)) => Some(json!(s)),
                },
                flags: r.meta.flags,
                params: ipc::params_to_json(&r.meta.parameters),
                traced: r.meta.trace.is_some(),
            });
            if let Some(link) = &r.meta.trace {
                traces.push((key, link.clone()));
            }
            if let Some(sender) = &r.responder {
                conn.open_stream(key, sender.clone());
                keys.push(key);
            } else {
                plain.push(key);
            }
        }
        let msg = ipc::ExecuteMsg { kind: "execute", id, requests: wire };
        let parts: Vec<&[u8]> = payload.iter().map(|b| b.as_ref()).collect();
        let t1 = Instant::now();
        conn.set_in_flight(&keys);
        self.calls.enter(id, reqs.iter().map(|r| &r.meta.callers), traces);
        if let Err(e) = stub.send_main(&msg, &parts) {
            self.calls.leave(id);
            conn.unwatch(plain);
            stub.kill();
            conn.fail_streams(Some(&keys), &e);
            conn.end_in_flight(&keys);
            // Decoupled requests were ended with the error already: they are not sent again.
            let undelivered = keys.is_empty();
            return Err((e, undelivered));
        }
        let bytes = reqs.iter().map(|r| input_bytes(r)).sum();
        Ok(Sent { id, generation, keys, plain, encode_ns: (t1 - t0).as_nanos() as u64, sent_at: t1, bytes })
    }

    /// Waits for the answer to an `execute` call sent with [`Shared::send_exec`]; `from` is when the
    /// stub could start on it (when it was sent, or when the call before it finished).
    fn wait_exec(&self, st: &mut State, sent: &Sent, from: Instant) -> Result<(stub::Executed, ExecTimings)> {
        let (id, keys) = (sent.id, &sent.keys);
        let stub = st.stub.as_mut().filter(|_| st.generation == sent.generation);
        // The stub it went to died and another one runs now (or none): the call is lost with it.
        let Some(stub) = stub else {
            self.calls.leave(id);
            return Err(Error::internal(format!(
                "Stub process '{}' is not healthy. It exited while the request waited for it.",
                self.launch.instance
            )));
        };
        let conn = stub.conn.clone();
        let result = stub.wait_done(id);
        self.calls.leave(id);
        conn.unwatch(sent.plain.iter().copied());
        let t2 = Instant::now();
        let executed = match result {
            Ok(r) => r,
            Err(e) => {
                // Decoupled requests still open end with the error too.
                conn.fail_streams(Some(keys), &e);
                conn.end_in_flight(keys);
                return Err(e);
            }
        };
        self.settle_rescheduled(&conn, keys, &executed.rescheduled);
        conn.end_in_flight(keys);
        let timings = ExecTimings {
            compute_input_ns: sent.encode_ns,
            compute_infer_ns: t2.saturating_duration_since(from).as_nanos() as u64,
            compute_output_ns: t2.elapsed().as_nanos() as u64,
            // Sent ahead, it waited in the stub for the calls before it.
            waited_ns: from.saturating_duration_since(sent.sent_at).as_nanos() as u64,
            started: None,
        };
        Ok((executed, timings))
    }

    /// The decoupled requests the model rescheduled: in an iterative sequence their responses of this
    /// execution are all sent (the next execution opens them again under new keys); otherwise they end
    /// with tritonserver's reason.
    fn settle_rescheduled(&self, conn: &conn::Conn, keys: &[u64], rescheduled: &[usize]) {
        for key in rescheduled.iter().filter_map(|&i| keys.get(i).copied()) {
            if self.iterative {
                conn.close_stream(key);
            } else {
                conn.fail_streams(Some(&[key]), &not_reschedulable());
            }
        }
    }
}

/// An `execute` call sent to the stub and not answered yet.
struct Sent {
    id: u64,
    /// The stub generation it went to.
    generation: u64,
    /// Its decoupled requests' keys.
    keys: Vec<u64>,
    /// Its other requests' keys: their signals are forgotten when the call is answered.
    plain: Vec<u64>,
    encode_ns: u64,
    sent_at: Instant,
    /// Its requests' input bytes.
    bytes: usize,
}

fn input_bytes(req: &ExecRequest) -> usize {
    req.inputs.iter().map(|t| t.data.len()).sum()
}

/// Restarts a stub as soon as it dies, also when no request is waiting, so the model is ready again
/// without a request having to fail first.
fn supervise(shared: &Shared, deaths: &crossbeam_channel::Receiver<u64>, stop: &crossbeam_channel::Receiver<()>) {
    loop {
        crossbeam_channel::select! {
            recv(deaths) -> generation => {
                let Ok(generation) = generation else { return };
                let mut st = shared.state.lock();
                if st.closing {
                    return;
                }
                let dead = !st.stub.as_ref().is_some_and(|s| s.conn.is_alive());
                if generation == st.generation && dead {
                    tracing::warn!("The Python stub of {} exited; restarting it.", shared.launch.label);
                    match shared.restart(&mut st) {
                        Ok(()) => tracing::info!("The Python stub of {} is running again.", shared.launch.label),
                        Err(e) => tracing::error!(
                            "The Python stub of {} could not be restarted (the next request tries again): {}",
                            shared.launch.label,
                            e.message
                        ),
                    }
                }
            }
            recv(stop) -> _ => return,
        }
    }
}

/// The readiness probe: the stub runs, and the model's `is_model_ready` (if it has one) says yes.
struct Probe(Arc<Shared>);

impl crate::model_api::Readiness for Probe {
    fn ready(&self) -> bool {
        let Some(conn) = self.0.current.lock().clone() else { return false };
        if !conn.is_alive() {
            return false;
        }
        if !conn.has_probe() {
            return true;
        }
        matches!(conn.ask("is_ready", Duration::from_secs(5)), Ok(serde_json::Value::Bool(true)))
    }
}

impl ModelInstance for PythonInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        self.execute_list(&[req])
            .pop()
            .unwrap_or_else(|| Err(Error::internal("no result for a request; this is a bug")))
    }

    fn takes_request_lists(&self) -> bool {
        true
    }

    fn readiness(&self) -> Option<Arc<dyn crate::model_api::Readiness>> {
        Some(Arc::new(Probe(self.shared.clone())))
    }

    fn execute_list(&mut self, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
        let ran = self.shared.run(reqs);
        self.results(reqs, ran)
    }

    fn begin(&mut self, req: &ExecRequest) -> Option<Result<u64>> {
        // Decoupled models answer through their requests' responders, also from other threads: one call
        // at a time keeps their order simple. The requests sent ahead of the one the stub works on (all
        // but the oldest) hold at most PIPELINE_MAX_BYTES: both sides writing large frames to each other
        // at once would block both. Over that, "not now": the scheduler finishes the oldest and asks
        // again (a large request waits until the stub is idle).
        if self.shared.decoupled {
            return None;
        }
        let ahead = || self.sent.iter().skip(1).map(|s| s.bytes).sum::<usize>() + input_bytes(req);
        if !self.sent.is_empty() && ahead() > PIPELINE_MAX_BYTES {
            return None;
        }
        let mut st = self.shared.state.lock();
        Some(self.shared.send_exec(&mut st, &[req]).map(|sent| {
            let id = sent.id;
            self.sent.push_back(sent);
            id
        }))
    }

    fn finish(&mut self, ticket: u64, req: &ExecRequest) -> Result<ExecResult> {
        let Some(sent) = self.sent.pop_front().filter(|s| s.id == ticket) else {
            return Err(Error::internal("a pipelined request was finished out of order; this is a bug"));
        };
        // The stub starts on a call when it was sent or when the one before it was answered.
        let from = self.last_done.map_or(sent.sent_at, |t| t.max(sent.sent_at));
        let ran = {
            let mut st = self.shared.state.lock();
            self.shared.wait_exec(&mut st, &sent, from)
        };
        self.last_done = Some(Instant::now());
        self.results(&[req], ran)
            .pop()
            .unwrap_or_else(|| Err(Error::internal("no result for a request; this is a bug")))
    }
}

impl PythonInstance {
    /// The stub's answer to an `execute` call as one result per request.
    fn results(&self, reqs: &[&ExecRequest], ran: Result<(stub::Executed, ExecTimings)>) -> Vec<Result<ExecResult>> {
        let (executed, timings) = match ran {
            Ok(r) => r,
            Err(e) => return reqs.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut results = self.responses(reqs, executed.responses, timings);
        for &i in &executed.rescheduled {
            let (Some(r), Some(result)) = (reqs.get(i), results.get_mut(i)) else { continue };
            *result = if self.shared.iterative {
                // The sequence batcher runs it again.
                r.meta.signals.reschedule();
                Ok(ExecResult { timings, ..Default::default() })
            } else {
                Err(not_reschedulable())
            };
        }
        results
    }

    /// One result per request from the stub's responses.
    fn responses(
        &self,
        reqs: &[&ExecRequest],
        responses: Vec<stub::StubResponse>,
        timings: ExecTimings,
    ) -> Vec<Result<ExecResult>> {
        if self.shared.decoupled {
            // The responses went to each request's responder; this only says execute returned.
            return reqs.iter().map(|_| Ok(ExecResult { timings, ..Default::default() })).collect();
        }
        if responses.len() != reqs.len() {
            let e = Error::internal(format!(
                "the Python stub of {} returned {} responses for {} requests",
                self.shared.launch.label,
                responses.len(),
                reqs.len()
            ));
            return reqs.iter().map(|_| Err(e.clone())).collect();
        }
        reqs.iter()
            .zip(responses)
            .map(|(r, resp)| {
                let (mut tensors, parameters) = resp?;
                // In the order the request asked for them; outputs the model did not produce are absent.
                let mut outputs = Vec::with_capacity(r.outputs.len());
                for name in &r.outputs {
                    if let Some(i) = tensors.iter().position(|t| &t.name == name) {
                        outputs.push(tensors.swap_remove(i));
                    }
                }
                Ok(ExecResult { outputs, timings, parameters })
            })
            .collect()
    }
}

impl Drop for PythonInstance {
    fn drop(&mut self) {
        let stub = {
            let mut st = self.shared.state.lock();
            st.closing = true;
            st.stub.take()
        };
        *self.shared.current.lock() = None;
        if let Some(stub) = stub {
            if let Some(e) = stub.finalize() {
                tracing::error!("finalize of {} failed: {e}", self.shared.launch.label);
            }
        }
    }
}

/// Completes a Python model's configuration with its `auto_complete_config`, run in a short-lived stub
/// (as Triton does). Models whose file does not mention the function are left as they are, without
/// starting Python.
/// A failure once the version whose model file runs is known is that version's (as Triton reports it).
pub struct Completer(pub Settings);

impl crate::model_config::Completer for Completer {
    fn complete(&self, dir: &Path, name: &str, cfg: ModelConfig) -> std::result::Result<ModelConfig, ConfigFailure> {
        auto_complete(&self.0, dir, name, &cfg)
    }
}

/// The code whose `auto_complete_config` completes a model's configuration, if there is any: the newest
/// version's model file, with the folders its imports look in first, or a Python-based backend's
/// `model.py` (for the newest version).
fn completing_code(
    settings: &Settings,
    dir: &Path,
    cfg: &ModelConfig,
) -> std::result::Result<Option<(i64, PathBuf, Vec<PathBuf>)>, ConfigFailure> {
    let mut newest_first = crate::model_config::list_versions(dir).into_iter().rev();
    if let Some(backend_dir) = settings.python_based_backend(cfg) {
        let path = backend_dir.join(crate::model_config::PYTHON_RUNTIME);
        return Ok(newest_first.next().filter(|_| path.is_file()).map(|v| (v, path, vec![backend_dir])));
    }
    let found = newest_first.find_map(|v| {
        crate::model_config::model_file(&dir.join(v.to_string()), cfg)
            .map(|p| p.is_file().then_some((v, p)))
            .transpose()
    });
    let Some(found) = found else { return Ok(None) };
    let (version, model_path) = found?;
    let version_dir = dir.join(version.to_string());
    Ok(Some((version, model_path, vec![version_dir, dir.to_path_buf()])))
}

/// [`Completer`]'s work.
pub fn auto_complete(
    settings: &Settings,
    dir: &Path,
    name: &str,
    cfg: &ModelConfig,
) -> std::result::Result<ModelConfig, ConfigFailure> {
    let Some((version, model_path, sys_path)) = completing_code(settings, dir, cfg)? else {
        return Ok(cfg.clone());
    };
    let at_version = |error: Error| ConfigFailure { error, version: Some(version) };
    let text = std::fs::read_to_string(&model_path)
        .map_err(|e| at_version(Error::invalid(format!("cannot read '{}': {e}", model_path.display()))))?;
    if !text.contains("auto_complete_config") {
        return Ok(cfg.clone());
    }
    let launch = Launch {
        settings: settings.clone(),
        env: ExecEnv::resolve(settings, cfg, dir).map_err(at_version)?,
        model: name.to_string(),
        model_path,
        sys_path,
        init: json!({
            "mode": "autocomplete",
            "model_name": name,
            "model_version": version,
            "config": pbtxt::config_to_json(cfg),
        }),
        label: format!("model '{name}' (auto-complete)"),
        instance: name.to_string(),
        with_shm: false,
    };
    let mut stub = Stub::spawn(&launch, None, None).map_err(at_version)?;
    match stub.handshake().map_err(at_version)? {
        Control::Autocomplete(v) => pbtxt::config_from_json(&v.to_string()).map_err(|e| {
            at_version(Error::invalid(format!(
                "auto_complete_config of model '{name}' returned an invalid configuration: {e}"
            )))
        }),
        Control::InitError(e) => Err(at_version(Error::invalid(e))),
        other => {
            Err(at_version(Error::internal(format!("the auto-complete stub of model '{name}' answered {other:?}"))))
        }
    }
}
