//! The TensorRT backend: `platform: "tensorrt_plan"` / `backend: "tensorrt"` models, `model.plan`
//! engines served on TensorRT 8.2 (Jetson Nano) through 10.x (Orin, x86).
//!
//! TensorRT is loaded at run time (`ffi.rs`); without it, or with an unsupported version, these models
//! are UNAVAILABLE with a reason and the rest of the server serves. The decisions that do not need
//! TensorRT (configuration checks, auto-complete, profile selection) live in `engine.rs` and run the
//! same over the real engine and the mock one the tests use ([`Runtime`], [`Engine`], [`Context`]).
//!
//! Each instance owns one execution context on its own CUDA stream, on the GPU its instance group
//! names, and runs on its own thread like every backend. Engines are shared by the instances of a
//! model version on one GPU. Inputs and outputs live in the server's memory pools: mapped pinned
//! memory on Xavier and Orin (the GPU reads the bytes where they are, and outputs go back to the
//! client from the same block), device memory with copies elsewhere (the Nano, discrete GPUs).

pub mod engine;
mod ffi;
#[cfg(test)]
pub mod mock;
mod run;

use crate::error::{Error, Result};
use crate::memory::pool::Pools;
use crate::memory::Buffer;
use crate::model_api::types::Tensor;
use crate::model_api::{
    Backend, BackendConfig, ExecRequest, ExecResult, ExecTimings, InstanceKind, InstanceSpec, ModelContext,
    ModelInstance,
};
use engine::EngineDesc;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

/// Deserializes engines (TensorRT's IRuntime, or the mock).
pub trait Runtime: Send + Sync {
    fn deserialize(&self, device: i32, plan: &[u8]) -> Result<Arc<dyn Engine>>;
    /// [`Runtime::deserialize`] with the runtime set to DLA core `dla_core` (IRuntime::setDLACore);
    /// layers the engine was built to fall back to the GPU for run there.
    fn deserialize_dla(&self, device: i32, dla_core: i32, plan: &[u8]) -> Result<Arc<dyn Engine>>;
}

/// A deserialized engine.
pub trait Engine: Send + Sync {
    fn desc(&self) -> &EngineDesc;
    /// An execution context with its own stream on `device`.
    fn create_context(self: Arc<Self>, device: i32) -> Result<Box<dyn Context>>;
}

/// One input of a run: the engine's I/O index, the full shape, the bytes.
pub struct RunInput<'a> {
    pub io: usize,
    pub shape: &'a [i64],
    pub data: &'a Buffer,
}

/// One output of a run.
#[derive(Debug)]
pub struct RunOutput {
    pub shape: Vec<i64>,
    pub data: Buffer,
}

/// An execution context.
pub trait Context: Send {
    /// Runs the engine with `profile` on `inputs` and returns `outputs` (I/O indices), in that order.
    fn run(&mut self, profile: usize, inputs: &[RunInput<'_>], outputs: &[usize]) -> Result<Vec<RunOutput>>;
    /// Selects `profile` now, at load: on TensorRT 8 a new context holds profile 0 until it selects
    /// another, which would keep the instance assigned profile 0 from selecting it.
    fn select_profile(&mut self, profile: usize) -> Result<()>;
}

/// The largest plan file read (engines of big models run to a few hundred MB).
const MAX_PLAN_BYTES: u64 = 4 << 30;

/// Which engine: the plan file (and its size and modification time) and the GPU.
#[derive(PartialEq)]
struct EngineKey {
    file: PathBuf,
    device: i32,
    /// The DLA core the engine was deserialized for (`secondary_devices`), or none.
    dla: Option<i32>,
    stamp: Option<(u64, Option<std::time::SystemTime>)>,
}

pub struct TensorRtBackend {
    opts: ffi::LoadOptions,
    pools: Option<Pools>,
    /// TensorRT, loaded on first use; the error says what is missing.
    runtime: OnceLock<Result<Arc<dyn Runtime>>>,
    /// Engines by plan file and GPU, shared by instances while any holds them.
    engines: Mutex<Vec<(EngineKey, Weak<SharedEngine>)>>,
}

impl TensorRtBackend {
    pub fn new(config: &BackendConfig, pools: Option<Pools>) -> TensorRtBackend {
        let get = |k: &str| config.get("tensorrt", k).map(str::trim).filter(|v| !v.is_empty());
        let opts = ffi::LoadOptions {
            library: get("library").map(PathBuf::from),
            shim: get("shim").map(PathBuf::from),
            plugins: get("plugins")
                .map(|v| v.split(';').map(str::trim).filter(|p| !p.is_empty()).map(PathBuf::from).collect())
                .unwrap_or_default(),
        };
        TensorRtBackend { opts, pools, runtime: OnceLock::new(), engines: Mutex::new(Vec::new()) }
    }

    /// A backend over another runtime (the tests' mock).
    pub fn with_runtime(runtime: Arc<dyn Runtime>) -> TensorRtBackend {
        let b = TensorRtBackend::new(&BackendConfig::default(), None);
        let _ = b.runtime.set(Ok(runtime));
        b
    }

    fn runtime(&self) -> Result<Arc<dyn Runtime>> {
        self.runtime
            .get_or_init(|| {
                ffi::Nvinfer::load(&self.opts, self.pools.clone()).map(|n| Arc::new(Arc::new(n)) as Arc<dyn Runtime>)
            })
            .clone()
    }

    fn engine(&self, runtime: &dyn Runtime, file: &Path, device: i32, dla: Option<i32>) -> Result<Arc<SharedEngine>> {
        // The file's size and time are in the key, so a reload of a changed model.plan deserializes the
        // new engine while the old version's instances still hold the old one.
        let stamp = std::fs::metadata(file).ok().map(|m| (m.len(), m.modified().ok()));
        let key = EngineKey { file: file.to_path_buf(), device, dla, stamp };
        let cached = |engines: &mut Vec<(EngineKey, Weak<SharedEngine>)>| {
            engines.retain(|(_, w)| w.strong_count() > 0);
            engines.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade())
        };
        if let Some(e) = cached(&mut self.engines.lock()) {
            return Ok(e);
        }
        // Deserializing takes seconds on a Jetson: other models' loads do not wait on the lock for it.
        let plan = read_plan(file)?;
        let engine = match dla {
            Some(core) => {
                tracing::info!("TensorRT engine '{}' runs on DLA core {core} (secondary_devices).", file.display());
                runtime.deserialize_dla(device, core, &plan)
            }
            None => runtime.deserialize(device, &plan),
        }
        .map_err(|e| e.context(format!("'{}'", file.display())))?;
        let engine = Arc::new(SharedEngine::new(engine));
        let mut engines = self.engines.lock();
        if let Some(e) = cached(&mut engines) {
            return Ok(e);
        }
        engines.push((key, Arc::downgrade(&engine)));
        Ok(engine)
    }
}

fn read_plan(file: &Path) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(file)
        .map_err(|e| Error::invalid(format!("cannot read the TensorRT engine '{}': {e}", file.display())))?;
    if meta.len() == 0 {
        return Err(Error::invalid(format!("the TensorRT engine '{}' is empty", file.display())));
    }
    if meta.len() > MAX_PLAN_BYTES {
        return Err(Error::invalid(format!(
            "the TensorRT engine '{}' is {} bytes, over the {MAX_PLAN_BYTES}-byte limit",
            file.display(),
            meta.len()
        )));
    }
    std::fs::read(file)
        .map_err(|e| Error::invalid(format!("cannot read the TensorRT engine '{}': {e}", file.display())))
}

/// The server's TensorRT backend, for auto-complete while a repository is read.
static REGISTERED: Mutex<Option<Weak<TensorRtBackend>>> = Mutex::new(None);

/// Makes `backend` the one [`auto_complete_registered`] uses.
pub fn register(backend: &Arc<TensorRtBackend>) {
    *REGISTERED.lock() = Some(Arc::downgrade(backend));
}

/// [`auto_complete`] with the server's backend (none in `tritonrs validate`: nothing to do).
pub fn auto_complete_registered(file: &Path, cfg: &mut crate::proto::inference::ModelConfig) -> Result<()> {
    let backend = REGISTERED.lock().as_ref().and_then(Weak::upgrade);
    match backend {
        Some(b) => auto_complete(&b, file, cfg),
        None => Ok(()),
    }
}

/// Completes `tensorrt_plan` configurations from the latest version's engine, where TensorRT and a
/// GPU are here to read it; elsewhere only a configuration that cannot do without the engine's
/// description fails (and the load says why).
pub struct Completer;

impl crate::model_config::Completer for Completer {
    fn complete(
        &self,
        dir: &Path,
        name: &str,
        mut cfg: crate::proto::inference::ModelConfig,
    ) -> std::result::Result<crate::proto::inference::ModelConfig, crate::model_config::ConfigFailure> {
        let Some(v) = crate::model_config::list_versions(dir).into_iter().next_back() else { return Ok(cfg) };
        let file = crate::model_config::model_file(&dir.join(v.to_string()), &cfg)?;
        if !file.is_file() {
            return Ok(cfg);
        }
        if let Err(e) = auto_complete_registered(&file, &mut cfg) {
            if cfg.input.is_empty() || cfg.output.is_empty() {
                return Err(e
                    .context(format!("model '{name}': cannot complete the configuration from the engine"))
                    .into());
            }
            tracing::debug!("model '{name}': auto-complete from the engine skipped: {}", e.message);
        }
        Ok(cfg)
    }
}

/// Completes a configuration from its engine, which needs TensorRT and a GPU to read it; the error
/// says which is missing (the configuration is left as it was).
pub fn auto_complete(
    backend: &TensorRtBackend,
    file: &Path,
    cfg: &mut crate::proto::inference::ModelConfig,
) -> Result<()> {
    let runtime = backend.runtime()?;
    let gpu = crate::platform::cuda::usable_gpus().first().map(|g| g.index).ok_or_else(|| {
        Error::unavailable(format!(
            "reading the engine needs a usable GPU ({})",
            crate::platform::cuda::unavailable_reason()
                .unwrap_or_else(|| "none meets --min-supported-compute-capability".into())
        ))
    })?;
    let engine = backend.engine(runtime.as_ref(), file, gpu, None)?;
    engine::auto_complete(cfg, engine.engine.desc());
    Ok(())
}

impl TensorRtBackend {
    /// The plan file, the runtime and the instance's GPU: what is missing is said first (the plan,
    /// TensorRT, a GPU for a KIND_CPU instance), before the core checks the GPU itself.
    fn prepare(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<(PathBuf, Arc<dyn Runtime>, i32)> {
        let file = crate::model_config::model_file(&ctx.version_dir, &ctx.config)?;
        if !file.is_file() {
            return Err(Error::invalid(format!("model file '{}' not found", file.display())));
        }
        let runtime = self.runtime()?;
        match spec.kind {
            InstanceKind::Gpu { device_id } => Ok((file, runtime, device_id)),
            // The engine decides: it is deserialized on the device the process uses first, GPU 0.
            InstanceKind::Model => {
                tracing::info!("Instance '{}' is KIND_MODEL: the TensorRT engine runs on GPU 0.", spec.name);
                Ok((file, runtime, 0))
            }
            InstanceKind::Cpu => {
                let why = crate::platform::cuda::unavailable_reason()
                    .map(|r| format!(" (no usable GPU: {r})"))
                    .unwrap_or_default();
                Err(Error::unavailable(format!(
                    "instance '{}' is KIND_CPU{why}, but TensorRT engines run on a GPU",
                    spec.name
                )))
            }
        }
    }
}

impl Backend for TensorRtBackend {
    fn name(&self) -> &'static str {
        "tensorrt"
    }

    fn check_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<()> {
        self.prepare(ctx, spec).map(drop)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let (file, runtime, device) = self.prepare(ctx, spec)?;
        let shared = self.engine(runtime.as_ref(), &file, device, spec.dla_core)?;
        let desc = shared.engine.desc().clone();
        let candidates = engine::instance_profiles(&desc, &ctx.name, &spec.profiles)?;
        engine::check(&ctx.config, &desc, &candidates)?;
        let mut context = shared.engine.clone().create_context(device)?;
        let claim = ProfileClaim::take(&shared, &ctx.name, &spec.name, &desc, &candidates);
        if let Some(&first) = claim.profiles.first() {
            context.select_profile(first).map_err(|e| claim.explain(first, e))?;
        }
        Ok(Box::new(TensorRtInstance { desc, context, claim }))
    }
}

/// An engine shared by the instances of a model version on one GPU, and which of them holds which
/// optimization profile.
struct SharedEngine {
    engine: Arc<dyn Engine>,
    /// Per profile: the instances holding it (claim id, instance name).
    holders: Mutex<Vec<Vec<(u64, String)>>>,
    /// Per profile: held by a run on it, so instances sharing a profile take turns.
    turns: Vec<Mutex<()>>,
}

impl SharedEngine {
    fn new(engine: Arc<dyn Engine>) -> SharedEngine {
        let n = engine.desc().profiles.len().max(1);
        SharedEngine {
            engine,
            holders: Mutex::new(vec![Vec::new(); n]),
            turns: (0..n).map(|_| Mutex::new(())).collect(),
        }
    }
}

/// The profiles one instance holds, given back when it is dropped.
struct ProfileClaim {
    shared: Arc<SharedEngine>,
    /// Unique among claims (a reload's new instances have the old ones' names).
    id: u64,
    /// The profiles this instance may use, in the order they are tried.
    profiles: Vec<usize>,
}

impl ProfileClaim {
    fn take(shared: &Arc<SharedEngine>, model: &str, instance: &str, desc: &EngineDesc, candidates: &[usize]) -> Self {
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut holders = shared.holders.lock();
        let held: Vec<usize> = holders.iter().map(Vec::len).collect();
        let profiles = engine::assign_profiles(desc, candidates, &held);
        for &p in &profiles {
            if let Some(h) = holders.get_mut(p) {
                if !h.is_empty() {
                    tracing::warn!(
                        "TensorRT model '{model}': instance '{instance}' shares optimization profile {p} with {}; \
                         TensorRT runs one execution context per profile at a time, so they take turns (and some \
                         TensorRT 8 releases refuse the second context). Build the engine with one profile per \
                         instance (the same profile added once per instance) to run them side by side.",
                        h.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>().join(", ")
                    );
                }
                h.push((id, instance.to_string()));
            }
        }
        tracing::debug!("TensorRT model '{model}': instance '{instance}' uses optimization profile(s) {profiles:?}.");
        ProfileClaim { shared: shared.clone(), id, profiles }
    }

    /// `e`, from a call on `profile`, saying which other instances share that profile (TensorRT may
    /// refuse a second context on it).
    fn explain(&self, profile: usize, e: Error) -> Error {
        let sharers: Vec<String> = {
            let holders = self.shared.holders.lock();
            holders
                .get(profile)
                .map(|h| h.iter().filter(|(id, _)| *id != self.id).map(|(_, n)| n.clone()).collect())
                .unwrap_or_default()
        };
        if sharers.is_empty() {
            return e;
        }
        let message = format!(
            "{} (optimization profile {profile} is shared with instance(s) {}; build the engine with one profile per \
             instance)",
            e.message,
            sharers.join(", ")
        );
        Error { message, ..e }
    }
}

impl Drop for ProfileClaim {
    fn drop(&mut self) {
        let mut holders = self.shared.holders.lock();
        for &p in &self.profiles {
            if let Some(h) = holders.get_mut(p) {
                if let Some(i) = h.iter().position(|(id, _)| *id == self.id) {
                    h.remove(i);
                }
            }
        }
    }
}

struct TensorRtInstance {
    desc: EngineDesc,
    // Dropped before the claim: the context's profile is free once it is gone.
    context: Box<dyn Context>,
    claim: ProfileClaim,
}

impl ModelInstance for TensorRtInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        let t0 = Instant::now();
        let mut inputs = Vec::with_capacity(req.inputs.len());
        for t in &req.inputs {
            let io = self
                .desc
                .index(&t.name)
                .filter(|&i| self.desc.io[i].input)
                .ok_or_else(|| Error::invalid(format!("the engine has no input '{}'", t.name)))?;
            inputs.push(RunInput { io, shape: &t.shape, data: &t.data });
        }
        let shapes: Vec<(usize, &[i64])> = inputs.iter().map(|i| (i.io, i.shape)).collect();
        let profile = engine::select_profile(&self.desc, &self.claim.profiles, &shapes)?;
        let mut wanted = Vec::with_capacity(req.outputs.len());
        for name in &req.outputs {
            let io = self
                .desc
                .index(name)
                .filter(|&i| !self.desc.io[i].input)
                .ok_or_else(|| Error::invalid(format!("the engine has no output '{name}'")))?;
            wanted.push(io);
        }
        let t1 = Instant::now();
        let outs = {
            // Instances sharing this profile take turns (uncontended, this costs a few nanoseconds).
            let _turn = self.claim.shared.turns.get(profile).map(|t| t.lock());
            self.context.run(profile, &inputs, &wanted)
        };
        let outs = outs.map_err(|e| self.claim.explain(profile, e))?;
        let t2 = Instant::now();
        let mut outputs = Vec::with_capacity(outs.len());
        for (out, &io) in outs.into_iter().zip(&wanted) {
            let t = &self.desc.io[io];
            let datatype =
                t.datatype().ok_or_else(|| Error::internal(format!("output '{}' has no Triton type", t.name)))?;
            outputs.push(Tensor::new(t.name.clone(), datatype, out.shape, out.data));
        }
        let t3 = Instant::now();
        Ok(ExecResult {
            outputs,
            // The copies to and from device memory happen inside the run, so they count as inference.
            timings: ExecTimings::between(t0, t1, t2, t3),
            parameters: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests;
